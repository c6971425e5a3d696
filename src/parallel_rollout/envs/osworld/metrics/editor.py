"""Metrics on an editor's files and settings (OSWorld's VS Code tasks, and text answers):
JSON settings and keybindings, text files, config text, installed extensions, a task's own
Python test suite, zip archives, an HTML page's background image, result files.

``check_python_file_by_test_suite`` runs the task's test file in a separate Python process
(OSWorld imports it into its own): its ``test_function_name`` (default ``test``) must return
true (or a number, clipped to [0, 1]).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import zipfile
from difflib import SequenceMatcher
from pathlib import Path
from typing import Any

#: seconds a task's test suite may run
TEST_SUITE_TIMEOUT_S = 120.0


def _json_or_none(path: str, skip_first_line: bool = False):
    try:
        with open(path) as handle:
            if skip_first_line:
                handle.readline()
            return json.load(handle)
    except Exception:
        return None


def check_json_keybindings(result: str, expected: dict, **options: Any) -> float:
    """1 when the keybindings file (JSON, perhaps after a comment line) lists the expected
    binding object."""
    for skip in (False, True):
        data = _json_or_none(result, skip)
        if data is not None and type(data) is list:
            return float(expected["expected"] in data)
    return 0.0


def check_json_settings(result: str | None, expected: dict, **options: Any) -> float:
    """1 when the settings file has every expected key with its value."""
    if not result:
        return 0.0
    try:
        with open(result) as handle:
            data = json.load(handle)
    except Exception:
        return 0.0
    return float(all(key in data and data[key] == value for key, value in expected["expected"].items()))


def _blank_folded(text: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"[\t\n]", " ", text).strip())


def compare_text_file(result: str | None, expected: str, **options: Any) -> float:
    """1 when two files hold the same text (``ignore_blanks``, ``ignore_case`` options)."""
    if not result:
        return 0.0
    with open(result) as a, open(expected) as b:
        mine, theirs = a.read(), b.read()
    if options.get("ignore_blanks", False):
        mine, theirs = _blank_folded(mine), _blank_folded(theirs)
    if options.get("ignore_case", False):
        mine, theirs = mine.lower(), theirs.lower()
    return float(mine == theirs)


def _within(expected: Any, actual: Any) -> bool:
    """Every key of the ``expected`` JSON object is in ``actual`` with a value within it;
    anything else (lists included) equal."""
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(
            key in actual and _within(value, actual[key]) for key, value in expected.items())
    return expected == actual


def compare_config(result: str | None, rules: dict, **options: Any) -> float:
    """1 when the file's text is exactly ``rules["expected"]``; with ``containment_ok`` (OSWorld's
    newer source reads it, desktop-env 1.0.2 does not; the real VS Code theme task sets it),
    when the expected JSON's keys and values are in the file's JSON (other settings, another
    layout), or, if either text is not JSON, when the expected text is in the file's."""
    if not result:
        return 0.0
    with open(result) as handle:
        text = handle.read()
    expected = rules["expected"]
    if not options.get("containment_ok", False):
        return float(text == expected)
    try:
        return float(_within(json.loads(expected), json.loads(text)))
    except ValueError:
        return float(bool(expected.strip()) and expected.strip() in text)


def compare_answer(result: Any, rules: dict, **options: Any) -> float:
    """1 when a non-empty ``result`` equals ``rules["expected"]``."""
    return float(bool(result) and result == rules["expected"])


def is_extension_installed(result: str, rules: dict, **options: Any) -> float:
    """``type`` ``contain`` / ``not_contain``: whether ``rules["expected"]`` is in the
    extension listing."""
    if rules["type"] == "contain":
        return float(rules["expected"] in result)
    if rules["type"] == "not_contain":
        return float(rules["expected"] not in result)
    raise NotImplementedError(f"is_extension_installed type {rules['type']!r}")


_RUN_SUITE = """
import importlib.util, json, sys
path, name = sys.argv[1], sys.argv[2]
spec = importlib.util.spec_from_file_location("osworld_task_test_suite", path)
module = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = module
try:
    spec.loader.exec_module(module)
    test = getattr(module, name)
except Exception:
    print(json.dumps(0.0)); sys.exit(0)
if not callable(test):
    print(json.dumps(0.0)); sys.exit(0)
try:
    value = test()
except Exception:
    print(json.dumps(0.0)); sys.exit(0)
if isinstance(value, bool):
    score = 1.0 if value else 0.0
elif isinstance(value, (int, float)):
    score = max(0.0, min(1.0, float(value)))
else:
    score = 1.0 if value else 0.0
print(json.dumps(score))
"""


def check_python_file_by_test_suite(result: Any, test_file: str | None, **options: Any) -> float:
    """The score the task's test function gives (see the module doc); 0 when the file is
    missing, fails to load, lacks the function or the function raises."""
    if not test_file:
        return 0.0
    path = Path(test_file).resolve()
    if not path.is_file():
        return 0.0
    try:
        run = subprocess.run([sys.executable, "-c", _RUN_SUITE, str(path), options.get("test_function_name", "test")],
                             cwd=path.parent, capture_output=True, text=True, timeout=TEST_SUITE_TIMEOUT_S,
                             env={"PYTHONPATH": str(path.parent), "PATH": "/usr/bin:/bin"})
        return float(json.loads(run.stdout.strip().splitlines()[-1]))
    except (subprocess.TimeoutExpired, ValueError, IndexError):
        return 0.0


def _pdf_text(data: bytes) -> str:
    from io import BytesIO

    from pypdf import PdfReader

    return "".join(page.extract_text() for page in PdfReader(BytesIO(data)).pages)


def compare_zip_files(result: str | None, expected: str, **options: Any) -> float:
    """1 when both archives hold the same names with the same bytes (PDFs: texts at least
    95% similar)."""
    if not result:
        return 0.0
    with zipfile.ZipFile(result) as first, zipfile.ZipFile(expected) as second:
        names = set(first.namelist())
        if names != set(second.namelist()):
            return 0.0
        for name in names:
            a, b = first.read(name), second.read(name)
            if name.lower().endswith(".pdf"):
                if SequenceMatcher(None, _pdf_text(a), _pdf_text(b)).ratio() < 0.95:
                    return 0.0
            elif a != b:
                return 0.0
    return 1.0


def check_html_background_image(result: str | None, rule: dict | None = None, **options: Any) -> float:
    """1 when a <style> of the page sets ``background-image: url('<value>')``."""
    from bs4 import BeautifulSoup

    if not result:
        return 0.0
    with open(result) as handle:
        soup = BeautifulSoup(handle.read(), "html.parser")
    wanted = f"background-image: url('{rule['value']}')"
    return float(any(wanted in style.text for style in soup.find_all("style")))


def compare_result_files(result: str | None, expected: str | None, **options: Any) -> float:
    """1 when two files hold the same stripped text, or, when the expected one is a number,
    the result contains it or is within 1e-4 of it."""
    if not result or not expected:
        return 0.0
    with open(result) as a, open(expected) as b:
        mine, theirs = a.read().strip(), b.read().strip()
    try:
        number = float(theirs)
        if theirs in mine:
            return 1.0
        return float(abs(float(mine) - number) < 1e-4)
    except Exception:
        return float(mine == theirs)


METRICS = {f.__name__: f for f in (
    check_json_keybindings, check_json_settings, compare_text_file, compare_config, compare_answer,
    is_extension_installed, check_python_file_by_test_suite, compare_zip_files,
    check_html_background_image, compare_result_files)}
