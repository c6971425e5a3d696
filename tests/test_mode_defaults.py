"""What a mode decides when its flag is not given, recorded as the run uses it: the mode's own
--max-turns (py 1, web 20 …) in config.json, --print-config and the resume check; the mode a
named dataset (or a task file whose tasks all name one) implies when --mode is not given."""

from __future__ import annotations

import json
import re

from click.testing import CliRunner

from parallel_rollout.cli import main
from parallel_rollout.config import RunConfig
from parallel_rollout.envs import get_env


def invoke(tmp_path, *args):
    return CliRunner().invoke(main, ["--output-dir", str(tmp_path / "out"), "--no-progress", *args])


def printed(tmp_path, *args) -> dict:
    result = invoke(tmp_path, *args, "--print-config")
    assert result.exit_code == 0, (result.output, result.exception)
    return json.loads(result.stdout)


def test_the_modes_own_max_turns_is_what_is_recorded_shown_checked_and_used(tmp_path):
    assert printed(tmp_path, "--mode", "web", "--data", "miniwob")["max_turns"] == 20
    assert printed(tmp_path, "--mode", "py", "--data", "humaneval")["max_turns"] == 1
    assert printed(tmp_path, "--mode", "web", "--data", "miniwob", "--max-turns", "7")["max_turns"] == 7
    assert printed(tmp_path, "--mode", "shell", "--data", "x.jsonl")["max_turns"] == 100
    first = invoke(tmp_path, "--mode", "py", "--data", "humaneval", "--run-id", "p", "--limit", "1")
    assert first.exit_code == 0, (first.output, first.exception)
    stored = json.loads((tmp_path / "out" / "p" / "config.json").read_text())
    assert stored["config"]["max_turns"] == 1
    # a resume with another limit is one run with two limits: refused
    other = invoke(tmp_path, "--run-id", "p", "--resume", "--limit", "2", "--max-turns", "100")
    assert other.exit_code == 2, (other.output, other.exception)
    assert "other settings for --max-turns (1 then, 100 now)" in " ".join(other.output.split())
    # the value the run used is accepted, and so is leaving it out
    same = invoke(tmp_path, "--run-id", "p", "--resume", "--limit", "2", "--max-turns", "1")
    assert same.exit_code == 0, (same.output, same.exception)
    again = invoke(tmp_path, "--run-id", "p", "--resume", "--limit", "3")
    assert again.exit_code == 0, (again.output, again.exception)
    turns = [json.loads(line)["turns"] for line in (tmp_path / "out" / "p" / "results.jsonl").read_text().splitlines()]
    assert turns == [1, 1, 1]


def test_a_run_config_made_in_python_gets_the_same_turn_limit():
    # an RL scheduler's RunConfig: its workers use Env.turn_limit, as a run records it
    from parallel_rollout.envs import with_mode_defaults

    for mode, turns in (("web", 20), ("py", 1), ("shell", 100)):
        cfg = RunConfig(mode=mode)
        assert get_env(mode).turn_limit(cfg) == with_mode_defaults(cfg).max_turns == turns
    given = RunConfig(mode="web", max_turns=5, explicit=frozenset({"max_turns"}))
    assert get_env("web").turn_limit(given) == with_mode_defaults(given).max_turns == 5


def test_help_states_each_modes_own_max_turns():
    from parallel_rollout.cli import MODE_TURNS

    said = dict(re.findall(r"(\w+) (\d+)", MODE_TURNS))
    for name in ("shell", "py", "math", "osworld", "gym", "web", "rag"):
        default = get_env(name).default_max_turns
        assert said.get(name) == (str(default) if default else None), name
    out = " ".join(CliRunner().invoke(main, ["run", "--help"]).output.split())
    assert f"[default: (the mode's own ({MODE_TURNS}), else 100)]" in out


def test_a_named_dataset_implies_its_mode(tmp_path):
    for data, mode in (("humaneval", "py"), ("miniwob", "web"), ("frozenlake", "gym"), ("sokoban", "gym"),
                       ("sokoban-endless", "gym"), ("rag", "rag")):
        assert printed(tmp_path, "--data", data)["mode"] == mode, data
    assert printed(tmp_path, "--data", "miniwob")["max_turns"] == 20
    result = invoke(tmp_path, "--data", "humaneval", "--run-id", "h", "--limit", "1")
    assert result.exit_code == 0, (result.output, result.exception)
    assert json.loads((tmp_path / "out" / "h" / "config.json").read_text())["config"]["mode"] == "py"
    # resumed without flags: the same mode again
    resumed = invoke(tmp_path, "--run-id", "h", "--resume", "--limit", "2")
    assert resumed.exit_code == 0, (resumed.output, resumed.exception)
    keys = [json.loads(line)["key"] for line in (tmp_path / "out" / "h" / "results.jsonl").read_text().splitlines()]
    assert keys == ["HumanEval/0#0", "HumanEval/1#0"]


