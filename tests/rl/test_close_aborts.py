"""close() ends the model requests in flight at the server, an abort_url told too: the
engine's workers were stopped mid-request, which closed their connections but never told
an ``abort_url`` (a server that must be told, README "Weight updates"), so such a server
decoded every request of the closed scheduler on to its max_tokens."""

from __future__ import annotations

import time

from llm_server import LLMServer
from parallel_rollout.errors import RolloutError
from parallel_rollout.rl import EnvManagerConfig
from rl_support import rl_config, tiny_lakes


def _slow(body):
    """A reply of 40 tokens at 10 a second: in flight for 4 s."""
    return {"reply": "<answer>Right</answer>" + " x" * 39, "token_ids": list(range(40)), "logprobs": [-0.1] * 40,
            "prompt_token_ids": [1, 2], "token_rate": 10}


def test_close_tells_the_abort_url_of_each_request_in_flight(tmp_path, schedulers):
    told: list[dict] = []
    server = LLMServer(policy=_slow, routes={"/abort_request": lambda body: told.append(body) or {}}).start()
    try:
        env = EnvManagerConfig(num_env_groups=1, group_size=2, tags=["lakes"], task_sets=tiny_lakes(tmp_path, "lakes", 2))
        train = schedulers(rl_config(tmp_path, server, num_rollouts=1, envs_per_worker=2, abort_url="/abort_request"),
                           env, async_generation_ratio=0)
        try:
            train.get_batch(batch_size=2, step=0, timeout=1.5)  # both members' first replies in flight
        except RolloutError:  # BatchTimeout
            pass
        deadline = time.monotonic() + 10
        while len([r for r in server.requests if r["body"].get("messages")]) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        train.close()
        deadline = time.monotonic() + 5
        while (len(told) < 2 or len(server.aborts) < 2) and time.monotonic() < deadline:
            time.sleep(0.05)
        asked = [r for r in server.requests if r["body"].get("messages")]
        assert len(asked) == 2, "no request went out after close() began"
        assert sorted(t["request_id"] for t in told) == ["cmpl-0", "cmpl-1"], told  # each stream's id, once
        assert len(server.aborts) == 2  # and each stream closed
    finally:
        server.stop()
