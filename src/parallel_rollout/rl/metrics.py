"""A batch's metrics: one flat dict of numbers, ready for W&B or TensorBoard.

``RolloutScheduler.metrics()`` returns it for the last batch ``get_batch`` returned. Keys are
``/``-separated names (W&B groups panels by their first part); every value is an int or a
float::

    batch/trajectories, batch/groups, batch/placeholders     what the batch holds
    reward/mean, reward/std, success_rate                    over its members that made an episode: not
                                                             placeholders, nor the failed members a
                                                             validation (get_batch(-1)) hands back;
                                                             NaN when none did (no score, not 0)
    tag/<tag>/trajectories, tag/<tag>/reward_mean, tag/<tag>/success_rate
    status/<status>                                          trajectories by final status
    staleness/lag_<k>                                        trajectories whose oldest turn came from
                                                             the policy version current - k
    staleness/max_lag
    time/episode_s_mean                                      per trajectory, split into:
    time/model_s_mean                                        the model's requests (aborted ones too)
    time/env_s_mean                                          the env's reset, steps and grading
    time/gate_wait_s_mean                                    waiting at the policy gate (updates)
    time/other_s_mean                                        the rest: the agent's own work, retry
                                                             backoff, a VM lease, the worker
    tokens/prompt, tokens/completion                         the batch's model usage
    tokens/no_logprob                                        sampled tokens the server sent no logprob
                                                             for (NaN in their segments' logprobs)
    dropped/<reason>                                         groups dropped since the previous batch
                                                             (stale, failed, filtered, closed …)
    failed_members, failed/<status>                          members that failed since the previous
                                                             batch, by their status (error, task_timeout …)
    scheduler/policy_version, scheduler/step

Nothing here needs a logger; ``log_metrics`` hands the dict to TensorBoard or W&B when one is
installed (neither is a dependency).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from typing import Any, Iterable

from ..agents.calls import calls_of
from .groups import Trajectory
from .segments import tokens_without_logprob


def batch_metrics(batch: list[Trajectory], current_version: int, step: int,
                  stats_now: dict[str, Any], stats_before: dict[str, Any]) -> dict[str, float]:
    """The metrics of one batch (see the module docstring); ``stats_*``: the scheduler's
    counters now and at the previous batch, for what happened in between."""
    real = [t for t in batch if not t.placeholder]
    out: dict[str, float] = {
        "batch/trajectories": len(batch),
        "batch/groups": len({t.group_id for t in batch}),
        "batch/placeholders": len(batch) - len(real),
        "scheduler/policy_version": current_version,
        "scheduler/step": step,
    }
    # a failed member has no score (never graded, or the agent's error): its stand-in 0 is no
    # outcome of the policy, as a placeholder's is not (a validation hands failed members back)
    scored = [t for t in real if not t.failed]
    out.update(_rewards(scored))
    for tag in sorted({t.tag for t in real}):
        tagged = [t for t in real if t.tag == tag]
        out[f"tag/{tag}/trajectories"] = len(tagged)
        rewards = _rewards([t for t in tagged if not t.failed])
        out[f"tag/{tag}/reward_mean"] = rewards["reward/mean"]
        out[f"tag/{tag}/success_rate"] = rewards["success_rate"]
    for status, count in sorted(Counter(t.status for t in batch).items()):
        out[f"status/{status}"] = count
    lags = [lag for t in real if (lag := _lag(t, current_version)) is not None]
    for lag, count in sorted(Counter(lags).items()):
        out[f"staleness/lag_{lag}"] = count
    out["staleness/max_lag"] = max(lags, default=0)
    episode, model, env, gate = zip(*[_times(t) for t in real]) if real else ((), (), (), ())
    out["time/episode_s_mean"] = _mean(episode)
    out["time/model_s_mean"] = _mean(model)
    out["time/env_s_mean"] = _mean(env)
    out["time/gate_wait_s_mean"] = _mean(gate)
    out["time/other_s_mean"] = _mean([max(0.0, e - m - v - g) for e, m, v, g in zip(episode, model, env, gate)])
    usage = [t.record.get("usage") or {} for t in real]
    out["tokens/prompt"] = sum(int(u.get("prompt_tokens") or 0) for u in usage)
    out["tokens/completion"] = sum(int(u.get("completion_tokens") or 0) for u in usage)
    out["tokens/no_logprob"] = sum(tokens_without_logprob(t.turns)[1] for t in real)
    for name, value in stats_now.items():
        if name.startswith("dropped_") and name != "dropped_":
            out[f"dropped/{name[len('dropped_'):]}"] = value - stats_before.get(name, 0)
    out["failed_members"] = stats_now.get("members_failed", 0) - stats_before.get("members_failed", 0)
    for name, value in stats_now.items():
        new = value - stats_before.get(name, 0)
        if name.startswith("failed_") and new:
            out[f"failed/{name[len('failed_'):]}"] = new
    return out


def log_metrics(metrics: dict[str, float], step: int, logger: Any) -> None:
    """Hand ``metrics`` to a TensorBoard ``SummaryWriter`` (``add_scalar``) or to W&B
    (a run or the ``wandb`` module: ``log``)."""
    if hasattr(logger, "add_scalar"):
        for name, value in metrics.items():
            logger.add_scalar(name, value, step)
    elif hasattr(logger, "log"):
        logger.log(dict(metrics), step=step)
    else:
        raise TypeError(f"{type(logger).__name__} is neither a SummaryWriter (add_scalar) nor a W&B run (log)")


def _rewards(trajectories: list[Trajectory]) -> dict[str, float]:
    """Reward mean and spread and success rate of scored members; NaN for none (a batch of
    placeholders only, a validation tag whose members all failed): a logged 0 read as a
    policy that fails everything where nothing was measured."""
    if not trajectories:
        return {"reward/mean": math.nan, "reward/std": math.nan, "success_rate": math.nan}
    rewards = [t.reward for t in trajectories]
    return {"reward/mean": _mean(rewards),
            "reward/std": statistics.pstdev(rewards) if len(rewards) > 1 else 0.0,
            "success_rate": _mean([1.0 if t.success else 0.0 for t in trajectories])}


def _lag(trajectory: Trajectory, current_version: int) -> int | None:
    versions = [v for v in trajectory.policy_versions if isinstance(v, int)]
    return current_version - min(versions) if versions else None


def _times(trajectory: Trajectory) -> tuple[float, float, float, float]:
    """(episode, model, env, gate wait) seconds of one trajectory: the worker measured the
    env's calls (``env_s``); a record without it (an agent of its own that keeps no turns'
    times) counts the episode's rest, past the model and the gate, as the env's."""
    episode = float(trajectory.timings.get("duration_s") or 0.0)
    model = gate = 0.0
    for call in (call for turn in trajectory.turns for call in calls_of(turn)):  # each model call of a turn
        if isinstance(call.get("model_s"), (int, float)):
            model += call["model_s"]
        else:
            started, ended = call.get("model_started_at"), call.get("model_ended_at")
            if isinstance(started, (int, float)) and isinstance(ended, (int, float)):
                model += max(0.0, ended - started)
        gate += float(call.get("gate_wait_s") or 0.0)
    env = trajectory.record.get("env_s")
    if not isinstance(env, (int, float)):
        env = max(0.0, episode - model - gate)
    return episode, model, float(env), gate


def _mean(values: Iterable[float]) -> float:
    values = list(values)
    return float(statistics.fmean(values)) if values else 0.0
