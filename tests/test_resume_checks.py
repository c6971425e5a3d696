"""What opening a run folder checks, for a run and for its ``--dry-run`` alike: a corrupt
results file, a lower ``--limit``, a path that is a file, ``--resume`` without a run to
continue; what a resumed run's summary and JUnit XML say of the sessions before it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import ROOT, assert_exactly_once, read_results, shell_task, write_tasks
from parallel_rollout.cli import main
from test_gates import JUNIT_XSD
from test_run_folder_cli import cli, finished_run  # noqa: F401 (a fixture)
from test_runner import stop_signals_ignoring


def folder_state(run_dir: Path) -> dict[str, bytes]:
    return {name: (run_dir / name).read_bytes() for name in ("results.jsonl", "config.json", "summary.json")}


@pytest.mark.parametrize("dry_run", [False, True], ids=["run", "dry-run"])
def test_a_corrupt_line_refuses_the_resume_naming_file_and_line(tmp_path, finished_run, dry_run):
    run_dir = tmp_path / "out" / "r"
    lines = (run_dir / "results.jsonl").read_bytes().splitlines(keepends=True)
    lines.insert(2, b"this is garbage {not json\n")
    (run_dir / "results.jsonl").write_bytes(b"".join(lines))
    before = folder_state(run_dir)
    result = cli(tmp_path, finished_run, "--resume", *(["--dry-run"] if dry_run else []))
    assert result.exit_code == 2, (result.output, result.exception)
    assert f"{run_dir / 'results.jsonl'}:3: corrupted record" in " ".join(result.output.split())
    assert "Traceback" not in result.output
    assert folder_state(run_dir) == before  # config.json is not rewritten either


@pytest.mark.parametrize("refusal", ["corrupt line", "lower limit"])
def test_a_refused_resume_leaves_a_torn_last_line_where_it_is(tmp_path, finished_run, refusal):
    """The torn line is set aside only once the resume passed every check: one that is
    refused (a corrupt line before it, a lower --limit) changes nothing in the folder."""
    run_dir = tmp_path / "out" / "r"
    lines = (run_dir / "results.jsonl").read_bytes().splitlines(keepends=True)
    if refusal == "corrupt line":
        lines[1] = b'{"garbage\n'
    (run_dir / "results.jsonl").write_bytes(b"".join(lines) + b'{"key": "tor')
    before = folder_state(run_dir)
    result = cli(tmp_path, finished_run, "--resume", *(["--limit", "1"] if refusal == "lower limit" else []))
    assert result.exit_code == 2, (result.output, result.exception)
    said = " ".join(result.output.split())
    assert (f"{run_dir / 'results.jsonl'}:2: corrupted record" if refusal == "corrupt line"
            else "are not among this run's 1") in said
    assert folder_state(run_dir) == before
    assert not (run_dir / "results.jsonl.torn").exists()
    if refusal == "lower limit":  # the same resume without the lower limit sets it aside and goes on
        assert cli(tmp_path, finished_run, "--resume").exit_code == 0
        assert (run_dir / "results.jsonl.torn").read_bytes() == b'{"key": "tor\n'


def test_a_whole_last_record_without_its_newline_is_kept(tmp_path, finished_run):
    run_dir = tmp_path / "out" / "r"
    whole = (run_dir / "results.jsonl").read_bytes()
    (run_dir / "results.jsonl").write_bytes(whole.rstrip(b"\n"))
    result = cli(tmp_path, finished_run, "--resume")
    assert result.exit_code == 0, (result.output, result.exception)
    assert "3 already final, 0 to run" in result.stderr
    assert (run_dir / "results.jsonl").read_bytes() == whole
    assert not (run_dir / "results.jsonl.torn").exists()
    assert_exactly_once(run_dir, {f"t{i}#0" for i in range(3)})


@pytest.mark.parametrize("dry_run", [False, True], ids=["run", "dry-run"])
def test_a_lower_limit_refuses_the_resume_and_a_higher_one_runs_the_rest(tmp_path, dry_run):
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task(f"t{i}") for i in range(4)])
    assert cli(tmp_path, data, "--limit", "3").exit_code == 0
    run_dir = tmp_path / "out" / "r"
    before = folder_state(run_dir)
    lower = cli(tmp_path, data, "--resume", "--limit", "2", *(["--dry-run"] if dry_run else []))
    assert lower.exit_code == 2, (lower.output, lower.exception)
    said = " ".join(lower.output.split())
    assert "cannot resume r: 1 finished sample(s) are not among this run's 2 (e.g. t2#0)" in said
    assert "--limit" in said
    assert folder_state(run_dir) == before
    if dry_run:
        higher = cli(tmp_path, data, "--resume", "--limit", "4", "--dry-run")
        assert higher.exit_code == 0, higher.output
        assert "resumes r: 3 of 4 samples already final" in higher.output
        return
    higher = cli(tmp_path, data, "--resume", "--limit", "4")
    assert higher.exit_code == 0, (higher.output, higher.exception)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["total_samples"], summary["finished"], summary["unfinished"]) == (4, 4, 0)
    assert_exactly_once(run_dir, {f"t{i}#0" for i in range(4)})


def test_a_dry_run_of_a_resume_checks_the_runs_settings(tmp_path, finished_run):
    changed = cli(tmp_path, finished_run, "--resume", "--max-turns", "3", "--dry-run")
    assert changed.exit_code == 2, changed.output
    assert "other settings for --max-turns (100 then, 3 now)" in " ".join(changed.output.split())
    # a float setting as typed: it said task_timeout (600.0 then, 30.0 now) of --task-timeout 30
    timeout = cli(tmp_path, finished_run, "--resume", "--task-timeout", "30")
    assert timeout.exit_code == 2, timeout.output
    assert "other settings for --task-timeout (600 then, 30 now)" in " ".join(timeout.output.split()), timeout.output
    same = cli(tmp_path, finished_run, "--resume", "--dry-run")
    assert same.exit_code == 0, same.output
    assert "resumes r: 3 of 3 samples already final" in same.output
    without = cli(tmp_path, finished_run, "--dry-run")
    assert without.exit_code == 2 and "already holds results; add --resume" in without.output


@pytest.mark.parametrize("dry_run", [False, True], ids=["run", "dry-run"])
def test_a_refused_resume_names_each_setting_the_way_it_was_given(tmp_path, finished_run, dry_run):
    """A cron job's resume refused for another task timeout named the field (task_timeout),
    where its owner had typed a config file's key or set a variable: each is said as given."""
    run_dir = tmp_path / "out" / "r"
    before = folder_state(run_dir)
    (tmp_path / "run.toml").write_text("task-timeout = 30\n")
    args = ["--mode", "shell", "--data", str(finished_run), "--output-dir", str(tmp_path / "out"), "--run-id", "r",
            "--resume", "--no-progress", "--config", str(tmp_path / "run.toml"), "--max-turns", "3",
            *(["--dry-run"] if dry_run else [])]
    refused = CliRunner().invoke(main, args, env={"PARALLEL_ROLLOUT_GROUP_SIZE": "2"})
    assert refused.exit_code == 2, (refused.output, refused.exception)
    said = " ".join(refused.output.split())
    assert ("other settings for the environment variable PARALLEL_ROLLOUT_GROUP_SIZE (1 then, 2 now), "
            "--max-turns (100 then, 3 now), "
            f"task-timeout in {tmp_path / 'run.toml'} (600 then, 30 now);") in said, said
    assert folder_state(run_dir) == before


