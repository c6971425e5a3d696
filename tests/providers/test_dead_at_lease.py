"""A VM killed from outside while IDLE (``kill -9`` of its QEMU, ``docker kill`` of its
container, SIGKILL of its sandbox) is not handed to the next lease: the pool's idle check asks
every 5 s and needs three noes in a row, so a lease seconds after the kill got the dead VM, and
its task spent a retry on it. A lease now asks the provider whether the VM's own process still
runs (``Provider.still_runs``: a waitpid or one /proc read, no call into the guest), replaces a
dead one as the idle check does and hands out another.
"""

from __future__ import annotations

import json
import time

import pytest

from parallel_rollout.guest.client import GuestClient
from parallel_rollout.pool.manager import VMPoolManager, VMState
from parallel_rollout.pool.providers.base import ProviderOptions
from parallel_rollout.pool.providers.common import same_process


def _wait_for(predicate, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


@pytest.mark.parametrize("harness", ["process", "docker", pytest.param("qemu", marks=pytest.mark.slow)],
                         indirect=True)
def test_a_vm_killed_while_idle_is_replaced_at_lease_not_handed_out(harness, tmp_path):
    options = ProviderOptions(boot_timeout_s=harness.boot_timeout_s, spare_vms=0,
                              memory_mb=384 if harness.name == "qemu" else None)
    pool = VMPoolManager(harness.name, harness.new_run_id(), 1, options=options,
                         events_path=str(tmp_path / "events.jsonl"), replacement_budget=1)
    try:
        _wait_for(lambda: pool.stats()["states"]["idle"] == 1, harness.boot_timeout_s)
        victim = next(vm.info for vm in pool._vms.values() if vm.state is VMState.IDLE)
        harness.kill_from_outside(victim)
        # its process is gone (a container's init, or our child QEMU or bwrap, unreaped)
        private = victim.private
        pid, created = ((private["init_pid"], private["init_create_time"]) if harness.name == "docker"
                        else (private["pid"], private["create_time"]))
        _wait_for(lambda: not same_process(pid, created), 10)
        info = pool.lease("w0", "t#0", harness.boot_timeout_s, "h1")
        assert info.vm_id != victim.vm_id, "the lease handed out the VM killed while idle"
        assert GuestClient(info.address).execute("echo ok", shell=True)["output"] == "ok\n"
        pool.release(info.vm_id, True, "release", info.lease)
        stats = pool.stats()
        # replaced as the idle check replaces a VM that stopped running: from the budget
        assert (stats["leases"], stats["replacements"], stats["restarts"]) == (1, 1, 0), stats
    finally:
        pool.shutdown()
    events = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    deaths = [e for e in events if e["to"] == "dead" and e["reason"] != "pool shutdown"]
    assert [(e["vm"], e["from"], e["task"], e["reason"]) for e in deaths] == \
        [(victim.vm_id, "idle", None, "stopped running while idle (found dead at lease)")], deaths
    assert [e["vm"] for e in events if e["to"] == "leased"] == [info.vm_id]
