"""The judgement ./sitecustomize.py puts before a pytest the wrappers did not judge, loaded
only as pytest loads (so a grading command's every other python does not compile it): pytest's
``main``, judged by ./pytest_judge with its arguments in its folder, and not run (exit 126, the
wrappers' reason) or run with the wrappers' pins before its arguments."""

import os
import sys

from _frozen_importlib_external import PathFinder

_HERE = os.path.dirname(os.path.abspath(__file__))
_JUDGED = "PARALLEL_ROLLOUT_PYTEST_JUDGED"


def judged(main):
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


def judge_main(config):
    """``_pytest.config``, loaded: its ``main`` judged (before ``pytest/__init__`` takes it as ``pytest.main``)."""
    config.main = judged(config.main)


def changed_spec(name, path, target, change):
    """``name``'s spec as the path finder finds it, ``change(module)`` once it is loaded."""
    spec = PathFinder.find_spec(name, path, target)
    load = getattr(spec and spec.loader, "exec_module", None)
    if load is None:
        return spec

    def exec_module(module):
        load(module)
        change(module)
    spec.loader.exec_module = exec_module
    return spec
