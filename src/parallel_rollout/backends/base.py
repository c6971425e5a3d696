"""What every backend shares: the contract with the engine, the worker table, the crash
window, task clocks and process-tree kills (a worker's process group: ``process_group``).

The engine (``engine``) decides what runs; a backend keeps what runs it (``local``: worker
processes and a Manager-hosted pool on this host; ``ray``: actors on every node). The two
talk through two Protocols, so that neither names the other's class::

    Engine ──Backend (start, send, wait, handle, check_timeouts, shutdown …)──► backend
       ▲                                                                          │
       └──────── EngineHooks (record, requeue, event, stop, closing) ◄────────────┘

A backend gets its data in a frozen ``BackendSpec`` and calls back only through
``EngineHooks``; ``shutdown`` returns the pool's final stats instead of writing them into the
engine. The failure policy both follow lives here once:

* **Deaths.** A dead worker's acknowledged attempts become ``failed_record`` s
  (``worker_died``, retried by the engine); its unacknowledged ones are requeued.
* **Timeouts** (``late_failures``). An attempt past ``--task-timeout`` is the task's
  ``task_timeout``, unless the VM it held then (its last ``Progress``: VM and lease) was
  killed from outside, as its pool's provider tells: a guest call that hangs on a guest agent
  stopped or traced from the host is not the task's time. It is then ``VMKilled``
  (infrastructure, retried; the VM marked dead). Asked before the worker is killed: its
  death hands its VMs back to be reset.
* **Crash loops** (``CrashWindow``). Deliberate kills (timeouts, cancels, a lost node) are
  not crashes. Workers that die on their own more than ``10·W + 10`` times (W: the workers
  of the engine) within a minute stop the engine; a long run with occasional deaths goes on.
* **Task clocks** (``Clock``). An attempt's clock runs from its acknowledgement, except while
  it waits for a VM (``LeaseWait``, local workers only: a Ray attempt's clock runs from its
  dispatch, VM waits included) and while a weight update holds every clock
  (``hold_clocks``: an RL trainer's ``suspend`` until its ``resume``).
"""

from __future__ import annotations

import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import psutil

from .. import records
from ..config import RunConfig
from ..agents.episode import ModelUnavailable
from ..errors import AgentEndedWorker, RolloutError, TaskTimeout, WorkerDied
from ..messages import Assignment, Cancel
from ..pool.leasing import blame_outside
from ..pool.providers import ProviderOptions

#: the window in which worker crashes are counted (read when a backend starts: a test may
#: widen it, so that a slow machine's spread-out deaths still fall in one window)
CRASH_WINDOW_S = 60.0
#: at most this many pools asked at once why a late attempt's VM died (``late_failures``)
_BLAME_THREADS = 16
#: how long a timeout pass waits for the pools' word on its attempts' VMs (``late_failures``)
_BLAME_PATIENCE_S = 0.5


@dataclass(frozen=True)
class BackendSpec:
    """What a backend needs to know of its engine's run."""

    config: RunConfig
    run_dir: Path
    run_id: str
    #: the provider class of the pool, None when no mode of the engine needs VMs
    provider_cls: Any = None
    provider_options: ProviderOptions | None = None


class EngineHooks(Protocol):
    """The engine's callbacks a backend may call (on the engine's thread)."""

    def record(self, record: dict[str, Any], *, loop_free: bool = False) -> None:
        """Settle one attempt with its record; ``loop_free``: its worker finished it and
        that env loop takes the next attempt (a record the backend made for a worker it
        kills, or one that died, is not)."""

    def requeue(self, item: Assignment) -> None:
        """Put an attempt no worker acknowledged back at the head of the queue."""

    def event(self, kind: str, task: str | None = None, worker: str | None = None,
              reason: str = "") -> None:
        """Append one line to events.jsonl."""

    def stop(self, reason: str) -> None:
        """Stop the engine for good (the pool's manager died, every node is lost …)."""

    @property
    def closing(self) -> bool:
        """True once the engine is closing or stopped: no respawns."""

    @property
    def grace_cut(self) -> bool:
        """True once a second stop signal asked for a stop at once: a shutdown's grace ends."""

    @property
    def stopping(self) -> bool:
        """True once a stop signal came: the start starts nothing more."""

    @property
    def stop_due(self) -> bool:
        """True once the first stop signal's grace has passed, or a second one cut it: what
        the start still waits for is cancelled."""


