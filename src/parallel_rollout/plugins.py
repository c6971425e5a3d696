"""One lookup for everything a run names by a string: modes, agents and providers.

A name given to ``--mode``, ``--agent`` or ``--provider-name`` resolves, in this order, to

1. a built-in: a table of ``name -> "module:Class"`` inside this package, imported only when
   a run asks for it, so a run pays for its own mode and nothing else;
2. a ``module:Class`` import path (a name with a colon between two non-empty parts), for
   code that is not packaged (tests, benchmarks, a script's own classes);
3. an entry point of a third-party package, in the group ``parallel_rollout.modes``,
   ``parallel_rollout.agents`` or ``parallel_rollout.providers``::

       [options.entry_points]
       parallel_rollout.modes =
           trivia = my_package.trivia:TriviaEnv

   Built-in names win over a plugin that reuses one. Entry points are read once per process
   and only for a name that is neither built in nor a path: ``importlib.metadata`` scans
   every installed distribution (30-70 ms), which every worker would otherwise pay in
   its first attempt.

Every failure is a ``ConfigError`` that names the kind, the name and what went wrong (unknown
name with the known ones listed, a module that is not found, one that raises at import, with
its file and line, a class of the wrong kind or abstract, with the methods it lacks), so the
CLI reports it before anything starts (exit 2, nothing written). ``plugin_call`` does the same
for a plugin's hooks the main process calls (``Env.prepare_run``, ``Agent.check_config``).
"""

from __future__ import annotations

import difflib
import functools
import importlib
import importlib.machinery
import importlib.util
import inspect
import logging
import os
import sys
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, Mapping, TypeVar

from .errors import ConfigError

T = TypeVar("T")

log = logging.getLogger("parallel_rollout")

#: prefix of the entry point groups: ``parallel_rollout.modes`` etc.
GROUP_PREFIX = "parallel_rollout."


@functools.lru_cache(maxsize=None)
def entry_point_targets(group: str) -> dict[str, str]:
    """name -> "module:attr" of every entry point installed in ``group`` (read once)."""
    from importlib import metadata  # 30-40 ms to import: only a name not built in needs it

    return {ep.name: f"{ep.module}:{ep.attr}" for ep in metadata.entry_points(group=group)}


