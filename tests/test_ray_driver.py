"""--backend ray as the driver sees it, on a real multi-node Ray cluster on this machine
(tests/ray_cluster.py: one head and two worker nodes, each its own raylet on 127.0.0.1).

The Engine API (what the RL scheduler uses) and the RolloutScheduler itself run in this
process, joined to the cluster: on_final, cancel, pause and resume, a worker actor killed
mid-attempt, one concurrency limit over the nodes; whole groups from the worker actors of
every node. A node whose disk is not the driver's (PARALLEL_ROLLOUT_NODE_DIR) sends its
trajectories and its pool's VM events back to the driver. One cluster serves the whole
module; a test that adds a node of its own removes it. The CLI on a cluster:
tests/test_ray_backend.py.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import assert_exactly_once, leftover_sandboxes, max_overlap, read_results
from ray_cluster import _NODE, SHELL_IDS, _cli, cluster, no_leaks, shell_engine, turns  # noqa: F401 - fixtures

sys.path.insert(0, str(Path(__file__).parent / "rl"))  # the RL tests' helpers


def test_engine_submit_cancel_pause_and_a_killed_worker_actor(cluster, tmp_path):
    """The Engine API a front end (the RL scheduler) uses, on the ray backend: on_final once
    per sample, cancel of a queued and of a running attempt, pause/resume, wait_idle, close; a
    worker actor SIGKILLed mid-attempt has it recorded worker_died and run again exactly once
    (Ray restarts nothing behind the driver); --max-concurrent-rollouts holds over the nodes."""
    import queue

    from parallel_rollout.messages import Assignment

    cl, _ = cluster
    engine, run_dir, by_id = shell_engine(cl.address, tmp_path, "eng", max_concurrent_rollouts=2)
    finals: queue.Queue = queue.Queue()
    with engine:
        engine.start()
        assert engine.concurrency == 2
        engine.submit(Assignment(by_id["long"], 0, 0), finals.put)
        engine.submit(Assignment(by_id["victim"], 0, 0), finals.put)
        engine.submit(Assignment(by_id["q0"], 0, 0), finals.put)
        deadline = time.monotonic() + 90
        while not (turns(run_dir, "long") >= 2 and turns(run_dir, "victim") >= 2):
            assert time.monotonic() < deadline, "long and victim did not both start"
            time.sleep(0.05)
        assert engine.in_flight() == 2 and engine.pending() == 1  # q0 waits: one limit over 3 nodes
        assert engine.cancel("q0#0")  # queued: dropped
        victim_pid = engine.holder_pid("victim#0")
        os.kill(victim_pid, signal.SIGKILL)  # a worker actor of this module's cluster
        assert engine.cancel("long#0")  # running: stops at its next turn
        engine.pause()
        for i in range(1, 5):
            engine.submit(Assignment(by_id[f"q{i}"], 0, 0), finals.put)
        deadline = time.monotonic() + 30
        while engine.in_flight():  # long stops, victim's death is noticed
            assert time.monotonic() < deadline, "the cancel or the death was not settled"
            time.sleep(0.05)
        time.sleep(1.0)
        assert engine.in_flight() == 0 and engine.pending() == 5, "dispatched while paused"
        engine.resume()
        assert engine.wait_idle(timeout=120)
    got = []
    while not finals.empty():
        got.append(finals.get_nowait())
    assert sorted(r["key"] for r in got) == ["q1#0", "q2#0", "q3#0", "q4#0", "victim#0"]
    assert {r["status"] for r in got} == {"success"}
    records = read_results(run_dir)
    victim = sorted((r for r in records if r["key"] == "victim#0"), key=lambda r: r["attempt"])
    assert [(r["attempt"], r["status"], r["final"]) for r in victim] == \
        [(0, "worker_died", False), (1, "success", True)]
    assert not [r for r in records if r["key"] in ("long#0", "q0#0")]  # cancelled: no record
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    # one lease per attempt of victim: nothing ran it a third time
    assert len([e for e in events if e.get("task") == "victim#0" and e.get("to") == "leased"]) == 2
    assert [e for e in events if e["event"] == "worker_died" and f"pid {victim_pid}" in e["reason"]]
    assert max_overlap(records) <= 2
    assert len({r["node"] for r in records if r.get("node")}) >= 2
    assert not leftover_sandboxes()



def test_rl_scheduler_batches_on_the_nodes(cluster, tmp_path):
    """RolloutScheduler on --backend ray: gym groups (no VM) from worker actors of every node,
    the policy gate reached from each, whole groups, nothing lost or doubled."""
    from collections import Counter

    from llm_server import LLMServer
    from parallel_rollout.rl import EnvManagerConfig, RolloutScheduler
    from rl_support import TINY, lake_set, rl_config
    from table_policy import TablePolicy

    cl, _ = cluster
    server = LLMServer(policy=TablePolicy(seed=0)).start()
    try:
        train = RolloutScheduler(
            rl_config(tmp_path, server, backend="ray", ray_address=cl.address, num_rollouts=1, envs_per_worker=2),
            EnvManagerConfig(num_env_groups=3, group_size=2, tags=["tiny"],
                             task_sets=lake_set(tmp_path, count=3, name="tiny", desc=TINY, max_steps=2)))
        # on the ray backend the gate is served on TCP, at the address the nodes reach
        assert train._shared.gate.path.startswith("tcp://127.0.0.1:")
        try:
            batches = [train.get_batch(batch_size=4, step=0)]
            train.suspend()
            train.resume(policy_version=1)  # every node's agents ask the gate on the driver
            batches += [train.get_batch(batch_size=4, step=step) for step in (1, 2)]
        finally:
            train.close()
    finally:
        server.stop()
    for step, batch in enumerate(batches):
        groups: dict[int, list] = {}
        for trajectory in batch:
            groups.setdefault(trajectory.group_id, []).append(trajectory)
        assert len(batch) == 4 and len(groups) == 2
        for members in groups.values():
            assert sorted(t.member for t in members) == [0, 1]
            assert len({(t.task_id, t.seed) for t in members}) == 1
        versions = {turn["policy_version"] for t in batch for turn in t.turns}
        assert versions == ({0} if step == 0 else {1}), versions
    returned = [t for batch in batches for t in batch]
    assert len({t.trajectory_id for t in returned}) == 12
    records = read_results(train.run_dir)
    finals = Counter(r["key"] for r in records if r.get("final"))
    assert all(n == 1 for n in finals.values())
    assert {t.record["key"] for t in returned} <= set(finals)  # nothing lost
    assert len({(r["key"], r["attempt"]) for r in records}) == len(records)  # nothing doubled
    assert len({r["node"] for r in records if r.get("node")}) >= 2, "every rollout ran on one node"


def test_an_agent_the_nodes_cannot_import_fails_get_batch_naming_the_error(cluster, tmp_path, monkeypatch):
    """A team's module:Class agent that imports in the trainer but not on the cluster's nodes:
    get_batch raises at once with the import's error and that every node needs it. The worker
    actors died saying only "an error raised in its creation task" and were respawned without
    end (one worker a node never reached the crash limit): get_batch waited out its timeout."""
    from parallel_rollout.config import RunConfig
    from parallel_rollout.errors import RolloutError
    from parallel_rollout.rl import EnvManagerConfig, RolloutScheduler
    from rl_support import TINY, lake_set

    cl, _ = cluster
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "trainer_only_agent.py").write_text("from parallel_rollout.agents.oracle import OracleAgent as Agent\n")
    monkeypatch.syspath_prepend(str(plugins))  # the trainer's, not the nodes' (started before)
    config = RunConfig(mode="gym", agent="trainer_only_agent:Agent", num_rollouts=1, backend="ray",
                       ray_address=cl.address, output_dir=str(tmp_path / "out"), progress=False)
    train = RolloutScheduler(config, EnvManagerConfig(num_env_groups=1, group_size=1, tags=["tiny"],
                                                      task_sets=lake_set(tmp_path, name="tiny", desc=TINY)))
    try:
        with pytest.raises(RolloutError) as raised:
            train.get_batch(batch_size=1, step=0, timeout=90)
    finally:
        train.close()
    said = str(raised.value)
    assert "cannot load the run's mode or agent" in said and "No module named 'trainer_only_agent'" in said, said
    assert "every node of the cluster needs them" in said, said


@pytest.mark.slow
def test_rl_turns_come_back_from_a_node_that_writes_elsewhere(cluster, tmp_path, monkeypatch):
    """A node whose disk is not the driver's (PARALLEL_ROLLOUT_NODE_DIR: it writes attempts'
    files to a folder of its own): its trajectories come back with their records through Ray,
    so the trainer gets every turn, never a reward without turns. The nodes that share the
    driver's folder send no files (the driver reads them where they are)."""
    from llm_server import LLMServer
    from parallel_rollout.backends import ray_backend
    from parallel_rollout.backends.ray_actors import NODE_DIR_ENV
    from parallel_rollout.rl import EnvManagerConfig, RolloutScheduler
    from rl_support import lake_set, rl_config
    from table_policy import TablePolicy

    carried: set[str] = set()  # the trajectory files that came with a record, through Ray
    unpack = ray_backend.unpack_files

    def unpack_files(run_dir, files):
        carried.update(files)
        return unpack(run_dir, files)

    monkeypatch.setattr(ray_backend, "unpack_files", unpack_files)
    cl, _ = cluster
    node_disk = tmp_path / "node-disk"
    node = cl.add_node(**_NODE, env_vars={NODE_DIR_ENV: str(node_disk)})
    cl.wait_for_nodes()
    server = LLMServer(policy=TablePolicy(seed=0)).start()
    try:
        train = RolloutScheduler(
            rl_config(tmp_path, server, backend="ray", ray_address=cl.address, num_rollouts=1, envs_per_worker=2,
                      run_id="apart"),
            EnvManagerConfig(num_env_groups=4, group_size=2, tags=["lakes"],
                             task_sets=lake_set(tmp_path, count=4, name="lakes", max_steps=4)))
        try:
            batch = train.get_batch(batch_size=8, step=0)
        finally:
            train.close()
    finally:
        server.stop()
        cl.remove_node(node)
    apart = [t for t in batch if t.record.get("node") == node.node_id]
    assert apart, "no rollout ran on the node with its own folder"
    for trajectory in batch:
        assert len(trajectory.turns) == trajectory.record["turns"] >= 1, trajectory.record
        assert "trajectory_files" not in trajectory.record  # taken out before the store
    for trajectory in apart:  # written on the node's own disk, and by the driver in its folder
        assert (node_disk / "apart" / trajectory.record["trajectory"]).is_file()
        assert (train.run_dir / trajectory.record["trajectory"]).is_file()
    assert {t.record["trajectory"] for t in apart} == {p for p in carried if not p.endswith(".images.jsonl")}


