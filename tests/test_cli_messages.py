"""What ``run`` says, through the CLI: each message once, complete, and with the hint it needs.

A run without --data names every kind of data it takes; a --data that is a typo of a named
dataset gets a "did you mean", a missing one with no file's suffix what a task file and an
OSWorld folder must be; a failed gate's message is printed once, not twice (the log
line and the CLI's last line); a run that finished no sample says it has no score instead of
"success rate -, mean reward None".
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from conftest import shell_task, write_tasks
from parallel_rollout.cli import main
from parallel_rollout.config import NAMED_DATASETS
from parallel_rollout.exit_codes import EXIT_BELOW_THRESHOLD, EXIT_USAGE
from test_gates import failing_task


def run(tmp_path, *args: str):
    return CliRunner().invoke(main, ["run", "--output-dir", str(tmp_path / "out"), "--no-progress", *args])


@pytest.mark.parametrize("extra", [[], ["--dry-run"]])
def test_no_data_names_every_kind_of_data(tmp_path, extra):
    done = run(tmp_path, *extra)
    assert done.exit_code == EXIT_USAGE
    said = " ".join(done.output.split())
    assert "--data is required: a task file (JSON list or JSONL, optionally .gz, or Parquet), an OSWorld folder" in said
    assert f"a named dataset: {', '.join(NAMED_DATASETS)}" in said


@pytest.mark.parametrize("typo, meant", [("humaneva", "humaneval"), ("sokobn", "sokoban"), ("Miniwob2", "miniwob")])
def test_a_typo_of_a_named_dataset_gets_a_did_you_mean(tmp_path, monkeypatch, typo, meant):
    monkeypatch.chdir(tmp_path)
    done = run(tmp_path, "--data", typo)
    assert done.exit_code == EXIT_USAGE
    assert f"{tmp_path / typo}: task file not found (did you mean --data {meant}?)" in done.output


def test_a_missing_task_file_gets_no_dataset_hint(tmp_path):
    done = run(tmp_path, "--data", str(tmp_path / "humaneval.jsonl"))
    assert done.exit_code == EXIT_USAGE
    assert "task file not found" in done.output and "did you mean" not in done.output


@pytest.mark.parametrize("extra", [[], ["--dry-run"]])
def test_a_missing_path_with_no_suffix_says_what_a_file_and_a_folder_must_be(tmp_path, monkeypatch, extra):
    """`--data nosuch` without --mode said only "task file not found": a path with no file's
    suffix may mean an OSWorld folder as well, so both are said, and the folder's mode."""
    monkeypatch.chdir(tmp_path)
    done = run(tmp_path, "--data", "nosuch", *extra)
    said = " ".join(done.output.split())
    assert done.exit_code == EXIT_USAGE, said
    assert (f"{tmp_path / 'nosuch'}: no such task file or folder; --data takes a task file (JSON list or JSONL, "
            "optionally .gz, or Parquet), an OSWorld folder, or a named dataset") in said, said
    assert ("A task file is named with its suffix (.json, .jsonl, .parquet); an OSWorld folder, which runs as "
            "--mode osworld, is the task set's folder, examples/ beside test_all.json, or the checkout that holds "
            f"it; a relative path is from the current folder, {tmp_path}") in said, said
    assert not (tmp_path / "out").exists()


def test_a_missing_task_file_names_the_file_beside_it_it_misspells(tmp_path, monkeypatch):
    """`--data tasks.json` where tasks.jsonl lies said only "task file not found": the file a
    typo of the name meant, in the same folder, is named (and nothing else is run)."""
    write_tasks(tmp_path / "tasks.jsonl", [shell_task("a")])
    monkeypatch.chdir(tmp_path)
    for typo in ("tasks.json", "task.jsonl"):
        done = run(tmp_path, "--data", typo)
        assert done.exit_code == EXIT_USAGE
        assert f"{tmp_path / typo}: task file not found (did you mean --data {tmp_path / 'tasks.jsonl'}?)" in done.output
    assert not (tmp_path / "out").exists()
    done = run(tmp_path, "--data", "other.jsonl")  # no name near it: no guess
    assert "task file not found" in done.output and "did you mean" not in done.output
    # close only as its .jsonl: nope.jsonl was said to mean nomode.jsonl
    write_tasks(tmp_path / "nomode.jsonl", [shell_task("a")])
    done = run(tmp_path, "--data", "nope.jsonl")
    assert "task file not found" in done.output and "did you mean" not in done.output, done.output
    done = run(tmp_path, "--data", "taks.jsonl")  # a near-miss of the name itself still is
    assert f"(did you mean --data {tmp_path / 'tasks.jsonl'}?)" in done.output, done.output


