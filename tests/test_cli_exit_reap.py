"""The command leaves no zombie of its own under a pid 1 that reaps nothing (a container's
``sh`` as init, ``docker run`` without --init): multiprocessing's resource tracker, its
child, is stopped and reaped as it exits."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT, shell_task, write_tasks

#: pid 1 of a new pid namespace: starts the command, waits for it alone (never for an orphan),
#: noting the pid of every resource tracker seen meanwhile; then says the state of each
INIT = r"""
import os, sys, time
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[1], sys.argv[1:])
trackers = set()
while not os.waitpid(pid, os.WNOHANG)[0]:
    for p in filter(str.isdigit, os.listdir("/proc")):
        try:
            if b"multiprocessing.resource_tracker" in open(f"/proc/{p}/cmdline", "rb").read():
                trackers.add(p)
        except OSError:
            pass
    time.sleep(0.02)
time.sleep(2)  # an orphan's end, had it one
def state(p):
    try:
        return open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "reaped"
print("trackers:", sorted(state(p) for p in trackers))
"""


def test_a_run_under_a_pid_1_that_reaps_nothing_leaves_no_resource_tracker_zombie(tmp_path):
    """The tracker ended on its own as the command exited, an orphan init never reaped: one
    zombie per run, piling up in a long-lived container."""
    unshare = shutil.which("unshare")
    if unshare is None or subprocess.run([unshare, "--pid", "--fork", "--mount-proc", "true"]).returncode != 0:
        pytest.skip("needs unshare --pid (root, or user namespaces)")
    if shutil.which("bwrap") is None:
        pytest.skip("needs bubblewrap")
    (tmp_path / "init.py").write_text(INIT)
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("a")])
    said = subprocess.run([unshare, "--pid", "--fork", "--mount-proc", sys.executable, str(tmp_path / "init.py"),
                           sys.executable, str(ROOT / "run_parallel_rollout.py"), "--mode", "shell", "--data",
                           str(data), "--output-dir", str(tmp_path / "out"), "--no-progress"],
                          capture_output=True, text=True, timeout=300)
    assert said.returncode == 0, said.stderr
    line = said.stdout.splitlines()[-1]
    assert line.startswith("trackers: "), said.stdout
    states = ast.literal_eval(line[len("trackers: "):])  # each a /proc state (Z: a zombie), or 'reaped'
    assert states and set(states) == {"reaped"}, said.stdout
