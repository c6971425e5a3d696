"""parallel-rollout: agent rollouts in parallel over a shared pool of reset-able VMs.

``parallel_rollout.run`` and ``parallel_rollout.load_run`` are :mod:`parallel_rollout.api`'s,
imported when first asked for (PEP 562): ``import parallel_rollout``, which the CLI's start
makes, loads ``version`` and nothing more. The face is the top layer (no module of the package
imports it: the version is ``version.py``'s), so lending ``api``'s functions points down.
"""

from .version import __version__ as __version__  # the face says it

#: the names the package lends from ``api``, imported on first use
_FROM_API = ("run", "load_run")


def __getattr__(name: str):
    """``run`` and ``load_run`` from :mod:`parallel_rollout.api`, imported the first time."""
    if name in _FROM_API:
        from . import api  # here, not at the top: the CLI's start needs none of it

        value = getattr(api, name)
        globals()[name] = value  # asked once
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    """The module's names and those it lends from ``api``."""
    return sorted({*globals(), *_FROM_API})