def test_a_refused_resume_from_python_names_the_keyword(tmp_path, finished_run):
    from parallel_rollout.api import run
    from parallel_rollout.errors import ConfigError

    with pytest.raises(ConfigError, match=r"other settings for task_timeout in run\(\) \(600 then, 30 now\)"):
        run(output_dir=str(tmp_path / "out"), run_id="r", resume=True, task_timeout=30)


@pytest.mark.parametrize("dry_run", [False, True], ids=["run", "dry-run"])
def test_an_output_dir_that_is_a_file_is_a_usage_error(tmp_path, dry_run):
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("t0")])
    (tmp_path / "notadir").write_text("a file")
    result = CliRunner().invoke(main, ["--mode", "shell", "--data", str(data), "--output-dir",
                                       str(tmp_path / "notadir"), "--run-id", "o", "--no-progress",
                                       *(["--dry-run"] if dry_run else [])])
    assert result.exit_code == 2, (result.output, result.exception)
    assert "--output-dir" in result.output and "notadir" in result.output
    assert "Traceback" not in result.output and result.exception is None or isinstance(result.exception, SystemExit)


def test_resume_needs_a_run_id_and_names_a_missing_run(tmp_path):
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("t0")])
    no_id = CliRunner().invoke(main, ["--mode", "shell", "--data", str(data), "--output-dir",
                                      str(tmp_path / "out"), "--resume", "--no-progress"])
    assert no_id.exit_code == 2 and "--resume needs the --run-id" in no_id.output
    assert not (tmp_path / "out").exists()
    missing = CliRunner().invoke(main, ["--output-dir", str(tmp_path / "out"), "--run-id", "nope", "--resume"])
    assert missing.exit_code == 2
    assert f"there is no run nope in {tmp_path / 'out'}" in " ".join(missing.output.split())


