"""Where a run's processes are, for tests that kill, stop or measure them: its workers are
forked from a server (src/parallel_rollout/backends/worker_start.py), not children of the
runner; a sandbox's guest agent (server.py) is found above a command it runs."""

from __future__ import annotations

import os
import signal
import threading
import time

import psutil
import pytest

from parallel_rollout import worker_cgroup


def worker_cgroups_usable() -> bool:
    """Whether a worker started from this process can have a cgroup of its own
    (``worker_cgroup``): a folder made where it would be, and removed."""
    probe = worker_cgroup.folder(f"probe-{os.getpid()}")
    if probe is None:
        return False
    try:
        os.makedirs(os.path.dirname(probe), exist_ok=True)
        os.mkdir(probe)
        os.rmdir(probe)
    except OSError:
        return False
    return True


#: a process out of its worker's session is held by the worker's cgroup only, where there is one
needs_worker_cgroup = pytest.mark.skipif(not worker_cgroups_usable(), reason="no writable cgroup v2 tree here")


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


def sleeps_of(*markers: str) -> list[psutil.Process]:
    """The live ``sleep <marker>`` processes of any of ``markers``, zombies left out."""
    argvs = [["sleep", marker] for marker in markers]
    return [p for p in psutil.process_iter(["cmdline", "status"])
            if p.info["cmdline"] in argvs and p.info["status"] != psutil.STATUS_ZOMBIE]


def sleeps_left(marker: str, wait_s: float = 5.0) -> list[psutil.Process]:
    """The live ``sleep <marker>`` processes still there after up to ``wait_s`` (what an
    agent of tests/lifecycle_plugins.py started), killed once counted: one leak fails its
    own test, not the next one's leak check."""
    deadline = time.monotonic() + wait_s
    left = sleeps_of(marker)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = sleeps_of(marker)
    for proc in left:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    return left


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _parent(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def stop_guest_agents(markers: list[str], stopped: list[str], done: threading.Event, root: int | None = None) -> None:
    """For each marker, once: the guest agent (server.py inside a sandbox of ``root``'s
    processes, this process's by default) above the process whose command line holds it
    gets SIGSTOP, from outside, as an operator's ``kill -STOP`` would; ``stopped`` lists
    the markers done. Runs until every marker is done or ``done`` is set."""
    me, left = root or os.getpid(), list(markers)
    while left and not done.is_set():
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            command = _cmdline(int(name))
            marker = next((m for m in left if m in command), None)
            if marker is None:
                continue
            chain, pid = [], int(name)
            while pid > 1:
                chain.append(pid)
                pid = _parent(pid)
            if me not in chain:
                continue
            agents = [p for p in chain if "server.py" in _cmdline(p) and "bwrap" not in _cmdline(p).split()[0]]
            if agents:
                os.kill(agents[0], signal.SIGSTOP)
                stopped.append(marker)
                left.remove(marker)
        time.sleep(0.02)


def signal_at(proc, reached, signum: int, still=lambda: True) -> bool:
    """Send ``signum`` to ``proc`` at a moment of its own: once ``reached()`` (or it ended),
    it is stopped (SIGSTOP), ``still()`` asked, then signalled and let go on. Returns what
    ``still()`` said: whether the signal landed before the next step (the caller retries)."""
    while not reached() and proc.poll() is None:
        time.sleep(0.0002)
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        return still()
    finally:
        os.kill(proc.pid, signum)
        os.kill(proc.pid, signal.SIGCONT)
