"""The VMs of one attempt: the leases it takes through its env, and what a VM that breaks
during the task means.

An env gets an ``AttemptLeaser`` (the ``VMLeaser`` of ``envs.base``) and takes a VM with
``with leaser.lease() as client`` per block: the attempt's record notes each VM and the time
spent waiting for one, and the engine hears when a wait begins and ends (``LeaseWait``), so
the task clock stops while the attempt queues. A VM that breaks once the task's own actions
ran is the task's doing (``task_breaks_vm``: ``SandboxViolation``, graded), unless its
provider tells it was killed from outside; one that breaks in the task's setup stays
infrastructure, retried on another VM.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from .errors import SandboxViolation, VMError
from .messages import Assignment, LeaseWait
from .pool.leasing import lease_vm


class AttemptLeaser:
    """The ``VMLeaser`` (``envs.base``) an env gets: the leases of one attempt,
    ``with leaser.lease() as client`` per block (an episode, or each call of a
    ``vm_scope == "call"`` env). It notes the VMs and the lease wait in the attempt's record
    and tells the engine when a wait for a VM begins and ends (``LeaseWait``), so that the
    task clock stops while the attempt queues for a VM, and ``held`` each lease it holds
    (None once given back)."""

    def __init__(self, pool: Any, owner: str, item: Assignment, timeout_s: float, holder: str,
                 record: dict[str, Any], send: Callable[[Any], None], held: Callable[[int | None], None]) -> None:
        self.pool, self.owner, self.item = pool, owner, item
        self.timeout_s, self.holder, self.record, self.send = timeout_s, holder, record, send
        self.held = held

    @contextmanager
    def lease(self) -> Iterator[Any]:
        """``with leaser.lease() as client:`` a GuestClient on a leased VM, reset afterwards."""
        from .guest.client import GuestClient

        started = time.monotonic()
        key, attempt = self.item.key, self.item.attempt
        self.send(LeaseWait(key, attempt, True))
        waiting = True
        try:
            with lease_vm(self.pool, self.owner, key, self.timeout_s, self.holder) as info:
                self.send(LeaseWait(key, attempt, False, info.lease, info.vm_id))
                waiting = False
                waited = time.monotonic() - started
                self.record["lease_wait_s"] = round((self.record["lease_wait_s"] or 0.0) + waited, 4)
                self.record["vm"] = info.vm_id  # the last one; "vms" lists every VM used
                if info.vm_id not in self.record.setdefault("vms", []):
                    self.record["vms"].append(info.vm_id)
                self.held(info.lease)
                try:
                    yield GuestClient(info.address)
                finally:
                    self.held(None)
        finally:
            if waiting:  # the lease itself failed
                self.send(LeaseWait(key, attempt, False))


@contextmanager
def task_breaks_vm(phase: str) -> Iterator[None]:
    """A VMError once the task's own actions ran is a ``SandboxViolation``: the task's doing
    (a hostile answer kills its guest agent), not the pool's, unless its provider tells it
    was killed from outside (``leasing.lease_vm``: ``VMKilled``, retried); a failure of
    ``env.reset`` (the task's setup, before any action) stays infrastructure and is retried."""
    try:
        yield
    except SandboxViolation:
        raise
    except VMError as exc:
        raise SandboxViolation(f"the VM broke during the task's {phase}: {exc.kind}: {exc}") from exc
