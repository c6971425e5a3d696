"""Statistics with ``--group-size k > 1``: intervals and paired tests cluster by task.

The runs here come from a seeded random policy, as an RL nightly's do: each task has a true
success probability p; within one run the k samples of a task share the task's seed, so
they mostly agree (each copies the group's shared draw with probability 0.9, else draws
afresh; either way a sample succeeds with probability p). Two runs of the same policy under
two seeds differ only by noise; the gate (``compare --check``, exit 4) must stay quiet on
them, where counting samples as independent made it fire, and must still fire when every
task's p drops. The last test does the same through real runs: ``run --group-size 6
--compare-to`` against the chat server answering as such a policy.
"""

from __future__ import annotations

import json
import time
import os
import random
import re
import subprocess
import sys

import pytest
from click.testing import CliRunner

from llm_server import first_user_message, llm_server  # noqa: F401 - fixture

from parallel_rollout.cli import main
from parallel_rollout.exit_codes import EXIT_REGRESSION
from parallel_rollout.report.clustered import paired_tests, success_interval
from parallel_rollout.report.stats import mcnemar_exact, wilson_interval

scipy_stats = pytest.importorskip("scipy.stats")

TASKS, K = 30, 8


def seeded_policy_run(run_seed: int, *, drop: float = 0.0, agree: float = 0.9) -> list[dict]:
    """Final records of one run of the seeded policy (task probabilities fixed by seed 0)."""
    policy = random.Random(0)
    probabilities = [policy.uniform(0.15, 0.85) for _ in range(TASKS)]
    rng = random.Random(run_seed)
    records = []
    for i, p in enumerate(probabilities):
        p = max(0.0, p - drop)
        shared = rng.random() < p
        for j in range(K):
            ok = shared if rng.random() < agree else rng.random() < p
            records.append({"key": f"t{i}#{j}", "task_id": f"t{i}", "sample_idx": j, "attempt": 0,
                            "final": True, "mode": "math", "success": ok, "reward": float(ok),
                            "status": "success" if ok else "wrong_answer"})
    return records