def _one_lease(actor):
    """``actor`` (a PoolActor) after one lease and release of its VM, and shut down."""
    try:
        vm = actor.call("lease", "w0", "t#0", 60.0)
        actor.call("release", vm.vm_id)
    finally:
        actor.call("shutdown")
    return actor, vm


def test_a_pool_apart_from_the_run_folder_keeps_its_events_for_the_driver(tmp_path, monkeypatch):
    """PoolActor as a plain class: where the driver's folder is not on the node (its path is
    not there, or holds another token), the pool writes nothing there and keeps its lines;
    where it is, the pool writes events.jsonl itself and keeps none."""
    from parallel_rollout.backends.ray_actors import NODE_DIR_ENV, PoolActor, mark_folder

    driver = tmp_path / "driver" / "run"
    token = mark_folder(driver)
    monkeypatch.setenv(NODE_DIR_ENV, str(tmp_path / "node-disk"))
    apart, vm = _one_lease(PoolActor("process", "apart-events", 1, run_dir=str(driver), folder_token=token))
    lines = [json.loads(line) for line in apart.take_events().splitlines()]
    moves = [e["to"] for e in lines if e["vm"] == vm.vm_id]
    assert "leased" in moves and moves.index("resetting") > moves.index("leased"), lines
    assert lines[-1]["reason"] == "pool shutdown" and apart.take_events() == ""
    assert not (driver / "events.jsonl").exists() and not list(tmp_path.rglob("node-disk/**/events.jsonl"))
    monkeypatch.delenv(NODE_DIR_ENV)
    shared, vm = _one_lease(PoolActor("process", "shared-events", 1, run_dir=str(driver), folder_token=token))
    assert shared.take_events() == ""
    written = [json.loads(line) for line in (driver / "events.jsonl").read_text().splitlines()]
    assert {"leased", "resetting"} <= {e["to"] for e in written if e["vm"] == vm.vm_id}


