"""The Ray actors of the ray backend: a node's VM pool, and a worker that runs attempts.

Both are plain classes here (this module imports no Ray at load); ``ray_backend`` wraps them
with ``ray.remote`` and pins each to a node. They run inside Ray's worker processes:

* ``PoolActor`` hosts one ``VMPoolManager`` (the same class the local backend serves from
  its Manager process). It is threaded: ``lease`` blocks, so many calls run at once, and the
  pool's own lock orders them. ``watch`` blocks until the pool shuts down: the driver holds
  its reference, which fails when the actor or its node dies.
* ``WorkerActor`` runs attempts with the local backend's ``RolloutWorker.run_attempt``; one
  thread per env loop (``slot``). As a local worker does, it leads a process group of its own,
  which its agent's processes join; a watcher on its node kills what is left of the group once
  the actor is gone, whichever way it ends (``process_group.watch_group``). It leases from its node's pool through ``RayPool``, which
  turns a lost pool into ``ConnectionError`` (an infrastructure failure, retried) and a pool
  exception into itself (``LeaseTimeout``, ``PoolExhausted`` …). Unless it sees the driver's
  folder, its record carries the attempt's trajectory files (``TRAJECTORY_FILES``), which the
  driver writes into its own: nodes need not share the output folder. A node whose disk is
  not the driver's says where to write with ``PARALLEL_ROLLOUT_NODE_DIR`` in its environment.
  Whether a node shares the folder is seen, not assumed: the driver writes a fresh token in
  ``FOLDER_MARK`` of its run folder, and a worker that reads the same token there sends no
  files (an OSWorld attempt's screenshots are tens of MB: through Ray and the engine's thread
  for nothing where the driver has them already). A pool apart from the folder keeps its
  events.jsonl lines (``EventLines``) for the driver, which takes them every second, with
  the pool's stats (``report``), and once more after the pool's shutdown. So do both actors'
  warnings and errors (``ray_logs``): a pool's with its report, a worker's with its records
  (and, should either die before its next answer, from the cluster's store: ``last_words``).
"""

from __future__ import annotations

import os
import secrets
import signal
import threading
import uuid
from pathlib import Path
from typing import Any

import psutil

from ..agents import get_agent
from ..envs import get_env
from ..messages import Assignment
from ..pool.manager import VMPoolManager
from ..process_group import lead_group, watch_group
from ..trajectories import pack_files
from ..worker import LoopParts, RolloutWorker
from .ray_logs import LOG_LINES, keep_lines, mark_start
from .ray_pending import answers_within

#: a node's own folder for attempts' files (its disk is not the driver's); the record brings
#: the trajectory back through Ray either way
NODE_DIR_ENV = "PARALLEL_ROLLOUT_NODE_DIR"
#: the record key the trajectory files travel under (the driver takes it out)
TRAJECTORY_FILES = "trajectory_files"
#: the file of the run folder holding the driver's token: a worker that reads it shares the folder
FOLDER_MARK = ".ray-driver-folder"


def mark_folder(run_dir: str | Path) -> str | None:
    """Write a fresh token in ``run_dir``'s ``FOLDER_MARK`` (the driver, at start); None when
    the folder cannot take it (then every node sends its files)."""
    token = uuid.uuid4().hex
    try:
        Path(run_dir).mkdir(parents=True, exist_ok=True)
        (Path(run_dir) / FOLDER_MARK).write_text(token + "\n", encoding="utf-8")
    except OSError:
        return None
    return token


def shares_folder(run_dir: str | Path, token: str | None) -> bool:
    """Whether ``run_dir`` here is the driver's: its ``FOLDER_MARK`` holds ``token``."""
    if not token:
        return False
    try:
        return (Path(run_dir) / FOLDER_MARK).read_text(encoding="utf-8").strip() == token
    except OSError:
        return False


def node_run_dir(run_dir: str) -> str:
    """The run folder's path on this node: the driver's, unless the node's own disk is
    named (``NODE_DIR_ENV``)."""
    local = os.environ.get(NODE_DIR_ENV)
    return str(Path(local) / Path(run_dir).name) if local else run_dir


class EventLines:
    """A pool's events.jsonl lines kept for the driver (a stream ``VMPoolManager`` writes)."""

    def __init__(self) -> None:
        self._lines: list[str] = []
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        with self._lock:
            self._lines.append(text)
        return len(text)

    def take(self) -> str:
        """The lines written since the last take, as one text."""
        with self._lock:
            lines, self._lines = self._lines, []
        return "".join(lines)

    def close(self) -> None:
        """Nothing to flush: the lines stay until taken."""


