"""Mode name → Env class: the built-in modes, ``parallel_rollout.modes`` entry points and
``module:Class`` paths (one lookup for every plugin kind: see ``plugins``)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable, Mapping

from ..errors import ConfigError
from ..plugins import Registry
from .base import Env

if TYPE_CHECKING:
    from ..config import RunConfig

_BUILT_IN = {
    "shell": "parallel_rollout.envs.shell:ShellEnv",
    "py": "parallel_rollout.envs.py:PyEnv",
    "math": "parallel_rollout.envs.math:MathEnv",
    "osworld": "parallel_rollout.envs.osworld:OSWorldEnv",
    "gym": "parallel_rollout.envs.gym:GymEnv",
    "web": "parallel_rollout.envs.web:WebEnv",
    "rag": "parallel_rollout.envs.rag:RagEnv",
}
MODES: Registry[Env] = Registry("mode", _BUILT_IN, Env)


def mode_names() -> list[str]:
    """Every mode this installation knows (built-in and installed plugins)."""
    return MODES.names()


def get_env(mode: str) -> type[Env]:
    """The Env class of ``mode``; ConfigError for an unknown mode."""
    return MODES.load(mode)


class _Validators(Mapping):
    """mode -> payload validator, importing a mode's module only when a task uses it."""

    def __getitem__(self, mode: str) -> Callable[[Mapping[str, Any]], None]:
        if mode not in MODES:
            raise KeyError(mode)
        return get_env(mode).validate_task

    def __contains__(self, mode: object) -> bool:
        return mode in MODES

    def __iter__(self):
        return iter(mode_names())

    def __len__(self) -> int:
        return len(mode_names())


def task_validators() -> Mapping[str, Callable[[Mapping[str, Any]], None]]:
    """Payload validator per mode, for ``tasks.load_tasks``."""
    return _Validators()


def with_mode_defaults(cfg: "RunConfig") -> "RunConfig":
    """``cfg`` with what its data and mode decide when not given: the mode (a named dataset's,
    ``--data humaneval`` is py; else the one every task of the file names), then
    ``max_turns`` (web 20, py 1 …: ``Env.turn_limit``). What config.json records,
    --print-config shows and a resume compares is then what the run uses. ConfigError for an
    unknown mode, or a built-in --mode that is not the named dataset's."""
    from ..config import NAMED_DATASET_MODES
    from ..tasks import declared_mode

    named = NAMED_DATASET_MODES.get((cfg.data or "").lower())
    if "mode" not in cfg.explicit:
        implied = named or (declared_mode(cfg.data) if cfg.data else None)
        if implied and implied != cfg.mode:
            cfg = dataclasses.replace(cfg, mode=implied)
    elif named and cfg.mode != named and cfg.mode in _BUILT_IN:
        raise ConfigError(f"--data {cfg.data} holds {named} tasks, which --mode {cfg.mode} cannot run"
                          f"{cfg.where('mode')}: leave --mode out, or give --mode {named}")
    turns = get_env(cfg.mode).turn_limit(cfg)
    return cfg if turns == cfg.max_turns else dataclasses.replace(cfg, max_turns=turns)
