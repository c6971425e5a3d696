"""A cron job's runs read back: what ``--resume`` takes as done is what ``runs list``,
``report`` and ``compare`` count, and ``compare`` of a run with itself is said."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from click.testing import CliRunner

from conftest import shell_task, write_tasks
from parallel_rollout.cli import main
from test_run_folder_cli import cli, finished_run  # noqa: F401 (a fixture)


def test_a_last_record_without_its_newline_counts_everywhere_as_resume_counts_it(tmp_path, finished_run):
    """A whole last record that lost its newline (a write cut after its last byte, an
    editor) is final for --resume, which runs nothing; runs list, report and compare
    counted 2 of 3 samples (partial) and compare called the run an unfinished baseline."""
    run_dir = tmp_path / "out" / "r"
    results = run_dir / "results.jsonl"
    results.write_bytes(results.read_bytes().rstrip(b"\n"))

    listed = CliRunner().invoke(main, ["runs", "list", "--output-dir", str(tmp_path / "out"), "--json"])
    assert listed.exit_code == 0, listed.output
    line = json.loads(listed.stdout.splitlines()[0])
    assert (line["finished"], line["total"], line["status"]) == (3, 3, "complete")

    shutil.copytree(run_dir, tmp_path / "out" / "copy")  # its baseline in a nightly compare
    compared = CliRunner().invoke(main, ["compare", str(run_dir), str(tmp_path / "out" / "copy"), "--check"])
    assert compared.exit_code == 0, compared.output
    assert "unfinished" not in compared.output

    resumed = cli(tmp_path, finished_run, "--resume")
    assert resumed.exit_code == 0, (resumed.output, resumed.exception)
    assert "3 already final, 0 to run" in resumed.stderr


def test_compare_of_a_run_with_itself_is_refused_and_writes_nothing(tmp_path, finished_run):
    """compare r r (or a run id and its folder) compared the run with itself without a word,
    exit 0, and wrote compare-r.* into it; run --compare-to its own run id is refused so."""
    run_dir = tmp_path / "out" / "r"
    before = sorted(p.name for p in run_dir.iterdir())
    for a, b in (("r", "r"), ("r", str(run_dir)), (str(run_dir) + "/", "r")):
        result = CliRunner().invoke(main, ["compare", a, b, "--output-dir", str(tmp_path / "out"), "--check"])
        assert result.exit_code == 2, (a, b, result.output)
        assert f"compares the run {run_dir} with itself" in " ".join(result.output.split())
    assert sorted(p.name for p in run_dir.iterdir()) == before


def test_a_dry_run_refuses_a_record_without_a_whole_attempt_as_the_resume_does(tmp_path, finished_run):
    """--dry-run makes the resume's checks reading only: a record whose 'attempt' is no whole
    number refuses the resume (it counts each sample's attempts), and the dry run said
    'resumes r: 3 of 3 samples already final', exit 0."""
    run_dir = tmp_path / "out" / "r"
    lines = (run_dir / "results.jsonl").read_bytes().splitlines(keepends=True)
    lines.insert(1, b'{"key": "t0#0", "attempt": "1"}\n')
    (run_dir / "results.jsonl").write_bytes(b"".join(lines))
    said = {}
    for how in ("dry-run", "run"):
        result = cli(tmp_path, finished_run, "--resume", *(["--dry-run"] if how == "dry-run" else []))
        assert result.exit_code == 2, (how, result.output, result.exception)
        said[how] = " ".join(result.output.split())
        assert (f"{run_dir / 'results.jsonl'}:2: corrupted record: a record's 'attempt' is a whole number"
                in said[how]), (how, said[how])


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare")
@pytest.mark.parametrize("refused", [["summary.json"], ["summary.json", "report.html"]], ids=["summary", "both"])
def test_a_summary_json_the_disk_refuses_exits_1_and_the_resume_writes_it(tmp_path, refused):
    """Every sample final, but summary.json not written at the run's end (its write finds the
    disk full) while report.html is: exit 1, naming summary.json and the --resume that writes
    it, as for report.html. /dev/full is bound over summary.json.tmp, where the summary is
    written before its rename, in a mount namespace of the run's own: only that write fails.
    Meanwhile runs list counts the run from results.jsonl (the summary left is the session's
    before), and the resume writes the summary. Both refused: both named, the resume 'writes
    them' (it said 'writes it')."""
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task(k) for k in "abc"])
    out, run_dir = tmp_path / "out", tmp_path / "out" / "r"
    argv = [sys.executable, "-m", "parallel_rollout", "run", "--mode", "shell", "--data", str(data),
            "--output-dir", str(out), "--run-id", "r", "--no-progress"]
    first = subprocess.run([*argv, "--limit", "1"], capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    binds = []
    for name in refused:
        (run_dir / f"{name}.tmp").touch()  # the mount point
        binds.append(f'mount --bind /dev/full "{run_dir / name}.tmp" || exit 99')
    full_disk = ["unshare", "--mount", "--propagation", "private", "sh", "-c", "; ".join(binds) + '; exec "$@"', "sh"]
    done = subprocess.run([*full_disk, *argv, "--resume", "--limit", "3"], capture_output=True, text=True,
                          timeout=120)
    if done.returncode == 99:
        pytest.skip(f"cannot bind /dev/full in a mount namespace here: {done.stderr.strip()}")
    said = " ".join(done.stderr.split())
    assert done.returncode == 1, said
    for name in refused:
        assert f"cannot write {run_dir / name}: No space left on device" in said, said
    assert "every sample is final: once there is room, " in said, said
    them = "them" if len(refused) > 1 else "it"
    assert said.endswith(f"--output-dir {out} --run-id r --resume writes {them}"), said
    if refused == ["summary.json"]:
        assert "report.html" not in said  # written, from the session's summary
        assert (run_dir / "report.html").stat().st_mtime > (run_dir / "summary.json").stat().st_mtime
    assert json.loads((run_dir / "summary.json").read_text())["finished"] == 1  # the session's before

    listed = CliRunner().invoke(main, ["runs", "list", "--output-dir", str(out), "--json"])
    line = json.loads(listed.stdout.splitlines()[0])
    assert (line["finished"], line["total"], line["status"]) == (3, 3, "complete"), line

    again = subprocess.run([*argv, "--resume"], capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert "3 already final, 0 to run" in again.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["finished"], summary["successes"]) == (3, 3)
    assert not any((run_dir / f"{name}.tmp").exists() for name in refused)
    assert (run_dir / "report.html").stat().st_size > 0  # the resume wrote what the disk refused


def test_a_run_whose_results_cannot_be_read_is_listed_so_and_stops_no_other_run(tmp_path, finished_run):
    """One run folder of the output folder whose results.jsonl cannot be opened (another
    account's file, an I/O error; here a folder in its place): runs list stopped at it with a
    traceback (exit 1, no line of any run), report and compare too, and a new run of the same
    settings, whose note of earlier runs reads their results, refused to start with 'cannot
    write in the run folder NEW: Is a directory' (exit 2). It is a run that cannot be read,
    named as a corrupted line is."""
    out = tmp_path / "out"
    shutil.copytree(out / "r", out / "copy")
    results = out / "copy" / "results.jsonl"
    results.unlink()
    (out / "copy" / "summary.json").unlink()  # killed before its summary: its records are read
    results.mkdir()

    listed = CliRunner().invoke(main, ["runs", "list", "--output-dir", str(out), "--json"])
    assert listed.exit_code == 0, (listed.output, listed.exception)
    lines = {line["run_id"]: line for line in map(json.loads, listed.stdout.splitlines())}
    assert lines["r"]["status"] == "complete", lines
    assert lines["copy"]["status"] == "unreadable", lines
    assert lines["copy"]["problem"] == "results.jsonl: cannot read: Is a directory", lines
    for args in (["report", "copy"], ["compare", "r", "copy"]):
        done = CliRunner().invoke(main, [*args, "--output-dir", str(out)])
        assert done.exit_code == 2, (args, done.output, done.exception)
        assert f"{results}: cannot read: Is a directory" in done.output, done.output

    new = CliRunner().invoke(main, ["--mode", "shell", "--data", str(finished_run), "--output-dir", str(out),
                                    "--run-id", "next", "--compare-to", "copy", "--no-progress"])
    assert new.exit_code == 5, (new.output, new.exception)  # the baseline gives no verdict
    said = " ".join(new.output.split())
    assert "run next: 3/3 samples finished, 3 succeeded" in said, said
    assert f"--compare-to copy: no verdict: cannot read the baseline: {results}: cannot read: Is a directory" in said


def test_a_resume_of_a_run_without_its_config_json_says_so(tmp_path, finished_run):
    """A run folder whose config.json is gone (a copy cut short, a file deleted) but whose
    results are there: --resume alone said '--data is required … (there is no run r in OUT
    whose settings --resume would read)', of a run that is there. It says the file is not
    there, as an unreadable one is said, and the flags given again resume it."""
    run_dir = tmp_path / "out" / "r"
    (run_dir / "config.json").unlink()
    alone = CliRunner().invoke(main, ["run", "--output-dir", str(tmp_path / "out"), "--run-id", "r", "--resume",
                                      "--no-progress"])
    assert alone.exit_code == 2, (alone.output, alone.exception)
    said = " ".join(alone.output.split())
    assert (f"{run_dir / 'config.json'}: not there, though {run_dir} holds a run's results; resume with every "
            "flag the run was started with given again") in said, said
    assert "there is no run" not in said
    again = cli(tmp_path, finished_run, "--resume")
    assert again.exit_code == 0, (again.output, again.exception)
    assert "3 already final, 0 to run" in again.stderr