def _node_id() -> str:
    import ray

    return ray.get_runtime_context().get_node_id()


def _ignore_sigint() -> None:
    # Ctrl-C reaches the whole process group; the driver orders the shutdown.
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread
        pass


class PoolActor:
    """One node's VM pool."""

    def __init__(self, *args: Any, run_dir: str, folder_token: str | None = None, node_id: str = "",
                 lines_key: str | None = None, **kwargs: Any) -> None:
        _ignore_sigint()
        #: its warnings and errors, for the driver's log (the provider's, as it starts, too),
        #: named by the node the driver placed it on; stored under ``lines_key`` as they are
        #: logged, for the driver to read should it die before its next report (``ray_logs``)
        self.lines = keep_lines(f"VM pool on node {node_id[:8]}", lines_key)
        run_dir = node_run_dir(run_dir)
        #: the events.jsonl lines of a pool that does not see the driver's folder
        self.events = None if shares_folder(run_dir, folder_token) else EventLines()
        where = ({"events_path": str(Path(run_dir) / "events.jsonl")} if self.events is None
                 else {"events_stream": self.events})
        self.pool = VMPoolManager(*args, **where, **kwargs)
        self._closed = threading.Event()

    def call(self, name: str, *args: Any) -> Any:
        """``pool.<name>(*args)``; exceptions travel to the caller."""
        if name == "shutdown":
            try:
                return self.pool.shutdown()
            finally:
                self._closed.set()
        return getattr(self.pool, name)(*args)

    def ready(self) -> dict[str, Any]:
        """Where the pool runs."""
        return {"pid": os.getpid(), "node": _node_id()}

    def watch(self) -> None:
        """Return when the pool shuts down; the reference fails if the actor dies first."""
        self._closed.wait()

    def take_events(self) -> str:
        """The events.jsonl lines kept since the last call (none where the pool writes the
        driver's folder itself)."""
        return self.events.take() if self.events is not None else ""

    def report(self) -> dict[str, Any]:
        """What the driver takes every second: ``take_events``' lines, the pool's stats now
        (a node lost later still counts its leases, resets and boots, as of this) and the
        warnings it logged since (``ray_logs``)."""
        return {"events": self.take_events(), "stats": self.pool.stats(), LOG_LINES: self.lines.take()}


