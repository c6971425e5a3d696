"""Weight updates under RolloutScheduler on the real engine (the module's shared engine,
``scheduler_engine``): suspend() stops model requests and resume(v) dates the tokens after it;
a resume by any scheduler of the engine drops a sibling's groups behind its max_version_lag,
and starts over a validation whose request was under way."""

from __future__ import annotations

import contextlib
import threading
import time

import pytest

from parallel_rollout.rl import EnvManagerConfig
from scheduler_engine import shared, sibling, tiny  # noqa: F401 - fixtures
from table_policy import TablePolicy


def test_suspend_stops_model_requests_and_versions_are_recorded(shared, sibling):
    server = shared[2]
    train = sibling(EnvManagerConfig(num_env_groups=2, group_size=2, tags=["tiny"], task_sets=tiny(shared)),
                    async_generation_ratio=2)
    train.get_batch(batch_size=4, step=0)
    train.suspend()
    suspended = time.monotonic()
    time.sleep(0.6)
    assert not [r for r in server.requests if r["time"] > suspended + 0.05]
    train.resume(policy_version=7)
    batch = train.get_batch(batch_size=4, step=1)
    assert {v for t in batch for v in t.policy_versions} <= {0, 7}
    assert train.policy_version == 7


@contextlib.contextmanager
def slow_to_open(gate):
    """The gate opens a second late: the trainer's thread is slow between what ``resume``
    started (groups in the place of dropped ones, validations started over) and the gate's
    opening; what started samples under the new version all the same."""
    opened = gate.resume

    def late(*args, **kwargs):
        time.sleep(1.0)
        opened(*args, **kwargs)

    gate.resume = late
    try:
        yield
    finally:
        del gate.resume


@pytest.mark.parametrize("suspended", [True, False], ids=["suspend-abort", "no-suspend"])
def test_a_resume_by_any_scheduler_drops_the_groups_behind_a_siblings_version_lag(shared, sibling, suspended):
    """The weight update is the engine's: ``base.resume(v)`` (the scheduler that made the
    engine, without a max_version_lag of its own) drops a sibling's running group holding
    tokens older than the sibling's max_version_lag allows, as the sibling's own resume does;
    it ran on to its end on the old tokens, only to be dropped then. With or without a
    ``suspend()`` before, the group started in its place samples under the new version only."""
    base, switch, server = shared[0], shared[1], shared[2]
    table, hold = TablePolicy(seed=0), threading.Event()

    def first_turns_then_held(body):  # the group's first turns answered, the next ones wait
        if len(table.served) >= 2:
            hold.wait(30)
        return table(body)

    switch.policy = first_turns_then_held
    lagging = sibling(EnvManagerConfig(num_env_groups=1, group_size=2, tags=["tiny"], task_sets=tiny(shared)),
                      max_version_lag=0)
    sent = len(server.requests)
    got: list = []
    thread = threading.Thread(target=lambda: got.append(lagging.get_batch(batch_size=2, step=0, timeout=60)))
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while len(server.requests) < sent + 3 and time.monotonic() < deadline:
            time.sleep(0.01)  # a second turn asked: the first's tokens are the group's
        version = base.policy_version + 1
        if suspended:
            base.suspend(abort=True)
        with slow_to_open(base._shared.gate):
            base.resume(version)
        assert lagging.stats().get("dropped_version_lag") == 1
    finally:
        hold.set()
        thread.join(60)
    (batch,) = got
    assert {v for t in batch for v in t.policy_versions} == {version}


def test_a_validation_request_under_way_at_a_resume_without_suspend_starts_over(shared, sibling):
    """get_batch(-1) validates one policy: ``resume(v)`` without ``suspend()`` moves the
    version on under a request under way, whose episode went on under v and was reported as
    if one policy had played it; it starts over under v, as one an abort ended does."""
    base, switch = shared[0], shared[1]
    table, held, release = TablePolicy(seed=0), threading.Event(), threading.Event()

    def first_held(body):  # the validation's first request waits at the server
        if not held.is_set():
            held.set()
            release.wait(30)
        return table(body)

    switch.policy = first_held
    val = sibling(EnvManagerConfig(group_size=1, tags=["tiny"], task_sets=tiny(shared)))
    report: list = []
    thread = threading.Thread(target=lambda: report.extend(val.get_batch(-1, step=0, timeout=60)))
    thread.start()
    try:
        assert held.wait(60)
        version = base.policy_version + 1
        with slow_to_open(base._shared.gate):
            base.resume(version)  # no suspend(): the request under way was let through under the last version
        assert val.stats().get("dropped_version_changed") == 1
    finally:
        release.set()
        thread.join(60)
    assert [t.task_id for t in report] == ["tiny0"] and set(report[0].policy_versions) == {version}
