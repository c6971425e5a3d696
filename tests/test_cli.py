"""End to end through the CLI: the shipped shell benchmark in real sandboxes, and every file
a run leaves in its folder."""

from __future__ import annotations

import json
import shutil
from collections import defaultdict
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import SHELL_TASKS, assert_exactly_once, read_results
from parallel_rollout.cli import main
from parallel_rollout.config import RunConfig

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")


SHELL_IDS = [json.loads(line)["id"] for line in SHELL_TASKS.read_text().splitlines() if line.strip()]
EVENT_FIELDS = {"event", "time", "vm", "from", "to", "task", "worker", "reason"}


def run_cli(out: Path, run_id: str, *args: str):
    """One run of the shipped benchmark; fails the test unless it exits 0."""
    result = CliRunner().invoke(main, ["--mode", "shell", "--data", str(SHELL_TASKS), "--output-dir", str(out),
                                       "--run-id", run_id, "--no-progress", *args])
    assert result.exit_code == 0, (result.output, result.exception)
    return result


def transitions(run_dir: Path) -> list[dict]:
    """The pool's state transitions from events.jsonl (runner events are retries, deaths …)."""
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    return [e for e in events if e["event"] == "vm"]


@pytest.fixture(scope="module")
def pooled_run(tmp_path_factory):
    """N=4 workers sharing M=2 VMs over the 25 shipped tasks, run once for the tests below."""
    out = tmp_path_factory.mktemp("pooled")
    result = run_cli(out, "pooled", "--num-rollouts", "4", "--num-vms", "2", "--use-vm-pool")
    return out / "pooled", result


def test_pooled_run_succeeds_on_every_task(pooled_run):
    run_dir, result = pooled_run
    assert "25/25 samples finished, 25 succeeded" in result.output
    finals = assert_exactly_once(run_dir, {f"{task_id}#0" for task_id in SHELL_IDS})
    assert all(r["success"] and r["status"] == "success" and r["reward"] == 1.0 for r in finals.values())
    assert f"results: {run_dir}/" in result.output


def test_pooled_run_summary(pooled_run):
    run_dir, _ = pooled_run
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["run_id"] == "pooled"
    assert (summary["total_samples"], summary["finished"], summary["unfinished"]) == (25, 25, 0)
    assert summary["status_counts"] == {"success": 25}
    assert (summary["success_rate"], summary["mean_reward"], summary["interrupted"]) == (1.0, 1.0, False)
    assert summary["per_mode"] == {"shell": {"finished": 25, "successes": 25, "success_rate": 1.0, "mean_reward": 1.0}}
    assert summary["per_tag"]["isolation"]["success_rate"] == 1.0
    rollout = summary["timing_s"]["rollout"]
    assert 0 < rollout["p50"] <= rollout["p90"] <= rollout["p99"] <= rollout["max"]
    assert summary["timing_s"]["lease_wait"] is not None and summary["timing_s"]["wall"] > 0
    vm = summary["vm"]
    assert (vm["provider"], vm["size"], vm["per_worker"]) == ("process", 2, False)
    assert (vm["leases"], vm["marked_dead"], vm["replacements"]) == (25, 0, 0)
    # Stats are taken after the pool's shutdown, which waits for the last reset.
    assert vm["resets"] == 25
    assert 0 < vm["utilization"] <= 1 and vm["states"]["leased"] == 0
    # the shutdown stopped both VMs: "stopped", not "dead", as the console's "0 died" says
    assert (vm["states"]["stopped"], vm["states"]["dead"]) == (2, 0)


def test_pooled_run_results_one_line_per_attempt(pooled_run):
    run_dir, _ = pooled_run
    records = read_results(run_dir)
    assert len(records) == 25  # nothing retried: one attempt per sample
    for r in records:
        assert r["attempt"] == 0 and r["final"] is True and r["run_id"] == "pooled"
        assert r["vm"] in {"vm-0", "vm-1"} and r["worker"] in {f"w{i}" for i in range(4)}
        assert r["trajectory"] == f"trajectories/{r['task_id']}/0/attempt-0.jsonl"
        turns = [json.loads(line) for line in (run_dir / r["trajectory"]).read_text().splitlines()]
        assert turns and turns[-1]["done"] is True and len(turns) == r["turns"]


