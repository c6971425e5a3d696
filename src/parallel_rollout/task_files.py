"""A task file before its records are tasks: where ``--data`` points, and its records read.

``resolve_data`` turns ``--data`` into a path (a file, a folder, or a named dataset, with the
name it misspells when none is found); ``file_records`` reads a ``.json`` list or a ``.jsonl``
file (or their ``.gz``) into ``(line, value)`` pairs, saying what a file of the other kind
holds when it is misnamed; ``declared_mode`` and ``mixed_modes`` look at the modes those
records name before a run is set up. ``tasks.load_task_set`` makes them tasks.

JSON lines are read (here, and by the report) and written (``results.ResultStore``) with the
standard ``json`` module, not the ``jsonlines`` package, which is therefore no dependency:
a task's line number must outlive parsing (validation errors name ``file:line``), which
``jsonlines.Reader`` does not expose per record; lines are split on ``\n`` only (JSON allows
a raw U+2028 inside strings); an append to results.jsonl must land whole or be cut back on a
failed write, and a reader must skip the torn last line of a file another process is still
appending to. ``jsonlines.Writer``/``Reader`` do none of that, and the code they would
replace is the one ``json.loads``/``json.dumps`` call per line that is left.
"""

from __future__ import annotations

import difflib
import gzip
import importlib
import json
import zlib
from pathlib import Path
from typing import Any, Container, Iterable

from .config import NAMED_DATASETS
from .errors import TaskFileError
from .task_json import parse_json
from .tasks_osworld import DataSaid, cli_data, file_hint, is_osworld_folder
from .tasks_parquet import parquet_mode


def resolve_data(data: str, data_said: DataSaid = cli_data) -> Path:
    """The file behind ``--data``: a path, or a named dataset (``humaneval``); its refusals
    say the setting as ``data_said`` does (a trainer's TaskSet.data)."""
    target = NAMED_DATASETS.get(data.lower())
    if target is None:
        path = Path(data)
        # a name like a dataset's that is no file is a typo of it (--data humaneva)
        close = [] if "." in path.name or path.exists() else difflib.get_close_matches(
            path.name.lower(), list(NAMED_DATASETS), n=1)
        # or of a file beside it (--data tasks.json where tasks.jsonl lies)
        close = close or ([] if path.exists() else [str(path.parent / name) for name in _misspelt(path)])
        if close:
            raise TaskFileError(f"{path}: task file not found (did you mean {data_said(close[0])}?)")
        return path
    module_name, _, func = target.partition(":")
    try:
        return getattr(importlib.import_module(module_name), func)()
    except (FileNotFoundError, ModuleNotFoundError) as exc:
        raise TaskFileError(f"{data_said(data)}: {exc}") from None


def _misspelt(path: Path) -> list[str]:
    """The name beside ``path`` its name misspells, if one: close before the first dot too (not only .jsonl)."""
    try:
        names = [p.name for p in path.parent.iterdir() if not p.name.startswith(".")]
    except OSError:
        return []
    return [name for name in difflib.get_close_matches(path.name, names, n=5, cutoff=0.8)
            if difflib.SequenceMatcher(None, path.name.split(".")[0], name.split(".")[0]).ratio() >= 0.8][:1]


def declared_mode(data: str) -> str | None:
    """The mode ``data`` implies: ``osworld`` for an OSWorld task set's folder, math for a
    Parquet file in verl's layout, else the mode every task of the task file names in its
    ``mode`` field; None for another folder, a task without one, several modes, or a file
    that does not load (the load says why)."""
    try:
        path = resolve_data(data)
        if path.is_dir():
            return "osworld" if is_osworld_folder(path) else None
        if path.suffix == ".parquet":
            return parquet_mode(path)  # verl's layout names none: it is math
        modes = {raw.get("mode") if isinstance(raw, dict) else None for _, raw in file_records(path)}
    except (TaskFileError, OSError, ValueError):
        return None
    found = modes.pop() if len(modes) == 1 else None
    return found if isinstance(found, str) else None


