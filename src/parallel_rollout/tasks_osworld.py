"""OSWorld's task-set layout: what ``--data FOLDER`` and ``--osworld-index`` name.

::

    evaluation_examples/            (--data: it, or the checkout that holds it)
    ├── test_all.json               an index: {"<domain>": ["<task id>", ...]}; --osworld-index
    ├── test_small.json …           picks one (test_all.json by default), or a file of your own
    └── examples/<domain>/<id>.json one task each

``osworld_folder`` finds the folder and the index, and says what was meant when ``--data``
names a level above or below it (``examples/``, a task file, an index file);
``folder_records`` reads the tasks the index selects, each bad file its own error so the
loader lists every one at once (a file whose ``id`` is not the index's is one: OSWorld keys
the example and its result folder on the index's id); ``task_files`` are the files a run of
the folder is made of (the index and the tasks it selects), which the run's data hash
covers; ``is_osworld_folder`` lets ``--data`` alone imply ``--mode osworld``.
"""

from __future__ import annotations

import difflib
import glob
import json
import re
from pathlib import Path
from typing import Any, Callable, Iterable

from .config import DATA_KINDS
from .errors import TaskFileError
from .task_json import as_written, parse_json

#: OSWorld's index of every task; --osworld-index picks another (test_small.json …)
DEFAULT_INDEX = "test_all.json"
_LAYOUT = "OSWorld's layout: an index such as test_all.json + examples/<domain>/<id>.json"

#: how the loader's messages say the setting that named the task data, alone or with a value
DataSaid = Callable[..., str]


def cli_data(value: Any = None) -> str:
    """The CLI's words for it: ``--data``, ``--data tasks.jsonl`` (a trainer's TaskSet has its own)."""
    return "--data" if value is None else f"--data {value}"


def _index_shaped(value: Any) -> bool:
    """``{"domain": ["task id", ...]}``."""
    return isinstance(value, dict) and bool(value) and all(
        isinstance(ids, list) and all(isinstance(i, str) for i in ids) for ids in value.values())


def _read_json(path: Path) -> Any:
    """A small JSON file's value, None when it is not one."""
    try:
        return json.loads(path.read_text(encoding="utf-8-sig"))
    except (OSError, ValueError):
        return None


def index_files(folder: Path) -> list[str]:
    """The names of every index at the folder's top: test_*.json and the user's own."""
    return sorted(p.name for p in folder.glob("*.json") if p.is_file() and _index_shaped(_read_json(p)))


def _task_set_root(folder: Path) -> Path:
    """The folder itself, or the ``evaluation_examples`` of the checkout it is."""
    if not (folder / "examples").is_dir() and (folder / "evaluation_examples" / "examples").is_dir():
        return folder / "evaluation_examples"
    return folder


def is_osworld_folder(path: Path) -> bool:
    """Whether ``path`` is an OSWorld task set (or a checkout holding one): examples/ beside
    at least one index."""
    if not path.is_dir():
        return False
    root = _task_set_root(path)
    return (root / "examples").is_dir() and bool(index_files(root))


def _looks_like_examples(folder: Path) -> bool:
    """``examples/`` itself: domain folders of task files, no index beside them."""
    return folder.name == "examples" and any(folder.glob("*/*.json"))


def osworld_folder(folder: Path, index: str = DEFAULT_INDEX, data_said: DataSaid = cli_data) -> tuple[Path, Path]:
    """(examples folder, index file) of an OSWorld checkout or its ``evaluation_examples``;
    an ``index`` that is not absolute is the folder's (``build_config`` makes one given as a
    path from the current folder absolute). ``data_said``: the words of what named the folder."""
    folder = _task_set_root(folder)
    if not (folder / "examples").is_dir() and _looks_like_examples(folder):
        raise TaskFileError(f"{folder}: this is the examples/ folder of an OSWorld task set; give the folder "
                            f"that holds it and its indexes as {data_said()}: {data_said(folder.parent)}")
    index_path = Path(index) if Path(index).is_absolute() else folder / index
    if holds_no_task_set(folder, index_path):
        raise TaskFileError(_no_task_set(folder, data_said))
    if not index_path.is_file():
        indexes = ", ".join(index_files(folder)) or "none"
        if Path(index).is_absolute():  # a path the user gave (OSWorld's --test_all_meta_path is made one)
            raise TaskFileError(f"--osworld-index {index_path}: no such file ({_LAYOUT}; indexes in {folder}: "
                                f"{indexes})")
        # a bare name is the folder's: one in the current folder is read when its folder is written
        here = "" if not Path(index).is_file() else f"; the current folder's {index} is read as --osworld-index ./{index}"
        raise TaskFileError(f"{folder}: no index {index} ({_LAYOUT}; indexes here: {indexes}{here})")
    return folder, index_path


def holds_no_task_set(folder: Path, index_path: Path) -> bool:
    """Whether ``folder`` (an OSWorld checkout or its evaluation_examples) holds no OSWorld
    task set: no examples/, no index, and ``index_path`` is not there."""
    folder = _task_set_root(folder)
    return not (folder / "examples").is_dir() and not index_files(folder) and not index_path.is_file()


