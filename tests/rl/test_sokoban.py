"""gym mode's Sokoban: rooms by reverse play (deterministic, always solvable), ROLL's reward
table one event at a time, the vocabulary and legend in the prompt, the shipped rooms through
the CLI (oracle, and the openai agent against the local test server), the Sokoban tags in a
scheduler (groups share a room, new groups get new rooms), and bad settings named.

Nothing here starts a VM: the gym mode declares ``vm_scope = None``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from click.testing import CliRunner

from llm_server import LLMServer, reply_with_counts
from parallel_rollout.agents import prompts
from parallel_rollout.cli import main
from parallel_rollout.config import RunConfig
from parallel_rollout.envs import task_validators
from parallel_rollout.envs.gym import GymEnv
from parallel_rollout.envs.sokoban import parse_move, sokoban_path
from parallel_rollout.envs.sokoban_planner import plan
from parallel_rollout.envs.sokoban_rooms import RoomError, generate_room
from parallel_rollout.errors import TaskFileError
from parallel_rollout.rl import EnvManagerConfig, TaskSet
from parallel_rollout.rl.generation import TAG_SEED_STRIDE
from parallel_rollout.tasks import Task, load_tasks
from rl_support import rl_config

ROOT = Path(__file__).resolve().parents[2]
#: a user's shell with the project installed: ``parallel-rollout`` and ``python`` on PATH
SHELL_ENV = {**{k: v for k, v in os.environ.items() if not k.startswith("PYTEST")},
             "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}

#: the RL tags' settings: (dim_room, num_boxes, search_depth)
TAG_SETTINGS = {"SimpleSokoban": ([6, 6], 1, 300), "LargerSokoban": ([8, 8], 2, 10),
                "SokobanDifferentGridVocab": ([6, 6], 1, 30)}
#: two boxes: box 1 goes right onto (1, 3); box 2 right onto (2, 3) from (2, 1)
TWO_BOXES = ["######",
             "#@$._#",
             "#_$._#",
             "######"]
VOCAB = {"wall": "W", "empty": ".", "target": "G", "box on target": "C", "box": "B", "player": "A",
         "player on target": "@"}


def _task(seed=0, **payload) -> Task:
    payload = {"game": "Sokoban", **payload}
    GymEnv.validate_task(payload)
    return Task(id="s", mode="gym", payload=payload, seed=seed)


def _env(**payload):
    env = GymEnv(RunConfig(mode="gym"))
    return env, env.reset(_task(**payload), None)


# -- rooms ----------------------------------------------------------------------------------

@pytest.mark.parametrize("tag", sorted(TAG_SETTINGS))
def test_rooms_are_seeded_enclosed_and_every_one_is_solved_by_the_planner(tag):
    dim, boxes, depth = TAG_SETTINGS[tag]
    rooms = [generate_room(dim, boxes, seed, search_depth=depth) for seed in range(60)]
    assert rooms == [generate_room(dim, boxes, seed, search_depth=depth) for seed in range(60)]
    assert len({tuple(room) for room in rooms}) > 50  # seeds give different rooms
    for room in rooms:
        cells = "".join(room)
        assert [len(room), len(room[0])] == dim
        assert set(room[0] + room[-1] + "".join(r[0] + r[-1] for r in room)) == {"#"}
        # reverse play leaves every box off its target, the player somewhere
        assert cells.count("$") == boxes and "*" not in cells and cells.count(".") + cells.count("+") == boxes
        assert plan(tuple(room)) is not None


#: rooms ROLL's own generator (roll/pipeline/agentic/env/sokoban/utils.py, run under its
#: all_seed) gave for these settings and seeds: (dim_room, num_boxes, search_depth, seed, room)
ROLL_ROOMS = [
    ((6, 6), 1, 300, 42, ["######", "#@$_.#", "#____#", "######", "######", "######"]),
    ((6, 6), 1, 30, 7, ["######", "##___#", "##@$_#", "###_.#", "###__#", "######"]),
    ((8, 8), 2, 10, 123, ["########", "#_____##", "#__.__##", "#_$#__##", "#$@___##", "#.___###", "#_##_###",
                          "########"]),
    ((10, 10), 4, 300, 2024, ["##########", "###.######", "#.____.$_#", "#_$_$$__@#", "#____##__#", "#######__#",
                              "########_#", "#######_.#", "#######__#", "##########"]),
]


@pytest.mark.parametrize("dim, boxes, depth, seed, room", ROLL_ROOMS)
def test_a_seed_gives_the_room_roll_gives(dim, boxes, depth, seed, room):
    assert generate_room(dim, boxes, seed, search_depth=depth) == room


def test_a_room_too_small_for_its_boxes_is_a_room_error():
    with pytest.raises(RoomError, match="dim_room.*num_boxes"):
        generate_room((3, 3), 1, seed=0)


def test_the_oracle_plans_once_per_room_and_follows_the_plan(monkeypatch):
    from parallel_rollout.envs import sokoban

    calls = []
    monkeypatch.setattr(sokoban, "plan", lambda state: calls.append(state) or plan(state))
    task = _task(room=["#######", "#@_$_.#", "#__$_.#", "#######"])
    env = GymEnv(RunConfig(mode="gym"))
    observation, done = env.reset(task, None), False
    while not done:
        step = env.step(GymEnv.replan(task, observation))
        observation, done = step.observation, step.done
    assert observation["ended"] == "solved" and len(calls) == 1
    assert env.evaluate()[1]["actions"] == list(plan(tuple(task.get("room"))))


def test_the_script_writes_the_shipped_rooms_again(tmp_path):
    proc = _shell(f"python scripts/make_sokoban_rooms.py --out {tmp_path / 'rooms.jsonl'}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "300 rooms written" in proc.stdout
    assert (tmp_path / "rooms.jsonl").read_bytes() == sokoban_path().read_bytes()


def test_planner_finds_a_shortest_plan_or_none():
    assert plan(tuple(TWO_BOXES)) == ("Right", "Left", "Down", "Right")
    # a box in a corner off target can never move: no plan
    assert plan(("#####", "#$_.#", "#_@_#", "#####")) is None
    # the node budget bounds the search
    assert plan(tuple(TWO_BOXES), budget=1) is None


def test_shipped_rooms_regenerate_from_their_seeds_and_the_planner_solves_each_in_max_steps():
    tasks = load_tasks("sokoban", default_mode="gym", validators=task_validators())
    assert len(tasks) == 300
    per_tag = defaultdict(list)
    for task in tasks:
        tag = next(t for t in task.tags if t in TAG_SETTINGS)
        per_tag[tag].append(task)
        dim, boxes, depth = TAG_SETTINGS[tag]
        assert (task.get("dim_room"), task.get("num_boxes"), task.get("search_depth")) == (dim, boxes, depth)
        moves = plan(tuple(task.get("room")))
        assert moves is not None and len(moves) <= task.get("max_steps") == 10
    assert {tag: len(v) for tag, v in per_tag.items()} == {tag: 100 for tag in TAG_SETTINGS}
    for task in tasks[::10]:  # the stored rows are what the generator makes of the seed
        assert task.get("room") == generate_room(task.get("dim_room"), task.get("num_boxes"), task.seed,
                                                 search_depth=task.get("search_depth"))
    assert all(t.get("grid_vocab") == VOCAB for t in per_tag["SokobanDifferentGridVocab"])


# -- ROLL's reward table, one event each ------------------------------------------------------

@pytest.mark.parametrize("reply, move", [
    ("<answer>Up</answer>", "Up"), ("<answer> right </answer>", "Right"),
    ("first <answer>Left</answer>, no: <answer>Down</answer>", "Down"), ("go LEFT", "Left"),
    ("<answer>Jump</answer>", None), ("<answer>1</answer>", None), ("", None), (3, None),
])
def test_parse_move(reply, move):
    assert parse_move(reply) == move


def test_a_step_onto_floor_costs_the_step_penalty():
    env, _ = _env(room=TWO_BOXES)
    env.step("Right")
    env.step("Left")  # the player walks back onto floor; no box moves
    step = env.step("Down")
    assert step.info["reward"] == pytest.approx(-0.1) and step.observation["moved"] and not step.done


def test_a_bump_into_a_wall_or_a_blocked_box_costs_the_step_and_moves_nothing():
    env, first = _env(room=TWO_BOXES)
    step = env.step("<answer>Up</answer>")  # a wall
    assert step.info["reward"] == pytest.approx(-0.1) and step.observation["moved"] is False
    assert step.observation["state"] == first["state"]
    env.step("Right")
    step = env.step("Down")  # box 2 has the wall behind it
    assert step.info["reward"] == pytest.approx(-0.1) and step.observation["moved"] is False


def test_a_box_pushed_onto_a_target_earns_one():
    env, _ = _env(room=TWO_BOXES)
    step = env.step("Right")
    assert step.info["reward"] == pytest.approx(-0.1 + 1) and step.observation["boxes_on_target"] == 1
    assert not step.done


def test_a_box_pushed_off_a_target_costs_one():
    env, _ = _env(room=TWO_BOXES)
    env.step("Right")
    step = env.step("Right")
    assert step.info["reward"] == pytest.approx(-0.1 - 1) and step.observation["boxes_on_target"] == 0


def test_all_boxes_on_target_earns_ten_more_and_is_success():
    env, _ = _env(room=TWO_BOXES)
    rewards = [env.step(move).info["reward"] for move in ("Right", "Left", "Down")]
    step = env.step("Right")
    assert step.info["reward"] == pytest.approx(-0.1 + 1 + 10) and step.done
    assert step.observation["ended"] == "solved" and step.observation["state"][1:3] == ["#__*_#", "#_@*_#"]
    reward, details = env.evaluate()
    assert reward == pytest.approx(sum(rewards) + step.info["reward"]) == pytest.approx(10 + 2 - 0.1 * 4)
    assert details["success"] and details["steps"] == 4


def test_a_reply_without_a_move_is_a_no_op_step_with_the_format_penalty():
    env, first = _env(room=TWO_BOXES, format_penalty=-0.15)
    step = env.step("I am not sure")
    assert step.info["reward"] == pytest.approx(-0.1 - 0.15) and step.observation["error"]
    assert step.observation["state"] == first["state"] and step.observation["steps"] == 1
    assert env.evaluate()[1]["invalid_actions"] == 1


def test_max_steps_ends_the_episode_unsolved():
    env, _ = _env(room=TWO_BOXES, max_steps=3)
    results = [env.step("Up") for _ in range(3)]
    assert [r.done for r in results] == [False, False, True]
    assert results[-1].observation["ended"] == "max_steps"
    reward, details = env.evaluate()
    assert reward == pytest.approx(-0.3) and not details["success"]


# -- rendering -----------------------------------------------------------------------------

def test_grid_vocab_draws_the_room_and_the_first_prompt_holds_the_legend():
    _, plain = _env(room=TWO_BOXES)
    assert plain["grid"].splitlines()[1:3] == ["#PXO_#", "#_XO_#"]
    env, other = _env(room=TWO_BOXES, grid_vocab=VOCAB)
    assert other["grid"].splitlines() == ["WWWWWW", "WABG.W", "W.BG.W", "WWWWWW"]
    assert other["state"] == TWO_BOXES[:1] + ["#@$._#", "#_$._#"] + TWO_BOXES[-1:]
    text = prompts.render("gym", other)
    assert "W: wall, .: empty, G: target, C: box on target, B: box, A: player, @: player on target" in text
    assert other["grid"] in text and "Moves left: 20" in text
    env.step("Right")
    env.step("Right")
    step = env.step("Right")  # the player, on the target now, pushes nothing: blocked by the wall
    assert step.observation["grid"].splitlines()[1] == "W..@BW"
    later = prompts.render("gym", step.observation)
    assert "wall" not in later and "blocked" in later
    assert "Sokoban" not in prompts.system_prompt("gym") and "<answer>" in prompts.system_prompt("gym")


#: ROLL's SokobanDifferentGridVocab env_config as its traj_envs.yaml gives it (a JSON line's
#: keys are strings): grid_lookup code → symbol, grid_vocab symbol → meaning
ROLL_LOOKUP = {"0": "W", "1": ".", "2": "G", "3": "C", "4": "B", "5": "A", "6": "@"}
ROLL_VOCAB = {"W": "wall", ".": "empty", "G": "target", "C": "box on target", "B": "box", "A": "player",
              "@": "player on target"}


@pytest.mark.parametrize("fields", [{"grid_lookup": ROLL_LOOKUP, "grid_vocab": ROLL_VOCAB},
                                    {"grid_vocab": ROLL_VOCAB}, {"grid_lookup": ROLL_LOOKUP}],
                         ids=["both", "roll_grid_vocab", "grid_lookup"])
def test_rolls_own_grid_fields_draw_what_ours_draws(tmp_path, fields):
    """ROLL's env_config pasted into a task file: the same grid and legend as grid_vocab here."""
    path = tmp_path / "rooms.jsonl"
    path.write_text(json.dumps({"id": "roll", "game": "Sokoban", "room": TWO_BOXES, **fields}) + "\n")
    [task] = load_tasks(path, default_mode="gym", validators=task_validators())
    env = GymEnv(RunConfig(mode="gym"))
    theirs = env.reset(task, None)
    _, ours = _env(room=TWO_BOXES, grid_vocab=VOCAB)
    assert theirs["grid"] == ours["grid"] == "WWWWWW\nWABG.W\nW.BG.W\nWWWWWW"
    assert theirs["instructions"] == ours["instructions"]


