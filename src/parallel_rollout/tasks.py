"""Tasks: the model, validation of every record of --data, and sample expansion.

A task file is either a JSON list of objects (``.json``), one object per line (``.jsonl``),
or a Parquet table of one task per row (``.parquet``: ``tasks_parquet``, verl's layout
too); ``task_files`` reads it. Everything is validated before anything runs: a bad line is
reported as ``file:line: reason`` and the whole load fails, so a run never starts on half a
benchmark. ``group_size`` expands a task into samples that share its seed (GRPO groups); a
sample is ``(task_id, sample_idx)``.
"""

from __future__ import annotations

import difflib
import hashlib
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Container, Iterable, Iterator, Mapping, Sequence

from .errors import ModeConflict, TaskFileError
from .task_files import file_kind, file_records, resolve_data
from .task_json import kinds_said, not_strings, value_said
from .tasks_osworld import DEFAULT_INDEX, DataSaid, cli_data, folder_records, missing_data
from .tasks_parquet import parquet_records

#: fields the Task model owns; everything else is the mode's payload
CORE_FIELDS = ("id", "mode", "seed", "tags")


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


class MissingField(ValueError):
    """A field the mode needs that the task lacks (``envs.base.require``'s refusal), with
    ``kinds``, what it must be: the loader says it of a field given as null, which reads as
    not given, in the words of its kind ("must be a string, got null")."""

    def __init__(self, name: str, kinds: tuple[type, ...]) -> None:
        self.name, self.kinds = name, kinds
        super().__init__(f"missing field {name!r}")


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


def load_tasks(
    path: str | Path,
    *,
    default_mode: str | None,
    validators: Validators,
    domain: str = "all",
    index: str = DEFAULT_INDEX,
    mode_said: str | None = None,
    data_said: DataSaid = cli_data,
) -> list[Task]:
    """Load and validate every task of ``path`` (a file, a named dataset, or an OSWorld
    folder filtered by ``domain``); TaskFileError on the first bad record, or listing every
    unsupported task at once. ``mode_said``, ``data_said``: as :func:`load_task_set`."""
    task_set = load_task_set(path, default_mode=default_mode, validators=validators,
                             domain=domain, index=index, mode_said=mode_said, data_said=data_said)
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
    mode_given: bool = True,
    given: Container[str] = (),
    mode_said: str | None = None,
    data_said: DataSaid = cli_data,
) -> TaskSet:
    """Like :func:`load_tasks`, but an unsupported task is set aside (with every feature it
    lacks) instead of failing the load; a malformed one still does. ``mode_given``: whether
    the user named ``default_mode`` (else it is the default, and records that are another
    mode's tasks get the ``--mode`` to give named); ``given``: the settings the user named,
    of which ``domain`` and ``osworld_index`` (their defaults too: --domain all) a task file refuses;
    ``mode_said``: what set ``default_mode``, in the words a refusal of a task of another mode
    says after "but" (a trainer's ``tag 'sums' runs mode 'gym' (its TaskSet's mode)``), None for
    the CLI's, ``--mode`` or its default; ``data_said``: the words of what named ``path``, alone or
    with a value (the CLI's ``--data``, a trainer's ``TaskSet.data``)."""
    path = resolve_data(str(path), data_said)
    domain_given, index_given = domain != "all" or "domain" in given, index != DEFAULT_INDEX or "osworld_index" in given
    if path.is_dir():
        records = folder_records(path, domain, index, data_said)
    elif not path.exists() and (domain_given or index_given or not path.suffix and (default_mode == "osworld"
                                                                                     or not mode_given)):
        # OSWorld's flags name a folder (a run.py line started from another folder), and so may
        # a path with no file's suffix
        raise TaskFileError(missing_data(path, domain_given or index_given or default_mode == "osworld", data_said))
    elif domain_given or index_given:
        flags = [f"--domain {domain}"] * domain_given + [f"--osworld-index {index}"] * index_given
        raise TaskFileError(f"{path}: {' and '.join(flags)} {'apply' if len(flags) > 1 else 'applies'} to an "
                            f"OSWorld folder given as {data_said()}, not to a task file")
    elif path.suffix == ".parquet":
        records = ((f"{path}: row {n}", raw, "all") for n, raw in parquet_records(path))
    elif file_kind(path) == ".json":
        records = ((f"{path}: item {n}", raw, "all") for n, raw in file_records(path, data_said))
    else:
        records = ((f"{path}:{n}", raw, "all") for n, raw in file_records(path, data_said))
    run_mode_said = mode_said or _cli_mode_said(default_mode, mode_given)
    task_set = TaskSet([], [], {})
    seen: dict[str, str] = {}
    bad: list[str] = []  # every bad record, said at once (a fix-rerun loop per line is slow)
    refused: list[Any] = []  # those records, for the mode they may be of
    conflicts = 0  # of them, those refused for naming another mode than --mode
    for where, raw, task_domain in records:
        try:
            if isinstance(raw, TaskFileError):
                raise raw
            task = _parse_task(raw, where, default_mode, validators, run_mode_said)
        except UnsupportedTask as exc:
            task_set.unsupported.append(Unsupported(exc.task, exc.features))
            task = exc.task
        except TaskFileError as exc:
            bad.append(str(exc))
            refused.append(raw)
            conflicts += isinstance(exc, ModeConflict)
            continue
        else:
            task_set.tasks.append(task)
            _warn_of_look_alikes(validators, task, str(path))
        if task.id in seen:
            bad.append(f"{where}: duplicate task id {task.id!r} (first at {seen[task.id]})")
            continue
        seen[task.id] = where
        task_set.domains[task.id] = task_domain
    # every record refused for one mode, another than --mode's: one line (a named dataset's)
    named = {raw["mode"] for raw in refused if mode_given and conflicts == len(bad) > 1 and not task_set.total}
    if len(named) == 1:
        other = next(iter(named))
        why = f"but {mode_said}" if mode_said else (f"which --mode {default_mode} cannot run: leave --mode out, "
                                                    f"or give --mode {other}")
        raise TaskFileError(f"{path}: its tasks are {other} tasks (each names its mode), {why}")
    if bad:
        hint = "" if mode_given else _mode_hint(refused, default_mode, validators)
        raise TaskFileError(str(TaskFileError.of_records(str(path), bad)) + hint)
    if not task_set.total:
        raise TaskFileError(f"{path}: no tasks in file")
    return task_set


