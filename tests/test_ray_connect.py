"""The driver of a --backend ray run and Ray itself, on real Ray (tests/ray_cluster.py): its
stop signals stay the run's after ray.init (which sets SIGTERM's handler: on a cluster the
core worker's, which aborted the driver, exit 134 without a summary; on an instance of the
run's own a sys.exit, exit 15 with "interrupted": false), so SIGTERM stops it as Ctrl-C does
and as on --backend local: exit 130, the summary, the resume line; the run stopped on a
cluster then resumes on --backend local. A cluster that refuses the driver's token is an
error of the run (exit 2, its summary says why), not ray.init's traceback. A cluster nobody
answers at: tests/test_ray_config.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

import ray_cluster
from conftest import assert_exactly_once, read_results, shell_task, write_tasks
from ray_cluster import _NODE, TOKEN_HEAD, _cli, assert_ray_stopped, communicate, own_ray_tmp

# the module's fixtures: a cluster (made when a test first asks for it) and the leak check
cluster, no_leaks = ray_cluster.cluster, ray_cluster.no_leaks

#: samples a SIGTERM stops mid-run: each longer than the shutdown grace (3 s)
_SLOW = [shell_task(f"s{i}", reference=["sleep 4", f"touch ~/s{i}.done"]) for i in range(6)]
_KEYS = {f"s{i}#0" for i in range(len(_SLOW))}


def _sigterm_mid_run(cmd: list[str], run_dir: Path, env: dict[str, str] | None = None) -> tuple[int, str]:
    """Start the run, SIGTERM it once a VM is leased; its exit status and stderr."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    events = run_dir / "events.jsonl"
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:
        if events.exists() and '"to": "leased"' in events.read_text():
            break
        time.sleep(0.1)
    assert proc.poll() is None, "the run ended before it could be stopped"
    proc.send_signal(signal.SIGTERM)
    stderr = communicate(proc, 120)[1]
    return proc.returncode, stderr


def _assert_stopped_as_on_local(code: int, stderr: str, run_dir: Path) -> None:
    assert code == 130, stderr[-3000:]
    assert "SIGTERM received" not in stderr, stderr[-3000:]
    assert "interrupted by signal 15; resume with:" in stderr and "--resume" in stderr, stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["interrupted"] is True and summary["finished"] < len(_KEYS), summary


@pytest.mark.slow
def test_sigterm_stops_a_run_on_a_cluster_and_it_resumes_on_local(cluster, tmp_path):
    """SIGTERM to a run on the module's cluster: exit 130, summary and resume line, as on
    --backend local; then ``--resume --backend local`` (and again with ``--ray-address ""``)
    finishes every sample once: the backend changes no result."""
    cl, _ = cluster
    cmd = _cli(tmp_path, cl.address, "term")
    cmd[cmd.index("--data") + 1] = str(write_tasks(tmp_path / "tasks.jsonl", _SLOW))
    _assert_stopped_as_on_local(*_sigterm_mid_run(cmd, tmp_path / "term"), tmp_path / "term")
    for flags in (["--backend", "local"], ["--backend", "local", "--ray-address", ""]):
        resumed = subprocess.run([sys.executable, "-m", "parallel_rollout.cli", "--output-dir", str(tmp_path),
                                  "--run-id", "term", "--resume", "--num-rollouts", "3", *flags, "--no-progress"],
                                 capture_output=True, text=True, timeout=180)
        assert resumed.returncode == 0, (flags, resumed.stderr[-3000:])
    finals = assert_exactly_once(tmp_path / "term", _KEYS)
    assert {r["status"] for r in finals.values()} == {"success"}
    assert any(not r.get("node") for r in finals.values()), "no sample was left to the local resume"


