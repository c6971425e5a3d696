"""--backend ray from the CLI on a real multi-node Ray cluster on this machine
(tests/ray_cluster.py: one head and two worker nodes, each its own raylet on 127.0.0.1).

The CLI runs in a subprocess that joins the cluster with --ray-address; every node gets its
own process-sandbox pool and its own worker actors: the shell benchmark spread over the
nodes, HumanEval's judges graded on them, timeouts that are not crashes, a sweep of every
node, Ctrl-C then --resume under one limit, a run without an address that starts and stops
a Ray of its own, remote VMs leased from every node, no more VMs booted on a node than it
can use, what an agent starts dying with its worker actor (the run's end, os._exit, a
timeout kill), an agent the nodes cannot import. One cluster serves the whole module (Ray
start-up is the expensive part), with Ray's own process-group clean-up off. Nodes and pools
lost or stalled mid-run: tests/test_ray_lost_nodes.py; the Engine API and the RL scheduler
on a cluster: tests/test_ray_driver.py; without a cluster: tests/test_ray_config.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from conftest import (ROOT, SHELL_TASKS, assert_exactly_once, leftover_sandboxes, max_overlap, read_results,
                      shell_task, write_tasks)
from parallel_rollout.envs.py import load_humaneval
from process_tree import needs_worker_cgroup, sleeps_left, stop_guest_agents
from ray_cluster import SHELL_IDS, _cli, assert_ray_stopped, cluster, no_leaks, own_ray_tmp  # noqa: F401 - fixtures


@pytest.mark.slow
def test_shell_benchmark_spread_over_nodes(cluster, tmp_path):
    """The shell benchmark over three nodes, each with its own pool, plus one task that hangs:
    --task-timeout kills its worker actor on its node; the progress bar, and exit 3 under
    --fail-under, as with --backend local."""
    cl, _ = cluster
    data = tmp_path / "tasks.jsonl"
    data.write_text(SHELL_TASKS.read_text().rstrip("\n") + "\n" + json.dumps(
        {"id": "stuck", "mode": "shell", "instruction": "wait", "check": "true", "reference": ["true", "sleep 60"]}) + "\n")
    cmd = [arg if arg != "--no-progress" else "--progress"
           for arg in _cli(tmp_path, cl.address, "spread", "--task-timeout", "15", "--fail-under", "0.99")]
    cmd[cmd.index("--data") + 1] = str(data)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 3, proc.stderr[-3000:]
    total = len(SHELL_IDS) + 1
    assert f"{total}/{total}" in proc.stderr and "VMs busy" in proc.stderr, proc.stderr[-2000:]
    run_dir = tmp_path / "spread"
    finals = assert_exactly_once(run_dir, {f"{i}#0" for i in [*SHELL_IDS, "stuck"]})
    stuck = finals.pop("stuck#0")
    assert stuck["status"] == "task_timeout"
    # where it was, asked of its actor before the kill: in the agent's second turn, on a VM,
    # its first turn in the trajectory the actor's node sent with it
    assert stuck["failure"]["phase"] == "agent" and stuck["turns"] == 1 and stuck["vm"], stuck
    assert "the agent's turns" in stuck["failure"]["message"]
    turns = (run_dir / stuck["trajectory"]).read_text().splitlines()
    assert [json.loads(t)["action"] for t in turns] == [{"command": "true"}], turns
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
    import socket

    cl, _ = cluster
    data = tmp_path / "tasks.jsonl"
    tasks = 45
    data.write_text("".join(json.dumps({"id": f"t{i}", "mode": "math", "problem": "1+1", "answer": "2"}) + "\n"
                            for i in range(tasks)))
    wide_window = ("import parallel_rollout.backends.base as base; base.CRASH_WINDOW_S = 3600.0; "
                   "from parallel_rollout.cli import main; main()")
    # A model endpoint that takes each connection and never answers: the agent's request
    # hangs until the driver kills the worker. (A command agent that hangs no longer does:
    # its own wait ends first, recorded task_timeout with its stderr, its worker kept.)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(128)
        cmd = [sys.executable, "-c", wide_window, "--mode", "math", "--data", str(data),
               "--output-dir", str(tmp_path), "--run-id", "late", "--backend", "ray", "--ray-address", cl.address,
               "--num-rollouts", "1", "--agent", "openai", "--model", "silent",
               "--base-url", f"http://127.0.0.1:{silent.getsockname()[1]}/v1",
               "--task-timeout", "0.5", "--max-retries", "0", "--no-progress"]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert "workers keep dying" not in proc.stderr, proc.stderr[-3000:]
    assert proc.returncode == 0, proc.stderr[-3000:]
    finals = assert_exactly_once(tmp_path / "late", {f"t{i}#0" for i in range(tasks)})
    assert {r["status"] for r in finals.values()} == {"task_timeout"}
    events = [json.loads(line) for line in (tmp_path / "late" / "events.jsonl").read_text().splitlines()]
    assert len([e for e in events if e["event"] == "worker_died"]) == tasks > 40


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="the agent is another user as root only")
def test_a_guest_agent_stopped_from_outside_past_the_task_timeout_is_retried(cluster, tmp_path):
    """An action waits on a guest agent stopped from outside (SIGSTOP from the host, which
    the task's user cannot send) on a node, and --task-timeout runs out first: the driver
    asks that node's pool before it kills the actor, and the attempt is the VM's ``VMKilled``,
    retried and graded on another VM, not the task's ``task_timeout``. (A task that hangs on
    its own is still ``task_timeout``: the spread test's "stuck".)"""
    cl, _ = cluster
    data = write_tasks(tmp_path / "tasks.jsonl", [
        {"id": "action", "mode": "shell", "instruction": "make ~/ok", "check": "test -e ~/ok",
         "reference": ["sleep 1.52; touch ~/ok"], "timeout": 120}])
    cmd = _cli(tmp_path, cl.address, "stopped", "--task-timeout", "10", "--max-retries", "1")
    cmd[cmd.index("--data") + 1] = str(data)
    stopped, done = [], threading.Event()
    watcher = threading.Thread(target=stop_guest_agents, args=(["sleep 1.52"], stopped, done), daemon=True)
    watcher.start()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    finally:
        done.set()
        watcher.join(5)
    assert stopped == ["sleep 1.52"] and proc.returncode == 0, proc.stderr[-3000:]
    run_dir = tmp_path / "stopped"
    assert assert_exactly_once(run_dir, {"action#0"})["action#0"]["status"] == "success"
    first, again = read_results(run_dir)
    assert first["status"] == "vm_error" and first["infrastructure"] and not first["final"], first
    assert first["failure"]["type"] == "VMKilled" and first["failure"]["phase"] == "agent", first["failure"]
    assert "stopped from outside" in first["failure"]["message"], first["failure"]
    assert again["attempt"] == 1 and again["vm"] != first["vm"], again


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
    assert [d for d in leftover_sandboxes() if d.startswith("killed@")], "the killed run left nothing to sweep"
    sweep = subprocess.run([sys.executable, "-m", "parallel_rollout.cli", "vms", "sweep", "--backend", "ray",
                            "--ray-address", cl.address, "--run-id", "killed"],
                           capture_output=True, text=True, timeout=120)
    assert sweep.returncode == 0, sweep.stderr[-2000:]
    removed = sweep.stdout.split(":", 1)[1].split(", ") if ":" in sweep.stdout else []
    # what Ray did not stop itself when the driver died, the sweep did, on every node
    assert not leftover_sandboxes()
    assert removed and all(vm.strip().startswith(("killed/n0-", "killed/n1-", "killed/n2-"))
                           for vm in removed if vm.strip()), sweep.stdout


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
    with own_ray_tmp() as ray_tmp:
        env = dict(os.environ, RAY_TMPDIR=str(ray_tmp))
        proc = subprocess.run([sys.executable, "-m", "parallel_rollout.cli", "--mode", "shell", "--data",
                               str(SHELL_TASKS), "--output-dir", str(tmp_path), "--run-id", "own", "--backend", "ray",
                               "--limit", "3", "--num-rollouts", "1", "--use-vm-pool", "--num-vms", "1",
                               "--no-progress"], capture_output=True, text=True, timeout=180, env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        finals = assert_exactly_once(tmp_path / "own", {f"{i}#0" for i in SHELL_IDS[:3]})
        # one node, and not one of the module cluster's
        assert len({r["node"] for r in finals.values()}) == 1
        assert not {r["node"] for r in finals.values()} & {n.node_id for n in [cluster[0].head_node, *cluster[0].worker_nodes]}
        assert_ray_stopped(ray_tmp)


@pytest.mark.slow
def test_py_judges_graded_on_every_node(cluster, tmp_path):
    """The py mode (a VM leased around each judge's call) on the cluster: HumanEval's first
    problems, their canonical answers and a wrong one, graded on several nodes' pools."""
    cl, _ = cluster
    problems = load_humaneval()[:6]
    tasks = [{**p, "id": p["task_id"].replace("/", "_"), "mode": "py"} for p in problems]
    tasks.append({**tasks[0], "id": "wrong", "canonical_solution": "    return 'no'\n"})
    data = write_tasks(tmp_path / "py.jsonl", tasks)
    cmd = _cli(tmp_path, cl.address, "py", "--num-rollouts", "3", "--num-vms", "3")
    cmd[cmd.index("--mode") + 1], cmd[cmd.index("--data") + 1] = "py", str(data)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    finals = assert_exactly_once(tmp_path / "py", {f"{t['id']}#0" for t in tasks})
    wrong = finals.pop("wrong#0")
    assert wrong["status"] == "failure" and wrong["eval"]["kind"] == "assertion", wrong
    assert all(r["status"] == "success" and r["vm"] and r["lease_wait_s"] is not None
               for r in finals.values()), {k: r["status"] for k, r in finals.items()}
    assert len({r["node"] for r in finals.values()} | {wrong["node"]}) >= 2


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
        # the pool actor's own warning (no --vm-key-file), once, on the console and in run.log,
        # named by its node (it stayed in Ray's log files on that node)
        warned = [line for line in proc.stderr.splitlines() if "remote provider: no --vm-key-file" in line]
        assert len(warned) == 1 and warned[0].startswith("[VM pool on node "), proc.stderr[-3000:]
        logged = (tmp_path / "remote" / "run.log").read_text()
        assert logged.count("remote provider: no --vm-key-file") == 1 and " WARNING VM pool on node " in logged
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
@pytest.mark.parametrize("pool, flags, booted, said", [
    (True, ["--num-rollouts", "1", "--num-vms", "3"], 3,
     "--num-vms 3: at most 1 rollout runs at once on a node (2 samples, 1 env loop), so 1 VM is booted on each node"),
    (False, ["--num-rollouts", "4"], 6,
     "--num-rollouts 4 without --use-vm-pool boots a VM per worker: 2 samples need 2 workers, so 2 start on each node"),
])
def test_no_more_vms_are_booted_on_a_node_than_it_can_use(cluster, tmp_path, pool, flags, booted, said):
    """The local backend's cap (tests/test_run_lifecycle.py), per node: a node's pool serves its
    own workers, so each boots no more VMs than a node's env loops or the samples."""
    cl, _ = cluster
    cmd = _cli(tmp_path, cl.address, "cap", "--limit", "2", *flags)
    if not pool:  # each worker boots a VM of its own: no pool flag, no pool size
        cmd.remove("--use-vm-pool")
        del cmd[cmd.index("--num-vms"):cmd.index("--num-vms") + 2]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert said in proc.stderr, proc.stderr[-3000:]
    summary = json.loads((tmp_path / "cap" / "summary.json").read_text())
    assert summary["vm"]["size"] == booted and summary["vm"]["boots"] == booted  # over the three nodes
    assert len(summary["vm"]["nodes"]) == 3
    assert json.loads((tmp_path / "cap" / "config.json").read_text())["config"]["num_rollouts"] == int(flags[1])


@pytest.mark.slow
@pytest.mark.parametrize("agent, flags", [
    ("Detaches", []),                                # the run's end: the driver kills every actor
    ("ForkAndExit", []),                             # the actor ends itself (os._exit)
    ("DetachesAndHangs", ["--task-timeout", "10"]),  # a timeout: the driver kills the actor
    pytest.param("LeavesSession", [], marks=needs_worker_cgroup),  # out of the group (setsid): the actor's cgroup
    pytest.param("LeavesSessionAndExits", [], marks=needs_worker_cgroup),
])
def test_processes_an_agent_starts_die_with_its_worker_actor(cluster, tmp_path, agent, flags):
    """As with --backend local (tests/test_run_lifecycle.py): what a module:Class agent
    starts dies with its worker actor, whichever way the actor ends, even a process that is
    no longer its descendant (a shell's ``sleep &``)."""
    cl, _ = cluster
    marker = f"{800 + os.getpid() % 97}.{len(agent)}"
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task(k, instruction=marker) for k in "abc"])
    cmd = _cli(tmp_path, cl.address, "kids", "--agent", f"lifecycle_plugins:{agent}", "--max-retries", "0", *flags)
    cmd[cmd.index("--data") + 1] = str(data)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=ROOT / "tests")
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    assert_exactly_once(tmp_path / "kids", {f"{k}#0" for k in "abc"})
    left = sleeps_left(marker)
    assert not left, f"{len(left)} process(es) the agent started outlived its worker actor"


