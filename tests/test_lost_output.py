"""Every command's output lost (a cron job's log on a full disk, ``… 2>&1 | head -1``) loses its
lines, never the run nor the exit status: a warning at a run's start, a usage error, and the
lines of ``runs list``, ``report`` and ``vms sweep``."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT, shell_task, write_tasks

ENV = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))


def lost(where: str, *argv: str, env: dict | None = None, cwd=None) -> subprocess.CompletedProcess:
    """The CLI with both standard streams lost: ``full`` is a log on a full disk (ENOSPC on
    every write), ``gone`` a pipe whose reader went away (EPIPE)."""
    command = [sys.executable, "-m", "parallel_rollout", *argv]
    if where == "full":
        with open("/dev/full", "w") as full:
            return subprocess.run(command, stdin=subprocess.DEVNULL, stdout=full, stderr=full,
                                  env=env or ENV, cwd=cwd, timeout=300)
    reader, writer = os.pipe()
    os.close(reader)  # gone before the first line, as `| true` is
    try:
        return subprocess.run(command, stdin=subprocess.DEVNULL, stdout=writer, stderr=writer,
                              env=env or ENV, cwd=cwd, timeout=300)
    finally:
        os.close(writer)


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tasks")
    return write_tasks(folder / "tasks.jsonl", [shell_task(k) for k in "ab"])


@pytest.mark.parametrize("where", ["full", "gone"])
def test_a_warning_at_the_start_of_a_run_whose_log_is_lost_runs_it_all_the_same(tmp_path, tasks, where):
    """A variable that nothing reads (PARALLEL_ROLLOUT_NUM_VM) is warned of before the run
    starts: that warning, written to a nightly log on a full disk, ended the night's run
    before its folder opened, exit 1 (aborted: resume) with a traceback nobody saw."""
    env = dict(ENV, PARALLEL_ROLLOUT_NUM_VM="3")
    proc = lost(where, "run", "--data", str(tasks), "--output-dir", str(tmp_path), "--run-id", "r",
                "--no-progress", env=env)
    assert proc.returncode == 0
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["successes"] == 2 and summary["unfinished"] == 0


@pytest.mark.parametrize("where", ["full", "gone"])
@pytest.mark.parametrize("argv", [["run", "--mode", "shel"], ["reprot", "x"], ["runs", "lst"],
                                  ["run", "--num-rollouts", "0"]],
                         ids=["unknown-mode", "unknown-command", "unknown-subcommand", "bad-value"])
def test_a_usage_error_on_a_lost_stderr_still_exits_2(tmp_path, tasks, where, argv):
    """Bad usage is exit 2 (the README's table) whether or not its message can be written:
    it was 1, a traceback of the message's write, which a scheduler reads as an aborted run."""
    argv = [*argv, "--data", str(tasks), "--output-dir", str(tmp_path)] if argv[0] == "run" else argv
    assert lost(where, *argv).returncode == 2
    assert not any(tmp_path.iterdir())


@pytest.fixture(scope="module")
def a_run(tmp_path_factory, tasks):
    out = tmp_path_factory.mktemp("out")
    done = subprocess.run([sys.executable, "-m", "parallel_rollout", "run", "--data", str(tasks), "--output-dir",
                           str(out), "--run-id", "r", "--no-progress"], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, env=ENV, timeout=300)
    assert done.returncode == 0, done.stderr
    return out


@pytest.mark.parametrize("where", ["full", "gone"])
def test_runs_list_report_and_sweep_keep_their_status_when_their_lines_are_lost(tmp_path, a_run, where):
    """The other commands' lines, lost as a run's are: exit 0, their work done (the page
    written). A full disk was a traceback and exit 1; a reader gone exit 1. ``runs list``'s
    lines are its answer: on a full disk it fails (1), not an empty list with 0."""
    listed = 1 if where == "full" else 0
    assert lost(where, "runs", "list", "--output-dir", str(a_run)).returncode == listed
    assert lost(where, "runs", "list", "--json", "--output-dir", str(a_run)).returncode == listed
    page = tmp_path / "page.html"
    assert lost(where, "report", str(a_run / "r"), "-o", str(page)).returncode == 0
    assert page.stat().st_size > 0
    assert lost(where, "vms", "sweep", "--run-id", "r").returncode == 0


def test_runs_list_on_a_full_disk_says_its_answer_was_not_written(a_run):
    """A scheduler's `runs list > runs.txt` on a full disk: exit 1 and why on stderr, where it
    exited 0 with an empty file, read as no runs."""
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "parallel_rollout", "runs", "list", "--output-dir", str(a_run)],
                              stdin=subprocess.DEVNULL, stdout=full, stderr=subprocess.PIPE, text=True, env=ENV,
                              timeout=300)
    assert proc.returncode == 1, proc.stderr
    assert "the answer could not be written to standard output: No space left on device" in proc.stderr