def folder_files(folder: Path) -> tuple[list[str], list[str]]:
    """The names a folder holds (not hidden ones), and those of them that name a task file."""
    names = sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))
    return names, [name for name in names if name.endswith((".json", ".jsonl", ".json.gz", ".jsonl.gz", ".parquet"))]


def _no_task_set(folder: Path, data_said: DataSaid) -> str:
    """What a folder given as ``--data`` that holds no OSWorld task set is: empty, or files
    (task files among them: --data takes one of them)."""
    names, files = folder_files(folder)
    layout = f"OSWorld task set (examples/ beside an index such as {DEFAULT_INDEX})"
    if files:
        return (f"{folder}: a folder of task files, not a task file, and no {layout}; give one of them: "
                f"{data_said(folder / files[0])}")
    what = "the folder is empty: no task file and" if not names else "no task file in this folder and"
    return f"{folder}: {what} no {layout}; {data_said()} takes {DATA_KINDS}"


def missing_data(path: Path, osworld: bool, data_said: DataSaid = cli_data) -> str:
    """What a ``--data`` path that does not exist is said with when it names no file kind (no
    suffix): a folder's path (``osworld``: --mode osworld, or OSWorld's --domain or
    --osworld-index, was given), else a task file's or a folder's, and what each must be."""
    folder = ("the task set's folder, examples/ beside test_all.json, or the checkout that holds it; a relative "
              f"path is from the current folder, {Path.cwd()}")
    if osworld:
        # --data as typed (cli_aliases.said_as_typed): OSWorld's --test_config_base_dir for its users
        return f"{path}: no such folder ({data_said()}: {folder})"
    return (f"{path}: no such task file or folder; {data_said()} takes {DATA_KINDS}. A task file is named with its "
            f"suffix (.json, .jsonl, .parquet); an OSWorld folder, which runs as --mode osworld, is {folder}")


