"""Fixtures of the RL tests: the table policy served by the local OpenAI-compatible test
server, and schedulers closed after each test."""

from __future__ import annotations

import pytest

from llm_server import LLMServer
from parallel_rollout.rl import RolloutScheduler
from table_policy import TablePolicy


@pytest.fixture
def table():
    """(TablePolicy, LLMServer serving it); the server stops after the test."""
    policy = TablePolicy(seed=0)
    server = LLMServer(policy=policy, routes=policy.routes()).start()
    yield policy, server
    server.stop()


@pytest.fixture
def schedulers():
    """Schedulers a test makes are closed after it, even when it fails."""
    made: list[RolloutScheduler] = []

    def make(*args, **kwargs) -> RolloutScheduler:
        scheduler = RolloutScheduler(*args, **kwargs)
        made.append(scheduler)
        return scheduler

    yield make
    for scheduler in reversed(made):
        scheduler.close()
