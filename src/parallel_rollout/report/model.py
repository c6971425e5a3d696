"""What the HTML report shows, computed from a run folder: plain data, no markup.

* ``headline``: the numbers of summary.json (success rate, mean reward, pass@k, per mode and
  tag, pass@k per mode and tag too) with a 95% interval beside every rate (Wilson; clustered
  by task when tasks have several samples, clustered.py); a folder without summary.json (a run
  killed hard), or whose summary.json no longer fits its results.jsonl (a resume killed hard:
  ``run_data.summary_fits``), is summarised from its records the same way the runner would.
* ``failure_groups``: final non-successes by type (status), then by message, with counts and
  a few sample keys each.
* ``vm_segments`` / ``worker_segments``: the timelines, as (row, start, end, state) from
  events.jsonl (one row per VM) and from the attempts' start and end (one row per env loop).
* ``sample_rows``: one compact row per sample for the paged table, each naming its attempts'
  trajectories; ``trajectories`` embeds the turns of as many attempts as a size budget
  allows (the table links to the raw file for the rest).
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from ..results import graded, mean_reward, pass_at_k_columns, summarize
from ..trajectories import shown_turn
from .run_data import RunData
from .clustered import is_grouped, success_interval

#: characters of one observation or action kept in the embedded trajectory
TURN_TEXT_LIMIT = 2000
#: total characters of embedded trajectories; a 10,000-sample report stays a few MB
TRAJECTORY_BUDGET = 8_000_000
#: files in an attempt's extra folder shown as images (desktop modes' screenshots)
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".webp")


def headline(data: RunData) -> dict[str, Any]:
    """summary.json's numbers, each rate with its Wilson interval."""
    summary = data.fitting_summary  # one written before results.jsonl last changed is stale
    if summary is None:
        keys = len({r["key"] for r in data.records})
        summary = summarize(data.records, total_samples=keys if data.total is None else max(data.total, keys),
                            pool_stats=None, started_at=data.started_at or time.time())
        summary["run_id"] = data.run_id
    out = dict(summary)
    finals = list(data.finals.values())
    # over the graded samples, as the rate beside it: a never-graded one is no failure
    out["success_ci"] = success_interval(graded(finals))
    out["ci_by_task"] = is_grouped(graded(finals))
    out["ungraded"] = sum(1 for r in finals if r.get("infrastructure"))
    out["pass_at_k"] = {k: v for k, v in summary.items() if k.startswith("pass@")}
    ks = [int(name[len("pass@"):]) for name in out["pass_at_k"]]
    # the tasks each pass@k covers, from the finals (a summary before they were recorded has none)
    out["pass_at_k_cover"] = pass_at_k_columns(finals, ks)[1]
    per_mode = {}
    for mode, row in (summary.get("per_mode") or {}).items():
        moded = [r for r in finals if r.get("mode", "?") == mode]
        values, cover = pass_at_k_columns(moded, ks)
        per_mode[mode] = {**row, "ci": success_interval(graded(moded)), "pass_at_k": values, "pass_at_k_cover": cover}
    per_tag = {}
    for tag, row in (summary.get("per_tag") or {}).items():
        tagged = [r for r in finals if tag in (r.get("tags") or [])]
        successes = sum(1 for r in tagged if r.get("success"))
        # over the graded samples, as summary.json's (an older summary has none per tag)
        values, cover = pass_at_k_columns(tagged, ks)
        per_tag[tag] = {**row, "mean_reward": mean_reward(tagged), "successes": successes,
                        "ci": success_interval(graded(tagged)), "pass_at_k": values, "pass_at_k_cover": cover}
    out["per_mode"], out["per_tag"] = per_mode, per_tag
    return out


def _message(record: dict[str, Any]) -> str:
    failure = record.get("failure") or {}
    if failure.get("message"):
        return str(failure["message"])[:300]
    details = record.get("eval")
    if details:
        return json.dumps(details, ensure_ascii=False, default=str)[:300]
    return f"{record.get('status')} with reward {record.get('reward')}"


def failure_groups(data: RunData, examples: int = 5) -> list[dict[str, Any]]:
    """Final failures by type, most common first; each with its messages, most common first."""
    by_type: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in data.finals.values():
        if not record.get("success"):
            by_type[str(record.get("status"))].append(record)
    groups = []
    for status, records in sorted(by_type.items(), key=lambda item: (-len(item[1]), item[0])):
        by_message: dict[str, list[str]] = defaultdict(list)
        for record in records:
            by_message[_message(record)].append(record["key"])
        messages = [{"message": m, "count": len(keys), "keys": sorted(keys)[:examples]}
                    for m, keys in sorted(by_message.items(), key=lambda item: (-len(item[1]), item[0]))]
        groups.append({"type": status, "count": len(records),
                       "infrastructure": any(r.get("infrastructure") for r in records),
                       "messages": messages[:20], "more_messages": max(0, len(messages) - 20)})
    return groups


def time_span(data: RunData) -> tuple[float, float] | None:
    """(first, last) moment the run folder records, seconds since the epoch."""
    moments = [e["time"] for e in data.events if isinstance(e.get("time"), (int, float))]
    for record in data.records:
        for name in ("started_at", "ended_at"):
            if isinstance(record.get(name), (int, float)):
                moments.append(record[name])
    if not moments:
        return None
    return min(moments), max(moments)


