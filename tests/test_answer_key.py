"""The answer key (``Env.answer_fields``: the fields that grade a task or solve it) reaches
no agent but the oracle: not a command agent's program (its JSON ``task``), not a plugin
agent's ``reset``, not any observation. An agent that replays or runs what it was handed
scores what it earned.
"""

from __future__ import annotations

import json
import shlex
import sys

import pytest
from click.testing import CliRunner

from agent_runs import needs_bwrap
from conftest import assert_exactly_once, write_tasks
from parallel_rollout.agents.base import Agent
from parallel_rollout.cli import main
from parallel_rollout.envs import get_env
from parallel_rollout.envs.registry import MODES
from parallel_rollout.tasks import Task

#: a command agent that keeps each task it is handed and uses whatever answer key it finds:
#: the canonical solution (py), the check and the reference (shell)
PEEKING_AGENT = """\
import json, sys
seen = open(sys.argv[1], "a")
for line in sys.stdin:
    msg = json.loads(line)
    if msg["turn"] == 1:
        task = msg["task"]
        seen.write(json.dumps(task) + "\\n"); seen.flush()
        commands = [task[k] for k in ("check",) if k in task] + list(task.get("reference", []))
    if msg["mode"] == "py":
        reply = task.get("canonical_solution", "    pass\\n")
    elif msg["turn"] <= len(commands):
        reply = {"command": commands[msg["turn"] - 1]}
    else:
        reply = "DONE"
    print(json.dumps(reply), flush=True)
"""

SHELL_TASK = {"id": "count", "mode": "shell", "instruction": "Write the number of lines of ~/data.txt into ~/n.",
              "setup": ["seq 1 37 > ~/data.txt"], "check": 'test "$(cat ~/n)" = 37',
              "reference": ["wc -l < ~/data.txt > ~/n"]}


def run(tmp_path, run_id: str, *flags: str):
    result = CliRunner().invoke(main, ["--output-dir", str(tmp_path / "out"), "--run-id", run_id,
                                       "--num-rollouts", "2", "--no-progress", *flags])
    assert result.exit_code == 0, (result.output[-3000:], result.exception)
    return tmp_path / "out" / run_id


@needs_bwrap
def test_a_command_agent_is_not_handed_the_answer_key(tmp_path):
    script, seen = tmp_path / "peek.py", tmp_path / "seen.jsonl"
    script.write_text(PEEKING_AGENT)
    agent_cmd = " ".join(shlex.quote(p) for p in (sys.executable, str(script), str(seen)))
    he = run(tmp_path, "he", "--mode", "py", "--data", "humaneval", "--limit", "3", "--agent", "command",
             "--agent-cmd", agent_cmd, "--num-vms", "1", "--use-vm-pool")
    finals = assert_exactly_once(he, {f"HumanEval/{i}#0" for i in range(3)})
    assert {r["status"] for r in finals.values()} == {"failure"}, {k: r["status"] for k, r in finals.items()}
    data = write_tasks(tmp_path / "shell.jsonl", [SHELL_TASK])
    shell = run(tmp_path, "shell", "--mode", "shell", "--data", str(data), "--agent", "command",
                "--agent-cmd", agent_cmd)
    [record] = assert_exactly_once(shell, {"count#0"}).values()
    assert record["status"] == "failure" and record["turns"] == 1, record  # nothing to run but DONE
    handed = [json.loads(line) for line in seen.read_text().splitlines()]
    assert [sorted(task) for task in handed] == (
        [["entry_point", "id", "mode", "prompt", "seed", "tags", "task_id"]] * 3
        + [["id", "instruction", "mode", "seed", "setup", "tags"]]), handed


#: a command agent that answers with the \\boxed answer of the task's ``solution`` column (the
#: worked solution MATH-style datasets keep beside the problem) and logs the fields it got
SOLUTION_THIEF = """\
import json, sys
seen = open(sys.argv[1], "a")
for line in sys.stdin:
    msg = json.loads(line)
    task = msg.get("task", {})
    seen.write(json.dumps(sorted(task)) + "\\n"); seen.flush()
    solution = task.get("solution", "")
    print(json.dumps(solution[solution.rfind("\\\\boxed"):] if "\\\\boxed" in solution else "no idea"), flush=True)
"""


