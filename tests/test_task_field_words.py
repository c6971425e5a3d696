"""A task field of the wrong kind (envs/base.py's ``require``) is refused in the task file's
words, JSON's: "field 'evaluator' must be an object, got a list", where it said Python's
type names ("must be dict, got list", "must be str or int or float, got bool"). A command's
timeout past what a wait takes (1e300, JSON's 1 and 400 zeros) is refused there too: it was an
OverflowError of the attempt, reward 0. JSON's true
and false are no number, though Python's bool is an int: a FrozenLake ``"p": true`` loaded as
a slip probability of 1. Each refusal comes from the dry run through the CLI (exit 2), naming
the file's line and the task. A NUL byte in a check or a setup command, which no command line
carries, is refused there too: it failed every answer, or every attempt's setup."""

from __future__ import annotations

import json
import reprlib

import pytest
from click.testing import CliRunner

from conftest import shell_task, write_tasks
from parallel_rollout.cli import main
from parallel_rollout.exit_codes import EXIT_USAGE
from test_osworld_taskset import osworld_folder

_LAKE = {"id": "lake", "mode": "gym"}
_MATH = {"id": "sum", "mode": "math", "problem": "1+1"}
_PY = {"id": "add", "mode": "py", "prompt": "def add(a, b):\n", "entry_point": "add", "test": "def check(f): pass"}
#: a command's timeout past what a wait takes (threading.TIMEOUT_MAX) raised OverflowError as
#: the attempt ran: an error of the task's at reward 0
_AT_MOST = "at most 9223372036 seconds (about 292 years, the longest wait a command takes)"