# -- bad settings --------------------------------------------------------------------------

@pytest.mark.parametrize("line, message", [
    ({"game": "Tetris"}, "'game' must be one of FrozenLake, Sokoban"),
    ({"game": "Sokoban", "dim_room": [4, 4], "num_boxes": 3}, "'dim_room' [4, 4] has 4 cell(s) inside"),
    ({"game": "Sokoban", "dim_room": [6]}, "'dim_room' must be [rows, columns]"),
    ({"game": "Sokoban", "num_boxes": 0}, "'num_boxes' must be at least 1"),
    ({"game": "Sokoban", "search_depth": 2}, "'search_depth' must be at least 3"),
    ({"game": "Sokoban", "max_steps": True}, "'max_steps' must be a whole number"),
    ({"game": "Sokoban", "is_slippery": True}, "'is_slippery' is a FrozenLake field"),
    ({"game": "Sokoban", "grid_vocab": {"wall": "WW"}}, "\"wall\" must be one visible character"),
    ({"game": "Sokoban", "grid_vocab": {"wall": "_"}}, "'grid_vocab' gives \"wall\" and \"empty\" one symbol, \"_\""),
    ({"game": "Sokoban", "grid_vocab": {"lava": "L"}}, "'grid_vocab' names \"lava\""),
    ({"game": "Sokoban", "grid_lookup": {"7": "L"}}, "'grid_lookup' names \"7\"; the codes are 0-6: 0 wall"),
    ({"game": "Sokoban", "grid_lookup": {"0": "##"}}, "'grid_lookup': \"wall\" must be one visible character"),
    ({"game": "Sokoban", "grid_lookup": {"0": "W"}, "grid_vocab": {"V": "wall"}},
     "'grid_lookup' and 'grid_vocab' give \"wall\" different symbols: \"W\" and \"V\""),
    ({"game": "Sokoban", "room": ["#@$.#", "#####"]}, "'room' must be enclosed"),
    ({"game": "Sokoban", "room": ["#####", "#@$_#", "#####"]}, "as many targets as boxes"),
    ({"game": "Sokoban", "room": ["#####", "#@$.#", "#####"], "num_boxes": 2}, "'num_boxes' is 2"),
])
def test_bad_sokoban_task_names_file_line_and_field(tmp_path, line, message):
    path = tmp_path / "rooms.jsonl"
    path.write_text(json.dumps({"id": "ok", "game": "Sokoban", "dim_room": [6, 6], "num_boxes": 1}) + "\n"
                    + json.dumps({"id": "bad", **line}) + "\n")
    with pytest.raises(TaskFileError, match=re.escape(f"{path}:2:") + ".*" + re.escape(message)):
        load_tasks(path, default_mode="gym", validators=task_validators())


