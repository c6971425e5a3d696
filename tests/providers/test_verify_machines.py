"""Reset verification on the providers whose VMs are the user's machines (remote, vmware,
virtualbox): through our guest agent in the machine, as qemu's, against what each machine
held at its first boot of the run. Driven through the CLI.

The machines are stand-in VMs (``tests/hypervisor_standin.py``): a process sandbox behind
``vmrun``, its agent relayed to ``<127/8 ip>:5000``. Their "snapshot revert" is either the
process provider's real reset or ``chaos_plugins.LeakyResetProvider``'s, which takes nothing
away (``STANDIN_BACKEND``): what a task leaves must then be caught and quarantined.
"""

from __future__ import annotations

import subprocess

import pytest
from click.testing import CliRunner

from conftest import read_results, shell_task, write_tasks
from pool_support import read_events
from parallel_rollout.cli import main
from parallel_rollout.exit_codes import EXIT_ABORTED

LEAKY = "chaos_plugins:LeakyResetProvider"
#: what the first task leaves: a daemon in a session of its own and a file in the home
ESCAPE = ("setsid sleep 600 > /dev/null 2>&1 < /dev/null & mkdir -p ~/.cache && "
          "echo kept > ~/.cache/secret")


def _tasks(tmp_path):
    return write_tasks(tmp_path / "tasks.jsonl", [
        shell_task("escape", reap=False,  # the shell env would reap the daemon itself
                   reference=[ESCAPE, "touch ~/escape.done"]),
        shell_task("second"), shell_task("third")])


def _run(tmp_path, run_id, *flags):
    result = CliRunner().invoke(main, [
        "--mode", "shell", "--data", str(_tasks(tmp_path)), "--output-dir", str(tmp_path / "out"),
        "--run-id", run_id, "--no-progress", "--use-vm-pool", "--num-vms", "1",
        "--num-rollouts", "1", "--verify-reset", "fast", *flags])
    run_dir = tmp_path / "out" / run_id
    events = [e for e in read_events(run_dir / "events.jsonl") if e.get("event") == "vm"]
    return result, events, run_dir


def _quarantined(events):
    return {e["after_task"]: e["differences"] for e in events
            if e["to"] == "dead" and e["reason"].startswith("reset verification failed")}


def _deaths(events):
    """VMs that died during the run (not at its end)."""
    return [e for e in events if e["to"] == "dead" and e["reason"] != "pool shutdown"]


def _escaped(differences) -> bool:
    return ("~/.cache/secret: not in the snapshot (file, 5 bytes)" in differences
            and any("sleep 600" in line and "left running" in line for line in differences))


@pytest.mark.parametrize("backend", [LEAKY, "process"], ids=["leaky-revert", "real-revert"])
def test_vmware_quarantines_what_a_revert_left_and_nothing_else(standins, monkeypatch, tmp_path, backend):
    monkeypatch.setenv("STANDIN_BACKEND", backend)
    vmx, _ = standins
    result, events, run_dir = _run(tmp_path, "vmw", "--provider-name", "vmware", "--path-to-vm",
                                   vmx[0], "--snapshot-name", "init_state")
    assert result.exit_code == 0, (result.output, result.exception)
    assert {r["task_id"]: r["status"] for r in read_results(run_dir) if r["final"]} == {
        "escape": "success", "second": "success", "third": "success"}
    quarantined = _quarantined(events)
    if backend == "process":  # a real revert: nothing to catch
        assert quarantined == {} and _deaths(events) == [], events
        return
    # the revert left everything: each task's VM is quarantined, the escape's with what it left
    assert _escaped(quarantined["escape#0"]), quarantined
    assert quarantined["second#0"] == ["~/second.done: not in the snapshot (file, 0 bytes)"]
    # a quarantine is free; the restart (a powered-off VM booted again) is clean
    assert not [e for e in events if e["reason"].startswith("verification of a fresh VM")]
    leased = [e["vm"] for e in events if e["to"] == "leased"]
    assert len(leased) == len(set(leased)) == 3  # a quarantined VM is never leased again


def test_remote_quarantines_a_task_and_a_reset_command_that_leaves_it_ends_the_run(
        standins, monkeypatch, tmp_path):
    vmx, _ = standins
    for backend, run_id in ((LEAKY, "leaky"), ("process", "real")):
        monkeypatch.setenv("STANDIN_BACKEND", backend)
        subprocess.run(["vmrun", "-T", "ws", "start", vmx[0], "nogui"], check=True, timeout=120)
        try:
            ip = subprocess.run(["vmrun", "-T", "ws", "getGuestIPAddress", vmx[0], "-wait"],
                                capture_output=True, text=True, check=True, timeout=60).stdout.strip()
            result, events, run_dir = _run(
                tmp_path, run_id, "--provider-name", "remote", "--vm-address", f"{ip}:5000",
                "--reset-command", f"vmrun -T ws revertToSnapshot {vmx[0]} init_state")
        finally:
            subprocess.run(["vmrun", "-T", "ws", "stop", vmx[0]], check=True, timeout=120)
        quarantined = _quarantined(events)
        if backend == "process":  # a reset command that resets: nothing quarantined
            assert result.exit_code == 0, (result.output, result.exception)
            assert quarantined == {} and _deaths(events) == [], events
            continue
        # the task's VM is quarantined for free; its restart runs the same reset command,
        # which leaves the machine as the task did: the provider's fault, charged, until the
        # budget (2 × 1) is spent and the run ends saying so
        assert list(quarantined) == ["escape#0"] and _escaped(quarantined["escape#0"]), events
        fresh = [e for e in events if e["reason"].startswith("verification of a fresh VM failed")]
        assert len(fresh) == 3 and all(_escaped(e["differences"]) for e in fresh), fresh
        assert result.exit_code == EXIT_ABORTED, (result.output, result.exception)
        assert ("replacement budget is spent (3 failed boots (3 of them a fresh VM that failed "
                "its check)") in " ".join(result.output.split())
