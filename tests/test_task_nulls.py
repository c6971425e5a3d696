"""A task field given as null, as exports from datasets write one a record lacks (HuggingFace's
``to_json``, pandas, a Parquet table whose column another row fills): null in a field a mode
reads is the field not given, so it takes its default; a field the mode needs, given as null,
is refused naming the file, line and field and saying why. Each through the CLI's dry run.
Every optional field below was refused before ("field 'timeout' must be a number, got null")."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from conftest import read_results, shell_task, write_tasks
from parallel_rollout.cli import main
from parallel_rollout.exit_codes import EXIT_USAGE
from test_osworld_taskset import osworld_folder

_PY = {"id": "add", "mode": "py", "prompt": "def add(a, b):\n", "entry_point": "add", "test": "def check(f): pass",
       "canonical_solution": "    return a + b\n"}
_MATH = {"id": "sum", "mode": "math", "problem": "1+1", "answer": "2"}
_LAKE = {"id": "lake", "mode": "gym"}
_BOXES = {"id": "boxes", "mode": "gym", "game": "Sokoban"}
_WEB = {"id": "page", "mode": "web", "env": "click-button"}
_RAG = {"id": "word", "mode": "rag", "question": "Which word?", "answers": ["reference"], "corpus": "wordnet"}

#: a task and the optional field of its mode that is given as null
OPTIONAL = {
    "tags": (shell_task("s"), "tags"),
    "seed": (shell_task("s"), "seed"),
    "mode": (shell_task("s"), "mode"),
    **{f"shell-{name}": (shell_task("s"), name) for name in ("setup", "reap", "timeout")},
    "py-timeout": (_PY, "timeout"),
    "math-solution": (_MATH, "solution"),
    **{f"lake-{name}": (_LAKE, name) for name in ("game", "desc", "map_name", "size", "p", "is_slippery", "max_steps")},
    **{f"sokoban-{name}": (_BOXES, name) for name in ("room", "dim_room", "num_boxes", "search_depth", "grid_vocab",
                                                       "grid_lookup", "format_penalty", "max_steps")},
    "web-screenshot": (_WEB, "screenshot"),
    "web-time_limit_s": (_WEB, "time_limit_s"),
    "rag-reference": (_RAG, "reference"),
}


def _dry_run(data, *args: str) -> tuple[int, str]:
    done = CliRunner().invoke(main, ["--data", str(data), "--dry-run", "--no-progress", *args])
    return done.exit_code, " ".join(done.output.split())


@pytest.mark.parametrize("case", list(OPTIONAL))
def test_null_in_an_optional_field_reads_as_not_given(tmp_path, case):
    task, name = OPTIONAL[case]
    data = write_tasks(tmp_path / "tasks.jsonl", [{**task, name: None}])
    code, said = _dry_run(data, "--mode", task["mode"])
    assert code == 0, said
    assert "runnable 1 of 1 tasks" in said, said


def test_a_null_mode_takes_the_run_s_without_mode_flag(tmp_path):
    """"mode": null said "has no 'mode' and no --mode was given" even with --mode given."""
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("a", mode=None), shell_task("b")])
    code, said = _dry_run(data)
    assert code == 0, said
    assert "runnable 2 of 2 tasks" in said, said


@pytest.mark.parametrize("task, name, agent_says", [
    (shell_task("s"), "reference", "task 's' has no 'reference' commands"),
    (_PY, "canonical_solution", "task 'add' has no 'canonical_solution'"),
])
def test_a_null_reference_is_none_given(tmp_path, task, name, agent_says):
    """The oracle says of a null reference what it says of a task without one: none to replay."""
    data = write_tasks(tmp_path / "tasks.jsonl", [{**task, name: None}])
    code, said = _dry_run(data)
    assert code == EXIT_USAGE, said
    assert f"{data}:1: --agent oracle: {agent_says}" in said, said
    assert "got null" not in said, said


#: a task, its field the mode needs given as null, and what that field must be
REQUIRED = {
    "shell-check": (shell_task("s"), "check", "a string"),
    "shell-instruction": (shell_task("s"), "instruction", "a string"),
    "py-test": (_PY, "test", "a string"),
    "math-answer": (_MATH, "answer", "a string or a number"),
    "web-env": (_WEB, "env", "a string"),
    "rag-answers": (_RAG, "answers", "a list"),
}


@pytest.mark.parametrize("case", list(REQUIRED))
def test_null_in_a_needed_field_is_refused_saying_why(tmp_path, case):
    task, name, kind = REQUIRED[case]
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("first"), {**task, name: None}])
    code, said = _dry_run(data, "--mode", task["mode"])
    assert code == EXIT_USAGE, said
    assert (f"{data}:2: task {task['id']!r}: field {name!r} must be {kind}, got null: null reads as not given, "
            f"and {task['mode']} tasks need it") in said, said


def test_an_osworld_tasks_null_config_reads_as_no_steps_and_a_null_evaluator_is_refused(tmp_path):
    evaluator = {"func": "infeasible"}
    folder = osworld_folder(tmp_path / "set", {
        "unset": {"domain": "os", "instruction": "x", "config": None, "evaluator": evaluator, "proxy": None},
        "ungraded": {"domain": "os", "instruction": "x", "config": [], "evaluator": None}})
    code, said = _dry_run(folder)
    assert code == EXIT_USAGE, said
    examples = folder / "evaluation_examples" / "examples" / "os"
    assert (f"{examples / 'ungraded.json'}:1: task 'ungraded': field 'evaluator' must be an object, got null: "
            "null reads as not given, and osworld tasks need it") in said, said
    assert "unset" not in said, said


def test_a_parquet_column_null_in_some_rows_reads_as_not_given(tmp_path):
    """A Parquet table has every column in every row: a task without a timeout or tags holds
    null there."""
    rows = [shell_task("a", timeout=30, tags=["slow"], reap=False), shell_task("b", timeout=None, tags=None, reap=None)]
    data = tmp_path / "tasks.parquet"
    pq.write_table(pa.Table.from_pylist(rows), data)
    code, said = _dry_run(data, "--mode", "shell")
    assert code == 0, said
    assert "runnable 2 of 2 tasks" in said, said


def test_a_shell_task_with_its_optional_fields_null_runs_with_their_defaults(tmp_path):
    """Not only loaded: the run reads each null as its default (no setup, the default timeout,
    the VM's processes reaped), and the oracle's task succeeds."""
    task = shell_task("a", setup=None, timeout=None, reap=None, tags=None, seed=None)
    data = write_tasks(tmp_path / "tasks.jsonl", [task])
    out = tmp_path / "out"
    done = CliRunner().invoke(main, ["--data", str(data), "--output-dir", str(out), "--run-id", "r", "--no-progress"])
    assert done.exit_code == 0, done.output
    [record] = read_results(out / "r")
    assert (record["status"], record["reward"], record["tags"]) == ("success", 1.0, []), record


#: a task whose object field holds an optional field given as null (read as not given, as a
#: top-level one is); each was refused before ("field 'answer' must be a string, got null")
NESTED_OPTIONAL = {
    "rag-reference.answer": (_RAG, "reference", {"queries": ["word"], "answer": None}),
    "rag-reference.queries": (_RAG, "reference", {"queries": None, "answer": "reference"}),
}


@pytest.mark.parametrize("case", list(NESTED_OPTIONAL))
def test_null_in_an_optional_nested_field_reads_as_not_given(tmp_path, case):
    task, name, value = NESTED_OPTIONAL[case]
    data = write_tasks(tmp_path / "tasks.jsonl", [{**task, name: value}])
    code, said = _dry_run(data, "--mode", task["mode"])
    assert code == 0, said
    assert "runnable 1 of 1 tasks" in said, said


def test_a_nested_fields_refusal_names_its_path(tmp_path):
    """"field 'answer' must be a string" read as the task's top-level answer."""
    data = write_tasks(tmp_path / "tasks.jsonl", [{**_RAG, "reference": {"answer": 5}}])
    code, said = _dry_run(data)
    assert code == EXIT_USAGE, said
    assert f"{data}:1: task 'word': field 'reference.answer' must be a string, got 5" in said, said


def test_an_osworld_evaluators_null_postconfig_and_conj_read_as_not_given(tmp_path):
    evaluator = {"func": "infeasible", "postconfig": None, "conj": None, "options": None}
    folder = osworld_folder(tmp_path / "set", {"unset": {"domain": "os", "instruction": "x", "config": [],
                                                         "evaluator": evaluator, "reference": ["FAIL"]}})
    code, said = _dry_run(folder)
    assert code == 0, said
    assert "runnable 1 of 1 tasks" in said, said


#: an OSWorld evaluator's field its metric needs, given as null, and what the field must be;
#: each was refused in the evaluator's own words ("evaluator 'func' must be a metric name or a
#: list of names", "needs a 'result' getter"), as if the file had left it out or misspelled it
EVALUATOR_NEEDED = {
    "func": ({"func": None, "result": {"type": "vm_command_line", "command": "ls"}}, "a string or a list"),
    "result": ({"func": "exact_match", "result": None, "expected": {"type": "rule", "rules": {"expected": "x"}}},
               "an object"),
}


@pytest.mark.parametrize("name", list(EVALUATOR_NEEDED))
def test_an_osworld_evaluators_needed_field_given_as_null_is_refused_as_any_needed_null(tmp_path, name):
    evaluator, kind = EVALUATOR_NEEDED[name]
    folder = osworld_folder(tmp_path / "set", {"t": {"domain": "os", "instruction": "x", "config": [],
                                                     "evaluator": evaluator}})
    code, said = _dry_run(folder)
    assert code == EXIT_USAGE, said
    examples = folder / "evaluation_examples" / "examples" / "os"
    assert (f"{examples / 't.json'}:1: task 't': field 'evaluator.{name}' must be {kind}, got null: null reads "
            "as not given, and osworld tasks need it") in said, said
