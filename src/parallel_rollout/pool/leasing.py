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
  VM) instead of the error the task saw (``killed_from_outside``, which the backends also
  ask of the VM an attempt held when it ran past ``--task-timeout``: a guest call that
  hangs on a VM stopped from outside is not the task's time);
* the worker's ``AttemptLeaser`` (``worker``) wraps it as the ``VMLeaser`` an env gets.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

from ..errors import RolloutError, VMError, VMKilled
from .providers import VMInfo


@contextmanager
def lease_vm(pool: Any, worker_id: str, task_key: str, timeout: float, holder: str) -> Iterator[VMInfo]:
    """Hold one VM of ``pool`` for the block (see the module docstring)."""
    info = pool.lease(worker_id, task_key, timeout, holder)
    try:
        yield info
    except VMError as exc:
        killed = killed_from_outside(pool, info.vm_id, info.lease, task_key, exc)
        if killed is not None:
            raise killed from exc
        pool.mark_dead(info.vm_id, f"{exc.kind} during {task_key}: {exc}", info.lease, True)
        raise
    except BaseException:
        pool.release(info.vm_id, True, "release after task error", info.lease)
        raise
    else:
        pool.release(info.vm_id, True, "release", info.lease)


def killed_from_outside(pool: Any, vm_id: str, lease: int, task_key: str, seen: RolloutError) -> VMKilled | None:
    """``VMKilled`` when the provider tells that VM ``vm_id``, held by ``lease``, was killed
    from outside (``VMPoolManager.death_cause``), the VM then marked dead (it restarts from
    its snapshot, as any VM that broke under a task); None when the task may have done it,
    or the lease no longer holds the VM (nothing is marked then). ``seen``: what the task
    saw of it (a VMError, or the TaskTimeout of a guest call that never came back)."""
    return blame_outside(pool, vm_id, lease, task_key, seen, pool.death_cause(vm_id, lease))


def blame_outside(pool: Any, vm_id: str, lease: int, task_key: str, seen: RolloutError,
                  cause: str | None) -> VMKilled | None:
    """``killed_from_outside`` once the pool's ``cause`` (None: the task may have done it) is known."""
    if not cause:
        return None
    pool.mark_dead(vm_id, f"killed from outside during {task_key}: {cause}", lease, True)
    return VMKilled(f"VM {vm_id} was killed from outside during {task_key}, not by the task: "
                    f"{cause} (the task saw: {seen.kind}: {seen})")
