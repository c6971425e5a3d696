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
from typing import Any

from . import downloads
from .downloads import cache_root

__all__ = ["EMPTY_HISTORY_URL", "SetupError", "SourceMissing", "SourceNotThere", "cache_root", "evaluation_sources", "local_path",
           "local_source", "task_sources"]

#: the empty Chrome history ``update_browse_history`` starts from when the profile has none
EMPTY_HISTORY_URL = ("https://huggingface.co/datasets/xlangai/ubuntu_osworld_file_cache/resolve/main/"
                     "chrome/44ee5668-ecd5-4366-a6ce-c1c9b8d4e938/history_empty.sqlite?download=true")


class SetupError(RuntimeError):
    """A setup or postconfig step failed. Before the agent's first turn the env makes it the
    attempt's ``setup_failed`` (no score); after it, the attempt's error (the agent may have
    caused it: a window it closed, a file it removed)."""


class SourceMissing(SetupError):
    """A file the task names (a URL, a path beside the task file) could not be had: the
    task's data, which nothing in the VM touches, so never the agent's doing."""


class SourceNotThere(SourceMissing):
    """A file the task names that no retry can have: a path or ``file://`` URL with no file
    there, a URL of a scheme nothing reads. The task's own error (a download that failed
    may be the network's, and is retried)."""


def local_source(task, url: str, cache: Path) -> Path:
    """The local file behind ``url``: a file:// URL, a path (relative ones from the task
    file's folder), or an http(s) URL fetched once into the download cache."""
    if downloads.is_remote(url):
        try:
            return downloads.fetch(url, cache, task.id)
        except downloads.DownloadError as exc:
            raise SourceMissing(f"task {task.id!r}: {exc}") from None
    path = local_path(task, url)
    if path is None:
        raise SourceNotThere(f"task {task.id!r}: unsupported URL scheme in {url!r} "
                             "(http, https, file or a local path)")
    if not path.is_file():
        raise SourceNotThere(f"task {task.id!r}: no such local file {path}")
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


def _step_files(steps: Any, maybe: bool) -> list[Any]:
    """The files ``steps`` fetch from outside the VM: ``download`` and ``upload_file``
    steps' (``maybe``: also the empty history ``update_browse_history`` fetches only when
    the profile has none)."""
    found: list[Any] = []
    for step in steps if isinstance(steps, list) else []:
        kind = step.get("type") if isinstance(step, dict) else None
        if kind in ("download", "upload_file"):
            files = (step.get("parameters") or {}).get("files")
            found += [item.get("url", item.get("local_path")) for item in files or [] if isinstance(item, dict)]
        elif kind == "update_browse_history" and maybe:
            found.append(EMPTY_HISTORY_URL)
    return found


def _strings(values: list[Any]) -> list[str]:
    return [u for value in values for u in (value if isinstance(value, list) else [value]) if isinstance(u, str)]


def evaluation_sources(evaluator: dict[str, Any], maybe: bool = False) -> list[str]:
    """The files an evaluation reads from outside the VM, as the task names them (an http(s)
    URL, a file:// URL or a path): its getters' ``cloud_file`` paths and what its
    ``postconfig`` steps download or upload (``maybe``: see :func:`_step_files`). Not the
    web pages a step opens in Chrome or a rule names: nothing fetches those into the cache."""
    sides = [evaluator.get("expected"), evaluator.get("result")]
    found = [getter.get("path") for side in sides for getter in (side if isinstance(side, list) else [side])
             if isinstance(getter, dict) and getter.get("type") == "cloud_file"]
    return _strings(found + _step_files(evaluator.get("postconfig"), maybe))


def task_sources(task: Any) -> list[str]:
    """Every file a task's steps and getters may fetch from outside the VM (its config's
    and its evaluation's): what the download cache must hold for it to run offline."""
    return _strings(_step_files(task.get("config"), True)) + evaluation_sources(task.get("evaluator") or {}, True)
