"""run.log begins with the warnings said before the run's folder opened, as a cron job's
console said them (a variable nothing reads, a setting not used, a cut worker count): read the
next day, run.log had none of them (run_log.keep_until_the_run_log)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from click.testing import CliRunner

from conftest import shell_task, write_tasks
from parallel_rollout.cli import main

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")

WARNED = ("PARALLEL_ROLLOUT_NUM_ROLOUTS is set but is no flag of run nor a setting parallel-rollout reads",
          "--headless is not used by this run: the process provider's VMs open no window; it is ignored",
          "--num-rollouts 4 without --use-vm-pool boots a VM per worker: 1 sample needs 1 worker, so 1 starts")


def test_the_warnings_before_the_run_folder_opens_are_in_run_log(tmp_path):
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("t0")])
    done = subprocess.run([sys.executable, "-m", "parallel_rollout.cli", "run", "--mode", "shell", "--data", str(data),
                           "--output-dir", str(tmp_path / "out"), "--run-id", "cron", "--no-progress",
                           "--num-rollouts", "4", "--headless"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PARALLEL_ROLLOUT_NUM_ROLOUTS": "3"})
    assert done.returncode == 0, done.stderr
    run_log = (tmp_path / "out" / "cron" / "run.log").read_text()
    for said in WARNED:
        assert done.stderr.count(said) == 1, done.stderr  # on the console once, as before
        assert run_log.count(said) == 1 and f"WARNING MainProcess parallel_rollout: {said}" in run_log, run_log
    # in the order they were said, before the run's first line
    at = [run_log.index(said) for said in WARNED]
    assert at == sorted(at) and at[-1] < run_log.index("1 sample, 0 already final"), run_log


def test_minus_qq_says_no_warning_on_the_console_and_run_log_keeps_them(tmp_path):
    """-qq is errors only on the console (README, "Logs"): a variable nothing reads was said
    all the same, "Warning: PARALLEL_ROLLOUT_…", the other warnings not."""
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("t0")])
    done = subprocess.run([sys.executable, "-m", "parallel_rollout.cli", "run", "--mode", "shell", "--data", str(data),
                           "--output-dir", str(tmp_path / "out"), "--run-id", "cron", "--no-progress",
                           "--num-rollouts", "4", "--headless", "-qq"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PARALLEL_ROLLOUT_NUM_ROLOUTS": "3"}, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "", done.stderr
    run_log = (tmp_path / "out" / "cron" / "run.log").read_text()
    assert all(run_log.count(said) == 1 for said in WARNED), run_log


def test_a_run_log_has_no_warning_of_an_earlier_command(tmp_path):
    """Two commands in one process (CliRunner, a program that embeds the CLI): the second
    run's run.log keeps its own warnings, not a dry run's before it."""
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("t0")])
    args = ["run", "--mode", "shell", "--data", str(data), "--output-dir", str(tmp_path / "out"), "--no-progress"]
    dry = CliRunner().invoke(main, [*args, "--headless", "--dry-run"])
    assert dry.exit_code == 0 and WARNED[1] in dry.output, dry.output
    done = CliRunner().invoke(main, [*args, "--run-id", "second", "--num-rollouts", "4"])
    assert done.exit_code == 0, (done.output, done.exception)
    run_log = (tmp_path / "out" / "second" / "run.log").read_text()
    assert WARNED[2] in run_log and "--headless" not in run_log, run_log


def test_the_warnings_kept_for_a_run_log_that_never_opens_are_bounded(tmp_path):
    """A process whose CLI command opened no run.log (an embedding program, a trainer that ran
    one) keeps at most 1000 warnings for the next run.log, not every warning it ever says."""
    import logging

    from parallel_rollout import run_log

    run_log.keep_until_the_run_log()
    log = logging.getLogger("parallel_rollout.test_bound")
    for n in range(1500):
        log.warning("warning %d", n)
    handler = run_log.run_log_handler(tmp_path / "run.log")
    try:
        lines = (tmp_path / "run.log").read_text().splitlines()
    finally:
        run_log.close_run_log(handler)
        run_log.keep_until_the_run_log()  # nothing of this test kept for the next
    assert len(lines) == 1000 and lines[0].endswith("warning 0") and lines[-1].endswith("warning 999")


@pytest.mark.parametrize("command, env, warned", [
    (["--headless", "--dry-run"], {}, WARNED[1]),  # a dry run opens no run.log
    (["--num-rollouts", "0"], {"PARALLEL_ROLLOUT_NUM_ROLOUTS": "3"}, WARNED[0]),  # a run refused before its folder
], ids=["dry-run", "refused"])
def test_a_python_runs_run_log_has_no_warning_of_a_cli_command_before_it(tmp_path, command, env, warned):
    """A notebook that ran the CLI (CliRunner), or a script that called its main, then run():
    run()'s run.log began with the command's warnings, kept for a run.log the command never
    opened. They are the command's: forgotten when it ends."""
    from parallel_rollout.api import run

    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("t0")])
    args = ["run", "--mode", "shell", "--data", str(data), "--output-dir", str(tmp_path / "out"), "--no-progress"]
    said = CliRunner().invoke(main, [*args, *command], env=env)
    assert warned in " ".join(said.output.split()), said.output
    outcome = run(mode="shell", data=str(data), output_dir=str(tmp_path / "out"), run_id="after", progress=False)
    run_log = (outcome.run_dir / "run.log").read_text()
    assert "1 sample, 0 already final" in run_log and warned.split(":")[0] not in run_log, run_log


def test_a_python_runs_warnings_before_its_folder_opens_are_in_its_run_log(tmp_path):
    """run() logs what its sizing cut as the CLI does (README, "From Python": `num_vms=6: at
    most …`, in run.log and to the script's handlers): the script's handlers had it, its
    run.log, which only a CLI command began with the warnings said before it, did not."""
    from parallel_rollout.api import run

    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("t0")])
    outcome = run(mode="shell", data=str(data), output_dir=str(tmp_path / "out"), run_id="sized", progress=False,
                  num_vms=6, use_vm_pool=True)
    run_log = (outcome.run_dir / "run.log").read_text()
    said = "WARNING MainProcess parallel_rollout: num_vms=6 in run(): at most 1 rollout runs at once"
    assert run_log.count(said) == 1 and run_log.index(said) < run_log.index("1 sample, 0 already final"), run_log
