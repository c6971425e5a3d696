"""A Ray cluster on this machine for the --backend ray tests (ray.cluster_utils.Cluster: one
head and two worker nodes, each its own raylet on 127.0.0.1), one for each test module that
imports the ``cluster`` fixture, and what those modules share: the leak check that lets the
cluster's own processes stay up, the command line of a CLI run on the cluster, an Engine of
the shell mode on it (``shell_engine``), the shell benchmark's task ids, a Ray instance of a
test's own (``own_ray_tmp``), a node started as an operator starts one (``ray_start_node``). Used by tests/test_ray_backend.py, tests/test_ray_lost_nodes.py,
tests/test_ray_connect.py, tests/test_ray_driver.py and tests/test_ray_stalls.py.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Sequence

import psutil
import pytest

from conftest import SHELL_TASKS, check_no_leaks, live_descendants, shell_task, write_tasks

# Every Ray process of this module on 127.0.0.1 (else Ray takes the address of the route out)
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
# Without Ray's own killpg of a worker's group as the worker exits (on by default in recent
# Ray, off in older ones and wherever a cluster's operator turns it off): what a worker's
# agent started must die with it through the project's own means (process_group.py)
os.environ.setdefault("RAY_process_group_cleanup_enabled", "0")
ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

SHELL_IDS = [json.loads(line)["id"] for line in SHELL_TASKS.read_text().splitlines() if line.strip()]
#: Ray's own processes, which outlive a run by design (the cluster is the module's)
_RAY_SYSTEM = ("raylet", "gcs_server", "ray::IDLE", "ray::DashboardAgent", "ray::RuntimeEnvAgent",
               "ray/_private", "ray/dashboard", "ray/autoscaler", "runtime_env", "log_monitor", "monitor.py",
               "plasma")
_NODE = dict(num_cpus=1, object_store_memory=80 * 1024 * 1024)

#: a head node of its own (run with ``python -c``), token authentication as the environment's
#: RAY_AUTH_MODE and RAY_AUTH_TOKEN say (Ray reads them as it is imported: a process of its
#: own), up until its stdin closes; it prints its address
TOKEN_HEAD = f"""
import sys
from ray.cluster_utils import Cluster
head = Cluster(initialize_head=True, connect=False, head_node_args=dict({_NODE!r}, include_dashboard=False))
print(head.address, flush=True)
sys.stdin.read()
head.shutdown()
"""


def command_of(proc: psutil.Process) -> str:
    """A process's command line, "" once it ended or is a zombie: a process listed a moment
    ago (an agent's command, a sandbox's) may be either by now (psutil.ZombieProcess)."""
    try:
        return " ".join(proc.cmdline())
    except psutil.Error:
        return ""


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


def ray_servers_in(ray_tmp: Path) -> list[psutil.Process]:
    """The GCS servers and raylets of the Ray instance whose temp folder is ``ray_tmp`` (one a
    test started with RAY_TMPDIR, not the module's cluster)."""
    found = []
    for proc in psutil.process_iter(["name"]):
        try:
            if proc.info["name"] in ("gcs_server", "raylet") and str(ray_tmp) in " ".join(proc.cmdline()):
                found.append(proc)
        except psutil.Error:
            pass
    return found


@contextmanager
def own_ray_tmp(prefix: str = "pr-ray-") -> Iterator[Path]:
    """A RAY_TMPDIR for a Ray instance a test (or its run) starts apart from the module's
    cluster, short as Ray's socket paths need; whatever of that instance is left is killed
    after."""
    ray_tmp = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    try:
        yield ray_tmp
    finally:
        for leftover in ray_servers_in(ray_tmp) + _holding_files_in(ray_tmp):  # only what this test started
            leftover.kill()
        shutil.rmtree(ray_tmp, ignore_errors=True)


def _holding_files_in(ray_tmp: Path) -> list[psutil.Process]:
    """The processes with a file open under ``ray_tmp``: what is left of an instance whose
    raylets were killed (their dashboard and runtime-env agents, logging there, outlive them)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if any(f.path.startswith(f"{ray_tmp}/") for f in proc.open_files()):
                found.append(proc)
        except psutil.Error:
            pass
    return found


def assert_ray_stopped(ray_tmp: Path) -> None:
    """The Ray instance a run started in ``ray_tmp`` is stopped (within 20 s)."""
    deadline = time.monotonic() + 20
    while ray_servers_in(ray_tmp) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not ray_servers_in(ray_tmp), "the run's own Ray instance is still up"


def communicate(proc: subprocess.Popen, timeout: float) -> tuple[str, str]:
    """A CLI run's stdout and stderr once it ends; a run that hangs is killed, so that it
    fails its test and not the next one's leak check."""
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise


def _cli(out: Path, address: str, run_id: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "parallel_rollout.cli", "--mode", "shell", "--data", str(SHELL_TASKS),
            "--output-dir", str(out), "--run-id", run_id, "--backend", "ray", "--ray-address", address,
            "--num-rollouts", "1", "--num-vms", "1", "--use-vm-pool", "--no-progress", *extra]


def _engine_tasks(tmp_path: Path) -> dict:
    """Shell tasks by id: long (20 s), victim (5 s), q0..q4 (one command)."""
    from parallel_rollout.envs import task_validators
    from parallel_rollout.tasks import load_tasks

    specs = [shell_task("long", reference=["sleep 0.2"] * 100 + ["touch ~/long.done"]),
             shell_task("victim", reference=["sleep 0.2"] * 25 + ["touch ~/victim.done"])]
    specs += [shell_task(f"q{i}") for i in range(5)]
    path = write_tasks(tmp_path / "tasks.jsonl", specs)
    return {t.id: t for t in load_tasks(str(path), default_mode="shell", validators=task_validators())}


def shell_engine(address: str, tmp_path: Path, run_id: str, **settings):
    """An Engine of the shell mode on the cluster at ``address`` (one worker and one VM a
    node, unless ``settings`` say otherwise), its results in tmp_path/out/``run_id``; that folder; ``_engine_tasks`` by id."""
    from parallel_rollout.config import build_config
    from parallel_rollout.engine import Engine
    from parallel_rollout.results import ResultStore

    run_dir = tmp_path / "out" / run_id
    run_dir.mkdir(parents=True)
    config = build_config({**dict(mode="shell", output_dir=str(tmp_path / "out"), run_id=run_id, num_rollouts=1,
                                  envs_per_worker=1, num_vms=1, use_vm_pool=True, progress=False, max_turns=200,
                                  backend="ray", ray_address=address), **settings})
    return Engine(config, run_dir, record_sink=ResultStore(run_dir).append), run_dir, _engine_tasks(tmp_path)


def turns(run_dir: Path, task_id: str) -> int:
    """The turns written so far of attempt 0 of sample 0 of ``task_id``."""
    path = run_dir / "trajectories" / task_id / "0" / "attempt-0.jsonl"
    return path.read_text().count("\n") if path.exists() else 0


#: ``ray start`` (argv: its own) of a node on loopback as the module's cluster is: Ray's
#: RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 (tests/ray_cluster.py), which keeps every address on
#: 127.0.0.1, also refuses a node that is not a head; set to 1, ``ray start`` takes the
#: address of the route out and cannot reach the head on loopback
_RAY_START = """
import sys
from ray._private import ray_constants, services
ray_constants.ENABLE_RAY_CLUSTER = True
services.node_ip_address_from_perspective = lambda address=None: "127.0.0.1"
from ray.scripts.scripts import main
sys.argv[0] = "ray"
main()
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def ray_start_node(address: str, log: Path, wrap: Sequence[str] = ()) -> Iterator[subprocess.Popen]:
    """A node started with ``ray start --address`` (``--block``: the process stays, its raylet
    and agents its children), stopped after by pid with whatever it left; ``wrap``: the argv
    it runs under (``unshare …``, which must exec it)."""
    ports = {flag: str(_free_port()) for flag in ("--dashboard-agent-listen-port", "--dashboard-agent-grpc-port",
                                                   "--runtime-env-agent-port", "--metrics-export-port")}
    node = subprocess.Popen([*wrap, sys.executable, "-c", _RAY_START, "start", "--address", address,
                             "--node-ip-address", "127.0.0.1", "--num-cpus", "1",
                             "--object-store-memory", str(80 * 1024 * 1024), "--block",
                             *[part for flag, port in ports.items() for part in (flag, port)]],
                            stdout=log.open("w"), stderr=subprocess.STDOUT)
    try:
        yield node
    finally:
        left = [node] + descendants(node)
        for proc in left:
            if proc.poll() is None if isinstance(proc, subprocess.Popen) else proc.is_running():
                proc.kill()
        node.wait(30)


def descendants(node: subprocess.Popen) -> list[psutil.Process]:
    try:
        return psutil.Process(node.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
