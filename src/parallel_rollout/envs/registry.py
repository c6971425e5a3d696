"""Mode name → Env class, imported lazily so a run pays only for its own mode."""

from __future__ import annotations

import importlib
from typing import Any, Callable, Mapping

from ..errors import ConfigError
from .base import Env

_MODES = {
    "shell": "parallel_rollout.envs.shell:ShellEnv",
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


def task_validators() -> Mapping[str, Callable[[Mapping[str, Any]], None]]:
    """Payload validator per mode, for ``tasks.load_tasks``."""
    return {mode: get_env(mode).validate_task for mode in _MODES}
