"""A worker's process group: what its agent starts dies with the worker.

Each worker process leads a process group of its own (``lead_group``, before it runs an
attempt). The processes its agent starts join it, and stay in it when they leave the
worker's process tree (a shell's ``cmd &``, a double fork, the children of a worker that
died, which init adopts). Once the worker has ended, whichever way (its run's end, a
timeout kill, a death, ``os._exit``), ``kill_group`` SIGKILLs what is left of the group. It
is called by whoever sees the worker end on the worker's host::

    local:  worker process ── ends ──► LocalBackend (its parent) ── kill_group(pid)
    ray:    worker actor ──── ends ──► its watcher (``watch_group``) ── kill_group(pid)

A Ray worker actor has no such parent: the driver may be on another host, and on a lost node
the raylet dies with the actor. So the actor starts a watcher on its node as it starts: a
process that leaves the actor's tree and group at once (Ray kills a worker's own children as
it exits: the watcher must outlive it), holds a pidfd of the actor (a reused pid cannot fool
it) and kills the group as soon as the actor is gone, then exits. It is this module, run as
``python -m parallel_rollout.process_group PID``; it imports nothing of the project, so a
watcher costs an idle interpreter and no more.

A process that leaves the group itself (``setsid``, ``start_new_session=True``) is out of
its reach, so the worker also moves into a cgroup of its own where the host lets it (cgroup
v2, writable: root, or a delegated subtree), ``<its cgroup>/parallel-rollout-workers/<pid>``
beneath the one it started in (so every limit on that one still holds). No process leaves a
cgroup by itself; ``kill_group`` kills what is left in it too (``cgroup.kill``, or each
process till none is left) and removes it. Where there is none (cgroup v1 only, no write
access) the process group is all there is. The pool's VMs belong to another process (the
Manager, a pool actor), in another group and cgroup.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time

#: how often a watcher without pidfds (Linux < 5.3, macOS) looks whether its process ended
_POLL_S = 0.5
#: how long a worker waits for its watcher to be set up
_WATCH_START_S = 60.0
#: the folder of the workers' cgroups beneath the cgroup they started in
_WORKERS = "parallel-rollout-workers"
#: rounds of SIGKILLs where the kernel has no ``cgroup.kill`` (a fork races each round)
_KILL_ROUNDS = 50
#: how long a killed cgroup may take to empty before it is left for the next call
_EMPTY_S = 1.0


def lead_group() -> None:
    """Make this process the leader of a process group of its own, and of a cgroup of its own
    where it can (``worker_cgroup``): what it starts joins both."""
    if os.getsid(0) != os.getpid():  # a session leader leads its group already, and may not leave it
        os.setpgid(0, 0)
    folder = worker_cgroup(os.getpid())
    if folder is None:
        return
    try:
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "cgroup.procs"), "w") as procs:
            procs.write("0")  # this process, all its threads
    except OSError:
        _remove(folder)  # not ours to use here: the process group is all


def kill_group(pid: int | None) -> None:
    """SIGKILL what is left of the process group and the cgroup that ``pid`` led, once that
    process has ended: those it left behind (reparented to init, out of a tree kill's reach,
    in a session of their own) die with it."""
    if pid is None:
        return
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # no process left in it (or never made: the worker died before its first line)
    folder = worker_cgroup(pid)
    if folder is not None and os.path.isdir(folder):
        _kill_cgroup(folder)


def worker_cgroup(pid: int) -> str | None:
    """The cgroup the worker ``pid`` leads, for a caller in the cgroup it started in (its
    backend, its watcher): ``<that cgroup>/parallel-rollout-workers/<pid>`` in the cgroup v2
    hierarchy; None where there is none."""
    own = _own_v2()
    return None if own is None else os.path.join(own, _WORKERS, str(pid))


def _own_v2() -> str | None:
    """This process's cgroup in the cgroup v2 hierarchy (a pure v2 host, or a hybrid one's
    ``unified`` mount), as a folder; None when there is none."""
    try:
        with open("/proc/self/cgroup") as lines:
            path = next((line.rstrip("\n")[3:] for line in lines if line.startswith("0::")), None)
        with open("/proc/self/mounts") as lines:
            mounts = [line.split()[1] for line in lines if line.split()[2:3] == ["cgroup2"]]
    except OSError:
        return None
    if path is None or not mounts or path.startswith("/.."):  # outside our cgroup namespace
        return None
    return os.path.join(mounts[0], path.lstrip("/"))


def _kill_cgroup(folder: str) -> None:
    """Kill every process in the cgroup ``folder`` and remove it; what cannot be (a process
    that outlives its SIGKILL: one in the kernel) stays, and is tried again at the next call."""
    try:
        with open(os.path.join(folder, "cgroup.kill"), "w") as kill:
            kill.write("1")  # Linux >= 5.14: all at once, a fork in between too
    except OSError:
        for _ in range(_KILL_ROUNDS):  # older: each process, till a round finds none forking
            pids = _members(folder)
            if not pids:
                break
            for member in pids:
                try:
                    os.kill(member, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
    deadline = time.monotonic() + _EMPTY_S
    while not _remove(folder) and time.monotonic() < deadline:
        time.sleep(0.01)  # killed, not yet gone from it


def _members(folder: str) -> list[int]:
    try:
        with open(os.path.join(folder, "cgroup.procs")) as procs:
            return [int(line) for line in procs if line.strip()]
    except OSError:
        return []


def _remove(folder: str) -> bool:
    try:
        os.rmdir(folder)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


def watch_group() -> None:
    """Start the watcher that kills this process's group once this process is gone (before
    ``lead_group``: the watcher stays out of the cgroup it kills, and names it from the one
    they share); returns when the watcher holds its pidfd, out of this process's tree."""
    subprocess.run([sys.executable, "-m", __name__, str(os.getpid())], check=True, timeout=_WATCH_START_S,
                   stdin=subprocess.DEVNULL, start_new_session=True)


def _watch(pid: int) -> None:
    """The watcher: a pidfd of ``pid`` taken while its caller waits (so ``pid`` is still that
    process), a fork whose parent exits (the caller's wait ends; the watcher, adopted by init,
    is no child of the worker's), then wait for ``pid`` to end and kill its group."""
    try:
        handle: int | None = os.pidfd_open(pid)
    except ProcessLookupError:
        kill_group(pid)  # gone already
        return
    except (AttributeError, OSError):  # no pidfds here: poll
        handle = None
    if os.fork():
        os._exit(0)
    os.chdir("/")  # hold no folder of the worker's (a run folder, a mount)
    if handle is not None:
        select.select([handle], [], [])  # readable once the process has ended
    else:
        while _alive(pid):
            time.sleep(_POLL_S)
    kill_group(pid)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


if __name__ == "__main__":
    _watch(int(sys.argv[1]))
