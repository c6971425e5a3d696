"""Slots: a fixed set of machines the user owns (remote addresses, VM files), each held by at
most one VM of a provider at a time.

::

    acquire(vm_id, deadline) ──► the first free slot, now held by vm_id
                                 (none free: wait for a release until the deadline, then VMError)
    holds(slot, vm_id)       ──► whether vm_id still holds it (a stopped VM does not)
    release(slot, vm_id)     ──► free it, if vm_id holds it (twice is fine); wakes a waiter

A replacement VM boots while its dead predecessor is still being stopped, hence the wait.
The remote provider's slots are guest addresses, the vmware and virtualbox providers' VM files.
"""

from __future__ import annotations

import threading
import time

from ...errors import VMError


class Slots:
    """Which VM holds which of a fixed list of machines; thread-safe."""

    def __init__(self, items: list[str], what: str) -> None:
        self.items = list(items)
        #: what a slot is, for messages: "remote addresses", "VM files of --path-to-vm"
        self.what = what
        self._lock = threading.Condition()
        self._held: dict[str, str] = {}  # slot -> vm id

    def __len__(self) -> int:
        return len(self._held)

    def acquire(self, vm_id: str, deadline: float) -> str:
        """The first free slot, now held by ``vm_id``; VMError when none frees up in time."""
        with self._lock:
            while True:
                mine = [slot for slot, holder in self._held.items() if holder == vm_id]
                if mine:
                    raise VMError(f"VM {vm_id} already holds {mine[0]}")
                free = [slot for slot in self.items if slot not in self._held]
                if free:
                    self._held[free[0]] = vm_id
                    return free[0]
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise VMError(f"all {len(self.items)} {self.what} are in use "
                                  f"({', '.join(self.items)}); VM {vm_id} has none")
                self._lock.wait(remaining)

    def holds(self, slot: str, vm_id: str) -> bool:
        """Whether ``vm_id`` holds ``slot`` now."""
        with self._lock:
            return self._held.get(slot) == vm_id

    def release(self, slot: str, vm_id: str) -> None:
        """Free ``slot`` if ``vm_id`` holds it; a no-op otherwise."""
        with self._lock:
            if self._held.get(slot) == vm_id:
                del self._held[slot]
                self._lock.notify_all()