def test_a_conflicting_mode_is_refused_clearly(tmp_path):
    for extra in ([], ["--dry-run"], ["--print-config"]):
        result = invoke(tmp_path, "--mode", "shell", "--data", "humaneval", *extra)
        assert result.exit_code == 2, (extra, result.output)
        assert "--data humaneval holds py tasks, which --mode shell cannot run: leave --mode out, or give " \
               "--mode py" in " ".join(result.output.split()), extra
    assert not (tmp_path / "out").exists()


def test_a_task_file_whose_tasks_name_one_mode_runs_that_mode(tmp_path):
    data = tmp_path / "tasks.jsonl"
    data.write_text("".join(json.dumps({"id": f"m{i}", "mode": "py", "prompt": "def f():\n",
                                        "entry_point": "f", "test": "def check(f):\n    assert f() == 1\n",
                                        "canonical_solution": "    return 1\n"}) + "\n" for i in range(2)))
    shown = printed(tmp_path, "--data", str(data))
    assert (shown["mode"], shown["max_turns"]) == ("py", 1)
    result = invoke(tmp_path, "--data", str(data), "--run-id", "f")
    assert result.exit_code == 0, (result.output, result.exception)
    assert "2 succeeded" in result.output
    # tasks of several modes are no one run: without --mode they are named, not a --mode
    # never given ("the run is --mode shell", the default)
    data.write_text(data.read_text() + json.dumps({"id": "s", "mode": "shell", "instruction": "x", "check": "true"}) + "\n")
    mixed = invoke(tmp_path, "--data", str(data), "--run-id", "g")
    assert mixed.exit_code == 2
    said = " ".join(mixed.output.split())
    assert (f"{data}:3: task 's' has mode 'shell' but {data}:1: task 'm0' has mode 'py'; a run has one mode and "
            "no --mode was given: split the task file by mode") in said, said
    assert "--mode shell" not in said
    # with --mode given, the load says which one the run has
    given = invoke(tmp_path, "--mode", "shell", "--data", str(data), "--run-id", "g")
    assert given.exit_code == 2 and f"{data}:1: task 'm0' has mode 'py' but the run is --mode shell" in given.output


def test_tasks_that_name_no_mode_beside_one_that_does_are_named(tmp_path):
    """A task without a mode takes the run's: the default (shell) when no --mode is given, which
    a task naming another mode conflicts with; tasks naming none beside shell ones run."""
    data = tmp_path / "tasks.jsonl"
    data.write_text(json.dumps({"id": "a", "problem": "1+1", "answer": "2"}) + "\n"
                    + json.dumps({"id": "b", "mode": "math", "problem": "2+2", "answer": "4"}) + "\n")
    result = invoke(tmp_path, "--data", str(data), "--run-id", "n")
    said = " ".join(result.output.split())
    assert result.exit_code == 2 and "--mode shell" not in said, said
    assert (f"{data}:2: task 'b' has mode 'math' but {data}:1: task 'a' names none, so it would run as shell, the "
            "default (no --mode was given): give --mode math to run the tasks that name none as it") in said
    shell = tmp_path / "shell.jsonl"
    shell.write_text(json.dumps({"id": "a", "instruction": "x", "check": "true", "reference": ["true"]}) + "\n"
                     + json.dumps({"id": "b", "mode": "shell", "instruction": "x", "check": "true",
                                   "reference": ["true"]}) + "\n")
    assert invoke(tmp_path, "--data", str(shell), "--run-id", "s", "--dry-run").exit_code == 0


def test_an_unknown_mode_in_a_task_file_is_named_by_file_and_line(tmp_path):
    """A task file whose one task says "mode": "shel" was taken as the run's mode and refused
    as if --mode shel had been given ("unknown mode 'shel'", no file, no line)."""
    data = tmp_path / "bm.jsonl"
    data.write_text(json.dumps({"id": "t4", "mode": "shel", "instruction": "x", "check": "true"}) + "\n")
    for extra in ([], ["--dry-run"]):
        result = invoke(tmp_path, "--data", str(data), "--run-id", "u", *extra)
        assert result.exit_code == 2, result.output
        assert f"{data}:1: unknown mode 'shel' in task 't4'" in " ".join(result.output.split()), (extra, result.output)
