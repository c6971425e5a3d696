"""The main process SIGKILLed at ten random points of one run, each resume killed in turn,
then a last resume that completes it.

The CLI runs as a real subprocess (``run_parallel_rollout.py``) with a mark in its
environment that its workers and its Manager inherit. The kill points are seeded random times
after the start, so they land anywhere: during start-up, the pool's boots, the workers'
spawn, mid-run. After every kill:

* every process of the killed run exits by itself (workers see their pipe close, the Manager
  sees its parent gone and stops its VMs) — searched machine-wide, not only below the test;
* ``parallel-rollout vms sweep --run-id`` then leaves nothing (what it removed is printed);
* results.jsonl never holds an attempt twice or two final records for one sample.

The last resume finishes with exit 0, exactly one final record per sample, the successes of
an undisturbed run, and a sweep after it finds nothing.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

import pytest
from click.testing import CliRunner

from chaos_support import (mixed_tasks, reap_adopted_sandboxes, seeded_rng, start_marked_cli, stderr_of,
                           stray_processes, wait_until_gone, write_tasks)
from conftest import assert_exactly_once, finals_by_key, read_results, vm_folders_of
from parallel_rollout.cli import main

KILLS = 10
TASKS = 100
#: seconds each task sleeps, drawn at random: at most ~7 tasks a second on 2 VMs however
#: fast the machine, and a run needs ~0.6-1.3 s to start, so ten runs killed within 2.2 s
#: each finish ~0-50 samples and leave work for the last resume
SLEEPS = (0.1, 0.2, 0.3, 0.4)
#: seconds after the start of each run at which it is killed, drawn uniformly
KILL_AFTER_S = (0.2, 2.2)
RUN_ID = "killed"


def start_cli(tmp_path, data, mark, *extra):
    return start_marked_cli(tmp_path, mark, "--mode", "shell", "--data", str(data), "--num-rollouts", "4",
                            "--num-vms", "2", "--use-vm-pool", "--output-dir", str(tmp_path / "out"),
                            "--run-id", RUN_ID, "--no-progress", *extra)


def sweep_run() -> str:
    result = CliRunner().invoke(main, ["vms", "sweep", "--run-id", RUN_ID])
    assert result.exit_code == 0, (result.output, result.exception)
    return result.output.strip()


def assert_no_doubles(run_dir) -> int:
    path = run_dir / "results.jsonl"
    if not path.exists():
        return 0
    records = [r for r in read_results_tolerant(path)]
    attempts = [(r["key"], r["attempt"]) for r in records]
    assert len(attempts) == len(set(attempts)), "an attempt was recorded twice"
    doubled = {k: len(v) for k, v in finals_by_key(records).items() if len(v) > 1}
    assert not doubled, f"two final records: {doubled}"
    return sum(1 for r in records if r["final"])


def read_results_tolerant(path):
    """Complete lines only: the killed run may have left a torn last line (resume moves it)."""
    import json

    data = path.read_bytes()
    return [json.loads(line) for line in data[: data.rfind(b"\n") + 1].splitlines() if line.strip()]


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_main_process_killed_ten_times_then_resumed(tmp_path):
    rng, seed = seeded_rng("main-killed")
    tasks = mixed_tasks(TASKS, rng, sleeps=SLEEPS)
    data = write_tasks(tmp_path / "tasks.jsonl", tasks)
    run_dir = tmp_path / "out" / RUN_ID
    log = []
    for cycle in range(KILLS):
        mark = uuid.uuid4().hex
        proc = start_cli(tmp_path, data, mark, *(["--resume"] if cycle else []))
        delay = rng.uniform(*KILL_AFTER_S)
        time.sleep(delay)
        if proc.poll() is not None:
            pytest.fail(f"cycle {cycle}: the run ended before its kill ({proc.returncode}); give it more "
                        f"work: {stderr_of(tmp_path, mark)[-2000:]}")
        os.kill(proc.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        proc.wait()
        left = wait_until_gone(mark, timeout=15)
        assert not left, f"cycle {cycle}: processes of the killed run still alive: {left}"
        gone_after = time.monotonic() - killed_at
        # The Manager stops its VMs when its parent dies ("a leaked VM after any kill: zero");
        # sweep would clean what it missed, but it should find nothing.
        leftover = vm_folders_of(RUN_ID)
        swept = sweep_run()
        assert not leftover and swept == "removed 0 process VM(s)", f"cycle {cycle}: the killed run left {leftover}"
        assert not vm_folders_of(RUN_ID), f"cycle {cycle}: sweep left {vm_folders_of(RUN_ID)}"
        assert stray_processes() == []
        finals = assert_no_doubles(run_dir)
        log.append(f"cycle {cycle}: killed after {delay:.2f}s, its processes gone {gone_after:.1f}s later, "
                   f"{finals} final records, VM folders left {leftover}, sweep: {swept}")
    print(f"[main-killed] seed {seed}\n  " + "\n  ".join(log))

    mark = uuid.uuid4().hex
    final = start_cli(tmp_path, data, mark, "--resume")
    final.wait(timeout=180)
    assert final.returncode == 0, stderr_of(tmp_path, mark)[-3000:]
    assert not wait_until_gone(mark, timeout=10)
    finals = assert_exactly_once(run_dir, {f"{t['id']}#0" for t in tasks})
    assert {k for k, r in finals.items() if r["success"]} == {f"{t['id']}#0" for t in tasks if t["id"][0] == "p"}
    assert "removed 0 process VM(s)" in sweep_run()
    sweep_all = subprocess.run([sys.executable, "-m", "parallel_rollout.cli", "vms", "sweep"],
                               capture_output=True, text=True, timeout=60)
    assert sweep_all.returncode == 0 and "removed 0" in sweep_all.stdout, sweep_all
    records = read_results(run_dir)
    print(f"[main-killed] final: {len(records)} attempts for {TASKS} samples")
