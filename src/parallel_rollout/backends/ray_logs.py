"""What the ray backend's actors warn, brought to the driver's log: its console (at its
level) and run.log, as a local worker's lines are (``logs``: ``[rollout-worker-3] …``).

::

    node: PoolActor / WorkerActor                       driver (the engine's thread, or the close's)
    parallel_rollout logger ─► KeptLines (WARNING+) ─┬─ report(), every second ─► take_reports ─┐
                                                     ├─ run()'s record, kill_children() ────────┼─► said_on_driver
                                                     └─ Ray's KV ─► last_words ─────────────────┘
                                                        (as logged; read as it dies or is killed)

* **No channel of its own.** A Ray actor's own log goes to Ray's worker log files on its node
  (the driver connects with ``log_to_driver=False``: Ray's forwarding printed every actor's
  stderr, Ray's own lines too, across the progress bar and never into run.log). Its warnings
  and errors of the project's loggers are kept instead (``KeptLines``) and travel with what
  the driver takes from the actor anyway: a pool's with its report (every second, and after
  its shutdown), a worker's with the record of the attempt it ran (and, for what it said
  between attempts, with the answer to the kill at the run's end). Each is taken once: a line
  comes once, and a line an actor logged before its last answer is never lost, but for an
  actor that dies first:
* **Last words.** A worker or a pool that dies on its own (its process killed, an
  ``os._exit`` in its agent or provider) answers nothing more: the lines it logged since its
  last record or report, often the cause, were left in Ray's log files on its node. So an
  actor's kept lines are also written, as each is logged, to the cluster's key-value store
  (Ray's GCS, which outlives any worker node: ``LAST_WORDS_NS``, one key each under its
  spawn's or its pool's), cleared when an answer takes them; the driver reads and deletes its
  key when it dies (before the death's own warning: a pool's as its node is lost) and when it
  was killed (after the kill's answer, or without one). Each line is still said once. A
  store that fails (a head that does not answer) is not written again: the lines then travel
  only with the answers. The keys are under the run's Ray job (``run_lines_key``): a run
  deletes, as it starts and ends, its own and those of drivers that are dead, killed before
  they read them (``forget_last_words``); it never reads another run's.
* **Named by actor and node**: ``worker w3 on node 1a2b3c4d``, ``VM pool on node 1a2b3c4d``, the
  record's process name, as a local worker's is ``rollout-worker-3``.
* **In the run's words.** The driver says each line through the rewrite of whoever started the
  run (``logs.reworded``: a Python ``run()``'s keywords, an RL trainer's RunConfig fields),
  taken as the backend starts: the lines the run's end brings are handled on the thread that
  closes the engine, which may be the trainer's, outside any rewrite.
* **Start marks.** The same store carries a sweep's word that it started on its node
  (``mark_start``, ``marked``: ``ray_cluster.Sweeps`` counts the sweep's cut-off from it, not
  from Ray's start of a worker process there), each under its driver's Ray job as the last
  words are: the driver deletes a mark as it reads it, its own left as its sweeps end, and
  those of dead drivers (killed before they read them) as its sweeps start (``forget_marks``).

Nothing here imports Ray: ``--backend local`` never needs it.
"""

from __future__ import annotations

import logging
import logging.handlers
import pickle
import threading
import uuid
from typing import Any, Callable

from ..logs import PROJECT_LOGGER, dispatch

#: the key of a record (``WorkerActor.run``'s) and of a report (``PoolActor.report``) that
#: holds the actor's lines (the driver takes it out)
LOG_LINES = "log_lines"


#: the namespace of the cluster's key-value store that holds the workers' last words
LAST_WORDS_NS = "parallel_rollout.last_words"
#: the namespace of the marks of the sweeps that started on their node (``mark_start``)
SWEEP_MARKS_NS = "parallel_rollout.sweep_started"
#: seconds a write, read or delete there may take (a head that does not answer)
LAST_WORDS_WAIT_S = 2.0


def _store() -> Any:
    """The cluster's key-value store (Ray's GCS client), None when not connected."""
    from ray.experimental.internal_kv import internal_kv_get_gcs_client

    return internal_kv_get_gcs_client()


class KeptLines(logging.handlers.QueueHandler):
    """An actor's handler: each WARNING-and-above record of the project's loggers, its message
    formatted (so it pickles) and its process name the actor's, kept until the driver takes it;
    with a ``key``, written under it in the cluster's store too, until taken (a worker's)."""

    def __init__(self, name: str, key: str | None = None) -> None:
        super().__init__(queue=None)  # type: ignore[arg-type]
        self.setLevel(logging.WARNING)
        #: the actor's name in the driver's log (the record's process name)
        self.name_said = name
        #: where its last words are stored (None: not stored, or the store failed)
        self.key = key
        #: how many it stored (each record under ``<key>:<n>``), and whether some are not taken
        self._count = 0
        self._stored = False
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
            self._write(record)

    def take(self) -> list[logging.LogRecord]:
        """The records kept since the last take (cleared from the store)."""
        with self._lock:
            records, self._records = self._records, []
            if self._stored:
                self._write(None)
        return records

    def _write(self, record: logging.LogRecord | None) -> None:
        """Store ``record`` under the key's next number (None: delete every one stored); a
        failure stops the storing."""
        if self.key is None:
            return
        try:
            store, space = _store(), LAST_WORDS_NS.encode()
            if record is None:
                store.internal_kv_del(f"{self.key}:".encode(), True, space, timeout=LAST_WORDS_WAIT_S)
            else:
                self._count += 1
                store.internal_kv_put(f"{self.key}:{self._count}".encode(), pickle.dumps(record), True, space,
                                      timeout=LAST_WORDS_WAIT_S)
            self._stored = record is not None
        except Exception:  # noqa: BLE001 - never raised into a logging call: the answers still carry them
            self.key = None


