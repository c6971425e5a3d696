"""A task file of the other kind than its name says is refused saying so, by file, with the name to give.

JSON lines saved as ``tasks.json`` (as many datasets are) was refused as
``tasks.json:2: invalid JSON: Extra data``; a pretty-printed list saved as ``tasks.jsonl``
as one "invalid JSON" per line, twenty of them, none saying what was wrong with the file.
"""

from __future__ import annotations

import json
import re

from click.testing import CliRunner

from parallel_rollout.cli import main
from readme_support import readme_section

TASKS = [{"id": "a", "problem": "1+1?", "answer": "2"}, {"id": "b", "problem": "2+2?", "answer": "4"}]


def dry_run(tmp_path, data):
    return CliRunner().invoke(main, ["run", "--mode", "math", "--data", str(data), "--dry-run",
                                     "--output-dir", str(tmp_path / "out")])


def test_json_lines_named_json_and_a_document_named_jsonl_say_what_to_name_them(tmp_path):
    lines = tmp_path / "tasks.json"
    lines.write_text("".join(json.dumps(t) + "\n" for t in TASKS))
    result = dry_run(tmp_path, lines)
    assert result.exit_code == 2
    assert (f"{lines}:2: invalid JSON: Extra data (column 1); the file holds one JSON object per line "
            "(JSON lines): name it .jsonl") in result.output, result.output
    assert dry_run(tmp_path, lines.rename(tmp_path / "tasks.jsonl")).exit_code == 0

    document = tmp_path / "pretty.jsonl"
    document.write_text(json.dumps(TASKS, indent=2))
    result = dry_run(tmp_path, document)
    assert result.exit_code == 2
    assert (f"{document}: one JSON document over 12 lines, not one task object per line (JSON lines): "
            "name it .json, or write each task on a line of its own") in result.output, result.output
    assert "invalid JSON" not in result.output
    assert dry_run(tmp_path, document.rename(tmp_path / "pretty.json")).exit_code == 0


def test_a_bad_line_of_a_real_jsonl_file_is_named_as_before(tmp_path):
    data = tmp_path / "tasks.jsonl"
    data.write_text(json.dumps(TASKS[0]) + "\n" + '{"id": "b", "problem": "2+2?"\n')
    result = dry_run(tmp_path, data)
    assert result.exit_code == 2 and f"{data}:2: invalid JSON: Expecting ',' delimiter" in result.output
    assert "name it" not in result.output
    broken = tmp_path / "broken.json"
    broken.write_text('[{"id": "a", "problem": "1+1?", "answer": "2"},\n')
    result = dry_run(tmp_path, broken)
    assert result.exit_code == 2 and "invalid JSON" in result.output and "name it" not in result.output


def test_the_readme_shell_task_saved_as_it_is_printed_is_told_a_fix_that_loads(tmp_path):
    """The README's one shell task, printed over three lines, saved as tasks.jsonl was told to
    be named .json, and as tasks.json was refused as 'holds a list of task objects' with no way
    on: each refusal now says what loads, and doing what it says loads."""
    [block] = re.findall(r"```json\n(.*?)```", readme_section("Shell tasks"), re.S)
    task = json.loads(block)
    for name, fix in (("tasks.jsonl", "write it on one line, or put it in a list, [{…}], in a .json file"),
                      ("tasks.json", "not one task object: put it in a list, [{…}], or write it on one line "
                                     "of a .jsonl file")):
        saved = tmp_path / name
        saved.write_text(block)
        result = CliRunner().invoke(main, ["run", "--data", str(saved), "--dry-run",
                                           "--output-dir", str(tmp_path / "out")])
        assert result.exit_code == 2 and fix in result.output, result.output
    one_line, in_a_list = tmp_path / "one.jsonl", tmp_path / "list.json"
    one_line.write_text(json.dumps(task) + "\n")
    in_a_list.write_text(json.dumps([task]))
    for data in (one_line, in_a_list):
        result = CliRunner().invoke(main, ["run", "--data", str(data), "--dry-run",
                                           "--output-dir", str(tmp_path / "out")])
        assert result.exit_code == 0 and "runnable 1 of 1 tasks" in result.output, result.output