#: (file, field) pairs already warned of as a known field in another case or spelling
_look_alikes_warned: set[tuple[str, str]] = set()


def _warn_of_look_alikes(validators: Validators, task: Task, path: str) -> None:
    """Say once per field and file that a field of ``task`` is a known one in another case or
    with other separators (``TIMEOUT``, ``timeLimitS``): kept as the task's own data, as any
    other field the mode does not read, but the task runs without the field it looks like."""
    look_alikes = getattr(validators, "look_alikes", None)  # the registry's validators have it
    for name, field_name, fields in look_alikes(task.mode, task.payload) if look_alikes else ():
        if (path, name) not in _look_alikes_warned:
            _look_alikes_warned.add((path, name))
            logging.getLogger("parallel_rollout").warning(
                "%s: field %r is not a %s task's, but reads as %r in another case or spelling: it is kept "
                "as the task's own data and the task runs without %r (a %s task's fields: %s); said once "
                "per field and file", task.source, name, task.mode, field_name, field_name, task.mode, ", ".join(fields))


def census_lines(task_set: TaskSet, refused: Sequence[tuple[Task, str]] = (), agent: str = "") -> list[str]:
    """Per domain: tasks, runnable, and the unsupported features with their task counts, then
    the tasks ``--agent`` cannot run (``refused``: each with its refusal) by why; the last line
    is ``runnable N of M tasks``, of the tasks the run runs."""
    from collections import Counter

    totals: Counter = Counter(task_set.domains.values())
    refused_ids = {task.id for task, _ in refused}
    runnable: Counter = Counter(task_set.domains[t.id] for t in task_set.tasks if t.id not in refused_ids)
    features: dict[str, Counter] = {}
    for item in task_set.unsupported:
        features.setdefault(task_set.domains[item.task.id], Counter()).update(item.features)
    for task, why in refused:
        features.setdefault(task_set.domains[task.id], Counter())[refusal_reason(task, why, agent)] += 1
    lines = []
    for name in sorted(totals):
        lines.append(f"{name}: {totals[name]} task{'s' if totals[name] != 1 else ''}, {runnable[name]} runnable")
        for feature, count in sorted(features.get(name, Counter()).items(),
                                     key=lambda kv: (-kv[1], kv[0])):
            said = feature if feature.startswith("--agent ") else f"unsupported {feature}"
            lines.append(f"  {said}: {count} task{'s' if count != 1 else ''}")
    lines.append(f"runnable {sum(runnable.values())} of {task_set.total} tasks")
    return lines


