"""The guest agent's reap on a shared host (a `remote` VM that is a process on this machine): /reap
and the agent's stop take only what its own commands started; --reap-all kills every process of
its pid namespace."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time

import psutil
import pytest

from parallel_rollout.guest.client import GuestClient
from test_guest import SERVER, _start_agent, agent  # noqa: F401  (the fixture: a running agent)


def test_reap_on_a_shared_host_kills_only_what_its_commands_started(agent):
    # An agent started without --reap-all (a `remote` VM that is a process on this machine)
    # must not take the host down: /reap kills the sessions of its own commands; a process it
    # did not start (this test's sleeper, the test process itself) lives on.
    client, _ = agent
    bystander = subprocess.Popen(["sleep", "300"])
    try:
        client.execute("sleep 300 >/dev/null 2>&1 &", shell=True)
        left = [p for p in psutil.Process(client.health()["pid"]).children(recursive=True)
                if p.cmdline() == ["sleep", "300"]]  # not another test's, on a shared machine
        assert len(left) == 1, left
        client.reap()
        gone, alive = psutil.wait_procs(left, timeout=5)
        assert not alive, "the command's own sleeper survived /reap"
        assert bystander.poll() is None, "the agent's /reap killed a process it did not start"
    finally:
        bystander.kill()
        bystander.wait()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_an_agent_stopped_on_a_shared_host_takes_what_its_commands_left_with_it(tmp_path, signum):
    # A remote machine's agent stopped (SIGTERM, or SIGHUP: the ssh session that ran it
    # ended): a daemon its commands left (here one that left its session, as a web episode's
    # page server does) ends with it instead of running on as the machine's; a process it
    # did not start lives on, and the agent still dies by the signal.
    home = tmp_path / "home"
    home.mkdir()
    # SIGHUP as a login or ssh session leaves it to the agent: not ignored, which it would
    # be (and the agent keep it so, as under nohup) in a test run started under nohup
    proc = _start_agent(tmp_path / "agent.sock", home,
                        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL))
    bystander = subprocess.Popen(["sleep", "300"])
    left = []
    try:
        client = GuestClient(f"unix:{tmp_path / 'agent.sock'}", timeout_s=10)
        client.execute("setsid sleep 300 >/dev/null 2>&1 < /dev/null &", shell=True)
        deadline = time.monotonic() + 10
        while not (left := [p for p in psutil.Process(proc.pid).children(recursive=True)
                            if p.cmdline() == ["sleep", "300"]]):
            assert time.monotonic() < deadline, "the command's sleeper never started"
            time.sleep(0.05)
        proc.send_signal(signum)
        assert proc.wait(timeout=30) == -signum
        gone, alive = psutil.wait_procs(left, timeout=5)
        assert not alive, "what the agent's command left outlived the agent"
        assert bystander.poll() is None, "the stopped agent killed a process it did not start"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for process in [*left, bystander]:  # by pid: what a failing run left
            with contextlib.suppress(psutil.NoSuchProcess, ProcessLookupError):
                process.kill()
        bystander.wait()


def test_reap_all_kills_every_process_of_its_namespace(tmp_path):
    # --reap-all is for an agent alone in its pid namespace: bwrap gives it one here
    home = tmp_path / "home"
    home.mkdir()
    sock = tmp_path / "ns.sock"
    bystander = subprocess.Popen(["sleep", "300"])
    proc = subprocess.Popen(
        ["bwrap", "--dev-bind", "/", "/", "--unshare-pid", "--proc", "/proc", "--die-with-parent", "--",
         "/usr/bin/python3", "-I", "-S", str(SERVER), "--unix", str(sock), "--reap-all"],
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home)}, cwd=home)
    try:
        client = GuestClient(f"unix:{sock}", timeout_s=10)
        client.wait_ready(20)
        client.execute("setsid sleep 301 >/dev/null 2>&1 &", shell=True)
        assert client.execute("pgrep -x sleep", shell=True)["output"].strip(), "no sleeper started"
        client.reap()
        time.sleep(0.2)
        assert client.execute("pgrep -x sleep", shell=True)["returncode"] == 1, "a sleeper survived /reap"
        assert bystander.poll() is None, "--reap-all reached past the agent's pid namespace"
    finally:
        proc.kill()
        proc.wait()
        bystander.kill()
        bystander.wait()


#: run in a child as root: seal it as the agent does, then start a command as another user
