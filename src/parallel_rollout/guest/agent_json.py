"""The guest agent's JSON: ``json.loads`` and ``json.dumps`` without importing ``json``.

``json`` compiles its regular expressions at import (``re``, ``enum``, ``functools``: ~10 ms
of CPU at every agent start, that is at every ``process`` VM reset). Its C accelerator
``_json``, which ``json`` itself calls for a one-shot ``dumps`` and for every ``loads``, needs
none of it: :func:`loads` and :func:`dumps` call it with what ``json``'s defaults give it,
so they answer what ``json.loads`` / ``json.dumps`` answer (``tests/test_agent_json.py``
compares them). A document ``_json`` does not read, a malformed one included, goes to
``json`` itself, which raises its own ``JSONDecodeError`` (a ``ValueError``) with its own
message (the error costs the import, the well-formed requests do not); so does everything
on a Python without ``_json``.

Standard library only: this file is copied next to ``server.py`` into every guest.
"""

from __future__ import annotations

_WHITESPACE = " \t\n\r"


class _Defaults:
    """What ``json.JSONDecoder()`` gives its C scanner."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = {"NaN": float("nan"), "Infinity": float("inf"),
                      "-Infinity": float("-inf")}.__getitem__


def _default(value):
    raise TypeError(f"Object of type {value.__class__.__name__} is not JSON serializable")


try:
    import _json

    _scan = _json.make_scanner(_Defaults())
    # markers, default, encoder, indent, separators, sort_keys, skipkeys, allow_nan: dumps'
    _encode = _json.make_encoder(None, _default, _json.encode_basestring_ascii, None,
                                 ": ", ", ", False, False, True)
except (ImportError, AttributeError, TypeError):  # not CPython, or a _json of another shape
    _scan = _encode = None


def loads(data: bytes | str):
    """``json.loads(data)``."""
    # a BOM or NULs in the first bytes: UTF-8-sig, 16 or 32, which json detects
    if _scan is None or (isinstance(data, bytes) and (data[:3] == b"\xef\xbb\xbf"
                                                      or b"\x00" in data[:4])):
        return _json_module().loads(data)
    text = data.decode("utf-8", "surrogatepass") if isinstance(data, bytes) else data
    start = len(text) - len(text.lstrip(_WHITESPACE))
    try:
        value, end = _scan(text, start)
    except Exception:  # noqa: BLE001 - json says where and what
        # (no value at the start is StopIteration; the C scanner's own errors need
        # json.decoder loaded, and are a SystemError until it is)
        return _json_module().loads(text)
    if text[end:].strip(_WHITESPACE):  # extra data after the value
        return _json_module().loads(text)
    return value


def dumps(value) -> str:
    """``json.dumps(value)``."""
    if _encode is None:
        return _json_module().dumps(value)
    return "".join(_encode(value, 0))


def _json_module():
    import json

    return json
