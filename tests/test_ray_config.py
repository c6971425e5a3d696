"""--backend ray without a cluster: what a user without Ray is told (through the config and the
CLI), the flag that needs it, a cluster that cannot be reached (refused at once, exit 2), a
Ray run resumed on --backend local, the pools' stats summed over nodes (a lost node's as of
its pool's last report; during a run, every node's, no pool asked), and the RL policy
gate on TCP that workers on other hosts reach."""

from __future__ import annotations

import http.server
import json
import os
import socket
import socketserver
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from conftest import SHELL_TASKS, assert_exactly_once, read_results, shell_task, write_tasks

_CLI = [sys.executable, "-m", "parallel_rollout.cli"]


def test_without_ray_address_flag_needs_backend_ray(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "parallel_rollout.cli", "--mode", "shell", "--data",
                           str(SHELL_TASKS), "--output-dir", str(tmp_path), "--ray-address", "auto"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "--ray-address needs --backend ray" in proc.stderr


def test_missing_ray_says_how_to_install(monkeypatch):
    import importlib.util

    from parallel_rollout.config_checks import check_ray
    from parallel_rollout.config import build_config
    from parallel_rollout.errors import ConfigError

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a))
    with pytest.raises(ConfigError, match=r"pip install 'parallel-rollout\[ray\]'"):
        check_ray()
    with pytest.raises(ConfigError, match="parallel-rollout"):
        build_config({"backend": "ray"})


