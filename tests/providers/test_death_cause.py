"""Blame where the fault is, on the docker and qemu providers (issue 24): a VM killed from
outside while a task runs on it (what an operator, the host's OOM killer or a crashing
provider does) is an infrastructure failure, retried on another VM, its cause recorded; the
task is not graded for it. tests/test_crash.py checks the same on the process provider.

The kill comes from the host, between two of the task's actions (``chaos_plugins.ChaosAgent``,
``kill_sandbox``): ``docker kill`` of the VM's running containers, SIGKILL of its QEMU.
"""

from __future__ import annotations

import json

import pytest

from conftest import assert_exactly_once, read_results, shell_task, write_tasks
from parallel_rollout.config import build_config
from parallel_rollout.runner import Runner

#: provider -> what its cause names
CAUSES = {"docker": "was stopped by SIGKILL from outside", "qemu": "was killed by SIGKILL"}


@pytest.mark.parametrize("harness", ["docker", pytest.param("qemu", marks=pytest.mark.slow)],
                         indirect=True)
def test_a_vm_killed_from_outside_under_a_task_is_retried_as_infrastructure(harness, tmp_path,
                                                                            monkeypatch):
    monkeypatch.setenv("PR_CHAOS_DIR", str(tmp_path))
    tasks = [shell_task(f"t{i}") for i in range(4)]
    tasks[1]["chaos"] = "kill_sandbox"
    data = write_tasks(tmp_path / "tasks.jsonl", tasks)
    run_id = harness.new_run_id()  # the leak check looks at what this run left
    flags = dict(mode="shell", data=str(data), agent="chaos_plugins:ChaosAgent", num_rollouts=2,
                 num_vms=2, use_vm_pool=True, output_dir=str(tmp_path / "out"), run_id=run_id,
                 provider_name=harness.name, max_retries=2, progress=False,
                 boot_timeout_s=harness.boot_timeout_s)
    if harness.name == "qemu":
        flags["vm_memory_mb"] = 384
    outcome = Runner(build_config(flags)).run()
    assert outcome.exit_code == 0, outcome.message
    finals = assert_exactly_once(outcome.run_dir, {f"t{i}#0" for i in range(4)})
    assert {key: record["status"] for key, record in finals.items()} == \
        {f"t{i}#0": "success" for i in range(4)}, finals
    first, *rest = [r for r in read_results(outcome.run_dir) if r["key"] == "t1#0"]
    failure = first["failure"]
    assert first["status"] == "vm_error" and first["infrastructure"] and not first["final"], first
    assert failure["type"] == "VMKilled" and "killed from outside" in failure["message"], failure
    assert CAUSES[harness.name] in failure["message"], failure
    assert [r["attempt"] for r in rest] == [1] and rest[0]["status"] == "success", rest
    events = [json.loads(line) for line in (outcome.run_dir / "events.jsonl").read_text().splitlines()]
    assert any(e.get("to") == "dead" and e.get("vm") == first["vm"]
               and "killed from outside" in e.get("reason", "") for e in events), events


#: provider -> what its cause names when the VM was stopped (SIGSTOP), not killed
STOPPED = {"docker": "was stopped from outside, which the task's user", "qemu": "its QEMU process"}


@pytest.mark.parametrize("harness", ["docker", pytest.param("qemu", marks=pytest.mark.slow)],
                         indirect=True)
def test_a_vm_stopped_from_outside_under_a_task_is_retried_not_the_tasks_timeout(harness, tmp_path,
                                                                                 monkeypatch):
    """Every process of the leased VM gets SIGSTOP from the host between two of the task's
    actions (an operator's ``kill -STOP``): nothing exits, the next action waits on a guest
    that answers nothing until --task-timeout. That was the task's ``task_timeout``, final,
    on docker and qemu (only the process provider told a stopped agent); the provider now
    finds the stopped process in /proc (a container's init, its agent, not the task's uid;
    QEMU itself): ``VMKilled``, the VM marked dead, the task retried on another and graded."""
    monkeypatch.setenv("PR_CHAOS_DIR", str(tmp_path))
    tasks = [shell_task(f"t{i}") for i in range(2)]
    tasks[1]["chaos"] = "stop_sandbox"
    data = write_tasks(tmp_path / "tasks.jsonl", tasks)
    run_id = harness.new_run_id()
    flags = dict(mode="shell", data=str(data), agent="chaos_plugins:ChaosAgent", num_rollouts=2,
                 num_vms=2, use_vm_pool=True, output_dir=str(tmp_path / "out"), run_id=run_id,
                 provider_name=harness.name, max_retries=1, progress=False, task_timeout=6,
                 boot_timeout_s=harness.boot_timeout_s)
    if harness.name == "qemu":
        flags["vm_memory_mb"] = 384
    outcome = Runner(build_config(flags)).run()
    assert outcome.exit_code == 0, outcome.message
    finals = assert_exactly_once(outcome.run_dir, {"t0#0", "t1#0"})
    assert {key: record["status"] for key, record in finals.items()} == {"t0#0": "success", "t1#0": "success"}, finals
    first, *rest = [r for r in read_results(outcome.run_dir) if r["key"] == "t1#0"]
    failure = first["failure"]
    assert first["status"] == "vm_error" and first["infrastructure"] and not first["final"], first
    assert failure["type"] == "VMKilled" and STOPPED[harness.name] in failure["message"], failure
    assert "task_timeout" in failure["message"], failure  # what the task saw
    assert [r["attempt"] for r in rest] == [1] and rest[0]["vm"] != first["vm"], rest
    events = [json.loads(line) for line in (outcome.run_dir / "events.jsonl").read_text().splitlines()]
    assert any(e.get("to") == "dead" and e.get("vm") == first["vm"] for e in events), events
