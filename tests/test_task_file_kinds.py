"""A task file of the other kind than its name says is refused saying so, by file, with the name to give.

JSON lines saved as ``tasks.json`` (as many datasets are) was refused as
``tasks.json:2: invalid JSON: Extra data``; a pretty-printed list saved as ``tasks.jsonl``
as one "invalid JSON" per line, twenty of them, none saying what was wrong with the file.
"""

from __future__ import annotations

import json

from click.testing import CliRunner

from parallel_rollout.cli import main

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
