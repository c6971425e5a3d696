"""OSWorld's evaluator: getters (``result``/``expected`` configs) and metrics, and the way
they combine (``func`` one or a list, ``conj`` "and"/"or", FAIL scoring).

Only what this mode supports is listed; :func:`check_evaluator` rejects anything else when
tasks load, naming the task and the type.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

# ---------------------------------------------------------------------------- getters
# Each takes (env, config) and returns the state a metric compares.


def get_vm_file(env, config: dict) -> str | None:
    """POST /file into the attempt's cache folder; the local path (None when missing)."""
    path = config["path"]
    try:
        data = env.vm.read_file(path)
    except FileNotFoundError:
        return None
    dest = env.cache_dir / (config.get("dest") or Path(path).name)
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(data)
    return str(dest)


def get_vm_command_line(env, config: dict) -> str:
    """POST /execute and its stdout."""
    command = config["command"]
    result = env.vm.execute(command, shell=bool(config.get("shell", isinstance(command, str))),
                            timeout=float(config.get("timeout", 60)))
    return result.get("output") or ""


def get_rule(env, config: dict) -> Any:
    """The config's ``rules``, as is."""
    return config["rules"]


def get_accessibility_tree(env, config: dict) -> str:
    """GET /accessibility: the XML."""
    return env.vm.accessibility_tree()


def get_cloud_file(env, config: dict) -> str | None:
    """A file from ``file://`` or a local path (nothing is downloaded here); the local path."""
    from .setup import local_source

    return str(local_source(env.task, config["path"], env.cache_root))


GETTERS: dict[str, Callable[[Any, dict], Any]] = {
    "vm_file": get_vm_file,
    "vm_command_line": get_vm_command_line,
    "rule": get_rule,
    "accessibility_tree": get_accessibility_tree,
    "cloud_file": get_cloud_file,
    "cache_file": get_cloud_file,
}


# ---------------------------------------------------------------------------- metrics
# Called as metric(result, expected, **options) -> float in [0, 1], as in OSWorld.


def exact_match(result: Any, rules: dict, **options) -> float:
    """1 when ``result`` equals ``rules["expected"]``."""
    if result is None:
        return 0.0
    return float(result == rules["expected"])


def check_include_exclude(result: Any, rules: dict, **options) -> float:
    """1 when every ``include`` string is in ``result`` and no ``exclude`` string is."""
    if result is None:
        return 0.0
    text = str(result)
    return float(all(s in text for s in rules.get("include", []))
                 and not any(s in text for s in rules.get("exclude", [])))


def compare_text_file(result: str | None, expected: str | None, **options) -> float:
    """1 when two files hold the same text (``ignore_blanks``, ``ignore_case`` options)."""
    if not result or not expected:
        return 0.0
    a = Path(result).read_text(errors="replace")
    b = Path(expected).read_text(errors="replace")
    if options.get("ignore_blanks"):
        import re

        a, b = re.sub(r"[\t\n]", " ", a).strip(), re.sub(r"[\t\n]", " ", b).strip()
        a, b = re.sub(r"\s+", " ", a), re.sub(r"\s+", " ", b)
    if options.get("ignore_case"):
        a, b = a.lower(), b.lower()
    return float(a == b)


def check_direct_json_object(result: Any, rules: dict, **options) -> float:
    """1 when the JSON object ``result`` (a dict, JSON text or a file path) has every
    ``rules["expected"]`` key with that value (``expect_in_result``: values are contained)."""
    if result is None:
        return 0.0
    if isinstance(result, str):
        text = result
        if not text.lstrip().startswith("{") and Path(text).is_file():
            text = Path(text).read_text(errors="replace")
        try:
            result = json.loads(text.strip())
        except ValueError:
            return 0.0
    if not isinstance(result, dict):
        return 0.0
    expected = rules.get("expected", {})
    if rules.get("expect_in_result"):
        return float(all(str(v) in str(result.get(k, "")) for k, v in expected.items()))
    return float(all(result.get(k) == v for k, v in expected.items()))


def infeasible(*args, **options) -> float:
    """Scored by the env: 1 iff the last action was FAIL."""
    raise AssertionError("infeasible is scored by the env, not called")


METRICS: dict[str, Callable[..., float]] = {
    "exact_match": exact_match,
    "check_include_exclude": check_include_exclude,
    "compare_text_file": compare_text_file,
    "check_direct_json_object": check_direct_json_object,
    "infeasible": infeasible,
}


# ------------------------------------------------------------------------- structure


def _as_list(value: Any, count: int) -> list:
    if isinstance(value, list) and count > 1:
        return value
    return [value] * count if count == 1 or value is None else value


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
    """ValueError naming the first unsupported or malformed piece of an evaluator."""
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
    for func, result, expected, options in normalized(evaluator):
        if func not in METRICS:
            raise ValueError(f"unsupported metric {func!r}; supported: {', '.join(sorted(METRICS))}")
        if func == "infeasible":
            continue
        for role, getter in (("result", result), ("expected", expected)):
            if getter is None:
                if role == "result":
                    raise ValueError(f"metric {func!r} needs a 'result' getter")
                continue
            if not isinstance(getter, dict) or getter.get("type") not in GETTERS:
                kind = getter.get("type") if isinstance(getter, dict) else getter
                raise ValueError(f"unsupported {role} getter type {kind!r}; supported: "
                                 f"{', '.join(sorted(GETTERS))}")
        if not isinstance(options, dict):
            raise ValueError("evaluator 'options' must be objects")


def combine(scores: list[float], conj: str) -> float:
    """OSWorld's combination: "and" is 0 at the first 0, else the mean; "or" is 1 at the
    first 1, else the max."""
    if conj == "or":
        return 1.0 if any(s >= 1.0 for s in scores) else max(scores)
    return 0.0 if any(s == 0 for s in scores) else sum(scores) / len(scores)
