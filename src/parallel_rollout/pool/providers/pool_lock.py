"""The lock a pool holds on its folder while it lives, for sweeps that cannot trust a pid.

A VM folder records its owner's pid (``common.owner_alive``), but a pid means nothing to a
sweep in another PID namespace (``unshare --pid --mount-proc``: no such process there). So
the pool also holds a shared flock on its folder (``hold_pool_lock``, taken as each VM folder
is made): a lock is the folder's in every namespace, and it ends with the process that holds
it. A sweep leaves a pool folder whose lock is held (``pool_locked``; ``pool_held`` waits out
a child that was being forked when the owner died) as it does one whose owner's pid runs.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from pathlib import Path

from ...run_lock import flock_held

#: pool folder -> the descriptor through which this process holds its lock (``hold_pool_lock``)
_pool_locks: dict[str, int] = {}


def hold_pool_lock(pool_dir: Path) -> None:
    """Hold a shared flock on ``pool_dir`` (the folder of this process's pool) until this
    process exits: what tells a sweep the pool is live where its owner's pid tells nothing
    (the sweep in another PID namespace). Called at each VM folder made: a pool folder made
    anew (its last VM's stop removed the old one) is locked again. Best effort: without it
    the owner's pid still says the pool lives."""
    key = str(pool_dir)
    held = _pool_locks.get(key)
    try:
        now = os.stat(pool_dir)
        if held is not None and (os.fstat(held).st_ino, os.fstat(held).st_dev) == (now.st_ino, now.st_dev):
            return
        fd = os.open(pool_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    fcntl.flock(fd, fcntl.LOCK_SH)  # a sweep holds it exclusively for a moment at most
    if held is not None:
        os.close(held)
    _pool_locks[key] = fd


def _drop_inherited_pool_locks() -> None:
    """A forked child closes its copies of the parent's lock descriptors: the lock must end
    with the pool's owner, not with a child that outlives it."""
    for fd in _pool_locks.values():
        with contextlib.suppress(OSError):
            os.close(fd)
    _pool_locks.clear()


os.register_at_fork(after_in_child=_drop_inherited_pool_locks)


def pool_locked(pool_dir: Path) -> bool:
    """Whether a live process holds ``pool_dir``'s lock (``hold_pool_lock``), in whatever
    PID namespace it runs."""
    return flock_held(pool_dir)


def pool_held(pool_dir: Path, settle_s: float = 1.0) -> bool:
    """Whether ``pool_dir``'s lock stays held for ``settle_s``: a child its owner was forking
    when it was killed holds a copy of the lock's descriptor until it execs (close-on-exec), a
    moment in which a sweep must not take the dead pool for a live one."""
    deadline = time.monotonic() + settle_s
    while pool_locked(pool_dir):
        if time.monotonic() >= deadline:
            return True
        time.sleep(0.05)
    return False