#: case -> (the task, what the refusal says after "task 'ID': ")
WRONG_KINDS = {
    "shell-instruction-number": (shell_task("s", instruction=5), "field 'instruction' must be a string, got 5"),
    "shell-check-null": (shell_task("s", check=None), "field 'check' must be a string, got null"),
    "shell-setup-string": (shell_task("s", setup="echo hi"), "field 'setup' must be a list, got a string"),
    "shell-setup-number-item": (shell_task("s", setup=["true", 5]),
                                "field 'setup' must be a list of strings; its item 2 is 5"),
    "shell-reference-null-item": (shell_task("s", reference=[None]),
                                  "field 'reference' must be a list of strings; its item 1 is null"),
    "shell-reap-string": (shell_task("s", reap="yes"), "field 'reap' must be true or false, got a string"),
    "shell-timeout-true": (shell_task("s", timeout=True), "field 'timeout' must be a number, got true"),
    "shell-timeout-past-a-wait": (shell_task("s", timeout=1e300), f"field 'timeout' is 1e+300: {_AT_MOST}"),
    "shell-timeout-past-a-float": (shell_task("s", timeout=10**400), f"field 'timeout' is {reprlib.repr(10**400)}: {_AT_MOST}"),
    "shell-timeout-zero": (shell_task("s", timeout=0), "field 'timeout' must be a positive number of seconds, got 0"),
    # no command line carries a NUL: the guest refused it (exit 126) as each answer was graded 0,
    # or as each attempt's setup ran (setup_failed, never graded: a --resume ran it again)
    "shell-check-nul": (shell_task("s", check="test -e ~/ok\u0000"),
                        "field 'check' holds a NUL byte (character 13), which no command line can carry: "
                        "every answer would fail it"),
    "shell-setup-nul": (shell_task("s", setup=["true", "echo \u0000 > ~/data.txt"]),
                        "field 'setup' command 2 holds a NUL byte (character 6), which no command line can "
                        "carry: every attempt would be setup_failed"),
    "py-timeout-past-a-wait": ({**_PY, "timeout": 1e300}, f"field 'timeout' is 1e+300: {_AT_MOST}"),
    "math-answer-true": ({**_MATH, "answer": True}, "field 'answer' must be a string or a number, got true"),
    "math-answer-list": ({**_MATH, "answer": [2]}, "field 'answer' must be a string or a number, got a list"),
    "lake-p-true": ({**_LAKE, "p": True}, "field 'p' must be a number, got true"),
    "lake-size-fraction": ({**_LAKE, "size": 4.5}, "field 'size' must be a whole number, got 4.5"),
    "lake-size-false": ({**_LAKE, "size": False}, "field 'size' must be a whole number, got false"),
    "lake-desc-object": ({**_LAKE, "desc": {"row": "SFFG"}}, "field 'desc' must be a list, got an object"),
    # Sokoban's said Python's: "got '2'", "got True"
    "sokoban-num_boxes-string": ({**_LAKE, "game": "Sokoban", "num_boxes": "2"},
                                 "field 'num_boxes' must be a whole number, got a string"),
    "sokoban-format_penalty-true": ({**_LAKE, "game": "Sokoban", "format_penalty": True},
                                    "field 'format_penalty' must be a number, got true"),
    # a value outside the choices, said Python's way: "got 'Tetris'", "got [True, 5]", "got 'WW'"
    "lake-game-unknown": ({**_LAKE, "game": "Tetris"}, 'field \'game\' must be one of FrozenLake, Sokoban, got "Tetris"'),
    "lake-game-true": ({**_LAKE, "game": True}, "field 'game' must be one of FrozenLake, Sokoban, got true"),
    "lake-map_name-unknown": ({**_LAKE, "map_name": "16x16"}, 'field \'map_name\' must be 4x4 or 8x8, got "16x16"'),
    "sokoban-dim_room-true": ({**_LAKE, "game": "Sokoban", "dim_room": [True, 5]},
                              "field 'dim_room' must be [rows, columns], each 3-30, got [true, 5]"),
    "sokoban-dim_room-string": ({**_LAKE, "game": "Sokoban", "dim_room": "5x5"},
                                'field \'dim_room\' must be [rows, columns], each 3-30, got "5x5"'),
    "sokoban-num_boxes-past-a-line": ({**_LAKE, "game": "Sokoban", "num_boxes": -10**100},
                                      f"field 'num_boxes' must be at least 1, got {reprlib.repr(-10**100)}"),
    # a key of grid_vocab or grid_lookup, a JSON string, was quoted as a field's name: 'wall', '9'
    "sokoban-symbol-two-characters": ({**_LAKE, "game": "Sokoban", "grid_vocab": {"wall": "WW"}},
                                      'field \'grid_vocab\': "wall" must be one visible character, got "WW"'),
    "sokoban-symbols-clash": ({**_LAKE, "game": "Sokoban", "grid_lookup": {"0": "W"}, "grid_vocab": {"wall": "V"}},
                              'fields \'grid_lookup\' and \'grid_vocab\' give "wall" different symbols: "W" and "V"'),
    "sokoban-lookup-code-unknown": ({**_LAKE, "game": "Sokoban", "grid_lookup": {"9": "W"}},
                                    'field \'grid_lookup\' names "9"; the codes are 0-6: 0 wall, 1 empty'),
    "sokoban-vocab-meaning-unknown": ({**_LAKE, "game": "Sokoban", "grid_vocab": {"lava": "L"}},
                                      'field \'grid_vocab\' names "lava"; the meanings are "wall", "empty", "target"'),
    # it said Python's dict of every meaning: {'wall': '_', 'empty': '_', ...}
    "sokoban-symbol-twice": ({**_LAKE, "game": "Sokoban", "grid_vocab": {"wall": "_"}},
                             'field \'grid_vocab\' gives "wall" and "empty" one symbol, "_"'),
    # the loader's own fields said Python's words: 'must be an integer, got "7"', 'got ["a", 1]'
    "seed-string": (shell_task("s", seed="7"), "field 'seed' must be a whole number, got a string"),
    "seed-fraction": (shell_task("s", seed=1.5), "field 'seed' must be a whole number, got 1.5"),
    "seed-true": (shell_task("s", seed=True), "field 'seed' must be a whole number, got true"),
    "tags-string": (shell_task("s", tags="files"), "field 'tags' must be a list of strings, got a string"),
    "tags-number-item": (shell_task("s", tags=["a", 1]), "field 'tags' must be a list of strings; its item 2 is 1"),
}


def _dry_run(data) -> tuple[int, str]:
    done = CliRunner().invoke(main, ["--data", str(data), "--dry-run", "--no-progress"])
    return done.exit_code, " ".join(done.output.split())


@pytest.mark.parametrize("case", list(WRONG_KINDS))
def test_a_task_field_of_the_wrong_kind_is_refused_in_json_words(tmp_path, case):
    task, reason = WRONG_KINDS[case]
    data = write_tasks(tmp_path / "tasks.jsonl", [task])
    code, said = _dry_run(data)
    assert code == EXIT_USAGE, said
    assert f"{data}:1: task {task['id']!r}: {reason}" in said, said


