"""What a shell task's record says of its check: its exit status, the tails of its stdout and
stderr, and whether its timeout killed it. Run through the CLI with the oracle (each task's
``reference`` replayed), real sandboxes (the process provider), as a user runs it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import assert_exactly_once, write_tasks
from parallel_rollout.cli import main

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")


def _run(tmp_path: Path, tasks: list[dict], *extra: str) -> tuple[Path, dict[str, dict]]:
    data = write_tasks(tmp_path / "tasks.jsonl", tasks)
    result = CliRunner().invoke(main, [
        "--mode", "shell", "--data", str(data), "--agent", "oracle", "--num-rollouts", "1",
        "--output-dir", str(tmp_path / "out"), "--run-id", "check", "--no-progress", *extra])
    assert result.exit_code in (0, 1), (result.output[-3000:], result.exception)
    run_dir = tmp_path / "out" / "check"
    return run_dir, assert_exactly_once(run_dir, {f"{t['id']}#0" for t in tasks})


def test_the_checks_stderr_is_in_the_record(tmp_path):
    _, finals = _run(tmp_path, [
        {"id": "typo", "mode": "shell", "instruction": "nothing", "check": "definitely_not_a_cmd",
         "reference": []}])
    details = finals["typo#0"]["eval"]
    assert finals["typo#0"]["status"] == "failure" and details["check_returncode"] == 127, details
    assert "definitely_not_a_cmd" in details["check_error"] and "not found" in details["check_error"], details
