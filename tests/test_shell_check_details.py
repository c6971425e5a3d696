"""What a shell task's record says of its check: its exit status, the tails of its stdout and
stderr, and whether its timeout killed it. Run through the CLI with the oracle (each task's
``reference`` replayed), real sandboxes (the process provider), as a user runs it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import assert_exactly_once, write_tasks
from parallel_rollout.cli import main
from parallel_rollout.trajectories import read_turns

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


def test_a_command_or_check_cut_by_its_timeout_says_so(tmp_path):
    """The task's ``timeout`` (60 s by default) cuts each command: an agent's command that
    ran past it says so in its turn's observation, a check in the record's eval."""
    run_dir, finals = _run(tmp_path, [
        {"id": "slow-check", "mode": "shell", "instruction": "nothing", "timeout": 1,
         "check": "sleep 30", "reference": []},
        {"id": "slow-action", "mode": "shell", "instruction": "sleep", "timeout": 1,
         "check": "true", "reference": ["echo before; sleep 30"]}])
    check = finals["slow-check#0"]
    assert check["status"] == "failure" and check["reward"] == 0.0, check
    assert check["eval"]["check_timeout"].startswith("check timed out after 1s"), check["eval"]
    action = finals["slow-action#0"]
    assert action["status"] == "success" and action["eval"]["check_timeout"] is None, action
    first = json.loads((run_dir / action["trajectory"]).read_text().splitlines()[0])["observation"]
    assert first["timeout"].startswith("command timed out after 1s"), first
    assert first["output"] == "before\n", first


def test_an_action_that_leaves_a_process_holding_its_output_is_not_a_timeout(tmp_path):
    """``touch ~/ok; setsid sleep 1000 & echo started`` returns once its shell exits: its
    output and exit code, a note on the process it left, no timeout (it waited the whole 8
    s and said it timed out); the process is reaped before the check."""
    run_dir, finals = _run(tmp_path, [
        {"id": "daemon", "mode": "shell", "instruction": "start it", "timeout": 8,
         "check": "test -e ~/ok && ! pgrep -x sleep", "reference": ["touch ~/ok; setsid sleep 1000 & echo started"]}])
    record = finals["daemon#0"]
    assert record["status"] == "success", record
    step = json.loads((run_dir / record["trajectory"]).read_text().splitlines()[0])
    first = step["observation"]
    assert first["output"] == "started\n" and first["returncode"] == 0 and "timeout" not in first, first
    assert "still holds its output" in first["note"], first
    assert record["duration_s"] < 6, record


def test_a_failed_setup_is_never_graded_and_the_run_exits_1(tmp_path):
    """A setup command that fails (an exit status, its timeout) is ``setup_failed``: the
    agent did nothing, so no 0 enters the success rate; retried, then left for --resume,
    and the run exits 1 (finished with samples never graded)."""
    data = write_tasks(tmp_path / "tasks.jsonl", [
        {"id": "fails", "mode": "shell", "instruction": "make ~/ok", "setup": ["echo preparing; exit 3"],
         "check": "test -e ~/ok", "reference": ["touch ~/ok"]},
        {"id": "times_out", "mode": "shell", "instruction": "make ~/ok", "setup": ["sleep 5"],
         "check": "test -e ~/ok", "reference": ["touch ~/ok"], "timeout": 2},
        {"id": "fine", "mode": "shell", "instruction": "make ~/ok", "check": "test -e ~/ok",
         "reference": ["touch ~/ok"]}])
    out = tmp_path / "out"
    result = CliRunner().invoke(main, [
        "--mode", "shell", "--data", str(data), "--agent", "oracle", "--num-rollouts", "1", "--num-vms", "1",
        "--use-vm-pool", "--max-retries", "1", "--output-dir", str(out), "--run-id", "setup", "--no-progress"])
    assert result.exit_code == 1, (result.output[-3000:], result.exception)
    finals = assert_exactly_once(out / "setup", {"fails#0", "times_out#0", "fine#0"})
    assert finals["fine#0"]["status"] == "success"
    # what the command wrote (stdout, when its stderr is empty), not an empty ": "
    for key, why in (("fails#0", "exit status 3: 'echo preparing; exit 3': preparing"),
                     ("times_out#0", "timed out after 2s")):
        record = finals[key]
        assert record["status"] == "setup_failed" and record["infrastructure"], record
        assert record["attempt"] == 1 and record["failure"]["type"] == "TaskSetupFailed", record
        assert why in record["failure"]["message"], record["failure"]
    summary = json.loads((out / "setup" / "summary.json").read_text())
    assert summary["success_rate_graded"] == 1.0 and summary["mean_reward"] == 1.0, summary
    assert summary["ungraded"] == 2, summary
    # --resume runs the never-graded samples again
    again = CliRunner().invoke(main, [
        "--mode", "shell", "--data", str(data), "--agent", "oracle", "--num-rollouts", "1", "--num-vms", "1",
        "--use-vm-pool", "--max-retries", "0", "--output-dir", str(out), "--run-id", "setup", "--resume",
        "--no-progress"])
    assert again.exit_code == 1, (again.output[-3000:], again.exception)
    attempts = [json.loads(line) for line in (out / "setup" / "results.jsonl").read_text().splitlines()]
    assert [r["attempt"] for r in attempts if r["key"] == "fails#0"] == [0, 1, 2], attempts


def test_an_attempt_that_ended_before_its_first_turn_has_the_file_its_record_names(tmp_path):
    """Each record's ``trajectory`` is its attempt's file, read from the run folder: one that
    ended before the agent acted (a failed setup; a setup its worker was killed in, past
    --task-timeout) has it too, with no turn in it, rather than a path to nothing."""
    run_dir, finals = _run(tmp_path, [
        {"id": "fails", "mode": "shell", "instruction": "x", "setup": ["exit 3"], "check": "true",
         "reference": []},
        {"id": "hangs", "mode": "shell", "instruction": "x", "setup": ["sleep 60"], "timeout": 120,
         "check": "true", "reference": []}], "--max-retries", "0", "--task-timeout", "3")
    assert finals["fails#0"]["status"] == "setup_failed", finals["fails#0"]
    assert finals["hangs#0"]["status"] == "task_timeout", finals["hangs#0"]
    for record in finals.values():
        assert record["turns"] == 0, record
        assert read_turns(run_dir / record["trajectory"]) == [], record
