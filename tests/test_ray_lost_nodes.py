"""--backend ray from the CLI on a real multi-node Ray cluster on this machine, nodes and pools
lost mid-run (tests/ray_cluster.py: one head and two worker nodes, each its own raylet on
127.0.0.1): what an agent starts dying with a lost node's worker, every pool lost (exit 1,
then --resume), a run without VMs that says in summary.json which node it lost, a node removed
and one added mid-run. One cluster serves the whole module; the last test removes one of its
nodes. The runs that lose nothing: tests/test_ray_backend.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from conftest import ROOT, SHELL_TASKS, assert_exactly_once, live_descendants, read_results, shell_task, write_tasks
from process_tree import sleeps_left
from ray_cluster import _NODE, SHELL_IDS, _cli, cluster, command_of, communicate, no_leaks  # noqa: F401 - fixtures


@pytest.mark.slow
def test_processes_an_agent_starts_die_with_a_lost_node_s_worker(cluster, tmp_path):
    """A node that leaves the cluster (its raylet killed): its worker actor ends with it, out
    of the driver's reach, and what the actor's agent started ends too; the other nodes'
    workers keep theirs until the run stops."""
    cl, _ = cluster
    node = cl.add_node(**_NODE)  # this test's own, removed below
    cl.wait_for_nodes()
    marker = f"{700 + os.getpid() % 97}.5"
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task(f"h{i}", instruction=marker) for i in range(4)])
    cmd = _cli(tmp_path, cl.address, "lost", "--agent", "lifecycle_plugins:DetachesAndHangs", "--max-retries", "0",
               "--task-timeout", "300")
    cmd[cmd.index("--data") + 1] = str(data)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT / "tests")

    def sleeps() -> int:
        return sum(p.info["cmdline"] == ["sleep", marker] and p.info["status"] != psutil.STATUS_ZOMBIE
                   for p in psutil.process_iter(["cmdline", "status"]))

    try:
        deadline = time.monotonic() + 120
        while sleeps() < 4 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert sleeps() == 4, "the worker of each of the four nodes did not start its agent's sleep"
        cl.remove_node(node, allow_graceful=False)
        deadline = time.monotonic() + 30
        while sleeps() > 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert sleeps() == 3, "the lost node's worker left its agent's process running"
    finally:
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr[-3000:]
    left = sleeps_left(marker)
    assert not left, f"{len(left)} process(es) outlived their worker actors after Ctrl-C"


@pytest.mark.slow
def test_every_pool_lost_exits_1_and_resume_finishes(cluster, tmp_path):
    """The pool actors of every node SIGKILLed: the run stops with exit 1 (aborted, as when the
    local backend's pool manager dies), nothing doubled; --resume finishes every sample once."""
    cl, _ = cluster
    keys = {f"{i}#{s}" for i in SHELL_IDS for s in range(2)}
    cmd = _cli(tmp_path, cl.address, "aborted", "--group-size", "2")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    events = tmp_path / "aborted" / "events.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if events.exists() and len({json.loads(line)["vm"] for line in events.read_text().splitlines()
                                    if '"to": "leased"' in line}) >= 3:
            break  # every node's pool has served
        time.sleep(0.05)
    pools = [p for p in live_descendants() if "ray::PoolActor" in command_of(p)]
    assert len(pools) == 3, [command_of(p) for p in pools]
    for pool in pools:  # actors of this module's cluster
        pool.kill()
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 1, stderr[-2000:]
    assert "every node of the Ray cluster (or its VM pool) is lost" in stderr and "--resume" in stderr
    resumed = subprocess.run(cmd + ["--resume"], capture_output=True, text=True, timeout=240)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert_exactly_once(tmp_path / "aborted", keys)


_SLOW_ORACLE = """import time

from parallel_rollout.agents.oracle import OracleAgent


class Agent(OracleAgent):
    def act(self, observation):
        time.sleep(0.5)  # the run still going when the test kills a node
        return super().act(observation)
"""


