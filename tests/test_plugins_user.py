"""A user's own ``module:Class`` plugins (``--mode myenv:DoubleEnv``, ``--agent
myagent:Class``), through the CLI and the Python API as a user runs them: the settings they
may take, classes that cannot run, modules that fail at import or take long to import."""

from __future__ import annotations

import json
import re
from pathlib import Path

from click.testing import CliRunner

from conftest import assert_exactly_once, write_tasks
from llm_server import first_user_message, llm_server, reply_with_counts  # noqa: F401 - a fixture
from parallel_rollout.cli import main
from test_config import assert_usage_error

DOUBLE = "user_plugins:DoubleEnv"


def double_tasks(tmp_path: Path, numbers=(2, 5, 7)) -> Path:
    return write_tasks(tmp_path / "tasks.jsonl", [{"id": f"d{n}", "n": n} for n in numbers])


def invoke(tmp_path: Path, *args: str):
    """The CLI in-process, its run folder under tmp_path/out."""
    return CliRunner().invoke(main, ["--output-dir", str(tmp_path / "out"), "--no-progress", *args])


def test_a_plugin_agent_takes_the_model_settings_of_its_model_client(tmp_path, llm_server):
    """Every agent has ``self.model``: a module:Class agent that calls it is given --model,
    --base-url and --temperature (they were refused unless the class declared ``options``)."""

    def twice(body):
        n = int(re.search(r"twice (\d+)", first_user_message(body)).group(1))
        return reply_with_counts(body, str(2 * n))

    server = llm_server(policy=twice)
    data = double_tasks(tmp_path)
    result = invoke(tmp_path, "--mode", DOUBLE, "--agent", "user_plugins:ModelAgent", "--data", str(data),
                    "--model", "my-model", "--base-url", server.url, "--temperature", "0.25",
                    "--run-id", "model")
    assert result.exit_code == 0, (result.output, result.exception)
    finals = assert_exactly_once(tmp_path / "out" / "model", {"d2#0", "d5#0", "d7#0"})
    assert {r["reward"] for r in finals.values()} == {1.0}
    assert len(server.requests) == 3
    assert {(r["body"]["model"], r["body"]["temperature"]) for r in server.requests} == {("my-model", 0.25)}


def test_agents_that_call_no_model_still_refuse_the_model_settings(tmp_path):
    data = double_tasks(tmp_path)
    assert_usage_error(invoke(tmp_path, "--mode", DOUBLE, "--agent", "oracle", "--data", str(data), "--model", "x"),
                   tmp_path, "--model is not used by this run", "agents that call a model")
    assert_usage_error(invoke(tmp_path, "--mode", DOUBLE, "--agent", "command", "--agent-cmd", "cat", "--data",
                          str(data), "--base-url", "http://127.0.0.1:9/v1"),
                   tmp_path, "--base-url is not used by this run")
    # the openai agent's own: a plugin agent's model client sends no tools
    assert_usage_error(invoke(tmp_path, "--mode", DOUBLE, "--agent", "user_plugins:ModelAgent", "--data", str(data),
                          "--tool-calls"), tmp_path, "--tool-calls is not used by this run", "openai agent")
