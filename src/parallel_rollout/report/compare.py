"""Two runs side by side: what changed from run A (the baseline) to run B.

Only samples final in both runs are paired (their keys, ``task#sample``, match), and only
those graded in both: a sample never graded (an infrastructure failure after its retries) has
no score, so no 0 either, and the comparison says how many shared samples it left out so.
When the two runs cover different samples the comparison is made on the intersection and says
how many samples each run had alone, and why: an unfinished run, other tasks, or another
number of samples per task (``--group-size``: only the samples both have are paired, a
task's first ones). A key both runs have but whose records are of two modes (a py run's
``HumanEval/0`` and a shell task named so) is no shared sample: the same id, another task.
Over the shared samples:

* success rate and mean reward of each run, and McNemar's exact test on pass/fail;
* the Wilcoxon signed-rank test on the rewards (B - A per sample);
* with several samples per task (``--group-size k > 1``) both tests pair tasks, not samples
  (per-task means, ``clustered.py``): a task's k samples are not k independent trials;
* the samples that flipped (pass→fail, fail→pass), by key;
* failure types B has that A never had (``status`` of its final records);
* the speed difference: rollout time p50/mean of each run and wall time from the summaries.

``Comparison.regressed`` is what ``--compare-to`` gates on: B's success rate is lower and
the pass/fail test calls the difference significant; ``cannot_judge`` says why there is no
verdict at all (no shared sample, an unfinished baseline: exit 5), and ``warnings`` what
weakens one (few shared samples, an unfinished run, task files whose sha256 differ).
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ..records import ran
from .clustered import paired_tests, reward, task_of
from .run_data import RunData
from .runs import live_status
from .stats import PairedResult

#: fewer shared samples than this and the comparison warns: McNemar's exact test cannot
#: reach p < 0.05 with fewer than 6 discordant pairs
FEW_SHARED = 10


def _data_hashes(data: RunData) -> list[str]:
    """The sha256s of the run's task data (summary.json's provenance); none for a folder
    hashed whole by an older version (every .json under it, the runs written inside it too):
    that hash says nothing of the tasks."""
    made = ((data.summary or {}).get("provenance") or {}).get("data") or []
    if any(isinstance(d, dict) and "files" in d and "file_sha256" not in d for d in made):
        return []
    return [str(d.get("sha256")) for d in made if isinstance(d, dict) and d.get("sha256")]


def _samples_per_task(data: RunData) -> int:
    """The run's samples per task: its ``--group-size`` (config.json), else the most final
    samples a task has."""
    size = data.config.get("group_size") if isinstance(data.config, dict) else None
    if isinstance(size, int) and not isinstance(size, bool) and size > 0:
        return size
    return max(Counter(task_of(r) for r in data.finals.values()).values(), default=1)


def _mode(record: dict[str, Any]) -> str | None:
    """The mode a record was run in (results.jsonl's ``mode``), or None where it is missing."""
    mode = record.get("mode")
    return mode if isinstance(mode, str) and mode else None


def _modes(finals: dict[str, dict[str, Any]]) -> list[str]:
    """The modes of a run's final records, sorted."""
    return sorted({m for m in map(_mode, finals.values()) if m})


def _other_tasks(finals_a: dict[str, dict[str, Any]], finals_b: dict[str, dict[str, Any]], keys: set[str]) -> set[str]:
    """The keys of both runs whose records are of different modes: the same id, another task."""
    return {k for k in keys if None not in (_mode(finals_a[k]), _mode(finals_b[k]))
            and _mode(finals_a[k]) != _mode(finals_b[k])}


def _timing(data: RunData) -> dict[str, float | None]:
    # of the attempts that ran, as summary.json's: one whose lease failed is no rollout
    durations = sorted(r["duration_s"] for r in data.records if isinstance(r.get("duration_s"), (int, float)) and ran(r))
    wall = ((data.fitting_summary or {}).get("timing_s") or {}).get("wall")
    return {
        "rollout_p50_s": round(statistics.median(durations), 4) if durations else None,
        "rollout_mean_s": round(statistics.fmean(durations), 4) if durations else None,
        "wall_s": wall,
    }


@dataclass
class Comparison:
    """The difference from run A to run B over their shared samples."""

    run_a: str
    run_b: str
    shared: int
    only_a: int
    only_b: int
    success_rate_a: float | None
    success_rate_b: float | None
    mean_reward_a: float | None
    mean_reward_b: float | None
    pass_fail: PairedResult
    rewards: PairedResult
    pass_to_fail: list[str] = field(default_factory=list)
    fail_to_pass: list[str] = field(default_factory=list)
    new_failure_types: dict[str, int] = field(default_factory=dict)
    speed_a: dict[str, float | None] = field(default_factory=dict)
    speed_b: dict[str, float | None] = field(default_factory=dict)
    #: tasks among the shared samples; the tests pair tasks when fewer than ``shared``
    tasks: int = 0
    #: each run's status (RunData.status: complete, interrupted, partial), its samples
    #: (RunData.total; None when nothing says) and its task data's sha256s
    status_a: str = "complete"
    status_b: str = "complete"
    total_a: int | None = None
    total_b: int | None = None
    data_a: list[str] = field(default_factory=list)
    data_b: list[str] = field(default_factory=list)
    #: samples final in both runs but left out of ``shared``: never graded in A or in B
    ungraded: int = 0
    #: tasks with a final sample in one run and none in the other
    tasks_only_a: int = 0
    tasks_only_b: int = 0
    #: each run's samples per task (its --group-size)
    samples_per_task_a: int = 1
    samples_per_task_b: int = 1
    #: keys final in both runs but of another mode in each (not paired: counted in only_a
    #: and only_b), and each run's modes
    other_mode: int = 0
    modes_a: list[str] = field(default_factory=list)
    modes_b: list[str] = field(default_factory=list)

    def unfinished(self, side: str) -> str | None:
        """"A is unfinished (interrupted: 2 of 12 samples final)" unless that run is complete
        (or ended with samples never graded: those are left out, and said so)."""
        status = self.status_a if side == "A" else self.status_b
        if status in ("complete", "ungraded"):
            return None
        total = self.total_a if side == "A" else self.total_b
        final = self.shared + self.ungraded + (self.only_a if side == "A" else self.only_b)
        return f"{side} is unfinished ({status}: {final} of {'?' if total is None else total} samples final)"

    def differences(self) -> list[str]:
        """Why the runs' samples differ, in words (none when they are the same): an unfinished
        run, tasks in one run only, another number of samples per task."""
        if self.same_samples:
            return []
        out = [side for side in (self.unfinished("A"), self.unfinished("B")) if side]
        if self.other_mode:
            out.append(f"the runs' modes differ ({self._modes_said()}): {self.other_mode} sample id(s) "
                       "in both are another task in each, not paired")
        elif not out and (self.tasks_only_a or self.tasks_only_b):
            out.append("the task sets differ")
        a, b = self.samples_per_task_a, self.samples_per_task_b
        if a != b:
            paired = "#0" if min(a, b) == 1 else f"#0 to #{min(a, b) - 1}"
            out.append(f"the runs have different samples per task (A {a}, B {b}: --group-size): "
                       f"only the samples both have are paired, {paired} of each task")
        return out or ["the samples differ"]

    @property
    def cannot_judge(self) -> str | None:
        """Why a gate on this comparison cannot pass or fail (no shared samples, an unfinished
        baseline), or None."""
        baseline = self.unfinished("A")  # first: a baseline stopped before its first result shares none
        if baseline:
            return f"the baseline {baseline}"
        if self.shared == 0:
            if self.other_mode:
                return f"the runs share no final sample of one mode ({self._modes_said()})"
            return ("the runs share no final sample" if not self.ungraded else
                    f"the runs share no graded sample ({self.ungraded} shared ones never graded)")
        return None

    def _modes_said(self) -> str:
        """"A py, B shell": each run's modes."""
        return f"A {', '.join(self.modes_a) or '?'}, B {', '.join(self.modes_b) or '?'}"

    @property
    def warnings(self) -> list[str]:
        """What makes the comparison weaker than it looks."""
        out = []
        if self.data_a and self.data_b and self.data_a != self.data_b:
            in_both = self.shared + self.ungraded
            # "same ids" only of samples the runs share: runs with none in common have no id
            # whose task could have changed
            ids = ("" if not in_both else ": same ids, maybe not the same tasks" if self.same_samples
                   else f": {in_both} sample ids in common, maybe not the same tasks")
            out.append(f"the runs' task files differ (sha256 {', '.join(h[:12] for h in self.data_a)} in A, "
                       f"{', '.join(h[:12] for h in self.data_b)} in B){ids}")
        if 0 < self.shared < FEW_SHARED:
            out.append(f"only {self.shared} shared samples: too few for the test to find a regression")
        out += [side for side in (self.unfinished("A"), self.unfinished("B")) if side]
        return out

    @property
    def clustered(self) -> bool:
        """Whether the tests paired tasks (several shared samples per task) instead of samples."""
        return self.tasks < self.shared

    @property
    def same_samples(self) -> bool:
        """Whether both runs had exactly the same final samples."""
        return self.only_a == 0 and self.only_b == 0

    @property
    def regressed(self) -> bool:
        """B is worse than A on pass/fail and the pass/fail test says it is no accident."""
        return len(self.pass_to_fail) > len(self.fail_to_pass) and self.pass_fail.significant

    def test_notes(self) -> tuple[str, str]:
        """How the pass/fail and the reward tests came out, in words (text and page)."""
        pf, rw = self.pass_fail, self.rewards
        if not self.shared:  # "McNemar exact p=1, not significant" said a test of nothing
            return ("no shared sample: no test", "no shared sample: no test")

        def verdict(result: PairedResult) -> str:
            return "significant" if result.significant else "not significant"

        if self.clustered:
            return (f"Wilcoxon signed-rank by task p={pf.p_value:.4g} over {pf.pairs} differing tasks, {verdict(pf)}",
                    f"Wilcoxon signed-rank by task p={rw.p_value:.4g} over {rw.pairs} differing tasks, {verdict(rw)}")
        return (f"McNemar exact p={pf.p_value:.4g}, {verdict(pf)}",
                f"Wilcoxon signed-rank p={rw.p_value:.4g} over {rw.pairs} differing samples, {verdict(rw)}")

    def to_json(self) -> dict[str, Any]:
        """Plain JSON of the comparison (what compare.json holds)."""
        return {
            "run_a": self.run_a, "run_b": self.run_b,
            "shared_samples": self.shared, "only_in_a": self.only_a, "only_in_b": self.only_b,
            "left_out_never_graded": self.ungraded,
            "tasks_only_in_a": self.tasks_only_a, "tasks_only_in_b": self.tasks_only_b,
            "samples_per_task": {"a": self.samples_per_task_a, "b": self.samples_per_task_b},
            "modes": {"a": self.modes_a, "b": self.modes_b}, "other_mode_in_both": self.other_mode,
            "shared_tasks": self.tasks, "clustered_by_task": self.clustered,
            "success_rate": {"a": self.success_rate_a, "b": self.success_rate_b},
            "mean_reward": {"a": self.mean_reward_a, "b": self.mean_reward_b},
            "pass_fail_test": vars(self.pass_fail) | {"significant": self.pass_fail.significant},
            "reward_test": vars(self.rewards) | {"significant": self.rewards.significant},
            "pass_to_fail": self.pass_to_fail, "fail_to_pass": self.fail_to_pass,
            "new_failure_types": self.new_failure_types,
            "speed": {"a": self.speed_a, "b": self.speed_b},
            "regressed": self.regressed, "cannot_judge": self.cannot_judge, "warnings": self.warnings,
        }


def compare_runs(a: RunData, b: RunData, *, b_live: bool = False) -> Comparison:
    """Compare run B against the baseline run A; ``b_live``: B may be a run going on now in
    another process (the compare command), said ``running`` rather than ``partial``."""
    finals_a, finals_b = a.finals, b.finals
    in_both = set(finals_a) & set(finals_b)
    other_mode = _other_tasks(finals_a, finals_b, in_both)
    in_both -= other_mode
    # a sample never graded in either run has no score to compare (no 0 either)
    shared = sorted(k for k in in_both if not finals_a[k].get("infrastructure")
                    and not finals_b[k].get("infrastructure"))
    pairs = [(finals_a[k], finals_b[k]) for k in shared]
    pass_to_fail = [k for k, (ra, rb) in zip(shared, pairs) if ra.get("success") and not rb.get("success")]
    fail_to_pass = [k for k, (ra, rb) in zip(shared, pairs) if not ra.get("success") and rb.get("success")]

    def rate(rs: list[dict[str, Any]]) -> float | None:
        return round(sum(1 for r in rs if r.get("success")) / len(rs), 4) if rs else None

    def mean_reward(rs: list[dict[str, Any]]) -> float | None:
        return round(statistics.fmean(reward(r) for r in rs), 4) if rs else None

    side_a = [ra for ra, _ in pairs]
    side_b = [rb for _, rb in pairs]
    types_a = {r.get("status") for r in finals_a.values()}
    failures_b = Counter(r.get("status") for r in side_b if not r.get("success"))
    pass_fail, rewards = paired_tests(pairs)
    tasks_a = {task_of(r) for r in finals_a.values()}
    tasks_b = {task_of(r) for r in finals_b.values()}
    return Comparison(
        run_a=a.run_id, run_b=b.run_id, shared=len(shared),
        only_a=len(finals_a) - len(in_both), only_b=len(finals_b) - len(in_both), ungraded=len(in_both) - len(shared),
        success_rate_a=rate(side_a), success_rate_b=rate(side_b),
        mean_reward_a=mean_reward(side_a), mean_reward_b=mean_reward(side_b),
        pass_fail=pass_fail, rewards=rewards,
        pass_to_fail=pass_to_fail, fail_to_pass=fail_to_pass,
        new_failure_types={str(t): n for t, n in sorted(failures_b.items(), key=str) if t not in types_a},
        speed_a=_timing(a), speed_b=_timing(b), tasks=len({task_of(ra) for ra, _ in pairs}),
        # the baseline may be going on now (last night's job still running); B too, unless it
        # is the run being gated by --compare-to, which holds its own lock
        status_a=live_status(a.run_dir, a.status()),
        status_b=live_status(b.run_dir, b.status()) if b_live else b.status(),
        total_a=a.total, total_b=b.total,
        data_a=_data_hashes(a), data_b=_data_hashes(b),
        tasks_only_a=len(tasks_a - tasks_b), tasks_only_b=len(tasks_b - tasks_a),
        samples_per_task_a=_samples_per_task(a), samples_per_task_b=_samples_per_task(b),
        other_mode=len(other_mode), modes_a=_modes(finals_a), modes_b=_modes(finals_b),
    )


def format_comparison(c: Comparison, *, max_keys: int = 50) -> str:
    """The comparison as plain text, for the terminal and compare.txt."""

    def pct(v: float | None) -> str:
        return "-" if v is None else f"{v:.1%}"

    def num(v: float | None) -> str:
        return "-" if v is None else f"{v:g}"

    def secs(v: float | None) -> str:  # none known: "-", not "-s"
        return "-" if v is None else f"{v:g}s"

    lines = [f"compare {c.run_a} (A) -> {c.run_b} (B)"]
    unfinished = [side for side in (c.unfinished("A"), c.unfinished("B")) if side]
    if c.same_samples:
        lines.append(f"samples: {c.shared} in both runs")
    else:
        lines.append(f"samples: {'; '.join(c.differences())}; compared on the intersection of {c.shared} samples "
                     f"({c.only_a} only in A, {c.only_b} only in B)")
    if c.ungraded:
        lines.append(f"left out: {c.ungraded} shared sample(s) never graded in A or B (an infrastructure "
                     "failure after its retries: no score, so no 0 either)")
    lines += [f"warning: {w}" for w in c.warnings if w not in unfinished]
    if c.cannot_judge:
        lines.append(f"verdict: none: {c.cannot_judge}")
    if c.clustered:
        lines.append(f"tests pair the {c.tasks} tasks (their samples' means), not the {c.shared} samples: "
                     "a task's samples are not independent")
    pass_fail_note, reward_note = c.test_notes()
    lines += [
        f"success rate: {pct(c.success_rate_a)} -> {pct(c.success_rate_b)}  ({pass_fail_note})",
        f"mean reward:  {num(c.mean_reward_a)} -> {num(c.mean_reward_b)}  ({reward_note})",
    ]
    for label, keys in (("pass -> fail", c.pass_to_fail), ("fail -> pass", c.fail_to_pass)):
        shown = ", ".join(keys[:max_keys]) + (f", … ({len(keys) - max_keys} more)" if len(keys) > max_keys else "")
        lines.append(f"{label}: {len(keys)}" + (f": {shown}" if keys else ""))
    if c.new_failure_types:
        lines.append("new failure types in B: " + ", ".join(f"{t} ({n})" for t, n in c.new_failure_types.items()))
    else:
        lines.append("new failure types in B: none")
    sa, sb = c.speed_a, c.speed_b
    lines.append(f"rollout time p50: {secs(sa.get('rollout_p50_s'))} -> {secs(sb.get('rollout_p50_s'))}"
                 f"{_ratio(sa.get('rollout_p50_s'), sb.get('rollout_p50_s'))}; "
                 f"wall: {secs(sa.get('wall_s'))} -> {secs(sb.get('wall_s'))}"
                 f"{_ratio(sa.get('wall_s'), sb.get('wall_s'))}")
    if c.regressed:
        lines.append("verdict: B regressed significantly")
    return "\n".join(lines)


def _ratio(a: float | None, b: float | None) -> str:
    if not a or b is None:
        return ""
    return f" ({b / a:.2f}x)"
