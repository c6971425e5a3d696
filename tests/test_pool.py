"""VMPoolManager: the state machine, leasing, resets, deaths and exhaustion, on real sandboxes.

The pool runs in the test process here (the Manager only adds a process boundary, covered by
the end-to-end tests); providers are the real process provider, or it with one part broken.
"""

from __future__ import annotations

import json
import threading
import time
from contextlib import contextmanager

import psutil
import pytest

from parallel_rollout.errors import LeaseTimeout, PoolExhausted, VMError, WorkerDied
from parallel_rollout.guest.client import GuestClient
from parallel_rollout.pool.leasing import lease_vm
from parallel_rollout.pool.manager import VMPoolManager, VMState
from parallel_rollout.pool.server import start_pool
from parallel_rollout.pool.providers import ProviderOptions


@contextmanager
def make_pool(tmp_path, size=1, provider="process", budget=None, per_worker=False, boot_timeout_s=30.0):
    pool = VMPoolManager(provider, f"t{time.monotonic_ns() % 10**9}", size,
                         options=ProviderOptions(boot_timeout_s=boot_timeout_s),
                         events_path=str(tmp_path / "events.jsonl"),
                         replacement_budget=budget, per_worker=per_worker)
    try:
        yield pool
    finally:
        pool.shutdown()


def events(tmp_path):
    return [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]


def wait_for(predicate, timeout=15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    raise AssertionError("condition not reached in time")


def test_lease_release_reset_cycle_is_logged(tmp_path):
    with make_pool(tmp_path, size=2) as pool:
        wait_for(lambda: pool.stats()["states"]["idle"] == 2, timeout=30)
        info = pool.lease("w0", "task#0", timeout=10, holder="h111")
        assert pool.stats()["states"]["leased"] == 1
        pool.release(info.vm_id)
        # release returns at once; the reset happens in the pool's threads
        wait_for(lambda: pool.stats()["states"]["idle"] == 2)
        stats = pool.stats()
        assert stats["leases"] == 1 and stats["resets"] == 1
    transitions = [(e["vm"], e["from"], e["to"]) for e in events(tmp_path) if e["vm"] == info.vm_id]
    assert transitions[:5] == [
        (info.vm_id, None, "booting"), (info.vm_id, "booting", "idle"), (info.vm_id, "idle", "leased"),
        (info.vm_id, "leased", "resetting"), (info.vm_id, "resetting", "idle"),
    ]
    leased_event = next(e for e in events(tmp_path) if e["to"] == "leased")
    assert leased_event["task"] == "task#0" and leased_event["worker"] == "w0"
    assert all({"time", "vm", "from", "to", "task", "worker", "reason"} <= set(e) for e in events(tmp_path))


def test_lease_blocks_until_a_vm_is_released(tmp_path):
    with make_pool(tmp_path, size=1) as pool:
        first = pool.lease("w0", "a#0", timeout=30, holder="h1")
        got = []
        thread = threading.Thread(target=lambda: got.append(pool.lease("w1", "b#0", timeout=30, holder="h2")))
        thread.start()
        time.sleep(0.5)
        assert not got, "a lease was granted while the only VM was leased"
        pool.release(first.vm_id)
        thread.join(10)
        assert got and got[0].vm_id == first.vm_id
        pool.release(got[0].vm_id)


def test_lease_timeout(tmp_path):
    with make_pool(tmp_path, size=1) as pool:
        info = pool.lease("w0", "a#0", timeout=30, holder="h1")
        started = time.monotonic()
        with pytest.raises(LeaseTimeout, match="no VM became idle"):
            pool.lease("w1", "b#0", timeout=0.5, holder="h2")
        assert time.monotonic() - started < 5
        pool.release(info.vm_id)


def test_reset_restores_the_snapshot_and_kills_processes(tmp_path):
    with make_pool(tmp_path, size=1) as pool:
        info = pool.lease("w0", "a#0", timeout=30, holder="h1")
        vm = GuestClient(info.address)
        vm.execute("echo dirty > ~/left.txt; bash -c 'exec -a stray-proc sleep 600' >/dev/null 2>&1 &", shell=True)
        assert vm.execute("cat ~/left.txt", shell=True)["output"].strip() == "dirty"
        def strays():
            return [p for p in psutil.process_iter(["cmdline"]) if (p.info["cmdline"] or [""])[0] == "stray-proc"]

        wait_for(lambda: strays())  # the shell returns before the background exec happens
        stray = strays()
        pool.release(info.vm_id)
        info2 = pool.lease("w0", "b#0", timeout=30, holder="h1")
        vm2 = GuestClient(info2.address)
        assert vm2.execute("test -e ~/left.txt", shell=True)["returncode"] != 0
        assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in stray)
        pool.release(info2.vm_id)


