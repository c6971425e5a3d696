"""The OpenAI agent's tool calls: each mode's tools are actions its env takes, a bad call is
told to the model, replies of tool calls alone are replies, and runs through the CLI that
play and solve by tools alone, against local test servers (tests/llm_server.py)."""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner

from conftest import SHELL_TASKS, read_results, run_ok
from llm_server import call_tool, completion, lake_tool_solver, shell_solver
from parallel_rollout.agents import tools
from parallel_rollout.agents.openai_agent import OpenAIAgent
from parallel_rollout.agents.wire import MalformedResponse, reply_of, turn_info
from parallel_rollout.cli import main
from parallel_rollout.config import build_config
from parallel_rollout.errors import ConfigError
from parallel_rollout.tasks import Task

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")


def _call(name: str, **arguments) -> list[dict]:
    return [{"id": "c1", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}]


@pytest.mark.parametrize("mode, call, action", [
    ("shell", _call("run", command="ls -la"), {"command": "ls -la"}),
    ("shell", _call("done"), "DONE"),
    ("py", _call("submit", code="def f():\n    return 1"), "```python\ndef f():\n    return 1\n```"),
    ("rag", _call("search", query="eiffel tower", k=3), {"search": "eiffel tower", "k": 3}),
    ("rag", _call("answer", text="Paris"), {"answer": "Paris"}),
    ("web", _call("click", ref=12), {"action": "click", "ref": 12}),
    ("web", _call("type", ref=5, text="hi"), {"action": "type", "ref": 5, "text": "hi"}),
    ("web", _call("select", ref=4, option="Peru"), {"action": "select", "ref": 4, "option": "Peru"}),
    ("osworld", _call("click", x=10, y=20), {"action_type": "CLICK", "parameters": {"x": 10, "y": 20}}),
    ("osworld", _call("hotkey", keys=["ctrl", "c"]), {"action_type": "HOTKEY", "parameters": {"keys": ["ctrl", "c"]}}),
    ("osworld", _call("done"), "DONE"),
    ("gym", _call("move", direction="Right"), "<answer>Right</answer>"),
])
def test_tool_calls_become_the_modes_actions(mode, call, action):
    assert tools.action_of(mode, call) == action
    assert call[0]["function"]["name"] in {t["function"]["name"] for t in tools.tools_for(mode)}


#: an argument a model would send, by the parameter's name (else by its JSON type)
_SAMPLE_ARGUMENTS = {"command": "ls", "code": "def f():\n    return 1", "query": "eiffel", "text": "Paris",
                     "key": "enter", "keys": ["ctrl", "c"], "button": "left", "ref": 3, "option": "Peru",
                     "direction": "Down", "x": 10, "y": 20, "dx": 0, "dy": 3, "k": 2, "num_clicks": 2}


def _env_takes(mode: str, action) -> object:
    """What the mode's own action parser makes of ``action`` (raising when it refuses it)."""
    from parallel_rollout.envs import gym
    from parallel_rollout.envs.osworld import actions as osworld_actions
    from parallel_rollout.envs.py import extract_code
    from parallel_rollout.envs.web.actions import parse_action

    if mode == "web":
        return parse_action(action)
    if mode == "osworld":
        return osworld_actions.special(action) or osworld_actions.computer13_to_code(action)
    if mode == "gym":
        move = gym.parse_action(action)
        assert move is not None, action
        return move
    if mode == "py":
        return extract_code(action)
    if mode == "shell":
        assert action == "DONE" or isinstance(action["command"], str), action
        return action
    assert mode == "rag" and (isinstance(action.get("search"), str) or isinstance(action.get("answer"), str))
    return action


@pytest.mark.parametrize("mode, names", [
    ("shell", ["run", "done"]), ("py", ["submit"]), ("rag", ["search", "answer"]),
    ("web", ["click", "type", "press", "scroll", "select", "done"]),
    ("osworld", ["move_to", "click", "mouse_down", "mouse_up", "right_click", "double_click", "drag_to",
                 "scroll", "typing", "press", "key_down", "key_up", "hotkey", "wait", "fail", "done"]),
    ("gym", ["move"]),
])
def test_every_tool_of_a_mode_is_an_action_its_env_takes(mode, names):
    """Each mode offers its actions as tools (osworld: computer_13's 16 action types), and a
    call of any of them with every parameter it declares is an action the mode's own parser
    accepts: a tool whose parameters drifted from the env's names fails here."""
    offered = tools.tools_for(mode)
    assert [t["function"]["name"] for t in offered] == names
    for tool in offered:
        function = tool["function"]
        params = function["parameters"]
        assert set(params["required"]) <= set(params["properties"]), function["name"]
        args = {name: _SAMPLE_ARGUMENTS[name] for name in params["properties"]}
        action = tools.action_of(mode, _call(function["name"], **args))
        assert not (isinstance(action, str) and action.startswith(("unknown tool", "tool "))), action
        _env_takes(mode, action)
        if params["required"]:  # the required ones alone do too
            _env_takes(mode, tools.action_of(mode, _call(function["name"], **{
                name: _SAMPLE_ARGUMENTS[name] for name in params["required"]})))
    with pytest.raises(Exception, match="mode 'math' has no tools"):
        tools.tools_for("math")


