"""--backend ray with a node's pool actor paused (SIGSTOP: a node paused, a GC pause, a stalled
network), on a real multi-node Ray cluster on this machine (tests/ray_cluster.py: one head and
two worker nodes, each its own raylet on 127.0.0.1), driven through the Engine API in this
process: a worker that dies beside a paused pool holds back no other node, and pools paused
as the run ends hold its end up once, not once per pool. One cluster serves the whole module.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from typing import Iterator

import psutil
import pytest

from conftest import leftover_sandboxes, read_results
from ray_cluster import cluster, command_of, no_leaks, shell_engine, turns  # noqa: F401 - fixtures


def _pool_actor_beside(worker_pid: int) -> psutil.Process:
    """The pool actor of the node a worker actor runs on: a child of the same raylet."""
    raylet = psutil.Process(worker_pid).parent()
    pools = [p for p in raylet.children() if "ray::PoolActor" in command_of(p)]
    assert len(pools) == 1, [command_of(p) for p in raylet.children()]
    return pools[0]


@contextmanager
def _paused(*procs: psutil.Process) -> Iterator[None]:
    """``procs`` stopped (SIGSTOP) meanwhile, continued after, whatever happens."""
    for proc in procs:
        proc.suspend()
    try:
        yield
    finally:
        for proc in procs:
            try:
                proc.resume()
            except psutil.NoSuchProcess:
                pass  # killed meanwhile (the run's end kills its pool actors)


def test_a_dead_worker_s_paused_pool_holds_back_no_other_node(cluster, tmp_path):
    """A worker actor SIGKILLed while its node's pool actor is paused: the other nodes'
    attempts are dispatched and settled within seconds. Before, the engine thread waited up to
    10 s for that pool to reclaim the dead worker's VM, every node's dispatch and results held
    meanwhile; once the pool answers, the worker_died event names the VM it reclaimed."""
    from parallel_rollout.messages import Assignment

    cl, _ = cluster
    engine, run_dir, by_id = shell_engine(cl.address, tmp_path, "paused", max_retries=0)
    finals: queue.Queue = queue.Queue()
    with engine:
        engine.start()
        engine.submit(Assignment(by_id["victim"], 0, 0), finals.put)
        deadline = time.monotonic() + 90
        while turns(run_dir, "victim") < 2:
            assert time.monotonic() < deadline, "victim did not start"
            time.sleep(0.05)
        victim_pid = engine.holder_pid("victim#0")
        with _paused(_pool_actor_beside(victim_pid)):
            os.kill(victim_pid, signal.SIGKILL)  # a worker actor of this module's cluster
            killed_at = time.monotonic()
            for i in range(2):  # one for each of the other two nodes' idle workers
                engine.submit(Assignment(by_id[f"q{i}"], 0, 0), finals.put)
            got = sorted(finals.get(timeout=60)["key"] for _ in range(3))
            took = time.monotonic() - killed_at
        assert engine.wait_idle(timeout=60)
    assert got == ["q0#0", "q1#0", "victim#0"], got
    assert took < 7, f"the other nodes' attempts were settled {took:.1f}s after the kill"
    records = read_results(run_dir)
    assert {r["key"]: r["status"] for r in records} == {"victim#0": "worker_died", "q0#0": "success",
                                                        "q1#0": "success"}
    victim_node = next(r["node"] for r in records if r["key"] == "victim#0")
    assert victim_node not in {r["node"] for r in records if r["key"] != "victim#0"}, records
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    died = [e for e in events if e["event"] == "worker_died" and f"pid {victim_pid}" in e["reason"]]
    assert len(died) == 1 and "VMs reclaimed: ['n" in died[0]["reason"], died
    assert not leftover_sandboxes()


@pytest.mark.slow  # ~22 s: every pool SIGSTOPped through the run's end; the default run keeps the dead worker's
def test_pools_paused_as_the_run_ends_hold_its_end_up_once(cluster, tmp_path, monkeypatch):
    """Every node's pool actor paused as the run ends: the pools are asked to shut down at
    once, under one deadline (``POOL_SHUTDOWN_S``, 120 s, shrunk here to 6 s), so the close
    waits it once. Before, each pool was waited for in turn: 6 s × 3 nodes (at 120 s, six
    minutes). The pools that did not answer have their VMs counted dead; those VMs, which the
    run's sweep leaves while their paused pool lives, ``vms sweep`` removes."""
    from parallel_rollout.backends import ray_pools
    from parallel_rollout.messages import Assignment

    monkeypatch.setattr(ray_pools, "POOL_SHUTDOWN_S", 6.0)
    cl, _ = cluster
    engine, run_dir, by_id = shell_engine(cl.address, tmp_path, "stalled_end")
    with engine:
        engine.start()
        for i in range(3):
            engine.submit(Assignment(by_id[f"q{i}"], 0, 0))
        assert engine.wait_idle(timeout=120)
        pids = engine.worker_pids().values()
        assert len(pids) == 3 and None not in pids, pids
        pools = [_pool_actor_beside(pid) for pid in pids]
        with _paused(*pools):
            asked_at = time.monotonic()
            engine.close()
            took = time.monotonic() - asked_at
    assert took < 15, f"the run's end took {took:.1f}s with 3 pools paused"
    assert engine.final_pool_stats["states"].get("dead") == 3, engine.final_pool_stats
    # each such pool's entry says why its VMs count dead, as a lost node's does (it said
    # "lost": true and no reason)
    said = engine.final_pool_stats["nodes"]
    assert len(said) == 3 and all(s["lost"] and s["reason"] == "its pool did not answer its shutdown within 6s "
                                  "(its node paused, stalled or gone)" for s in said.values()), said
    assert {r["status"] for r in read_results(run_dir)} == {"success"}
    _, alive = psutil.wait_procs(pools, timeout=30)  # killed by the run's end, once continued
    assert not alive, alive
    sweep = subprocess.run([sys.executable, "-m", "parallel_rollout.cli", "vms", "sweep", "--backend", "ray",
                            "--ray-address", cl.address, "--run-id", "stalled_end"],
                           capture_output=True, text=True, timeout=120)
    assert sweep.returncode == 0, sweep.stderr[-2000:]
    assert not leftover_sandboxes()