@pytest.mark.slow
def test_a_run_without_vms_says_in_its_summary_which_node_it_lost(cluster, tmp_path):
    """--mode math (no VM, no pool) on the cluster and a node of the test's own, killed mid-run
    (its raylet, by pid): summary.json's ``ray`` section names every node the run used, the
    lost one with why, and the printed summary says it. Before, a run without VMs said a lost
    node only in its warnings and events.jsonl: summary.json had no word of the cluster."""
    cl, _ = cluster
    victim = cl.add_node(**_NODE)  # this test's own, killed below
    cl.wait_for_nodes()
    alive = {node.node_id for node in cl.list_all_nodes()}  # the head's and every worker node's
    (tmp_path / "slow_oracle.py").write_text(_SLOW_ORACLE)  # the nodes import it from the driver's folder
    data = tmp_path / "tasks.jsonl"
    data.write_text("".join(json.dumps({"id": f"t{i}", "mode": "math", "problem": "1+1", "answer": "2"}) + "\n"
                            for i in range(80)))
    cmd = [sys.executable, "-m", "parallel_rollout.cli", "--mode", "math", "--data", str(data), "--agent",
           "slow_oracle:Agent", "--output-dir", str(tmp_path), "--run-id", "nodes", "--backend", "ray",
           "--ray-address", cl.address, "--num-rollouts", "1", "--no-progress"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    results = tmp_path / "nodes" / "results.jsonl"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and proc.poll() is None:
        if results.exists() and f'"node": "{victim.node_id}"' in results.read_text():
            break  # the victim's worker has served: the run uses the node
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before a node could be killed"
    cl.remove_node(victim, allow_graceful=False)
    stdout, stderr = communicate(proc, 240)
    assert proc.returncode == 0, stderr[-3000:]
    assert_exactly_once(tmp_path / "nodes", {f"t{i}#0" for i in range(80)})
    summary = json.loads((tmp_path / "nodes" / "summary.json").read_text())
    assert summary["vm"] is None  # no VM: no pool's figures
    used = summary["ray"]["nodes"]
    assert set(used) == alive and victim.node_id in used, used
    assert used[victim.node_id]["lost"] is True, used
    assert victim.node_id[:8] in used[victim.node_id]["reason"], used
    assert [n for n, said in used.items() if said["lost"]] == [victim.node_id], used
    assert summary["ray"]["nodes_left_out"] == {}
    said = " ".join(stdout.split())
    assert f"Ray node {victim.node_id[:8]} lost: {used[victim.node_id]['reason']}" in said, stdout[-3000:]
    # Ray's own report of the death (the raylet's last 20 log lines, once a report, on
    # stdout) is not printed across the run's output: the run's lines say it
    assert "(raylet)" not in stdout + stderr and "Raylet is terminated" not in stdout + stderr, stdout[-3000:]


@pytest.mark.slow
def test_node_removed_and_node_added_mid_run(cluster, tmp_path):
    """Nothing lost or doubled when a node dies mid-run; a node that joins gets a pool."""
    cl, nodes = cluster
    victim = nodes[-1]
    # three samples a task, so that the node dies with attempts in flight; a tail of slower
    # tasks last in the file, so that work is still pending when the joined node's worker has
    # started (on a loaded machine that takes seconds: without the tail the others had
    # finished everything by then)
    tail = [shell_task(f"tail{i}", reference=["sleep 0.5"] * 6 + [f"touch ~/tail{i}.done"]) for i in range(4)]
    data = write_tasks(tmp_path / "tasks.jsonl",
                       [json.loads(line) for line in SHELL_TASKS.read_text().splitlines() if line.strip()] + tail)
    cmd = _cli(tmp_path, cl.address, "lossy", "--max-retries", "2", "--group-size", "3")
    cmd[cmd.index("--data") + 1] = str(data)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    results = tmp_path / "lossy" / "results.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        # the victim's worker has served one attempt, so it is started and holds its next (on a
        # loaded machine it can still be starting when the others have written three results)
        if results.exists() and f'"node": "{victim.node_id}"' in results.read_text():
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before a node could be removed"
    cl.remove_node(victim, allow_graceful=False)
    joined = cl.add_node(**_NODE)  # a node that joins mid-run adds its pool and workers
    stdout, stderr = communicate(proc, 240)
    assert proc.returncode == 0, stderr[-3000:]
    run_dir = tmp_path / "lossy"
    ids = SHELL_IDS + [t["id"] for t in tail]
    finals = assert_exactly_once(run_dir, {f"{i}#{s}" for i in ids for s in range(3)})
    assert all(r["status"] == "success" for r in finals.values()), \
        {k: r["status"] for k, r in finals.items() if r["status"] != "success"}
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    assert any(e["event"] == "node_lost" for e in events), "the lost node was not noticed"
    # every attempt of the lost node that had no result was recorded worker_died and retried
    # (its worker always holds one: dispatch keeps every worker busy)
    assert any(r["status"] == "worker_died" for r in read_results(run_dir))
    for record in read_results(run_dir):
        if record["status"] == "worker_died":
            assert not record["final"]
            retry = [r for r in read_results(run_dir) if r["key"] == record["key"]
                     and r["attempt"] == record["attempt"] + 1]
            assert retry and retry[0]["node"] != victim.node_id
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["vm"]["states"].get("dead", 0) >= 1  # the lost node's VM
    lost = summary["vm"]["nodes"][victim.node_id]
    assert lost["lost"] is True and lost["size"] == 1 and victim.node_id[:8] in lost["reason"], lost
    # the cluster's section, as a run without VMs has it, says the same (tests/…which_node_it_lost)
    assert summary["ray"]["nodes"][victim.node_id] == {"lost": True, "reason": lost["reason"]}
    assert [n for n, said in summary["ray"]["nodes"].items() if said["lost"]] == [victim.node_id]
    assert f"Ray node {victim.node_id[:8]} lost: {lost['reason']}" in " ".join(stdout.split()), stdout[-3000:]
    assert any(e["event"] == "node_joined" for e in events), "the new node was not noticed"
    assert joined.node_id in summary["vm"]["nodes"] and len(summary["vm"]["nodes"]) == 4
    assert summary["vm"]["nodes"][joined.node_id]["leases"] >= 1, "the new node's pool served nothing"
    # the lost node's worker was not moved onto a survivor (whose one VM it would wait for)
    records = read_results(run_dir)
    lost_workers = {r["worker"] for r in records if r["status"] == "worker_died" or r.get("node") == victim.node_id}
    assert not [r for r in records if r.get("node") not in (None, victim.node_id) and r["worker"] in lost_workers]
