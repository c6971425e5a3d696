"""Leasing: how an attempt holds a VM of the pool for one block of code.

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
* ``leased_call(pool, …)`` is the shortest block: a lease for one guest call, which the pool
  runs itself (``VMPoolManager.lease_call``). The VM's reset begins the moment the call
  answers, in the pool's process, before the answer travels to the worker: no trip to the
  worker and back between a command's end and the release, none between a grant and the
  command's start. What ``lease_vm`` does with a failure, it does here (it runs inside);
  the error travels to the worker as it is;
* the worker's ``AttemptLeaser`` (``worker``) wraps both as the ``VMLeaser`` an env gets.
"""

from __future__ import annotations

import pickle
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

from ..errors import VMError, VMKilled
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


@dataclass(frozen=True)
class LeasedCall:
    """What ``leased_call`` answers: the guest call's answer and where and when it ran."""

    answer: Any
    vm_id: str
    #: seconds the call waited for a VM
    waited_s: float
    #: seconds the guest call took (the VM's time), and when it began (``time.time()``)
    ran_s: float
    started_at: float


def leased_call(pool: Any, worker_id: str, task_key: str, timeout: float, holder: str,
                method: str, args: tuple, kwargs: dict) -> LeasedCall:
    """Lease a VM of ``pool`` (in the pool's own process), run ``GuestClient.<method>(*args,
    **kwargs)`` on it, release it (see the module docstring)."""
    from ..guest.client import GuestClient

    if method.startswith("_") or not callable(getattr(GuestClient, method, None)):
        raise ValueError(f"leased_call: the guest client has no call {method!r}")
    asked = time.monotonic()
    try:
        with lease_vm(pool, worker_id, task_key, timeout, holder) as info:
            began, started_at = time.monotonic(), time.time()
            answer = getattr(GuestClient(info.address), method)(*args, **kwargs)
            ran_s = time.monotonic() - began
    except Exception as exc:
        raise _portable(exc) from None
    return LeasedCall(answer, info.vm_id, began - asked, ran_s, started_at)


def _portable(exc: Exception) -> Exception:
    """``exc`` when it survives the trip back to the worker (it is pickled); else a
    RuntimeError that names it. An error that cannot be unpickled there would break the
    worker's connection to the pool instead of reaching the env."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # noqa: BLE001 - any pickling failure
        return RuntimeError(f"{type(exc).__name__}: {exc}")
