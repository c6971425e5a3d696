"""OSWorld's metrics by concept, and :data:`METRICS`, the registry of every one this mode
implements (name -> function called as ``metric(result, expected, **options)``).

Modules: ``general`` (values, text, JSON, lists, accessibility tree), ``table``
(spreadsheets; ``xlsx`` reads their parts), ``slides`` (presentations), ``docs`` and
``docs_format`` (documents' text and formatting), ``editor`` (settings and text files),
``browser`` (URLs, tabs, bookmarks), ``pdfs`` (PDFs and archives), ``slides_checks``
(single-deck and Impress checks), ``images`` and ``images_checks`` (image similarity and GIMP
checks), ``desktop_apps`` (Thunderbird, GNOME, MP3 tags), ``media`` (VLC and videos),
``ocr`` (text in an image), ``rules`` (the value rules several share). The libraries they
read files with are the ``[osworld]`` extra, imported only when a metric runs, so this
registry imports cheaply.
"""

from __future__ import annotations

from typing import Callable

from . import (browser, desktop_apps, docs, docs_format, editor, general, images, images_checks, media,
               ocr, pdfs, slides, slides_checks, table)

METRICS: dict[str, Callable[..., float]] = {}
for _module in (general, table, slides, slides_checks, docs, docs_format, editor, browser, pdfs, images,
                images_checks, desktop_apps, media, ocr):
    METRICS.update(_module.METRICS)

__all__ = ["METRICS"]
