"""The trainer's calls refused or ended cleanly instead of hanging, leaking or miscounting."""

from __future__ import annotations

from collections import Counter

import pytest

from llm_server import LLMServer
from parallel_rollout.rl import BatchTimeout, EnvManagerConfig, RolloutScheduler
from rl_support import TINY, Switch, lake_set, rl_config
from table_policy import TablePolicy


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    """One test server (its policy switchable) and one engine for the module's tests."""
    folder = tmp_path_factory.mktemp("rl-calls")
    switch = Switch(TablePolicy(seed=0))
    server = LLMServer(policy=switch).start()
    base = RolloutScheduler(rl_config(folder, server, num_rollouts=1, envs_per_worker=4),
                            EnvManagerConfig(tags=["FrozenLake"]), max_concurrent_rollouts=4, name="base")
    yield base, switch, folder
    base.close()
    server.stop()


def test_validation_after_a_timeout_runs_each_task_once(engine):
    base, switch, folder = engine
    val = base.sibling(EnvManagerConfig(group_size=1, tags=["tiny"], task_sets=lake_set(
        folder, count=3, name="tiny", desc=TINY, max_steps=2)), name="val")
    try:
        switch.policy = lambda body: {"sleep": 1.5, "reply": "<answer>Right</answer>"}
        with pytest.raises(BatchTimeout, match="0 group"):
            val.get_batch(-1, step=0, timeout=0.5)
        switch.policy = lambda body: {"reply": "<answer>Right</answer>"}
        report = val.get_batch(-1, step=1, timeout=120)
        assert Counter(t.task_id for t in report) == Counter({"tiny0": 1, "tiny1": 1, "tiny2": 1}), \
            [t.trajectory_id for t in report]
        assert val.stats()["dropped_abandoned"] >= 1
        assert [t.reward for t in report] == [1.0] * 3  # this call's episodes, not the timed-out ones
    finally:
        switch.policy = switch.default
        val.close()
