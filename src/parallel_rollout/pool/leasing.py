"""Leasing: how an attempt holds VMs of the pool, one block at a time.

One idea under one name. A *lease* is a VM held by one attempt for a block of code and given
back when the block ends:

* the pool's side is ``VMPoolManager.lease`` (block until a VM is IDLE), ``release`` (reset
  it off the worker's path) and ``mark_dead`` (it broke);
* ``lease_vm(pool, …)`` is the block: ``with lease_vm(pool, …) as info:`` — a normal exit
  or a task error releases the VM (it is reset); a ``VMError`` marks it dead, so a broken VM
  never returns to IDLE. It broke while the task held it, so it restarts from its snapshot
  without spending the pool's replacement budget (a task's failure is not the pool's).
  Before that the pool asks the provider why it died (``death_cause``): a VM killed from
  outside (a signal the pool did not send, the host's OOM killer, the machine gone) is not
  the task's doing, and the block raises ``VMKilled`` (infrastructure: retried on another
  VM) instead of the error the task saw;
* ``AttemptLeaser`` is the ``VMLeaser`` (``envs.base``) that an env gets:
  ``with vm.lease() as client:`` yields a ``GuestClient``; it also notes the VMs and the
  lease wait in the attempt's record and tells the engine when a wait for a VM begins and
  ends (``LeaseWait``), so that the task clock stops while the attempt queues for a VM.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from ..errors import VMError, VMKilled
from ..messages import Assignment, LeaseWait
from .providers import VMInfo


@contextmanager
def lease_vm(pool: Any, worker_id: str, task_key: str, timeout: float, holder: str) -> Iterator[VMInfo]:
    """Hold one VM of ``pool`` for the block (see the module docstring)."""
    info = pool.lease(worker_id, task_key, timeout, holder)
    try:
        yield info
    except VMError as exc:
        cause = pool.death_cause(info.vm_id, info.lease)
        if cause:
            killed = VMKilled(f"VM {info.vm_id} was killed from outside during {task_key}, not by "
                              f"the task: {cause} (the task saw: {exc.kind}: {exc})")
            pool.mark_dead(info.vm_id, f"killed from outside during {task_key}: {cause}", info.lease, True)
            raise killed from exc
        pool.mark_dead(info.vm_id, f"{exc.kind} during {task_key}: {exc}", info.lease, True)
        raise
    except BaseException:
        pool.release(info.vm_id, True, "release after task error", info.lease)
        raise
    else:
        pool.release(info.vm_id, True, "release", info.lease)


class AttemptLeaser:
    """The leases of one attempt: ``with leaser.lease() as client`` per block (an episode,
    or each call of a ``vm_scope == "call"`` env); notes them in ``record``."""

    def __init__(self, pool: Any, owner: str, item: Assignment, timeout_s: float, holder: str,
                 record: dict[str, Any], send: Callable[[Any], None]) -> None:
        self.pool, self.owner, self.item = pool, owner, item
        self.timeout_s, self.holder, self.record, self.send = timeout_s, holder, record, send

    @contextmanager
    def lease(self) -> Iterator[Any]:
        """``with leaser.lease() as client:`` a GuestClient on a leased VM, reset afterwards."""
        from ..guest.client import GuestClient

        started = time.monotonic()
        key, attempt = self.item.key, self.item.attempt
        self.send(LeaseWait(key, attempt, True))
        waiting = True
        try:
            with lease_vm(self.pool, self.owner, key, self.timeout_s, self.holder) as info:
                self.send(LeaseWait(key, attempt, False))
                waiting = False
                waited = time.monotonic() - started
                self.record["lease_wait_s"] = round((self.record["lease_wait_s"] or 0.0) + waited, 4)
                self.record["vm"] = info.vm_id  # the last one; "vms" lists every VM used
                if info.vm_id not in self.record.setdefault("vms", []):
                    self.record["vms"].append(info.vm_id)
                yield GuestClient(info.address)
        finally:
            if waiting:  # the lease itself failed
                self.send(LeaseWait(key, attempt, False))
