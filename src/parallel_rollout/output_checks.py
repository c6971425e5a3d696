"""Where a run writes, checked before it starts (by the run and by ``--dry-run`` alike): the
folder of a file it will write (``--junit-xml``), and the free disk where its run folder
goes (``min_free_disk_mb``). Past the start, a write that finds the disk full stops the run
(exit 1, ``--resume`` continues it): the results store says so.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from .errors import ConfigError


def check_writable_folder(flag: str, path: str) -> None:
    """ConfigError unless the file ``path`` can be written: its folder, or the nearest one
    that exists (the writer makes the rest), is a folder this process may write in."""
    where = Path(path).absolute().parent
    while not where.exists() and where != where.parent:
        where = where.parent
    if not where.is_dir():
        raise ConfigError(f"{flag} {path}: {where} is not a folder")
    try:  # a file made there and removed: access() says yes to root even under /proc
        fd, probe = tempfile.mkstemp(prefix=".pr-writable-", dir=where)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise ConfigError(f"{flag} {path}: the folder {where} is not writable ({exc.strerror})") from None


def check_free_disk(output_dir: str, min_free_disk_mb: int) -> str:
    """ConfigError unless the folder the run folder goes in (``output_dir`` or its nearest
    existing parent) has ``min_free_disk_mb`` free; else what it has, for the dry run."""
    where = Path(output_dir).resolve()
    while not where.exists():
        where = where.parent
    if not where.is_dir():
        raise ConfigError(f"--output-dir {output_dir}: {where} is a file, not a folder")
    free_mb = shutil.disk_usage(where).free // 2**20
    if free_mb < min_free_disk_mb:
        raise ConfigError(f"{where} has {free_mb} MB free; a run wants at least {min_free_disk_mb} MB "
                          "(min_free_disk_mb) for its results, trajectories and logs")
    return f"{free_mb} MB free in {where}"
