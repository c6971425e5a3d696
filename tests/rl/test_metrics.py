"""scheduler.metrics(): one flat dict per batch, for a trainer's logger."""

from __future__ import annotations

import math
import statistics
import threading
import time

import pytest

from llm_server import llm_server  # noqa: F401 - fixture
from parallel_rollout.rl import EnvManagerConfig
from parallel_rollout.rl.groups import Trajectory
from parallel_rollout.rl.metrics import batch_metrics, log_metrics
from rl_support import TINY, lake_set, rl_config


def _scalars(folder) -> list[tuple[str, float, int]]:
    """(tag, value, step) of every scalar in a TensorBoard event file (TFRecord framing:
    length, its CRC, the Event, the Event's CRC)."""
    import struct

    from tensorboardX.proto import event_pb2

    (path,) = list(folder.glob("events.out.tfevents.*"))
    data, at, out = path.read_bytes(), 0, []
    while at < len(data):
        (length,) = struct.unpack("<Q", data[at:at + 8])
        event = event_pb2.Event()
        event.ParseFromString(data[at + 12:at + 12 + length])
        at += 12 + length + 4
        out += [(value.tag, value.simple_value, event.step) for value in event.summary.value]
    return out


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
    split = ("time/model_s_mean", "time/env_s_mean", "time/gate_wait_s_mean", "time/other_s_mean")
    assert sum(metrics[name] for name in split) == pytest.approx(metrics["time/episode_s_mean"], abs=1e-3)
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

    from tensorboardX import SummaryWriter

    writer = SummaryWriter(str(tmp_path / "tb"))
    log_metrics(metrics, step=1, logger=writer)
    writer.close()
    written = _scalars(tmp_path / "tb")
    assert ("batch/trajectories", 8.0, 1) in written and len(written) == len(metrics)
    assert {tag: value for tag, value, _ in written} == pytest.approx(metrics, rel=1e-6)  # float32 in the file
    with pytest.raises(TypeError, match="SummaryWriter"):
        log_metrics(metrics, step=1, logger=object())


def test_a_weight_update_is_neither_model_nor_env_time(tmp_path, llm_server, schedulers):
    """Episodes held at the policy gate for a weight update: the wait is gate time, the aborted
    request's decoding is model time, and the env's time is what its reset, steps and grading
    took (ms for a lake), not the rest of the episode."""
    ids = list(range(8))
    server = llm_server(policy=lambda body: {"reply": "<answer>Right</answer>", "token_ids": ids,
                                             "logprobs": [-0.5] * len(ids)}, token_rate=40)  # 0.2 s a reply
    train = schedulers(rl_config(tmp_path, server, num_rollouts=1, envs_per_worker=4),
                       EnvManagerConfig(num_env_groups=2, group_size=2, tags=["row"],
                                        task_sets=lake_set(tmp_path, count=2, name="row", desc=["SFFFFG"])))
    train.get_batch(batch_size=4, step=0)  # the env's first use (gymnasium's import) is behind us
    got: list = []
    thread = threading.Thread(target=lambda: got.append(train.get_batch(batch_size=4, step=1)), daemon=True)
    streamed = server.tokens_streamed
    thread.start()
    deadline = time.monotonic() + 60
    while server.tokens_streamed < streamed + 12:  # the first replies under way
        assert time.monotonic() < deadline, "the model requests did not come"
        time.sleep(0.01)
    train.suspend(abort=True)
    time.sleep(2.0)  # the trainer pushes its weights
    train.resume(1)
    thread.join(120)
    (batch,) = got
    assert all(t.success for t in batch), [(t.status, t.record.get("failure")) for t in batch]
    metrics = train.metrics()
    assert metrics["time/gate_wait_s_mean"] >= 1.0, metrics
    assert metrics["time/env_s_mean"] < 0.5, metrics
    # five replies of 0.2 s each at least, and the aborted one's part
    assert metrics["time/model_s_mean"] >= 1.0, metrics
    parts = metrics["time/model_s_mean"] + metrics["time/env_s_mean"] + metrics["time/gate_wait_s_mean"]
    assert parts <= metrics["time/episode_s_mean"] + 1e-3, metrics
    assert metrics["time/other_s_mean"] == pytest.approx(metrics["time/episode_s_mean"] - parts, abs=1e-3)
    for t in batch:  # the record says the env's share itself
        assert 0 < t.record["env_s"] < 0.5


