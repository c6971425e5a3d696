"""Calls to Ray actors that the ray backend's engine thread sends and does not wait for.

One engine thread serves every node: dispatch, the attempts' results, timeouts, the progress
and Ctrl-C. A ``ray.get`` there on one actor's answer (a dead worker's VMs reclaimed by its
pool, a killed worker's processes) stopped all of it for every node while that actor's node
was paused, in a GC pause or behind a stalled network, once per dead worker::

    engine thread ── call.remote() ──► actor          (sent; the thread goes on)
         │   Pending: ref → (deadline, then)
         └── each tick: ``settle(ready)`` ── answer, failure, or deadline passed ──► then(...)

The references are watched with the backend's others (``refs``), so an answer wakes the
loop; ``finish`` waits on all of them at once at the end of a run, under their own
deadlines, never one after another. ``answers_within`` is the same wait for calls the
thread needs the answers of now (where late actors are, the pools' shutdown and reports): all
at once, one deadline for all. Nothing here imports Ray at load.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

#: what ``then`` gets: the call's answer, or None and why it has none (its failure, or
#: ``TimeoutError`` when its deadline passed first)
Then = Callable[[Any, "BaseException | None"], None]


@dataclass
class _Call:
    deadline: float
    then: Then


class Pending:
    """The calls sent and not settled, each with its deadline and what to do with its answer."""

    def __init__(self) -> None:
        self._calls: dict[Any, _Call] = {}

    def __len__(self) -> int:
        return len(self._calls)

    def add(self, ref: Any, wait_s: float, then: Then) -> None:
        """Settle ``ref`` with ``then`` once it is ready, or after ``wait_s`` without it."""
        self._calls[ref] = _Call(time.monotonic() + wait_s, then)

    def refs(self) -> list[Any]:
        """The references still awaited (for the engine's wait)."""
        return list(self._calls)

    def settle(self, ready: set[Any]) -> None:
        """Hand each ready call its answer (or its failure), and each late one a TimeoutError."""
        import ray

        now = time.monotonic()
        for ref, call in list(self._calls.items()):
            if ref not in ready and now < call.deadline:
                continue
            del self._calls[ref]
            if ref not in ready:
                call.then(None, TimeoutError("no answer within its wait"))
                continue
            try:
                answer = ray.get(ref, timeout=0)
            except Exception as exc:  # noqa: BLE001 - the actor (or its node) died, or it raised
                call.then(None, exc)
            else:
                call.then(answer, None)

    def finish(self) -> None:
        """Wait for every call at once, up to the last deadline, and settle them all."""
        import ray

        while self._calls:
            left = max(c.deadline for c in self._calls.values()) - time.monotonic()
            refs = list(self._calls)
            done, _ = ray.wait(refs, num_returns=len(refs), timeout=max(0.0, left))
            self.settle(set(done))  # all answered, or every deadline passed: none left


def answers_within(refs: list[Any], wait_s: float, failed: Any = None) -> dict[Any, Any]:
    """The answers of the calls ``refs`` that ended within ``wait_s``, waited for at once under
    one deadline (never ``wait_s`` for each), by reference; a call that failed (its actor died,
    or it raised) answers ``failed``, or ``failed(its exception)`` when that is a function or
    a class; one still under way is left out."""
    import ray

    if not refs:
        return {}
    answers: dict[Any, Any] = {}
    for ref in ray.wait(refs, num_returns=len(refs), timeout=wait_s)[0]:
        try:
            answers[ref] = ray.get(ref, timeout=0)
        except Exception as exc:  # noqa: BLE001 - the actor (or its node) died, or it raised
            answers[ref] = failed(exc) if callable(failed) else failed
    return answers
