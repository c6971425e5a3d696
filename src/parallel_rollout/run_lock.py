"""The run folder's lock (``.lock``): one writer per folder, a batch run or an RL scheduler.

``lock_run_folder`` takes it (an flock, through filelock, and one on the folder) or raises ``RunLocked`` naming its
holder; ``run_folder_locked`` and ``lock_holder`` tell whether a live process holds it. The
lock itself says yes or no: ``/proc/locks`` lists only the holders of this process's PID
namespace (the kernel leaves out a lock whose pid means nothing here), so a run in a
container that shares the results folder, or under ``unshare --pid --fork``, was not listed
and its folder said free. ``/proc/locks`` only names the holder when it can; a holder it
does not list is "a process in another PID namespace".
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path
from typing import Any

from .errors import ConfigError, RunLocked

#: how long a run waits for a lock held by someone else before it is refused (exit 75): a
#: reader's probe (``flock_held``) holds the lock for two system calls, which must not
#: refuse a run that starts in that moment
PROBE_GRACE_S = 0.5


def run_folder_locked(run_dir: Path) -> bool:
    """Whether a live process holds ``run_dir``'s lock (``lock_run_folder``: a run still
    going), in whatever PID namespace it runs."""
    return lock_holder(run_dir) is not None


def lock_holder(run_dir: Path) -> int | None:
    """The pid of the process holding ``run_dir``'s lock, as ``/proc/locks`` lists it; 0 when
    it is held but the holder's pid cannot be seen from here (another PID namespace); None
    when no one holds it."""
    paths = (Path(run_dir) / ".lock", Path(run_dir))  # the folder's own: a .lock deleted under a run
    try:
        held = Path("/proc/locks").read_text()
    except OSError:
        held = ""
    for path in paths:
        try:
            lock = os.stat(path)
        except OSError:
            continue
        name = f"{os.major(lock.st_dev):02x}:{os.minor(lock.st_dev):02x}:{lock.st_ino}"
        # "1: FLOCK  ADVISORY  WRITE 22941 fe:00:2531780 0 EOF" (a waiter's line has "->" after "1:")
        for f in map(str.split, held.splitlines()):
            if len(f) > 5 and f[1] == "FLOCK" and f[5] == name:
                return int(f[4]) if f[4].isdigit() else 0
    return 0 if any(map(flock_held, paths)) else None


def flock_held(path: Path) -> bool:
    """Whether another open file holds an flock on ``path`` (a file or a folder), asked of the
    lock itself, in whatever PID namespace its holder runs: an exclusive lock tried without
    waiting (and let go at once) fails while anyone holds it, shared or exclusive."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:  # none there: no one ever held it (or none we may read: cannot tell)
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # and with it the lock just taken
    return False


def _holder_said(run_dir: Path) -> str:
    """" (pid 4242, running since 2026-12-01 02:15)": which process holds the lock, for an
    operator to tell a run still going from one that hangs; "" when no one does now."""
    pid = lock_holder(run_dir)
    if pid is None:
        return ""
    if pid == 0:
        return " (a process in another PID namespace: its pid cannot be seen from here)"
    try:
        import psutil

        since = time.strftime("%Y-%m-%d %H:%M", time.localtime(psutil.Process(pid).create_time()))
    except Exception:  # noqa: BLE001 - gone meanwhile, not ours to read: the pid alone
        return f" (pid {pid})"
    return f" (pid {pid}, running since {since})"


class FolderLock:
    """A run folder's two locks, held together: its ``.lock`` (what other versions and the
    tests' holders take) and an flock on the folder itself, which a cleanup deleting ``.lock``
    under a running run (``find -name .lock -delete``) does not free."""

    def __init__(self, file_lock: Any, folder_fd: int | None) -> None:
        self._file_lock = file_lock
        self._folder_fd: int | None = folder_fd

    def release(self) -> None:
        if self._folder_fd is not None:
            fd, self._folder_fd = self._folder_fd, None
            os.close(fd)  # and with it the folder's flock
        self._file_lock.release()


def _lock_folder(run_dir: Path) -> int | None:
    """An open descriptor of ``run_dir`` holding its flock; BlockingIOError when another
    process holds it past PROBE_GRACE_S (a reader's probe holds it for two system calls);
    None where a folder takes no flock (NFS's emulation wants a file open for writing):
    ``.lock`` alone then, as before."""
    try:
        fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    deadline = time.monotonic() + PROBE_GRACE_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() < deadline:
                time.sleep(0.05)
                continue
            os.close(fd)
            raise
        except OSError:
            os.close(fd)
            return None


def lock_run_folder(run_dir: Path, hint: str = "choose another --run-id") -> FolderLock:
    """The run folder's lock (``run_dir/.lock`` and the folder itself), held: one writer per
    folder, a batch run or an RL scheduler's engine. RunLocked (saying ``hint``) when another
    process holds it."""
    import filelock

    # not thread-local: a trainer may close its scheduler (release) from another thread
    lock = filelock.FileLock(str(Path(run_dir) / ".lock"), thread_local=False)
    try:
        lock.acquire(timeout=PROBE_GRACE_S, poll_interval=0.05)
        try:
            return FolderLock(lock, _lock_folder(Path(run_dir)))
        except BaseException:
            lock.release()
            raise
    except (filelock.Timeout, BlockingIOError):  # the folder's lock: its .lock deleted under the holder
        raise RunLocked(f"another run{_holder_said(run_dir)} is writing to {run_dir} (its lock is held); "
                        f"wait for it to finish or {hint}") from None
    except OSError as exc:  # read-only, removed: a usage error as a new run's mkdir failing is
        raise ConfigError(f"cannot lock the run folder {run_dir}: {exc.strerror or exc}") from None