def refusal_reason(task: Task, why: str, agent: str) -> str:
    """``--agent X cannot run (why)`` of an agent's refusal of ``task``, without the task's
    place and name, so that the tasks refused for one reason count together."""
    reason = why.removeprefix(f"{task.source}: ").removeprefix(f"--agent {agent}: ")
    return f"--agent {agent} cannot run ({reason.replace(f'task {task.id!r} ', '')})"


def unsupported_message(task_set: TaskSet) -> str:
    """Every unsupported task (where, features), then the census: why a load is refused."""
    lines = [f"{len(task_set.unsupported)} of {task_set.total} tasks use features this "
             "version does not support (add --skip-unsupported to run the rest; each skipped "
             "task then gets an 'unsupported' record):"]
    lines += [f"  {item.task.source}: task {item.task.id!r}: {', '.join(item.features)}"
              for item in task_set.unsupported]
    return "\n".join(lines + census_lines(task_set))


def _mode_hint(refused: list[Any], default_mode: str | None, validators: Validators) -> str:
    """The ``--mode`` to give when every refused record, none naming a mode, is a task of
    another mode (HumanEval's own JSONL read as the default shell tasks), else ""."""
    if not refused or not all(isinstance(raw, dict) and "mode" not in raw
                              and raw.get("id", raw.get("task_id")) is not None for raw in refused):
        return ""  # a record that is no task, or that another --mode would refuse all the same

    def takes(validate: Callable[[Mapping[str, Any]], None], raw: Mapping[str, Any]) -> bool:
        try:
            validate(_given(raw, None))
        except Exception:  # noqa: BLE001 - any refusal: not this mode's task
            return False
        return True

    # a mode that takes an empty task (gym: every field has a default) says nothing of these
    fits = [mode for mode, validate in validators.items()
            if not takes(validate, {}) and all(takes(validate, raw) for raw in refused)]
    if len(fits) != 1 or fits[0] == default_mode:
        return ""
    return (f"\n(no --mode was given, so these were read as {default_mode} tasks; "
            f"they are {fits[0]} tasks: add --mode {fits[0]})")


def _cli_mode_said(default_mode: str | None, mode_given: bool) -> str:
    """What set the run's mode, as the CLI's refusal of a task of another mode says it."""
    return (f"the run is --mode {default_mode}" if mode_given
            else f"the run is {default_mode}, the default (no --mode was given)")


def _parse_task(raw: Any, where: str, default_mode: str | None, validators: Validators, mode_said: str) -> Task:
    if not isinstance(raw, dict):
        raise TaskFileError(f"{where}: a task is a JSON object, got {value_said(raw)}")
    # the field the record names its id in: "id", else "task_id" (HumanEval's)
    id_field = next((name for name in ("id", "task_id") if name in raw), None)
    if id_field is None:
        raise TaskFileError(f"{where}: missing field 'id'")
    task_id = raw[id_field]
    if isinstance(task_id, bool) or not isinstance(task_id, (str, int)):
        raise TaskFileError(f"{where}: field {id_field!r} must be {kinds_said((str, int))}, got {value_said(task_id)}")
    task_id = str(task_id)
    if not task_id.strip():
        raise TaskFileError(f"{where}: field {id_field!r} is empty")
    # Ids may hold "/" (HumanEval/0); folder names are made safe where they are used.
    if len(task_id) > 200 or task_id in (".", "..") or any(c in task_id for c in "\\\0\n"):
        raise TaskFileError(f"{where}: field {id_field!r} must be 1-200 characters without \\ or newlines, "
                            "not . or ..")
    mode = default_mode if raw.get("mode") is None else raw["mode"]  # null: not given, as each field's
    if mode is None:
        raise TaskFileError(f"{where}: task {task_id!r} has no 'mode' and no --mode was given")
    if not isinstance(mode, str) or mode not in validators:
        close = difflib.get_close_matches(str(mode), list(validators), n=1, cutoff=0.75)  # as --mode's
        raise TaskFileError(f"{where}: unknown mode {mode!r} in task {task_id!r}"
                            + (f" (did you mean {close[0]!r}?)" if close else "")
                            + f"; known modes: {', '.join(sorted(validators))}")
    if default_mode is not None and mode != default_mode:
        raise ModeConflict(f"{where}: task {task_id!r} has mode {mode!r} but {mode_said}")
    seed = raw.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise TaskFileError(f"{where}: task {task_id!r}: field 'seed' must be {kinds_said((int,))}, "
                            f"got {value_said(seed)}")
    tags = [] if raw.get("tags") is None else raw["tags"]
    fault = not_strings("tags", tags) if isinstance(tags, list) else \
        f"field 'tags' must be a list of strings, got {value_said(tags)}"
    if fault:
        raise TaskFileError(f"{where}: task {task_id!r}: {fault}")
    payload = _given(raw, getattr(validators, "fields", lambda mode: None)(mode),
                     getattr(validators, "nested", lambda mode: {})(mode))
    task = Task(id=task_id, mode=mode, payload=payload, seed=seed, tags=tuple(tags), source=where)
    try:
        validators[mode](payload)
    except UnsupportedTask as exc:
        exc.task = task
        raise
    except MissingField as exc:
        if not _null_at(raw, exc.name):
            raise TaskFileError(f"{where}: task {task_id!r}: {exc}") from None
        raise TaskFileError(f"{where}: task {task_id!r}: field {exc.name!r} must be {kinds_said(exc.kinds)}, got "
                            f"null: null reads as not given, and {mode} tasks need it") from None
    except (ValueError, TypeError) as exc:
        raise TaskFileError(f"{where}: task {task_id!r}: {exc}{_nulls_named(raw, payload, str(exc))}") from None
    return task