def test_a_mode_that_conflicts_with_every_task_is_said_once(tmp_path):
    """--mode py on a file of shell tasks was a line per task (the first twenty, "… and 5 more"),
    each the same conflict; it is one line, as for a named dataset, with what to give."""
    data = write_tasks(tmp_path / "tasks.jsonl", [{**shell_task(f"t{i}"), "mode": "shell"} for i in range(3)])
    done = run(tmp_path, "--data", str(data), "--mode", "py")
    assert done.exit_code == EXIT_USAGE
    assert done.output.strip().splitlines() == [
        f"Error: {data}: its tasks are shell tasks (each names its mode), which --mode py cannot run: "
        "leave --mode out, or give --mode shell"]


def test_a_failed_gate_is_said_once(tmp_path):
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("a"), failing_task("b")])
    done = run(tmp_path, "--mode", "shell", "--data", str(data), "--run-id", "g", "--fail-under", "0.9")
    assert done.exit_code == EXIT_BELOW_THRESHOLD, done.output
    assert done.output.count("success rate 50.0% is below --fail-under 0.9 (90.0%)") == 1, done.output
    # run.log keeps it all the same
    assert "is below --fail-under 0.9" in (tmp_path / "out" / "g" / "run.log").read_text()


def test_a_run_that_finished_no_sample_has_no_score(tmp_path):
    """An OSWorld set whose one task is unsupported, with --skip-unsupported --limit 1: no
    sample to run (--limit leaves the skipped tasks out)."""
    from test_osworld_taskset import osworld_folder

    lacking = {"func": "no_such_metric", "result": {"type": "vm_file", "path": "/tmp/x", "dest": "x"}}
    folder = osworld_folder(tmp_path / "set", {"a": {"domain": "os", "instruction": "a", "config": [],
                                                    "evaluator": lacking}})
    done = run(tmp_path, "--mode", "osworld", "--data", str(folder), "--skip-unsupported", "--limit", "1",
               "--run-id", "empty")
    assert done.exit_code == 0, done.output
    assert "run empty: 0/0 samples finished: no success rate, no mean reward" in done.output
    assert "None" not in done.output and "success rate -" not in done.output
    assert json.loads((tmp_path / "out" / "empty" / "summary.json").read_text())["total_samples"] == 0


def test_a_resume_given_another_modes_data_says_the_mode_is_the_runs(tmp_path):
    """`--run-id r --resume --data other.jsonl` of a --mode shell run, other.jsonl's tasks py ones,
    said "which --mode shell cannot run: leave --mode out, or give --mode py": a --mode the user
    never gave (config.json's), and advice a resume refuses (another mode is other settings)."""
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("a")])
    assert run(tmp_path, "--mode", "shell", "--data", str(data), "--run-id", "r").exit_code == 0
    other = write_tasks(tmp_path / "other.jsonl", [{"id": f"p{i}", "mode": "py", "prompt": "def f():"} for i in range(2)])
    config = tmp_path / "out" / "r" / "config.json"
    for given, what in ((other, f"{other}: its tasks are py tasks (each names its mode)"),
                        ("humaneval", "--data humaneval holds py tasks")):
        done = run(tmp_path, "--run-id", "r", "--resume", "--data", str(given))
        assert done.exit_code == EXIT_USAGE, done.output
        assert (f"{what}, which --mode shell cannot run (mode = \"shell\" in {config}, which --resume reads): "
                "--resume continues r in its mode: give the run's own --data, or start a new --run-id") \
            in " ".join(done.output.split()), done.output
    assert run(tmp_path, "--run-id", "r", "--resume").exit_code == 0  # its own data: it ends as it did


