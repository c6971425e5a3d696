"""OSWorld's own task set through the CLI: ``--data`` takes the folder, ``--dry-run`` counts
what runs, unsupported tasks are listed all at once, ``--skip-unsupported`` scores them 0."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from parallel_rollout.cli import main
from parallel_rollout.envs.osworld import registry

OSWORLD = Path("/work/shared/osworld")
EXAMPLES = OSWORLD / "evaluation_examples"

needs_set = pytest.mark.skipif(not (EXAMPLES / "test_all.json").is_file(),
                               reason="OSWorld's task set is not at /work/shared/osworld")


def cli(*args: str):
    return CliRunner().invoke(main, ["run", "--mode", "osworld", *args], catch_exceptions=False)


#: a dry run is a preflight that checks the agent can run each task: the oracle needs a reference
#: each OSWorld task lacks, a model behind a local URL (not asked without --check-endpoint) does not
MODEL_AGENT = ("--agent", "openai", "--base-url", "http://127.0.0.1:9/v1")


def index_of(name: str) -> dict[str, list[str]]:
    return json.loads((EXAMPLES / name).read_text())


def runnable_by_registry(index: dict[str, list[str]]) -> dict[str, int]:
    """Per domain, the tasks whose every feature the registry has, counted from the files."""
    counts = {}
    for domain, ids in index.items():
        payloads = [json.loads((EXAMPLES / "examples" / domain / f"{i}.json").read_text()) for i in ids]
        counts[domain] = sum(1 for p in payloads if not registry.unsupported(p))
    return counts


def domain_lines(output: str) -> dict[str, tuple[int, int]]:
    found = re.findall(r"^(\w+): (\d+) tasks, (\d+) runnable$", output, re.M)
    return {name: (int(total), int(runnable)) for name, total, runnable in found}


@needs_set
def test_dry_run_counts_every_task_of_test_all_per_domain():
    result = cli("--data", str(EXAMPLES), "--dry-run", *MODEL_AGENT)
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    index = index_of("test_all.json")
    total = sum(len(ids) for ids in index.values())
    expected = runnable_by_registry(index)
    lines = domain_lines(result.output)
    assert lines == {d: (len(ids), expected[d]) for d, ids in index.items()}
    last = result.output.strip().splitlines()[-1]
    assert last == f"runnable {sum(expected.values())} of {total} tasks"
    # each unsupported feature is counted under its domain with the tasks that use it
    chrome = result.output.split("chrome:")[1].split("\ngimp:")[0]
    if expected["chrome"] < len(index["chrome"]):
        assert re.search(r"  unsupported (step|getter|metric) \S+: \d+ tasks?", chrome)


@needs_set
def test_the_parent_folder_another_index_and_one_domain():
    whole = cli("--data", str(OSWORLD), "--osworld-index", "test_small.json", "--dry-run", *MODEL_AGENT)
    assert whole.exit_code == 0, whole.output
    small = index_of("test_small.json")
    assert domain_lines(whole.output) == {
        d: (len(ids), n) for (d, ids), n in zip(small.items(), runnable_by_registry(small).values())}
    one = cli("--data", str(EXAMPLES), "--domain", "os", "--dry-run", *MODEL_AGENT)
    assert list(domain_lines(one.output)) == ["os"]
    assert one.output.strip().endswith(f"of {len(index_of('test_all.json')['os'])} tasks")


@needs_set
def test_bad_index_and_domain_say_what_exists():
    result = cli("--data", str(EXAMPLES), "--osworld-index", "test_nope.json", "--dry-run")
    assert result.exit_code == 2
    assert "no index test_nope.json" in result.output and "test_small.json" in result.output
    result = cli("--data", str(EXAMPLES), "--domain", "nope", "--dry-run")
    assert result.exit_code == 2 and "--domain 'nope': " in result.output and "has no such domain" in result.output and "chrome" in result.output


@needs_set
def test_an_index_of_the_current_folder_named_bare_says_how_to_name_it(tmp_path, monkeypatch):
    """A bare --osworld-index is the --data folder's: a user whose ids.json is in the current
    folder was told only the folder's indexes, not how to name the one they meant."""
    (tmp_path / "ids.json").write_text(json.dumps({"os": index_of("test_all.json")["os"][:1]}))
    monkeypatch.chdir(tmp_path)
    result = cli("--data", str(EXAMPLES), "--osworld-index", "ids.json", "--dry-run")
    assert result.exit_code == 2 and "no index ids.json" in result.output
    assert "the current folder's ids.json is read as --osworld-index ./ids.json" in result.output, result.output
    named = cli("--data", str(EXAMPLES), "--osworld-index", "./ids.json", "--dry-run", *MODEL_AGENT)
    assert named.exit_code == 0, named.output


