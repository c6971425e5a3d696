"""A server that sends token ids but no logprobs (logprobs null: one that does not return
them, or was not asked as it reads them) filled every sampled token's logprob in
``segments()`` with NaN and said nothing: a trainer's importance ratio, its KL, then its
loss were NaN. ``get_batch`` says so once, naming the count and a trajectory, and
``metrics()["tokens/no_logprob"]`` counts them in every batch."""

from __future__ import annotations

import logging
import math

from llm_server import LLMServer
from parallel_rollout.rl import EnvManagerConfig
from rl_support import rl_config, tiny_lakes


def _no_logprobs(body):
    """One token a reply, its id streamed with ``logprobs: null``, as vLLM streams a request
    that did not get logprobs."""
    return {"chunks": [{"index": 0, "delta": {"role": "assistant", "content": "<answer>Right</answer>"},
                        "token_ids": [2], "logprobs": None, "finish_reason": "stop"}],
            "prompt_token_ids": [5, 6]}


def _warnings(caplog):
    return [r.getMessage() for r in caplog.records if "have no logprob" in r.getMessage()]


def test_a_batch_without_logprobs_is_said_once_and_counted(tmp_path, schedulers, caplog):
    server = LLMServer(policy=_no_logprobs).start()
    try:
        env = EnvManagerConfig(num_env_groups=1, group_size=2, tags=["lakes"], task_sets=tiny_lakes(tmp_path, "lakes", 2))
        train = schedulers(rl_config(tmp_path, server), env, async_generation_ratio=0)
        with caplog.at_level(logging.WARNING, logger="parallel_rollout"):
            batch = train.get_batch(batch_size=2, step=0, timeout=60)
            sampled = [lp for t in batch for s in t.segments() for lp, m in zip(s.logprobs, s.loss_mask) if m]
            assert sampled and all(math.isnan(lp) for lp in sampled)
            said = _warnings(caplog)
            assert len(said) == 1, said
            assert f"{len(sampled)} of {len(sampled)} sampled tokens of this batch have no logprob" in said[0]
            assert batch[0].trajectory_id in said[0] or batch[1].trajectory_id in said[0]
            assert train.metrics()["tokens/no_logprob"] == len(sampled)
            train.get_batch(batch_size=2, step=1, timeout=60)
            assert len(_warnings(caplog)) == 1  # once per scheduler
            assert train.metrics()["tokens/no_logprob"] > 0
    finally:
        server.stop()


def test_a_batch_with_logprobs_counts_none(tmp_path, table, schedulers, caplog):
    _, server = table
    env = EnvManagerConfig(num_env_groups=1, group_size=2, tags=["lakes"], task_sets=tiny_lakes(tmp_path, "lakes", 2))
    train = schedulers(rl_config(tmp_path, server), env, async_generation_ratio=0)
    with caplog.at_level(logging.WARNING, logger="parallel_rollout"):
        train.get_batch(batch_size=2, step=0, timeout=60)
    assert train.metrics()["tokens/no_logprob"] == 0
    assert not _warnings(caplog)
