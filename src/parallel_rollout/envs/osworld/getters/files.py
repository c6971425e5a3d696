"""File getters: a file from the VM (``vm_file``), from a URL or local source (``cloud_file``),
from the attempt's cache folder (``cache_file``), or a piece of a VM file's content.

``vm_file`` and ``cloud_file`` take OSWorld's ``multi``: ``path`` and ``dest`` are then lists,
and ``gives`` (default ``[0]``) picks which of the fetched files the metric gets: one path when
it picks one, else a list. A VM file that cannot be read gives ``None`` in its place.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..sources import local_source


def _pairs(config: dict) -> list[tuple[str, str]]:
    if config.get("multi", False):
        paths, dests = config["path"], config["dest"]
        if not isinstance(paths, list) or not isinstance(dests, list):
            raise ValueError("a 'multi' file getter needs lists 'path' and 'dest'")
        return list(zip(paths, dests))
    return [(config["path"], config.get("dest") or Path(config["path"]).name)]


def _given(values: list, config: dict):
    picked = [v for i, v in enumerate(values) if i in set(config.get("gives", [0]))]
    return picked[0] if len(picked) == 1 else picked


def get_vm_file(env, config: dict):
    """POST /file into the attempt's cache folder; the local path (None when missing)."""
    if config.get("time_suffix") and not config.get("multi"):
        raise ValueError("vm_file 'time_suffix' is not supported")
    local = []
    for path, dest in _pairs(config):
        try:
            data = env.vm.read_file(path)
        except FileNotFoundError:
            local.append(None)
            continue
        target = Path(env.cache_dir) / dest
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        local.append(str(target))
    return _given(local, config)


def get_cloud_file(env, config: dict):
    """The file behind a URL (file://, a path, or an http(s) URL through the download cache),
    copied into the cache folder as ``dest``; its local path (or paths, with ``multi``)."""
    local = []
    for url, dest in _pairs(config):
        source = local_source(env.task, url, env.cache_root)
        target = Path(env.cache_dir) / dest
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists():
            target.write_bytes(Path(source).read_bytes())
        local.append(str(target))
    return _given(local, config)


def get_cache_file(env, config: dict) -> str:
    """A file already in the attempt's cache folder."""
    path = os.path.join(env.cache_dir, config["path"])
    if not os.path.exists(path):
        raise FileNotFoundError(f"cache_file: no {path}")
    return path


def get_content_from_vm_file(env, config: dict) -> Any:
    """``file_type: xlsx`` with ``file_content: last_row``: the sheet's last row as strings
    (pandas reads it)."""
    import pandas as pd

    path = get_vm_file(env, {"path": config["path"], "dest": os.path.basename(config["path"])})
    if config["file_type"] != "xlsx":
        raise NotImplementedError(f"content_from_vm_file: file type {config['file_type']!r}")
    if config["file_content"] == "last_row":
        return pd.read_excel(path).iloc[-1].astype(str).tolist()
    return None


GETTERS = {"vm_file": get_vm_file, "cloud_file": get_cloud_file, "cache_file": get_cache_file,
           "content_from_vm_file": get_content_from_vm_file}