def grace_left(deadline: float, hooks: EngineHooks) -> float:
    """Seconds left of a shutdown's grace that ends at ``deadline``: none once it was cut."""
    return 0.0 if hooks.grace_cut else max(0.0, deadline - time.monotonic())


class Backend(Protocol):
    """What the engine calls on a backend; every call comes from the engine's thread."""

    @property
    def concurrency(self) -> int:
        """The limit on rollouts in flight."""

    @property
    def manager_pid(self) -> int | None:
        """The pid of the pool's Manager process on this host, or None."""

    def start(self) -> None:
        """Start the pool (when the spec has a provider) and the workers."""

    def send(self, item: Assignment) -> bool:
        """Hand ``item`` to a worker with a free env loop; False when none has one."""

    def send_cancel(self, cancel: Cancel) -> None:
        """Tell the worker holding an attempt to drop it."""

    def wait(self, extra: list[Any], timeout: float) -> set[Any]:
        """Block until something of the backend's or of ``extra`` is ready, or ``timeout``."""

    def handle(self, ready: set[Any]) -> None:
        """Handle what ``wait`` found: records, deaths, lost pools."""

    def check_timeouts(self) -> None:
        """Settle attempts past their deadlines and kill their workers."""

    def kill_holder(self, item: Assignment, reason: str) -> None:
        """Kill the worker holding ``item`` (a cancel it did not obey) and handle its death."""

    def holds(self, item: Assignment) -> bool:
        """Whether a worker holds this attempt."""

    def in_flight(self) -> int:
        """Attempts sent to workers and not settled (safe from any thread)."""

    def pool_stats(self) -> dict[str, Any] | None:
        """The pool's stats, or None: the local pool's asked now, the ray pools' as their
        last per-second reports said them."""

    def worker_pids(self) -> dict[str, int | None]:
        """Each live worker's id and pid (None while a Ray actor starts)."""

    def holder_pid(self, key: str, attempt: int) -> int | None:
        """The pid of the worker holding an attempt, or None."""

    def hold_clocks(self, held: bool) -> None:
        """Stop or restart every attempt's task clock (a weight update under way)."""

    def shutdown(self, grace: float, sweep: bool) -> dict[str, Any] | None:
        """Stop workers and pools in order; returns the pool's final stats (None without)."""

    def cluster(self) -> dict[str, Any] | None:
        """The nodes of a Ray run (used, lost with why, left out), for summary.json; None without."""


class WorkerTable:
    """Every backend's table of its workers (``_workers``: index → a handle with
    ``worker_id``, ``pid`` and the attempts it was ``assigned``)."""

    _workers: dict[int, Any]
    #: clocks are held (a weight update is under way): new ones start held
    _clocks_held: bool = False

    def hold_clocks(self, held: bool) -> None:
        """Stop (``held``) or restart every task clock, and those of attempts acknowledged
        meanwhile; called on the engine's thread."""
        self._clocks_held = held
        now = time.monotonic()
        for worker in list(self._workers.values()):
            for clock in worker.started.values():
                clock.hold(held, now)

    def new_clock(self) -> Clock:
        """The task clock of an attempt acknowledged now (held if clocks are held)."""
        now = time.monotonic()
        clock = Clock(started_at=time.time(), running_since=now)
        clock.hold(self._clocks_held, now)
        return clock

    def in_flight(self) -> int:
        """Attempts sent to workers and not settled (safe from any thread)."""
        return sum(len(w.assigned) for w in list(self._workers.values()))

    def holds(self, item: Assignment) -> bool:
        """Whether a worker holds this attempt."""
        return self._holder(item.key, item.attempt) is not None

    def worker_pids(self) -> dict[str, int | None]:
        """Each live worker's id and pid."""
        return {w.worker_id: w.pid for w in list(self._workers.values())}

    def holder_pid(self, key: str, attempt: int) -> int | None:
        """The pid of the worker holding an attempt, or None."""
        worker = self._holder(key, attempt)
        return None if worker is None else worker.pid

    def _holder(self, key: str, attempt: int) -> Any:
        return next((w for w in list(self._workers.values()) if (key, attempt) in w.assigned), None)


