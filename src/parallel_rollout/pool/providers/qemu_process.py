"""The QEMU processes this process started: a table to reap them by, the loopback ports their
guests' agents are forwarded to, and their end.

A QEMU is forwarded a free loopback port (``free_port``: one not handed to another VM of ours
lately), kept in ``children`` while it runs so its exit is reaped (no zombies) and read (the
provider's ``death_cause``), and stopped by ``kill_qemu``: QMP ``quit`` first when graceful,
then SIGKILL, then a wait until the pid is gone. A pid is ours only while it is the same process (its start time) and runs the VM's
folder (``is_our_qemu``): a pid reused by another program is never killed.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

from ...errors import VMError
from .common import runs_vm, same_process
from .qemu_machine import qmp

QUIT_WAIT_S = 5.0

#: QEMU processes this process started, so it can reap them (no zombies)
children: dict[int, subprocess.Popen] = {}
_ports_lock = threading.Lock()
_recent_ports: list[int] = []


def free_port() -> int:
    """A loopback port free right now, not handed out to another VM of ours lately."""
    with _ports_lock:
        for _ in range(50):
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                port = sock.getsockname()[1]
            if port not in _recent_ports:
                _recent_ports.append(port)
                del _recent_ports[:-64]
                return port
    raise VMError("cannot find a free loopback port")


def is_our_qemu(pid, create_time, vm_dir: Path) -> bool:
    """Whether ``pid`` is still the QEMU (or its setpriv) that runs ``vm_dir``."""
    return runs_vm(pid, create_time, vm_dir)


def kill_qemu(private: dict, graceful: bool = False) -> None:
    """Stop the recorded QEMU: QMP quit first when ``graceful``, then SIGKILL; wait for it."""
    pid, created = private.get("pid"), private.get("create_time")
    proc = children.pop(pid, None) if pid else None
    if same_process(pid, created):
        if graceful and private.get("vm_dir"):
            try:
                qmp(Path(private["vm_dir"]), "quit", timeout_s=2.0)
            except VMError:
                pass  # QMP is stuck or gone: SIGKILL below
            _wait_gone(pid, created, proc, QUIT_WAIT_S)
        if same_process(pid, created):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    if not _wait_gone(pid, created, proc, QUIT_WAIT_S):
        raise VMError(f"QEMU {pid} survived SIGKILL for {QUIT_WAIT_S}s")


def _wait_gone(pid, created, proc: subprocess.Popen | None, timeout_s: float) -> bool:
    if proc is not None:
        try:
            proc.wait(timeout=timeout_s)
            return True
        except subprocess.TimeoutExpired:
            return False
    deadline = time.monotonic() + timeout_s
    while same_process(pid, created):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True
