"""The value rules a task file hands a metric (``{"method": M, "ref": R}``, matched by
``metrics.rules.match_value``) and ``compare_table``'s ``options["rules"]``, checked as the
folder loads.

A method ``match_value`` does not know raised NotImplementedError at every grading, and
``compare_table`` raised on a rule ``type`` it does not know or a key a rule of its type
lacks (or, for a ``check_cell`` rule, caught it): each was scored 0 as the agent's failure,
where the task file was wrong; so was a value rule without its ``method`` (the task's error at
grading, a 0 in ``compare_table``) and a ``sheet_fuzzy`` check without the ``range`` or a
``type`` it reads. :func:`value_rules_problem` and :func:`table_rules_problem`
name the first such piece (the caller names the file and the metric); a method or key in
the shapes OSWorld's own 369 tasks use is never refused. A compare_table rule's shape is
:data:`TABLE_RULE`, read by ``rule_keys.shape_problem`` as a rule getter's is; at grading the
env hands the metric its options as ``rule_keys.task_rules``, so a key the load did not know
to check is the task's error, not the agent's 0.
"""

from __future__ import annotations

import re
from typing import Any, Iterator

from .metrics import xlsx
from .metrics.rules import re_flags
from .rule_keys import RuleShape, shape_problem

__all__ = ["FUZZY_CHECK", "METHODS", "TABLE_RULE", "method_problem", "ref_problem", "table_rules_problem", "value_rules_problem"]

#: match_value's methods named in full; ``re[.FLAG…]``, ``approx:<tolerance>`` and
#: ``range.<l><r>`` are read by their prefix
METHODS = ("eq", "ne", "lt", "le", "gt", "ge", "spreadsheet_range", "str_list_eq", "str_set_eq")
_KNOWN = ", ".join((*METHODS[:6], "re[.FLAG…]", "approx:TOLERANCE", "range.XY", *METHODS[6:]))

_PAIR = ("sheet_idx0", "sheet_idx1")
_PAIRED = RuleShape(needs=_PAIR, optional=())
_PROPS = RuleShape(needs=_PAIR, lists=("props",), optional=())
#: compare_table's rule: its type -> the keys it reads without a default, those it reads with
#: one (a key of neither is refused: a typo, ``precison``, was ignored) and those that must
#: be lists or objects (a string's letters were read one by one, or raised for a 0)
TABLE_RULE = RuleShape(needs=("type",), by_type={
    "sheet_name": RuleShape(optional=()),
    # precision: pandas' round took no other (2.0 and "2" raised at grading); ignore_case: 3a93cae4's
    # sheet_data rules carry it (true), which neither OSWorld's metric nor this reads; sheet_print's lowers
    "sheet_data": RuleShape(needs=_PAIR, optional=(), kinds={"precision": "integer", "ignore_case": "boolean"}),
    "sheet_print": RuleShape(needs=_PAIR, optional=(), kinds={"ignore_case": "boolean"}),
    "sheet_fuzzy": RuleShape(needs=(*_PAIR, "rules"), lists=("rules",), optional=()), "sparkline": _PAIRED,
    "chart": RuleShape(needs=_PAIR, lists=("chart_props",), optional=()), "style": _PROPS, "freeze": _PAIRED,
    "row_props": _PROPS, "col_props": _PROPS, "filter": _PAIRED,
    "pivot_table": RuleShape(needs=_PAIR, lists=("pivot_props",), optional=()),
    "zoom": RuleShape(needs=("sheet_idx", "method", "ref"), optional=()),  # OSWorld's raised without its ref
    "data_validation": RuleShape(needs=("sheet_idx", "dv_props"), lists=("dv_props",), optional=()),
    "check_cell": RuleShape(needs=("sheet_idx", "coordinate", "props"), objects=("props",), optional=())})
#: a sheet_fuzzy rule's check of a cell range
FUZZY_CHECK = RuleShape(needs=("range", "type"), optional=(), kinds={
    "normalization": "pairs", "trim_leadings": "string", "trim_trailings": "string", "ignore_chars": "characters",
    "ignore_case": "boolean", "threshold": "number"})
#: a rule's key -> the names the metric reads in it (cell styles, chart and pivot properties)
_NAMES = {"chart_props": xlsx.CHART_PROPS, "pivot_props": xlsx.PIVOT_PROPS}
#: a sheet index that is no number: R(esult) or E(xpected), then I(ndex) or N(ame)
_SHEET_PREFIXES = ("RI", "RN", "EI", "EN")


