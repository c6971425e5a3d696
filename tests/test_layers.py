"""The import rules of the source (tests/import_layers.py): the real package obeys them, the
checker finds each kind of violation in small fixture packages, and the README states the same
layer table the check uses."""

from __future__ import annotations

import re
from textwrap import dedent
from pathlib import Path

import pytest

from import_layers import LAYERS, check, cycles, layer_of, markdown

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "parallel_rollout"

#: the fixture packages' layers: app on top, then core, then conf, then base
FIXTURE_LAYERS = [["app.py", "front/"], ["core/"], ["conf.py", "data.py"],
                  ["base.py", "__init__.py"]]
FIXTURE_LEAVES = {"conf.py": ("base.py",)}

#: a package that follows every rule: downward imports of every kind (top level, in a
#: function, under TYPE_CHECKING, relative, absolute), imports within a layer, a package
#: import, submodule imports, a dunder name, the leaf importing only what it may
CLEAN = {
    "__init__.py": '"""root"""\n__version__ = "1"\n',
    "base.py": "class Error(Exception):\n    pass\n",
    "conf.py": "from .base import Error\n",
    "data.py": "from .base import Error\nfrom . import __version__\n",
    "core/__init__.py": "from .engine import run\n",
    "core/engine.py": dedent("""\
        from typing import TYPE_CHECKING
        from ..data import Error
        from .. import base
        if TYPE_CHECKING:
            from ..conf import Error as E
        def run():
            from .helpers import helper
            import pkg.data
            return helper()
    """),
    "core/helpers.py": "from ..base import Error\ndef helper():\n    return 1\n",
    "front/__init__.py": "",
    "front/view.py": "from ..core import engine\nfrom ..core.engine import run\nimport os, json\n",
    "app.py": "from pkg.front import view\nfrom pkg import core\nfrom .front.view import run\n",
}


def make_package(tmp_path: Path, files: dict[str, str]) -> Path:
    """Write ``files`` (path -> text) as the package ``pkg`` under ``tmp_path``."""
    root = tmp_path / "pkg"
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


#: (what is broken, files replaced in the clean package, only the violations containing this
#: text or None for all, the violations expected)
BROKEN = [
    ("a cycle in a function-level import",
     {"core/helpers.py": "from ..base import Error\nfrom . import engine\n"}, None,
     ["import cycle: core/engine.py -> core/helpers.py -> core/engine.py "
      "(at core/engine.py:7, core/helpers.py:2; "
      "2 modules in the cycle: core/engine.py, core/helpers.py)"]),
    ("a cycle through a package __init__, closed under TYPE_CHECKING",
     {"data.py": dedent("""\
         from typing import TYPE_CHECKING
         if TYPE_CHECKING:
             import pkg.core
     """)}, None,
     ["data.py -> core/__init__.py: upward import (layer 2 [core/] above "
      "3 [conf.py, data.py]) at data.py:3",
      "import cycle: core/__init__.py -> core/engine.py -> data.py -> core/__init__.py "
      "(at core/__init__.py:1, core/engine.py:2, data.py:3; "
      "3 modules in the cycle: core/__init__.py, core/engine.py, data.py)"]),
    ("upward imports at top level, under TYPE_CHECKING and in a function",
     {"base.py": dedent("""\
         from typing import TYPE_CHECKING
         from .data import Error
         if TYPE_CHECKING:
             from .core.engine import run
         def later():
             from . import app
     """)}, "upward",  # base.py then also closes cycles, left out here
     ["base.py -> app.py: upward import (layer 1 [app.py, front/] above "
      "4 [base.py, __init__.py]) at base.py:6",
      "base.py -> core/engine.py: upward import (layer 2 [core/] above "
      "4 [base.py, __init__.py]) at base.py:4",
      "base.py -> data.py: upward import (layer 3 [conf.py, data.py] above "
      "4 [base.py, __init__.py]) at base.py:2"]),
    ("an upward import inside a function alone",
     {"core/helpers.py": dedent("""\
         def helper():
             from .. import front
             return front
     """)}, None,
     ["core/helpers.py -> front/__init__.py: upward import (layer 1 [app.py, front/] above "
      "2 [core/]) at core/helpers.py:2"]),
    ("a private name imported from a sibling module",
     {"core/helpers.py": "from ..base import Error\n_cache = {}\ndef helper():\n    return 1\n",
      "front/view.py": "from ..core.helpers import helper, _cache\n"}, None,
     ["front/view.py -> core/helpers.py: private name _cache imported from another module "
      "at front/view.py:1"]),
    ("a private name from a package, relative, in a function",
     {"front/view.py": "def f():\n    from ..core import _x\n"}, None,
     ["front/view.py -> core/__init__.py: private name _x imported from another module "
      "at front/view.py:2"]),
    ("a private name read through an imported module's name",
     {"core/helpers.py": "from ..base import Error\n_cache = {}\ndef helper():\n    return 1\n",
      "front/view.py": "from ..core import helpers as h\ndef f():\n    return h._cache, h.helper\n"}, None,
     ["front/view.py -> core/helpers.py: private name _cache read from another module "
      "at front/view.py:3"]),
    ("a private attribute of another module's object, read and written",
     {"core/helpers.py": dedent("""\
         from ..base import Error
         class Pool:
             def __init__(self):
                 self._vms = {}
         def helper():
             return 1
     """),
      "front/view.py": dedent("""\
         from ..core.helpers import Pool
         def drain(pool: Pool):
             pool._vms.clear()
             pool._vms = {}
     """)}, None,
     ["front/view.py: private attribute pool._vms of another module's object (defined in "
      "core/helpers.py) at front/view.py:3",
      "front/view.py: private attribute pool._vms of another module's object (defined in "
      "core/helpers.py) at front/view.py:4"]),
    # a library's private attribute of the same name, marked; a private attribute of an
    # object of this module's own class
    ("no private attribute of another module's object, but a marked one and an own one",
     {"core/helpers.py": dedent("""\
         from ..base import Error
         class Pool:
             def __init__(self):
                 self._vms = {}
             def merge(self, other):
                 self._vms.update(other._vms)
         def helper():
             return 1
     """),
      "front/view.py": "def pid(manager):\n    return manager._vms  # noqa: SLF001\n"}, None,
     []),
    # data.py sits in conf.py's own layer and imports nothing back: only the leaf rule
    # catches this import
    ("a leaf importing more than it may",
     {"conf.py": "from .base import Error\nfrom . import data\n"}, None,
     ["conf.py -> data.py: conf.py may import only base.py of the project at conf.py:2"]),
    ("a module outside the table that imports no module",
     {"extra.py": "from .nowhere import thing\n"}, None,
     ["extra.py: from .nowhere import … names no module at extra.py:1",
      "extra.py: not in the layer table (add it to a layer)"]),
]