def test_completion_tokens_of_a_server_that_sends_no_token_ids_are_its_usage(tmp_path, llm_server, schedulers):
    """An OpenAI-compatible server that streams usage but no token ids: the completion tokens
    are what its usage says. They were counted 0 under a scheduler (tokens/completion 0,
    every record's usage 0), where the prompt tokens were taken from the same usage."""
    server = llm_server(policy=lambda body: {"reply": "<answer>Right</answer>",
                                             "usage": {"prompt_tokens": 11, "completion_tokens": 4}})
    train = schedulers(rl_config(tmp_path, server, num_rollouts=1, envs_per_worker=2),
                       EnvManagerConfig(group_size=2, tags=["tiny"],
                                        task_sets=lake_set(tmp_path, count=1, name="tiny", desc=TINY, max_steps=3)))
    batch = train.get_batch(batch_size=2, step=0)
    for trajectory in batch:
        turns = len(trajectory.turns)
        assert turns == 2 and "token_ids" not in trajectory.turns[0]  # SFG: Right twice; no ids sent
        usage = trajectory.record["usage"]
        assert (usage["prompt_tokens"], usage["completion_tokens"]) == (11 * turns, 4 * turns), usage
    assert train.metrics()["tokens/completion"] == 4 * 4


def test_failed_members_are_counted_by_their_reason(tmp_path, llm_server, schedulers):
    answered = iter(range(1_000_000))

    def policy(body):  # the first two requests are refused: their members fail, their groups drop
        return {"status": 400, "message": "bad request"} if next(answered) < 2 else {"reply": "<answer>Right</answer>"}

    server = llm_server(policy=policy)
    train = schedulers(rl_config(tmp_path, server, num_rollouts=1, envs_per_worker=2),
                       EnvManagerConfig(num_env_groups=1, group_size=2, tags=["tiny"],
                                        task_sets=lake_set(tmp_path, count=2, name="tiny", desc=TINY, max_steps=3)))
    batch = train.get_batch(batch_size=4, step=0)
    assert not any(t.failed for t in batch)
    metrics = train.metrics()
    failed = {name: value for name, value in metrics.items() if name.startswith("failed/")}
    # an AgentError (HTTP 400, not retried): status error; the second refused member may have
    # been cancelled with its group before its record came
    assert metrics["failed_members"] >= 1 and failed == {"failed/error": metrics["failed_members"]}, metrics
    assert metrics["dropped/failed"] >= 1
    train.get_batch(batch_size=4, step=1)
    metrics = train.metrics()  # none since the batch before
    assert metrics["failed_members"] == 0 and not [n for n in metrics if n.startswith("failed/")], metrics


def test_every_model_call_of_a_turn_counts_in_lag_and_times():
    """A turn of two calls (a plan sampled by version 0, the act after an update by 1):
    the lag and the model and gate times read the turn's last call only (lag 0, half the
    model time); every call counts now."""
    plan = {"policy_version": 0, "model_s": 1.5, "gate_wait_s": 0.25}
    turn = {"turn": 1, "policy_version": 1, "model_s": 0.5, "gate_wait_s": 0.25, "earlier_calls": [plan]}
    trajectory = Trajectory(tag="t", group_id=0, episode_id=0, member=0, trajectory_id="t", task_id="t", seed=None,
                            created_step=0, status="success", success=True, timings={"duration_s": 4.0},
                            record={"env_s": 1.0}, _turns=[turn])
    assert trajectory.policy_versions == [0]
    metrics = batch_metrics([trajectory], current_version=1, step=1, stats_now={}, stats_before={})
    assert metrics["staleness/lag_1"] == 1 and metrics["staleness/max_lag"] == 1
    assert metrics["time/model_s_mean"] == 2.0 and metrics["time/gate_wait_s_mean"] == 0.5
    assert metrics["time/other_s_mean"] == 0.5


