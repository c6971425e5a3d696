"""The process provider's standby sandboxes: each VM's next sandbox, booted ahead of its reset.

Where a process reset's time goes (2 cores, a small snapshot): killing the old sandbox and
waiting for its namespace to empty ~3 ms, bwrap setting up namespaces and mounts ~10 ms, the
guest agent's Python start-up, seeding the home and saying ready ~35 ms. The last two are
the boot of a *new* sandbox, which never needed anything of the old one; so after a reset a
background thread boots the VM's next sandbox, the standby, in another folder of the VM
(``vm0`` and ``vm0.b`` take turns), and the next reset kills the old sandbox and hands out
the standby: a few ms. The standby has never run anything: it is the snapshot, as a fresh
boot is (reset verification checks it like any other reset).

* The first reset of a VM boots as before (a VM that is never reset costs no second
  sandbox); every later one finds its standby booted, or waits for the boot under way
  (resets back to back cost at most what they cost without it).
* A standby that failed to boot, or died meanwhile, only costs that reset a boot of its own.
* A reset that finds its standby booted hands it out at once and kills the old sandbox
  behind it (``swap``): the wait for the old namespace to empty (~1.5 ms of a ~2.5 ms reset
  at one VM) is off the VM's path. Each folder has a uid of its own (``sandbox_uids.py``),
  so the dying sandbox shares neither a uid, nor cgroups, nor namespaces with the one that
  replaced it, and no sandbox boots in its folder before it is gone. Measured (A B A B, 400
  tasks a VM, 20 ms commands, 2 cores): a reset 2.3-3.0 → 0.9-1.0 ms p50 at one VM, 3.1-3.8 →
  1.5-1.8 ms at two, 3-7 % and 0-4 % more tasks a second; at four VMs the CPUs bind and
  nothing changed (``benchmarks/perf/README.md``, "The ninth pass").
* ``stop`` waits for a boot or a kill under way (bounded) and kills the standby with the VM.
* Each folder has its own cgroups, so a standby never counts against the VM's memory.
* Its reset check runs once it has booted (``check``), while the VM's task still runs, not
  after the reset that hands it out: nothing can change it in between. No task ever ran in
  it, and the task next door has its own pid, mount, ipc and network namespaces and tmpfs
  folders, cannot reach its socket (outside both sandboxes), and can neither mount, trace
  nor make namespaces (seccomp). The provider's ``verify`` returns what that check found.
* **Two standbys** where the CPUs outnumber the VMs (``depth``): a VM whose commands are
  shorter than a boot (~60 ms on 2 slow cores) otherwise waits at each reset for the boot
  its last reset started. With two, in three folders (``vm0``, ``vm0.b``, ``vm0.c``), each
  boot has two commands' time. Measured (4 rollouts, 1 VM, 2 cores, 20 ms commands): a
  reset 60 → 15 ms p50, the run 1.7× as fast; with as many VMs as cores or more, the
  CPUs are the limit and a second standby changed nothing (8 × 2, 16 × 4).
* ``PARALLEL_ROLLOUT_PROCESS_STANDBY`` sets the count: 0 turns them off (half the sandboxes,
  slower resets), 1 to 4 keeps that many booting or booted per VM.
"""

from __future__ import annotations

import logging
import os
import threading
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Callable

from ...errors import ConfigError
from .base import VMInfo

log = logging.getLogger(__name__)

STANDBY_ENV = "PARALLEL_ROLLOUT_PROCESS_STANDBY"
#: the folders of a VM's standbys, beside its own ``<vm id>``: ``<vm id>.b`` (the one standby
#: of the default), ``.c`` …
SUFFIXES = (".b", ".c", ".d", ".e")
#: in a standby's VMInfo.private until it is handed out: the differences its check found
BOOT_CHECK = "boot_check"


def depth(pool_size: int) -> int:
    """Standby sandboxes per VM: $PARALLEL_ROLLOUT_PROCESS_STANDBY (0 to 4); unset, 2 where
    the runner may use more CPUs than the pool has VMs (a boot, ~50-90 ms of one CPU, then
    has one to run on while the VMs' commands run), else 1 (where the CPUs are the limit,
    a second standby only holds memory: ~11 MB a sandbox)."""
    text = os.environ.get(STANDBY_ENV, "").strip()
    if not text:
        return 2 if len(os.sched_getaffinity(0)) > pool_size else 1
    if not (text.isdigit() and int(text) <= len(SUFFIXES)):
        raise ConfigError(f"{STANDBY_ENV}={text!r}: give the standby sandboxes per VM, 0 to "
                          f"{len(SUFFIXES)} (0: none, each reset boots its own)")
    return int(text)


