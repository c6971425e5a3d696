"""The ray backend: an engine's workers and VM pools as Ray actors on every node of a cluster.

The other ``backends.base.Backend`` beside ``local.LocalBackend`` (same contract, called by
the same engine thread)::

    driver (engine + RayBackend) ── the only writer of results.jsonl
      │ ray.get/wait                         node A                      node B
      ├──► WorkerActor w0.. (pinned to A) ── lease ──► PoolActor A   WorkerActor … ──► PoolActor B
      └──► …                                           (its VMs, reached by local sockets)

* **Placement.** One pool actor per alive node (``NodeAffinitySchedulingStrategy``, hard),
  sized by ``--num-vms`` (``pool_size``); ``--num-rollouts`` worker actors per node, each
  leasing from its own node's pool, because a process sandbox or a container is reached by a
  unix socket on that node. A provider whose VMs are network addresses (``remote``,
  ``reachable_from_any_node``) gets one pool, on the driver's node, leased from every node
  (its addresses must not be handed out twice). Actors take no CPU from Ray's accounting (``num_cpus=0``): they
  wait on VMs and models, and a node's size is what ``--num-vms`` says. The driver's record of
  each node, its pool's stats and its shutdown are ``ray_pools``'.
* **One record per attempt.** An attempt is a method call (``WorkerActor.run``); the driver
  settles it once, from its result or from the actor's death, never both. Actors have
  ``max_restarts=0`` and calls ``max_task_retries=0``: Ray never reruns an attempt behind
  the driver's back. A dead worker actor (or its node) → each attempt it held is recorded
  ``worker_died`` and the engine retries it on another worker; a replacement worker starts on
  the same node if it is alive (none elsewhere: another node's pool is sized for its own).
  Attempts go to the node with the fewest under way.
* **Lost and new nodes.** The driver holds a ``PoolActor.watch`` reference per pool and polls
  ``ray.nodes()`` (``ray_nodes``): a pool or node that dies has its workers killed (their attempts
  ``worker_died``), its VMs counted dead in the stats, and no new worker; a node that joins
  mid-run gets its pool and workers once swept of the run's leftovers (``ray_cluster.Sweeps``,
  the run going on meanwhile; one whose sweep fails or hangs is left out, as at the start).
  The concurrency limit follows the alive nodes. A head node whose GCS leaves the poll
  unanswered for ``HEAD_LOST_S`` (killed, stopped, cut off; at the start sweep too) stops
  the run (``HeadWatch``) before Ray ends the driver, or for ever waits on it.
* **Deadlines, cancels.** ``--task-timeout`` counts from dispatch (a worker gets an attempt
  only when it has a free slot and has started), time waiting for a VM included; a late
  attempt is recorded ``task_timeout`` (``VMKilled`` when its node's pool tells the VM it
  held was killed from outside: ``base.late_failures``) and its actor killed with its process
  tree and group (``WorkerActor.kill_children``, ``process_group``). Such kills are deliberate:
  like a lost node, they never count toward the crash limit (``base.CrashWindow``), only actors
  that die on their own. A worker's death and the timeouts are ``ray_deaths``'.
* **The engine thread waits on no one actor.** A dead worker's kill (its tree first, then the
  actor) and its VMs' reclaim are sent and settled as they answer (``ray_pending``): a pool
  or node paused, in a GC pause or stalled held dispatch to every node for up to 15 s per
  death. Its ``worker_died`` event is written once its pool says the VMs it reclaimed
  (``not known`` after ``RECLAIM_WAIT_S``); its attempts' records and its replacement do not wait.
* **Ray itself.** ``--ray-address`` (``auto`` or ``HOST:PORT``) joins a running cluster;
  without it a local instance is started (loopback, 200 MB object store, no dashboard) and
  stopped at the end. An engine started inside a process already connected to Ray (an RL
  trainer) uses that connection and leaves it up. A cluster that takes no connection is
  refused as the engine is made, one that refuses the driver as it starts
  (``ClusterUnreachable``, exit 2: nothing ran); the stop signals keep the driver's handlers,
  which ray.init replaces (``ray_cluster.connect``).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from ..errors import ClusterUnreachable, VMError
from ..logs import thread_rewrite
from ..messages import Assignment, Cancel
from ..trajectories import unpack_files
from .base import BackendSpec, Clock, CrashWindow, EngineHooks, WorkerTable, grace_left
from .ray_actors import TRAJECTORY_FILES, PoolActor, WorkerActor, mark_folder
from .ray_cluster import check_reachable, connect, Sweeps, pinned, sweep_cluster, wait_ready, why
from .ray_deaths import WorkerDeaths
from .ray_head import HeadWatch, disconnect_lost
from .ray_logs import LOG_LINES, forget_last_words, run_lines_key, said_on_driver
from .ray_nodes import NodeWatch
from .ray_pending import Pending
from .ray_pools import Node, pools_stats, stop_pools

log = logging.getLogger("parallel_rollout")

#: what the pool actor may serve at once (blocked leases included)
_POOL_CONCURRENCY = 512


@dataclass
class _Worker:
    index: int
    node_id: str
    actor: Any
    ready_ref: Any
    pid: int | None = None
    #: attempts sent and not settled, by (key, attempt), with their slots
    assigned: dict[tuple[str, int], Assignment] = field(default_factory=dict)
    slots: dict[tuple[str, int], int] = field(default_factory=dict)
    #: (key, attempt) -> its task clock, from dispatch
    started: dict[tuple[str, int], Clock] = field(default_factory=dict)
    #: its node is gone
    lost: bool = False
    #: this spawn's token (unique in the run): what the pool knows its leases by
    holder: str = ""
    #: where it stores the lines it logs until an answer takes them (``ray_logs.last_words``)
    lines_key: str | None = None

    @property
    def worker_id(self) -> str:
        """The worker's id (its index; a replacement on the same node keeps it)."""
        return f"w{self.index}"

    @property
    def ready(self) -> bool:
        """The actor started and said its pid."""
        return self.ready_ref is None and self.pid is not None


