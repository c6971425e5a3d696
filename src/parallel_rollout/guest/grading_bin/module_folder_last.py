"""`python3 -m unittest` and `python3 -m doctest` as a grading command (run by ./python3 in their
place: module_folder_last.py MODULE ARGS...): as -m runs them, but a folder of tests in the home
(the home or below it, /tmp, /var/tmp or /dev/shm themselves), which they put first on sys.path,
goes last, after the system's modules. unittest's discover put its top folder first, and
doctest the folder of the file it tests while importing it: the graded code's ~/fractions.py
(os._exit(0)) was what the check's ~/test_check.py (or ~/check_doc.py) imported, and its failing
tests passed. The graded code's own module the tests import is still found, after the system's.

`python3 -m pytest` runs through it too (./python3 gives it pytest's pins), as -m runs it: so
do all three keep ./graded_imports.py's rules under `python3 -I`, `-E` and `-S`, which read no
sitecustomize.py of the PYTHONPATH (the graded code's ~/test_check/ package was what `cd ~ &&
python3 -I -m unittest discover -p test_check.py` imported of the check's ~/test_check.py).
"""

import os
import runpy
import sys

from _frozen_importlib import module_from_spec
from _frozen_importlib_external import PathFinder


#: ./graded_imports.py, once loaded (main)
_RULES = []


def graded(folder):
    """Whether ``folder`` is one the graded code writes: the home (./graded_imports.py's, which
    a check's own HOME does not move) or below it, one of ./graded_folders themselves (/tmp …)."""
    homes = _RULES[0].homes()
    real = os.path.realpath(folder)
    return bool(homes) and (any(real == home or real.startswith(home + "/") for home in homes)
                            or real in _RULES[0].writable_folders())


def discover_last(loader, rules=None):
    """``unittest.loader`` (the module), its TestLoader's discover putting a top folder the
    graded code writes last on sys.path (once). ./sitecustomize.py calls it as the module loads,
    with its ``rules`` (./graded_imports.py): a unittest run otherwise than by ./python3
    (``PATH=/usr/bin:/bin python3 -m unittest``, ``/usr/bin/python3`` by its path) put it first."""
    if rules is not None and not _RULES:
        _RULES.append(rules)
    discover = loader.TestLoader.discover
    if getattr(discover, "folder_last", False):
        return

    def folder_last(self, start_dir, pattern="test*.py", top_level_dir=None):
        # discover inserts its top folder first only when it is not on sys.path yet
        top = os.path.abspath(top_level_dir or self._top_level_dir or start_dir)
        if os.path.isdir(top) and top not in sys.path and graded(top):
            sys.path.append(top)
        return discover(self, start_dir, pattern, top_level_dir)

    folder_last.folder_last = True
    loader.TestLoader.discover = folder_last


def unittest_main():
    import unittest.loader

    discover_last(unittest.loader)
    runpy.run_module("unittest", run_name="__main__", alter_sys=True)


def doctest_import(rules=None):
    """The ``__import__`` doctest's _test is to call: doctest's _test does ``sys.path.insert(0,
    folder); m = __import__(name); del sys.path[0]`` for the file it tests; a file in a folder the
    graded code writes is imported by its path, that folder last on sys.path meanwhile. Put in
    doctest's globals (./python3) or, for ``-m doctest`` run as ``__main__`` otherwise (a PATH of
    the check's own, python3 by its path), in ``__main__``'s by ./sitecustomize.py with its
    ``rules``: there runpy ran doctest out of the import rules' sight."""
    import importlib.util

    if rules is not None and not _RULES:
        _RULES.append(rules)

    def imported(name, *rest):
        folder = sys.path[0] if sys.path else None  # "" of a file named from its folder: that folder
        path = os.path.join(folder or ".", name + ".py")
        if rest or folder is None or not os.path.isfile(path) or not graded(folder or "."):
            return __import__(name, *rest)
        del sys.path[0]
        try:
            if folder not in sys.path:
                sys.path.append(folder)  # the tested module's own modules, after the system's
            spec = importlib.util.spec_from_file_location(name, path)  # that file, whatever its name
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
            return module
        finally:
            sys.path.insert(0, folder)

    return imported


def doctest_main():
    import doctest

    doctest.__import__ = doctest_import()  # the name doctest's _test calls, found in its globals first
    sys.argv[0] = doctest.__file__
    sys.exit(doctest._test())


def graded_imports():
    """./graded_imports.py's rules, as ./sitecustomize.py puts them (once)."""
    spec = PathFinder.find_spec("graded_imports", [os.path.dirname(os.path.abspath(__file__))])
    rules = module_from_spec(spec)
    spec.loader.exec_module(rules)
    rules.install(sys.path_hooks, sys.path_importer_cache)
    _RULES.append(rules)


def main():
    module = sys.argv.pop(1)
    sys.argv[0] = "-m"  # as -m: the current folder first on sys.path unless it is safe (-P, -I)
    if sys.path and os.path.realpath(sys.path[0]) == os.path.dirname(os.path.realpath(__file__)):
        del sys.path[0]  # this file's folder, not the current one
    if not getattr(sys.flags, "safe_path", False) and not sys.flags.isolated:  # -I before Python 3.11
        sys.path.insert(0, os.getcwd())
    graded_imports()
    if module in ("unittest", "unittest.__main__"):
        unittest_main()
    elif module == "doctest":
        doctest_main()
    else:
        runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
