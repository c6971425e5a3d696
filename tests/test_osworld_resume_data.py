"""What a resume of an OSWorld run checks of its task folder (through the CLI, on a copy of
OSWorld's real files): the files the run's tasks are made of, its index and the task files
that index selects, not every .json of the folder. Another index added, or the run's own
config.json and summary.json written inside the folder (``--data .`` from the folder, the
default ``--output-dir results``), never block a resume nor make ``compare`` warn; a changed
task file is refused by name. A run recorded by an older version (one hash of every .json
under the folder) goes ahead unless one of its task files was modified since it started.

Its two tasks' metric is one no version has, so with --skip-unsupported each gets a final
'unsupported' record and no desktop boots.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from parallel_rollout.exit_codes import EXIT_USAGE
from test_osworld_taskset import EXAMPLES, index_of, needs_set

pytestmark = needs_set


def osworld_checkout(tmp_path: Path) -> tuple[Path, list[str]]:
    """A copy of evaluation_examples with an index of its own, mine.json, selecting two os
    tasks whose metric is made unsupported."""
    folder = tmp_path / "evaluation_examples"
    shutil.copytree(EXAMPLES, folder)
    ids = index_of("test_all.json")["os"][:2]
    for task_id in ids:
        path = folder / "examples" / "os" / f"{task_id}.json"
        task = json.loads(path.read_text())
        task["evaluator"] = {"func": "no_such_metric", "result": {"type": "vm_file", "path": "/tmp/x", "dest": "x"}}
        path.write_text(json.dumps(task, indent=2))
    (folder / "mine.json").write_text(json.dumps({"os": ids}))
    return folder, ids


def run_in(folder: Path, *args: str) -> subprocess.CompletedProcess:
    """``python -m parallel_rollout ARGS`` from inside the folder, as OSWorld's users run it."""
    return subprocess.run([sys.executable, "-m", "parallel_rollout", *args], capture_output=True, text=True,
                          timeout=120, cwd=folder, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})


def first_run(folder: Path) -> None:
    done = run_in(folder, "run", "--data", ".", "--osworld-index", "mine.json", "--skip-unsupported",
                  "--run-id", "a", "--no-progress")
    assert done.returncode == 0, done.stderr
    assert (folder / "results" / "a" / "summary.json").is_file()  # inside the folder it reads


def test_files_that_are_no_task_of_the_run_never_block_its_resume(tmp_path):
    folder, ids = osworld_checkout(tmp_path)
    first_run(folder)
    (folder / "test_mine_too.json").write_text(json.dumps({"os": ids[:1]}))  # an unrelated index
    for _ in range(2):  # the run's own config.json and summary.json were rewritten in between
        again = run_in(folder, "run", "--run-id", "a", "--resume", "--no-progress")
        assert again.returncode == 0, again.stderr
    made = json.loads((folder / "results" / "a" / "config.json").read_text())["provenance"]["data"][0]
    assert sorted(made["file_sha256"]) == sorted(["mine.json", *(f"examples/os/{i}.json" for i in ids)])
    shutil.copytree(folder / "results" / "a", folder / "results" / "a-copy")  # not itself: refused
    compared = run_in(folder, "compare", "a", "a-copy")
    assert compared.returncode == 0 and "task files differ" not in compared.stdout + compared.stderr

    task = folder / "examples" / "os" / f"{ids[1]}.json"
    task.write_text(task.read_text().replace('"instruction": "', '"instruction": "Now: '))
    refused = run_in(folder, "run", "--run-id", "a", "--resume", "--no-progress")
    assert refused.returncode == EXIT_USAGE
    assert (f"the task folder {folder} changed since the run started: examples/os/{ids[1]}.json (changed)"
            in " ".join(refused.stderr.split())), refused.stderr