# -- through the CLI -----------------------------------------------------------------------

def _shell(line: str) -> subprocess.CompletedProcess:
    """Run ``line`` in bash from the repository's root, as a user types it (no stdin)."""
    return subprocess.run(["bash", "-c", line], cwd=ROOT, env=SHELL_ENV, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=300)


def _records(folder):
    return [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines()]


def test_the_readme_oracle_command_solves_all_300_shipped_rooms_through_a_pool_of_workers(tmp_path):
    modes = (ROOT / "README.md").read_text(encoding="utf-8").split("\n## Modes\n", 1)[1].split("\n## ", 1)[0]
    [line] = re.findall(r"^parallel-rollout run --mode gym --data sokoban --agent oracle.*$", modes, re.M)
    proc = _shell(f"{line} --output-dir {tmp_path} --run-id sk")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "300/300 samples finished, 300 succeeded" in proc.stdout + proc.stderr
    records = _records(tmp_path / "sk")
    assert len(records) == 300 and all(r["vm"] is None for r in records)
    assert all(r["status"] == "success" and r["success"] and r["eval"]["success"] for r in records)
    assert len({r["worker"] for r in records}) > 1
    # ROLL's return of a solved room: 10 + 1 per box - 0.1 per step
    for r in records:
        assert r["reward"] == pytest.approx(10 + r["eval"]["num_boxes"] - 0.1 * r["eval"]["steps"])
    summary = json.loads((tmp_path / "sk" / "summary.json").read_text())
    assert summary["successes"] == 300 and summary["success_rate"] == 1.0
    assert {summary["per_tag"][tag]["finished"] for tag in TAG_SETTINGS} == {100}


