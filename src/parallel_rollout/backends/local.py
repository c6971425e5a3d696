"""The local backend: the engine's worker processes and VM pool on this host, their deaths,
deadlines and end.

The engine (``engine``) decides what runs; this module keeps the processes that run it (the
contract, the crash window and the clocks are ``backends.base``'s):

* **Start.** N ``RolloutWorker`` processes, forked from the run's preloaded server
  (``worker_start``), each with its own duplex pipe, and the pool's Manager process
  (spawned) when a mode needs VMs.
* **Watch.** ``wait`` blocks on every pipe, every ``Process.sentinel`` and the Manager's
  sentinel at once. A worker's ``Started`` marks an attempt acknowledged, its ``Finished``
  settles it (at most once: a message about an attempt already settled is ignored).
* **Deaths.** A dead worker's acknowledged attempts are recorded ``worker_died`` (the engine
  retries them), its unacknowledged ones are requeued unrecorded, its VMs are reclaimed
  (reset), and a new worker takes its index. A Manager that dies stops the engine.
* **Deadlines.** The task clock of an attempt runs from its acknowledgement, except while
  it waits for a VM (``LeaseWait``): with N ≫ M a queue for VMs is not the task's time. An
  attempt past ``--task-timeout`` is recorded ``task_timeout`` (``VMKilled`` when the pool
  tells the VM it held was killed from outside: ``base.late_failures``); a wait for a VM past
  ``lease_timeout_s`` (plus a margin: the pool raises LeaseTimeout itself first) is recorded
  ``lease_timeout`` (infrastructure, retried); an assignment a worker does not acknowledge
  within ``ack_timeout_s`` means that worker is stuck. Each kills the worker's process tree
  (terminate is not enough: agent subprocesses hold pipes).
* **Crash loops** (``base.CrashWindow``). Deliberate kills (timeouts, cancels) are not
  crashes. Workers that die on their own more than ``10·N + 10`` times within a minute stop
  the engine; a long run with occasional deaths goes on.
* **Identity.** Each spawn of a worker gets a token (``w3.7``: index, spawn number); the pool
  knows lease holders by it, never by pid, which the kernel recycles.
* **Shutdown.** Ordered: STOP once per live worker → drain records while they finish (the
  grace period) → kill what is left, and each worker's process group (what its agent left
  behind, whichever way the worker ended: a death kills it too) → stop every VM → stop the Manager → sweep the run's
  orphaned VMs: what a dead Manager could not stop, or a stop that raced a boot missed.
"""

from __future__ import annotations

import logging
import multiprocessing
import secrets
import select
import time
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection, wait
from typing import Any

from ..errors import LeaseTimeout, RolloutError, TaskTimeout
from ..logs import LogCollector, run_child
from ..messages import (STOP, Assignment, Cancel, Finished, LeaseWait, Progress, Started, receive_message,
                        send_message)
from . import worker_start
from ..process_group import kill_group
from .base import (BackendSpec, Clock, CrashWindow, EngineHooks, WorkerTable, death_failure, died_record, grace_left,
                   kill_tree, late_failures)

log = logging.getLogger("parallel_rollout")

#: how long one wait during shutdown lasts
_TICK_S = 0.2
#: seconds past lease_timeout_s before the engine gives up on a wait for a VM itself
_LEASE_MARGIN_S = 30.0
#: how often deadlines are looked at: far below any deadline, far above a loop pass
_TIMEOUT_CHECK_S = 0.05


@dataclass
class WorkerHandle:
    """The engine's view of one worker process."""

    index: int
    #: this spawn's token, what the pool knows its leases by
    holder: str
    process: Any
    conn: Connection
    #: a psutil handle taken at the start (None: it was gone already): kills by it never
    #: hit a reused pid
    handle: Any = None
    #: the token of its cgroup (``worker_cgroup``): what its agent started out of its
    #: process group dies with that
    cgroup: str | None = None
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
        """The worker's id (its index; a respawn keeps it)."""
        return f"w{self.index}"

    @property
    def pid(self) -> int | None:
        """The worker process's pid."""
        return self.process.pid


def worker_exit_cannot_load() -> int:
    """The exit status of a worker that cannot import the run's mode or agent."""
    from ..worker import EXIT_CANNOT_LOAD  # the worker's modules: imported when workers start

    return EXIT_CANNOT_LOAD


def manager_process(manager: Any) -> Any:
    """The ``Process`` of a started ``BaseManager``: multiprocessing offers no public pid or
    sentinel for it, so this is the one place that reads its private ``_process``."""
    return manager._process  # noqa: SLF001