class RayPool:
    """The pool interface ``worker`` expects, over a pool actor's handle (one pool may be
    leased from several nodes: its workers are known by their spawn's holder token, never
    by a pid, which two hosts may share)."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)

        def call(*args: Any) -> Any:
            import ray
            from ray.exceptions import RayActorError, RayTaskError

            try:
                return ray.get(self.handle.call.remote(name, *args))
            except RayTaskError as exc:
                cause = getattr(exc, "cause", None)
                if isinstance(cause, BaseException):
                    raise cause from None
                raise ConnectionError(f"the node's VM pool failed: {exc}") from None
            except RayActorError as exc:
                raise ConnectionError(f"the node's VM pool is gone: {exc}") from None

        return call


class WorkerActor:
    """One worker: runs attempts, up to ``envs_per_worker`` at once (one per slot)."""

    def __init__(self, worker_id: str, holder: str, pool_handle: Any, config: Any, run_dir: str,
                 folder_token: str | None = None, lines_key: str | None = None) -> None:
        _ignore_sigint()
        # before anything of the run's: what an agent (or a plugin's import) starts joins the
        # group, and dies with the actor however it ends (a kill, a death, its node lost)
        cgroup = secrets.token_hex(8)
        watch_group(cgroup)  # first: the watcher is not to be in the cgroup it kills
        lead_group(cgroup)
        # before the actor says ready (and so before any attempt's clock): a plugin mode's or
        # agent's import never counts against --task-timeout; one that fails is said by
        # ready(), and the driver stops the run naming it (every worker of the node would fail
        # alike; raised here, Ray's death of the actor kept only "an error raised in its
        # creation task", and the driver respawned it until the crash limit, 60 s later)
        #: why this node cannot make the run's mode or agent (None: it can)
        self.cannot_load: str | None = None
        self._node = _node_id()
        #: its warnings and errors (its agent's, its env's), for the driver's log; stored under
        #: ``lines_key`` as they are logged, for the driver to read should it die (``ray_logs``)
        self.lines = keep_lines(f"worker {worker_id} on node {self._node[:8]}", lines_key)
        try:
            get_env(config.mode), get_agent(config.agent)
        except Exception as exc:  # noqa: BLE001 - said to the driver, which stops the run
            self.cannot_load = f"{type(exc).__name__}: {exc}"
            return
        pool = RayPool(pool_handle) if pool_handle is not None else None
        run_dir = node_run_dir(run_dir)
        #: the driver reads this node's files itself: records need not carry them
        self.shares_folder = shares_folder(run_dir, folder_token)
        self.worker = RolloutWorker(worker_id, holder, None, pool, config, run_dir)
        self._parts: dict[int, LoopParts] = {}

    def ready(self) -> dict[str, Any]:
        """The actor's pid and node, and why it cannot run the run's mode or agent (the
        import's error; None when it can)."""
        return {"pid": os.getpid(), "node": self._node, "cannot_load": self.cannot_load}

    def run(self, item: Assignment, slot: int) -> dict[str, Any]:
        """Run one attempt to its record (never raises)."""
        parts = self._parts.setdefault(slot, LoopParts(self.worker.config))
        record = self.worker.run_attempt(item, slot, parts)
        self.worker.forget(item.key, item.attempt)
        record["node"] = self._node
        record[LOG_LINES] = self.lines.take()  # what it said, this attempt's warnings with it
        # Where the driver's folder is not this node's, the turns travel with the record and
        # the driver writes them: a trainer never gets a reward without turns.
        if not self.shares_folder:
            record[TRAJECTORY_FILES] = pack_files(self.worker.run_dir, record.get("trajectory"))
        return record

    def cancel(self, key: str, attempt: int) -> None:
        """Stop an attempt at its next turn."""
        self.worker.cancel(key, attempt)

    def progress(self, idents: list[tuple[str, int]]) -> dict[tuple[str, int], tuple[Any, dict[str, str]]]:
        """Where each of these attempts is (``messages.Progress``), with its trajectory's
        files where the driver's folder is not this node's: for the records of attempts the
        driver is about to kill for a timeout."""
        found = {}
        for ident in idents:
            where = self.worker.progress_of(*ident)
            files = {} if where is None or self.shares_folder else pack_files(self.worker.run_dir, where.trajectory)
            found[ident] = (where, files)
        return found

    def kill_children(self) -> list[Any]:
        """SIGKILL every descendant (agent subprocesses) before the driver kills the actor,
        which would leave them orphaned; the warnings it logged since its last record, which
        would be lost with it. (Those that left its tree but not its process group die by its
        watcher, once the actor is gone.)"""
        try:
            children = psutil.Process().children(recursive=True)
        except psutil.Error:
            children = []
        for child in children:
            try:
                child.kill()
            except psutil.Error:
                pass
        return self.lines.take()


#: how long a timeout waits for the late actors to say where their attempts are (all at once)
PROGRESS_WAIT_S = 2.0

#: where a late actor's attempts are, by (key, attempt): (``messages.Progress``, its files)
Where = dict[tuple[str, int], tuple[Any, dict[str, str]]]


def late_progress(asked: list[tuple[Any, list[tuple[str, int]]]]) -> list[Where]:
    """On the driver: where each late actor's attempts are (``WorkerActor.progress``), asked
    before they are killed, of every actor at once and under one deadline, PROGRESS_WAIT_S;
    nothing for an actor that does not answer by then (one whose agent holds its interpreter,
    its node paused). Asked in turn, N late actors of a stalled node held the engine thread,
    every node's dispatch and results with it, N × PROGRESS_WAIT_S."""
    refs: list[Any] = []
    for actor, idents in asked:
        try:
            refs.append(actor.progress.remote(idents))
        except Exception:  # noqa: BLE001 - a dead actor: its records say less, nothing more
            refs.append(None)
    # one that died or raised, or did not answer in time: its records say less, nothing more
    answers = answers_within([ref for ref in refs if ref is not None], PROGRESS_WAIT_S)
    return [answers.get(ref) or {} for ref in refs]


def sweep_here(provider_name: str, run_id: str | None, orphans_only: bool = False, check: bool = False,
               start_mark: str | None = None) -> list[str]:
    """A provider's leftover VMs on the node this runs on, removed; ``orphans_only``: keep
    those whose pool is alive (a live run's: nodes may share one host). ``check``: first its
    ProviderUnavailable when the provider cannot run there (no bubblewrap, no docker daemon …):
    the run's preflight checked only the driver's host, and a node's pool without it failed
    every boot, which stopped the whole run (``the replacement budget is spent``).
    ``start_mark``: first of all, the key stored in the cluster's store (``mark_start``), by
    which the driver counts the sweep's cut-off from here, not from Ray's start of a worker."""
    from ..pool.providers import get_provider

    if start_mark is not None:
        mark_start(start_mark)

    provider_cls = get_provider(provider_name)
    if check:
        provider_cls.check_available()
    return list(provider_cls.sweep(run_id, orphans_only=orphans_only))
