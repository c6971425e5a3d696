"""Statistics that respect groups: with ``--group-size k > 1`` the unit is the task, not the sample.

The k samples of one task share its prompt and its seed, so their outcomes are correlated:
a task the model cannot solve fails k times. Counting them as k independent trials makes
intervals too narrow and paired tests see k "discordant pairs" where there is one task that
changed, so a nightly ``--compare-to`` gate fires on noise. As inspect_ai's epoch reducers
and Miller's "Adding Error Bars to Evals" (2024) recommend, the statistics here cluster by
task (``task_id`` of the records):

* ``success_interval``: the success rate (successes / samples) with a 95% interval. With one
  sample per task it is the Wilson interval, as before. With more, the cluster-robust
  (linearised, CR1) variance of the ratio estimator gives an effective sample size
  ``n_eff = p(1-p) / var`` (Kish's design effect), and the Wilson interval is taken at
  ``n_eff``: wider when a task's samples agree, never narrower than the naive one, still
  inside [0, 1].
* ``paired_tests``: pairs run A and run B over their shared samples. With one shared sample
  per task, McNemar's exact test on pass/fail and the Wilcoxon signed-rank test on rewards,
  per sample, as before. With more, each task is one pair: its mean success in A and in B,
  and its mean reward; both tests are the Wilcoxon signed-rank test over the tasks'
  differences (B - A), whose ranks make a task whose k samples all flipped weigh more than
  one where a single sample did. At one sample per task the pass/fail version reduces to
  the sign test McNemar's is.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import Any, Iterable, Sequence

from .stats import PairedResult, mcnemar_exact, signed_rank_test, wilson_at, wilson_interval


def task_of(record: dict[str, Any]) -> str:
    """The task a record is a sample of (its key before ``#`` when task_id is missing)."""
    task = record.get("task_id")
    return str(task) if task is not None else str(record.get("key", "")).rsplit("#", 1)[0]


def by_task(records: Iterable[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Records grouped by task, in first-seen order."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        groups[task_of(record)].append(record)
    return dict(groups)


def effective_size(groups: Sequence[tuple[int, int]]) -> float:
    """Kish's effective number of independent trials of (successes, samples) per task: the
    samples, shrunk by how much a task's samples agree (at most the samples)."""
    n = sum(size for _, size in groups)
    successes = sum(s for s, _ in groups)
    tasks = len(groups)
    p = successes / n
    if tasks < 2 or p in (0.0, 1.0):
        # one task: its samples are independent draws of its own rate; all agree: no spread
        return float(n)
    # CR1 linearised variance of the ratio estimator sum(y) / sum(m)
    var = tasks / (tasks - 1) * sum((s - p * size) ** 2 for s, size in groups) / n ** 2
    if var <= 0:
        return float(n)
    return min(float(n), p * (1 - p) / var)


def success_interval(records: Iterable[dict[str, Any]]) -> tuple[float, float] | None:
    """The 95% interval of the success rate of ``records`` (final ones), clustered by task."""
    groups = [(sum(1 for r in rs if r.get("success")), len(rs)) for rs in by_task(records).values()]
    n = sum(size for _, size in groups)
    successes = sum(s for s, _ in groups)
    if n == 0:
        return None
    if all(size == 1 for _, size in groups):
        return wilson_interval(successes, n)
    p = successes / n
    low, high = wilson_at(p, effective_size(groups))
    # exact at the ends, as wilson_interval is
    return (0.0 if successes == 0 else low), (1.0 if successes == n else high)


def is_grouped(records: Iterable[dict[str, Any]]) -> bool:
    """Whether some task has more than one of ``records``."""
    return any(len(rs) > 1 for rs in by_task(records).values())


def paired_tests(pairs: Sequence[tuple[dict[str, Any], dict[str, Any]]]) -> tuple[PairedResult, PairedResult]:
    """(pass/fail test, reward test) of B against A over shared samples ``(record A, record B)``,
    clustered by task when a task has several of them."""
    per_task: dict[str, list[tuple[dict[str, Any], dict[str, Any]]]] = defaultdict(list)
    for ra, rb in pairs:
        per_task[task_of(ra)].append((ra, rb))
    if all(len(ps) == 1 for ps in per_task.values()):
        pass_to_fail = sum(1 for ra, rb in pairs if ra.get("success") and not rb.get("success"))
        fail_to_pass = sum(1 for ra, rb in pairs if not ra.get("success") and rb.get("success"))
        return (mcnemar_exact(pass_to_fail, fail_to_pass),
                signed_rank_test([reward(rb) - reward(ra) for ra, rb in pairs]))
    success_diffs, reward_diffs = [], []
    for ps in per_task.values():
        success_diffs.append(sum(bool(rb.get("success")) - bool(ra.get("success")) for ra, rb in ps) / len(ps))
        reward_diffs.append(sum(reward(rb) - reward(ra) for ra, rb in ps) / len(ps))
    return _by_task(signed_rank_test(success_diffs)), _by_task(signed_rank_test(reward_diffs))


def _by_task(result: PairedResult) -> PairedResult:
    """A test run over tasks says so in its name (``pairs`` then counts tasks)."""
    return dataclasses.replace(result, test=result.test + "_by_task")


def reward(record: dict[str, Any]) -> float:
    """A record's reward, 0.0 when it has none."""
    value = record.get("reward")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0
