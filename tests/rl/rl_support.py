"""Helpers of the RL tests: a run config pointing the openai agent at the local test server,
and small FrozenLake task sets."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from llm_server import LLMServer
from parallel_rollout.config import RunConfig
from parallel_rollout.rl import TaskSet

CLASSIC = ["SFFF", "FHFH", "FFFH", "HFFG"]


def rl_config(tmp_path: Path, server: LLMServer, **changes) -> RunConfig:
    """A gym run config whose openai agent talks to ``server``; 2 workers × 4 env loops."""
    values = dict(mode="gym", data="frozenlake", agent="openai", base_url=server.url, model="table",
                  num_rollouts=2, envs_per_worker=4, output_dir=str(tmp_path / "out"), progress=False,
                  task_timeout=120.0, max_retries=2, api_timeout_s=30.0)
    if changes.get("agent") == "command":  # it calls no model through the client: run() refuses its settings
        values = {name: value for name, value in values.items() if name not in ("base_url", "model", "api_timeout_s")}
    values.update(changes)
    if values.get("model") is not None and values["model"] not in server.models:
        # it serves the model asked for, as vLLM lists its served name (the scheduler's
        # endpoint check reads GET /models)
        server.models.append(values["model"])
    return RunConfig(**values)


#: a 1x3 lake: the random policy reaches G in two moves about one time in ten
TINY = ["SFG"]


def lake_set(tmp_path: Path, count: int = 1, name: str = "lakes", desc: list[str] = CLASSIC,
             **fields) -> dict[str, TaskSet]:
    """A task set of ``count`` copies of a lake (the classic 4x4 one unless told; not slippery)."""
    path = tmp_path / f"{name}.jsonl"
    fields = {"max_steps": 12, **fields}
    with path.open("w") as fh:
        for index in range(count):
            fh.write(json.dumps({"id": f"{name}{index}", "mode": "gym", "desc": desc, "seed": index,
                                 **fields}) + "\n")
    return {name: TaskSet("gym", str(path))}


def tiny_lakes(tmp_path: Path, name: str, count: int, desc: list[str] = TINY) -> dict[str, TaskSet]:
    """``count`` different lakes (distinct ids and seeds) of one tag, three moves each."""
    return lake_set(tmp_path, count, name, desc, max_steps=3)


#: a reply that moves right: the tiny lake's goal in two
RIGHT = {"reply": "<answer>Right</answer>"}


class Switch:
    """A model whose policy each test sets (``switch.policy = …``): one test server and one
    engine can serve a whole module."""

    def __init__(self, policy) -> None:
        self.default = self.policy = policy

    def __call__(self, body):
        return self.policy(body)


def random_moves(seed: int = 0):
    """A model policy for the test server that answers a random FrozenLake move."""
    import random

    rng = random.Random(seed)
    return lambda body: {"reply": f"<answer>{rng.choice(['Left', 'Down', 'Right', 'Up'])}</answer>"}


def by_group(batch) -> dict[str, list]:
    """A batch's trajectories by their group id."""
    groups = defaultdict(list)
    for trajectory in batch:
        groups[trajectory.group_id].append(trajectory)
    return groups
