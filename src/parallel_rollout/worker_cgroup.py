"""A worker's cgroup: what its agent starts dies with the worker, even out of its session.

A process group (``process_group``) holds what a worker's agent starts until a process leaves
it (``setsid``, ``start_new_session=True``); no process leaves a cgroup by itself. So where
the host lets it (cgroup v2, writable: root, or a delegated subtree) a worker also moves into
a cgroup of its own as it starts (``join``), named by a token its starter draws (never by
its pid, which the kernel recycles while another run's worker may take it)::

    <the cgroup the worker started in>/parallel-rollout-workers/<token>

beneath the one it started in, so every limit on that one still holds (it gets no
controllers of its own: the processes are charged to it as before). Once the worker has
ended, whoever saw it end (its backend, its watcher: both in the cgroup it started in)
``kill``\\ s the cgroup and every cgroup below it (``cgroup.kill``; on Linux < 5.14 the tree
frozen, each process SIGKILLed, thawed) and removes them, waiting half a second at most for
a large process's memory to be freed: a folder still busy then is left, and removed by the
next worker that joins (``_sweep``, once it is empty). A worker whose runner died has a
helper it starts do it (``leave``, then ``kill``: ``process_group.die_with_group``). Where
there is no such cgroup (cgroup v1 only, no write access, another OS) ``join`` does nothing
and the process group is all there is.

Under systemd, a unit without ``Delegate=yes`` is not meant to get cgroups of others below
its own: systemd still kills them with the unit, but set ``Delegate=yes`` on a service that
runs a runner. It imports nothing of the project: a Ray actor's watcher runs it.
"""

from __future__ import annotations

import os
import signal
import time

#: the folder of the workers' cgroups beneath the cgroup they started in
WORKERS = "parallel-rollout-workers"
#: rounds of SIGKILLs where the kernel can neither kill a cgroup nor freeze one
_KILL_ROUNDS = 50
#: how long a kill waits for the cgroup to empty before it leaves the folder to a sweep: a
#: wait only where the worker left processes behind (a killed sleep is gone in a few ms, a
#: process of 6 GB in ~0.4 s), on the engine's thread
_EMPTY_S = 0.5
#: how old an empty folder must be before a sweep removes it: a worker makes its folder
#: and then moves in, and a sweep must not take the folder from between the two
_SWEEP_AGE_S = 60.0
#: (this process's pid, the token of the worker cgroup it joined): ``joined``; a fork is in the
#: cgroup too but did not join it
_joined: tuple[int, str] | None = None


def folder(token: str) -> str | None:
    """The cgroup of the worker whose starter drew ``token``, for a caller in the cgroup the
    worker started in; None where there is no cgroup v2 hierarchy of this process's."""
    own = _own_v2()
    return None if own is None else os.path.join(own, WORKERS, token)


def join(token: str | None) -> bool:
    """Move this process (all its threads) into its worker cgroup; False where it cannot
    (the process group is all there is then)."""
    path = None if token is None else folder(token)
    if path is None:
        return False
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        _sweep(os.path.dirname(path))
        os.mkdir(path)
    except OSError:
        return False
    try:
        with open(os.path.join(path, "cgroup.procs"), "w") as procs:
            procs.write("0")
    except OSError:
        _remove(path)
        return False
    global _joined
    _joined = (os.getpid(), token)
    return True


def joined() -> str | None:
    """The token of the worker cgroup this process joined (``join``) while it is still in
    it, or in a cgroup below it (its agent may have made one); None otherwise."""
    if _joined is None or _joined[0] != os.getpid():
        return None
    return _joined[1] if _enclosing(_joined[1]) else None


def leave(token: str) -> bool:
    """Move this process out of the worker cgroup of ``token`` (it is in it, or below it)
    into the cgroup that one was made in, from where ``kill(token)`` reaches it as the
    backend's does: for the helper a worker starts (``process_group.die_with_group``), not the
    worker, whose threads would run on outside it. False where the move is refused."""
    path = _enclosing(token)
    return path is not None and _write(os.path.join(os.path.dirname(os.path.dirname(path)), "cgroup.procs"), "0")


def kill_from_inside(token: str) -> None:
    """SIGKILL the worker cgroup of ``token`` from a process in it (or below it), this one
    with it (``cgroup.kill``; where the kernel has none, nothing: a freeze would freeze the
    caller too). The folder is left to a sweep."""
    path = _enclosing(token)
    if path is not None:
        _write(os.path.join(path, "cgroup.kill"), "1")


def _enclosing(token: str) -> str | None:
    """The worker cgroup of ``token`` if this process is in it or below it, else None."""
    own, tail = _own_v2(), f"/{WORKERS}/{token}"
    if own is None:
        return None
    head, found, _ = f"{own}/".partition(f"{tail}/")
    return head + tail if found else None


