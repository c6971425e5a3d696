"""A process sandbox's log: what bwrap, the namespace's init and the guest agent write to
their stdout and stderr, kept in the VM folder's ``agent.log`` up to :data:`LOG_CAP` bytes;
the rest is read and dropped.

::

    bwrap ─┬─ init (pid 1) ─── agent ──stdout, stderr──► pipe ──► the pump thread ──► agent.log
           └──────────────────────────────────────────►  (one per process, every sandbox's pipe)

Why a pipe and not the file: the namespace's init is bwrap's own process, holding bwrap's
stdout and stderr. As another user than root it runs as the commands' uid, so the commands
could open them (``/proc/1/fd/2``) and write the host's disk full through a file on it; a
pipe read by this process holds at most a pipe's buffer. The pump copies what a boot failure
needs (bwrap's and the agent's errors, quoted by ``process.py``) and drops what follows.
"""

from __future__ import annotations

import os
import selectors
import subprocess
import threading
from pathlib import Path

from .sandbox_processes import launcher

#: bytes of a sandbox's log kept on disk; what comes after is read and dropped
LOG_CAP = 1 << 20
_DROPPED = b"\n[agent.log: more than %d bytes; the rest was dropped]\n" % LOG_CAP


class _Pump:
    """The one thread that copies every sandbox's log pipe of this process."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self._lock = threading.Lock()
        self._pending: list[tuple[int, str, threading.Event]] = []
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        threading.Thread(target=self._loop, name="sandbox-logs", daemon=True).start()

    def add(self, fd: int, path: str) -> threading.Event:
        """Copy the pipe ``fd`` (this pump closes it) into ``path``; the event is set once
        its writers are all gone and what they wrote is in the file."""
        done = threading.Event()
        with self._lock:
            self._pending.append((fd, path, done))
        try:
            os.write(self._wake_w, b"x")
        except BlockingIOError:
            pass  # a wake-up is pending already
        return done

    def _loop(self) -> None:
        while True:
            for key, _ in self._selector.select():
                if key.data is None:
                    self._take_pending()
                else:
                    self._copy(key)

    def _take_pending(self) -> None:
        os.read(self._wake_r, 4096)
        with self._lock:
            pending, self._pending = self._pending, []
        for fd, path, done in pending:
            try:
                handle = open(path, "ab")
            except OSError:  # the folder is gone: drain it all the same
                handle = None
            self._selector.register(fd, selectors.EVENT_READ, [handle, LOG_CAP, done])

    def _copy(self, key: selectors.SelectorKey) -> None:
        state = key.data
        try:
            chunk = os.read(key.fd, 65536)
        except OSError:
            chunk = b""
        if not chunk:
            self._selector.unregister(key.fd)
            os.close(key.fd)
            if state[0] is not None:
                state[0].close()
            state[2].set()
            return
        handle, left = state[0], state[1]
        if handle is None or left <= 0:
            return
        kept = chunk[:left]
        state[1] = left - len(kept)
        try:
            handle.write(kept + (_DROPPED if state[1] <= 0 else b""))
            handle.flush()
        except OSError:  # a full disk: keep draining, stop writing
            state[1] = 0


_lock = threading.Lock()
_instance: _Pump | None = None


def pump_into(fd: int, path: str) -> threading.Event:
    """Copy the log pipe ``fd`` of a sandbox (closed here once its writers are gone) into
    ``path``, at most LOG_CAP bytes; the event says when all of it is in the file."""
    global _instance
    with _lock:
        # a forked child has no thread: a pump of its own
        if _instance is None or _instance.pid != os.getpid():
            _instance = _Pump()
        pump = _instance
    return pump.add(fd, path)


#: bwrap's whole environment: its init keeps it for the sandbox's life, readable by the
#: commands as another user (/proc/1/environ), so nothing of the runner's (an API key)
BWRAP_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}


def start(argv: list[str], log_path: Path, pass_fds: tuple[int, ...],
          cgroup_procs: list[str] | tuple[str, ...] = (),
          nofile: int | None = None) -> tuple[subprocess.Popen, threading.Event]:
    """Start a sandbox's bwrap (``argv``) from the launcher thread, dying with this process,
    in the cgroups of ``cgroup_procs`` from before its start, RLIMIT_NOFILE ``nofile``, with ``pass_fds``, the
    environment :data:`BWRAP_ENV` and its stdout and stderr a pipe pumped into ``log_path``;
    (its Popen, the event set once its log is all in the file)."""
    log_r, log_w = os.pipe()
    try:
        proc = launcher().popen(argv, stdin=subprocess.DEVNULL, stdout=log_w, stderr=log_w,
                                pass_fds=pass_fds, env=BWRAP_ENV, start_new_session=True,
                                die_with_owner=True, cgroup_procs=cgroup_procs, nofile=nofile)
    except BaseException:
        os.close(log_r)
        raise
    finally:
        os.close(log_w)
    return proc, pump_into(log_r, str(log_path))
