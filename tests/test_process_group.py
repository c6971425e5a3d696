"""A worker's process group (src/parallel_rollout/process_group.py) without Ray: the watcher a
Ray worker actor starts, on a plain process killed from outside. The backends through a real
run: tests/test_run_lifecycle.py (local), tests/test_ray_backend.py (a Ray cluster)."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest

from parallel_rollout import process_group, worker_cgroup
from process_tree import sleeps_left, sleeps_of, worker_cgroups_usable

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


#: a worker whose runner died: it led a group (and a cgroup) or not, its "agent" detached two
#: sleeps, one in a session of its own; with a cgroup, a third sleep of its group was moved
#: out of the cgroup, and a thread keeps starting sleeps in sessions of their own (one ends,
#: the next starts: an agent whose command was killed); a line on its stdin is the closed pipe
ORPHAN = textwrap.dedent("""\
    import os, subprocess, sys, threading
    from parallel_rollout import process_group, worker_cgroup
    token = "{token}"
    if {leads}:
        process_group.lead_group(token if {with_cgroup} else None)
    if {no_cgroup_kill}:  # its helper as on Linux < 5.14
        process_group._helper_argv = lambda pid, token: [sys.executable, "-c", {no_kill_file!r}, "--kill", str(pid), token]
    if {helper_hangs}:
        process_group._helper_argv, process_group._HELPER_S = (lambda pid, token: ["sleep", "30"]), 0.5
    subprocess.run(["sh", "-c", "sleep {marker} >/dev/null 2>&1 &"], check=True)
    subprocess.run(["setsid", "sh", "-c", "sleep {marker} >/dev/null 2>&1 &"], check=True)

    def respawn():
        while True:
            subprocess.run(["sleep", "{respawned}"], start_new_session=True)

    if {with_cgroup}:
        moved = subprocess.Popen(["sleep", "{marker}"])
        with open(os.path.join(os.path.dirname(os.path.dirname(worker_cgroup._own_v2())), "cgroup.procs"), "w") as f:
            f.write(str(moved.pid))
        threading.Thread(target=respawn, daemon=True).start()
    print("ready", flush=True)
    sys.stdin.readline()
    process_group.die_with_group()
""")


#: the helper's module run with no cgroup.kill to open, as on Linux < 5.14
NO_KILL_FILE = ("import runpy\n"
                "from parallel_rollout import worker_cgroup\n"
                "def no_kill_file(name, *args, real=open, **kwargs):\n"
                "    if str(name).endswith('cgroup.kill'):\n"
                "        raise OSError(22, 'no cgroup.kill on this kernel')\n"
                "    return real(name, *args, **kwargs)\n"
                "worker_cgroup.open = no_kill_file\n"
                "runpy.run_module('parallel_rollout.process_group', run_name='__main__')\n")


@pytest.mark.parametrize("case", ["cgroup", "no-cgroup-kill", "helper-hangs", "group", "leads-nothing"])
def test_a_worker_whose_runner_died_takes_what_it_led_with_it(case):
    with_cgroup = case in ("cgroup", "no-cgroup-kill", "helper-hangs")
    if with_cgroup and not worker_cgroups_usable():
        pytest.skip("no writable cgroup v2 tree here")
    marker, respawned = (f"{600 + os.getpid() % 97}.{secrets.randbelow(10**6) + 1}" for _ in range(2))
    token = f"test-{os.getpid()}-{marker}"
    script = ORPHAN.format(token=token, leads=case != "leads-nothing", with_cgroup=with_cgroup,
                           no_cgroup_kill=case == "no-cgroup-kill", no_kill_file=NO_KILL_FILE,
                           helper_hangs=case == "helper-hangs", marker=marker, respawned=respawned)
    # a session of its own: a group kill it should not make hits nothing of the test's
    worker = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, start_new_session=True)
    hang = threading.Timer(60, worker.kill)  # a worker that never says ready fails, not hangs
    hang.start()
    try:
        assert worker.stdout.readline() == "ready\n"
        deadline = time.monotonic() + 10
        sleeps: list[psutil.Process] = []
        started = 3 if with_cgroup else 2
        while len(sleeps) < started and time.monotonic() < deadline:  # a shell's child may not have run sleep yet
            time.sleep(0.02)
            sleeps = sleeps_of(marker)
        in_session = [p for p in sleeps if os.getsid(p.pid) != worker.pid]
        moved_out = [p for p in sleeps if with_cgroup and token not in Path(f"/proc/{p.pid}/cgroup").read_text()]
        assert len(sleeps) == started and len(in_session) == 1, sleeps
        worker.stdin.write("\n")
        worker.stdin.flush()
        code = worker.wait(10)
        time.sleep(0.5)  # a sleep its thread started as it died would be there by now
        _, alive = psutil.wait_procs(sleeps_of(marker, respawned), timeout=5)
        alive = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        folder = worker_cgroup.folder(token)
        left = folder is not None and os.path.exists(folder)
    finally:
        hang.cancel()
        worker.kill()
        worker.wait()
        for proc in sleeps_of(marker, respawned):
            proc.kill()
        _remove_when_empty(worker_cgroup.folder(token))
    if case == "leads-nothing":
        assert code == 1 and len(alive) == 2, "a process that led no group killed one"
        return
    assert code == -9, "the worker did not go with its group"
    if case == "helper-hangs":  # its cgroup killed from inside, itself first: the group's sleep out of it is left
        assert alive == moved_out and len(moved_out) == 1, f"{alive} outlived their worker"
        return
    assert alive == ([] if with_cgroup else in_session), f"{alive} outlived their worker"
    assert not left, "the worker's cgroup was left"


def _remove_when_empty(folder: str | None) -> None:
    """A test's cgroup folder, once the kills have emptied it (within 10 s)."""
    deadline = time.monotonic() + 10
    while folder is not None and os.path.isdir(folder) and not worker_cgroup._remove_tree(folder) \
            and time.monotonic() < deadline:
        time.sleep(0.05)


def test_the_watcher_and_the_helper_run_this_package_whatever_the_environment_says(tmp_path):
    """A worker's ``sys.path`` may hold the package where its environment does not (a checkout
    run by its script), or the environment another package of that name: the programs it
    starts of this module import it from where the worker did, not by PYTHONPATH or the
    current folder."""
    shadow = tmp_path / "parallel_rollout"
    shadow.mkdir()
    (shadow / "__init__.py").write_text("")
    (shadow / "process_group.py").write_text(f"open({str(tmp_path / 'shadow-ran')!r}, 'w').close()\n")
    ended = subprocess.Popen(["true"], start_new_session=True)  # a group of one, ended, kept unreaped
    while psutil.Process(ended.pid).status() != psutil.STATUS_ZOMBIE:
        time.sleep(0.01)
    try:
        env = {**os.environ, "PYTHONPATH": str(tmp_path)}
        done = subprocess.run(process_group._self_argv(str(ended.pid)), cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0 and not (tmp_path / "shadow-ran").exists(), done.stderr
        # what -m would have run there: the shadow
        subprocess.run([sys.executable, "-m", "parallel_rollout.process_group", str(ended.pid)], cwd=tmp_path,
                       env=env, capture_output=True, timeout=60)
        assert (tmp_path / "shadow-ran").exists()
    finally:
        ended.wait()