@pytest.mark.parametrize("key, value, said", [
    ("min_free_disk_mb", -1, "min_free_disk_mb must be 0 or more, got -1 (min_free_disk_mb = -1 in "),
    ("max_turns", 0, "--max-turns must be at least 1, got 0 (max_turns = 0 in "),
])
def test_a_bad_value_in_a_resumed_runs_config_json_is_said_as_the_file_writes_it(tmp_path, finished_run, key, value,
                                                                                   said):
    """config.json, edited by hand, writes its keys with underscores; a resume's refusal of one
    said it dashed ("min-free-disk-mb = -1 in …/config.json"), a key the file does not hold."""
    stored = tmp_path / "out" / "r" / "config.json"
    written = json.loads(stored.read_text())
    written["config"].update({key: value, "explicit": [*written["config"]["explicit"], key]})
    stored.write_text(json.dumps(written))
    result = CliRunner().invoke(main, ["--output-dir", str(tmp_path / "out"), "--run-id", "r", "--resume",
                                       "--no-progress"])
    assert result.exit_code == 2, (result.output, result.exception)
    message = " ".join(result.output.split())
    assert f"Error: {said}{stored}, which --resume reads)" in message, message
    assert key.replace("_", "-") + " =" not in message, message


def test_a_resumed_summary_adds_up_the_sessions(tmp_path, finished_run):
    run_dir = tmp_path / "out" / "r"
    first = json.loads((run_dir / "summary.json").read_text())
    started = json.loads((run_dir / "config.json").read_text())["started_at"]
    again = cli(tmp_path, finished_run, "--resume")  # runs nothing
    assert again.exit_code == 0, again.output
    second = json.loads((run_dir / "summary.json").read_text())
    assert second["timing_s"]["wall"] >= first["timing_s"]["wall"] > second["timing_s"]["session_wall"]
    assert second["vm"] == first["vm"] and second["vm"]["resets"] >= 1
    assert json.loads((run_dir / "config.json").read_text())["started_at"] == started

    # a session killed before its summary: the resume adds the span of the attempts it ran
    (run_dir / "summary.json").unlink()
    records = read_results(run_dir)
    span = max(r["ended_at"] for r in records) - min(r["started_at"] for r in records)
    third = cli(tmp_path, finished_run, "--resume")
    assert third.exit_code == 0, third.output
    wall = json.loads((run_dir / "summary.json").read_text())["timing_s"]["wall"]
    assert span - 0.001 <= wall < span + 5  # (rounded to ms)


def test_junit_of_a_run_stopped_early_names_the_samples_never_started(tmp_path):
    xmlschema = pytest.importorskip("xmlschema")
    data = write_tasks(tmp_path / "tasks.jsonl",
                       [shell_task(f"s{i}", reference=["sleep 2", f"touch ~/s{i}.done"]) for i in range(5)])
    out, junit = tmp_path / "out", tmp_path / "ci" / "junit.xml"
    run = subprocess.Popen(
        [sys.executable, str(ROOT / "run_parallel_rollout.py"), "--mode", "shell", "--data", str(data),
         "--num-rollouts", "1", "--output-dir", str(out), "--run-id", "stop", "--no-progress",
         "--junit-xml", str(junit)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        preexec_fn=stop_signals_ignoring())
    try:
        deadline = time.monotonic() + 60
        while not list((out / "stop" / "trajectories").glob("*")):
            assert run.poll() is None, run.communicate()[0]
            assert time.monotonic() < deadline, "no attempt ever started"
            time.sleep(0.05)
        os.kill(run.pid, signal.SIGINT)
        output, _ = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 130, output
    xmlschema.XMLSchema(str(JUNIT_XSD)).validate(str(junit))
    suite = ET.parse(junit).getroot().find("testsuite")
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    error = cases["samples without a result"].find("error")
    summary = json.loads((out / "stop" / "summary.json").read_text())
    never = 5 - len({r["key"] for r in read_results(out / "stop")})
    assert never >= 1 and error.get("message").startswith(f"{never} of 5 samples have no result: the run "
                                                          "stopped before they started or while they ran")
    assert summary["total_samples"] == 5 and int(suite.get("errors")) >= 1


def test_an_unwritable_junit_path_fails_the_run(tmp_path):
    """Refused before any sample runs (it used to run them all, then exit 1)."""
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("t0")])
    (tmp_path / "file").write_text("not a folder")
    result = cli(tmp_path, data, "--junit-xml", str(tmp_path / "file" / "junit.xml"))
    assert result.exit_code == 2, (result.output, result.exception)
    assert "--junit-xml" in result.output and "is not a folder" in result.output