def folders(run_dir: Path, vm_id: str, count: int = len(SUFFIXES) + 1) -> list[Path]:
    """The folders a VM's sandboxes take turns in: its own, then its standbys' (every one
    there may be: what a start, a stop and a sweep look in; ``count``: the first so many)."""
    return [run_dir / vm_id, *(run_dir / f"{vm_id}{suffix}" for suffix in SUFFIXES)][:count]


def vm_of_folder(name: str) -> str:
    """The VM id a folder belongs to (what ``sweep`` reports)."""
    for suffix in SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


class Standby:
    """Per VM, the futures of its next sandboxes, oldest first.

    ``boot(vm_id, folder)`` boots a sandbox in ``folder`` and returns its VMInfo;
    ``alive(info)`` says whether a booted standby still runs; ``discard(info)`` kills it;
    ``check(info)``, the reset check, runs once it has booted (its differences go in
    ``info.private[BOOT_CHECK]``; a check that raises leaves none: it is checked at hand-out);
    ``depth``: how many a VM has booting or booted (0: none)."""

    def __init__(self, boot: Callable[[str, Path], VMInfo], alive: Callable[[VMInfo], bool],
                 discard: Callable[[VMInfo], None], depth: int = 1,
                 check: Callable[[VMInfo], list[str]] | None = None) -> None:
        self._boot, self._alive, self._discard, self._check = boot, alive, discard, check
        self.depth = depth
        self._lock = threading.Lock()
        #: vm id -> [(future, folder)] of the boots under way or done, oldest first
        self._next: dict[str, list[tuple[Future, Path]]] = {}
        #: VMs stopped: no standby may be booted for them any more
        self._stopped: set[str] = set()
        #: vm id -> {folder: (the thread killing the sandbox a swap replaced there, it)}
        self._retiring: dict[str, dict[Path, tuple[threading.Thread, VMInfo]]] = {}
        #: vm id -> the folder of the sandbox it runs (its last reset's)
        self._current: dict[str, Path] = {}
        #: vm id -> folders of standbys taken off ``_next`` and being handed out, not yet
        #: ``_current``: no boot may start there (its bind would take the socket's path of
        #: the sandbox a reset hands out, whose commands then reach the new one)
        self._handing: dict[str, set[Path]] = {}

    def prepare(self, vm_id: str, current: Path | None = None) -> None:
        """Boot the VM's next sandboxes in the background, until ``depth`` of them are under
        way or booted, each in a folder of the VM that neither ``current`` (the folder of the
        sandbox it runs; None: the one it ran in at its last reset) nor another standby has,
        nor a sandbox being killed."""
        with self._lock:
            if vm_id in self._stopped:
                return
            if current is not None:
                self._current[vm_id] = Path(current)
                self._handing.get(vm_id, set()).discard(Path(current))
            current = self._current[vm_id]
            pending = self._next.setdefault(vm_id, [])
            taken = {current, *(folder for _, folder in pending), *self._retiring.get(vm_id, ()),
                     *self._handing.get(vm_id, ())}
            free = [f for f in folders(current.parent, vm_id, self.depth + 1) if f not in taken]
            started = []
            while len(pending) < self.depth and free:
                started.append((Future(), free.pop(0)))
                pending.append(started[-1])
        for future, folder in started:
            threading.Thread(target=self._boot_into, args=(future, vm_id, folder),
                             name=f"standby-{vm_id}", daemon=True).start()

    def _boot_into(self, future: Future, vm_id: str, folder: Path) -> None:
        try:
            info = self._boot(vm_id, folder)
            if self._check is not None:
                try:
                    info.private[BOOT_CHECK] = self._check(info)
                except Exception:  # noqa: BLE001 - checked when handed out instead
                    log.debug("check of %s's standby at boot failed", vm_id, exc_info=True)
            future.set_result(info)
        except BaseException as exc:  # noqa: BLE001 - the reset that wants it boots itself
            future.set_exception(exc)

    def take(self, vm_id: str, timeout_s: float) -> VMInfo | None:
        """The VM's oldest standby once booted and still running; None when there is none,
        its boot failed or outlived ``timeout_s`` (then it is killed when it is done)."""
        with self._lock:
            pending = self._next.get(vm_id)
            if not pending:
                return None
            future, folder = pending.pop(0)
            self._handing.setdefault(vm_id, set()).add(folder)  # till prepare() makes it current
        new = self._settle(future, timeout_s, keep=True)
        if new is None:
            with self._lock:
                self._handing[vm_id].discard(folder)
        return new

    def ready(self, vm_id: str) -> bool:
        """Whether the VM's oldest standby has booted (or failed to): a reset now swaps it
        in without waiting."""
        with self._lock:
            return self._ready(vm_id)

    def _ready(self, vm_id: str) -> bool:
        pending = self._next.get(vm_id)
        return bool(pending) and pending[0][0].done()

    def swap(self, old: VMInfo) -> VMInfo | None:
        """The VM's oldest standby if it has booted and still runs, with ``old`` (the sandbox
        it replaces) killed behind it, then the next standby booted in ``old``'s folder; None
        when none has booted or the one that had died (``old`` untouched: the caller kills it
        and waits for the next standby, or boots)."""
        vm_id = old.vm_id
        with self._lock:
            if not self._ready(vm_id):
                return None
            future, handed = self._next[vm_id].pop(0)
            self._handing.setdefault(vm_id, set()).add(handed)
        new = self._settle(future, 0.0, keep=True)
        if new is None:
            with self._lock:
                self._handing[vm_id].discard(handed)
            return None
        folder = Path(old.private["vm_dir"])
        thread = threading.Thread(target=self._retire, args=(old, folder), name=f"retire-{vm_id}", daemon=True)
        with self._lock:  # till now the VM's current folder, so no standby was booted there
            self._retiring.setdefault(vm_id, {})[folder] = (thread, old)
            self._current[vm_id] = Path(new.private["vm_dir"])
            self._handing[vm_id].discard(handed)
        thread.start()
        return new

    def _retire(self, old: VMInfo, folder: Path) -> None:
        """Kill the sandbox a swap replaced; once it is gone, its folder may take a standby.
        One that outlives its kill keeps the folder (the VM's stop kills it again)."""
        try:
            self._discard(old)
        except Exception as exc:  # noqa: BLE001
            log.warning("the sandbox %s replaced at a reset: %s", folder, exc)
            return
        with self._lock:
            self._retiring.get(old.vm_id, {}).pop(folder, None)
        self.prepare(old.vm_id)  # beside the sandbox the VM runs now, whichever that is

    def drop(self, vm_id: str, timeout_s: float) -> None:
        """No more standbys for ``vm_id``: kill those it has (waiting for their boots), and
        wait for the kills of the sandboxes swaps replaced."""
        with self._lock:
            self._stopped.add(vm_id)
            pending = self._next.pop(vm_id, [])
            retiring = list(self._retiring.pop(vm_id, {}).values())
            self._current.pop(vm_id, None)
        for future, _ in pending:
            self._settle(future, timeout_s, keep=False)
        for thread, old in retiring:
            thread.join(timeout_s)
            self._discard_quietly(old)  # a no-op once it is gone; again, where its kill failed

    def _settle(self, future: Future, timeout_s: float, keep: bool) -> VMInfo | None:
        try:
            info = future.result(timeout=max(0.0, timeout_s))
        except FutureTimeout:
            future.add_done_callback(self._discard_when_booted)
            return None
        except Exception:  # noqa: BLE001 - a failed boot cleaned up after itself
            return None
        if keep and self._alive(info):
            return info
        self._discard_quietly(info)
        return None

    def _discard_when_booted(self, future: Future) -> None:
        try:
            info = future.result()
        except BaseException:  # noqa: BLE001
            return
        self._discard_quietly(info)

    def _discard_quietly(self, info: VMInfo) -> None:
        """Kill a standby nobody will use; a failure leaves it to the VM's stop and sweep."""
        try:
            self._discard(info)
        except Exception as exc:  # noqa: BLE001
            log.warning("standby of %s: %s", info.vm_id, exc)
