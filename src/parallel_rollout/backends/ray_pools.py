"""The driver's side of the ray backend's VM pools: one ``Node`` record per node (its pool
actor, the watch reference that fails when the pool dies, the events call under way), the
pools' stats summed over the nodes, and their shutdown at the end of a run.

A pool is a ``ray_actors.PoolActor`` pinned to its node; ``ray_backend`` places them, and
asks them through these. Nothing here imports Ray at load: ``--backend local`` never needs it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from .ray_actors import sweep_here
from .ray_cluster import HEAD_LOST_S, SWEEP_S, HeadWatch, merge_stats, pinned, take_events, why

log = logging.getLogger("parallel_rollout")


@dataclass
class Node:
    """One node of the run, as the driver knows it."""

    node_id: str
    pool: Any = None
    watch_ref: Any = None
    alive: bool = True
    #: the pool's stats taken at shutdown
    final_stats: dict[str, Any] | None = None
    #: the pool's take_events call under way (its events.jsonl lines, where it is apart)
    events_ref: Any = None


class Sweeps:
    """The sweeps of this run's leftovers (orphans only) that nodes run before they get a pool
    and workers, at the start and when a node joins mid-run: each a task pinned to its node,
    waited for with the others' work going on. A node whose sweep fails (the node died) or
    does not end within SWEEP_S is left out of the run: ``left_out`` says why."""

    def __init__(self, provider_name: str, run_id: str) -> None:
        self.provider_name, self.run_id = provider_name, run_id
        self.pending: dict[str, tuple[Any, float]] = {}
        self.left_out: dict[str, str] = {}

    def start(self, node_id: str) -> None:
        ref = pinned(sweep_here, node_id).remote(self.provider_name, self.run_id, True)
        self.pending[node_id] = (ref, time.monotonic() + SWEEP_S)

    def known(self, node_id: str) -> bool:
        return node_id in self.pending or node_id in self.left_out

    def refs(self) -> list[Any]:
        return [ref for ref, _ in self.pending.values()]

    def settle(self) -> tuple[list[str], dict[str, str]]:
        """The nodes whose sweep ended (theirs to add, in order) and those left out now, with why."""
        import ray

        swept, failed = [], {}
        for node_id, (ref, deadline) in sorted(self.pending.items()):
            if ray.wait([ref], timeout=0)[0]:
                try:
                    ray.get(ref)
                    swept.append(node_id)
                except Exception as exc:  # noqa: BLE001 - the node died, the sweep failed
                    failed[node_id] = f"its sweep of the run's leftovers failed: {why(exc)}"
            elif time.monotonic() > deadline:
                self.cancel(node_id)
                failed[node_id] = f"its sweep of the run's leftovers did not end within {SWEEP_S:.0f}s"
            else:
                continue
            del self.pending[node_id]
        self.left_out.update(failed)
        return swept, failed

    def first(self, nodes: list[str], head: HeadWatch) -> tuple[list[str], dict[str, str]] | None:
        """Sweep ``nodes`` at the run's start and wait for them: the nodes swept and those left
        out, with why; None once the cluster's head has not answered for HEAD_LOST_S (a ``ray.get``
        waited until Ray ended the driver, 60 s, without the run's summary)."""
        import ray

        swept, failed = [], {}
        for node_id in nodes:
            self.start(node_id)
        while self.pending:
            ray.wait(self.refs(), num_returns=len(self.pending), timeout=1.0)
            done, left_out = self.settle()
            swept, failed = swept + done, {**failed, **left_out}
            if self.pending and head.alive_nodes() is None and head.down_for() >= HEAD_LOST_S:
                return None
        return sorted(swept), failed

    def cancel(self, node_id: str | None = None) -> None:
        """Stop the sweep under way on ``node_id`` (every node's: None), best effort."""
        import ray

        for node in [node_id] if node_id else list(self.pending):
            try:
                ray.cancel(self.pending[node][0], force=True)
            except Exception:  # noqa: BLE001 - its node is gone
                pass
            if node_id is None:
                del self.pending[node]


def pools_stats(nodes: Iterable[Node], size: int, provider: str) -> dict[str, Any]:
    """Every node's pool stats summed (``merge_stats``: a lost node's, or one whose pool does
    not answer, counted dead); a node leasing from another's pool has none of its own."""
    import ray

    per_node: dict[str, dict[str, Any] | None] = {}
    for node in nodes:
        if node.pool is None:
            continue  # a node leasing from the shared pool
        stats = node.final_stats
        if stats is None and node.alive:
            try:
                stats = ray.get(node.pool.call.remote("stats"), timeout=10)
            except Exception:  # noqa: BLE001 - a pool that cannot answer counts as lost
                stats = None
        per_node[node.node_id] = stats
    return merge_stats(per_node, size, provider)


def stop_pools(nodes: Iterable[Node], run_dir: Path, head_lost: bool = False) -> bool:
    """Shut every alive node's pool down (its stats kept in ``final_stats``, its last
    events.jsonl lines taken) and kill every pool actor; True when one left VMs behind (boots
    it stopped waiting for, a pool that did not answer): the run's VMs are then swept.
    ``head_lost``: the cluster's head is gone, and Ray ends the driver soon: each pool gets
    10 s, and no actor is killed (``ray.kill`` waits on the head; the pools die with their nodes)."""
    import ray

    unclean = False
    for node in nodes:
        if node.pool is None:
            continue
        if node.alive:
            try:
                if ray.get(node.pool.call.remote("shutdown"), timeout=10 if head_lost else 120):
                    unclean = True  # boots it stopped waiting for: swept below
                node.final_stats = ray.get(node.pool.call.remote("stats"), timeout=10)
                take_events([node], run_dir, wait_s=10)  # the call under way,
                take_events([node], run_dir, wait_s=10)  # then the rest
            except Exception:  # noqa: BLE001
                log.warning("the pool of node %s did not shut down; sweeping it", node.node_id[:8])
                unclean = True
                node.alive = not head_lost  # its VMs counted dead; not asked again
        if head_lost:
            continue
        try:
            ray.kill(node.pool, no_restart=True)
        except Exception:  # noqa: BLE001
            pass
    return unclean
