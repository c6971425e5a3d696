"""What both backends share (backends/base.py) and the one record builder (records.py)."""

from __future__ import annotations

import json
import threading

import pytest

from parallel_rollout import records
from parallel_rollout.backends.base import Clock, CrashWindow, WorkerTable, late_failures
from parallel_rollout.errors import TaskTimeout, VMKilled, WorkerDied
from parallel_rollout.messages import Assignment, Progress
from parallel_rollout.tasks import Task


def _item(task_id: str = "t1", attempt: int = 0, **meta) -> Assignment:
    task = Task(id=task_id, mode="shell", payload={"instruction": "x"}, tags=("easy", "unix"))
    return Assignment(task, 0, attempt, meta=meta)


def test_crash_window_counts_only_within_its_window():
    window = CrashWindow(workers=1, window_s=60.0)
    assert window.limit == 20
    # 20 crashes spread over 20 minutes never make a crash loop
    assert not any(window.crashed(now=60.0 * i) for i in range(20))
    # 21 within one minute do
    burst = CrashWindow(workers=1, window_s=60.0)
    results = [burst.crashed(now=1000.0 + i) for i in range(21)]
    assert results[:20] == [False] * 20 and results[20] is True


def test_crash_window_limit_follows_the_worker_count():
    window = CrashWindow(workers=2)
    assert window.limit == 30
    window.resize(6)
    assert window.limit == 70


def test_clock_stops_while_waiting_for_a_vm():
    clock = Clock(started_at=0.0, running_since=10.0)
    clock.lease_wait(True, 12.0)  # 2 s of task time, then a wait
    assert clock.elapsed(100.0) == pytest.approx(2.0)
    clock.lease_wait(False, 100.0)
    assert clock.elapsed(103.0) == pytest.approx(5.0)


class _Table(WorkerTable):
    def __init__(self, workers):
        self._workers = workers


class _Handle:
    def __init__(self, worker_id, pid, assigned):
        self.worker_id, self.pid, self.assigned = worker_id, pid, assigned


def test_worker_table_answers_in_flight_holders_and_pids():
    a, b = _item("a"), _item("b")
    table = _Table({0: _Handle("w0", 100, {(a.key, 0): a}), 1: _Handle("w1", 101, {(b.key, 0): b})})
    assert table.in_flight() == 2
    assert table.holds(a) and not table.holds(_item("c"))
    assert table.holder_pid("b#0", 0) == 101 and table.holder_pid("b#0", 1) is None
    assert table.worker_pids() == {"w0": 100, "w1": 101}


def test_every_record_kind_has_every_field_and_is_json():
    item = _item(group=3)
    started = records.new_record(item, worker="w0", pid=1, slot=0, started_at=1.0)
    finished = records.finish(dict(started), ended_at=3.5)
    died = records.failed_record(item, WorkerDied("gone"), worker="w0", pid=1, started_at=1.0)
    loop = records.failed_record(item, RuntimeError("bug"), worker="w0", pid=1, slot=2, started_at=1.0,
                                 status="error", infrastructure=False, with_traceback=True)
    odd = records.replacement_record({**finished, "eval": object()}, TypeError("object"))
    unstorable = records.unstorable_record({"key": "a#0", "task_id": "a", "tags": ["easy", "unix"],
                                            "meta": {"group": 3}}, "field 'reward' is nan")
    for record in (started, finished, died, loop, odd, unstorable):
        assert set(records.RECORD_FIELDS) <= set(record), set(records.RECORD_FIELDS) - set(record)
        json.dumps(record)
        assert record["tags"] == ["easy", "unix"]
    assert finished["duration_s"] == 2.5
    # the loop failure keeps what statistics per tag, duration and usage need
    assert loop["status"] == "error" and not loop["infrastructure"] and loop["duration_s"] is not None
    assert loop["usage"] == {} and loop["meta"] == {"group": 3}
    assert died["status"] == "worker_died" and died["infrastructure"] is True
    timeout = records.failed_record(item, TaskTimeout("late"), worker="w0", pid=1, started_at=1.0)
    assert timeout["status"] == "task_timeout" and timeout["infrastructure"] is False
    assert odd["status"] == "unstorable_result" and odd["meta"] == {"group": 3}
    assert odd["failure"]["type"] == "UnstorableResult"
    assert "field 'eval' is of type object" in odd["failure"]["message"]
    assert unstorable["status"] == "unstorable_result" and unstorable["reward"] == 0.0
    assert unstorable["usage"] == {} and unstorable["meta"] == {"group": 3}
    assert "field 'reward' is nan" in unstorable["failure"]["message"]


def test_a_held_clock_stops_and_a_lease_wait_inside_a_hold_does_not_restart_it():
    clock = Clock(started_at=0.0, running_since=0.0)
    clock.hold(True, 1.0)              # 1 s ran, then a weight update
    clock.lease_wait(True, 2.0)
    clock.lease_wait(False, 3.0)       # a VM came during the update: still held
    assert clock.elapsed(10.0) == pytest.approx(1.0)
    clock.hold(False, 10.0)
    assert clock.elapsed(12.0) == pytest.approx(3.0)
    clock.lease_wait(True, 12.0)
    clock.hold(True, 13.0)
    clock.hold(False, 14.0)            # the update ended while the VM is still awaited
    assert clock.elapsed(20.0) == pytest.approx(3.0)


