"""Where the Ray processes of a --backend ray run listen: on 127.0.0.1 only, the project's
rule for nodes on this machine. The test cluster (tests/ray_cluster.py: ray.cluster_utils'
nodes and a node started with ``ray start --address`` as an operator starts one) and the
head a run starts itself without --ray-address; every listening TCP socket of their
processes (GCS, raylets, workers, agents) is looked at, as ``ss -ltnp`` shows it.
"""

from __future__ import annotations

import ipaddress
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from conftest import SHELL_TASKS, shell_task, write_tasks
from ray_cluster import cluster, communicate, descendants, no_leaks, own_ray_tmp, ray_start_node  # noqa: F401


def _not_on_loopback(procs: list[psutil.Process]) -> list[str]:
    """Each listening TCP socket of ``procs`` bound elsewhere than loopback (0.0.0.0, ::, the
    host's address), with its process; the number of listening sockets they have."""
    wrong, seen = [], 0
    for proc in procs:
        try:
            sockets = [c for c in proc.net_connections("inet") if c.status == psutil.CONN_LISTEN]
            name = proc.name()
        except psutil.Error:  # ended meanwhile
            continue
        for sock in sockets:
            seen += 1
            address = ipaddress.ip_address(sock.laddr.ip)
            mapped = getattr(address, "ipv4_mapped", None)
            if not (mapped or address).is_loopback:
                wrong.append(f"{name} (pid {proc.pid}) listens on {sock.laddr.ip}:{sock.laddr.port}")
    assert seen, "no listening socket found: the check looked at nothing"
    return wrong


@pytest.mark.slow
def test_the_test_cluster_s_nodes_listen_on_loopback_only(cluster, tmp_path):
    """The module's cluster (head, two nodes) and a node joined with ``ray start --address``."""
    cl, _ = cluster
    with ray_start_node(cl.address, tmp_path / "node.log") as node:
        deadline = time.monotonic() + 60
        while not [p for p in descendants(node) if p.name() == "raylet"] and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(3)  # its agents' ports
        procs = psutil.Process().children(recursive=True)
        assert [p for p in procs if p.name() == "gcs_server"], "the cluster's GCS is not this test's"
        assert len([p for p in procs if p.name() == "raylet"]) >= 4, [p.name() for p in procs]
        assert _not_on_loopback(procs) == []


@pytest.mark.slow
def test_the_head_a_run_starts_itself_listens_on_loopback_only(tmp_path):
    """No --ray-address: the run's own Ray instance, looked at while an attempt runs."""
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("slow", reference=["sleep 0.5"] * 16 + ["touch ~/slow.done"])])
    with own_ray_tmp() as ray_tmp:
        proc = subprocess.Popen([sys.executable, "-m", "parallel_rollout.cli", "--mode", "shell", "--data", str(data),
                                 "--output-dir", str(tmp_path), "--run-id", "own", "--backend", "ray",
                                 "--num-rollouts", "1", "--use-vm-pool", "--num-vms", "1", "--no-progress"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=dict(os.environ, RAY_TMPDIR=str(ray_tmp)))
        try:
            trajectory = tmp_path / "own" / "trajectories" / "slow"
            deadline = time.monotonic() + 120
            while not trajectory.exists() and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
            assert proc.poll() is None and trajectory.exists(), "the attempt did not start"
            procs = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
            assert {"gcs_server", "raylet"} <= {p.name() for p in procs}, [p.name() for p in procs]
            wrong = _not_on_loopback(procs)
        finally:
            _, stderr = communicate(proc, 180)
        assert proc.returncode == 0, stderr[-3000:]
    assert wrong == []
