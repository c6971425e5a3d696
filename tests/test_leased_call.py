"""``VMPoolManager.lease_call``: a lease for one guest call, which the pool runs itself.

Real process sandboxes; the pool in its Manager process where the answer and the errors
must cross to the caller, in the test process where a test kills a sandbox from outside.
The py mode's judge goes this way (tests/test_py.py runs it through the CLI).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time

import pytest

from parallel_rollout.errors import LeaseTimeout, VMError, VMKilled
from parallel_rollout.guest.client import GuestRequestError
from parallel_rollout.pool.leasing import LeasedCall, _portable, leased_call
from parallel_rollout.pool.manager import VMPoolManager, VMState
from parallel_rollout.pool.server import start_pool
from pool_support import read_events, wait_idle, wait_until


@pytest.fixture
def managed_pool(tmp_path):
    manager, pool = start_pool(multiprocessing.get_context("spawn"), "process", "call-test", 1,
                               events_path=str(tmp_path / "events.jsonl"))
    try:
        wait_idle(pool, 1)
        yield pool
    finally:
        pool.shutdown()
        manager.shutdown()


def test_a_leased_call_answers_and_its_vm_is_already_resetting(managed_pool, tmp_path):
    started = time.time()
    done = managed_pool.lease_call("w0", "a#0", 30, "h1", "execute", ("echo hi; sleep 0.2",), {"shell": True})
    assert isinstance(done, LeasedCall) and done.answer["output"] == "hi\n"
    assert done.vm_id == "vm-0" and done.waited_s >= 0 and done.ran_s >= 0.2
    assert started <= done.started_at <= time.time() - done.ran_s
    # released in the pool before the answer left it: nothing is leased any more
    stats = managed_pool.stats()
    assert stats["leases"] == 1 and stats["states"]["leased"] == 0
    wait_idle(managed_pool, 1)
    moves = [(e["from"], e["to"], e["task"]) for e in read_events(tmp_path / "events.jsonl")
             if e["vm"] == "vm-0"]
    assert moves[2:4] == [("idle", "leased", "a#0"), ("leased", "resetting", "a#0")], moves


def test_a_leased_calls_errors_reach_the_caller_as_they_are(managed_pool):
    with pytest.raises(ValueError, match="no call 'reset_everything'"):
        managed_pool.lease_call("w0", "a#0", 30, "h1", "reset_everything", (), {})
    with pytest.raises(ValueError, match="no call '_check'"):
        managed_pool.lease_call("w0", "a#0", 30, "h1", "_check", (), {})
    # the guest's 4xx: its own type and status (it pickles whole), the VM reset, not dead
    with pytest.raises(GuestRequestError) as rejected:
        managed_pool.lease_call("w0", "b#0", 30, "h1", "request", ("POST", "/no-such-route"), {"json": {}})
    assert rejected.value.status == 404
    wait_idle(managed_pool, 1)
    assert managed_pool.stats()["marked_dead"] == 0
    held = managed_pool.lease("w1", "c#0", 30, "h2")
    with pytest.raises(LeaseTimeout):
        managed_pool.lease_call("w0", "d#0", 0.3, "h1", "execute", ("true",), {"shell": True})
    managed_pool.release(held.vm_id, True, "release", held.lease)


def test_an_error_that_cannot_travel_is_named_instead():
    class Odd(Exception):
        def __init__(self, a, b):
            super().__init__(f"{a}/{b}")

    assert isinstance(_portable(VMError("x")), VMError)
    odd = _portable(Odd(1, 2))
    assert type(odd) is RuntimeError and str(odd) == "Odd: 1/2"


def test_a_sandbox_killed_from_outside_during_a_leased_call_is_not_the_tasks(tmp_path):
    pool = VMPoolManager("process", f"k{time.monotonic_ns() % 10**9}", 1,
                         events_path=str(tmp_path / "events.jsonl"))
    try:
        wait_idle(pool, 1)
        victim = next(vm.info for vm in pool._vms.values() if vm.state is VMState.IDLE)
        outcome = {}

        def call():
            try:
                outcome["done"] = leased_call(pool, "w0", "a#0", 30, "h1", "execute", ("sleep 30",),
                                              {"shell": True})
            except BaseException as exc:  # noqa: BLE001
                outcome["error"] = exc

        thread = threading.Thread(target=call)
        thread.start()
        wait_until(lambda: pool.stats()["states"]["leased"] == 1)
        time.sleep(0.3)
        for pid in (victim.private["init_pid"], victim.private["pid"]):
            os.kill(pid, signal.SIGKILL)
        thread.join(30)
        assert isinstance(outcome.get("error"), VMKilled), outcome
        assert "killed from outside during a#0" in str(outcome["error"])
        wait_until(lambda: pool.stats()["states"]["idle"] == 1)
        stats = pool.stats()
        assert stats["marked_dead"] == 1 and stats["restarts"] == 1 and stats["replacements"] == 0
    finally:
        pool.shutdown()
