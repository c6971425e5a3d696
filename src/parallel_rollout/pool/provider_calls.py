"""The pool's provider calls: boots and resets, each in a pool thread while it runs, off the lock.

``VMPoolManager`` (``manager``) holds the VMs and their state machine; these are its methods
that call the provider, which may take seconds: ``_boot_new`` starts a boot thread
(``provider.start``, then the fresh VM's check), ``_begin_reset`` a reset thread
(``provider.reset``, then the reset's check). Each thread calls the provider without the
pool's lock and takes it only to move its VM on (IDLE, or DEAD and replaced); one that
finishes after the watchdog gave up on it, or after the pool closed, stops what it made. The
calls are tracked (``_calls``) so that shutdown can wait for them, each until its own
deadline; they run in threads kept between calls (``call_threads``).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from ..errors import ConfigError, RolloutError, VMSettingsMismatch
from ..provenance import program
from .call_threads import Call
from .providers import VMInfo, verify
from .vm_record import VMRecord, VMState

log = logging.getLogger("parallel_rollout.pool.manager")


class ProviderCalls:
    """Boot and reset threads of a ``VMPoolManager`` (whose state they share: ``self``)."""

    def _boot_new(self, reason: str, owner: str | None = None) -> None:
        vm = VMRecord(vm_id=f"{self.vm_prefix}{self._next_index}", owner=owner, since=time.monotonic())
        self._next_index += 1
        # The provider bounds its own boot; this catches a start() that ignores its timeout.
        vm.deadline = vm.since + self._call_timeout_s()
        self._vms[vm.vm_id] = vm
        self._event(vm.vm_id, None, VMState.BOOTING.value, reason, None, None)
        self._counters["boots"] += 1
        self._spawn(self._boot_thread, vm, deadline=vm.deadline, boot=True)

    def _boot_thread(self, vm: VMRecord) -> None:
        """A boot's own thread: ``provider.start`` without the lock, then IDLE (or DEAD)."""
        started = time.monotonic()
        try:
            info = self._provider.start(vm.vm_id)
        except BaseException as exc:  # noqa: BLE001 - any boot failure kills this VM only
            with self._lock:
                if vm.state is VMState.BOOTING:
                    self._counters["boot_failures"] += 1
                    if isinstance(exc, (VMSettingsMismatch, ConfigError)):
                        # the run's settings, not the machine (a ConfigError: the VMs' folder
                        # the run refuses, …): a replacement would fail the same way, so none
                        # boots and every lease fails with it (lease)
                        self._settings_error = self._settings_error or str(exc)
                        self._counters["marked_dead"] += 1
                        self._last_death = f"{vm.vm_id}: {exc}"
                        self._move(vm, VMState.DEAD, f"boot failed: {type(exc).__name__}: {exc}")
                    else:
                        self._mark_dead_and_replace(vm, f"boot failed: {type(exc).__name__}: {exc}")
            return
        # Checked once before its first lease, against the same fingerprint as every reset:
        # no task ran on it, so a difference is the provider's fault (verify.py: it spends
        # the replacement budget, as a failed boot does).
        try:
            differences = self._provider.verify(info)
        except Exception as exc:  # noqa: BLE001 - a check that cannot run is a difference
            differences = [f"the check of the fresh VM failed: {type(exc).__name__}: {exc}"]
        with self._lock:
            if vm.state is VMState.BOOTING and self._running:
                vm.info = info
                self._boot_times.append(time.monotonic() - started)
                if differences:
                    self._counters["boot_failures"] += 1
                    self._counters["dirty_boots"] += 1
                    self._mark_dead_and_replace(vm, verify.summarize(differences, fresh=True),
                                                differences=differences)
                    return
                self._move(vm, VMState.IDLE, "booted")
                return
        # Too late: the watchdog gave up on this boot, or the pool closed meanwhile.
        self._stop_quietly(info)

    def _call_timeout_s(self) -> float:
        """How long a boot or a reset (a restart, for most providers) may take before the
        watchdog gives up on it: the provider bounds its own calls; this catches one that
        ignores its timeout."""
        return self.options.boot_timeout_s + min(5.0, self.options.boot_timeout_s)

    def _begin_reset(self, vm: VMRecord, reason: str) -> None:
        task = vm.task_key  # what a failed verification blames
        self._move(vm, VMState.RESETTING, reason)
        vm.deadline = vm.since + self._call_timeout_s()
        self._spawn(self._reset_thread, vm, vm.info, task, deadline=vm.deadline)

    def _reset_thread(self, vm: VMRecord, info: VMInfo, task: str | None = None) -> None:
        """A reset's own thread: ``provider.reset`` without the lock, then IDLE (or a restart)."""
        started = time.monotonic()
        try:
            new_info = self._provider.reset(info)
            # a reset that left something of the task: quarantined, never handed out
            differences = self._provider.verify(new_info)
        except BaseException as exc:  # noqa: BLE001 - a failed reset kills this VM only
            with self._lock:
                if vm.state is VMState.RESETTING:
                    self._counters["reset_failures"] += 1
                    # Every reset follows a task, whose leftovers (an undeletable folder) may
                    # be what failed it: a restart from the snapshot, not the budget's. A
                    # provider that cannot boot still spends it, at the boot.
                    self._mark_dead_and_replace(vm, f"reset failed: {type(exc).__name__}: {exc}",
                                                charge=False)
            return
        with self._lock:
            self._counters["resets" if self._provider.restores_on_reset else "released_not_reset"] += 1
            self._reset_times.append(time.monotonic() - started)
            vm.info = new_info
            if differences and vm.state is VMState.RESETTING:
                self._counters["quarantined"] += 1
                # what the task left: a restart from the snapshot, not the budget's
                self._mark_dead_and_replace(vm, verify.summarize(differences), charge=False,
                                            differences=differences, after_task=task)
                return
            if vm.state is VMState.RESETTING and self._running:
                self._move(vm, VMState.IDLE, "reset done")
                return
        self._stop_quietly(new_info)

    def _spawn(self, target, *args: Any, deadline: float | None = None, boot: bool = False) -> None:
        """Run ``target(*args)`` in one of the pool's call threads, tracked until it returns;
        the caller never waits for a thread to start (``call_threads``)."""
        call = Call(target, args)
        self._calls[call] = (deadline or time.monotonic() + self.options.boot_timeout_s + 30, boot)
        self._call_threads.start(call)

    def _stop_quietly(self, info: VMInfo | None) -> None:
        if info is None:
            return
        try:
            self._provider.stop(info)
        except RolloutError as exc:  # the provider's own account (its daemon down): one line
            log.warning("stopping %s failed: %s (%s vms sweep --provider-name %s removes what is left)",
                        info.vm_id, exc, program(), self._provider.name)
        except Exception:  # noqa: BLE001 - stopping is best effort; sweep cleans the rest
            log.exception("stopping %s failed", info.vm_id)