@dataclass(frozen=True)
class Registry(Generic[T]):
    """Built-in names, entry points and ``module:Class`` paths of one kind of plugin."""

    #: singular noun used in messages: "mode", "agent", "provider"
    kind: str
    #: name -> "module:Class" of the built-ins
    builtin: Mapping[str, str]
    #: the class every plugin of this kind must subclass
    base: type
    #: the arguments a run makes one with (an agent or a mode: ``cls(config)``), checked
    #: against the class's constructor at load; None: not checked (a provider's vary)
    made_with: tuple[str, ...] | None = None
    #: name -> class already loaded in this process (a worker looks its mode up per task)
    _loaded: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def group(self) -> str:
        """The entry point group third-party packages declare: ``parallel_rollout.<kind>s``."""
        return f"{GROUP_PREFIX}{self.kind}s"

    def names(self) -> list[str]:
        """Every name this installation knows: built-ins and installed plugins."""
        return sorted({**entry_point_targets(self.group), **self.builtin})

    def target(self, name: str) -> str | None:
        """The "module:Class" behind ``name``, or None when no name or path matches."""
        if name in self.builtin:
            return self.builtin[name]
        module_name, sep, class_name = name.partition(":")
        if sep and module_name and class_name:
            return name  # a path: no entry point scan (see the module doc)
        return entry_point_targets(self.group).get(name)

    def __contains__(self, name: object) -> bool:
        # a loaded name first: task files ask once per task
        return isinstance(name, str) and (name in self._loaded or self.target(name) is not None)

    def load(self, name: str, said: str | None = None) -> type[T]:
        """The class registered as ``name``; ConfigError naming what is wrong otherwise, and
        the setting that named it as ``said`` (``--provider``, ``provider-name in run.toml``)."""
        cls = self._loaded.get(name)
        if cls is None:
            cls = self._loaded[name] = self._import(name, said)
        return cls

    def _import(self, name: str, said: str | None) -> type[T]:
        """``name``'s class; its errors say it as ``provider 'x' (--provider)``."""
        it = f"{self.kind} {name!r}" + (f" ({said})" if said else "")
        target = self.target(name)
        if target is None:
            close = difflib.get_close_matches(name, list(self.names()), n=1, cutoff=0.75)
            notes = [said] if said else []
            notes += [f"did you mean {close[0]!r}?"] if close else []
            raise ConfigError(
                f"unknown {self.kind} {name!r}" + (f" ({'; '.join(notes)})" if notes else "")
                + f"; known {self.kind}s: {', '.join(self.names())} (or module:Class of your own {self.base.__name__})"
            )
        module_name, _, class_name = target.partition(":")
        try:
            module = _import_module(module_name, from_cwd=target == name)
        except ModuleNotFoundError as exc:
            if exc.name is None or not (module_name + ".").startswith(exc.name + "."):
                raise self._failed(it, module_name, exc) from None  # a module it imports
            raise ConfigError(
                f"{it}: cannot import module {module_name!r}: {exc}; looked in the "
                f"current folder ({os.getcwd()}) and on sys.path: {', '.join(p for p in sys.path if p)} "
                "(PYTHONPATH adds folders)"
            ) from None
        except Exception as exc:  # noqa: BLE001 - a plugin's import may raise anything
            raise self._failed(it, module_name, exc) from None
        cls = module
        for part in class_name.split("."):  # entry points may name a nested attribute
            cls = getattr(cls, part, None)
        if cls is None:
            raise self._missing(it, module, class_name)
        if not (isinstance(cls, type) and issubclass(cls, self.base)):
            article = "an" if self.base.__name__[:1] in "AEIOU" else "a"
            raise ConfigError(
                f"{it}: {class_name!r} in {module_name} is not "
                f"{article} {self.base.__name__} subclass"
            )
        if inspect.isabstract(cls):
            # it would load, pass --dry-run, and fail every task with "Can't instantiate"
            missing = ", ".join(sorted(getattr(cls, "__abstractmethods__", ())))
            raise ConfigError(f"{it}: {class_name} in {module_name} cannot be "
                              f"made: it does not define {missing} (abstract in {self.base.__name__})")
        self._check_constructor(it, cls, class_name, module_name)
        return cls

    def _check_constructor(self, it: str, cls: type, class_name: str, module_name: str) -> None:
        """ConfigError when the run cannot make ``cls`` as it makes one (``made_with``): an
        ``__init__(self, config, tokenizer)`` loaded, passed --dry-run and failed every task
        with "missing 1 required positional argument", exit 0."""
        if self.made_with is None:
            return
        try:
            signature = inspect.signature(cls)
        except (TypeError, ValueError):  # no signature to read (a C type): made as it is
            return
        try:
            signature.bind(*self.made_with)
        except TypeError as exc:
            made = f"{class_name}({', '.join(self.made_with)})"
            raise ConfigError(f"{it}: {class_name} in {module_name} cannot be made: the run "
                              f"makes it as {made}, but its __init__ takes {signature}: {exc} (give its other "
                              "arguments defaults)") from None

    def _missing(self, it: str, module: Any, class_name: str) -> ConfigError:
        """The error for a class the module lacks (a typo): the close name, the classes of
        the kind it defines and its file (a module of that name installed shadows the folder's)."""
        defined = sorted(name for name, value in vars(module).items()
                         if isinstance(value, type) and issubclass(value, self.base)
                         and value.__module__ == module.__name__)
        close = difflib.get_close_matches(class_name, defined or [n for n in vars(module) if not n.startswith("_")],
                                          n=1, cutoff=0.6)
        which = (f"the {self.base.__name__} classes it defines: {', '.join(defined)}" if defined
                 else f"it defines no {self.base.__name__} class")
        return ConfigError(f"{it}: module {module.__name__} has no {class_name!r}"
                           + (f" (did you mean {close[0]!r}?)" if close else "")
                           + f"; {which} ({getattr(module, '__file__', None) or 'no file'})")

    def _failed(self, it: str, module_name: str, exc: BaseException) -> ConfigError:
        """The error for a module that raised at import: the plugin (``it``), its file, the
        error and where it was raised (the traceback at DEBUG: ``-v``)."""
        log.debug("%s: importing %s failed", it, module_name, exc_info=exc)
        return ConfigError(f"{it}: module {module_name} ({_module_file(module_name)}) "
                           f"failed to import: {describe(exc)}")


def _import_module(module_name: str, *, from_cwd: bool) -> Any:
    """Import ``module_name``; for a ``module:Class`` path (``from_cwd``) a module not found
    is looked for in the current folder too, which then joins sys.path (last, shadowing
    nothing installed), as ``python -m`` and uvicorn/celery's ``module:attr`` do: the
    console script's sys.path holds its own bin folder instead. Worker processes and their
    server start with this process's sys.path."""
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        cwd = os.getcwd()
        top = module_name.partition(".")[0]
        if not from_cwd or exc.name != top or cwd in sys.path or "" in sys.path:
            raise
        if importlib.machinery.PathFinder.find_spec(top, [cwd]) is None:
            raise
        sys.path.append(cwd)
        return importlib.import_module(module_name)


def describe(exc: BaseException) -> str:
    """``Type: message (file, line N)``: an exception and the line that raised it (a
    SyntaxError's own line), outside Python's import machinery."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return f"{type(exc).__name__}: {exc.msg} ({exc.filename}, line {exc.lineno})"
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith("<frozen")]
    where = f" ({frames[-1].filename}, line {frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"


def _module_file(module_name: str) -> str:
    """Where ``module_name`` is (its file), as far as finding it tells without importing it."""
    loaded = sys.modules.get(module_name)
    if loaded is not None and getattr(loaded, "__file__", None):
        return loaded.__file__
    try:
        spec = importlib.util.find_spec(module_name)
    except Exception:  # noqa: BLE001 - its parent package failed to import: named by the error
        spec = None
    return (spec.origin if spec is not None and spec.origin else "file not found")


def plugin_call(what: str, call: Callable[..., Any], *args: Any) -> Any:
    """``call(*args)``, a hook of a plugin's class that the main process calls before the
    run (``what``: "mode 'x:Env': prepare_run"): a ConfigError stays one; any other error
    becomes one naming the hook, the error and its line (traceback at DEBUG: ``-v``)."""
    try:
        return call(*args)
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - a plugin's hook may raise anything
        log.debug("%s failed", what, exc_info=exc)
        raise ConfigError(f"{what} failed: {describe(exc)}") from None
