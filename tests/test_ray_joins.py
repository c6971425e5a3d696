"""A node that joins a run on a Ray cluster mid-way as an operator adds one: ``ray start
--address HEAD`` (tests/ray_cluster.py's cluster on 127.0.0.1, the node a process of the
test's own), then lost (its raylet killed by pid, as its host going down does): the run
places a pool and a worker there and leases that pool's VM, and the node's loss loses
nothing and doubles nothing (its attempt under way recorded ``worker_died`` and retried on
another node, every sample final once, the node said lost in summary.json, its pool's leases
kept in the run's totals as of its last report).
"""

from __future__ import annotations

import json
import signal
import subprocess
import time

import psutil
import pytest

import ray_cluster
from conftest import assert_exactly_once, read_results, shell_task, write_tasks
from ray_cluster import _cli, command_of, communicate, descendants, ray_start_node

# the module's fixtures: a cluster (made when a test first asks for it) and the leak check
cluster, no_leaks = ray_cluster.cluster, ray_cluster.no_leaks


def _raylet(node: subprocess.Popen) -> psutil.Process:
    raylets = [p for p in descendants(node) if p.name() == "raylet"]
    assert len(raylets) == 1, [command_of(p)[:100] for p in descendants(node)]
    return raylets[0]


@pytest.mark.slow
def test_a_node_started_mid_run_serves_attempts_and_its_loss_loses_nothing(cluster, tmp_path):
    cl, nodes = cluster
    known = {cl.head_node.node_id} | {n.node_id for n in nodes}
    tasks = [shell_task(f"j{i}", reference=["sleep 2", f"touch ~/j{i}.done"]) for i in range(40)]
    keys = {f"j{i}#0" for i in range(len(tasks))}
    cmd = _cli(tmp_path, cl.address, "joins", "--max-retries", "2")
    cmd[cmd.index("--data") + 1] = str(write_tasks(tmp_path / "tasks.jsonl", tasks))
    run_dir = tmp_path / "joins"
    results = run_dir / "results.jsonl"
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline and not (results.exists() and results.stat().st_size):
            time.sleep(0.1)
        assert proc.poll() is None, "the run ended before a node could join"
        with ray_start_node(cl.address, tmp_path / "ray-start.log") as node:
            # the joined node's worker has finished an attempt on its own pool's VM: it holds
            # its next one (dispatch keeps every worker busy while samples wait)
            joined = None
            while proc.poll() is None and time.monotonic() < deadline + 60 and joined is None:
                joined = next((r["node"] for r in read_results(run_dir) if r.get("node") not in known | {None}
                               and r["status"] == "success"), None)
                time.sleep(0.1)
            assert joined, ("the node that joined mid-run served no attempt", proc.poll(),
                            (tmp_path / "ray-start.log").read_text()[-2000:], (run_dir / "events.jsonl").read_text()[-3000:])
            assert proc.poll() is None, "the run ended before the joined node could be lost"
            # the driver takes each pool's report (events, stats) every second: the one after
            # that lease is taken by now (the next attempt, 2 s long, under way there)
            time.sleep(1.0)
            _raylet(node).send_signal(signal.SIGKILL)  # its host went down
            node.wait(30)
            stdout, stderr = communicate(proc, 240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, stderr[-3000:]
    finals = assert_exactly_once(run_dir, keys)
    assert {r["status"] for r in finals.values()} == {"success"}, finals
    records = read_results(run_dir)
    on_joined = [r for r in records if r.get("node") == joined]
    died = [r for r in on_joined if r["status"] == "worker_died"]
    # served on the VM of the pool placed there, not one of another node's
    served = {r["vm"] for r in on_joined if r["status"] == "success"}
    assert served and served.isdisjoint(r["vm"] for r in records if r.get("node") in known), on_joined
    assert died, "the joined node was lost holding no attempt"
    for record in died:  # retried on a node still in the run
        retry = [r for r in records if r["key"] == record["key"] and r["attempt"] == record["attempt"] + 1]
        assert not record["final"] and retry and retry[0]["node"] in known, (record, retry)
    # its worker was not moved to another node (whose one VM it would wait for)
    assert not [r for r in records if r["worker"] in {r["worker"] for r in on_joined} and r.get("node") != joined]
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    assert [e for e in events if e["event"] == "node_joined" and joined[:8] in e["reason"]], events
    assert [e for e in events if e["event"] == "node_lost" and joined[:8] in e["reason"]], events
    summary = json.loads((run_dir / "summary.json").read_text())
    pools = summary["vm"]["nodes"]
    assert pools[joined]["lost"], pools
    # the lost node's work counts, as of its pool's last report: its leases in the run's
    # totals (before, its entry had no figures, and the totals left its leases out)
    assert pools[joined]["leases"] >= 1 and pools[joined]["as_of"] <= time.time(), pools[joined]
    assert summary["vm"]["leases"] == sum(said.get("leases", 0) for said in pools.values()), summary["vm"]
    assert summary["vm"]["leases"] >= len({r["vm"] for r in records if r.get("vm")}), summary["vm"]
    assert summary["ray"]["nodes"][joined]["lost"], summary["ray"]
    assert [n for n, said in summary["ray"]["nodes"].items() if said["lost"]] == [joined], summary["ray"]
