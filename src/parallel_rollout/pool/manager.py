"""VMPoolManager: M VMs leased to many workers, reset off the workers' path.

The pool object lives in a ``multiprocessing`` Manager server process (``pool.server``);
workers hold proxies and hold VMs through ``pool.leasing``. The Manager serves each proxy
connection in its own thread, so every method takes ``self._lock`` and every state change
happens in a method of this class, under it::

    BOOTING ──► IDLE ──lease──► LEASED ──release──► RESETTING ──► IDLE
       │                          │   └──reclaim (worker died)──┘    │
       └────────────► DEAD ◄──mark_dead / failed reset / boot timeout┘
                       └── a VM that broke under a task (or failed its reset or its
                           check after one) restarts from its snapshot for free; one that
                           failed to boot, or whose fresh boot fails its check, or that
                           stopped running while IDLE (``watchers.py``), is replaced while
                           the budget lasts

* ``lease`` blocks until an IDLE VM exists. It raises ``PoolExhausted`` at once when every
  VM is DEAD and no replacement can come (never waits forever), ``LeaseTimeout`` after its
  timeout, ``WorkerDied`` when the caller's holder token was reclaimed meanwhile, and
  ``VMSettingsMismatch`` once a VM booted unlike the run's settings (nothing is replaced).
* ``release`` hands the VM to the pool's reset threads and returns at once; the worker
  never waits for a reset. A failed reset marks the VM DEAD.
* ``reclaim(holder)`` is how the engine returns the VMs of a dead worker: they are reset, and
  that holder can never lease again (a lease granted to a dead connection would leak the
  VM). A holder is a token made for each spawn of a worker, never its pid: a respawned worker
  that gets a recycled pid must still be able to lease.
* Per worker (no ``--use-vm-pool``) each owner (worker) is bound to one VM for the
  run; its release still resets, and its next lease waits for that reset, as in the
  one-env-per-worker runners.

Every transition is appended to ``events.jsonl``. Provider calls run in the pool's own
threads and never under the lock, so a slow boot or reset never blocks a lease.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from typing import IO, Any

from ..errors import LeaseTimeout, PoolClosed, PoolExhausted, VMSettingsMismatch, WorkerDied
from ..output_checks import EventsFile
from ..results import percentiles
from . import spares, watchers
from .call_threads import Call, CallThreads
from .provider_calls import ProviderCalls
from .vm_record import VMRecord, VMState, busy_times, state_counts
from .providers import ProviderOptions, VMInfo, get_provider

log = logging.getLogger(__name__)

#: how often a blocked lease re-checks exhaustion and deadlines, seconds
_WAIT_SLICE_S = 0.5
#: how long shutdown waits for boots under way; what they make after that is swept
_BOOT_GRACE_S = 2.0


class VMPoolManager(ProviderCalls):
    """The pool of one run: boots, leases, resets, replaces and stops its VMs."""

    def __init__(self, provider_name: str, run_id: str, size: int, *,
                 options: ProviderOptions | None = None, events_path: str | None = None,
                 events_stream: IO[str] | None = None, replacement_budget: int | None = None,
                 per_worker: bool = False, vm_prefix: str = "vm-") -> None:
        self.provider_name = provider_name
        self.run_id = run_id
        self.size = size
        self.options = options or ProviderOptions()
        #: no shared pool (no ``--use-vm-pool``): each worker is bound to one VM of its own
        self.per_worker = per_worker
        #: VM ids are this plus a number; pools of one run on several nodes differ by it
        self.vm_prefix = vm_prefix
        self.replacements_left = 2 * size if replacement_budget is None else replacement_budget
        self._provider = get_provider(provider_name)(run_id, self.options)
        #: VMs booted beyond ``size``; at most ``size`` are leased at once (spares.py)
        self.spare_vms = spares.resolve(self.options.spare_vms, type(self._provider))
        self._lock = threading.Lock()
        #: what blocked leases wait on; woken only by what can let one through (a VM
        #: becoming IDLE or DEAD, a reclaim, the shutdown), never by leases and resets
        #: starting: with 64 waiters, waking all on every transition cost ~4 ms of
        #: Manager CPU per task (benchmarks/perf)
        self._vm_free = threading.Condition(self._lock)
        self._vms: dict[str, VMRecord] = {}
        self._next_index = 0
        self._dead_holders: set[str] = set()
        self._running = True
        self._started_at = time.time()
        self._counters = {
            "leases": 0, "resets": 0, "reset_failures": 0, "boots": 0, "boot_failures": 0,
            "replacements": 0, "restarts": 0, "reclaimed": 0, "marked_dead": 0, "quarantined": 0,
            "dirty_boots": 0, "released_not_reset": 0,
        }
        self._reset_times: list[float] = []
        self._boot_times: list[float] = []
        self._last_death = ""
        #: a VM that booted unlike the run's settings (VMSettingsMismatch): every lease fails with it
        self._settings_error = ""
        #: where the VMs' transitions go, a line each: ``events_path`` (events.jsonl), or a
        #: stream of the caller's (a Ray node's pool apart from the run folder keeps them)
        self._events = EventsFile(events_path) if events_path else events_stream
        # Boots, resets and stops run in daemon threads (call_threads.py), never under the
        # lock; a provider call that hangs (a boot that never ends) can then never block
        # shutdown.
        #: provider calls under way -> (when shutdown stops waiting for it, whether it is a
        #: boot: shutdown does not wait for a slow boot, Ctrl-C is at once)
        self._calls: dict[Call, tuple[float, bool]] = {}
        self._call_threads = CallThreads(lambda call: self._calls.pop(call, None))
        self._watchdog = threading.Thread(target=watchers.watch_calls, args=(self,),
                                          name="pool-watchdog", daemon=True)
        with self._lock:
            for _ in range(size + self.spare_vms):
                self._boot_new("initial boot")
        self._watchdog.start()
        threading.Thread(target=watchers.check_idle, args=(self,), name="pool-idle-check",
                         daemon=True).start()

    def __repr__(self) -> str:
        with self._lock:
            counts = state_counts(self._vms.values())
        state = "running" if self._running else "closed"
        return f"<VMPoolManager {self.provider_name} run={self.run_id} {state} {counts}>"

    # -- leasing ---------------------------------------------------------------------------

    def lease(self, worker_id: str, task_key: str, timeout: float, holder: str | None = None) -> VMInfo:
        """Block until a VM is IDLE and lease it to ``worker_id`` (process ``holder``, the
        token of one spawn of a worker) for ``task_key``."""
        deadline = time.monotonic() + timeout
        with self._vm_free:
            try:
                while True:
                    self._check_running()
                    if self._settings_error:
                        raise VMSettingsMismatch(self._settings_error)
                    if holder is not None and holder in self._dead_holders:
                        raise WorkerDied(f"worker {holder} was reclaimed; it cannot lease")
                    vm = self._pick(worker_id)
                    if vm is not None and self._found_dead(vm):
                        continue  # replaced; another VM, or the wait
                    if vm is not None:
                        vm.owner = vm.owner or (worker_id if self.per_worker else None)
                        vm.worker_id, vm.holder, vm.task_key = worker_id, holder, task_key
                        vm.leases += 1
                        self._counters["leases"] += 1
                        vm.lease_no = self._counters["leases"]
                        self._move(vm, VMState.LEASED, "lease")
                        return dataclasses.replace(vm.info, lease=vm.lease_no)
                    if self._exhausted(worker_id):
                        raise PoolExhausted(self._exhausted_message())
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise LeaseTimeout(
                            f"no VM became idle within {timeout:.0f}s for {task_key} "
                            f"({state_counts(self._vms.values())})"
                        )
                    self._vm_free.wait(min(remaining, _WAIT_SLICE_S))
            except BaseException:
                # This waiter may have taken the one wake-up an idle VM sent; pass it on.
                if any(vm.state is VMState.IDLE for vm in self._vms.values()):
                    self._vm_free.notify()
                raise

    def release(self, vm_id: str, healthy: bool = True, reason: str = "release",
                lease: int | None = None) -> None:
        """Return a leased VM; it is reset in the pool's threads (or killed if unhealthy).

        ``lease`` (from the VMInfo that ``lease`` returned) makes a late release of an
        earlier lease — a reclaimed worker's — a no-op instead of freeing someone else's VM.
        """
        with self._lock:
            vm = self._vms.get(vm_id)
            if vm is None or not self._holds(vm, lease):
                # A release that lost a race with reclaim or mark_dead: nothing to do.
                self._event(vm_id, None, None, "stale release ignored", None, None)
                return
            if not healthy:
                self._mark_dead_and_replace(vm, reason)
                return
            self._begin_reset(vm, reason)

    def mark_dead(self, vm_id: str, reason: str, lease: int | None = None, by_task: bool = False) -> None:
        """Stop a broken VM and boot a replacement while the budget lasts; ``by_task``: it
        broke while a task held it, so it restarts from its snapshot without spending the
        budget (a task's failure is not the pool's)."""
        with self._lock:
            vm = self._vms.get(vm_id)
            if vm is None or vm.state is VMState.DEAD:
                return
            if lease is not None and not self._holds(vm, lease):
                self._event(vm_id, None, None, f"stale mark_dead ignored: {reason}", None, None)
                return
            self._mark_dead_and_replace(vm, reason, charge=not by_task)

    def death_cause(self, vm_id: str, lease: int | None = None) -> str | None:
        """Why a leased VM that broke under its task died, when the cause is outside the
        task (``Provider.death_cause``); None when the task may have done it, or when the
        VM is not (or no longer) held by ``lease``. Asked before ``mark_dead`` stops it."""
        with self._lock:
            vm = self._vms.get(vm_id)
            if vm is None or vm.info is None or (lease is not None and not self._holds(vm, lease)):
                return None
            info = vm.info
        try:  # without the lock: the provider may wait a moment for a dying VM
            return self._provider.death_cause(info)
        except Exception:  # noqa: BLE001 - no answer is "the task may have done it"
            log.exception("the death cause of %s could not be read", vm_id)
            return None

    def reclaim(self, holder: str) -> list[str]:
        """Reset every VM leased by a dead worker; that holder can never lease again."""
        with self._lock:
            self._dead_holders.add(holder)
            reclaimed = []
            for vm in self._vms.values():
                if vm.state is VMState.LEASED and vm.holder == holder:
                    self._counters["reclaimed"] += 1
                    self._begin_reset(vm, f"reclaimed from dead worker {holder}")
                    reclaimed.append(vm.vm_id)
            self._vm_free.notify_all()  # that holder's waiting leases must fail now
            return reclaimed

    def stats(self) -> dict[str, Any]:
        """VMs per state, counters, reset and boot times, utilization so far."""
        with self._lock:
            wall = max(time.time() - self._started_at, 1e-9)
            leased_s, resetting_s = busy_times(self._vms.values(), time.monotonic())
            return {
                "provider": self.provider_name,
                "size": self.size,
                "per_worker": self.per_worker,
                "states": state_counts(self._vms.values()),
                **spares.counts(self._vms.values(), self.size, self.spare_vms, self.per_worker),
                **self._counters,
                "replacements_left": self.replacements_left,
                "leased_s": round(leased_s, 3),
                "resetting_s": round(resetting_s, 3),
                "utilization": round(leased_s / (self.size * wall), 4),
                "reset_s": percentiles(self._reset_times, points=(50, 95)),
                "boot_s": percentiles(self._boot_times, points=(50, 95)),
                "last_death": self._last_death,
            }

    def shutdown(self) -> int:
        """Stop every VM (in parallel) and the pool's threads; idempotent. Returns how many
        boots were still under way after a short grace: what they make is the caller's to
        sweep once this process is gone (a slow boot never delays a Ctrl-C)."""
        with self._lock:
            if not self._running:
                return 0
            self._running = False
            # Booting and resetting VMs are stopped by their own threads once those see
            # the pool closed; stopping them here too would race with the provider call.
            vms = [vm for vm in self._vms.values()
                   if vm.info is not None and vm.state in (VMState.IDLE, VMState.LEASED)]
            for vm in self._vms.values():
                if vm.state is not VMState.DEAD:
                    self._move(vm, VMState.DEAD, "pool shutdown")
                    vm.stopped = True
            self._vm_free.notify_all()
        # Resets and boots already running finish on their own and then see the pool
        # closed; they stop what they made (see _boot_thread / _reset_thread).
        for vm in vms:
            self._spawn(self._stop_quietly, vm.info)
        # Wait for provider calls so that what they make is stopped, but never past each
        # call's own deadline (a boot that hangs was already declared dead), nor a boot's
        # past a short grace.
        boots_give_up = time.monotonic() + _BOOT_GRACE_S
        for call, (give_up, boot) in list(self._calls.items()):
            if boot:
                give_up = min(give_up, boots_give_up)
            call.join(max(0.0, give_up - time.monotonic()))
        booting = sum(1 for call, (_, boot) in list(self._calls.items()) if boot and call.is_alive())
        if self._events is not None:
            events, self._events = self._events, None
            try:
                events.close()
            except OSError:
                # A full disk: the unflushed tail of a failed write. Raising here would tell
                # the runner that the Manager is gone, when every VM was stopped as asked.
                log.warning("cannot flush events.jsonl; its last lines are lost")
        return booting

    # -- the watchers' passes (watchers.py runs them in the pool's threads) -------------------

    def expire_hung_calls(self) -> bool:
        """The watchdog's pass: every VM whose boot or reset is past its deadline is declared
        dead (a boot spends the budget, a hung reset restarts it for free); False once the
        pool is shut down."""
        with self._lock:
            if not self._running:
                return False
            now = time.monotonic()
            for vm in list(self._vms.values()):
                if vm.state is VMState.BOOTING and now > vm.deadline:
                    self._counters["boot_failures"] += 1
                    self._mark_dead_and_replace(
                        vm, f"boot timed out after {self.options.boot_timeout_said}")
                elif vm.state is VMState.RESETTING and now > vm.deadline:
                    self._counters["reset_failures"] += 1
                    self._mark_dead_and_replace(vm, f"reset hung for {self._call_timeout_s():.0f}s", charge=False)
            return True

    def check_idle_once(self, failures: int, interval_s: float) -> bool:
        """The idle check's pass: ask the provider (outside the lock) whether each IDLE VM
        still runs; one that said no ``failures`` times in a row is replaced from the budget.
        A VM leased or reset meanwhile is left alone. False once the pool is shut down."""
        with self._lock:
            if not self._running:
                return False
            idle = [(vm, vm.info) for vm in self._vms.values() if vm.state is VMState.IDLE]
        for vm, info in idle:
            try:
                healthy = self._provider.healthy(info)
            except Exception:  # noqa: BLE001 - a provider that cannot tell: not running
                healthy = False
            with self._lock:
                if vm.state is not VMState.IDLE or vm.info is not info or not self._running:
                    continue
                vm.failed_checks = 0 if healthy else vm.failed_checks + 1
                if vm.failed_checks >= failures:
                    self._mark_dead_and_replace(vm, f"stopped running while idle ({vm.failed_checks} "
                                                    f"checks {interval_s:.0f}s apart)")
        return True

    # -- internals (callers hold the lock, except the *_thread bodies) -----------------------

    def _check_running(self) -> None:
        if not self._running:
            raise PoolClosed("the VM pool is shut down")

    @staticmethod
    def _holds(vm: VMRecord, lease: int | None) -> bool:
        return vm.state is VMState.LEASED and (lease is None or lease == vm.lease_no)

    def _pick(self, worker_id: str) -> VMRecord | None:
        idle = [vm for vm in self._vms.values() if vm.state is VMState.IDLE]
        if self.per_worker:
            own = [vm for vm in self._vms.values() if vm.owner == worker_id and vm.state is not VMState.DEAD]
            if own:
                if own[0].state in (VMState.IDLE, VMState.LEASED) or not self.spare_vms:
                    return own[0] if own[0].state is VMState.IDLE else None
                return spares.claim(self._vms.values(), own[0], worker_id)
            idle = [vm for vm in idle if vm.owner is None]
        elif self.spare_vms and not spares.lease_room(self._vms.values(), self.size):
            return None
        # The VM idle longest first: spreads wear and keeps lease order fair.
        return min(idle, key=lambda vm: vm.since, default=None)

    def _found_dead(self, vm: VMRecord) -> bool:
        """Whether the IDLE VM a lease picked no longer runs (``Provider.still_runs``: a
        syscall or a /proc read, under the lock): killed while idle, before the idle check's
        noes added up. It is replaced as the idle check replaces it, and the lease takes
        another VM: a task is never handed a VM known dead, nor spends a retry on it."""
        try:
            runs = self._provider.still_runs(vm.info)
        except Exception:  # noqa: BLE001 - cannot tell: the idle check and the task will
            log.exception("whether %s still runs could not be read", vm.vm_id)
            return False
        if not runs:
            self._mark_dead_and_replace(vm, "stopped running while idle (found dead at lease)")
        return not runs

    def _exhausted(self, worker_id: str) -> bool:
        alive = [vm for vm in self._vms.values() if vm.state is not VMState.DEAD]
        if self.per_worker:
            own = [vm for vm in alive if vm.owner == worker_id]
            free = [vm for vm in alive if vm.owner is None]
            return not own and not free and self.replacements_left <= 0
        return not alive and self.replacements_left <= 0

    def _exhausted_message(self) -> str:
        dirty = self._counters["dirty_boots"]
        dirty = f" ({dirty} of them a fresh VM that failed its check)" if dirty else ""
        return (
            f"every VM of the {self.provider_name} pool is dead and the replacement budget is "
            f"spent ({self._counters['boot_failures']} failed boots{dirty}, "
            f"{self._counters['reset_failures']} failed resets, "
            f"{self._counters['marked_dead']} marked dead); last: {self._last_death or 'n/a'}"
        )

    def _move(self, vm: VMRecord, to: VMState, reason: str, **extra: Any) -> None:
        now = time.monotonic()
        if vm.state is VMState.LEASED:
            vm.leased_s += now - vm.since
        elif vm.state is VMState.RESETTING:
            vm.resetting_s += now - vm.since
        self._event(vm.vm_id, vm.state.value, to.value, reason, vm.task_key, vm.worker_id, **extra)
        log.debug("%s %s -> %s: %s%s", vm.vm_id, vm.state.value, to.value, reason,
                  f" ({vm.task_key}, {vm.worker_id})" if vm.task_key else "")
        if self.spare_vms and vm.state is VMState.LEASED:
            self._vm_free.notify()  # a lease slot is free: a spare may be leased now
        if to is not VMState.LEASED:
            vm.worker_id = vm.holder = vm.task_key = None
        vm.state = to
        vm.since = now
        if to is VMState.IDLE and not self.per_worker:
            self._vm_free.notify()  # any waiter can take it: wake one, not all
        elif to in (VMState.IDLE, VMState.DEAD):
            # a per-worker VM is for its owner only; a death may exhaust the pool
            self._vm_free.notify_all()

    def _event(self, vm_id, from_state, to_state, reason, task_key, worker_id, **extra) -> None:
        if self._events is None:
            return
        event = {"time": round(time.time(), 4), "event": "vm", "vm": vm_id, "from": from_state,
                 "to": to_state, "task": task_key, "worker": worker_id, "reason": reason, **extra}
        try:
            self._events.write(json.dumps(event) + "\n")
        except (OSError, ValueError) as exc:
            # a full disk is the run's to report (it stops on results.jsonl), not a traceback
            log.warning("cannot write events.jsonl: %s", exc)

    def _mark_dead_and_replace(self, vm: VMRecord, reason: str, charge: bool = True, **extra: Any) -> None:
        """Move ``vm`` to DEAD, stop it in the background, boot a replacement: from the
        budget (``charge``) while it lasts, else as a free restart from the snapshot;
        ``extra`` goes into its event (a quarantine's differences)."""
        self._counters["marked_dead"] += 1
        self._last_death = f"{vm.vm_id}: {reason}"
        info = vm.info
        self._move(vm, VMState.DEAD, reason, **extra)
        if info is not None:
            self._spawn(self._stop_quietly, info)
        if self._running and not charge:
            self._counters["restarts"] += 1
            self._boot_new(f"restarts {vm.vm_id} from its snapshot", owner=vm.owner)
            vm.owner = None
        elif self._running and self.replacements_left > 0:
            self.replacements_left -= 1
            self._counters["replacements"] += 1
            # The replacement inherits the dead VM's owner, so a per-worker VM stays its worker's.
            self._boot_new(f"replaces {vm.vm_id}", owner=vm.owner)
            vm.owner = None