def _sokoban_solver(body):
    """A model that reads the legend of the first message and the grid of the latest one,
    and answers the planner's next move."""
    users = [m["content"] for m in body["messages"] if m["role"] == "user"]
    legend = re.search(r"The symbols of the grid: (.*)\.\n", users[0]).group(1)
    meaning = {item[0]: item[3:] for item in legend.split(", ")}
    xsb = {"wall": "#", "empty": "_", "target": ".", "box on target": "*", "box": "$", "player": "@",
           "player on target": "+"}
    grid = [line for line in users[-1].split("\n\n")[-2 if len(users) == 1 else 0].splitlines()]
    state = tuple("".join(xsb[meaning[ch]] for ch in line) for line in grid)
    move = plan(state)[0]
    return reply_with_counts(body, f"Pushing on.\n<answer>{move}</answer>")


def test_openai_agent_solves_rooms_from_the_rendered_grid_and_legend(tmp_path):
    server = LLMServer(policy=_sokoban_solver).start()
    try:
        shipped = load_tasks("sokoban", default_mode="gym", validators=task_validators())
        tasks = tmp_path / "rooms.jsonl"
        picked = [t for t in shipped if t.id.endswith(("-000", "-001"))]
        tasks.write_text("".join(json.dumps({"id": t.id, "seed": t.seed, "tags": list(t.tags), **t.payload}) + "\n"
                                 for t in picked))
        result = CliRunner().invoke(main, ["run", "--mode", "gym", "--data", str(tasks), "--agent", "openai",
                                           "--base-url", server.url, "--model", "m", "--num-rollouts", "1",
                                           "--output-dir", str(tmp_path), "--run-id", "oa"])
        assert result.exit_code == 0, result.output
    finally:
        server.stop()
    records = _records(tmp_path / "oa")
    assert len(records) == 6 and all(r["success"] for r in records)
    assert sum(r["turns"] for r in records) == len(server.requests)
    first = server.requests[0]["body"]["messages"]
    assert "Sokoban" in first[1]["content"] and "<answer>Right</answer>" in first[1]["content"]


