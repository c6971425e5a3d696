"""Cancelling a submitted sample: ``Engine.cancel(key)`` and what the engine thread does of it.

A sample still queued is dropped at once. One running is marked cancelled: the engine thread
sends its worker a ``Cancel`` (the worker aborts the attempt's model request and ends the
episode, else at its next turn), and with ``cancel_grace_s`` kills the holder of an attempt
that has not let go by then (its worker, and with it the worker's other loops). No record
of a cancelled attempt is delivered and its ``on_final`` is never called (``Engine.record``
drops it). The state is the engine's (``self``): its submissions, queue and lock.
"""

from __future__ import annotations

import time

from .messages import Cancel


class EngineCancels:
    """The engine's cancels; the state is the engine's (``self``)."""

    #: seconds a cancelled attempt has before its worker (and its other loops) is killed; None: never
    cancel_grace_s: float | None = None

    def cancel(self, key: str) -> bool:
        """Abandon a submitted sample; False when it is unknown or already final."""
        with self._lock:
            sub = self._subs.get(key)
            if sub is None or sub.cancelled:
                return False
            self.stats.cancelled += 1
            queued = [item for item in self._pending if item.key == key]
            if queued:
                self._pending.remove(queued[0])
                self._settle(key)
                return True
            sub.cancelled = True
            sub.cancel_deadline = None if self.cancel_grace_s is None else time.monotonic() + self.cancel_grace_s
            self._cancelled.add(key)
        self._bell.ring()
        return True

    def _enforce_cancels(self) -> None:
        """On the engine thread: tell each cancelled attempt's worker once, and kill the
        holder of one that outlives ``cancel_grace_s``; forget those settled meanwhile."""
        now = time.monotonic()
        with self._lock:
            if not self._cancelled:
                return
            # settled ones are gone (a key submitted again is a new, uncancelled submission)
            cancelled = [sub for sub in map(self._subs.get, self._cancelled) if sub is not None and sub.cancelled]
            self._cancelled = {sub.item.key for sub in cancelled}
        for sub in cancelled:
            item = sub.item
            if not self.backend.holds(item):
                with self._lock:  # settled meanwhile (its record was dropped)
                    self._settle(item.key)
                continue
            if not sub.cancel_sent:
                sub.cancel_sent = True
                self.backend.send_cancel(Cancel(item.key, item.attempt))
            elif sub.cancel_deadline is not None and now > sub.cancel_deadline:
                sub.cancel_deadline = None
                self.backend.kill_holder(item, f"cancelled attempt {item.attempt} of {item.key} "
                                                   f"did not stop within {self.cancel_grace_s:g}s")
