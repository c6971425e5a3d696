"""Supervision: the engine's worker processes and VM pool, their deaths, deadlines and end.

The engine (``engine``) decides what runs; this module keeps the processes that run it:

* **Spawn.** N ``RolloutWorker`` processes (spawn start method), each with its own duplex
  pipe, and the pool's Manager process when a mode needs VMs.
* **Watch.** ``wait`` blocks on every pipe, every ``Process.sentinel`` and the Manager's
  sentinel at once. A worker's ``Started`` marks an attempt acknowledged, its ``Finished``
  settles it (at most once: a message about an attempt already settled is ignored).
* **Deaths.** A dead worker's acknowledged attempts are recorded ``worker_died`` (the engine
  retries them), its unacknowledged ones are requeued unrecorded, its VMs are reclaimed
  (reset), and a new worker takes its index. A Manager that dies stops the engine.
* **Deadlines.** An attempt past ``--task-timeout`` is recorded ``task_timeout`` and its
  worker's process tree is killed (terminate is not enough: agent subprocesses hold pipes).
* **Shutdown.** Ordered: STOP once per live worker → drain records while they finish (the
  grace period) → kill what is left → stop every VM → stop the Manager → sweep if the
  Manager could not stop its VMs itself.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING, Any

import psutil

from .errors import RolloutError, TaskTimeout, WorkerDied
from .messages import STOP, Assignment, Cancel, Finished, Started

if TYPE_CHECKING:
    from .engine import Engine

log = logging.getLogger("parallel_rollout")

#: how long one wait during shutdown lasts
_TICK_S = 0.2


@dataclass
class WorkerHandle:
    """The engine's view of one worker process."""

    index: int
    process: Any
    conn: Connection
    #: attempts sent to it and not settled, by (key, attempt)
    assigned: dict[tuple[str, int], Assignment] = field(default_factory=dict)
    #: acknowledged attempts: (key, attempt) -> monotonic start time
    started: dict[tuple[str, int], float] = field(default_factory=dict)
    conn_open: bool = True
    stop_sent: bool = False

    @property
    def worker_id(self) -> str:
        return f"w{self.index}"


class WorkerTable:
    """What every backend's supervision knows: its workers (``_workers``, each with the
    attempts it was ``assigned``)."""

    _workers: dict[int, Any]

    def in_flight(self) -> int:
        """Attempts sent to workers and not settled (safe from any thread)."""
        return sum(len(w.assigned) for w in list(self._workers.values()))

    def holds(self, item: Assignment) -> bool:
        """Whether a worker holds this attempt."""
        return self._holder(item) is not None

    def _holder(self, item: Assignment) -> Any:
        ident = (item.key, item.attempt)
        return next((w for w in list(self._workers.values()) if ident in w.assigned), None)


