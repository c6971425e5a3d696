"""Provider registry: built-in providers plus the ``parallel_rollout.providers`` entry point."""

from __future__ import annotations

import importlib
from importlib import metadata

from ...errors import ConfigError
from .base import Provider, ProviderOptions, VMInfo

__all__ = ["Provider", "ProviderOptions", "VMInfo", "get_provider", "provider_names"]

#: name -> "module:Class"; imported lazily so an unused provider costs nothing
BUILTIN = {
    "process": "parallel_rollout.pool.providers.process:ProcessProvider",
    "docker": "parallel_rollout.pool.providers.docker:DockerProvider",
    "qemu": "parallel_rollout.pool.providers.qemu:QemuProvider",
    "remote": "parallel_rollout.pool.providers.remote:RemoteProvider",
}


def _entry_points() -> dict[str, str]:
    found = {}
    for ep in metadata.entry_points(group="parallel_rollout.providers"):
        found[ep.name] = ep.value
    return found


def provider_names() -> list[str]:
    """Every provider name this installation knows."""
    return sorted({**_entry_points(), **BUILTIN})


def get_provider(name: str) -> type[Provider]:
    """The provider class registered under ``name`` (or a ``module:Class`` path)."""
    target = BUILTIN.get(name) or _entry_points().get(name) or (name if ":" in name else None)
    if target is None:
        raise ConfigError(
            f"unknown provider {name!r}; known providers: {', '.join(provider_names())} "
            "(or module:Class of your own Provider)"
        )
    module_name, _, class_name = target.partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), class_name, None)
    except ImportError as exc:
        raise ConfigError(f"provider {name!r}: cannot import {module_name!r}: {exc}") from None
    if not (isinstance(cls, type) and issubclass(cls, Provider)):
        raise ConfigError(f"provider {name!r}: {target} is not a Provider subclass")
    return cls
