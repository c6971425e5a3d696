"""The pool's call threads (``pool/call_threads.py``): kept between calls, never waited for."""

from __future__ import annotations

import threading
import time

from parallel_rollout.pool import call_threads
from parallel_rollout.pool.call_threads import Call, CallThreads


def _finished_log() -> tuple[list[Call], CallThreads]:
    finished: list[Call] = []
    return finished, CallThreads(finished.append)


def test_start_returns_before_the_call_runs_and_join_waits_for_its_end():
    finished, threads = _finished_log()
    go, ran = threading.Event(), threading.Event()

    def target() -> None:
        go.wait(10)
        ran.set()

    call = Call(target, ())
    threads.start(call)
    assert call.is_alive() and not ran.is_set()
    call.join(0.05)
    assert call.is_alive(), "join returned before the call ended"
    go.set()
    call.join(10)
    assert not call.is_alive() and ran.is_set()
    assert finished == [call], "the finished hook runs before join returns"


def test_calls_one_after_another_reuse_one_thread():
    _, threads = _finished_log()
    ran_in: list[threading.Thread] = []  # the objects, not idents: an ident can be reused
    for _ in range(30):
        call = Call(lambda: ran_in.append(threading.current_thread()), ())
        threads.start(call)
        call.join(10)
        assert not call.is_alive()
    assert len(ran_in) == 30
    distinct = len({id(thread) for thread in ran_in})
    assert distinct == 1, f"{distinct} threads for 30 calls in a row"


def test_calls_at_once_each_get_a_thread_of_their_own():
    # a waits for b: queued behind a on one thread, b would never run
    _, threads = _finished_log()
    b_ran = threading.Event()
    a = Call(lambda: b_ran.wait(10), ())
    b = Call(b_ran.set, ())
    threads.start(a)
    threads.start(b)
    a.join(10)
    b.join(10)
    assert not a.is_alive() and not b.is_alive() and b_ran.is_set()


def test_a_call_that_raises_is_done_and_the_next_call_still_runs(monkeypatch):
    monkeypatch.setattr(threading, "excepthook", lambda args: None)  # the thread's traceback
    finished, threads = _finished_log()

    def boom() -> None:
        raise RuntimeError("provider call failed")

    failed = Call(boom, ())
    threads.start(failed)
    failed.join(10)
    assert not failed.is_alive() and finished == [failed]
    later_ran = threading.Event()
    later = Call(later_ran.set, ())
    threads.start(later)
    later.join(10)
    assert later_ran.is_set()


def test_an_idle_thread_exits_and_a_later_call_starts_a_new_one(monkeypatch):
    monkeypatch.setattr(call_threads, "IDLE_EXIT_S", 0.05)
    _, threads = _finished_log()
    seen: list[threading.Thread] = []
    first = Call(lambda: seen.append(threading.current_thread()), ())
    threads.start(first)
    first.join(10)
    seen[0].join(10)
    assert not seen[0].is_alive(), "an idle thread outlived IDLE_EXIT_S"
    second = Call(lambda: seen.append(threading.current_thread()), ())
    threads.start(second)
    second.join(10)
    assert not second.is_alive() and len(seen) == 2


def test_a_call_queued_as_its_thread_gives_up_waiting_still_runs(monkeypatch):
    # many calls at the edge of the idle timeout: none is left in the queue unrun
    monkeypatch.setattr(call_threads, "IDLE_EXIT_S", 0.001)
    _, threads = _finished_log()
    calls = []
    for i in range(300):
        call = Call(time.sleep, (0.0005 if i % 3 else 0,))
        threads.start(call)
        calls.append(call)
        time.sleep(0.001 * (i % 3))
    deadline = time.monotonic() + 20
    for call in calls:
        call.join(max(0.0, deadline - time.monotonic()))
    assert sum(call.is_alive() for call in calls) == 0
