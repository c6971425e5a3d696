"""Provider registry: built-in providers, ``parallel_rollout.providers`` entry points and
``module:Class`` paths (one lookup for every plugin kind: see ``plugins``); and
``provider_options``, a run's VM settings as its pool's provider gets them."""

from __future__ import annotations

import logging
import os
from typing import Any

from ...config import RunConfig
from ...errors import ConfigError, TaskFileError
from ...plugins import Registry
from .base import Provider, ProviderOptions, VMInfo, default_memory_mb
from .host_dirs import outermost
from ...setting_names import said_if_given

__all__ = ["Provider", "ProviderOptions", "VMInfo", "default_memory_mb", "get_provider",
           "provider_names", "provider_options", "run_provider"]

log = logging.getLogger("parallel_rollout")

#: name -> "module:Class"; imported lazily so an unused provider costs nothing
PROVIDERS: Registry[Provider] = Registry("provider", {
    "process": "parallel_rollout.pool.providers.process:ProcessProvider",
    "docker": "parallel_rollout.pool.providers.docker:DockerProvider",
    "qemu": "parallel_rollout.pool.providers.qemu:QemuProvider",
    "remote": "parallel_rollout.pool.providers.remote:RemoteProvider",
    "vmware": "parallel_rollout.pool.providers.hypervisors:VMwareProvider",
    "virtualbox": "parallel_rollout.pool.providers.hypervisors:VirtualBoxProvider",
}, Provider)


#: the settings whose providers' messages name them as the user gave them (``ProviderOptions.given``)
SAID_BY_PROVIDERS = ("reset_command", "boot_timeout_s", "path_to_vm", "vm_address")


def provider_names() -> list[str]:
    """Every provider name this installation knows."""
    return PROVIDERS.names()


def get_provider(name: str, said: str | None = None) -> type[Provider]:
    """The provider class registered under ``name`` (or a ``module:Class`` path); its errors
    name the setting that gave it as ``said``."""
    return PROVIDERS.load(name, said)


def run_provider(cfg: RunConfig) -> type[Provider]:
    """The provider class of a run, its errors (an unknown name, a module:Class that does not
    import) naming the setting as the user gave it: ``unknown provider 'x' (--provider)``,
    ``(provider-name in run.toml)``; a default's, none."""
    return get_provider(cfg.provider_name, said_if_given(cfg, "provider_name"))


def provider_options(config: RunConfig, provider_cls: Any, vm_envs: list[Any],
                     answer_files: tuple[str, ...] = ()) -> ProviderOptions:
    """The VM settings of a pool serving ``vm_envs``: their default limits where the
    provider supports them, the user's explicit limits always. A VM's default memory is sized
    from the host (or the runner's cgroup, where the provider's VMs count in it) and the VMs
    of the pool (``config.pool_size``: --num-vms with a shared pool, else one VM per worker;
    and its spares), and a mode's own default (py's) never goes beyond it. ``answer_files``:
    the files of the tasks' answer keys (``envs.run_answer_files``), hidden from every VM."""
    limits: dict[str, Any] = {}
    supported = provider_cls.supported_limits()
    desktop = any(getattr(env_cls, "needs_desktop", False) for env_cls in vm_envs)
    vms = config.pool_size + (config.spare_vms or 0)  # a spare holds memory too
    share = default_memory_mb(vms, desktop, provider_cls.vms_in_runner_cgroup)
    for env_cls in vm_envs:
        for name, value in env_cls.default_limits.items():
            if name == "memory_mb":
                value = min(value, share)
            if name in supported:
                limits[name] = max(value, limits.get(name, value))
            else:
                log.warning("the %s provider cannot enforce %s here; %s tasks run without it",
                            config.provider_name, name, env_cls.name or config.mode)
    # Explicit limits always go through: a provider that cannot honour one says so.
    for name in ("memory_mb", "max_processes"):
        value = getattr(config, f"vm_{name}")
        if value is not None:
            limits[name] = value
    if desktop:
        limits.update(desktop=True, screen_width=config.screen_width, screen_height=config.screen_height)
    limits["default_memory_mb"] = share
    limits["pool_size"] = vms
    return ProviderOptions(snapshot_name=config.snapshot_name, path_to_vm=config.path_to_vm,
                           headless=config.headless, boot_timeout_s=config.boot_timeout_s,
                           vm_addresses=config.vm_address, reset_command=config.reset_command,
                           vm_key_file=config.vm_key_file,
                           verify_reset=config.verify_reset, spare_vms=config.spare_vms,
                           hidden_files=hidden_files(config, vm_envs, answer_files),
                           cleanup_programs=cleanup_programs(vm_envs),
                           given={name: said for name in SAID_BY_PROVIDERS if (said := said_if_given(config, name))},
                           **limits)


def cleanup_programs(vm_envs: list[Any]) -> tuple[str, ...]:
    """What ``vm_envs`` leave running outside a reset's reach (``Env.cut_cleanup``), each once."""
    found = (getattr(env_cls, "cut_cleanup", lambda: None)() for env_cls in vm_envs)
    return tuple(dict.fromkeys(program for program in found if program))


def hidden_files(config: RunConfig, vm_envs: list[Any], answer_files: tuple[str, ...] = ()) -> tuple[str, ...]:
    """What no VM may read, by real path, none inside another (``ProviderOptions.hidden_files``):
    the file (or OSWorld folder) the run's tasks come from, and for a mode whose checks compare
    against local files (osworld's ``Env.answer_files``) those gold files (``answer_files``,
    found by the envs: wherever a task names them), and the download cache that keeps the gold
    files behind URLs (made when missing, so that a download mid-run lands in the hidden folder)."""
    from ...task_files import resolve_data
    from .host_dirs import OSWORLD_CACHE

    found: list[str] = []
    try:
        found += [str(resolve_data(config.data))] if config.data else []
    except (ConfigError, TaskFileError, OSError, ValueError):
        pass  # the load says what is wrong with it
    found += answer_files
    for where in (OSWORLD_CACHE.path, OSWORLD_CACHE.default_path) if any(cls.has_answer_files for cls in vm_envs) else ():
        try:
            cache = where()
            cache.mkdir(parents=True, exist_ok=True)
        except RuntimeError:
            continue  # a folder under a home this process has none of (no $HOME, no passwd entry)
        except OSError:
            pass  # not ours to make: hidden when it exists
        found.append(str(cache))
    return tuple(outermost(list(dict.fromkeys(os.path.realpath(path) for path in found))))
