"""The import rules of ``src/parallel_rollout/`` as data, and the ``ast`` walk that checks them.

:data:`LAYERS` is the one statement of the layer order: tests/test_layers.py checks the code
against it, and the README's "Layers and import rules" block is :func:`markdown` of it (a
test compares the two; ``python tests/import_layers.py`` prints the block).

Every import counts: at the top of a module, inside a function, under ``TYPE_CHECKING``,
relative or absolute. A module is one ``.py`` file; a package's ``__init__.py`` is a module of
its own. ``import pkg`` is an edge to ``pkg/__init__.py``; ``from pkg import name`` is an edge
to ``pkg/name.py`` when that submodule exists, else to ``pkg/__init__.py``. The parent
packages Python imports on the way are not counted (every module would otherwise import its
package's ``__init__``). Names imported through ``importlib`` or registry strings
(``"module:Class"``) are not imports here.

:func:`check` returns the violations, one readable line each:

- a cycle between modules (only import edges, whatever their kind);
- an upward import: a module imports one in a higher layer (within a layer any import is
  fine while it stays acyclic);
- a private name (``_x``, not a dunder) imported from another module, or read through the
  name of a project module it imported (``from . import charts`` … ``charts._fmt``);
- a private attribute of another module's object (``pool._vms``, not ``self._vms``): one
  that this module never defines and another project module does (a library's private
  attribute that shares such a name is marked ``# noqa: SLF001`` on its line);
- a leaf module (``config.py``) importing a project module other than the ones it may;
- a module the layer table does not place, and a project import that names no module.
"""

from __future__ import annotations

import ast
import functools
import sys
from dataclasses import dataclass
from pathlib import Path

#: top to bottom; each layer is a list of module path prefixes relative to the package root
#: (``"engine.py"`` one file, ``"pool/"`` a whole package). A module may import modules of
#: its own layer and of every layer below it.
LAYERS: list[list[str]] = [
    ["__init__.py", "cli.py", "__main__.py", "cli_options.py", "cli_aliases.py", "cli_runs.py", "cli_tools.py", "preflight.py",
     "api.py"],
    ["runner.py", "run_end.py", "run_folder.py", "rl/", "call_spelling.py", "honoured.py"],
    ["engine.py", "engine_cancels.py", "engine_stops.py", "doorbell.py"],
    ["backends/"],
    ["worker.py", "attempt_vms.py"],
    ["pool/", "envs/", "agents/"],
    ["guest/"],
    ["report/"],
    ["config.py", "config_checks.py", "setting_names.py", "setting_types.py", "vm_address.py", "pool_sizing.py", "messages.py", "records.py", "tasks.py", "task_files.py", "tasks_osworld.py",
     "task_json.py", "tasks_parquet.py", "results.py", "run_lock.py", "plugins.py", "policy_gate.py", "gate_client.py", "provenance.py",
     "trajectories.py", "logs.py", "run_log.py", "output_checks.py", "process_group.py", "main_guard.py"],
    ["errors.py", "exit_codes.py", "version.py", "worker_cgroup.py"],
]

#: modules that may import only the project modules listed (the config is the floor every
#: layer reads: it must not reach up into anything)
LEAVES: dict[str, tuple[str, ...]] = {"config.py": ("errors.py", "config_checks.py", "setting_names.py", "setting_types.py"),
                                      "setting_types.py": ("errors.py", "config_checks.py", "setting_names.py"),
                                      "config_checks.py": ("errors.py", "setting_names.py", "vm_address.py"),
                                      "setting_names.py": ("errors.py",),
                                      "vm_address.py": ("errors.py",)}

