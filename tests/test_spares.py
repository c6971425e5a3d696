"""Warm spares (``--spare-vms``): VMs booted ahead, so that a release hands out a ready VM at
once and the old one resets in the background; never more than the pool's size leased.

The reset is made a second long on purpose (``chaos_plugins.SlowResetProvider``, the real
process provider plus a sleep), so "at once" is far from "after a reset".
"""

from __future__ import annotations

import json
import shutil
import time

import pytest
from click.testing import CliRunner

from conftest import read_results, shell_task, write_tasks
from pool_support import read_events, wait_idle, wait_until
from parallel_rollout.cli import main
from parallel_rollout.config import build_config
from parallel_rollout.errors import ConfigError, LeaseTimeout
from parallel_rollout.pool.manager import VMPoolManager
from parallel_rollout.pool.providers import ProviderOptions, get_provider

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")

SLOW = "chaos_plugins:SlowResetProvider"


def _pool(tmp_path, size, spares, per_worker=False):
    return VMPoolManager(SLOW, f"s{time.monotonic_ns() % 10**9}", size,
                         options=ProviderOptions(boot_timeout_s=30, spare_vms=spares),
                         events_path=str(tmp_path / "events.jsonl"), per_worker=per_worker)




def _lease_at_once(pool, owner, key):
    started = time.monotonic()
    info = pool.lease(owner, key, timeout=30, holder="h1")
    return info, time.monotonic() - started


def test_shared_pool_leases_a_spare_at_once_and_never_more_than_its_size(tmp_path):
    pool = _pool(tmp_path, size=1, spares=1)
    try:
        wait_idle(pool, 2)
        stats = pool.stats()
        assert stats["spare_vms"] == 1 and stats["spares_ready"] == 1
        first = pool.lease("w0", "a#0", timeout=30, holder="h1")
        with pytest.raises(LeaseTimeout):  # the spare is idle, but one VM is leased already
            pool.lease("w1", "b#0", timeout=0.6, holder="h2")
        pool.release(first.vm_id)
        second, waited = _lease_at_once(pool, "w1", "b#0")
        assert second.vm_id != first.vm_id and waited < 0.5
        assert pool.stats()["states"]["resetting"] == 1  # the old VM resets meanwhile
        wait_until(lambda: pool.stats()["spares_ready"] == 1)  # the old VM, reset: the next spare
        pool.release(second.vm_id)
        third, waited = _lease_at_once(pool, "w0", "c#0")
        assert third.vm_id == first.vm_id and waited < 0.5
        pool.release(third.vm_id)
        wait_until(lambda: pool.stats()["states"]["idle"] == 2)
        assert pool.stats()["spares_ready"] == 1
    finally:
        pool.shutdown()
    events = read_events(tmp_path / "events.jsonl")
    reset_done = next(e["time"] for e in events if e["vm"] == first.vm_id and e["reason"] == "reset done")
    leased = next(e["time"] for e in events if e["vm"] == second.vm_id and e["to"] == "leased")
    assert leased < reset_done


def test_without_spares_the_next_lease_waits_for_the_reset(tmp_path):
    pool = _pool(tmp_path, size=1, spares=0)
    try:
        first = pool.lease("w0", "a#0", timeout=30, holder="h1")
        pool.release(first.vm_id)
        second, waited = _lease_at_once(pool, "w0", "b#0")
        assert second.vm_id == first.vm_id and waited >= 0.9
        assert pool.stats()["spare_vms"] == 0 and pool.stats()["spares_ready"] == 0
        pool.release(second.vm_id)
    finally:
        pool.shutdown()


def test_per_worker_vms_swap_in_a_spare(tmp_path):
    pool = _pool(tmp_path, size=1, spares=1, per_worker=True)
    try:
        wait_idle(pool, 2)
        first = pool.lease("w0", "a#0", timeout=30, holder="h1")
        pool.release(first.vm_id)
        second, waited = _lease_at_once(pool, "w0", "b#0")
        assert second.vm_id != first.vm_id and waited < 0.5
        pool.release(second.vm_id)
        wait_until(lambda: pool.stats()["states"]["idle"] == 2)
        # the given-up VM is nobody's: a second worker may take it, the first keeps its own
        other = pool.lease("w1", "c#0", timeout=5, holder="h2")
        mine = pool.lease("w0", "d#0", timeout=5, holder="h1")
        assert {other.vm_id, mine.vm_id} == {first.vm_id, second.vm_id}
        assert mine.vm_id == second.vm_id
        pool.release(other.vm_id)
        pool.release(mine.vm_id)
    finally:
        pool.shutdown()


def test_defaults_per_provider_and_bad_input(tmp_path):
    assert get_provider("qemu").default_spares == 1
    assert get_provider("process").default_spares == 0
    with pytest.raises(ConfigError, match="--spare-vms must be 0 or more"):
        build_config({"spare_vms": -1, "output_dir": str(tmp_path)})
    with pytest.raises(ConfigError, match="the pool needs 3 VMs"):
        build_config({"provider_name": "remote", "vm_address": ("127.0.0.1:1", "127.0.0.1:2"),
                      "num_rollouts": 2, "spare_vms": 1, "output_dir": str(tmp_path)})


def test_cli_spares_in_the_progress_and_the_summary(tmp_path):
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task(f"t{i}") for i in range(4)])
    result = CliRunner().invoke(main, [
        "--mode", "shell", "--data", str(data), "--output-dir", str(tmp_path / "out"),
        "--run-id", "sp", "--use-vm-pool", "--num-vms", "1", "--num-rollouts", "2",
        "--spare-vms", "1", "--provider-name", SLOW, "--progress"])
    assert result.exit_code == 0, (result.output, result.exception)
    run_dir = tmp_path / "out" / "sp"
    finals = [r for r in read_results(run_dir) if r.get("final")]
    assert len(finals) == 4 and {r["status"] for r in finals} == {"success"}
    assert {r["vm"] for r in finals} == {"vm-0", "vm-1"}  # the spare served tasks too
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["vm"]["spare_vms"] == 1
    assert " spares " in result.output
    assert " + 1 spare, utilization " in result.output  # the summary's VMs line, as the README says
    events = [e for e in read_events(run_dir / "events.jsonl") if e.get("event") == "vm"]
    level = peak = 0
    for event in events:  # never more than --num-vms leased at once
        level += (event["to"] == "leased") - (event["from"] == "leased")
        peak = max(peak, level)
    assert peak == 1
