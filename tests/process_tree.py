"""Where a run's processes are, for tests that kill or measure them: its workers are forked
from a server (src/parallel_rollout/backends/worker_start.py), not children of the runner."""

from __future__ import annotations

import time

import psutil


def fork_servers(root: psutil.Process | None = None) -> list[psutil.Process]:
    """The multiprocessing fork servers among ``root``'s children (this process by default):
    a run's workers are forked from one (backends/worker_start.py)."""
    found = []
    for proc in (root or psutil.Process()).children():
        try:
            if "multiprocessing.forkserver" in " ".join(proc.cmdline()):
                found.append(proc)
        except psutil.Error:
            pass
    return found


def worker_processes(root: psutil.Process | None = None) -> list[psutil.Process]:
    """The rollout workers of the runs of ``root`` (this process by default): the children
    of its fork servers."""
    found = []
    for server in fork_servers(root):
        try:
            found += [p for p in server.children() if p.status() != psutil.STATUS_ZOMBIE]
        except psutil.Error:
            pass
    return found


def sleeps_left(marker: str, wait_s: float = 5.0) -> list[psutil.Process]:
    """The live ``sleep <marker>`` processes still there after up to ``wait_s`` (what an
    agent of tests/lifecycle_plugins.py started), killed once counted: one leak fails its
    own test, not the next one's leak check."""
    def found() -> list[psutil.Process]:
        return [p for p in psutil.process_iter(["cmdline", "status"])
                if p.info["cmdline"] == ["sleep", marker] and p.info["status"] != psutil.STATUS_ZOMBIE]

    deadline = time.monotonic() + wait_s
    left = found()
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = found()
    for proc in left:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    return left
