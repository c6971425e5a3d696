"""A docker VM folder the run refuses (``$PARALLEL_ROLLOUT_DOCKER_DIR`` writable by other
users: a tmpfs mounted there is mode 1777) is the run's setting to fix, not a failed boot: the
run stops at that first boot (exit 2), naming the folder and the fix, its attempts left to
``--resume``. It booted a replacement until the budget was spent (6 boots, each refused the
same way) and exited 1, as for a flaky machine."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from click.testing import CliRunner

from conftest import shell_task, write_tasks
from parallel_rollout.cli import main


def test_a_vm_folder_others_can_write_stops_the_run_at_its_first_boot(docker_harness, tmp_path, monkeypatch):
    shared = Path(tempfile.mkdtemp(prefix="prt-shared-", dir="/tmp"))
    shared.chmod(0o1777)
    monkeypatch.setenv("PARALLEL_ROLLOUT_DOCKER_DIR", str(shared))
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("t0"), shell_task("t1")])
    run_id = docker_harness.new_run_id()
    try:
        result = CliRunner().invoke(main, [
            "run", "--mode", "shell", "--data", str(data), "--num-vms", "1", "--use-vm-pool",
            "--provider-name", "docker", "--output-dir", str(tmp_path / "out"), "--run-id", run_id,
            "--no-progress"])
    finally:
        shared.rmdir()
    assert result.exit_code == 2, result.output
    assert f"{shared} is writable by other users" in result.output, result.output
    assert f"chmod 700 {shared}" in result.output and "--resume" in result.output, result.output
    events = [json.loads(line) for line in (tmp_path / "out" / run_id / "events.jsonl").read_text().splitlines()]
    assert [e["vm"] for e in events if e.get("to") == "booting"] == ["vm-0"], events  # no replacement