#: what each rule is for, in the README block
RULES = (
    "Paths are relative to `src/parallel_rollout/`: `x/` is a whole package, `x.py` one "
    "module, `__init__.py` the root package's own. `report/` is read by `cli`, `cli_runs`, `api`, "
    "`runner`, `run_folder` and `run_end` only and reads `results`.",
    "Imports run one way, top to bottom: a module imports modules of its own layer or of a "
    "layer below it, never above. Inside a layer, imports are allowed while they stay "
    "acyclic.",
    "This counts every import: at the top of a module, inside a function, under "
    "`TYPE_CHECKING`. A lower layer that must call up declares a Protocol of its own.",
    "No import cycle between modules (a module is a `.py` file; a package's `__init__.py` "
    "is a module of its own).",
    "No `from x import _name` across modules, no `module._name` and no `obj._attr` on "
    "another module's object: a name another module needs is public, and an object's "
    "state changes only in its own class's methods.",
    "`config.py` imports nothing of the project but `errors`, `config_checks` (the "
    "checks of its values), `setting_names` (how a setting is said, as its source gave it) and "
    "`setting_types` (a value against its field's type, which imports only `errors`, `config_checks` "
    "and `setting_names`); `config_checks` imports only `errors`, `setting_names` and `vm_address`; "
    "`setting_names` and `vm_address` import only `errors`.",
)


@dataclass(frozen=True)
class Edge:
    """One import of a project module by another: where it is and what it names."""

    source: str
    target: str
    line: int
    names: tuple[str, ...] = ()


def modules(root: Path) -> list[str]:
    """Every module under the package ``root``, as a posix path relative to it."""
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*.py")
                  if "__pycache__" not in p.parts)


def _nodes(root: Path, module: str) -> tuple[ast.AST, ...]:
    """Every node of the module (``ast.walk``'s order), parsed and walked once while the file
    stays as it is: the checks read each module several times."""
    path = Path(root) / module
    stat = path.stat()
    return _parse(str(path), module, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=None)
def _parse(path: str, module: str, mtime_ns: int, size: int) -> tuple[ast.AST, ...]:
    return tuple(ast.walk(ast.parse(Path(path).read_text(), filename=module)))


def _resolve(root: Path, parts: list[str]) -> str | None:
    """The module file of a dotted path (relative to ``root``), or None when there is none."""
    if not parts:
        return "__init__.py" if (root / "__init__.py").is_file() else None
    path = "/".join(parts)
    if (root / f"{path}.py").is_file():
        return f"{path}.py"
    if (root / path / "__init__.py").is_file():
        return f"{path}/__init__.py"
    return None


def _is_package(module: str) -> bool:
    return module == "__init__.py" or module.endswith("/__init__.py")


def edges(root: Path) -> tuple[list[Edge], list[str]]:
    """Every import between project modules under ``root``, and the project imports that name
    no module (as violation lines)."""
    root = Path(root)
    package = root.name
    found: list[Edge] = []
    unresolved: list[str] = []
    for module in modules(root):
        # the package a relative import starts from: an __init__'s own package, else the
        # folder of the file
        here = module.split("/")[:-1]
        for node in _nodes(root, module):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    parts = alias.name.split(".")
                    if parts[0] != package:
                        continue
                    target = _resolve(root, parts[1:])
                    if target is None:
                        unresolved.append(f"{module}: import {alias.name} names no module "
                                          f"at {module}:{node.lineno}")
                    else:
                        found.append(Edge(module, target, node.lineno))
            elif isinstance(node, ast.ImportFrom):
                named = node.module.split(".") if node.module else []
                if node.level:
                    if node.level - 1 > len(here):
                        unresolved.append(f"{module}: relative import beyond the package "
                                          f"root at {module}:{node.lineno}")
                        continue
                    parts = here[:len(here) - (node.level - 1)] + named
                elif named and named[0] == package:
                    parts = named[1:]
                else:
                    continue
                dotted = "." * node.level + (node.module or "")
                target = _resolve(root, parts)
                if target is None:
                    unresolved.append(f"{module}: from {dotted} import … names no module "
                                      f"at {module}:{node.lineno}")
                    continue
                names = []
                for alias in node.names:
                    sub = _resolve(root, parts + [alias.name]) if _is_package(target) else None
                    if sub is not None and alias.name != "*":
                        found.append(Edge(module, sub, node.lineno))
                    else:
                        names.append(alias.name)
                if names:
                    found.append(Edge(module, target, node.lineno, tuple(names)))
    return found, unresolved


