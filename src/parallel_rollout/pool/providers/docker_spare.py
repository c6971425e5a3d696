"""The docker provider's spare containers: each VM's next container, booted ahead.

A container cannot be rolled back in place, but a new one from the same image is the
snapshot, and what costs is ``docker start`` and the agent's start-up. So after every start
and reset a background thread boots the VM's *next* container, the spare, until its agent
answers; a reset takes it (after one /health) instead of booting. A spare that fails to
boot only costs that reset a boot of its own; one that boots after its reset gave up on it
is removed when it is done. ``stop`` takes the spare too and waits for the removals of old
containers still under way.

:class:`SpareContainers` is a mixin of DockerProvider: it needs ``_boot(vm_id, deadline)``,
``healthy(info)``, ``_remove(containers)`` and ``options.boot_timeout_s``.
"""

from __future__ import annotations

import shutil
import threading
import time
from concurrent.futures import Future

from .base import VMInfo
from .docker_cli import DOCKER_TIMEOUT_S, remove_containers


class SpareContainers:
    """Spares and background removals per VM (see the module doc)."""

    def _init_spares(self) -> None:
        self._lock = threading.Lock()
        #: vm id -> the spare container being created for its next reset
        self._spares: dict[str, Future] = {}
        #: vm id -> removals of its old containers still under way (stop waits for them)
        self._removals: dict[str, list[Background]] = {}
        #: vm ids stopped by this instance: no spare may be made for them any more
        self._stopped: set[str] = set()

    def _remove_later(self, vm_id: str, container: dict) -> None:
        """Remove a container in the background; ``stop`` waits for it."""
        with self._lock:
            pending = [r for r in self._removals.get(vm_id, []) if not r.done()]
            pending.append(Background(self._remove, [container]))
            self._removals[vm_id] = pending

    def _make_spare(self, vm_id: str) -> None:
        """Boot the VM's next container in the background, ready for the next reset."""
        with self._lock:
            if vm_id in self._stopped or vm_id in self._spares:
                return
            future: Future = Future()
            self._spares[vm_id] = future

        def boot() -> None:
            try:
                deadline = time.monotonic() + self.options.boot_timeout_s
                future.set_result(self._boot(vm_id, deadline))
            except BaseException as exc:  # the reset that wants it boots one itself
                future.set_exception(exc)

        threading.Thread(target=boot, name=f"docker-spare-{vm_id}", daemon=True).start()

    def _take_spare(self, vm_id: str, deadline: float, check: bool = True) -> VMInfo | None:
        """The VM's spare, once booted and (with ``check``) still answering; None when
        there is none, it failed to boot, or it died meanwhile (then it is removed)."""
        with self._lock:
            future = self._spares.pop(vm_id, None)
        if future is None:
            return None
        try:
            # its boot is bounded by its own deadline; this one bounds the caller's wait
            spare = future.result(timeout=max(0.0, deadline - time.monotonic()))
        except Exception:  # noqa: BLE001 - a failed or late spare only costs the reset a boot
            future.add_done_callback(_remove_when_booted)
            return None
        if check and not self.healthy(spare):
            self._remove([spare.private])
            return None
        return spare


class Background:
    """Run ``target(*args)`` in a thread now; ``result()`` joins it and re-raises."""

    def __init__(self, target, *args) -> None:
        self._future: Future = Future()

        def run() -> None:
            try:
                self._future.set_result(target(*args))
            except BaseException as exc:
                self._future.set_exception(exc)

        threading.Thread(target=run, name="docker-background", daemon=True).start()

    def result(self):
        return self._future.result(timeout=DOCKER_TIMEOUT_S + 5)

    def done(self) -> bool:
        return self._future.done()


# ------------------------------------------------------------------------- helpers


def _remove_when_booted(future: Future) -> None:
    """Remove a spare that booted after the reset waiting for it had given up on it."""
    try:
        spare = future.result()
    except BaseException:  # noqa: BLE001 - a failed boot removed its container itself
        return
    remove_containers([spare.private["name"]], strict=False)
    shutil.rmtree(spare.private["sock_dir"], ignore_errors=True)