def test_report_of_the_output_folder_names_its_runs(tmp_path):
    """`report results` (the output folder, not a run's) said only "not a run folder": it names
    the runs it holds and how to list them."""
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("a")])
    assert run(tmp_path, "--data", str(data), "--run-id", "first").exit_code == 0
    out = tmp_path / "out"
    (out / "notes").mkdir()  # a folder of the user's own is no run
    done = CliRunner().invoke(main, ["report", str(out)])
    assert done.exit_code == EXIT_USAGE, done.output
    assert (f"{out}: not a run folder (no config.json or results.jsonl); it is an output folder of runs (first): "
            f"give one, {out / 'first'}, or list them with `runs list --output-dir {out}`") \
        in " ".join(done.output.split()), done.output
    alone = CliRunner().invoke(main, ["report", str(out / "notes")])
    assert alone.exit_code == EXIT_USAGE and "output folder" not in alone.output, alone.output


def test_a_folder_that_holds_no_task_set_is_said_to_be_so(tmp_path):
    """An empty folder as --data was read as an OSWorld folder and said "no index test_all.json":
    it is said to be empty (no task file, no OSWorld task set), named, with every kind --data
    takes; a folder of task files names one to give; nothing is run."""
    empty = tmp_path / "empty"
    empty.mkdir()
    for extra in ([], ["--dry-run"]):
        done = run(tmp_path, "--data", str(empty), *extra)
        assert done.exit_code == EXIT_USAGE, done.output
        said = " ".join(done.output.split())
        assert (f"{empty}: the folder is empty: no task file and no OSWorld task set (examples/ beside an index "
                f"such as test_all.json); --data takes a task file (JSON list or JSONL, optionally .gz, or "
                f"Parquet), an OSWorld folder, or a named dataset: {', '.join(NAMED_DATASETS)}") in said, said
        assert "no index" not in said
    files = tmp_path / "files"
    files.mkdir()
    write_tasks(files / "b.jsonl", [shell_task("b")])
    write_tasks(files / "a.jsonl", [shell_task("a")])
    done = run(tmp_path, "--data", str(files))
    assert done.exit_code == EXIT_USAGE, done.output
    assert (f"{files}: a folder of task files, not a task file, and no OSWorld task set (examples/ beside an "
            f"index such as test_all.json); give one of them: --data {files / 'a.jsonl'}") \
        in " ".join(done.output.split()), done.output
    assert not (tmp_path / "out").exists()


def test_an_output_dir_under_proc_says_no_file_can_be_made_there(tmp_path):
    """--output-dir /proc/x said "the folder /proc is not writable (No such file or directory)":
    the folder is there; /proc is the kernel's file system, which takes no file."""
    for extra in ([], ["--dry-run"]):
        done = run(tmp_path, "--mode", "py", "--data", "humaneval", *extra, "--output-dir", "/proc/pr-x")
        assert done.exit_code == EXIT_USAGE, done.output
        said = " ".join(done.output.split())
        assert ("--output-dir /proc/pr-x: no file can be made in the folder /proc: it is on the proc file system, "
                "one the kernel fills, not storage") in said, said
        assert "not writable (No such file or directory)" not in said


def test_run_takes_provider_as_image_build_spells_it(tmp_path):
    """`image build --provider docker` then `run --provider docker` was click's "No such option:
    --provider": run (and vms sweep) take it as another name of --provider-name, shown in the
    help, and image build takes --provider-name."""
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("a")])
    done = run(tmp_path, "--data", str(data), "--provider", "process", "--run-id", "p")
    assert done.exit_code == 0, done.output
    assert json.loads((tmp_path / "out" / "p" / "config.json").read_text())["config"]["provider_name"] == "process"
    wrong = run(tmp_path, "--data", str(data), "--provider", "dokcer", "--dry-run")
    assert wrong.exit_code == EXIT_USAGE and "unknown provider 'dokcer' (--provider; did you mean 'docker'?)" in wrong.output
    assert "--provider-name, --provider" in CliRunner().invoke(main, ["run", "--help"]).output
    assert "--provider-name, --provider" in CliRunner().invoke(main, ["vms", "sweep", "--help"]).output
    assert "--provider, --provider-name" in CliRunner().invoke(main, ["image", "build", "--help"]).output
    swept = CliRunner().invoke(main, ["vms", "sweep", "--provider", "process", "--run-id", "pr-none"])
    assert swept.exit_code == 0 and "removed 0 process VM(s)" in swept.output, swept.output
