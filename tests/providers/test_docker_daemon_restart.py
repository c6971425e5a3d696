"""A Docker daemon that stops answering for a few seconds (``systemctl restart docker``, an
upgrade restarting it under a nightly run) is waited for by the boots that need it, within
their boot timeout: each boot failed at once with "no Docker daemon answers", and a pool whose
containers the restart had killed spent its whole replacement budget (2×M boots) in a third
of a second, aborting the run (exit 1) although the daemon was back a moment later. The
tasks of the containers the restart stopped are said to have lost them to the daemon, not to
a "removal from outside" (what a container that inspect cannot find had been called).

The daemon here is the session's real one, reached through a unix-socket relay that the test
takes away and brings back (the socket a restart takes away): stopping the shared daemon
itself would fail every other docker test running on the machine.
"""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time

import pytest

from parallel_rollout.errors import ProviderUnavailable
from parallel_rollout.guest.client import GuestClient


class SocketRelay:
    """A unix socket at ``path`` that passes every connection on to ``target``, while up."""

    def __init__(self, path: str, target: str) -> None:
        self.path, self.target = path, target
        self._listener: socket.socket | None = None
        self._open: list[socket.socket] = []

    def up(self) -> None:
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(self.path)
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    @property
    def is_up(self) -> bool:
        return self._listener is not None

    def down(self) -> None:
        """Gone as a stopped daemon's socket is: the file removed, open connections cut."""
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
        if os.path.exists(self.path):
            os.unlink(self.path)
        for conn in self._open:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()
        self._open.clear()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX)
            upstream.connect(self.target)
            self._open += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pump, args=(a, b), daemon=True).start()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
        sink.shutdown(socket.SHUT_WR)
    except OSError:
        pass


@pytest.fixture
def relayed_daemon(docker_harness, monkeypatch):
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if not host.startswith("unix://"):
        pytest.skip(f"the daemon is not on a unix socket ({host})")
    folder = f"/tmp/prt-relay-{os.getpid()}"
    os.makedirs(folder, exist_ok=True)
    relay = SocketRelay(f"{folder}/docker.sock", host[len("unix://"):])
    relay.up()
    monkeypatch.setenv("DOCKER_HOST", f"unix://{relay.path}")
    yield relay
    relay.down()
    os.rmdir(folder)


def test_a_boot_waits_for_a_daemon_that_restarts(docker_harness, relayed_daemon):
    provider = docker_harness.provider(boot_timeout_s=30.0)
    first = provider.start("vm-0")
    booted = []
    try:
        # the restart stops the containers: the death is the daemon's, not a removal
        relayed_daemon.down()
        subprocess.run(["docker", "kill", first.private["name"]], capture_output=True, timeout=60, check=True,
                       env={**os.environ, "DOCKER_HOST": f"unix://{relayed_daemon.target}"})
        assert provider.death_cause(first) == (f"the Docker daemon stopped answering at unix://{relayed_daemon.path} "
                                               "(restarted or ended)")
        back = threading.Timer(1.0, relayed_daemon.up)
        back.start()
        started = time.monotonic()
        try:
            booted.append(provider.start("vm-1"))
        finally:
            back.join()
        # it waited for the daemon, then booted as ever
        assert time.monotonic() - started >= 1.0
        assert GuestClient(booted[0].address).execute("echo ok", shell=True)["output"] == "ok\n"
    finally:
        if not relayed_daemon.is_up:
            relayed_daemon.up()
        for info in (first, *booted):
            provider.stop(info)


def test_a_daemon_that_does_not_come_back_fails_the_boot_at_its_timeout(docker_harness, relayed_daemon):
    provider = docker_harness.provider(boot_timeout_s=1.0)
    relayed_daemon.down()
    with pytest.raises(ProviderUnavailable, match="no Docker daemon answers at"):
        provider.start("vm-0")
