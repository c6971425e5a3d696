"""The run engine: one pool, N workers and the dispatch loop, shared by every front end.

Data flow::

    front ends (batch Runner, RL schedulers …)
        │ submit(Assignment, on_final) · cancel(key) · pause() / resume()
        ▼
    pending (deque, retries first) ──dispatch while in flight < C──► RolloutWorker 1..N
        ▲                                                              │ Started … Finished
        └── retry (infrastructure failure)  ◄── engine thread ◄════════╛ (one pipe each)
                                                   │
                                  record_sink(every attempt) · on_final(final record)

**The API** (every method may be called from any thread; callbacks run on the engine's
thread, or on the thread that calls ``close``, and must not block for long)::

    engine = Engine(config, run_dir, run_id="r", modes=["shell"], record_sink=store.append)
    engine.start()               # sweep leftovers, start the pool (if a mode needs VMs) and
                                 # the workers, log "[Concurrency] Set max concurrent
                                 # rollouts to C" once; returns at once
    engine.submit(Assignment(task, sample_idx, attempt, name=..., meta={...}), on_final)
                                 # on_final(record): once, with the sample's last record
                                 # (final, or never_graded after --max-retries)
    engine.cancel(key)           # pending: dropped; running: the worker aborts its model request and
                                 # ends the episode (else at its next turn; no worker is killed, a loop
                                 # ignoring it meets --task-timeout); on_final is never called
    engine.pause(); engine.resume()   # stop / restart dispatching new attempts
    engine.hold_clocks(True/False)    # a weight update: task clocks stop meanwhile
    engine.wait_idle(timeout)    # True once nothing is pending or running
    engine.error                 # None, or why the engine stopped (pool exhausted, manager
                                 # died, results file unwritable); submit then raises
    engine.close(grace=None)     # idempotent: STOP to each worker, records that finish
                                 # within ``grace`` are delivered, the rest killed, every VM
                                 # stopped

* Several front ends share one engine: each submits with its own callback; a key (the
  Assignment's ``name``, else ``task#sample``) names one live submission engine-wide.
  ``--max-concurrent-rollouts`` (``config.concurrency``) is the one limit for all of them:
  an attempt counts from dispatch until its worker reports it (or dies).
* **Workers** (``worker``) each have their own duplex pipe rather than one shared task
  queue and result queue: a worker SIGKILLed while holding a shared queue's lock would stall
  every other worker (the multiprocessing.Pool hang of bpo-22393). The engine thread waits on
  every pipe and every ``Process.sentinel`` at once; a dead worker is handled by its
  backend (``backends``): its acknowledged attempts are recorded ``worker_died`` (and retried), its
  unacknowledged ones go back to the queue, its VMs are reclaimed, a new worker replaces it.
  The in-flight counter is the one semaphore shared by every loop of every worker; unlike a
  ``multiprocessing.Semaphore`` it cannot leak a permit when a holder is killed.
* **Failure policy.** Infrastructure failures (``vm_error``, ``guest_unreachable``,
  ``worker_died``, ``lease_timeout``, ``model_unavailable``) are retried up to ``--max-retries`` and never graded
  (the last attempt is ``never_graded``, not ``final``: no score, not the record that counts;
  a resume runs it again); everything else is a graded, final outcome. ``stop_on`` may stop the
  engine at an attempt instead, which is then not final (the batch runner's, at a model
  endpoint that fails attempt after attempt). The engine accepts at most one record per
  attempt, so nothing is counted twice; every attempt's record goes to ``record_sink`` (with
  ``final`` and ``run_id`` set) before the sample's last goes to ``on_final``.
* **Pool** (``pool.manager``) lives in its own Manager process (``pool.server``); if it dies the engine stops
  with ``error`` set and every finished record already delivered.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from .config import RunConfig
from .doorbell import Doorbell
from .engine_cancels import EngineCancels
from .engine_stops import EngineStops
from .envs import get_env, run_answer_files
from .logs import reworded
from .errors import (AgentNotMade, ConfigError, GuestPrerequisiteMissing, PoolClosed, PoolExhausted,
                     RolloutError, VMSettingsMismatch)
from .messages import Assignment
from .output_checks import EventsFile
from .pool.providers import ProviderOptions, get_provider, provider_options
from .results import StorageError
from .backends import BackendSpec, make_backend

log = logging.getLogger("parallel_rollout")

#: how long one wait for pipes and sentinels lasts; bounds the reaction to a deadline
_TICK_S = 0.2

OnFinal = Callable[[dict[str, Any]], None]


class EngineStopped(RolloutError):
    """The engine is closed or stopped on an error; it takes no more submissions."""

    kind = "engine_stopped"


@dataclass
class _Submission:
    """One sample a front end submitted; lives until its final record (or a cancel)."""

    item: Assignment
    on_final: OnFinal | None
    #: set by cancel(): the attempt under way is abandoned, no record is delivered
    cancelled: bool = False
    #: when a cancelled running attempt's worker gets killed if it has not let go
    cancel_deadline: float | None = None
    #: the worker was told to drop it
    cancel_sent: bool = False


@dataclass
class _Stats:
    submitted: int = 0
    finals: int = 0
    retries: int = 0
    cancelled: int = 0


class Engine(EngineCancels, EngineStops):
    """Long-lived: the pool, the workers, dispatch, deaths, timeouts, retries, shutdown
    (cancels: ``engine_cancels.EngineCancels``; stop signals: ``engine_stops.EngineStops``)."""

    def __init__(self, config: RunConfig, run_dir: str | Path, *, run_id: str | None = None,
                 modes: Iterable[str] | None = None, record_sink: Callable[[dict[str, Any]], None] | None = None,
                 stop_on: Callable[[dict[str, Any]], str | None] | None = None, hidden: Iterable[str] = (),
                 check_provider: bool = True, said: Callable[[str], str] | None = None) -> None:
        self.run_dir = Path(run_dir)
        #: the front end's words for what the engine says of its own: a record's failure (and the
        #: retry event quoting it), why it stopped (``error``), the engine thread's warnings; an RL scheduler's name the
        #: trainer's RunConfig fields where the core says the CLI's flags (``--max-retries 1``)
        self._said = said
        self.run_id = run_id or config.run_id or self.run_dir.name
        # the run id the workers' agents and envs are told (a command agent's read-only folder)
        self.config = config = dataclasses.replace(config, run_id=self.run_id)
        self.modes = tuple(dict.fromkeys(modes or (config.mode,)))
        env_classes = [get_env(mode) for mode in self.modes]
        vm_envs = [cls for cls in env_classes if cls.needs_vm()]
        self.provider_cls = get_provider(config.provider_name) if vm_envs else None
        self.provider_options: ProviderOptions | None = None
        if self.provider_cls is not None:
            if check_provider:  # not for a resume with nothing left to run (Runner.prepare)
                self.provider_cls.check_available()
            self.provider_options = provider_options(config, self.provider_cls, vm_envs,
                                                     run_answer_files(config, vm_envs) + tuple(hidden))
            if check_provider:  # constructing one checks the options it cannot honour (--path-to-vm)
                try:
                    self.provider_cls(self.run_id, self.provider_options)
                except ConfigError as exc:  # said where a config file or a variable gave the setting
                    raise config.said_where_set(exc) from None
        self._sink = record_sink
        #: the front end's reason to stop at an attempt (its record then not final), or None
        self._stop_on = stop_on
        self.error: str | None = None  # why the engine stopped on its own
        #: the fleet's servers the front end's start check found not serving the model
        #: (``model_checks.probe_fleet``): every attempt submitted carries them to its agent
        self.servers_left_out: tuple[str, ...] = ()
        #: those it did not hear (not up then): each worker asks them at their first visit
        self.servers_unheard: tuple[str, ...] = ()
        #: the pool's stats taken after its shutdown (every reset counted), for summaries
        self.final_pool_stats: dict[str, Any] | None = None
        #: a Ray run's nodes as it ended (used, lost, left out), for summaries
        self.final_cluster: dict[str, Any] | None = None
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._pending: deque[Assignment] = deque()
        self._subs: dict[str, _Submission] = {}
        #: cancelled submissions that may still run: the loop scans these, not all (quadratic)
        self._cancelled: set[str] = set()
        self._paused = False
        #: task clocks held (wanted by a front end, applied by the engine thread)
        self._clocks_held = False
        self._clocks_applied = False
        self._closing = False
        self._closed = False
        self._interrupted = False  # a close() a Ctrl-C cut short
        self._close_lock = threading.RLock()  # one close() at a time (a thread's own may nest)
        self._thread: threading.Thread | None = None
        #: the engine thread's doorbell (a non-blocking pipe): one byte for any number of submits
        self._bell = Doorbell()
        self._events = None
        self.stats = _Stats()
        #: the workers and pools (``backends``): it calls back only through ``EngineHooks``
        self.backend = make_backend(BackendSpec(config, self.run_dir, self.run_id, self.provider_cls,
                                                self.provider_options), self)

    # -- the API ---------------------------------------------------------------------------

    @property
    def concurrency(self) -> int:
        """The limit on rollouts in flight, shared by every front end."""
        return self.backend.concurrency

    @property
    def manager_pid(self) -> int | None:
        """The pid of the pool's Manager process (None without a pool)."""
        return self.backend.manager_pid

    def start(self) -> None:
        """Start the pool and the workers and the engine thread; returns at once."""
        with self._lock:
            if self._thread is not None or self._closed:
                raise EngineStopped("the engine was already started")
            self.run_dir.mkdir(parents=True, exist_ok=True)
            (self.run_dir / "trajectories").mkdir(exist_ok=True)
            self._events = EventsFile(self.run_dir / "events.jsonl", repair=True)
            self._bell.open()
            self.backend.start()
            note = self.config.concurrency_note(self.concurrency)  # a cut --max-concurrent-rollouts
            if not self.stopping:  # a stop signal as it started: said after "signal 2: stopping", it misled
                log.log(logging.WARNING if note else logging.INFO, "[Concurrency] Set max concurrent rollouts to %d%s",
                        self.concurrency, note)
            self._thread = threading.Thread(target=self._serve, name="rollout-engine", daemon=True)
            self._thread.start()

    def submit(self, item: Assignment, on_final: OnFinal | None = None) -> None:
        """Queue one attempt; ``on_final(record)`` gets the sample's final record."""
        if self.servers_left_out or self.servers_unheard:  # the start check's verdict, to the worker's model client
            item = dataclasses.replace(item, servers_left_out=self.servers_left_out,
                                       servers_unheard=self.servers_unheard)
        with self._lock:
            if self._closing or self.error is not None:
                raise EngineStopped(self.error or "the engine is closed")
            if item.key in self._subs:
                raise ValueError(f"{item.key} is already submitted to this engine")
            self._subs[item.key] = _Submission(item, on_final)
            self._pending.append(item)
            self.stats.submitted += 1
        self._bell.ring()

    def pause(self) -> None:
        """Dispatch no new attempt until ``resume``; those running go on."""
        with self._lock:
            self._paused = True

    def resume(self) -> None:
        """Dispatch again."""
        with self._lock:
            self._paused = False
        self._bell.ring()

    def hold_clocks(self, held: bool) -> None:
        """Stop (``held``) or restart the task clocks of every attempt, those started
        meanwhile included: time waiting for a weight update is not the task's time."""
        with self._lock:
            self._clocks_held = held
        self._bell.ring()

    def in_flight(self) -> int:
        """Attempts sent to workers and not settled."""
        return self.backend.in_flight()

    def pending(self) -> int:
        """Attempts waiting for a worker."""
        with self._lock:
            return len(self._pending)

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until nothing is submitted and unsettled (True), or ``timeout`` passes."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            while self._subs and self.error is None and not self._closed:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._changed.wait(remaining if remaining is not None else _TICK_S)
            return not self._subs

    def worker_pids(self) -> dict[str, int | None]:
        """Each live worker's id and pid (None while a Ray actor starts)."""
        return self.backend.worker_pids()

    def holder_pid(self, key: str, attempt: int = 0) -> int | None:
        """The pid of the worker running an attempt of ``key``, or None."""
        return self.backend.holder_pid(key, attempt)

    def pool_stats(self) -> dict[str, Any] | None:
        """The VM pool's stats (None without a pool or when it cannot answer): on one host the
        pool's, asked now; with --backend ray every node's summed as its pool's last report
        said them (taken every second: a second or two old; ``late_reports`` names a node whose
        report is late, ``ray_pools.pools_stats``)."""
        return self.backend.pool_stats()

    def close(self, grace: float | None = None) -> None:
        """Stop everything; idempotent. ``grace``: seconds attempts under way may take to
        finish (default: none after an error, ``--shutdown-grace-s`` when attempts are
        running, enough for idle workers to exit otherwise). A close() from another thread
        while one runs waits for it (both stopped the backend at once: a KeyError)."""
        if threading.current_thread() is self._thread:
            if not self._close_lock.acquire(blocking=False):
                return  # another thread closes, and waits for this one to end
        else:
            self._close_lock.acquire()
        try:
            self._close(grace)
        finally:
            self._close_lock.release()

    def _close(self, grace: float | None) -> None:
        with self._lock:
            if self._closed:
                return
            self._closing = True
            self._changed.notify_all()
        self._bell.ring()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        clean = self.error is None and not self.in_flight()
        if grace is None:
            if self.error is not None or self._interrupted:
                grace = 0.0  # a Ctrl-C already cut the grace short
            elif not self.in_flight():
                grace = 10.0  # clean completion: workers exit at once anyway
            else:
                grace = self.config.shutdown_grace_s
        try:
            # A manager that died (or was killed) could not stop its VMs itself.
            self.final_pool_stats = self.backend.shutdown(grace, sweep=not clean)
            self.final_cluster = self.backend.cluster()
        except KeyboardInterrupt:
            # Not closed: the next close() (``finally: close()``) finishes the stop, the
            # backend's shutdown goes on from where it was cut short.
            self._interrupted = True
            raise
        except BaseException:
            self._mark_closed()
            raise
        self._mark_closed()

    def _mark_closed(self) -> None:
        with self._lock:
            self._closed = True
            self._changed.notify_all()
        self._bell.close()
        if self._events is not None:
            events, self._events = self._events, None
            events.close()

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- the engine thread -----------------------------------------------------------------

    def _serve(self) -> None:
        with reworded(self._said) if self._said is not None else contextlib.nullcontext():
            self._serve_until_stopped()

    def _serve_until_stopped(self) -> None:
        try:
            while not self._closing and self.error is None:
                self._dispatch()
                ready = self.backend.wait(extra=[self._bell.fd], timeout=_TICK_S)
                if self._bell.fd in ready:
                    self._bell.answer()
                if self._clocks_applied != self._clocks_held:
                    self._clocks_applied = self._clocks_held
                    self.backend.hold_clocks(self._clocks_applied)
                self.backend.handle(ready)
                self.backend.check_timeouts()
                self._enforce_cancels()
        except BaseException as exc:  # noqa: BLE001 - the engine must report, never vanish
            log.exception("the engine thread failed")
            self.stop(f"the engine thread failed: {type(exc).__name__}: {exc}")

    def stop(self, reason: str) -> None:
        """Stop dispatching for good: the engine cannot go on (``error`` says why)."""
        with self._lock:
            if self.error is None and not self._closing:
                self.error = reason if self._said is None else self._said(reason)  # a front end's error quotes it
                log.error("stopping: %s", self.error)
            self._changed.notify_all()

    def _dispatch(self) -> None:
        # Under the lock, so that a cancel never falls between the queue and the worker.
        with self._lock:
            while not self._paused and self._pending and self.in_flight() < self.concurrency:
                item = self._pending.popleft()
                if not self.backend.send(item):
                    self._pending.appendleft(item)
                    return

    # -- records ---------------------------------------------------------------------------

    def _settle(self, key: str) -> None:
        """Forget a submission (under the lock); wake ``wait_idle`` once none is left, not
        at every record: a waiter woken per record costs a thread switch per rollout."""
        self._subs.pop(key, None)
        if not self._subs:
            self._changed.notify_all()

    def requeue(self, item: Assignment) -> None:
        """Put an attempt a worker never acknowledged back at the head of the queue."""
        with self._lock:
            sub = self._subs.get(item.key)
            if sub is None or sub.cancelled:
                self._settle(item.key)
                return
            self._pending.appendleft(item)

    def record(self, record: dict[str, Any], *, loop_free: bool = False) -> None:
        """Settle one attempt: retry it or make it final, write it, tell its front end.
        ``loop_free``: the worker finished it itself and its env loop is free (not a worker
        the backend is about to kill for a timeout, nor one that died)."""
        key = record["key"]
        with self._lock:
            sub = self._subs.get(key)
            if sub is None or sub.cancelled:
                # Cancelled (or a front end's leftover): no record, its VM was released.
                self._settle(key)
                return
        failure = record.get("failure")
        if self._said is not None and isinstance(failure, dict) and isinstance(failure.get("message"), str):
            failure["message"] = self._said(failure["message"])
        if record.get("status") in (PoolExhausted.kind, PoolClosed.kind, StorageError.kind,
                                    GuestPrerequisiteMissing.kind, VMSettingsMismatch.kind, AgentNotMade.kind):
            # Not the sample's fault and not final: a resumed run (with working VMs, with
            # space on the disk, with an agent that can be made) runs it.
            record["final"] = False
            if not self._closing:
                self.stop((record.get("failure") or {}).get("message") or "the VM pool is exhausted")
        elif self._stop_on is not None and (reason := self._stop_on(record)):
            record["final"] = False  # the front end's call: a resumed run runs it
            if not self._closing:
                self.stop(reason)
        elif record.get("infrastructure") and record["attempt"] < self.config.max_retries \
                and not record.get("task_fault"):  # the task file's error would end each retry so
            record["final"] = False
            retry = dataclasses.replace(sub.item, attempt=record["attempt"] + 1)  # the front end's fields kept
            with self._lock:
                sub.item = retry
                # Retries go first: the sample has already waited its turn once.
                self._pending.appendleft(retry)
                self.stats.retries += 1
            self.event("retry", task=key, worker=record.get("worker"),
                       reason=f"attempt {record['attempt']} failed with {record['status']}: "
                              f"{(record.get('failure') or {}).get('message', '')[:300]}")
        else:
            # retries used up on an infrastructure failure: never graded, not the one that counts
            record.update({"final": False, "never_graded": True} if record.get("infrastructure") else {"final": True})
            if loop_free and not self.closing:
                # Its loop is free again (the backend settled the attempt before calling
                # here): hand it the next attempt first, then write this record, so that
                # the worker runs while this thread writes (a short task's worker and
                # engine would otherwise take turns, the worker idle meanwhile).
                self._dispatch()
        log.debug("%s attempt %d: %s%s (%s, %ss)", key, record["attempt"], record.get("status"),
                  "" if record["final"] else ", not final", record.get("worker"), record.get("duration_s"))
        record["run_id"] = self.run_id
        if self._sink is not None:
            try:
                self._sink(record)
            except StorageError as exc:
                self.stop(str(exc))
                return
        if not (record["final"] or record.get("never_graded")):
            return
        with self._lock:
            self._settle(key)
            self.stats.finals += 1
        if sub.on_final is not None:
            try:
                sub.on_final(record)
            except Exception:  # noqa: BLE001 - a front end's bug must not stop the engine
                log.exception("the on_final callback of %s failed", key)

    def event(self, kind: str, task: str | None = None, worker: str | None = None, reason: str = "") -> None:
        """Append one line to events.jsonl (the pool's transition fields left empty)."""
        if self._events is None:
            return
        line = json.dumps({"time": round(time.time(), 4), "event": kind, "vm": None, "from": None,
                           "to": None, "task": task, "worker": worker, "reason": reason[:1000]})
        try:
            self._events.write(line + "\n")
        except (OSError, ValueError) as exc:
            # a full disk is the run's to report (it stops on results.jsonl), not a traceback
            log.warning("cannot write events.jsonl: %s", exc)

    @property
    def closing(self) -> bool:
        """True once close() began or the engine stopped on an error: no respawns, no dispatch."""
        return self._closing or self.error is not None
