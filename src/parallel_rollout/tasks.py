"""Tasks: the model, loading from JSON/JSONL with line-numbered errors, and sample expansion.

A task file is either a JSON list of objects (``.json``), one object per line (``.jsonl``),
or a Parquet table of one task per row (``.parquet``: ``tasks_parquet``, verl's layout
too). Everything is validated before anything runs: a bad line is reported as
``file:line: reason`` and the whole load fails, so a run never starts on half a benchmark.
``group_size`` expands a task into samples that share its seed (GRPO groups); a sample is
``(task_id, sample_idx)``.

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
import hashlib
import importlib
import json
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from .config import NAMED_DATASETS
from .errors import TaskFileError
from .tasks_parquet import parquet_mode, parquet_records

#: fields the Task model owns; everything else is the mode's payload
_CORE_FIELDS = ("id", "mode", "seed", "tags")


@dataclass(frozen=True)
class Task:
    """One task of a benchmark; ``payload`` holds the mode's own fields."""

    id: str
    mode: str
    payload: Mapping[str, Any] = field(default_factory=dict)
    seed: int | None = None
    tags: tuple[str, ...] = ()
    #: where it came from, ``file:line``, for messages
    source: str = ""

    def get(self, name: str, default: Any = None) -> Any:
        """A payload field."""
        return self.payload.get(name, default)


@dataclass(frozen=True)
class Sample:
    """One rollout of a task: samples of one task share its seed."""

    task: Task
    sample_idx: int = 0

    @property
    def key(self) -> str:
        """The identity results are keyed on: ``task_id#sample_idx``."""
        return sample_key(self.task.id, self.sample_idx)


def sample_key(task_id: str, sample_idx: int) -> str:
    """The identity of a sample in results.jsonl."""
    return f"{task_id}#{sample_idx}"


#: mode name -> payload validator that raises ValueError naming the bad field
Validators = Mapping[str, Callable[[Mapping[str, Any]], None]]


class UnsupportedTask(ValueError):
    """A well-formed task that uses features its mode lacks (``"metric compare_pdfs"`` …):
    the loader lists every such task apart instead of stopping at the first."""

    def __init__(self, features: Iterable[str]) -> None:
        self.features = tuple(features)
        self.task: Task | None = None  # set by the loader
        super().__init__("unsupported: " + ", ".join(self.features))


@dataclass(frozen=True)
class Unsupported:
    """One task left out of a run, with every feature that keeps it out."""

    task: Task
    features: tuple[str, ...]


@dataclass
class TaskSet:
    """What ``--data`` holds: the runnable tasks and the unsupported ones, each with its
    domain (the OSWorld folder's, else ``all``)."""

    tasks: list[Task]
    unsupported: list[Unsupported]
    domains: dict[str, str]

    @property
    def total(self) -> int:
        """Every task of --data, runnable or not."""
        return len(self.tasks) + len(self.unsupported)


def resolve_data(data: str) -> Path:
    """The file behind ``--data``: a path, or a named dataset (``humaneval``)."""
    target = NAMED_DATASETS.get(data.lower())
    if target is None:
        path = Path(data)
        # a name like a dataset's that is no file is a typo of it (--data humaneva)
        close = [] if "." in path.name or path.exists() else difflib.get_close_matches(
            path.name.lower(), list(NAMED_DATASETS), n=1)
        if close:
            raise TaskFileError(f"{path}: task file not found (did you mean --data {close[0]}?)")
        return path
    module_name, _, func = target.partition(":")
    try:
        return getattr(importlib.import_module(module_name), func)()
    except (FileNotFoundError, ModuleNotFoundError) as exc:
        raise TaskFileError(f"--data {data}: {exc}") from None


def declared_mode(data: str) -> str | None:
    """The mode every task of the task file ``data`` names in its ``mode`` field (rows of a
    Parquet file in verl's layout name math); None for a
    folder, a task without one, several modes, or a file that does not load (the load says
    why)."""
    try:
        path = resolve_data(data)
        if path.is_dir():
            return None
        if path.suffix == ".parquet":
            return parquet_mode(path)  # verl's layout names none: it is math
        modes = {raw.get("mode") if isinstance(raw, dict) else None for _, raw in _records(path)}
    except (TaskFileError, OSError, ValueError):
        return None
    found = modes.pop() if len(modes) == 1 else None
    return found if isinstance(found, str) else None


