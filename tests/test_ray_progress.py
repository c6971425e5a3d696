"""A Ray run's progress (the module's own cluster of three nodes, tests/ray_cluster.py): read
from the pools' reports the driver takes every second, it asks no pool, and one node's pool
that hangs neither stalls the run's main loop nor its progress lines, which say the pool
unreachable."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time

import psutil
import pytest

from conftest import assert_exactly_once, live_descendants
from ray_cluster import SHELL_IDS, _cli, cluster, command_of, communicate, no_leaks  # noqa: F401 - fixtures

#: the CLI, with progress lines every half second (no terminal: lines, not a bar) and pools
#: that count the driver's calls for their stats, saying the count in the stats they give
_COUNTING_CLI = """
import sys

from parallel_rollout import runner
from parallel_rollout.backends import ray_backend
from parallel_rollout.backends.ray_actors import PoolActor
from parallel_rollout.cli import main

runner._PROGRESS_LOG_S = 0.5


class CountingPool(PoolActor):
    stats_asked = 0

    def call(self, name, *args):
        if name != "stats":
            return super().call(name, *args)
        self.stats_asked += 1
        return {**super().call(name, *args), "stats_asked": self.stats_asked}


ray_backend.PoolActor = CountingPool
sys.argv[0] = "parallel-rollout"
main()
"""

#: how long the test holds one node's pool stopped (under the 10 s the driver's stats call waited)
_STOP_S = 9.0


def _progress_lines(run_log) -> list[str]:
    return [line for line in run_log.read_text().splitlines() if "progress: " in line] if run_log.exists() else []


@pytest.mark.slow
def test_a_hung_pool_stalls_neither_the_run_nor_its_progress_and_no_pool_is_asked(cluster, tmp_path):
    """One node's pool actor SIGSTOPped (a node under memory pressure, a network stall) while
    its worker needs it: the progress lines keep coming, the one stopped named unreachable;
    SIGCONT, and the run ends normally, every sample once. Each pool was asked its stats once,
    at the end. Before, every progress update asked each node's pool in turn on the run's
    main thread (10 s to wait on one that hung): no line came while the pool was stopped,
    and each pool was asked about once a second."""
    cl, _ = cluster
    cmd = [sys.executable, "-c", _COUNTING_CLI, *_cli(tmp_path, cl.address, "hung", "--group-size", "4")[3:]]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    run_dir = tmp_path / "hung"
    events = run_dir / "events.jsonl"
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:
        if events.exists() and '"to": "leased"' in events.read_text():
            break  # the pools serve: the run's workers lease again and again
        time.sleep(0.05)
    pools = [p for p in live_descendants() if "ray::CountingPool" in command_of(p)]
    assert proc.poll() is None and len(pools) == 3, [command_of(p) for p in pools]
    stopped = pools[0]
    before = len(_progress_lines(run_dir / "run.log"))
    stopped.send_signal(signal.SIGSTOP)
    try:
        time.sleep(_STOP_S)
        during = _progress_lines(run_dir / "run.log")[before:]
        assert proc.poll() is None, "the run ended with a pool stopped"
    finally:
        try:
            stopped.send_signal(signal.SIGCONT)
        except psutil.Error:
            pass
    _, stderr = communicate(proc, timeout=240)
    assert proc.returncode == 0, stderr[-3000:]
    # a line every second or so while the pool was stopped, the stopped one named late
    assert len(during) >= 4, during
    named = {m for line in during for m in re.findall(r"node (\w+)'s pool unreachable \(last report", line)}
    assert len(named) == 1, during
    assert_exactly_once(run_dir, {f"{i}#{s}" for i in SHELL_IDS for s in range(4)})
    nodes = json.loads((run_dir / "summary.json").read_text())["vm"]["nodes"]
    asked = {node_id[:8]: said.get("stats_asked") for node_id, said in nodes.items()}
    assert asked == {node_id: 1 for node_id in asked} and len(asked) == 3, asked  # at the end only
