"""How a setting is named to the user: as the command line, a config file, an environment
variable, a resumed run's config.json or a Python call gave it (``RunConfig.sources``), its
value as typed; and which setting a key that is none meant (a misspelling, another tool's
name for it, a flag of how the command runs). Every error of a setting says it through
these, so a user reads back what they wrote. It imports nothing of the project but ``errors``.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import os
from typing import Any

from .errors import ConfigError


#: how a setting read from an environment variable is said to come from (``RunConfig.sources``)
FROM_VARIABLE = "from the environment variable "


#: a setting's source (``RunConfig.sources``) when the command line gave it in another
#: spelling, OSWorld's (cli_aliases): "typed --observation_type", what its errors name
TYPED = "typed "


#: a config file's source (``RunConfig.sources``) when it wrote the key with underscores, not
#: as the flag is spelt: "written shutdown_grace_s in run.toml", the key its errors say
WRITTEN = "written "



def written_in(key: str, source: str) -> str:
    """The source of a setting that ``source`` (``in run.toml``) gives as ``key``: a ``WRITTEN``
    one when the key is not the flag's spelling (``shutdown_grace_s``), else ``source``."""
    return f"{WRITTEN}{key} {source}" if "_" in key else source



def key_and_where(name: str, source: str) -> tuple[str, str]:
    """Setting ``name``, set off the command line, as its ``source`` writes it, and where:
    (``num-vms``, ``in run.toml``); a key written with underscores (a ``WRITTEN`` source) as
    written, (``shutdown_grace_s``, ``in run.toml``); a Python call's keyword, (``num_vms``, ``in run()``)."""
    if source.startswith(WRITTEN):
        key, _, where = source[len(WRITTEN):].partition(" ")
        return key, where
    return (name if source.endswith("()") else name.replace("_", "-")), source



def set_off_the_command_line(sources: dict[str, str], name: str) -> str | None:
    """Where setting ``name`` was set when not on the command line (``RunConfig.sources``: "in
    run.toml", "from the environment variable …", "in run()"), else None: given as a flag (in
    either spelling, a ``TYPED`` source) or not at all."""
    source = sources.get(name)
    return None if source is None or source.startswith(TYPED) else source



def flag_name(cfg: Any, name: str) -> str:
    """The flag of setting ``name`` as the user typed it: ``--observation_type`` where the
    command line spelled it so (a ``TYPED`` source), else ``--observation-type``."""
    source = getattr(cfg, "sources", {}).get(name, "")
    return source[len(TYPED):] if source.startswith(TYPED) else "--" + name.replace("_", "-")


#: the settings with no flag of their own (config.py's tunables, the RL schedulers' and the
#: model client's): a config file's keys, run()'s keywords, a RunConfig's fields
FLAGLESS = frozenset({"lease_timeout_s", "ack_timeout_s", "start_timeout_s", "shutdown_grace_s", "api_timeout_s",
                      "max_vm_replacements", "min_free_disk_mb", "policy_gate", "policy_gate_key",
                      "partial_rollout", "abort_url", "tokenizer", "max_model_len", "on_length", "extra_body"})



def setting_name(cfg: Any, name: str) -> str:
    """Setting ``name`` as an error of its value says it: its flag (``flag_name``; a Python
    call's errors are said again as its keywords, ``call_spelling.as_called``); one with no
    flag (``FLAGLESS``) as the key its source spells: ``min-free-disk-mb`` set in a config
    file (or a resumed run's config.json), ``min_free_disk_mb`` in Python (run()'s keyword, a
    trainer's RunConfig field)."""
    if name not in FLAGLESS:
        return flag_name(cfg, name)
    source = set_off_the_command_line(getattr(cfg, "sources", {}), name)
    return name if source is None else key_and_where(name, source)[0]


#: the source of the settings a Python call gave (``api.run``): they are said as Python spells them
PYTHON_CALL = "in run()"