def _records(path: Path) -> Iterable[tuple[int, Any]]:
    """(line number, parsed JSON value) for every record of a .json or .jsonl file (or
    their .gz)."""
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
    if _kind(path) == ".json":
        data = _parse(text, path, 1)
        if isinstance(data, dict) and "tasks" in data:
            data = data["tasks"]
        if not isinstance(data, list):
            raise TaskFileError(f"{path}:1: a .json task file holds a list of task objects")
        # A JSON list has no line per task; report the item's position instead.
        for index, item in enumerate(data):
            yield index + 1, item
        return
    # Split on "\n" only: str.splitlines() also breaks on U+2028, U+0085 …, which JSON
    # allows raw inside strings, and would cut a record in two and shift line numbers.
    # A line that is no JSON is yielded as its error: the load goes on, to name every bad line.
    for lineno, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            yield lineno, _parse(line, path, lineno)
        except TaskFileError as exc:
            yield lineno, exc


class _NotJSON(ValueError):
    """A number JSON does not have (``NaN``, ``Infinity``, ``-Infinity``)."""


def _refuse_constant(name: str) -> Any:
    raise _NotJSON(name)


class _TooLarge(ValueError):
    """A JSON number no result can hold: a float beyond the largest (``1e400`` reads as
    infinity, which results.jsonl would write as ``Infinity``) or an integer of more digits
    than Python converts."""


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise _TooLarge(text)
    return value


def _bounded_int(text: str) -> int:
    try:
        return int(text)
    except ValueError:  # more digits than sys.get_int_max_str_digits()
        raise _TooLarge(text) from None


def _parse(text: str, path: Path | str, first_line: int) -> Any:
    """``json.loads(text)``, refusing what results.jsonl could not store: a non-JSON number
    (``NaN``, ``Infinity``: Python's json reads them, no other JSON reader does, and each
    such task would fail at run time) or text that is not Unicode (a lone surrogate such as
    ``"\\ud800"``: valid JSON, but no UTF-8 file can hold it). TaskFileError names the line
    (``first_line`` is that of ``text``'s first line)."""
    try:
        data = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float,
                          parse_int=_bounded_int)
    except _NotJSON as exc:
        lineno = first_line + text.count("\n", 0, _offset_of(text, str(exc)))
        raise TaskFileError(f"{path}:{lineno}: {exc} is not a JSON number (use a number or "
                            "null)") from None
    except _TooLarge as exc:
        number = str(exc)
        lineno = first_line + text.count("\n", 0, max(text.find(number), 0))
        shown = number if len(number) <= 40 else f"{number[:20]}…({len(number)} characters)"
        raise TaskFileError(f"{path}:{lineno}: the number {shown} is too large to store in "
                            "results.jsonl (it reads as infinity or beyond Python's digit "
                            "limit); use a smaller number or a string") from None
    except json.JSONDecodeError as exc:
        raise TaskFileError(f"{path}:{first_line + exc.lineno - 1}: invalid JSON: {exc.msg}") from None
    where = _unencodable(data)
    if where is not None:
        field, value = where
        bad = next(c for c in value if 0xD800 <= ord(c) <= 0xDFFF)
        lineno = first_line + text.count("\n", 0, _offset_of(text, f"\\u{ord(bad):04x}"))
        raise TaskFileError(f"{path}:{lineno}: {field} holds text that is not Unicode (a lone "
                            f"surrogate, \\u{ord(bad):04x}); results.jsonl could not store it")
    return data


def _unencodable(value: Any, field: str = "the task") -> tuple[str, str] | None:
    """(where, the string) of the first string (key or value) that UTF-8 cannot encode."""
    if isinstance(value, str):
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                return field, value
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            found = _unencodable(key, f"a field name in {field}") or _unencodable(item, f"field {key!r}")
            if found:
                return found
    elif isinstance(value, list):
        for item in value:
            found = _unencodable(item, field)
            if found:
                return found
    return None


def _offset_of(text: str, token: str) -> int:
    """Where ``token`` first appears in ``text``: a constant outside any JSON string, or a
    ``\\uXXXX`` escape; 0 when not found (the message still names the field)."""
    if token in ("NaN", "Infinity", "-Infinity"):
        for match in _TOKENS.finditer(text):
            if match.group(1) is not None:
                return match.start(1)
        return 0
    # the file may write the escape in either case (\\uD800)
    return max(text.lower().find(token.lower()), 0)


#: a JSON string, or a non-JSON constant (group 1) outside any string
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|(-?Infinity|NaN)')


#: OSWorld's index of every task; --osworld-index picks another (test_small.json …)
DEFAULT_INDEX = "test_all.json"


