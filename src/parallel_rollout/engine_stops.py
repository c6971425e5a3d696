"""A run's stop signals as the engine hears them: ``Engine.cut_grace`` (the second signal).

The front end's signal handler calls these (the batch Runner's ``_on_signal``); they only set
flags, safe in a signal handler, which the engine's start and shutdown read (the backends
through ``EngineHooks``). The state is the engine's (``self``).
"""

from __future__ import annotations


class EngineStops:
    """The engine's stop signals; the state is the engine's (``self``)."""

    _grace_cut = False  # a second stop signal: a close() waits for no attempt

    def cut_grace(self) -> None:
        """Stop at once: a close() under way, or to come, kills the workers and their attempts
        without waiting out its grace, then stops the VMs as ever. Safe in a signal handler:
        it sets a flag the shutdown reads (every tick), no record is cut half written."""
        self._grace_cut = True

    @property
    def grace_cut(self) -> bool:
        """True once ``cut_grace`` was called."""
        return self._grace_cut
