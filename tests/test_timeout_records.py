"""The record of an attempt killed by --task-timeout keeps what the worker knew of it: its
VM, the turns taken, its trajectory file, and the phase the time ran out in (the agent's
turns, or grading). It used to say ``"vm": null, "turns": null`` with no trajectory, though
the trajectory was on disk, and hid that a check hung. Through the CLI with real sandboxes
(the process provider), as a user runs it.
"""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner

from conftest import assert_exactly_once, write_tasks
from parallel_rollout.cli import main

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")


def test_a_task_timeout_record_keeps_its_vm_turns_trajectory_and_phase(tmp_path):
    tasks = [
        # the answer makes ~/count.txt a FIFO: the check's cat blocks (its own timeout is longer)
        {"id": "fifo", "mode": "shell", "instruction": "count", "timeout": 120,
         "check": "test \"$(cat ~/count.txt)\" = 37", "reference": ["mkfifo ~/count.txt"]},
        {"id": "slow", "mode": "shell", "instruction": "sleep", "timeout": 120,
         "check": "true", "reference": ["true", "sleep 100"]},
    ]
    data = write_tasks(tmp_path / "tasks.jsonl", tasks)
    result = CliRunner().invoke(main, [
        "--mode", "shell", "--data", str(data), "--agent", "oracle", "--num-rollouts", "1",
        "--task-timeout", "3", "--max-retries", "0", "--output-dir", str(tmp_path / "out"),
        "--run-id", "late", "--no-progress"])
    assert result.exit_code in (0, 1), (result.output[-3000:], result.exception)
    run_dir = tmp_path / "out" / "late"
    finals = assert_exactly_once(run_dir, {"fifo#0", "slow#0"})

    fifo = finals["fifo#0"]
    assert fifo["status"] == "task_timeout", fifo
    assert fifo["vm"] and fifo["turns"] == 2, fifo
    assert fifo["failure"]["phase"] == "grading", fifo["failure"]
    assert "grading" in fifo["failure"]["message"], fifo["failure"]
    turns = [json.loads(line) for line in (run_dir / fifo["trajectory"]).read_text().splitlines()]
    assert [t["action"] for t in turns] == [{"command": "mkfifo ~/count.txt"}, "DONE"], turns

    slow = finals["slow#0"]
    assert slow["status"] == "task_timeout" and slow["vm"] and slow["turns"] == 1, slow
    assert slow["failure"]["phase"] == "agent", slow["failure"]
    assert "the agent's turns" in slow["failure"]["message"], slow["failure"]
    assert (run_dir / slow["trajectory"]).exists()


@pytest.mark.skipif(not all(shutil.which(p) for p in ("Xvfb", "openbox", "xdotool", "wmctrl")),
                    reason="the desktop packages are missing (./dev installs them)")
def test_an_osworld_grading_timeout_names_the_osworld_phase(tmp_path):
    """A real OSWorld task whose postconfig outlives --task-timeout: the record names what
    osworld grading runs, not a shell task's check."""
    from test_osworld_taskset import EXAMPLES

    if not EXAMPLES.is_dir():
        pytest.skip("OSWorld's task set is not at /work/shared/osworld")
    task_id = "b3d4a89c-53f2-4d6b-8b6a-541fb5d205fa"  # os, no config steps
    folder = tmp_path / "evaluation_examples"
    (folder / "examples" / "os").mkdir(parents=True)
    task = json.loads((EXAMPLES / "examples" / "os" / f"{task_id}.json").read_text())
    task["evaluator"] = {"postconfig": [{"type": "sleep", "parameters": {"seconds": 300}}], "func": "exact_match",
                         "result": {"type": "vm_command_line", "command": "echo hi", "shell": True},
                         "expected": {"type": "rule", "rules": {"expected": "hi\n"}}}
    task["reference"] = ["DONE"]
    (folder / "examples" / "os" / f"{task_id}.json").write_text(json.dumps(task))
    (folder / "test_all.json").write_text(json.dumps({"os": [task_id]}))
    result = CliRunner().invoke(main, [
        "--data", str(folder), "--agent", "oracle", "--num-rollouts", "1", "--task-timeout", "20",
        "--max-retries", "0", "--output-dir", str(tmp_path / "out"), "--run-id", "late", "--no-progress",
        "--screen-width", "640", "--screen-height", "480"])
    assert result.exit_code in (0, 1), (result.output[-3000:], result.exception)
    record = assert_exactly_once(tmp_path / "out" / "late", {f"{task_id}#0"})[f"{task_id}#0"]
    assert record["status"] == "task_timeout" and record["failure"]["phase"] == "grading", record
    message = record["failure"]["message"]
    assert "grading (the env's evaluate: its postconfig steps, getters and metrics)" in message, message
    assert "shell" not in message, message
