"""The marks a node's sweep stores in the cluster's store as it starts (ray_logs.mark_start,
read by the driver's ray_cluster.Sweeps), on real Ray (tests/ray_cluster.py): a driver killed
(SIGKILL) after its sweep marked its start and before it read the mark left that mark in the
store for good, one more for every such run; the next run deletes the marks of drivers that
are dead, and a run's own as its sweeps end, so the store does not grow run after run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

import ray_cluster
from conftest import assert_exactly_once
from ray_cluster import _NODE, _cli, communicate

# the module's fixtures: a cluster (made when a test first asks for it) and the leak check
cluster, no_leaks = ray_cluster.cluster, ray_cluster.no_leaks

#: a start-up file (sitecustomize.py) for the Ray workers of a node whose PYTHONPATH names its
#: folder: a worker's first import of the module of the sweep's task (which Ray does once the
#: driver sent it the task) touches PR_TEST_SENT, then waits PR_TEST_IMPORT_S seconds
_LATE_IMPORT = """
import os, sys, time
if sys.argv and sys.argv[0].endswith("default_worker.py") and os.environ.get("PR_TEST_SENT"):
    class _Late:
        def find_spec(self, name, path=None, target=None):
            if name == "parallel_rollout.backends.ray_actors":
                open(os.environ["PR_TEST_SENT"], "a").close()
                time.sleep(float(os.environ["PR_TEST_IMPORT_S"]))
            return None
    sys.meta_path.insert(0, _Late())
"""


def _stored_marks(address: str) -> list[bytes]:
    """The keys of the sweeps' start marks in the cluster's store (read without joining as a job)."""
    from ray._raylet import GcsClient

    from parallel_rollout.backends.ray_logs import SWEEP_MARKS_NS

    return GcsClient(address=address).internal_kv_keys(b"", SWEEP_MARKS_NS.encode(), timeout=10)


def _wait_for(check, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what} within {timeout}s"
        time.sleep(0.2)


def test_the_sweep_marks_of_a_driver_killed_mid_sweep_are_deleted_by_the_next_run(cluster, tmp_path, monkeypatch):
    """A driver stopped once it sent a node its first sweep, killed (SIGKILL) once that sweep
    marked its start: the mark is in the store; the run resumed on the cluster runs every
    sample once, and leaves no mark in the store."""
    cl, _ = cluster
    site, sent = tmp_path / "site", tmp_path / "sent"
    site.mkdir()
    (site / "sitecustomize.py").write_text(_LATE_IMPORT)
    # the node's raylet's environment, and so its workers'
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("PR_TEST_SENT", str(sent))
    monkeypatch.setenv("PR_TEST_IMPORT_S", "5")
    node = cl.add_node(**_NODE)
    monkeypatch.undo()
    try:
        driver = subprocess.Popen(_cli(tmp_path, cl.address, "marks"), stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        try:
            _wait_for(lambda: sent.exists() or driver.poll() is not None, "the node got no sweep")
            assert driver.poll() is None, "the run ended before its node's sweep started"
            driver.send_signal(signal.SIGSTOP)  # it reads no mark from now on
            _wait_for(lambda: _stored_marks(cl.address), "the node's sweep marked no start")
        finally:
            driver.send_signal(signal.SIGKILL)
            driver.wait(timeout=30)
        assert _stored_marks(cl.address), "the killed driver's sweep left no mark"
    finally:
        cl.remove_node(node, allow_graceful=False)
    resumed = subprocess.Popen(_cli(tmp_path, cl.address, "marks", "--resume"), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    stderr = communicate(resumed, 240)[1]
    assert resumed.returncode == 0, stderr[-3000:]
    assert_exactly_once(tmp_path / "marks", {f"{task_id}#0" for task_id in ray_cluster.SHELL_IDS})
    assert _stored_marks(cl.address) == [], "a sweep's start mark is left in the cluster's store"
