"""Callers of one scheduler's ``get_batch`` from several threads: they take turns.

A call's state is the scheduler's own (the groups it needs, whether a trainer waits, the
step, the budget's deadline), so two calls under way at once overwrote each other's: the one
that returned first left the other waiting with generation stopped (``async_generation_ratio=0``
starts no group while no call waits), until its timeout or for ever. So each call waits
for the one under way to return, then runs as if it had come alone::

    thread A  get_batch(4) ───────────────► batch
    thread B      get_batch(2) ···waits···  ──────► batch (the next groups)

The wait counts against the call's ``timeout`` (``BatchTimeout`` saying what it waited for);
``close()`` ends it (``SchedulerClosed``), as it ends a call waiting for its groups. A
``get_batch`` made from inside a call on the same thread (a task source's or a group
filter's code calling back) could never get its turn: ``RolloutError`` at once.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Iterator

from ..errors import RolloutError
from .budget import BatchTimeout, check_timeout


class TakingTurns:
    """get_batch calls one at a time; the state (``self._cond``, ``self._wait``) is the scheduler's."""

    #: the thread whose get_batch is under way (None: none), and when it was called (its
    #: timeout counts from then: ``BatchBudget.begin``)
    _caller: int | None = None
    _called_at: float | None = None

    @contextlib.contextmanager
    def _turn(self, timeout: float | None) -> Iterator[None]:
        """Wait for this thread's turn at get_batch (see the module docstring)."""
        check_timeout(timeout)
        me, called_at = threading.get_ident(), time.monotonic()
        deadline = None if timeout is None else called_at + timeout
        with self._cond:
            if self._caller == me:
                raise RolloutError(f"get_batch on scheduler {self.name!r} was called from inside a get_batch of "
                                   "the same thread (a task source or group filter calling back?): it could "
                                   "never run")
        try:  # the turn is given back whatever ends the call, a Ctrl-C included
            with self._cond:
                while self._caller is not None:
                    if deadline is not None and time.monotonic() >= deadline:
                        raise BatchTimeout(f"get_batch timed out after {timeout:g}s waiting for the get_batch "
                                           f"another thread is making on scheduler {self.name!r} (calls take turns)")
                    self._wait()
                self._caller, self._called_at = me, called_at
            yield
        finally:
            with self._cond:
                if self._caller == me:
                    self._caller = self._called_at = None
                    self._cond.notify_all()