@needs_set
def test_an_index_or_domain_that_lists_no_tasks_says_so_not_no_tasks_in_file(tmp_path):
    index = tmp_path / "mine.json"
    index.write_text(json.dumps({"os": index_of("test_all.json")["os"][:2], "vlc": []}))
    result = cli("--data", str(EXAMPLES), "--osworld-index", str(index), "--domain", "vlc", "--dry-run")
    assert result.exit_code == 2 and "no tasks in file" not in result.output, result.output
    assert f"{index}: domain 'vlc' lists no tasks (tasks per domain: os 2)" in result.output
    index.write_text(json.dumps({"os": []}))
    result = cli("--data", str(EXAMPLES), "--osworld-index", str(index), "--agent", "openai", "--base-url",
                 "http://127.0.0.1:9/v1", "--output-dir", str(tmp_path / "out"))
    assert result.exit_code == 2 and f"{index}: the index lists no tasks" in result.output, result.output


@needs_set
def test_a_folder_with_unsupported_tasks_is_refused_listing_every_one(tmp_path):
    # OSWorld's os domain as it is, but two tasks ask for features no version has
    ids = index_of("test_all.json")["os"]
    lacking = ids[:2]
    tasks = {}
    for task_id in ids:
        task = json.loads((EXAMPLES / "examples" / "os" / f"{task_id}.json").read_text())
        if task_id in lacking:
            task["evaluator"] = {"func": f"no_such_metric_{task_id[:4]}", "result": {
                "type": "no_such_getter", "path": "x"}}
        tasks[task_id] = {"domain": "os", **task}
    data = osworld_folder(tmp_path / "set", tasks)
    result = cli("--data", str(data))
    assert result.exit_code == 2
    also = [i for i, t in tasks.items() if i not in lacking and registry.unsupported(t)]
    assert f"{len(lacking) + len(also)} of {len(ids)} tasks use features" in result.output
    for task_id in lacking:
        assert f"task {task_id!r}: getter no_such_getter, metric no_such_metric_{task_id[:4]}" \
            in result.output
    assert "--skip-unsupported" in result.output
    runnable = len(ids) - len(lacking) - len(also)
    assert result.output.strip().endswith(f"runnable {runnable} of {len(ids)} tasks")


def osworld_folder(root: Path, tasks: dict[str, dict]) -> Path:
    """A folder in OSWorld's layout: test_all.json + examples/<domain>/<id>.json."""
    index: dict[str, list[str]] = {}
    for task_id, task in tasks.items():
        domain = task.pop("domain")
        index.setdefault(domain, []).append(task_id)
        path = root / "evaluation_examples" / "examples" / domain / f"{task_id}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"id": task_id, **task}))
    (root / "evaluation_examples" / "test_all.json").write_text(json.dumps(index))
    return root


def test_skip_unsupported_gives_each_skipped_task_one_final_record(tmp_path):
    lacking = {"func": "no_such_metric", "result": {"type": "vm_file", "path": "/tmp/x", "dest": "x"}}
    data = osworld_folder(tmp_path / "set", {
        "a": {"domain": "os", "instruction": "a", "config": [], "evaluator": lacking},
        "b": {"domain": "gimp", "instruction": "b", "evaluator": {**lacking, "postconfig": [
            {"type": "no_such_step", "parameters": {}}]}},
    })
    out = tmp_path / "out"
    refused = cli("--data", str(data), "--output-dir", str(out), "--run-id", "r")
    assert refused.exit_code == 2 and "2 of 2 tasks" in refused.output
    assert not (out / "r").exists()
    result = cli("--data", str(data), "--skip-unsupported", "--output-dir", str(out),
                 "--run-id", "r", "--group-size", "2", "--no-progress")
    assert result.exit_code == 0, result.output
    records = [json.loads(l) for l in (out / "r" / "results.jsonl").read_text().splitlines()]
    assert sorted(r["key"] for r in records) == ["a#0", "a#1", "b#0", "b#1"]
    assert all(r["status"] == "unsupported" and r["final"] and r["reward"] == 0.0 for r in records)
    assert "metric no_such_metric, step no_such_step" in next(
        r for r in records if r["key"] == "b#0")["failure"]["message"]
    summary = json.loads((out / "r" / "summary.json").read_text())
    assert summary["finished"] == 4 and summary["success_rate"] == 0.0
    # a resumed run writes no second record
    again = cli("--data", str(data), "--skip-unsupported", "--output-dir", str(out),
                "--run-id", "r", "--group-size", "2", "--resume", "--no-progress")
    assert again.exit_code == 0, again.output
    assert len((out / "r" / "results.jsonl").read_text().splitlines()) == 4


