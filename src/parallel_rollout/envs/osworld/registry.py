"""What the ``osworld`` mode supports: the names of config steps, getters and metrics, and a
census of the features a task (or a whole task set) uses.

A task is supported when every one of its features is: its ``config`` and ``postconfig`` step
types (:data:`setup.STEPS <parallel_rollout.envs.osworld.setup>`), its ``result``/``expected``
getter types (:data:`getters.GETTERS`) and its metric names (:data:`metrics.METRICS`).

::

    features(payload)     -> {"step": {...}, "getter": {...}, "metric": {...}}
    unsupported(payload)  -> ["metric compare_table", "step googledrive", ...]  (all, sorted)
    typos(payload)        -> ["metric 'exact_mtach' (did you mean 'exact_match'?)", ...]
    supported(kind, name) -> bool
    census(payloads)      -> {"step": Counter(name -> tasks), "getter": ..., "metric": ...}
"""

from __future__ import annotations

import difflib
from collections import Counter
from typing import Any, Iterable, Mapping

KINDS = ("step", "getter", "metric")


def _tables() -> dict[str, Mapping[str, Any]]:
    from . import setup
    from .getters import GETTERS
    from .metrics import METRICS

    return {"step": setup.STEPS, "getter": GETTERS, "metric": METRICS}


def supported(kind: str, name: str) -> bool:
    """True when the mode implements the step type, getter type or metric ``name``."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    return name in _tables()[kind]


def names(kind: str) -> list[str]:
    """Every supported name of one kind, sorted."""
    return sorted(_tables()[kind])


def _getter_configs(evaluator: Mapping[str, Any]) -> Iterable[Any]:
    for role in ("result", "expected"):
        value = evaluator.get(role)
        for item in value if isinstance(value, list) else [value]:
            if item is not None:
                yield item


def features(payload: Mapping[str, Any]) -> dict[str, set[str]]:
    """The step types, getter types and metric names one OSWorld task uses (malformed parts
    are left out here; the loader's checks name them)."""
    found: dict[str, set[str]] = {kind: set() for kind in KINDS}
    evaluator = payload.get("evaluator") if isinstance(payload.get("evaluator"), dict) else {}
    steps = list(payload.get("config") or []) + list(evaluator.get("postconfig") or [])
    for step in steps:
        if isinstance(step, dict) and isinstance(step.get("type"), str):
            found["step"].add(step["type"])
    funcs = evaluator.get("func")
    for func in funcs if isinstance(funcs, list) else [funcs]:
        if isinstance(func, str):
            found["metric"].add(func)
    for getter in _getter_configs(evaluator):
        if isinstance(getter, dict) and isinstance(getter.get("type"), str):
            found["getter"].add(getter["type"])
    return found


def unsupported(payload: Mapping[str, Any]) -> list[str]:
    """Every unsupported feature of one task as ``"<kind> <name>"``, sorted (empty: runnable)."""
    tables = _tables()
    return sorted(f"{kind} {name}" for kind, found in features(payload).items()
                  for name in found if name not in tables[kind])


#: how like a supported name an unsupported one must be (difflib's ratio), past one edit, to
#: read as its typo; none of desktop-env 1.0.2's metric, getter and setup names that this
#: mode lacks comes this close to a supported one (the closest: compare_docx_lines, 0.89)
TYPO_RATIO = 0.9


def _edits(a: str, b: str) -> int:
    """Edits from ``a`` to ``b``: a character added, dropped or changed, or two neighbours
    swapped (the optimal string alignment distance)."""
    before, row = None, list(range(len(b) + 1))
    for i, char_a in enumerate(a, 1):
        current = [i] + [0] * len(b)
        for j, char_b in enumerate(b, 1):
            current[j] = min(row[j] + 1, current[j - 1] + 1, row[j - 1] + (char_a != char_b))
            if before is not None and j > 1 and char_a == b[j - 2] and a[i - 2] == char_b:
                current[j] = min(current[j], before[j - 2] + 1)
        before, row = row, current
    return row[-1]


def typo_of(kind: str, name: str) -> str | None:
    """The supported name of ``kind`` that the unsupported ``name`` reads as a typo of: one
    edit away (exact_mtach, lanuch) or nearly the same (TYPO_RATIO); None when there is none,
    as for a name of OSWorld's that this version lacks."""
    known = names(kind)
    close = [k for k in known if _edits(name, k) <= 1]
    close += difflib.get_close_matches(name, known, n=1, cutoff=TYPO_RATIO)
    return close[0] if close else None


def _listed_at(payload: Mapping[str, Any], kind: str, name: str) -> list[str]:
    """Where a metric or getter ``name`` stands in the evaluator's lists, as the task file
    spells them (``evaluator.func[1]``, ``evaluator.result[2]``); [] when it is not in one."""
    evaluator = payload.get("evaluator") if isinstance(payload.get("evaluator"), dict) else {}
    if kind == "metric":
        funcs = evaluator.get("func")
        return [f"evaluator.func[{i}]" for i, func in enumerate(funcs) if func == name] \
            if isinstance(funcs, list) else []
    if kind != "getter":
        return []
    return [f"evaluator.{role}[{i}]" for role in ("result", "expected")
            if isinstance(evaluator.get(role), list)
            for i, getter in enumerate(evaluator[role]) if isinstance(getter, dict) and getter.get("type") == name]


def typos(payload: Mapping[str, Any]) -> list[str]:
    """Each unsupported step, getter or metric name of one task that reads as a typo of a
    supported one, with it (and, in a list of metrics or getters, its index): a task that
    would otherwise be skipped as unsupported, scored 0."""
    found = []
    for feature in unsupported(payload):
        kind, name = feature.split(" ", 1)
        meant = typo_of(kind, name)
        if meant is not None:
            where = " and ".join(_listed_at(payload, kind, name))
            found.append(f"{kind} {name!r}{f' in {where}' if where else ''} (did you mean {meant!r}?)")
    return found


def census(payloads: Iterable[Mapping[str, Any]]) -> dict[str, Counter]:
    """Per kind, how many tasks use each name."""
    counts: dict[str, Counter] = {kind: Counter() for kind in KINDS}
    for payload in payloads:
        for kind, found in features(payload).items():
            counts[kind].update(found)
    return counts
