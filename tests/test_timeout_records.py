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
