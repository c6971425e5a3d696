"""max_version_lag against the local test server: a group is judged by the policy versions of
the tokens it kept (dropped, or marked version_stale), the partial tokens an abort leaves are
judged at the resume right after it, a validation sibling's episode starts over under the new
version, and a retried member is judged by its last attempt only."""

from __future__ import annotations

import threading
import time

import pytest

from held_replies import each_streamed, held, wait_until
from llm_server import llm_server  # noqa: F401 - fixture
from parallel_rollout.errors import RolloutError
from parallel_rollout.rl import BatchTimeout, EnvManagerConfig, generation
from rl_support import TINY, lake_set, rl_config
from table_policy import TablePolicy


@pytest.mark.parametrize("stale_versions", ["drop", "keep"])
def test_max_version_lag_judges_a_group_by_its_tokens_versions(tmp_path, llm_server, schedulers, stale_versions):
    table = TablePolicy(seed=2, delay_s=0.3)
    server = llm_server(policy=table)
    train = schedulers(rl_config(tmp_path, server, num_rollouts=1, envs_per_worker=4),
                       EnvManagerConfig(num_env_groups=1, group_size=2, tags=["tiny"],
                                        task_sets=lake_set(tmp_path, name="tiny", desc=TINY, max_steps=2)),
                       max_version_lag=1, stale_versions=stale_versions)
    got: list = []
    thread = threading.Thread(target=lambda: got.append(train.get_batch(batch_size=2, step=0)), daemon=True)
    thread.start()
    wait_until(lambda: len(table.served) >= 1, timeout=60)  # a first turn's reply, sampled by version 0
    time.sleep(0.15)
    # two weight updates while the group (created at this step) runs its next turns
    train.suspend(abort=True)
    train.resume(1)
    train.suspend(abort=True)
    train.resume(2)
    thread.join(60)
    (batch,) = got
    stats = train.stats()
    assert stats["dropped_stale"] == 0 and all(t.created_step == 0 for t in batch)
    if stale_versions == "drop":
        assert stats["dropped_version_lag"] >= 1
        assert all(v >= 1 for t in batch for v in t.policy_versions) and not any(t.version_stale for t in batch)
    else:
        assert stats["dropped_version_lag"] == 0
        assert any(t.version_stale for t in batch) and min(v for t in batch for v in t.policy_versions) == 0
    # a task the trainer chose, played across two updates: handed out as it came, never
    # marked version_stale (no staleness applies to it), where it was, under "drop" too
    got.clear()
    thread = threading.Thread(target=lambda: got.append(train.get_batch(2, step=1, tasks=["tiny0"])), daemon=True)
    replies = train._shared.gate.replies
    thread.start()
    wait_until(lambda: train._shared.gate.replies > replies, timeout=60)  # a first turn's reply kept, by version 2
    for version in (3, 4):
        train.suspend(abort=True)
        train.resume(version)
    thread.join(60)
    (chosen,) = got
    assert min(v for t in chosen for v in t.policy_versions) < 3 and not any(t.version_stale for t in chosen)


def test_a_partial_reply_aborted_by_an_update_counts_at_the_resume_right_after(tmp_path, llm_server, schedulers,
                                                                              monkeypatch, caplog):
    """max_version_lag with partial rollouts: the partial tokens an abort leaves are judged
    at resume even when the trainer resumes at once (the agents' "end" lines are awaited),
    so the group is dropped there, not after the rest of its episode ran on stale tokens.
    A validation sibling's get_batch(-1) running across the update (no max_version_lag of its
    own) validates one policy: its episode begun under version 0 starts over under 1 (its
    partial reply was continued under 1, the report mixing two policies in one episode);
    started over as often as it may (VALIDATION_RESTARTS, 1 here), it runs on across the next
    update, said in a warning and counted, rather than start over for ever."""
    monkeypatch.setattr(generation, "VALIDATION_RESTARTS", 1)
    policy, asked = held(3)
    server = llm_server(policy=policy, token_rate=20)
    tiny = lake_set(tmp_path, name="tiny", desc=TINY, max_steps=2)
    train = schedulers(rl_config(tmp_path, server, num_rollouts=1, envs_per_worker=3, partial_rollout=True),
                       EnvManagerConfig(num_env_groups=1, group_size=2, tags=["tiny"], task_sets=tiny),
                       max_version_lag=0)
    val = train.sibling(EnvManagerConfig(group_size=1, tags=["tiny"], task_sets=tiny), name="val")
    got: list = []
    thread = threading.Thread(target=lambda: got.append(train.get_batch(batch_size=2, step=0)), daemon=True)
    report: list = []
    validation = threading.Thread(target=lambda: report.extend(val.get_batch(-1, step=0)), daemon=True)
    thread.start()
    validation.start()
    wait_until(lambda: len(server.requests) == 3, timeout=120)
    asked.set()
    # tokens sampled by version 0 in each of the three streams, sent a second before the abort:
    # 0.3 s after the last request was not always enough under load (the server had sent the
    # last none, or its client had read none: the group kept nothing to judge)
    wait_until(lambda: each_streamed(server, 3, tokens=10), timeout=60)
    train.suspend(abort=True)
    train.resume(1)  # an instant update: the agents may not have said what they keep yet
    assert train.stats().get("dropped_version_lag") == 1
    assert train.stats()["groups_started"] == 2  # another in its place
    assert val.stats().get("dropped_version_changed") == 1 and val.stats()["groups_started"] == 2
    # each group's first turn again, under version 1 (at least: the three start at once, and the
    # count passed 6 between two looks at it in one run of eight, the test then waiting for ever)
    wait_until(lambda: len(server.requests) >= 6, timeout=60)
    wait_until(lambda: time.monotonic() - server.requests[-1]["time"] > 0.3)
    train.suspend(abort=True)
    train.resume(2)
    assert train.stats().get("dropped_version_lag") == 2
    assert val.stats().get("dropped_version_changed") == 1 and val.stats()["validation_versions_mixed"] == 1
    thread.join(120)
    validation.join(120)
    (batch,) = got
    assert all(set(t.policy_versions) == {2} for t in batch)
    assert [t.task_id for t in report] == ["tiny0"] and report[0].policy_versions == [1, 2]
    assert report[0].turns[0].get("partial") and "started over 1 times at weight updates" in caplog.text


