"""Attempt records: the one place their dicts are built.

A record is one line of ``results.jsonl``: one attempt of one sample, JSON values only. Every
kind of record starts from the same fields (``RECORD_FIELDS``), so that statistics per tag,
per status and per worker see every attempt, whoever wrote it:

* ``new_record`` — what a worker's attempt starts as (status ``None`` until it ends), then
  ``finish`` stamps its end;
* ``failed_record`` — an attempt that ended in an exception: a worker's loop that failed
  outside ``run_attempt``, or one its worker could not write at all (the worker died, or
  ran past its deadline: the backend writes it);
* ``unstorable_record`` — what stands for a record results.jsonl cannot hold (a NaN, a lone
  surrogate, an object JSON has no form for): its sample's final ``unstorable_result``
  failure, made by ``replacement_record``, which names every such value by where it is;
* ``unsupported_record`` — a sample ``--skip-unsupported`` left out (never attempted).

Fields added later by their owners: ``trajectory`` and ``env_s`` (the worker: seconds in the
env's reset, steps and grading), ``vms`` and ``lease_wait_s`` (the leaser), ``eval`` (the
env), ``node`` (the ray backend), ``final``, ``never_graded`` and ``run_id`` (the engine).
``sample_ends`` reads them back: the record that ended each sample.
"""

from __future__ import annotations

import json
import math
import os
import re
import reprlib
import sysconfig
import time
import traceback
from typing import Any, Iterator

from .errors import LeaseTimeout, PoolClosed, PoolExhausted
from .task_json import as_written, kind_of

#: characters of a traceback kept in a record
TRACEBACK_TAIL = 4000

#: every record has these keys
RECORD_FIELDS = ("key", "task_id", "sample_idx", "attempt", "mode", "tags", "status", "reward",
                 "success", "infrastructure", "failure", "turns", "worker", "pid", "slot", "vm",
                 "lease_wait_s", "started_at", "ended_at", "duration_s", "usage")

#: the fields of a record that say which attempt it was: kept (made storable) with its usage
#: when its content is dropped
_IDENTITY = ("key", "task_id", "sample_idx", "attempt", "mode", "tags", "turns", "worker", "pid",
             "slot", "vm", "vms", "lease_wait_s", "started_at", "ended_at", "duration_s",
             "trajectory", "meta", "final", "never_graded", "run_id", "usage")
#: the values JSON holds as they are (and the keys it takes)
_SCALARS = (str, int, float, bool, type(None))
#: how many unstorable values a failure's message names
_NAMED = 5


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


def raised_in(failed: dict[str, Any]) -> str:
    """Where a record's ``failure`` was raised in the user's own code (a plugin agent's or
    mode's file): ``file, line N, in func`` of its traceback's innermost frame outside this
    package and Python's standard library, one not under site-packages first; '' for none."""
    frames = _FRAME.findall(failed.get("traceback") or "")
    own = [frame for frame in frames if not frame[0].startswith(_NOT_OWN)]
    if not own:
        return ""
    file, line, func = ([f for f in own if "-packages" + os.sep not in f[0]] or own)[-1]
    return f"{file}, line {line}, in {func}"


#: a traceback's frame line: file, line, function
_FRAME = re.compile(r'^  File "(.+?)", line (\d+), in (.+)$', re.M)
#: the folders whose frames are not the user's: this package's, the standard library's
_NOT_OWN = tuple(dict.fromkeys([os.path.dirname(os.path.abspath(__file__)) + os.sep,
                                *(sysconfig.get_paths()[name] + os.sep for name in ("stdlib", "platstdlib"))]))


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


def replacement_record(record: dict[str, Any], exc: BaseException) -> dict[str, Any]:
    """The failure that stands for a record results.jsonl cannot hold (``unstorable_record``):
    which attempt it was and its usage, made storable, and every value that was the trouble,
    each named by where it is (``field 'usage'['cost'] is nan``); ``exc`` (the encoder's
    error) says it when none is found."""
    found = list(unstorable_values(record))
    what = "; ".join(found[:_NAMED]) + (f"; and {len(found) - _NAMED} more" if len(found) > _NAMED else "")
    replacement = unstorable_record({name: storable(record[name]) for name in _IDENTITY if name in record},
                                    what or f"{type(exc).__name__}: {exc}")
    if record.get("final") is False and record.get("infrastructure") is True:
        # the engine already judged it an infrastructure failure (retried, or never graded:
        # the record a backend built for a dead or timed-out worker): that judgment stands,
        # or a never-graded sample would end as neither final nor never graded
        replacement["infrastructure"] = True
    return replacement