class RayBackend(WorkerTable, NodeWatch, WorkerDeaths):
    """Worker actors and per-node pool actors of one engine."""

    def __init__(self, spec: BackendSpec, hooks: EngineHooks) -> None:
        self.spec = spec
        self.hooks = hooks
        self.config = spec.config
        self._owns_ray = False
        self._nodes: dict[str, Node] = {}
        self._workers: dict[int, _Worker] = {}
        self._refs: dict[Any, tuple[_Worker, tuple[str, int]]] = {}
        #: the reclaims and kills sent, their answers settled as they come (``ray_pending``)
        self._pending = Pending()
        self._next_index = 0
        #: actors that died on their own (not timeouts, cancels or lost nodes) in the window
        self._crashes = CrashWindow(self.config.num_rollouts)
        self._spawns = 0
        self._last_poll = 0.0
        #: the one pool's node when the provider's VMs are reachable from any node
        self._shared_home: str | None = None
        self.pool = None  # the local backend's attribute; pools live in self._nodes
        #: the token in the run folder's FOLDER_MARK (None: not written; every node sends its files)
        self._folder_token: str | None = None
        self._head = HeadWatch()
        #: the words of whoever started the run, for the actors' warnings (``ray_logs``)
        self._rewrite: Any = None
        #: this engine's part of the cluster's store of workers' last words (another run's, or
        #: this one's resumed, has its own), under its Ray job: known once connected
        self._lines_keys = ""
        #: the nodes' sweeps of the run's leftovers, each before its pool and workers
        #: (and, where a node has its own pool, whether the provider can run there: the run's
        #: preflight checked only this host)
        self._sweeps = Sweeps(self.config.provider_name, spec.run_id,
                              check=not getattr(spec.provider_cls, "reachable_from_any_node", False))
        # a cluster nobody can reach is refused here, as the engine is made: before a run
        # opens its folder (ray.init would retry for ever)
        check_reachable(self.config.ray_address, self.config.resume)

    # -- start -----------------------------------------------------------------------------

    @property
    def manager_pid(self) -> int | None:
        return None

    @property
    def head_lost(self) -> bool:
        """The cluster's head node was counted lost: the run stopped for it, and Ray ends this
        process once its gcs_rpc_server_reconnect_timeout_s has passed since the head went."""
        return self._head.lost

    @property
    def concurrency(self) -> int:
        """Every env loop of every node, capped by --max-concurrent-rollouts."""
        nodes = sum(1 for node in self._nodes.values() if node.alive)
        loops = self.config.num_rollouts * self.config.envs_per_worker * max(1, nodes)
        if self._shared_home is not None:  # more would only wait for a lease
            loops = min(loops, self.config.pool_size)
        return min(loops, self.config.max_concurrent_rollouts or loops)

    def start(self) -> None:
        """Connect to Ray; a pool (if a mode needs VMs) and N workers on every alive node."""
        # connect() first: it says how Ray must read this host's address, which Ray reads
        # once, when it is imported (a cluster on loopback was reached on the host's route)
        try:
            self._owns_ray = connect(self.config.ray_address)
        except ClusterUnreachable as exc:
            self.hooks.stop(str(exc))  # the run's summary says why it stopped: nothing ran
            raise
        import ray

        self._rewrite = thread_rewrite()  # a Python run()'s, a trainer's: its start is under them
        spec, cfg = self.spec, self.config
        if (nodes := self._head.attach()) is None:  # its GCS did not answer for HEAD_LOST_S
            return self._lose_head()
        if not nodes:
            raise RuntimeError("the Ray cluster has no alive node")
        self._lines_keys = run_lines_key()
        forget_last_words(self._lines_keys)  # a killed driver's left, as this run's would be
        if spec.provider_cls is not None:  # leftovers of an earlier, killed run, on every node
            if (swept := self._sweeps.first(nodes, self._head, lambda: self.hooks.stop_due)) is None:
                return self._lose_head()  # the head lost meanwhile
            if self.hooks.stopping:  # a stop signal came as the nodes swept: nothing more starts
                return None
            (nodes, left_out), _ = swept, self._joined([], swept[1])
            if not nodes:
                return self.hooks.stop(f"every node of the Ray cluster is left out: {'; '.join(left_out.values())}")
        if getattr(spec.provider_cls, "reachable_from_any_node", False):
            here = ray.get_runtime_context().get_node_id()
            self._shared_home = here if here in nodes else nodes[0]
            nodes.sort(key=lambda n: n != self._shared_home)  # its pool first
        self._folder_token = mark_folder(spec.run_dir)
        # the pools and workers made send their classes to the head's GCS: one that stopped
        # answering after the sweeps' check left the start waiting on it for ever
        if not self._head.wait_for(lambda: [self._add_node(n) for n in nodes if not self._head.lost]):
            return self._lose_head()
        log.info("[Ray] %d node(s), %d worker(s)%s", len(nodes), len(self._workers),
                 f", {cfg.pool_size} VM(s) per node" if spec.provider_cls is not None else "")

    def _add_node(self, node_id: str) -> None:
        """A pool (if a mode needs VMs) and --num-rollouts workers on one node."""
        spec, cfg = self.spec, self.config
        node = self._nodes[node_id] = Node(node_id)
        if spec.provider_cls is not None and self._shared_home in (None, node_id):
            node.lines_key = f"{self._lines_keys}:pool.{node_id}"
            node.pool = pinned(PoolActor, node_id, max_concurrency=_POOL_CONCURRENCY).remote(
                cfg.provider_name, spec.run_id, cfg.pool_size,
                options=spec.provider_options, run_dir=str(spec.run_dir), folder_token=self._folder_token,
                node_id=node_id, lines_key=node.lines_key,
                replacement_budget=cfg.replacement_budget,
                per_worker=not cfg.use_vm_pool, vm_prefix=f"n{len(self._nodes) - 1}-vm-")
            node.watch_ref = node.pool.watch.remote()
        for _ in range(cfg.num_rollouts):
            self._spawn(node_id)

    def _spawn(self, node_id: str, index: int | None = None) -> None:
        if index is None:
            index, self._next_index = self._next_index, self._next_index + 1
        self._spawns += 1
        holder = f"w{index}.{self._spawns}"
        lines_key = f"{self._lines_keys}:{holder}"
        actor = pinned(WorkerActor, node_id, max_concurrency=self.config.envs_per_worker + 2).remote(
            f"w{index}", holder, self._pool_of(node_id), self.config, str(self.spec.run_dir), self._folder_token,
            lines_key)
        self._workers[index] = _Worker(index, node_id, actor, actor.ready.remote(), holder=holder, lines_key=lines_key)

    def _pool_of(self, node_id: str) -> Any:
        """The pool a worker on ``node_id`` leases from (None when no mode needs VMs)."""
        return self._nodes[self._shared_home or node_id].pool

    # -- what the engine asks --------------------------------------------------------------

    def send(self, item: Assignment) -> bool:
        """Start ``item`` on the started worker with the most free slots, on the node with the
        fewest attempts under way; False if none."""
        capacity = self.config.envs_per_worker
        free = [w for w in self._workers.values() if w.ready and len(w.assigned) < capacity]
        if not free:
            return False
        load: dict[str, int] = {}
        for other in self._workers.values():
            load[other.node_id] = load.get(other.node_id, 0) + len(other.assigned)
        worker = min(free, key=lambda w: (len(w.assigned), load[w.node_id], w.index))
        slot = min(set(range(capacity)) - set(worker.slots.values()))
        ident = (item.key, item.attempt)
        ref = worker.actor.run.remote(item, slot)
        worker.assigned[ident] = item
        worker.slots[ident] = slot
        worker.started[ident] = self.new_clock()
        self._refs[ref] = (worker, ident)
        return True

    def send_cancel(self, cancel: Cancel) -> None:
        ident = (cancel.key, cancel.attempt)
        worker = next((w for w in self._workers.values() if ident in w.assigned), None)
        if worker is not None:
            worker.actor.cancel.remote(cancel.key, cancel.attempt)

    def kill_holder(self, item: Assignment, reason: str) -> None:
        worker = self._holder(item.key, item.attempt)
        if worker is not None:
            self._on_worker_death(worker, reason, deliberate=True)

    def pool_stats(self, final: bool = False) -> dict[str, Any] | None:
        """Every node's pool stats summed (a lost node's VMs counted dead), the nodes left out
        named, as the pools' last reports said them (no call to a pool: the run's main thread
        reads them every second); ``final``: the pools' stats taken at their shutdown. None
        without pools."""
        if self.spec.provider_cls is None or not (self._nodes or self._sweeps.left_out):
            return None
        return pools_stats(self._nodes.values(), self.config.pool_size, self.config.provider_name,
                           self._sweeps.left_out, final=final)

    # -- watching --------------------------------------------------------------------------

    def _watched(self) -> list[Any]:
        refs = list(self._refs)
        refs += [w.ready_ref for w in self._workers.values() if w.ready_ref is not None]
        refs += [n.watch_ref for n in self._nodes.values() if n.watch_ref is not None and n.alive]
        return refs + self._sweeps.refs() + self._pending.refs()

    def wait(self, extra: list[Any], timeout: float) -> set[Any]:
        """Block until an attempt ends, a worker starts, a pool dies, or ``extra`` is ready."""
        return wait_ready(self._watched, extra, timeout)

    def handle(self, ready: set[Any]) -> None:
        """Settle finished attempts, note started workers, handle lost pools and nodes."""
        import ray

        for ref in [r for r in ready if r in self._refs]:
            if ref not in self._refs:
                continue  # its worker's death settled it meanwhile
            worker, ident = self._refs.pop(ref)
            try:
                record = ray.get(ref)
            except Exception as exc:  # noqa: BLE001 - the actor (or its node) died
                self._refs[ref] = (worker, ident)  # settled with the others below
                self._on_worker_death(worker, why(exc))
                continue
            said_on_driver(record.pop(LOG_LINES, None), self._rewrite)
            if ident in worker.assigned:  # else already settled (timed out): one record
                self._settle(worker, ident)
                unpack_files(self.spec.run_dir, record.pop(TRAJECTORY_FILES, None) or {})
                self.hooks.record(record, loop_free=True)
        for worker in [w for w in list(self._workers.values()) if w.ready_ref in ready]:
            try:
                started = ray.get(worker.ready_ref)
                worker.pid, worker.ready_ref = started["pid"], None
                if started.get("cannot_load"):  # every worker would fail alike: stop, saying why
                    self.hooks.stop(f"worker {worker.worker_id} on node {worker.node_id[:8]} cannot load the run's "
                                    f"mode or agent: {started['cannot_load']} (every node of the cluster needs them)")
                    self._on_worker_death(worker, "it cannot load the run's mode or agent", deliberate=True)
            except ray.exceptions.ActorUnschedulableError as exc:
                # pinned to a node that is gone (before the poll below sees it leave): the
                # node is lost, not a worker that crashed (a respawn there fails at once)
                if self._nodes[worker.node_id].alive:
                    self._lose_node(self._nodes[worker.node_id], f"node {worker.node_id[:8]} left the cluster "
                                    f"(a worker could not be placed there: {why(exc)})")
                else:
                    self._on_worker_death(worker, f"worker actor did not start: {why(exc)}", deliberate=True)
            except Exception as exc:  # noqa: BLE001
                self._on_worker_death(worker, f"worker actor did not start: {why(exc)}")
        for node in list(self._nodes.values()):
            if node.alive and node.watch_ref in ready:
                try:
                    ray.get(node.watch_ref)
                    node.watch_ref = None  # shut down in order
                except Exception as exc:  # noqa: BLE001
                    self._lose_node(node, f"the pool of node {node.node_id[:8]} died: {why(exc)}")
        if self._sweeps.pending:
            self._joined(*self._sweeps.settle())
        self._pending.settle(ready)
        self._poll_nodes()

    def _settle(self, worker: _Worker, ident: tuple[str, int]) -> None:
        for held in (worker.assigned, worker.slots, worker.started):
            held.pop(ident, None)

    # -- the end ---------------------------------------------------------------------------

    def shutdown(self, grace: float, sweep: bool) -> dict[str, Any] | None:
        """Let attempts under way finish within ``grace``, kill every worker, shut every pool
        down (its stats kept), sweep the nodes when a pool could not, disconnect. Returns the
        pools' final stats, summed (None without pools)."""
        import ray

        if not ray.is_initialized():  # never connected: nothing was started
            return None
        final_stats = None
        try:
            if not self._head.lost:
                self._sweeps.cancel()
            deadline = time.monotonic() + grace
            while self._refs and (left := grace_left(deadline, self.hooks)) > 0:  # a 2nd Ctrl-C cuts it
                ready = self.wait([], timeout=min(0.2, left))
                self.handle(ready)
            self._kill(*self._workers.values())
            self._workers.clear()
            self._refs.clear()
            # every kill and reclaim under way answered (or late) before the pools stop:
            # waited on all at once, each under its own deadline
            self._pending.finish()
            # A lost node's pool could not stop its VMs: sweep the run's VMs wherever a node
            # can still see them (nodes sharing a host or a Docker daemon).
            unclean = sweep or any(not n.alive for n in self._nodes.values())
            unclean = stop_pools(self._nodes.values(), self.spec.run_dir, self._head.lost, self._rewrite) or unclean
            if self.spec.provider_cls is not None:
                if unclean and self._head.lost:
                    log.warning("the run's VMs on nodes that did not answer are swept by --resume")
                elif unclean:
                    try:
                        sweep_cluster(self.config.provider_name, self.spec.run_id, None, self._head, self._died_at_end)
                    except VMError as exc:  # a node's sweep failed or hung, or the head did not answer
                        log.warning("the run's VMs are not swept on every node (--resume sweeps them): %s", exc)
                        if self._head.lost:  # the run's head-loss path: the disconnect below disconnect_lost's
                            self._lose_head()
                final_stats = self.pool_stats(final=True)  # a node that died as it swept: lost
            if not self._head.lost:  # every actor killed: nothing of this run's is read after
                forget_last_words(self._lines_keys)
        finally:
            if self._owns_ray:
                self._owns_ray = False
                disconnect_lost() if self._head.lost else ray.shutdown()
        return final_stats
