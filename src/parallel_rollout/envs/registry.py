"""Mode name → Env class: the built-in modes, ``parallel_rollout.modes`` entry points and
``module:Class`` paths (one lookup for every plugin kind: see ``plugins``)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable, Mapping

from ..plugins import Registry
from .base import Env

if TYPE_CHECKING:
    from ..config import RunConfig

MODES: Registry[Env] = Registry("mode", {
    "shell": "parallel_rollout.envs.shell:ShellEnv",
    "py": "parallel_rollout.envs.py:PyEnv",
    "math": "parallel_rollout.envs.math:MathEnv",
    "osworld": "parallel_rollout.envs.osworld:OSWorldEnv",
    "gym": "parallel_rollout.envs.gym:GymEnv",
    "web": "parallel_rollout.envs.web:WebEnv",
    "rag": "parallel_rollout.envs.rag:RagEnv",
}, Env)


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
    """``cfg`` with the settings its mode decides when they were not given: ``max_turns``
    (web 20, py 1 …: ``Env.turn_limit``). What config.json records, --print-config shows
    and a resume compares is then what the run uses. ConfigError for an unknown mode."""
    turns = get_env(cfg.mode).turn_limit(cfg)
    return cfg if turns == cfg.max_turns else dataclasses.replace(cfg, max_turns=turns)
