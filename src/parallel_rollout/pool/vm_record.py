"""A VM as the pool keeps it: its state (booting, idle, leased, resetting, dead; "stopped"
in the counts once the pool shut it down), who holds it, and the times it spent leased and
resetting."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Iterable

from .providers import VMInfo


class VMState(enum.Enum):
    """Where a VM is in its life."""

    BOOTING = "booting"
    IDLE = "idle"
    LEASED = "leased"
    RESETTING = "resetting"
    DEAD = "dead"


@dataclass
class VMRecord:
    """One VM of the pool: its state, holder, task and times (changed under the pool's lock)."""

    vm_id: str
    state: VMState = VMState.BOOTING
    info: VMInfo | None = None
    owner: str | None = None
    worker_id: str | None = None
    holder: str | None = None
    task_key: str | None = None
    since: float = 0.0
    #: when the boot or reset under way is declared hung (the watchdog's)
    deadline: float = 0.0
    leased_s: float = 0.0
    resetting_s: float = 0.0
    leases: int = 0
    lease_no: int | None = None
    #: idle checks in a row that found it not running (the idle check's)
    failed_checks: int = 0
    #: stopped by the pool's shutdown: DEAD to the pool's logic, "stopped" in its counts
    stopped: bool = False


def state_counts(vms: Iterable[VMRecord]) -> dict[str, int]:
    """How many VMs are in each state (every state named, zeros included), those the
    shutdown stopped as "stopped", not "dead": nothing broke them."""
    counts = {state.value: 0 for state in VMState}
    counts["stopped"] = 0
    for vm in vms:
        counts["stopped" if vm.stopped else vm.state.value] += 1
    return counts


def busy_times(vms: Iterable[VMRecord], now: float) -> tuple[float, float]:
    """Seconds the VMs spent leased (the current leases up to ``now`` included) and resetting."""
    vms = list(vms)
    leased = sum(vm.leased_s + (now - vm.since if vm.state is VMState.LEASED else 0.0) for vm in vms)
    return leased, sum(vm.resetting_s for vm in vms)
