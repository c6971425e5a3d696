"""OSWorld's evaluator structure: ``func`` one metric or a list, ``result``/``expected``
getter configs, ``options``, ``conj`` "and"/"or", and how scores combine.

The getters and metrics themselves are in :mod:`.getters` and :mod:`.metrics` (their
registries :data:`GETTERS` and :data:`METRICS`); :func:`check_evaluator` rejects a malformed
evaluator or one using anything those registries lack, naming every unsupported piece.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

from ...task_json import kind_of, value_said
from ...tasks import MissingField
from .getter_keys import FIELDS as GETTER_FIELDS, files_problem, key_problem
from .getters import GETTERS
from .metrics import METRICS
from .option_keys import option_problem
from .rule_keys import RULE_GETTERS, MalformedRule, rule_problem, task_rules, unread_hint
from .rule_methods import table_rules_problem, value_rules_problem
from .state_kinds import lists_problem, output_problem, pairing_problem

__all__ = ["GETTERS", "METRICS", "normalized", "check_evaluator", "call_problem", "combine", "metric_named", "EVALUATOR_KEYS"]

# ------------------------------------------------------------------------- structure


def normalized(evaluator: dict) -> list[tuple[str, Any, Any, dict]]:
    """(func, result config, expected config, options) per metric of an evaluator."""
    funcs = evaluator["func"]
    if isinstance(funcs, str):
        return [(funcs, evaluator.get("result"), evaluator.get("expected"), evaluator.get("options") or {})]
    count = len(funcs)
    results = evaluator.get("result") or [None] * count
    expected = evaluator.get("expected") or [None] * count
    options = evaluator.get("options") or [{}] * count
    return [(f, r, e, o or {}) for f, r, e, o in zip(funcs, results, expected, options)]


@dataclass(frozen=True)
class _Place:
    """How an error names one metric of an evaluator, and its getters and options, as the
    task file spells them: ``metric 'compare_table'`` when ``func`` is one metric, else its
    index and name, ``evaluator.func[2] (compare_table)``, and ``evaluator.options[2]``."""

    func: str
    index: int | None  # None: 'func' is one metric, its getters and options are not lists

    @property
    def metric(self) -> str:
        return f"metric {self.func!r}" if self.index is None else f"evaluator.func[{self.index}] ({self.func})"

    @property
    def head(self) -> str:
        """What an error about the metric's call or options starts with."""
        return f"evaluator {self.metric}" if self.index is None else self.metric

    def piece(self, key: str) -> str:
        """The metric's ``result``, ``expected`` or ``options``."""
        return f"evaluator {key}" if self.index is None else f"evaluator.{key}[{self.index}]"

    @property
    def options(self) -> str:
        return "its options" if self.index is None else self.piece("options")


def metric_named(evaluator: dict, index: int) -> str:
    """How an error names the evaluator's metric ``index`` (of :func:`normalized`):
    ``evaluator metric 'exact_match'``, or in a list ``evaluator.func[2] (compare_table)``."""
    funcs = evaluator["func"]
    return _Place(funcs, None).head if isinstance(funcs, str) else _Place(funcs[index], index).head


def _lists_problem(evaluator: dict) -> str | None:
    """Whether ``func`` and the ``result``, ``expected`` and ``options`` that pair with it
    agree: one metric takes one of each, a list as many, in its order."""
    funcs = evaluator.get("func")
    if isinstance(funcs, list):
        if not funcs:
            return "evaluator 'func' must be a metric name or a non-empty list of names, not an empty list"
        index, item = next(((n, f) for n, f in enumerate(funcs) if not isinstance(f, str)), (None, None))
        if index is not None:  # named as the other refusals name a metric of the list, evaluator.func[2]
            return "evaluator 'func' must be a metric name or a non-empty list of names: " \
                   f"evaluator.func[{index}] is {value_said(item)}"
        for name in ("result", "expected", "options"):
            value = evaluator.get(name)
            if value is not None and not isinstance(value, list):
                return f"evaluator {name!r} must be a list as long as 'func' ({len(funcs)} metrics), " \
                       f"one for each, not {kind_of(value)}"
            if value is not None and len(value) != len(funcs):
                return f"evaluator {name!r} must be a list as long as 'func' ({len(funcs)} metrics), " \
                       f"one for each: it has {len(value)}"
        return None
    if not isinstance(funcs, str):
        return "evaluator 'func' must be a metric name or a list of names"
    for name in ("result", "expected", "options"):
        if isinstance(evaluator.get(name), list):
            return f"evaluator {name!r} is a list, and 'func' is one metric ({funcs!r}): give it one " \
                   f"{'object' if name == 'options' else 'getter'}, or 'func' a list of as many metrics"
    return None


#: the keys of an evaluator OSWorld reads; one starting with "_" is a comment (1 real task's ``_config_note``)
EVALUATOR_KEYS = ("func", "result", "expected", "options", "conj", "postconfig")


def _keys_problem(evaluator: dict) -> str | None:
    """An evaluator key nothing reads: a misspelled ``conj`` ("conjunction": "or") combined the
    scores under "and", an ``option`` ran the metric without its options."""
    for key in evaluator:
        if not isinstance(key, str) or key in EVALUATOR_KEYS or key.startswith("_"):
            continue
        near = next((known for known in EVALUATOR_KEYS if key.startswith(known) or known.startswith(key)), None)
        hint = f"did you mean {near!r}?" if near else unread_hint(key, list(EVALUATOR_KEYS))
        return f"evaluator has the key {key!r}, which nothing reads: {hint} (a comment's key starts with '_')"
    return None