class CrashWindow:
    """Counts workers' own deaths (never deliberate kills) in a sliding window; more than
    ``limit`` within ``window_s`` is a crash loop."""

    def __init__(self, workers: int, window_s: float | None = None) -> None:
        self.window_s = CRASH_WINDOW_S if window_s is None else window_s
        self._deaths: deque[float] = deque()
        self.limit = 0
        self.resize(workers)

    def resize(self, workers: int) -> None:
        """The limit for ``workers`` workers (the Ray backend's count follows its nodes)."""
        self.limit = 10 * workers + 10

    def crashed(self, now: float | None = None) -> bool:
        """Count one crash; True when the crashes in the window are past the limit."""
        now = time.monotonic() if now is None else now
        self._deaths.append(now)
        while self._deaths and now - self._deaths[0] > self.window_s:
            self._deaths.popleft()
        return len(self._deaths) > self.limit

    def __len__(self) -> int:
        return len(self._deaths)


@dataclass
class Clock:
    """The task clock of one acknowledged attempt: it runs except while the attempt waits
    for a VM and while a weight update holds every clock (``hold``)."""

    #: wall-clock time of the acknowledgement, for records
    started_at: float
    #: monotonic time the clock last resumed, None while it is stopped
    running_since: float | None
    ran_s: float = 0.0
    #: monotonic time the current wait for a VM began
    waiting_since: float | None = None
    #: a weight update (``suspend``) holds it: model requests wait at the gate meanwhile
    held: bool = False
    #: the worker's last word of where the attempt is (``messages.Progress``; local workers)
    progress: Any = None

    def elapsed(self, now: float) -> float:
        """Seconds of task time so far."""
        return self.ran_s + (now - self.running_since if self.running_since is not None else 0.0)

    def lease_wait(self, waiting: bool, now: float) -> None:
        """Stop the clock while a VM is awaited, restart it when one is held."""
        if waiting and self.waiting_since is None:
            self._stop(now)
            self.waiting_since = now
        elif not waiting and self.waiting_since is not None:
            self.waiting_since = None
            self._restart(now)

    def hold(self, held: bool, now: float) -> None:
        """Stop the clock while a weight update holds model requests, restart it after."""
        if held and not self.held:
            self._stop(now)
            self.held = True
        elif not held and self.held:
            self.held = False
            self._restart(now)

    def _stop(self, now: float) -> None:
        if self.running_since is not None:
            self.ran_s += now - self.running_since
            self.running_since = None

    def _restart(self, now: float) -> None:
        if self.running_since is None and self.waiting_since is None and not self.held:
            self.running_since = now


#: the phases in which only the agent's code runs in the worker (an exit of the worker's own is its doing)
_AGENT_PHASES = ("agent", "model_retry")
#: what each phase of ``messages.Progress`` is, in a record's failure message
_PHASES = {"setup": "the task's setup (the env's reset)",
           "agent": "the agent's turns (its actions and the env's steps running them)",
           "model_retry": "the agent's turns, retrying a model request the endpoint failed",
           "grading": "grading (the env's evaluate: {grading})"}
#: what grading runs, per built-in mode (another mode's: "the env's evaluate" alone)
_GRADING = {"shell": "the task's check", "py": "the task's tests, in the VM", "math": "math-verify's comparison",
            "osworld": "its postconfig steps, getters and metrics", "web": "MiniWoB's reward, in the VM",
            "rag": "the answer's F1", "gym": "the game's reward"}


def _phase(phase: str, mode: str) -> str:
    """A phase in words, grading as the attempt's mode grades."""
    said = _PHASES.get(phase, phase)
    return said.format(grading=_GRADING[mode]) if mode in _GRADING else said.replace(": {grading}", "")


def death_failure(item: Assignment, reason: str, exit_code: int | None, progress: Any) -> RolloutError:
    """What a worker's death was to an attempt it held: the agent's error (``AgentEndedWorker``)
    when the worker exited with a status of its own (``exit_code`` >= 0, not a signal) while
    the attempt was in the agent's turns (``progress.phase``), where only the agent's code
    runs that could end it so; else ``WorkerDied``, infrastructure (a signal, a death while
    the env or the pool worked, a status nobody could read)."""
    where = f"{reason} while running attempt {item.attempt} of {item.key}"
    if exit_code is not None and exit_code >= 0 and progress is not None and progress.phase in _AGENT_PHASES:
        return AgentEndedWorker(f"{where}: the agent ended its worker process (os._exit or the like); an "
                                "attempt it ended is its own failure, graded 0, not retried")
    return WorkerDied(where)


