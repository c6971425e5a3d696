"""How the ray backend's worker actors end (``WorkerDeaths``, a base of
``ray_backend.RayBackend``, as ``ray_nodes.NodeWatch`` is): a death, whether the actor died
on its own (a crash, counted toward the crash limit: ``base.CrashWindow``), with its node, or
was killed on purpose (a timeout, a cancel, its node lost). Each attempt it held is recorded
``worker_died`` (``_died_record``) and the engine retries it; its VMs are reclaimed by its
pool and its ``worker_died`` event written once the pool says which (``RECLAIM_WAIT_S``);
the actor is killed after its process tree (``KILL_WAIT_S``), and replaced on its node if
the node is alive. Neither the kill nor the reclaim is waited for (``ray_pending``). What a
worker logged since its last answer is said before the warning of a death of its own, and
with the kill's answer (or without one) otherwise (``ray_logs.last_words``).

Attempts past ``--task-timeout`` (``check_timeouts``) are recorded ``task_timeout``
(``VMKilled`` when its node's pool says the VM it held was killed from outside:
``base.late_failures``), with where its actor says it is, asked of every late actor at once
under one deadline (``ray_actors.late_progress``); then their actors are killed.

Nothing here imports Ray at load: ``--backend local`` never needs it.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from ..errors import TaskTimeout, WorkerDied
from ..messages import Assignment
from ..trajectories import unpack_files
from .base import BackendSpec, CrashWindow, EngineHooks, died_record, late_failures
from .ray_actors import PROGRESS_WAIT_S, RayPool, late_progress
from .ray_cluster import done_refs, why
from .ray_head import HeadWatch
from .ray_logs import last_words, said_on_driver
from .ray_pending import Pending
from .ray_pools import Node

log = logging.getLogger("parallel_rollout")

#: seconds a dead worker's worker_died event waits for its pool to say the VMs it reclaimed
RECLAIM_WAIT_S = 10.0
#: seconds a worker actor has to kill its process tree before it is killed itself
KILL_WAIT_S = 5.0


class WorkerDeaths:
    """The deaths and timeouts of a ``RayBackend``'s workers: its table (``_workers``,
    ``_refs``), a worker's spawn (``_spawn``), the settling of results (``handle``,
    ``_settle``), its pools (``_pool_of``) and nodes (``_lose_node``) are the backend's."""

    spec: BackendSpec
    hooks: EngineHooks
    config: Any
    _workers: dict[int, Any]
    _refs: dict[Any, tuple[Any, tuple[str, int]]]
    _nodes: dict[str, Node]
    _pending: Pending
    _crashes: CrashWindow
    _head: HeadWatch
    _shared_home: str | None
    _rewrite: Any

    def _on_worker_death(self, w: Any, reason: str, deliberate: bool = False) -> None:
        """Record what the worker held as worker_died, reclaim its VMs, replace it;
        ``deliberate``: killed on purpose (a timeout, a cancel, its node lost), not a crash.
        Neither the kill nor the reclaim is waited for: a pool or a node that does not answer
        (paused, stalled) held the engine, every other node's dispatch with it, 15 s."""
        if self._workers.get(w.index) is not w:
            return
        del self._workers[w.index]
        for ref in [r for r, (owner, _) in self._refs.items() if owner is w]:
            del self._refs[ref]
        if not deliberate and not self._head.lost:  # it died on its own: what it said last, often why
            said_on_driver(last_words(w.lines_key), self._rewrite)
        self._kill(w)
        said = f"node {w.node_id[:8]} pid {w.pid}: {reason}"
        pool_node = self._nodes[self._shared_home or w.node_id]
        if pool_node.alive and pool_node.pool is not None and not self._head.lost:
            try:  # its event is written when the pool says which VMs it reclaimed
                self._pending.add(pool_node.pool.call.remote("reclaim", w.holder), RECLAIM_WAIT_S,
                                  lambda vms, exc: self._reclaimed(w, said, vms, exc))
            except Exception as exc:  # noqa: BLE001 - the pool is going too
                self._reclaimed(w, said, [], exc)
        else:
            self._reclaimed(w, said, [], None)
        for ident, item in list(w.assigned.items()):
            started_at = w.started[ident].started_at
            self._settle(w, ident)
            exc = WorkerDied(f"{reason} while running attempt {item.attempt} of {item.key}")
            self.hooks.record(self._died_record(w, item, exc, started_at))
        node = self._nodes[w.node_id]
        # died with its node, which the poll has not seen leave yet: no crash, and no respawn
        # pinned to a node that is gone
        with_node = (not deliberate and not self.hooks.closing and node.alive
                     and w.node_id not in (self._head.alive_nodes() or [w.node_id]))
        if not (w.lost or with_node):  # else the loss of its node (or head) is the one line said
            log.warning("worker %s (node %s, pid %s) died: %s", w.worker_id, w.node_id[:8], w.pid, reason)
        if self.hooks.closing:
            return
        if with_node:
            self._lose_node(node, f"node {w.node_id[:8]} left the cluster")
            return
        self._crashes.resize(self.config.num_rollouts * max(1, len(self._nodes)))
        if not deliberate and self._crashes.crashed():
            self.hooks.stop(f"workers keep dying ({len(self._crashes)} deaths within "
                            f"{self._crashes.window_s:.0f}s); last: {reason}")
            return
        if self._nodes[w.node_id].alive:
            self._spawn(w.node_id, w.index)
        # else not replaced: a worker moved to another node would wait for that node's VMs
        # (its pool is sized for its own workers); the limit shrinks with the alive nodes

    def _reclaimed(self, w: Any, said: str, vms: list[str] | None, exc: BaseException | None) -> None:
        """A dead worker's worker_died event, with the VMs its pool reclaimed: as the pool's
        answer said them, or why it said none."""
        if isinstance(exc, TimeoutError):
            vms_said = f"not known (its pool did not answer within {RECLAIM_WAIT_S:g}s)"
        elif exc is not None:
            vms_said = f"[] (the reclaim failed: {why(exc)})"
        else:
            vms_said = str(vms or [])
        self.hooks.event("worker_died", worker=w.worker_id, reason=f"{said}; VMs reclaimed: {vms_said}")

    def _kill(self, *workers: Any) -> None:
        """Kill worker actors and their process trees, best effort (their groups: their
        watchers): each actor once it killed its tree, or KILL_WAIT_S after it was asked."""
        for w in workers:
            ref = None
            if not w.lost:  # else nothing to ask it
                try:
                    ref = w.actor.kill_children.remote()
                except Exception:  # noqa: BLE001
                    pass
            if ref is None:
                self._kill_actor(w)
            else:
                self._pending.add(ref, KILL_WAIT_S, lambda lines, _exc, w=w: self._kill_actor(w, lines))

    def _kill_actor(self, w: Any, lines: list[Any] | None = None) -> None:
        """Kill a worker's actor, once the ``lines`` it logged since its last record are said,
        and those its answer did not bring (it died, or did not answer: ``last_words``)."""
        import ray

        said_on_driver(lines, self._rewrite)
        if self._head.lost:  # ray.kill waits on the head, as the store does
            return
        said_on_driver(last_words(w.lines_key), self._rewrite)
        try:
            ray.kill(w.actor, no_restart=True)
        except Exception:  # noqa: BLE001
            pass

    def check_timeouts(self) -> None:
        """Record attempts past --task-timeout (``late_failures``: each before its actor's
        kill, with where its actor says it is) and kill their workers. Every late actor is
        asked at once, and with them those due within the ask's wait (``PROGRESS_WAIT_S``),
        which are late when it ends if one of them does not answer: a batch dispatched
        together and stalled on a paused node is waited for once, not once per tick it spans."""
        limit = self.config.task_timeout
        now = time.monotonic()
        if not any(c.elapsed(now) > limit for w in self._workers.values() for c in w.started.values()):
            return
        asked: list[tuple[Any, list[tuple[str, int]]]] = []
        for w in list(self._workers.values()):
            idents = [ident for ident, clock in w.started.items() if clock.elapsed(now) > limit - PROGRESS_WAIT_S]
            if idents:
                self.handle(done_refs([ref for ref, (owner, _) in self._refs.items() if owner is w]))
                asked.append((w, idents))
        # an attempt that ended meanwhile is settled by its result, a worker that died by its death
        asked = [(w, kept) for w, idents in asked
                 if self._workers.get(w.index) is w and (kept := [i for i in idents if i in w.assigned])]
        wheres = late_progress([(w.actor, idents) for w, idents in asked])  # all at once, one deadline
        now = time.monotonic()  # those not late yet are asked again when they are
        late = [(w, ident, *where.get(ident, (None, {}))) for (w, idents), where in zip(asked, wheres)
                for ident in idents if w.started[ident].elapsed(now) > limit]
        timeout = TaskTimeout(f"attempt ran past --task-timeout {limit:g}s; worker actor killed")
        pools = {w.node_id: self._pool_of(w.node_id) for w, *_ in late}
        pools = {node_id: None if pool is None else RayPool(pool) for node_id, pool in pools.items()}
        failures = late_failures([(pools[w.node_id], w.assigned[ident], timeout, progress)
                                  for w, ident, progress, _ in late])
        for (w, ident, progress, files), exc in zip(late, failures):
            item, started_at = w.assigned[ident], w.started[ident].started_at
            self._settle(w, ident)
            unpack_files(self.spec.run_dir, files)
            self.hooks.record(self._died_record(w, item, exc, started_at, progress))
            self.hooks.event(exc.kind, task=item.key, worker=w.worker_id, reason=str(exc))
        for w in {id(w): w for w, *_ in late}.values():
            self._on_worker_death(w, reason="killed after --task-timeout", deliberate=True)

    @staticmethod
    def _died_record(w: Any, item: Assignment, exc: Exception, started_at: float,
                     progress: Any = None) -> dict[str, Any]:
        """The record of an attempt its actor could not finish, with its node (as the actor's)."""
        return {**died_record(item, exc, w, started_at, progress), "node": w.node_id}