@pytest.mark.slow
def test_vm_events_of_a_node_that_writes_elsewhere_reach_the_run_folder(cluster, tmp_path):
    """A node whose disk is not the driver's keeps its pool's events.jsonl lines for the
    driver, which appends them to the run's: every lease of every node is in the run folder,
    none in the node's own."""
    from parallel_rollout.backends.ray_actors import NODE_DIR_ENV

    cl, _ = cluster
    node_disk = tmp_path / "node-disk"
    node = cl.add_node(**_NODE, env_vars={NODE_DIR_ENV: str(node_disk)})
    cl.wait_for_nodes()
    try:
        proc = subprocess.run(_cli(tmp_path, cl.address, "apart-vms"), capture_output=True, text=True,
                              timeout=240)
    finally:
        cl.remove_node(node)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = tmp_path / "apart-vms"
    finals = assert_exactly_once(run_dir, {f"{i}#0" for i in SHELL_IDS})
    apart = {r["vm"] for r in finals.values() if r.get("node") == node.node_id}
    assert apart, "no task ran on the node with its own folder"
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    leased = {(e["vm"], e["task"]) for e in events if e.get("event") == "vm" and e.get("to") == "leased"}
    assert {(r["vm"], r["key"]) for r in read_results(run_dir) if r.get("vm")} <= leased
    assert {vm for vm, _ in leased} >= apart
    # the apart pool's last lines (its VMs dead at its shutdown) came too
    assert {e["vm"] for e in events if e.get("to") == "dead" and e.get("reason") == "pool shutdown"} >= apart
    assert not list(node_disk.rglob("events.jsonl"))


