"""gym mode: FrozenLake through gymnasium — moves parsed from replies, the env's reward, the
oracle's planning, task validation, and runs of the shipped task set through the CLI (oracle)
and through the openai agent against the local test server.

Nothing here starts a VM: the mode declares ``vm_scope = None``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from llm_server import llm_server, reply_with_counts  # noqa: F401 - fixture
from parallel_rollout.cli import main
from parallel_rollout.config import RunConfig
from parallel_rollout.envs import get_env, task_validators
from parallel_rollout.envs.gym import GymEnv, frozenlake_path, parse_action, safest_moves, shortest_path
from parallel_rollout.errors import TaskFileError
from parallel_rollout.tasks import Task, load_tasks

CLASSIC = ["SFFF", "FHFH", "FFFH", "HFFG"]


@pytest.mark.parametrize("reply, action", [
    ("<answer>Right</answer>", 2),
    ("I think left... no. <answer> down </answer>", 1),
    ("first <answer>Up</answer> then <answer>Left</answer>", 0),
    ("Go RIGHT", 2),
    ("left or right? right", 2),
    ("<answer>3</answer>", 3),
    ("<answer>7</answer>", None),
    ("uprising", None),
    ("", None),
    (2, 2),
    (4, None),
    (None, None),
])
def test_parse_action(reply, action):
    assert parse_action(reply) == action


def test_shortest_path_avoids_holes():
    path = shortest_path(CLASSIC)
    assert len(path) == 6
    cell = (0, 0)
    for action in path:
        dr, dc = {0: (0, -1), 1: (1, 0), 2: (0, 1), 3: (-1, 0)}[action]
        cell = (cell[0] + dr, cell[1] + dc)
        assert CLASSIC[cell[0]][cell[1]] != "H"
    assert CLASSIC[cell[0]][cell[1]] == "G"
    assert shortest_path(["SH", "HG"]) is None


def test_safest_moves_never_step_towards_a_hole_when_a_safe_move_exists():
    moves = safest_moves(tuple(CLASSIC))
    # From the start, Left (bounce on the wall, or slide down/up) can never fall in.
    assert moves[(0, 0)] == 0


def _task(**payload) -> Task:
    seed = payload.pop("seed", 0)
    GymEnv.validate_task(payload)
    return Task(id="t", mode="gym", payload=payload, seed=seed)


def test_episode_reaches_goal_with_reward_one():
    env = GymEnv(RunConfig(mode="gym"))
    task = _task(desc=CLASSIC)
    observation = env.reset(task, None)
    assert observation["grid"].splitlines()[0] == "PFFF"
    assert observation["position"] == [0, 0]
    for move in GymEnv.reference_actions(task)[:-1]:
        step = env.step(f"<answer>{move}</answer>")
        assert not step.done
    step = env.step(GymEnv.reference_actions(task)[-1])
    assert step.done and step.observation["ended"] == "goal"
    assert step.observation["grid"].splitlines()[-1] == "HFFP"
    reward, details = env.evaluate()
    assert reward == 1.0 and details["ended"] == "goal" and details["steps"] == 6


def test_hole_ends_with_reward_zero_and_bad_reply_costs_a_turn():
    env = GymEnv(RunConfig(mode="gym"))
    env.reset(_task(desc=CLASSIC, max_steps=5), None)
    step = env.step("hmm, not sure")
    assert not step.done and step.observation["error"] and step.observation["position"] == [0, 0]
    env.step("Right")
    step = env.step("Down")  # (1, 1) is a hole
    assert step.done and step.observation["ended"] == "hole"
    reward, details = env.evaluate()
    assert reward == 0.0 and details["invalid_actions"] == 1 and details["actions"] == [None, "Right", "Down"]


def test_max_steps_ends_the_episode():
    env = GymEnv(RunConfig(mode="gym"))
    env.reset(_task(desc=CLASSIC, max_steps=3), None)
    results = [env.step("Up") for _ in range(3)]
    assert [r.done for r in results] == [False, False, True]
    assert results[-1].observation["ended"] == "max_steps"
    assert env.evaluate()[0] == 0.0


def test_generated_map_is_seeded_and_slips_are_seeded():
    a, b, c = (GymEnv(RunConfig(mode="gym")) for _ in range(3))
    grids = [e.reset(_task(size=5, seed=s, is_slippery=True), None)["grid"] for e, s in ((a, 7), (b, 7), (c, 8))]
    assert grids[0] == grids[1] != grids[2]
    assert len(grids[0].splitlines()) == 5
    moves_a = [a.step("Right").observation["position"] for _ in range(6)]
    moves_b = [b.step("Right").observation["position"] for _ in range(6)]
    assert moves_a == moves_b


@pytest.mark.parametrize("line, message", [
    ({"id": "x", "desc": ["SFX", "FFG"]}, "may hold only S, F, H and G"),
    ({"id": "x", "desc": ["SF", "FFG"]}, "rows of one length"),
    ({"id": "x", "size": 40}, "'size' must be 2-16"),
    ({"id": "x", "size": 4, "map_name": "4x4"}, "one of the fields"),
    ({"id": "x", "game": "Tetris"}, "'game' must be one of FrozenLake, Sokoban"),
    ({"id": "x", "is_slippery": "yes"}, "'is_slippery' must be true or false, got a string"),
    ({"id": "x", "max_steps": 0}, "'max_steps' must be at least 1"),
])
def test_bad_task_names_file_line_and_field(tmp_path, line, message):
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps({"id": "ok", "size": 4}) + "\n" + json.dumps(line) + "\n")
    with pytest.raises(TaskFileError, match=re.escape(f"{path}:2:") + ".*" + re.escape(message)):
        load_tasks(path, default_mode="gym", validators=task_validators())


def test_shipped_task_set_loads_and_needs_no_vm():
    tasks = load_tasks("frozenlake", default_mode="gym", validators=task_validators())
    assert len(tasks) >= 20 and Path(frozenlake_path()).is_file()
    assert {t.get("is_slippery") for t in tasks} == {True, False}
    assert not get_env("gym").needs_vm()
    for task in tasks:
        assert GymEnv.reference_actions(task)  # every map is solvable


def test_cli_oracle_solves_every_non_slippery_lake(tmp_path):
    result = CliRunner().invoke(main, ["run", "--mode", "gym", "--data", "frozenlake", "--agent", "oracle",
                                       "--num-rollouts", "2", "--output-dir", str(tmp_path), "--run-id", "fl"])
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in (tmp_path / "fl" / "results.jsonl").read_text().splitlines()]
    assert len(records) == 30
    assert all(r["vm"] is None for r in records)
    plain = [r for r in records if "slippery" not in r["tags"]]
    assert plain and all(r["reward"] == 1.0 and r["status"] == "success" for r in plain)
    slippery = [r for r in records if "slippery" in r["tags"]]
    # The oracle's safest moves still lose some lakes to slips, but not most of them.
    assert sum(r["success"] for r in slippery) >= len(slippery) / 2


def _grid_solver(body):
    """A model that reads the grid in the latest user message and answers the next move."""
    last = [m["content"] for m in body["messages"] if m["role"] == "user"][-1]
    grid = [line for line in last.splitlines() if re.fullmatch(r"[SFHGP]+", line)]
    row = next(i for i, line in enumerate(grid) if "P" in line)
    col = grid[row].index("P")
    desc = [line.replace("P", "F") for line in grid]
    move = ("Left", "Down", "Right", "Up")[shortest_path(desc, (row, col))[0]]
    return reply_with_counts(body, f"The path goes {move.lower()}.\n<answer>{move}</answer>")


def test_openai_agent_plays_from_the_rendered_grid(tmp_path, llm_server):
    server = llm_server(policy=_grid_solver)
    tasks = tmp_path / "lakes.jsonl"
    tasks.write_text("".join(json.dumps({"id": f"lake{s}", "size": 4, "seed": s}) + "\n" for s in range(3)))
    result = CliRunner().invoke(main, ["run", "--mode", "gym", "--data", str(tasks), "--agent", "openai",
                                       "--base-url", server.url, "--model", "m", "--num-rollouts", "1",
                                       "--output-dir", str(tmp_path), "--run-id", "oa"])
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in (tmp_path / "oa" / "results.jsonl").read_text().splitlines()]
    assert [r["reward"] for r in records] == [1.0, 1.0, 1.0]
    first = server.requests[0]["body"]["messages"]
    # the system message is game-neutral; the first observation explains the lake
    assert first[0]["role"] == "system" and "<answer>" in first[0]["content"]
    assert first[1]["role"] == "user" and "You are playing FrozenLake" in first[1]["content"]
    assert sum(r["turns"] for r in records) == len(server.requests)
