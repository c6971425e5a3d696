"""A second Ctrl-C while a run stops cuts its grace short, as pip's, docker's and uvicorn's
do: the attempts under way are killed and left to a resume, and nothing already done is lost
(results.jsonl whole, the VMs stopped, the summary written, exit 130)."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from conftest import ROOT, shell_task, write_tasks
from parallel_rollout import exit_codes
from parallel_rollout.cli import main

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")


def wait_for(what, proc: subprocess.Popen, timeout: float = 60) -> None:
    """Until ``what()`` holds; the run's output when it ends or the wait times out first."""
    deadline = time.monotonic() + timeout
    while not what():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"gave up waiting: {proc.communicate()}")
        time.sleep(0.05)


def test_a_second_ctrl_c_stops_the_run_at_once_and_a_resume_goes_on(tmp_path):
    """The grace (shutdown_grace_s, 120 s here) waited out an attempt that sleeps: the second
    Ctrl-C was ignored, and the run ended only when the attempt did, 0 (it finished within)."""
    home = tmp_path / "home"  # the VMs' home: a file put in it later makes the resume's attempt quick
    home.mkdir()
    data = write_tasks(tmp_path / "tasks.jsonl", [
        shell_task("slow", reference=["test -e ~/quick || sleep 120", "touch ~/slow.done"]), shell_task("fast")])
    (tmp_path / "run.toml").write_text("shutdown_grace_s = 120\n")
    out, run_dir = tmp_path / "out", tmp_path / "out" / "r1"
    command = [sys.executable, str(ROOT / "run_parallel_rollout.py"), "--mode", "shell", "--data", str(data),
               "--num-rollouts", "2", "--snapshot-name", str(home), "--output-dir", str(out), "--run-id", "r1",
               "--no-progress"]
    proc = subprocess.Popen([*command, "--config", str(tmp_path / "run.toml")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        results = run_dir / "results.jsonl"
        wait_for(lambda: results.exists() and '"fast#0"' in results.read_text(), proc)
        time.sleep(0.5)  # the slow attempt under way
        proc.send_signal(signal.SIGINT)
        # two signals sent before the first is handled are one: the second waits for its line
        wait_for(lambda: "signal 2: stopping" in (run_dir / "run.log").read_text(), proc)
        started = time.monotonic()
        proc.send_signal(signal.SIGINT)
        said = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == exit_codes.EXIT_INTERRUPTED, said
    assert time.monotonic() - started < 60
    err = " ".join(said[1].split())
    assert "signal 2: stopping (finishing what completes within 120s; Ctrl-C again stops at once)" in err, err
    assert "signal 2 again: stopping at once; the attempts under way are cut, and run again by --resume" in err, err
    # nothing done is lost: every line whole, the summary written, no VM left to sweep
    records = [json.loads(line) for line in results.read_text().splitlines()]
    assert [(r["key"], r["status"]) for r in records] == [("fast#0", "success")], records
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["interrupted"] and summary["unfinished"] == 1, summary
    swept = CliRunner().invoke(main, ["vms", "sweep", "--run-id", "r1"])
    assert swept.output.strip() == "removed 0 process VM(s)", swept.output

    (home / "quick").touch()
    resumed = subprocess.run([*command, "--resume"], capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    records = [json.loads(line) for line in results.read_text().splitlines()]
    assert [(r["key"], r["status"]) for r in records] == [("fast#0", "success"), ("slow#0", "success")], records
