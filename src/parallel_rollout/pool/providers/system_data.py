"""The system programs' data of /var (``sandbox_fs.SYSTEM_DATA``) as one folder, made once.

A process VM's sandbox had each of those folders of /var bound read-only where it is (nine
binds on a host with aspell, ghostscript, LibreOffice and PostgreSQL), in folders made for
them (five more). bubblewrap reads the sandbox's whole mount table again after each bind it
makes, so each costs more than its own mount: ~0.15 ms of the machine's CPU here, at every
boot, and a reset boots a standby (``benchmarks/perf/README.md``, "The system data's folder").
They are data, read and never run, a few MB: a copy of them, made once under the provider's
base folder and bound at /var in one bind, shows the sandbox the same files. The copy is made
again when the host's folders changed (:func:`folder_key`: every file's size and time, read
once per provider; a boot checks only that the copy is still there) or went; a provider that
cannot make it binds the folders one by one.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from . import agent_folder, sandbox_fs

__all__ = ["FOLDERS", "folder_key", "prepare"]

#: the folders under the provider's base folder, one per content of the host's data
FOLDERS = ".system-data"
#: where the folders are, on the host and in the sandbox
VAR = "/var"
#: mount points a sandbox binds into /var on top of the folder (``sandbox_fs.font_cache``)
MOUNT_POINTS = ("/var/cache/fontconfig",)


def folder_key(folders: list[str]) -> str:
    """What the copy is made from: each folder's every entry, its size, time, mode and link
    target; 16 hex digits. A package's upgrade renames new files in, which changes them."""
    digest = hashlib.sha256()
    for top in (*folders, *(point for point in MOUNT_POINTS if os.path.isdir(point))):
        digest.update(f"{top}\0".encode())
        for root, dirs, files in os.walk(top):
            dirs.sort()
            for name in sorted(dirs + files):
                path = os.path.join(root, name)
                try:
                    st = os.lstat(path)
                    link = os.readlink(path) if os.path.islink(path) else ""
                except OSError:
                    continue
                digest.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_mode}\0{link}\n".encode())
    return digest.hexdigest()[:16]


def prepare(base: Path) -> Path | None:
    """The folder under ``base`` that a sandbox binds at /var, made now if the host's data is
    not there as it is; None (the sandbox binds the folders one by one) when the host has
    none, or it cannot be made (a warning). Removes the others no provider used for a week."""
    folders = sandbox_fs.system_data_found()
    if not folders:
        return None
    folder = base / FOLDERS / folder_key(folders)
    return agent_folder.made_and_pruned(folder, lambda scratch: _make(scratch, folders),
                                        "the system data's folder could not be made (%s%s): a process VM "
                                        "binds its folders of /var one by one")


def _make(scratch: Path, folders: list[str]) -> None:
    """Each folder copied to its place under ``scratch`` (``/var/lib/aspell`` → ``lib/aspell``),
    links as links, modes as they are; the folders above them, and the mount points, 0755
    whatever the umask: the commands' user reads through them."""
    made = {scratch}
    for path in folders:
        target = scratch / os.path.relpath(path, VAR)
        made.update(p for p in target.parents if scratch in p.parents)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(path, target, symlinks=True)
    for point in (f"{VAR}/cache", *(p for p in MOUNT_POINTS if os.path.isdir(p))):
        target = scratch / os.path.relpath(point, VAR)
        target.mkdir(parents=True, exist_ok=True)
        made.update((target, *(p for p in target.parents if scratch in p.parents)))
    for folder in made:
        os.chmod(folder, 0o755)
