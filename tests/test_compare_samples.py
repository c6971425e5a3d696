"""compare of two runs whose samples differ says why: another --group-size is not another task set."""

from __future__ import annotations

import json

import filelock
import pytest
from click.testing import CliRunner

from conftest import ROOT, shell_task, write_tasks
from parallel_rollout.cli import main

MATH_TASKS = ROOT / "benchmarks" / "math_tasks.jsonl"


def run(tmp_path, run_id: str, data, *flags: str) -> None:
    result = CliRunner().invoke(main, ["run", "--mode", "math", "--data", str(data), "--agent", "oracle",
                                       "--num-rollouts", "1", "--output-dir", str(tmp_path / "out"),
                                       "--run-id", run_id, "--no-progress", *flags])
    assert result.exit_code == 0, result.output[-2000:]


def compare(tmp_path, a: str, b: str) -> tuple[str, str]:
    """compare's output and the page it wrote."""
    result = CliRunner().invoke(main, ["compare", a, b, "--output-dir", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    page = (tmp_path / "out" / b / f"compare-{a}.html").read_text()
    return result.output, page


def test_compare_says_the_runs_differ_in_samples_per_task_not_in_tasks(tmp_path):
    pytest.importorskip("math_verify")
    tasks = [json.loads(line) for line in MATH_TASKS.read_text().splitlines() if line.strip()][:4]
    data = write_tasks(tmp_path / "math.jsonl", tasks)
    run(tmp_path, "one", data)
    run(tmp_path, "three", data, "--group-size", "3")

    out, page = compare(tmp_path, "one", "three")
    assert "the task sets differ" not in out and "the task sets differ" not in page
    said = ("the runs have different samples per task (A 1, B 3: --group-size): "
            "only the samples both have are paired, #0 of each task")
    assert f"samples: {said}; compared on the intersection of 4 samples (0 only in A, 8 only in B)" in out
    assert said in page

    # the other way round, and with tasks only in one run besides
    run(tmp_path, "two-of-five", write_tasks(tmp_path / "more.jsonl", tasks + [{**tasks[0], "id": "extra"}]),
        "--group-size", "2")
    out, _ = compare(tmp_path, "three", "two-of-five")
    assert ("samples: the task sets differ; the runs have different samples per task (A 3, B 2: --group-size): "
            "only the samples both have are paired, #0 to #1 of each task; compared on the intersection of "
            "8 samples (4 only in A, 2 only in B)") in out


SHELL_TASK = {"id": "HumanEval/0", "mode": "shell", "instruction": "Write 1 to ~/x.", "check": "test -f ~/x",
              "reference": ["echo 1 > ~/x"]}


def test_compare_pairs_no_sample_of_another_mode_and_the_gate_gives_no_verdict(tmp_path):
    """A py run's HumanEval/0 and a shell task of that id are two tasks: comparing them
    as a pass/fail pair gave a verdict (exit 0) on nothing shared."""
    out = str(tmp_path / "out")
    common = ["--agent", "oracle", "--num-rollouts", "1", "--output-dir", out, "--no-progress"]
    result = CliRunner().invoke(main, ["run", "--data", "humaneval", "--limit", "1", "--run-id", "py-night", *common])
    assert result.exit_code == 0, result.output[-2000:]
    shell_tasks = write_tasks(tmp_path / "shell.jsonl", [SHELL_TASK])
    gated = CliRunner().invoke(main, ["run", "--data", str(shell_tasks), "--run-id", "shell-night",
                                      "--compare-to", "py-night", *common])
    assert gated.exit_code == 5, gated.output[-2000:]
    assert "--compare-to py-night: no verdict: the runs share no final sample of one mode (A py, B shell)" in gated.output

    result = CliRunner().invoke(main, ["compare", "--check", "py-night", "shell-night", "--output-dir", out])
    assert result.exit_code == 5, result.output
    assert ("samples: the runs' modes differ (A py, B shell): 1 sample id(s) in both are another task in each, "
            "not paired; compared on the intersection of 0 samples (1 only in A, 1 only in B)") in result.output
    assert "success rate: - -> -  (no shared sample: no test)" in result.output, result.output
    page = (tmp_path / "out" / "shell-night" / "compare-py-night.html").read_text()
    assert "the runs&#x27; modes differ (A py, B shell)" in page


def test_compare_says_a_b_going_on_now_is_running_not_partial(tmp_path):
    """B still being written by another process (tonight's run, compared by hand): it said
    `partial`, as of a run that died, which a resume of it then refused with exit 75."""
    out = tmp_path / "out"
    tasks = write_tasks(tmp_path / "tasks.jsonl", [shell_task(f"t{i}") for i in range(3)])
    for run_id in ("a", "b"):
        result = CliRunner().invoke(main, ["run", "--data", str(tasks), "--num-rollouts", "1", "--output-dir", str(out),
                                           "--run-id", run_id, "--no-progress"])
        assert result.exit_code == 0, result.output[-2000:]
    results = out / "b" / "results.jsonl"
    results.write_text("".join(results.read_text().splitlines(keepends=True)[:2]))  # its third sample to come
    with filelock.FileLock(str(out / "b" / ".lock"), timeout=0):
        running = CliRunner().invoke(main, ["compare", "a", "b", "--output-dir", str(out)])
    assert running.exit_code == 0, running.output
    assert "samples: B is unfinished (running: 2 of 3 samples final)" in running.output, running.output
    stopped = CliRunner().invoke(main, ["compare", "a", "b", "--output-dir", str(out)])
    assert "samples: B is unfinished (partial: 2 of 3 samples final)" in stopped.output, stopped.output
