"""The pool's two watchers: provider calls that hang, and VMs that die while idle.

Each runs in a daemon thread of the pool (``VMPoolManager``) until it shuts down; each pass
is a pool method (state transitions happen only in pool methods, under the pool's lock):

* ``watch_calls`` declares dead any VM whose boot or reset outlived its deadline (a provider
  call that ignores its own timeout): a boot spends the replacement budget, a hung reset
  restarts the VM for free (what the task left may be why). No VM stays BOOTING or
  RESETTING forever.
* ``check_idle`` asks the provider (``Provider.healthy``), outside the lock, whether each
  IDLE VM still runs. One that died while no task held it (killed from outside, the OOM
  killer, a crashed hypervisor) is replaced from the budget, as a VM that fails on its own
  is, before a task is handed a dead VM and graded for it. It takes ``IDLE_CHECK_FAILURES``
  answers in a row, ``IDLE_CHECK_S`` apart: one slow answer on a loaded machine is not a
  death. A VM leased or reset between the question and the answer is left alone. Between
  two checks, a lease looks at the VM's own process itself (``Provider.still_runs``, in
  ``VMPoolManager.lease``): a VM killed meanwhile is replaced there, never handed out.
"""

from __future__ import annotations

import time
from typing import Protocol


class WatchedPool(Protocol):
    """What the watchers call on the pool (``VMPoolManager``): each pass changes states
    under the pool's lock, and says False once the pool is shut down."""

    def expire_hung_calls(self) -> bool: ...

    def check_idle_once(self, failures: int, interval_s: float) -> bool: ...


#: how often the watchdog looks at deadlines, seconds
WATCH_S = 0.5
#: how often each IDLE VM is asked whether it still runs, and how many noes make a death
IDLE_CHECK_S = 5.0
IDLE_CHECK_FAILURES = 3


def watch_calls(pool: WatchedPool) -> None:
    """Declare dead every VM whose boot or reset is past its deadline, until shutdown."""
    while True:
        time.sleep(WATCH_S)
        if not pool.expire_hung_calls():
            return


def check_idle(pool: WatchedPool) -> None:
    """Replace every IDLE VM the provider says no longer runs, until shutdown."""
    while True:
        time.sleep(IDLE_CHECK_S)
        if not pool.check_idle_once(IDLE_CHECK_FAILURES, IDLE_CHECK_S):
            return
