"""OSWorld's own evaluator functions, from the ``desktop-env`` package, for equality tests.

Only the named submodule (``desktop_env/evaluators/metrics/table.py`` …) is executed: the
package ``__init__`` files import every metric module and with them torch, easyocr, librosa …
``desktop-env`` is installed with ``--no-deps`` by ``./dev`` with the libraries its metric
modules use (the ``osworld`` and ``osworld-reference`` extras). Modules that import a library
only one untested function of theirs uses (``easyocr`` in ``docs``) get an empty module for
that import; nothing of a compared function's logic is replaced.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from pathlib import Path

import pytest

#: libraries a reference module imports at load time that none of the compared functions uses
_UNUSED_IMPORTS = {"docs": ("easyocr",)}


def _package(name: str, path: Path) -> None:
    if name in sys.modules:
        return
    module = types.ModuleType(name)
    module.__path__ = [str(path)]
    sys.modules[name] = module


def _root() -> Path:
    if "desktop_env" in sys.modules:
        return Path(sys.modules["desktop_env"].__path__[0])
    spec = importlib.util.find_spec("desktop_env")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("desktop-env is not installed (./dev installs it for the tests)")
    return Path(next(iter(spec.submodule_search_locations)))


def reference(module: str, kind: str = "metrics"):
    """``desktop_env.evaluators.<kind>.<module>`` without running the package inits."""
    root = _root()
    _package("desktop_env", root)
    _package("desktop_env.evaluators", root / "evaluators")
    _package(f"desktop_env.evaluators.{kind}", root / "evaluators" / kind)
    for name in _UNUSED_IMPORTS.get(module, ()):
        if importlib.util.find_spec(name) is None:
            sys.modules.setdefault(name, types.ModuleType(name))
    return importlib.import_module(f"desktop_env.evaluators.{kind}.{module}")