def test_pooled_run_events_record_every_transition(pooled_run):
    run_dir, _ = pooled_run
    events = transitions(run_dir)
    assert all(set(e) == EVENT_FIELDS for e in events)
    by_vm: dict[str, list[dict]] = defaultdict(list)
    for e in events:
        by_vm[e["vm"]].append(e)
    assert set(by_vm) == {"vm-0", "vm-1"}
    for vm, seq in by_vm.items():
        # one VM's transitions chain: each starts in the state the previous one ended in
        assert all(a["to"] == b["from"] for a, b in zip(seq, seq[1:])), vm
        assert all(a["time"] <= b["time"] for a, b in zip(seq, seq[1:])), vm
    leases = [e for e in events if (e["from"], e["to"]) == ("idle", "leased")]
    releases = [e for e in events if (e["from"], e["to"]) == ("leased", "resetting")]
    resets = [e for e in events if (e["from"], e["to"]) == ("resetting", "idle")]
    # a reset still running when the run ends is cut short by the pool's shutdown
    cut = [e for e in events if (e["from"], e["to"], e["reason"]) == ("resetting", "dead", "pool shutdown")]
    assert len(leases) == len(releases) == len(resets) + len(cut) == 25
    assert len(cut) <= 2
    # each lease and its release name the task and worker of the record that used the VM
    records = {r["key"]: r for r in read_results(run_dir)}
    for e in leases + releases:
        assert (records[e["task"]]["vm"], records[e["task"]]["worker"]) == (e["vm"], e["worker"])


def test_pooled_run_config_json(pooled_run):
    run_dir, _ = pooled_run
    saved = json.loads((run_dir / "config.json").read_text())
    config = saved["config"]
    assert saved["run_id"] == "pooled"
    assert (config["num_rollouts"], config["num_vms"], config["use_vm_pool"]) == (4, 2, True)
    assert config["max_turns"] == 100 and config["data"] == str(SHELL_TASKS)
    assert {"num_rollouts", "num_vms", "use_vm_pool", "mode", "data"} <= set(config["explicit"])
    rebuilt = RunConfig(**{k: v for k, v in config.items() if k != "explicit"})
    assert saved["identity_hash"] == rebuilt.identity_hash()


