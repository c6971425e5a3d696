"""A bubblewrap probe whose caller is killed before bwrap said which init it made: the process
provider's ``check_available`` (run at every run's start, by the pool's actor on each Ray node)
and the command agent's both run bwrap with ``--info-fd`` to reap its namespace's init after it
(``orphans.run_bwrap``). With only the caller holding the pipe's reading end, a caller killed
first (a driver killed, and Ray killing its job's workers) left bwrap to die of SIGPIPE at its
first word on the pipe, and bwrap's child, which waits for bwrap's word before it runs
anything, waited forever: a bare bwrap with no child, under pid 1."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from conftest import live_descendants

needs_bwrap = pytest.mark.skipif(not os.path.exists("/usr/bin/bwrap"), reason="bubblewrap is not installed")

#: bwrap, started a moment late: the caller is killed before bwrap has said anything
_LATE_BWRAP = """#!/bin/sh
: > "$PR_TEST_FORKED"
sleep 1
: > "$PR_TEST_FORKED.exec"
exec /usr/bin/bwrap "$@"
"""

_CALLER = """
from parallel_rollout.pool.providers.process import ProcessProvider
ProcessProvider.check_available()
"""


def _bwraps() -> list[str]:
    found = []
    for proc in live_descendants():
        try:
            if proc.name() == "bwrap":
                found.append(f"{proc.pid} {' '.join(proc.cmdline())[:100]} (ppid {proc.ppid()})")
        except psutil.Error:
            pass
    return found


@needs_bwrap
def test_a_probe_whose_caller_is_killed_leaves_no_bwrap(tmp_path):
    bin_dir, forked = tmp_path / "bin", tmp_path / "forked"
    bin_dir.mkdir()
    (bin_dir / "bwrap").write_text(_LATE_BWRAP)
    (bin_dir / "bwrap").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PR_TEST_FORKED": str(forked)}
    caller = subprocess.Popen([sys.executable, "-c", _CALLER], env=env, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not forked.exists():
        assert caller.poll() is None, f"the probe's caller ended first: {caller.stderr.read().decode()}"
        assert time.monotonic() < deadline, "the probe's caller started no bwrap"
        time.sleep(0.02)
    caller.send_signal(signal.SIGKILL)
    caller.wait(timeout=30)
    caller.stderr.close()
    time.sleep(1.5)  # the wrapper's sleep: bwrap starts, as an orphan, and says which init it made
    deadline = time.monotonic() + 10
    while (left := _bwraps()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert (tmp_path / "forked.exec").exists(), "bwrap was not started after its caller was killed"
    assert not left, f"bwrap left behind its killed caller: {left}"
