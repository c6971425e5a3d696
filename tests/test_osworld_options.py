"""Every option OSWorld's real tasks give a metric is one the metric reads.

Each metric takes ``**options``, so an option the port does not read is silently ignored and a
task scores as if it had not set it (a correct deck scored 0 that way while
``compare_pptx_files`` ignored ``examine_run_count``). The audit reads each metric's source:
an option is read when it is a parameter of the metric, or a string the metric (or a helper
of the osworld package it calls, or a constant it names) spells out, or an f-string prefix
of it followed by such a string (``f"examine_{name}"`` over ``_ON``). The options that
neither desktop-env 1.0.2 nor OSWorld's newer source reads are listed in :data:`DEAD`.
"""

from __future__ import annotations

import ast
import inspect
import json
import textwrap

import pytest

from conftest import OSWORLD_EXAMPLES
from parallel_rollout.envs.osworld.evaluators import normalized
from parallel_rollout.envs.osworld.metrics import METRICS

#: (metric, option) pairs the real tasks give that OSWorld itself never reads, with where
DEAD = {
    ("compare_pptx_files", "_note"): "a comment in 7ae48c60's options",
    ("compare_pptx_files", "examine_shape_lenient_height"): "04578141, which also sets examine_shape false",
    ("compare_references", "content_only"): "2c1ebcd7; compare_docx_files reads it, compare_references does not",
}


def task_options() -> dict[tuple[str, str], list[str]]:
    """(metric, option key) -> the real tasks (ids) that give it."""
    pairs: dict[tuple[str, str], list[str]] = {}
    for path in sorted((OSWORLD_EXAMPLES / "examples").glob("*/*.json")):
        evaluator = json.loads(path.read_text()).get("evaluator") or {}
        if "func" not in evaluator:
            continue
        for func, _result, _expected, options in normalized(evaluator):
            for key in options:
                ids = pairs.setdefault((func, key), [])
                if path.stem not in ids:
                    ids.append(path.stem)
    return pairs


def _strings(value, into: set[str]) -> None:
    if isinstance(value, str):
        into.add(value)
    elif isinstance(value, (tuple, list, set, frozenset)):
        for item in value:
            _strings(item, into)
    elif isinstance(value, dict):
        for item in value:
            _strings(item, into)


def spelled(func, strings: set[str], prefixes: set[str], seen: set) -> None:
    """The strings and f-string prefixes ``func``'s source spells, with its package helpers'."""
    if func in seen:
        return
    seen.add(func)
    tree = ast.parse(textwrap.dedent(inspect.getsource(func)))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.body
                  and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            strings.add(node.value)
        elif isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
            prefixes.add(node.values[0].value)
        elif isinstance(node, ast.Name):
            target = func.__globals__.get(node.id)
            if inspect.isfunction(target) and target.__module__.startswith("parallel_rollout.envs.osworld"):
                spelled(target, strings, prefixes, seen)
            else:
                _strings(target, strings)


def reads(metric, key: str) -> bool:
    parameters = inspect.signature(metric).parameters
    if key in parameters and parameters[key].kind is not inspect.Parameter.VAR_KEYWORD:
        return True
    strings: set[str] = set()
    prefixes: set[str] = set()
    spelled(metric, strings, prefixes, set())
    return key in strings or any(key.startswith(p) and key[len(p):] in strings for p in prefixes)


needs_tasks = pytest.mark.skipif(OSWORLD_EXAMPLES is None, reason="OSWorld's task set is not beside the checkout")


@needs_tasks
def test_every_option_a_real_task_gives_is_read_by_its_metric():
    pairs = task_options()
    assert len(pairs) > 40  # the 369 tasks give about 46 pairs; a walk that found none proves nothing
    unread = {f"{func}: {key} ({', '.join(ids)})" for (func, key), ids in pairs.items()
              if (func, key) not in DEAD and not reads(METRICS[func], key)}
    assert not unread, sorted(unread)


@needs_tasks
def test_the_dead_options_are_still_given_and_still_unread():
    """A dead option no task gives any more, or one the port has come to read, leaves the list."""
    pairs = task_options()
    for func, key in DEAD:
        assert (func, key) in pairs, (func, key)
        assert not reads(METRICS[func], key), (func, key)


def test_the_audit_sees_an_option_that_only_a_sibling_metric_reads_as_unread():
    # content_only is spelled in docs.py, by compare_docx_files: module-wide search would pass it
    assert reads(METRICS["compare_docx_files"], "content_only")
    assert not reads(METRICS["compare_references"], "content_only")
    assert reads(METRICS["compare_pptx_files"], "examine_run_count")  # f"examine_{name}" over _ON
    assert not reads(METRICS["compare_pptx_files"], "examine_nothing_such")

