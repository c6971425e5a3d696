"""Gating a nightly job: exit codes from real runs, --fail-under, --compare-to, --junit-xml.

Exit 1 (manager killed) and 130 (SIGINT) come from real runs in tests/test_runner.py
(test_manager_death_stops_the_run_and_resume_finishes_it, test_sigint_stops_cleanly_with_130…),
exit 75 (lock held by a second run) from tests/test_results.py; this file holds the rest
(the statistics the regression gate uses are checked against scipy in tests/test_gate_stats.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
import xmlschema
from click.testing import CliRunner

from conftest import ROOT, assert_exactly_once, shell_task, write_tasks
from llm_server import llm_server  # noqa: F401 - fixture
from parallel_rollout import exit_codes
from parallel_rollout.cli import main
from parallel_rollout.report.junit import junit_tree
from parallel_rollout.report.run_data import RunData

JUNIT_XSD = Path(__file__).parent / "data" / "junit.xsd"


def failing_task(task_id: str, **extra) -> dict:
    """A shell task whose reference does not satisfy its check: a graded failure."""
    return shell_task(task_id, reference=[f"printf 'bad\\033[0m\\x01 output' > ~/{task_id}.other"], **extra)


def run_cli(tmp_path: Path, tasks: list[dict], run_id: str, *args: str):
    data = write_tasks(tmp_path / f"{run_id}.jsonl", tasks)
    return CliRunner().invoke(main, ["run", "--mode", "shell", "--data", str(data), "--num-rollouts", "2",
                                     "--output-dir", str(tmp_path / "out"), "--run-id", run_id,
                                     "--no-progress", *args])


# -- gates on real runs -------------------------------------------------------------------

def test_fail_under_exits_3_and_junit_validates(tmp_path):
    tasks = [shell_task("ok1"), shell_task("ok2"), failing_task("bad1", tags=["x"]), failing_task("bad2")]
    junit = tmp_path / "ci" / "junit.xml"
    below = run_cli(tmp_path, tasks, "below", "--fail-under", "0.75", "--junit-xml", str(junit))
    assert below.exit_code == exit_codes.EXIT_BELOW_THRESHOLD, below.output
    assert "success rate 50.0% is below --fail-under 0.75" in below.output

    xmlschema.XMLSchema(str(JUNIT_XSD)).validate(str(junit))
    tree = junit_tree(RunData.load(tmp_path / "out" / "below")).getroot()
    suite = tree.find("testsuite")
    assert suite.get("tests") == "4" and suite.get("failures") == "2" and suite.get("errors") == "0"
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert set(cases) == {"ok1#0", "ok2#0", "bad1#0", "bad2#0"}
    assert cases["bad1#0"].find("failure").get("type") == "failure"
    assert cases["ok1#0"].find("failure") is None

    passing = run_cli(tmp_path, tasks, "at", "--fail-under", "0.5")
    assert passing.exit_code == exit_codes.EXIT_OK, passing.output


@pytest.mark.parametrize("agent", ["oracle", "command"])
def test_a_run_whose_agent_calls_no_model_names_none(tmp_path, agent):
    """config.json and the JUnit XML named the default --model for agents that use none."""
    script = tmp_path / "done.py"
    script.write_text("import sys\nfor line in sys.stdin:\n    print('\"DONE\"', flush=True)\n")
    extra = ["--agent-cmd", f"{sys.executable} {script}"] if agent == "command" else []
    done = run_cli(tmp_path, [shell_task("t0")], "nomodel", "--agent", agent, *extra,
                   "--junit-xml", str(tmp_path / "junit.xml"))
    assert done.exit_code == 0, done.output
    config = json.loads((tmp_path / "out" / "nomodel" / "config.json").read_text())["config"]
    assert config["agent"] == agent and "model" not in config
    junit = (tmp_path / "junit.xml").read_text()
    assert f'name="agent" value="{agent}"' in junit and 'name="model"' not in junit
    resumed = run_cli(tmp_path, [shell_task("t0")], "nomodel", "--resume")  # its settings still match
    assert resumed.exit_code == 0, resumed.output


def test_fail_under_is_a_fraction(tmp_path):
    result = run_cli(tmp_path, [shell_task("a")], "pct", "--fail-under", "80")
    assert result.exit_code == exit_codes.EXIT_USAGE
    assert "must be a fraction between 0 and 1: 0.8 or 80% for 80%" in result.output, result.output
    assert not (tmp_path / "out" / "pct").exists()


@pytest.mark.parametrize("typed", ["80", "nan"])
def test_fail_under_off_the_command_line_is_said_as_typed(tmp_path, monkeypatch, typed):
    """A nightly job's config file or variable gave 80 (a percentage for a fraction): the
    error said ``fail-under = 80.0`` (JSON's ``NaN`` for nan), a value nobody wrote."""
    config = tmp_path / "nightly.toml"
    config.write_text(f"fail-under = {typed}\n")
    refused = run_cli(tmp_path, [shell_task("a")], "toml", "--config", str(config))
    assert refused.exit_code == exit_codes.EXIT_USAGE, refused.output
    assert f"(fail-under = {typed} in {config})" in refused.output, refused.output
    monkeypatch.setenv("PARALLEL_ROLLOUT_FAIL_UNDER", typed)
    refused = run_cli(tmp_path, [shell_task("a")], "env")
    assert refused.exit_code == exit_codes.EXIT_USAGE, refused.output
    assert f"(fail-under = {typed} from the environment variable PARALLEL_ROLLOUT_FAIL_UNDER)" in refused.output, \
        refused.output
    assert not (tmp_path / "out").exists()


def test_fail_under_that_is_no_number_says_what_it_takes(tmp_path, monkeypatch):
    """'off' was click's "'off' is not a valid float." (no word of 'none' or of 80%), and a
    config file's "0.8", a string as its "80%" is, was "must be a number": it is the fraction."""
    tasks = [shell_task("ok1"), failing_task("bad1")]
    said = "'off' is no number: give a fraction (0.8), a percentage (80%) or none (no gate)"
    refused = run_cli(tmp_path, tasks, "flag", "--fail-under", "off")
    assert refused.exit_code == exit_codes.EXIT_USAGE and f"Invalid value for '--fail-under': {said}" in refused.output, \
        refused.output
    config = tmp_path / "gate.toml"
    config.write_text('fail-under = "off"\n')
    refused = run_cli(tmp_path, tasks, "file", "--config", str(config))
    assert refused.exit_code == exit_codes.EXIT_USAGE and f"{config}: fail-under {said}" in refused.output, refused.output
    assert not (tmp_path / "out").exists()
    config.write_text('fail-under = "0.75"\n')
    below = run_cli(tmp_path, tasks, "string", "--config", str(config))
    assert below.exit_code == exit_codes.EXIT_BELOW_THRESHOLD, below.output
    assert "success rate 50.0% is below --fail-under 0.75 (75.0%)" in below.output, below.output


def test_fail_under_takes_a_percentage_as_coverage_tools_write_it(tmp_path):
    """`--fail-under 80%` was click's "'80%' is not a valid float": a percentage is its fraction,
    on the command line, in a config file and in run(); one that is none is refused by name."""
    tasks = [shell_task("ok1"), failing_task("bad1")]
    below = run_cli(tmp_path, tasks, "below", "--fail-under", "75%")
    assert below.exit_code == exit_codes.EXIT_BELOW_THRESHOLD, below.output
    assert "success rate 50.0% is below --fail-under 0.75 (75.0%)" in below.output
    assert json.loads((tmp_path / "out" / "below" / "config.json").read_text())["config"]["fail_under"] == 0.75
    config = tmp_path / "gate.toml"
    config.write_text('fail-under = "50%"\n')
    assert run_cli(tmp_path, tasks, "at", "--config", str(config)).exit_code == exit_codes.EXIT_OK
    for given, said in [("abc%", "'abc%' is no percentage: give a fraction (0.8) or a percentage (80%)"),
                        ("150%", "'150%' must be a percentage between 0% and 100%")]:
        refused = run_cli(tmp_path, tasks, "bad", "--fail-under", given)
        assert refused.exit_code == exit_codes.EXIT_USAGE, refused.output
        assert f"Error: Invalid value for '--fail-under': {said}" in refused.output, refused.output
    # from the environment, the variable is named as for any flag's bad value
    refused = CliRunner().invoke(main, ["run", "--mode", "shell", "--data", str(tmp_path / "at.jsonl"), "--dry-run"],
                                 env={"PARALLEL_ROLLOUT_FAIL_UNDER": "x%"})
    assert ("'x%' is no percentage: give a fraction (0.8) or a percentage (80%) (from the environment variable "
            "PARALLEL_ROLLOUT_FAIL_UNDER)") in refused.output, refused.output
    config.write_text('fail-under = "eighty%"\n')
    refused = run_cli(tmp_path, tasks, "bad", "--config", str(config))
    assert f"{config}: fail-under 'eighty%' is no percentage" in refused.output, refused.output
    assert not (tmp_path / "out" / "bad").exists()
    from parallel_rollout.api import preflight
    assert preflight(mode="shell", data=str(tmp_path / "at.jsonl"), fail_under="80%").ok


def test_fail_under_compares_the_exact_rate_not_the_rounded_one(tmp_path):
    """2 of 3 is 0.666666…, which summary.json rounds to 0.6667: a gate on the rounded figure
    passed --fail-under 0.66669 (and 1 of 3, 0.3333, failed --fail-under 0.33333)."""
    tasks = [shell_task("ok1"), shell_task("ok2"), failing_task("bad")]
    above = run_cli(tmp_path, tasks, "above", "--fail-under", "0.66669")
    assert above.exit_code == exit_codes.EXIT_BELOW_THRESHOLD, above.output
    # the message tells the two apart, as rounded to one place both read 66.7%
    assert "success rate 66.667% is below --fail-under 0.66669 (66.669%)" in above.output
    tasks = [shell_task("ok1"), failing_task("bad1"), failing_task("bad2")]
    third = run_cli(tmp_path, tasks, "third", "--fail-under", "0.33333")
    assert third.exit_code == exit_codes.EXIT_OK, third.output
    # the threshold is said as typed: '{:g}' made 0.6666667 '0.666667', and 2 of 3 (66.6667%)
    # read as below '--fail-under 0.666667 (66.6667%)'; out of range, 80.00001 was '80'
    close = run_cli(tmp_path, [shell_task("ok1"), shell_task("ok2"), failing_task("bad")], "close",
                    "--fail-under", "0.6666667")
    assert close.exit_code == exit_codes.EXIT_BELOW_THRESHOLD, close.output
    assert "is below --fail-under 0.6666667 (" in close.output, close.output
    wide = run_cli(tmp_path, tasks, "wide", "--fail-under", "80.00001")
    assert wide.exit_code == exit_codes.EXIT_USAGE, wide.output
    assert "--fail-under 80.00001 must be a fraction between 0 and 1: 0.8000001 or 80.00001% for " in wide.output, \
        wide.output


def test_junit_of_a_run_whose_model_endpoint_was_down_is_no_pass(tmp_path, request, monkeypatch):
    """A model endpoint down all night: every sample had an attempt (model_unavailable, not
    final) and the run stopped, exit 1. Its JUnit file held only skipped cases, 0 failures
    and 0 errors, which CI shows as a passed report; the samples without a result are an error."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    server = request.getfixturevalue("llm_server")(policy=lambda body: {"status": 503, "retry_after_ms": 10})
    junit = tmp_path / "ci" / "junit.xml"
    down = run_cli(tmp_path, [shell_task("a")], "down", "--agent", "openai", "--base-url", server.url,
                   "--max-retries", "1", "--junit-xml", str(junit))
    assert down.exit_code == exit_codes.EXIT_ABORTED, down.output
    xmlschema.XMLSchema(str(JUNIT_XSD)).validate(str(junit))
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite.get("errors") == "1" and suite.get("skipped") == "1", ET.tostring(suite, "unicode")
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert cases["a#0"].find("skipped") is not None
    message = cases["samples without a result"].find("error").get("message")
    assert message.startswith("1 of 1 samples have no result") and "1 after an attempt that failed" in message


def test_compare_to_exits_4_on_a_significant_regression_only(tmp_path):
    ids = [f"t{i}" for i in range(8)]
    base = run_cli(tmp_path, [shell_task(i) for i in ids], "base")
    assert base.exit_code == 0, base.output
    # two flips: worse, but McNemar's p = 0.5, not significant
    mild = run_cli(tmp_path, [failing_task(i) if i in ids[:2] else shell_task(i) for i in ids], "mild",
                   "--compare-to", "base")
    assert mild.exit_code == exit_codes.EXIT_OK, mild.output
    # six flips one way: p = 2/64
    worse = run_cli(tmp_path, [failing_task(i) if i in ids[:6] else shell_task(i) for i in ids], "worse",
                    "--compare-to", "base", "--fail-under", "0.1")
    assert worse.exit_code == exit_codes.EXIT_REGRESSION, worse.output
    assert "significant regression against base" in worse.output
    text = (tmp_path / "out" / "worse" / "compare-base.txt").read_text()
    assert "pass -> fail: 6: t0#0, t1#0, t2#0, t3#0, t4#0, t5#0" in text

    # a baseline that does not exist (a nightly job's missed night) is no verdict, after the run
    missing = run_cli(tmp_path, [shell_task("a")], "nobase", "--compare-to", "nope")
    assert missing.exit_code == exit_codes.EXIT_NO_VERDICT and "no such run" in missing.output
    assert f"no verdict: {tmp_path / 'out' / 'nope'}: no such run folder" in " ".join(missing.output.split())
    assert_exactly_once(tmp_path / "out" / "nobase", {"a#0"})


def test_exit_codes_are_documented_in_the_cli_help():
    result = CliRunner().invoke(main, ["run", "--help"])
    for code in (0, 1, 2, 3, 4, 75, 130):
        assert f"{code} " in result.output


def test_resumed_cron_run_keeps_its_gates_until_one_is_turned_off(tmp_path):
    """A cron line repeats --run-id … --resume; the gates stored in config.json still apply,
    and 'none' (a flag, a variable) turns one off: a resume whose baseline was deleted had no
    way to drop the gate but editing config.json."""
    tasks = [shell_task("ok"), failing_task("bad")]
    first = run_cli(tmp_path, tasks, "nightly", "--fail-under", "0.9", "--compare-to", "deleted")
    assert first.exit_code == exit_codes.EXIT_BELOW_THRESHOLD

    resumed = subprocess.run(
        [sys.executable, str(ROOT / "run_parallel_rollout.py"), "--output-dir", str(tmp_path / "out"),
         "--run-id", "nightly", "--resume", "--no-progress"], capture_output=True, text=True, timeout=120)
    assert resumed.returncode == exit_codes.EXIT_BELOW_THRESHOLD, resumed.stderr
    # a gate the command line did not give says where it comes from, and how to drop it
    said = " ".join(resumed.stderr.split())
    assert ("below --fail-under 0.9 (90.0%) (--fail-under kept from the run's config.json; "
            "--fail-under none drops it)") in said, said
    assert "(--compare-to kept from the run's config.json; --compare-to none drops it)" in said, said
    stored = tmp_path / "out" / "nightly" / "config.json"
    assert json.loads(stored.read_text())["config"]["fail_under"] == 0.9

    def resume(*args: str, **env: str):
        return CliRunner().invoke(main, ["run", "--output-dir", str(tmp_path / "out"), "--run-id", "nightly",
                                         "--resume", "--no-progress", *args], env=env)

    # the threshold off, the baseline's gate kept: no verdict
    without_threshold = resume("--fail-under", "none")
    assert without_threshold.exit_code == exit_codes.EXIT_NO_VERDICT, without_threshold.output
    # the baseline's off too (from a variable); the threshold stays off, as config.json now says
    finished = resume(PARALLEL_ROLLOUT_COMPARE_TO="none")
    assert finished.exit_code == exit_codes.EXIT_OK, finished.output
    config = json.loads(stored.read_text())["config"]
    assert config["fail_under"] is None and config["compare_to"] is None


@pytest.mark.parametrize("retries, said", [
    (0, "each ended on an infrastructure failure with no retry (--max-retries 0)"),
    (1, "each ended on an infrastructure failure after its one retry (--max-retries 1)"),
    (2, "each ended on an infrastructure failure after its 2 retries (--max-retries 2)"),
])
def test_the_never_graded_message_says_the_retries_as_they_were(tmp_path, retries, said):
    """It said 'after --max-retries 1 retries' of one retry, and 'after --max-retries 0
    retries' of none."""
    tasks = [shell_task("ok"), shell_task("broken", setup=["exit 3"])]
    done = run_cli(tmp_path, tasks, "tries", "--max-retries", str(retries))
    assert done.exit_code == exit_codes.EXIT_ABORTED, (done.output, done.exception)
    assert f"1 sample(s) were never graded: {said} (" in " ".join(done.output.split()), done.output
    lines = (tmp_path / "out" / "tries" / "results.jsonl").read_text().splitlines()
    assert sum(json.loads(line)["key"] == "broken#0" for line in lines) == retries + 1  # as said


def test_the_never_graded_message_counts_the_retries_the_resumes_made(tmp_path):
    """A nightly --resume runs a never-graded sample once more each night: the message said
    'after its one retry (--max-retries 1)' every night, of a sample tried 3, then 4 times."""
    tasks = [shell_task("ok"), shell_task("broken", setup=["exit 3"])]
    said = [" ".join(run_cli(tmp_path, tasks, "tries", "--max-retries", "1").output.split())]
    for _ in range(2):
        again = CliRunner().invoke(main, ["run", "--output-dir", str(tmp_path / "out"), "--run-id", "tries",
                                          "--resume", "--no-progress"])
        assert again.exit_code == exit_codes.EXIT_ABORTED, (again.output, again.exception)
        said.append(" ".join(again.output.split()))
    ended = "1 sample(s) were never graded: each ended on an infrastructure failure after"
    assert f"{ended} its one retry (--max-retries 1) (" in said[0], said[0]
    for night, retries in ((1, 2), (2, 3)):
        assert (f"{ended} its {retries} retries (--max-retries 1, and one more attempt by each resume) ("
                in said[night]), said[night]
    lines = (tmp_path / "out" / "tries" / "results.jsonl").read_text().splitlines()
    assert [json.loads(line)["attempt"] for line in lines if json.loads(line)["key"] == "broken#0"] == [0, 1, 2, 3]


def test_a_run_with_samples_never_graded_exits_1_and_a_resume_runs_them_again(tmp_path, monkeypatch):
    """Infrastructure failures after --max-retries are no score: not exit 0 with a 0% rate."""
    monkeypatch.setenv("PR_CHAOS_DIR", str(tmp_path))
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    tasks = [shell_task("ok"), shell_task("doomed", chaos="sigkill_always")]
    junit = tmp_path / "junit.xml"
    first = run_cli(tmp_path, tasks, "lost", "--agent", "chaos_plugins:ChaosAgent", "--max-retries", "1",
                    "--fail-under", "0.1", "--junit-xml", str(junit))
    assert first.exit_code == exit_codes.EXIT_ABORTED, first.output
    assert "1 sample(s) were never graded" in first.output and "worker_died 1; doomed#0" in first.output
    assert "the gates were not applied" in first.output and "--resume" in first.output
    assert "success rate of the graded samples 100.0%, 1 never graded" in first.output
    run_dir = tmp_path / "out" / "lost"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["ungraded"] == 1 and summary["success_rate_graded"] == 1.0
    page = (run_dir / "report.html").read_text()
    assert 'data-metric="success_rate_graded"' in page and "1 never graded (infrastructure failures)" in page
    assert junit.exists()

    again = CliRunner().invoke(main, ["run", "--output-dir", str(tmp_path / "out"), "--run-id", "lost",
                                      "--resume", "--no-progress"])
    assert again.exit_code == exit_codes.EXIT_ABORTED, again.output
    attempts = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    assert [r["attempt"] for r in attempts if r["key"] == "doomed#0"] == [0, 1, 2]
    assert [r["attempt"] for r in attempts if r["key"] == "ok#0"] == [0]


def test_never_graded_samples_have_no_reward_in_any_mean(tmp_path, monkeypatch):
    """A sample never graded has no score, so no 0 either: the mean reward, per mode, per tag
    and pass@k are over the graded samples, in the console, summary.json and the report."""
    monkeypatch.setenv("PR_CHAOS_DIR", str(tmp_path))
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    tasks = [shell_task("ok", tags=["t"]), failing_task("bad", tags=["t"]),
             shell_task("doomed", chaos="sigkill_always", tags=["t"])]
    result = run_cli(tmp_path, tasks, "means", "--agent", "chaos_plugins:ChaosAgent", "--max-retries", "1",
                     "--group-size", "2")
    assert result.exit_code == exit_codes.EXIT_ABORTED, result.output
    # 2 successes, 2 graded failures, 2 never graded: 0.5 over the graded, not 2/6
    assert "2 never graded, mean reward of the graded samples 0.5)" in result.output
    summary = json.loads((tmp_path / "out" / "means" / "summary.json").read_text())
    assert summary["mean_reward"] == 0.5
    assert summary["per_mode"]["shell"]["mean_reward"] == 0.5
    # doomed has no graded sample: no pass@k of its own; ok 1, bad 0
    assert summary["pass@1"] == 0.5 and summary["pass@2"] == 0.5
    page = (tmp_path / "out" / "means" / "report.html").read_text()
    assert 'data-metric="mean_reward" data-value="0.5"' in page
    assert "mean reward of the graded samples" in page
    per_tag = page.split('<tr data-tag="t">')[1].split("</tr>")[0]
    assert '<td class="num">0.5</td>' in per_tag


def test_the_regression_gate_gives_no_verdict_without_shared_samples_or_a_finished_baseline(tmp_path):
    """No shared sample, or a baseline cut short, is no pass: exit 5 saying why; few shared
    samples, an unfinished B and task files whose sha256 differ are warned of."""
    out = tmp_path / "out"
    ids = [f"t{i}" for i in range(6)]
    assert run_cli(tmp_path, [shell_task(i) for i in ids], "base1").exit_code == 0
    other = run_cli(tmp_path, [shell_task("w0"), shell_task("w1")], "w1", "--compare-to", "base1")
    assert other.exit_code == exit_codes.EXIT_NO_VERDICT, other.output
    assert "--compare-to base1: no verdict: the runs share no final sample" in other.output
    check = CliRunner().invoke(main, ["compare", "w1", "base1", "--check", "--output-dir", str(out)])
    assert check.exit_code == exit_codes.EXIT_NO_VERDICT and "no verdict: the runs share no final sample" in check.output
    # other task files, and no id in common: no "same ids" (it said so of runs sharing none)
    for said in (other.output, check.output):
        assert "the runs' task files differ (sha256" in said and "same ids" not in said, said

    # a baseline killed after 2 of its 6 samples (no summary.json: it never got to write one)
    killed = run_cli(tmp_path, [shell_task(i) for i in ids], "k5")
    assert killed.exit_code == 0
    lines = (out / "k5" / "results.jsonl").read_text().splitlines(keepends=True)
    (out / "k5" / "results.jsonl").write_text("".join(lines[:2]))
    (out / "k5" / "summary.json").unlink()
    gated = run_cli(tmp_path, [shell_task(i) for i in ids], "int2", "--compare-to", "k5")
    assert gated.exit_code == exit_codes.EXIT_NO_VERDICT, gated.output
    # its total from config.json, which the run wrote at its start (there is no summary)
    assert "no verdict: the baseline A is unfinished (partial: 2 of 6 samples final)" in gated.output
    text = (out / "int2" / "compare-k5.txt").read_text()
    assert "the task sets differ" not in text and "A is unfinished" in text
    assert "warning: only 2 shared samples" in text
    # killed before its first result (config.json alone): unfinished, not "no such run" (a
    # missed night), nor "the runs share no final sample"
    (out / "k5" / "results.jsonl").unlink()
    first = run_cli(tmp_path, [shell_task(i) for i in ids], "int2", "--resume", "--compare-to", "k5")
    assert first.exit_code == exit_codes.EXIT_NO_VERDICT, first.output
    assert "no verdict: the baseline A is unfinished (partial: 0 of 6 samples final)" in first.output, first.output
    assert "no such run" not in first.output

    # same ids, other task contents: the provenance's sha256 differs
    changed = run_cli(tmp_path, [shell_task(i, reference=["true", f"touch ~/{i}.done"]) for i in ids], "fastB")
    assert changed.exit_code == 0
    both = CliRunner().invoke(main, ["compare", "base1", "fastB", "--output-dir", str(out)])
    assert "samples: 6 in both runs" in both.output
    assert "warning: the runs' task files differ (sha256" in both.output, both.output
    assert "same ids, maybe not the same tasks" in both.output
    part = run_cli(tmp_path, [shell_task(i, reference=["true", f"touch ~/{i}.done"]) for i in ids[:4]], "part")
    assert part.exit_code == 0
    some = CliRunner().invoke(main, ["compare", "base1", "part", "--output-dir", str(out)])
    assert "in B): 4 sample ids in common, maybe not the same tasks" in some.output, some.output


def test_an_unwritable_junit_path_is_refused_by_the_preflight_and_before_the_run(tmp_path):
    (tmp_path / "afile").write_text("not a folder")
    junit = str(tmp_path / "afile" / "ci" / "junit.xml")
    dry = run_cli(tmp_path, [shell_task("a")], "jdry", "--junit-xml", junit, "--dry-run")
    assert dry.exit_code == exit_codes.EXIT_USAGE, dry.output
    assert f"--junit-xml {junit}: {tmp_path / 'afile'} is not a folder" in dry.output
    real = run_cli(tmp_path, [shell_task("a")], "jreal", "--junit-xml", junit)
    assert real.exit_code == exit_codes.EXIT_USAGE and "is not a folder" in real.output, real.output
    assert not (tmp_path / "out" / "jreal").exists()
    # a folder that says writable to root (access()) but takes no file: found by making one
    proc_path = "/proc/pr-nowhere/junit.xml"
    dry = run_cli(tmp_path, [shell_task("a")], "jproc", "--junit-xml", proc_path, "--dry-run")
    assert dry.exit_code == exit_codes.EXIT_USAGE, dry.output
    assert f"--junit-xml {proc_path}: no file can be made in the folder /proc: it is on the proc file" in dry.output
    # the help says what happens: refused at the start, exit 2 (it said "makes the run exit 1")
    helped = " ".join(CliRunner().invoke(main, ["run", "--help"]).output.split())
    assert ("A path whose folder it cannot write in is refused at the start, exit 2, nothing run; one that "
            "fails when written at the end makes the run exit 1") in helped


def test_a_missing_baseline_is_not_said_to_let_a_run_go_on_that_a_bad_task_file_stops(tmp_path):
    """The warning "the run goes on; its gate will give no verdict (exit 5)" came before the
    task file was read: a nightly log said the run went on, then "Error: … exit 2"."""
    bad = dict(shell_task("a"), setup="false")  # setup is a list of commands
    refused = run_cli(tmp_path, [bad], "night", "--compare-to", "missed-night")
    assert refused.exit_code == exit_codes.EXIT_USAGE, refused.output
    assert "field 'setup' must be a list, got a string" in refused.output
    assert "the run goes on" not in refused.output, refused.output
    ran = run_cli(tmp_path, [shell_task("a")], "night", "--compare-to", "missed-night")
    assert ran.exit_code == exit_codes.EXIT_NO_VERDICT
    assert "--compare-to missed-night: " in ran.output and "the run goes on" in ran.output, ran.output


def test_a_baseline_folder_that_does_not_exist_is_said_so_with_the_runs_near_its_name(tmp_path):
    """``--compare-to bsae`` (base misspelt) said "out/bsae holds no results.jsonl", of a folder
    that is not there: it is no run folder, and the runs of --output-dir near the name are
    named; a folder that is there without results.jsonl is said to hold none."""
    out = tmp_path / "out"
    assert run_cli(tmp_path, [shell_task("a")], "base").exit_code == 0
    typo = run_cli(tmp_path, [shell_task("a")], "night", "--compare-to", "bsae")
    assert typo.exit_code == exit_codes.EXIT_NO_VERDICT, typo.output
    said = " ".join(typo.output.split())
    assert (f"--compare-to bsae: {out / 'bsae'}: no such run folder in --output-dir (the nearest by name: base); "
            "the run goes on") in said, said
    assert said.count("no such run folder") == 2 and "holds no results.jsonl" not in said, said
    (out / "empty").mkdir()
    empty = run_cli(tmp_path, [shell_task("a")], "night2", "--compare-to", "empty")
    assert empty.exit_code == exit_codes.EXIT_NO_VERDICT, empty.output
    assert f"--compare-to empty: {out / 'empty'} holds no results.jsonl" in " ".join(empty.output.split())


def test_a_baseline_that_cannot_be_read_or_a_comparison_that_cannot_be_written_is_no_pass(tmp_path):
    """A baseline with a corrupted line raised past the gates: the run exited 0 at 0% success
    (a traceback in its log), its --fail-under not applied either. It is no verdict (5), and
    --fail-under still judges (3). A comparison whose files cannot be written (a full disk)
    keeps its verdict: it was exit 0 too. The unreadable baseline is said at the start too."""
    out = tmp_path / "out"
    ids = [f"t{i}" for i in range(6)]
    assert run_cli(tmp_path, [shell_task(i) for i in ids], "base").exit_code == 0
    results = out / "base" / "results.jsonl"
    whole = results.read_text()
    lines = whole.splitlines(keepends=True)
    results.write_text("".join(lines[:2] + ['{"key": "t2#0", "att\n'] + lines[3:]))  # a bad sector's line
    worse = [failing_task(i) for i in ids]
    tonight = run_cli(tmp_path, worse, "tonight", "--compare-to", "base")
    assert tonight.exit_code == exit_codes.EXIT_NO_VERDICT, tonight.output
    assert f"--compare-to base: no verdict: cannot read the baseline: {results}:3: corrupted record" in tonight.output
    # said at the start too, as a missed night is: there is time to fix the line
    assert (f"--compare-to base: cannot read the baseline: {results}:3: corrupted record"
            in tonight.output.split("run tonight: 6 samples")[0]), tonight.output
    check = CliRunner().invoke(main, ["compare", "base", "tonight", "--check", "--output-dir", str(out)])
    assert check.exit_code == exit_codes.EXIT_NO_VERDICT, check.output  # as run --compare-to (it was 2)
    assert f"no verdict: cannot read the baseline: {results}:3: corrupted record" in check.output
    gated = run_cli(tmp_path, worse, "tonight", "--resume", "--fail-under", "0.5")
    assert gated.exit_code == exit_codes.EXIT_BELOW_THRESHOLD, gated.output
    assert "success rate 0.0% is below --fail-under 0.5" in gated.output and "no verdict" in gated.output

    results.write_text(whole)
    (out / "tonight" / "compare-base.txt").mkdir()  # where the comparison's text goes: not writable
    judged = run_cli(tmp_path, worse, "tonight", "--resume", "--fail-under", "0")
    assert judged.exit_code == exit_codes.EXIT_REGRESSION, judged.output
    assert "significant regression against base" in judged.output
    assert f"cannot write {out / 'tonight' / 'compare-base.txt'}" in judged.output


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("chattr") is None, reason="needs root and chattr")
def test_the_gates_judge_this_sessions_numbers_when_its_summary_cannot_be_written(tmp_path):
    """A resume whose summary.json cannot be written (a full disk at its end) had its gates
    judge the earlier session's summary read back: 1 of 1 passed, so --fail-under 0.8 let a
    run of 1 of 2 exit 0, its console saying 50%."""
    tasks = [shell_task("a"), failing_task("b")]
    assert run_cli(tmp_path, tasks, "s", "--limit", "1").exit_code == 0
    summary = tmp_path / "out" / "s" / "summary.json"
    if subprocess.run(["chattr", "+i", str(summary)], capture_output=True).returncode:
        pytest.skip("this file system has no immutable attribute")
    try:
        gated = run_cli(tmp_path, tasks, "s", "--resume", "--limit", "2", "--fail-under", "0.8")
    finally:
        subprocess.run(["chattr", "-i", str(summary)], check=True)
    assert f"cannot write {summary}" in gated.output, gated.output
    assert gated.exit_code == exit_codes.EXIT_BELOW_THRESHOLD, gated.output
    assert "success rate 50.0% is below --fail-under 0.8" in gated.output


