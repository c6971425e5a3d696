"""Task files in Parquet, the format RL trainers keep their datasets in (verl's ``data.train_files``).

A ``.parquet`` file given as ``--data`` is read row by row (pyarrow, the ``[parquet]`` extra,
imported only then): each row is a task record, as one line of a JSONL file is, with its
columns as the fields. A row in verl's layout is read as a ``math`` task::

    verl's row                                          the task
    data_source: "openai/gsm8k"                         tags: ["openai/gsm8k"]
    prompt: [{"role": "user", "content": "..."}]        problem: the last user message
    reward_model: {"style": "rule", "ground_truth": …}  answer: the ground truth
    extra_info: {"split": "test", "index": 7, …}        id: "openai/gsm8k/test/7"

(the row number stands in for a missing index; the other columns stay in the task). A row
that already has ``problem`` or ``id`` is taken as it is. Values must be what a JSON task
file could hold: a NaN, an infinity, bytes or a timestamp is refused, naming the row and the
column, as the JSON reader names the line.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterator

from .errors import TaskFileError

#: rows converted to Python at a time (a dataset of millions is not held twice)
_BATCH_ROWS = 4096


def parquet_records(path: Path) -> Iterator[tuple[int, Any]]:
    """(row number from 1, the task record) for every row of a Parquet file."""
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
                yield row, from_verl(_json_value(values, path, row, "the row"), row)
    except FileNotFoundError:
        raise TaskFileError(f"{path}: task file not found") from None
    except (pyarrow.ArrowException, OSError) as exc:
        raise TaskFileError(f"{path}: not a readable Parquet file: {exc}") from None


def from_verl(row: Any, number: int) -> Any:
    """A row in verl's layout as a math task (see the module docstring); any other row as
    it is."""
    if not isinstance(row, dict) or "problem" in row or "id" in row:
        return row
    prompt, reward = row.get("prompt"), row.get("reward_model")
    if not (isinstance(prompt, list) and isinstance(reward, dict) and "ground_truth" in reward):
        return row
    users = [m.get("content") for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
    if not users or not isinstance(users[-1], str):
        return row  # the task's own validation names what is missing
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


def _json_value(value: Any, path: Path, row: int, where: str) -> Any:
    """``value`` when a JSON task file could hold it, else TaskFileError naming the column."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise TaskFileError(f"{path}: row {row}: {where} holds {value!r}, not a JSON number "
                                "(use a number or null)")
        return value
    if isinstance(value, dict):
        return {str(k): _json_value(v, path, row, f"column {k!r}" if where == "the row" else where)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_value(v, path, row, where) for v in value]
    raise TaskFileError(f"{path}: row {row}: {where} holds a {type(value).__name__}, which a task "
                        "cannot hold (text, numbers, booleans, lists and maps only)")