def layer_of(module: str, layers: list[list[str]]) -> int | None:
    """The index (0 = top) of the layer whose longest prefix matches ``module``."""
    best, best_len = None, -1
    for index, prefixes in enumerate(layers):
        for prefix in prefixes:
            matches = module.startswith(prefix) if prefix.endswith("/") else module == prefix
            if matches and len(prefix) > best_len:
                best, best_len = index, len(prefix)
    return best


def _layer_name(index: int, layers: list[list[str]]) -> str:
    return f"{index + 1} [{', '.join(layers[index])}]"


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index_of: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    nodes = sorted(set(graph) | {t for targets in graph.values() for t in targets})
    for start in nodes:
        if start in index_of:
            continue
        # iterative DFS: (node, iterator over its successors)
        index_of[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        work = [(start, iter(sorted(graph.get(start, ()))))]
        while work:
            node, successors = work[-1]
            advanced = False
            for succ in successors:
                if succ not in index_of:
                    index_of[succ] = low[succ] = counter
                    counter += 1
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph.get(succ, ())))))
                    advanced = True
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index_of[succ])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index_of[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def _a_cycle(component: list[str], graph: dict[str, set[str]]) -> list[str]:
    """One closed path through the component, from its first module back to it (the
    shortest, found breadth first)."""
    members, start = set(component), component[0]
    parent: dict[str, str | None] = {start: None}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for succ in sorted(graph.get(node, ())):
            if succ == start:
                path = [node]
                while parent[path[-1]] is not None:
                    path.append(parent[path[-1]])
                return path[::-1] + [start]
            if succ in members and succ not in parent:
                parent[succ] = node
                queue.append(succ)
    return component + [start]  # not reached: every member of a component reaches start


def private_reads(root: Path) -> list[str]:
    """Every ``name._x`` where ``name`` is a project module the reading module imported (by
    ``import pkg.mod as name`` or ``from … import mod``), as violation lines."""
    return list(_module_private_reads(root).values())


def _module_private_reads(root: Path, found: list[Edge] | None = None
                          ) -> dict[tuple[str, int, str], str]:
    """:func:`private_reads` by (module, line, name); ``found`` is :func:`edges`' list when
    the caller has it."""
    root = Path(root)
    problems = {}
    by_module: dict[str, dict[str, int]] = {}
    for edge in edges(root)[0] if found is None else found:
        if edge.source != edge.target and not edge.names:
            by_module.setdefault(edge.source, {})[edge.target] = edge.line
    for module, targets in by_module.items():
        names = {}  # local name -> the module it stands for
        for node in _nodes(root, module):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    local = alias.asname or alias.name.split(".")[-1]
                    for target in targets:
                        stem = target.removesuffix("/__init__.py").removesuffix(".py")
                        if stem.split("/")[-1] == alias.name.split(".")[-1]:
                            names[local] = target
        for node in _nodes(root, module):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in names and node.attr.startswith("_")
                    and not node.attr.startswith("__")):
                problems[(module, node.lineno, node.attr)] = (
                    f"{module} -> {names[node.value.id]}: private name {node.attr} "
                    f"read from another module at {module}:{node.lineno}")
    return problems


