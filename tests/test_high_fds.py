"""Waits on an fd of 1024 or more, which select() refuses ("filedescriptor out of range in
select()": FD_SETSIZE). A pool of a few hundred VMs holds that many fds, and 8 of 200
process VMs died at boot of it. Every wait polls instead: the host's and the guest's waits
on a pipe (a table), the math grader's pipe and the qemu guest's relay. A process VM's whole
boot and reset among high fds: tests/providers/test_process.py."""

from __future__ import annotations

import ast
import os
import socket
import threading
import time

import pytest

from parallel_rollout.errors import VMError
from parallel_rollout.guest import agent_output, desktop
from parallel_rollout.pool.providers import qemu_guest_init
from parallel_rollout.pool.providers.sandbox_processes import read_until
from pool_support import fds_above


def _read_until(fd: int, timeout: float) -> bool:
    try:
        return read_until(fd, b"\n", time.monotonic() + timeout, f"{timeout:g}s") == b"ready\n"
    except VMError:
        return False


def _desktop_wait(fd: int, timeout: float) -> bool:
    try:
        desktop._wait_readable(fd, time.monotonic() + timeout, "the pipe")
    except RuntimeError:
        return False
    return True


#: a wait on a pipe's read end: True once it is readable, False when ``timeout`` passed
WAITS = {
    "agent_output.readable_within": agent_output.readable_within,
    "sandbox_processes.read_until": _read_until,
    "desktop._wait_readable": _desktop_wait,
}


@pytest.mark.parametrize("wait", WAITS.values(), ids=WAITS.keys())
def test_a_wait_on_a_pipe_above_fd_1023(wait):
    with fds_above(1024):
        read_end, write_end = os.pipe()
    try:
        assert read_end >= 1024
        assert wait(read_end, 0.05) is False  # nothing written: the deadline passes
        os.write(write_end, b"ready\n")
        assert wait(read_end, 5.0) is True
    finally:
        os.close(read_end)
        os.close(write_end)


def test_the_math_grader_answers_on_pipes_above_fd_1023():
    pytest.importorskip("math_verify")
    from parallel_rollout.envs.math import grade
    from parallel_rollout.envs.math_grader import close_graders

    close_graders()  # a grader started before would keep its low fds
    try:
        with fds_above(1024):
            assert grade("\\frac{1}{2}", "0.5")["correct"]
    finally:
        close_graders()


def _guest_relay():
    """``relay_one`` of the qemu guest's PID 1 (``qemu_guest_init.GUEST_INIT``), with its imports:
    the rest of that script mounts and configures a guest, not this host."""
    tree = ast.parse(qemu_guest_init.GUEST_INIT)
    tree.body = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))
                 or getattr(node, "name", None) == "relay_one"]
    namespace: dict = {}
    exec(compile(tree, "guest-init", "exec"), namespace)
    return namespace


def test_the_qemu_guest_relay_passes_a_connection_on_above_fd_1023(tmp_path):
    relay = _guest_relay()
    relay["AGENT_SOCKET"] = str(tmp_path / "agent.sock")
    relay["key"] = "k3y"  # the VM's key, from pr.key= on its kernel command line
    with socket.socket(socket.AF_UNIX) as agent:
        agent.bind(relay["AGENT_SOCKET"])
        agent.listen()
        with fds_above(1024):
            host, outside = socket.socketpair()
            relaying = threading.Thread(target=relay["relay_one"], args=(outside,), daemon=True)
            relaying.start()  # its socket to the agent is above 1023 too
            host.sendall(b"PR-KEY k3y\nGET /health")
            conn, _ = agent.accept()
        with host, conn:
            assert host.fileno() >= 1024 and outside.fileno() >= 1024
            assert conn.recv(100) == b"GET /health"
            conn.sendall(b"ok")
            conn.shutdown(socket.SHUT_WR)
            assert host.recv(100) == b"ok"
            assert host.recv(100) == b""  # the agent's EOF, passed on
            host.shutdown(socket.SHUT_WR)
            relaying.join(5)
            assert not relaying.is_alive()
