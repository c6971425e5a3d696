"""Backends: where an engine's workers and VM pools run, behind one contract (``base``).

``local`` (the default) is ``local.LocalBackend``: worker processes and one Manager-hosted
pool on this host. ``ray`` is ``ray_backend.RayBackend``: worker actors and one pool actor
per node of a Ray cluster. The engine calls only ``make_backend``, which is the one place
that names a concrete backend; Ray is imported when (and only when) the ray backend is used.
"""

from __future__ import annotations

from ..config_checks import check_ray
from .base import Backend, BackendSpec, EngineHooks


def make_backend(spec: BackendSpec, hooks: EngineHooks) -> Backend:
    """The backend of ``spec.config.backend`` for an engine (``hooks``)."""
    if spec.config.backend == "ray":
        check_ray()
        from .ray_backend import RayBackend

        return RayBackend(spec, hooks)
    from .local import LocalBackend

    return LocalBackend(spec, hooks)


def sweep(provider_name: str, run_id: str | None, backend: str = "local",
          ray_address: str | None = None, said: str | None = None) -> list[str]:
    """Remove a provider's leftover VMs on this host (local) or on every node (ray): those
    whose run is gone, of every run or of ``run_id``; a live run's are never touched (a run
    id names one run in one output folder or several: `vms sweep --run-id X` beside a live X
    removed its VMs and failed its tasks). An unknown provider is a ConfigError naming the
    setting that gave it as ``said`` (``--provider``), on either backend."""
    from ..pool.providers import get_provider

    provider = get_provider(provider_name, said)
    if backend == "ray":
        check_ray()
        from .ray_backend import sweep_cluster

        return sweep_cluster(provider_name, run_id, ray_address)
    return provider.sweep(run_id, orphans_only=True)
