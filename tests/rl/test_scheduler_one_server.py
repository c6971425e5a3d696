"""A trainer's ONE policy server (``base_url`` a single URL) restarted serving another model:
SGLang and llama.cpp answer any model name, so the batch would be the other model's. Each
worker process asks the server's GET /models after a request its restart failed, or after
RECHECK_IDLE_S without an answer (a restart between two batches), as a fleet's does, and
get_batch raises the ConfigError of a server not serving the model, not a batch and no wait."""

from __future__ import annotations

import time

import pytest

from parallel_rollout.errors import ConfigError
from parallel_rollout.rl import EnvManagerConfig
from restarting_server import RESTART_FAILURES, Restarting
from rl_support import lake_set, rl_config
from table_policy import TablePolicy

_WRONG = "does not list the model 'table' .*it lists test-model"


def _scheduler(tmp_path, schedulers, server: Restarting, **changes):
    return schedulers(rl_config(tmp_path, server.old, **changes),
                      EnvManagerConfig(num_env_groups=4, group_size=2, tags=["lakes"],
                                       task_sets=lake_set(tmp_path, count=4, max_steps=6)))


def test_the_one_server_restarted_mid_batch_with_another_model_is_a_config_error(tmp_path, schedulers):
    """The stream its restart hung up on is retried only after the server's /models answered:
    another model, so get_batch raises naming the URL, the model it lists and the run's; the
    restarted server got no completion request. Before, the batches came from the other model."""
    wrong = Restarting(RESTART_FAILURES["hang-up"], at=12, models=("test-model",), policy=TablePolicy(seed=2),
                       served="table")
    try:
        scheduler = _scheduler(tmp_path, schedulers, wrong, num_rollouts=1)
        with pytest.raises(ConfigError, match=_WRONG) as raised:
            for step in range(3):
                scheduler.get_batch(batch_size=8, step=step)
    finally:
        wrong.stop()
    assert wrong.url in str(raised.value)
    assert wrong.restarted.is_set() and wrong.sampled() == [] and wrong.new.model_listings >= 1


def test_the_one_server_restarted_between_batches_with_another_model_is_a_config_error(tmp_path, schedulers):
    """The restart comes while the scheduler is idle (the trainer's step): no request met it,
    but no worker process has had an answer from the server for RECHECK_IDLE_S, so each asks
    its /models before its next request, and the next get_batch raises instead of returning
    the other model's trajectories (before: it returned them)."""
    from parallel_rollout.agents.servers import RECHECK_IDLE_S

    wrong = Restarting(RESTART_FAILURES["hang-up"], at=None, models=("test-model",), policy=TablePolicy(seed=2),
                       served="table")
    try:
        scheduler = _scheduler(tmp_path, schedulers, wrong)
        assert len(scheduler.get_batch(batch_size=8, step=0)) == 8
        deadline = time.monotonic() + 60
        while scheduler.stats()["groups_running"] and time.monotonic() < deadline:
            time.sleep(0.05)  # the groups started after the batch end too: the scheduler is idle
        wrong.restart()
        assert wrong.restarted.wait(10)
        # a restart takes longer than RECHECK_IDLE_S (the new server loads its model): the premise under test
        time.sleep(max(0.0, wrong.old.requests[-1]["time"] + RECHECK_IDLE_S + 0.5 - time.monotonic()))
        with pytest.raises(ConfigError, match=_WRONG):
            scheduler.get_batch(batch_size=8, step=1, timeout=60)
    finally:
        wrong.stop()
    assert wrong.sampled() == [] and wrong.new.model_listings >= 1
