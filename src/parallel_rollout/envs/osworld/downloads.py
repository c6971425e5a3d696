"""The download cache of the osworld mode: OSWorld tasks name their input and gold files by
http(s) URL (``download`` steps, ``cloud_file`` getters); each URL is fetched once per machine
and kept under a name derived from the URL, so a run with internet works on OSWorld's tasks as
they are and a run without it works from a filled cache.

::

    fetch(url) ──► <cache>/urls/<sha256(url)[:32]>/<basename>  exists? ──► that path
                     │ no
                     ▼
                   urllib GET (DOWNLOAD_ATTEMPTS tries, DOWNLOAD_TIMEOUT_S each) into a temp
                   file next to it, then renamed: a killed download never leaves a partial
                   file under the final name; a file lock keeps two workers from fetching the
                   same URL at once

``<cache>`` is ``$PARALLEL_ROLLOUT_OSWORLD_CACHE`` or ``~/.cache/parallel-rollout/osworld``.
A machine without internet fills it with :func:`cache_path` (``scripts/osworld_cache.py`` puts
local files in place for their URLs); a file put where earlier versions said to put it,
``<cache>/<task id>/<name>`` (the earlier layout, :func:`legacy_paths`), is still found, by a
run and by ``osworld_cache.py missing`` alike (:func:`cached`). A URL that cannot be fetched
raises :class:`DownloadError` naming the URL, the error and where the file would be taken from.
"""

from __future__ import annotations

import hashlib
import os
import urllib.parse
from pathlib import Path

from ...pool.providers.host_dirs import OSWORLD_CACHE

#: tries and per-try timeout of one URL (OSWorld's client: 3 tries, 300 s)
DOWNLOAD_ATTEMPTS = 3
DOWNLOAD_TIMEOUT_S = 300.0
CACHE_ENV = OSWORLD_CACHE.env


class DownloadError(OSError):
    """A URL that could not be fetched and is not in the cache."""


def cache_root() -> Path:
    """The cache folder: $PARALLEL_ROLLOUT_OSWORLD_CACHE or ~/.cache/parallel-rollout/osworld
    (``host_dirs.OSWORLD_CACHE``: a command agent's program never sees it, gold files included)."""
    return OSWORLD_CACHE.path()


def is_remote(url: str) -> bool:
    """True for the http(s) URLs this module fetches."""
    return url.startswith(("http://", "https://"))


def urls_in(value) -> list[str]:
    """Every http(s) URL string anywhere in a task's JSON (its steps, its evaluator)."""
    if isinstance(value, str):
        return [value] if is_remote(value) else []
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        return [url for item in value for url in urls_in(item)]
    return []


def basename(url: str) -> str:
    """The file name a URL's path ends with (``file`` when it has none)."""
    path = urllib.parse.urlsplit(url).path
    return urllib.parse.unquote(path.rstrip("/").rsplit("/", 1)[-1]) or "file"


def cache_path(url: str, root: Path | None = None) -> Path:
    """Where the file of ``url`` is kept: a folder per URL (its hash), the URL's file name."""
    digest = hashlib.sha256(url.encode("utf-8")).hexdigest()[:32]
    return (root or cache_root()) / "urls" / digest / basename(url)


def legacy_paths(url: str, task_id: str, root: Path | None = None) -> list[Path]:
    """Where earlier versions kept the file of ``url`` for task ``task_id`` (and told a user
    without internet to put it): ``<cache>/<task id>/<name>``, the name being the URL's last
    segment as the URL spells it (``history_empty.sqlite?download=true``,
    ``Order_Sales_Serial%23.xlsx``: what their message said) or its file name (:func:`basename`)."""
    if not task_id or "/" in task_id or task_id in (".", ".."):
        return []
    folder = (root or cache_root()) / task_id
    names = [basename(url), url.rstrip("/").rsplit("/", 1)[-1]]
    return [folder / name for name in dict.fromkeys(names) if name not in ("", ".", "..")]


def cached(url: str, task_id: str | None = None, root: Path | None = None) -> Path | None:
    """The cached file of ``url`` (for task ``task_id``: also in the earlier layout), or None."""
    for path in [cache_path(url, root), *legacy_paths(url, task_id or "", root)]:
        if path.is_file():
            return path
    return None


def fetch(url: str, root: Path | None = None, task_id: str | None = None) -> Path:
    """The local copy of ``url``, downloaded into the cache on first use; ``task_id``: the
    task that names it, whose folder of the earlier layout may hold it (:func:`legacy_paths`)."""
    found = cached(url, task_id, root)
    if found is not None:
        return found
    target = cache_path(url, root)
    import filelock

    target.parent.mkdir(parents=True, exist_ok=True)
    with filelock.FileLock(str(target.parent / ".lock")):
        if target.is_file():  # another worker fetched it while we waited
            return target
        error = _download(url, target)
    if error is not None:
        raise DownloadError(f"cannot download {url} ({error}); without network, put the file "
                            f"at {target}")
    return target


def _download(url: str, target: Path) -> Exception | None:
    """Fetch into a temp file, then rename it to ``target``; the last error, or None."""
    from urllib.request import Request, urlopen

    partial = target.with_name(f".{target.name}.part")
    error: Exception | None = None
    for _ in range(DOWNLOAD_ATTEMPTS):
        try:
            request = Request(url, headers={"User-Agent": "parallel-rollout"})
            with urlopen(request, timeout=DOWNLOAD_TIMEOUT_S) as response, open(partial, "wb") as out:
                expected = int(response.headers.get("Content-Length") or 0)
                while chunk := response.read(1 << 20):
                    out.write(chunk)
            size = partial.stat().st_size
            if expected and size != expected:
                raise OSError(f"got {size} of {expected} bytes")
            os.replace(partial, target)
            return None
        except (OSError, ValueError) as exc:  # URLError and HTTPError are OSErrors
            error = exc
    partial.unlink(missing_ok=True)
    return error
