"""A run's stop signals as the engine hears them: ``Engine.stop_within`` (the first signal, with
its grace) and ``Engine.cut_grace`` (the second).

The front end's signal handler calls these (the batch Runner's ``_on_signal``); they only set
flags, safe in a signal handler, which the engine's start and shutdown read (the backends
through ``EngineHooks``). The state is the engine's (``self``).
"""

from __future__ import annotations

import time


class EngineStops:
    """The engine's stop signals; the state is the engine's (``self``)."""

    _grace_cut = False  # a second stop signal: a close() waits for no attempt
    _stop_by: float | None = None  # a first stop signal: when its grace ends

    def stop_within(self, grace: float) -> None:
        """A first stop signal: the run stops, what is under way given ``grace`` seconds; what
        the start waits on (a Ray node's sweep of the run's leftovers) waited for that long at
        most, then cancelled as by ``cut_grace``. Safe in a signal handler (it sets a time)."""
        if self._stop_by is None:
            self._stop_by = time.monotonic() + grace

    @property
    def stopping(self) -> bool:
        """True once a stop signal came: nothing more starts."""
        return self._stop_by is not None or self._grace_cut

    @property
    def stop_due(self) -> bool:
        """True once a second signal cut the grace, or the first one's grace has passed."""
        return self._grace_cut or (self._stop_by is not None and time.monotonic() >= self._stop_by)

    def cut_grace(self) -> None:
        """Stop at once: a close() under way, or to come, kills the workers and their attempts
        without waiting out its grace, then stops the VMs as ever. Safe in a signal handler:
        it sets a flag the shutdown reads (every tick), no record is cut half written."""
        self._grace_cut = True

    @property
    def grace_cut(self) -> bool:
        """True once ``cut_grace`` was called."""
        return self._grace_cut
