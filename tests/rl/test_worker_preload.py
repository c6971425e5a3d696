"""A model-calling agent's ``openai`` package is imported by the workers' server, once per
run, before any worker forks: no worker imports it in its first attempt, where it counted on
the task's clock (and in metrics() as the trajectory's "other" time) and every worker of the
run paid it on its own (a second or more of CPU each on a busy host)."""

from __future__ import annotations

from llm_server import LLMServer
from parallel_rollout.rl import EnvManagerConfig
from rl_support import TINY, lake_set, rl_config


def test_a_model_calling_agents_client_package_is_imported_before_its_first_attempt(tmp_path, schedulers):
    server = LLMServer(policy=lambda body: {"reply": "<answer>Right</answer>"}).start()
    try:
        train = schedulers(rl_config(tmp_path, server, agent="preload_agents:ImportedBefore", envs_per_worker=2),
                           EnvManagerConfig(group_size=2, tags=["tiny"],
                                            task_sets=lake_set(tmp_path, count=2, name="tiny", desc=TINY, max_steps=3)))
        batch = train.get_batch(4, step=0)  # every worker's first attempts
    finally:
        server.stop()
    assert [(t.status, (t.record.get("failure") or {}).get("message")) for t in batch] == [("success", None)] * 4
