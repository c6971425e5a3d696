"""Where a setup step's files come from, and the error a failing step raises.

The step registry (:mod:`.setup`) and the step modules it collects (:mod:`.account_steps`,
:mod:`.browser_steps`) all need these; they live below all three so that the registry can
import its step modules at the top and no step module imports the registry back.

A step's file is a ``file://`` URL, a local path (a relative one from the task file's
folder) or an http(s) URL fetched once per machine into the download cache
(:mod:`.downloads`).
"""

from __future__ import annotations

from pathlib import Path

from . import downloads
from .downloads import cache_root

__all__ = ["SetupError", "SourceMissing", "cache_root", "local_path", "local_source"]


class SetupError(RuntimeError):
    """A setup or postconfig step failed. Before the agent's first turn the env makes it the
    attempt's ``setup_failed`` (no score); after it, the attempt's error (the agent may have
    caused it: a window it closed, a file it removed)."""


class SourceMissing(SetupError):
    """A file the task names (a URL, a path beside the task file) could not be had: the
    task's data, which nothing in the VM touches, so never the agent's doing."""


def local_source(task, url: str, cache: Path) -> Path:
    """The local file behind ``url``: a file:// URL, a path (relative ones from the task
    file's folder), or an http(s) URL fetched once into the download cache."""
    if downloads.is_remote(url):
        try:
            return downloads.fetch(url, cache, legacy=cache / task.id / downloads.basename(url))
        except downloads.DownloadError as exc:
            raise SourceMissing(f"task {task.id!r}: {exc}") from None
    path = local_path(task, url)
    if path is None:
        raise SourceMissing(f"task {task.id!r}: unsupported URL scheme in {url!r} "
                         "(http, https, file or a local path)")
    if not path.is_file():
        raise SourceMissing(f"task {task.id!r}: no such local file {path}")
    return path


def local_path(task, url: str) -> Path | None:
    """Where a file:// URL or a path (a relative one from the task file's folder) points,
    whether or not a file is there; None for a URL of another scheme (an http(s) one is the
    download cache's)."""
    if url.startswith("file://"):
        return Path(url[len("file://"):])
    if "://" in url:
        return None
    path = Path(url).expanduser()
    if not path.is_absolute():
        base = Path(task.source.rsplit(":", 1)[0]).parent if task.source else Path.cwd()
        path = base / path
    return path
