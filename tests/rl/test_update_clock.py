"""A weight update does not count toward --task-timeout: suspend() stops every task clock
until resume(), so an update longer than the task timeout times no episode out."""

from __future__ import annotations

import threading
import time

import pytest

from llm_server import LLMServer
from parallel_rollout.rl import EnvManagerConfig
from rl_support import lake_set, rl_config

TIMEOUT_S = 5.0


def _stays_put(body):
    time.sleep(0.1)  # a model that takes its time
    return {"reply": "<answer>Left</answer>"}  # at the left wall: the episode runs to max_steps


@pytest.mark.slow
def test_a_suspend_twice_the_task_timeout_times_nothing_out(tmp_path, schedulers):
    server = LLMServer(policy=_stays_put).start()
    try:
        # short episodes: a warm-up episode that outlasts the timeout on a loaded machine
        # gets its worker killed, and the next one starts cold again
        sets = lake_set(tmp_path, name="corridor", desc=["SFFFFFFG"], max_steps=6)
        train = schedulers(rl_config(tmp_path, server, task_timeout=TIMEOUT_S, num_rollouts=1,
                                     envs_per_worker=2, max_retries=0),
                           EnvManagerConfig(num_env_groups=1, group_size=2, tags=["corridor"], task_sets=sets))
        train.get_batch(batch_size=2, step=0)  # warm: the env loops' first episode imports their parts
        before = len(server.requests)
        batch: list = []
        getter = threading.Thread(target=lambda: batch.extend(train.get_batch(batch_size=2, step=1)))
        getter.start()
        deadline = time.monotonic() + 60
        while len({r["headers"].get("x-session-id") for r in server.requests[before:]}) < 2:
            assert time.monotonic() < deadline, "the episodes did not start"
            time.sleep(0.02)  # until both episodes are under way (one session id each)
        train.suspend()
        time.sleep(2 * TIMEOUT_S + 1)  # the update: longer than the task timeout
        train.resume(policy_version=1)
        getter.join(timeout=60)
        assert not getter.is_alive(), "get_batch did not return"
        assert len(batch) == 2
        assert all(t.status not in ("task_timeout", "worker_died") for t in batch), [t.status for t in batch]
        assert train.stats().get("dropped_failed", 0) == 0
        # turns before and after the update: the episodes went on where they were
        assert all({0, 1} <= set(t.policy_versions) for t in batch), [t.policy_versions for t in batch]
    finally:
        server.stop()
