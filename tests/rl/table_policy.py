"""A tiny trainable policy served as a chat model: a table of logits, one row per FrozenLake
cell, four actions per row. The language model is the one stand-in the tests allow; this one
can actually learn, so a test can run a real GRPO loop against the scheduler.

Served through ``llm_server.LLMServer`` (127.0.0.1)::

    POST /v1/chat/completions   reads "You are at row R, column C." in the last user message,
                                samples an action from softmax(logits[R*cols+C]) and answers
                                "<answer>Right</answer>" with token_ids [action],
                                prompt_token_ids [cell], logprobs [log p] (as vLLM would with
                                return_token_ids + logprobs) and "policy_version"
    POST /v1/weights            {"logits": [[…] × 4] × cells, "version": v}: a weight push

``grpo_update`` is the trainer's side: group-normalised advantages, a clipped importance ratio
against the logprobs recorded at generation time (turns may be one policy version old).
"""

from __future__ import annotations

import math
import random
import re
import threading
from typing import Any

ACTIONS = ("Left", "Down", "Right", "Up")
_WHERE = re.compile(r"You are at row (\d+), column (\d+)\.")


def softmax(row: list[float]) -> list[float]:
    top = max(row)
    exps = [math.exp(x - top) for x in row]
    total = sum(exps)
    return [e / total for e in exps]


class TablePolicy:
    """Logits per cell; thread-safe sampling and weight pushes."""

    def __init__(self, cols: int = 4, cells: int = 16, seed: int = 0, delay_s: float = 0.0) -> None:
        self.cols = cols
        self.logits = [[0.0] * len(ACTIONS) for _ in range(cells)]
        self.version = 0
        self.delay_s = delay_s
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        #: (policy version, monotonic time) of every answered request
        self.served: list[tuple[int, float]] = []

    def routes(self) -> dict[str, Any]:
        """The extra endpoints for LLMServer."""
        return {"/v1/weights": self.push}

    def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        import time

        users = [m.get("content") for m in body.get("messages", []) if m.get("role") == "user"]
        if not users:  # a torn request from a client killed mid-send
            return {"status": 400}
        match = _WHERE.search(str(users[-1]))
        if match is None:
            raise AssertionError(f"no position in {str(users[-1])[:200]!r}")
        cell = int(match.group(1)) * self.cols + int(match.group(2))
        if self.delay_s:
            time.sleep(self.delay_s)
        with self._lock:
            probs = softmax(self.logits[cell])
            action = self._rng.choices(range(len(ACTIONS)), weights=probs)[0]
            version = self.version
            self.served.append((version, time.monotonic()))
        return {"reply": f"<answer>{ACTIONS[action]}</answer>", "token_ids": [action],
                "logprobs": [math.log(probs[action])], "prompt_token_ids": [cell],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1},
                "extra": {"policy_version": version}}

    def push(self, body: dict[str, Any]) -> dict[str, Any]:
        """Replace the table (a trainer's weight update)."""
        with self._lock:
            self.logits = [list(map(float, row)) for row in body["logits"]]
            self.version = int(body["version"])
        return {"version": self.version}


def grpo_update(logits: list[list[float]], groups: list[list[Any]], lr: float = 2.0, clip: float = 0.2) -> int:
    """One GRPO step on ``logits`` in place from whole groups of trajectories (objects with
    ``reward`` and ``turns``, each turn holding prompt_token_ids, token_ids, logprobs).
    Returns the number of turns that contributed."""
    used = 0
    for group in groups:
        rewards = [t.reward for t in group]
        mean = sum(rewards) / len(rewards)
        std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards))
        if std == 0:
            continue
        for trajectory in group:
            advantage = (trajectory.reward - mean) / (std + 1e-6)
            turns = [t for t in trajectory.turns if t.get("token_ids")]
            for turn in turns:
                cell, action = turn["prompt_token_ids"][0], turn["token_ids"][0]
                probs = softmax(logits[cell])
                ratio = math.exp(math.log(probs[action]) - turn["logprobs"][0])
                # PPO's clip: no push past the trust region of the policy that generated it
                if (advantage > 0 and ratio > 1 + clip) or (advantage < 0 and ratio < 1 - clip):
                    continue
                for a in range(len(ACTIONS)):
                    grad = (1.0 if a == action else 0.0) - probs[a]
                    logits[cell][a] += lr * advantage * ratio * grad / len(turns)
                used += 1
    return used
