"""Random SIGKILLs during a 300-task shell run (N=8 workers, M=3 pooled VMs).

A killer thread SIGKILLs, at seeded random moments, one of: a worker process, a sandbox's
bwrap (the outer one, or the pid namespace's init), or a guest agent — found with psutil
below the runner and its Manager process. The run is the Runner in this very process (the
killer never picks it). Afterwards:

* every sample has exactly one final record and no attempt is written twice;
* the successes are those of an undisturbed run: the tasks are built so that every ``p…``
  task succeeds and every ``f…`` task fails its check, deterministically — and each passing
  check also fails if the VM still holds another task's file, so a VM handed on without a
  reset after a kill would show up as a lost success;
* events.jsonl explains every retry (a ``retry`` event per non-final record) and every
  worker death (a ``worker_died`` event per killed worker pid, and none for any other pid);
* nothing is left: no sandbox folder, no sandbox process anywhere on the machine, no child.
"""

from __future__ import annotations

import threading
import time

import psutil
import pytest

from chaos_support import (assert_events_explain_retries, assert_no_zombies_of_the_run, mixed_tasks,
                           reap_adopted_sandboxes, seeded_rng, stray_processes, write_tasks)
from conftest import assert_exactly_once, leftover_sandboxes
from parallel_rollout.config import build_config
from parallel_rollout.pool.providers.process import ProcessProvider
from parallel_rollout.runner import Runner

TASKS = 300
#: seconds between kills, drawn uniformly
KILL_GAP_S = (0.15, 0.6)
#: kills stop once this share of samples is final, so the run can finish
STOP_AT = 0.92


class Killer(threading.Thread):
    """SIGKILLs a random worker, sandbox or guest agent of ``runner`` every so often."""

    KINDS = ("worker", "bwrap", "agent")

    def __init__(self, runner: Runner, rng, total: int) -> None:
        super().__init__(name="chaos-killer", daemon=True)
        self.runner, self.rng, self.total = runner, rng, total
        self.stop = threading.Event()
        self.kills: list[tuple[float, str, int]] = []
        self.me = psutil.Process()

    def targets(self, kind: str) -> list[psutil.Process]:
        engine = self.runner.engine
        manager_pid = engine.manager_pid if engine is not None else None
        if manager_pid is None:
            return []
        try:
            if kind == "worker":
                procs = [p for p in self.me.children() if p.pid != manager_pid]
            else:
                procs = psutil.Process(manager_pid).children(recursive=True)
        except psutil.Error:
            return []
        wanted = {"worker": "spawn_main", "bwrap": "bwrap", "agent": "server.py"}[kind]
        found = []
        for proc in procs:
            try:
                if proc.status() != psutil.STATUS_ZOMBIE and wanted in " ".join(proc.cmdline()):
                    found.append(proc)
            except psutil.Error:
                pass
        return found

    def run(self) -> None:
        started = time.monotonic()
        while not self.stop.wait(self.rng.uniform(*KILL_GAP_S)):
            if len(self.runner._finished_keys) >= STOP_AT * self.total:
                return
            kind = self.rng.choice(self.KINDS)
            candidates = sorted(self.targets(kind), key=lambda p: p.pid)
            if not candidates:
                continue
            victim = self.rng.choice(candidates)
            if victim.pid == self.me.pid:  # never; a guard all the same
                continue
            try:
                victim.kill()
            except psutil.Error:
                continue
            self.kills.append((round(time.monotonic() - started, 2), kind, victim.pid))


@pytest.mark.timeout(240)
def test_random_kills_lose_nothing_and_double_nothing(tmp_path):
    rng, seed = seeded_rng("random-kills")
    tasks = mixed_tasks(TASKS, rng)
    data = write_tasks(tmp_path / "tasks.jsonl", tasks)
    config = build_config(dict(
        mode="shell", data=str(data), num_rollouts=8, num_vms=3, use_vm_pool=True,
        output_dir=str(tmp_path / "out"), run_id="kills", progress=False,
        # Every kill of a sandbox costs a VM and every kill may cost an attempt: budgets large
        # enough that the kills, not the budgets, are what this test exercises.
        max_retries=12, max_vm_replacements=1000, task_timeout=60.0,
    ))
    runner = Runner(config)
    killer = Killer(runner, rng, TASKS)
    killer.start()
    started = time.monotonic()
    try:
        outcome = runner.run()
    finally:
        killer.stop.set()
        killer.join()
    elapsed = time.monotonic() - started
    by_kind = {kind: sum(1 for _, k, _ in killer.kills if k == kind) for kind in Killer.KINDS}
    print(f"[random-kills] seed {seed}: {len(killer.kills)} kills {by_kind} in {elapsed:.1f}s; "
          f"attempts {outcome.summary['attempts']}, retried {outcome.summary['retried_attempts']}")
    assert outcome.exit_code == 0, outcome.message
    assert len(killer.kills) >= 10 and all(by_kind.values()), f"too few kills to mean anything: {by_kind}"

    finals = assert_exactly_once(outcome.run_dir, {f"{t['id']}#0" for t in tasks})
    succeeded = {key for key, record in finals.items() if record["success"]}
    expected = {f"{t['id']}#0" for t in tasks if t["id"].startswith("p")}
    # A sandbox killed while it ran a task's action is graded as that task's failure
    # (sandbox_violation: a hostile answer that kills its guest agent looks the same); every
    # other kill is infrastructure and must cost nothing.
    violated = {key for key, record in finals.items() if record["status"] == "sandbox_violation"}
    sandbox_kills = sum(1 for _, kind, _ in killer.kills if kind != "worker")
    assert len(violated) <= sandbox_kills, (violated, sandbox_kills)
    lost = {key: (finals[key]["status"], finals[key]["failure"]) for key in sorted(expected - violated - succeeded)}
    assert succeeded == expected - violated, (f"lost successes: {dict(list(lost.items())[:10])}, "
                                              f"unexpected: {sorted(succeeded - expected)[:10]}")
    # And literally: an undisturbed run of the same tasks has the expected successes.
    calm = Runner(build_config(dict(
        mode="shell", data=str(data), num_rollouts=8, num_vms=3, use_vm_pool=True,
        output_dir=str(tmp_path / "out"), run_id="calm", progress=False))).run()
    calm_finals = assert_exactly_once(calm.run_dir, {f"{t['id']}#0" for t in tasks})
    assert {k for k, r in calm_finals.items() if r["success"]} == expected
    wrong = {k: r["status"] for k, r in finals.items()
             if k not in expected and r["status"] not in ("failure", "sandbox_violation")}
    assert not wrong, f"failing tasks must end as graded failures, not {wrong}"

    events = assert_events_explain_retries(outcome.run_dir)
    killed_workers = {pid for _, kind, pid in killer.kills if kind == "worker"}
    died = {int(e["reason"].split(":")[0].split()[1]) for e in events if e["event"] == "worker_died"}
    assert died == killed_workers, f"deaths without a kill: {died - killed_workers}; kills without an event: " \
                                   f"{killed_workers - died}"

    assert ProcessProvider.sweep() == [] and leftover_sandboxes() == []
    assert stray_processes() == []
    assert_no_zombies_of_the_run()