def mixed_modes(data: str, mode: str, known: Container[str]) -> str:
    """Why the tasks of the task file ``data`` cannot be one run when no --mode was given and
    they do not all name one mode (``mode``: the run's, the default then): two of them name
    two ``known`` modes, or one names a mode other than ``mode`` beside one that names none
    (and so takes ``mode``); "" when nothing stands in the way. Each task is named as the
    load names it (``file:line``). Unknown modes are left to the load, which names them."""
    first: dict[str | None, tuple[str, str]] = {}  # mode (None: names none) -> its first task
    try:
        path = resolve_data(data)
        if path.is_dir() or path.suffix == ".parquet":
            return ""
        for n, raw in file_records(path):
            if not isinstance(raw, dict):
                continue
            named = raw.get("mode")
            if named is None or (isinstance(named, str) and named in known):
                where = f"{path}: item {n}" if file_kind(path) == ".json" else f"{path}:{n}"
                first.setdefault(named, (where, str(raw.get("id", raw.get("task_id")))))
    except (TaskFileError, OSError, ValueError):
        return ""  # the load says why
    named_modes = [m for m in first if m is not None]
    if len(named_modes) >= 2:
        (where_a, id_a), (where_b, id_b) = first[named_modes[0]], first[named_modes[1]]
        return (f"{where_b}: task {id_b!r} has mode {named_modes[1]!r} but {where_a}: task {id_a!r} has mode "
                f"{named_modes[0]!r}; a run has one mode and no --mode was given: split the task file by mode")
    if named_modes and named_modes[0] != mode and None in first:
        other = named_modes[0]
        (where_a, id_a), (where_b, id_b) = first[None], first[other]
        return (f"{where_b}: task {id_b!r} has mode {other!r} but {where_a}: task {id_a!r} names none, so it "
                f"would run as {mode}, the default (no --mode was given): give --mode {other} to run the tasks "
                "that name none as it, or name every task's mode")
    return ""


def file_records(path: Path, data_said: DataSaid = cli_data) -> Iterable[tuple[int, Any]]:
    """(line number, parsed JSON value) for every record of a .json or .jsonl file (or
    their .gz); ``data_said``: the words of what named it, for a hint of what to give instead."""
    try:
        raw = path.read_bytes()
        if path.suffix == ".gz":
            raw = gzip.decompress(raw)
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise TaskFileError(f"{path}: not a readable gzip file: {exc}") from None
    except FileNotFoundError:
        raise TaskFileError(f"{path}: task file not found") from None
    except OSError as exc:
        raise TaskFileError(f"{path}: cannot read task file: {exc.strerror}") from None
    try:
        # utf-8-sig: files saved by Windows editors start with a byte-order mark.
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        lineno = raw[: exc.start].count(b"\n") + 1
        raise TaskFileError(f"{path}:{lineno}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if file_kind(path) == ".json":
        try:
            data = parse_json(text, path, 1)
        except TaskFileError as exc:
            raise TaskFileError(str(exc) + _format_hint(text, ".json")) from None
        if isinstance(data, dict) and "tasks" in data:
            data = data["tasks"]
        if not isinstance(data, list):
            hint = file_hint(path, data, data_said) or (ONE_OBJECT_HINT if isinstance(data, dict) else "")
            raise TaskFileError(f"{path}:1: a .json task file holds a list of task objects{hint}")
        # A JSON list has no line per task; report the item's position instead.
        for index, item in enumerate(data):
            yield index + 1, item
        return
    # Split on "\n" only: str.splitlines() also breaks on U+2028, U+0085 …, which JSON
    # allows raw inside strings, and would cut a record in two and shift line numbers.
    # A line that is no JSON is yielded as its error: the load goes on, to name every bad line.
    hinted = False
    for lineno, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            yield lineno, parse_json(line, path, lineno)
        except TaskFileError as exc:
            hint = "" if hinted else _format_hint(text, ".jsonl")
            if hint:  # one document over many lines: one error, not one per line
                raise TaskFileError(f"{path}{hint}") from None
            hinted = True
            yield lineno, exc


#: what to do with one task object saved as a .json file (the README prints its tasks so)
ONE_OBJECT_HINT = ", not one task object: put it in a list, [{…}], or write it on one line of a .jsonl file"


def _format_hint(text: str, kind: str) -> str:
    """Why a file fails as ``kind`` when it is the other kind of task file: JSON lines in a
    .json file, one pretty-printed document in a .jsonl file; "" otherwise."""
    lines = [line for line in text.split("\n") if line.strip()]
    if kind == ".json":
        try:
            objects = len(lines) > 1 and all(isinstance(json.loads(line), dict) for line in lines)
        except ValueError:
            objects = False
        return "; the file holds one JSON object per line (JSON lines): name it .jsonl" if objects else ""
    try:  # a document that spans lines: its first line alone is no JSON, the whole text is
        json.loads(lines[0])
        return ""
    except ValueError:
        pass
    try:
        document = json.loads(text)
    except ValueError:
        return ""
    if isinstance(document, dict):  # renamed .json, it would be refused as no list
        return (f": one task object over {len(lines)} lines, not one task object per line (JSON lines): "
                "write it on one line, or put it in a list, [{…}], in a .json file")
    return (f": one JSON document over {len(lines)} lines, not one task object per line (JSON lines): "
            "name it .json, or write each task on a line of its own")


def file_kind(path: Path) -> str:
    """.json or .jsonl, looking through a .gz suffix."""
    return Path(path.stem).suffix if path.suffix == ".gz" else path.suffix
