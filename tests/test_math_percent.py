"""math: a percent sign is the answer's value (3% is 0.03), unless the problem speaks of percent.

math-verify takes ``9\\%`` for 9 (a "what percent" question's gold is often the bare number), so
a policy that appended ``\\%`` to every answer was never worse off and was paid for a slip of a
factor 100 too: ``\\boxed{3\\%}`` scored for an answer of 3 and of 0.03, ``\\boxed{300\\%}`` for
300 and 3. Through a run of the Runner, as a trainer's rewards come.

The agent below is imported by spawned workers as ``test_math_percent:…``, so this module
imports nothing from conftest.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from parallel_rollout.agents import Agent
from parallel_rollout.config import build_config
from parallel_rollout.runner import Runner

#: task id -> (problem, the task's answer, the reply, its reward)
CASES = {
    # a percent sign on an answer that is no percentage is its value: 3% is 0.03, not 3
    "count-3": ("How many apples are left?", "3", "So \\boxed{3\\%}.", 0.0),
    "count-300": ("How many pages did she read?", "300", "\\boxed{300\\%}", 0.0),
    "count-plain": ("How many pages did she read?", "300", "\\boxed{300}", 1.0),
    # ... and is right where its value is
    "prob-0.03": ("What is the probability of a red ball?", "0.03", "\\boxed{3\\%}", 1.0),
    "ratio-3": ("By what factor did the price grow?", "3", "Answer: $300\\%$", 1.0),
    "frac": ("What share of the cake is left?", "\\frac{1}{8}", "\\boxed{12.5\\%}", 1.0),
    # a problem that asks for a percent: its bare number is the answer, with or without the sign
    "asks-percent": ("What percent of the students passed?", "25", "\\boxed{25\\%}", 1.0),
    "asks-percent-sign": ("What is $5$ as a \\% of $20$?", "25", "\\boxed{25\\%}", 1.0),
    "asks-percent-bare": ("What percent of the students passed?", "25", "\\boxed{25}", 1.0),
    # an answer that has the sign itself
    "gold-percent": ("How did the price change?", "25\\%", "\\boxed{25\\%}", 1.0),
    "gold-percent-value": ("How did the price change?", "25\\%", "\\boxed{0.25}", 1.0),
}


class PercentAgent(Agent):
    """Replies the case's reply to its task."""

    def reset(self, task) -> None:
        self.reply = CASES[task.id][2]

    def act(self, observation):
        return self.reply


def test_a_percent_sign_is_the_answers_value_unless_a_percent_is_asked(tmp_path: Path):
    pytest.importorskip("math_verify")
    data = tmp_path / "percent.jsonl"
    data.write_text("".join(json.dumps({"id": task_id, "mode": "math", "problem": problem, "answer": answer}) + "\n"
                            for task_id, (problem, answer, _, _) in CASES.items()))
    outcome = Runner(build_config(dict(mode="math", data=str(data), agent="test_math_percent:PercentAgent",
                                       num_rollouts=1, progress=False, output_dir=str(tmp_path / "out"),
                                       run_id="p", task_timeout=60))).run()
    assert outcome.exit_code in (0, 1), outcome.message
    records = [json.loads(line) for line in (outcome.run_dir / "results.jsonl").read_text().splitlines()]
    rewards = {r["task_id"]: r["reward"] for r in records}
    assert rewards == {task_id: reward for task_id, (_, _, _, reward) in CASES.items()}, \
        {r["task_id"]: r["eval"] for r in records if r["reward"] != CASES[r["task_id"]][3]}
