"""The sweep of a run's leftovers each node runs before it gets a pool and workers, on real
Ray (tests/ray_cluster.py), made to hang for real: the node's process provider folder holds
a pool folder of the run whose VM's meta.json is a FIFO, which the sweep's read waits on (as
on a hung mount) for as long as the test keeps a writer open and writes nothing. A node that
joins mid-run and hangs there, or dies there, is left out and the run goes on at the others
(the driver waited on the sweep for ever; a node that died there stopped the run, "the engine
thread failed"); the head node lost while the run's first sweep hangs stops the run as a lost
head does mid-run (Ray ended the driver 60 s later, without the run's summary); its GCS stopped
while the sweep is under way (`vms sweep`) or as it ends (a run's start) ends either naming the
head (they waited on it for ever), and while the end of a run stopped by SIGTERM sweeps, lets it
end as interrupted (Ray's disconnect waited on the head for ever).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import ray_cluster
from conftest import assert_exactly_once, read_results, shell_task, write_tasks
from ray_cluster import _NODE, _cli, communicate, own_ray_tmp
from test_ray_connect import _HEAD_AND_NODE, _SLOW, assert_ended_naming_the_head

# the module's fixtures: a cluster (made when a test first asks for it) and the leak check
cluster, no_leaks = ray_cluster.cluster, ray_cluster.no_leaks

_ENV = "PARALLEL_ROLLOUT_PROCESS_DIR"


def _stuck_sweep(base: Path, run_id: str) -> Path:
    """A process provider folder where a sweep of ``run_id`` reads a FIFO (the one returned)."""
    vm_dir = base / run_id / "vm0"
    vm_dir.mkdir(parents=True)
    os.mkfifo(vm_dir / "meta.json")
    return vm_dir / "meta.json"


def _hold_sweep(fifo: Path, timeout: float = 60) -> int:
    """Once a sweep opens ``fifo`` to read it: a writer's descriptor that keeps it reading (no
    data, no end) until it is closed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)  # ENXIO while no one reads it
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"no sweep read {fifo} within {timeout}s")


def _wait_for_a_result(proc: subprocess.Popen, results: Path) -> None:
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline and not (results.exists() and results.stat().st_size):
        time.sleep(0.1)


@pytest.mark.slow
def test_a_node_that_joins_and_hangs_or_dies_in_its_sweep_is_left_out(cluster, tmp_path, monkeypatch):
    """Two nodes join mid-run; the sweep of one hangs, the other dies in its sweep: the run
    finishes at the first nodes (exit 0, every sample once), the dead one said left out."""
    cl, _ = cluster
    tasks = [shell_task(f"j{i}", reference=["sleep 2", f"touch ~/j{i}.done"]) for i in range(30)]
    cmd = _cli(tmp_path, cl.address, "joins")
    cmd[cmd.index("--data") + 1] = str(write_tasks(tmp_path / "tasks.jsonl", tasks))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    run_dir = tmp_path / "joins"
    added, writers = [], []
    try:
        _wait_for_a_result(proc, run_dir / "results.jsonl")
        for name in ("hung", "dead"):
            fifo = _stuck_sweep(tmp_path / name, "joins")
            monkeypatch.setenv(_ENV, str(tmp_path / name))  # the node's raylet's, and its workers'
            added.append(cl.add_node(**_NODE))
            monkeypatch.delenv(_ENV)
            writers.append(_hold_sweep(fifo))
        assert proc.poll() is None, "the run ended before a joining node could die"
        dead, hung = added[1].node_id, added[0].node_id
        cl.remove_node(added.pop(), allow_graceful=False)
        stdout, stderr = communicate(proc, 120)
    finally:
        for fd in writers:
            os.close(fd)
        for node in added:
            cl.remove_node(node, allow_graceful=False)
        proc.kill()
        proc.wait()
    assert proc.returncode == 0, stderr[-3000:]
    finals = assert_exactly_once(run_dir, {f"j{i}#0" for i in range(len(tasks))})
    assert {r["status"] for r in finals.values()} == {"success"}
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    left_out = [e["reason"] for e in events if e["event"] == "node_left_out"]
    assert len(left_out) == 1 and "sweep of the run's leftovers failed" in left_out[0], left_out
    assert "is left out of the run" in stderr, stderr[-3000:]
    assert not [e for e in events if e["event"] == "node_joined"], events
    vm = json.loads((run_dir / "summary.json").read_text())["vm"]
    assert len(vm["nodes"]) == 3
    # both nodes the run never used, with why (a scheduler reads the summary, not the warnings)
    assert set(vm["nodes_left_out"]) == {dead, hung}, vm["nodes_left_out"]
    assert "sweep of the run's leftovers failed" in vm["nodes_left_out"][dead]
    assert "had not ended when the run ended" in vm["nodes_left_out"][hung]
    assert f"Ray node {dead[:8]} left out of the run" in stdout + stderr, stdout[-2000:]


