"""Task files in Parquet, the format RL trainers keep their datasets in (verl's ``data.train_files``).

A ``.parquet`` file given as ``--data`` is read row by row (pyarrow, the ``[parquet]`` extra,
imported only then): each row is a task record, as one line of a JSONL file is, with its
columns as the fields (a struct or a map an object, a list a list). A row in verl's layout
is read as a ``math`` task::

    verl's row                                          the task
    data_source: "openai/gsm8k"                         tags: ["openai/gsm8k"]
    prompt: [{"role": "user", "content": "..."}]        problem: the last user message
    reward_model: {"style": "rule", "ground_truth": …}  answer: the ground truth
    extra_info: {"split": "test", "index": 7, …}        id: "openai/gsm8k/test/7"

(the row number stands in for a missing index; the other columns stay in the task). A row
is in verl's layout when it has a ``data_source`` or ``reward_model`` column and neither
``problem`` nor ``id`` (a row that has one is taken as it is). Without ``--mode`` such a file
is a math task set (``parquet_mode``), as a task file whose tasks all name one mode is; a
verl row without a user message or a ground truth is refused naming verl's column. Values
must be what a JSON task file could hold: a NaN, an infinity, bytes or a timestamp is
refused, naming the row, the column by its path (``meta.cost``) and the value's type as the
Parquet schema names it (``timestamp[us]``), as the JSON reader names the line.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterator

from .errors import TaskFileError
from .task_json import as_written

#: rows converted to Python at a time (a dataset of millions is not held twice)
_BATCH_ROWS = 4096


#: the mode of a task set in verl's layout
VERL_MODE = "math"


def parquet_records(path: Path) -> Iterator[tuple[int, Any]]:
    """(row number from 1, the task record) for every row of a Parquet file; a verl row that
    cannot be a task is its TaskFileError, for the load to name with the other bad rows."""
    for row, values in _rows(path):
        yield row, from_verl(values, f"{path}: row {row}", row)


def parquet_mode(path: Path) -> str | None:
    """The mode every row of a Parquet file names (its ``mode`` column, verl's layout being
    ``VERL_MODE``); None when the rows differ or one names none."""
    modes = {values.get("mode") or (VERL_MODE if is_verl(values) else None) if isinstance(values, dict) else None
             for _, values in _rows(path)}
    found = modes.pop() if len(modes) == 1 else None
    return found if isinstance(found, str) else None


def is_verl(row: dict[str, Any]) -> bool:
    """Whether a row is in verl's dataset layout (and not a task in our own columns)."""
    return ("data_source" in row or "reward_model" in row) and "problem" not in row and "id" not in row


def _rows(path: Path) -> Iterator[tuple[int, Any]]:
    """(row number from 1, the row as JSON values) for every row of a Parquet file."""
    try:
        import pyarrow
        import pyarrow.parquet as pq
    except ImportError:
        raise TaskFileError(f"{path}: a .parquet task file needs pyarrow: "
                            "pip install 'parallel-rollout[parquet]'") from None
    try:
        batches = pq.ParquetFile(path).iter_batches(batch_size=_BATCH_ROWS)
        row = 0
        for batch in batches:
            for values in batch.to_pylist():
                row += 1
                yield row, _json_value(values, path, row, "", batch.schema)
    except FileNotFoundError:
        raise TaskFileError(f"{path}: task file not found") from None
    except (pyarrow.ArrowException, OSError) as exc:
        raise TaskFileError(f"{path}: not a readable Parquet file: {exc}") from None


def from_verl(row: Any, where: str, number: int) -> Any:
    """A row in verl's layout as a math task (see the module docstring), or a TaskFileError
    naming verl's column that it lacks; any other row as it is."""
    if not isinstance(row, dict) or not is_verl(row):
        return row
    prompt, reward = row.get("prompt"), row.get("reward_model")
    users = [m.get("content") for m in prompt if isinstance(m, dict) and m.get("role") == "user"] \
        if isinstance(prompt, list) else []
    lacks = []
    if not users or not isinstance(users[-1], str):
        lacks.append("verl's 'prompt' holds no user message (its last one is the task's problem)")
    if reward is None:
        lacks.append("verl's 'reward_model' is null: its ground_truth is the task's answer")
    elif not isinstance(reward, dict) or reward.get("ground_truth") is None:
        lacks.append("verl's reward_model.ground_truth is missing (null): it is the task's answer")
    if lacks:
        return TaskFileError(f"{where}: {'; '.join(lacks)}")
    extra = row.get("extra_info") if isinstance(row.get("extra_info"), dict) else {}
    source = row.get("data_source")
    index = extra.get("index")
    parts = [source, extra.get("split"), index if isinstance(index, (int, str)) else number]
    task = {k: v for k, v in row.items() if k not in ("prompt", "reward_model")}
    task.update(id="/".join(str(p) for p in parts if p not in (None, "")), problem=users[-1],
                answer=reward["ground_truth"])
    if isinstance(source, str) and source:
        task["tags"] = [*row.get("tags", []), source] if isinstance(row.get("tags"), list) else [source]
    return task


def _json_value(value: Any, path: Path, row: int, field: str, kind: Any) -> Any:
    """``value`` when a JSON task file could hold it, else TaskFileError naming its column by
    its path (``meta.cost``, ``files[0]``; ``field`` "" for the row) and ``kind``, its type in
    the Parquet schema's words (``timestamp[us]``; None where the schema names none)."""
    where = f"column {field!r}" if field else "the row"
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise TaskFileError(f"{path}: row {row}: {where} holds {as_written(value)}, not a JSON number "
                                "(use a number or null)")
        return value
    if isinstance(value, dict):
        return {str(k): _json_value(v, path, row, f"{field}.{k}" if field else str(k), _field_type(kind, k))
                for k, v in value.items()}
    if isinstance(value, list) and hasattr(kind, "key_type"):  # a map: its (key, value) entries, an object
        return {str(k): _json_value(v, path, row, f"{field}.{k}", kind.item_type) for k, v in value}
    if isinstance(value, (list, tuple)):
        item = getattr(kind, "value_type", None)
        return [_json_value(v, path, row, f"{field}[{n}]", item) for n, v in enumerate(value)]
    kind = kind if kind is not None else _type_of(value)
    said = f"a Parquet {kind}" if kind is not None else f"a {type(value).__name__} value"
    raise TaskFileError(f"{path}: row {row}: {where} holds {said}, which a task cannot hold (a task holds "
                        "JSON's values: a string, a number, true or false, null, a list or an object)")


def _field_type(kind: Any, name: str) -> Any:
    """The type the schema (or a struct type) ``kind`` gives its field ``name``; None when none."""
    try:
        return kind.field(name).type
    except (AttributeError, KeyError, TypeError):
        return None


def _type_of(value: Any) -> Any:
    """``value``'s Parquet type as pyarrow reads it (a map's entries, which the schema walk
    does not reach); None when it names none."""
    import pyarrow

    try:
        return pyarrow.scalar(value).type
    except (pyarrow.ArrowException, TypeError, ValueError):
        return None
