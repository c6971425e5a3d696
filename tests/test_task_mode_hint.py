"""A task file of another mode's tasks, run without --mode, is refused naming the --mode to give.

HumanEval's own JSONL (or a math set of ``problem``/``answer``) names no mode in its records:
without ``--mode`` the run reads them as shell tasks and every line was refused with
"missing field 'instruction'", which says nothing of the flag the researcher forgot.
"""

from __future__ import annotations

import gzip
import json

from click.testing import CliRunner

from parallel_rollout.cli import main
from parallel_rollout.envs.py import humaneval_path


def run(*args: str):
    return CliRunner().invoke(main, ["run", *args])


def test_humaneval_jsonl_without_mode_says_to_give_mode_py(tmp_path):
    lines = gzip.open(humaneval_path(), "rt").read().splitlines()[:3]
    data = tmp_path / "HumanEval.jsonl"
    data.write_text("\n".join(lines) + "\n")
    for flags in ([], ["--dry-run"]):
        result = run("--data", str(data), "--output-dir", str(tmp_path / "out"), *flags)
        assert result.exit_code == 2, result.output
        assert f"{data}:1: task 'HumanEval/0': missing field 'instruction'" in result.output
        assert ("(no --mode was given, so these were read as shell tasks; they are py tasks: add --mode py)"
                in result.output), result.output
    assert not (tmp_path / "out").exists()
    fixed = run("--data", str(data), "--mode", "py", "--dry-run", "--output-dir", str(tmp_path / "out"))
    assert fixed.exit_code == 0 and "runnable 3 of 3 tasks" in fixed.output, fixed.output


def test_no_hint_when_the_mode_was_given_or_no_other_mode_takes_the_records(tmp_path):
    data = tmp_path / "math.jsonl"
    data.write_text(json.dumps({"id": "a", "problem": "1+1?", "answer": "2"}) + "\n")
    given = run("--mode", "shell", "--data", str(data), "--dry-run", "--output-dir", str(tmp_path / "out"))
    assert given.exit_code == 2 and "missing field 'instruction'" in given.output
    assert "no --mode was given" not in given.output
    implied = run("--data", str(data), "--dry-run", "--output-dir", str(tmp_path / "out"))
    assert "they are math tasks: add --mode math" in implied.output, implied.output
    # a record another mode would refuse all the same (no id) gets no hint
    data.write_text(json.dumps({"problem": "1+1?", "answer": "2"}) + "\n")
    no_id = run("--data", str(data), "--dry-run", "--output-dir", str(tmp_path / "out"))
    assert no_id.exit_code == 2 and "missing field 'id'" in no_id.output
    assert "no --mode was given" not in no_id.output
