"""OSWorld's evaluator structure: ``func`` one metric or a list, ``result``/``expected``
getter configs, ``options``, ``conj`` "and"/"or", and how scores combine.

The getters and metrics themselves are in :mod:`.getters` and :mod:`.metrics` (their
registries :data:`GETTERS` and :data:`METRICS`); :func:`check_evaluator` rejects a malformed
evaluator or one using anything those registries lack, naming every unsupported piece.
"""

from __future__ import annotations

import inspect
from typing import Any

from .getters import GETTERS
from .metrics import METRICS
from .option_keys import option_problem
from .rule_keys import RULE_GETTERS, MalformedRule, rule_problem, task_rules
from .rule_methods import table_rules_problem, value_rules_problem

__all__ = ["GETTERS", "METRICS", "normalized", "check_evaluator", "call_problem", "combine"]

#: the fields a getter reads from its config without a default, as OSWorld's own do: one
#: missing is the task file's error, which failed every attempt's grading (a KeyError taken
#: for the agent's output failing the metric: reward 0, the run's exit 0)
_DEST = ("dest",)
GETTER_FIELDS = {"vm_file": ("path",), "cloud_file": ("path",), "cache_file": ("path",),
                 "vm_command_line": ("command",), "vm_command_error": ("command",), "rule": ("rules",),
                 "content_from_vm_file": ("path", "file_type", "file_content"),
                 "rule_relativeTime": ("rules",),
                 **dict.fromkeys(("cookie_data", "history", "vlc_config", "vlc_playing_info", "vm_wallpaper"), _DEST),
                 "gimp_config_file": ("dest", "file_name"), "vscode_config": ("path", "dest", "vscode_extension_command"),
                 "pdf_from_url": ("path", "dest"), "list_directory": ("path",), "page_info": ("url",),
                 "info_from_website": ("url",), "vm_window_size": ("app_class_name",),
                 "audio_in_slide": ("ppt_file_path", "slide_index"),
                 "background_image_in_slide": ("ppt_file_path", "slide_index"),
                 "active_tab_html_parse": ("category",), "active_tab_url_parse": ("parse_keys",),
                 "url_path_parse": ("parse_keys",), "url_dashPart": ("partIndex", "returnType", "key"),
                 "gotoRecreationPage_and_get_html_content": ("class",)}


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


def check_evaluator(evaluator: Any) -> None:
    """ValueError naming the first malformed piece of an evaluator, or every unsupported one."""
    if not isinstance(evaluator, dict):
        raise ValueError("field 'evaluator' must be an object")
    funcs = evaluator.get("func")
    if isinstance(funcs, list):
        if not funcs or not all(isinstance(f, str) for f in funcs):
            raise ValueError("evaluator 'func' must be a metric name or a non-empty list of names")
        for name in ("result", "expected", "options"):
            value = evaluator.get(name)
            if value is not None and (not isinstance(value, list) or len(value) != len(funcs)):
                raise ValueError(f"evaluator '{name}' must be a list as long as 'func' ({len(funcs)})")
    elif not isinstance(funcs, str):
        raise ValueError("evaluator 'func' must be a metric name or a list of names")
    if evaluator.get("conj", "and") not in ("and", "or"):
        raise ValueError(f"evaluator 'conj' must be 'and' or 'or', got {evaluator.get('conj')!r}")
    problems = []
    for func, result, expected, options in normalized(evaluator):
        if func not in METRICS:
            problems.append(f"unsupported metric {func!r}")
        if func == "infeasible":
            continue
        for role, getter in (("result", result), ("expected", expected)):
            if getter is None:
                if role == "result":
                    raise ValueError(f"metric {func!r} needs a 'result' getter")
                continue
            if not isinstance(getter, dict) or not isinstance(getter.get("type"), str):
                raise ValueError(f"evaluator {role} getter must be an object with a 'type'")
            if getter["type"] not in GETTERS:
                problems.append(f"unsupported {role} getter type {getter['type']!r}")
            for name in GETTER_FIELDS.get(getter["type"], ()):
                if name not in getter:
                    raise ValueError(f"evaluator {role} getter {getter['type']!r} of metric {func!r} "
                                     f"needs the field {name!r}")
            # the rule is the task's: a key its metric reads missing failed every grading, a 0
            problem = rule_problem(func, getter["rules"]) or value_rules_problem(func, getter["rules"]) \
                if role == "expected" and getter["type"] in RULE_GETTERS else None
            if problem:
                raise ValueError(f"evaluator {role} getter {getter['type']!r} of metric {func!r}: "
                                 f"its 'rules' {problem}")
            if getter["type"] == "rule_relativeTime":  # reads the task's rules alone: run it now
                try:
                    GETTERS["rule_relativeTime"](None, task_rules(getter))
                except (MalformedRule, ValueError, TypeError, AttributeError) as exc:
                    raise ValueError(f"evaluator {role} getter 'rule_relativeTime' of metric {func!r}: "
                                     f"{exc}") from exc
        if not isinstance(options, dict):
            raise ValueError("evaluator 'options' must be objects")
        problem = table_rules_problem(func, options)  # a rule compare_table cannot read: every grading's 0
        if problem:
            raise ValueError(f"evaluator metric {func!r}: its {problem}")
        # a call that cannot bind raised at every grading; a key it binds to **options and never
        # reads (a typo) was ignored, the check it meant to switch run as if unset
        problem = call_problem(func, bool(expected), options) or option_problem(func, options, 1 + bool(expected)) \
            if func in METRICS else None
        if problem:
            raise ValueError(f"evaluator metric {func!r}: {problem}")
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
