"""The math grader's isolation (envs/math_grader.py): grading from a process whose other
threads hold locks, never by forking it; a grading that hangs is killed and the next one
gets a fresh grader; a missing math-verify is refused with the way to install it."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time

import psutil
import pytest

from conftest import ROOT
from parallel_rollout.envs.math import grade
from parallel_rollout.envs.math_grader import close_graders, grader_pids

pytest.importorskip("math_verify")

_forks: list[int] = []
_counting = threading.Event()
# Counts os.fork() of this process while a test watches (subprocess's vfork+exec runs no
# Python at-fork hook: only a fork that copies this process's threads' state is counted).
os.register_at_fork(before=lambda: _counting.is_set() and _forks.append(os.getpid()))


@pytest.fixture(autouse=True)
def stop_graders():
    """Stop this process's graders before the leak check."""
    yield
    close_graders()


def busy_threads(stop: threading.Event, count: int = 4) -> list[threading.Thread]:
    """Threads that hold locks most of the time: their own, logging's, an import's."""
    log = logging.getLogger("parallel_rollout.test_busy")
    lock = threading.Lock()

    def spin() -> None:
        while not stop.is_set():
            with lock:
                log.debug("busy")  # takes the logging module's and handler locks
                __import__("json.decoder")
                time.sleep(0.001)

    threads = [threading.Thread(target=spin, daemon=True) for _ in range(count)]
    for thread in threads:
        thread.start()
    return threads


@pytest.mark.slow
def test_grading_beside_busy_threads_holding_locks_never_forks_this_process():
    stop = threading.Event()
    threads = busy_threads(stop)
    results: list[dict] = []
    _forks.clear()
    _counting.set()
    try:
        graders = [threading.Thread(target=lambda i=i: results.append(grade(f"\\frac{{{i}}}{{2}}", f"{i / 2}")))
                   for i in range(1, 7)]
        for thread in graders:
            thread.start()
        for thread in graders:
            thread.join(timeout=120)
    finally:
        _counting.clear()
        stop.set()
        for thread in threads:
            thread.join()
    assert len(results) == 6 and all(r["correct"] for r in results), results
    assert _forks == [], "a grading forked the threaded process"
    # the graders are separate processes, started fresh (not copies of this one), and reused
    for pid in grader_pids():
        assert "parallel_rollout.envs.math_grader" in " ".join(psutil.Process(pid).cmdline())


def test_a_hanging_grading_times_out_its_grader_is_killed_and_the_next_works():
    assert grade("5", "5")["correct"]
    (first,) = grader_pids()
    started = time.monotonic()
    result = grade("5", "9^{9^{9}}", timeout_s=1.0)
    assert result["reason"] == "timeout" and result["correct"] is False, result
    assert time.monotonic() - started < 10
    assert not psutil.pid_exists(first) or psutil.Process(first).status() == psutil.STATUS_ZOMBIE
    assert grade("\\frac{1}{2}", "0.5")["correct"]
    assert grader_pids() and grader_pids()[0] != first


def test_a_math_run_without_math_verify_says_how_to_install_it(tmp_path):
    # a site that hides math_verify, as an install without the [math] extra
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import sys\nsys.modules['math_verify'] = None\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(ROOT / "src")]))
    proc = subprocess.run(
        [sys.executable, "-m", "parallel_rollout", "run", "--mode", "math", "--data",
         str(ROOT / "benchmarks" / "math_tasks.jsonl"), "--output-dir", str(tmp_path / "out")],
        capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "pip install 'parallel-rollout[math]'" in proc.stderr
