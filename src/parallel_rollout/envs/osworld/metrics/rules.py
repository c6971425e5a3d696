"""Value rules shared by several metrics: ``{"method": M, "ref": R}`` matched against a value
(regular expressions with flags, comparisons, ``approx:T``, ranges, spreadsheet ranges, string
lists and sets), and record patterns.

Methods, as OSWorld's task files write them: ``re`` / ``re.I.M…`` (search), ``eq ne lt le gt
ge``, ``approx:<tolerance>``, ``range.<l><r>`` (``t`` strict, ``e`` inclusive, e.g.
``range.te [0, 2]`` is 0 < x <= 2), ``spreadsheet_range [inner, outer]`` (the value, a cell
range set, lies between both), ``str_list_eq`` / ``str_set_eq`` (the value split on commas).
"""

from __future__ import annotations

import operator
import re
from typing import Any, Mapping

_COMPARE = {"eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "le": operator.le,
            "gt": operator.gt, "ge": operator.ge}


def re_flags(method: str) -> int:
    """The flags of Python's re an ``re[.FLAG…]`` method names after its dots."""
    flags = 0
    for name in method.split(".")[1:]:
        flags |= getattr(re, name)
    return flags


def match_value(value: Any, rule: Mapping[str, Any]) -> bool:
    """Whether ``value`` satisfies ``rule``; an unknown method raises NotImplementedError."""
    method, ref = rule["method"], rule.get("ref")
    if method.startswith("re"):
        return re.search(ref, value, re_flags(method)) is not None
    if method in _COMPARE:
        return _COMPARE[method](value, ref)
    if method.startswith("approx"):
        tolerance = float(method.split(":")[1])
        try:
            number = float(value)
        except (TypeError, ValueError):
            return False
        return abs(number - ref) <= tolerance
    if method == "spreadsheet_range":
        from openpyxl.worksheet.cell_range import MultiCellRange

        inner, outer = MultiCellRange(ref[0]), MultiCellRange(ref[1])
        return all(r in value for r in inner) and all(r in outer for r in value)
    if method.startswith("range."):
        low = operator.lt if method[6] == "t" else operator.le
        high = operator.lt if method[7] == "t" else operator.le
        return low(ref[0], value) and high(value, ref[1])
    if method in ("str_list_eq", "str_set_eq"):
        kind = list if method == "str_list_eq" else set
        return kind(value.strip("\"'").split(",")) == kind(ref)
    raise NotImplementedError(f"unknown rule method {method!r}")


def match_record(pattern: Mapping[str, Any], item: Mapping[str, Any]) -> bool:
    """Every key of ``pattern`` is in ``item`` with the same value."""
    return all(key in item and item[key] == value for key, value in pattern.items())
