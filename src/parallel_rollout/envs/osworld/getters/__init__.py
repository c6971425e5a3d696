"""OSWorld's getters by concept, and :data:`GETTERS`, the registry of every one this mode
implements (type -> function called as ``getter(env, config)``, giving the state a metric
compares)."""

from __future__ import annotations

from typing import Any, Callable

from . import files, general

GETTERS: dict[str, Callable[[Any, dict], Any]] = {}
for _module in (files, general):
    GETTERS.update(_module.GETTERS)

__all__ = ["GETTERS"]
