"""``agent_output.wait_exit``: a child's exit wakes the wait (no polling sleeps), a deadline
still holds, and it works where there are no pidfds. The guest agent waits with it after a
command's output ends; the process provider with it for a killed sandbox's bwrap."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from parallel_rollout.guest import agent_output


def _no_sleeping(monkeypatch: pytest.MonkeyPatch) -> None:
    def sleep(seconds: float) -> None:
        raise AssertionError(f"polled: slept {seconds}s waiting for the child")

    monkeypatch.setattr(time, "sleep", sleep)


def _child(seconds: float, code: int = 0) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", f"import time, sys; time.sleep({seconds}); sys.exit({code})"])


def test_the_childs_exit_wakes_the_wait_without_polling(monkeypatch: pytest.MonkeyPatch) -> None:
    proc = _child(0.3, code=3)
    _no_sleeping(monkeypatch)  # Popen.wait(timeout=...) sleeps 1, 2, 4 ... 50 ms between looks
    assert agent_output.wait_exit(proc, 10.0) == 3
    assert proc.returncode == 3


def test_a_child_that_exited_already_is_reaped_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    proc = _child(0.0, code=5)
    os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped yet
    _no_sleeping(monkeypatch)
    assert agent_output.wait_exit(proc, 0.0) == 5


def test_a_child_still_running_at_the_deadline_times_out_and_runs_on() -> None:
    proc = _child(30)
    try:
        started = time.monotonic()
        with pytest.raises(subprocess.TimeoutExpired):
            agent_output.wait_exit(proc, 0.2)
        assert time.monotonic() - started >= 0.2
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


def test_without_pidfds_it_waits_as_popen_does(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_pidfds(pid: int, flags: int = 0) -> int:
        raise OSError(38, "Function not implemented")

    monkeypatch.setattr(os, "pidfd_open", no_pidfds)
    assert agent_output.wait_exit(_child(0.1, code=4), 10.0) == 4
    proc = _child(30)
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            agent_output.wait_exit(proc, 0.1)
    finally:
        proc.kill()
        proc.wait()
