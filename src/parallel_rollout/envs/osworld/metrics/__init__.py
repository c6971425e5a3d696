"""OSWorld's metrics by concept, and :data:`METRICS`, the registry of every one this mode
implements (name -> function called as ``metric(result, expected, **options)``).

Modules: ``general`` (values, text, JSON, lists, accessibility tree), ``table``
(spreadsheets; ``xlsx`` reads their parts), ``slides`` (presentations), ``rules`` (the value rules several share). The
libraries they read files with are the ``[osworld]`` extra, imported only when a metric
runs, so this registry imports cheaply.
"""

from __future__ import annotations

from typing import Callable

from . import general, slides, table

METRICS: dict[str, Callable[..., float]] = {}
for _module in (general, table, slides):
    METRICS.update(_module.METRICS)

__all__ = ["METRICS"]
