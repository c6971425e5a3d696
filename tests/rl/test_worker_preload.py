"""A model-calling agent's ``openai`` package is imported by the workers' server, once per
run, before any worker forks: no worker imports it in its first attempt, where it counted on
the task's clock (and in metrics() as the trajectory's "other" time) and every worker of the
run paid it on its own (a second or more of CPU each on a busy host)."""

from __future__ import annotations

import json
import logging
import os

from llm_server import LLMServer
from parallel_rollout.rl import EnvManagerConfig, TaskSet
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


def test_a_slow_plugin_module_of_both_mode_and_agent_is_named_once(tmp_path, schedulers, monkeypatch):
    """A mode and an agent of one module (``desk:Lake``, ``desk:Player``) whose import in the
    workers' server takes 7 s: the start's line named it twice, "plugin modules (desk, desk)"."""
    (tmp_path / "desk.py").write_text(
        "import os, time\n"
        f"if os.getpid() != {os.getpid()}:  # not in the trainer's process: the workers' server\n"
        "    time.sleep(7)\n"
        "from parallel_rollout.agents.openai_agent import OpenAIAgent\n"
        "from parallel_rollout.envs.gym import GymEnv\n"
        "class Lake(GymEnv):\n    pass\n"
        "class Player(OpenAIAgent):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    (tmp_path / "lakes.jsonl").write_text(json.dumps({"id": "l0", "desc": TINY, "max_steps": 3}) + "\n")
    server = LLMServer(policy=lambda body: {"reply": "<answer>Right</answer>"}).start()
    said: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: said.append(record.getMessage())  # the project's logger does not propagate
    logging.getLogger("parallel_rollout").addHandler(handler)
    try:
        train = schedulers(rl_config(tmp_path, server, mode="desk:Lake", data=None, agent="desk:Player"),
                           EnvManagerConfig(group_size=1, tags=["lakes"], task_sets={
                               "lakes": TaskSet("desk:Lake", str(tmp_path / "lakes.jsonl"))}))
        train.get_batch(1, step=0)
    finally:
        logging.getLogger("parallel_rollout").removeHandler(handler)
        server.stop()
    said = [line for line in said if "still importing" in line]
    assert said and all("plugin modules (desk) (" in line for line in said), said
