"""The driver's side of the ray backend's VM pools: one ``Node`` record per node (its pool
actor, the watch reference that fails when the pool dies, the report call under way and the
last stats it brought), each pool's report taken every second (``take_reports``: its
events.jsonl lines, its stats), the pools' stats summed over the nodes from those reports
(no call to a pool: the progress reads them every second; a lost node's as of its last
report, the final ones as the pools' shutdown gave them), what summary.json says of the
nodes (``cluster_nodes``, every Ray run's, VMs or none), and the pools' shutdown at the end
of a run.

A pool is a ``ray_actors.PoolActor`` pinned to its node; ``ray_backend`` places them, and
asks them through these. Nothing here imports Ray at load: ``--backend local`` never needs it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from .ray_cluster import merge_stats, why
from .ray_logs import LOG_LINES, last_words, said_on_driver
from .ray_pending import answers_within

log = logging.getLogger("parallel_rollout")

#: seconds after which an alive pool's last report is late: the progress says it unreachable
REPORT_STALE_S = 5.0
#: seconds the pools have to shut down (their VMs stopped) at the end of a run, all at once
POOL_SHUTDOWN_S = 120.0
#: the same once the cluster's head is lost (Ray ends the driver soon)
POOL_SHUTDOWN_HEAD_LOST_S = 10.0


@dataclass(frozen=True)
class _Failed:
    """A pool's call that failed at once (``_ask_pools``): its actor or its node is gone."""

    exc: BaseException


@dataclass
class Node:
    """One node of the run, as the driver knows it."""

    node_id: str
    pool: Any = None
    watch_ref: Any = None
    alive: bool = True
    #: the pool's stats taken at shutdown
    final_stats: dict[str, Any] | None = None
    #: the pool's report call under way (its events.jsonl lines, where it is apart, and stats)
    report_ref: Any = None
    #: when that call was made (epoch seconds): what its stats are as of
    report_asked_at: float = 0.0
    #: the pool's stats as its last report said them, and when: a node lost later counts them
    last_stats: dict[str, Any] | None = None
    last_stats_at: float = 0.0
    #: why the run lost it (its pool died, it left the cluster, the head was lost)
    lost_reason: str = ""
    #: where its pool stores the lines it logs until a report takes them (``ray_logs.last_words``)
    lines_key: str | None = None


def take_reports(nodes: Iterable[Node], run_dir: Path, wait_s: float = 0.0,
                 rewrite: Callable[[str], str] | None = None) -> None:
    """Take each alive node's pool report if it answered within ``wait_s``: the events.jsonl
    lines it kept since it was last asked (none where the pool writes the folder itself),
    appended to the run's, its stats, kept as the node's ``last_stats``, and its warnings, said
    in the driver's log through ``rewrite`` (``ray_logs``); then ask it again.
    One call a second per node, the events' own: a lost node's last second is lost with it.
    The calls under way are waited for at once: ``wait_s`` for all, not for each."""
    nodes = [node for node in nodes if node.pool is not None and node.alive]
    # a pool that died answers nothing: its watch reference says so
    reports = answers_within([node.report_ref for node in nodes if node.report_ref is not None], wait_s, failed={})
    for node in nodes:
        if node.report_ref is not None:
            if node.report_ref not in reports:
                continue
            report = reports[node.report_ref]
            said_on_driver(report.get(LOG_LINES), rewrite)
            if report.get("stats") is not None:
                node.last_stats, node.last_stats_at = report["stats"], node.report_asked_at
            if report.get("events"):
                try:
                    with open(run_dir / "events.jsonl", "a", encoding="utf-8") as handle:
                        handle.write(report["events"])
                except OSError as exc:
                    log.warning("cannot write events.jsonl: %s", exc)
        node.report_ref, node.report_asked_at = node.pool.report.remote(), time.time()