def test_missing_ray_through_the_cli(tmp_path):
    """A user without Ray: exit 2 (bad usage), the install line, nothing run."""
    hide_ray = ("import sys; sys.modules['ray'] = None; sys.argv[0] = 'parallel-rollout'; "
                "from parallel_rollout.cli import main; main()")
    for args in (["--mode", "shell", "--data", str(SHELL_TASKS), "--output-dir", str(tmp_path / "out"),
                  "--backend", "ray", "--no-progress"],
                 ["vms", "sweep", "--backend", "ray"]):
        proc = subprocess.run([sys.executable, "-c", hide_ray, *args], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2, (args, proc.stderr[-2000:])
        assert "pip install 'parallel-rollout[ray]'" in proc.stderr, proc.stderr[-2000:]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("how", ["run", "dry-run", "sweep", "auto"])
def test_a_cluster_nobody_answers_at_is_refused_at_once(tmp_path, how):
    """--ray-address where nothing takes a connection (here a bound port that does not
    listen; ``auto`` through RAY_ADDRESS): exit 2 within seconds, saying so, and no run
    folder, where ray.init printed "Failed to connect to GCS" every 40 s for ever (a run, a
    sweep) and a dry run said "preflight passed"."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{closed.getsockname()[1]}"
        env = dict(os.environ, RAY_ADDRESS=address) if how == "auto" else dict(os.environ)
        run = ["--mode", "shell", "--data", str(SHELL_TASKS), "--output-dir", str(tmp_path / "out"),
               "--backend", "ray", "--ray-address", "auto" if how == "auto" else address, "--no-progress"]
        args = {"dry-run": [*run, "--dry-run"],
                "sweep": ["vms", "sweep", "--backend", "ray", "--ray-address", address]}.get(how, run)
        proc = subprocess.run([*_CLI, *args], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 2, proc.stderr[-2000:]
    said = f"cannot reach the Ray cluster at {address}" + (" (--ray-address auto)" if how == "auto" else "")
    assert said in proc.stderr and "Connection refused" in proc.stderr, proc.stderr[-2000:]
    assert "preflight passed" not in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()


class _Silent(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        self.request.recv(64)
        time.sleep(8)  # takes the connection, answers nothing: a head that hangs


@pytest.mark.parametrize("service", ["web", pytest.param("silent", marks=pytest.mark.slow)])
def test_an_address_where_no_ray_head_answers_is_refused_saying_so(tmp_path, service):
    """--ray-address where something else takes the connection (a web server, as the
    dashboard's port would) or where nothing answers once connected: exit 2 within seconds,
    saying what answered there and which port a head's GCS has, no run folder. ray.init waited
    for ever ('Failed to get cluster ID from GCS server' every 40 s), the run never starting."""
    handler = http.server.SimpleHTTPRequestHandler if service == "web" else _Silent
    with socketserver.ThreadingTCPServer(("127.0.0.1", 0), handler) as server:
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        address = f"127.0.0.1:{server.server_address[1]}"
        proc = subprocess.run([*_CLI, "--mode", "shell", "--data", str(SHELL_TASKS), "--output-dir",
                               str(tmp_path / "out"), "--backend", "ray", "--ray-address", address, "--no-progress"],
                              capture_output=True, text=True, timeout=60, cwd=tmp_path)
        server.shutdown()
    assert proc.returncode == 2, proc.stderr[-2000:]
    said = " ".join(proc.stderr.split())
    assert f"cannot reach the Ray cluster at {address}:" in said and "Traceback" not in said, said
    assert ("it answers, but not as a Ray head node's GCS (it said '<!DOCTYPE HTML>')" in said if service == "web"
            else "takes connections but said nothing within 5s" in said), said
    assert not (tmp_path / "out").exists()


def test_auto_with_no_cluster_is_refused(tmp_path):
    """``--ray-address auto`` where there is no cluster to find: exit 2 saying so, no run
    folder (not ray.init's ConnectionError traceback, exit 1)."""
    if any(p.info["name"] == "gcs_server" for p in psutil.process_iter(["name"])):
        pytest.skip("a Ray cluster runs on this machine: auto would find it")
    env = {name: value for name, value in os.environ.items() if name != "RAY_ADDRESS"}
    env["RAY_TMPDIR"] = str(tmp_path / "ray")  # no ray_current_cluster of an earlier `ray start`
    proc = subprocess.run([*_CLI, "--mode", "shell", "--data", str(SHELL_TASKS), "--output-dir", str(tmp_path / "out"),
                           "--backend", "ray", "--ray-address", "auto", "--no-progress"],
                          capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "cannot reach the Ray cluster at auto: ConnectionError: Could not find any running Ray instance" \
        in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert not (tmp_path / "out").exists()


def _a_ray_run_with_a_sample_left(tmp_path: Path, address: str) -> Path:
    """The folder of a run of 3 samples, the last left to a resume, that config.json says ran
    with ``--backend ray --ray-address address`` (made by a local run)."""
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task(f"t{i}") for i in range(3)])
    first = subprocess.run([*_CLI, "--mode", "shell", "--data", str(data), "--output-dir", str(tmp_path),
                            "--run-id", "r", "--num-rollouts", "1", "--no-progress"],
                           capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr[-2000:]
    run_dir = tmp_path / "r"
    stored = json.loads((run_dir / "config.json").read_text())
    stored["config"].update(backend="ray", ray_address=address)
    stored["config"]["explicit"] = sorted({*stored["config"]["explicit"], "backend", "ray_address"})
    (run_dir / "config.json").write_text(json.dumps(stored))
    lines = (run_dir / "results.jsonl").read_text().splitlines(keepends=True)
    (run_dir / "results.jsonl").write_text("".join(lines[:-1]))
    return run_dir


def test_a_resume_whose_cluster_is_gone_says_how_to_go_on(tmp_path):
    """A --resume of a Ray run whose cluster is gone (its stored --ray-address takes no
    connection): exit 2, and the error says the two ways on, another cluster's --ray-address or
    --backend local (it said only to start the cluster or give its address, as to a new run)."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        run_dir = _a_ray_run_with_a_sample_left(tmp_path, f"127.0.0.1:{closed.getsockname()[1]}")
        resumed = subprocess.run([*_CLI, "--output-dir", str(tmp_path), "--run-id", "r", "--resume", "--no-progress"],
                                 capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 2, resumed.stderr[-2000:]
    said = " ".join(resumed.stderr.split())
    assert "cannot reach the Ray cluster at 127.0.0.1:" in said and "Traceback" not in said, said
    assert "resume on another with --ray-address HOST:PORT, or on this host with --backend local" in said, said
    assert len(read_results(run_dir)) == 2  # nothing ran


@pytest.mark.parametrize("flags", [["--backend", "local"], ["--backend", "local", "--ray-address", ""]])
def test_a_ray_run_resumes_on_the_local_backend(tmp_path, flags):
    """The backend changes no result: a run of ``--backend ray --ray-address auto`` resumes
    with ``--backend local`` (its stored address dropped; ``--ray-address ""`` clears it too),
    where it was refused as "--ray-address needs --backend ray". Its folder is made here by a
    local run that config.json then says was a Ray run, its last result taken off
    (tests/test_ray_connect.py resumes a real one)."""
    run_dir = _a_ray_run_with_a_sample_left(tmp_path, "auto")
    resumed = subprocess.run([*_CLI, "--output-dir", str(tmp_path), "--run-id", "r", "--resume", *flags,
                              "--no-progress"], capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert_exactly_once(run_dir, {f"t{i}#0" for i in range(3)})
    assert len(read_results(run_dir)) == 3
    config = json.loads((run_dir / "config.json").read_text())["config"]
    assert (config["backend"], config["ray_address"]) == ("local", None)


def test_pool_stats_summed_over_nodes_and_lost_nodes_counted_dead():
    from parallel_rollout.backends.ray_cluster import merge_stats
    from parallel_rollout.run_end import format_summary

    node = {"size": 2, "states": {"booting": 0, "idle": 1, "leased": 1, "resetting": 0, "dead": 0},
            "utilization": 0.5, "leases": 4, "reset_s": {"p50": 0.2, "p95": 0.4}}
    other = dict(node, utilization=1.0, leases=6, reset_s={"p50": 0.3, "p95": 0.35})
    total = merge_stats({"a": node, "b": other, "c": None}, 2, "process")
    assert total["size"] == 6 and total["leases"] == 10
    assert total["states"] == {"booting": 0, "idle": 2, "leased": 2, "resetting": 0, "dead": 2}
    assert total["reset_s"] == {"p50": 0.3, "p95": 0.4}  # the worst node's
    assert total["utilization"] == 0.5 and total["nodes"]["c"] == {"lost": True, "size": 2}
    # no node answers: every state still there (the progress bar reads each)
    assert merge_stats({"a": None}, 1, "process")["states"] == \
        {"booting": 0, "idle": 0, "leased": 0, "resetting": 0, "dead": 1}
    # the summary's line says the lost node's VMs (it said "0 died": no pool counted them)
    summary = {"success_rate": 1.0, "mean_reward": 1.0, "successes": 3, "finished": 3, "total_samples": 3,
               "status_counts": {"success": 3}, "attempts": 4, "retried_attempts": 1, "timing_s": {}, "vm": total}
    line = next(x for x in format_summary(summary, "out").splitlines() if x.startswith("VMs:"))
    assert "0 died, 2 lost with 1 Ray node(s), 0 replaced" in line, line


def test_a_lost_node_s_pool_counts_in_the_totals_as_of_its_last_report(tmp_path):
    """A node lost mid-run (no stats at the end) after its pool's last report (``report``,
    taken every second with its events): its leases and resets count in the run's totals and
    its entry says them, ``as_of`` that report, its VMs dead, with why it was lost. Before,
    it counted only dead VMs: the run's totals left out the work it did."""
    from parallel_rollout.backends.ray_actors import PoolActor
    from parallel_rollout.backends.ray_pools import Node, pools_stats

    pool = PoolActor("process", "lost-report", 1, run_dir=str(tmp_path / "run"))
    try:
        vm = pool.call("lease", "w0", "t#0", 60.0)
        pool.call("release", vm.vm_id)
        asked_at = time.time()
        report = pool.report()
    finally:
        pool.call("shutdown")
    alive = {"size": 1, "states": {"booting": 0, "idle": 1, "leased": 0, "resetting": 0, "dead": 0},
             "utilization": 0.1, "leases": 3, "resets": 3}
    lost = Node("lost", pool=pool, alive=False, lost_reason="node lost left the cluster",
                last_stats=report["stats"], last_stats_at=asked_at)
    total = pools_stats([Node("alive", pool=pool, final_stats=alive), lost], 1, "process")
    assert total["leases"] == 4 and total["resets"] == 3 + report["stats"]["resets"], total
    assert total["size"] == 2 and total["states"]["dead"] == 1 and total["states"]["idle"] == 1, total
    said = total["nodes"]["lost"]
    assert said["lost"] is True and said["leases"] == 1 and said["as_of"] == round(asked_at, 3), said
    assert said["reason"] == "node lost left the cluster" and said["states"] == {"dead": 1}, said
    # a node lost before any report still counts its VMs dead, with no figures
    early = Node("early", pool=pool, alive=False, lost_reason="its pool died")
    assert pools_stats([early], 1, "process")["nodes"]["early"] == {"lost": True, "size": 1, "reason": "its pool died"}


def test_a_run_s_pool_stats_ask_no_pool_and_say_a_late_report():
    """During a run the pools' stats are their last reports' (taken every second), and no pool
    is asked: the progress reads them every second on the run's main thread, where it called
    each node's pool in turn, and one that hung stalled the run 10 s per node. A pool whose
    report is older than REPORT_STALE_S is in ``late_reports`` with its age, its figures as of
    that report; at the end, the stats ``stop_pools`` took, a pool without them counted dead."""
    from parallel_rollout.backends.ray_pools import REPORT_STALE_S, Node, pools_stats

    asked = []

    def stats_call(*args):
        asked.append(args)
        raise TimeoutError("the pool does not answer")

    pool = type("Pool", (), {"call": type("Call", (), {"remote": staticmethod(stats_call)})})()

    def figures(state):
        return {"size": 1, "states": {"booting": 0, "idle": 0, "leased": 0, "resetting": 0, "dead": 0, state: 1},
                "leases": 2, "utilization": 0.5}

    now = time.time()
    fresh = Node("fresh-node", pool=pool, last_stats=figures("leased"), last_stats_at=now - 1)
    late = Node("late-node", pool=pool, last_stats=figures("idle"), last_stats_at=now - REPORT_STALE_S - 3)
    total = pools_stats([fresh, late], 1, "process")
    assert asked == [], "a pool was asked its stats during the run"
    assert total["states"]["leased"] == 1 and total["states"]["idle"] == 1 and total["states"]["dead"] == 0, total
    assert list(total["late_reports"]) == ["late-node"] and total["late_reports"]["late-node"] >= REPORT_STALE_S + 3
    assert total["nodes"]["late-node"]["report_age_s"] == total["late_reports"]["late-node"]
    assert "report_age_s" not in late.last_stats and total["leases"] == 4, total
    # a pool just placed, its first report not back yet: its VMs booting, not late
    placed = Node("placed-node", pool=pool, report_asked_at=now)
    assert pools_stats([placed], 1, "process")["states"]["booting"] == 1
    # the end: the stats taken at the shutdown; a pool that gave none counts dead, as of its report
    fresh.final_stats = figures("dead")
    total = pools_stats([fresh, late], 1, "process", final=True)
    assert asked == [] and "late_reports" not in total, total
    assert total["states"]["dead"] == 2 and total["nodes"]["late-node"]["lost"] is True, total


def test_the_summary_names_the_nodes_lost_and_left_out_with_why():
    """A node lost mid-run and one the run never used (its sweep failed): summary.json's vm
    says both with why, and the summary's lines name the one left out (they were only in a
    warning and events.jsonl: a scheduler could not tell the run had fewer nodes)."""
    from parallel_rollout.backends.ray_pools import Node, cluster_nodes, pools_stats
    from parallel_rollout.run_end import format_summary

    lost = Node("lost-node", pool=object(), alive=False, lost_reason="node lost-nod left the cluster")
    total = pools_stats([lost], 2, "process", {"dead-node-id": "its sweep of the run's leftovers failed: X"})
    assert total["nodes"]["lost-node"] == {"lost": True, "size": 2, "reason": "node lost-nod left the cluster"}
    assert total["nodes_left_out"] == {"dead-node-id": "its sweep of the run's leftovers failed: X"}
    summary = {"success_rate": 1.0, "mean_reward": 1.0, "successes": 3, "finished": 3, "total_samples": 3,
               "status_counts": {"success": 3}, "attempts": 3, "retried_attempts": 0, "timing_s": {}, "vm": total}
    assert "Ray node dead-nod left out of the run: its sweep of the run's leftovers failed: X" in \
        format_summary(summary, "out").splitlines()
    # the cluster's section beside it (every Ray run's): each node said once, the lost one too
    summary["ray"] = cluster_nodes([lost], total["nodes_left_out"])
    lines = format_summary(summary, "out").splitlines()
    assert [line for line in lines if line.startswith("Ray node")] == [
        "Ray node lost-nod lost: node lost-nod left the cluster",
        "Ray node dead-nod left out of the run: its sweep of the run's leftovers failed: X"], lines


def test_a_run_without_vms_names_the_nodes_it_used_and_lost_with_why():
    """No pool, so no ``vm`` section: summary.json's ``ray`` says every node used, the lost
    one with why, and the summary's lines name it (it was only in a warning and events.jsonl).
    On a real cluster: tests/test_ray_lost_nodes.py."""
    from parallel_rollout.backends.ray_pools import Node, cluster_nodes
    from parallel_rollout.run_end import format_summary

    nodes = [Node("kept-node"), Node("lost-node", alive=False, lost_reason="node lost-nod left the cluster")]
    cluster = cluster_nodes(nodes)
    assert cluster == {"nodes": {"kept-node": {"lost": False},
                                 "lost-node": {"lost": True, "reason": "node lost-nod left the cluster"}},
                       "nodes_left_out": {}}
    summary = {"success_rate": 1.0, "mean_reward": 1.0, "successes": 3, "finished": 3, "total_samples": 3,
               "status_counts": {"success": 3}, "attempts": 3, "retried_attempts": 0, "timing_s": {}, "vm": None,
               "ray": cluster}
    lines = format_summary(summary, "out").splitlines()
    assert [line for line in lines if line.startswith("Ray node")] == [
        "Ray node lost-nod lost: node lost-nod left the cluster"], lines


def test_policy_gate_on_tcp_for_nodes_of_other_hosts():
    """The gate a trainer serves to other hosts: TCP, same protocol; suspend holds a request."""
    import threading

    from parallel_rollout.backends.ray_cluster import driver_ip
    from parallel_rollout.policy_gate import GateClient, PolicyGate

    assert driver_ip(None) == driver_ip("127.0.0.1:6379") == driver_ip("localhost:6379") == "127.0.0.1"
    gate = PolicyGate(version=1, host="127.0.0.1")
    try:
        assert gate.path.startswith("tcp://127.0.0.1:")
        client = GateClient(gate.path, gate.key)
        assert client.begin()[0] == 1 and client.end() is False
        gate.suspend()
        started = threading.Event()
        threading.Thread(target=lambda: (client.begin(), started.set()), daemon=True).start()
        assert not started.wait(0.3), "a request started while the gate was suspended"
        gate.resume(version=2)
        assert started.wait(5) and client.end() is False
        client.close()
    finally:
        gate.close()



def test_a_ray_error_is_said_with_what_raised_it():
    """An actor that died of an error its creation raised (a node's pool whose provider does
    not import or start there), or a method's error: the one line a run logs and stops with
    ends with the error itself; it was Ray's first line only, "an error raised in its creation
    task, ray::PoolActor.__init__() (pid=…)", with the terminal's colour codes in it."""
    import traceback

    ray_exceptions = pytest.importorskip("ray.exceptions")
    from parallel_rollout.backends.ray_cluster import why

    try:
        raise FileNotFoundError("bwrap not found: install bubblewrap on this node")
    except FileNotFoundError as exc:
        raised = ray_exceptions.RayTaskError("PoolActor.__init__", "".join(traceback.format_exception(exc)), exc,
                                             proctitle="ray::PoolActor.__init__()", pid=7, ip="127.0.0.1")
    for error in (ray_exceptions.ActorDiedError(cause=raised), raised):
        said = why(error)
        assert said.startswith(type(error).__name__ + ": ") and "ray::PoolActor.__init__()" in said, said
        assert said.endswith("… FileNotFoundError: bwrap not found: install bubblewrap on this node"), said
        assert "\x1b" not in said and "\n" not in said, said
    assert why(ray_exceptions.ActorDiedError()) == "ActorDiedError: The actor died unexpectedly before finishing this task."


@pytest.mark.parametrize("ray_s, lost_after", [(None, 15.0), ("600", 15.0), ("12", 3.0), ("1", 0.5), ("x", 15.0)])
def test_a_driver_whose_ray_ends_it_sooner_counts_its_head_lost_sooner(monkeypatch, ray_s, lost_after):
    """The head counts lost after 15 s unanswered, or a quarter of Ray's own time to end a driver
    without its GCS where the driver's environment sets that shorter (the run stops before Ray
    ends it: tests/test_ray_connect.py, on a cluster); a longer one leaves the 15 s."""
    from parallel_rollout.backends.ray_head import RAY_GCS_TIMEOUT_ENV, HeadWatch

    if ray_s is None:
        monkeypatch.delenv(RAY_GCS_TIMEOUT_ENV, raising=False)
    else:
        monkeypatch.setenv(RAY_GCS_TIMEOUT_ENV, ray_s)
    assert HeadWatch().lost_after == lost_after


@pytest.mark.parametrize("cluster_s, env_s, lost_after", [(12, "600", 3.0), (600, "12", 15.0), (None, "12", 3.0)])
def test_ray_s_time_set_in_the_cluster_s_config_goes_before_the_driver_s_environment(
        monkeypatch, cluster_s, env_s, lost_after):
    """A cluster whose head was started with Ray's time to end a driver without its GCS in its
    system config (``ray start --head --system-config``): Ray ends the driver after that time,
    whatever the driver's environment says (26 s after the head was killed with 25 there and
    100 in the environment), so the run's limit is a quarter of it; without it, the
    environment's (tests/test_ray_connect.py, on a cluster)."""
    from parallel_rollout.backends.ray_head import RAY_GCS_TIMEOUT, RAY_GCS_TIMEOUT_ENV, head_lost_s

    monkeypatch.setenv(RAY_GCS_TIMEOUT_ENV, env_s)
    config = {"automatic_object_spilling_enabled": True}
    if cluster_s is not None:
        config[RAY_GCS_TIMEOUT] = cluster_s
    assert head_lost_s(config) == lost_after


@pytest.mark.parametrize("left", [0, 1])
def test_a_local_resume_says_an_earlier_ray_sessions_left_out_node_once_as_earlier(tmp_path, left):
    """A --resume --backend local of a Ray run that left a node out: the summary's lines say
    that node once, marked ``(an earlier session)``. A resume with nothing left to run keeps
    the earlier session's ``vm`` section, whose ``nodes_left_out`` (the fallback for a summary
    from before the ``ray`` section) was said again as this session's, this session's ``ray``
    being null. Its folder is made by a local run that config.json and summary.json then say
    was a Ray run."""
    run_dir = _a_ray_run_with_a_sample_left(tmp_path, "auto")
    if not left:  # every sample made final first: the resume below has nothing to run
        again = subprocess.run([*_CLI, "--output-dir", str(tmp_path), "--run-id", "r", "--resume", "--backend",
                                "local", "--no-progress"], capture_output=True, text=True, timeout=120)
        assert again.returncode == 0, again.stderr[-2000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    why = "the process provider cannot run there: bubblewrap (bwrap) is not installed"
    summary["ray"] = {"nodes": {"a" * 56: {"lost": False}}, "nodes_left_out": {"b" * 56: why}}
    summary["vm"]["nodes_left_out"] = {"b" * 56: why}
    (run_dir / "summary.json").write_text(json.dumps(summary))
    resumed = subprocess.run([*_CLI, "--output-dir", str(tmp_path), "--run-id", "r", "--resume", "--backend", "local",
                              "--no-progress"], capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    said = [line for line in resumed.stdout.splitlines() if "Ray node" in line]
    assert said == [f"Ray node bbbbbbbb left out of the run: {why} (an earlier session)"], resumed.stdout


def test_a_ray_without_the_printer_of_cluster_errors_leaves_its_printing_alone(monkeypatch):
    """The run logs Ray's cluster errors at DEBUG by taking over ``print_to_stdstream`` of
    ray._private.worker (1307205b); a Ray without that function starts the run all the same,
    its printing left as it is, and a second connect does not wrap the printer twice."""
    pytest.importorskip("ray")
    from ray._private import worker

    from parallel_rollout.backends import ray_cluster as backend

    monkeypatch.delattr(worker, "print_to_stdstream")
    backend._cluster_errors_logged()  # no AttributeError
    assert not hasattr(worker, "print_to_stdstream")
    monkeypatch.undo()

    printed = []
    monkeypatch.setattr(worker, "print_to_stdstream", lambda data, ignore_prefix: printed.append(data))
    backend._cluster_errors_logged()
    backend._cluster_errors_logged()
    worker.print_to_stdstream({"pid": "raylet", "lines": ["Raylet is terminated"]}, False)
    worker.print_to_stdstream({"pid": 123, "lines": ["a worker's line"]}, False)
    assert printed == [{"pid": 123, "lines": ["a worker's line"]}]