def test_skip_unsupported_names_each_task_it_skips_for_a_feature_at_the_start(tmp_path):
    """A task of a metric this version lacks, skipped, was never said on the console: the run said
    '1 task --agent oracle cannot run gets an 'unsupported' record' of the other skipped task and
    ended 'statuses: unsupported 2'. Each reason names its tasks, the feature with each."""
    import subprocess
    import sys

    data = osworld_folder(tmp_path / "set", {
        "a": {"domain": "os", "instruction": "a", "config": [], "evaluator": {
            "func": "no_such_metric", "result": {"type": "vm_file", "path": "/tmp/x", "dest": "x"}}},
        "c": {"domain": "os", "instruction": "c", "config": [], "evaluator": {
            "func": "exact_match", "result": {"type": "vm_command_line", "command": "echo hi"},
            "expected": {"type": "rule", "rules": {"expected": "hi\n"}}}},
    })
    ran = subprocess.run([sys.executable, "-m", "parallel_rollout", "run", "--data", str(data), "--skip-unsupported",
                          "--output-dir", str(tmp_path / "out"), "--run-id", "r", "--no-progress"],
                         capture_output=True, text=True, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert ("--skip-unsupported: 1 task this version does not support gets an 'unsupported' record: a "
            "(metric no_such_metric)") in ran.stderr, ran.stderr
    assert "--skip-unsupported: 1 task --agent oracle cannot run gets an 'unsupported' record: c" in ran.stderr
    assert "statuses: unsupported 2" in ran.stdout + ran.stderr


@pytest.mark.skipif(not all(shutil.which(p) for p in ("Xvfb", "openbox", "xdotool", "wmctrl")),
                    reason="the desktop packages are missing (./dev installs them)")
def test_skip_unsupported_runs_the_rest_and_scores_over_the_whole_set(tmp_path):
    data = osworld_folder(tmp_path / "set", {
        "runs": {"domain": "os", "instruction": "cannot be done", "config": [],
                 "evaluator": {"func": "infeasible"}, "reference": ["FAIL"]},
        "skipped": {"domain": "os", "instruction": "x", "config": [{"type": "no_such_step"}],
                    "evaluator": {"func": "infeasible"}},
    })
    out = tmp_path / "out"
    result = cli("--data", str(data), "--skip-unsupported", "--output-dir", str(out), "--run-id", "r",
                 "--num-rollouts", "1", "--no-progress", "--screen-width", "640", "--screen-height", "480")
    assert result.exit_code == 0, result.output
    finals = {r["key"]: r for r in map(json.loads, (out / "r" / "results.jsonl").read_text().splitlines())
              if r["final"]}
    assert finals["runs#0"]["status"] == "success", finals["runs#0"]
    assert finals["skipped#0"]["status"] == "unsupported"
    summary = json.loads((out / "r" / "summary.json").read_text())
    assert summary["success_rate"] == 0.5


@needs_set
def test_a_task_the_index_lists_twice_is_refused_naming_the_index_and_its_lines(tmp_path):
    """An index of one's own made by joining two (test_small.json's os tasks and a few more)
    can list a task twice: OSWorld's run.py runs it twice into one result folder. The refusal
    said 'examples/os/ID.json:1: duplicate task id ID (first at examples/os/ID.json:1)', the task
    file twice and nothing of the index that lists it; it names the index, the domains and lines."""
    first, second = index_of("test_all.json")["os"][:2]
    index = tmp_path / "mine.json"
    index.write_text(json.dumps({"os": [first, second, first]}, indent=1))
    result = cli("--data", str(EXAMPLES), "--osworld-index", str(index), "--dry-run", *MODEL_AGENT)
    assert result.exit_code == 2, result.output
    said = " ".join(result.output.split())
    assert "duplicate task id" not in said, said
    assert (f"{index}:5: task {first!r} is listed twice, in domain 'os' (line 3) and again in domain 'os': "
            "OSWorld keys an example's result folder on its id; list it once") in said, said
    # one listed in two domains: each domain's file is read, the task is named once
    index.write_text(json.dumps({"os": [first], "chrome": [first]}))
    result = cli("--data", str(EXAMPLES), "--osworld-index", str(index), "--dry-run", *MODEL_AGENT)
    assert result.exit_code == 2, result.output
    said = " ".join(result.output.split())
    assert (f"{index}:1: task {first!r} is listed twice, in domain 'chrome' (line 1) and again in domain 'os'"
            in said), said


@needs_set
def test_a_domain_with_no_folder_in_examples_is_said_once_naming_the_domains_there(tmp_path):
    """An index whose domain has no folder under examples/ (another release's index, a
    Windows set's domain) was refused with one line per task, 'task 'w0' of domain 'windows'
    has no file …/examples/windows/w0.json', twenty of them and '… and 5 more', never saying
    that the whole folder is missing nor which domains there are; one line says it."""
    index = tmp_path / "mine.json"
    index.write_text(json.dumps({"os": index_of("test_all.json")["os"][:2], "windows": [f"w{n}" for n in range(25)]}))
    result = cli("--data", str(EXAMPLES), "--osworld-index", str(index), "--dry-run", *MODEL_AGENT)
    assert result.exit_code == 2, result.output
    said = " ".join(result.output.split())
    assert "has no file" not in said, said
    domains = ", ".join(sorted(p.name for p in (EXAMPLES / "examples").iterdir() if p.is_dir()))
    assert (f"{index}: domain 'windows' lists 25 tasks, but {EXAMPLES / 'examples'} has no folder 'windows' "
            f"(its domains: {domains})") in said, said