@pytest.mark.slow
def test_sigterm_stops_a_run_on_a_ray_instance_of_its_own(tmp_path):
    """No --ray-address: SIGTERM stops the run as on --backend local, and its own Ray
    instance is stopped with it."""
    cmd = _cli(tmp_path, "", "own")
    del cmd[cmd.index("--ray-address"):cmd.index("--ray-address") + 2]
    cmd[cmd.index("--data") + 1] = str(write_tasks(tmp_path / "tasks.jsonl", _SLOW))
    with own_ray_tmp() as ray_tmp:
        code, stderr = _sigterm_mid_run(cmd, tmp_path / "own", dict(os.environ, RAY_TMPDIR=str(ray_tmp)))
        _assert_stopped_as_on_local(code, stderr, tmp_path / "own")
        assert_ray_stopped(ray_tmp)


@pytest.mark.slow
def test_a_cluster_that_refuses_the_driver_s_token_is_the_run_s_error(tmp_path):
    """A head node that takes connections but refuses this driver's token: after Ray's own
    retries (~20 s), exit 2 naming the cluster and Ray's reason, no traceback; the run folder
    it opened holds no result, and its summary says why it stopped."""
    with own_ray_tmp("pr-tok-") as ray_tmp:
        env = dict(os.environ, RAY_TMPDIR=str(ray_tmp), RAY_AUTH_MODE="token", RAY_AUTH_TOKEN="a" * 32)
        head = subprocess.Popen([sys.executable, "-c", TOKEN_HEAD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True, env=env)
        try:
            address = head.stdout.readline().strip()
            assert address, "the token cluster did not start"
            proc = subprocess.run(_cli(tmp_path, address, "refused"), capture_output=True, text=True, timeout=150,
                                  env=dict(env, RAY_AUTH_TOKEN="b" * 32))
        finally:
            head.stdin.close()
            head.wait(60)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert f"cannot connect to the Ray cluster at {address}" in proc.stderr, proc.stderr[-3000:]
    assert "InvalidAuthToken" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    run_dir = tmp_path / "refused"
    assert not (run_dir / "results.jsonl").exists() or not read_results(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["finished"] == 0 and summary["interrupted"] is False
    assert summary["stopped"]["reason"].startswith(f"cannot connect to the Ray cluster at {address}"), summary


#: a cluster of its own (a head and one other node), up until it is killed; it says its
#: address and the pids of its head node's processes (argv: the head's system config, JSON)
_HEAD_AND_NODE = f"""
import json, sys
from ray.cluster_utils import Cluster
cl = Cluster(initialize_head=True, connect=False, head_node_args=dict({_NODE!r}, include_dashboard=False,
                                                                      _system_config=json.loads(sys.argv[1])))
cl.add_node(**{_NODE!r})
cl.wait_for_nodes()
head = {{name: [info.process.pid for info in infos] for name, infos in cl.head_node.all_processes.items()}}
print(json.dumps({{"address": cl.address, "head": head}}), flush=True)
sys.stdin.read()
"""


@contextlib.contextmanager
def head_and_node(prefix: str, system_config: dict | None = None) -> Iterator[tuple[dict, dict[str, str]]]:
    """A cluster of its own (``_HEAD_AND_NODE``, its head started with ``system_config``) in a
    RAY_TMPDIR of its own: what it said (its address, its head node's pids) and the
    environment that reaches it; killed after."""
    with own_ray_tmp(prefix) as ray_tmp:
        env = dict(os.environ, RAY_TMPDIR=str(ray_tmp))
        cluster_proc = subprocess.Popen([sys.executable, "-c", _HEAD_AND_NODE, json.dumps(system_config or {})],
                                        stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True, env=env)
        try:
            said = json.loads(cluster_proc.stdout.readline() or "{}")
            assert said, "the cluster did not start"
            yield said, env
        finally:
            cluster_proc.kill()  # its shutdown waits on the lost head; the rest: own_ray_tmp's
            cluster_proc.wait()


@pytest.mark.slow
@pytest.mark.parametrize("how", ["killed", "stopped"])
def test_a_lost_head_node_ends_the_run_with_its_summary_and_it_resumes(tmp_path, how):
    """The head node lost mid-run, ``killed`` (its GCS, raylet, everything) or its GCS
    ``stopped`` (SIGSTOP: it takes connections and answers nothing, as one cut off without a
    reset): the driver stops the run itself, with its summary, a message naming the lost
    head and the resume line, and the attempts under way recorded worker_died
    (infrastructure, not final). Killed, it went on until Ray's own end of a driver without
    its GCS (60 s): 'Failed to connect to GCS', exit 1, no summary, no resume line; stopped,
    it hung for ever. Then --resume on one host finishes every sample once, its summary keeping
    the nodes the first session lost (``ray_earlier``)."""
    tasks = [shell_task(f"h{i}", reference=["sleep 3", f"touch ~/h{i}.done"]) for i in range(20)]
    keys = {f"h{i}#0" for i in range(len(tasks))}
    with head_and_node("pr-head-") as (said, env):
        cmd = _cli(tmp_path, said["address"], "headless")
        cmd[cmd.index("--data") + 1] = str(write_tasks(tmp_path / "tasks.jsonl", tasks))
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        results = tmp_path / "headless" / "results.jsonl"
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline and not (
                results.exists() and results.stat().st_size):
            time.sleep(0.1)
        assert proc.poll() is None, "the run ended before its head node could be killed"
        head = said["head"]
        for pid in [p for pids in head.values() for p in pids] if how == "killed" else head["gcs_server"]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL if how == "killed" else signal.SIGSTOP)
        stderr = communicate(proc, 150)[1]
    run_dir = tmp_path / "headless"
    assert proc.returncode == 1, stderr[-3000:]
    assert "Failed to connect to GCS" not in stderr, stderr[-3000:]
    assert "the Ray cluster's head node" in stderr and "resume with:" in stderr, stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert "the Ray cluster's head node" in summary["stopped"]["reason"], summary["stopped"]
    assert summary["finished"] < len(keys), summary
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    assert any(e["event"] == "head_lost" for e in events), events
    died = [r for r in read_results(run_dir) if r["status"] == "worker_died"]
    assert died and all(r["infrastructure"] and not r["final"] for r in died), died
    resumed = subprocess.run([sys.executable, "-m", "parallel_rollout.cli", "--output-dir", str(tmp_path),
                              "--run-id", "headless", "--resume", "--backend", "local", "--num-rollouts", "6",
                              "--num-vms", "6", "--no-progress"], capture_output=True, text=True, timeout=180)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    finals = assert_exactly_once(run_dir, keys)
    assert {r["status"] for r in finals.values()} == {"success"}
    # the resume's own session ran on no cluster; the nodes the first one lost stay on record
    # (summary.json is rewritten: its "ray": null lost them), and its lines say them
    again = json.loads((run_dir / "summary.json").read_text())
    assert again["ray"] is None and again["ray_earlier"] == [summary["ray"]], again["ray_earlier"]
    lost = [node for node, said in summary["ray"]["nodes"].items() if said["lost"]]
    assert lost and all("the Ray cluster's head node" in summary["ray"]["nodes"][n]["reason"] for n in lost)
    assert all(f"Ray node {n[:8]} lost: the Ray cluster's head node" in resumed.stdout for n in lost), resumed.stdout
    assert "(an earlier session)" in resumed.stdout, resumed.stdout


@pytest.mark.slow
@pytest.mark.parametrize("set_in", ["environment", "cluster"])
def test_a_driver_given_a_shorter_ray_gcs_timeout_stops_its_run_before_ray_ends_it(tmp_path, set_in):
    """The head node killed under a driver whose Ray ends it without its GCS sooner than the
    run's 15 s (gcs_rpc_server_reconnect_timeout_s = 12), set in the driver's ``environment``
    (RAY_gcs_rpc_server_reconnect_timeout_s) or in the ``cluster``'s system config (its head
    started with it; Ray puts it before the environment, which says 600 here): the run counts
    the head lost within a quarter of it, and stops with its summary, the head named and the
    resume line. It waited its 15 s, and Ray ended it first: 'Failed to connect to GCS within
    12 seconds', no summary, no resume line (the cluster's setting: before the run read it)."""
    tasks = [shell_task(f"g{i}", reference=["sleep 3", f"touch ~/g{i}.done"]) for i in range(20)]
    in_cluster = {"gcs_rpc_server_reconnect_timeout_s": 12} if set_in == "cluster" else {}
    with head_and_node("pr-gto-", in_cluster) as (said, env):
        cmd = _cli(tmp_path, said["address"], "short")
        cmd[cmd.index("--data") + 1] = str(write_tasks(tmp_path / "tasks.jsonl", tasks))
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=dict(env, RAY_gcs_rpc_server_reconnect_timeout_s="600" if in_cluster else "12"))
        results = tmp_path / "short" / "results.jsonl"
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline and not (results.exists() and results.stat().st_size):
            time.sleep(0.1)
        assert proc.poll() is None, "the run ended before its head node could be killed"
        for pid in [p for pids in said["head"].values() for p in pids]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        stderr = communicate(proc, 90)[1]
    # the VMs of the nodes that did not answer, as the message says (--resume sweeps them too)
    swept = subprocess.run([sys.executable, "-m", "parallel_rollout.cli", "vms", "sweep", "--run-id", "short"],
                           capture_output=True, text=True, timeout=60)
    assert swept.returncode == 0, swept.stderr[-3000:]
    assert "Failed to connect to GCS" not in stderr, stderr[-3000:]
    assert proc.returncode == 1, stderr[-3000:]
    assert f"the Ray cluster's head node ({said['address']}) has not answered" in stderr, stderr[-3000:]
    assert "resume with:" in stderr, stderr[-3000:]
    summary = json.loads((tmp_path / "short" / "summary.json").read_text())
    assert said["address"] in summary["stopped"]["reason"] and summary["finished"] >= 1, summary


