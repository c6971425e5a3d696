"""How many workers and VMs a run starts, as a user meets it: no more VMs booted than the run
can use (a first run and a resume), and a small run or resume warns of no worker count it was
never given."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from conftest import shell_task, write_tasks
from parallel_rollout.cli import main


def cli(tmp_path, *args: str):
    return CliRunner().invoke(main, ["run", "--output-dir", str(tmp_path / "out"), "--no-progress", *args])


@pytest.mark.parametrize("flags, booted, said", [
    (["--num-rollouts", "2", "--num-vms", "8", "--use-vm-pool"], 2,
     "--num-vms 8: at most 2 rollouts run at once (3 samples, 2 env loops), so 2 VMs are booted"),
    (["--num-rollouts", "5", "--limit", "1"], 1,
     "--num-rollouts 5 without --use-vm-pool boots a VM per worker: 1 sample needs 1 worker, so 1 starts"),
    # with a pool no more workers either: 50 started for 3 samples (300 for one took 8 s); a
    # limit they all met is not said to be cut 'to 3 (--num-rollouts 3 …): raise them for more'
    (["--num-rollouts", "50", "--num-vms", "2", "--use-vm-pool", "--max-concurrent-rollouts", "50"], 2,
     "--num-rollouts 50: 3 samples keep at most 3 workers of 1 env loop busy, so 3 start"),
])
def test_no_more_vms_are_booted_than_the_run_can_use(tmp_path, flags, booted, said):
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("a"), shell_task("b"), shell_task("c")])
    done = cli(tmp_path, "--mode", "shell", "--data", str(data), "--run-id", "cap", *flags)
    assert done.exit_code == 0, (done.output, done.exception)
    assert said in done.output and "raise them for more" not in done.output
    summary = json.loads((tmp_path / "out" / "cap" / "summary.json").read_text())
    assert summary["vm"]["size"] == booted and summary["vm"]["boots"] == booted
    # config.json keeps what was asked: a resume with the same flags is the same run
    assert json.loads((tmp_path / "out" / "cap" / "config.json").read_text())["config"]["num_rollouts"] == int(flags[1])


def test_a_resume_boots_no_more_vms_than_the_samples_it_has_left(tmp_path):
    """A nightly resume with 1 sample left to run (the rest final) booted the whole pool,
    sized by the run's samples: on QEMU, minutes of boots for VMs that never ran a task. Its
    log says the pool once, the one it boots: it said first the pool the run's samples would
    use ('so 4 VMs are booted'), then this one, a log that contradicted itself. Its --dry-run
    says that pool too (it said none)."""
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task(k) for k in "abcd"])
    flags = ["--mode", "shell", "--data", str(data), "--run-id", "left", "--num-rollouts", "4", "--num-vms", "8",
             "--use-vm-pool"]
    assert cli(tmp_path, *flags, "--limit", "3").exit_code == 0
    one_vm = ["--num-vms 8: at most 1 rollout runs at once (1 sample, 4 env loops), so 1 VM is booted"]
    dry = cli(tmp_path, *flags, "--resume", "--limit", "4", "--dry-run")
    assert dry.exit_code == 0, (dry.output, dry.exception)
    assert [line for line in dry.output.splitlines() if "booted" in line] == one_vm, dry.output
    done = cli(tmp_path, *flags, "--resume", "--limit", "4")
    assert done.exit_code == 0, (done.output, done.exception)
    said = [line for line in done.output.splitlines() if "booted" in line]
    assert said == one_vm, said
    summary = json.loads((tmp_path / "out" / "left" / "summary.json").read_text())
    assert summary["finished"] == 4 and summary["vm"]["size"] == 1, summary["vm"]
    events = (tmp_path / "out" / "left" / "events.jsonl").read_text()
    assert events.count('"initial boot"') == 3 + 1  # the first session's 3, the resume's 1


@pytest.mark.parametrize("given", [[], ["--num-rollouts", "5"]], ids=["default", "given"])
def test_a_small_resume_warns_of_no_worker_count_it_was_never_given(tmp_path, given):
    """A nightly resume with 1 sample left, of a run never given --num-rollouts, warned each
    night '--num-rollouts 5 without --use-vm-pool boots a VM per worker: 1 sample needs 1
    worker, so 1 starts': a flag never typed, and nothing to act on (the samples left decide
    the pool). A count the run was given is still said as the one the resume boots (as
    test_a_resume_boots_no_more_vms_than_the_samples_it_has_left asks of --num-vms)."""
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task(k) for k in "abcd"])
    flags = ["--mode", "shell", "--data", str(data), "--run-id", "few", *given]
    assert cli(tmp_path, *flags, "--limit", "3").exit_code == 0
    said = "--num-rollouts 5 without --use-vm-pool boots a VM per worker: 1 sample needs 1 worker, so 1 starts"
    for args in (["--dry-run"], []):
        done = cli(tmp_path, "--run-id", "few", "--resume", "--limit", "4", *args)
        assert done.exit_code == 0, (done.output, done.exception)
        assert (said in done.output) == bool(given), done.output
        assert "--num-rollouts" not in done.output or given, done.output
    summary = json.loads((tmp_path / "out" / "few" / "summary.json").read_text())
    assert summary["finished"] == 4 and summary["vm"]["size"] == 1, summary["vm"]


@pytest.mark.parametrize("given", [[], ["--num-rollouts", "5"], ["--config", "run.toml"]],
                         ids=["default", "given", "in-a-config-file"])
def test_a_small_first_run_warns_of_no_worker_count_it_was_never_given(tmp_path, given):
    """As a resume (above), a first run of a 2-task file never given --num-rollouts warned
    '--num-rollouts 5 without --use-vm-pool boots a VM per worker: 2 samples need 2 workers, so
    2 start' of the default 5: a flag never typed, nothing to act on. A count the run was given,
    by flag or config file, is still warned of as cut, named as it was given (a config file's
    count was '--num-rollouts 5', a flag never typed: now 'num-rollouts = 5 in run.toml')."""
    (tmp_path / "run.toml").write_text("num-rollouts = 5\n")
    given = [str(tmp_path / arg) if arg == "run.toml" else arg for arg in given]
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task(k) for k in "ab"])
    cut = "boots a VM per worker: 2 samples need 2 workers, so 2 start"
    for run_id, args in (("dry", ["--dry-run"]), ("real", [])):
        done = cli(tmp_path, "--mode", "shell", "--data", str(data), "--run-id", run_id, *given, *args)
        assert done.exit_code == 0, (done.output, done.exception)
        assert (cut in done.output) == bool(given), done.output
        assert "num-rollouts" not in done.output or given, done.output
        if given:  # the count named as it was given: the config file's key, not a flag never typed
            said = f"num-rollouts = 5 in {tmp_path / 'run.toml'}" if "--config" in given else "--num-rollouts 5"
            assert f"{said} without --use-vm-pool {cut}" in done.output, done.output
            assert ("--num-rollouts" in done.output) == ("--config" not in given), done.output
    summary = json.loads((tmp_path / "out" / "real" / "summary.json").read_text())
    assert summary["finished"] == 2 and summary["vm"]["size"] == 2, summary["vm"]


@pytest.mark.parametrize("given", [[], ["--num-rollouts", "5"]], ids=["default", "given"])
def test_with_v_the_pool_a_run_starts_is_said_once(tmp_path, given):
    """-v said the cut of the worker count twice (the pool sized as the run was prepared, and
    again as its folder opened), a default's as a typed one's; a dry run's and a resume's too."""
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task(k) for k in "ab"])
    cut = "boots a VM per worker: 1 sample needs 1 worker, so 1 starts"
    flags = ["-v", "--mode", "shell", "--data", str(data), "--run-id", "once", *given]
    for args in (["--limit", "1", "--dry-run"], ["--limit", "1"],
                 ["--resume", "--limit", "2", "--dry-run"], ["--resume", "--limit", "2"]):
        done = cli(tmp_path, *flags, *args)
        assert done.exit_code == 0, (done.output, done.exception)
        assert done.output.count(cut) == 1, (args, done.output)


@pytest.mark.parametrize("pool", [["--use-vm-pool"], []], ids=["pool", "a-vm-per-worker"])
def test_a_limit_above_the_loops_asked_for_is_said_cut_when_the_samples_cut_the_workers(tmp_path, pool):
    """--max-concurrent-rollouts 40 over --num-rollouts 10 on 6 samples: the README's 'more than
    N×K is cut to N×K, with a warning' said nothing with the pool (the limit was dropped with
    the workers cut to 6), and without it named '--num-rollouts 6', a count never typed ('raise
    them for more': more would not run). Said once, in the counts as typed."""
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task(f"t{i}") for i in range(6)])
    done = cli(tmp_path, "--mode", "shell", "--data", str(data), "--run-id", "lim", "--num-rollouts", "10",
               "--max-concurrent-rollouts", "40", *pool)
    assert done.exit_code == 0, (done.output, done.exception)
    said = ("--max-concurrent-rollouts 40 is more than the 10 env loops asked for (--num-rollouts 10 × "
            "--envs-per-worker 1): cut to them, and to the 6 the samples keep busy")
    assert done.output.count(said) == 1, done.output
    assert "--num-rollouts 6" not in done.output and "raise them for more" not in done.output, done.output
    summary = json.loads((tmp_path / "out" / "lim" / "summary.json").read_text())
    assert summary["finished"] == 6, summary