@needs_bwrap
def test_a_command_agent_is_not_handed_a_datasets_solution_column(tmp_path):
    """A MATH-style row keeps its worked solution (``\\boxed{173}`` at its end) beside the
    problem: the agent that copies it got it, and scored, until math held ``solution`` back."""
    script, seen = tmp_path / "thief.py", tmp_path / "seen.jsonl"
    script.write_text(SOLUTION_THIEF)
    data = write_tasks(tmp_path / "math.jsonl", [
        {"id": "ms1", "mode": "math", "problem": "Count the ordered pairs (a, b) of integers with 1 <= a, b <= 30, "
         "gcd(a, b) = 1 and a + b prime.", "solution": "Counting carefully ... so the answer is $\\boxed{173}$.",
         "answer": "173", "level": "Level 5"}])
    agent_cmd = " ".join(shlex.quote(p) for p in (sys.executable, str(script), str(seen)))
    finals = assert_exactly_once(run(tmp_path, "thief", "--mode", "math", "--data", str(data), "--agent", "command",
                                     "--agent-cmd", agent_cmd), {"ms1#0"})
    assert finals["ms1#0"]["status"] == "failure", finals
    assert [json.loads(line) for line in seen.read_text().splitlines()] == [
        ["id", "level", "mode", "problem", "seed", "tags"]]


#: a command agent for slippery FrozenLake that, given the task's seed, replays the env's
#: random stream (gymnasium's reset(seed=…), one draw per step) and plans moves the slips
#: carry to the goal; with no seed it moves Left, which never reaches a goal to the right
SEED_REPLAYER = """\
import json, sys
from collections import deque
from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv
seen = open(sys.argv[1], "a")
def plan(desc, seed, max_steps):
    env = FrozenLakeEnv(desc=desc, is_slippery=True)
    start, _ = env.reset(seed=seed)
    draws = [env.np_random.random() for _ in range(max_steps)]
    def land(s, a, k):
        total = 0.0
        for prob, nxt, reward, done in env.P[s][a]:
            total += prob
            if total > draws[k]:
                return nxt, reward, done
    queue, known = deque([(0, start, [])]), {(0, start)}
    while queue:
        k, s, moves = queue.popleft()
        for a in range(4) if k < max_steps else ():
            nxt, reward, done = land(s, a, k)
            if reward > 0:
                return moves + [a]
            if not done and (k + 1, nxt) not in known:
                known.add((k + 1, nxt)); queue.append((k + 1, nxt, moves + [a]))
    return []
for line in sys.stdin:
    msg = json.loads(line)
    if msg["turn"] == 1:
        seed = msg["task"]["seed"]
        seen.write(json.dumps(seed) + "\\n"); seen.flush()
        obs = msg["observation"]
        moves = plan(obs["grid_map"], seed, obs["max_steps"]) if seed is not None else []
    move = moves.pop(0) if moves else 0
    print(json.dumps("<answer>" + ["Left", "Down", "Right", "Up"][move] + "</answer>"), flush=True)
"""


@needs_bwrap
def test_a_command_agent_is_not_handed_a_seed_that_draws_the_slips(tmp_path):
    """FrozenLake's slips come from the task's seed: an agent handed it replayed them and
    finished every slippery lake (where the oracle's best policy finishes some); the gym mode
    keeps its seed secret, so the agent gets ``"seed": null`` and plays the lake as it comes."""
    from parallel_rollout.envs.gym import frozenlake_path

    lakes = [json.loads(line) for line in frozenlake_path().read_text().splitlines() if '"slippery"' in line]
    assert len(lakes) >= 5 and all(lake["is_slippery"] and lake["seed"] is not None for lake in lakes)
    script, seen = tmp_path / "replay.py", tmp_path / "seeds.jsonl"
    script.write_text(SEED_REPLAYER)
    agent_cmd = " ".join(shlex.quote(p) for p in (sys.executable, str(script), str(seen)))
    data = write_tasks(tmp_path / "lakes.jsonl", lakes)
    finals = assert_exactly_once(run(tmp_path, "lakes", "--mode", "gym", "--data", str(data), "--agent", "command",
                                     "--agent-cmd", agent_cmd, "--max-turns", "40"),
                                 {f"{lake['id']}#0" for lake in lakes})
    assert [json.loads(line) for line in seen.read_text().splitlines()] == [None] * len(lakes)
    assert {r["status"] for r in finals.values()} == {"failure"}, {k: r["status"] for k, r in finals.items()}