def test_mark_dead_boots_a_replacement_within_budget(tmp_path):
    with make_pool(tmp_path, size=1, budget=1) as pool:
        info = pool.lease("w0", "a#0", timeout=30, holder="h1")
        pool.mark_dead(info.vm_id, "test: broken")
        replacement = pool.lease("w0", "b#0", timeout=30, holder="h1")
        assert replacement.vm_id != info.vm_id
        assert pool.stats()["replacements_left"] == 0
        pool.mark_dead(replacement.vm_id, "test: broken again")
        started = time.monotonic()
        with pytest.raises(PoolExhausted, match="every VM .* is dead"):
            pool.lease("w0", "c#0", timeout=60, holder="h1")
        assert time.monotonic() - started < 5, "PoolExhausted must come at once, not after the timeout"
    reasons = [e["reason"] for e in events(tmp_path) if e["to"] == "dead"]
    assert "test: broken" in reasons and any(r.startswith("replaces") for r in
                                               (e["reason"] for e in events(tmp_path) if e["to"] == "booting"))


def test_unhealthy_release_kills_the_vm(tmp_path):
    with make_pool(tmp_path, size=1, budget=0) as pool:
        info = pool.lease("w0", "a#0", timeout=30, holder="h1")
        pool.release(info.vm_id, healthy=False, reason="guest broke")
        with pytest.raises(PoolExhausted):
            pool.lease("w0", "b#0", timeout=30, holder="h1")


def test_a_vm_killed_while_idle_is_replaced_before_a_task_gets_it(tmp_path, monkeypatch):
    """Killed from outside while no task holds it: the idle check (three noes in a row) marks
    it dead and a replacement from the budget serves the next lease; no task is blamed."""
    import os
    import signal

    from parallel_rollout.pool import watchers

    monkeypatch.setattr(watchers, "IDLE_CHECK_S", 0.2)
    with make_pool(tmp_path, size=1, budget=1) as pool:
        wait_for(lambda: pool.stats()["states"]["idle"] == 1, timeout=30)
        victim = next(vm.info for vm in pool._vms.values() if vm.state is VMState.IDLE)
        time.sleep(1.0)  # healthy VMs pass their checks: nothing happens
        assert pool.stats()["marked_dead"] == 0
        for pid in (victim.private["init_pid"], victim.private["pid"]):
            os.kill(pid, signal.SIGKILL)
        wait_for(lambda: pool.stats()["replacements"] == 1 and pool.stats()["states"]["idle"] == 1,
                 timeout=30)
        info = pool.lease("w0", "a#0", timeout=30, holder="h1")
        assert info.vm_id != victim.vm_id
        assert GuestClient(info.address).execute("echo ok", shell=True)["output"] == "ok\n"
        assert pool.stats()["replacements_left"] == 0
    deaths = [e for e in events(tmp_path) if e["to"] == "dead" and e["reason"] != "pool shutdown"]
    assert [(e["vm"], e["reason"].startswith("stopped running while idle")) for e in deaths] == \
        [(victim.vm_id, True)]
    assert deaths[0]["task"] is None


