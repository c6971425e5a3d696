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
again; another ``pytest.main()`` in it is. The system's own sitecustomize, which this one hides,
runs after it.
"""

import importlib.machinery
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_JUDGED = "PARALLEL_ROLLOUT_PYTEST_JUDGED"


def _judged(main):
    """pytest's ``main`` (what ``pytest.main``, ``/usr/bin/pytest`` and ``-m pytest`` call), judged first."""
    def judged_main(args=None, plugins=None):
        if os.environ.get(_JUDGED) == str(os.getpid()):
            del os.environ[_JUDGED]  # the wrapper's judgement, of this run only
            return main(args, plugins)
        if args is None:
            words = sys.argv[1:]
        elif isinstance(args, os.PathLike):
            words = [os.fspath(args)]
        elif isinstance(args, list):
            words = [os.fspath(arg) if isinstance(arg, os.PathLike) else arg for arg in args]
        else:
            return main(args, plugins)  # pytest refuses it (TypeError): nothing runs
        import subprocess
        try:
            judge = subprocess.run(["/bin/sh", os.path.join(_HERE, "pytest_judge"), *map(str, words)],
                                   stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
        except OSError as e:
            judge = None
            sys.stderr.write(f"pytest: not run: its judgement did not run ({e})\n")
        if judge is None or judge.returncode != 0:
            if judge is not None and judge.returncode != 126:
                sys.stderr.write(f"pytest: not run: its judgement failed (exit {judge.returncode})\n")
            sys.stdout.flush()
            raise SystemExit(126)  # as the wrapper, which exits: a check ignoring main()'s code passed
        pins = [pin.decode(errors="surrogateescape") for pin in judge.stdout.split(b"\0") if pin]
        return main([*pins, *words], plugins)
    return judged_main


class _PytestJudged:
    """Finds ``_pytest.config`` as the path finder does, its ``main`` judged once it is loaded
    (before ``pytest/__init__`` takes it as ``pytest.main``)."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name != "_pytest.config":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        load = getattr(spec and spec.loader, "exec_module", None)
        if load is None:
            return spec

        def exec_module(module):
            load(module)
            module.main = _judged(module.main)
        spec.loader.exec_module = exec_module
        return spec


def _system_sitecustomize():
    """The sitecustomize module of the folders after this one (a distribution's), run as
    ``site`` runs it."""
    here = os.path.realpath(_HERE)
    rest = [p for p in sys.path if os.path.isabs(p) and os.path.realpath(p) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    try:
        from importlib.util import module_from_spec
        spec.loader.exec_module(module_from_spec(spec))
    except Exception as e:  # as site says it of its own
        sys.stderr.write(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{type(e).__name__}: {e}\n")


sys.meta_path.insert(0, _PytestJudged)
_system_sitecustomize()
