"""The command leaves no zombie under a pid 1 that reaps nothing (a container's ``sh`` as
init, ``docker run`` without --init): multiprocessing's resource tracker, its child, is
stopped and reaped as it exits; the process provider's sandboxes, whose namespace inits
bwrap leaves orphaned (``pool/providers/orphans.py``), are reaped by the process that started
them, at every reset and stop."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import time

import pytest

from conftest import ROOT, shell_task, write_tasks

#: pid 1 of a new pid namespace: starts the command, waits for it alone (never for an orphan),
#: noting the pid of every resource tracker seen meanwhile and every zombie left to it (an
#: orphan's: its parent pid is 1); then says the state of each tracker and the zombies left
INIT = r"""
import os, sys, time
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[1], sys.argv[1:])
def stat(p):
    try:
        fields = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        return "reaped", None
    return fields[0], int(fields[1])
trackers, orphans = set(), set()
while not os.waitpid(pid, os.WNOHANG)[0]:
    for p in filter(str.isdigit, os.listdir("/proc")):
        try:
            if b"multiprocessing.resource_tracker" in open(f"/proc/{p}/cmdline", "rb").read():
                trackers.add(p)
        except OSError:
            pass
        if stat(p) == ("Z", 1) and p != str(pid):  # the command's own main thread gone before its others
            orphans.add(p)
    time.sleep(0.02)