def _json_text(path: Path, holds: str) -> str:
    """The text of one of the set's JSON files; TaskFileError when it is no text or empty (a
    copy cut short), which JSON's own error called 'Expecting value (column 1)'."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise TaskFileError(f"{path}:1: invalid JSON: {exc}") from None
    if not text.strip():
        raise TaskFileError(f"{path}:1: the file is empty; an OSWorld {holds} is a JSON object")
    return text


def read_osworld_index(index_path: Path) -> dict[str, list[str]]:
    """An OSWorld index (``test_all.json``): domain -> task ids; TaskFileError when it is not one."""
    text = _json_text(index_path, "index")
    index = parse_json(text, index_path, 1)
    shape = '{"domain": ["task id", ...]}'
    if not isinstance(index, dict):
        raise TaskFileError(f"{index_path}:1: an OSWorld index is an object, {shape}, not {as_written(index)}")
    for domain, ids in index.items():
        if not (isinstance(ids, list) and all(isinstance(i, str) for i in ids)):
            # the line of the domain's key, as an editor shows it
            line = 1 + text[:max(text.find(json.dumps(domain)), 0)].count("\n")
            raise TaskFileError(f"{index_path}:{line}: domain {domain!r}: {as_written(ids)} is not a list of task "
                                f"ids (strings), as in {shape}")
    return index


def _no_domain(index_path: Path, domain: str, known: list[str]) -> str:
    """The refusal of a ``--domain`` the index lacks, naming the flag and, for a typo or a case
    slip (``OS``, ``libreoffice_cacl``), the domain it is close to."""
    by_case = {name.lower(): name for name in known}
    close = [by_case[domain.lower()]] if domain.lower() in by_case else difflib.get_close_matches(domain, known, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"--domain {domain!r}: {index_path} has no such domain{hint}; domains: {', '.join(known) or 'none'}"


def _selected(folder: Path, domain: str, index: str,
              data_said: DataSaid = cli_data) -> tuple[Path, Path, list[tuple[str, str]]]:
    """(folder, index file, [(domain, task id)]) of what a run of ``domain`` reads."""
    folder, index_path = osworld_folder(folder, index, data_said)
    ids = read_osworld_index(index_path)
    if domain != "all" and domain not in ids:
        raise TaskFileError(_no_domain(index_path, domain, sorted(ids)))
    selected = [(name, task_id) for name in (sorted(ids) if domain == "all" else [domain]) for task_id in ids[name]]
    if not selected:  # not a task file's "no tasks in file": the index lists none to run
        listing = ", ".join(f"{name} {len(ids[name])}" for name in sorted(ids) if ids[name]) or "none"
        raise TaskFileError(f"{index_path}: {'the index' if domain == 'all' else f'domain {domain!r}'} lists no "
                            f"tasks (tasks per domain: {listing})")
    return folder, index_path, selected


def folder_records(folder: Path, domain: str, index: str = DEFAULT_INDEX,
                   data_said: DataSaid = cli_data) -> Iterable[tuple[str, Any, str]]:
    """(where, task, domain) for an OSWorld folder: the index (``test_all.json``) maps each
    domain to task ids, whose files are ``examples/<domain>/<id>.json``; ``domain`` picks
    one, or ``all``. A task file that is missing or no JSON is yielded as its TaskFileError,
    so the load goes on and names every one. ``data_said``: the words of what named the folder."""
    folder, index_path, selected = _selected(folder, domain, index, data_said)
    listed: dict[str, str] = {}  # task id -> the domain that listed it first
    examples = folder / "examples"
    for name in dict.fromkeys(name for name, _ in selected):
        if not (examples / name).is_dir():  # one line for the domain, not one per task of it
            count = sum(listed_in == name for listed_in, _ in selected)
            there = ", ".join(sorted(p.name for p in examples.iterdir() if p.is_dir())) if examples.is_dir() else ""
            yield f"{index_path}:1", TaskFileError(
                f"{index_path}: domain {name!r} lists {count} task{'s' * (count != 1)}, but {examples} has no "
                f"folder {name!r} (its domains: {there or 'none'})"), name
    for name, task_id in selected:
        task_path = examples / name / f"{task_id}.json"
        if not task_path.parent.is_dir():
            continue
        if task_id in listed:
            # not the task file's "duplicate task id": the index lists it twice, and OSWorld's
            # run.py would run it twice into one result folder
            yield f"{index_path}:1", TaskFileError(_listed_twice(index_path, task_id, listed[task_id], name)), name
            continue
        listed[task_id] = name
        try:
            raw = parse_json(_json_text(task_path, "task file"), task_path, 1)
        except FileNotFoundError:
            raw = TaskFileError(f"{index_path}: task {task_id!r} of domain {name!r} has no file {task_path}")
        except TaskFileError as exc:
            raw = exc
        file_id = raw.get("id", raw.get("task_id")) if isinstance(raw, dict) else None
        # an id that is missing, or of the wrong kind ("id": [1]), is _parse_task's to name
        if isinstance(file_id, (str, int)) and not isinstance(file_id, bool) and str(file_id) != task_id:
            # OSWorld keys the example, and its result folder, on the index's id
            raw = TaskFileError(f"{task_path}:1: task id {file_id!r} is not its id in {index_path}, "
                                f"{task_id!r} of domain {name!r}: make the file's 'id' and the index agree")
        if isinstance(raw, dict) and isinstance(raw.get("tags", []), list) and name not in raw.get("tags", []):
            raw["tags"] = [*raw.get("tags", []), name]  # per-domain numbers in the summary
        yield f"{task_path}:1", raw, name


def _listed_twice(index_path: Path, task_id: str, first: str, again: str) -> str:
    """The refusal of a task an index lists twice, with the lines of its first two listings."""
    text = index_path.read_text(encoding="utf-8", errors="replace")
    quoted = json.dumps(task_id)
    starts = [found.start() for found in re.finditer(re.escape(quoted), text)][:2]
    lines = [1 + text[:start].count("\n") for start in starts] or [1]
    return (f"{index_path}:{lines[-1]}: task {task_id!r} is listed twice, in domain {first!r} (line {lines[0]}) and "
            f"again in domain {again!r}: OSWorld keys an example's result folder on its id; list it once")


def task_files(folder: Path, domain: str = "all", index: str = DEFAULT_INDEX) -> tuple[Path, list[Path]]:
    """(the task set's folder, its index file then the task files it selects for ``domain``):
    what a run of the folder is made of. TaskFileError when the folder or index is not there."""
    folder, index_path, selected = _selected(folder, domain, index)
    return folder, [index_path] + [folder / "examples" / name / f"{task_id}.json" for name, task_id in selected]


def task_domain(folder: str | Path, task_id: str) -> str | None:
    """The domain whose examples/ folder holds ``task_id``'s file in the task set at
    ``folder`` (or the checkout holding it); None when there is none."""
    examples = _task_set_root(Path(folder)) / "examples"
    found = sorted(examples.glob(f"*/{glob.escape(task_id)}.json")) if "/" not in task_id else []
    return found[0].parent.name if found else None


def file_hint(path: Path, value: Any, data_said: DataSaid = cli_data) -> str:
    """What to give instead when ``--data`` (said as ``data_said``) names one file of an OSWorld
    task set (a task, an index) rather than its folder; "" for any other file."""
    if _index_shaped(value):
        root = path.parent
        return (f"; {path.name} is an OSWorld index: give its folder as {data_said()} and it as --osworld-index: "
                f"{data_said(root)} --osworld-index {path.name}")
    if isinstance(value, dict) and "evaluator" in value and "instruction" in value:
        domain_dir = path.parent
        root = domain_dir.parent.parent if domain_dir.parent.name == "examples" else None
        where = data_said(root if root is not None else "<the folder with examples/ and test_all.json>")
        return (f"; this is one OSWorld task: give the task set's folder ({where}), and to run only this task "
                f"an index of your own, {{\"{domain_dir.name}\": [\"{path.stem}\"]}} in a .json file, as "
                "--osworld-index")
    return ""