class _Pool:
    """A pool that tells the cause of each (VM, lease) it was given, and notes what it marks dead."""

    def __init__(self, causes: dict[tuple[str, int], str]) -> None:
        self.causes, self.dead = causes, []

    def death_cause(self, vm_id: str, lease: int | None = None) -> str | None:
        return self.causes.get((vm_id, lease))

    def mark_dead(self, vm_id: str, reason: str, lease: int | None = None, by_task: bool = False) -> None:
        self.dead.append((vm_id, lease, by_task, reason))


class _GonePool:
    """A pool whose Manager is gone."""

    def death_cause(self, vm_id: str, lease: int | None = None) -> str | None:
        raise EOFError


def test_a_late_attempt_is_vm_killed_only_when_its_pool_tells_the_vm_it_holds_was_killed_from_outside():
    """A timeout is the task's unless the VM it holds now (its last Progress: VM and lease)
    was killed from outside, as its pool tells: then VMKilled, infrastructure, the pool's cause
    and the timeout in its message, the VM marked dead by that lease (restarted for free, as
    any VM that broke under its task). Every other case keeps the timeout."""
    pool = _Pool({("vm-0", 3): "its process 7 (python3, uid 0) was stopped from outside"})
    timeout = TaskTimeout("attempt ran past --task-timeout 10s")

    def at(vm, lease):
        return Progress("t#0", 0, "agent", 1, vm, None, lease)

    late = [(pool, _item("a"), timeout, at("vm-0", 3)),
            (pool, _item("b"), timeout, at("vm-1", 4)),  # runs, or the task may have done it
            (pool, _item("c"), timeout, at("vm-0", None)),  # it holds no VM now
            (pool, _item("d"), timeout, None),  # no Progress yet
            (None, _item("e"), timeout, at("vm-0", 3)),  # no pool
            (_GonePool(), _item("f"), timeout, at("vm-0", 3))]  # the pool is gone
    failures = late_failures(late)
    assert failures[1:] == [timeout] * 5
    killed = failures[0]
    assert isinstance(killed, VMKilled) and killed.infrastructure and killed.kind == "vm_error"
    assert "stopped from outside" in str(killed) and "task_timeout: attempt ran past" in str(killed), killed
    assert pool.dead == [("vm-0", 3, True, "killed from outside during a#0: its process 7 (python3, uid 0) "
                                           "was stopped from outside")]
    assert late_failures(late[1:2]) == [timeout] and late_failures([]) == []


class _SlowPool(_Pool):
    """A pool whose provider waits on a VM that still runs (as one does for a dying VM)
    until the test lets it answer, and then names a cause."""

    def __init__(self) -> None:
        super().__init__({("vm-0", 3): "its bwrap was killed by SIGKILL"})
        self.answer = threading.Event()
        self.answered = threading.Event()

    def death_cause(self, vm_id: str, lease: int | None = None) -> str | None:
        self.answer.wait(30)
        try:
            return super().death_cause(vm_id, lease)
        finally:
            self.answered.set()


def test_a_late_attempt_whose_pool_is_slow_to_answer_is_its_timeout_and_nothing_is_marked():
    """The engine thread does not wait out a provider's few seconds for a VM that still runs
    (a hung task's): an answer not in by the pass's patience is the timeout's, and the answer
    that comes later marks no VM dead."""
    pool = _SlowPool()
    timeout = TaskTimeout("attempt ran past --task-timeout 10s")
    failures = late_failures([(pool, _item("a"), timeout, Progress("a#0", 0, "agent", 1, "vm-0", None, 3)),
                              (pool, _item("b"), timeout, Progress("b#0", 0, "agent", 1, "vm-0", None, 3))])
    assert failures == [timeout, timeout]
    pool.answer.set()
    assert pool.answered.wait(30)
    assert pool.dead == []  # the answer came to nobody: only the pass marks


def test_a_timeout_pass_with_more_late_attempts_than_threads_ends_in_timeouts():
    """More late attempts than the pass asks at once, each pool slow to answer: those still
    queued at the pass's end are cancelled, and each is its timeout (a cancelled question
    raised CancelledError into the engine thread, which ended the run)."""
    from parallel_rollout.backends import base

    pools = [_SlowPool() for _ in range(base._BLAME_THREADS + 2)]
    timeout = TaskTimeout("attempt ran past --task-timeout 10s")
    late = [(pool, _item(f"t{n}"), timeout, Progress(f"t{n}#0", 0, "agent", 1, "vm-0", None, 3))
            for n, pool in enumerate(pools)]
    try:
        assert late_failures(late) == [timeout] * len(pools)
    finally:
        for pool in pools:
            pool.answer.set()
    assert all(pool.dead == [] for pool in pools)
