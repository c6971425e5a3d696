"""Helpers shared by the chaos tests: seeded randomness, task sets, event checks, and a
machine-wide search for processes a run left behind.

The conftest leak check looks at descendants of the test process. ``stray_processes`` looks
at every process on the machine instead, so that nothing escapes by being re-parented
elsewhere: a sandbox's bwrap carries this session's sandbox folder in its command line, and a
process started with ``CHAOS_MARK`` in its environment carries the mark (workers and the
Manager inherit it from the CLI process of the test).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from conftest import _SANDBOX_ROOT, ROOT, read_results, shell_task, write_tasks

#: environment variable whose value marks every process of one CLI run of a test
CHAOS_MARK = "PR_CHAOS_MARK"
#: failure statuses the runner retries; a non-final record has one of these
INFRASTRUCTURE = {"worker_died", "guest_unreachable", "vm_error", "lease_timeout"}


def seeded_rng(name: str) -> tuple[random.Random, int]:
    """A Random seeded from $PR_CHAOS_SEED (to replay a failure) or the clock; prints the seed."""
    seed = int(os.environ.get("PR_CHAOS_SEED") or time.time_ns() % 2**32)
    print(f"[{name}] seed {seed} (replay with PR_CHAOS_SEED={seed})")
    return random.Random(seed), seed


def isolated_task(task_id: str, *, sleep: float = 0.0, passes: bool = True) -> dict:
    """A shell task whose check also fails when the home holds anything but its own file, so
    a VM handed on without a reset (after a kill) turns a success into a failure."""
    reference = [f"sleep {sleep}"] if sleep else []
    reference.append(f"touch ~/{task_id}.done")
    check = f'test -e ~/{task_id}.done && test "$(ls -A ~)" = "{task_id}.done"'
    if not passes:
        check = f"test -e ~/{task_id}.never"  # graded failure, the same in every run
    return shell_task(task_id, check=check, reference=reference)


def mixed_tasks(count: int, rng: random.Random, fail_every: int = 10,
                sleeps: tuple[float, ...] = (0, 0, 0, 0.05, 0.1, 0.2)) -> list[dict]:
    """``count`` short tasks, each sleeping one of ``sleeps`` seconds (drawn at random), every
    ``fail_every``-th one failing its check on purpose."""
    tasks = []
    for i in range(count):
        passes = i % fail_every != fail_every - 1
        sleep = rng.choice(sleeps)
        tasks.append(isolated_task(f"{'p' if passes else 'f'}{i:04d}", sleep=sleep, passes=passes))
    return tasks


def read_events(run_dir: Path) -> list[dict]:
    """Every line of a run's events.jsonl."""
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines() if line.strip()]


def assert_events_explain_retries(run_dir: Path) -> list[dict]:
    """Every non-final record is an infrastructure failure with its own ``retry`` event, and
    every ``worker_died`` record has a ``worker_died`` event naming the dead pid."""
    records = read_results(run_dir)
    events = read_events(run_dir)
    retries = {(e["task"], e["reason"].split(" failed with ")[0]) for e in events if e["event"] == "retry"}
    deaths = " ".join(e["reason"] for e in events if e["event"] == "worker_died")
    for record in records:
        if not record["final"]:  # retried, or never graded (its retries used up)
            assert record["status"] in INFRASTRUCTURE, record
        if not record["final"] and not record.get("never_graded"):
            assert (record["key"], f"attempt {record['attempt']}") in retries, \
                f"no retry event for attempt {record['attempt']} of {record['key']}"
        if record["status"] == "worker_died":
            assert f"pid {record['pid']}:" in deaths, f"no worker_died event for pid {record['pid']}"
    return events


def start_marked_cli(tmp_path: Path, mark: str, *args: str) -> subprocess.Popen:
    """``run_parallel_rollout.py *args`` as a subprocess whose processes carry ``mark``.

    Its output goes to files, not pipes: a pipe would make the test wait for every child that
    inherited it, hiding how long they outlive a kill."""
    argv = [sys.executable, str(ROOT / "run_parallel_rollout.py"), *args]
    env = {**os.environ, CHAOS_MARK: mark}
    with open(tmp_path / f"{mark}.out", "w") as out, open(tmp_path / f"{mark}.err", "w") as err:
        return subprocess.Popen(argv, stdout=out, stderr=err, env=env)


def stderr_of(tmp_path: Path, mark: str) -> str:
    """What the CLI started with ``mark`` wrote to stderr."""
    return (tmp_path / f"{mark}.err").read_text()


def stray_processes(mark: str | None = None) -> list[str]:
    """Live processes anywhere on the machine that belong to this session's sandboxes or carry
    ``CHAOS_MARK=mark``: what a killed run left behind."""
    root = str(_SANDBOX_ROOT)
    me = os.getpid()
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            if proc.pid == me or proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            cmdline = " ".join(proc.info["cmdline"] or [])
            hit = root in cmdline
            if not hit and mark is not None:
                hit = proc.environ().get(CHAOS_MARK) == mark
            if hit:
                found.append(f"{proc.pid} {cmdline[:150]}")
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def wait_until_gone(mark: str | None = None, timeout: float = 15.0) -> list[str]:
    """Wait for ``stray_processes(mark)`` to empty; return what is still there at the end."""
    deadline = time.monotonic() + timeout
    while True:
        left = stray_processes(mark)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def adopted_sandbox_zombies() -> list[psutil.Process]:
    """Zombie sandbox inits that this test process adopted.

    Only a test process that is a child subreaper has any: the pid-namespace init of a
    sandbox whose bwrap was killed (every reset kills one) is then re-parented here instead of
    to pid 1, and nothing here waits for it. conftest no longer makes the test process a
    subreaper (it finds orphans by an environment marker instead), so this is a safety net."""
    found = []
    for proc in psutil.Process().children():
        try:
            if proc.status() == psutil.STATUS_ZOMBIE and proc.name() == "bwrap":
                found.append(proc)
        except psutil.Error:
            pass
    return found


def assert_no_zombies_of_the_run() -> None:
    """No zombie below this process except the sandbox inits it adopted as a subreaper."""
    adopted = {p.pid for p in adopted_sandbox_zombies()}
    zombies = []
    for proc in psutil.Process().children(recursive=True):
        try:
            if proc.pid not in adopted and proc.status() == psutil.STATUS_ZOMBIE:
                zombies.append(f"{proc.pid} {proc.name()} (parent {proc.ppid()})")
        except psutil.Error:
            pass
    assert zombies == [], f"zombie processes: {zombies}"


@pytest.fixture(autouse=True)
def reap_adopted_sandboxes():
    """Reap the zombie sandbox inits a test made this process adopt (see above), so a soak of
    thousands of resets leaves no zombies behind for the rest of the session. Never touches
    a child this process started itself: those are python processes, or bwraps still tracked
    by the process provider."""
    yield
    from parallel_rollout.pool.providers.process import children

    for proc in adopted_sandbox_zombies():
        if proc.pid not in children:
            try:
                os.waitpid(proc.pid, os.WNOHANG)
            except ChildProcessError:
                pass


__all__ = [
    "CHAOS_MARK", "INFRASTRUCTURE", "adopted_sandbox_zombies", "assert_events_explain_retries",
    "assert_no_zombies_of_the_run", "isolated_task", "mixed_tasks", "read_events", "reap_adopted_sandboxes",
    "seeded_rng", "start_marked_cli", "stderr_of", "stray_processes", "wait_until_gone", "write_tasks",
]
