"""A run's life as a user meets it: its folder, its processes, its signals and its end."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from click.testing import CliRunner

from conftest import shell_task, write_tasks
from parallel_rollout.cli import main
from parallel_rollout.exit_codes import EXIT_USAGE


def cli(tmp_path, *args: str):
    return CliRunner().invoke(main, ["run", "--output-dir", str(tmp_path / "out"), "--no-progress", *args])


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("chattr") is None, reason="needs root and chattr")
def test_resuming_into_a_read_only_run_folder_is_a_usage_error(tmp_path):
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("a")])
    run_dir = tmp_path / "out" / "ro"
    run_dir.mkdir(parents=True)
    # immutable: not even root may make its .lock
    if subprocess.run(["chattr", "+i", str(run_dir)], capture_output=True).returncode:
        pytest.skip("this file system has no immutable attribute")
    try:
        done = cli(tmp_path, "--mode", "shell", "--data", str(data), "--run-id", "ro", "--resume")
    finally:
        subprocess.run(["chattr", "-i", str(run_dir)], check=True)
    assert done.exit_code == EXIT_USAGE, (done.output, done.exception)
    assert f"cannot lock the run folder {run_dir}: Operation not permitted" in done.output
    assert "Traceback" not in done.output
