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


def run_stopping(markers: list[str], *argv: str):
    """The CLI run of ``argv``, with each marker's guest agent stopped once from outside while
    it runs; the run's result and the markers done."""
    stopped, done = [], threading.Event()
    watcher = threading.Thread(target=stop_guest_agents, args=(markers, stopped, done), daemon=True)
    watcher.start()
    try:
        return CliRunner().invoke(main, list(argv)), stopped
    finally:
        done.set()
        watcher.join(5)


def test_a_guest_agent_stopped_from_outside_is_retried_not_graded(tmp_path):
    tasks = [{"id": "check", "mode": "shell", "instruction": "make ~/ok", "check": "sleep 2.71; test -e ~/ok",
              "reference": ["touch ~/ok"], "timeout": 5},
             {"id": "action", "mode": "shell", "instruction": "make ~/ok", "check": "test -e ~/ok",
              "reference": ["sleep 2.72; touch ~/ok"], "timeout": 5}]
    data = write_tasks(tmp_path / "tasks.jsonl", tasks)
    result, stopped = run_stopping(
        ["sleep 2.71", "sleep 2.72"], "--mode", "shell", "--data", str(data), "--agent", "oracle",
        "--num-rollouts", "1", "--num-vms", "1", "--use-vm-pool", "--max-retries", "1",
        "--output-dir", str(tmp_path / "out"), "--run-id", "stop", "--no-progress")
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


def test_a_guest_agent_stopped_from_outside_past_the_task_timeout_is_not_the_tasks_timeout(tmp_path):
    """The agent is stopped while the task waits on it (its setup, an action, its check),
    and --task-timeout runs out before the guest call would (the commands' own timeout is
    120 s): each attempt is the VM's ``VMKilled`` (its cause in the record, the VM marked
    dead), retried on another VM and graded there, not the task's ``task_timeout``. A task
    that hangs on its own (a sleep in the VM), or stops a process of its own (the code's uid:
    its doing), is its ``task_timeout`` still."""
    shell = {"mode": "shell", "instruction": "make ~/ok", "check": "test -e ~/ok", "reference": ["touch ~/ok"],
             "timeout": 120}
    tasks = [{**shell, "id": "setup", "setup": ["sleep 1.51"]},
             {**shell, "id": "action", "reference": ["sleep 1.52; touch ~/ok"]},
             {**shell, "id": "check", "check": "sleep 1.53; test -e ~/ok"},
             {**shell, "id": "hang", "reference": ["sleep 1000"]},
             {**shell, "id": "self_stop", "reference": ["kill -STOP $$"]}]
    data = write_tasks(tmp_path / "tasks.jsonl", tasks)
    markers = {"sleep 1.51": "setup", "sleep 1.52": "action", "sleep 1.53": "check"}
    result, stopped = run_stopping(
        list(markers), "--mode", "shell", "--data", str(data), "--agent", "oracle", "--num-rollouts", "5",
        "--num-vms", "5", "--use-vm-pool", "--max-retries", "1", "--task-timeout", "10",
        "--output-dir", str(tmp_path / "out"), "--run-id", "late", "--no-progress")
    assert sorted(stopped) == sorted(markers), stopped
    assert result.exit_code in (0, 1), (result.output[-3000:], result.exception)
    run_dir = tmp_path / "out" / "late"
    finals = assert_exactly_once(run_dir, {f"{task['id']}#0" for task in tasks})
    events = (run_dir / "events.jsonl").read_text()
    for task, phase in (("setup", "setup"), ("action", "agent"), ("check", "grading")):
        first, *rest = [r for r in read_results(run_dir) if r["key"] == f"{task}#0"]
        failure = first["failure"]
        assert first["status"] == "vm_error" and first["infrastructure"] and not first["final"], first
        assert failure["type"] == "VMKilled" and failure["phase"] == phase, failure
        assert "stopped from outside" in failure["message"] and "task_timeout" in failure["message"], failure
        assert [r["attempt"] for r in rest] == [1] and rest[0]["status"] == "success", rest
        assert rest[0]["vm"] != first["vm"], (first["vm"], rest[0]["vm"])
        assert f'"vm": "{first["vm"]}", "from": "leased", "to": "dead"' in events, first["vm"]
    for task in ("hang", "self_stop"):
        [record] = [r for r in read_results(run_dir) if r["key"] == f"{task}#0"]
        assert record["status"] == "task_timeout" and not record["infrastructure"], record
        assert record["failure"]["type"] == "TaskTimeout" and record["failure"]["phase"] == "agent", record["failure"]
    assert finals["hang#0"]["final"] and finals["self_stop#0"]["final"]


def test_a_vm_leased_around_one_call_and_stopped_from_outside_is_not_the_tasks_timeout(tmp_path):
    """A py task leases its VM only around the judge (``vm_scope == "call"``: within the
    agent's turn that answers, not before it): the worker tells the engine the lease with
    the end of its wait for the VM (``LeaseWait``), so that a timeout while the stopped
    agent runs the judge is asked of that VM: ``VMKilled``, retried, graded on another VM."""
    task = {"id": "judge", "mode": "py", "prompt": "def f():\n", "canonical_solution": "    return 1\n",
            "entry_point": "f", "test": "import subprocess\n\ndef check(candidate):\n"
                                        "    subprocess.run(['sleep', '1.54'])\n    assert candidate() == 1\n"}
    data = write_tasks(tmp_path / "tasks.jsonl", [task])
    result, stopped = run_stopping(
        ["sleep 1.54"], "--mode", "py", "--data", str(data), "--agent", "oracle", "--num-rollouts", "1",
        "--num-vms", "2", "--use-vm-pool", "--max-retries", "1", "--task-timeout", "8",
        "--output-dir", str(tmp_path / "out"), "--run-id", "call", "--no-progress")
    assert stopped == ["sleep 1.54"], stopped
    assert result.exit_code == 0, (result.output[-3000:], result.exception)
    first, *rest = read_results(tmp_path / "out" / "call")
    failure = first["failure"]
    assert first["status"] == "vm_error" and failure["type"] == "VMKilled" and failure["phase"] == "agent", first
    assert "stopped from outside" in failure["message"] and "task_timeout" in failure["message"], failure
    assert [(r["attempt"], r["status"]) for r in rest] == [(1, "success")], rest