@pytest.mark.slow
def test_an_agent_the_nodes_cannot_import_stops_the_run_naming_the_error(cluster, tmp_path):
    """A module:Class agent found where the command runs (its PYTHONPATH) but not on the
    cluster's nodes: the run stops at once, exit 1, saying the import's error and that every
    node needs it, as --backend local stops at a worker that cannot import it. It said only
    "an error raised in its creation task", after 60 s of worker actors respawned and dying
    (with one worker a node, respawned without end). The RL scheduler's: tests/test_ray_driver.py."""
    cl, _ = cluster
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "driver_only_agent.py").write_text("from parallel_rollout.agents.oracle import OracleAgent as Agent\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(plugins), os.environ.get("PYTHONPATH")) if p))
    cmd = [sys.executable, "-m", "parallel_rollout.cli", "--mode", "gym", "--data", "frozenlake", "--agent",
           "driver_only_agent:Agent", "--output-dir", str(tmp_path), "--run-id", "noimport", "--backend", "ray",
           "--ray-address", cl.address, "--num-rollouts", "1", "--no-progress"]  # no VM: no pool to boot
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr[-3000:]
    said = " ".join(proc.stderr.split())
    assert "cannot load the run's mode or agent" in said and "No module named 'driver_only_agent'" in said, said[-3000:]
    assert "every node of the cluster needs them" in said and "resume with:" in said, said[-3000:]
    events = [json.loads(line) for line in (tmp_path / "noimport" / "events.jsonl").read_text().splitlines()]
    assert sum(e.get("event") == "worker_died" for e in events) <= 3, events  # none respawned



#: a command agent that answers one episode's first observation, then exits
_ONE_EPISODE_AGENT = "import json, sys\nsys.stdin.readline()\nprint(json.dumps('DONE'), flush=True)\n"


def test_what_a_nodes_worker_warns_is_on_the_drivers_console_and_in_run_log(cluster, tmp_path):
    """A command agent that exits after each episode: its worker actor, on its node, warns
    that it starts it again (agents/command.py) at each episode after its first. Each warning
    is on the driver's console and in run.log, once, named by its worker and node as a local
    worker's is by its process ([rollout-worker-3]); they went to Ray's log files on the node
    only (the driver connects with log_to_driver=False)."""
    cl, _ = cluster
    script = tmp_path / "one_episode.py"
    script.write_text(_ONE_EPISODE_AGENT)
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task(f"t{i}") for i in range(7)])
    cmd = _cli(tmp_path, cl.address, "warns", "--agent", "command", "--agent-cmd", f"{sys.executable} {script}",
               "--max-retries", "0")
    cmd[cmd.index("--data") + 1] = str(data)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    records = assert_exactly_once(tmp_path / "warns", {f"t{i}#0" for i in range(7)}).values()
    # the first episode of each worker starts its agent; each later one warns and starts it again
    workers = {(r["worker"], r["node"]) for r in records}
    restarts = len(records) - len(workers)
    assert restarts >= 4, workers
    said = [line for line in proc.stderr.splitlines() if "exited between episodes; starting it again" in line]
    assert len(said) == restarts, proc.stderr[-3000:]
    named = {f"[worker {worker} on node {node[:8]}] --agent-cmd " for worker, node in workers}
    assert all(line.split("'")[0] in named for line in said), (said, named)
    logged = [line for line in (tmp_path / "warns" / "run.log").read_text().splitlines()
              if "exited between episodes" in line]
    assert len(logged) == restarts, logged
    assert all(" WARNING worker w" in line and " parallel_rollout.agents.command: " in line for line in logged), logged


