"""The process provider's standby sandboxes: each VM's next sandbox, booted ahead of its reset.

Where a process reset's time goes (2 cores, a small snapshot): killing the old sandbox and
waiting for its namespace to empty ~3 ms, bwrap setting up namespaces and mounts ~10 ms, the
guest agent's Python start-up, seeding the home and saying ready ~35 ms. The last two are
the boot of a *new* sandbox, which never needed anything of the old one; so after a reset a
background thread boots the VM's next sandbox, the standby, in the VM's other folder
(``vm0`` and ``vm0.b`` take turns), and the next reset kills the old sandbox and hands out
the standby: a few ms. The standby has never run anything: it is the snapshot, as a fresh
boot is (reset verification checks it like any other reset).

* The first reset of a VM boots as before (a VM that is never reset costs no second
  sandbox); every later one finds its standby booted, or waits for the boot under way
  (resets back to back cost at most what they cost without it).
* A standby that failed to boot, or died meanwhile, only costs that reset a boot of its own.
* ``stop`` waits for a boot under way (bounded) and kills the standby with the VM.
* Each folder has its own cgroups, so a standby never counts against the VM's memory.
* Its reset check runs once it has booted (``check``), while the VM's task still runs, not
  after the reset that hands it out: nothing can change it in between. No task ever ran in
  it, and the task next door has its own pid, mount, ipc and network namespaces and tmpfs
  folders, cannot reach its socket (outside both sandboxes), and can neither mount, trace
  nor make namespaces (seccomp). The provider's ``verify`` returns what that check found.
* ``PARALLEL_ROLLOUT_PROCESS_STANDBY=0`` turns it off (half the sandboxes, slower resets).
"""

from __future__ import annotations

import logging
import os
import threading
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Callable

from .base import VMInfo

log = logging.getLogger(__name__)

STANDBY_ENV = "PARALLEL_ROLLOUT_PROCESS_STANDBY"
#: the folder a VM's standby alternates with: ``<vm id>`` and ``<vm id>.b``
SUFFIX = ".b"
#: in a standby's VMInfo.private until it is handed out: the differences its check found
BOOT_CHECK = "boot_check"


def enabled() -> bool:
    """Standby sandboxes, unless $PARALLEL_ROLLOUT_PROCESS_STANDBY is 0."""
    return os.environ.get(STANDBY_ENV, "1") != "0"


def folders(run_dir: Path, vm_id: str) -> tuple[Path, Path]:
    """The two folders a VM's sandboxes take turns in."""
    return run_dir / vm_id, run_dir / f"{vm_id}{SUFFIX}"


def other_folder(run_dir: Path, vm_id: str, current: Path) -> Path:
    """The folder the VM's sandbox is not in."""
    first, second = folders(run_dir, vm_id)
    return second if Path(current) == first else first


def vm_of_folder(name: str) -> str:
    """The VM id a folder belongs to (what ``sweep`` reports)."""
    return name[: -len(SUFFIX)] if name.endswith(SUFFIX) else name


class Standby:
    """Per VM, the future of its next sandbox.

    ``boot(vm_id, folder)`` boots a sandbox in ``folder`` and returns its VMInfo;
    ``alive(info)`` says whether a booted standby still runs; ``discard(info)`` kills it;
    ``check(info)``, the reset check, runs once it has booted (its differences go in
    ``info.private[BOOT_CHECK]``; a check that raises leaves none: it is checked at hand-out)."""

    def __init__(self, boot: Callable[[str, Path], VMInfo], alive: Callable[[VMInfo], bool],
                 discard: Callable[[VMInfo], None], on: bool = True,
                 check: Callable[[VMInfo], list[str]] | None = None) -> None:
        self._boot, self._alive, self._discard, self._check = boot, alive, discard, check
        self.on = on
        self._lock = threading.Lock()
        self._next: dict[str, Future] = {}
        #: VMs stopped: no standby may be booted for them any more
        self._stopped: set[str] = set()

    def prepare(self, vm_id: str, folder: Path) -> None:
        """Boot the VM's next sandbox in ``folder``, in the background."""
        with self._lock:
            if not self.on or vm_id in self._stopped or vm_id in self._next:
                return
            future: Future = Future()
            self._next[vm_id] = future

        def boot() -> None:
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

        threading.Thread(target=boot, name=f"standby-{vm_id}", daemon=True).start()

    def take(self, vm_id: str, timeout_s: float) -> VMInfo | None:
        """The VM's standby once booted and still running; None when there is none, its
        boot failed or outlived ``timeout_s`` (then it is killed when it is done)."""
        with self._lock:
            future = self._next.pop(vm_id, None)
        if future is None:
            return None
        return self._settle(future, timeout_s, keep=True)

    def drop(self, vm_id: str, timeout_s: float) -> None:
        """No more standbys for ``vm_id``: kill the one it has (waiting for its boot)."""
        with self._lock:
            self._stopped.add(vm_id)
            future = self._next.pop(vm_id, None)
        if future is not None:
            self._settle(future, timeout_s, keep=False)

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
