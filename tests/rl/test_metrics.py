"""scheduler.metrics(): one flat dict per batch, for a trainer's logger."""

from __future__ import annotations

import statistics

import pytest

from parallel_rollout.rl import EnvManagerConfig
from parallel_rollout.rl.metrics import log_metrics
from rl_support import TINY, lake_set, rl_config


class _Writer:
    """What TensorBoard's SummaryWriter offers a logger: add_scalar."""

    def __init__(self):
        self.scalars = []

    def add_scalar(self, name, value, step):
        self.scalars.append((name, value, step))


def test_metrics_of_a_batch(tmp_path, table, schedulers):
    _, server = table
    sets = {**lake_set(tmp_path, count=3, name="tiny", desc=TINY, max_steps=3),
            **lake_set(tmp_path, count=3, name="lakes", max_steps=4)}
    train = schedulers(rl_config(tmp_path, server), EnvManagerConfig(
        group_size=2, tags=["tiny", "lakes"], num_groups_partition=[2, 2], task_sets=sets), async_generation_ratio=1)
    assert train.metrics() == {}
    batch = train.get_batch(batch_size=8, step=0)
    metrics = train.metrics()
    assert all(isinstance(v, (int, float)) for v in metrics.values())
    assert metrics["batch/trajectories"] == 8 and metrics["batch/groups"] == 4
    assert metrics["reward/mean"] == pytest.approx(statistics.fmean(t.reward for t in batch))
    assert metrics["success_rate"] == pytest.approx(sum(t.success for t in batch) / 8)
    for tag in {t.tag for t in batch}:
        tagged = [t for t in batch if t.tag == tag]
        assert metrics[f"tag/{tag}/trajectories"] == len(tagged)
        assert metrics[f"tag/{tag}/reward_mean"] == pytest.approx(statistics.fmean(t.reward for t in tagged))
    assert sum(v for k, v in metrics.items() if k.startswith("status/")) == 8
    assert metrics["staleness/lag_0"] == 8 and metrics["staleness/max_lag"] == 0
    assert 0 < metrics["time/model_s_mean"] <= metrics["time/episode_s_mean"]
    assert metrics["time/env_s_mean"] == pytest.approx(metrics["time/episode_s_mean"] - metrics["time/model_s_mean"],
                                                       abs=1e-6)
    assert metrics["tokens/completion"] > 0

    # generation ran ahead under version 0; after an update, what it made is one version old
    train.suspend()
    train.resume(policy_version=1)
    second = train.get_batch(batch_size=8, step=1)
    metrics = train.metrics()
    assert metrics["scheduler/policy_version"] == 1 and metrics["scheduler/step"] == 1
    lagged = sum(1 for t in second if min(v for v in t.policy_versions if v is not None) == 0)
    assert metrics.get("staleness/lag_1", 0) == lagged
    assert metrics.get("staleness/lag_0", 0) == 8 - lagged

    writer = _Writer()
    log_metrics(metrics, step=1, logger=writer)
    assert ("batch/trajectories", 8, 1) in writer.scalars and len(writer.scalars) == len(metrics)
    with pytest.raises(TypeError, match="SummaryWriter"):
        log_metrics(metrics, step=1, logger=object())