def late_failures(late: list[tuple[Any, Assignment, RolloutError, Any]]) -> list[RolloutError]:
    """What each attempt past its deadline is, given as (its pool, the attempt, its timeout,
    its last ``Progress``): the timeout, unless the attempt held a VM (``progress.lease``)
    that its pool says was killed from outside (``leasing.blame_outside``: the VM is marked
    dead then); a VM the task may have broken itself (its own uid stopped its processes, it
    used its memory up) is its timeout still. ``pool`` None: the attempt's pool is gone or
    it has none.

    The engine thread waits here, so the VMs of one pass are asked at once and for at most
    ``_BLAME_PATIENCE_S``: a VM killed or stopped from outside is so by the deadline and
    says so at once, while a provider asked of a VM that still runs waits a few seconds for
    it to die (``Provider.death_cause``), as it must after a broken call; an answer not in by
    then is the timeout's (a hung task's VM runs on)."""
    asked = [(index, pool, progress) for index, (pool, _, _, progress) in enumerate(late)
             if pool is not None and getattr(progress, "lease", None) is not None]
    causes: dict[int, str | None] = {}
    if asked:
        threads = ThreadPoolExecutor(min(len(asked), _BLAME_THREADS), thread_name_prefix="late-blame")
        futures = {index: threads.submit(pool.death_cause, progress.vm, progress.lease)
                   for index, pool, progress in asked}
        wait(futures.values(), timeout=_BLAME_PATIENCE_S)
        threads.shutdown(wait=False, cancel_futures=True)  # a slow answer ends in its thread, unread
        for index, future in futures.items():
            try:
                # not asked in time (cancelled in the queue, or still waiting): the timeout's
                causes[index] = future.result(timeout=0) if future.done() and not future.cancelled() else None
            except (EOFError, OSError, RolloutError):  # the pool is gone or closed: the run sees to that
                causes[index] = None
    failures: list[RolloutError] = []
    for index, (pool, item, timeout, progress) in enumerate(late):
        killed = None
        if causes.get(index):
            try:
                killed = blame_outside(pool, progress.vm, progress.lease, item.key, timeout, causes[index])
            except (EOFError, OSError, RolloutError):
                killed = None
        failures.append(killed or _endpoints_time(timeout, progress))
    return failures


def _endpoints_time(timeout: RolloutError, progress: Any) -> RolloutError:
    """``timeout``, or ``ModelUnavailable`` when the attempt's time ran out while its agent
    retried a model request the endpoint had failed (a 429's Retry-After, a server that
    stopped answering: ``progress.phase`` "model_retry"): the endpoint's time, not the task's,
    so the attempt is retried and never graded, and an endpoint that keeps failing stops
    the run for a resume. A request still waiting for its first answer is the task's time:
    a model that answers slowly is not told from one that hangs until that request fails."""
    if not isinstance(timeout, TaskTimeout) or getattr(progress, "phase", None) != "model_retry":
        return timeout
    return ModelUnavailable(f"{timeout}, while the model endpoint failed a request of the turn and it was "
                            "being retried: the endpoint's time, not the task's; not graded, retried")


def died_record(item: Assignment, exc: RolloutError, worker: Any, started_at: float,
                progress: Any = None) -> dict[str, Any]:
    """The record of an attempt whose worker could not write one (it died, or ran past a
    deadline and was killed). ``progress``, the worker's last ``Progress`` of it, gives the
    record its VM, turns and trajectory, and the failure the phase it ended in
    (``failure.phase``, also said in its message)."""
    record = records.failed_record(item, exc, worker=worker.worker_id, pid=worker.pid,
                                   started_at=started_at)
    if progress is not None:
        record.update(vm=progress.vm, turns=progress.turns)
        if progress.trajectory is not None:
            record["trajectory"] = progress.trajectory
        record["failure"]["phase"] = progress.phase
        record["failure"]["message"] += (f"; the attempt was in {_phase(progress.phase, item.task.mode)}, "
                                         f"{progress.turns} turn(s) taken")
    return record


def kill_tree(pid: int | psutil.Process | None) -> None:
    """SIGKILL a process and every descendant (a worker's agent subprocesses included).

    Straight to SIGKILL, no terminate first: a worker past its deadline is not trusted to
    exit, and its agent subprocesses hold its pipes. Given a ``psutil.Process`` taken while
    the process ran, a pid the kernel has given to another process since is left alone."""
    if pid is None:
        return
    try:
        root = pid if isinstance(pid, psutil.Process) else psutil.Process(pid)
        family = root.children(recursive=True) + [root]
    except psutil.NoSuchProcess:
        return
    for proc in family:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(family, timeout=5)

