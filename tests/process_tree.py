"""Where a run's processes are, for tests that kill or measure them: its workers are forked
from a server (src/parallel_rollout/backends/worker_start.py), not children of the runner."""

from __future__ import annotations

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
