"""A VM as the pool keeps it: its state (booting, idle, leased, resetting, dead), who holds
it, and the times it spent leased and resetting; and the error of a pool that is closed."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ..errors import RolloutError
from .providers import VMInfo


class VMState(enum.Enum):
    """Where a VM is in its life."""

    BOOTING = "booting"
    IDLE = "idle"
    LEASED = "leased"
    RESETTING = "resetting"
    DEAD = "dead"


class PoolClosed(RolloutError):
    """The pool was shut down; no more leases."""

    kind = "pool_closed"
    infrastructure = True


@dataclass
class _VM:
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