@pytest.mark.slow
def test_late_attempts_of_a_paused_node_are_settled_at_once(cluster, tmp_path):
    """Four worker actors of one node paused (SIGSTOP) with their attempts, and every node's
    attempts past --task-timeout at once: the driver asks every late actor where its attempt
    is at once, under one deadline (``PROGRESS_WAIT_S``, 2 s), so the twelve attempts are
    settled within seconds of their deadline. Before, it asked them in turn on the engine
    thread, 2 s for each paused actor, every node's dispatch and results held meanwhile. Each
    record still says where its attempt was, but the paused actors', which did not answer."""
    from parallel_rollout.messages import Assignment

    cl, _ = cluster
    limit = 15.0
    engine, run_dir, by_id = shell_engine(cl.address, tmp_path, "late", num_rollouts=4, num_vms=4,
                                          task_timeout=limit, max_retries=0)
    finals: queue.Queue = queue.Queue()
    with engine:
        engine.start()
        deadline = time.monotonic() + 120
        while len(pids := [p for p in engine.worker_pids().values() if p is not None]) < 12:
            assert time.monotonic() < deadline, f"the workers did not start: {engine.worker_pids()}"
            time.sleep(0.1)
        by_node: dict[int, list[int]] = {}
        for pid in pids:
            by_node.setdefault(psutil.Process(pid).ppid(), []).append(pid)  # a child of its node's raylet
        paused = [psutil.Process(pid) for pid in next(iter(by_node.values()))]
        assert len(by_node) == 3 and len(paused) == 4, by_node
        for sample in range(12):
            engine.submit(Assignment(by_id["long"], sample, 0), finals.put)
        sent_at = time.monotonic()
        started = run_dir / "trajectories" / "long"
        while len(list(started.glob("*/attempt-0.jsonl"))) < 12 and time.monotonic() < sent_at + limit - 3:
            time.sleep(0.1)
        with _paused(*paused):
            got = [finals.get(timeout=limit + 60) for _ in range(12)]
            took = time.monotonic() - (sent_at + limit)
        assert engine.wait_idle(timeout=60)
    assert {r["status"] for r in got} == {"task_timeout"}, [(r["key"], r["status"]) for r in got]
    assert took < 6, f"the late attempts were settled {took:.1f}s after their deadline"
    paused_pids = {p.pid for p in paused}
    said = {r["key"]: "the attempt was in" in r["failure"]["message"] for r in read_results(run_dir)}
    assert {key for key, known in said.items() if not known} == {r["key"] for r in got if r["pid"] in paused_pids}
    assert sum(said.values()) == 8, said
    assert not leftover_sandboxes()
