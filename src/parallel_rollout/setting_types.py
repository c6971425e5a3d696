"""A setting's value checked against its RunConfig field's type, however it was given: a
config file's key (TOML), ``run()``'s keyword, a resumed run's config.json, or the field of a
RunConfig made in Python (an RL scheduler's). An error names the setting as its giver spells
it (``where``: the file, ``run()``, ``RunConfig``; ``key``: ``num-vms`` as the file writes it)
and the value given; a value that is the field's type in another form is taken as that type
(numpy's integers, a ``pathlib.Path``, a comma list of addresses). Like the config, it
imports nothing of the project but ``errors`` and ``config_checks``.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import numbers
import os
from typing import Any

from .config_checks import gate_setting
from .errors import ConfigError
from .setting_names import closest_setting

#: the settings that are paths: a Python call may give each as a ``pathlib.Path``, taken as its
#: string (a ``~`` in a config file's or a variable's is expanded as the shell does on the command line)
PATH_SETTINGS = ("data", "output_dir", "junit_xml", "vm_key_file")


class UnknownField(ConfigError, TypeError):
    """A keyword that is no field of a settings dataclass (``RunConfig(num_vm=2)``): a TypeError,
    as Python's own for an unexpected keyword is, that names the field meant, as a config file's
    misspelt key and run()'s keyword are named (a ConfigError too)."""


def check_keywords(cls: Any, keywords: Any, call: str = "") -> None:
    """UnknownField for the first of ``keywords`` that is no keyword of ``cls``'s ``__init__``
    (a dataclass's: its fields), with the public one it misspells, if any; ``call``: the call
    the user made, when another passes them on (``sibling()``), else ``cls()``."""
    names = _init_keywords(cls)
    for key in keywords:
        if key not in names:
            public = [name for name in names if not name.startswith("_")]
            close = closest_setting(key, public)
            close = close if close in public else None  # a gate's synonym is a run's setting only
            raise UnknownField(f"{call or cls.__name__ + '()'} got an unexpected keyword argument {key!r}"
                               + (f"; did you mean {close}?" if close else ""))


@functools.cache
def _init_keywords(cls: Any) -> tuple[str, ...]:
    """The names ``cls(...)`` takes as keywords."""
    taken = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return tuple(item.name for item in inspect.signature(cls.__init__).parameters.values()
                 if item.kind in taken and item.name != "self")


class CheckedKeywords:
    """A base whose call names a misspelt keyword with the one meant (``check_keywords``), as
    ``run()`` and a config file's key do: ``RolloutScheduler(config, async_ratio=1)``."""

    def __new__(cls, *args: Any, **keywords: Any) -> Any:
        check_keywords(cls, keywords)
        return super().__new__(cls)


def one_or_list(value: Any) -> str | list[str] | None:
    """``base_url`` as a string (one server: as it always was) or a list of several. An empty
    entry among others is a ConfigError (``--base-url "$SERVER2"`` with the variable unset, a
    fleet file's blank line): dropped, the fleet ran a server short without a word."""
    if value is None or isinstance(value, str):
        return value or None
    if len(value) > 1 and not all(str(item).strip() for item in value):
        raise ConfigError(f"--base-url {list(value)!r} holds an empty entry: list each server's URL "
                          "(is a variable that names one unset?)")
    urls = [str(item) for item in value if str(item).strip()]
    if not urls:
        return None
    return urls[0] if len(urls) == 1 else urls


def split_addresses(value: Any) -> tuple[str, ...]:
    """``--vm-address`` values as one tuple: each item may be a comma list."""
    items = [value] if isinstance(value, str) else list(value or ())
    return tuple(part.strip() for item in items for part in str(item).split(",") if part.strip())


def checked_value(kind: str, name: str, value: Any, where: str, key: str | None = None) -> Any:
    """``value`` of setting ``name`` checked against ``kind``, its field's type (as the
    dataclass writes it: ``int | None``); errors name ``key``, the setting as the file spells
    it (num-vms), else the field."""
    key = key or name
    value = gate_setting(name, value, f"{where}: {key} ")  # "none": the gate off; "80%": 0.8
    if value is None:
        return value
    if kind.startswith("dict"):
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: {key} must be a table (e.g. [{key}] with key = value lines), "
                              f"got {value!r}")
        return value
    if kind.startswith("str | list"):
        if isinstance(value, str) or (isinstance(value, (list, tuple)) and value and all(isinstance(v, str) for v in value)):
            return value
        raise ConfigError(f"{where}: {key} must be a string or a list of strings, got {value!r}"
                          + (" (an empty list names no server)" if value == [] else ""))
    if kind.startswith("tuple"):
        if isinstance(value, str):
            return split_addresses(value)
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{where}: {key} must be a list of strings, got {value!r}")
        return split_addresses(value)
    if "bool" in kind:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: {key} must be true or false, got {value!r}")
    elif "int" in kind and "float" not in kind:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise ConfigError(f"{where}: {key} must be an integer, got {value!r}")
        value = int(value)  # numpy's int64 (a loop over np.arange) is an integer as well
    elif "float" in kind:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise ConfigError(f"{where}: {key} must be a number, got {value!r}")
        value = float(value)
    elif "str" in kind:
        if isinstance(value, os.PathLike):  # run(data=Path(...)): a path is its string
            value = os.fspath(value)
        if not isinstance(value, str):
            # a call may give a path as a pathlib.Path, which a config file has not
            taken = "a path or a string" if name in PATH_SETTINGS and from_python(where) else "a string"
            raise ConfigError(f"{where}: {key} must be {taken}, got {value!r}")
    return value


def check_fields(cfg: Any, where: str = "RunConfig") -> Any:
    """The types ``settings`` checks, on a RunConfig made in Python (an RL scheduler's, which
    no build_config checked): ConfigError naming ``where`` and the field. Returns ``cfg`` with
    numpy's numbers (``np.int64(2)``) as the ints and floats they are, as ``settings`` takes them."""
    python_numbers = {}
    for item in dataclasses.fields(cfg):
        if item.name in ("explicit", "sources"):  # how it was given, no setting
            continue
        value = getattr(cfg, item.name)
        checked = checked_value(item.type, item.name, list(value) if isinstance(value, tuple) else value, where)
        if isinstance(value, numbers.Number) and type(value) not in (bool, int, float):  # np.float64 too
            python_numbers[item.name] = checked
    return dataclasses.replace(cfg, **python_numbers) if python_numbers else cfg


def from_python(where: str) -> bool:
    """Whether ``where`` is a Python call's (``run()``) or a dataclass's (``RunConfig``), no file's."""
    return where.endswith("()") or where.isidentifier()
