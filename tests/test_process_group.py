"""A worker's process group (src/parallel_rollout/process_group.py) without Ray: the watcher a
Ray worker actor starts, on a plain process killed from outside. The backends through a real
run: tests/test_run_lifecycle.py (local), tests/test_ray_backend.py (a Ray cluster)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import psutil
import pytest

from parallel_rollout import worker_cgroup
from process_tree import sleeps_left, worker_cgroups_usable

#: a worker as a Ray actor starts: it is watched, leads a group and a cgroup, and its "agent"
#: detaches two sleeps, one of them in a session of its own
WORKER = textwrap.dedent("""\
    import os, subprocess, sys, time
    from parallel_rollout.process_group import lead_group, watch_group
    token = "{token}"
    {watch}
    lead_group(token)
    subprocess.run(["sh", "-c", "sleep {marker} >/dev/null 2>&1 &"], check=True)
    if {with_cgroup}:  # and one out of the group too: a session of its own, which only the cgroup holds
        subprocess.run(["setsid", "sh", "-c", "sleep {marker} >/dev/null 2>&1 &"], check=True)
    print("ready", flush=True)
    time.sleep(600)
""")


#: the watcher as ``watch_group`` starts it, on a Python whose ``os`` has no pidfd_open (Linux
#: < 5.3, macOS): it polls
WATCH_WITHOUT_PIDFDS = ("subprocess.run([sys.executable, '-c', 'import os, runpy, sys; del os.pidfd_open; "
                        "runpy.run_module(\\'parallel_rollout.process_group\\', run_name=\\'__main__\\')', "
                        "str(os.getpid()), token], check=True, stdin=subprocess.DEVNULL, start_new_session=True)")


def _watchers(pid: int) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        named = [i for i, word in enumerate(cmdline) if word == str(pid)]  # its pid, then its cgroup's token
        if named and "process_group" in " ".join(cmdline[:named[0]]):
            found.append(proc)
    return found


@pytest.mark.parametrize("watch", ["watch_group(token)", WATCH_WITHOUT_PIDFDS], ids=["pidfd", "polling"])
def test_a_watched_group_dies_with_its_leader_killed_from_outside(watch):
    marker = f"{600 + os.getpid() % 97}.{3 if watch == 'watch_group(token)' else 4}"
    token = f"test-{os.getpid()}-{marker}"
    script = WORKER.format(marker=marker, watch=watch, token=token, with_cgroup=worker_cgroups_usable())
    worker = subprocess.Popen([sys.executable, "-c", script],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert worker.stdout.readline() == "ready\n"
        watchers = _watchers(worker.pid)
        assert len(watchers) == 1
        # out of the worker's tree (Ray kills a worker's own children as it exits) and group
        assert watchers[0].ppid() != worker.pid and os.getpgid(watchers[0].pid) != worker.pid
        assert len(psutil.Process(worker.pid).children()) == 0  # the sleep left its tree too
    finally:
        worker.kill()  # as the OOM killer or a lost node's end would: no code of its runs
        worker.wait()
    left = sleeps_left(marker)
    assert not left, f"{len(left)} detached sleep(s) outlived their worker"
    _, alive = psutil.wait_procs(watchers, timeout=10)
    assert not alive, "the watcher did not end with its worker"
    assert not os.path.exists(worker_cgroup.folder(token) or "/nonexistent"), "the worker's cgroup was left"
