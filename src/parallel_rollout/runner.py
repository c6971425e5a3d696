"""The main process: start the pool and the workers, feed them, collect, watch, shut down.

Data flow::

    tasks ─► pending (deque of Assignments, retries first)
               │  dispatch while in-flight < C (--max-concurrent-rollouts)
               ▼
    runner ══ pipe ══► RolloutWorker 1..N (K env loops each)
       ▲                 │ Started(key) … Finished(record)
       │                 │ lease / release via proxy
       │                 ▼
       │         VMPoolManager (Manager process) ─► provider ─► M VMs
       │
       └─► results.jsonl (one line per attempt) · events.jsonl · summary.json

Actors, one paragraph each:

* **Runner** (this module). Owns the only copy of the run's state: which attempt each
  worker holds, which samples are pending, the results file. Each worker has its own duplex
  pipe rather than sharing one task queue and one result queue: a worker SIGKILLed while it
  holds a shared queue's lock would stall every other worker (the multiprocessing.Pool hang of
  bpo-22393). With private pipes a death affects only that worker's pipe. The runner hands an
  Assignment to a worker with a free env loop while fewer than C rollouts are in flight —
  this counter is the one semaphore shared by every loop of every worker, and unlike a
  ``multiprocessing.Semaphore`` it cannot leak a permit when a holder is killed.
* **Workers** acknowledge an attempt (``Started``) before running it and send its record
  (``Finished``) after. The runner waits on every pipe and every ``Process.sentinel`` at
  once: a dead worker's acknowledged attempts are recorded as ``worker_died`` and retried,
  its unacknowledged ones go back to the queue unrecorded, its VMs are reclaimed, and a new
  worker takes its place. An attempt past ``--task-timeout`` gets its worker's process tree
  killed and is recorded as ``task_timeout``.
* **Pool** (``pool.manager``). Lives in its own Manager process; if that process dies the run
  stops, keeps every finished record and says how to resume.
* **Failure policy.** Infrastructure failures (``vm_error``, ``guest_unreachable``,
  ``worker_died``, ``lease_timeout``) are retried up to ``--max-retries`` and never graded;
  everything else is a graded, final outcome. Only the runner writes results.jsonl, and it
  accepts at most one record per attempt, so nothing is counted twice.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import shlex
import signal
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

import filelock
import psutil

from .agents import get_agent
from .config import RunConfig, check_honoured, default_run_id
from .envs import get_env, task_validators
from .errors import (ConfigError, PoolExhausted, RolloutError, RunLocked, TaskFileError, TaskTimeout,
                     WorkerDied)
from .exit_codes import EXIT_ABORTED, EXIT_INTERRUPTED, EXIT_OK
from .messages import STOP, Assignment, Finished, Started
from .pool.providers import ProviderOptions, get_provider
from .results import ResultStore, StorageError, read_records, summarize, unsupported_record
from .tasks import Sample, census_lines, expand, load_task_set, unsupported_message

log = logging.getLogger("parallel_rollout")

#: how long one wait for pipes and sentinels lasts; bounds the reaction to a signal
_TICK_S = 0.2
#: seconds between progress lines in the log when there is no progress bar
_PROGRESS_LOG_S = 30.0


@dataclass
class RunOutcome:
    """What a finished (or stopped) run hands back to the CLI or the Python caller."""

    exit_code: int
    run_dir: Path
    summary: dict[str, Any]
    message: str = ""


@dataclass
class _Worker:
    """The runner's view of one worker process."""

    index: int
    process: multiprocessing.process.BaseProcess
    conn: Connection
    #: attempts sent to it and not finished, by (key, attempt)
    assigned: dict[tuple[str, int], Assignment] = field(default_factory=dict)
    #: acknowledged attempts: (key, attempt) -> monotonic start time
    started: dict[tuple[str, int], float] = field(default_factory=dict)
    conn_open: bool = True
    stop_sent: bool = False

    @property
    def worker_id(self) -> str:
        return f"w{self.index}"


