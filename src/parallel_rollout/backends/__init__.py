"""Backends: where an engine's workers and VM pools run, behind one supervision interface.

``local`` (the default) is ``supervision.Supervision``: worker processes and one Manager-
hosted pool on this host. ``ray`` is ``ray_backend.RaySupervision``: worker actors and one
pool actor per node of a Ray cluster. The engine only calls ``make_supervision``; Ray is
imported when (and only when) the ray backend is used.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError

if TYPE_CHECKING:
    from ..engine import Engine

#: what a user without Ray is told
RAY_INSTALL_HINT = "--backend ray needs Ray: pip install 'parallel-rollout[ray]'"


def check_ray() -> None:
    """ConfigError (with how to install it) when Ray is not importable."""
    if importlib.util.find_spec("ray") is None:
        raise ConfigError(RAY_INSTALL_HINT)


def make_supervision(engine: "Engine") -> Any:
    """The supervision of ``engine``'s workers and pools for its config's backend."""
    if engine.config.backend == "ray":
        check_ray()
        from .ray_backend import RaySupervision

        return RaySupervision(engine)
    from ..supervision import Supervision

    return Supervision(engine)


def sweep(provider_name: str, run_id: str | None, backend: str = "local",
          ray_address: str | None = None) -> list[str]:
    """Remove a provider's leftover VMs on this host (local) or on every node (ray)."""
    if backend == "ray":
        check_ray()
        from .ray_backend import sweep_cluster

        return sweep_cluster(provider_name, run_id, ray_address)
    from ..pool.providers import get_provider

    return get_provider(provider_name).sweep(run_id)
