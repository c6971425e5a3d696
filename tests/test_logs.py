"""One log for every process: the workers' and the pool's records reach run.log and the
console, the progress bar stays whole, and -v/-q set the levels (logs.py)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, SHELL_TASKS, shell_task, write_tasks

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")

TESTS = Path(__file__).resolve().parent


def run_cli(tmp_path: Path, *flags: str, agent: str = "log_plugins:LoggingOracle",
            ) -> tuple[subprocess.CompletedProcess, Path]:
    """A pooled shell run with the logging agent and provider plugins, as a user types it."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(TESTS)]))
    proc = subprocess.run(
        [sys.executable, "-m", "parallel_rollout", "run", "--mode", "shell", "--data", str(SHELL_TASKS),
         "--limit", "3", "--agent", agent,
         "--provider-name", "log_plugins:LoggingProcessProvider", "--use-vm-pool", "--num-vms", "1",
         "--num-rollouts", "2", "--output-dir", str(tmp_path), "--run-id", "logs", *flags],
        capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc, tmp_path / "logs" / "run.log"


def test_worker_and_pool_records_reach_run_log_and_spare_the_bar(tmp_path):
    proc, run_log = run_cli(tmp_path, "--progress", "-q")
    text = run_log.read_text()
    # the workers' lines, with their process names: a plugin logger's warning, the project's INFO
    assert re.search(r" WARNING rollout-worker-\d log_plugins: agent-warning for ", text), text
    assert re.search(r" INFO rollout-worker-\d parallel_rollout.log_plugins: agent-info for ", text), text
    # a third party's INFO stays out at the default level (WARNING for other libraries)
    assert "agent-info-foreign" not in text
    # the pool's Manager process
    assert re.search(r" WARNING vm-pool log_plugins: provider-warning booting ", text), text
    # -q: the console has the warnings, not the INFO lines
    err = proc.stderr
    assert "agent-warning for " in err and "provider-warning booting " in err
    assert "agent-info for " not in err and "[Concurrency]" not in err
    # the bar: each warning is a line of its own, never glued to a bar's text, and the bar ends whole
    for line in err.split("\n"):
        if "agent-warning" in line:
            shown = line.split("\r")[-1]
            assert re.fullmatch(r"\[rollout-worker-\d\] agent-warning for \S+", shown), repr(line)
    assert re.search(r"logs: 100%\|[^\r\n]*\| 3/3 ", err), err


def test_verbose_adds_debug_and_other_libraries_info(tmp_path):
    proc, run_log = run_cli(tmp_path, "--no-progress", "-v")
    text = run_log.read_text()
    assert "agent-info-foreign for " in text and "agent-info-foreign for " in proc.stderr
    assert "[Concurrency] Set max concurrent rollouts" in proc.stderr
    # -v says what a run does, step by step: each attempt's dispatch and outcome, and each
    # VM's moves in the pool (they said nothing before; events.jsonl had the moves only)
    for pattern in (r" DEBUG MainProcess parallel_rollout: \S+#0 attempt 0 -> worker w\d",
                    r" DEBUG MainProcess parallel_rollout: \S+#0 attempt 0: success \(w\d, [\d.]+s\)",
                    r" DEBUG vm-pool parallel_rollout\.pool\.manager: vm-0 idle -> leased: lease \(\S+#0, w\d\)",
                    r" DEBUG vm-pool parallel_rollout\.pool\.manager: vm-0 resetting -> idle: reset done"):
        assert re.search(pattern, text), (pattern, text)
    assert "vm-0 idle -> leased" in proc.stderr
    quiet, quiet_log = run_cli(tmp_path / "quiet", "--no-progress")
    assert " DEBUG " not in quiet_log.read_text() and "-> worker" not in quiet.stderr


@pytest.mark.parametrize("quiet", [False, True])
def test_a_library_that_configures_the_root_logger_doubles_no_line(tmp_path, quiet):
    """A library that calls logging.warning() at import (bm25s) installs a root handler: the
    run's lines must still show once (not again as INFO:parallel_rollout:…), -q must still
    quiet them, and run.log keep them."""
    flags = ["--no-progress", *(["-q"] if quiet else [])]
    proc, run_log = run_cli(tmp_path, *flags, agent="root_logging_plugins:RootLoggingOracle")
    assert "root-logging-plugin imported" in proc.stderr  # the library's own line stays
    assert "INFO:parallel_rollout" not in proc.stderr and "WARNING:parallel_rollout" not in proc.stderr
    started = [line for line in proc.stderr.splitlines() if "3 samples, 0 already final" in line]
    assert len(started) == (0 if quiet else 1), proc.stderr
    assert "[Concurrency]" not in proc.stderr if quiet else proc.stderr.count("[Concurrency]") == 1
    assert re.search(r" INFO MainProcess parallel_rollout: run logs: 3 samples", run_log.read_text())


def test_run_log_holds_what_the_console_showed_at_the_end(tmp_path):
    """The summary lines the console prints last are in run.log too, in the same words."""
    proc, run_log = run_cli(tmp_path, "--no-progress")
    shown = proc.stdout.strip().splitlines()
    assert shown[0].startswith("run logs: 3/3 samples finished") and shown[-1].startswith("results: "), shown
    logged = [line.split(": ", 1)[1] for line in run_log.read_text().splitlines()
              if " INFO MainProcess parallel_rollout: " in line]
    assert logged[-len(shown):] == shown, (logged[-len(shown):], shown)


def test_the_bar_shows_the_rate_and_the_vms_of_now_between_two_ends(tmp_path):
    """The bar's rate and VM states are drawn within a second, not at the next sample's end
    only: they were set undrawn, so after the first of two slow samples (an OSWorld task takes
    minutes) the bar read '1/2 … ok -' until the second ended, the rate and VMs of before."""
    data = write_tasks(tmp_path / "tasks.jsonl", [
        shell_task("t0"), shell_task("t1", check="sleep 2 && test -e ~/t1.done")])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(TESTS)]))
    proc = subprocess.run(
        [sys.executable, "-m", "parallel_rollout", "run", "--mode", "shell", "--data", str(data),
         "--num-rollouts", "1", "--output-dir", str(tmp_path), "--run-id", "bar", "--progress"],
        capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    drawn = re.split(r"[\r\n]", proc.stderr)
    assert any(" 1/2 " in line and "ok 100% | VMs busy 1 " in line for line in drawn), drawn