def test_a_python_runs_node_warnings_are_said_in_its_keywords(cluster, tmp_path):
    """The same warning of a node's worker, in the run.log of a Python run() (here a
    ``python -c``): said as the call spells the setting, agent_cmd='…', as a local worker's
    are (logs.reworded), not as the CLI's --agent-cmd."""
    cl, _ = cluster
    script = tmp_path / "one_episode.py"
    script.write_text(_ONE_EPISODE_AGENT)
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task(f"t{i}") for i in range(5)])
    call = dict(mode="shell", data=str(data), agent="command", agent_cmd=f"{sys.executable} {script}",
                backend="ray", ray_address=cl.address, num_rollouts=1, num_vms=1, use_vm_pool=True,
                max_retries=0, output_dir=str(tmp_path), run_id="said")
    code = f"from parallel_rollout.api import run\nrun(**{call!r})\n"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    logged = [line for line in (tmp_path / "said" / "run.log").read_text().splitlines()
              if "exited between episodes" in line]
    assert logged and all(" on node " in line and f"agent_cmd='{sys.executable} {script}'" in line
                          and "--agent-cmd" not in line for line in logged), logged


def test_the_last_words_of_a_worker_that_dies_on_its_own_are_in_run_log(cluster, tmp_path):
    """An agent that warns, then kills its own worker actor's process: the warning, logged
    since the actor's last answer, is on the driver's console and in run.log, once, named by
    its worker and node (the cause of the death is there); it stayed in Ray's log files on the
    node, the record of the attempt and the answer to the kill never coming."""
    cl, _ = cluster
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("dies")])
    cmd = _cli(tmp_path, cl.address, "dies", "--agent", "log_plugins:WarnsAndDies", "--max-retries", "0")
    cmd[cmd.index("--data") + 1] = str(data)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=ROOT / "tests")
    assert proc.returncode == 1, proc.stderr[-3000:]
    record = assert_exactly_once(tmp_path / "dies", {"dies#0"})["dies#0"]
    assert record["status"] == "worker_died", record
    said = [line for line in proc.stderr.splitlines() if "last words before dying on task dies" in line]
    assert len(said) == 1 and said[0].startswith(f"[worker {record['worker']} on node {record['node'][:8]}] "), \
        proc.stderr[-3000:]
    logged = [line for line in (tmp_path / "dies" / "run.log").read_text().splitlines() if "last words" in line]
    assert len(logged) == 1 and f" WARNING worker {record['worker']} on node {record['node'][:8]} " in logged[0], logged


