"""What the ray backend's actors warn, brought to the driver's log: its console (at its
level) and run.log, as a local worker's lines are (``logs``: ``[rollout-worker-3] …``).

::

    node: PoolActor / WorkerActor                       driver (the engine's thread, or the close's)
    parallel_rollout logger ─► KeptLines (WARNING+) ─┬─ report(), every second ─► take_reports ─┐
                                                     └─ run()'s record, kill_children() ────────┴─► said_on_driver
                                                                                                    └─► logs.dispatch

* **No channel of its own.** A Ray actor's own log goes to Ray's worker log files on its node
  (the driver connects with ``log_to_driver=False``: Ray's forwarding printed every actor's
  stderr, Ray's own lines too, across the progress bar and never into run.log). Its warnings
  and errors of the project's loggers are kept instead (``KeptLines``) and travel with what
  the driver takes from the actor anyway: a pool's with its report (every second, and after
  its shutdown), a worker's with the record of the attempt it ran (and, for what it said
  between attempts, with the answer to the kill at the run's end). Each is taken once: a line
  comes once, and a line an actor logged before its last answer is never lost.
* **Named by actor and node**: ``worker w3 on node 1a2b3c4d``, ``VM pool on node 1a2b3c4d``, the
  record's process name, as a local worker's is ``rollout-worker-3``.
* **In the run's words.** The driver says each line through the rewrite of whoever started the
  run (``logs.reworded``: a Python ``run()``'s keywords, an RL trainer's RunConfig fields),
  taken as the backend starts: the lines the run's end brings are handled on the thread that
  closes the engine, which may be the trainer's, outside any rewrite.

Nothing here imports Ray: ``--backend local`` never needs it.
"""

from __future__ import annotations

import logging
import logging.handlers
import threading
from typing import Any, Callable

from ..logs import PROJECT_LOGGER, dispatch

#: the key of a record (``WorkerActor.run``'s) and of a report (``PoolActor.report``) that
#: holds the actor's lines (the driver takes it out)
LOG_LINES = "log_lines"


class KeptLines(logging.handlers.QueueHandler):
    """An actor's handler: each WARNING-and-above record of the project's loggers, its message
    formatted (so it pickles) and its process name the actor's, kept until the driver takes it."""

    def __init__(self, name: str) -> None:
        super().__init__(queue=None)  # type: ignore[arg-type]
        self.setLevel(logging.WARNING)
        #: the actor's name in the driver's log (the record's process name)
        self.name_said = name
        self._records: list[logging.LogRecord] = []
        self._lock = threading.Lock()

    def prepare(self, record: logging.LogRecord) -> logging.LogRecord:
        """The record made picklable (``QueueHandler``'s), named as the actor."""
        record = super().prepare(record)
        record.processName = self.name_said
        return record

    def enqueue(self, record: logging.LogRecord) -> None:
        """Keep the record for the driver."""
        with self._lock:
            self._records.append(record)

    def take(self) -> list[logging.LogRecord]:
        """The records kept since the last take."""
        with self._lock:
            records, self._records = self._records, []
        return records


def keep_lines(name: str) -> KeptLines:
    """In an actor: its project loggers' warnings and errors kept for the driver, said as
    ``name``'s; the handler, whose ``take`` the actor's answers carry."""
    handler = KeptLines(name)
    project = logging.getLogger(PROJECT_LOGGER)
    project.addHandler(handler)
    if project.getEffectiveLevel() > logging.WARNING:  # Ray's own level for its workers may be higher
        project.setLevel(logging.WARNING)
    return handler


def said_on_driver(records: list[Any] | None, rewrite: Callable[[str], str] | None) -> None:
    """On the driver: an actor's kept records handled by their loggers here (run.log, the
    console at its level), said through ``rewrite``, the words of whoever started the run."""
    for record in records or ():
        if isinstance(record, logging.LogRecord):
            dispatch(record, rewrite)
