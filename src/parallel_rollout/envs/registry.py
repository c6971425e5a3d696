"""Mode name → Env class, imported lazily so a run pays only for its own mode."""

from __future__ import annotations

import importlib
from typing import Any, Callable, Mapping

from ..errors import ConfigError
from .base import Env

_MODES = {
    "shell": "parallel_rollout.envs.shell:ShellEnv",
    "py": "parallel_rollout.envs.py:PyEnv",
    "math": "parallel_rollout.envs.math:MathEnv",
    "osworld": "parallel_rollout.envs.osworld:OSWorldEnv",
    "gym": "parallel_rollout.envs.gym:GymEnv",
}


def mode_names() -> list[str]:
    """Every mode this installation knows."""
    return sorted(_MODES)


def get_env(mode: str) -> type[Env]:
    """The Env class of ``mode``; ConfigError for an unknown mode."""
    target = _MODES.get(mode)
    if target is None:
        raise ConfigError(f"unknown mode {mode!r}; known modes: {', '.join(mode_names())}")
    module_name, _, class_name = target.partition(":")
    return getattr(importlib.import_module(module_name), class_name)


class _Validators(Mapping):
    """mode -> payload validator, importing a mode's module only when a task uses it."""

    def __getitem__(self, mode: str) -> Callable[[Mapping[str, Any]], None]:
        if mode not in _MODES:
            raise KeyError(mode)
        return get_env(mode).validate_task

    def __iter__(self):
        return iter(sorted(_MODES))

    def __len__(self) -> int:
        return len(_MODES)


def task_validators() -> Mapping[str, Callable[[Mapping[str, Any]], None]]:
    """Payload validator per mode, for ``tasks.load_tasks``."""
    return _Validators()
