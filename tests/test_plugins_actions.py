"""What a ``module:Class`` agent's action may be: None (an ``act`` without ``return``) is no
action in any mode, its attempt the agent's ``error`` naming the type, through the CLI for
every mode that runs here without a VM image or a browser, and by the env itself for web and
osworld (their step refuses it before it touches the VM)."""

from __future__ import annotations

import shutil

import pytest
from click.testing import CliRunner

from conftest import SHELL_TASKS, read_results, write_tasks
from parallel_rollout.cli import main
from parallel_rollout.config import RunConfig
from parallel_rollout.envs import get_env


def math_tasks(tmp_path):
    return write_tasks(tmp_path / "math.jsonl", [{"id": "m1", "problem": "What is 1+1?", "answer": "2"}])


@pytest.mark.parametrize("mode, data", [
    pytest.param("shell", lambda tmp_path: SHELL_TASKS,
                 marks=pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")),
    ("math", math_tasks),
    ("gym", lambda tmp_path: "frozenlake"),
    ("rag", lambda tmp_path: "rag"),
    pytest.param("py", lambda tmp_path: "humaneval",
                 marks=pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")),
])
def test_an_agent_that_returns_none_is_an_error_naming_the_type(tmp_path, mode, data):
    """In shell mode None quietly ended the episode as "DONE" (graded 'failure'); math graded
    it as a reply with no answer, gym and rag spent turns on it until the turn limit."""
    result = CliRunner().invoke(main, ["--mode", mode, "--data", str(data(tmp_path)), "--limit", "1",
                                       "--agent", "user_plugins:NoReturnAgent", "--output-dir", str(tmp_path / "out"),
                                       "--run-id", "none", "--no-progress", "--num-rollouts", "1"])
    assert result.exit_code == 0, (result.output, result.exception)
    [record] = read_results(tmp_path / "out" / "none")
    assert record["status"] == "error" and not record["infrastructure"], record
    assert record["failure"]["type"] == "ValueError" and f"a {mode} action is" in record["failure"]["message"]
    assert record["failure"]["message"].endswith("got NoneType"), record["failure"]
    assert record["turns"] == 0  # refused at its first action


@pytest.mark.parametrize("mode", ["web", "osworld"])
def test_the_browser_and_desktop_modes_refuse_none_before_the_vm(mode):
    env = get_env(mode)(RunConfig(mode=mode))
    with pytest.raises(ValueError, match=r"action is .*, got NoneType$"):
        env.step(None)


@pytest.mark.parametrize("agent, data, shown", [
    ("user_plugins:ActionIdAgent", "sokoban-endless", "got int 1"),
    ("user_plugins:DictMoveAgent", "sokoban-endless", "got dict {'move': 'Right'}"),
    ("user_plugins:DictMoveAgent", "frozenlake", "got dict {'move': 'Right'}"),
    ("user_plugins:LakeNumberAgent", "frozenlake", "(0 Left, 1 Down, 2 Right, 3 Up), got int 7"),
])
def test_a_gym_action_that_is_no_text_is_an_error_naming_the_type(tmp_path, agent, data, shown):
    """ROLL's action id 1 (Up) given to Sokoban, or a dict, was read as a reply without a
    move: every turn a no-op with the format penalty, graded 'failure' (reward -2.5), no error."""
    result = CliRunner().invoke(main, ["--mode", "gym", "--data", data, "--limit", "1", "--agent", agent,
                                       "--output-dir", str(tmp_path / "out"), "--run-id", "id", "--no-progress",
                                       "--num-rollouts", "1"])
    assert result.exit_code == 0, (result.output, result.exception)
    [record] = read_results(tmp_path / "out" / "id")
    assert record["status"] == "error" and not record["infrastructure"] and record["turns"] == 0, record
    assert record["failure"]["type"] == "ValueError" and record["failure"]["message"].endswith(shown), record


def test_a_lake_still_takes_gymnasiums_action_numbers():
    from parallel_rollout.tasks import Task

    env = get_env("gym")(RunConfig(mode="gym"))
    env.reset(Task(id="l", mode="gym", payload={"desc": ["SFG"]}, seed=0), None)
    assert env.step(2).observation["position"] == [0, 1]  # 2: Right


@pytest.mark.parametrize("number", [7, 4, -1])
def test_a_lake_number_outside_0_3_is_the_agents_error_naming_the_range(number):
    """It was played as a reply without a move: a turn spent, the policy's failure."""
    from parallel_rollout.tasks import Task

    env = get_env("gym")(RunConfig(mode="gym"))
    env.reset(Task(id="l", mode="gym", payload={"desc": ["SFG"]}, seed=0), None)
    with pytest.raises(ValueError, match=rf"action number is gymnasium's 0-3 \(.*\), got int {number}$"):
        env.step(number)
    assert env.step(3).observation["position"] == [0, 0]  # 3: Up, off the grid; the lake plays on