#: the CLI run (argv: a function of ray_backend, the head's GCS pids, the run's flags), its
#: head node's GCS stopped (SIGSTOP: it takes connections and answers nothing) the moment
#: after that function returned
_STOPPED_AFTER = """
import os, runpy, signal, sys
from parallel_rollout.backends import ray_backend
name, gcs = sys.argv[1], [int(pid) for pid in sys.argv[2].split(",")]
real = getattr(ray_backend, name)
def then_stop(*args):
    said = real(*args)
    for pid in gcs:
        os.kill(pid, signal.SIGSTOP)
    return said
setattr(ray_backend, name, then_stop)
sys.argv = ["parallel-rollout", *sys.argv[3:]]
runpy.run_module("parallel_rollout.cli", run_name="__main__")
"""


@pytest.mark.slow
@pytest.mark.parametrize("after", ["connect", "mark_folder"])
def test_a_head_that_stops_answering_as_the_run_starts_ends_it_naming_the_head(tmp_path, after):
    """The head's GCS stopped right after the driver connected (``connect``), as the
    backend's start asks it for the head node and the alive nodes, or once the nodes' first
    sweeps ended and the head answered (``mark_folder``), as the start makes the pools and
    workers (their classes sent to the GCS): the run stops within the lost-head limit with
    its summary, the message naming the head's address and the resume line (the start asked
    with no time limit: the command hung for ever, saying nothing)."""
    with head_and_node("pr-hst-") as (said, env):
        gcs = ",".join(str(pid) for pid in said["head"]["gcs_server"])
        cli = _cli(tmp_path, said["address"], "stalled")
        proc = subprocess.Popen([sys.executable, "-c", _STOPPED_AFTER, after, gcs, *cli[3:]],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        stderr = communicate(proc, 75)[1]
    assert_ended_naming_the_head(proc, stderr, said["address"], tmp_path / "stalled")


def assert_ended_naming_the_head(proc, stderr: str, address: str, run_dir: Path) -> None:
    """The run stopped on its lost head: exit 1, the head named, the resume line, and its
    summary's stopped reason naming the head, no sample finished."""
    assert proc.returncode == 1, stderr[-3000:]
    assert f"the Ray cluster's head node ({address}) has not answered" in stderr, stderr[-3000:]
    assert "resume with:" in stderr, stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert address in summary["stopped"]["reason"] and summary["finished"] == 0, summary


#: a trainer whose scheduler runs on the cluster (argv: its address, its head node's pids, a
#: folder): a batch, then the head killed while the model holds the next batch's turns; it
#: says get_batch's error and ends with its own status, 3
_TRAINER = """
import json, os, signal, sys, threading, time
sys.path[:0] = {paths!r}
from pathlib import Path
from llm_server import LLMServer
from rl_support import TINY, lake_set, random_moves, rl_config
from parallel_rollout.errors import RolloutError
from parallel_rollout.rl import EnvManagerConfig, RolloutScheduler

def main():
    address, head, tmp = sys.argv[1], [int(pid) for pid in sys.argv[2].split(",")], Path(sys.argv[3])
    moves, held = random_moves(), threading.Event()

    def policy(body):
        held.wait(90)  # cleared: the turns wait
        return moves(body)

    server = LLMServer(policy=policy).start()
    held.set()
    train = RolloutScheduler(rl_config(tmp, server, backend="ray", ray_address=address, num_rollouts=1),
                             EnvManagerConfig(num_env_groups=1, group_size=2, tags=["tiny"],
                                              task_sets=lake_set(tmp, name="tiny", desc=TINY, max_steps=2)))
    first = train.get_batch(batch_size=2, step=0)
    print("first batch:", json.dumps(sorted(t.record["key"] for t in first)), flush=True)
    held.clear()
    lost = time.monotonic()
    for pid in head:
        os.kill(pid, signal.SIGKILL)
    try:
        train.get_batch(batch_size=2, step=1, timeout=120)
    except RolloutError as exc:
        print("get_batch:", exc, flush=True)
        print("its class:", type(exc).__name__, flush=True)
        print("raised %.1fs after the head was killed" % (time.monotonic() - lost), flush=True)
    print("run folder:", train.run_dir, flush=True)
    train.close()
    held.set()
    server.stop()
    sys.exit(3)

if __name__ == "__main__":
    main()
"""


@pytest.mark.slow
def test_a_trainer_whose_head_node_is_lost_gets_the_error_and_exits_with_its_own_status(tmp_path):
    """An RL trainer's get_batch under way as the head node is killed: it raises naming the
    head, and the trainer's process ends promptly with the status it chose (3). Ray's core
    worker, torn down at the interpreter's exit without its head, killed it with SIGSEGV. The
    error is a ClusterLost that says what to do before Ray ends the process (save state_dict(),
    resume=True and load_state_dict on a cluster again): a RolloutError said only that the
    engine stopped, like any other stop."""
    from pathlib import Path

    tests = Path(__file__).parent
    script = tmp_path / "trainer.py"
    script.write_text(_TRAINER.format(paths=[str(tests), str(tests / "rl")]))
    with head_and_node("pr-trn-") as (said, env):
        head = ",".join(str(pid) for pids in said["head"].values() for pid in pids)
        proc = subprocess.Popen([sys.executable, str(script), said["address"], head, str(tmp_path)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        stdout, stderr = communicate(proc, 120)
    assert f"get_batch: the rollout engine stopped: the Ray cluster's head node ({said['address']}) has not " \
           "answered" in stdout, (stdout, stderr[-3000:])
    # an error of its own, saying what to do in the time Ray leaves the process
    assert "its class: ClusterLost" in stdout, stdout
    said = stdout.split("get_batch: ", 1)[1].splitlines()[0]
    assert "state_dict()" in said and "resume=True" in said and "load_state_dict" in said, said
    assert proc.returncode == 3, (proc.returncode, stderr[-3000:])
    print(next(line for line in stdout.splitlines() if line.startswith("raised ")))  # the measure (-s)
    # what it had is on disk: the first batch's samples final in the run folder's results.jsonl
    first = set(json.loads(stdout.split("first batch: ", 1)[1].splitlines()[0]))
    run_dir = Path(stdout.split("run folder: ", 1)[1].splitlines()[0])
    finals = {r["key"] for r in read_results(run_dir) if r["final"]}
    assert len(first) == 2 and first <= finals, (first, finals)