def pools_stats(nodes: Iterable[Node], size: int, provider: str,
                left_out: dict[str, str] | None = None, final: bool = False) -> dict[str, Any]:
    """Every node's pool stats summed (``merge_stats``), asking no pool: a pool's final stats
    (``final``: at the end, those ``stop_pools`` took) or, during the run, its last report's
    (``take_reports``, every second): the progress reads them each second on the run's main
    thread, where a call to each node's pool was N round trips, and a pool that hung stalled
    the run 10 s per node. An alive pool whose report is older than ``REPORT_STALE_S`` (or that
    has sent none yet) is in ``late_reports`` with the report's age, its figures as of it. A
    lost node's (or at the end, one whose pool did not answer) VMs counted dead, with why it
    was lost, its counters (leases, resets, boots …) as of its last report (``as_of``, epoch
    seconds), so the run's totals keep the work it did; a node leasing from another's pool
    has none of its own. ``left_out``: the nodes the run never used (their sweep failed or
    hung), with why, kept as ``nodes_left_out``: a scheduler reading summary.json sees that
    the run ran on fewer nodes than the cluster had."""
    nodes, now = list(nodes), time.time()
    per_node: dict[str, dict[str, Any] | None] = {}
    as_of: dict[str, float] = {}  # the lost nodes counted as of their last report
    late: dict[str, float] = {}  # the alive nodes whose report is late: its age, seconds
    for node in nodes:
        if node.pool is None:
            continue  # a node leasing from the shared pool
        stats, last, last_at = node.final_stats, node.last_stats, node.last_stats_at
        if stats is None and node.alive and not final:
            # none yet: a pool just placed, its VMs to boot; late once its first report is
            since = last_at if last is not None else node.report_asked_at or now
            stats = last if last is not None else {"size": size, "states": {"booting": size}}
            if now - since > REPORT_STALE_S:
                late[node.node_id] = round(now - since, 1)
        elif stats is None and last is not None:  # its work counted, its VMs dead
            stats = {**last, "states": {"dead": last.get("size", size)}}
            as_of[node.node_id] = round(last_at, 3)
        per_node[node.node_id] = stats
    total = merge_stats(per_node, size, provider)
    for node_id, when in as_of.items():
        total["nodes"][node_id] = {**total["nodes"][node_id], "lost": True, "as_of": when}
    for node_id, age in late.items():  # a copy: the node's last_stats stay as the report said
        total["nodes"][node_id] = {**total["nodes"][node_id], "report_age_s": age}
    if late:
        total["late_reports"] = late
    cluster = cluster_nodes(nodes, left_out)
    # a pool counted lost says why: its node was lost, or (its node alive) it did not shut down
    reasons = {node.node_id: node.lost_reason for node in nodes if node.lost_reason}
    for node_id, reason in {**reasons, **{n: said["reason"] for n, said in cluster["nodes"].items()
                                          if said.get("reason")}}.items():
        if total["nodes"].get(node_id, {}).get("lost"):
            total["nodes"][node_id]["reason"] = reason
    total["nodes_left_out"] = cluster["nodes_left_out"]
    return total


def cluster_nodes(nodes: Iterable[Node], left_out: dict[str, str] | None = None) -> dict[str, Any]:
    """summary.json's ``ray`` section, for every Ray run (with VMs or without): each node the
    run used, ``{"lost": false}`` or ``{"lost": true, "reason": why}`` (its pool died, it left
    the cluster, the head was lost), and ``nodes_left_out``: those it never used (their sweep
    of the run's leftovers failed or hung), with why. A scheduler reading summary.json sees
    that the run lost a node, or ran on fewer nodes than the cluster had, and why; the VM
    section's ``nodes`` and ``nodes_left_out`` say the same of the pools (``pools_stats``)."""
    used: dict[str, dict[str, Any]] = {}
    for node in nodes:
        used[node.node_id] = {"lost": not node.alive}
        if not node.alive:  # no reason of its own: a pool that did not answer once the head was lost
            used[node.node_id]["reason"] = (node.lost_reason
                                            or "its pool did not answer as the run ended, the cluster's head lost")
    return {"nodes": used, "nodes_left_out": dict(left_out or {})}