class Runner:
    """One run: ``Runner(config).run()`` returns a RunOutcome; it never leaves a VM behind."""

    def __init__(self, config: RunConfig) -> None:
        self.config = config
        self.run_id = config.run_id or default_run_id(config.mode)
        self.run_dir = Path(config.output_dir) / self.run_id
        self._interrupted: int | None = None
        self._abort: str | None = None
        self._pending: deque[Assignment] = deque()
        self._workers: dict[int, _Worker] = {}
        self._finished_keys: set[str] = set()
        self._successes = 0
        self._respawns = 0
        self._manager = None
        self.pool = None
        self._progress = None
        self._events = None
        #: (sample, features) of each unsupported task left out by --skip-unsupported
        self._skipped: list[tuple[Sample, tuple[str, ...]]] = []

    # -- preparation ----------------------------------------------------------------------

    def prepare(self) -> list[Sample]:
        """Check the whole configuration and load every task; raises ConfigError."""
        cfg = self.config
        self.env_cls = get_env(cfg.mode)
        self.agent_cls = get_agent(cfg.agent)
        self.provider_cls = get_provider(cfg.provider_name) if self.env_cls.needs_vm() else None
        env_opts, agent_opts = self.env_cls.options, self.agent_cls.options
        check_honoured(cfg, {
            "action_space": ("desktop modes (osworld)", env_opts & {"action_space"}),
            "screen_width": ("desktop modes (osworld)", env_opts & {"screen_width"}),
            "screen_height": ("desktop modes (osworld)", env_opts & {"screen_height"}),
            "client_password": ("desktop modes (osworld)", env_opts & {"client_password"}),
            "observation_type": ("desktop modes (osworld)", env_opts & {"observation_type"}),
            "sleep_after_execution": ("desktop modes (osworld)", env_opts & {"sleep_after_execution"}),
            "record": ("desktop modes (osworld)", env_opts & {"record"}),
            "model": ("model-backed agents (openai)", agent_opts & {"model"}),
            "base_url": ("the openai agent", agent_opts & {"base_url"}),
            "temperature": ("the openai agent", agent_opts & {"temperature"}),
            "max_tokens": ("the openai agent", agent_opts & {"max_tokens"}),
            "agent_cmd": ("the command agent", agent_opts & {"agent_cmd"}),
            "vm_memory_mb": ("modes that run in a VM", frozenset({"vm"} if self.provider_cls else ())),
            "vm_max_processes": ("modes that run in a VM", frozenset({"vm"} if self.provider_cls else ())),
            "provider_name": ("modes that run in a VM", frozenset({"vm"} if self.provider_cls else ())),
            "snapshot_name": ("modes that run in a VM", frozenset({"vm"} if self.provider_cls else ())),
            "path_to_vm": ("modes that run in a VM", frozenset({"vm"} if self.provider_cls else ())),
            "num_vms": ("modes that run in a VM", frozenset({"vm"} if self.provider_cls else ())),
            "use_vm_pool": ("modes that run in a VM", frozenset({"vm"} if self.provider_cls else ())),
            "vm_address": ("the remote provider", frozenset(
                {"remote"} if self.provider_cls and self.provider_cls.name == "remote" else ())),
            "reset_command": ("the remote provider", frozenset(
                {"remote"} if self.provider_cls and self.provider_cls.name == "remote" else ())),
        })
        if self.provider_cls is not None and not cfg.use_vm_pool and cfg.envs_per_worker > 1:
            raise ConfigError(
                "--envs-per-worker > 1 runs several env loops per worker that share VMs; "
                "add --use-vm-pool (without it each worker owns exactly one private VM)"
            )
        if cfg.data is None:
            raise ConfigError("--data is required: a .json or .jsonl task file, or humaneval")
        check_config = getattr(self.agent_cls, "check_config", None)
        if check_config is not None:
            check_config(cfg)
        task_set = load_task_set(cfg.data, default_mode=cfg.mode, validators=task_validators(),
                                 domain=cfg.domain, index=cfg.osworld_index)
        if task_set.unsupported and not cfg.skip_unsupported:
            raise TaskFileError(unsupported_message(task_set))
        tasks = task_set.tasks
        # --skip-unsupported: each skipped sample gets a final 'unsupported' record, so the
        # score's denominator is the whole set (with --limit only the first N tasks count)
        self._skipped = [] if cfg.limit else [
            (sample, item.features) for item in task_set.unsupported
            for sample in expand([item.task], cfg.group_size)]
        check_task = getattr(self.agent_cls, "check_task", None)
        if check_task is not None:
            for task in tasks:
                check_task(task)
        if cfg.limit:
            tasks = tasks[: cfg.limit]
        if self.provider_cls is not None:
            self.provider_cls.check_available()
            # Constructing one checks the options it cannot honour (e.g. --path-to-vm).
            self.provider_options = self._provider_options()
            self.provider_cls(self.run_id, self.provider_options)
        return expand(tasks, cfg.group_size)

    def _provider_options(self) -> ProviderOptions:
        cfg = self.config
        limits = {}
        supported = self.provider_cls.supported_limits() if self.provider_cls else frozenset()
        for name, value in self.env_cls.default_limits.items():
            if name in supported:
                limits[name] = value
            else:
                log.warning("the %s provider cannot enforce %s here; %s tasks run without it",
                            cfg.provider_name, name, cfg.mode)
        # Explicit limits always go through: a provider that cannot honour one says so.
        for name in ("memory_mb", "max_processes"):
            value = getattr(cfg, f"vm_{name}")
            if value is not None:
                limits[name] = value
        if getattr(self.env_cls, "needs_desktop", False):
            limits.update(desktop=True, screen_width=cfg.screen_width, screen_height=cfg.screen_height)
        return ProviderOptions(snapshot_name=cfg.snapshot_name, path_to_vm=cfg.path_to_vm,
                               headless=cfg.headless, boot_timeout_s=cfg.boot_timeout_s,
                               vm_addresses=cfg.vm_address, reset_command=cfg.reset_command, **limits)

    def _open_run_dir(self) -> filelock.BaseFileLock:
        cfg = self.config
        self.run_dir.mkdir(parents=True, exist_ok=True)
        lock = filelock.FileLock(str(self.run_dir / ".lock"))
        try:
            lock.acquire(timeout=0)
        except filelock.Timeout:
            raise RunLocked(
                f"another run is writing to {self.run_dir} (its lock is held); wait for it to "
                "finish or choose another --run-id"
            ) from None
        try:
            config_path = self.run_dir / "config.json"
            results_path = self.run_dir / "results.jsonl"
            has_results = results_path.exists() and results_path.stat().st_size > 0
            if has_results and not cfg.resume:
                raise ConfigError(
                    f"{self.run_dir} already holds results; add --resume to continue that run "
                    "or pick a new --run-id"
                )
            if has_results and config_path.exists():
                old = json.loads(config_path.read_text())
                if old.get("identity_hash") != cfg.identity_hash():
                    changed = [k for k, v in cfg.identity().items() if old.get("config", {}).get(k) != v]
                    raise ConfigError(
                        f"cannot resume {self.run_id}: the run was made with other settings for "
                        f"{', '.join(changed) or 'its identity'}; resume with the same values"
                    )
            # Written aside and renamed: a kill mid-write must not leave a config.json that
            # a resume cannot read.
            tmp_path = config_path.with_name("config.json.tmp")
            tmp_path.write_text(json.dumps({
                "run_id": self.run_id, "identity_hash": cfg.identity_hash(),
                "config": cfg.to_json(), "written_at": time.time(),
            }, indent=2))
            os.replace(tmp_path, config_path)
        except BaseException:
            lock.release()
            raise
        (self.run_dir / "trajectories").mkdir(exist_ok=True)
        return lock

    def _setup_logging(self) -> logging.Handler:
        handler = logging.FileHandler(self.run_dir / "run.log", encoding="utf-8")
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logging.getLogger("parallel_rollout").addHandler(handler)
        logging.getLogger("parallel_rollout").setLevel(logging.INFO)
        return handler

    # -- the run --------------------------------------------------------------------------

    def run(self) -> RunOutcome:
        """Run every pending sample to a final record, or stop cleanly trying."""
        samples = self.prepare()
        total = len(samples) + len(self._skipped)
        lock = self._open_run_dir()
        handler = self._setup_logging()
        self._started_at = time.time()
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        store = ResultStore(self.run_dir)
        try:
            self._events = open(self.run_dir / "events.jsonl", "a", buffering=1, encoding="utf-8")
            index = store.load()
            self._queue_samples(samples, index)
            log.info("run %s: %d samples, %d already final, %d to run; output in %s",
                     self.run_id, total, len(self._finished_keys), len(self._pending), self.run_dir)
            log.info("[Concurrency] Set max concurrent rollouts to %d", self.config.concurrency)
            self._store = store
            for sample, features in self._skipped:
                if sample.key not in index.final:
                    self._record(unsupported_record(sample, features))
            if self._pending and not self._interrupted:
                self._run_loop(total)
        finally:
            self._shutdown()
            store.close()
            for sig, handler_ in previous.items():
                signal.signal(sig, handler_)
            outcome = self._finish(total)
            if self._events is not None:
                self._events.close()
            logging.getLogger("parallel_rollout").removeHandler(handler)
            handler.close()
            lock.release()
        return outcome

    def _queue_samples(self, samples: list[Sample], index) -> None:
        self._tasks_by_id = {sample.task.id: sample.task for sample in samples}
        self._finished_keys = set(index.final)
        self._successes = sum(1 for r in index.final.values() if r.get("success"))
        for sample in samples:
            if sample.key in self._finished_keys:
                continue
            attempt = index.attempts.get(sample.key, -1) + 1
            self._pending.append(Assignment(sample.task, sample.sample_idx, attempt))

    def _run_loop(self, total: int) -> None:
        cfg = self.config
        ctx = multiprocessing.get_context("spawn")
        self._total = total
        self._last_progress_log = time.monotonic()
        self._open_progress(total)
        if self.provider_cls is not None:
            self.provider_cls.sweep(self.run_id)  # leftovers of an earlier, killed run
            from .pool.manager import start_pool

            self._manager, self.pool = start_pool(
                ctx, cfg.provider_name, self.run_id, cfg.pool_size,
                options=self.provider_options,
                events_path=str(self.run_dir / "events.jsonl"),
                replacement_budget=cfg.replacement_budget,
                private=not cfg.use_vm_pool,
            )
        for index in range(cfg.num_rollouts):
            self._spawn_worker(ctx, index)
        last_progress = 0.0
        while (self._pending or self._in_flight()) and not self._interrupted and not self._abort:
            self._dispatch()
            self._wait_and_handle(ctx)
            self._check_timeouts(ctx)
            if time.monotonic() - last_progress > 1.0:
                self._update_progress()
                last_progress = time.monotonic()

    def _in_flight(self) -> int:
        return sum(len(w.assigned) for w in self._workers.values())

    def _spawn_worker(self, ctx, index: int) -> None:
        from .worker import worker_main

        parent_conn, child_conn = ctx.Pipe(duplex=True)
        process = ctx.Process(
            target=worker_main, name=f"rollout-worker-{index}",
            args=(f"w{index}", child_conn, self.pool, self.config, str(self.run_dir)),
            daemon=True,
        )
        process.start()
        child_conn.close()
        self._workers[index] = _Worker(index, process, parent_conn)

    def _dispatch(self) -> None:
        capacity = self.config.envs_per_worker
        in_flight = self._in_flight()
        while self._pending and in_flight < self.config.concurrency:
            free = [w for w in self._workers.values()
                    if w.conn_open and w.process.is_alive() and len(w.assigned) < capacity]
            if not free:
                return
            worker = min(free, key=lambda w: len(w.assigned))
            item = self._pending.popleft()
            try:
                worker.conn.send(item)
            except (BrokenPipeError, OSError):
                self._pending.appendleft(item)  # the death is handled with its sentinel
                worker.conn_open = False
                continue
            worker.assigned[(item.key, item.attempt)] = item
            in_flight += 1

    def _wait_and_handle(self, ctx) -> None:
        objects: list[Any] = []
        for w in self._workers.values():
            if w.conn_open:
                objects.append(w.conn)
            objects.append(w.process.sentinel)
        manager_sentinel = self._manager._process.sentinel if self._manager else None
        if manager_sentinel is not None:
            objects.append(manager_sentinel)
        ready = set(wait(objects, timeout=_TICK_S))
        for w in list(self._workers.values()):
            if w.conn in ready:
                self._drain(w)
        if manager_sentinel is not None and manager_sentinel in ready:
            code = self._manager._process.exitcode
            self._abort = (
                f"the VM pool's manager process died (exit code {code}); every finished result "
                f"is kept in {self.run_dir / 'results.jsonl'}"
            )
            log.error(self._abort)
            return
        for w in list(self._workers.values()):
            if w.process.sentinel in ready:
                self._on_worker_death(ctx, w, reason=f"worker exited with code {w.process.exitcode}")

    def _drain(self, w: _Worker) -> None:
        """Handle every message already in a worker's pipe."""
        try:
            while w.conn_open and w.conn.poll():
                self._handle(w, w.conn.recv())
        except (EOFError, OSError):
            w.conn_open = False

    def _handle(self, w: _Worker, message: Started | Finished) -> None:
        ident = (message.key, message.attempt)
        if ident not in w.assigned:
            return  # an attempt already settled (timed out); one record per attempt
        if isinstance(message, Started):
            w.started[ident] = time.monotonic()
        elif isinstance(message, Finished):
            del w.assigned[ident]
            w.started.pop(ident, None)
            self._record(message.record)

    def _record(self, record: dict[str, Any]) -> None:
        """Decide whether an attempt is final, retry it if not, append it to results.jsonl."""
        if record.get("status") in (PoolExhausted.kind, "pool_closed", StorageError.kind):
            # Not the sample's fault and not final: a resumed run (with working VMs, with
            # space on the disk) runs it.
            record["final"] = False
            if self._abort is None and not self._interrupted:
                self._abort = (record.get("failure") or {}).get("message") or "the VM pool is exhausted"
                log.error("stopping the run: %s", self._abort)
        elif record.get("infrastructure") and record["attempt"] < self.config.max_retries:
            record["final"] = False
            task = self._task_of(record)
            retry = Assignment(task, record["sample_idx"], record["attempt"] + 1)
            # Retries go first: the sample has already waited its turn once.
            self._pending.appendleft(retry)
            self._event("retry", task=record["key"], worker=record.get("worker"),
                        reason=f"attempt {record['attempt']} failed with {record['status']}: "
                               f"{(record.get('failure') or {}).get('message', '')[:300]}")
        else:
            record["final"] = True
        record["run_id"] = self.run_id
        try:
            self._store.append(record)
        except StorageError as exc:
            self._abort = str(exc)
            log.error("%s", exc)
            return
        if record["final"]:
            self._finished_keys.add(record["key"])
            self._successes += bool(record.get("success"))
            if self._progress is not None:
                self._progress.update(1)

    def _task_of(self, record: dict[str, Any]):
        return self._tasks_by_id[record["task_id"]]

    def _on_worker_death(self, ctx, w: _Worker, reason: str, timed_out: tuple[str, int] | None = None) -> None:
        """Fail what the worker had started, requeue what it had not, reclaim its VMs."""
        self._drain(w)
        w.process.join(timeout=1)
        del self._workers[w.index]
        w.conn.close()
        pid = w.process.pid
        if self.pool is not None and pid is not None:
            try:
                reclaimed = self.pool.reclaim(pid)
            except (EOFError, OSError, ConnectionError):
                reclaimed = []
        else:
            reclaimed = []
        self._event("worker_died", worker=w.worker_id, reason=f"pid {pid}: {reason}; VMs reclaimed: {reclaimed}")
        log.warning("worker %s (pid %s) died: %s", w.worker_id, pid, reason)
        for ident, item in list(w.assigned.items()):
            if ident in w.started:
                exc = WorkerDied(f"{reason} while running attempt {item.attempt} of {item.key}")
                self._record(_synthetic_record(item, exc, w, time.time() - (time.monotonic() - w.started[ident])))
            else:
                self._pending.appendleft(item)
        if self._interrupted or self._abort:
            return
        self._respawns += 1
        if self._respawns > 10 * self.config.num_rollouts + 10:
            self._abort = f"workers keep dying ({self._respawns} respawns); last: {reason}"
            return
        self._spawn_worker(ctx, w.index)

    def _check_timeouts(self, ctx) -> None:
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
                record = _synthetic_record(item, exc, w, time.time() - (now - started))
                self._record(record)
                self._event("task_timeout", task=item.key, worker=w.worker_id, reason=str(exc))
            kill_tree(w.process.pid)
            w.process.join(timeout=5)
            self._on_worker_death(ctx, w, reason="killed after --task-timeout")

    # -- shutdown -------------------------------------------------------------------------

    def _shutdown(self) -> None:
        """Ordered teardown: STOP once per live worker → drain results while they finish
        (grace period) → kill what is left → stop every VM → stop the Manager."""
        grace = 0.0 if self._abort else self.config.shutdown_grace_s
        if self._interrupted is None and not self._abort and not self._in_flight():
            grace = max(grace, 10.0)  # clean completion: workers exit at once anyway
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
                self._pool_stats = self.pool.stats()  # after shutdown: every reset counted
            except (EOFError, OSError, ConnectionError, RolloutError):
                log.warning("the pool's manager was already gone; sweeping its VMs")
        if self._manager is not None:
            try:
                self._manager.shutdown()
            except Exception:  # noqa: BLE001 - already dead is fine
                pass
            if self._manager._process.is_alive():
                kill_tree(self._manager._process.pid)
        if self.provider_cls is not None and (self._abort or self._interrupted):
            # A manager that died (or was killed) could not stop its VMs itself.
            self.provider_cls.sweep(self.run_id)
        if self._progress is not None:
            self._progress.close()

    def _finish(self, total: int) -> RunOutcome:
        records = read_records(self.run_dir / "results.jsonl") if (self.run_dir / "results.jsonl").exists() else []
        summary = summarize(records, total_samples=total, pool_stats=getattr(self, "_pool_stats", None),
                            started_at=self._started_at, interrupted=bool(self._interrupted))
        summary["run_id"] = self.run_id
        self._write_summary(summary)
        resume_cmd = self._resume_command()
        if self._interrupted:
            message = f"interrupted by signal {self._interrupted}; resume with: {resume_cmd}"
            code = EXIT_INTERRUPTED
        elif self._abort:
            message = f"run stopped: {self._abort}\nresume with: {resume_cmd}"
            code = EXIT_ABORTED
        else:
            message = ""
            code = EXIT_OK
        if message:
            log.error(message)
        from .report.gate import after_run

        code, message = after_run(self.config, self.run_dir, code, message)
        return RunOutcome(code, self.run_dir, summary, message)

    def _write_summary(self, summary: dict[str, Any]) -> None:
        # Whole or not at all, and never an exception: on a full disk the run must still
        # release its lock and say how to resume; summary.json is rewritten by the resume.
        path = self.run_dir / "summary.json"
        tmp = path.with_name("summary.json.tmp")
        try:
            tmp.write_text(json.dumps(summary, indent=2))
            tmp.replace(path)
        except OSError as exc:
            log.error("cannot write %s: %s", path, exc.strerror or exc)
            try:
                tmp.unlink()
            except OSError:
                pass

    def _resume_command(self) -> str:
        """The command that resumes this run (--resume reads the rest from config.json)."""
        argv = ["parallel-rollout", "run", "--output-dir", self.config.output_dir,
                "--run-id", self.run_id, "--resume"]
        return " ".join(shlex.quote(a) for a in argv)

    # -- helpers --------------------------------------------------------------------------

    def _on_signal(self, signum, frame) -> None:
        if self._interrupted is None:
            self._interrupted = signum
            log.warning("signal %d: stopping (finishing what completes within %.0fs)",
                        signum, self.config.shutdown_grace_s)

    def _event(self, kind: str, task: str | None = None, worker: str | None = None, reason: str = "") -> None:
        if self._events is None:
            return
        # The pool's transition fields too (empty), so every line of the file has one shape.
        line = json.dumps({"time": round(time.time(), 4), "event": kind, "vm": None, "from": None,
                           "to": None, "task": task, "worker": worker, "reason": reason[:1000]})
        try:
            self._events.write(line + "\n")
        except OSError:
            log.exception("cannot write events.jsonl")

    def _open_progress(self, total: int) -> None:
        show = self.config.progress
        if show is None:
            show = sys.stderr.isatty()
        if not show:
            return
        from tqdm import tqdm

        self._progress = tqdm(total=total, initial=len(self._finished_keys), desc=self.run_id,
                              unit="rollout", dynamic_ncols=True, mininterval=0.5)

    def _update_progress(self) -> None:
        done = len(self._finished_keys)
        rate = f"{self._successes / done:.0%}" if done else "-"
        vms = ""
        if self.pool is not None:
            try:
                states = self.pool.stats()["states"]
                vms = f"busy {states['leased']} idle {states['idle']} reset {states['resetting']} dead {states['dead']}"
            except (EOFError, OSError, ConnectionError, RolloutError):
                vms = "pool unreachable"
        if self._progress is not None:
            self._progress.set_postfix_str(f"ok {rate} | VMs {vms}", refresh=False)
        elif time.monotonic() - self._last_progress_log >= _PROGRESS_LOG_S:
            # No terminal (cron, CI): a line now and then instead of a bar.
            self._last_progress_log = time.monotonic()
            log.info("progress: %d/%d done, success %s, in flight %d, VMs %s",
                     done, self._total, rate, self._in_flight(), vms or "-")


