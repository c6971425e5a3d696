"""A guest agent stopped from outside (SIGSTOP from the host) under a task is not the task's
doing: the task's user cannot signal the agent (another user, the runner being root), so the
attempt is infrastructure (``VMKilled``), retried on a restarted VM, never graded as the
task's ``sandbox_violation``. Through the CLI, the process provider, a watcher of the test's
own sandboxes stopping the agent once per task while the check or an action runs.
"""

from __future__ import annotations

import os
import threading

import pytest
from click.testing import CliRunner

from agent_runs import needs_bwrap
from conftest import assert_exactly_once, read_results, write_tasks
from parallel_rollout.cli import main
from process_tree import stop_guest_agents

pytestmark = [needs_bwrap, pytest.mark.skipif(os.geteuid() != 0, reason="the agent is another user as root only")]


def test_a_guest_agent_stopped_from_outside_is_retried_not_graded(tmp_path):
    tasks = [{"id": "check", "mode": "shell", "instruction": "make ~/ok", "check": "sleep 2.71; test -e ~/ok",
              "reference": ["touch ~/ok"], "timeout": 5},
             {"id": "action", "mode": "shell", "instruction": "make ~/ok", "check": "test -e ~/ok",
              "reference": ["sleep 2.72; touch ~/ok"], "timeout": 5}]
    data = write_tasks(tmp_path / "tasks.jsonl", tasks)
    stopped, done = [], threading.Event()
    watcher = threading.Thread(target=stop_guest_agents, args=(["sleep 2.71", "sleep 2.72"], stopped, done),
                               daemon=True)
    watcher.start()
    try:
        result = CliRunner().invoke(main, [
            "--mode", "shell", "--data", str(data), "--agent", "oracle", "--num-rollouts", "1",
            "--num-vms", "1", "--use-vm-pool", "--max-retries", "1", "--output-dir", str(tmp_path / "out"),
            "--run-id", "stop", "--no-progress"])
    finally:
        done.set()
        watcher.join(5)
    assert sorted(stopped) == ["sleep 2.71", "sleep 2.72"], stopped
    assert result.exit_code == 0, (result.output[-3000:], result.exception)
    run_dir = tmp_path / "out" / "stop"
    finals = assert_exactly_once(run_dir, {"check#0", "action#0"})
    assert {k: r["status"] for k, r in finals.items()} == {"check#0": "success", "action#0": "success"}, finals
    for key in finals:
        first, *_ = [r for r in read_results(run_dir) if r["key"] == key]
        failure = first["failure"]
        assert first["status"] == "vm_error" and first["infrastructure"] and not first["final"], first
        assert failure["type"] == "VMKilled" and "stopped from outside" in failure["message"], failure