@pytest.mark.skipif(shutil.which("docker") is None, reason="needs the docker CLI")
def test_a_resume_with_nothing_left_to_run_needs_no_docker_daemon(tmp_path, finished_run, monkeypatch):
    """A cron job's second try of a run that has ended (the same command, `--resume`) with no
    Docker daemon answering (or a guest image not rebuilt since an upgrade) finishes as the
    run did, its summary and gates, exit 0, warning of the daemon: it exited 2, nothing ran, for
    a run that needed no VM. One with a sample left to run still stops at it (exit 2), its
    folder unchanged."""
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'no-daemon.sock'}")
    run_dir = tmp_path / "out" / "r"
    # its dry run (before the nightly job) says so too, and passes: it exited 2 at the daemon
    before = folder_state(run_dir)
    result = cli(tmp_path, finished_run, "--resume", "--provider-name", "docker", "--dry-run")
    said = " ".join(result.output.split())
    assert result.exit_code == 0, (result.output, result.exception)
    assert "no Docker daemon answers at" in said and "every sample of the run is final" in said, said
    assert folder_state(run_dir) == before
    result = cli(tmp_path, finished_run, "--resume", "--provider-name", "docker")
    said = " ".join(result.output.split())
    assert result.exit_code == 0, (result.output, result.exception)
    assert "no Docker daemon answers at" in said and "every sample of the run is final" in said
    assert "3/3 samples finished" in said
    lines = (run_dir / "results.jsonl").read_bytes().splitlines(keepends=True)
    (run_dir / "results.jsonl").write_bytes(b"".join(lines[:-1]))
    before = folder_state(run_dir)
    result = cli(tmp_path, finished_run, "--resume", "--provider-name", "docker")
    assert result.exit_code == 2, (result.output, result.exception)
    assert "Error: no Docker daemon answers at" in result.output
    assert folder_state(run_dir) == before
    result = cli(tmp_path, finished_run, "--resume", "--provider-name", "docker", "--dry-run")
    assert result.exit_code == 2 and "provider: no Docker daemon answers at" in result.output, result.output


def test_a_stored_setting_this_version_refuses_warns_and_the_resume_finishes(tmp_path, finished_run):
    """A setting the run was started with (config.json) that this version refuses for its
    agent (``tokenizer`` with the oracle, refused since the model client's keys are checked)
    is a warning at the resume, which finishes the run: the folder has no flag to take it
    back, and the resume was refused (exit 2). Given anew, it is still refused."""
    config = tmp_path / "out" / "r" / "config.json"
    stored = json.loads(config.read_text())
    stored["config"]["tokenizer"] = "/models/qwen"
    stored["config"]["explicit"] = [*stored["config"]["explicit"], "tokenizer"]
    config.write_text(json.dumps(stored))
    result = cli(tmp_path, finished_run, "--resume")
    assert result.exit_code == 0, (result.output, result.exception)
    said = " ".join(result.output.split())
    assert "the setting tokenizer is not used by this run" in said and "the run was started with it" in said, said
    toml = tmp_path / "run.toml"
    toml.write_text('tokenizer = "/models/qwen"\n')
    result = cli(tmp_path, finished_run, "--resume", "--config", str(toml))
    assert result.exit_code == 2 and "the setting tokenizer is not used by this run" in result.output, result.output


def test_a_never_graded_attempt_a_resume_ran_again_is_counted_retried(tmp_path):
    """A sample never graded (its worker killed at every attempt), resumed once: 3 attempts,
    of which the first two went on to another, yet the console said ``attempts: 3 (1
    retried)``: the never-graded attempt the resume ran again was counted nowhere."""
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("t0")])
    for session in range(2):
        ended = cli(tmp_path, data, "--agent", "chaos_plugins:WorkerKillerAgent", "--max-retries", "1",
                    *(["--resume"] if session else []))
        assert ended.exit_code == 1, ended.output
    summary = json.loads((tmp_path / "out" / "r" / "summary.json").read_text())
    assert (summary["attempts"], summary["retried_attempts"], summary["attempts_left_to_resume"]) == (3, 2, 0), summary
    assert "attempts: 3 (2 retried)" in ended.output, ended.output



