"""What a user of a Ray cluster can get wrong, on tests/ray_cluster.py's cluster on 127.0.0.1:

- a ``--ray-address`` of another form (the dashboard's http://, a port that is not a number):
  refused before the run folder opens, naming the flag (exit 2). An http:// address at the
  head's GCS port passed the check that something answers there as a GCS, and ray.init then
  refused it after the run folder had opened, telling the user to fix RAY_ADDRESS;
- a node where the run's provider cannot run: a node without bubblewrap (started as an
  operator starts one, ``ray start --address HEAD``, in a mount namespace where bwrap is not
  installed). The run's preflight checks only the driver's host; the node is left out of the
  run as it starts, said in a warning, ``events.jsonl`` and ``summary.json`` with why, and the
  run goes on at the others: its pool there failed every boot, which stopped the whole run
  (exit 1, ``the replacement budget is spent``, ``exec: bwrap: Permission denied``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

import ray_cluster
from conftest import SHELL_TASKS, assert_exactly_once
from ray_cluster import SHELL_IDS, _cli, communicate, ray_start_node

_CLI = [sys.executable, "-m", "parallel_rollout.cli"]

# the module's fixtures: a cluster (made when a test first asks for it) and the leak check
cluster, no_leaks = ray_cluster.cluster, ray_cluster.no_leaks

_BWRAP = shutil.which("bwrap")
#: a node's argv under this: a mount namespace of its own where bwrap is an empty file (not
#: executable: shutil.which finds none, as on a host without the package)
_HIDE = 'mount --bind "$1" "$2" && shift 2 && exec "$@"'


def _without_bwrap(empty: str) -> list[str]:
    if os.geteuid() != 0 or not _BWRAP or not shutil.which("unshare"):
        pytest.skip("hiding bwrap from one node needs root, bwrap and unshare")
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", _HIDE, "sh", empty, _BWRAP,
                            "sh", "-c", "! command -v bwrap >/dev/null || test ! -x \"$(command -v bwrap)\""],
                           capture_output=True, timeout=30)
    if probe.returncode != 0:
        pytest.skip(f"no mount namespace here: {probe.stderr.decode(errors='replace')[-300:]}")
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", _HIDE, "sh", empty, _BWRAP]


@pytest.mark.parametrize("how", ["run", "dry-run", "sweep"])
@pytest.mark.parametrize("form", ["http://{address}", "{address}0x"])
def test_an_address_of_another_form_is_refused_naming_the_flag(tmp_path, form, how):
    """Refused by its form, before any connection: no cluster needs to be there (a head's
    HOST:PORT behind http:// passed the reachability check, and ray.init refused it after
    the run folder had opened, naming RAY_ADDRESS)."""
    address = form.format(address="127.0.0.1:6399")  # nothing listens there: it is never asked
    run = ["--mode", "shell", "--data", str(SHELL_TASKS), "--output-dir", str(tmp_path / "out"),
           "--backend", "ray", "--ray-address", address, "--no-progress"]
    args = {"dry-run": [*run, "--dry-run"],
            "sweep": ["vms", "sweep", "--backend", "ray", "--ray-address", address]}.get(how, run)
    proc = subprocess.run([*_CLI, *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    said = " ".join(proc.stderr.split())
    why = "its scheme is http://, not ray://" if form.startswith("http") else f"its port '{address.split(':')[-1]}' is"
    assert f"--ray-address {address}: not a Ray cluster's address ({why}" in said, said
    assert "RAY_ADDRESS" not in said and "Traceback" not in said, said
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_node_without_bubblewrap_is_left_out_and_the_run_goes_on_at_the_others(cluster, tmp_path):
    cl, nodes = cluster
    known = {cl.head_node.node_id} | {n.node_id for n in nodes}
    (empty := tmp_path / "empty").write_text("")
    log = tmp_path / "ray-start.log"
    with ray_start_node(cl.address, log, wrap=_without_bwrap(str(empty))) as node:
        deadline = time.monotonic() + 120
        while "Ray runtime started" not in log.read_text() and node.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert "Ray runtime started" in log.read_text(), log.read_text()[-2000:]
        proc = subprocess.Popen(_cli(tmp_path, cl.address, "nobwrap"), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        stdout, stderr = communicate(proc, 300)
    assert proc.returncode == 0, stderr[-3000:]
    run_dir = tmp_path / "nobwrap"
    finals = assert_exactly_once(run_dir, {f"{task_id}#0" for task_id in SHELL_IDS})
    assert {r["status"] for r in finals.values()} == {"success"}, finals
    summary = json.loads((run_dir / "summary.json").read_text())
    left_out = summary["ray"]["nodes_left_out"]
    assert len(left_out) == 1 and next(iter(left_out)) not in known, summary["ray"]
    (node_id, reason), = left_out.items()
    assert "the process provider cannot run there: bubblewrap (bwrap) is not installed" in reason, reason
    assert f"node {node_id[:8]} is left out of the run: the process provider cannot run there" in stderr, stderr[-3000:]
    assert node_id not in summary["ray"]["nodes"] and {r["node"] for r in finals.values()} <= known, summary["ray"]
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    assert [e for e in events if e["event"] == "node_left_out" and "bubblewrap" in e["reason"]], events[-10:]
