"""The pool's two watchers: provider calls that hang, and VMs that die while idle.

Each runs in a daemon thread of the pool (``VMPoolManager``) until it shuts down, and
changes a VM's state only under the pool's lock, through the pool's own transitions:

* ``watch_calls`` declares dead any VM whose boot or reset outlived its deadline (a provider
  call that ignores its own timeout): a boot spends the replacement budget, a hung reset
  restarts the VM for free (what the task left may be why). No VM stays BOOTING or
  RESETTING forever.
* ``check_idle`` asks the provider (``Provider.healthy``), outside the lock, whether each
  IDLE VM still runs. One that died while no task held it (killed from outside, the OOM
  killer, a crashed hypervisor) is replaced from the budget, as a VM that fails on its own
  is, before a task is handed a dead VM and graded for it. It takes ``IDLE_CHECK_FAILURES``
  answers in a row, ``IDLE_CHECK_S`` apart: one slow answer on a loaded machine is not a
  death. A VM leased or reset between the question and the answer is left alone.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from .vm_record import VMState

if TYPE_CHECKING:
    from .manager import VMPoolManager

#: how often the watchdog looks at deadlines, seconds
WATCH_S = 0.5
#: how often each IDLE VM is asked whether it still runs, and how many noes make a death
IDLE_CHECK_S = 5.0
IDLE_CHECK_FAILURES = 3


def watch_calls(pool: VMPoolManager) -> None:
    """Declare dead every VM whose boot or reset is past its deadline, until shutdown."""
    while True:
        time.sleep(WATCH_S)
        with pool._lock:
            if not pool._running:
                return
            now = time.monotonic()
            for vm in list(pool._vms.values()):
                if vm.state is VMState.BOOTING and now > vm.deadline:
                    pool._counters["boot_failures"] += 1
                    pool._mark_dead_and_replace(
                        vm, f"boot timed out after {pool.options.boot_timeout_s:.0f}s")
                elif vm.state is VMState.RESETTING and now > vm.deadline:
                    pool._counters["reset_failures"] += 1
                    pool._mark_dead_and_replace(
                        vm, f"reset hung for {pool._call_timeout_s():.0f}s", charge=False)


def check_idle(pool: VMPoolManager) -> None:
    """Replace every IDLE VM the provider says no longer runs, until shutdown."""
    while True:
        time.sleep(IDLE_CHECK_S)
        with pool._lock:
            if not pool._running:
                return
            idle = [(vm, vm.info) for vm in pool._vms.values() if vm.state is VMState.IDLE]
        for vm, info in idle:
            try:
                healthy = pool._provider.healthy(info)
            except Exception:  # noqa: BLE001 - a provider that cannot tell: not running
                healthy = False
            with pool._lock:
                if vm.state is not VMState.IDLE or vm.info is not info or not pool._running:
                    continue
                vm.failed_checks = 0 if healthy else vm.failed_checks + 1
                if vm.failed_checks >= IDLE_CHECK_FAILURES:
                    pool._mark_dead_and_replace(
                        vm, f"stopped running while idle ({vm.failed_checks} checks "
                            f"{IDLE_CHECK_S:.0f}s apart)")