def test_failed_reset_marks_dead_and_restarts_for_free(tmp_path, monkeypatch):
    """What the task left may be why a reset failed: the VM restarts from its snapshot and
    the replacement budget (here none) is not spent."""
    monkeypatch.setenv("PR_CHAOS_DIR", str(tmp_path))
    with make_pool(tmp_path, size=1, provider="chaos_plugins:FlakyResetProvider", budget=0) as pool:
        info = pool.lease("w0", "a#0", timeout=30, holder="h1")
        pool.release(info.vm_id)
        again = pool.lease("w0", "b#0", timeout=30, holder="h1")
        assert again.vm_id != info.vm_id
        stats = pool.stats()
        assert stats["reset_failures"] == 1 and stats["restarts"] == 1 and stats["replacements"] == 0
        pool.release(again.vm_id)
    assert any("reset failed" in e["reason"] for e in events(tmp_path) if e["to"] == "dead")


def test_a_hung_reset_is_given_up_and_the_vm_restarted(tmp_path, monkeypatch):
    """A reset that never returns: the watchdog marks the VM dead after the call's deadline
    and restarts it from its snapshot (free); it is never RESETTING forever."""
    monkeypatch.setenv("PR_CHAOS_DIR", str(tmp_path))
    with make_pool(tmp_path, size=1, provider="chaos_plugins:HangingResetProvider", budget=0,
                   boot_timeout_s=6.0) as pool:
        info = pool.lease("w0", "a#0", timeout=30, holder="h1")
        pool.release(info.vm_id)
        started = time.monotonic()
        again = pool.lease("w0", "b#0", timeout=40, holder="h1")
        assert again.vm_id != info.vm_id and time.monotonic() - started < 30
        stats = pool.stats()
        assert stats["reset_failures"] == 1 and stats["restarts"] == 1 and stats["replacements"] == 0
        pool.release(again.vm_id)
    assert any("reset hung" in e["reason"] for e in events(tmp_path) if e["to"] == "dead")


def test_boot_failures_exhaust_the_pool_without_hanging(tmp_path):
    with make_pool(tmp_path, size=2, provider="chaos_plugins:BootFailsProvider", budget=2) as pool:
        started = time.monotonic()
        with pytest.raises(PoolExhausted, match="4 failed boots"):
            pool.lease("w0", "a#0", timeout=120, holder="h1")
        assert time.monotonic() - started < 10


def test_hanging_boot_times_out(tmp_path):
    with make_pool(tmp_path, size=1, provider="chaos_plugins:BootHangsProvider", budget=0,
                   boot_timeout_s=0.5) as pool:
        started = time.monotonic()
        with pytest.raises(PoolExhausted, match="boot timed out"):
            pool.lease("w0", "a#0", timeout=120, holder="h1")
        assert time.monotonic() - started < 15


def test_reclaim_resets_a_dead_workers_vm_and_bars_that_spawn_not_its_pid(tmp_path):
    with make_pool(tmp_path, size=1) as pool:
        # holders as the engine makes them: worker index, spawn number, pid
        info = pool.lease("w0", "a#0", timeout=30, holder="w0.1.4242")
        GuestClient(info.address).execute("touch ~/mine", shell=True)
        assert pool.reclaim("w0.1.4242") == [info.vm_id]
        with pytest.raises(WorkerDied):
            pool.lease("w0", "b#0", timeout=5, holder="w0.1.4242")
        # the respawned worker got the same pid back from the kernel: it still leases
        again = pool.lease("w0", "b#0", timeout=30, holder="w0.2.4242")
        pool.release(again.vm_id)
        other = pool.lease("w1", "b#0", timeout=30, holder="w1.1.5000")
        assert GuestClient(other.address).execute("test -e ~/mine", shell=True)["returncode"] != 0
        # the dead worker's late release must not free a VM someone else holds
        pool.release(info.vm_id, True, "late", info.lease)
        pool.mark_dead(info.vm_id, "late", info.lease)
        assert pool.stats()["states"]["leased"] == 1 and pool.stats()["marked_dead"] == 0
        pool.release(other.vm_id)
        assert pool.stats()["reclaimed"] == 1


