"""A ``module:Class`` agent that calls the model through ``self.model``, through the CLI: the
checks of its model settings at start and with --check-endpoint, as the openai agent gets
them (tests/model_plugins.py holds the agents)."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import SHELL_TASKS, assert_exactly_once, read_results, write_tasks
from llm_server import llm_server, shell_solver  # noqa: F401 - a fixture
from readme_support import readme_section
from parallel_rollout.cli import main
from test_config import assert_usage_error

DOUBLE = "user_plugins:DoubleEnv"


@pytest.fixture
def no_key(monkeypatch):
    """No OPENAI_API_KEY, no OPENAI_BASE_URL: the default endpoint, OpenAI's, needs a key."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


def double_tasks(tmp_path: Path) -> Path:
    return write_tasks(tmp_path / "tasks.jsonl", [{"id": f"d{n}", "n": n} for n in (2, 5, 7)])


def invoke(tmp_path: Path, *args: str, data: Path | None = None):
    """The CLI in-process on ``data`` (three DoubleEnv tasks by default), its run folder under
    tmp_path/out."""
    return CliRunner().invoke(main, ["--output-dir", str(tmp_path / "out"), "--no-progress", "--mode", DOUBLE,
                                     "--data", str(data or double_tasks(tmp_path)), *args])


def test_a_plugin_agent_given_a_model_has_its_key_checked_at_start(tmp_path, no_key):
    """`--agent module:Class --model m` with no key passed --dry-run and failed every task
    as `error` 'ConfigError: --agent openai needs OPENAI_API_KEY' (final, exit 0)."""
    says = "--agent user_plugins:ModelAgent needs OPENAI_API_KEY"
    assert_usage_error(invoke(tmp_path, "--agent", "user_plugins:ModelAgent", "--model", "m"), tmp_path, says)
    dry = invoke(tmp_path, "--agent", "user_plugins:ModelAgent", "--model", "m", "--dry-run")
    assert dry.exit_code == 2 and f"agent: {says}" in " ".join(dry.output.split()), dry.output
    # a class that says it calls the model is checked without --model
    assert_usage_error(invoke(tmp_path, "--agent", "model_plugins:DeclaredModelAgent"), tmp_path,
                       "--agent model_plugins:DeclaredModelAgent needs OPENAI_API_KEY")


def test_a_plugin_agent_given_no_model_setting_stops_the_run_at_its_first_request(tmp_path, no_key):
    """The start cannot tell that it calls the model: its first request finds no key, which
    stops the run (exit 2) with nothing graded, its samples left to a resume."""
    result = invoke(tmp_path, "--agent", "user_plugins:ModelAgent", "--run-id", "late")
    assert result.exit_code == 2, (result.output, result.exception)
    records = read_results(tmp_path / "out" / "late")
    assert records and {r["status"] for r in records} == {"endpoint_refused"}, records
    assert all(r["infrastructure"] and not r["final"] for r in records), records
    assert "--agent user_plugins:ModelAgent needs OPENAI_API_KEY" in records[0]["failure"]["message"]


def test_a_plugin_agent_with_a_local_server_needs_no_key(tmp_path, no_key, llm_server):
    server = llm_server(policy=lambda body: {"reply": "4"})
    result = invoke(tmp_path, "--agent", "user_plugins:ModelAgent", "--model", "m", "--base-url", server.url,
                    "--dry-run")
    assert result.exit_code == 0, result.output
    assert "the user_plugins:ModelAgent agent's settings and its model's" in result.output


def test_check_endpoint_asks_a_plugin_agents_model_endpoint(tmp_path, no_key, llm_server):
    """--check-endpoint refused every agent but openai: 'the … agent calls no model endpoint'."""
    server = llm_server()
    server.models = ["test-model"]
    asked = invoke(tmp_path, "--agent", "user_plugins:ModelAgent", "--model", "test-model", "--base-url", server.url,
                   "--dry-run", "--check-endpoint")
    assert asked.exit_code == 0, asked.output
    assert server.model_listings == 1 and f"{server.url} answers with 1 model(s)" in asked.output
    wrong = invoke(tmp_path, "--agent", "user_plugins:ModelAgent", "--model", "no-such-model", "--base-url",
                   server.url, "--dry-run", "--check-endpoint")
    assert wrong.exit_code == 2 and "does not list the model 'no-such-model'" in wrong.output, wrong.output
    # OpenAI's endpoint without a key: named for the plugin, not asked
    keyless = invoke(tmp_path, "--agent", "user_plugins:ModelAgent", "--dry-run", "--check-endpoint")
    assert keyless.exit_code == 2, keyless.output
    assert "endpoint: --agent user_plugins:ModelAgent needs OPENAI_API_KEY" in " ".join(keyless.output.split())
    # an agent that calls no model still has no endpoint to ask
    oracle = invoke(tmp_path, "--agent", "oracle", "--dry-run", "--check-endpoint")
    assert oracle.exit_code == 2 and "the oracle agent calls no model endpoint" in oracle.output, oracle.output