def test_sweep_after_a_clean_run_removes_nothing(pooled_run):
    result = CliRunner().invoke(main, ["vms", "sweep", "--run-id", "pooled"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == "removed 0 process VM(s)"


def test_per_worker_vms_one_per_worker(tmp_path):
    """Without --use-vm-pool each of the N=3 workers owns one VM and only that one."""
    run_cli(tmp_path, "private", "--num-rollouts", "3")
    run_dir = tmp_path / "private"
    assert_exactly_once(run_dir, {f"{task_id}#0" for task_id in SHELL_IDS})
    events = transitions(run_dir)
    assert {e["vm"] for e in events} == {"vm-0", "vm-1", "vm-2"}
    workers_of_vm: dict[str, set[str]] = defaultdict(set)
    for e in events:
        if e["to"] == "leased":
            workers_of_vm[e["vm"]].add(e["worker"])
    assert all(len(workers) == 1 for workers in workers_of_vm.values()), dict(workers_of_vm)
    assert len(set().union(*workers_of_vm.values())) == len(workers_of_vm)  # no worker holds two
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["successes"], summary["vm"]["size"], summary["vm"]["per_worker"]) == (25, 3, True)


def test_a_mistyped_command_says_the_one_it_is_close_to(tmp_path):
    from click.testing import CliRunner as _Runner

    from parallel_rollout.cli import main as _main

    for typo, meant in (("reprot", "report"), ("compaer", "compare"), ("rnu", "run"), ("vsm", "vms")):
        result = _Runner().invoke(_main, [typo, str(tmp_path)])
        assert result.exit_code == 2, result.output
        assert f"no command {typo!r} (did you mean {meant!r}?)" in result.output, result.output
    # of two close names, the group that has the next word as a command (runz list: not run)
    for args, meant in ((["runz", "list"], "runs"), (["runz"], "run"), (["runz", "--help"], "run")):
        result = _Runner().invoke(_main, args)
        assert f"no command 'runz' (did you mean {meant!r}?)" in result.output, (args, result.output)
    # run is the default command: its flags go to run; a word nothing like a command is no
    # command (it was run's "unexpected extra argument", and with --help run's help, exit 0)
    shown = _Runner().invoke(_main, ["--mode", "shell", "--data", "x.jsonl", "--print-config"])
    assert shown.exit_code == 0, shown.output
    for args in (["zzzzqq"], ["results", "--help"], ["results", "list"]):
        other = _Runner().invoke(_main, args)
        assert other.exit_code == 2, (args, other.output)
        assert (f"no command {args[0]!r}: the commands are compare, image, osworld-cache, report, run, runs, vms; "
                "run's flags (--mode, --data …) need no command before them") in " ".join(other.output.split()), other.output


def test_runs_report_and_runs_compare_name_the_commands_they_are(tmp_path, monkeypatch):
    """Beside `runs list`, `runs report RUN` and `runs compare A B` read as commands of runs:
    click said "No such command 'report'." and nothing of `report`, a command of its own."""
    monkeypatch.setenv("PARALLEL_ROLLOUT_PROG", "parallel-rollout")
    out = str(tmp_path / "out")
    for args in (["report", "nightly-2", "--output-dir", out], ["compare", "nightly-1", "nightly-2", "--check"]):
        result = CliRunner().invoke(main, ["runs", *args])
        assert result.exit_code == 2, (args, result.output)
        assert (f"no command {args[0]!r} in runs (it has export-osworld, list): {args[0]} is a command of its own: "
                f"parallel-rollout {' '.join(args)}") in " ".join(result.output.split()), result.output
    typo = CliRunner().invoke(main, ["runs", "lst"])  # a typo of its own commands: click's, as before
    assert typo.exit_code == 2 and "Did you mean 'list'?" in typo.output, typo.output


@pytest.mark.parametrize("mode, data", [("shell", SHELL_TASKS), ("gym", "frozenlake")])
def test_a_run_id_outside_the_rule_is_refused_by_every_mode(tmp_path, mode, data):
    """A run id names folders (and VMs' folders, containers, cgroups): 1-64 letters, digits,
    '.', '_' and '-'. A mode without VMs took 'a b' while one with VMs refused it."""
    result = CliRunner().invoke(main, ["--mode", mode, "--data", str(data), "--agent", "oracle", "--limit", "1",
                                       "--output-dir", str(tmp_path / "out"), "--run-id", "a b", "--no-progress"])
    assert result.exit_code == 2, (result.output, result.exception)
    assert "run id 'a b' must be 1-64 characters of letters, digits, '.', '_' or '-'" in result.output
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("args, option", [
    (["report", "RUN", "-o", "-"], "-o"),  # as typed: it said --output
    (["report", "RUN", "--output", "-"], "--output"),
    (["compare", "A", "B", "--html", "-"], "--html"),
    (["run", "--mode", "shell", "--data", str(SHELL_TASKS), "--limit", "1", "--junit-xml", "-"], "--junit-xml"),
], ids=["report", "report-long", "compare", "run"])
def test_a_dash_for_a_file_a_command_writes_is_refused_not_written_as_a_file_named_dash(tmp_path, monkeypatch,
                                                                                         args, option):
    """``report -o -`` wrote the page to a file named '-' (and ``compare --html -`` '-.txt'
    beside it); none of these files goes to stdout, and each command's --help says so."""
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, [*args, "--output-dir", str(tmp_path / "out")])
    assert result.exit_code == 2, (result.output, result.exception)
    assert f"{option} -: writing it to stdout is not supported; give a file path" in result.output
    assert not list(tmp_path.glob("-*")) and not (tmp_path / "out").exists()
    shown = CliRunner().invoke(main, [args[0], "--help"], terminal_width=200)
    assert "('-', stdout, is refused" in " ".join(shown.output.split())