def test_a_resume_runs_a_never_graded_sample_up_to_its_own_max_retries(tmp_path):
    """Attempts are numbered across sessions, and a resume retries while the attempt number
    is below its own --max-retries: a never-graded sample gets one more attempt with the
    same or a lower --max-retries, and attempts up to the new number with a higher one."""
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("t0")])
    results = tmp_path / "out" / "r" / "results.jsonl"
    for retries, resume, attempts in (("1", [], [0, 1]), ("3", ["--resume"], [0, 1, 2, 3]),
                                      ("1", ["--resume"], [0, 1, 2, 3, 4])):
        ended = cli(tmp_path, data, "--agent", "chaos_plugins:WorkerKillerAgent", "--max-retries", retries, *resume)
        assert ended.exit_code == 1, ended.output
        assert [json.loads(line)["attempt"] for line in results.read_text().splitlines()] == attempts

#: a JSON line that is no attempt record -> what every reader of results.jsonl says of it
NO_RECORD = {b"{}": "a record is a JSON object with a 'key' field; this one has none",
             b"[1, 2]": "a record is a JSON object with a 'key' field; this line is a list",
             b'"x"': "a record is a JSON object with a 'key' field; this line is a string",
             b"null": "a record is a JSON object with a 'key' field; this line is null",
             b'{"key": 5, "attempt": 0}': "a record's 'key' is a string; this one's is 5, a number"}


@pytest.mark.parametrize("line", list(NO_RECORD), ids=["empty-object", "list", "string", "null", "key-number"])
def test_a_json_line_that_is_no_record_is_said_in_jsons_words_by_every_reader(tmp_path, finished_run, line):
    """resume, report, compare and runs list name the line and say what it lacks as JSON
    says it, not as Python's exception did ("KeyError: 'key'", "TypeError: list indices …")."""
    run_dir = tmp_path / "out" / "r"
    lines = (run_dir / "results.jsonl").read_bytes().splitlines(keepends=True)
    lines.insert(1, line + b"\n")
    (run_dir / "results.jsonl").write_bytes(b"".join(lines))
    where = f"{run_dir / 'results.jsonl'}:2: corrupted record: {NO_RECORD[line]}; fix or remove that line"
    said = {}
    for name, args in {"resume": None, "report": ["report", str(run_dir)],
                       "compare": ["compare", str(run_dir), str(run_dir)]}.items():
        result = cli(tmp_path, finished_run, "--resume") if args is None else CliRunner().invoke(main, args)
        assert result.exit_code == 2, (name, result.output, result.exception)
        said[name] = " ".join(result.output.split())
        assert where in said[name], (name, said[name])
        assert "Error" not in said[name].replace("Error:", ""), (name, said[name])
    listed = CliRunner().invoke(main, ["runs", "list", "--output-dir", str(tmp_path / "out"), "--json"])
    assert listed.exit_code == 0, listed.output
    assert json.loads(listed.output)["problem"] == where.replace(str(run_dir) + "/", ""), listed.output


@pytest.mark.parametrize("line, said", [(b'{"key": "t0#0"}', "this one has none"),
                                        (b'{"key": "t0#0", "attempt": "1"}', "this one's is \"1\", a string")],
                         ids=["no-attempt", "attempt-string"])
def test_a_record_without_a_whole_attempt_refuses_the_resume_saying_so(tmp_path, finished_run, line, said):
    """A resume counts each sample's attempts: a record's 'attempt' that is none is said so, as
    JSON says it (it was "KeyError: 'attempt'", and int() took the string "1")."""
    run_dir = tmp_path / "out" / "r"
    lines = (run_dir / "results.jsonl").read_bytes().splitlines(keepends=True)
    lines.insert(1, line + b"\n")
    (run_dir / "results.jsonl").write_bytes(b"".join(lines))
    result = cli(tmp_path, finished_run, "--resume")
    assert result.exit_code == 2, (result.output, result.exception)
    assert (f"{run_dir / 'results.jsonl'}:2: corrupted record: a record's 'attempt' is a whole number; {said}"
            in " ".join(result.output.split())), result.output
