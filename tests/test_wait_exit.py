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


@pytest.mark.parametrize("pidfds", [True, False])
def test_collect_stops_reading_soon_after_the_writer_exits(monkeypatch, pidfds):
    """``collect(..., proc)``: a process the command left holds its pipe open, so its end
    never comes; the command's exit (its pidfd, or polled where there are none) ends the
    reading ``HELD_GRACE_S`` later, with what was written before it."""
    if not pidfds:
        monkeypatch.delattr(os, "pidfd_open", raising=False)
    proc = subprocess.Popen(["sh", "-c", "sleep 30 & echo started"], stdout=subprocess.PIPE,
                            start_new_session=True)
    try:
        tail = agent_output.Tail(1000)
        started = time.monotonic()
        assert not agent_output.collect({proc.stdout: tail}, started + 20, proc)
        assert time.monotonic() - started < 5 and bytes(tail.data) == b"started\n"
        assert proc.poll() == 0
    finally:
        os.killpg(proc.pid, 9)
        proc.stdout.close()


def test_a_drain_whose_thread_cannot_start_refuses_the_pipes(monkeypatch):
    import _thread

    def refuse(*args):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(_thread, "start_new_thread", refuse)
    read_fd, write_fd = os.pipe()
    with os.fdopen(read_fd, "rb", buffering=0) as stream:
        assert agent_output.Drain().add([stream]) is False
    os.close(write_fd)