def test_a_driver_that_never_set_ray_s_address_variable_joins_a_cluster_on_loopback(cluster, tmp_path):
    """The run itself says Ray must take 127.0.0.1 for a cluster on loopback (Ray reads it
    once, at its import): the backend imported Ray before it said so, and a driver whose
    environment did not already hold it (a trainer's script, a shell) dialled the host's
    address on the route out, hung ~2 min and died of Ray's SystemExit. The CLI here runs
    without the variable this test module sets for itself."""
    cl, _ = cluster
    env = {k: v for k, v in os.environ.items() if k != "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"}
    proc = subprocess.run(_cli(tmp_path, cl.address, "loop", "--limit", "2"), capture_output=True, text=True,
                          timeout=180, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Failed to connect to GCS" not in proc.stderr
    assert_exactly_once(tmp_path / "loop", {f"{i}#0" for i in SHELL_IDS[:2]})


def test_an_rl_run_goes_on_when_one_node_of_several_is_lost(cluster, tmp_path, caplog):
    """A node removed mid-run under the RL scheduler (gym: no VM pool, whose watch would say
    the node is gone): its worker's death came before the node poll saw the node leave, the
    worker was respawned pinned to it, each respawn failed at once as a crash, and the crash
    limit stopped the whole run within half a second. The node is lost, the run goes on, and
    the scheduler's stats() says which node it lost and why (its ``ray`` section). The trainer
    is told of the loss in one line, not a line more for each worker that died with the node
    (their deaths stay in events.jsonl)."""
    from llm_server import LLMServer
    from parallel_rollout.rl import EnvManagerConfig, RolloutScheduler
    from rl_support import TINY, lake_set, rl_config
    from table_policy import TablePolicy

    cl, _ = cluster
    node = cl.add_node(**_NODE)
    cl.wait_for_nodes()
    server = LLMServer(policy=TablePolicy(seed=0), token_rate=40).start()  # every loop mid-reply
    try:
        train = RolloutScheduler(
            rl_config(tmp_path, server, backend="ray", ray_address=cl.address, num_rollouts=1, envs_per_worker=2,
                      run_id="lose"),
            EnvManagerConfig(num_env_groups=8, group_size=2, tags=["tiny"],
                             task_sets=lake_set(tmp_path, count=8, name="tiny", desc=TINY, max_steps=2)),
            async_generation_ratio=2)
        events_path = train.run_dir / "events.jsonl"

        def events() -> list[dict]:
            return [json.loads(line) for line in events_path.read_text().splitlines()] if events_path.exists() else []

        try:
            batches = [train.get_batch(batch_size=4, step=0)]
            cl.remove_node(node, allow_graceful=False)
            deadline, after = time.monotonic() + 60, 0  # until the loss is seen, and two batches after it
            while after < 2 and time.monotonic() < deadline:
                batches.append(train.get_batch(batch_size=4, step=len(batches)))
                after += any(e.get("event") == "node_lost" for e in events())
            stats = train.stats()  # what a trainer sees of the nodes (the scheduler writes no summary.json)
        finally:
            train.close()
    finally:
        server.stop()
    assert all(len(batch) == 4 for batch in batches)
    lost = [e for e in events() if e.get("event") == "node_lost"]
    assert len(lost) == 1 and node.node_id[:8] in lost[0]["reason"], events()
    # stats() has summary.json's ray section: every node used, the lost one with why
    used = stats["ray"]["nodes"]
    assert used[node.node_id] == {"lost": True, "reason": lost[0]["reason"]}, used
    assert [n for n, said in used.items() if said["lost"]] == [node.node_id] and len(used) >= 2, used
    assert stats["ray"]["nodes_left_out"] == {}, stats["ray"]
    assert sum(e.get("event") == "worker_died" for e in events()) <= 3, events()
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and node.node_id[:8] in r.getMessage()]
    assert len(said) == 1 and "left the cluster" in said[0], said