def test_a_validations_failed_members_are_counted_as_failed_not_as_its_score(tmp_path, llm_server, schedulers):
    """get_batch(-1) hands its failed members back as they are (a validation report counts
    them); metrics() counts them among the failed members and leaves them out of the reward
    and the success rate, as a placeholder is in training: a request the server refused is no
    outcome of the policy. It said success_rate 0.5 and failed_members 0 for a validation
    whose every graded episode succeeded."""
    answered = iter(range(1_000_000))

    def policy(body):  # the first request is refused (HTTP 400: the agent's error, not retried)
        return {"status": 400, "message": "bad request"} if next(answered) < 1 else {"reply": "<answer>Right</answer>"}

    server = llm_server(policy=policy)
    val = schedulers(rl_config(tmp_path, server, num_rollouts=1, envs_per_worker=2),
                     EnvManagerConfig(group_size=1, tags=["tiny"],
                                      task_sets=lake_set(tmp_path, count=2, name="tiny", desc=TINY, max_steps=3)))
    report = val.get_batch(batch_size=-1, step=0)
    assert sorted(t.status for t in report) == ["error", "success"], [t.status for t in report]
    metrics = val.metrics()
    assert metrics["batch/trajectories"] == 2 and metrics["status/error"] == 1
    assert metrics["success_rate"] == 1.0 and metrics["reward/mean"] == 1.0, metrics
    assert metrics["tag/tiny/success_rate"] == 1.0 and metrics["tag/tiny/trajectories"] == 2, metrics
    assert metrics["failed_members"] == 1 and metrics["failed/error"] == 1, metrics


def test_a_batch_without_a_scored_member_has_no_reward_nor_success_rate_to_log():
    """A batch of placeholders only (every member failed, failed_member="placeholder") and a
    validation tag whose members all failed have no score: their reward/mean, reward/std and
    success_rate are NaN (a gap in W&B and TensorBoard), where they logged 0.0, a policy that
    fails everything, while no episode was measured; a tag that has scored members keeps its own."""
    def member(tag, status, placeholder=False, reward=0.0):
        return Trajectory(tag=tag, group_id=0, episode_id=0, member=0, trajectory_id=tag, task_id=tag, seed=None,
                          created_step=0, status=status, success=status == "success", reward=reward,
                          placeholder=placeholder, _turns=[])

    placeholders = batch_metrics([member("lake", "placeholder", placeholder=True)] * 2, current_version=0, step=0,
                                 stats_now={}, stats_before={})
    assert all(math.isnan(placeholders[k]) for k in ("reward/mean", "reward/std", "success_rate")), placeholders
    validation = batch_metrics([member("lake", "error"), member("sums", "success", reward=1.0)],
                               current_version=0, step=0, stats_now={}, stats_before={})
    assert math.isnan(validation["tag/lake/success_rate"]) and math.isnan(validation["tag/lake/reward_mean"])
    assert validation["tag/sums/success_rate"] == 1.0 and validation["success_rate"] == 1.0, validation


def test_the_counters_the_readme_names_are_in_stats_and_metrics_from_the_first_batch(tmp_path, table, schedulers):
    """A trainer that logs the counters the README names (``stats()["dropped_version_lag"]``,
    ``dropped_closed`` …) every step reads them at 0 before the first drop: stats() named a
    counter only once it had counted something, so that read was a KeyError in a healthy run,
    and the ``dropped/<reason>`` series of metrics() began at the first drop instead of at 0."""
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    section = readme.split("## For RL trainers", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r'stats\(\)\["(\w+)"\]', section)) | set(re.findall(r"`(dropped_\w+)`", section))
    assert {"dropped_version_lag", "dropped_abandoned", "dropped_closed", "partial_batches"} <= named, named
    _, server = table
    train = schedulers(rl_config(tmp_path, server), EnvManagerConfig(
        group_size=2, tags=["tiny"], task_sets=lake_set(tmp_path, count=2, name="tiny", desc=TINY, max_steps=3)),
        max_version_lag=1)
    train.get_batch(batch_size=4, step=0)
    stats, metrics = train.stats(), train.metrics()
    missing = sorted(name for name in named if name not in stats)
    assert not missing, f"stats() lacks {missing}: {stats}"
    assert {name: stats[name] for name in named} == dict.fromkeys(named, 0), stats
    dropped = {f"dropped/{name[len('dropped_'):]}" for name in named if name.startswith("dropped_")}
    assert {name: metrics.get(name) for name in dropped} == dict.fromkeys(dropped, 0), metrics
    assert stats["groups_dropped"] == 0 and stats["groups_started"] >= 2