@pytest.mark.parametrize("stale_versions", ["drop", "keep"])
def test_max_version_lag_judges_a_retried_member_by_its_last_attempt_only(tmp_path, llm_server, schedulers,
                                                                        stale_versions):
    """A member whose attempt failed (the endpoint's 500s past the retries) is run again by
    the engine; the trajectory handed out is the new attempt's. The versions its failed
    attempt's turns were sampled by still counted: its group, every token of it sampled
    within the lag, was dropped as stale (or marked ``version_stale``)."""
    served = []

    def policy(body):
        served.append(body)
        if len(served) == 1:
            return {"reply": "<answer>Right</answer>"}  # turn 1 of attempt 0, sampled by version 0
        if len(served) in (2, 3):  # turn 2 fails twice (max_retries=1): attempt 0 is model_unavailable
            if len(served) == 2:
                train.resume(1)  # the trainer moves the policy on (no suspend: nothing aborted)
            return {"status": 500}
        if len(served) == 4:
            train.resume(2)  # attempt 1's first turn, sampled by version 1: within max_version_lag=1
        return {"reply": "<answer>Right</answer>"}

    server = llm_server(policy=policy)
    train = schedulers(rl_config(tmp_path, server, num_rollouts=1, envs_per_worker=1, max_retries=1),
                       EnvManagerConfig(num_env_groups=1, group_size=1, tags=["tiny"],
                                        task_sets=lake_set(tmp_path, name="tiny", desc=TINY, max_steps=2)),
                       max_version_lag=1, stale_versions=stale_versions)
    (trajectory,) = train.get_batch(batch_size=1, step=0, timeout=120)
    assert trajectory.group_id == 0 and trajectory.record["attempt"] == 1, trajectory.record
    assert trajectory.policy_versions == [1, 2] and trajectory.status == "success"
    assert not trajectory.version_stale
    assert train.stats()["dropped_version_lag"] == 0


def test_updates_faster_than_an_episode_end_get_batch_naming_max_version_lag(tmp_path, llm_server, schedulers):
    """A weight-sync thread that updates more often than an episode lasts leaves no group within
    max_version_lag=0: each was dropped and another started, and a get_batch without timeout
    waited for ever (a timeout said "0 ready, 2 running; last failure: none"). Now the drops
    since the last batch are bounded as the group filter's are, and the error says why."""
    server = llm_server(policy=TablePolicy(seed=2, delay_s=0.3))
    train = schedulers(rl_config(tmp_path, server, num_rollouts=1, envs_per_worker=4),
                       EnvManagerConfig(num_env_groups=2, group_size=2, tags=["lakes"],
                                        task_sets=lake_set(tmp_path, 3, max_steps=6)),
                       max_version_lag=0)
    stop = threading.Event()

    def weight_sync():
        version = 0
        while not stop.wait(0.1):
            version += 1
            train.resume(version)

    syncer = threading.Thread(target=weight_sync, daemon=True)
    syncer.start()
    try:
        with pytest.raises(RolloutError, match=r"max_version_lag=0 dropped \d+ groups since the last batch.*"
                                               r"stale_versions='keep'") as raised:
            train.get_batch(batch_size=4, step=0, timeout=90)  # before: a BatchTimeout after 90 s
        assert not isinstance(raised.value, BatchTimeout)
    finally:
        stop.set()
        syncer.join(30)
    stats = train.stats()
    assert stats["dropped_version_lag"] > 0
    # the next call starts afresh: with the updates stopped, a batch comes
    assert len(train.get_batch(batch_size=4, step=0, timeout=120)) == 4
