"""A uid of its own for each VM's commands: a process sandbox's when the runner is root,
a docker container's always (the agent is the container's root).

The kernel counts some limits per user, whatever namespace a process is in: inotify
instances and watches, RLIMIT_NPROC, POSIX message queues, locked memory. VMs whose
commands ran as one uid shared them, so one task that held 128 inotify instances made
``inotify_init`` fail in every other VM. Both providers take from one range, so a sandbox
and a container never share a uid either. Each VM therefore takes a uid of its own from a
range, holds it while it lives and gives it back when it stops. A process VM takes one for
each folder its sandboxes take turns in (``vm0``, its standbys' ``vm0.b`` …: 2 or 3 by
default, ``standby.py``), so the sandbox a reset kills behind the one it hands out never
shares a uid with it; a container VM keeps one across its resets::

    first = $PARALLEL_ROLLOUT_SANDBOX_UID (64000)      the range: first .. first + 999
    acquire(key)   ──► the lowest uid no VM of any run on this machine holds, and no
                       account or group of the host has
                       (a lock file per uid: flock on /tmp/parallel-rollout/uids/<uid>)
    release(key)   ──► closes the lock: the uid is free again (also when the owner dies)

The lock is an ``flock`` held by the process that owns the VM, so two runs on one machine
never hand out one uid twice, and a killed run frees its uids with its last file descriptor.

**A full range** is never a uid outside it, nor a VM without one: a pool that alone needs
more uids than the range holds is a ConfigError before anything starts (``check_room``: with
``--num-vms 400`` a process VM's 2-3 folders take 800-1200), and a boot that finds every uid
held (by other runs too) is a VMError; both name the range and ``$PARALLEL_ROLLOUT_SANDBOX_UID``.
"""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path

from ...errors import ConfigError, VMError
from .common import secure_base_dir
from .host_dirs import UIDS_LOCK_DIR

#: where the first uid comes from, and its default
SANDBOX_UID_ENV = "PARALLEL_ROLLOUT_SANDBOX_UID"
DEFAULT_SANDBOX_UID = 64000
#: how many uids the range holds: VMs' folders and containers alive at once on one machine,
#: across runs
UID_RANGE = 1000
#: the lock files of the range, one per uid: host-wide, whatever folder a run's VMs use
LOCK_DIR = UIDS_LOCK_DIR


def first_uid() -> int:
    """The range's first uid (and gid): ``$PARALLEL_ROLLOUT_SANDBOX_UID`` or 64000."""
    value = os.environ.get(SANDBOX_UID_ENV) or str(DEFAULT_SANDBOX_UID)
    if not value.isdigit() or int(value) == 0:
        raise ConfigError(f"{SANDBOX_UID_ENV} must be a non-zero uid, got {value!r}")
    if int(value) + UID_RANGE > 2**32 - 2:
        raise ConfigError(f"{SANDBOX_UID_ENV}={value} leaves no room for {UID_RANGE} uids")
    return int(value)


def account_ids() -> set[int]:
    """The uids of the host's accounts and the gids of its groups (a sandbox's uid is its
    gid too)."""
    import grp
    import pwd

    return {entry.pw_uid for entry in pwd.getpwall()} | {entry.gr_gid for entry in grp.getgrall()}


class SandboxUids:
    """The uids this process's VMs hold, one per key (a VM id, or a VM's folder);
    thread-safe. Not ``enabled`` (a runner that is not root: its VMs' commands keep its
    uid) it hands out none."""

    def __init__(self, enabled: bool = True, first: int | None = None, count: int = UID_RANGE,
                 lock_dir: Path | None = None) -> None:
        self.enabled = enabled
        self.first = first_uid() if first is None else first
        self.count = count
        self.lock_dir = lock_dir or LOCK_DIR
        #: ids of the range that an account or a group of the host has (Debian's libvirt-qemu
        #: is 64055): never handed out, or a sandbox's commands would share that account's
        #: per-user limits and own its files
        self.accounts = account_ids() & set(range(self.first, self.first + self.count))
        self._lock = threading.Lock()
        self._held: dict[str, tuple[int, int]] = {}  # key -> (uid, lock fd)

    def describe(self) -> str:
        """The range, and how to move it: for error messages."""
        return (f"uids {self.first}-{self.first + self.count - 1}, whose start "
                f"${SANDBOX_UID_ENV} moves")

    def check_room(self, vms: int, per_vm: int = 1, fewer: str = "") -> None:
        """ConfigError when ``vms`` VMs that take ``per_vm`` uids each need more than the
        range holds, before any boots: else the VMs past it would each fail to boot and spend
        the pool's replacements. ``fewer``: another way to take fewer uids, for the message."""
        room = self.count - len(self.accounts)
        if self.enabled and vms * per_vm > room:
            raise ConfigError(
                f"{vms} VMs take {vms * per_vm} sandbox uids ({per_vm} each), more than the "
                f"{room} of the range ({self.describe()}) that no account has: run fewer VMs at "
                f"once{fewer}")

    def acquire(self, key: str) -> int | None:
        """``key``'s uid: the one it holds, else the lowest free one of the range (None
        when not enabled); VMError when every uid is held."""
        if not self.enabled:
            return None
        with self._lock:
            if key in self._held:
                return self._held[key][0]
            secure_base_dir(self.lock_dir)
            for uid in range(self.first, self.first + self.count):
                if uid in self.accounts:
                    continue
                fd = os.open(self.lock_dir / str(uid), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    continue
                self._held[key] = (uid, fd)
                return uid
        raise VMError(f"all {self.count} sandbox uids ({self.describe()}) are held by live VMs "
                      f"on this machine, {len(self._held)} of them by this run; {key} has none: "
                      "run fewer VMs at once, or start the other runs with a range of their own")

    def uid(self, key: str) -> int | None:
        """The uid ``key`` holds, or None."""
        with self._lock:
            held = self._held.get(key)
            return held[0] if held else None

    def release(self, key: str) -> None:
        """Give ``key``'s uid back (a no-op when it holds none)."""
        with self._lock:
            held = self._held.pop(key, None)
        if held is not None:
            os.close(held[1])
