"""A bubblewrap whose caller is killed before bwrap said which init it made: the process
provider's probe (``check_available``, at every run's start, by the pool's actor on each Ray
node) and a command agent's sandbox run bwrap with ``--info-fd`` to reap its namespace's init
after it (``orphans.InitReport``). On a pipe, a caller killed first (a driver killed, and Ray
killing its job's workers; a worker killed as its agent starts) left bwrap to die of SIGPIPE
at its first word, and bwrap's child, which waits for bwrap's word before it runs anything,
waited forever: a bare bwrap with no child, under pid 1."""

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

#: what starts a bwrap that reports its init: the process provider's probe, a command agent
_CALLERS = {
    "probe": "from parallel_rollout.pool.providers.process import ProcessProvider\n"
             "ProcessProvider.check_available()\n",
    # an agent that does not end at its stdin's end: it would run on as an orphan
    "command agent": "from parallel_rollout.agents.command_process import AgentProcess\n"
                     "AgentProcess(['sleep', '1000'], 'sleep 1000')\n"
                     "import time; time.sleep(60)\n",
}
#: whether bwrap still starts after its caller was killed: the probe's does (and must then
#: leave nothing); an agent's fork dies with its worker from the fork on (``guarded``)
_STARTS_LATE = {"probe": True, "command agent": False}


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
@pytest.mark.parametrize("caller", sorted(_CALLERS))
def test_a_bwrap_whose_caller_is_killed_before_it_said_its_init_leaves_nothing(tmp_path, caller):
    starts_late = _STARTS_LATE[caller]
    bin_dir, forked = tmp_path / "bin", tmp_path / "forked"
    bin_dir.mkdir()
    (bin_dir / "bwrap").write_text(_LATE_BWRAP)
    (bin_dir / "bwrap").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PR_TEST_FORKED": str(forked)}
    caller = subprocess.Popen([sys.executable, "-c", _CALLERS[caller]], env=env, stderr=subprocess.PIPE)
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
    assert (tmp_path / "forked.exec").exists() == starts_late, \
        "bwrap was not started after its caller was killed" if starts_late else \
        "an agent's bwrap started after its worker was killed"
    assert not left, f"bwrap left behind its killed caller: {left}"