def test_the_source_follows_the_import_rules():
    """No cycle, no upward import, no private name across modules, config a leaf, every
    module placed in a layer. Run ``python tests/import_layers.py --check`` for the list."""
    violations = check(SRC)
    assert violations == [], "\n".join(violations)


def test_a_clean_package_has_no_violations(tmp_path):
    assert check(make_package(tmp_path, CLEAN), FIXTURE_LAYERS, FIXTURE_LEAVES) == []


@pytest.mark.parametrize("changes, only, expected", [case[1:] for case in BROKEN],
                         ids=[case[0] for case in BROKEN])
def test_each_broken_rule_is_found_and_named_with_its_line(tmp_path, changes, only, expected):
    violations = check(make_package(tmp_path, {**CLEAN, **changes}), FIXTURE_LAYERS,
                       FIXTURE_LEAVES)
    assert [v for v in violations if only is None or only in v] == expected


def test_layer_of_takes_the_longest_matching_prefix():
    layers = [["pool/"], ["pool/providers/"], ["x.py"]]
    assert layer_of("pool/manager.py", layers) == 0
    assert layer_of("pool/providers/docker.py", layers) == 1
    assert layer_of("x.py", layers) == 2
    assert layer_of("x.pyc", layers) is None and layer_of("poolside.py", layers) is None


def test_cycles_finds_every_component():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": {"e"}, "e": {"d"}, "f": {"a"}}
    assert cycles(graph) == [["a", "b", "c"], ["d", "e"]]


def test_the_readme_states_the_layer_table_the_check_uses():
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"<!-- layers: begin.*?-->\n(.*?)<!-- layers: end -->", readme, re.S)
    assert block, "README.md has no '<!-- layers: begin -->' … '<!-- layers: end -->' block"
    assert block.group(1) == markdown(), (
        "the README's layer table differs from tests/import_layers.py: paste the output of "
        "`python tests/import_layers.py` between the markers")


def test_the_table_names_each_prefix_once():
    prefixes = [p for layer in LAYERS for p in layer]
    assert len(prefixes) == len(set(prefixes))


#: a module is one concept of at most this many lines (a bigger one is split by concept)
MAX_MODULE_LINES = 500


def test_no_module_of_the_package_passes_the_size_of_one_concept():
    sizes = {str(path.relative_to(SRC)): len(path.read_text().splitlines()) for path in SRC.rglob("*.py")}
    assert sizes, SRC
    assert {name: lines for name, lines in sizes.items() if lines > MAX_MODULE_LINES} == {}
