"""parallel-rollout: agent rollouts in parallel over a shared pool of reset-able VMs.

``parallel_rollout.run`` and ``parallel_rollout.load_run`` are :mod:`parallel_rollout.api`'s,
imported when first asked for (PEP 562): ``import parallel_rollout``, which the CLI's start
makes, loads nothing more, and this bottom layer imports no module above it.
"""

__version__ = "0.1.0"

#: the names the package lends from ``api``, imported on first use
_FROM_API = ("run", "load_run")


def __getattr__(name: str):
    """``run`` and ``load_run`` from :mod:`parallel_rollout.api`, imported the first time."""
    if name in _FROM_API:
        import importlib  # here, not at the top: it costs the CLI's start a module it needs not

        value = getattr(importlib.import_module(".api", __name__), name)
        globals()[name] = value  # asked once
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    """The module's names and those it lends from ``api``."""
    return sorted({*globals(), *_FROM_API})