def osworld_folder(folder: Path, index: str = DEFAULT_INDEX) -> tuple[Path, Path]:
    """(examples folder, index file) of an OSWorld checkout or its ``evaluation_examples``."""
    if not (folder / "examples").is_dir() and (folder / "evaluation_examples").is_dir():
        folder = folder / "evaluation_examples"
    index_path = Path(index) if Path(index).is_absolute() else folder / index
    if not index_path.is_file():
        found = sorted(p.name for p in folder.glob("test_*.json"))
        raise TaskFileError(
            f"{folder}: no index {index_path if Path(index).is_absolute() else index} (OSWorld's layout: an index such as "
            f"test_all.json + examples/<domain>/<id>.json; indexes here: "
            f"{', '.join(found) or 'none'})")
    return folder, index_path


def read_osworld_index(index_path: Path) -> dict[str, list[str]]:
    """An OSWorld index (``test_all.json``): domain -> task ids; TaskFileError when it is not one."""
    try:
        index = _parse(index_path.read_text(encoding="utf-8-sig"), index_path, 1)
    except UnicodeDecodeError as exc:
        raise TaskFileError(f"{index_path}:1: invalid JSON: {exc}") from None
    if not isinstance(index, dict) or not all(
            isinstance(ids, list) and all(isinstance(i, str) for i in ids) for ids in index.values()):
        raise TaskFileError(f"{index_path}:1: expected {{\"domain\": [\"task id\", ...]}}")
    return index


def _folder_records(folder: Path, domain: str, index: str = DEFAULT_INDEX
                    ) -> Iterable[tuple[str, Any, str]]:
    """(where, task, domain) for an OSWorld folder: the index (``test_all.json``) maps each
    domain to task ids, whose files are ``examples/<domain>/<id>.json``; ``domain`` picks
    one, or ``all``."""
    folder, index_path = osworld_folder(folder, index)
    index = read_osworld_index(index_path)
    if domain != "all" and domain not in index:
        raise TaskFileError(f"{index_path}: no domain {domain!r}; domains: {', '.join(sorted(index)) or 'none'}")
    for name in sorted(index) if domain == "all" else [domain]:
        for task_id in index[name]:
            task_path = folder / "examples" / name / f"{task_id}.json"
            try:
                raw = _parse(task_path.read_text(encoding="utf-8-sig"), task_path, 1)
            except FileNotFoundError:
                raise TaskFileError(f"{index_path}: task {task_id!r} of domain {name!r} has no file "
                                    f"{task_path}") from None
            except UnicodeDecodeError as exc:
                raise TaskFileError(f"{task_path}:1: invalid JSON: {exc}") from None
            if isinstance(raw, dict) and isinstance(raw.get("tags", []), list) and name not in raw.get("tags", []):
                raw["tags"] = [*raw.get("tags", []), name]  # per-domain numbers in the summary
            yield f"{task_path}:1", raw, name


def load_tasks(
    path: str | Path,
    *,
    default_mode: str | None,
    validators: Validators,
    domain: str = "all",
    index: str = DEFAULT_INDEX,
) -> list[Task]:
    """Load and validate every task of ``path`` (a file, a named dataset, or an OSWorld
    folder filtered by ``domain``); TaskFileError on the first bad record, or listing every
    unsupported task at once."""
    task_set = load_task_set(path, default_mode=default_mode, validators=validators,
                             domain=domain, index=index)
    if task_set.unsupported:
        raise TaskFileError(unsupported_message(task_set))
    return task_set.tasks


def load_task_set(
    path: str | Path,
    *,
    default_mode: str | None,
    validators: Validators,
    domain: str = "all",
    index: str = DEFAULT_INDEX,
) -> TaskSet:
    """Like :func:`load_tasks`, but an unsupported task is set aside (with every feature it
    lacks) instead of failing the load; a malformed one still does."""
    path = resolve_data(str(path))
    if path.is_dir():
        records = _folder_records(path, domain, index)
    elif domain != "all":
        raise TaskFileError(f"{path}: --domain {domain} applies to an OSWorld folder given as --data, "
                            "not to a task file")
    elif path.suffix == ".parquet":
        records = ((f"{path}: row {n}", raw, "all") for n, raw in parquet_records(path))
    elif _kind(path) == ".json":
        records = ((f"{path}: item {n}", raw, "all") for n, raw in _records(path))
    else:
        records = ((f"{path}:{n}", raw, "all") for n, raw in _records(path))
    task_set = TaskSet([], [], {})
    seen: dict[str, str] = {}
    bad: list[str] = []  # every bad record, said at once (a fix-rerun loop per line is slow)
    for where, raw, task_domain in records:
        try:
            if isinstance(raw, TaskFileError):
                raise raw
            task = _parse_task(raw, where, default_mode, validators)
        except UnsupportedTask as exc:
            task_set.unsupported.append(Unsupported(exc.task, exc.features))
            task = exc.task
        except TaskFileError as exc:
            bad.append(str(exc))
            continue
        else:
            task_set.tasks.append(task)
        if task.id in seen:
            bad.append(f"{where}: duplicate task id {task.id!r} (first at {seen[task.id]})")
            continue
        seen[task.id] = where
        task_set.domains[task.id] = task_domain
    if bad:
        raise TaskFileError.of_records(str(path), bad)
    if not task_set.total:
        raise TaskFileError(f"{path}: no tasks in file")
    return task_set


