"""Where a run writes, checked before it starts (by the run and by ``--dry-run`` alike): the
folder of a file it will write (``--junit-xml``), and the free disk where its run folder
goes (``min_free_disk_mb``). Past the start, a write that finds the disk full stops the run
(exit 1, ``--resume`` continues it): the results store says so; ``EventsFile`` keeps the
events' lines whole meanwhile.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path

from .errors import ConfigError

log = logging.getLogger(__name__)


def check_writable_folder(flag: str, path: str, said: str = "") -> None:
    """ConfigError unless the file ``path`` can be written: its folder, or the nearest one
    that exists (the writer makes the rest), is a folder this process may write in. The
    message starts with ``said`` when given, else with the flag and the path."""
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
        raise ConfigError(f"{said or f'{flag} {path}'}: {_why_not_writable(where, exc)}") from None


def _why_not_writable(where: Path, exc: OSError) -> str:
    """Why no file could be made in the folder ``where``, which exists: its file system's
    "No such file or directory" (/proc's) is no missing folder but a place files are not made."""
    if exc.errno != errno.ENOENT:
        return f"the folder {where} is not writable ({exc.strerror})"
    kind = mount_type(where)
    return (f"no file can be made in the folder {where}: it is {f'on the {kind} file system, ' if kind else ''}"
            "one the kernel fills, not storage (making a file there says 'No such file or directory'); "
            "give a folder on a disk")


def mount_type(path: Path) -> str:
    """The type of the file system ``path`` is on (``proc``, ``sysfs``, ``ext4`` …), from
    /proc/self/mountinfo; "" when it cannot be read."""
    best, kind = -1, ""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return ""
    text = os.path.realpath(path)
    for line in lines:
        fields, _, rest = line.partition(" - ")
        parts = fields.split()
        if len(parts) < 5 or not rest:
            continue
        point = parts[4].replace("\\040", " ")
        if (text == point or text.startswith(point.rstrip("/") + "/")) and len(point) > best:
            best, kind = len(point), rest.split()[0]
    return kind


def check_run_folder_writable(output_dir: str, run_dir: Path) -> None:
    """ConfigError unless this process can make ``run_dir`` and write in it (not on a
    read-only mount, nor in a folder it may not write in): ``--dry-run`` finds what opening
    the run folder would."""
    check_writable_folder("--output-dir", str(run_dir / "results.jsonl"),
                          f"--output-dir {output_dir}: cannot write the run folder {run_dir}")


def check_free_disk(output_dir: str, min_free_disk_mb: int, said: str = "min_free_disk_mb") -> str:
    """ConfigError unless the folder the run folder goes in (``output_dir`` or its nearest
    existing parent) has ``min_free_disk_mb`` free (one short of it that cannot be written at
    all is said to be so), the setting named as ``said`` (``key_as_given``: it has no flag);
    else what it has, for the dry run."""
    where = Path(output_dir).resolve()
    while not where.exists():
        where = where.parent
    if not where.is_dir():
        raise ConfigError(f"--output-dir {output_dir}: {where} is a file, not a folder")
    free_mb = shutil.disk_usage(where).free // 2**20
    if free_mb < min_free_disk_mb:
        # a folder it cannot write in at all (a read-only mount, often a small one) is said so,
        # not as too little free space
        check_writable_folder("--output-dir", str(where / "results.jsonl"), f"--output-dir {output_dir}")
        raise ConfigError(f"{where} has {free_mb} MB free; a run wants at least {min_free_disk_mb} MB "
                          f"({said}) for its results, trajectories and logs")
    return f"{free_mb} MB free in {where}"


class EventsFile:
    """``events.jsonl``, opened to append by one of its writers (the engine, the pool's
    Manager), as ``ResultStore`` keeps ``results.jsonl``: a line goes out as one write of its
    bytes (``O_APPEND``: the two writers' lines never interleave), and a write that fails
    (disk full) is cut back to the line before, so the next line, or the next session's, is
    not glued onto half a line. ``repair`` (the engine's, before the Manager starts) first
    sets aside a torn last line an earlier session left: to ``events.jsonl.torn``."""

    def __init__(self, path: str | Path, repair: bool = False) -> None:
        self.path = Path(path)
        if repair:
            repair_tail(self.path)
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, text: str) -> None:
        """Append ``text`` (whole lines) or nothing: OSError after cutting back what went out."""
        if self._fd is None:
            raise ValueError(f"{self.path} is closed")
        append_whole(self._fd, text.encode("utf-8"), self.path)

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)


def repair_tail(path: Path) -> None:
    """A last line without its newline: ended when it is a whole line, else moved aside (to
    ``<name>.torn``): a later append would glue its line onto it. ``events.jsonl``'s, and a
    scheduler's ``results.jsonl`` when a later session opens its folder."""
    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, size - (1 << 20)))  # a line is far shorter than the last MiB
            tail = fh.read()
    except FileNotFoundError:
        return
    torn = tail[tail.rfind(b"\n") + 1:]
    if not torn:
        return
    try:
        json.loads(torn)
    except ValueError:
        set_aside_torn(path, torn)
        log.warning("%s: set aside a torn last line (%d bytes, from an interrupted write) in %s.torn",
                    path, len(torn), path.name)
    else:
        with open(path, "ab") as fh:
            fh.write(b"\n")


def append_whole(fd: int, data: bytes, path: Path, write=None) -> None:
    """Append ``data`` (whole lines) to ``fd`` (opened ``O_APPEND``) all or nothing: on a
    failed write (disk full) what went out is cut back, when no other writer appended since,
    and the OSError raised. The file's size, not the position: after a cut-back the append
    position still points past the end. ``results.jsonl`` and ``events.jsonl`` both go so;
    ``write`` (bytes → count written), when given, writes instead of ``os.write`` on ``fd``."""
    write = write or (lambda chunk: os.write(fd, chunk))
    before, written = os.fstat(fd).st_size, 0
    try:
        while written < len(data):
            written += write(data[written:])
    except OSError:
        if written and os.fstat(fd).st_size == before + written:  # no other line since
            try:
                os.ftruncate(fd, before)
            except OSError:
                log.exception("could not cut %s back to %d bytes", path, before)
        raise


def set_aside_torn(path: Path, torn: bytes) -> None:
    """Move ``torn``, the bytes after ``path``'s last newline (a line an interrupted write
    left), to ``<name>.torn`` and cut the file back to its last whole line."""
    with open(path.with_name(path.name + ".torn"), "ab") as fh:
        fh.write(torn + b"\n")
    os.truncate(path, os.path.getsize(path) - len(torn))