def _stored_last_words(address: str) -> list[bytes]:
    """The keys of the cluster's store of workers' last words (read without joining as a job)."""
    from ray._raylet import GcsClient

    from parallel_rollout.backends.ray_logs import LAST_WORDS_NS

    return GcsClient(address=address).internal_kv_keys(b"", LAST_WORDS_NS.encode(), timeout=10)


def test_a_killed_drivers_last_words_are_not_left_in_the_cluster_store(cluster, tmp_path):
    """The CLI killed (SIGKILL) while its worker holds a warning no answer took: the next run
    on the cluster does not say it (another run's) and leaves the store empty, the killed
    run's lines with its own: the store does not grow run after run."""
    cl, _ = cluster
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("hangs")])
    cmd = _cli(tmp_path, cl.address, "killed", "--agent", "log_plugins:WarnsAndHangs")
    cmd[cmd.index("--data") + 1] = str(data)
    driver = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT / "tests")
    try:
        deadline = time.monotonic() + 180
        while not _stored_last_words(cl.address) and driver.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _stored_last_words(cl.address), "the hanging worker's warning never reached the store"
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait(timeout=30)
    try:
        proc = subprocess.run(_cli(tmp_path, cl.address, "next"), capture_output=True, text=True, timeout=240)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "unsaid words" not in proc.stderr + (tmp_path / "next" / "run.log").read_text()
        assert _stored_last_words(cl.address) == [], "the killed run's last words are left in the cluster's store"
    finally:  # the killed run's VMs, as the README says
        sweep = subprocess.run([sys.executable, "-m", "parallel_rollout.cli", "vms", "sweep", "--backend", "ray",
                                "--ray-address", cl.address, "--run-id", "killed"],
                               capture_output=True, text=True, timeout=120)
        assert sweep.returncode == 0, sweep.stderr[-2000:]


