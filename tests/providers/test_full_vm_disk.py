"""A docker or qemu VM folder on a full disk (``$PARALLEL_ROLLOUT_DOCKER_DIR``,
``$PARALLEL_ROLLOUT_QEMU_DIR``): every boot fails, the run stops (exit 1, its attempts left to
``--resume``) and says which file could not be written. It said only ``OSError: [Errno 28] No
space left on device``, naming no file, so nothing told the user which disk to free."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import shell_task, small_tmpfs, write_tasks
from parallel_rollout.cli import main

#: provider -> the variable naming its VM folders
BASE_ENV = {"docker": "PARALLEL_ROLLOUT_DOCKER_DIR", "qemu": "PARALLEL_ROLLOUT_QEMU_DIR"}


@pytest.fixture
def full_disk():
    """A 64 KiB tmpfs, filled, at a short path (a VM's socket path must fit in 108 bytes)."""
    parent = Path(tempfile.mkdtemp(prefix="prt-full-", dir="/tmp"))
    try:
        with small_tmpfs(parent / "d", "64k") as folder:
            folder.chmod(0o700)
            (folder / "filler").write_bytes(b"\0" * 64 * 1024)
            yield folder
    finally:
        shutil.rmtree(parent, ignore_errors=True)


@pytest.mark.parametrize("harness", ["docker", pytest.param("qemu", marks=pytest.mark.slow)],
                         indirect=True)
def test_a_full_vm_disk_stops_the_run_naming_the_file_it_could_not_write(harness, full_disk, tmp_path,
                                                                         monkeypatch):
    monkeypatch.setenv(BASE_ENV[harness.name], str(full_disk))
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("t0"), shell_task("t1")])
    result = CliRunner().invoke(main, [
        "run", "--mode", "shell", "--data", str(data), "--num-vms", "1", "--use-vm-pool",
        "--provider-name", harness.name, "--output-dir", str(tmp_path / "out"),
        "--run-id", harness.new_run_id(), "--no-progress", "--vm-memory-mb", "384"])
    assert result.exit_code == 1, result.output
    assert "No space left on device" in result.output, result.output
    assert f"{full_disk}/" in result.output, result.output  # the file it could not write
    assert "--resume" in result.output, result.output
