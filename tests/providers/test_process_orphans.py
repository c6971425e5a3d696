"""Whose orphans the process that starts sandboxes adopts (``pool/providers/orphans.py``): the
inits bwrap leaves unreaped, while it holds a sandbox, and no one else's once it holds none."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time

import psutil
import pytest

from process_support import base_dir, no_leaked_sandbox, provider, snapshot  # noqa: F401

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")


def _orphaned_sleep(marker: str) -> psutil.Process:
    """A ``sleep`` whose shell exited at once: an orphan of this process's child."""
    subprocess.run(["sh", "-c", f"sleep {marker} >/dev/null 2>&1 &"], check=True)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        found = [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", marker]]
        if found:
            return found[0]
        time.sleep(0.02)
    raise AssertionError(f"no sleep {marker} started")


def test_a_process_whose_sandboxes_are_stopped_adopts_no_other_orphan(provider):
    """It was a child subreaper for the rest of its life once it had started a sandbox: an
    orphan of any child of its came to it (a daemon a hypervisor CLI detaches), a zombie it
    never reaped once that ended, alive to a check by pid (a killed VM seen running)."""
    info = provider.start("vm0")
    provider.stop(info)
    sleep = _orphaned_sleep("61.25")
    try:
        assert sleep.ppid() != os.getpid()
    finally:
        sleep.kill()


def test_the_init_of_a_sandbox_whose_agent_died_is_reaped_as_it_stops(provider):
    """A guard: the agent's death ends bwrap, which leaves the init unreaped; the init comes to
    this process, which holds the sandbox, and is reaped as the VM stops, not left to pid 1."""
    info = provider.start("vm0")
    init = psutil.Process(info.private["init_pid"])
    try:
        os.kill(init.children()[0].pid, signal.SIGKILL)  # the guest agent
        deadline = time.monotonic() + 5
        while init.status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
            time.sleep(0.01)
        assert init.status() == psutil.STATUS_ZOMBIE and init.ppid() == os.getpid()
    finally:
        provider.stop(info)
    assert not init.is_running(), "the init's zombie was left"
