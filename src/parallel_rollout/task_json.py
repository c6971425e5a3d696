"""One task file's JSON as a run can keep it: ``parse_json`` reads a file or a line and
refuses, naming ``file:line``, what ``results.jsonl`` could not store (a number JSON does not
have, a number past float or Python's digit limit, text with a lone surrogate); a syntax
error says its line and column; ``as_written``, ``kinds_said``, ``value_said``, ``kind_of`` and
``not_strings`` say a field's value and kinds in the file's words, JSON's (``JSON_WORDS``, one table of them). Shared by the task loaders (``tasks.py``,
``tasks_osworld.py``) and the modes' field checks (``envs.base.require``, OSWorld's rule and step checks).
"""

from __future__ import annotations

import json
import numbers
import re
import reprlib
from pathlib import Path
from typing import Any

from .errors import TaskFileError


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


def parse_json(text: str, path: Path | str, first_line: int) -> Any:
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
        raise TaskFileError(f"{path}:{first_line + exc.lineno - 1}: invalid JSON: {exc.msg} "
                            f"(column {exc.colno})") from None
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


def as_written(value: Any) -> str:
    """A field's value in an error, as the task file wrote it (JSON: ``"7"``, ``true``), cut
    at 80 characters."""
    return json.dumps(value, ensure_ascii=False, default=str)[:80]


#: how a task file's value kinds are said: in JSON's words, as the file writes them
JSON_WORDS = {dict: "an object", list: "a list", str: "a string", bool: "true or false", int: "a whole number",
              float: "a number"}


def kind_of(value: Any) -> str:
    """A value's kind as a refusal names it beside the value (``5, a number``, ``true, a
    boolean``): JSON_WORDS' words for an object, a list and a string, "null", "a boolean" (JSON_WORDS'
    "true or false" says what a field must be, not what a value is), and "a number" for any number."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return next((JSON_WORDS[kind] for kind in (dict, list, str) if isinstance(value, kind)), "a number")


def kinds_said(kinds: tuple[type, ...]) -> str:
    """``(str, int, float)`` as ``a string or a number``."""
    words = [JSON_WORDS.get(kind, kind.__name__) for kind in kinds if not (kind is int and float in kinds)]
    return " or ".join(dict.fromkeys(words))


def value_said(value: Any) -> str:
    """A task file's value as the refusal names it: null, true, false, a number as it is
    (``2.5``), else its kind (a string, a list, an object)."""
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, numbers.Number):
        return reprlib.repr(value)
    return JSON_WORDS.get(type(value), type(value).__name__)


def not_strings(name: str, items: list) -> str | None:
    """Why field ``name``'s list is no list of strings, naming its first item that is none
    ("field 'tags' must be a list of strings; its item 2 is 1"), else None."""
    index, item = next(((n, i) for n, i in enumerate(items, start=1) if not isinstance(i, str)), (0, ""))
    return f"field {name!r} must be a list of strings; its item {index} is {value_said(item)}" if index else None
