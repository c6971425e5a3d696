"""OSWorld's metrics by concept, and :data:`METRICS`, the registry of every one this mode
implements (name -> function called as ``metric(result, expected, **options)``).

Modules: ``general`` (values, text, JSON, lists, accessibility tree), ``table``
(spreadsheets; ``xlsx`` reads their parts), ``slides`` (presentations), ``docs`` and
``docs_format`` (documents' text and formatting), ``editor`` (settings and text files),
``browser`` (URLs, tabs, bookmarks), ``pdfs`` (PDFs and archives), ``rules`` (the value
rules several share). The libraries they read files with are the ``[osworld]`` extra,
imported only when a metric runs, so this registry imports cheaply.
"""

from __future__ import annotations

from typing import Callable

from . import browser, docs, docs_format, editor, general, pdfs, slides, table

METRICS: dict[str, Callable[..., float]] = {}
for _module in (general, table, slides, docs, docs_format, editor, browser, pdfs):
    METRICS.update(_module.METRICS)

__all__ = ["METRICS"]
