"""Writing the report's files (report.html, compare pages, JUnit XML): whole or not at all.

Each file is written beside its place as ``<name>.tmp`` and renamed over it, so a reader
never sees half a page; the folders it goes in are made as needed (``report -o
new/r.html``). A write that fails (a full disk, a folder that is a file, ``/proc``) removes
its ``.tmp`` and is a ``CannotWrite`` naming the path: a usage error (exit 2) in the CLI,
a line of run.log at the end of a run.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Callable

from ..errors import ConfigError


class CannotWrite(ConfigError):
    """A report file that cannot be written where it was asked for."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"cannot write {path}: {reason}")
        self.path = path
        self.reason = reason


def write_whole(path: str | Path, write: Callable[[Path], object]) -> Path:
    """Make ``path``'s missing folders, call ``write(tmp)`` to write the file beside it and
    rename it into place; on failure remove ``tmp`` and raise CannotWrite."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write(tmp)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise CannotWrite(path, _why(path, exc)) from None
    return path


def _why(path: Path, exc: OSError) -> str:
    """Why ``path`` could not be written, said of the path given: a folder of it that is a
    file made mkdir say "File exists" (or "Not a directory") of a path the user never named."""
    if isinstance(exc, (FileExistsError, NotADirectoryError)):
        file = next((parent for parent in reversed(path.parents) if parent.exists() and not parent.is_dir()), None)
        if file is not None:
            return f"{file} is a file, not a folder"
    return exc.strerror or str(exc)


def write_text_whole(path: str | Path, text: str) -> Path:
    """``write_whole`` of a text file, UTF-8."""
    return write_whole(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