def method_problem(method: Any) -> str | None:
    """What ``match_value`` cannot do with ``method``, or None."""
    if not isinstance(method, str):
        return f"must be a string, not {type(method).__name__}"
    if method in METHODS:
        return None
    if method.startswith("re"):  # as match_value reads it: each part after a dot is a flag of re
        bad = [name for name in method.split(".")[1:] if not isinstance(getattr(re, name, None), re.RegexFlag)]
        return f"{method!r} names {bad[0]!r}, no flag of Python's re (I, M, S, X …)" if bad else None
    if method.startswith("approx"):
        try:
            float(method.split(":")[1])
            return None
        except (IndexError, ValueError):
            return f"{method!r} gives no tolerance (approx:0.01)"
    if method.startswith("range.") and len(method) >= 8:
        return None
    return f"{method!r} is no method the metric knows ({_KNOWN})"


def ref_problem(method: str, rule: dict) -> str | None:
    """What ``match_value`` cannot compare with ``rule``'s ``ref`` under a known ``method``
    (it raised TypeError or re.error, or read a string's letters as a list), or None."""
    ref = rule.get("ref")
    if method.startswith("re"):
        if not isinstance(ref, str):
            return f"needs a 'ref' string (a regular expression), not {_kind(ref)}"
        try:  # with the method's flags, as match_value searches (re.X reads another pattern)
            re.compile(ref, re_flags(method))
        except re.error as error:
            return f"'ref' {ref!r} is no regular expression Python's re reads ({error})"
        return None
    if method.startswith("approx"):
        number = isinstance(ref, (int, float)) and not isinstance(ref, bool)
        return None if number else f"needs a 'ref' number, not {_kind(ref)}"
    if method.startswith("range.") or method == "spreadsheet_range":
        return None if isinstance(ref, list) and len(ref) == 2 else f"needs a 'ref' list of two bounds, not {_kind(ref)}"
    if method in ("str_list_eq", "str_set_eq"):
        return None if isinstance(ref, list) else f"needs a 'ref' list of strings, not {_kind(ref)}"
    return None


def _kind(value: Any) -> str:
    return "none" if value is None else f"{type(value).__name__} {value!r}"


def _methods(rules: Any, where: str) -> Iterator[tuple[str, dict]]:
    """(where, rule) of each value rule in ``rules``: a dict of them by name or a list."""
    items = rules.items() if isinstance(rules, dict) else enumerate(rules) if isinstance(rules, list) else ()
    for name, rule in items:
        if isinstance(rule, dict):
            yield f"{where}[{name!r}]", rule


def _first(found: Iterator[tuple[str, dict]], what: str) -> str | None:
    for where, rule in found:
        if "method" not in rule:  # grading raised KeyError on it: the task's error, or a 0 in compare_table
            return f"{what}{where} needs the key 'method'"
        problem = method_problem(rule["method"])
        if problem:
            return f"{what}{where} method {problem}"
        problem = ref_problem(rule["method"], rule)
        if problem:
            return f"{what}{where} method {rule['method']!r} {problem}"
    return None


#: sheet_fuzzy's comparisons of a cell pair; another type compares nothing (OSWorld's kept the
#: previous cell's result, or raised at the first)
FUZZY_TYPES = ("includes", "included_by", "fuzzy_match", "exact_match")


def _fuzzy_problem(checks: Any) -> str | None:
    """What sheet_fuzzy cannot read in its rule's ``rules`` (a list of cell-range checks)."""
    if not isinstance(checks, list) or not checks:
        return "key 'rules' must be a non-empty list"
    for index, check in enumerate(checks):
        where = f"['rules'][{index}]"
        problem = shape_problem(FUZZY_CHECK, check)
        if problem:
            return f"{where} {problem}"
        if check["type"] not in FUZZY_TYPES:
            return f"{where} has the type {check['type']!r}, which sheet_fuzzy does not read " \
                   f"(it reads {', '.join(map(repr, FUZZY_TYPES))})"
        ranges = check["range"].split() if isinstance(check["range"], str) else check["range"]
        bad = next((r for r in ranges if not isinstance(r, str) or not _RANGE.match(r)), None) \
            if isinstance(ranges, list) and ranges else check["range"]
        if bad is not None:  # openpyxl raised on it at grading: a 0
            return f"{where} key 'range' has {bad!r}, no cell range (A1:C5, or a list of them)"
    return None


#: a cell (``check_cell``'s coordinate) and a cell range (a sheet_fuzzy check's), as openpyxl reads them
_CELL = re.compile(r"\$?[A-Z]{1,3}\$?[1-9][0-9]*\Z", re.I)
_RANGE = re.compile(r"\$?[A-Z]{1,3}\$?[1-9][0-9]*(:\$?[A-Z]{1,3}\$?[1-9][0-9]*)?\Z", re.I)


