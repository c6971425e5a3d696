"""Task fields a mode does not know are refused at load (a typo such as "chekc" for "check"
would otherwise be ignored and the task graded without its check), naming file:line and the
closest known field; an integer id is the string of its digits."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from conftest import shell_task, write_tasks
from parallel_rollout.cli import main


def invoke(tmp_path, data, *args):
    return CliRunner().invoke(main, ["--data", str(data), "--output-dir", str(tmp_path / "out"),
                                     "--no-progress", "--run-id", "r", *args])


def test_an_unknown_field_is_refused_with_file_line_and_the_closest_name(tmp_path):
    task = shell_task("t1")
    task["chekc"] = task.pop("check")
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("t0"), task])
    for extra in ([], ["--dry-run"]):
        result = invoke(tmp_path, data, "--mode", "shell", *extra)
        assert result.exit_code == 2, (result.output, result.exception)
        said = " ".join(result.output.split())
        assert f"{data}:2: task 't1': unknown field 'chekc' (did you mean 'check'?)" in said
    assert not (tmp_path / "out" / "r").exists()
    optional = write_tasks(tmp_path / "opt.jsonl", [{**shell_task("o"), "setpu": ["touch x"]}])
    result = invoke(tmp_path, optional, "--mode", "shell")
    assert result.exit_code == 2  # before: run without its setup
    assert f"{optional}:1: task 'o': unknown field 'setpu' (did you mean 'setup'?)" in " ".join(result.output.split())
    math = write_tasks(tmp_path / "math.jsonl", [{"id": "m", "mode": "math", "problem": "1+1", "answr": "2"}])
    result = invoke(tmp_path, math, "--dry-run")
    assert result.exit_code == 2
    assert "unknown field 'answr' (did you mean 'answer'?)" in " ".join(result.output.split())


def test_a_dataset_s_own_columns_are_kept_not_refused(tmp_path):
    """Fields unlike any the mode knows (a dataset's difficulty, source, split) load and reach
    the agent's task; one like a field the task also has ('tests' beside 'test') too."""
    from parallel_rollout.envs import task_validators
    from parallel_rollout.tasks import load_tasks

    task = {**shell_task("t"), "difficulty": "hard", "source": "mine", "checks": ["extra"]}
    data = write_tasks(tmp_path / "tasks.jsonl", [task])
    [loaded] = load_tasks(data, default_mode="shell", validators=task_validators())
    assert (loaded.get("difficulty"), loaded.get("source"), loaded.get("checks")) == ("hard", "mine", ["extra"])
    result = invoke(tmp_path, data, "--mode", "shell", "--dry-run")
    assert result.exit_code == 0, result.output


def test_shipped_task_sets_and_osworld_tasks_still_load(tmp_path):
    for data in ("benchmarks/shell_tasks.jsonl", "humaneval", "frozenlake", "sokoban", "rag"):
        result = CliRunner().invoke(main, ["--data", data, "--dry-run", "--output-dir", str(tmp_path)])
        assert "unknown field" not in result.output, (data, result.output)
    osworld = Path("/work/shared/osworld")
    if osworld.is_dir():
        from parallel_rollout.envs import task_validators
        from parallel_rollout.tasks import load_task_set
        from parallel_rollout.tasks_osworld import osworld_folder

        try:
            osworld_folder(osworld)
        except Exception:  # noqa: BLE001 - not an OSWorld folder here: nothing to load
            return
        load_task_set(str(osworld), default_mode="osworld", validators=task_validators())


def test_an_integer_id_is_its_string(tmp_path):
    task = {**shell_task("x"), "id": 7}
    data = write_tasks(tmp_path / "tasks.jsonl", [task])
    first = invoke(tmp_path, data, "--mode", "shell")
    assert first.exit_code == 0, (first.output, first.exception)
    records = [json.loads(line) for line in (tmp_path / "out" / "r" / "results.jsonl").read_text().splitlines()]
    assert [(r["task_id"], r["key"]) for r in records] == [("7", "7#0")]
    again = invoke(tmp_path, data, "--mode", "shell", "--resume")
    assert again.exit_code == 0, (again.output, again.exception)
    assert "1 already final, 0 to run" in again.stderr


def test_a_column_named_like_an_answer_that_goes_to_the_agent_is_warned_of(tmp_path):
    """A column the mode neither reads nor holds back whose name says it may hold the answer
    (AIME's capitalised 'Solution', a 'gold' column) is passed on to an agent not trusted with
    the answer key, as every column is, and the run says so naming it; other columns
    ('difficulty') and the mode's own answer key ('answer', 'solution': held back) are not named."""
    import shlex
    import sys

    from agent_runs import needs_bwrap

    tasks = [{"id": f"m{i}", "mode": "math", "problem": "1+1", "answer": "2", "solution": "1+1=\\boxed{2}",
              "Solution": "1+1=\\boxed{2}", "gold": "2", "difficulty": "easy"} for i in range(2)]
    data = write_tasks(tmp_path / "math.jsonl", tasks)
    said = " ".join(invoke(tmp_path, data, "--dry-run", "--agent", "command", "--agent-cmd", "true").output.split())
    assert "'Solution' (2 task(s)), 'gold' (2 task(s)): field(s) of math tasks whose names say they may hold " \
           "the answer go to the agent (--agent command)" in said, said
    assert "'difficulty'" not in said and "'solution' (" not in said and "'answer' (" not in said
    oracle = invoke(tmp_path, data, "--dry-run")  # the oracle is handed the key anyway
    assert oracle.exit_code == 0 and "may hold the answer" not in oracle.output, oracle.output
    if needs_bwrap.args[0]:
        return
    agent = tmp_path / "agent.py"
    agent.write_text("import json, sys\nseen = open(sys.argv[1], 'a')\nfor line in sys.stdin:\n"
                     "    seen.write(json.dumps(sorted(json.loads(line).get('task', {}))) + '\\n'); seen.flush()\n"
                     "    print(json.dumps('0'), flush=True)\n")
    seen = tmp_path / "seen.jsonl"
    run = invoke(tmp_path, data, "--agent", "command", "--agent-cmd",
                 " ".join(shlex.quote(p) for p in (sys.executable, str(agent), str(seen))))
    assert run.exit_code == 0, (run.output, run.exception)
    assert "'Solution' (2 task(s)), 'gold' (2 task(s))" in " ".join(run.output.split()), run.output
    assert [json.loads(line) for line in seen.read_text().splitlines()] == [
        ["Solution", "difficulty", "gold", "id", "mode", "problem", "seed", "tags"]] * 2


def test_a_known_field_in_another_case_or_spelling_is_kept_and_warned_of_once_per_file(tmp_path, caplog):
    """``TIMEOUT`` or ``Time_Out`` for ``timeout``, ``SEED`` for ``seed``: no typo distance
    sees them (``TIMEOUT`` shares no letter of ``timeout`` in its case) and the task ran
    without the field, in silence. They are kept as the task's own data, as before, with one
    warning per field and file naming the first line and the mode's fields; a dataset's own
    columns (``model``, near ``mode``; ``checks`` beside ``check``) get none."""
    from parallel_rollout.envs import task_validators
    from parallel_rollout.tasks import load_tasks

    tasks = [shell_task("t0"), {**shell_task("t1"), "TIMEOUT": 300, "SEED": 3}, {**shell_task("t2"), "TIMEOUT": 300},
             {**shell_task("t3"), "Time_Out": 5, "model": "m", "difficulty": "hard", "checks": ["x"]}]
    data = write_tasks(tmp_path / "tasks.jsonl", tasks)
    for _ in range(2):
        with caplog.at_level("WARNING", logger="parallel_rollout"):
            loaded = load_tasks(data, default_mode="shell", validators=task_validators())
    assert [t.get("TIMEOUT") for t in loaded] == [None, 300, 300, None] and loaded[1].seed is None
    said = [r.getMessage() for r in caplog.records if "in another case or spelling" in r.getMessage()]
    assert len(said) == 3, said
    assert said[0].startswith(f"{data}:2: field 'TIMEOUT' is not a shell task's, but reads as 'timeout'"), said
    assert "the task runs without 'timeout' (a shell task's fields: id, mode, seed, tags, check, instruction, " \
           "reap, reference, setup, timeout)" in said[0], said
    assert said[1].startswith(f"{data}:2: field 'SEED' is not a shell task's, but reads as 'seed'"), said
    assert said[2].startswith(f"{data}:4: field 'Time_Out' is not a shell task's, but reads as 'timeout'"), said