def kill(token: str | None) -> None:
    """SIGKILL every process in the worker cgroup of ``token`` and the cgroups below it, and
    remove them as far as they are empty already (the rest is swept later)."""
    path = None if token is None else folder(token)
    if path is None or not os.path.isdir(path):
        return
    try:
        with open(os.path.join(path, "cgroup.kill"), "w") as kill_file:
            kill_file.write("1")  # Linux >= 5.14: the whole tree at once, a fork in between too
    except OSError:
        _kill_each(path)
    deadline = time.monotonic() + _EMPTY_S
    while not _remove_tree(path) and time.monotonic() < deadline:
        time.sleep(0.005)  # killed, its memory still being freed


def _kill_each(path: str) -> None:
    """Kill the tree below ``path`` a process at a time, round after round till none is
    left: frozen first where the kernel can (Linux >= 5.2; a fatal signal still reaches a
    frozen process), so that forks do not race the rounds."""
    frozen = _write(os.path.join(path, "cgroup.freeze"), "1")
    try:
        for _ in range(_KILL_ROUNDS):
            members = [(cgroup, pid) for cgroup in _tree(path) for pid in _members(cgroup)]
            if not members:
                break
            for cgroup, pid in members:
                kill_member(pid, f"/{WORKERS}/{os.path.relpath(cgroup, os.path.dirname(path))}")
            time.sleep(0.001)  # killed ones leave the list as they end
    finally:
        if frozen:
            _write(os.path.join(path, "cgroup.freeze"), "0")


def kill_member(pid: int, cgroup: str) -> bool:
    """SIGKILL ``pid`` if it is still a live process of the cgroup whose path ends with
    ``cgroup`` (as ``/proc/PID/cgroup`` names it); whether it was. A pidfd pins the process,
    so a pid recycled since the cgroup's ``cgroup.procs`` was read is never hit."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as stat_file:
            stat = stat_file.read()
        if stat[stat.rfind(")") + 2:][:1] in ("Z", "X", ""):
            return False  # exited, waiting for its parent: nothing left to kill
        with open(f"/proc/{pid}/cgroup") as lines:
            if not any(line.rstrip("\n").endswith(cgroup) for line in lines):
                return False
        signal.pidfd_send_signal(fd, signal.SIGKILL)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def _sweep(parent: str) -> None:
    """Remove the workers' cgroups below ``parent`` that are empty and older than a start:
    those a kill left while they emptied, or whose run was killed before it could remove them."""
    try:
        names = os.listdir(parent)
    except OSError:
        return
    now = time.time()
    for name in names:
        path = os.path.join(parent, name)
        try:
            old = now - os.stat(path).st_ctime > _SWEEP_AGE_S
        except OSError:
            continue
        if old and os.path.isdir(path) and not _populated(path):
            _remove_tree(path)


def _own_v2() -> str | None:
    """This process's cgroup in the cgroup v2 hierarchy (a pure v2 host, or a hybrid one's
    ``unified`` mount), as an existing folder; None when there is none. A mount of a subtree
    (its root field not ``/``) serves the cgroups inside that subtree."""
    try:
        with open("/proc/self/cgroup") as lines:
            own = next((line.rstrip("\n")[3:] for line in lines if line.startswith("0::")), None)
        with open("/proc/self/mountinfo") as lines:
            mounts = [line.split() for line in lines]
    except OSError:
        return None
    if own is None or own.startswith("/.."):  # outside our cgroup namespace
        return None
    for fields in mounts:
        if "-" not in fields[6:] or fields[fields.index("-", 6) + 1] != "cgroup2":
            continue
        root, mountpoint = fields[3], fields[4]
        if root == "/":
            rel = own
        elif own == root or own.startswith(root.rstrip("/") + "/"):
            rel = own[len(root.rstrip("/")):]
        else:
            continue  # a mount of another subtree
        path = os.path.join(mountpoint, rel.lstrip("/"))
        if os.path.isdir(path):
            return path
    return None


def _tree(path: str) -> list[str]:
    """``path`` and every cgroup below it, deepest first."""
    return [top for top, _, _ in os.walk(path, topdown=False)]


def _members(cgroup: str) -> list[int]:
    try:
        with open(os.path.join(cgroup, "cgroup.procs")) as procs:
            return [int(line) for line in procs if line.strip()]
    except OSError:
        return []


def _populated(path: str) -> bool:
    try:
        with open(os.path.join(path, "cgroup.events")) as events:
            return "populated 1" in events.read()
    except OSError:
        return True  # cannot tell: leave it


def _remove_tree(path: str) -> bool:
    """Remove ``path`` and the cgroups below it, deepest first; whether ``path`` is gone."""
    for cgroup in _tree(path):
        _remove(cgroup)
    return not os.path.isdir(path)


def _remove(path: str) -> bool:
    try:
        os.rmdir(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


def _write(path: str, text: str) -> bool:
    try:
        with open(path, "w") as handle:
            handle.write(text)
    except OSError:
        return False
    return True
