"""A container's whole writable layer in reset verification: ``docker diff`` against a fresh
container's, for the docker provider's ``--verify-reset full``.

The host's view (``verify.HostView``) checks the home, ``/tmp``, ``/dev/shm`` and the
processes. A task can write elsewhere too: ``/var/tmp`` and ``/run/lock`` are writable by
every user, and a task running as root could write anywhere. ``fast`` does not look there
(a few ms matter on every reset); ``full`` adds ``docker diff <container>`` (one docker CLI
call, ~50–350 ms): every path the container added (A), changed (C) or deleted (D) in its
writable layer, compared with what the first container of the provider showed right after
its boot (the snapshot: the agent's own runtime paths, ``docker-init``). Paths under the home
are left to the home's fingerprint; a changed folder (C) is named only when nothing below it
is (``/var/tmp/stash`` added shows once, not with ``/var`` and ``/var/tmp``); names a boot
makes at random match by pattern, as in /tmp (``verify.scratch_print``).
"""

from __future__ import annotations

from typing import Iterable

from . import verify
from .docker_cli import docker

KINDS = {"A": "added", "C": "changed", "D": "deleted"}


class LayerView(verify.HostView):
    """HostView plus, in ``full``, the writable layer of the container ``name``."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        #: the fresh container's layer: (kind, path pattern), taken once at the first boot
        self._fresh: set[tuple[str, str]] | None = None

    def baseline(self, key: str, pid: int | None, address: str | None = None,
                 keep: bool = False, container: str | None = None) -> None:
        super().baseline(key, pid, address, keep)
        if self.mode == "full" and container and self._fresh is None:
            self._fresh = set(self._layer(container))

    def check(self, key: str, pid: int | None, address: str | None = None,
              container: str | None = None) -> list[str]:
        differences = super().check(key, pid, address)
        if self.mode == "full" and container and self._fresh is not None:
            differences += self._layer_differences(container)
        return verify.capped(differences)

    def _layer(self, container: str) -> list[tuple[str, str]]:
        """``docker diff`` of ``container``: (kind, path) with random name parts as ``*``;
        a VMError when docker cannot say."""
        lines = docker("diff", container).stdout.splitlines()
        return [(line[0], verify.name_pattern(line[2:].strip())) for line in lines
                if line[1:2] == " "]

    def _layer_differences(self, container: str) -> list[str]:
        try:
            layer = self._layer(container)
        except Exception as exc:  # noqa: BLE001 - a layer docker cannot list is a difference
            return [f"(cannot list the container's writable layer: {exc})"]
        home = self.home.rstrip("/")
        extra = {(kind, path) for kind, path in layer if (kind, path) not in self._fresh
                 and path != home and not path.startswith(home + "/")}
        return [f"{path}: {KINDS.get(kind, kind)} in the container's writable layer "
                "(docker diff), not in a fresh container's"
                for kind, path in sorted(extra, key=lambda entry: entry[1])
                if not (kind == "C" and _has_below(path, extra))]


def _has_below(folder: str, entries: Iterable[tuple[str, str]]) -> bool:
    return any(path.startswith(folder + "/") for _, path in entries)