time.sleep(2)  # an orphan's end, had it one
print("zombies:", len(orphans | {p for p in filter(str.isdigit, os.listdir("/proc")) if stat(p)[0] == "Z"}))
print("trackers:", sorted(stat(p)[0] for p in trackers))
"""


def under_a_pid_1_that_reaps_nothing(tmp_path, argv: list[str], env: dict | None = None) -> dict:
    """Run ``argv`` in a new pid namespace whose pid 1 is ``INIT``: what it said, by line
    ('trackers': each a /proc state (Z: a zombie) or 'reaped'; 'zombies': how many were left
    to it, during the run or after). ``env``: variables added to this process's (a
    PYTHONPATH goes before its own). Skips where that cannot run."""
    unshare = shutil.which("unshare")
    if unshare is None or subprocess.run([unshare, "--pid", "--fork", "--mount-proc", "true"]).returncode != 0:
        pytest.skip("needs unshare --pid (root, or user namespaces)")
    if shutil.which("bwrap") is None:
        pytest.skip("needs bubblewrap")
    (tmp_path / "init.py").write_text(INIT)
    env = {**os.environ, **(env or {})}
    if os.environ.get("PYTHONPATH") and "PYTHONPATH" in env:
        env["PYTHONPATH"] += os.pathsep + os.environ["PYTHONPATH"]
    said = subprocess.run([unshare, "--pid", "--fork", "--mount-proc", sys.executable, str(tmp_path / "init.py"),
                           *argv], capture_output=True, text=True, timeout=300, env=env)
    assert said.returncode == 0, said.stderr
    lines = dict(line.split(": ", 1) for line in said.stdout.splitlines()[-2:])
    assert set(lines) == {"zombies", "trackers"}, said.stdout
    return {key: ast.literal_eval(value) for key, value in lines.items()}


def run_under_a_pid_1_that_reaps_nothing(tmp_path, tasks: list[dict], *flags: str, env: dict | None = None) -> dict:
    """A run of the command on ``tasks`` (``under_a_pid_1_that_reaps_nothing``)."""
    data = write_tasks(tmp_path / "tasks.jsonl", tasks)
    return under_a_pid_1_that_reaps_nothing(tmp_path, [
        sys.executable, str(ROOT / "run_parallel_rollout.py"), "--mode", "shell", "--data", str(data),
        "--output-dir", str(tmp_path / "out"), "--no-progress", *flags], env=env)


def test_a_run_under_a_pid_1_that_reaps_nothing_leaves_no_resource_tracker_zombie(tmp_path):
    """The tracker ended on its own as the command exited, an orphan init never reaped: one
    zombie per run, piling up in a long-lived container."""
    states = run_under_a_pid_1_that_reaps_nothing(tmp_path, [shell_task("a")])["trackers"]
    assert states and set(states) == {"reaped"}, states


@pytest.mark.parametrize("pool", [["--use-vm-pool", "--num-vms", "2"], []], ids=["pooled", "per-worker"])
def test_the_process_providers_sandboxes_leave_no_zombie_under_a_pid_1_that_reaps_nothing(tmp_path, pool):
    """Each sandbox killed (a reset, a stop) or checked (the provider's probe) left its
    namespace's init, bwrap's child, to pid 1: 11 zombies for 6 tasks on 2 VMs, more with
    every reset, until a pod's pid limit refused forks."""
    said = run_under_a_pid_1_that_reaps_nothing(
        tmp_path, [shell_task(f"t{i}") for i in range(6)], "--provider", "process", *pool)
    assert said["zombies"] == 0, said


def test_the_command_agents_probe_leaves_no_zombie_under_a_pid_1_that_reaps_nothing(tmp_path):
    """Before a run with --agent command the runner checks that bubblewrap can make the
    agent's pid namespace: that bwrap's init was left to pid 1, a zombie per run."""
    probe = "from parallel_rollout.agents.agent_sandbox import check_sandbox; assert check_sandbox() is None"
    assert under_a_pid_1_that_reaps_nothing(tmp_path, [sys.executable, "-c", probe])["zombies"] == 0


def test_reaping_sandboxes_inits_takes_no_exit_status_a_popen_waits_for():
    """The owner reaps by pid only the inits of pid namespaces below its own: a child it
    started itself keeps its exit status for its Popen (a blanket waitpid(-1) took it: 0)."""
    from parallel_rollout.pool.providers import orphans

    proc = subprocess.Popen(["/bin/sh", "-c", "exit 3"])
    while open(f"/proc/{proc.pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z":
        time.sleep(0.001)  # until it exited, unreaped: what a Popen of another thread is about to wait for
    assert not orphans.reap(proc.pid, wait_s=0.1)
    assert proc.wait(timeout=5) == 3


#: a command agent that gives up at once: its process lives as long as its worker
DONE_AGENT = "import sys\nfor line in sys.stdin:\n    print('\"DONE\"', flush=True)\n"


def test_the_command_agents_leave_no_zombie_under_a_pid_1_that_reaps_nothing(tmp_path):
    """Each worker's agent runs under bwrap in a pid namespace of its own; as the worker stopped
    it, bwrap exited without reaping the namespace's init, which went to pid 1: a zombie per
    worker, per run."""
    (tmp_path / "agent.py").write_text(DONE_AGENT)
    said = run_under_a_pid_1_that_reaps_nothing(
        tmp_path, [shell_task(f"t{i}") for i in range(3)], "--provider", "process", "--num-rollouts", "2",
        "--agent", "command", "--agent-cmd", f"{sys.executable} {tmp_path / 'agent.py'}")
    assert said["zombies"] == 0, said


#: an image build's apt-get step (``images._apt_install``), in a tree of a shell and a stand-in
#: apt-get that succeeds (the real one needs debootstrap's tree and a mirror)
APT_STEP = r"""
import os, shutil, sys
from pathlib import Path
from parallel_rollout.pool.providers import images
tree, debs = Path(sys.argv[1]) / "tree", Path(sys.argv[1]) / "debs"
for lib in ("/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2"):
    os.makedirs(tree / lib.lstrip("/").rsplit("/", 1)[0], exist_ok=True)
    shutil.copy(os.path.realpath(lib), tree / lib.lstrip("/"))
for folder in ("bin", "usr/bin", "usr/sbin", "etc/apt"):
    (tree / folder).mkdir(parents=True, exist_ok=True)
shutil.copy("/bin/dash", tree / "bin" / "sh")
(tree / "usr/bin/apt-get").write_text("#!/bin/sh\nexit 0\n")
(tree / "usr/bin/apt-get").chmod(0o755)
images._apt_install(shutil.which("bwrap"), tree, ["hello"], suite="bookworm", mirror="http://127.0.0.1:9/debian",
                    debs=debs, log=print)
"""


@pytest.mark.skipif(not (shutil.which("dash") and os.path.exists("/lib64/ld-linux-x86-64.so.2")),
                    reason="needs dash and an x86-64 glibc for the tree")
def test_an_image_builds_apt_get_step_leaves_no_zombie_under_a_pid_1_that_reaps_nothing(tmp_path):
    """``parallel-rollout image build`` runs apt-get in the tree under bwrap with a pid namespace
    of its own, whose init bwrap left to pid 1: a zombie per build."""
    (tmp_path / "apt_step.py").write_text(APT_STEP)
    said = under_a_pid_1_that_reaps_nothing(tmp_path, [sys.executable, str(tmp_path / "apt_step.py"), str(tmp_path)])
    assert said["zombies"] == 0, said


def test_a_math_run_leaves_no_grader_zombie_under_a_pid_1_that_reaps_nothing(tmp_path):
    """Each worker grades in a math grader process of its own, kept between gradings; a worker
    ends as a multiprocessing child, which runs no atexit hook, so its idle grader outlived it
    and went to pid 1: a zombie per worker, per run."""
    data = write_tasks(tmp_path / "math.jsonl", [
        {"id": f"m{i}", "mode": "math", "problem": f"{i}+1", "answer": str(i + 1)} for i in range(4)])
    said = under_a_pid_1_that_reaps_nothing(tmp_path, [
        sys.executable, str(ROOT / "run_parallel_rollout.py"), "--mode", "math", "--data", str(data),
        "--output-dir", str(tmp_path / "out"), "--no-progress", "--num-rollouts", "2"])
    assert said["zombies"] == 0, said
    assert (tmp_path / "out").is_dir()
