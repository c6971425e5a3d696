"""Warm spares: VMs booted ahead of need, so that a release never makes a lease wait for a reset.

A pool of ``size`` VMs with ``S`` spares boots ``size + S`` VMs but leases at most ``size``
at once (``size`` is the parallelism the user asked for: memory, licences, the bound of
the benchmark). When a task releases its VM, the next lease takes an IDLE spare at once and
the released VM resets in the background, to become a spare in its turn; the time a VM
spends resetting is then off every task's clock as long as a spare is ready.

* *Shared pool* (``--use-vm-pool``): any IDLE VM may be leased while fewer than ``size`` are
  LEASED.
* *Per-worker VMs* (no shared pool): a worker whose own VM is still resetting (or booting, or
  was replaced) takes an unowned IDLE spare and gives up its own one, which becomes a spare
  once reset. Without spares it waits for its own reset, as before.

How many: ``--spare-vms S``; without it, the provider's ``default_spares`` (0 where a reset
is already cheap or the VMs are a fixed set: process, docker — whose reset hands out a
standby container of its own —, remote, vmware, virtualbox; 1 for qemu, whose reset takes
~0.6 s and whose boot takes seconds).

This module holds the rules; the pool (``manager.py``) calls them under its lock.
"""

from __future__ import annotations

from typing import Any, Iterable

from ..errors import ConfigError
from .vm_record import VMState


def resolve(requested: int | None, provider_cls: Any) -> int:
    """The number of spares: ``requested`` when given, else the provider's default."""
    if requested is None:
        return int(getattr(provider_cls, "default_spares", 0))
    if requested < 0:
        # a run's --spare-vms (run()'s spare_vms) is checked before its pool starts: this is
        # a pool made in Python, whose setting is its options' field
        raise ConfigError(f"ProviderOptions.spare_vms must be 0 or more, got {requested}")
    return requested


def lease_room(vms: Iterable[Any], size: int) -> bool:
    """Whether a shared pool may lease one more VM: fewer than ``size`` are leased."""
    return sum(1 for vm in vms if vm.state is VMState.LEASED) < size


def claim(vms: Iterable[Any], own: Any, worker_id: str) -> Any | None:
    """Per-worker VMs: when the worker's ``own`` VM is not IDLE, an unowned IDLE spare becomes
    its VM (the longest idle first) and ``own`` is given up; None when no spare is ready."""
    free = [vm for vm in vms if vm.state is VMState.IDLE and vm.owner is None]
    if not free:
        return None
    spare = min(free, key=lambda vm: vm.since)
    spare.owner, own.owner = worker_id, None
    return spare


def counts(vms: Iterable[Any], size: int, spare_vms: int, per_worker: bool) -> dict[str, int]:
    """What ``stats()`` says of spares: how many the pool keeps (``spare_vms``) and how many
    are ready now (IDLE VMs beyond the free lease slots: a lease would not need them)."""
    vms = list(vms)
    idle = [vm for vm in vms if vm.state is VMState.IDLE]
    if per_worker:
        owners = {vm.owner for vm in vms if vm.owner is not None and vm.state is not VMState.DEAD}
        unowned_idle = sum(1 for vm in idle if vm.owner is None)
        ready = unowned_idle - max(0, size - len(owners))
    else:
        leased = sum(1 for vm in vms if vm.state is VMState.LEASED)
        ready = len(idle) - max(0, size - leased)
    return {"spare_vms": spare_vms, "spares_ready": max(0, min(ready, spare_vms))}
