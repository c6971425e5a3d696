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
* **Deadlines.** The task clock of an attempt runs from its acknowledgement, except while
  it waits for a VM (``LeaseWait``): with N ≫ M a queue for VMs is not the task's time. An
  attempt past ``--task-timeout`` is recorded ``task_timeout``; a wait for a VM past
  ``lease_timeout_s`` (plus a margin: the pool raises LeaseTimeout itself first) is recorded
  ``lease_timeout`` (infrastructure, retried); an assignment a worker does not acknowledge
  within ``ack_timeout_s`` means that worker is stuck. Each kills the worker's process tree
  (terminate is not enough: agent subprocesses hold pipes).
* **Crash loops.** Deliberate kills (timeouts, cancels) are not crashes. Workers that die on
  their own more than ``10·N + 10`` times within a minute stop the engine; a long run with
  occasional deaths goes on.
* **Identity.** Each spawn of a worker gets a token (``w3.7``: index, spawn number); the pool
  knows lease holders by it, never by pid, which the kernel recycles.
* **Shutdown.** Ordered: STOP once per live worker → drain records while they finish (the
  grace period) → kill what is left → stop every VM → stop the Manager → sweep the run's
  orphaned VMs: what a dead Manager could not stop, or a stop that raced a boot missed.
"""

from __future__ import annotations

import logging
import select
import time
from collections import deque
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING, Any

import psutil

from .errors import LeaseTimeout, RolloutError, TaskTimeout, WorkerDied
from .logs import LogCollector, run_child
from .messages import STOP, Assignment, Cancel, Finished, LeaseWait, Started

if TYPE_CHECKING:
    from .engine import Engine

log = logging.getLogger("parallel_rollout")

#: how long one wait during shutdown lasts
_TICK_S = 0.2
#: seconds past lease_timeout_s before the engine gives up on a wait for a VM itself
_LEASE_MARGIN_S = 30.0
#: the window in which worker crashes are counted
_CRASH_WINDOW_S = 60.0
#: how often deadlines are looked at: far below any deadline, far above a loop pass
_TIMEOUT_CHECK_S = 0.05


@dataclass
class Clock:
    """The task clock of one acknowledged attempt: it runs except while the attempt waits
    for a VM."""

    #: wall-clock time of the acknowledgement, for records
    started_at: float
    #: monotonic time the clock last resumed, None while waiting for a VM
    running_since: float | None
    ran_s: float = 0.0
    #: monotonic time the current wait for a VM began
    waiting_since: float | None = None

    def elapsed(self, now: float) -> float:
        """Seconds of task time so far."""
        return self.ran_s + (now - self.running_since if self.running_since is not None else 0.0)

    def lease_wait(self, waiting: bool, now: float) -> None:
        """Stop the clock while a VM is awaited, restart it when one is held."""
        if waiting and self.waiting_since is None:
            self.ran_s = self.elapsed(now)
            self.running_since, self.waiting_since = None, now
        elif not waiting and self.waiting_since is not None:
            self.running_since, self.waiting_since = now, None


@dataclass
class WorkerHandle:
    """The engine's view of one worker process."""

    index: int
    #: this spawn's token, what the pool knows its leases by
    holder: str
    process: Any
    conn: Connection
    #: attempts sent to it and not settled, by (key, attempt)
    assigned: dict[tuple[str, int], Assignment] = field(default_factory=dict)
    #: when each unacknowledged attempt was sent (monotonic)
    sent: dict[tuple[str, int], float] = field(default_factory=dict)
    #: the task clocks of acknowledged attempts
    started: dict[tuple[str, int], Clock] = field(default_factory=dict)
    conn_open: bool = True
    stop_sent: bool = False
    #: a poll object on ``conn`` alone: ``Connection.poll`` builds a selector every call
    readable: Any = None

    def __post_init__(self) -> None:
        poller = select.poll()
        poller.register(self.conn.fileno(), select.POLLIN)
        self.readable = lambda: bool(poller.poll(0))

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
        self._spawns = 0
        #: monotonic times of workers' own deaths (not deliberate kills) in the last window
        self._crashes: deque[float] = deque()
        self._next_timeout_check = 0.0
        #: what ``wait`` polls: the objects, their poll object, fd -> object
        self._watched: list[Any] = []
        self._poller: Any = None
        self._by_fd: dict[int, Any] = {}
        #: reads the log records of the workers and the Manager into this process's loggers
        self._logs: LogCollector | None = None

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
        self._logs = LogCollector()
        if engine.provider_cls is not None:
            # Leftovers of an earlier, killed run of this run id; a live run of the same id
            # in another output folder keeps its VMs.
            engine.provider_cls.sweep(engine.run_id, orphans_only=True)
            from .pool.server import start_pool

            pool_logs = self._logs.child()
            self._manager, self.pool = start_pool(
                engine._ctx, cfg.provider_name, engine.run_id, cfg.pool_size, log_to=pool_logs,
                options=engine.provider_options,
                events_path=str(engine.run_dir / "events.jsonl"),
                replacement_budget=cfg.replacement_budget,
                per_worker=not cfg.use_vm_pool,
            )
            pool_logs.close()
        for index in range(cfg.num_rollouts):
            self._spawn(index)

    def _spawn(self, index: int) -> None:
        from .worker import worker_main

        ctx = self.engine._ctx
        self._spawns += 1
        holder = f"w{index}.{self._spawns}"
        parent_conn, child_conn = ctx.Pipe(duplex=True)
        child_logs = self._logs.child()
        process = ctx.Process(
            target=run_child, name=f"rollout-worker-{index}",
            args=(child_logs, worker_main, f"w{index}", holder, child_conn, self.pool, self.config,
                  str(self.engine.run_dir)),
            daemon=True,
        )
        process.start()
        child_conn.close()
        child_logs.close()
        self._workers[index] = WorkerHandle(index, holder, process, parent_conn)

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
            worker.sent[(item.key, item.attempt)] = time.monotonic()
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
            self._kill(worker, reason)

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
        """Block until a pipe, a sentinel or one of ``extra`` (a connection or a file
        descriptor) is ready (or ``timeout``).

        One ``poll`` object serves every pass until the set of watched objects changes (a
        spawn, a death, a pipe closed): ``multiprocessing.connection.wait`` builds and fills a
        selector at each call, and the engine loop passes here once or twice per rollout."""
        objects: list[Any] = list(extra)
        for w in self._workers.values():
            if w.conn_open:
                objects.append(w.conn)
            objects.append(w.process.sentinel)
        if self._manager is not None:
            objects.append(self._manager._process.sentinel)
        if objects != self._watched:
            poller, by_fd = select.poll(), {}
            for obj in objects:
                fd = obj if isinstance(obj, int) else obj.fileno()
                poller.register(fd, select.POLLIN)
                by_fd[fd] = obj
            self._watched, self._poller, self._by_fd = objects, poller, by_fd
        # POLLHUP, POLLERR and POLLNVAL count as ready too: the read then says what it is
        return {self._by_fd[fd] for fd, _ in self._poller.poll(timeout * 1000)}

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
            while w.conn_open and w.readable():
                self._handle(w, w.conn.recv())
        except (EOFError, OSError):
            w.conn_open = False

    def _handle(self, w: WorkerHandle, message: Started | LeaseWait | Finished) -> None:
        ident = (message.key, message.attempt)
        if ident not in w.assigned:
            return  # an attempt already settled (timed out); one record per attempt
        if isinstance(message, Started):
            w.sent.pop(ident, None)
            w.started[ident] = Clock(started_at=time.time(), running_since=time.monotonic())
        elif isinstance(message, LeaseWait):
            if ident in w.started:
                w.started[ident].lease_wait(message.waiting, time.monotonic())
        elif isinstance(message, Finished):
            del w.assigned[ident]
            w.sent.pop(ident, None)
            w.started.pop(ident, None)
            self.engine.record(message.record)

    def _kill(self, w: WorkerHandle, reason: str, deliberate: bool = True) -> None:
        """Kill a worker's process tree (on purpose: not a crash) and handle its death."""
        kill_tree(w.process.pid)
        w.process.join(timeout=5)
        self._on_worker_death(w, reason, deliberate=deliberate)

    def _on_worker_death(self, w: WorkerHandle, reason: str, deliberate: bool = False) -> None:
        """Fail what the worker had started, requeue what it had not, reclaim its VMs."""
        self._drain(w)
        w.process.join(timeout=1)
        self._workers.pop(w.index, None)
        w.conn.close()
        pid = w.process.pid
        reclaimed: list[str] = []
        if self.pool is not None:
            try:
                reclaimed = self.pool.reclaim(w.holder)
            except (EOFError, OSError, ConnectionError):
                pass
        self.engine.event("worker_died", worker=w.worker_id,
                          reason=f"pid {pid}: {reason}; VMs reclaimed: {reclaimed}")
        log.warning("worker %s (pid %s) died: %s", w.worker_id, pid, reason)
        for ident, item in list(w.assigned.items()):
            if ident in w.started:
                exc = WorkerDied(f"{reason} while running attempt {item.attempt} of {item.key}")
                self.engine.record(synthetic_record(item, exc, w, w.started[ident].started_at))
            else:
                self.engine.requeue(item)
        if self.engine.closing:
            return
        if not deliberate:
            now = time.monotonic()
            self._crashes.append(now)
            while self._crashes and now - self._crashes[0] > _CRASH_WINDOW_S:
                self._crashes.popleft()
            limit = 10 * self.config.num_rollouts + 10
            if len(self._crashes) > limit:
                self.engine.stop(f"workers keep dying ({len(self._crashes)} deaths within "
                                 f"{_CRASH_WINDOW_S:.0f}s); last: {reason}")
                return
        self._spawn(w.index)

    def check_timeouts(self) -> None:
        """Settle attempts past their deadlines and kill their workers' process trees; at
        most every ``_TIMEOUT_CHECK_S`` (the engine loop passes here once per message)."""
        cfg = self.config
        now = time.monotonic()
        if now < self._next_timeout_check:
            return
        self._next_timeout_check = now + _TIMEOUT_CHECK_S
        for w in list(self._workers.values()):
            late = {ident: TaskTimeout(f"attempt ran past --task-timeout {cfg.task_timeout:g}s "
                                       "(time waiting for a VM not counted); worker process tree killed")
                    for ident, clock in w.started.items() if clock.elapsed(now) > cfg.task_timeout}
            late.update({ident: LeaseTimeout(f"no VM within {cfg.lease_timeout_s:g}s (the pool did not "
                                             "answer in time); worker process tree killed")
                         for ident, clock in w.started.items() if clock.waiting_since is not None
                         and now - clock.waiting_since > cfg.lease_timeout_s + _LEASE_MARGIN_S})
            unacknowledged = [ident for ident, sent in w.sent.items() if now - sent > cfg.ack_timeout_s]
            if not late and not unacknowledged:
                continue
            self._drain(w)  # it may have just finished
            late = {ident: exc for ident, exc in late.items() if ident in w.assigned}
            unacknowledged = [ident for ident in unacknowledged if ident in w.sent]
            if not late and not unacknowledged:
                continue
            for ident, exc in late.items():
                item = w.assigned.pop(ident)
                clock = w.started.pop(ident)
                self.engine.record(synthetic_record(item, exc, w, clock.started_at))
                self.engine.event(exc.kind, task=item.key, worker=w.worker_id, reason=str(exc))
            if late:
                reason = f"killed after {', '.join(sorted({exc.kind for exc in late.values()}))}"
            else:
                reason = (f"did not acknowledge {len(unacknowledged)} assignment(s) within "
                          f"{cfg.ack_timeout_s:g}s")
            # A worker that does not acknowledge is stuck, not stopped on purpose: a crash.
            self._kill(w, reason, deliberate=bool(late))

    # -- the end ---------------------------------------------------------------------------

    def shutdown(self, grace: float, sweep: bool) -> None:
        """Ordered teardown: STOP once per live worker → drain results while they finish
        (grace period) → kill what is left → stop every VM → stop the Manager → sweep what
        is left of the run's VMs (orphans once the Manager is gone; ``sweep``: the run did not
        end cleanly, kept for the callers' sake: the sweep always runs)."""
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
                self.pool.shutdown()  # boots it stopped waiting for are swept below
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
        if provider_cls is not None and self._manager is not None:
            # A manager that died (or was killed) could not stop its VMs itself, nor what a
            # boot cut short by the shutdown made; and a stop that raced a boot (a standby
            # booting while its VM died) may have missed one. Its folders are orphans now.
            provider_cls.sweep(self.engine.run_id, orphans_only=True)
        if self._logs is not None:
            self._logs.close()  # every child is gone: their last records are in the pipes
            self._logs = None


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
