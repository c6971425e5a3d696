"""The system programs' data of /var (``sandbox_fs.SYSTEM_DATA``), and /etc, each as one
folder made once.

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

/etc likewise (:func:`prepare_etc`): bound as it is, it took an empty file over each of the
host's secrets besides (``sandbox_fs.SECRET_FILES``: five binds here). Its copy holds what
another user may read of it, which is all the sandbox's user (a uid no file of the host has)
could: every folder and link, every file any user may read; a file that not every user may
read (the shadow files, a private key, a daemon's key) is an empty file of mode 0 there,
present as it is on the host and as unreadable, and not copied.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
from pathlib import Path

from . import agent_folder, sandbox_fs

__all__ = ["ETC_FOLDERS", "FOLDERS", "folder_key", "prepare", "prepare_etc"]

#: the folders under the provider's base folder, one per content of the host's data
FOLDERS = ".system-data"
#: likewise, of /etc's copies
ETC_FOLDERS = ".system-etc"
ETC = "/etc"
#: where the folders are, on the host and in the sandbox
VAR = "/var"
#: mount points a sandbox binds into /var on top of the folder (``sandbox_fs.font_cache``)
MOUNT_POINTS = ("/var/cache/fontconfig",)


def folder_key(folders: list[str]) -> str:
    """What the copy is made from: each folder's every entry, its size, time, mode and link
    target; 16 hex digits. A package's upgrade renames new files in, which changes them."""
    digest = hashlib.sha256()
    for top in folders:
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
    folder = base / FOLDERS / folder_key([*folders, *(point for point in MOUNT_POINTS if os.path.isdir(point))])
    return agent_folder.made_and_pruned(folder, lambda scratch: _make(scratch, folders),
                                        "the system data's folder could not be made (%s%s): a process VM "
                                        "binds its folders of /var one by one")


def prepare_etc(base: Path) -> Path | None:
    """The folder under ``base`` that a sandbox binds at /etc, made now if /etc is not there as
    it is; None (the sandbox binds /etc and masks its secrets) when the host's /etc is a link or
    none, or the copy cannot be made (a warning). Removes the others no provider used for a week."""
    if not os.path.isdir(ETC) or os.path.islink(ETC):
        return None
    return agent_folder.made_and_pruned(base / ETC_FOLDERS / folder_key([ETC]), _make_etc,
                                        "/etc's copy could not be made (%s%s): a process VM binds /etc "
                                        "and masks the host's secrets in it one by one")


def _make_etc(scratch: Path) -> None:
    """/etc as another user reads it, in ``scratch`` (see the module's doc): folders with
    their modes (made 0700 while they are filled), links as links, files any user may read
    with their content and mode, the others empty and mode 0; nothing else (a socket, a
    FIFO). Set by name, not followed: a link on the host stays one."""
    folders = [(scratch, os.stat(ETC).st_mode)]
    for root, dirs, files in os.walk(ETC):
        target_root = scratch / os.path.relpath(root, ETC)
        for name in dirs + files:
            path, target = os.path.join(root, name), target_root / name
            try:
                st = os.lstat(path)
                if stat.S_ISLNK(st.st_mode):
                    os.symlink(os.readlink(path), target)
                elif stat.S_ISDIR(st.st_mode):
                    target.mkdir(mode=0o700)
                    folders.append((target, st.st_mode))
                elif stat.S_ISREG(st.st_mode) and st.st_mode & stat.S_IROTH:
                    shutil.copy2(path, target, follow_symlinks=False)
                elif stat.S_ISREG(st.st_mode):
                    target.touch(mode=0)  # new: mode 0 whatever the umask
            except FileNotFoundError:
                continue  # removed from the host's /etc as it was read: as if read after
    for folder, mode in folders:
        os.chmod(folder, stat.S_IMODE(mode))


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