def write_run(out, run_id: str, records: list[dict]) -> None:
    """A finished run's folder as the runner leaves it: config.json, results.jsonl and the
    summary that says it finished (a baseline without one is unfinished: no verdict)."""
    folder = out / run_id
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"run_id": run_id, "config": {"mode": "math", "group_size": K}}))
    (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    from parallel_rollout.results import summarize

    finals = {r["key"] for r in records if r.get("final")}
    summary = summarize(records, total_samples=len(finals), pool_stats=None, started_at=time.time())
    (folder / "summary.json").write_text(json.dumps(summary))


def naive_regression(a: list[dict], b: list[dict]) -> bool:
    """What the gate used to say: McNemar's exact test over samples as if independent
    (checked against scipy's binomial test)."""
    p2f = sum(1 for ra, rb in zip(a, b) if ra["success"] and not rb["success"])
    f2p = sum(1 for ra, rb in zip(a, b) if not ra["success"] and rb["success"])
    p = scipy_stats.binomtest(p2f, p2f + f2p, 0.5).pvalue if p2f + f2p else 1.0
    assert p == pytest.approx(mcnemar_exact(p2f, f2p).p_value)
    return p2f > f2p and p < 0.05


def compare_check(tmp_path, a: list[dict], b: list[dict]):
    out = tmp_path / "out"
    write_run(out, "a", a)
    write_run(out, "b", b)
    return CliRunner().invoke(main, ["compare", "a", "b", "--output-dir", str(out), "--check"])


def test_the_gate_stays_quiet_on_noise_between_two_seeds_of_one_policy(tmp_path):
    # the first seed pair on which counting samples as independent called a regression
    seed = next(s for s in range(200) if naive_regression(seeded_policy_run(2 * s), seeded_policy_run(2 * s + 1)))
    result = compare_check(tmp_path, seeded_policy_run(2 * seed), seeded_policy_run(2 * seed + 1))
    assert result.exit_code == 0, result.output
    assert f"tests pair the {TASKS} tasks" in result.output
    assert "verdict: B regressed" not in result.output
    assert "not significant" in (tmp_path / "out" / "b" / "compare-a.txt").read_text()
    assert f"the tests pair its {TASKS} tasks" in (tmp_path / "out" / "b" / "compare-a.html").read_text()


def test_the_gate_still_fires_on_a_real_drop(tmp_path):
    result = compare_check(tmp_path, seeded_policy_run(0), seeded_policy_run(1, drop=0.4))
    assert result.exit_code == EXIT_REGRESSION, result.output
    assert "verdict: B regressed significantly" in result.output
    p = float(re.search(r"Wilcoxon signed-rank by task p=([0-9.e-]+)", result.output).group(1))
    assert p < 0.05


def test_false_alarms_stay_near_alpha_over_many_seed_pairs():
    """Over 150 noise-only pairs the clustered test calls a regression about as often as its
    5% two-sided level allows (one side: ~2.5%); the per-sample test did so far more often."""
    clustered = naive = 0
    for s in range(150):
        a, b = seeded_policy_run(2 * s), seeded_policy_run(2 * s + 1)
        pass_fail, _ = paired_tests(list(zip(a, b)))
        worse = sum(r["success"] for r in b) < sum(r["success"] for r in a)
        clustered += worse and pass_fail.significant
        naive += naive_regression(a, b)
    assert clustered / 150 <= 0.06
    assert naive / 150 >= 0.15


def test_one_sample_per_task_keeps_mcnemar():
    a = [{"key": f"t{i}#0", "task_id": f"t{i}", "success": i < 8, "reward": float(i < 8)} for i in range(10)]
    b = [{"key": f"t{i}#0", "task_id": f"t{i}", "success": i < 2, "reward": float(i < 2)} for i in range(10)]
    pass_fail, rewards = paired_tests(list(zip(a, b)))
    assert pass_fail.test == "mcnemar_exact" and pass_fail.p_value == pytest.approx(
        scipy_stats.binomtest(6, 6, 0.5).pvalue)
    assert rewards.test.startswith("wilcoxon_signed_rank") and not rewards.test.endswith("_by_task")


def test_the_report_interval_is_clustered_by_task(tmp_path):
    records = seeded_policy_run(5)
    write_run(tmp_path / "out", "r", records)
    result = CliRunner().invoke(main, ["report", str(tmp_path / "out" / "r")])
    assert result.exit_code == 0, result.output
    html = (tmp_path / "out" / "r" / "report.html").read_text()
    low, high = success_interval(records)
    naive_low, naive_high = wilson_interval(sum(r["success"] for r in records), len(records))
    assert high - low > 1.5 * (naive_high - naive_low)  # 8 samples that mostly agree ≈ far fewer trials
    assert f"95% CI {low:.1%}–{high:.1%} (clustered by task" in html
    assert "<th>interval (clustered by task)</th>" in html  # the per-mode table says it too


# -- the same through real runs: `run --group-size K --compare-to` --------------------------

RUN_TASKS, RUN_K = 24, 6


def run_outcome(seed: int, task: int, sample: int, drop: float = 0.0) -> bool:
    """Whether the seeded policy answers sample ``sample`` of task ``task`` right in the run
    seeded ``seed``: the group's shared draw with probability 0.9, else a fresh one."""
    p = max(0.0, random.Random(f"p{task}").uniform(0.15, 0.85) - drop)
    shared = random.Random(f"{seed}/{task}").random() < p
    draw = random.Random(f"{seed}/{task}/{sample}")
    return shared if draw.random() < 0.9 else draw.random() < p


def seeded_model(seed: int, drop: float = 0.0):
    """The chat server's policy: the run's n-th request for a task is its sample n (one
    worker, one env loop: samples go in order), answered right or wrong by ``run_outcome``."""
    seen: dict[int, int] = {}

    def policy(body: dict) -> dict:
        task = int(re.search(r"Task (\d+):", first_user_message(body)).group(1))
        sample = seen[task] = seen.get(task, -1) + 1
        right = run_outcome(seed, task, sample, drop)
        return {"reply": f"so \\boxed{{{2 * task if right else 2 * task + 1}}}"}

    return policy


@pytest.mark.slow
def test_run_compare_to_with_groups_is_quiet_on_noise_and_fires_on_a_drop(tmp_path, llm_server):
    pytest.importorskip("math_verify")
    def outcomes(seed: int, drop: float = 0.0) -> list[dict]:
        return [{"key": f"t{i}#{j}", "task_id": f"t{i}", "success": run_outcome(seed, i, j, drop)}
                for i in range(RUN_TASKS) for j in range(RUN_K)]

    # the first seed pair on which counting samples as independent calls a regression
    seed = next(s for s in range(100) if naive_regression(outcomes(2 * s), outcomes(2 * s + 1)))
    data = tmp_path / "tasks.jsonl"
    data.write_text("".join(json.dumps({"id": f"t{i}", "problem": f"Task {i}: what is {i} plus {i}?",
                                        "answer": str(2 * i)}) + "\n" for i in range(RUN_TASKS)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}

    def run(run_id: str, policy, *flags: str) -> subprocess.CompletedProcess:
        server = llm_server(policy=policy)
        return subprocess.run(
            [sys.executable, "-m", "parallel_rollout", "run", "--mode", "math", "--data", str(data),
             "--agent", "openai", "--base-url", server.url, "--group-size", str(RUN_K), "--num-rollouts", "1",
             "--output-dir", str(tmp_path / "out"), "--run-id", run_id, "--no-progress", *flags],
            capture_output=True, text=True, env=env, timeout=600)

    base = run("base", seeded_model(2 * seed))
    assert base.returncode == 0, base.stderr
    noise = run("noise", seeded_model(2 * seed + 1), "--compare-to", "base")
    assert noise.returncode == 0, noise.stderr
    # the records are the seeded policy's, and per sample they would have "regressed"
    finals = {name: sorted((r for r in map(json.loads, (tmp_path / "out" / name / "results.jsonl").open())
                            if r["final"]), key=lambda r: (int(r["task_id"][1:]), r["sample_idx"]))
              for name in ("base", "noise")}
    assert [r["success"] for r in finals["base"]] == [r["success"] for r in outcomes(2 * seed)]
    assert naive_regression(finals["base"], finals["noise"])
    assert f"tests pair the {RUN_TASKS} tasks" in (tmp_path / "out" / "noise" / "compare-base.txt").read_text()

    drop = run("drop", seeded_model(2 * seed + 1, drop=0.4), "--compare-to", "base")
    assert drop.returncode == EXIT_REGRESSION, drop.stderr
    assert "significant regression against base" in drop.stderr
    assert f"Wilcoxon signed-rank over {RUN_TASKS} tasks" in " ".join(drop.stderr.split())
