"""What a dry run says of OSWorld tasks besides their support: information, not problems.

Three things end a supported task ``setup_failed`` (no score) before its agent acts, and all
can be seen from the task files alone, without a VM and without network:

* a file it fetches by URL (``download`` steps, ``cloud_file`` getters) that is not in the
  download cache (``downloads.cache_path``): the run downloads it, and without internet it
  cannot (``osworld-cache missing`` lists the URLs, ``put`` fills them in: :mod:`.cache_tool`);
* a local file it reads (a path, relative ones from the task file's folder, or a file:// URL:
  a ``cloud_file`` gold beside the task file, a ``download`` step's input) that is not there;
* an app it launches that the provider's VMs lack: ``code`` (VS Code, not in Debian) and
  ``nautilus`` on the desktop images this project builds (docker, qemu); for the process
  provider, whose sandboxes see the host's ``/usr``, the host's PATH decides. Remote, vmware
  and virtualbox VMs are the user's own (OSWorld's Ubuntu has them all): not judged.
"""

from __future__ import annotations

import shlex
import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable

from ... import provenance
from ...tasks_osworld import DEFAULT_INDEX
from . import downloads
from .sources import local_path, task_sources

#: providers whose desktop is this project's image: the apps it holds are known here
_IMAGE_PROVIDERS = ("docker", "qemu")


def _image_programs() -> set[str]:
    """The programs of this project's desktop image (its Debian packages by their command)."""
    from ...guest.desktop_routes import APP_ALIASES
    from ...pool.providers.images import DESKTOP_APT_PACKAGES, DESKTOP_PACKAGES

    programs = {"libreoffice" if name.startswith("libreoffice") else name
                for name in DESKTOP_APT_PACKAGES + DESKTOP_PACKAGES}
    return programs | set(APP_ALIASES) | {"pkill", "sh", "bash", "python", "python3"}


def _on_host(program: str) -> bool:
    """Whether the process provider's sandboxes can start ``program`` (the host's PATH, or
    the app OSWorld's name stands for there: google-chrome is chromium)."""
    from ...guest.desktop_routes import APP_ALIASES

    alias = APP_ALIASES.get(program)
    return bool(shutil.which(program) or (alias and shutil.which(alias[0])))


def _launched(payload: dict[str, Any]) -> Iterable[str]:
    """The program of each ``launch`` step (config and postconfig), by its file name."""
    evaluator = payload.get("evaluator") or {}
    for step in list(payload.get("config") or []) + list(evaluator.get("postconfig") or []):
        if not isinstance(step, dict) or step.get("type") != "launch":
            continue
        command = (step.get("parameters") or {}).get("command")
        try:
            words = shlex.split(command) if isinstance(command, str) else list(command or [])
        except ValueError:
            continue
        words = [w for w in words if isinstance(w, str) and not ("=" in w and not w.startswith(("/", "-")))]
        if words:
            yield Path(words[0]).name


def _uncached(task: Any) -> bool:
    """Whether the task fetches a URL that is in neither of the cache's places."""
    urls = [url for url in task_sources(task) if downloads.is_remote(url)]
    return any(downloads.cached(url, task.id) is None for url in urls)


def _missing_local(task: Any) -> str | None:
    """The first local file the task reads that is not there (as ``local_source`` looks for
    it), or a URL of a scheme it cannot read; None when there is none."""
    for url in task_sources(task):
        if not downloads.is_remote(url):
            path = local_path(task, url)
            if path is None or not path.is_file():
                return url if path is None else str(path)
    return None


def _tasks_that(count: int, does: str, do: str) -> str:
    """The note's subject and its verb, which agree: '1 task fetches', '3 tasks fetch'."""
    return f"{count} task {does}" if count == 1 else f"{count} tasks {do}"


def _they(count: int, end: str = "") -> str:
    """What those tasks end as: 'it ends', 'they end' ('it will end', 'they will end')."""
    return ("it " + (end or "ends")) if count == 1 else ("they " + (end or "end"))


def missing_command(data: str, index: str, domain: str) -> str:
    """The ``osworld-cache missing`` command that lists the uncached files of the tasks a run
    of ``data`` (its ``--osworld-index`` and ``--domain``) reads, under the program the user
    reached this one by (``parallel-rollout``, ``./dev``, ``python -m parallel_rollout``,
    ``python run_parallel_rollout.py``): a command of the package, which a pip install has
    as a checkout does, where a checkout's ``scripts/`` is not installed."""
    words = ["osworld-cache", "missing", data]
    if Path(index).parent != Path() and Path(index).resolve().parent == Path(data).resolve():
        index = Path(index).name  # --test_all_meta_path names it by a path: the same note as by its name
    words += ["--index", index] if index != DEFAULT_INDEX else []
    words += ["--domain", domain] if domain != "all" else []
    return f"{provenance.program()} {shlex.join(words)}"


def census_notes(tasks: list[Any], provider_name: str, listing: str) -> list[str]:
    """The dry run's notes on ``tasks`` (runnable OSWorld tasks) for VMs of ``provider_name``;
    ``listing``: the command that lists their uncached files (:func:`missing_command`)."""
    notes = []
    uncached = [task.id for task in tasks if _uncached(task)]
    if uncached:
        notes.append(f"note: {_tasks_that(len(uncached), 'fetches', 'fetch')} files not in the "
                     f"download cache ({downloads.cache_root()}): the run downloads them, and without "
                     f"internet {_they(len(uncached))} setup_failed; {listing} lists them")
    missing = {task.id: name for task in tasks if (name := _missing_local(task)) is not None}
    if missing:
        first = next(iter(missing))
        notes.append(f"note: {_tasks_that(len(missing), 'reads', 'read')} a local file that is not there: "
                     f"{_they(len(missing), 'will end')} setup_failed (e.g. {first}: {missing[first]})")
    if provider_name in _IMAGE_PROVIDERS:
        programs = _image_programs()
        lacks = lambda program: program not in programs  # noqa: E731 - one test, two providers
    elif provider_name == "process":
        lacks = lambda program: not _on_host(program)  # noqa: E731
    else:
        return notes
    by_app: dict[str, list[str]] = defaultdict(list)
    for task in tasks:
        for program in dict.fromkeys(_launched(dict(task.payload))):
            if lacks(program):
                by_app[program].append(task.id)
    where = "this host's PATH (the process provider's VMs run its programs)" if provider_name == "process" \
        else f"the {provider_name} desktop image"
    for program, ids in sorted(by_app.items()):
        notes.append(f"note: {_tasks_that(len(ids), 'launches', 'launch')} {program}, which "
                     f"{where} lacks: {_they(len(ids), 'will end')} setup_failed (e.g. {ids[0]})")
    return notes