def test_the_oracle_still_replays_the_answer_key(tmp_path):
    data = write_tasks(tmp_path / "math.jsonl", [{"id": "m1", "mode": "math", "problem": "1+1", "answer": "2"}])
    finals = assert_exactly_once(run(tmp_path, "oracle", "--mode", "math", "--data", str(data)), {"m1#0"})
    assert finals["m1#0"]["status"] == "success"


def test_a_plugin_agent_sees_neither_the_key_nor_an_observation_that_holds_it(tmp_path, monkeypatch):
    """A ``module:Class`` agent's ``reset`` gets the task without its key, and no observation
    it is given carries a value of the key (math here: the answer, verl's extra_info)."""
    log = tmp_path / "peeked.jsonl"
    monkeypatch.setenv("PR_PEEK_LOG", str(log))
    tasks = [{"id": f"m{i}", "mode": "math", "problem": f"What is one thousand and nine plus {i}?", "answer": str(i + 1009),
              "extra_info": {"answer": f"#### {i + 1009}"}} for i in range(3)]
    data = write_tasks(tmp_path / "math.jsonl", tasks)
    finals = assert_exactly_once(
        run(tmp_path, "plugin", "--mode", "math", "--data", str(data), "--agent", "test_answer_key:PeekingAgent",
            "--max-turns", "2"), {f"m{i}#0" for i in range(3)})
    assert {r["status"] for r in finals.values()} == {"failure"}, finals
    peeked = [json.loads(line) for line in log.read_text().splitlines()]
    resets = [p["task"] for p in peeked if "task" in p]
    assert resets == [["problem"]] * 3, resets
    observations = json.dumps([p["observation"] for p in peeked if "observation" in p])
    assert all(str(i + 1009) not in observations for i in range(3)), observations


class PeekingAgent(Agent):
    """Logs the payload fields it is handed and every observation; answers a wrong number,
    or the task's answer when it was handed one."""

    options = frozenset()

    def reset(self, task) -> None:
        import os

        self.log = open(os.environ["PR_PEEK_LOG"], "a")
        self.log.write(json.dumps({"task": sorted(task.payload)}) + "\n")
        self.answer = task.get("answer", "0")

    def act(self, observation):
        self.log.write(json.dumps({"observation": observation}) + "\n")
        self.log.flush()
        return f"\\boxed{{{self.answer}}}"


@pytest.mark.parametrize("mode", sorted(MODES.builtin))
def test_each_mode_declares_its_answer_key_and_keeps_what_an_agent_needs(mode):
    env = get_env(mode)
    if env.task_fields is not None:
        assert env.answer_fields <= env.task_fields
    payload = {name: f"value of {name}" for name in (env.task_fields or {"instruction", "evaluator",
                                                                         "reference", "config"})}
    view = env.agent_view(Task(id="t", mode=mode, payload=payload, seed=3, tags=("a",)))
    assert set(view.payload) == set(payload) - env.answer_fields
    assert (view.id, view.mode, view.tags) == ("t", mode, ("a",))
    # the seed of a mode whose randomness an agent must not foresee is held back
    assert env.seed_is_secret == (mode in {"gym", "web"})
    assert view.seed == (None if env.seed_is_secret else 3)
    needed = {"py": {"prompt", "entry_point"}, "shell": {"instruction", "setup"}, "math": {"problem"},
              "rag": {"question", "corpus"}, "osworld": {"instruction", "config"}}
    assert needed.get(mode, set()) <= set(view.payload)
    keys = {"py": {"test", "canonical_solution", "code", "test_list", "test_setup_code", "challenge_test_list",
                   "solutions", "input_output"},
            "shell": {"check", "reference"}, "math": {"answer", "solution", "extra_info", "reward_model"},
            "rag": {"answers", "reference", "answer", "golden_answers"}, "osworld": {"evaluator", "reference"}}
    assert keys.get(mode, set()) <= env.answer_fields
