"""The pool's liveness checks of a VM's process against a moving clock (issue: idle VMs
declared dead while the workers imported slowly)."""

from __future__ import annotations

import os
import subprocess

import pytest

from parallel_rollout.pool.providers.common import create_time, same_process


@pytest.fixture
def child():
    proc = subprocess.Popen(["sleep", "30"])
    yield proc
    proc.kill()
    proc.wait()


@pytest.mark.parametrize("step", [1.0, -1.0, 2.0])
def test_a_clock_step_that_moves_btime_is_not_a_death(child, step):
    """/proc/stat's btime is whole seconds: a step of the wall clock that carries the boot time
    across a second makes every start time read ``step`` seconds off from the one recorded."""
    recorded = create_time(child.pid)
    assert same_process(child.pid, recorded - step)


@pytest.mark.parametrize("off", [0.5, 0.03, 3.0, 3600.0])
def test_another_start_is_another_process(child, off):
    assert not same_process(child.pid, create_time(child.pid) - off)


def test_a_dead_process_is_not_the_same(tmp_path):
    proc = subprocess.Popen(["true"])
    created = create_time(proc.pid)
    proc.wait()
    assert not same_process(proc.pid, created) and not same_process(os.getpid(), None)