def test_a_policy_that_never_moves_earns_the_penalties_and_fails(tmp_path):
    server = LLMServer(policy=lambda body: reply_with_counts(body, "Let me think about it.")).start()
    try:
        result = CliRunner().invoke(main, ["run", "--mode", "gym", "--data", "sokoban-endless", "--agent", "openai",
                                           "--base-url", server.url, "--model", "m", "--num-rollouts", "1",
                                           "--output-dir", str(tmp_path), "--run-id", "idle"])
    finally:
        server.stop()
    assert result.exit_code == 0, result.output  # every sample has its final record
    records = _records(tmp_path / "idle")
    assert len(records) == 3
    for r in records:  # 10 steps of -0.1 and the documents' format penalty -0.15
        assert r["status"] == "failure" and not r["success"] and r["reward"] == pytest.approx(-2.5)


def test_a_return_above_one_without_every_box_on_target_is_no_success(tmp_path):
    """ROLL's return is no 0-1 score: two of three boxes on target in three steps earn 1.7,
    and the record must still say failure."""
    room = ["#####", "#.#.#", "#$#$#", "#@__#", "#$###", "#.###", "#####"]
    tasks = tmp_path / "three.jsonl"
    tasks.write_text(json.dumps({"id": "three", "game": "Sokoban", "room": room, "max_steps": 3}) + "\n")
    moves = ["Up", "Down", "Down"]

    def script(body):
        turn = sum(1 for m in body["messages"] if m["role"] == "user") - 1
        return reply_with_counts(body, f"<answer>{moves[turn]}</answer>")

    server = LLMServer(policy=script).start()
    try:
        result = CliRunner().invoke(main, ["run", "--mode", "gym", "--data", str(tasks), "--agent", "openai",
                                           "--base-url", server.url, "--model", "m", "--num-rollouts", "1",
                                           "--output-dir", str(tmp_path), "--run-id", "three"])
    finally:
        server.stop()
    assert result.exit_code == 0, result.output
    [record] = _records(tmp_path / "three")
    assert record["reward"] == pytest.approx(0.9 - 0.1 + 0.9) and record["eval"]["boxes_on_target"] == 2
    assert record["status"] == "failure" and not record["success"] and not record["eval"]["success"]


