"""--backend ray as a run ends: a node that dies just before the end (its raylet SIGKILLed by
pid after the last attempt, as the engine closes), on a real multi-node Ray cluster on this
machine (tests/ray_cluster.py). The end says that the node died, not that a sweep of the
run's VMs was missed there. Nodes lost mid-run: tests/test_ray_lost_nodes.py.
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import time

import psutil
import pytest

from ray_cluster import _NODE, no_leaks, shell_engine  # noqa: F401 - fixtures


class _Said(logging.Handler):
    """The run's warnings as its logger says them (it does not propagate to the root)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.mark.slow
def test_a_node_that_dies_as_the_run_ends_is_said_lost_not_unswept(tmp_path):
    """Every attempt ended, then a node's raylet SIGKILLed by pid and the engine closed at
    once (before the cluster's health checks declared the node dead): the end says the node
    left the cluster, and its summary section has it lost with why; no warning that the run's
    VMs are not swept on every node (a sweep that could not run on a node that is gone)."""
    from parallel_rollout.messages import Assignment

    from ray.cluster_utils import Cluster

    # Ray's own health checks (a dead node declared so ~15 s after its raylet died): the
    # engine's end asks it to sweep while the cluster still counts it alive
    cl = Cluster(initialize_head=True, connect=False, head_node_args=dict(_NODE, include_dashboard=False))
    victim = cl.add_node(**_NODE)
    cl.wait_for_nodes()
    said = _Said()
    logger = logging.getLogger("parallel_rollout")
    logger.addHandler(said)
    try:
        engine, run_dir, by_id = shell_engine(cl.address, tmp_path, "end")
        finals: queue.Queue = queue.Queue()
        with engine:
            engine.start()
            for i in range(5):
                engine.submit(Assignment(by_id[f"q{i}"], 0, 0), finals.put)
            assert engine.wait_idle(timeout=120)
            raylet = psutil.Process(victim.all_processes["raylet"][0].process.pid)
            for proc in [*raylet.children(recursive=True), raylet]:  # the node, its actors with it
                with contextlib.suppress(psutil.NoSuchProcess):
                    proc.kill()  # SIGKILL, by its pid
            started = time.monotonic()
        ended_s = time.monotonic() - started
    finally:
        logger.removeHandler(said)
        cl.shutdown()
    assert finals.qsize() == 5
    assert not [line for line in said.lines if "not swept" in line], said.lines
    lost = engine.final_cluster["nodes"][victim.node_id]
    assert lost == {"lost": True, "reason": f"node {victim.node_id[:8]} left the cluster as the run ended"}, lost
    assert [line for line in said.lines if line.startswith(lost["reason"])], said.lines
    # its pool's shutdown failed at once, its node gone: said so, not as a wait for an answer
    stopped = [line for line in said.lines if line.startswith(f"the pool of node {victim.node_id[:8]} did not shut")]
    assert stopped and all("shutdown failed at once: the pool or its node is gone" in line and "within" not in line
               for line in stopped), stopped
    # its pool's VMs counted dead, and why; the run's events say it too
    pool = engine.final_pool_stats["nodes"][victim.node_id]
    assert pool["lost"] is True and pool["reason"] == lost["reason"], pool
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    assert [e["reason"] for e in events if e["event"] == "node_lost"] == [lost["reason"]], events[-5:]
    assert ended_s < 60, ended_s