def test_a_run_recorded_by_an_older_version_resumes_unless_a_task_file_was_modified(tmp_path):
    folder, ids = osworld_checkout(tmp_path)
    first_run(folder)
    config_path = folder / "results" / "a" / "config.json"
    stored = json.loads(config_path.read_text())
    # as versions before file_sha256 recorded it: one hash of every .json under the folder,
    # taken before the run wrote its own files there
    stored["provenance"]["data"] = [{"path": str(folder), "sha256": "0" * 64, "files": 370}]
    stored["started_at"] = time.time()
    config_path.write_text(json.dumps(stored))
    (folder / "test_mine_too.json").write_text(json.dumps({"os": ids[:1]}))
    old = os.stat(folder / "mine.json").st_mtime
    for path in (folder / "mine.json", *(folder / "examples" / "os" / f"{i}.json" for i in ids)):
        os.utime(path, (old - 60, old - 60))  # the run's files: as they were when it started
    again = run_in(folder, "run", "--run-id", "a", "--resume", "--no-progress")
    assert again.returncode == 0, again.stderr
    assert "file_sha256" in json.loads(config_path.read_text())["provenance"]["data"][0]  # recorded anew

    config_path.write_text(json.dumps(stored))  # the old record again; now a task file changes
    task = folder / "examples" / "os" / f"{ids[0]}.json"
    task.write_text(task.read_text().replace('"instruction": "', '"instruction": "Now: '))
    os.utime(task, (stored["started_at"] + 5, stored["started_at"] + 5))
    refused = run_in(folder, "run", "--run-id", "a", "--resume", "--no-progress")
    assert refused.returncode == EXIT_USAGE
    assert (f"examples/os/{ids[0]}.json (modified since the run started)"
            in " ".join(refused.stderr.split())), refused.stderr


def test_a_run_started_again_after_a_stop_says_which_run_to_resume(tmp_path):
    """OSWorld's run.py started again goes on where it stopped; here the same line starts a
    new run, which runs every sample again: it says so, naming the run --resume goes on with
    (a new run of other settings says nothing)."""
    import signal

    from test_osworld_taskset import osworld_folder

    if not all(shutil.which(p) for p in ("Xvfb", "openbox", "xdotool", "wmctrl")):
        pytest.skip("the desktop packages are missing (./dev installs them)")
    data = osworld_folder(tmp_path / "set", {
        "quick": {"domain": "os", "instruction": "cannot", "config": [], "evaluator": {"func": "infeasible"},
                  "reference": ["FAIL"]},
        "slow": {"domain": "os", "instruction": "cannot either", "config": [], "evaluator": {"func": "infeasible"},
                 "reference": ["WAIT"] * 60 + ["FAIL"]}})
    out = tmp_path / "out"
    line = [sys.executable, "-m", "parallel_rollout", "run", "--test_config_base_dir", str(data), "--result_dir",
            str(out), "--num-rollouts", "1", "--no-progress", "--screen-width", "640", "--screen-height", "480"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    first = subprocess.Popen(line, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not any(
            '"final": true' in p.read_text() for p in out.glob("*/results.jsonl")):
        time.sleep(0.2)
    first.send_signal(signal.SIGINT)
    assert first.wait(timeout=60) == 130, first.stdout.read()
    [stopped] = [p.name for p in out.iterdir()]
    again = subprocess.run([*line, "--limit", "1"], capture_output=True, text=True, timeout=120, env=env)
    assert again.returncode == 0, again.stderr
    said = " ".join((again.stdout + again.stderr).split())
    # under another --limit: what it finished of this run's one sample (quick, the first)
    assert (f"an earlier run of these settings, {stopped}, was interrupted with 1 of 2 samples final without "
            "--limit, 1 of them among this run's 1 sample (--limit 1): this one runs each of its samples; "
            f"--run-id {stopped} --resume goes on with that one instead") in said, said
    other = subprocess.run([*line, "--limit", "1", "--max-turns", "5"], capture_output=True, text=True,
                           timeout=120, env=env)
    assert other.returncode == 0 and "an earlier run" not in other.stdout + other.stderr, other.stderr
