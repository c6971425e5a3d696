"""A worker's cgroup (src/parallel_rollout/worker_cgroup.py) on this host's real cgroup v2
tree: what a kill reaches and removes, with the kernel's ``cgroup.kill`` and without it, and
what it leaves (another worker's cgroup, a folder still in use). Runs where a worker could
have one (root, or a delegated subtree); through a real run: tests/test_run_lifecycle.py."""

from __future__ import annotations

import os
import subprocess
import time

import psutil
import pytest

from parallel_rollout import worker_cgroup
from process_tree import needs_worker_cgroup

pytestmark = needs_worker_cgroup


@pytest.fixture
def cgroups():
    """Make worker cgroups (by token, with optional sub-cgroups) and start processes in them;
    kills and removes whatever a test leaves."""
    made, started = [], []

    def make(token: str, sub: str = "") -> str:
        path = os.path.join(worker_cgroup.folder(token), sub) if sub else worker_cgroup.folder(token)
        os.makedirs(path, exist_ok=True)
        made.append(worker_cgroup.folder(token))
        return path

    def start(cgroup: str, argv: list[str]) -> psutil.Process:
        proc = subprocess.Popen(argv, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(os.path.join(cgroup, "cgroup.procs"), "w") as procs:
            procs.write(str(proc.pid))
        started.append(proc)
        return psutil.Process(proc.pid)

    yield make, start
    for proc in started:
        proc.kill()
        proc.wait()
    for path in made:
        worker_cgroup._remove_tree(path)


def _gone(proc: psutil.Process) -> bool:
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_kill_reaches_the_cgroups_an_agent_made_below_its_worker_s_and_removes_them(cgroups):
    make, start = cgroups
    token = f"t{os.getpid()}-nested"
    top, below = make(token), make(token, "made-by-the-agent/deeper")
    procs = [start(top, ["sleep", "600"]), start(below, ["sleep", "600"])]
    other = start(make(f"t{os.getpid()}-other"), ["sleep", "600"])  # another worker's
    worker_cgroup.kill(token)
    assert all(_gone(p) for p in procs)
    assert not os.path.exists(top), "the worker's cgroup (or one below it) was left"
    assert not _gone(other), "another worker's cgroup was killed"


def test_without_cgroup_kill_each_process_of_the_tree_is_killed_even_while_it_forks(cgroups, monkeypatch):
    """Linux < 5.14 has no cgroup.kill: the tree is frozen and killed a process at a time;
    a shell that forks a sleep every millisecond does not outrun it."""
    make, start = cgroups
    token = f"t{os.getpid()}-each"
    top, below = make(token), make(token, "sub")
    # it forks once it is in its cgroup (``start`` moves it after its start): a sleep forked
    # before would be out of the kill's reach, and left
    forker = start(top, ["sh", "-c", "sleep 0.2; while :; do sleep 600 & sleep 0.001; done"])
    deep = start(below, ["sleep", "600"])
    time.sleep(0.4)
    assert len(forker.children()) > 3
    real_open = open

    def no_kill_file(name, *args, **kwargs):
        if str(name).endswith("cgroup.kill"):
            raise OSError(22, "no cgroup.kill on this kernel")
        return real_open(name, *args, **kwargs)

    monkeypatch.setattr(worker_cgroup, "open", no_kill_file, raising=False)
    worker_cgroup.kill(token)
    assert _gone(forker) and _gone(deep)
    assert not worker_cgroup._members(top) and not os.path.exists(top)


def test_a_sweep_removes_empty_worker_cgroups_left_behind_and_nothing_in_use(cgroups, monkeypatch):
    make, start = cgroups
    empty, busy = make(f"t{os.getpid()}-empty"), make(f"t{os.getpid()}-busy")
    make(f"t{os.getpid()}-empty", "sub")
    proc = start(busy, ["sleep", "600"])
    worker_cgroup._sweep(os.path.dirname(empty))  # young: a worker may be about to move in
    assert os.path.isdir(empty)
    monkeypatch.setattr(worker_cgroup, "_SWEEP_AGE_S", 0.0)
    worker_cgroup._sweep(os.path.dirname(empty))
    assert not os.path.exists(empty) and os.path.isdir(busy) and not _gone(proc)