def test_a_bad_tool_call_is_told_to_the_model_not_run():
    assert "unknown tool 'rm'" in tools.action_of("shell", _call("rm"))
    bad = [{"id": "c", "function": {"name": "run", "arguments": "{not json"}}]
    assert "not JSON" in tools.action_of("shell", bad)
    answers = tools.tool_messages(_call("run", command="a") + [{"id": "c2", "function": {"name": "done"}}], "out")
    assert [(m["tool_call_id"], m["content"]) for m in answers] == [("c1", "out"), ("c2", tools.NOT_RUN)]


def test_tool_calls_in_a_mode_without_tools_or_with_a_tokenizer_stop_the_run_before_it_starts(tmp_path):
    tasks = tmp_path / "math.jsonl"
    tasks.write_text(json.dumps({"id": "m", "problem": "1+1?", "answer": "2"}) + "\n")
    result = CliRunner().invoke(main, ["run", "--mode", "math", "--data", str(tasks), "--agent", "openai",
                                       "--tool-calls", "--base-url", "http://127.0.0.1:9/v1", "--output-dir", str(tmp_path)])
    assert result.exit_code == 2 and "mode 'math' has no tools" in result.output, result.output
    with pytest.raises(ConfigError, match="tool_calls=True needs chat requests"):
        OpenAIAgent.check_config(build_config({"agent": "openai", "mode": "gym", "tool_calls": True,
                                               "base_url": "http://127.0.0.1:9/v1", "tokenizer": str(tmp_path)}))


def test_a_reply_of_tool_calls_alone_is_a_reply_and_one_of_nothing_is_not():
    body = completion(None, "m")
    with pytest.raises(MalformedResponse, match="content is null"):
        reply_of(json.dumps(body))
    body["choices"][0]["message"]["tool_calls"] = _call("run", command="ls")
    assert reply_of(json.dumps(body))[0] == ""
    assert turn_info(json.dumps(body))["tool_calls"] == _call("run", command="ls")


def test_tool_calls_are_sent_answered_by_id_and_recorded_as_they_came(llm_servers):
    server, = llm_servers(lambda body: call_tool(body, "move", direction="Down"))
    agent = OpenAIAgent(build_config({"agent": "openai", "mode": "gym", "base_url": server.url,
                                      "tool_calls": True}))
    agent.reset(Task(id="lake", mode="gym", payload={}))
    assert agent.act({"grid": "SF\nFG"}) == "<answer>Down</answer>"
    turn = agent.turn_record()
    assert turn["tool_calls"][0]["function"] == {"name": "move", "arguments": '{"direction": "Down"}'}
    assert turn["stop_reason"] == "tool_calls"
    agent.act({"grid": "SF\nPG"})  # call_tool checks the second request answers call_0 by its id
    second = server.requests[1]["body"]
    assert [t["function"]["name"] for t in second["tools"]] == ["move"]
    assert second["messages"][-1] == {"role": "tool", "tool_call_id": "call_0", "content": second["messages"][-1]["content"]}
    assert second["messages"][-2]["content"] is None and second["messages"][-2]["tool_calls"]


@needs_bwrap
@pytest.mark.slow
def test_cli_openai_agent_solves_the_shell_tasks_through_tools(tmp_path, llm_servers, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    server, = llm_servers(shell_solver(SHELL_TASKS, tools=True))
    run_ok("--mode", "shell", "--data", str(SHELL_TASKS), "--agent", "openai", "--base-url", server.url,
            "--tool-calls", "--num-rollouts", "2", "--task-timeout", "60", "--output-dir", str(tmp_path),
            "--run-id", "tools")
    records = read_results(tmp_path / "tools")
    assert len(records) == len(SHELL_TASKS.read_text().splitlines())
    assert all(r["status"] == "success" for r in records), [(r["task_id"], r["status"]) for r in records]
    # every request offered the tools and every reply was a tool call (none was text)
    assert all(r["body"]["tools"] and r["step"]["tool_calls"] for r in server.requests)


def test_cli_openai_agent_plays_frozenlake_through_tools(tmp_path, llm_servers, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    server, = llm_servers(lake_tool_solver)
    run_ok("--mode", "gym", "--data", "frozenlake", "--agent", "openai", "--base-url", server.url,
            "--tool-calls", "--num-rollouts", "2", "--output-dir", str(tmp_path), "--run-id", "lakes")
    records = read_results(tmp_path / "lakes")
    plain = [r for r in records if "slippery" not in r["tags"]]
    assert len(records) == 30 and plain
    assert all(r["reward"] == 1.0 for r in plain), [(r["task_id"], r["status"]) for r in plain]
    # every request offered the move tool and every reply was a call of it (no text reply)
    assert all([t["function"]["name"] for t in r["body"]["tools"]] == ["move"] and r["step"]["tool_calls"]
               for r in server.requests)