def _nulls_named(raw: Mapping[str, Any], payload: Mapping[str, Any], refusal: str) -> str:
    """What a mode's refusal in its own words leaves unsaid: that a field it names is given as
    null, which the mode never saw (null reads as not given): a plugin's "missing field 'n'" of
    ``"n": null``, or an object's field by its path, "missing field 'reference.answer'". "" when
    it names none."""
    # a null the mode saw (a field it reads, kept) is its own to speak of: only the dropped ones
    named = [path for path in _null_paths(raw) if path.split(".")[0] not in CORE_FIELDS
             and not _null_at(payload, path) and re.search(rf"(?<![\w.]){re.escape(path)}(?!\w)", refusal)]
    return f" (the file gives {' and '.join(map(repr, named))} as null, and null reads as not given)" if named else ""


def _null_paths(value: Mapping[str, Any], prefix: str = "") -> Iterator[str]:
    """The paths of the fields given as null in a record, an object's by its path (``reference.answer``)."""
    for key, item in value.items():
        if item is None:
            yield f"{prefix}{key}"
        elif isinstance(item, dict):
            yield from _null_paths(item, f"{prefix}{key}.")


def _given(raw: Mapping[str, Any], fields: Container[str] | None,
           nested: Mapping[str, Container[str]] | None = None) -> dict[str, Any]:
    """A record's payload without the fields given as null that the mode reads (``fields``;
    None: a mode that declares none, whose every field may be one).
    Datasets' exports (HuggingFace's ``to_json``, pandas, a Parquet column) write null for a
    field a record lacks: it takes the mode's default, as a field left out does. Another
    column's null is the dataset's own value, kept for the agent as it is. ``nested``: an
    object field's optional fields (``Env.nested_fields``: rag's ``reference.answer``), whose
    null is dropped the same way."""
    nulls = {name for name, value in raw.items()
             if value is None and name not in CORE_FIELDS and (fields is None or name in fields)}
    payload = {k: v for k, v in raw.items() if k not in CORE_FIELDS and k not in nulls}
    for name, optional in (nested or {}).items():
        if isinstance(payload.get(name), dict):
            inner = {key for key, value in payload[name].items() if value is None and key in optional}
            payload[name] = {k: v for k, v in payload[name].items() if k not in inner}
    return payload


def _null_at(raw: Mapping[str, Any], name: str) -> bool:
    """Whether the record gives field ``name`` as null: a field of its own, or one of an
    object field's by its path (``evaluator.func``), as ``MissingField`` names it."""
    if name in raw:
        return raw[name] is None
    value: Any = raw
    for key in name.split("."):
        if not isinstance(value, dict) or key not in value:
            return False
        value = value[key]
    return value is None


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
