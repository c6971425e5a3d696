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


sys.meta_path.insert(0, _PytestJudged)
_graded_imports()
_system_sitecustomize()