def test_an_osworld_tasks_instruction_and_evaluator_are_said_in_json_words(tmp_path):
    """An OSWorld task file's ``evaluator`` as a list (several metrics written without
    ``func``'s list) and an ``instruction`` as a number."""
    evaluator = {"func": "infeasible"}
    folder = osworld_folder(tmp_path / "set", {
        "listed": {"domain": "os", "instruction": "x", "config": [], "evaluator": [evaluator]},
        "numbered": {"domain": "os", "instruction": 7, "config": [], "evaluator": evaluator}})
    code, said = _dry_run(folder)
    assert code == EXIT_USAGE, said
    examples = folder / "evaluation_examples" / "examples" / "os"
    assert f"{examples / 'listed.json'}:1: task 'listed': field 'evaluator' must be an object, got a list" in said, said
    assert f"{examples / 'numbered.json'}:1: task 'numbered': field 'instruction' must be a string, got 7" in said, said


#: an id of the wrong kind, or none -> what the refusal says after "FILE:LINE: ": it said
#: "missing field 'id'" of "id": null, which the record has, and Python's "got list"
WRONG_IDS = {
    "null": ({"id": None}, "field 'id' must be a string or a whole number, got null"),
    "list": ({"id": [1]}, "field 'id' must be a string or a whole number, got a list"),
    "true": ({"id": True}, "field 'id' must be a string or a whole number, got true"),
    "object": ({"id": {}}, "field 'id' must be a string or a whole number, got an object"),
    "fraction": ({"id": 1.5}, "field 'id' must be a string or a whole number, got 1.5"),
    "empty": ({"id": ""}, "field 'id' is empty"),
    "blank": ({"id": "  "}, "field 'id' is empty"),
    "task_id null": ({"id": "left out", "task_id": None}, "field 'task_id' must be a string or a whole number, got null"),
    "none": ({"id": "left out"}, "missing field 'id'"),
}


@pytest.mark.parametrize("case", list(WRONG_IDS))
def test_a_task_id_of_the_wrong_kind_is_said_as_the_file_has_it(tmp_path, case):
    fields, reason = WRONG_IDS[case]
    task = {k: v for k, v in {**shell_task("s"), **fields}.items() if v != "left out"}
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("first"), task])
    code, said = _dry_run(data)
    assert code == EXIT_USAGE, said
    assert f"{data}:2: {reason}" in said, said


@pytest.mark.parametrize("line, said", [("[1, 2]", "a list"), ("null", "null"), ('"s"', "a string"), ("7", "7")])
def test_a_line_that_is_no_object_is_said_as_the_file_has_it(tmp_path, line, said):
    """A line of another JSON value than an object: it said Python's "got list", "got NoneType"."""
    data = tmp_path / "tasks.jsonl"
    data.write_text(json.dumps(shell_task("first")) + "\n" + line + "\n")
    code, out = _dry_run(data)
    assert code == EXIT_USAGE, out
    assert f"{data}:2: a task is a JSON object, got {said}" in out, out


def test_an_osworld_files_id_of_the_wrong_kind_is_said_as_the_file_has_it(tmp_path):
    """An OSWorld task file's "id": [1] or true was compared with the index's id as Python's
    text of it: "task id [1] is not its id in …", where the file's "id": null said its kind."""
    evaluator = {"func": "infeasible"}
    folder = osworld_folder(tmp_path / "set", {
        name: {"domain": "os", "id": value, "instruction": "x", "config": [], "evaluator": evaluator}
        for name, value in (("listed", [1]), ("flag", True), ("nothing", None))})
    code, said = _dry_run(folder)
    assert code == EXIT_USAGE, said
    examples = folder / "evaluation_examples" / "examples" / "os"
    for name, kind in (("listed", "a list"), ("flag", "true"), ("nothing", "null")):
        assert f"{examples / (name + '.json')}:1: field 'id' must be a string or a whole number, got {kind}" in said, said


def test_fields_of_their_kind_load(tmp_path):
    """A guard beside the refusals: the same fields given as JSON writes them load."""
    tasks = [shell_task("s", setup=["echo hi"], reap=True, timeout=2.5), {**_MATH, "answer": 2},
             {**_MATH, "id": "half", "answer": "1/2"}]
    data = write_tasks(tmp_path / "tasks.jsonl", tasks[:1])
    assert _dry_run(data)[0] == 0, _dry_run(data)[1]
    maths = write_tasks(tmp_path / "math.jsonl", tasks[1:])
    assert _dry_run(maths)[0] == 0, _dry_run(maths)[1]
    lake = tmp_path / "lake.jsonl"
    lake.write_text(json.dumps({**_LAKE, "p": 0.5, "size": 4, "is_slippery": True}) + "\n")
    assert _dry_run(lake)[0] == 0, _dry_run(lake)[1]
