"""The engine the scheduler tests share: one test server (its policy switchable per test) and
one engine per test module (``shared``), on which each test makes its schedulers as siblings
(``sibling``), so the workers start once a module. A module imports the fixtures:
``from scheduler_engine import shared, sibling, tiny``."""

from __future__ import annotations

import pytest

from llm_server import LLMServer
from parallel_rollout.rl import EnvManagerConfig, RolloutScheduler
from rl_support import TINY, Switch, lake_set, rl_config
from table_policy import TablePolicy

#: the shared engine's limit, for every scheduler of the module
LIMIT = 6


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """One test server (policy switchable per test) and one engine for the module: each test
    makes its schedulers as siblings of ``base``, so workers start once."""
    folder = tmp_path_factory.mktemp("rl-shared")
    switch = Switch(TablePolicy(seed=0))
    server = LLMServer(policy=switch).start()
    base = RolloutScheduler(rl_config(folder, server, num_rollouts=2, envs_per_worker=4),
                            EnvManagerConfig(tags=["FrozenLake"]), max_concurrent_rollouts=LIMIT, name="base")
    yield base, switch, server, folder
    base.close()
    server.stop()


@pytest.fixture
def sibling(shared):
    """``sibling(env_config, **options)``: a scheduler on the module's engine, closed after
    the test; the model's policy is reset to the table policy."""
    base, switch, _, _ = shared
    made = []

    def make(env_config, **options):
        scheduler = base.sibling(env_config, **options)
        made.append(scheduler)
        return scheduler

    yield make
    for scheduler in made:
        scheduler.close()
    switch.policy = switch.default
    base.resume(policy_version=base.policy_version)  # reopened, should a test have left it shut


def tiny(shared, **fields):
    """The module's ``tiny`` task set: one 1x3 lake, two moves at most (``fields``: more of its fields)."""
    return lake_set(shared[3], name="tiny", desc=TINY, max_steps=2, **fields)
