"""Provider registry: built-in providers, ``parallel_rollout.providers`` entry points and
``module:Class`` paths (one lookup for every plugin kind: see ``plugins``)."""

from __future__ import annotations

from ...plugins import Registry
from .base import Provider, ProviderOptions, VMInfo, default_memory_mb

__all__ = ["Provider", "ProviderOptions", "VMInfo", "default_memory_mb", "get_provider",
           "provider_names"]

#: name -> "module:Class"; imported lazily so an unused provider costs nothing
PROVIDERS: Registry[Provider] = Registry("provider", {
    "process": "parallel_rollout.pool.providers.process:ProcessProvider",
    "docker": "parallel_rollout.pool.providers.docker:DockerProvider",
    "qemu": "parallel_rollout.pool.providers.qemu:QemuProvider",
    "remote": "parallel_rollout.pool.providers.remote:RemoteProvider",
    "vmware": "parallel_rollout.pool.providers.hypervisors:VMwareProvider",
    "virtualbox": "parallel_rollout.pool.providers.hypervisors:VirtualBoxProvider",
}, Provider)


def provider_names() -> list[str]:
    """Every provider name this installation knows."""
    return PROVIDERS.names()


def get_provider(name: str) -> type[Provider]:
    """The provider class registered under ``name`` (or a ``module:Class`` path)."""
    return PROVIDERS.load(name)