def keep_lines(name: str, key: str | None = None) -> KeptLines:
    """In an actor: its project loggers' warnings and errors kept for the driver, said as
    ``name``'s (stored under ``key`` until taken, if given); the handler, whose ``take`` the
    actor's answers carry."""
    handler = KeptLines(name, key)
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


def run_lines_key() -> str:
    """On the driver, connected: a run's part of the store of last words (or of its sweeps'
    start marks), under its Ray job (its driver's connection, whose death tells
    ``forget_last_words`` and ``forget_marks`` a killed driver's)."""
    import ray

    return f"{ray.get_runtime_context().get_job_id()}/{uuid.uuid4().hex}"


def forget_last_words(run_key: str) -> None:
    """On the driver, at a run's start and end: delete what the store holds of this run
    (``run_key``'s: a worker never read, the head lost meanwhile) and of runs whose driver is
    dead (killed: nothing read their workers' lines), so that it does not grow run after run.
    Another live driver's are kept; a store that does not answer is left as it is."""
    _forget(run_key, LAST_WORDS_NS)


def forget_marks(run_key: str) -> None:
    """On the driver, as its sweeps start and end: delete the start marks (``mark_start``,
    keyed ``<run_key>:<node>``) of ``run_key``'s sweeps and of drivers that are dead (killed
    before they read them), as ``forget_last_words`` does the last words."""
    _forget(run_key, SWEEP_MARKS_NS)


def _forget(run_key: str, namespace: str) -> None:
    """Delete the keys of ``namespace`` (each ``<job>/<run>:<name>``) of ``run_key`` and of the
    Ray jobs that are dead; nothing when the store does not answer."""
    try:
        store, space = _store(), namespace.encode()
        if store is None or not (keys := store.internal_kv_keys(b"", space, timeout=LAST_WORDS_WAIT_S)):
            return
        jobs = store.get_all_job_info(skip_submission_job_info_field=True, skip_is_running_tasks_field=True,
                                      timeout=LAST_WORDS_WAIT_S)
        alive = {job.hex() for job, info in jobs.items() if not info.is_dead}
        runs = {key.split(b":", 1)[0] for key in keys}
        for run in runs:
            if run == run_key.encode() or run.split(b"/", 1)[0].decode() not in alive:
                store.internal_kv_del(run + b":", True, space, timeout=LAST_WORDS_WAIT_S)
    except Exception:  # noqa: BLE001 - a head that does not answer: left for the next run to delete
        pass


def mark_start(key: str) -> None:
    """In a task: ``key`` stored in the cluster's store (``SWEEP_MARKS_NS``), saying it started
    (``ray_cluster.Sweeps``); nothing when the store does not answer (the driver's backstop)."""
    try:
        _store().internal_kv_put(key.encode(), b"1", True, SWEEP_MARKS_NS.encode(), timeout=LAST_WORDS_WAIT_S)
    except Exception:  # noqa: BLE001 - the sweep goes on; its node has the backstop's time
        pass


def marked(keys: list[str]) -> set[str]:
    """On the driver: those of ``keys`` a task stored (``mark_start``), deleted from the store;
    none when it does not answer."""
    try:
        store, space = _store(), SWEEP_MARKS_NS.encode()
        found = store.internal_kv_multi_get([key.encode() for key in keys], space, timeout=LAST_WORDS_WAIT_S)
        for key in found:
            store.internal_kv_del(key, False, space, timeout=LAST_WORDS_WAIT_S)
        return {key.decode() for key in found}
    except Exception:  # noqa: BLE001 - a head that does not answer: asked again at the next settle
        return set()


def last_words(key: str | None) -> list[logging.LogRecord]:
    """On the driver: what a worker stored under ``key`` and no answer took (``KeptLines``),
    deleted from the store; none if the store does not answer within ``LAST_WORDS_WAIT_S``."""
    if key is None:
        return []
    try:
        store, prefix, space = _store(), f"{key}:".encode(), LAST_WORDS_NS.encode()
        if store is None or not (keys := store.internal_kv_keys(prefix, space, timeout=LAST_WORDS_WAIT_S)):
            return []
        values = store.internal_kv_multi_get(keys, space, timeout=LAST_WORDS_WAIT_S)
        store.internal_kv_del(prefix, True, space, timeout=LAST_WORDS_WAIT_S)
        return [pickle.loads(values[k]) for k in sorted(values, key=lambda k: int(k.rsplit(b":", 1)[1]))]
    except Exception:  # noqa: BLE001 - a head that does not answer, records that do not load
        return []
