"""The nodes of a Ray run as ``ray_backend.RayBackend`` follows them (``NodeWatch``, a base
of it, as ``base.WorkerTable`` is): a look at the cluster every ``_NODE_POLL_S`` (the pools'
reports taken: events.jsonl lines, stats; a node gone from the cluster lost, a new one swept
of the run's leftovers, then joined), a node lost (its pool died, it left the cluster: its
workers killed, their attempts ``worker_died``) and the cluster's head lost (``HeadWatch.lost_after``:
``HEAD_LOST_S`` unless Ray ends a driver sooner; the run stops);
what summary.json's ``ray`` section says of them (``cluster``).

Nothing here imports Ray at load: ``--backend local`` never needs it.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from .base import BackendSpec, EngineHooks
from .ray_cluster import Sweeps
from .ray_head import HeadWatch
from .ray_logs import last_words, said_on_driver
from .ray_pools import Node, cluster_nodes, take_reports

log = logging.getLogger("parallel_rollout")

#: seconds between two looks at the cluster's nodes
_NODE_POLL_S = 1.0


class NodeWatch:
    """The nodes of a ``RayBackend``: ``_nodes`` by id, the sweeps of those that join, the
    head's watch; its workers (``_workers``), a node's pool and workers (``_add_node``) and a
    worker's death (``_on_worker_death``, ``_kill``) are the backend's."""

    spec: BackendSpec
    hooks: EngineHooks
    config: Any
    _nodes: dict[str, Node]
    _workers: dict[int, Any]
    _sweeps: Sweeps
    _head: HeadWatch
    _shared_home: str | None
    _last_poll: float = 0.0
    _rewrite: Any = None

    def cluster(self) -> dict[str, Any] | None:
        """summary.json's ``ray`` section (``ray_pools.cluster_nodes``): the nodes used, lost
        (with why) and left out; None when the run never reached the cluster."""
        if not (self._nodes or self._sweeps.left_out):
            return None
        return cluster_nodes(list(self._nodes.values()), self._sweeps.left_out)  # a copy: a trainer's stats() asks from its thread

    def _poll_nodes(self) -> None:
        """Every _NODE_POLL_S: the pools' reports taken (events, stats); nodes gone from the
        cluster lost, new ones swept (then joined), or joined at once when no mode needs VMs;
        the head lost once its GCS has not answered for lost_after s."""
        if time.monotonic() - self._last_poll <= _NODE_POLL_S:
            return None
        self._last_poll = time.monotonic()
        take_reports(self._nodes.values(), self.spec.run_dir, rewrite=self._rewrite)
        nodes = None if self._head.lost else self._head.alive_nodes()
        if nodes is None:  # the GCS did not answer in time
            return self._lose_head() if self._head.gone() and not self._head.lost else None
        alive = set(nodes)
        for node in list(self._nodes.values()):
            if node.alive and node.node_id not in alive:
                self._lose_node(node, f"node {node.node_id[:8]} left the cluster")
        for node_id in sorted(alive - set(self._nodes)):
            if not self.hooks.closing and not self._sweeps.known(node_id):
                self._sweeps.start(node_id) if self.spec.provider_cls is not None else self._joined([node_id], {})

    def _joined(self, swept: list[str], left_out: dict[str, str]) -> None:
        """Pools and workers of nodes swept of the run's leftovers (orphans only: not the live VMs
        of other nodes on their host), the run going on meanwhile; those whose sweep failed or hung left out."""
        for reason in [f"node {node_id[:8]} is left out of the run: {said}" for node_id, said in left_out.items()]:
            log.warning("%s (%d node(s) left out)", reason, len(self._sweeps.left_out))
            self.hooks.event("node_left_out", reason=reason)
        for node_id in swept if not self.hooks.closing else ():
            if not self._head.wait_for(lambda: self._add_node(node_id)):  # its Ray calls wait on the head
                return self._lose_head()
            pool = "" if self._shared_home is not None else f"a pool of {self.config.pool_size} and "
            self.hooks.event("node_joined", reason=f"node {node_id[:8]}: {pool}{self.config.num_rollouts} worker(s)")
            log.info("[Ray] node %s joined", node_id[:8])

    def _died_at_end(self, node_id: str) -> None:
        """A node gone from the cluster as the run's end swept it (its sweep could not run
        there): it died, said so and counted lost, not a sweep missed. Not the run's node (it
        joined as the run ended): nothing to say."""
        if (node := self._nodes.get(node_id)) is not None:
            self._lose_node(node, f"node {node_id[:8]} left the cluster as the run ended")

    def _lose_node(self, node: Node, reason: str) -> None:
        node.alive, node.lost_reason = False, reason
        if not self._head.lost:  # its pool's last words (since its last report): often why it died
            said_on_driver(last_words(node.lines_key), self._rewrite)
        log.warning("%s; its VMs are counted dead%s", reason, "" if self.hooks.closing else
                    ", its attempts retried elsewhere")
        self.hooks.event("node_lost", reason=reason)
        for worker in [w for w in list(self._workers.values()) if w.node_id == node.node_id]:
            worker.lost = True  # nothing to ask it: ray.kill only
            self._on_worker_death(worker, reason, deliberate=True)
        if self.hooks.closing:
            return
        if not any(n.alive for n in self._nodes.values()):
            self.hooks.stop(f"every node of the Ray cluster (or its VM pool) is lost, the last: {reason}; "
                             f"every finished result is kept in {self.spec.run_dir / 'results.jsonl'}")
        elif node.node_id == self._shared_home:
            self.hooks.stop(f"the node of the run's only VM pool is lost ({reason}); every finished "
                             f"result is kept in {self.spec.run_dir / 'results.jsonl'}")

    def _lose_head(self) -> None:
        """The head's GCS has not answered for lost_after s (killed, cut off): Ray ends this
        driver soon. The run stops with what it has, asking Ray nothing that waits on the head."""
        self._head.lost = True
        reason = self._head.lost_reason()
        self.hooks.event("head_lost", reason=reason)
        self.hooks.stop(f"{reason}: the cluster is lost; every finished result is kept in "
                        f"{self.spec.run_dir / 'results.jsonl'}")
        if self._head.node_id in self._nodes:
            self._nodes[self._head.node_id].alive, self._nodes[self._head.node_id].lost_reason = False, reason
        self._kill(*self._workers.values())  # their agents' processes, where nodes still answer
        for w in list(self._workers.values()):
            w.lost = True
            self._on_worker_death(w, f"{reason} (the cluster is lost)", deliberate=True)
