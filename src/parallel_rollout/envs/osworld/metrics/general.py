"""General metrics over values, text files, JSON/YAML, CSV records, SQLite and the
accessibility tree: exact and fuzzy matches, include/exclude lists, regex line checks, JSON
key paths matched against value rules.

Each is called as OSWorld calls it: ``metric(result, expected_or_rules, **options)`` and gives
a float in [0, 1]. ``rapidfuzz``, ``lxml`` and ``pyyaml`` (the ``[osworld]`` extra) are imported
only by the metrics that use them.
"""

from __future__ import annotations

import csv
import difflib
import json
import os
import re
import sqlite3
from typing import Any

from .rules import match_record, match_value


def exact_match(result: Any, rules: dict, **options) -> float:
    """1 when ``result`` equals ``rules["expected"]``."""
    return float(result == rules["expected"])


def match_in_list(result: Any, rules: dict, **options) -> float:
    """1 when ``result`` is one of ``rules["expected"]``."""
    return float(result in rules["expected"])


def is_in_list(result: Any, rules: dict, **options) -> float:
    """1 when ``rules["expected"]`` is in ``result``."""
    return float(rules["expected"] in result)


def literal_match(result: Any, expected: Any, **options) -> float:
    """String (``type: str``) or list (``type: list``) equality, ``ignore_case`` optional."""
    kind, fold = options.get("type", "str"), options.get("ignore_case", False)

    def text(value):
        return str(value).lower() if fold else str(value)

    if kind == "str":
        return float(text(result) == text(expected))
    if kind == "list":
        if not isinstance(result, (list, tuple)) or not isinstance(expected, (list, tuple)) \
                or type(result) not in (list, tuple) or type(expected) not in (list, tuple) \
                or len(result) != len(expected):
            return 0.0
        return float([text(v) for v in result] == [text(v) for v in expected])
    raise NotImplementedError(f"literal_match type {kind!r}")


def fuzzy_match(result: str, rules: dict, **options) -> float:
    """rapidfuzz's ratio of ``result`` and ``rules["expected"]``, in [0, 1]."""
    from rapidfuzz import fuzz

    return fuzz.ratio(result, rules["expected"]) / 100.0


def check_include_exclude(result: Any, rules: dict, **options) -> float:
    """1 when every ``include`` string is in ``result`` and no ``exclude`` string is."""
    if result is None:
        return 0.0
    return float(all(s in result for s in rules.get("include", []))
                 and all(s not in result for s in rules.get("exclude", [])))


def diff_text_file(result: str | None, expected: str, **options) -> float:
    """difflib's similarity ratio of the two files' lines."""
    if result is None:
        return 0.0
    with open(result) as a, open(expected) as b:
        return difflib.SequenceMatcher(a=a.read().splitlines(), b=b.read().splitlines()).ratio()


def check_list(result: str | None, rules: dict, **options) -> float:
    """1 when each ``expect`` regex matches some line of the file and no ``unexpect`` regex
    matches any line."""
    if result is None:
        return 0.0
    wanted = [re.compile(p) for p in rules.get("expect", [])]
    banned = [re.compile(p) for p in rules.get("unexpect", [])]
    seen = [False] * len(wanted)
    clean = True
    with open(result) as handle:
        for line in handle:
            seen = [s or p.search(line) is not None for s, p in zip(seen, wanted)]
            clean = clean and not any(p.search(line) for p in banned)
    return float(all(seen) and clean)


def check_csv(result: str | None, rules: dict, **options) -> float:
    """1 when each ``expect`` record pattern matches some CSV row and no ``unexpect`` one does."""
    if result is None:
        return 0.0
    wanted, banned = rules.get("expect", []), rules.get("unexpect", [])
    seen = [False] * len(wanted)
    clean = True
    with open(result) as handle:
        for row in csv.DictReader(handle):
            seen = [s or match_record(p, row) for s, p in zip(seen, wanted)]
            clean = clean and not any(match_record(p, row) for p in banned)
    return float(all(seen) and clean)


def run_sqlite3(result: str, rules: dict, **options) -> float:
    """The first column of the first row ``rules["sql"]`` gives on the database (0 if null)."""
    connection = sqlite3.connect(result)
    try:
        return float(connection.execute(rules["sql"]).fetchone()[0] or 0)
    finally:
        connection.close()


def _load_structured(path: str, is_yaml: bool):
    """The parsed file, or None when it cannot be read or parsed (or YAML holds nothing)."""
    try:
        with open(path, encoding="utf-8") as handle:
            if is_yaml:
                import yaml

                return yaml.safe_load(handle)
            return json.load(handle)
    except Exception:
        return None


def check_json(result: str | None, rules: dict, is_yaml: bool = False, **options) -> float:
    """Key paths of a JSON (or YAML) file against value rules: every ``expect`` rule's path
    must exist and match; no ``unexpect`` rule may match (a missing path is ``None``)."""
    if result is None or not os.path.exists(result):
        return 0.0
    data = _load_structured(result, is_yaml)
    if data is None and (is_yaml or not _parses_to_null(result)):
        return 0.0
    ok = True
    for rule in rules.get("expect", {}):
        try:
            found, value = _walk(data, rule["key"])
            if not found:
                return 0.0
            ok = ok and match_value(value, rule)
        except Exception:
            return 0.0
    for rule in rules.get("unexpect", {}):
        try:
            ok = ok and not match_value(_walk(data, rule["key"])[1], rule)
        except Exception:
            return 0.0
    return float(ok)


