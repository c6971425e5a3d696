"""A run folder whose config.json does not read and that has no results yet (a copy cut short,
an edit; a run writes it whole) is a run all the same: ``runs list`` lists it ``unreadable``
with its problem, where it left it out, and ``report`` names the file, where it said the
folder had no config.json. And an output folder given as a file is said to be one."""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner

from conftest import shell_task, write_tasks
from parallel_rollout.cli import main

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")


@needs_bwrap
def test_a_run_whose_config_does_not_read_is_listed_unreadable(tmp_path):
    out = tmp_path / "out"
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("a")])
    done = CliRunner().invoke(main, ["--mode", "shell", "--data", str(data), "--output-dir", str(out),
                                     "--run-id", "good", "--no-progress"])
    assert done.exit_code == 0, done.output
    cut = out / "cut"
    shutil.copytree(out / "good", cut)
    text = (cut / "config.json").read_text()
    for name in ("results.jsonl", "summary.json"):
        (cut / name).unlink()
    (cut / "config.json").write_text(text[: len(text) // 2])  # a copy cut short

    as_json = CliRunner().invoke(main, ["runs", "list", "--output-dir", str(out), "--json"])
    assert as_json.exit_code == 0, as_json.output
    rows = {r["run_id"]: r for r in map(json.loads, [line for line in as_json.output.splitlines()
                                                     if line.startswith("{")])}
    assert set(rows) == {"good", "cut"}, as_json.output
    assert rows["good"]["status"] == "complete" and rows["good"]["problem"] is None
    assert rows["cut"]["status"] == "unreadable", rows["cut"]
    assert rows["cut"]["problem"].startswith("config.json: unreadable ("), rows["cut"]
    assert "no results.jsonl beside it" in rows["cut"]["problem"]

    report = CliRunner().invoke(main, ["report", str(cut)])
    said = " ".join(report.output.split())
    assert report.exit_code == 2, report.output
    assert f"{cut / 'config.json'}: unreadable (" in said, said
    assert "no config.json" not in said, said


def test_runs_list_of_a_file_says_it_is_a_file(tmp_path):
    """`runs list --output-dir results/r1/results.jsonl` said 'no such output folder' of a file
    that is there."""
    given = tmp_path / "results.jsonl"
    given.write_text("")
    result = CliRunner().invoke(main, ["runs", "list", "--output-dir", str(given)])
    assert result.exit_code == 2, result.output
    assert f"{given}: a file, not an output folder" in result.output, result.output
    missing = CliRunner().invoke(main, ["runs", "list", "--output-dir", str(tmp_path / "none")])
    assert missing.exit_code == 2 and f"{tmp_path / 'none'}: no such output folder" in missing.output


def test_runs_list_help_names_every_status_it_lists():
    """Its help left out ``rl``, the status of an RL scheduler's folder."""
    import re

    from parallel_rollout.report import runs

    statuses = re.findall(r"^\* ``([a-z]+)``:", runs.__doc__, re.M)
    assert "rl" in statuses and "unreadable" in statuses, statuses
    said = " ".join(CliRunner().invoke(main, ["runs", "list", "--help"]).output.split())
    for status in statuses:
        assert re.search(rf"[(, ]{status}[,:;)]", said), (status, said)


@needs_bwrap
def test_runs_list_of_a_run_folder_or_an_empty_one_says_so(tmp_path):
    """`runs list --output-dir results/r1`, a run's own folder given for the folder of runs,
    and an output folder with no run in it printed a table header, exit 0, nothing said."""
    out = tmp_path / "out"
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("a")])
    done = CliRunner().invoke(main, ["--mode", "shell", "--data", str(data), "--output-dir", str(out),
                                     "--run-id", "r1", "--no-progress"])
    assert done.exit_code == 0, done.output
    for args in ([], ["--json"]):
        run_folder = CliRunner().invoke(main, ["runs", "list", "--output-dir", str(out / "r1"), *args])
        assert run_folder.exit_code == 2, run_folder.output
        said = " ".join(run_folder.output.split())
        assert f"{out / 'r1'}: a run's folder, not an output folder (the folder that holds the runs): " \
               f"--output-dir {out}" in said, said
    (tmp_path / "empty" / "not-a-run").mkdir(parents=True)
    empty = CliRunner().invoke(main, ["runs", "list", "--output-dir", str(tmp_path / "empty")])
    assert empty.exit_code == 0 and empty.stdout == "", empty.output
    assert f"no runs in {tmp_path / 'empty'}" in empty.stderr, empty.stderr
    as_json = CliRunner().invoke(main, ["runs", "list", "--output-dir", str(tmp_path / "empty"), "--json"])
    assert as_json.exit_code == 0 and as_json.output == "", as_json.output  # no runs: no line
    listed = CliRunner().invoke(main, ["runs", "list", "--output-dir", str(out)])
    assert listed.exit_code == 0 and listed.stdout.startswith("RUN ID") and "r1" in listed.stdout, listed.output


def test_runs_list_given_the_folder_as_an_argument_says_the_flag(tmp_path):
    """`runs list results` (report and compare take their runs so) said 'Got unexpected extra
    argument (results)', not how the folder is given."""
    result = CliRunner().invoke(main, ["runs", "list", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert f"runs list takes the folder of runs as --output-dir: --output-dir {tmp_path}" in result.output, \
        result.output