def vm_segments(data: RunData, end: float) -> dict[str, list[tuple[float, float, str]]]:
    """VM id -> its states over time, from the pool's transitions in events.jsonl."""
    rows: dict[str, list[tuple[float, float, str]]] = {}
    current: dict[str, tuple[float, str]] = {}
    for event in data.events:
        vm, to, at = event.get("vm"), event.get("to"), event.get("time")
        if event.get("event") != "vm" or not vm or not to or not isinstance(at, (int, float)):
            continue
        rows.setdefault(vm, [])
        if vm in current:
            since, state = current[vm]
            rows[vm].append((since, at, state))
        current[vm] = (at, to)
    for vm, (since, state) in current.items():
        rows[vm].append((since, max(end, since), state))
    return dict(sorted(rows.items(), key=lambda item: _natural(item[0])))


def worker_segments(data: RunData) -> dict[str, list[tuple[float, float, str, str]]]:
    """Env loop (``w0`` or ``w0.1``) -> its attempts: (start, end, outcome, key)."""
    multi_slot = any((r.get("slot") or 0) > 0 for r in data.records)
    rows: dict[str, list[tuple[float, float, str, str]]] = defaultdict(list)
    for record in data.records:
        start, end = record.get("started_at"), record.get("ended_at")
        if not isinstance(start, (int, float)) or not isinstance(end, (int, float)):
            continue
        row = str(record.get("worker") or "?")
        if multi_slot and record.get("slot") is not None:
            row += f".{record['slot']}"
        rows[row].append((start, end, outcome_class(record), record["key"]))
    return dict(sorted(rows.items(), key=lambda item: _natural(item[0])))


def outcome_class(record: dict[str, Any]) -> str:
    """success, failure (graded) or infra (an infrastructure failure): the colour of a cell."""
    if record.get("success"):
        return "success"
    return "infra" if record.get("infrastructure") else "failure"


def _natural(name: str) -> tuple:
    """vm-2 before vm-10."""
    head = name.rstrip("0123456789.")
    tail = name[len(head):]
    try:
        return (head, [int(part) for part in tail.split(".") if part])
    except ValueError:
        return (name, [])


def sample_rows(data: RunData) -> tuple[list[str], list[list[Any]]]:
    """Columns and one row per sample (its final record, else its last attempt)."""
    attempts: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in data.records:
        attempts[record["key"]].append(record)
    finals = data.finals
    columns = ["key", "task", "mode", "status", "outcome", "reward", "turns", "duration_s",
               "lease_wait_s", "vm", "worker", "attempts", "tags", "message"]
    rows = []
    for key in sorted(attempts, key=_natural):
        tries = attempts[key]
        record = finals.get(key) or tries[-1]
        rows.append([
            key, record.get("task_id"), record.get("mode"),
            record.get("status") if key in finals else f"unfinished ({record.get('status')})",
            outcome_class(record) if key in finals else "unfinished",
            record.get("reward"), record.get("turns"), record.get("duration_s"), record.get("lease_wait_s"),
            record.get("vm"), record.get("worker"),
            [[t.get("attempt"), t.get("status"), t.get("trajectory")] for t in tries],
            record.get("tags") or [],
            "" if record.get("success") else _message(record)[:200],
        ])
    return columns, rows


def _clip(value: Any) -> Any:
    if isinstance(value, str):
        return value if len(value) <= TURN_TEXT_LIMIT else value[:TURN_TEXT_LIMIT] + f"… ({len(value)} chars)"
    text = json.dumps(value, ensure_ascii=False, default=str)
    return value if len(text) <= TURN_TEXT_LIMIT else text[:TURN_TEXT_LIMIT] + f"… ({len(text)} chars)"


def _clip_turn(line: bytes) -> tuple[dict[str, Any], int]:
    """One trajectory line as a turn whose fields are clipped, and its size in characters; a
    request or prompt stored as a delta is shown as what the turn added (``shown_turn``)."""
    if len(line) <= TURN_TEXT_LIMIT:  # the common case: small enough whole, no re-encoding
        try:
            turn = json.loads(line)
            if isinstance(turn, dict):
                return shown_turn(turn), len(line)
        except ValueError:
            pass
    try:
        turn = json.loads(line)
    except ValueError:
        return {"unreadable line": line[:200].decode("utf-8", "replace")}, 250
    turn = shown_turn(turn) if isinstance(turn, dict) else {"value": turn}
    clipped = {name: _clip(value) for name, value in turn.items()}
    return clipped, len(json.dumps(clipped, ensure_ascii=False, default=str))


def trajectories(data: RunData, budget: int = TRAJECTORY_BUDGET) -> dict[str, dict[str, Any]]:
    """Trajectory path -> its turns (clipped) and images, while the budget lasts."""
    out: dict[str, dict[str, Any]] = {}
    used = 0
    for record in data.records:
        rel = record.get("trajectory")
        if not rel or rel in out:
            continue
        path = data.run_dir / rel
        try:
            raw = path.read_bytes()
        except OSError:
            continue
        turns, size = [], 0
        for line in raw.split(b"\n"):
            if line.strip():
                turn, turn_size = _clip_turn(line)
                turns.append(turn)
                size += turn_size
        if used + size > budget:
            break
        used += size
        out[rel] = {"turns": turns, "images": _images(path.with_suffix(""), data.run_dir)}
    return out


def _images(folder: Path, run_dir: Path) -> list[str]:
    """Screenshots of an attempt (its extra folder), relative to the run folder, in step order."""
    if not folder.is_dir():
        return []
    files = [p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES]
    return [str(p.relative_to(run_dir)) for p in sorted(files, key=lambda p: _natural(p.stem))]
