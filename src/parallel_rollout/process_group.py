"""A worker's process group: what its agent starts dies with the worker.

Each worker process leads a process group of its own (``lead_group``, before it runs an
attempt). The processes its agent starts join it, and stay in it when they leave the
worker's process tree (a shell's ``cmd &``, a double fork, the children of a worker that
died, which init adopts). Once the worker has ended, whichever way (its run's end, a
timeout kill, a death, ``os._exit``), ``kill_group`` SIGKILLs what is left of the group. It
is called by whoever sees the worker end on the worker's host::

    local:  worker process ── ends ──► LocalBackend (its parent) ── kill_group(pid, token)
    ray:    worker actor ──── ends ──► its watcher (``watch_group``) ── kill_group(pid, token)
    local, its runner dead:  worker process ── sees its pipe close ── die_with_group()

A Ray worker actor has no such parent: the driver may be on another host, and on a lost node
the raylet dies with the actor. So the actor starts a watcher on its node as it starts: a
process that leaves the actor's tree and group at once (Ray kills a worker's own children as
it exits: the watcher must outlive it), holds a pidfd of the actor (a reused pid cannot fool
it) and kills the group as soon as the actor is gone, then exits. It is this module, run as
``python -m parallel_rollout.process_group PID [CGROUP]``; it imports nothing of the project
but ``worker_cgroup``, so a watcher costs an idle interpreter and no more.

A process that leaves the group itself (``setsid``, ``start_new_session=True``) leaves its
reach, not the worker's cgroup, where the host has one for it (``worker_cgroup``): a worker
led with a token joins it, and ``kill_group`` given the token kills it too. The pool's VMs
belong to another process (the Manager, a pool actor), in another group and cgroup.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from typing import NoReturn

from . import worker_cgroup

#: how often a watcher without pidfds (Linux < 5.3, macOS) looks whether its process ended
_POLL_S = 0.5
#: how long a worker waits for its watcher to be set up
_WATCH_START_S = 60.0
#: the pid of this process once it leads its group (``lead_group``; a fork does not)
_leader: int | None = None


def lead_group(cgroup: str | None = None) -> None:
    """Make this process the leader of a process group of its own, and of the worker cgroup
    of token ``cgroup`` where the host has one (``worker_cgroup.join``): what it starts
    joins both."""
    global _leader
    if os.getsid(0) != os.getpid():  # a session leader leads its group already, and may not leave it
        os.setpgid(0, 0)
    _leader = os.getpid()
    worker_cgroup.join(cgroup)


def die_with_group() -> NoReturn:
    """End this worker when nobody is left to kill what it led (its runner's pipe closed: the
    runner died, by SIGKILL too): its process group and its worker cgroup (with every cgroup
    below it), itself with them. A process that led none (``lead_group``) just exits.

    The worker's other threads still run meanwhile (an agent's may start a process in a
    session of its own as its command is killed), so the cgroup is killed from outside, as
    its backend would: by a single-threaded helper forked for it, which leaves the worker's
    group and cgroup first (``worker_cgroup.leave``), then kills both (``kill_group``),
    freezing the cgroup where the kernel has no ``cgroup.kill``. A helper that cannot leave
    kills the group, then the cgroup from inside, with itself."""
    if _leader == os.getpid():
        token = worker_cgroup.joined()
        try:
            helper = None if token is None else os.fork()
        except OSError:  # no fork to be had (a full pids.max): the group at least
            helper = None
        if helper == 0:
            try:
                os.setsid()
                if worker_cgroup.leave(token):
                    kill_group(_leader, token)
                else:
                    kill_group(_leader)
                    worker_cgroup.kill_from_inside(token)
            finally:
                os._exit(0)
        if helper:
            os.waitpid(helper, 0)  # the helper's kill; it returns only where the helper failed
        try:
            os.killpg(_leader, signal.SIGKILL)
        except OSError:
            pass
    os._exit(1)


def kill_group(pid: int | None, cgroup: str | None = None) -> None:
    """SIGKILL what is left of the process group that ``pid`` led, and of its worker cgroup
    of token ``cgroup``, once that process has ended: those it left behind (reparented to
    init, out of a tree kill's reach, in a session of their own) die with it."""
    if pid is not None:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass  # no process left in it (or never made: the worker died before its first line)
    worker_cgroup.kill(cgroup)


def watch_group(cgroup: str | None = None) -> None:
    """Start the watcher that kills this process's group (and worker cgroup of token
    ``cgroup``) once this process is gone; before ``lead_group``: the watcher stays out of the
    cgroup it kills, and finds it from the one they share. Returns when the watcher holds its
    pidfd, out of this process's tree."""
    subprocess.run([sys.executable, "-m", __name__, str(os.getpid()), *([cgroup] if cgroup else [])],
                   check=True, timeout=_WATCH_START_S, stdin=subprocess.DEVNULL, start_new_session=True)


def _watch(pid: int, cgroup: str | None) -> None:
    """The watcher: a pidfd of ``pid`` taken while its caller waits (so ``pid`` is still that
    process), a fork whose parent exits (the caller's wait ends; the watcher, adopted by init,
    is no child of the worker's), then wait for ``pid`` to end and kill its group."""
    try:
        handle: int | None = os.pidfd_open(pid)
    except ProcessLookupError:
        kill_group(pid, cgroup)  # gone already
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
    kill_group(pid, cgroup)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


if __name__ == "__main__":
    _watch(int(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else None)