def test_per_worker_mode_binds_one_vm_per_worker(tmp_path):
    with make_pool(tmp_path, size=2, per_worker=True) as pool:
        seen = {}
        for round_ in range(3):
            for worker in ("w0", "w1"):
                info = pool.lease(worker, f"{worker}-{round_}#0", timeout=30, holder="h1")
                seen.setdefault(worker, set()).add(info.vm_id)
                pool.release(info.vm_id)
        assert all(len(v) == 1 for v in seen.values())
        assert seen["w0"] != seen["w1"]


def test_lease_context_manager(tmp_path):
    with make_pool(tmp_path, size=1, budget=1) as pool:
        with lease_vm(pool, "w0", "a#0", 30, 1) as info:
            assert pool.stats()["states"]["leased"] == 1
        wait_for(lambda: pool.stats()["states"]["idle"] == 1)
        with pytest.raises(ValueError):
            with lease_vm(pool, "w0", "b#0", 30, 1):
                raise ValueError("task error: the VM is fine")
        assert pool.stats()["marked_dead"] == 0
        with pytest.raises(VMError):
            with lease_vm(pool, "w0", "c#0", 30, 1) as info:
                raise VMError("the VM broke")
        assert pool.stats()["marked_dead"] == 1
    dead = [e for e in events(tmp_path) if e["to"] == "dead" and e["vm"] == info.vm_id]
    assert dead and "the VM broke" in dead[0]["reason"]


def test_pool_through_the_manager_process(tmp_path):
    import multiprocessing

    manager, pool = start_pool(multiprocessing.get_context("spawn"), "process", "mgr-test", 2,
                               events_path=str(tmp_path / "events.jsonl"))
    try:
        wait_for(lambda: pool.stats()["states"]["idle"] == 2, timeout=30)
        info = pool.lease("w0", "a#0", 30, 1)
        assert GuestClient(info.address).execute(["echo", "hi"])["output"].strip() == "hi"
        pool.release(info.vm_id)
        assert "VMPoolManager process" in repr(pool)
        held = [pool.lease("w1", "c#0", 30, 2), pool.lease("w2", "d#0", 30, 3)]
        with pytest.raises(LeaseTimeout):  # the exception crosses the process boundary intact
            pool.lease("w0", "b#0", 0.3, 1)
        assert {vm.vm_id for vm in held} == {"vm-0", "vm-1"}
    finally:
        pool.shutdown()
        manager.shutdown()
    assert VMState.DEAD.value in {e["to"] for e in events(tmp_path)}


def test_two_pools_of_one_run_id_at_once_boot_without_a_failure(tmp_path):
    """Two runs of one run id in two output folders may run at once, each with its pool (a
    Manager process). The pools kept a VM id's sandboxes in one folder: the second one's
    boots failed ("VM vm-0 of run same is already running") and each cost a replacement
    (three such runs left the third none). Each pool has folders of its own now."""
    import multiprocessing

    run_id = f"same{time.monotonic_ns() % 10**9}"
    pools = []
    try:
        for name in ("a", "b"):
            pools.append(start_pool(multiprocessing.get_context("spawn"), "process", run_id, 2,
                                    events_path=str(tmp_path / f"events-{name}.jsonl")))
        for turn in range(3):  # the resets move the VMs into their standbys' folders
            for _, pool in pools:
                wait_for(lambda: pool.stats()["states"]["idle"] == 2, timeout=30)
                held = [pool.lease(f"w{i}", f"t{i}#{turn}", 30, i + 1) for i in range(2)]
                for info in held:
                    assert GuestClient(info.address).execute(["true"])["returncode"] == 0
                    pool.release(info.vm_id)
        for (_, pool), name in zip(pools, ("a", "b")):
            wait_for(lambda: pool.stats()["states"]["idle"] == 2)
            stats = pool.stats()
            assert (stats["boot_failures"], stats["replacements"], stats["replacements_left"]) == (0, 0, 4), stats
            lines = (tmp_path / f"events-{name}.jsonl").read_text()
            assert "boot failed" not in lines, lines
    finally:
        for manager, pool in pools:
            pool.shutdown()
            manager.shutdown()