def check_evaluator(evaluator: Any) -> None:
    """ValueError naming the first malformed piece of an evaluator (a metric of a list by its
    index), or every unsupported one."""
    if not isinstance(evaluator, dict):
        raise ValueError("field 'evaluator' must be an object")
    # a needed key left out or given as null: the loader says which, as of any needed field
    if evaluator.get("func") is None:
        raise MissingField("evaluator.func", (str, list))
    funcs = evaluator["func"]
    if "result" in evaluator and evaluator["result"] is None and any(
            func != "infeasible" for func in ([funcs] if isinstance(funcs, str) else funcs)):
        raise MissingField("evaluator.result", (dict,) if isinstance(funcs, str) else (list,))
    problem = _keys_problem(evaluator) or _lists_problem(evaluator)
    if problem:
        raise ValueError(problem)
    if evaluator.get("conj", "and") not in ("and", "or"):
        raise ValueError(f"evaluator 'conj' must be 'and' or 'or', got {evaluator.get('conj')!r}")
    problems = []
    single = isinstance(evaluator["func"], str)
    for index, (func, result, expected, options) in enumerate(normalized(evaluator)):
        place = _Place(func, None if single else index)
        if func not in METRICS:
            problems.append(f"unsupported metric {func!r}")
        if func == "infeasible":
            continue
        for role, getter in (("result", result), ("expected", expected)):
            if getter is None:
                if role == "result":
                    raise ValueError(f"{place.head} needs a 'result' getter"
                                     + ("" if single else f" in {place.piece('result')}"))
                continue
            if not isinstance(getter, dict) or not isinstance(getter.get("type"), str):
                raise ValueError(f"{place.piece(role)} getter of {place.metric} must be an object with a 'type'")
            if getter["type"] not in GETTERS:
                problems.append(f"unsupported {role} getter type {getter['type']!r}")
            for name in GETTER_FIELDS.get(getter["type"], ()):
                if name not in getter:
                    raise ValueError(f"{place.piece(role)} getter {getter['type']!r} of {place.metric} "
                                     f"needs the field {name!r}")
            # a key the getter does not read (a typo of 'multi') was ignored, a 'gives' past its files
            # picked none: the wrong state scored
            problem = key_problem(getter) or files_problem(getter) if getter["type"] in GETTERS else None
            if problem:
                raise ValueError(f"{place.piece(role)} getter {getter['type']!r} of {place.metric} {problem}")
            # what the getter gives, the metric cannot read (a rule's object opened as a file): a 0
            problem = pairing_problem(func, role, getter)
            if problem:
                raise ValueError(f"{place.piece(role)} getter {getter['type']!r} of {place.metric}: {problem}")
            # the rule is the task's: a key its metric reads missing failed every grading, a 0
            problem = rule_problem(func, getter["rules"], role) or (
                value_rules_problem(func, getter["rules"]) if role == "expected" else None) \
                if getter["type"] in RULE_GETTERS else None
            if problem:
                raise ValueError(f"{place.piece(role)} getter {getter['type']!r} of {place.metric}: "
                                 f"its 'rules' {problem}")
            if getter["type"] == "rule_relativeTime":  # reads the task's rules alone: run it now
                try:
                    GETTERS["rule_relativeTime"](None, task_rules(getter))
                except (MalformedRule, ValueError, TypeError, AttributeError) as exc:
                    raise ValueError(f"{place.piece(role)} getter 'rule_relativeTime' of {place.metric}: "
                                     f"{exc}") from exc
        # one path paired with a list's files (a letter with each), or lists of two lengths, or
        # a rule's number compared with a command's output: a 0
        problem = lists_problem(func, result, expected) or output_problem(func, result, expected)
        if problem:
            raise ValueError(f"{place.head}: {problem}")
        if not isinstance(options, dict):
            raise ValueError(f"{place.piece('options')} must be an object (the options of {place.metric}), "
                             f"not {kind_of(options)}")
        # a rule compare_table cannot read: every grading's 0
        problem = table_rules_problem(func, options, place.options, bool(expected))
        if problem:
            raise ValueError(f"{place.head}: {problem}")
        # a call that cannot bind raised at every grading; a key it binds to **options and never
        # reads (a typo) was ignored, the check it meant to switch run as if unset
        problem = call_problem(func, bool(expected), options) or option_problem(func, options, 1 + bool(expected)) \
            if func in METRICS else None
        if problem:
            raise ValueError(f"{place.head}: {problem}")
    if problems:
        raise ValueError("; ".join(dict.fromkeys(problems)))


def call_problem(func: str, has_expected: bool, options: dict) -> str | None:
    """Why metric ``func`` cannot be called as grading calls it (the result's state, the
    expected state when the task gives one, then ``options`` as keywords), or None: a call
    that cannot bind raised TypeError at every grading, scored 0 as the agent's failure."""
    metric = METRICS[func]
    states = ("result", "expected") if has_expected else ("result",)
    try:
        inspect.signature(metric).bind(*states, **options)
    except TypeError as exc:
        given = "a result and an expected state" if has_expected else "a result and no expected state"
        return f"cannot be called with {given}{' and the options ' + ', '.join(map(repr, options)) if options else ''}" \
               f": {exc} (it takes {_parameters(metric)})"
    return None


def _parameters(metric: Any) -> str:
    return ", ".join(str(p).split(":")[0].split("=")[0].strip() for p in inspect.signature(metric).parameters.values())


def combine(scores: list[float], conj: str) -> float:
    """OSWorld's combination: "and" is 0 at the first 0, else the mean; "or" is 1 at the
    first 1, else the max."""
    if conj == "or":
        return 1.0 if any(s >= 1.0 for s in scores) else max(scores)
    return 0.0 if any(s == 0 for s in scores) else sum(scores) / len(scores)
