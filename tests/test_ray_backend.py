"""--backend ray on a real multi-node Ray cluster on this machine (ray.cluster_utils.Cluster:
one head and two worker nodes, each its own raylet on 127.0.0.1).

The CLI runs in a subprocess that joins the cluster with --ray-address; every node gets its
own process-sandbox pool and its own worker actors. The Engine API (what the RL scheduler
uses) and the RolloutScheduler itself run in this process, joined to the same cluster. One
cluster serves the whole module (Ray start-up is the expensive part); the node-removal test
goes last and removes a node of its own. Without a cluster: tests/test_ray_config.py.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from conftest import (SHELL_TASKS, assert_exactly_once, check_no_leaks, leftover_sandboxes, live_descendants,
                      max_overlap, read_results, shell_task, write_tasks)

# Every Ray process of this module on 127.0.0.1 (else Ray takes the address of the route out)
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent / "rl"))  # the RL tests' helpers
SHELL_IDS = [json.loads(line)["id"] for line in SHELL_TASKS.read_text().splitlines() if line.strip()]
#: Ray's own processes, which outlive a run by design (the cluster is the module's)
_RAY_SYSTEM = ("raylet", "gcs_server", "ray::IDLE", "ray::DashboardAgent", "ray::RuntimeEnvAgent",
               "ray/_private", "ray/dashboard", "ray/autoscaler", "runtime_env", "log_monitor", "monitor.py",
               "plasma")
_NODE = dict(num_cpus=1, object_store_memory=80 * 1024 * 1024)


def _is_ray_system(proc: psutil.Process) -> bool:
    try:
        text = " ".join(proc.cmdline()) or proc.name()
    except psutil.Error:
        return True
    return any(part in text for part in _RAY_SYSTEM)


@pytest.fixture(scope="module")
def cluster():
    cluster = Cluster(initialize_head=True, connect=False, head_node_args=dict(
        _NODE, include_dashboard=False,
        # a node that goes away is declared dead within ~2 s, not ~30 s
        _system_config={"health_check_period_ms": 500, "health_check_failure_threshold": 3}))
    nodes = [cluster.add_node(**_NODE) for _ in range(2)]
    cluster.wait_for_nodes()
    yield cluster, nodes
    cluster.shutdown()


@pytest.fixture(autouse=True)
def no_leaks():
    """conftest's check, with the module's Ray cluster allowed to stay up: no sandbox, no
    worker or pool actor, no agent subprocess outlives a run."""
    before = {p.pid for p in live_descendants()}
    yield
    check_no_leaks(before, allowed=_is_ray_system, grace_s=15)


def _cli(out: Path, address: str, run_id: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "parallel_rollout.cli", "--mode", "shell", "--data", str(SHELL_TASKS),
            "--output-dir", str(out), "--run-id", run_id, "--backend", "ray", "--ray-address", address,
            "--num-rollouts", "1", "--num-vms", "1", "--use-vm-pool", "--no-progress", *extra]


@pytest.mark.slow
def test_shell_benchmark_spread_over_nodes(cluster, tmp_path):
    """The shell benchmark over three nodes, each with its own pool, plus one task that hangs:
    --task-timeout kills its worker actor on its node; the progress bar, and exit 3 under
    --fail-under, as with --backend local."""
    cl, _ = cluster
    data = tmp_path / "tasks.jsonl"
    data.write_text(SHELL_TASKS.read_text().rstrip("\n") + "\n" + json.dumps(
        {"id": "stuck", "mode": "shell", "instruction": "wait", "check": "true", "reference": ["sleep 60"]}) + "\n")
    cmd = [arg if arg != "--no-progress" else "--progress"
           for arg in _cli(tmp_path, cl.address, "spread", "--task-timeout", "15", "--fail-under", "0.99")]
    cmd[cmd.index("--data") + 1] = str(data)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 3, proc.stderr[-3000:]
    total = len(SHELL_IDS) + 1
    assert f"{total}/{total}" in proc.stderr and "VMs busy" in proc.stderr, proc.stderr[-2000:]
    run_dir = tmp_path / "spread"
    finals = assert_exactly_once(run_dir, {f"{i}#0" for i in [*SHELL_IDS, "stuck"]})
    assert finals.pop("stuck#0")["status"] == "task_timeout"
    assert all(r["status"] == "success" for r in finals.values()), \
        {k: r["status"] for k, r in finals.items() if r["status"] != "success"}
    events = (run_dir / "events.jsonl").read_text()
    assert '"event": "task_timeout"' in events and '"event": "worker_died"' in events
    nodes = {r["node"] for r in finals.values()}
    assert len(nodes) >= 2, f"every task ran on one node: {nodes}"
    # each node leased from its own pool: a VM id never shows up on two nodes' records
    vm_nodes: dict[str, set[str]] = {}
    for record in read_results(run_dir):
        if record.get("vm"):
            vm_nodes.setdefault(record["vm"], set()).add(record["node"])
    assert all(len(n) == 1 for n in vm_nodes.values()), vm_nodes
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["vm"]["size"] == 3  # one VM on each of the three nodes
    assert len(summary["vm"]["nodes"]) == 3
    assert "[Concurrency] Set max concurrent rollouts to 3" in proc.stderr


@pytest.mark.slow
def test_timeouts_are_not_crashes(cluster, tmp_path):
    """Every task runs past --task-timeout: each timeout kills its worker actor on purpose, and
    more of them than the crash limit (10 per worker of the 3 nodes + 10 = 40) is still a run
    that finishes with one task_timeout per task, not one stopped as 'workers keep dying'.

    The driver's crash window is widened to an hour: here the 45 kills spread over about two
    minutes (actor restarts are slow on a loaded machine; one run had at most 29 of them in
    any minute), so in the real one-minute window a backend that counted its timeouts as
    crashes would pass too."""
    cl, _ = cluster
    data = tmp_path / "tasks.jsonl"
    tasks = 45
    data.write_text("".join(json.dumps({"id": f"t{i}", "mode": "math", "problem": "1+1", "answer": "2"}) + "\n"
                            for i in range(tasks)))
    wide_window = ("import parallel_rollout.backends.base as base; base.CRASH_WINDOW_S = 3600.0; "
                   "from parallel_rollout.cli import main; main()")
    cmd = [sys.executable, "-c", wide_window, "--mode", "math", "--data", str(data),
           "--output-dir", str(tmp_path), "--run-id", "late", "--backend", "ray", "--ray-address", cl.address,
           "--num-rollouts", "1", "--agent", "command", "--agent-cmd", "sleep 600",
           "--task-timeout", "0.5", "--max-retries", "0", "--no-progress"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert "workers keep dying" not in proc.stderr, proc.stderr[-3000:]
    assert proc.returncode == 0, proc.stderr[-3000:]
    finals = assert_exactly_once(tmp_path / "late", {f"t{i}#0" for i in range(tasks)})
    assert {r["status"] for r in finals.values()} == {"task_timeout"}
    events = [json.loads(line) for line in (tmp_path / "late" / "events.jsonl").read_text().splitlines()]
    assert len([e for e in events if e["event"] == "worker_died"]) == tasks > 40


@pytest.mark.slow
def test_vms_sweep_backend_ray_cleans_every_node(cluster, tmp_path):
    """A driver SIGKILLed mid-run leaves sandboxes on every node; the sweep removes them all."""
    cl, _ = cluster
    data = tmp_path / "tasks.jsonl"
    data.write_text("".join(json.dumps({"id": f"s{i}", "mode": "shell", "instruction": "wait", "check": "true",
                                        "reference": ["sleep 30"]}) + "\n" for i in range(3)))
    cmd = _cli(tmp_path, cl.address, "killed")
    cmd[cmd.index("--data") + 1] = str(data)
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    events = tmp_path / "killed" / "events.jsonl"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and (not events.exists() or events.read_text().count('"to": "leased"') < 3):
        time.sleep(0.1)
    proc.kill()
    proc.wait()
    assert [d for d in leftover_sandboxes() if d.startswith("killed/")], "the killed run left nothing to sweep"
    sweep = subprocess.run([sys.executable, "-m", "parallel_rollout.cli", "vms", "sweep", "--backend", "ray",
                            "--ray-address", cl.address, "--run-id", "killed"],
                           capture_output=True, text=True, timeout=120)
    assert sweep.returncode == 0, sweep.stderr[-2000:]
    removed = sweep.stdout.split(":", 1)[1].split(", ") if ":" in sweep.stdout else []
    # what Ray did not stop itself when the driver died, the sweep did, on every node
    assert not leftover_sandboxes()
    assert removed and all(vm.strip().split("-vm-")[0] in ("n0", "n1", "n2") for vm in removed if vm.strip()), sweep.stdout


def _engine_tasks(tmp_path: Path) -> dict:
    from parallel_rollout.envs import task_validators
    from parallel_rollout.tasks import load_tasks

    specs = [shell_task("long", reference=["sleep 0.2"] * 100 + ["touch ~/long.done"]),
             shell_task("victim", reference=["sleep 0.2"] * 25 + ["touch ~/victim.done"])]
    specs += [shell_task(f"q{i}") for i in range(5)]
    path = write_tasks(tmp_path / "tasks.jsonl", specs)
    return {t.id: t for t in load_tasks(str(path), default_mode="shell", validators=task_validators())}


def _turns(run_dir: Path, task_id: str) -> int:
    path = run_dir / "trajectories" / task_id / "0" / "attempt-0.jsonl"
    return path.read_text().count("\n") if path.exists() else 0


def test_engine_submit_cancel_pause_and_a_killed_worker_actor(cluster, tmp_path):
    """The Engine API a front end (the RL scheduler) uses, on the ray backend: on_final once
    per sample, cancel of a queued and of a running attempt, pause/resume, wait_idle, close; a
    worker actor SIGKILLed mid-attempt has it recorded worker_died and run again exactly once
    (Ray restarts nothing behind the driver); --max-concurrent-rollouts holds over the nodes."""
    import queue

    from parallel_rollout.config import build_config
    from parallel_rollout.engine import Engine
    from parallel_rollout.messages import Assignment
    from parallel_rollout.results import ResultStore

    cl, _ = cluster
    by_id = _engine_tasks(tmp_path)
    run_dir = tmp_path / "out" / "eng"
    run_dir.mkdir(parents=True)
    config = build_config(dict(mode="shell", output_dir=str(tmp_path / "out"), run_id="eng", num_rollouts=1,
                               envs_per_worker=1, num_vms=1, use_vm_pool=True, progress=False, max_turns=200,
                               max_concurrent_rollouts=2, backend="ray", ray_address=cl.address))
    finals: queue.Queue = queue.Queue()
    engine = Engine(config, run_dir, record_sink=ResultStore(run_dir).append)
    with engine:
        engine.start()
        assert engine.concurrency == 2
        engine.submit(Assignment(by_id["long"], 0, 0), finals.put)
        engine.submit(Assignment(by_id["victim"], 0, 0), finals.put)
        engine.submit(Assignment(by_id["q0"], 0, 0), finals.put)
        deadline = time.monotonic() + 90
        while not (_turns(run_dir, "long") >= 2 and _turns(run_dir, "victim") >= 2):
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


@pytest.mark.slow
def test_ctrl_c_across_nodes_then_resume_under_one_limit(cluster, tmp_path):
    """SIGINT mid-run: exit 130 with nothing left running; --resume finishes every sample once;
    --max-concurrent-rollouts is one limit over the three nodes."""
    cl, _ = cluster
    keys = {f"{i}#{s}" for i in SHELL_IDS for s in range(2)}
    cmd = _cli(tmp_path, cl.address, "stopped", "--group-size", "2", "--max-concurrent-rollouts", "2")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    results = tmp_path / "stopped" / "results.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (results.exists() and len(results.read_text().splitlines()) >= 4):
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr[-2000:]
    first = read_results(tmp_path / "stopped")
    assert 0 < len([r for r in first if r["final"]]) < len(keys)
    resumed = subprocess.run(cmd + ["--resume"], capture_output=True, text=True, timeout=240)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert_exactly_once(tmp_path / "stopped", keys)
    records = read_results(tmp_path / "stopped")
    assert max_overlap(records) <= 2
    assert len({r["node"] for r in records if r.get("node")}) >= 2


@pytest.mark.slow
def test_without_address_the_run_starts_and_stops_its_own_ray(cluster, tmp_path):
    """No --ray-address: a Ray instance of the run's own (not the module's cluster, not the one
    /tmp/ray/ray_current_cluster names), stopped when the run ends."""
    ray_tmp = Path(tempfile.mkdtemp(prefix="pr-ray-", dir="/tmp"))  # short: Ray's socket paths

    def own_servers() -> list[psutil.Process]:
        found = []
        for proc in psutil.process_iter(["name"]):
            try:
                if proc.info["name"] in ("gcs_server", "raylet") and str(ray_tmp) in " ".join(proc.cmdline()):
                    found.append(proc)
            except psutil.Error:
                pass
        return found

    env = dict(os.environ, RAY_TMPDIR=str(ray_tmp))
    try:
        proc = subprocess.run([sys.executable, "-m", "parallel_rollout.cli", "--mode", "shell", "--data",
                               str(SHELL_TASKS), "--output-dir", str(tmp_path), "--run-id", "own", "--backend", "ray",
                               "--limit", "3", "--num-rollouts", "1", "--use-vm-pool", "--num-vms", "1",
                               "--no-progress"], capture_output=True, text=True, timeout=180, env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        finals = assert_exactly_once(tmp_path / "own", {f"{i}#0" for i in SHELL_IDS[:3]})
        # one node, and not one of the module cluster's
        assert len({r["node"] for r in finals.values()}) == 1
        assert not {r["node"] for r in finals.values()} & {n.node_id for n in [cluster[0].head_node, *cluster[0].worker_nodes]}
        deadline = time.monotonic() + 20
        while own_servers() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not own_servers(), "the run's own Ray instance is still up"
    finally:
        for leftover in own_servers():  # only what this test's run started
            leftover.kill()
        shutil.rmtree(ray_tmp, ignore_errors=True)


@pytest.mark.slow
def test_remote_vms_are_one_pool_leased_from_every_node(cluster, tmp_path):
    """--provider-name remote: its addresses are one pool (on the driver's node) that workers of
    every node lease from; an address is never leased twice at once."""
    from providers.test_remote import HOST_SHARED, Machines

    cl, _ = cluster
    machines = Machines(tmp_path / "machines", 2)
    try:
        tasks = [json.loads(line) for line in SHELL_TASKS.read_text().splitlines() if line.strip()]
        kept = [t for t in tasks if t["id"] not in HOST_SHARED][:8]
        data = write_tasks(tmp_path / "tasks.jsonl", kept)
        cmd = _cli(tmp_path, cl.address, "remote", "--provider-name", "remote", "--reset-command",
                   machines.reset_command, "--num-vms", "2",
                   *[arg for address in machines.addresses for arg in ("--vm-address", address)])
        cmd[cmd.index("--data") + 1] = str(data)
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
        assert proc.returncode == 0, proc.stderr[-3000:]
        finals = assert_exactly_once(tmp_path / "remote", {f"{t['id']}#0" for t in kept})
        assert {r["status"] for r in finals.values()} == {"success"}
        assert len({r["node"] for r in finals.values()}) >= 2, "every task ran on one node"
        summary = json.loads((tmp_path / "remote" / "summary.json").read_text())
        assert summary["vm"]["size"] == 2 and len(summary["vm"]["nodes"]) == 1  # one pool, not one a node
        assert "[Concurrency] Set max concurrent rollouts to 2" in proc.stderr
        # one pool's VMs (a replacement, if a reset failed, included), each leased only from
        # idle, never more than the two addresses at once: an address is never held twice
        events = [json.loads(line) for line in (tmp_path / "remote" / "events.jsonl").read_text().splitlines()]
        moves = [e for e in events if e.get("vm")]
        assert all(e["vm"].startswith("n0-vm-") for e in moves)
        assert all(e["from"] == "idle" for e in moves if e["to"] == "leased")
        held, peak = set(), 0
        for e in moves:
            if e["to"] in ("booting", "idle", "leased", "resetting"):
                held.add(e["vm"])
            else:
                held.discard(e["vm"])
            peak = max(peak, len(held))
        assert peak <= 2, "more VMs than addresses at once"
    finally:
        machines.power_off()


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
    pools = [p for p in live_descendants() if "ray::PoolActor" in " ".join(p.cmdline())]
    assert len(pools) == 3, [" ".join(p.cmdline()) for p in pools]
    for pool in pools:  # actors of this module's cluster
        pool.kill()
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 1, stderr[-2000:]
    assert "every node of the Ray cluster (or its VM pool) is lost" in stderr and "--resume" in stderr
    resumed = subprocess.run(cmd + ["--resume"], capture_output=True, text=True, timeout=240)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert_exactly_once(tmp_path / "aborted", keys)


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
    try:
        stdout, stderr = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        proc.kill()  # a run that hangs fails this test, not the next one's leak check
        proc.communicate()
        raise
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
    assert {"lost": True, "size": 1} in summary["vm"]["nodes"].values()
    assert any(e["event"] == "node_joined" for e in events), "the new node was not noticed"
    assert joined.node_id in summary["vm"]["nodes"] and len(summary["vm"]["nodes"]) == 4
    assert summary["vm"]["nodes"][joined.node_id]["leases"] >= 1, "the new node's pool served nothing"
    # the lost node's worker was not moved onto a survivor (whose one VM it would wait for)
    records = read_results(run_dir)
    lost_workers = {r["worker"] for r in records if r["status"] == "worker_died" or r.get("node") == victim.node_id}
    assert not [r for r in records if r.get("node") not in (None, victim.node_id) and r["worker"] in lost_workers]

