"""Attempt records: the one place their dicts are built.

A record is one line of ``results.jsonl``: one attempt of one sample, JSON values only. Every
kind of record starts from the same fields (``RECORD_FIELDS``), so that statistics per tag,
per status and per worker see every attempt, whoever wrote it:

* ``new_record`` — what a worker's attempt starts as (status ``None`` until it ends), then
  ``finish`` stamps its end;
* ``failed_record`` — an attempt that ended in an exception: a worker's loop that failed
  outside ``run_attempt``, or one its worker could not write at all (the worker died, or
  ran past its deadline: the backend writes it);
* ``unserializable_record`` — what is kept of a record that is not plain JSON;
* ``unstorable_record`` — what stands for a record results.jsonl cannot hold (a NaN, a lone
  surrogate): its sample's final ``unstorable_result`` failure;
* ``unsupported_record`` — a sample ``--skip-unsupported`` left out (never attempted).

Fields added later by their owners: ``trajectory`` and ``env_s`` (the worker: seconds in the
env's reset, steps and grading), ``vms`` and ``lease_wait_s`` (the leaser), ``eval`` (the
env), ``node`` (the ray backend), ``final`` and ``run_id`` (the engine).
"""

from __future__ import annotations

import time
import traceback
from typing import Any

#: characters of a traceback kept in a record
TRACEBACK_TAIL = 4000

#: every record has these keys
RECORD_FIELDS = ("key", "task_id", "sample_idx", "attempt", "mode", "tags", "status", "reward",
                 "success", "infrastructure", "failure", "turns", "worker", "pid", "slot", "vm",
                 "lease_wait_s", "started_at", "ended_at", "duration_s", "usage")

#: what an unserializable record keeps beyond RECORD_FIELDS (values of the engine's own making)
_KEPT_WHEN_UNSERIALIZABLE = ("meta", "trajectory", "vms")


def new_record(item: Any, *, worker: str | None, pid: int | None, slot: int | None,
               started_at: float) -> dict[str, Any]:
    """The record an attempt (an ``Assignment``) starts as: not ended, no outcome yet."""
    record = _identity(item.key, item.task, item.sample_idx, item.attempt)
    record.update(status=None, reward=0.0, success=False, infrastructure=False, failure=None,
                  turns=0, worker=worker, pid=pid, slot=slot, vm=None, lease_wait_s=None,
                  started_at=round(started_at, 4), ended_at=None, duration_s=None, usage={})
    if item.meta:
        record["meta"] = dict(item.meta)
    return record


def finish(record: dict[str, Any], ended_at: float | None = None) -> dict[str, Any]:
    """Stamp a record's end (``ended_at``, ``duration_s``); returns it."""
    ended = round(time.time() if ended_at is None else ended_at, 4)
    record["ended_at"] = ended
    record["duration_s"] = round(ended - record["started_at"], 4)
    return record


def failure(exc: BaseException, message: str | None = None, with_traceback: bool = True) -> dict[str, Any]:
    """A record's ``failure``: the exception's type, a message, its traceback's tail."""
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)) if with_traceback else ""
    return {"type": type(exc).__name__, "message": message or str(exc)[:2000],
            "traceback": tb[-TRACEBACK_TAIL:]}


def failed_record(item: Any, exc: BaseException, *, worker: str | None, pid: int | None,
                  started_at: float, slot: int | None = None, status: str | None = None,
                  infrastructure: bool | None = None, message: str | None = None,
                  with_traceback: bool = False) -> dict[str, Any]:
    """The record of an attempt that ended in ``exc``, reward 0: its status and whether it
    is an infrastructure failure are the exception's (``kind``, ``infrastructure``) unless
    given."""
    if infrastructure is None:
        infrastructure = bool(getattr(exc, "infrastructure", False))
    record = new_record(item, worker=worker, pid=pid, slot=slot, started_at=started_at)
    record.update(status=status or getattr(exc, "kind", "error"), infrastructure=infrastructure,
                  turns=None, failure=failure(exc, message, with_traceback))
    return finish(record)


def unserializable_record(record: dict[str, Any], exc: BaseException) -> dict[str, Any]:
    """What is kept of a record that is not plain JSON: its identity and times, status
    ``error``, and why."""
    kept = {name: record.get(name) for name in RECORD_FIELDS}
    kept.update({name: record[name] for name in _KEPT_WHEN_UNSERIALIZABLE if name in record})
    kept.update(status="error", reward=0.0, success=False, infrastructure=False, usage={},
                failure={"type": "UnserializableResult",
                         "message": f"the attempt's record is not JSON-serializable: {exc}",
                         "traceback": ""})
    return kept


def unstorable_record(kept: dict[str, Any], what: str) -> dict[str, Any]:
    """The failure that stands for a record results.jsonl cannot hold: ``kept`` is what stays
    of it (its identity and times, made storable by the caller), ``what`` names the value that
    was the trouble; graded 0, final."""
    record = {name: kept.get(name) for name in RECORD_FIELDS}
    record.update(kept)
    record.update(status="unstorable_result", reward=0.0, success=False, infrastructure=False,
                  usage=record["usage"] or {},
                  failure={"type": "UnstorableResult", "traceback": "",
                           "message": f"the attempt's record cannot be stored in results.jsonl: {what}; "
                                      "its agent or env returned a value no JSON line can hold"})
    return record


def unsupported_record(sample: Any, features: list[str]) -> dict[str, Any]:
    """The final record of a sample that --skip-unsupported left out: scored 0, so that the
    success rate's denominator is the whole task set (OSWorld's)."""
    now = time.time()
    task = sample.task
    record = _identity(sample.key, task, sample.sample_idx, 0)
    record.update(status="unsupported", reward=0.0, success=False, infrastructure=False,
                  failure={"type": "Unsupported", "traceback": "",
                           "message": f"{task.source}: unsupported: {', '.join(features)}"},
                  turns=None, worker=None, pid=None, slot=None, vm=None, lease_wait_s=None,
                  started_at=round(now, 4), usage={})
    return finish(record, now)


def _identity(key: str, task: Any, sample_idx: int, attempt: int) -> dict[str, Any]:
    return {"key": key, "task_id": task.id, "sample_idx": sample_idx, "attempt": attempt,
            "mode": task.mode, "tags": list(task.tags)}
