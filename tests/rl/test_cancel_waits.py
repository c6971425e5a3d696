"""A cancelled member's model call ends at once wherever the cancel finds it: in a request
(test_aborts.py: streaming, queued at the server) or waiting between two requests of its
retries (a 429's Retry-After, a 5xx's backoff), where the call slept the wait out and only
its next request saw the cancel."""

from __future__ import annotations

import threading
import time

import pytest

from llm_server import llm_server  # noqa: F401 - fixture
from parallel_rollout.rl import EnvManagerConfig
from rl_support import TINY, lake_set, rl_config
from table_policy import TablePolicy


def _wait(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@pytest.mark.parametrize("refusal", [{"status": 429, "retry_after": 60}, {"status": 503, "retry_after": 60}],
                         ids=["429", "503"])
def test_a_member_cancelled_while_its_call_waits_to_retry_ends_at_once(tmp_path, llm_server, schedulers, refusal):
    """group_size_redundancy=1: the loser's first request is answered 429 (or 503) with
    Retry-After 60 s; the winners finish and the loser is cancelled during that wait. Its
    attempt ends at once (the old code slept the 60 s out, the worker's env loop held, before
    the next request saw the cancel), and no request is sent after the cancel."""
    table = TablePolicy(seed=3)
    answered = [0]
    lock = threading.Lock()
    refused = threading.Event()

    def first_refused(body):
        with lock:
            answered[0] += 1
            first = answered[0] == 1
        if first:
            refused.set()
            return dict(refusal)
        return table(body)

    server = llm_server(policy=first_refused)
    train = schedulers(rl_config(tmp_path, server, num_rollouts=1, envs_per_worker=4, task_timeout=120.0,
                                 max_retries=2),
                       EnvManagerConfig(num_env_groups=1, group_size=2, group_size_redundancy=1, tags=["tiny"],
                                        task_sets=lake_set(tmp_path, name="tiny", desc=TINY, max_steps=2)))
    batch = train.get_batch(batch_size=2, step=0)
    assert len(batch) == 2 and refused.is_set()
    assert train.stats()["members_cancelled"] == 1
    sent = len(server.requests)
    assert _wait(lambda: train._shared.engine.in_flight() == 0, timeout=10), \
        "the cancelled attempt still runs: its call sleeps out the Retry-After"
    assert len(server.requests) == sent  # the cancelled call sent nothing more
