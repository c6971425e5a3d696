"""Config steps that act on the guest's browser: ``chrome_open_tabs`` (open URLs in new tabs,
closing the tab Chrome started with), ``chrome_close_tabs`` (close the tabs showing URLs, as
:func:`metrics.browser.compare_urls` compares them) and ``update_browse_history`` (visits
written into the profile's History database, dated seconds before now).

The tab steps go through :mod:`.chrome` (DevTools from inside the guest). The history step
reads the profile's own History file from the guest (Chrome makes it on its first start) and
writes it back with the visits added; without one it starts from OSWorld's empty history
database, through the download cache.
"""

from __future__ import annotations

import sqlite3
import tempfile
from datetime import datetime, timedelta
from pathlib import Path

from . import chrome
from .metrics.browser import compare_urls
from .sources import EMPTY_HISTORY_URL, local_source
from .step_values import NUMBER, TEXT, TEXTS, Objects

#: Chrome's transition type for a typed, chain-start-and-end visit (OSWorld's value)
_TRANSITION = 805306368


def chrome_open_tabs(env, urls_to_open: list[str]) -> None:
    chrome.open_tabs(env.vm, urls_to_open, close_first=True)


def chrome_close_tabs(env, urls_to_close: list[str]) -> None:
    open_now = chrome.pages(env.vm)
    closing = []
    for url in urls_to_close:
        match = next((p for p in open_now if p["id"] not in closing and compare_urls(p["url"], url)), None)
        if match:
            closing.append(match["id"])
    if closing:
        chrome.close_tabs(env.vm, closing)


def _chrome_time(seconds_ago: float) -> int:
    """Microseconds since 1601-01-01, Chrome's clock, ``seconds_ago`` before now."""
    moment = datetime.now() - timedelta(seconds=seconds_ago)
    return int((moment - datetime(1601, 1, 1)).total_seconds() * 1_000_000)


def update_browse_history(env, history: list[dict]) -> None:
    path = f"{chrome.profile_dir(env.vm)}/History"
    try:
        data = env.vm.read_file(path)
    except FileNotFoundError:
        data = Path(local_source(env.task, EMPTY_HISTORY_URL, env.cache_root)).read_bytes()
    with tempfile.TemporaryDirectory() as folder:
        db_path = Path(folder) / "History"
        db_path.write_bytes(data)
        with sqlite3.connect(db_path) as db:
            for item in history:
                when = _chrome_time(item["visit_time_from_now_in_seconds"])
                url_id = db.execute("INSERT INTO urls (url, title, visit_count, typed_count, last_visit_time, hidden)"
                                    " VALUES (?, ?, 1, 0, ?, 0)", (item["url"], item["title"], when)).lastrowid
                db.execute("INSERT INTO visits (url, visit_time, from_visit, transition, segment_id, visit_duration)"
                           " VALUES (?, ?, 0, ?, 0, 0)", (url_id, when, _TRANSITION))
        env.vm.write_file(path, db_path.read_bytes())


STEPS = {"chrome_open_tabs": chrome_open_tabs, "chrome_close_tabs": chrome_close_tabs,
         "update_browse_history": update_browse_history}
#: step type -> parameter -> the kind of value it needs (setup.VALUES)
VALUES = {"chrome_open_tabs": {"urls_to_open": TEXTS}, "chrome_close_tabs": {"urls_to_close": TEXTS},
          "update_browse_history": {"history": Objects({"url": TEXT, "title": TEXT,
                                                        "visit_time_from_now_in_seconds": NUMBER})}}