@pytest.mark.slow
def test_the_head_node_lost_during_the_first_sweep_stops_the_run_with_its_summary(tmp_path):
    """The head node killed while every node's first sweep hangs: the run stops as when the
    head is lost mid-run (exit 1, the message naming the head, its summary, the resume line)."""
    with own_ray_tmp("pr-hsw-") as ray_tmp:
        fifo = _stuck_sweep(tmp_path / "stuck", "startless")
        env = dict(os.environ, RAY_TMPDIR=str(ray_tmp))
        cluster_proc = subprocess.Popen([sys.executable, "-c", _HEAD_AND_NODE, "{}"], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True, env={**env, _ENV: str(fifo.parents[2])})
        writer = None
        try:
            said = json.loads(cluster_proc.stdout.readline() or "{}")
            assert said, "the cluster did not start"
            proc = subprocess.Popen(_cli(tmp_path, said["address"], "startless"), stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True, env=env)
            writer = _hold_sweep(fifo)
            assert proc.poll() is None, "the run ended before its head node could be killed"
            for pid in [p for pids in said["head"].values() for p in pids]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            stderr = communicate(proc, 150)[1]
        finally:
            if writer is not None:
                os.close(writer)
            cluster_proc.kill()  # its shutdown waits on the dead head; the rest: own_ray_tmp's
            cluster_proc.wait()
    assert proc.returncode == 1, stderr[-3000:]
    assert "Failed to connect to GCS" not in stderr, stderr[-3000:]
    assert "the Ray cluster's head node" in stderr and "resume with:" in stderr, stderr[-3000:]
    summary = json.loads((tmp_path / "startless" / "summary.json").read_text())
    assert "the Ray cluster's head node" in summary["stopped"]["reason"], summary["stopped"]
    results = tmp_path / "startless" / "results.jsonl"
    assert summary["finished"] == 0 and not (results.exists() and read_results(results.parent))


