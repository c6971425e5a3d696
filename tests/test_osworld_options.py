"""The options each metric reads (envs/osworld/option_keys.py's :data:`OPTIONS`), against
each metric's code and OSWorld's real tasks, and a task's option no metric reads refused at load.

Each metric takes ``**options``, so an option the port does not read was silently ignored and a
task scored as if it had not set it (a correct deck scored 0 that way while
``compare_pptx_files`` ignored ``examine_run_count``; a user's typo ``examine_run_cout`` the
same). The audit reads each metric's source: an option is read when it is a parameter of the
metric, or a string the metric (or a helper of the osworld package it calls, or a constant it
names) spells out, or an f-string prefix of it followed by such a string (``f"examine_{name}"``
over ``_ON``). The options that neither desktop-env 1.0.2 nor OSWorld's newer source reads are
option_keys' :data:`DEAD`, which keep loading.
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
from parallel_rollout.envs.osworld.option_keys import DEAD, OPTIONS, option_problem


def _given_options():
    """(task id, metric, option key, its value) of each option the real tasks give."""
    for path in sorted((OSWORLD_EXAMPLES / "examples").glob("*/*.json")):
        evaluator = json.loads(path.read_text()).get("evaluator") or {}
        if "func" not in evaluator:
            continue
        for func, _result, _expected, options in normalized(evaluator):
            for key, value in options.items():
                yield path.stem, func, key, value


def task_options() -> dict[tuple[str, str], list[str]]:
    """(metric, option key) -> the real tasks (ids) that give it."""
    pairs: dict[tuple[str, str], list[str]] = {}
    for task_id, func, key, _value in _given_options():
        ids = pairs.setdefault((func, key), [])
        if task_id not in ids:
            ids.append(task_id)
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
    refused = {f"{func}: {key}: {problem}" for _, func, key, value in _given_options() if func != "compare_archive"
               for problem in [option_problem(func, {key: value})] if problem}
    assert not refused, sorted(refused)  # compare_archive's are read with their file_type, at load


@needs_tasks
def test_the_dead_options_are_still_given_and_still_unread():
    """A dead option no task gives any more, or one the port has come to read, leaves the list."""
    pairs = task_options()
    for func, key in DEAD:
        assert (func, key) in pairs, (func, key)
        assert not reads(METRICS[func], key), (func, key)
        assert key not in OPTIONS.get(func, ()), (func, key)


def test_the_audit_sees_an_option_that_only_a_sibling_metric_reads_as_unread():
    # content_only is spelled in docs.py, by compare_docx_files: module-wide search would pass it
    assert reads(METRICS["compare_docx_files"], "content_only")
    assert not reads(METRICS["compare_references"], "content_only")
    assert reads(METRICS["compare_pptx_files"], "examine_run_count")  # f"examine_{name}" over _ON
    assert not reads(METRICS["compare_pptx_files"], "examine_nothing_such")



def _keys_read(func, keys: set[str], seen: set, dict_name: str = "options") -> None:
    """The keys ``func`` reads from its dict ``dict_name`` (``options.get(K)``, ``.pop(K)``,
    ``options[K]``, ``f"examine_{name}"`` over a constant's names), and those of the package
    helpers it hands that dict to (a getter's ``config`` the same)."""
    if func in seen:
        return
    seen.add(func)
    tree = ast.parse(textwrap.dedent(inspect.getsource(func)))
    loops: dict[str, list[str]] = {}  # a comprehension's variable -> the names of the constants it runs over
    for node in ast.walk(tree):
        for gen in getattr(node, "generators", ()):
            if isinstance(gen.target, ast.Name) and isinstance(gen.iter, ast.Name):
                loops.setdefault(gen.target.id, []).extend(func.__globals__.get(gen.iter.id) or ())

    def spelled(node) -> list[str]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value]
        if isinstance(node, ast.JoinedStr) and len(node.values) == 2 and isinstance(node.values[1].value, ast.Name):
            return [node.values[0].value + name for name in loops[node.values[1].value.id]]
        raise AssertionError(f"{func.__name__} reads an option the audit cannot spell: {ast.dump(node)}")

    def is_options(node) -> bool:
        return isinstance(node, ast.Name) and node.id == dict_name

    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("get", "pop") \
                and is_options(node.func.value):
            keys.update(spelled(node.args[0]))
        elif isinstance(node, ast.Subscript) and is_options(node.value):
            keys.update(spelled(node.slice))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and (
                any(is_options(arg) for arg in node.args) or any(is_options(kw.value) for kw in node.keywords)):
            helper = func.__globals__.get(node.func.id)
            if inspect.isfunction(helper) and helper.__module__.startswith("parallel_rollout.envs.osworld"):
                _keys_read(helper, keys, seen, dict_name)


def test_the_options_listed_are_the_ones_each_metrics_code_reads():
    """OPTIONS, which the load checks a task's options against, lists every key a metric's code
    reads from ``**options`` (a key it lacks would refuse a right task) and no key the code does
    not read (one it has would let that key's typo, or a dead key, load)."""
    assert set(OPTIONS) <= set(METRICS), set(OPTIONS) - set(METRICS)
    found = {}
    for name, metric in METRICS.items():
        keys: set[str] = set()
        _keys_read(metric, keys, set())
        if keys:
            found[name] = keys
    assert len(found) >= 15 and "examine_run_count" in found["compare_pptx_files"], found  # the walk saw them
    assert found == {name: set(keys) for name, keys in OPTIONS.items()}
    unread = [(name, key) for name, keys in OPTIONS.items() for key in keys if not reads(METRICS[name], key)]
    assert not unread, unread


def test_an_option_its_metric_does_not_read_is_refused_at_load_naming_the_nearest(tmp_path):
    """A typo of an option (``examine_run_cout``), or an option another metric reads, loaded and
    was ignored: the check it meant to switch off ran, the score was wrong, and nothing said
    why. The folder is refused as it loads (exit 2), naming the file, the metric, the key and
    the key it likely means; compare_archive's options are its file type's metric's too."""
    from test_osworld_folder_cli import copied
    from test_osworld_rules import assert_refused, broken_copy

    folder = copied(tmp_path)
    pptx = broken_copy(folder, "libreoffice_impress/b8adbc24-cef2-4b15-99d5-ecbe7ff445eb.json",
                       lambda ev: ev["options"].update(examine_run_cout=False))
    archive = broken_copy(folder, "multi_apps/5df7b33a-9f77-4101-823e-02f863e1c1ae.json",  # of PDFs
                          lambda ev: ev["options"].update(ignore_case=True))  # compare_text_file's
    assert_refused(folder, {
        pptx: "evaluator metric 'compare_pptx_files': it does not read the option 'examine_run_cout' "
              "(did you mean 'examine_run_count'?)",
        archive: "evaluator metric 'compare_archive': it does not read the option 'ignore_case' "
                 "(it reads 'file_path', 'file_type')"})
