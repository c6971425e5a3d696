"""``halted``: a VM whose process was stopped or traced from outside, told from the host's
/proc (the process provider's sandboxes, docker's containers, QEMU), with real processes."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess

import pytest

from parallel_rollout.pool.providers.docker_cli import host_uid, local_pid
from parallel_rollout.pool.providers.halted import children_of, halted_tree, proc_status


def test_a_stopped_process_in_the_tree_is_named_unless_it_is_the_tasks_uid():
    parent = subprocess.Popen(["sh", "-c", "sleep 60 & wait"])
    try:
        for _ in range(100):  # the child, once it is sleep (not the shell's fork before its exec)
            children = children_of(parent.pid)
            if children and proc_status(children[0]).get("Name") == "sleep":
                break
            subprocess.run(["sleep", "0.02"])
        [child] = children
        assert halted_tree(parent.pid, None) is None  # running: nothing to tell
        os.kill(child, signal.SIGSTOP)
        for _ in range(100):  # the stop lands a moment later
            cause = halted_tree(parent.pid, None)
            if cause:
                break
            subprocess.run(["sleep", "0.02"])
        assert cause == (f"its process {child} (sleep, uid {os.getuid()}) was stopped from outside, "
                         f"which nothing inside the VM can do"), cause
        # a process of the task's own uid: it may have stopped it itself
        assert halted_tree(parent.pid, os.getuid()) is None
        assert "the task's user (uid 12345) cannot do" in halted_tree(parent.pid, 12345)
    finally:
        for pid in children_of(parent.pid):
            os.kill(pid, signal.SIGKILL)
        parent.kill()
        parent.wait()


def test_a_pid_that_is_not_the_containers_is_not_read():
    """docker's reported pid is read only when its cgroup names the container (a daemon on
    another host reports pids this host's /proc does not hold)."""
    assert local_pid(os.getpid(), "0" * 64) is None
    assert local_pid(0, "abc") is None and local_pid(None, "abc") is None
    with open("/proc/self/cgroup") as cgroup:  # a process whose cgroup path names it: ours
        name = next(part for line in cgroup for part in line.strip().split("/") if len(part) >= 2)
    assert local_pid(os.getpid(), name) == os.getpid()


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is missing (./dev installs it)")
def test_a_uid_inside_a_user_namespace_is_read_as_the_host_sees_it():
    """A container's uids as the host sees them (a daemon's userns-remap): through the
    namespace's uid_map; outside one, the uid itself."""
    assert host_uid(os.getpid(), 64000) == 64000
    inside = subprocess.Popen(["bwrap", "--unshare-user", "--uid", "4242", "--die-with-parent", "--ro-bind", "/", "/",
                               "sleep", "30"])
    try:
        for _ in range(100):  # bwrap's child, once it is sleep
            children = children_of(inside.pid)
            if children and proc_status(children[0]).get("Name") == "sleep":
                break
            subprocess.run(["sleep", "0.02"])
        assert host_uid(children[0], 4242) == os.getuid()
    finally:
        inside.kill()
        inside.wait()
