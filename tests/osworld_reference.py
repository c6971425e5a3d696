"""OSWorld's own evaluator functions, from the ``desktop-env`` package, for equality tests.

Only the named submodule (``desktop_env/evaluators/metrics/table.py`` …) is executed: the
package ``__init__`` files import every metric module and with them torch, easyocr, librosa …
``desktop-env`` is installed with ``--no-deps`` by ``./dev`` with the libraries its metric
modules use (the ``osworld`` and ``osworld-reference`` extras). Modules that import a library
only one untested function of theirs uses (``easyocr`` in ``docs``) get an empty module for
that import (and ``vlc`` for the audio libraries of its untested audio comparison); nothing
of a compared function's logic is replaced. ``tldextract.extract`` (which
OSWorld's URL comparison calls) is pointed at tldextract's bundled public suffix list, as ours
is, so no test reaches for the network.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from pathlib import Path

import pytest

#: libraries a reference module imports at load time that none of the compared functions uses
_UNUSED_IMPORTS = {"docs": ("easyocr",), "vlc": ("acoustid", "librosa", "fastdtw")}


class _Unused(types.ModuleType):
    """An import no compared function uses: any name taken from it is a placeholder that
    fails loudly if called."""

    def __getattr__(self, attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)

        def unused(*args, **kwargs):
            raise AssertionError(f"{self.__name__}.{attr} is not installed for the equality tests")
        return unused


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
        if name not in sys.modules and importlib.util.find_spec(name) is None:
            sys.modules.setdefault(name, _Unused(name))
    _offline_tldextract()
    return importlib.import_module(f"desktop_env.evaluators.{kind}.{module}")


def _offline_tldextract() -> None:
    try:
        import tldextract
    except ImportError:
        return
    if not getattr(tldextract.extract, "_offline", False):
        tldextract.extract = tldextract.TLDExtract(suffix_list_urls=())
        tldextract.extract._offline = True


def check_all(cases, run, tmp_path) -> None:
    """Run ``run(folder, *case)`` for every case, each in its own folder, and fail naming
    every case whose ``(ours, theirs, wanted)`` disagree. One test for many cases: the
    per-test leak check of conftest costs more than a case."""
    failures = []
    for index, case in enumerate(cases):
        folder = tmp_path / f"case{index}"
        folder.mkdir()
        try:
            ours, theirs, wanted = run(folder, *case)
        except Exception as exc:  # report every case, not the first broken one
            failures.append(f"{index} {case[0]!r}: {type(exc).__name__}: {exc}")
            continue
        if ours != theirs or (wanted is None and not 0.0 < ours < 1.0) or (wanted is not None and ours != wanted):
            failures.append(f"{index} {case[0]!r}: ours {ours}, OSWorld's {theirs}, wanted {wanted}")
    assert not failures, "\n".join(failures)
