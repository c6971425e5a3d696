"""A trainer's ``RunConfig(max_turns=N)`` is the turns of its episodes, as ``--max-turns N`` is
a run's: a mode with a default of its own (math's one answer) takes the trainer's N, whether N
differs from RunConfig's default or equals it (a RunConfig made in Python has no ``explicit``
of its own, which the scheduler's engine config is told)."""

from __future__ import annotations

import json

import pytest

from llm_server import LLMServer
from parallel_rollout.config import RunConfig
from parallel_rollout.rl import EnvManagerConfig, TaskSet
from rl_support import rl_config


def second_try_right(body):
    """Wrong at first, right once the env said "incorrect": an episode of two tries."""
    return {"reply": "\\boxed{4}" if "incorrect" in json.dumps(body["messages"]) else "\\boxed{5}"}


@pytest.mark.parametrize("max_turns", [3, RunConfig().max_turns], ids=["other-than-default", "the-default"])
def test_a_trainers_max_turns_gives_a_math_episode_its_tries(tmp_path, schedulers, max_turns):
    sums = tmp_path / "sums.jsonl"
    sums.write_text(json.dumps({"id": "sum", "problem": "What is 2 + 2?", "answer": "4"}) + "\n")
    server = LLMServer(policy=second_try_right).start()
    try:
        train = schedulers(rl_config(tmp_path, server, mode="math", data=None, num_rollouts=1, envs_per_worker=1,
                                     max_turns=max_turns),
                           EnvManagerConfig(group_size=1, tags=["sums"], task_sets={"sums": TaskSet("math", str(sums))}))
        (trajectory,) = train.get_batch(batch_size=1, step=0)
        # before: one try (math's default, the trainer's max_turns ignored), failure, reward 0
        assert (trajectory.status, trajectory.reward, len(trajectory.turns)) == ("success", 1.0, 2), trajectory.record
    finally:
        server.stop()