def _private_defined(nodes: tuple[ast.AST, ...]) -> set[str]:
    """The private names a module defines: functions, classes, names it assigns (class
    fields included) and attributes it assigns on ``self`` or ``cls``."""
    defined = set()
    for node in nodes:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            defined.add(node.id)
        elif (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
              and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
            defined.add(node.attr)
    return {name for name in defined if name.startswith("_") and not name.startswith("__")}


def foreign_attributes(root: Path, module_reads: dict | None = None) -> list[str]:
    """Every ``obj._x`` (read or written, ``obj`` not ``self``, ``cls`` or ``super()``) whose
    ``_x`` this module does not define and another project module does, as violation lines
    (``module._x`` is :func:`private_reads`'s)."""
    root = Path(root)
    if module_reads is None:
        module_reads = _module_private_reads(root)
    trees = {m: _nodes(root, m) for m in modules(root)}
    defined = {m: _private_defined(nodes) for m, nodes in trees.items()}
    problems = []
    for module, nodes in trees.items():
        lines = (root / module).read_text().splitlines()
        for node in nodes:
            if not (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                    and not node.attr.startswith("__") and node.attr not in defined[module]):
                continue
            owner = ast.unparse(node.value)
            if owner in ("self", "cls") or owner.startswith("super("):
                continue
            if ("noqa: SLF001" in lines[node.lineno - 1]
                    or (module, node.lineno, node.attr) in module_reads):
                continue
            others = sorted(m for m, names in defined.items() if node.attr in names and m != module)
            if others:
                problems.append(f"{module}: private attribute {owner}.{node.attr} of another "
                                f"module's object (defined in {', '.join(others)}) "
                                f"at {module}:{node.lineno}")
    return problems


def check(root: Path, layers: list[list[str]] = LAYERS,
          leaves: dict[str, tuple[str, ...]] = LEAVES) -> list[str]:
    """Every violation of the import rules in the package at ``root``, one line each."""
    root = Path(root)
    found, problems = edges(root)
    for module in modules(root):
        if layer_of(module, layers) is None:
            problems.append(f"{module}: not in the layer table (add it to a layer)")
    graph: dict[str, set[str]] = {}
    first_line: dict[tuple[str, str], int] = {}
    for edge in found:
        if edge.source == edge.target:
            continue
        graph.setdefault(edge.source, set()).add(edge.target)
        key = (edge.source, edge.target)
        first_line[key] = min(first_line.get(key, edge.line), edge.line)
        where = f"at {edge.source}:{edge.line}"
        source_layer, target_layer = layer_of(edge.source, layers), layer_of(edge.target, layers)
        if (source_layer is not None and target_layer is not None
                and target_layer < source_layer):
            problems.append(f"{edge.source} -> {edge.target}: upward import (layer "
                            f"{_layer_name(target_layer, layers)} above "
                            f"{_layer_name(source_layer, layers)}) {where}")
        private = [n for n in edge.names if n.startswith("_") and not n.startswith("__")]
        if private:
            problems.append(f"{edge.source} -> {edge.target}: private name "
                            f"{', '.join(private)} imported from another module {where}")
        if edge.source in leaves and edge.target not in leaves[edge.source]:
            allowed = ", ".join(leaves[edge.source]) or "nothing"
            problems.append(f"{edge.source} -> {edge.target}: {edge.source} may import only "
                            f"{allowed} of the project {where}")
    module_reads = _module_private_reads(root, found)
    problems += list(module_reads.values())
    problems += foreign_attributes(root, module_reads)
    for component in cycles(graph):
        path = _a_cycle(component, graph)
        steps = ", ".join(f"{a}:{first_line[(a, b)]}" for a, b in zip(path, path[1:]))
        problems.append(f"import cycle: {' -> '.join(path)} (at {steps}; "
                        f"{len(component)} modules in the cycle: {', '.join(component)})")
    return sorted(set(problems))


def markdown(layers: list[list[str]] = LAYERS, rules: tuple[str, ...] = RULES) -> str:
    """The README block: the layer table, top to bottom, and the rules."""
    lines = ["| layer | modules (top imports bottom, never the reverse) |", "| --- | --- |"]
    for index, prefixes in enumerate(layers, start=1):
        lines.append(f"| {index} | {', '.join(f'`{p}`' for p in prefixes)} |")
    lines.append("")
    lines.extend(f"- {rule}" for rule in rules)
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    if sys.argv[1:] == ["--check"]:
        found = check(Path(__file__).resolve().parents[1] / "src" / "parallel_rollout")
        print("\n".join(found) or "no violations")
        sys.exit(1 if found else 0)
    print(markdown(), end="")
