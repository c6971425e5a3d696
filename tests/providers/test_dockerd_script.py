"""scripts/dockerd.sh starts a daemon over a pid file that a dead one left behind.

dockerd refuses to start while its pid file names a process that exists ("pid file found,
ensure docker is not running or delete /var/run/docker.pid"). A daemon killed by SIGKILL (a
session torn down with everything in it) leaves that file, naming its zombie until someone
reaps it, or later any process that got the pid. The script removes such a file and starts.

Each test runs a real dockerd of its own beside any other: its pid file, data, exec root and
socket in a folder of the test (a ``dockerd`` first on PATH adds those flags), so the
machine's shared daemon and /var/run/docker.pid are never touched.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "dockerd.sh"
DOCKERD = shutil.which("dockerd", path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
PR_SET_CHILD_SUBREAPER, PR_GET_CHILD_SUBREAPER = 36, 37

pytestmark = pytest.mark.skipif(
    DOCKERD is None or shutil.which("docker") is None or os.geteuid() != 0,
    reason="needs dockerd and the docker CLI (./dev installs docker.io), as root")


class Daemon:
    """scripts/dockerd.sh driving a dockerd whose every path is under one folder."""

    def __init__(self, base: Path):
        self.base = base
        self.pid_file = base / "docker.pid"
        (base / "bin").mkdir()
        wrapper = base / "bin" / "dockerd"
        wrapper.write_text(f"#!/bin/sh\nexec {DOCKERD} \"$@\" --pidfile {self.pid_file} "
                           f"--data-root {base}/data --exec-root {base}/docker "
                           f"-H unix://{base}/docker.sock\n")
        wrapper.chmod(0o755)
        self.env = {**os.environ, "PATH": f"{base}/bin:{os.environ['PATH']}",
                    "DOCKER_HOST": f"unix://{base}/docker.sock",
                    "PARALLEL_ROLLOUT_DOCKERD_DIR": str(base / "state"),
                    "PARALLEL_ROLLOUT_DOCKERD_RUN_DIR": str(base),
                    "PARALLEL_ROLLOUT_DOCKERD_WAIT_S": "60"}

    def script(self, action: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(SCRIPT), action], capture_output=True, text=True,
                              env=self.env, timeout=120)

    def start(self) -> int:
        out = self.script("start")
        assert out.returncode == 0 and out.stdout.startswith("started"), out.stderr
        return int(out.stdout.split()[1])

    def processes(self) -> list[psutil.Process]:
        """This daemon's processes (dockerd and its containerd), found by their folder."""
        found = []
        for proc in psutil.process_iter(["cmdline"]):
            if any(str(self.base) in part for part in proc.info["cmdline"] or ()):
                found.append(proc)
        return found

    def kill(self, known: list[psutil.Process] = ()) -> None:
        """Kill, by pid, ``known`` and what is left of this daemon (a killed one's containerd),
        and reap those this process adopted."""
        left = [*known, *self.processes()]
        for proc in left:
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(left, timeout=10)


@pytest.fixture
def daemon():
    # short: the socket's path must fit in 108 bytes
    base = Path(tempfile.mkdtemp(prefix="prt-dkd-", dir="/tmp"))
    d = Daemon(base)
    yield d
    d.script("stop")
    d.kill()
    # dockerd binds its data root onto itself; a killed one leaves that mount
    with open("/proc/self/mounts") as mounts:
        points = [line.split()[1] for line in mounts if line.split()[1].startswith(str(base))]
    for point in sorted(points, reverse=True):
        subprocess.run(["umount", "--lazy", point], check=False)
    shutil.rmtree(base)


def test_a_pid_file_naming_another_live_process_is_removed_and_the_daemon_starts(daemon):
    bystander = subprocess.Popen(["sleep", "300"])
    try:
        daemon.pid_file.write_text(str(bystander.pid))
        out = daemon.script("start")
        assert out.returncode == 0, out.stderr
        assert out.stdout.startswith("started")
        assert f"removing {daemon.pid_file}: it names no running dockerd (pid {bystander.pid})" \
            in out.stderr
        assert bystander.poll() is None, "the process the stale file named was touched"
        assert daemon.pid_file.read_text().strip() == out.stdout.split()[1]
        assert daemon.script("status").stdout.startswith("ours")
    finally:
        bystander.kill()
        bystander.wait()


def test_a_daemon_killed_by_sigkill_leaves_a_zombie_and_the_next_start_still_starts(daemon):
    libc = ctypes.CDLL(None, use_errno=True)
    was = ctypes.c_int()
    assert libc.prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(was), 0, 0, 0) == 0
    # this process adopts the daemon (the script's shell is gone) and keeps its zombie until
    # it reaps it: what a session's subreaper does while it is being torn down
    assert libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    adopted = []
    try:
        first = daemon.start()
        adopted = daemon.processes()  # the daemon and its containerd: this process reaps them
        os.kill(first, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while psutil.Process(first).status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline, "the killed daemon did not die"
            time.sleep(0.05)
        assert daemon.pid_file.read_text().strip() == str(first), "dockerd removed its pid file"

        second = daemon.start()
        assert second != first
        assert daemon.script("status").stdout.strip() == f"ours {second}"
        stopped = daemon.script("stop")
        assert stopped.stdout.strip() == f"stopped {second}"
        assert not daemon.pid_file.exists(), "a stopped daemon's pid file is left"
    finally:
        libc.prctl(PR_SET_CHILD_SUBREAPER, was.value, 0, 0, 0)
        daemon.kill(adopted)
