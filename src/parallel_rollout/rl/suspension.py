"""Who suspended the policy gate, and since when: what a waiting ``get_batch`` and ``stats()`` say.

``suspend()`` from one thread and ``resume()`` from another is legitimate (a controller's
thread per call), so a ``get_batch`` of another thread waits on a shut gate. But a thread
that suspended and then died (an exception in the trainer's weight-sync thread) leaves that
wait without end and silent. So a ``get_batch`` waiting on a gate whose suspending thread
has ended warns, once ``ORPHANED_WARN_S`` after the suspend and again every
``ORPHANED_REPEAT_S`` while it lasts, naming the thread and ``resume()``; ``stats()`` says
whether the gate is suspended, since when and by which thread, and whether it still runs.
The get_batch keeps waiting (the resume may still come); ``timeout=`` bounds it.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

log = logging.getLogger("parallel_rollout")

#: seconds the gate stays shut, its suspending thread ended, before a waiting get_batch warns:
#: past a weight update's usual length, so that a controller resuming from a thread of its
#: own (legitimate) is rarely told
ORPHANED_WARN_S = 60.0
#: seconds between the warnings while that lasts
ORPHANED_REPEAT_S = 300.0


class Suspension:
    """The engine's suspend: the thread whose ``suspend()`` shut the gate, until a ``resume()``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: the Thread itself, not its id, which a thread started after it ended may be given again
        self.by: threading.Thread | None = None
        #: when the gate was shut (wall clock, for stats; monotonic, for the warnings)
        self._since: float | None = None
        self._since_mono = 0.0
        self._warned_at: float | None = None

    def suspended(self) -> None:
        """This thread shuts the gate (a second suspend keeps the first one's time)."""
        with self._lock:
            self.by = threading.current_thread()
            if self._since is None:
                self._since, self._since_mono = time.time(), time.monotonic()
            self._warned_at = None

    def resumed(self) -> None:
        with self._lock:
            self.by, self._since, self._warned_at = None, None, None

    def said(self) -> str:
        """Who shut the gate, for an error: `` by thread 'x'``, and whether it has ended
        without resume() (then only another thread's resume opens it)."""
        with self._lock:
            by = self.by
        if by is None:
            return ""
        return f" by thread {by.name!r}" + ("" if by.is_alive() else ", which has ended without resume(policy_version)")

    def state(self, gate_open: bool) -> dict[str, Any]:
        """``stats()``'s keys: suspended, suspended_since (epoch seconds), suspended_by (the
        thread's name), suspended_by_alive."""
        with self._lock:
            by = self.by if not gate_open else None
            return {"suspended": not gate_open, "suspended_since": self._since if not gate_open else None,
                    "suspended_by": by.name if by is not None else None,
                    "suspended_by_alive": by.is_alive() if by is not None else None}

    def warn_if_orphaned(self, gate_open: bool, scheduler: str) -> None:
        """Warn (``ORPHANED_WARN_S`` after the suspend, then every ``ORPHANED_REPEAT_S``)
        when a get_batch of ``scheduler`` waits on a gate whose suspending thread has ended."""
        with self._lock:
            by, now = self.by, time.monotonic()
            if gate_open or by is None or by.is_alive() or now - self._since_mono < ORPHANED_WARN_S:
                return
            if self._warned_at is not None and now - self._warned_at < ORPHANED_REPEAT_S:
                return
            self._warned_at = now
            shut_for = now - self._since_mono
        log.warning("get_batch on scheduler %r waits on the policy gate, suspended %.0f s ago by thread %r, "
                    "which has ended without resume(): no model request goes out until some thread calls "
                    "resume(policy_version), and if none is to, this get_batch never returns "
                    "(get_batch(timeout=) bounds the wait)", scheduler, shut_for, by.name)
