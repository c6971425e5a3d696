"""A message of the core, which says settings as the CLI's flags (``--num-vms``), said again
as a Python call spells them (``num_vms``, ``resume=True``, ``agent='command'``): ``run()``
and ``preflight()`` reword their errors, warnings and outcome messages with ``as_called``,
and the RL scheduler the errors of the checks it shares with ``run`` (the call there is the
trainer's ``RunConfig``)."""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Any

from .agents.base import AGENTS
from .config import NAMED_DATASETS, RunConfig
from .config_checks import CHOICES, GATE_OFF
from .envs.registry import MODES
from .pool.providers import PROVIDERS

__all__ = ["SETTING_TYPES", "as_called"]

#: a CLI flag in an error, with the value that may follow it ('x', a number, a word)
_FLAG = (r"(?<![\w-])--(?P<no>no-)?(?P<name>[a-z][a-z0-9]*(?:-[a-z0-9]+)*)(?![\w-])"
         r"(?: (?P<value>'[^']*'|\"[^\"]*\"|-?\d+(?:\.\d+)?(?![\w.])|[\w.:/-]*[\w/-]))?")
#: what is said as it is: a command line to type (`parallel-rollout image build …`), and a
#: quoted text (a task's command, an agent's stderr: 'curl --data x')
_COMMAND = (r"`[^`]*`|(?:parallel-rollout|\./dev|run_parallel_rollout\.py) [^;\n)]*"
            r"""|(?<!\w)'[^'\n]*'(?!\w)|(?<!\w)"[^"\n]*"(?!\w)""")
#: every setting of a run (a RunConfig field) and its type's text
SETTING_TYPES = {f.name: f.type for f in dataclasses.fields(RunConfig) if f.name not in ("explicit", "sources")}
#: the gates, whose 'none' a call says as None
_GATES = ("fail_under", "compare_to")


def _named(name: str) -> tuple[str, ...] | list[str]:
    """The words setting ``name`` takes as its value (``--agent openai``, ``--backend ray``,
    ``--fail-under none``): such a word after its flag is said as the value it is."""
    if name in ("agent", "mode", "provider_name"):
        registry = {"agent": AGENTS, "mode": MODES, "provider_name": PROVIDERS}[name]
        return [*registry.builtin]  # no plugin scan: a message names the built-in ones
    if name == "data":
        return [*NAMED_DATASETS]
    return GATE_OFF[:1] if name in _GATES else CHOICES.get(name, ())


def as_called(message: str, call: dict[str, Any], strict: bool = False) -> str:
    """``message`` with each CLI flag of a setting said as a ``run()`` keyword: ``--num-vms``
    as ``num_vms``, ``--resume`` as ``resume=True``, ``--agent command`` as ``agent='command'``
    when the call gave that value (a quoted value or a number always), ``--config`` as
    ``config_file``. A command line, a quoted text and the text of the call's own values (an
    agent_cmd's flags) stay as they are; ``strict``: so does every flag not followed by the
    value ``call`` holds (``--fail-under 0.9``)."""
    own = sorted({v for v in call.values() if isinstance(v, str) and len(v) > 2}, key=len, reverse=True)
    kept = "|".join([_COMMAND, *map(re.escape, own)])

    def say(found: re.Match[str]) -> str:
        if found.group("kept") is not None:
            return found.group(0)
        flag, value = found.group("name"), found.group("value")
        name = "config_file" if flag == "config" else flag.replace("-", "_")
        if name not in SETTING_TYPES and name != "config_file":
            return found.group(0)
        given = call.get(name)  # a path given as a Path is said as its text
        if value is not None and value == (os.fspath(given) if isinstance(given, os.PathLike) else given):
            return f"{name}={value!r}"
        if strict:
            number = re.fullmatch(r"-?\d+(?:\.\d+)?", value or "") and isinstance(call.get(name), (int, float))
            return f"{name}={value}" if number and float(value) == call[name] else found.group(0)
        if value and (value[0] in "'\"" or re.fullmatch(r"-?[\d.]+", value)):
            return f"{name}={value}"
        if value and value in _named(name):  # a value the setting takes, not the sentence's next word
            return f"{name}=None" if name in _GATES else f"{name}={value!r}"
        if value and re.search(r"/|\.(jsonl?|toml|gz|parquet|xml|key)$", value):  # a path, a URL: no word of a sentence
            return f"{name}={value!r}"
        rest = f" {value}" if value else ""
        if SETTING_TYPES.get(name, "").startswith("bool"):
            return f"{name}={not found.group('no')}{rest}"
        return f"{name}{rest}"

    return re.sub(f"(?P<kept>{kept})|{_FLAG}", say, message)
