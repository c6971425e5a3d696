"""A worker's process group: what its agent starts dies with the worker.

Each worker process leads a process group of its own (``lead_group``, before it runs an
attempt). The processes its agent starts join it, and stay in it when they leave the
worker's process tree (a shell's ``cmd &``, a double fork, the children of a worker that
died, which init adopts). Once the worker has ended, whichever way (its run's end, a
timeout kill, a death, ``os._exit``), ``kill_group`` SIGKILLs what is left of the group. It
is called by whoever sees the worker end on the worker's host::

    local:  worker process ── ends ──► LocalBackend (its parent) ── kill_group(pid, token)
    ray:    worker actor ──── ends ──► its watcher (``watch_group``) ── kill_group(pid, token)
    local, its runner dead:  worker process ── sees its pipe close ── its helper (``die_with_group``)

A Ray worker actor has no such parent: the driver may be on another host, and on a lost node
the raylet dies with the actor. So the actor starts a watcher on its node as it starts: a
process that leaves the actor's tree and group at once (Ray kills a worker's own children as
it exits: the watcher must outlive it), holds a pidfd of the actor (a reused pid cannot fool
it) and kills the group as soon as the actor is gone, then exits. It is this module, run as
``python -m parallel_rollout.process_group PID [CGROUP]`` (``_self_argv``); it imports nothing of
the project but ``worker_cgroup``, so a watcher costs an idle interpreter and no more. Run with
``--kill PID CGROUP`` it is the helper a worker whose runner died starts (``die_with_group``).

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
import threading
import time
from typing import NoReturn

from . import worker_cgroup

#: how often a watcher without pidfds (Linux < 5.3, macOS) looks whether its process ended
_POLL_S = 0.5
#: how long a worker waits for its watcher to be set up
_WATCH_START_S = 60.0
#: the pid of this process once it leads its group (``lead_group``; a fork does not)
_leader: int | None = None
#: how long a worker whose runner died waits for its helper to kill it (``die_with_group``)
_HELPER_S = 10.0
#: held by the first thread of a worker that ends with its group: one helper, not one a thread
_dying = threading.Lock()


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
    session of its own as its command is killed), so its cgroup is killed from outside, as its
    backend would, by a helper it starts (this module, ``--kill``: a new interpreter, no fork
    of a threaded process), which leaves the worker's group and cgroup (a session of its own,
    ``worker_cgroup.leave``), then kills both (``kill_group``; a freeze where the kernel has no
    ``cgroup.kill``). Where the helper cannot leave, it kills the group, then the cgroup from
    inside with itself. Where it cannot start, fails or hangs (``_HELPER_S``), the worker
    kills its cgroup from inside, else (no ``cgroup.kill``) its group."""
    if _leader == os.getpid():
        if not _dying.acquire(blocking=False):
            _dying.acquire()  # another thread is at it: wait for the end it brings
        token = worker_cgroup.joined()
        if token is not None:
            _kill_by_helper(_leader, token)
            worker_cgroup.kill_from_inside(token)  # returns only where the kernel has no cgroup.kill
        try:
            os.killpg(_leader, signal.SIGKILL)
        except OSError:
            pass
    os._exit(1)


def _kill_by_helper(pid: int, token: str) -> None:
    """Start the helper that kills the group ``pid`` leads and its worker cgroup ``token``
    (``_kill_for``), and wait for it: this returns only where it did not kill this process."""
    try:
        helper = subprocess.Popen(_helper_argv(pid, token), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError:  # no process to be had (a full pids.max, no memory)
        return
    try:
        helper.wait(_HELPER_S)
    except subprocess.TimeoutExpired:
        helper.kill()


def _helper_argv(pid: int, token: str) -> list[str]:
    return _self_argv("--kill", str(pid), token)


def _kill_for(pid: int, token: str) -> None:
    """The helper of ``die_with_group`` (started in the worker's cgroup, in a session of its
    own): out of the cgroup, then the group and the cgroup killed as a backend kills them;
    where it cannot leave, the group, then the cgroup from inside, with itself."""
    if worker_cgroup.leave(token):
        kill_group(pid, token)
    else:
        kill_group(pid)
        worker_cgroup.kill_from_inside(token)


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
    subprocess.run(_self_argv(str(os.getpid()), *([cgroup] if cgroup else [])),
                   check=True, timeout=_WATCH_START_S, stdin=subprocess.DEVNULL, start_new_session=True)


def _self_argv(*args: str) -> list[str]:
    """This module run as a program (``args``: its arguments) by this interpreter, with this
    package from where it was imported: isolated (``-I -S``: no PYTHONPATH, no site folder,
    no current folder), since a worker's ``sys.path`` may have it where the environment does
    not (a checkout run by its script, a runner that put it there), or another of that name."""
    top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return [sys.executable, "-I", "-S", "-c", _RUN_SELF, top, *args]


#: what ``_self_argv`` runs: its first argument is the folder this package lies in
_RUN_SELF = ("import runpy, sys; sys.path.insert(0, sys.argv.pop(1)); "
             f"runpy.run_module({__name__!r}, run_name='__main__', alter_sys=True)")


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
    if sys.argv[1] == "--kill":
        _kill_for(int(sys.argv[2]), sys.argv[3])
    else:
        _watch(int(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else None)