def as_given(cfg: Any, name: str, with_value: bool = False) -> str:
    """A setting as the user gave it: ``--task-timeout`` (the command line, as typed:
    ``--num-workers``, ``--observation_type``; or not given; or a resume's, read from its
    config.json, which that flag changes), ``task-timeout in run.toml``, ``the environment
    variable PARALLEL_ROLLOUT_TASK_TIMEOUT``, ``task_timeout in run()`` (a Python call's
    keyword; one it left out, ``task_timeout``). ``with_value``: with the value it has, as its
    source spells it: ``--num-workers 5``, ``num-rollouts = 5 in run.toml`` (``set_where``)."""
    sources = getattr(cfg, "sources", {})
    source, value = set_off_the_command_line(sources, name), getattr(cfg, name)
    if source is not None and not source.endswith(RESUME_READS):
        if with_value:
            return set_where(name, value, source)
        if source.startswith("from "):  # from the environment variable …
            return source[len("from "):]
        return " ".join(key_and_where(name, source))
    if source is None and PYTHON_CALL in sources.values():
        return f"{name}={typed_text(value, python=True)}" if with_value else name
    flag = flag_name(cfg, name)
    return f"{flag} {value}" if with_value else flag



def key_as_given(cfg: Any, name: str) -> str:
    """``as_given`` of a setting with no flag (``min_free_disk_mb``); one no one set, as a Python
    call's keyword, or on the command line as the key that sets it: ``min-free-disk-mb in a config file``."""
    said = as_given(cfg, name)
    if said.startswith("--"):  # a flag there is not
        python = any(source.endswith("()") for source in getattr(cfg, "sources", {}).values())
        return name if python else f"{name.replace('_', '-')} in a config file"
    return said



def said_if_given(cfg: Any, name: str) -> str | None:
    """``as_given`` of a setting the run was given (a flag, a config file, a variable, a
    call's keyword, a resume's config.json); None for a default, which no one typed."""
    return as_given(cfg, name) if name in getattr(cfg, "explicit", ()) else None



def set_where(name: str, value: Any, source: str) -> str:
    """A setting set off the command line, as its source spells it: ``num-vms = 0 in run.toml``,
    or ``num_vms=0 in run()`` for a Python call's keyword (``in preflight()`` too); its value as typed."""
    key, source = key_and_where(name, source)
    if source.endswith("()"):
        return f"{key}={typed_text(value, python=True)} {source}"
    if source.startswith(FROM_VARIABLE) and isinstance(value, (list, tuple)):
        # a list read from a variable is its text split (at spaces by click, at commas by
        # --vm-address): the text typed, not a list no one wrote
        value = os.environ.get(source[len(FROM_VARIABLE):], value)
    return f"{key} = {typed_text(value)} {source}"


#: what other eval harnesses and CI tools call the gates -> the setting it is here: the nearest
#: spelling was another setting's ("--min-pass-rate": did you mean --client-password?), and the
#: variable of that name a systemd unit set was ignored, its gate never applied
GATE_SYNONYMS = {
    **dict.fromkeys(("min_pass_rate", "min_success_rate", "pass_rate", "success_rate", "threshold",
                     "pass_threshold", "success_threshold", "min_score", "fail_below"), "fail_under"),
    **dict.fromkeys(("baseline", "baseline_run", "compare", "compare_with"), "compare_to"),
}


#: a run flag's other names and OSWorld's run.py spellings that name a setting otherwise, as a
#: config file's keys (underscored): the command line takes them, a file's key is the setting's
#: (tests/test_config.py holds this equal to cli.py's flags and cli_aliases.OSWORLD_ALIASES)
KEY_SYNONYMS = {
    "num_workers": "num_rollouts", "provider": "provider_name", "max_steps": "max_turns",
    "test_config_base_dir": "data", "test_all_meta_path": "osworld_index", "result_dir": "output_dir",
    "num_envs": "num_rollouts",
}