def test_a_model_outage_an_agent_catches_is_not_graded(tmp_path, llm_server):
    """An agent that catches its model call's failure (``except Exception``) and answers
    anyway had the outage graded as the policy's failure (reward 0, final, exit 0)."""
    server = llm_server(policy=lambda body: {"status": 503})
    result = invoke(tmp_path, "--agent", "model_plugins:CatchAllAgent", "--base-url", server.url,
                    "--max-retries", "1", "--run-id", "caught")
    records = read_results(tmp_path / "out" / "caught")
    assert records and {r["status"] for r in records} == {"model_unavailable"}, (result.output, records)
    assert all(r["infrastructure"] and r["reward"] == 0.0 for r in records), records
    failure = records[0]["failure"]
    assert failure["type"] == "ModelUnavailable" and "the agent caught this and went on" in failure["message"]
    assert result.exit_code == 1, result.output  # the endpoint kept failing: stopped for a resume


def test_an_agent_with_its_own_client_says_the_endpoint_is_down_with_model_unavailable(tmp_path, llm_server):
    """``parallel_rollout.agents.ModelUnavailable``, raised by an agent's own client code, is
    the endpoint's state: retried, never graded (README, "Your own agent")."""
    server = llm_server(policy=lambda body: {"status": 503})
    data = write_tasks(tmp_path / "own.jsonl", [{"id": f"d{n}", "n": n, "url": server.url} for n in (2, 5)])
    result = invoke(tmp_path, "--agent", "model_plugins:OwnClientAgent", "--max-retries", "1", "--run-id", "own",
                    data=data)
    records = read_results(tmp_path / "out" / "own")
    assert records and {r["status"] for r in records} == {"model_unavailable"}, (result.output, records)
    assert all(r["infrastructure"] for r in records)
    assert "my endpoint did not answer" in records[0]["failure"]["message"]


def test_check_endpoint_asks_the_route_a_plugin_agent_says_it_calls(tmp_path, llm_server):
    """A completions-only server (vLLM serving a base model without a chat template) lists the
    model: --check-endpoint passed a plugin agent that calls self.model.chat, since either
    route would do for an agent that does not say, and every task then failed at its first
    request. An agent that says ``model_calls = {"chat"}`` has that route asked, and the
    problem names the route and the agent; one that does not say still passes on either."""
    server = llm_server()
    server.missing_routes.add("/v1/chat/completions")

    def dry(agent):
        result = invoke(tmp_path, "--agent", agent, "--base-url", server.url, "--model", "test-model",
                        "--dry-run", "--check-endpoint")
        return result.exit_code, " ".join(result.output.split())

    code, said = dry("model_plugins:ChatRouteAgent")
    assert code == 2, said
    assert (f"endpoint: {server.url}/models lists the model 'test-model' but POST {server.url}/chat/completions "
            """answered HTTP 404: '{"detail": "Not Found"}', the route of the agent model_plugins:ChatRouteAgent's """
            "self.model.chat (ChatRouteAgent.model_calls = {'chat'}); ") in said, said
    assert "fix --base-url, or, for a server that serves only /completions, set tokenizer=" in said, said
    code, said = dry("user_plugins:ModelAgent")  # says nothing: /completions will do
    assert code == 0 and f"{server.url}/completions answers (HTTP 400)" in said, said
    assert server.requests == []  # nothing was sampled
    code, said = dry("model_plugins:RouteNamedAgent")
    assert code == 2 and ("RouteNamedAgent.model_calls = frozenset({'/chat/completions'}) names '/chat/completions': "
                          "say which of self.model's calls the agent makes, a set of 'chat' (chat, achat) and "
                          "'generate'") in said, said


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
def test_the_readme_agent_example_runs_as_written(tmp_path, llm_server):
    """The README's agent class ("Your own agent: --agent module:Class"), saved as the file its
    first line names and run by its command against a server that replays each shell task's
    reference commands: every task succeeds. A first agent written without it used
    task["instruction"] ('Task' object is not subscriptable)."""
    [example] = [block for block in re.findall(r"```python\n(.*?)```", readme_section("Running"), re.S)
                 if "(Agent):" in block]
    command = re.match(r"# (\S+): (.*)\n", example)
    (tmp_path / command.group(1)).write_text(example)
    server = llm_server(policy=shell_solver(SHELL_TASKS))
    server.models.append("my-model")  # the model the example runs
    line = (command.group(2).replace("./dev run", f"{sys.executable} -m parallel_rollout run")
            .replace("tasks.jsonl", str(SHELL_TASKS)).replace("MODEL", "my-model").replace("URL", server.url))
    proc = subprocess.run([*shlex.split(line), "--output-dir", "out", "--run-id", "readme", "--no-progress",
                           "--num-rollouts", "2", "--num-vms", "2", "--use-vm-pool"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    tasks = [json.loads(line) for line in SHELL_TASKS.read_text().splitlines() if line.strip()]
    finals = assert_exactly_once(tmp_path / "out" / "readme", {f"{t['id']}#0" for t in tasks})
    assert {k: r["status"] for k, r in finals.items() if r["status"] != "success"} == {}
    assert {r["body"]["model"] for r in server.requests} == {"my-model"}
