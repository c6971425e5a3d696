"""math: a reply that states its answer as a formula without \\boxed{} is graded on that formula.

Models that do not box their answer end with it in math delimiters ("The probability is
$\\frac{1}{2}$."): the answer is the formula, not the last digit inside it (2), which scored
every such correct fraction, root or expression 0. Through the CLI and the openai agent.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from conftest import ROOT, read_results, write_tasks
from llm_server import first_user_message, llm_server, reply_with_counts  # noqa: F401 - fixture
from parallel_rollout.cli import main

#: task id -> a correct reply without \boxed{}
REPLIES = {
    "math-004": "Adding with the common denominator 12 gives $\\frac{9}{12} + \\frac{10}{12} = \\frac{19}{12}$.",
    "math-013": "Taking the square root, the positive solution is $x = 2\\sqrt{3}$.",
    "math-019": "Solving $y = 2x + 3$ for $x$ gives \\(f^{-1}(x) = \\frac{x-3}{2}\\)",
    "math-014": "**Answer:** the larger root is $1+\\sqrt{3}$, by the quadratic formula.",
    # and a bare last number, which worked, stays right
    "math-001": "Multiplying out, the result is 346.",
}


def test_an_unboxed_formula_answer_is_graded_on_the_formula(tmp_path, llm_server, monkeypatch):  # noqa: F811
    pytest.importorskip("math_verify")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    tasks = [t for t in map(json.loads, (ROOT / "benchmarks" / "math_tasks.jsonl").read_text().splitlines())
             if t["id"] in REPLIES]
    assert len(tasks) == len(REPLIES)

    def policy(body):
        task = next(t for t in tasks if t["problem"] in first_user_message(body))
        return reply_with_counts(body, REPLIES[task["id"]])

    server = llm_server(policy=policy)
    result = CliRunner().invoke(main, ["run", "--mode", "math", "--data", str(write_tasks(tmp_path / "m.jsonl", tasks)),
                                       "--agent", "openai", "--base-url", server.url, "--model", "m",
                                       "--num-rollouts", "1", "--output-dir", str(tmp_path / "out"),
                                       "--run-id", "m", "--no-progress"])
    records = read_results(tmp_path / "out" / "m")
    graded = {r["task_id"]: (r["eval"]["extracted"], r["eval"]["reason"]) for r in records}
    assert all(reason == "correct" for _, reason in graded.values()), graded
    assert graded["math-004"][0] == "\\frac{9}{12} + \\frac{10}{12} = \\frac{19}{12}"
    assert result.exit_code == 0 and len(records) == len(REPLIES), result.output[-2000:]