def census(cfg: RunConfig) -> str:
    """What --dry-run prints: every task of --data loaded and checked, per domain the tasks,
    the runnable ones and the unsupported features; nothing is started."""
    if cfg.data is None:
        raise ConfigError("--data is required: a .json or .jsonl task file, an OSWorld folder, "
                          "or humaneval")
    task_set = load_task_set(cfg.data, default_mode=cfg.mode, validators=task_validators(),
                             domain=cfg.domain, index=cfg.osworld_index)
    return "\n".join(census_lines(task_set))


def _synthetic_record(item: Assignment, exc: RolloutError, w: _Worker, started_at: float) -> dict[str, Any]:
    """The record of an attempt whose worker could not write one."""
    now = time.time()
    return {
        "key": item.key, "task_id": item.task.id, "sample_idx": item.sample_idx,
        "attempt": item.attempt, "mode": item.task.mode, "tags": list(item.task.tags),
        "status": exc.kind, "reward": 0.0, "success": False, "infrastructure": exc.infrastructure,
        "failure": {"type": type(exc).__name__, "message": str(exc), "traceback": ""},
        "turns": None, "worker": w.worker_id, "pid": w.process.pid, "slot": None, "vm": None,
        "lease_wait_s": None, "started_at": round(started_at, 4), "ended_at": round(now, 4),
        "duration_s": round(now - started_at, 4), "usage": {},
    }


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
