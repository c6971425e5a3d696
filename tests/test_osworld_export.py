"""`runs export-osworld`: an osworld run's final trajectories in OSWorld's result layout, read
the way OSWorld's show_result.py reads it."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from parallel_rollout.cli import main
from readme_support import INSTALLED, bash, readme_lines
from test_osworld_taskset import osworld_folder

pytestmark = pytest.mark.skipif(
    not all(shutil.which(p) for p in ("Xvfb", "openbox", "xdotool", "wmctrl")),
    reason="the desktop packages are missing (./dev installs them)")


def cli(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def show_result(result_dir: Path, action_space: str, observation_type: str, model: str) -> dict[str, list[float]]:
    """What OSWorld's show_result.py (get_result) collects: domain -> the scores of the
    examples that have a result.txt."""
    target = result_dir / action_space / observation_type / model
    scores: dict[str, list[float]] = {}
    for domain in sorted(os.listdir(target)):
        for example in sorted(os.listdir(target / domain)):
            if "result.txt" in os.listdir(target / domain / example):
                scores.setdefault(domain, []).append(float((target / domain / example / "result.txt").read_text()))
    return scores


@pytest.fixture(scope="module")
def osworld_run(tmp_path_factory):
    """An osworld run of an OSWorld folder (two domains), two samples per task, by the CLI;
    the tests below only read it (each exports into a folder of its own)."""
    tmp = tmp_path_factory.mktemp("export")
    data = osworld_folder(tmp / "set", {
        "gives-up": {"domain": "os", "instruction": "cannot be done", "config": [],
                     "evaluator": {"func": "infeasible"}, "reference": ["FAIL"]},
        "also-gives-up": {"domain": "chrome", "instruction": "cannot be done either", "config": [],
                          "evaluator": {"func": "infeasible"}, "reference": ["FAIL"]},
        "acts-instead": {"domain": "chrome", "instruction": "was feasible", "config": [],
                         "evaluator": {"func": "infeasible"}, "reference": ["WAIT"]},
    })
    out = tmp / "out"
    result = cli("run", "--mode", "osworld", "--data", str(data), "--agent", "oracle", "--output-dir", str(out),
                 "--run-id", "r", "--group-size", "2", "--num-rollouts", "1", "--no-progress",
                 "--screen-width", "640", "--screen-height", "480")
    assert result.exit_code == 0, result.output
    return out, out / "r"


def test_the_readme_command_exports_what_osworlds_show_result_reads(osworld_run, tmp_path):
    out, run_dir = osworld_run
    [line] = readme_lines("Desktop tasks (osworld)", "", "parallel-rollout runs export-osworld")
    proc = bash(line.replace(" RUN ", f" {run_dir} "), tmp_path, env=INSTALLED)
    assert proc.returncode == 0, proc.stderr
    folder = Path("osworld_results") / "pyautogui" / "screenshot" / "oracle"
    assert f"exported 3 example(s) to {folder} (3 with result.txt; domains from " in proc.stdout
    folder = tmp_path / folder
    assert show_result(tmp_path / "osworld_results", "pyautogui", "screenshot", "oracle") == {
        "chrome": [0.0, 1.0], "os": [1.0]}  # acts-instead, also-gives-up; gives-up
    example = folder / "os" / "gives-up"
    attempt = run_dir / "trajectories" / "gives-up" / "0" / "attempt-0"
    assert sorted(p.name for p in example.iterdir()) == sorted(p.name for p in attempt.iterdir())
    steps = [json.loads(line) for line in (example / "traj.jsonl").read_text().splitlines()]
    assert steps[-1]["action"] == "FAIL" and (example / steps[-1]["screenshot_file"]).is_file()
    assert (example / "traj.jsonl").read_bytes() == (attempt / "traj.jsonl").read_bytes()
    (example / "result.txt").write_text("0.5\n")  # OSWorld's scripts may write there: a copy
    assert (attempt / "result.txt").read_text().strip() == "1.0"


def test_another_sample_goes_to_a_result_folder_of_its_own_and_nothing_is_overwritten(osworld_run, tmp_path):
    out, run_dir = osworld_run
    target = tmp_path / "results"
    # the two samples' files say the same (one second apart at most): tell them apart
    (run_dir / "trajectories" / "gives-up" / "1" / "attempt-0" / "sample-1.txt").write_text("1")
    assert cli("runs", "export-osworld", str(run_dir), str(target), "--sample", "1", "--model", "m#1").exit_code == 0
    example = target / "pyautogui" / "screenshot" / "m#1" / "os" / "gives-up"
    assert (example / "sample-1.txt").is_file() and (example / "result.txt").is_file()

    again = CliRunner().invoke(main, ["runs", "export-osworld", str(run_dir), str(target), "--sample", "1",
                                      "--model", "m#1"])
    assert again.exit_code == 2 and "already exists" in again.output and "--overwrite" in again.output
    (example / "result.txt").write_text("0.5\n")
    assert cli("runs", "export-osworld", str(run_dir), str(target), "--sample", "1", "--model", "m#1",
               "--overwrite").exit_code == 0
    assert (example / "result.txt").read_text().strip() == "1.0"

    missing = CliRunner().invoke(main, ["runs", "export-osworld", str(run_dir), str(target), "--sample", "2"])
    assert missing.exit_code == 2 and "no final attempt of sample 2 (samples: 0, 1)" in missing.output


def test_a_run_of_another_mode_or_no_run_is_refused_by_name(tmp_path):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "t", "problem": "1+1?", "answer": "2"}) + "\n")
    out = tmp_path / "out"
    ran = cli("run", "--mode", "math", "--data", str(tasks), "--agent", "oracle", "--output-dir", str(out),
              "--run-id", "m", "--no-progress")
    assert ran.exit_code == 0, ran.output
    refused = CliRunner().invoke(main, ["runs", "export-osworld", str(out / "m"), str(tmp_path / "res")])
    assert refused.exit_code == 2 and "a math run; only an osworld run" in refused.output
    nothing = CliRunner().invoke(main, ["runs", "export-osworld", str(tmp_path), str(tmp_path / "res")])
    assert nothing.exit_code == 2 and "not a run folder" in nothing.output
    assert not (tmp_path / "res").exists()