def test_the_last_words_of_a_pool_that_dies_on_its_own_are_in_run_log(cluster, tmp_path):
    """A provider that warns as it boots, then kills its own process, the second node's pool
    actor: the warning, logged since the pool's last report, is in run.log and on the console,
    once, named by the pool's node, before the line saying the pool died; the run goes on with
    the other nodes. It stayed in Ray's log files on the node, no report ever taking it."""
    cl, _ = cluster
    cmd = _cli(tmp_path, cl.address, "pooldies", "--provider-name", "log_plugins:WarnsAndKillsItsPool")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=ROOT / "tests")
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    assert_exactly_once(tmp_path / "pooldies", {f"{i}#0" for i in SHELL_IDS})
    said = [line for line in proc.stderr.splitlines() if "last words of the pool booting n1-vm-0" in line]
    assert len(said) == 1 and said[0].startswith("[VM pool on node "), proc.stderr[-3000:]
    node = said[0].split("[VM pool on node ", 1)[1][:8]
    logged = (tmp_path / "pooldies" / "run.log").read_text().splitlines()
    words = [i for i, line in enumerate(logged) if "last words of the pool booting" in line]
    died = [i for i, line in enumerate(logged) if f"the pool of node {node} died" in line]
    assert len(words) == 1 and f" WARNING VM pool on node {node} " in logged[words[0]], logged
    assert died and words[0] < died[0], logged
