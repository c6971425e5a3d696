"""Run by the python of a grading command as it starts (this folder is on its PYTHONPATH:
agent_grading.grading_env; ``python3 -I``, ``-E`` and ``-S`` read none of it): a pytest the
wrappers did not judge, run otherwise than by its name (``/usr/bin/pytest`` by its path, a
check's ``pytest.main()``, a program's ``subprocess.call([sys.executable, "-m", "pytest"])``),
is judged as it starts, before it reads any ini file: ./pytest_judge (the wrappers'
./pytest_no_above.sh, nothing of it said again here) with its arguments in its folder, and not
run (exit 126, the wrappers' reason) or run with the wrappers' pins before its arguments. Those
read the graded code's /tmp/pytest.ini of ``addopts = --co`` as pytest does, and its failing
tests passed. (A pytest plugin, a ``pytest11`` entry point, comes too late: pytest loads it
after the ini file it chose, whose addopts ``-p no:<its name>`` keeps it out, and whose
``pythonpath = .`` and ``-p <a module of the graded code's>`` runs that module first.) The
pytest a wrapper judged and became (its pid in PARALLEL_ROLLOUT_PYTEST_JUDGED) is not judged
again; another ``pytest.main()`` in it is. What it imports from the graded code's folders
follows ./graded_imports.py's rules. The system's own sitecustomize, which this one hides,
runs after it.
"""

import os
import sys

# the import system's own modules, loaded before site runs: importlib.machinery and
# importlib.util cost a grading command's every python 2-9 ms of imports (contextlib, collections)
from _frozen_importlib import module_from_spec
from _frozen_importlib_external import PathFinder

_HERE = os.path.dirname(os.path.abspath(__file__))


class _PytestJudged:
    """Finds ``_pytest.config`` through ./pytest_judged.py (by its path: a check may have put the
    graded code's folder on ``sys.path`` by then), which judges its ``main``,
    ``_pytest.assertion.rewrite``, whose cache ./graded_imports.py's rule reads, and
    ``unittest.loader``, whose discover ./module_folder_last.py's rule changes."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name not in ("_pytest.config", "_pytest.assertion.rewrite", "unittest.loader"):
            return None
        spec = PathFinder.find_spec("pytest_judged", [_HERE])
        judge = module_from_spec(spec)
        spec.loader.exec_module(judge)
        if name == "unittest.loader":
            return judge.changed_spec(name, path, target, _discover_last)
        change = judge.judge_main if name == "_pytest.config" else _RULES[0].fresh_pytest_cache
        return judge.changed_spec(name, path, target, change)


def _discover_last(loader):
    """``unittest.loader``, loaded: its discover puts a top folder the graded code writes last on
    sys.path, as ./module_folder_last.py has it under ./python3 (by its path, or a PATH of the
    check's own without the wrappers, unittest put the home first: the graded code's
    ~/fractions.py was what a check's tests there imported)."""
    spec = PathFinder.find_spec("module_folder_last", [_HERE])
    last = module_from_spec(spec)
    spec.loader.exec_module(last)
    last.discover_last(loader, _RULES[0])


#: ./graded_imports.py, once loaded
_RULES = []


def _system_sitecustomize():
    """The sitecustomize module of the folders after this one (a distribution's), run as
    ``site`` runs it."""
    here = os.path.realpath(_HERE)
    rest = [p for p in sys.path if os.path.isabs(p) and os.path.realpath(p) != here]
    spec = PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    try:
        spec.loader.exec_module(module_from_spec(spec))
    except Exception as e:  # as site says it of its own
        sys.stderr.write(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{type(e).__name__}: {e}\n")


def _graded_imports():
    """./graded_imports.py's rules, before Python's own."""
    spec = PathFinder.find_spec("graded_imports", [_HERE])
    rules = module_from_spec(spec)
    spec.loader.exec_module(rules)
    rules.install(sys.path_hooks, sys.path_importer_cache)
    _RULES.append(rules)


def _isolated_again():
    """``python3 -E`` of a grading command (reached by its path, ./system_sitecustomize.py loading
    this file) started again as ``-I``, as ./python3 runs it: -E ignores PYTHONSAFEPATH, and the
    current folder (the home) went first on sys.path, after this file ran."""
    argv = getattr(sys, "orig_argv", None)
    if sys.flags.ignore_environment and not sys.flags.isolated and argv and sys.executable \
            and os.environ.get("PARALLEL_ROLLOUT_GRADING_SINCE"):
        os.execv(sys.executable, [argv[0], "-I", *argv[1:]])


def _main_module():
    """The module ``-m`` runs as ``__main__`` (Python's own options read as it reads them: ``-Im
    doctest``, ``-mdoctest``), or None."""
    argv = getattr(sys, "orig_argv", [])[1:]
    i = 0
    while i < len(argv):
        arg, i = argv[i], i + 1
        if arg == "--check-hash-based-pycs":
            i += 1
            continue
        if arg.startswith("--") or arg == "-" or not arg.startswith("-"):
            return None  # a script, stdin, --help …: no module
        for n, flag in enumerate(arg[1:], 1):
            if flag == "m":
                return arg[n + 1:] or (argv[i] if i < len(argv) else None)
            if flag in "XW":
                i += arg[n + 1:] == ""
                break
            if flag == "c":
                return None
    return None


def _doctest_as_main():
    """``-m doctest`` run otherwise than by ./python3 (a PATH of the check's own, python3 by its
    path): runpy ran it as ``__main__``, and its _test imported the file it tests with that file's
    folder first on sys.path: the graded code's ~/fractions.py was what the check's ~/check_doc.py
    imported. ./module_folder_last.py's import goes into ``__main__``'s globals, which runpy keeps
    and doctest's ``__import__`` finds first."""
    main = sys.modules.get("__main__")
    if main is None or _main_module() != "doctest":
        return
    spec = PathFinder.find_spec("module_folder_last", [_HERE])
    last = module_from_spec(spec)
    spec.loader.exec_module(last)
    main.__dict__["__import__"] = last.doctest_import(_RULES[0])


_isolated_again()
sys.meta_path.insert(0, _PytestJudged)
_graded_imports()
_doctest_as_main()
_system_sitecustomize()