def stop_pools(nodes: Iterable[Node], run_dir: Path, head_lost: bool = False,
               rewrite: Callable[[str], str] | None = None) -> bool:
    """Shut every alive node's pool down (its stats kept in ``final_stats``, its last
    events.jsonl lines and warnings taken, these said through ``rewrite``) and kill every pool
    actor; True when one left VMs behind (boots it stopped waiting for, a pool that did not
    answer or whose shutdown failed, its node gone): the run's VMs are then swept. The
    pools are asked at once, under one deadline (``POOL_SHUTDOWN_S``): one that does not
    answer (its node paused or stalled) holds the run's end that long once, not once for
    each pool. ``head_lost``: the cluster's head is gone, and Ray ends the driver soon: the
    pools get ``POOL_SHUTDOWN_HEAD_LOST_S``, and no actor is killed (``ray.kill`` waits on the
    head; the pools die with their nodes)."""
    import ray

    nodes = [node for node in nodes if node.pool is not None]
    alive = [node for node in nodes if node.alive]
    wait_s = POOL_SHUTDOWN_HEAD_LOST_S if head_lost else POOL_SHUTDOWN_S
    left_vms = _ask_pools(alive, "shutdown", wait_s)
    failed = {node_id: said for node_id, said in left_vms.items() if isinstance(said, _Failed)}
    stats = _ask_pools([node for node in alive if node.node_id in left_vms.keys() - failed], "stats", 10)
    unclean = any(said for said in left_vms.values() if not isinstance(said, _Failed))  # boots it stopped waiting for
    for node in alive:
        if node.node_id in stats and not isinstance(stats[node.node_id], _Failed):
            node.final_stats = stats[node.node_id]
            continue
        reason = (_shutdown_failed(failed[node.node_id].exc) if node.node_id in failed else
                  f"its pool did not answer its shutdown within {wait_s:.0f}s (its node paused, stalled or gone)")
        log.warning("the pool of node %s did not shut down (%s); sweeping it", node.node_id[:8], reason)
        unclean = True
        node.alive = not head_lost  # its VMs counted dead (no final stats); not asked again
        node.lost_reason = node.lost_reason or reason
    stopped = [node for node in alive if node.final_stats is not None]
    take_reports(stopped, run_dir, wait_s=10, rewrite=rewrite)  # the calls under way,
    take_reports(stopped, run_dir, wait_s=10, rewrite=rewrite)  # then the rest
    for node in nodes if not head_lost else ():
        try:
            ray.kill(node.pool, no_restart=True)
        except Exception:  # noqa: BLE001
            pass
        said_on_driver(last_words(node.lines_key), rewrite)  # a pool that did not report them
    return unclean


def _shutdown_failed(exc: BaseException) -> str:
    """Why a pool whose shutdown call failed at once did not shut down: its actor (with its
    node, or alone) is gone, which Ray says at once, or the shutdown raised (its error)."""
    from ray.exceptions import RayActorError

    if isinstance(exc, RayActorError):
        return f"its pool's shutdown failed at once: the pool or its node is gone ({type(exc).__name__})"
    return f"its pool's shutdown failed: {why(exc)}"


def _ask_pools(nodes: list[Node], name: str, wait_s: float) -> dict[str, Any]:
    """Each node's pool's ``call(name)`` answer, by node id: every pool asked at once and
    waited for under one deadline: a ``_Failed`` for a call that failed (the pool or its node
    gone); none for one that did not answer in time."""
    asked: dict[Any, str] = {}
    refused: dict[str, Any] = {}
    for node in nodes:
        try:
            asked[node.pool.call.remote(name)] = node.node_id
        except Exception as exc:  # noqa: BLE001 - the pool is gone
            refused[node.node_id] = _Failed(exc)
    answers = answers_within(list(asked), wait_s, failed=_Failed)
    return {**refused, **{asked[ref]: answer for ref, answer in answers.items()}}