@pytest.mark.slow
def test_vms_sweep_on_a_cluster_says_which_node_died_in_its_sweep(cluster, tmp_path, monkeypatch):
    """`vms sweep --backend ray` on a cluster of which one node dies while it sweeps: exit 1,
    `Error: sweep failed:` naming that node (and what the others removed), no Ray traceback."""
    cl, _ = cluster
    fifo = _stuck_sweep(tmp_path / "gone", "swept")
    monkeypatch.setenv(_ENV, str(tmp_path / "gone"))
    node = cl.add_node(**_NODE)
    monkeypatch.delenv(_ENV)
    proc = subprocess.Popen([sys.executable, "-m", "parallel_rollout.cli", "vms", "sweep", "--backend", "ray",
                             "--ray-address", cl.address, "--run-id", "swept"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    writer = None
    try:
        writer = _hold_sweep(fifo)
        cl.remove_node(node, allow_graceful=False)
        stdout, stderr = communicate(proc, 90)
    finally:
        if writer is not None:
            os.close(writer)
        if node in cl.worker_nodes:
            cl.remove_node(node, allow_graceful=False)
        proc.kill()
        proc.wait()
    assert proc.returncode == 1, (stdout, stderr[-3000:])
    said = " ".join(stderr.split())
    assert f"Error: sweep failed: node {node.node_id[:8]}:" in said, stderr[-3000:]
    assert "removed on the other nodes: none" in said and "Traceback" not in stderr, stderr[-3000:]


@contextlib.contextmanager
def _stuck_cluster(prefix: str, run_id: str, at_start: bool = True):
    """A head and a node of their own (``_HEAD_AND_NODE``) whose sweeps of ``run_id`` read a
    FIFO: what the cluster said (its address, its head's pids), the environment that reaches
    it and the FIFO (not ``at_start``: its path, the test's to make with ``_stuck_sweep``);
    killed after (a stopped GCS too). The nodes' VMs are made beside it, in the short
    RAY_TMPDIR (a VM's socket path under ``tmp_path`` is too long)."""
    with own_ray_tmp(prefix) as ray_tmp:
        if at_start:
            fifo = _stuck_sweep(ray_tmp / "stuck", run_id)
        else:
            fifo = ray_tmp / "stuck" / run_id / "vm0" / "meta.json"
            fifo.parents[2].mkdir()
        env = dict(os.environ, RAY_TMPDIR=str(ray_tmp))
        cluster_proc = subprocess.Popen([sys.executable, "-c", _HEAD_AND_NODE, "{}"], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True, env={**env, _ENV: str(fifo.parents[2])})
        try:
            said = json.loads(cluster_proc.stdout.readline() or "{}")
            assert said, "the cluster did not start"
            yield said, env, fifo
        finally:
            cluster_proc.kill()  # its shutdown waits on the stopped head; the rest: own_ray_tmp's
            cluster_proc.wait()


def _stop_gcs(said: dict) -> None:
    """The head's GCS stopped (SIGSTOP): it takes connections and answers nothing."""
    for pid in said["head"]["gcs_server"]:
        os.kill(pid, signal.SIGSTOP)


@contextlib.contextmanager
def _killed_after(proc: subprocess.Popen):
    """The FIFO writers the block holds (the list it gets), closed as it ends; ``proc`` killed then."""
    writers: list[int] = []
    try:
        yield writers
    finally:
        for fd in writers:
            os.close(fd)
        proc.kill()
        proc.wait()


@pytest.mark.slow
def test_vms_sweep_whose_head_stops_answering_while_it_sweeps_ends_naming_the_head(tmp_path):
    """`vms sweep --backend ray` whose head's GCS stops answering while the nodes sweep: exit 1
    within the lost-head limit, naming the head (HOST:PORT), as a run does; no traceback. It
    waited out the sweep's 120 s, then for ever on Ray's disconnect from the stopped head."""
    with _stuck_cluster("pr-vsh-", "halted") as (said, env, fifo):
        proc = subprocess.Popen([sys.executable, "-m", "parallel_rollout.cli", "vms", "sweep", "--backend", "ray",
                                 "--ray-address", said["address"], "--run-id", "halted"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        with _killed_after(proc) as writers:
            writers.append(_hold_sweep(fifo))
            _stop_gcs(said)
            stdout, stderr = communicate(proc, 100)
    assert proc.returncode == 1, (stdout, stderr[-3000:])
    said_err = " ".join(stderr.split())
    lost = re.search(r"Error: sweep failed: the Ray cluster's head node \((\S+)\) has not answered for (\d+)s: "
                     r"the cluster is lost \(removed on the nodes that answered: none\)", said_err)
    assert lost and lost[1] == said["address"] and int(lost[2]) >= 15, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]


@pytest.mark.slow
def test_a_head_that_stops_answering_as_the_first_sweep_ends_stops_the_run_naming_it(tmp_path):
    """The head's GCS stopped while the nodes' first sweep is under way, which then ends: the
    run stops within the lost-head limit, naming the head, with its summary and the resume
    line (the start went on to make the pools and workers, and waited on the head for ever)."""
    with _stuck_cluster("pr-hse-", "ended") as (said, env, fifo):
        proc = subprocess.Popen(_cli(tmp_path, said["address"], "ended"), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env)
        with _killed_after(proc) as writers:
            writers.append(_hold_sweep(fifo))
            _stop_gcs(said)
            os.close(writers.pop())  # the sweep reads the end of its file and ends
            stderr = communicate(proc, 100)[1]
    assert_ended_naming_the_head(proc, stderr, said["address"], tmp_path / "ended")


#: the CLI run (argv: its sweep's cut-off in seconds, optionally "/" and the backstop for a
#: sweep Ray never starts, then the run's flags) with the nodes' sweep cut-off
#: (ray_cluster.SWEEP_S, 120 s from the sweep's start) and backstop (SWEEP_START_S, from its
#: dispatch) shorter, in this process only
_SWEEP_CUT_OFF = """
import runpy, sys
from parallel_rollout.backends import ray_cluster
cut_off, _, backstop = sys.argv[1].partition("/")
ray_cluster.SWEEP_S = float(cut_off)
if backstop:
    ray_cluster.SWEEP_START_S = float(backstop)
sys.argv = ["parallel-rollout", *sys.argv[2:]]
runpy.run_module("parallel_rollout.cli", run_name="__main__")
"""


@pytest.mark.slow
def test_a_node_whose_first_sweep_hangs_past_the_cut_off_is_left_out_and_the_run_goes_on(
        cluster, tmp_path, monkeypatch):
    """A node whose sweep at the run's start hangs (its open of a leftover's file never ends)
    past the sweep's cut-off: the sweep is cancelled, the node left out with the warning, the
    ``node_left_out`` event and the summary's why, and the run finishes at the other nodes
    (exit 0, every sample once)."""
    cl, _ = cluster
    _stuck_sweep(tmp_path / "hung", "cutoff")  # its meta.json a FIFO no one writes
    monkeypatch.setenv(_ENV, str(tmp_path / "hung"))  # the node's raylet's, and its workers'
    node = cl.add_node(**_NODE)
    monkeypatch.delenv(_ENV)
    cli = _cli(tmp_path, cl.address, "cutoff")
    # the cut-off counts from the sweep's start on its node, not from its dispatch: a fresh
    # Ray worker's start under load (which left the other nodes out at 8 s) is not in it
    proc = subprocess.Popen([sys.executable, "-c", _SWEEP_CUT_OFF, "8", *cli[3:]],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # no writer: the sweep's open of the FIFO waits for one until the cut-off cancels it
        # (its worker killed). Waiting to see the sweep open it raced that cancel: a node's
        # first worker, started under load, reached the FIFO late in the cut-off, and was
        # killed before the test saw it there ("no sweep read … within 60s")
        stdout, stderr = communicate(proc, 150)
    finally:
        cl.remove_node(node, allow_graceful=False)
        proc.kill()
        proc.wait()
    assert proc.returncode == 0, stderr[-3000:]
    run_dir = tmp_path / "cutoff"
    finals = assert_exactly_once(run_dir, {f"{task_id}#0" for task_id in ray_cluster.SHELL_IDS})
    assert {r["node"] for r in finals.values()} and node.node_id not in {r["node"] for r in finals.values()}
    why = "its sweep of the run's leftovers hung: it had not ended 8s after it started"
    assert f"node {node.node_id[:8]} is left out of the run: {why}" in stderr, stderr[-3000:]
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    assert [e["reason"] for e in events if e["event"] == "node_left_out"] == [
        f"node {node.node_id[:8]} is left out of the run: {why}"], events
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["ray"]["nodes_left_out"] == {node.node_id: why}, summary["ray"]
    assert node.node_id not in summary["ray"]["nodes"] and len(summary["ray"]["nodes"]) == 3, summary["ray"]


@pytest.mark.slow
def test_a_head_that_stops_answering_as_a_stopped_run_sweeps_its_nodes_lets_it_end(tmp_path):
    """SIGTERM to a run with attempts under way (an unclean end: its end sweeps the nodes),
    the head's GCS stopped while they sweep: the run ends as interrupted (exit 130, its
    summary, the resume line), the warning naming the head, a ``head_lost`` event. The sweep
    gave up on the head after 15 s, then Ray's disconnect waited on it for ever."""
    with _stuck_cluster("pr-hen-", "ending", at_start=False) as (said, env, fifo):
        cmd = _cli(tmp_path, said["address"], "ending")
        cmd[cmd.index("--data") + 1] = str(write_tasks(tmp_path / "tasks.jsonl", _SLOW))
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        events = tmp_path / "ending" / "events.jsonl"
        with _killed_after(proc) as writers:
            deadline = time.monotonic() + 120
            while proc.poll() is None and time.monotonic() < deadline and not (
                    events.exists() and '"to": "leased"' in events.read_text()):
                time.sleep(0.1)
            assert proc.poll() is None, "the run ended before it could be stopped"
            _stuck_sweep(fifo.parents[2], "ending")  # a leftover the end's sweep reads, and hangs on
            proc.send_signal(signal.SIGTERM)
            writers.append(_hold_sweep(fifo))
            _stop_gcs(said)
            stderr = communicate(proc, 100)[1]
    assert proc.returncode == 130, stderr[-3000:]
    assert "interrupted by signal 15; resume with:" in stderr and "Traceback" not in stderr, stderr[-3000:]
    said_err = " ".join(stderr.split())
    assert (f"the run's VMs are not swept on every node (--resume sweeps them): the Ray cluster's head node "
            f"({said['address']}) has not answered for") in said_err, stderr[-3000:]
    summary = json.loads((tmp_path / "ending" / "summary.json").read_text())
    assert summary["interrupted"] is True and summary["finished"] < len(_SLOW), summary
    lost = [e for e in map(json.loads, events.read_text().splitlines()) if e["event"] == "head_lost"]
    assert len(lost) == 1 and said["address"] in lost[0]["reason"], lost


#: a start-up file (sitecustomize.py) that makes each Ray worker process of a node whose
#: PYTHONPATH names its folder start late (PR_TEST_WORKER_START_S seconds), as under load
_SLOW_WORKER_START = """
import os, sys, time
if sys.argv and sys.argv[0].endswith("default_worker.py"):
    time.sleep(float(os.environ.get("PR_TEST_WORKER_START_S", "0")))
"""


@pytest.mark.slow
def test_a_node_whose_ray_worker_starts_late_is_not_left_out_by_the_sweeps_cut_off(cluster, tmp_path, monkeypatch):
    """A node whose Ray workers take 20 s to start, its sweep itself quick: with the sweep's
    cut-off at 4 s the node is not left out (the cut-off counted Ray's start of the worker);
    a backstop from the dispatch still leaves out a node that never starts its sweep, said so."""
    cl, _ = cluster
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(_SLOW_WORKER_START)
    # the node's raylet's environment, and so its workers'
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("PR_TEST_WORKER_START_S", "20")
    node = cl.add_node(**_NODE)
    monkeypatch.undo()
    try:
        runs = {}
        for run_id, cut_off in (("late", "4"), ("never", "60/12")):
            cli = _cli(tmp_path, cl.address, run_id)
            proc = subprocess.Popen([sys.executable, "-c", _SWEEP_CUT_OFF, cut_off, *cli[3:]],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            try:
                runs[run_id] = communicate(proc, 200)[1]
            finally:
                proc.kill()
                proc.wait()
            assert proc.returncode == 0, runs[run_id][-3000:]
            assert_exactly_once(tmp_path / run_id, {f"{task_id}#0" for task_id in ray_cluster.SHELL_IDS})
    finally:
        cl.remove_node(node, allow_graceful=False)
    late = json.loads((tmp_path / "late" / "summary.json").read_text())["ray"]
    assert not late.get("nodes_left_out") and node.node_id in late["nodes"], (late, runs["late"][-3000:])
    never = json.loads((tmp_path / "never" / "summary.json").read_text())["ray"]
    why = "it never started its sweep of the run's leftovers: Ray had not started it 12s after it was sent"
    assert never["nodes_left_out"] == {node.node_id: why}, never
    assert f"node {node.node_id[:8]} is left out of the run: {why}" in runs["never"], runs["never"][-3000:]


@contextlib.contextmanager
def _run_held_at_its_sweep(cl, tmp_path: Path, monkeypatch, run_id: str):
    """A CLI run on ``cl`` (stderr piped) whose start waits on the sweep of a node joined for
    it, held on a FIFO: the run and the node; after, the sweep let go, the node and run ended."""
    fifo = _stuck_sweep(tmp_path / "hung", run_id)
    monkeypatch.setenv(_ENV, str(tmp_path / "hung"))  # the node's raylet's, and its workers'
    node = cl.add_node(**_NODE)
    monkeypatch.delenv(_ENV)
    proc = subprocess.Popen(_cli(tmp_path, cl.address, run_id), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    writer = None
    try:
        writer = _hold_sweep(fifo, timeout=120)  # the sweep reads it: the run's start waits on it
        yield proc, node
    finally:
        if writer is not None:
            os.close(writer)
        cl.remove_node(node, allow_graceful=False)
        proc.kill()
        proc.wait()


def _assert_stopped_at_the_sweep(proc: subprocess.Popen, stderr: str, run_dir: Path, node) -> None:
    """The run ended interrupted (exit 130, its resume line) at its start, saying nothing of
    workers it did not start, ``node`` left out."""
    assert proc.returncode == 130, stderr[-3000:]
    assert "interrupted by signal 2; resume with:" in stderr and "Traceback" not in stderr, stderr[-3000:]
    assert "[Concurrency]" not in stderr, stderr[-3000:]  # no worker started: said after "stopping", it misled
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["interrupted"] and summary["finished"] == 0, summary
    assert summary["ray"]["nodes_left_out"] == {
        node.node_id: "its sweep of the run's leftovers had not ended when the run ended"}, summary["ray"]


@pytest.mark.slow
def test_a_second_ctrl_c_while_a_node_s_first_sweep_hangs_stops_the_run_at_once(cluster, tmp_path, monkeypatch):
    """Ctrl-C twice while a node's sweep at the run's start hangs: the run stops then (exit 130,
    its summary and resume line), the node left out as its sweep had not ended. Before, the
    start waited out the sweep's cut-off (120 s from its start) whatever the signals said
    ("Ctrl-C again stops at once")."""
    with _run_held_at_its_sweep(cluster[0], tmp_path, monkeypatch, "ctrlc") as (proc, node):
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
        reader.start()
        proc.send_signal(signal.SIGINT)
        # the second once the first is handled (two before it are one to Python's handler)
        deadline = time.monotonic() + 30
        while not any("signal 2: stopping" in line for line in lines) and time.monotonic() < deadline:
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            reader.join(10)
            raise AssertionError("".join(lines)[-3000:]) from None
        reader.join(10)
    _assert_stopped_at_the_sweep(proc, "".join(lines), tmp_path / "ctrlc", node)


@pytest.mark.slow
def test_a_first_ctrl_c_while_a_node_s_first_sweep_hangs_stops_the_run_within_its_grace(cluster, tmp_path, monkeypatch):
    """One Ctrl-C while a node's sweep at the run's start hangs: the sweep is waited for the
    run's grace ("finishing what completes within 3s"), then cancelled as a second Ctrl-C does
    (exit 130, its summary and resume line, the node left out). Before, the start waited out
    the sweep's cut-off (120 s from its start): the first signal never reached it."""
    with _run_held_at_its_sweep(cluster[0], tmp_path, monkeypatch, "once") as (proc, node):
        proc.send_signal(signal.SIGINT)
        stderr = communicate(proc, 60)[1]  # raises, saying what the run said, if it has not ended
    _assert_stopped_at_the_sweep(proc, stderr, tmp_path / "once", node)