class LocalBackend(WorkerTable):
    """The worker processes and the pool of one engine, on this host."""

    def __init__(self, spec: BackendSpec, hooks: EngineHooks) -> None:
        self.spec = spec
        self.hooks = hooks
        self.config = spec.config
        #: the Manager is spawned and the workers forked from a server (``worker_start``),
        #: never from this process: a fork of the threaded engine process could inherit a
        #: lock held at fork time
        self._ctx = multiprocessing.get_context("spawn")
        self._worker_ctx: Any = None
        self._workers: dict[int, WorkerHandle] = {}
        self._manager = None
        self.pool = None
        self._spawns = 0
        self._crashes = CrashWindow(self.config.num_rollouts)
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
        return manager_process(self._manager).pid if self._manager is not None else None

    @property
    def concurrency(self) -> int:
        """The limit on rollouts in flight: every env loop, capped by --max-concurrent-rollouts."""
        return self.config.concurrency

    def start(self) -> None:
        """Start the pool (sweeping an earlier run's leftovers first) and N workers."""
        spec, cfg = self.spec, self.config
        self._logs = LogCollector()
        if spec.provider_cls is not None:
            # Leftovers of an earlier, killed run of this run id; a live run of the same id
            # in another output folder keeps its VMs.
            spec.provider_cls.sweep(spec.run_id, orphans_only=True)
            from ..pool.server import start_pool

            pool_logs = self._logs.child()
            try:
                self._manager, self.pool = start_pool(
                    self._ctx, cfg.provider_name, spec.run_id, cfg.pool_size, log_to=pool_logs,
                    options=spec.provider_options,
                    events_path=str(spec.run_dir / "events.jsonl"),
                    replacement_budget=cfg.replacement_budget,
                    per_worker=not cfg.use_vm_pool,
                )
            except EOFError:  # it died as it started (a SIGTERM to the whole job, the OOM killer)
                spec.provider_cls.sweep(spec.run_id, orphans_only=True)
                self.hooks.stop("the VM pool's manager process died as it started; no sample ran")
                return
            finally:
                pool_logs.close()
        # the run's plugin modules (and the model client's) are imported once, by the server
        # the workers fork from
        try:
            self._worker_ctx = worker_start.acquire(worker_start.plugin_modules(cfg), cfg.start_timeout_s,
                                                    also=worker_start.model_modules(cfg))
        except worker_start.ServerStartTimeout as exc:  # no worker can start: the run stops
            self.hooks.stop(f"no worker started: {exc}; the run's mode {cfg.mode!r} and agent {cfg.agent!r}")
            return
        for index in range(cfg.num_rollouts):
            self._spawn(index)

    def _spawn(self, index: int) -> None:
        from ..worker import worker_main

        ctx = self._worker_ctx
        self._spawns += 1
        holder = f"w{index}.{self._spawns}"
        cgroup = secrets.token_hex(8)
        parent_conn, child_conn = ctx.Pipe(duplex=True)
        child_logs = self._logs.child()
        process = ctx.Process(
            target=run_child, name=f"rollout-worker-{index}",
            args=(child_logs, worker_main, f"w{index}", holder, child_conn, self.pool, self.config,
                  str(self.spec.run_dir), cgroup),
            daemon=True,
        )
        handle = worker_start.start(process)
        child_conn.close()
        child_logs.close()
        self._workers[index] = WorkerHandle(index, holder, process, parent_conn, handle=handle, cgroup=cgroup)

    # -- what the engine asks --------------------------------------------------------------

    def send(self, item: Assignment) -> bool:
        """Hand ``item`` to the live worker with the most free env loops; False if none."""
        capacity = self.config.envs_per_worker
        passed: set[int] = set()  # found dead, not yet handled (its sentinel is)
        while True:
            free = [w for w in self._workers.values()
                    if w.conn_open and w.index not in passed and len(w.assigned) < capacity]
            if not free:
                return False
            worker = min(free, key=lambda w: len(w.assigned))
            # only the chosen one is asked (a waitpid each: 64 per dispatch with N = 64)
            if not worker.process.is_alive():
                passed.add(worker.index)
                continue
            try:
                send_message(worker.conn, item)
            except (BrokenPipeError, OSError):
                worker.conn_open = False  # the death is handled with its sentinel
                continue
            worker.assigned[(item.key, item.attempt)] = item
            worker.sent[(item.key, item.attempt)] = time.monotonic()
            log.debug("%s attempt %d -> worker %s", item.key, item.attempt, worker.worker_id)
            return True

    def send_cancel(self, cancel: Cancel) -> None:
        """Tell the worker holding an attempt to drop it."""
        ident = (cancel.key, cancel.attempt)
        worker = next((w for w in self._workers.values() if ident in w.assigned), None)
        if worker is None or not worker.conn_open:
            return
        try:
            send_message(worker.conn, cancel)
        except (BrokenPipeError, OSError):
            worker.conn_open = False

    def kill_holder(self, item: Assignment, reason: str) -> None:
        """Kill the process tree of the worker holding ``item`` and handle its death."""
        worker = self._holder(item.key, item.attempt)
        if worker is not None:
            self._kill(worker, reason)

    def cluster(self) -> dict[str, Any] | None:
        """No cluster: one host."""
        return None

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
            objects.append(manager_process(self._manager).sentinel)
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
        if self._manager is not None and manager_process(self._manager).sentinel in ready:
            process = manager_process(self._manager)
            process.join(timeout=1)  # as a worker's: the exit code comes a moment after the sentinel
            code = process.exitcode
            self.hooks.stop(
                f"the VM pool's manager process died (exit code {code}); every finished result "
                f"is kept in {self.spec.run_dir / 'results.jsonl'}"
            )
            return
        for w in list(self._workers.values()):
            if w.process.sentinel in ready:
                # the sentinel closes as the process exits, a moment before its exit code is there
                w.process.join(timeout=1)
                if worker_start.still_running(w.handle):
                    # its fork server died with its exit status: it runs, and holds its VMs
                    kill_tree(w.handle)
                    self._on_worker_death(w, reason="the server it was forked from died; killed")
                elif w.process.exitcode == worker_exit_cannot_load():
                    # every worker would fail the same way: the run stops (no respawn) and says why
                    self.hooks.stop(f"worker {w.worker_id} cannot import the run's mode {self.config.mode!r} "
                                    f"or agent {self.config.agent!r} (its error is in run.log)")
                    self._on_worker_death(w, reason="it cannot import the run's mode or agent")
                else:
                    self._on_worker_death(w, reason=f"worker exited with code {w.process.exitcode}",
                                          exit_code=worker_start.exit_code(w.process))

    def _drain(self, w: WorkerHandle) -> None:
        """Handle every message already in a worker's pipe."""
        try:
            while w.conn_open and w.readable():
                self._handle(w, receive_message(w.conn))
        except (EOFError, OSError):
            w.conn_open = False

    def _handle(self, w: WorkerHandle, message: Started | LeaseWait | Progress | Finished) -> None:
        ident = (message.key, message.attempt)
        if ident not in w.assigned:
            return  # an attempt already settled (timed out); one record per attempt
        if isinstance(message, Started):
            w.sent.pop(ident, None)
            w.started[ident] = self.new_clock()
        elif isinstance(message, LeaseWait):
            if ident in w.started:
                clock = w.started[ident]
                clock.lease_wait(message.waiting, time.monotonic())
                if message.lease is not None and clock.progress is not None:  # where the attempt holds a VM
                    clock.progress = replace(clock.progress, lease=message.lease, vm=message.vm)
        elif isinstance(message, Progress):
            if ident in w.started:
                w.started[ident].progress = message
        elif isinstance(message, Finished):
            del w.assigned[ident]
            w.sent.pop(ident, None)
            w.started.pop(ident, None)
            self.hooks.record(message.record, loop_free=True)

    def _kill(self, w: WorkerHandle, reason: str, deliberate: bool = True) -> None:
        """Kill a worker's process tree (on purpose: not a crash) and handle its death."""
        kill_tree(w.handle)
        w.process.join(timeout=5)
        self._on_worker_death(w, reason, deliberate=deliberate)

    def _on_worker_death(self, w: WorkerHandle, reason: str, deliberate: bool = False,
                         exit_code: int | None = None) -> None:
        """Fail what the worker had started, requeue what it had not, reclaim its VMs;
        ``exit_code``: the status it exited with on its own, None when unknown or killed."""
        self._drain(w)
        w.process.join(timeout=1)
        kill_group(w.pid, w.cgroup)  # what its agent started and left behind
        self._workers.pop(w.index, None)
        w.conn.close()
        pid = w.process.pid
        reclaimed: list[str] = []
        if self.pool is not None:
            try:
                reclaimed = self.pool.reclaim(w.holder)
            except (EOFError, OSError, ConnectionError):
                pass
        self.hooks.event("worker_died", worker=w.worker_id,
                         reason=f"pid {pid}: {reason}; VMs reclaimed: {reclaimed}")
        log.warning("worker %s (pid %s) died: %s", w.worker_id, pid, reason)
        for ident, item in list(w.assigned.items()):
            if ident in w.started:
                clock = w.started[ident]
                exc = death_failure(item, reason, exit_code, clock.progress)
                self.hooks.record(died_record(item, exc, w, clock.started_at, clock.progress))
            else:
                self.hooks.requeue(item)
        if self.hooks.closing:
            return
        if not deliberate and self._crashes.crashed():
            self.hooks.stop(f"workers keep dying ({len(self._crashes)} deaths within "
                            f"{self._crashes.window_s:.0f}s); last: {reason}")
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
        passed: list[tuple[WorkerHandle, dict[tuple[str, int], RolloutError], list[tuple[str, int]]]] = []
        for w in list(self._workers.values()):
            late: dict[tuple[str, int], RolloutError] = {
                ident: TaskTimeout(f"attempt ran past --task-timeout {cfg.task_timeout:g}s (time waiting for a "
                                   "VM or a weight update not counted); worker process tree killed")
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
            if late or unacknowledged:
                passed.append((w, late, unacknowledged))
        # every late attempt of the pass blamed at once, each before its worker's kill
        blamed = iter(late_failures([(self.pool, w.assigned[ident], exc, w.started[ident].progress)
                                     for w, late, _ in passed for ident, exc in late.items()]))
        for w, late, unacknowledged in passed:
            late = {ident: next(blamed) for ident in late}
            for ident, exc in late.items():
                item = w.assigned.pop(ident)
                clock = w.started.pop(ident)
                self.hooks.record(died_record(item, exc, w, clock.started_at, clock.progress))
                self.hooks.event(exc.kind, task=item.key, worker=w.worker_id, reason=str(exc))
            if late:
                reason = f"killed after {', '.join(sorted({exc.kind for exc in late.values()}))}"
            else:
                reason = (f"did not acknowledge {len(unacknowledged)} assignment(s) within "
                          f"{cfg.ack_timeout_s:g}s")
            # A worker that does not acknowledge is stuck, not stopped on purpose: a crash.
            self._kill(w, reason, deliberate=bool(late))

    # -- the end ---------------------------------------------------------------------------

    def shutdown(self, grace: float, sweep: bool) -> dict[str, Any] | None:
        """Ordered teardown: STOP once per live worker → drain results while they finish
        (grace period) → kill what is left → stop every VM → stop the Manager → sweep what
        is left of the run's VMs (orphans once the Manager is gone; ``sweep``: the run did not
        end cleanly, kept for the callers' sake: the sweep always runs). Returns the pool's
        stats taken after its shutdown (every reset counted), None without a pool."""
        final_stats = None
        for w in self._workers.values():
            if w.conn_open and not w.stop_sent:
                try:
                    send_message(w.conn, STOP)
                    w.stop_sent = True
                except OSError:
                    w.conn_open = False
        deadline = time.monotonic() + grace
        while self._workers and (left := grace_left(deadline, self.hooks)) > 0:  # a 2nd Ctrl-C cuts it
            objects = [w.conn for w in self._workers.values() if w.conn_open]
            objects += [w.process.sentinel for w in self._workers.values()]
            ready = set(wait(objects, timeout=min(_TICK_S, left)))
            for w in list(self._workers.values()):
                if w.conn in ready:
                    self._drain(w)
                if w.process.sentinel in ready:
                    self._drain(w)
                    w.process.join()
                    kill_group(w.pid, w.cgroup)
                    del self._workers[w.index]
        for w in list(self._workers.values()):
            kill_tree(w.handle)
            w.process.join(timeout=5)
            kill_group(w.pid, w.cgroup)
            del self._workers[w.index]
        if self._worker_ctx is not None:
            self._worker_ctx = None
            worker_start.release()
        if self.pool is not None:
            try:
                self.pool.shutdown()  # boots it stopped waiting for are swept below
                final_stats = self.pool.stats()  # after shutdown: every reset counted
            except (EOFError, OSError, ConnectionError, RolloutError):
                log.warning("the pool's manager was already gone; sweeping its VMs")
        if self._manager is not None:
            try:
                self._manager.shutdown()
            except Exception:  # noqa: BLE001 - already dead is fine
                pass
            if manager_process(self._manager).is_alive():
                kill_tree(manager_process(self._manager).pid)
        provider_cls = self.spec.provider_cls
        if provider_cls is not None and self._manager is not None:
            # A manager that died (or was killed) could not stop its VMs itself, nor what a
            # boot cut short by the shutdown made; and a stop that raced a boot (a standby
            # booting while its VM died) may have missed one. Its folders are orphans now.
            provider_cls.sweep(self.spec.run_id, orphans_only=True)
            self._manager.swept()  # what the Manager left is reaped: no more to adopt
        if self._logs is not None:
            self._logs.close()  # every child is gone: their last records are in the pipes
            self._logs = None
        return final_stats