def value_rules_problem(func: str, rules: Any) -> str | None:
    """What in a rule getter's ``rules`` of ``func`` names a method match_value does not know."""
    if not isinstance(rules, dict):
        return None  # its shape is rule_keys'
    if func == "check_json":  # each rule names its path in the file: check_json took one without for a 0
        keyless = next((f"[{side!r}][{n}]" for side in ("expect", "unexpect") if isinstance(rules.get(side), list)
                        for n, rule in enumerate(rules[side]) if isinstance(rule, dict) and "key" not in rule), None)
        if keyless:
            return f"{keyless} needs the key 'key'"
    if func in ("check_thunderbird_prefs", "check_json"):  # each side a dict (prefs) or list (JSON keys)
        return _first((pair for side in ("expect", "unexpect") for pair in _methods(rules.get(side), f"[{side!r}]")), "")
    if func == "check_mp3_meta":
        return _first(_methods(rules, ""), "")
    return None


def _sheet_problem(rule: dict, key: str) -> str | None:
    index = rule[key]
    if isinstance(index, int) and not isinstance(index, bool):
        return None
    if isinstance(index, str) and index[:2] in _SHEET_PREFIXES:
        return None
    return f"key {key!r} is {index!r}, no sheet index (a number, or RI0, RNSheet1, EI0, ENSheet1)"


def _names_problem(rule: dict) -> str | None:
    """A cell style, chart or pivot property of a rule that the metric does not read, or a
    value rule of check_cell's or data_validation's that is no object."""
    kind = rule["type"]
    named = {key: names for key, names in _NAMES.items() if key in rule}
    if kind in ("style", "check_cell"):
        named["props"] = xlsx.CELL_STYLES if kind == "style" else ("value", *xlsx.CELL_STYLES)
    elif kind in ("row_props", "col_props") and "props" in rule:  # getattr of another raised: a 0
        named["props"] = xlsx.DIMENSION_PROPS["row" if kind == "row_props" else "column"]
    for key, names in named.items():
        bad = next((name for name in rule[key] if name not in names), None)
        if bad is not None:
            return f"key {key!r} names {bad!r}, which the metric does not read (it reads {', '.join(map(repr, names))})"
    groups = [("['props']", rule["props"])] if kind == "check_cell" else \
        [(f"['dv_props'][{n}]", props) for n, props in enumerate(rule["dv_props"])] if kind == "data_validation" else []
    for where, group in groups:
        if not isinstance(group, dict):
            return f"{where} must be an object, not {type(group).__name__}"
        bad = next((name for name, value in group.items() if not isinstance(value, dict)), None)
        if bad is not None:
            return f"{where}[{bad!r}] must be an object (a value rule: method, ref), not {type(group[bad]).__name__}"
    return None


def _unexpected_problem(rule: dict) -> str | None:
    """A rule that reads the expected workbook, of a compare_table given none."""
    if rule["type"] == "sheet_name":
        return "of type 'sheet_name' compares the sheets' names with the expected workbook's, and the " \
               "metric is given no 'expected' getter"
    key = next((key for key in ("sheet_idx", *_PAIR) if str(rule.get(key, ""))[:1] == "E"), None)
    return None if key is None else f"key {key!r} is {rule[key]!r}, a sheet of the expected workbook, and the " \
                                    "metric is given no 'expected' getter"


def table_rules_problem(func: str, options: dict, name: str = "options", has_expected: bool = True) -> str | None:
    """What ``compare_table`` cannot read in ``options["rules"]`` (given an expected workbook
    or not), or None; ``name`` is how the message names the options (``evaluator.options[2]``
    of a list)."""
    if func != "compare_table":
        return None
    rules = options.get("rules")
    if not isinstance(rules, list) or not rules:
        return f"{name} 'rules' is missing (the metric reads a non-empty list of rules)" if rules is None else \
            f"{name} 'rules' must be a non-empty list"
    for index, rule in enumerate(rules):
        where = f"{name} 'rules'[{index}]"
        problem = shape_problem(TABLE_RULE, rule) or _names_problem(rule)
        if problem:
            return f"{where} {problem}"
        problem = next((p for key in ("sheet_idx", *_PAIR) if key in rule
                        for p in [_sheet_problem(rule, key)] if p), None)
        if problem is None and not has_expected:  # its sheets were None: every grading's 0
            problem = _unexpected_problem(rule)
        if problem is None and rule["type"] == "sheet_fuzzy":
            problem = _fuzzy_problem(rule["rules"])
        if problem is None and rule["type"] == "check_cell" and not (
                isinstance(rule["coordinate"], str) and _CELL.match(rule["coordinate"])):  # the cell read was a 0
            problem = f"key 'coordinate' is {rule['coordinate']!r}, no cell (A1)"
        if problem:
            return f"{where} {problem}"
        found = {"zoom": lambda: iter([("", rule)]),
                 "check_cell": lambda: _methods(rule["props"], "['props']"),
                 "data_validation": lambda: (pair for n, props in enumerate(rule["dv_props"])
                                             for pair in _methods(props, f"['dv_props'][{n}]"))}.get(rule["type"])
        problem = _first(found(), where) if found else None
        if problem:
            return problem
    return None
