"""The run folder through the CLI: a finished run's results are not run over without --resume, a
resume runs only what is missing and refuses changed settings naming the field, and the lock
keeps a second run (another pid namespace's too) out of one folder."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import filelock
import pytest
from click.testing import CliRunner

from conftest import ROOT, assert_exactly_once, read_results, shell_task, write_tasks
from parallel_rollout.cli import main


def cli(tmp_path: Path, data: Path, *args: str):
    return CliRunner().invoke(main, ["--mode", "shell", "--data", str(data), "--num-rollouts", "2",
                                     "--output-dir", str(tmp_path / "out"), "--run-id", "r",
                                     "--no-progress", *args])


@pytest.fixture
def finished_run(tmp_path):
    """A small finished run in out/r; returns the task file."""
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task(f"t{i}") for i in range(3)])
    result = cli(tmp_path, data)
    assert result.exit_code == 0, (result.output, result.exception)
    return data


def test_existing_results_without_resume_is_refused(tmp_path, finished_run):
    before = (tmp_path / "out" / "r" / "results.jsonl").read_bytes()
    result = cli(tmp_path, finished_run)
    assert result.exit_code == 2
    assert "already holds results; add --resume" in result.output
    assert (tmp_path / "out" / "r" / "results.jsonl").read_bytes() == before


def test_resume_of_a_finished_run_runs_nothing(tmp_path, finished_run):
    run_dir = tmp_path / "out" / "r"
    results_before = (run_dir / "results.jsonl").read_bytes()
    leases_before = (run_dir / "events.jsonl").read_text().count('"to": "leased"')
    result = cli(tmp_path, finished_run, "--resume")
    assert result.exit_code == 0, (result.output, result.exception)
    assert (run_dir / "results.jsonl").read_bytes() == results_before
    assert (run_dir / "events.jsonl").read_text().count('"to": "leased"') == leases_before
    assert "3 already final, 0 to run" in result.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["finished"], summary["successes"], summary["attempts"]) == (3, 3, 3)
    assert_exactly_once(run_dir, {f"t{i}#0" for i in range(3)})


def test_resume_runs_only_what_is_missing(tmp_path, finished_run):
    """A crash after two of three records: resume runs the third, once."""
    run_dir = tmp_path / "out" / "r"
    lines = (run_dir / "results.jsonl").read_bytes().splitlines(keepends=True)
    (run_dir / "results.jsonl").write_bytes(b"".join(lines[:2]) + lines[2][:25])  # torn third line
    result = cli(tmp_path, finished_run, "--resume")
    assert result.exit_code == 0, (result.output, result.exception)
    assert "torn last line" in result.stderr
    finals = assert_exactly_once(run_dir, {f"t{i}#0" for i in range(3)})
    assert len(read_results(run_dir)) == 3 and all(r["success"] for r in finals.values())


def test_resume_accepts_the_same_data_file_spelled_differently(tmp_path, finished_run, monkeypatch):
    """A cron job resuming from another folder names the same file by another path."""
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["--mode", "shell", "--data", "tasks.jsonl", "--num-rollouts", "2",
                                       "--output-dir", "out", "--run-id", "r", "--no-progress", "--resume"])
    assert result.exit_code == 0, (result.output, result.exception)


@pytest.mark.parametrize("change, field", [
    (["--group-size", "2"], "--group-size"),
    (["--max-turns", "5"], "--max-turns"),
    (["--agent", "test_results:PatientOracle"], "--agent"),
    ("other-data", "--data"),
    ("other-mode", "--mode"),
], ids=["group-size", "max-turns", "agent", "data", "mode"])
def test_resume_with_changed_identity_names_the_field(tmp_path, finished_run, change, field):
    run_dir = tmp_path / "out" / "r"
    data = finished_run
    if change == "other-data":
        data = write_tasks(tmp_path / "other.jsonl", [shell_task(f"t{i}") for i in range(3)])
        change = []
    elif change == "other-mode":
        # Only shell exists so far: make the earlier run one of another mode.
        config = json.loads((run_dir / "config.json").read_text())
        config["config"]["mode"] = "math"
        config["identity_hash"] = "0" * 16
        (run_dir / "config.json").write_text(json.dumps(config))
        change = []
    before = (run_dir / "results.jsonl").read_bytes()
    result = cli(tmp_path, data, "--resume", *change)
    assert result.exit_code == 2, (result.output, result.exception)
    assert "cannot resume r" in result.output
    assert f"other settings for {field}" in " ".join(result.output.split())
    assert (run_dir / "results.jsonl").read_bytes() == before


def test_a_held_lock_refuses_a_second_run(tmp_path, finished_run):
    run_dir = tmp_path / "out" / "r"
    config_before = (run_dir / "config.json").read_bytes()
    with filelock.FileLock(str(run_dir / ".lock"), timeout=0):
        result = cli(tmp_path, finished_run, "--resume")
    assert result.exit_code == 75  # EX_TEMPFAIL: a cron wrapper retries later
    said = " ".join(result.output.split())
    assert f"another run (pid {os.getpid()}, running since " in said and f"is writing to {run_dir}" in said, said
    assert "lock is held" in result.output
    assert (run_dir / "config.json").read_bytes() == config_before


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare")
def test_a_lock_held_from_another_pid_namespace_is_seen_held(tmp_path):
    """/proc/locks lists only the holders of the reader's PID namespace: a run in a container
    sharing the results folder (here: `unshare --pid --fork --mount-proc`, and the holder this
    test) had its --dry-run say nothing of the lock, and a new run of its settings call it
    interrupted. The lock itself is asked; the holder is said to be in another namespace."""
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("a")])
    run_dir = tmp_path / "out" / "r"
    run_dir.mkdir(parents=True)
    argv = ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-m", "parallel_rollout", "run",
            "--mode", "shell", "--data", str(data), "--output-dir", str(tmp_path / "out"), "--run-id", "r",
            "--resume", "--no-progress"]
    with filelock.FileLock(str(run_dir / ".lock"), timeout=0):
        dry = subprocess.run([*argv, "--dry-run"], capture_output=True, text=True, timeout=120)
        refused = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert dry.returncode == 0, dry.stderr
    assert "another run is writing to it now (its lock is held)" in " ".join(dry.stderr.split()), dry.stderr
    assert refused.returncode == 75, refused.stderr
    said = " ".join(refused.stderr.split())
    assert "another run (a process in another PID namespace: its pid cannot be seen from here)" in said, said
    assert not (run_dir / "results.jsonl").exists()


def started_run(data: Path, out: Path) -> subprocess.Popen:
    """A run of ``data`` as out/r in a subprocess, once its folder is open (run.log there)."""
    first = subprocess.Popen(
        [sys.executable, str(ROOT / "run_parallel_rollout.py"), "--mode", "shell", "--data", str(data),
         "--num-rollouts", "1", "--output-dir", str(out), "--run-id", "r", "--no-progress"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 30
    while not (out / "r" / "run.log").exists():
        assert first.poll() is None, first.communicate()[0]
        assert time.monotonic() < deadline, "the first run never started"
        time.sleep(0.05)
    return first


def test_a_concurrent_run_refuses_a_second_run(tmp_path):
    """A real first run in a subprocess, the second in-process while it works."""
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("slow", reference=["sleep 3", "touch ~/slow.done"])])
    out = tmp_path / "out"
    first = started_run(data, out)
    try:
        result = cli(tmp_path, data)
        assert first.poll() is None, "the first run ended before the second was tried"
        assert result.exit_code == 75  # EX_TEMPFAIL
        assert "lock is held" in result.output
    finally:
        output, _ = first.communicate(timeout=60)
    assert first.returncode == 0, output
    assert_exactly_once(out / "r", {"slow#0"})


def test_a_run_whose_lock_file_was_deleted_still_refuses_a_second_run(tmp_path):
    """A cleanup that deletes the run folder's .lock while the run goes on (`find -name .lock
    -delete`, a tmp cleaner): a second run of the run id made a new .lock, took it, and ran
    every sample the first had not finished yet a second time (130 of 164 final records twice
    in a humaneval run). The run folder itself is locked too: the second run exits 75."""
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("slow", reference=["sleep 10", "touch ~/slow.done"])])
    out = tmp_path / "out"
    first = started_run(data, out)
    try:
        (out / "r" / ".lock").unlink()
        second = subprocess.run(
            [sys.executable, "-m", "parallel_rollout", "run", "--mode", "shell", "--data", str(data),
             "--num-rollouts", "1", "--output-dir", str(out), "--run-id", "r", "--resume", "--no-progress"],
            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
        assert second.returncode == 75, second.stderr
        said = " ".join(second.stderr.split())
        assert f"another run (pid {first.pid}, running since " in said and "lock is held" in said, said
    finally:
        output, _ = first.communicate(timeout=60)
    assert first.returncode == 0, output
    assert_exactly_once(out / "r", {"slow#0"})


def test_a_new_run_under_another_limit_says_what_the_earlier_run_finished_of_its_samples(tmp_path):
    """A run of four tasks killed with t0 and t1 final, then the same settings under --limit 1
    as a new run: the note said "this one runs every sample again; --run-id a --resume goes on
    with that one instead", where that resume (with --limit 1) is refused for t1, and the
    earlier run had finished this run's one sample, not all of them. --limit is no setting the
    runs must share (no part of their hash): the note says each one's and what the earlier run
    finished of this run's samples, and the resume that goes on with it."""
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task(f"t{i}") for i in range(4)])

    def run(run_id: str, *args: str):
        return CliRunner().invoke(main, ["--mode", "shell", "--data", str(data), "--num-rollouts", "1",
                                         "--output-dir", str(tmp_path / "out"), "--run-id", run_id,
                                         "--no-progress", *args])

    assert run("a").exit_code == 0
    results = tmp_path / "out" / "a" / "results.jsonl"
    kept = [line for line in results.read_text().splitlines(keepends=True)
            if json.loads(line)["key"] in ("t0#0", "t1#0")]
    results.write_text("".join(kept))  # killed after two results: no summary
    (tmp_path / "out" / "a" / "summary.json").unlink()
    said = " ".join(run("b", "--limit", "1", "--dry-run").output.split())
    assert ("an earlier run of these settings, a, was partial with 2 of 4 samples final without --limit, 1 of "
            "them among this run's 1 sample (--limit 1): this one runs each of its samples; --run-id a --resume "
            "without --limit goes on with that one instead") in said, said
    said = " ".join(run("c", "--limit", "3", "--dry-run").output.split())
    assert ("was partial with 2 of 4 samples final without --limit, 2 of them among this run's 3 samples "
            "(--limit 3): this one runs each of its samples; --run-id a --resume goes on with that one "
            "instead") in said, said
    # the same --limit as the earlier run's: the note as it was
    said = " ".join(run("d", "--dry-run").output.split())
    assert "2 of 4 samples final: this one runs every sample again; --run-id a --resume goes on" in said, said


@pytest.mark.parametrize("dry_run", [False, True], ids=["run", "dry-run"])
@pytest.mark.parametrize("resume", [False, True], ids=["new", "resume"])
def test_a_run_id_naming_another_programs_folder_is_refused_and_nothing_is_written_there(tmp_path, dry_run, resume):
    """OSWorld's results under --result_dir: its pyautogui/screenshot/<model>/… is what
    ``--run-id pyautogui`` names; the run wrote its files among them as "a new run folder"."""
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("t0")])
    theirs = tmp_path / "out" / "r"
    (theirs / "screenshot" / "gpt-4o" / "os" / "t0").mkdir(parents=True)
    (theirs / "screenshot" / "gpt-4o" / "os" / "t0" / "result.txt").write_text("1.0\n")
    before = sorted(str(path.relative_to(theirs)) for path in theirs.rglob("*"))
    result = cli(tmp_path, data, *(["--resume"] if resume else []), *(["--dry-run"] if dry_run else []))
    assert result.exit_code == 2, (result.output, result.exception)
    said = " ".join(result.output.split())
    assert f"{theirs} holds screenshot and no run's files" in said, said
    assert "pick another --run-id or --output-dir" in said
    assert sorted(str(path.relative_to(theirs)) for path in theirs.rglob("*")) == before


def test_a_folder_a_run_left_with_its_log_alone_is_still_the_runs(tmp_path):
    """A run stopped before its config.json (its run.log, trajectories/ there) is no stranger's."""
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("t0")])
    ours = tmp_path / "out" / "r"
    (ours / "trajectories").mkdir(parents=True)
    (ours / "run.log").write_text("")
    result = cli(tmp_path, data)
    assert result.exit_code == 0, (result.output, result.exception)
    assert read_results(ours)[0]["status"] == "success"


def test_osworlds_result_folder_is_refused_naming_result_dir_as_typed(tmp_path):
    """A run.py line (``--result_dir``) whose --run-id names OSWorld's own pyautogui/ there."""
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("t0")])
    (tmp_path / "results" / "pyautogui" / "screenshot").mkdir(parents=True)
    result = CliRunner().invoke(main, ["--mode", "shell", "--data", str(data), "--result_dir",
                                       str(tmp_path / "results"), "--run-id", "pyautogui", "--no-progress"])
    assert result.exit_code == 2, (result.output, result.exception)
    said = " ".join(result.output.split())
    assert "holds screenshot and no run's files" in said and "pick another --run-id or --result_dir" in said, said
    assert [path.name for path in (tmp_path / "results" / "pyautogui").iterdir()] == ["screenshot"]