def _walk(data: Any, keys) -> tuple[bool, Any]:
    """(True, the value at the key path) or (False, None) when a key is missing."""
    for key in keys:
        try:
            data = data[key]
        except (KeyError, TypeError):
            return False, None
    return True, data


def _parses_to_null(path: str) -> bool:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle) is None
    except Exception:
        return False


def check_direct_json_object(result: Any, rules: dict, **options) -> float:
    """The JSON object ``result`` (a dict, or JSON text in which ``'`` stands for ``"``) has
    every ``rules["expected"]`` key with that value; ``expect_in_result``: a string value is
    a substring of the result's, a list value holds one acceptable value."""
    if isinstance(result, str):
        result = json.loads(result.strip().replace("'", '"'))
    if result is None:
        return 0.0
    try:
        expected = rules.get("expected", {})
        if expected and any(v == "__EVALUATION_FAILED__" for v in expected.values()):
            return 0.0
    except Exception:
        return 0.0
    try:
        expected = rules["expected"]
        if not rules.get("expect_in_result", False):
            for key in expected:
                want, got = expected.get(key), result.get(key)
                if expected.get("ignore_list_order", False):
                    if sorted(want) != sorted(result.get(key)):
                        return 0.0
                elif want != got:
                    return 0.0
            return 1.0
        for key in expected:
            want, got = expected.get(key), result.get(key)
            if isinstance(want, list):
                if not any((isinstance(got, list) and w in got) or (isinstance(got, str) and w == got)
                           for w in want):
                    return 0.0
            elif isinstance(want, str):
                if want not in got:
                    return 0.0
            else:
                return 0.0
        return 1.0
    except Exception:
        return 0.0


def file_contains(result: str | None, config: dict, **options) -> float:
    """1 when the file holds every string of ``config["expected"]``."""
    if not result:
        return 0.0
    try:
        with open(result) as handle:
            text = handle.read()
        return float(all(s in text for s in config["expected"]))
    except Exception:
        return 0.0


_TIME = re.compile(r"([01]\d|2[0-3]):[0-5]\d:([0-5]\d|60)")


def check_line_number(result: str | None, line_number: dict, **options) -> float:
    """1 when the number of lines holding a HH:MM:SS time equals ``line_number["expected"]``."""
    if result is None or not os.path.isfile(result):
        return 0.0
    try:
        with open(result) as handle:
            count = sum(1 for line in handle if _TIME.search(line))
        return float(count == int(line_number["expected"]))
    except Exception:
        return 0.0


def compare_terminal_and_txt(result: str | None, terminal_output: str | None, **options) -> float:
    """1 when the terminal output equals the text file's content."""
    if not result or not terminal_output:
        return 0.0
    with open(result) as handle:
        return float(handle.read() == terminal_output)


def _python_text(text: str) -> str:
    lines = text.splitlines()
    start = 0
    while start < min(len(lines), 3):
        head = lines[start].strip()
        if head.startswith(("#!", "# -*- coding:", "# coding:", "# coding=")):
            start += 1
            continue
        break
    return "\n".join(line.expandtabs(4).rstrip() for line in lines[start:] if line.strip())


def compare_python_pure_text(result: str | None, expected: str | None, **options) -> float:
    """1 when two Python files match after dropping a leading shebang/coding line, blank
    lines and trailing blanks (tabs as 4 spaces)."""
    if not result or not expected:
        return 0.0
    try:
        with open(result, encoding="utf-8") as a, open(expected, encoding="utf-8") as b:
            return float(_python_text(a.read()) == _python_text(b.read()))
    except Exception:
        return 0.0


_A11Y_NS = {
    "ubuntu": {name: f"https://accessibility.ubuntu.example.org/ns/{path}" for name, path in (
        ("st", "state"), ("attr", "attributes"), ("cp", "component"), ("doc", "document"),
        ("docattr", "document/attributes"), ("txt", "text"), ("val", "value"), ("act", "action"))},
}


def check_accessibility_tree(result: str, rules: list, osname: str = "ubuntu", **options) -> float:
    """Product over rules of the best text match among the elements an ``xpath`` or CSS
    ``selectors`` pick in the accessibility-tree XML (0 when a rule picks nothing)."""
    import lxml.etree
    from lxml.cssselect import CSSSelector
    from rapidfuzz import fuzz

    namespaces = _A11Y_NS[osname]
    tree = lxml.etree.fromstring(result)
    score = 1.0
    for rule in rules:
        if "xpath" in rule:
            elements = tree.xpath(rule["xpath"], namespaces=namespaces)
        elif "selectors" in rule:
            elements = CSSSelector(", ".join(rule["selectors"]), namespaces=namespaces)(tree)
        else:
            raise ValueError("an accessibility rule needs 'xpath' or 'selectors'")
        if not elements:
            return 0.0
        if "text" in rule:
            want = rule["text"]
            if rule["exact"]:
                best = max([0] + [want == (e.text or None) for e in elements])
            else:
                best = max([0] + [fuzz.ratio(want, e.text or None) / 100.0 for e in elements])
        else:
            best = 1.0
        score *= best
    return float(score)


def infeasible(*args, **options) -> float:
    """Scored by the env: 1 iff the last action was FAIL."""
    raise AssertionError("infeasible is scored by the env, not called")


METRICS = {f.__name__: f for f in (
    exact_match, match_in_list, is_in_list, literal_match, fuzzy_match, check_include_exclude,
    diff_text_file, check_list, check_csv, run_sqlite3, check_json, check_direct_json_object,
    file_contains, check_line_number, compare_terminal_and_txt, compare_python_pure_text,
    check_accessibility_tree, infeasible)}