#: how a setting a resume took from the run's config.json is said to come from (``RunConfig.sources``)
RESUME_READS = "which --resume reads"



def typed_text(value: Any, python: bool = False) -> str:
    """``value`` as an error quotes it, the way a config file, a variable or a call wrote it:
    a float setting's whole number as the ``80`` typed (its check made it ``80.0``), ``nan``
    and ``inf`` as such (JSON says ``NaN``); else as JSON, or as Python (``python``) writes it."""
    if isinstance(value, float) and (value.is_integer() or not math.isfinite(value)):
        return str(int(value)) if value.is_integer() else str(value)
    return repr(value) if python else json.dumps(value, default=str)



def closest_setting(name: str, names: Any) -> str | None:
    """The setting (of ``names``, underscored) that ``name`` (underscored) misspells or that
    another tool or name calls so (``GATE_SYNONYMS``, ``KEY_SYNONYMS``) or the one setting
    that holds each of its words (``async_ratio``: async_generation_ratio), None when none is close."""
    if name in GATE_SYNONYMS:
        return GATE_SYNONYMS[name]
    names, words = list(names), set(name.split("_"))
    if KEY_SYNONYMS.get(name) in names:  # num_workers, max_steps: the command line's other names
        return KEY_SYNONYMS[name]
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.75)
    holding = [each for each in names if len(words) > 1 and words <= set(each.split("_"))]
    return close[0] if close else holding[0] if len(holding) == 1 else None



def check_no_stray_fields(cfg: Any, where: str) -> None:
    """ConfigError for an attribute set on the dataclass ``cfg`` that is none of its fields
    (``cfg.max_retry = 0``, a misspelt ``max_retries``): nothing reads it, so the setting the
    trainer meant was silently left at its default."""
    names = [item.name for item in dataclasses.fields(cfg)]
    stray = sorted(name for name in set(vars(cfg)) - set(names) if not name.startswith("_"))  # its own: _called_with
    if stray:
        close = closest_setting(stray[0], names)
        raise ConfigError(f"{where}: {stray[0]!r} is no field of {type(cfg).__name__}"
                          + (f" (did you mean {close}?)" if close else "")
                          + "; set as an attribute, nothing reads it")


#: the CLI's flags of how ``run`` runs, no RunConfig field: what a Python call does instead
_COMMAND_LINE_ONLY = {
    "dry_run": "from Python the dry run is preflight(...) of parallel_rollout.api, with the same settings",
    "check_endpoint": "from Python it is preflight(..., check_endpoint=True) of parallel_rollout.api",
    "print_config": "from Python, parallel_rollout.config.build_config(...).to_json() shows the settings",
    "verbose": "from Python, set the level of the 'parallel_rollout' logger",
    "quiet": "from Python, set the level of the 'parallel_rollout' logger",
}



def unknown_key(key: str, where: str, fields: Any) -> ConfigError:
    """The error for ``key``, no setting of ``fields``, given ``where`` (a file, a Python call:
    ``where`` ends in ``()``): the setting it misspells; for one of the CLI's flags of how it
    runs (``dry_run``: it was an unknown key whose hint, 'keys are the flag names', it is),
    what does it in a call, or that it goes on the command line."""
    name, call = key.replace("-", "_"), where.endswith("()")
    if name in _COMMAND_LINE_ONLY:
        return ConfigError(f"{where}: {key!r} is no setting of a run but how the command runs: "
                           + (_COMMAND_LINE_ONLY[name] if call else "give it on the command line"))
    example = "num_vms" if call else "num-vms"
    close = closest_setting(name, fields)  # as the CLI's flags
    hint = f"did you mean {close if call else close.replace('_', '-')}?" if close else ""
    return ConfigError(f"{where}: unknown key {key!r}; {hint or f'keys are the flag names, e.g. {example}'}")
