"""A cut member's reward (``trajectory.cut``: a reply cut at max_tokens under
``on_length="end"``, a context overflow) in a GRPO group: 0 by default, or with
``cut_reward="so_far"`` the env's reward of the episode as it stood, as ROLL's env managers
keep the step rewards of a truncated episode (Sokoban's -0.1 a move)."""

from __future__ import annotations

import json
import threading

import pytest

from llm_server import LLMServer
from parallel_rollout.errors import ConfigError
from parallel_rollout.rl import EnvManagerConfig, TaskSet
from rl_support import rl_config

#: the player stands under a wall: every "Up" is a move that moves nothing (-0.1)
WALLED = ["######",
          "#@$._#",
          "#_$._#",
          "######"]


def one_plays_one_is_cut():
    """Of each group's two members, the first to ask plays Up to the end of its moves (the
    env's max_steps); the other plays Up once, then its reply is cut at max_tokens."""
    lock, first_turns = threading.Lock(), [0]

    def policy(body):
        replies = [m["content"] for m in body["messages"] if m["role"] == "assistant"]
        if not replies:
            with lock:
                first_turns[0] += 1
                who = "A" if first_turns[0] % 2 else "B"
            return {"reply": f"{who}: <answer>Up</answer>"}
        if replies[0].startswith("B"):
            return {"reply": "B: let me think about the boxes and", "finish_reason": "length"}
        return {"reply": "A: <answer>Up</answer>"}
    return policy


@pytest.fixture
def walled(tmp_path):
    path = tmp_path / "walled.jsonl"
    path.write_text(json.dumps({"id": "walled", "mode": "gym", "game": "Sokoban", "room": WALLED,
                                "max_steps": 3}) + "\n")
    return {"walled": TaskSet("gym", str(path))}


def test_a_cut_members_reward_is_zero_or_its_step_rewards_so_far(tmp_path, walled, schedulers):
    server = LLMServer(policy=one_plays_one_is_cut()).start()
    try:
        config = rl_config(tmp_path, server, num_rollouts=1, envs_per_worker=2, on_length="end")
        train = schedulers(config, EnvManagerConfig(num_env_groups=1, group_size=2, tags=["walled"],
                                                    task_sets=walled))
        rewards = {t.record["status"]: t.reward for t in train.get_batch(2, step=0)}
        # the default: the cut member's 0 outscores the member that played three moves
        assert rewards == {"failure": -0.3, "truncated": 0.0}
        graded = train.sibling(EnvManagerConfig(num_env_groups=1, group_size=2, tags=["walled"], task_sets=walled),
                               name="graded", cut_reward="so_far")
        batch = graded.get_batch(2, step=0)
        rewards = {t.record["status"]: t.reward for t in batch}
        assert rewards == {"failure": -0.3, "truncated": -0.1}  # its one move's step reward
        (cut,) = [t for t in batch if t.cut]
        assert cut.record["eval"]["actions"] == ["Up"] and not cut.success
        assert graded.sibling(EnvManagerConfig(group_size=1, tags=["walled"], task_sets=walled)).cut_reward == "so_far"
        with pytest.raises(ConfigError, match="cut_reward must be 'zero' or 'so_far'"):
            train.sibling(EnvManagerConfig(group_size=1, tags=["walled"], task_sets=walled), cut_reward="steps")
    finally:
        server.stop()
