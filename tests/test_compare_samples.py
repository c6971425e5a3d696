"""compare of two runs whose samples differ says why: another --group-size is not another task set."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from conftest import ROOT, write_tasks
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
