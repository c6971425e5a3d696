"""OSWorld's getters by concept, and :data:`GETTERS`, the registry of every one this mode
implements (type -> function called as ``getter(env, config)``, giving the state a metric
compares).

Modules: ``files`` (VM, URL and cache files), ``general`` (commands, accessibility tree, the
task's rules), ``time_rules`` (dates relative to today), ``desktop`` (desktop routes, app
settings files, slide media), ``browser`` (tabs over DevTools, the address bar), ``browser_profile`` (the
browser's profile files), ``page_content`` (texts of the page in the active tab); the
Google Drive getter lives with the account steps."""

from __future__ import annotations

from typing import Any, Callable

from .. import account_steps
from . import browser, browser_profile, desktop, files, general, page_content, time_rules

GETTERS: dict[str, Callable[[Any, dict], Any]] = {}
for _module in (files, general, time_rules, desktop, browser, browser_profile, page_content, account_steps):
    GETTERS.update(_module.GETTERS)

__all__ = ["GETTERS"]
