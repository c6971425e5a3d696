"""The docker provider's sweep: the containers and VM folders that killed runs left behind.

Containers carry labels: ``parallel-rollout.run``, ``.vm``, ``.pool`` (a pool handles only its
own: another run of the run id has a ``vm-0`` too), ``.owner`` (pid and start time of the
process that made them) and ``.host``. ``sweep(base, run_id)`` removes every container of that
run (every pool's) and its folders under ``base``; without a run id (or with
``orphans_only``) it removes those whose pool is gone on this host: neither its owner process
runs nor its pool folder's lock is held (``pool_lock.pool_held``: the pool holds it while it
lives, and a lock is the folder's in every PID namespace, where a pid is not: a sweep run
under ``unshare --pid`` sees no owner alive). Spares are
containers like any other: a killed run leaves no trace a sweep cannot find. Every docker CLI
call runs under ``setpriv --pdeathsig KILL``, so a ``docker run`` under way dies with a killed
owner instead of making a container after the sweep; and a sweep that removed something lists
once more, for a creation the daemon had already accepted.
"""

from __future__ import annotations

import shutil
import socket
import time
from pathlib import Path

from .common import (check_name, pool_folder, read_meta, remove_run_dir_if_empty, run_folders, swept_name,
                     vm_folders)
from .docker_cli import LABEL, containers, owner_alive, remove_containers
from .pool_lock import pool_held

#: a sweep lists again after this long, for containers whose creation was under way
SWEEP_SETTLE_S = 0.5


def sweep(base: Path, run_id: str | None = None, *, orphans_only: bool = False) -> list[str]:
    """Remove the containers and folders (under ``base``) of ``run_id`` (any state), or,
    without a run id (or with ``orphans_only``), those whose pool is gone (see the module
    doc); return the removed VMs as ``<run id>/<vm id>``."""
    if run_id is not None:
        check_name("run id", run_id)
    removed: set[str] = set()
    host = socket.gethostname()
    held: dict[Path, bool] = {}  # pool folder -> its lock is held (asked once: a held one takes a second)

    def live(owner: str, folder: Path | None) -> bool:
        if owner_alive(owner):
            return True
        if folder is not None and folder not in held:
            held[folder] = pool_held(folder)
        return folder is not None and held[folder]

    # A container whose creation was under way when its run died may appear just after
    # a listing; after removing some, list again until one finds nothing more.
    for _ in range(4):
        doomed = []
        for container in containers(f"{LABEL}.run={run_id}" if run_id else f"{LABEL}.run"):
            folder = pool_folder(base, container["run"], container["pool"]) if container["pool"] else None
            if (run_id is None or orphans_only) and (container["host"] != host or live(container["owner"], folder)):
                continue  # a live run's, or another machine's: not ours to sweep
            doomed.append(container)
            removed.add(f"{container['run']}/{container['vm']}")
        if not doomed:
            break
        remove_containers([c["name"] for c in doomed], strict=False)
        time.sleep(SWEEP_SETTLE_S)
    for run_dir in run_folders(base, run_id):
        for vm_dir in vm_folders(run_dir):
            meta = read_meta(vm_dir) or {}
            if (run_id is None or orphans_only) and live(meta.get("owner", ""), run_dir):
                continue
            shutil.rmtree(vm_dir, ignore_errors=True)
            removed.add(swept_name(run_dir, meta, vm_dir.name))
        remove_run_dir_if_empty(run_dir)
    return sorted(removed)
