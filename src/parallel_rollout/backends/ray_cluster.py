"""The Ray cluster as the ray backend sees it: connecting, its nodes, pinning an actor (or a
task) to a node, the pools' stats summed over nodes, their events appended to the run's, and a
sweep of every node.

Nothing here imports Ray at load: ``--backend local`` never needs it.
"""

from __future__ import annotations

import logging
import os
import socket
from pathlib import Path
from typing import Any, Iterable

from .ray_actors import sweep_here

log = logging.getLogger("parallel_rollout")

_LOOPBACK = ("127.0.0.1", "localhost")
#: the object store of a Ray instance the run starts itself
LOCAL_OBJECT_STORE_BYTES = 200 * 1024 * 1024


def take_events(nodes: Iterable[Any], run_dir: Path, wait_s: float = 0.0) -> None:
    """Append to the run's events.jsonl the lines each alive node's pool kept since it was
    last asked (none where the pool writes the folder itself: ``PoolActor.take_events``), if
    it answered within ``wait_s``; then ask it again. A lost node's lines are lost with it."""
    import ray

    for node in nodes:
        if node.pool is None or not node.alive:
            continue
        if node.events_ref is not None:
            if not ray.wait([node.events_ref], timeout=wait_s)[0]:
                continue
            try:
                text = ray.get(node.events_ref)
            except Exception:  # noqa: BLE001 - the pool died: its watch reference says so
                text = ""
            if text:
                try:
                    with open(run_dir / "events.jsonl", "a", encoding="utf-8") as handle:
                        handle.write(text)
                except OSError as exc:
                    log.warning("cannot write events.jsonl: %s", exc)
        node.events_ref = node.pool.take_events.remote()


def connect(address: str | None) -> bool:
    """Connect to Ray; True when this call connected (and the caller must disconnect)."""
    if not address or address.split(":")[0] in _LOOPBACK:
        # Ray takes this host's address from the route to the internet; a local instance
        # (or a cluster on loopback) must be reached on 127.0.0.1. Read when Ray is imported.
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    import ray

    if ray.is_initialized():
        return False
    kwargs: dict[str, Any] = dict(log_to_driver=False, logging_level=logging.WARNING)
    if address:
        ray.init(address=address, **kwargs)
    else:
        # "local": a new instance even when RAY_ADDRESS or /tmp/ray/ray_current_cluster names
        # another (possibly long dead) cluster, which ray.init() would otherwise join
        ray.init(address="local", num_cpus=os.cpu_count() or 1, object_store_memory=LOCAL_OBJECT_STORE_BYTES,
                 include_dashboard=False, **kwargs)
    return True


def driver_ip(address: str | None) -> str:
    """The IP the cluster's nodes reach this process at (for a server of the driver's, like
    the RL policy gate): 127.0.0.1 for a local instance or a cluster on loopback, else this
    host's address on the route to the head node (``auto``: the one Ray picks)."""
    if not address:
        return "127.0.0.1"
    if address == "auto":
        from ray.util import get_node_ip_address

        return get_node_ip_address()
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if host in _LOOPBACK:
        return "127.0.0.1"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((host, int(port)))  # a UDP "connect" sends nothing: it picks the route
        return probe.getsockname()[0]


def alive_nodes() -> list[str]:
    """The ids of the cluster's alive nodes, in a stable order."""
    import ray

    return sorted(n["NodeID"] for n in ray.nodes() if n.get("Alive"))


def node_alive(node_id: str) -> bool:
    """Whether the cluster still counts the node alive (True when the GCS does not answer:
    the backend's poll decides later)."""
    try:
        return node_id in alive_nodes()
    except Exception:  # noqa: BLE001
        return True


def done_refs(refs: list[Any]) -> set[Any]:
    """The references among ``refs`` that are ready now (no wait)."""
    import ray

    if not refs:
        return set()
    done, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
    return set(done)


def why(exc: BaseException) -> str:
    """An exception from Ray (an actor's death, a task's error) in one line: its type and
    first line."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:500]


def pinned(cls: Any, node_id: str, **options: Any) -> Any:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    # Never rerun behind the driver's back: no actor restarts, no task retries.
    retries = dict(max_restarts=0, max_task_retries=0) if isinstance(cls, type) else dict(max_retries=0)
    return ray.remote(cls).options(
        num_cpus=0, **retries,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False), **options)


def merge_stats(per_node: dict[str, dict[str, Any] | None], size: int, provider: str) -> dict[str, Any]:
    """One pool's stats shape summed over nodes; a node without stats counts ``size`` dead VMs.
    Reset and boot percentiles are the worst node's (percentiles do not add up)."""
    from ..pool.manager import VMState

    # every state counted, even when no node answers (the progress bar reads each)
    total: dict[str, Any] = {"provider": provider, "size": 0, "states": {s.value: 0 for s in VMState}, "nodes": {}}
    util_weighted = 0.0
    for node_id, stats in per_node.items():
        if stats is None:
            total["size"] += size
            total["states"]["dead"] = total["states"].get("dead", 0) + size
            total["nodes"][node_id] = {"lost": True, "size": size}
            continue
        total["nodes"][node_id] = stats
        total["size"] += stats.get("size", 0)
        for state, count in stats.get("states", {}).items():
            total["states"][state] = total["states"].get(state, 0) + count
        for name, value in stats.items():
            if name in ("size", "states", "utilization"):
                continue
            if isinstance(value, bool) or value is None:
                total.setdefault(name, value)
            elif isinstance(value, (int, float)):
                total[name] = round(total.get(name, 0) + value, 3)
            elif isinstance(value, dict) and name.endswith("_s"):
                worst = total.get(name)
                if not isinstance(worst, dict):
                    worst = total[name] = {}
                for point, seconds in value.items():
                    if isinstance(seconds, (int, float)):
                        worst[point] = max(worst.get(point, seconds), seconds)
            else:
                total.setdefault(name, value)
        util_weighted += stats.get("utilization", 0.0) * stats.get("size", 0)
    total["utilization"] = round(util_weighted / total["size"], 4) if total["size"] else 0.0
    return total


def sweep_cluster(provider_name: str, run_id: str | None, address: str | None) -> list[str]:
    """Run the provider's sweep on every alive node; the removed VMs of all of them."""
    owned = connect(address)  # before Ray's import: see connect()
    import ray

    try:
        nodes = alive_nodes()
        removed = ray.get([pinned(sweep_here, n).remote(provider_name, run_id, True) for n in nodes])
        return [vm for per_node in removed for vm in per_node]
    finally:
        if owned:
            ray.shutdown()