def unstorable_values(value: Any, where: str = "the record", within: frozenset[int] = frozenset()) -> Iterator[str]:
    """Every value no JSON line can hold, and why: a NaN or an infinity, text with a lone
    surrogate, an object JSON has no form for (a set, bytes, a function …), a key that is no
    text or number, a container that holds itself."""
    if isinstance(value, (dict, list, tuple)):
        if id(value) in within:
            yield f"{where} holds itself (a circular reference)"
            return
        within = within | {id(value)}
    if isinstance(value, float) and not math.isfinite(value):
        yield f"{where} is {value} (not a JSON number)"
    elif isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            yield f"{where} holds a lone surrogate ({value[exc.start]!r}, not Unicode text)"
    elif isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, _SCALARS):
                yield from unstorable_values(key, f"a key of {where}")
            else:
                yield f"a key of {where} is {_kind(key)}, not text or a number"
            name = repr(storable(key)) if isinstance(key, _SCALARS) else reprlib.repr(key)
            yield from unstorable_values(item, f"{where}[{name}]" if where != "the record" else f"field {name}",
                                         within)
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from unstorable_values(item, f"{where}[{index}]", within)
    elif not isinstance(value, _SCALARS):
        yield f"{where} is {_kind(value)}, not a JSON value"


def storable(value: Any, within: frozenset[int] = frozenset()) -> Any:
    """``value`` as a JSON line can hold it: every non-finite float and every object JSON has
    no form for made None, every lone surrogate escaped, every other key made text."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, (dict, list, tuple)):
        if id(value) in within:
            return None
        within = within | {id(value)}
        if isinstance(value, dict):
            return {storable(k) if isinstance(k, _SCALARS) else reprlib.repr(k): storable(v, within)
                    for k, v in value.items()}
        return [storable(v, within) for v in value]
    return value if isinstance(value, _SCALARS) else None


def _kind(value: Any) -> str:
    """A value as a message names it: its type, and a short repr."""
    return f"of type {type(value).__name__} ({reprlib.repr(value)})"


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


def ends_sample(record: dict[str, Any], before: dict[str, Any] | None = None) -> bool:
    """Whether ``record`` is (now) the one that ended its sample, ``before`` being the one
    that did so far. Two kinds end a sample: a ``final: true`` record, the one that counts (a
    plain ``select(.final)`` finds it alone), and a ``never_graded: true`` one (``final:
    false``): an infrastructure failure after ``--max-retries``, which has no score (so no 0
    either) and a resume runs again, so that a later final record does not make two. A file
    from before ``never_graded`` marked that one ``final`` too: there the last final record
    ends its sample. A graded final record stays the end (a resume never reruns it)."""
    if not (record.get("final") or record.get("never_graded")):
        return False
    return before is None or not before.get("final") or bool(before.get("infrastructure"))


def record_of(line: bytes, *, attempt: bool = False) -> dict[str, Any]:
    """One line of results.jsonl as its record; a ValueError saying, in JSON's words, why
    the line is none (not JSON, no object, no string 'key'; with ``attempt``, as a resume
    needs it, no whole-number 'attempt'). Every reader of the file says it so."""
    try:
        record = json.loads(line)
    except ValueError as exc:
        raise ValueError(f"not JSON ({exc})") from None
    if not isinstance(record, dict) or "key" not in record:
        raise ValueError("a record is a JSON object with a 'key' field; "
                         + ("this one has none" if isinstance(record, dict) else f"this line is {kind_of(record)}"))
    for name, kind, wanted in (("key", str, True), ("attempt", int, attempt)):
        value = record.get(name)
        if wanted and (not isinstance(value, kind) or isinstance(value, bool)):
            said = "this one has none" if name not in record else f"this one's is {as_written(value)}, {kind_of(value)}"
            raise ValueError(f"a record's {name!r} is {'a string' if kind is str else 'a whole number'}; {said}")
    return record


def sample_ends(records: Any) -> dict[str, dict[str, Any]]:
    """Sample key -> the record that ended it (:func:`ends_sample`): its final record, or the
    last attempt of a sample never graded (``infrastructure`` says which)."""
    ended: dict[str, dict[str, Any]] = {}
    for record in records:
        if ends_sample(record, ended.get(record.get("key"))):
            ended[record["key"]] = record
    return ended


#: the statuses of an attempt that never ran: its lease failed (no VM in time, the pool
#: exhausted or closed) or --skip-unsupported left it out; its duration is no rollout's
NEVER_RAN = (LeaseTimeout.kind, PoolExhausted.kind, PoolClosed.kind, "unsupported")


def ran(record: dict[str, Any]) -> bool:
    """Whether the attempt ran: it got a VM, or ended otherwise than on a failed lease (a mode
    without VMs), and was no sample --skip-unsupported left out."""
    return bool(record.get("vm") or record.get("vms")) or record.get("status") not in NEVER_RAN