class Supervision(WorkerTable):
    """The worker processes and the pool of one engine."""

    def __init__(self, engine: "Engine") -> None:
        self.engine = engine
        self.config = engine.config
        self._workers: dict[int, WorkerHandle] = {}
        self._manager = None
        self.pool = None
        self._respawns = 0

    @property
    def manager_pid(self) -> int | None:
        """The pool's Manager process id, or None."""
        return self._manager._process.pid if self._manager is not None else None

    @property
    def concurrency(self) -> int:
        """The limit on rollouts in flight: every env loop, capped by --max-concurrent-rollouts."""
        return self.config.concurrency

    def start(self) -> None:
        """Start the pool (sweeping an earlier run's leftovers first) and N workers."""
        engine, cfg = self.engine, self.config
        if engine.provider_cls is not None:
            engine.provider_cls.sweep(engine.run_id)  # leftovers of an earlier, killed run
            from .pool.manager import start_pool

            self._manager, self.pool = start_pool(
                engine._ctx, cfg.provider_name, engine.run_id, cfg.pool_size,
                options=engine.provider_options,
                events_path=str(engine.run_dir / "events.jsonl"),
                replacement_budget=cfg.replacement_budget,
                private=not cfg.use_vm_pool,
            )
        for index in range(cfg.num_rollouts):
            self._spawn(index)

    def _spawn(self, index: int) -> None:
        from .worker import worker_main

        ctx = self.engine._ctx
        parent_conn, child_conn = ctx.Pipe(duplex=True)
        process = ctx.Process(
            target=worker_main, name=f"rollout-worker-{index}",
            args=(f"w{index}", child_conn, self.pool, self.config, str(self.engine.run_dir)),
            daemon=True,
        )
        process.start()
        child_conn.close()
        self._workers[index] = WorkerHandle(index, process, parent_conn)

    # -- what the engine asks --------------------------------------------------------------

    def send(self, item: Assignment) -> bool:
        """Hand ``item`` to the live worker with the most free env loops; False if none."""
        capacity = self.config.envs_per_worker
        while True:
            free = [w for w in self._workers.values()
                    if w.conn_open and w.process.is_alive() and len(w.assigned) < capacity]
            if not free:
                return False
            worker = min(free, key=lambda w: len(w.assigned))
            try:
                worker.conn.send(item)
            except (BrokenPipeError, OSError):
                worker.conn_open = False  # the death is handled with its sentinel
                continue
            worker.assigned[(item.key, item.attempt)] = item
            return True

    def send_cancel(self, cancel: Cancel) -> None:
        """Tell the worker holding an attempt to drop it."""
        ident = (cancel.key, cancel.attempt)
        worker = next((w for w in self._workers.values() if ident in w.assigned), None)
        if worker is None or not worker.conn_open:
            return
        try:
            worker.conn.send(cancel)
        except (BrokenPipeError, OSError):
            worker.conn_open = False

    def kill_holder(self, item: Assignment, reason: str) -> None:
        """Kill the process tree of the worker holding ``item`` and handle its death."""
        worker = self._holder(item)
        if worker is not None:
            kill_tree(worker.process.pid)
            worker.process.join(timeout=5)
            self._on_worker_death(worker, reason)

    def pool_stats(self) -> dict[str, Any] | None:
        """The pool's live stats, or None."""
        if self.pool is None:
            return None
        try:
            return self.pool.stats()
        except (EOFError, OSError, ConnectionError, RolloutError):
            return None

    # -- watching --------------------------------------------------------------------------

    def wait(self, extra: list[Any], timeout: float) -> set[Any]:
        """Block until a pipe, a sentinel or one of ``extra`` is ready (or ``timeout``)."""
        objects: list[Any] = list(extra)
        for w in self._workers.values():
            if w.conn_open:
                objects.append(w.conn)
            objects.append(w.process.sentinel)
        if self._manager is not None:
            objects.append(self._manager._process.sentinel)
        return set(wait(objects, timeout=timeout))

    def handle(self, ready: set[Any]) -> None:
        """Handle what ``wait`` found: messages, a dead Manager, dead workers."""
        for w in list(self._workers.values()):
            if w.conn in ready:
                self._drain(w)
        if self._manager is not None and self._manager._process.sentinel in ready:
            code = self._manager._process.exitcode
            self.engine.stop(
                f"the VM pool's manager process died (exit code {code}); every finished result "
                f"is kept in {self.engine.run_dir / 'results.jsonl'}"
            )
            return
        for w in list(self._workers.values()):
            if w.process.sentinel in ready:
                self._on_worker_death(w, reason=f"worker exited with code {w.process.exitcode}")

    def _drain(self, w: WorkerHandle) -> None:
        """Handle every message already in a worker's pipe."""
        try:
            while w.conn_open and w.conn.poll():
                self._handle(w, w.conn.recv())
        except (EOFError, OSError):
            w.conn_open = False

    def _handle(self, w: WorkerHandle, message: Started | Finished) -> None:
        ident = (message.key, message.attempt)
        if ident not in w.assigned:
            return  # an attempt already settled (timed out); one record per attempt
        if isinstance(message, Started):
            w.started[ident] = time.monotonic()
        elif isinstance(message, Finished):
            del w.assigned[ident]
            w.started.pop(ident, None)
            self.engine.record(message.record)

    def _on_worker_death(self, w: WorkerHandle, reason: str) -> None:
        """Fail what the worker had started, requeue what it had not, reclaim its VMs."""
        self._drain(w)
        w.process.join(timeout=1)
        self._workers.pop(w.index, None)
        w.conn.close()
        pid = w.process.pid
        reclaimed: list[str] = []
        if self.pool is not None and pid is not None:
            try:
                reclaimed = self.pool.reclaim(pid)
            except (EOFError, OSError, ConnectionError):
                pass
        self.engine.event("worker_died", worker=w.worker_id,
                          reason=f"pid {pid}: {reason}; VMs reclaimed: {reclaimed}")
        log.warning("worker %s (pid %s) died: %s", w.worker_id, pid, reason)
        for ident, item in list(w.assigned.items()):
            if ident in w.started:
                exc = WorkerDied(f"{reason} while running attempt {item.attempt} of {item.key}")
                started_at = time.time() - (time.monotonic() - w.started[ident])
                self.engine.record(synthetic_record(item, exc, w, started_at))
            else:
                self.engine.requeue(item)
        if self.engine.closing:
            return
        self._respawns += 1
        if self._respawns > 10 * self.config.num_rollouts + 10:
            self.engine.stop(f"workers keep dying ({self._respawns} respawns); last: {reason}")
            return
        self._spawn(w.index)

    def check_timeouts(self) -> None:
        """Record attempts past --task-timeout and kill their workers' process trees."""
        limit = self.config.task_timeout
        now = time.monotonic()
        for w in list(self._workers.values()):
            late = [ident for ident, started in w.started.items() if now - started > limit]
            if not late:
                continue
            self._drain(w)  # it may have just finished
            late = [ident for ident in late if ident in w.assigned]
            if not late:
                continue
            for ident in late:
                item = w.assigned.pop(ident)
                started = w.started.pop(ident)
                exc = TaskTimeout(f"attempt ran past --task-timeout {limit:g}s; worker process tree killed")
                self.engine.record(synthetic_record(item, exc, w, time.time() - (now - started)))
                self.engine.event("task_timeout", task=item.key, worker=w.worker_id, reason=str(exc))
            kill_tree(w.process.pid)
            w.process.join(timeout=5)
            self._on_worker_death(w, reason="killed after --task-timeout")

    # -- the end ---------------------------------------------------------------------------

    def shutdown(self, grace: float, sweep: bool) -> None:
        """Ordered teardown: STOP once per live worker → drain results while they finish
        (grace period) → kill what is left → stop every VM → stop the Manager → sweep the
        run's VMs (``sweep``: the run did not end cleanly)."""
        for w in self._workers.values():
            if w.conn_open and not w.stop_sent:
                try:
                    w.conn.send(STOP)
                    w.stop_sent = True
                except OSError:
                    w.conn_open = False
        deadline = time.monotonic() + grace
        while self._workers and time.monotonic() < deadline:
            objects = [w.conn for w in self._workers.values() if w.conn_open]
            objects += [w.process.sentinel for w in self._workers.values()]
            ready = set(wait(objects, timeout=min(_TICK_S, max(0.0, deadline - time.monotonic()))))
            for w in list(self._workers.values()):
                if w.conn in ready:
                    self._drain(w)
                if w.process.sentinel in ready:
                    self._drain(w)
                    w.process.join()
                    del self._workers[w.index]
        for w in list(self._workers.values()):
            kill_tree(w.process.pid)
            w.process.join(timeout=5)
            del self._workers[w.index]
        if self.pool is not None:
            try:
                self.pool.shutdown()
                self.engine.final_pool_stats = self.pool.stats()  # after shutdown: every reset counted
            except (EOFError, OSError, ConnectionError, RolloutError):
                log.warning("the pool's manager was already gone; sweeping its VMs")
        if self._manager is not None:
            try:
                self._manager.shutdown()
            except Exception:  # noqa: BLE001 - already dead is fine
                pass
            if self._manager._process.is_alive():
                kill_tree(self._manager._process.pid)
        provider_cls = self.engine.provider_cls
        if provider_cls is not None and self._manager is not None and (sweep or self.engine.final_pool_stats is None):
            # A manager that died (or was killed) could not stop its VMs itself.
            provider_cls.sweep(self.engine.run_id)


def synthetic_record(item: Assignment, exc: RolloutError, w: WorkerHandle, started_at: float) -> dict[str, Any]:
    """The record of an attempt whose worker could not write one."""
    now = time.time()
    record = {
        "key": item.key, "task_id": item.task.id, "sample_idx": item.sample_idx,
        "attempt": item.attempt, "mode": item.task.mode, "tags": list(item.task.tags),
        "status": exc.kind, "reward": 0.0, "success": False, "infrastructure": exc.infrastructure,
        "failure": {"type": type(exc).__name__, "message": str(exc), "traceback": ""},
        "turns": None, "worker": w.worker_id, "pid": w.process.pid, "slot": None, "vm": None,
        "lease_wait_s": None, "started_at": round(started_at, 4), "ended_at": round(now, 4),
        "duration_s": round(now - started_at, 4), "usage": {},
    }
    if item.meta:
        record["meta"] = dict(item.meta)
    return record


def kill_tree(pid: int | None) -> None:
    """SIGKILL a process and every descendant (a worker's agent subprocesses included)."""
    if pid is None:
        return
    try:
        root = psutil.Process(pid)
        family = root.children(recursive=True) + [root]
    except psutil.NoSuchProcess:
        return
    for proc in family:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(family, timeout=5)