# -- the RL tags ---------------------------------------------------------------------------

def _random_move(body):
    import random

    return {"reply": f"<answer>{random.choice(['Left', 'Down', 'Right', 'Up'])}</answer>"}


def test_scheduler_groups_share_a_room_and_new_groups_get_new_rooms(tmp_path, schedulers):
    server = LLMServer(policy=_random_move).start()
    try:
        tags = ["SimpleSokoban", "LargerSokoban", "SokobanDifferentGridVocab", "FrozenLake"]
        pinned = tmp_path / "pinned.jsonl"
        pinned.write_text(json.dumps({"id": "pinned", "mode": "gym", "game": "Sokoban", "dim_room": [6, 6],
                                      "num_boxes": 1, "max_steps": 3, "seed": 5}) + "\n")
        train = schedulers(rl_config(tmp_path, server), EnvManagerConfig(
            tags=tags, num_groups_partition=[2, 2, 2, 2], group_size=4), seed=0)
        batch = train.get_batch(32, step=0)
        pin = train.sibling(EnvManagerConfig(tags=["Pinned"], group_size=2, num_groups_partition=[2],
                                             task_sets={"Pinned": TaskSet("gym", str(pinned))}))
        pinned_batch = pin.get_batch(4, step=0)
    finally:
        server.stop()
    groups = defaultdict(list)
    for trajectory in batch:
        groups[trajectory.group_id].append(trajectory)
    assert len(groups) == 8 and all(len(members) == 4 for members in groups.values())
    assert {t.tag for t in batch} == set(tags)
    rooms = {}
    for group_id, members in groups.items():
        assert len({(t.tag, t.task_id, t.seed, t.episode_id) for t in members}) == 1
        tag = members[0].tag
        if tag != "FrozenLake":
            # ROLL's episode seed: the tag's group seed + the episode id
            assert members[0].seed == TAG_SEED_STRIDE * tags.index(tag) + members[0].episode_id
            assert len({tuple(t.record["eval"]["room"]) for t in members}) == 1
            rooms[group_id] = (tag, tuple(members[0].record["eval"]["room"]))
            assert all(t.record["eval"]["steps"] == 10 or t.record["eval"]["success"] for t in members)
    for tag in TAG_SETTINGS:
        assert len({room for t, room in rooms.values() if t == tag}) == 2  # each group its own room
    assert {t.seed for t in pinned_batch} == {5}
    assert len({tuple(t.record["eval"]["room"]) for t in pinned_batch}) == 1
    assert len({t.group_id for t in pinned_batch}) == 2