def census_lines(task_set: TaskSet) -> list[str]:
    """Per domain: tasks, runnable, and the unsupported features with their task counts;
    the last line is ``runnable N of M tasks``."""
    from collections import Counter

    totals: Counter = Counter(task_set.domains.values())
    runnable: Counter = Counter(task_set.domains[t.id] for t in task_set.tasks)
    features: dict[str, Counter] = {}
    for item in task_set.unsupported:
        features.setdefault(task_set.domains[item.task.id], Counter()).update(item.features)
    lines = []
    for name in sorted(totals):
        lines.append(f"{name}: {totals[name]} tasks, {runnable[name]} runnable")
        for feature, count in sorted(features.get(name, Counter()).items(),
                                     key=lambda kv: (-kv[1], kv[0])):
            lines.append(f"  unsupported {feature}: {count} task{'s' if count != 1 else ''}")
    lines.append(f"runnable {len(task_set.tasks)} of {task_set.total} tasks")
    return lines


def unsupported_message(task_set: TaskSet) -> str:
    """Every unsupported task (where, features), then the census: why a load is refused."""
    lines = [f"{len(task_set.unsupported)} of {task_set.total} tasks use features this "
             "version does not support (add --skip-unsupported to run the rest; each skipped "
             "task then gets an 'unsupported' record):"]
    lines += [f"  {item.task.source}: task {item.task.id!r}: {', '.join(item.features)}"
              for item in task_set.unsupported]
    return "\n".join(lines + census_lines(task_set))


def _parse_task(raw: Any, where: str, default_mode: str | None, validators: Validators) -> Task:
    if not isinstance(raw, dict):
        raise TaskFileError(f"{where}: a task is a JSON object, got {type(raw).__name__}")
    task_id = raw.get("id", raw.get("task_id"))
    if task_id is None:
        raise TaskFileError(f"{where}: missing field 'id'")
    if isinstance(task_id, bool) or not isinstance(task_id, (str, int)):
        raise TaskFileError(f"{where}: field 'id' must be a string, got {type(task_id).__name__}")
    task_id = str(task_id)
    # Ids may hold "/" (HumanEval/0); folder names are made safe where they are used.
    if (not task_id.strip() or len(task_id) > 200 or task_id in (".", "..")
            or any(c in task_id for c in "\\\0\n")):
        raise TaskFileError(f"{where}: field 'id' must be 1-200 characters without \\ or newlines, not . or ..")
    mode = raw.get("mode", default_mode)
    if mode is None:
        raise TaskFileError(f"{where}: task {task_id!r} has no 'mode' and no --mode was given")
    if not isinstance(mode, str) or mode not in validators:
        raise TaskFileError(
            f"{where}: unknown mode {mode!r} in task {task_id!r}; "
            f"known modes: {', '.join(sorted(validators))}"
        )
    if default_mode is not None and mode != default_mode:
        raise TaskFileError(f"{where}: task {task_id!r} has mode {mode!r} but the run is --mode {default_mode}")
    seed = raw.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise TaskFileError(f"{where}: field 'seed' must be an integer")
    tags = raw.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise TaskFileError(f"{where}: field 'tags' must be a list of strings")
    payload = {k: v for k, v in raw.items() if k not in _CORE_FIELDS}
    task = Task(id=task_id, mode=mode, payload=payload, seed=seed, tags=tuple(tags), source=where)
    try:
        validators[mode](payload)
    except UnsupportedTask as exc:
        exc.task = task
        raise
    except (ValueError, TypeError) as exc:
        raise TaskFileError(f"{where}: task {task_id!r}: {exc}") from None
    return task


def _kind(path: Path) -> str:
    """.json or .jsonl, looking through a .gz suffix."""
    return Path(path.stem).suffix if path.suffix == ".gz" else path.suffix


def safe_name(task_id: str) -> str:
    """A folder name for a task id: unchanged when already safe, else with the unsafe
    characters replaced and a short hash added so two ids never share a folder."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "_", task_id)
    if cleaned == task_id and not task_id.startswith("."):
        return task_id
    return f"{cleaned.lstrip('.')}-{hashlib.sha1(task_id.encode()).hexdigest()[:8]}"


def expand(tasks: Iterable[Task], group_size: int) -> list[Sample]:
    """Every sample of every task, ``group_size`` per task, in task order."""
    return [Sample(task, idx) for task in tasks for idx in range(group_size)]