def test_other_tools_names_of_the_gates_point_to_the_gates(tmp_path, monkeypatch):
    """--min-pass-rate (as other harnesses call the threshold) was answered 'did you mean
    --client-password?', --threshold '--record?', and a systemd unit's
    PARALLEL_ROLLOUT_MIN_PASS_RATE was ignored with 'did you mean PARALLEL_ROLLOUT_VM_PORT?':
    a nightly job without its gate. Each names the gate's own setting."""
    for flag, gate in (("--min-pass-rate", "--fail-under"), ("--threshold", "--fail-under"),
                       ("--baseline", "--compare-to")):
        said = CliRunner().invoke(main, ["run", flag, "0.8"])
        assert said.exit_code == 2 and f"Did you mean '{gate}'?" in said.output, said.output
    (tmp_path / "nightly.toml").write_text("min-pass-rate = 0.8\n")
    said = CliRunner().invoke(main, ["run", "--config", str(tmp_path / "nightly.toml")])
    assert said.exit_code == 2 and "unknown key 'min-pass-rate'; did you mean fail-under?" in said.output, said.output
    monkeypatch.setenv("PARALLEL_ROLLOUT_MIN_PASS_RATE", "0.8")
    said = CliRunner().invoke(main, ["run", "--output-dir", str(tmp_path / "out")])  # no --data: stops there
    assert "PARALLEL_ROLLOUT_MIN_PASS_RATE is set but is no flag of run nor a setting parallel-rollout reads: " \
           "ignored (did you mean PARALLEL_ROLLOUT_FAIL_UNDER?)" in said.output, said.output
