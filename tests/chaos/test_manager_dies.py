"""The Manager process (the VM pool) SIGKILLed mid-run, at a seeded random point.

tests/test_runner.py already checks the exit code, that the message mentions --resume, that no
sandbox folder is left and that a resume finishes exactly once. This adds what the issue asks
beyond that:

* the runner notices within seconds (the time of its log line, and of its exit);
* it stops the workers too — searched machine-wide, since a worker outliving its runner
  would be re-parented away from the test process — and every VM;
* it keeps every finished result: the records written before the kill are still there,
  byte for byte, at the start of results.jsonl;
* the resume command it prints works as printed, and finishes the run exactly once.
"""

from __future__ import annotations

import datetime
import shlex
import subprocess
import sys
import time
import uuid

import psutil
import pytest

from chaos_support import (mixed_tasks, reap_adopted_sandboxes, seeded_rng, start_marked_cli, stderr_of,
                           stray_processes, wait_until_gone, write_tasks)
from conftest import _SANDBOX_ROOT, ROOT, assert_exactly_once
from parallel_rollout.pool.providers.common import run_folders

#: seconds from the kill to the runner's "manager process died" line, and to its exit
NOTICE_WITHIN_S = 3.0
EXIT_WITHIN_S = 10.0


def whole_lines(path) -> bytes:
    data = path.read_bytes() if path.exists() else b""
    return data[: data.rfind(b"\n") + 1]


@pytest.mark.timeout(180)
def _runs_bwrap(proc: psutil.Process) -> bool:
    """Whether a bwrap runs below ``proc`` (the pool's Manager); processes that end while
    they are looked at (a sandbox reset, a worker's command) are passed over."""
    try:
        children = proc.children(recursive=True)
    except psutil.Error:
        return False
    for child in children:
        try:
            if child.name() == "bwrap":
                return True
        except psutil.Error:
            continue
    return False


def test_manager_death_is_noticed_fast_stops_everything_and_the_printed_resume_works(tmp_path):
    rng, seed = seeded_rng("manager-dies")
    tasks = mixed_tasks(40, rng, sleeps=(0.1, 0.2, 0.3))
    data = write_tasks(tmp_path / "tasks.jsonl", tasks)
    run_dir = tmp_path / "out" / "mgr"
    mark = uuid.uuid4().hex
    proc = start_marked_cli(tmp_path, mark, "--mode", "shell", "--data", str(data), "--num-rollouts", "4",
                            "--num-vms", "2", "--use-vm-pool", "--output-dir", str(tmp_path / "out"),
                            "--run-id", "mgr", "--no-progress")
    kill_after = rng.randint(2, 12)
    deadline = time.monotonic() + 60
    while whole_lines(run_dir / "results.jsonl").count(b"\n") < kill_after:
        assert proc.poll() is None, stderr_of(tmp_path, mark)
        assert time.monotonic() < deadline, "the run made no progress"
        time.sleep(0.02)
    manager = next(p for p in psutil.Process(proc.pid).children() if _runs_bwrap(p))
    manager.kill()
    killed_at = time.time()
    before = whole_lines(run_dir / "results.jsonl")  # what was final before the kill settled
    proc.wait(timeout=60)
    exited_after = time.time() - killed_at

    err = stderr_of(tmp_path, mark)
    assert proc.returncode == 1, err[-3000:]
    died_line = next(line for line in (run_dir / "run.log").read_text().splitlines()
                     if "manager process died" in line)
    logged_at = datetime.datetime.strptime(died_line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
    noticed_after = logged_at - killed_at
    print(f"[manager-dies] seed {seed}: killed after {kill_after} results; noticed in {noticed_after:.2f}s, "
          f"exited in {exited_after:.2f}s")
    assert noticed_after < NOTICE_WITHIN_S and exited_after < EXIT_WITHIN_S
    assert not wait_until_gone(mark, timeout=10), "a worker or sandbox outlived the run"
    assert not run_folders(_SANDBOX_ROOT, "mgr") and stray_processes() == []
    assert whole_lines(run_dir / "results.jsonl").startswith(before), "a finished result was lost"

    resume_line = next(line for line in err.splitlines() if line.startswith("resume with: "))
    resume_argv = shlex.split(resume_line[len("resume with: "):])
    assert resume_argv[-3:] == ["--run-id", "mgr", "--resume"], resume_line
    # as printed (the interpreter and the script the run was started with), from another folder
    assert resume_argv[:2] == [sys.executable, str(ROOT / "run_parallel_rollout.py")], resume_line
    resumed = subprocess.run(resume_argv, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    finals = assert_exactly_once(run_dir, {f"{t['id']}#0" for t in tasks})
    assert {k for k, r in finals.items() if r["success"]} == {f"{t['id']}#0" for t in tasks if t["id"][0] == "p"}
    assert whole_lines(run_dir / "results.jsonl").startswith(before)
