"""The threads that run the pool's provider calls: kept between calls, never waited for.

A reset begins inside ``release``, under the pool's lock. Starting a new thread there made
the caller wait until that thread ran (``Thread.start`` blocks on it), and the new thread
first ran the reset's Python up to its first blocking call, holding the GIL: on 2 cores the
release's answer took 0.6–1.5 ms and every other lease and release waited on the lock
meanwhile (``benchmarks/perf/README.md``). ``CallThreads.start`` hands the call to an idle
thread through a queue instead, and starts a new thread only when none is idle; a thread
that stays idle for ``IDLE_EXIT_S`` exits, so the threads number the calls that ran at once.

Each call is a ``Call``: ``join(timeout)`` and ``is_alive()`` as a thread's, so that shutdown
waits for the calls under way, each until its own deadline.
"""

from __future__ import annotations

import queue
import threading
from typing import Any, Callable

#: how long an idle thread waits for its next call before it exits, seconds
IDLE_EXIT_S = 30.0


class Call:
    """One provider call: ``target(*args)`` in one of the threads."""

    __slots__ = ("target", "args", "_done")

    def __init__(self, target: Callable[..., Any], args: tuple) -> None:
        self.target, self.args = target, args
        self._done = threading.Event()

    def join(self, timeout: float | None = None) -> None:
        """Wait until the call has returned (or raised), at most ``timeout`` seconds."""
        self._done.wait(timeout)

    def is_alive(self) -> bool:
        """True until the call has returned (or raised)."""
        return not self._done.is_set()


class CallThreads:
    """Runs calls in reusable daemon threads; ``finished(call)`` runs after each call."""

    def __init__(self, finished: Callable[[Call], None], name: str = "pool-call") -> None:
        self._finished, self._name = finished, name
        self._calls: queue.SimpleQueue[Call] = queue.SimpleQueue()
        self._lock = threading.Lock()
        #: threads waiting for a call, less the calls already queued for them
        self._idle = 0

    def start(self, call: Call) -> None:
        """Start ``call`` in an idle thread (a new one if none is) and return at once."""
        with self._lock:
            if self._idle:
                self._idle -= 1
                self._calls.put(call)
                return
        threading.Thread(target=self._serve, args=(call,), name=self._name, daemon=True).start()

    def _serve(self, call: Call | None) -> None:
        while call is not None:
            try:
                call.target(*call.args)
            finally:
                try:
                    self._finished(call)
                finally:
                    call._done.set()  # noqa: SLF001 - Call is this module's own
            call = self._next()

    def _next(self) -> Call | None:
        with self._lock:
            self._idle += 1
        try:
            return self._calls.get(timeout=IDLE_EXIT_S)
        except queue.Empty:
            pass
        with self._lock:
            try:  # a call queued for this thread just as it gave up waiting
                return self._calls.get_nowait()
            except queue.Empty:
                self._idle -= 1
                return None
