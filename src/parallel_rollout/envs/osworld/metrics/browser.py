"""Browser metrics (OSWorld's Chrome tasks): the active tab's URL against a URL, patterns or
a search query; open tabs, bookmarks, installed extensions, cookies, history, desktop
shortcuts, font size, a shopping cart's page, two saved HTML pages.

URLs compare as OSWorld's ``compare_urls`` does: a missing scheme means http, ``www.`` alone
and the public suffix are dropped from the host (``airbnb.com`` = ``www.airbnb.com.sg``), a
lone ``/`` path is empty; query and fragment count. The public suffix list is tldextract's
bundled copy (nothing is fetched). tldextract, rapidfuzz, beautifulsoup4 and lxml are the
``[osworld]`` extra, imported when called.
"""

from __future__ import annotations

import re
from itertools import product
from typing import Any
from urllib.parse import ParseResult, urlparse, urlunparse

_EXTRACT = None


def _host_without_suffix(netloc: str) -> str:
    global _EXTRACT
    if _EXTRACT is None:
        import tldextract

        _EXTRACT = tldextract.TLDExtract(suffix_list_urls=())
    parts = _EXTRACT(netloc.lower())
    sub = "" if parts.subdomain == "www" else parts.subdomain
    return f"{sub}.{parts.domain}" if sub else parts.domain


def normalized_url(url: str, full: bool = True) -> str:
    """The URL as compare_urls sees it (module doc)."""
    if not re.match(r"^[a-zA-Z][a-zA-Z0-9+\-.]*://", url):
        url = f"http://{url}"
    parsed = urlparse(url)
    return urlunparse(ParseResult(
        scheme=parsed.scheme.lower(), netloc=_host_without_suffix(parsed.netloc),
        path=parsed.path if parsed.path != "/" else "", params=parsed.params if full else "",
        query=parsed.query if full else "", fragment=parsed.fragment if full else ""))


def compare_urls(a: str | None, b: str | None, full: bool = True) -> bool:
    """Whether two URLs are the same page (module doc); two Nones are."""
    if a is None or b is None:
        return a == b
    return normalized_url(a, full) == normalized_url(b, full)


def _same_lists(first: list, second: list, same) -> bool:
    return len(first) == len(second) and all(any(same(a, b) for b in second) for a in first)


def _url_of(tab: Any) -> Any:
    return tab.get("url", None) if isinstance(tab, dict) else tab


def is_expected_active_tab(active_tab: Any, rule: dict, **options: Any) -> float:
    """``type: url``: the active tab (its info or its URL) is ``rule["url"]``."""
    if not active_tab:
        return 0.0
    if rule["type"] != "url":
        return 0.0
    return float(compare_urls(rule["url"], _url_of(active_tab)))


def is_expected_active_tab_approximate(active_tab: Any, rule: dict, **options: Any) -> float:
    """As is_expected_active_tab, the URLs compared verbatim without their query."""
    if not active_tab:
        return 0.0
    if rule["type"] != "url":
        return 0.0

    def bare(url):
        return urlunparse(urlparse(url)._replace(query=""))

    return float(bare(rule["url"]) == bare(_url_of(active_tab)))


def is_expected_url_pattern_match(result: Any, rules: dict, **options: Any) -> float:
    """1 when every regex of ``rules["expected"]`` is found in the URL (a string, or a tab
    info's ``url``)."""
    if not result:
        return 0.0
    if isinstance(result, str):
        url = result
    elif isinstance(result, dict) and "url" in result:
        url = result["url"]
    else:
        return 0.0
    return float(all(re.search(pattern, url) for pattern in rules["expected"]))


def is_expected_installed_extensions(installed: Any, expected: dict, **options: Any) -> float:
    """1 when every expected extension is installed."""
    if not installed:
        return 0.0
    return float(set(expected["expected"]) <= set(installed))


def is_expected_tabs(open_tabs: Any, rule: dict, **options: Any) -> float:
    """``type: url``: the open tabs are the expected URLs (any order)."""
    if not open_tabs:
        return 0.0
    if rule["type"] != "url":
        return 0.0
    return float(_same_lists(rule["urls"], [tab["url"] for tab in open_tabs], compare_urls))


def _bar(bookmarks: dict, kind: str) -> list:
    return [b for b in bookmarks["bookmark_bar"]["children"] if b["type"] == kind]


def is_expected_bookmarks(bookmarks: Any, rule: dict, **options: Any) -> float:
    """Bookmark-bar folder names, bookmark-bar URLs, or the URLs of its "Liked Authors"
    folder (each expected entry one URL or a list of acceptable ones)."""
    if not bookmarks:
        return 0.0
    kind = rule["type"]
    if kind == "bookmark_bar_folders_names":
        return float({b["name"] for b in _bar(bookmarks, "folder")} == set(rule["names"]))
    if kind == "bookmark_bar_websites_urls":
        return float({b["url"] for b in _bar(bookmarks, "url")} == set(rule["urls"]))
    if kind == "liked_authors_websites_urls":
        folder = next((b for b in _bar(bookmarks, "folder") if b["name"] == "Liked Authors"), None)
        if folder is None:
            return 0.0
        have = {b["url"] for b in folder["children"] if b["type"] == "url"}
        choices = [[u] if isinstance(u, str) else u for u in rule["urls"]]
        return float(any(set(combination) == have for combination in product(*choices)))
    raise TypeError(f"bookmark rule type {kind!r} is not supported")


def is_expected_search_query(active_tab: Any, rules: dict, **options: Any) -> float:
    """1 when ``rules["expect"]["pattern"]`` is found in the active tab's URL."""
    if not active_tab:
        return 0.0
    return float(re.search(rules["expect"]["pattern"], active_tab["url"]) is not None)


def is_cookie_deleted(cookie_data: list, rule: dict, **options: Any) -> float:
    """``type: domains``: no cookie row's host (second column) is one of the domains."""
    if rule["type"] != "domains":
        raise TypeError(f"cookie rule type {rule['type']!r} is not supported")
    hosts = [row[1] for row in cookie_data]
    return float(not any(compare_urls(domain, host) for domain in rule["domains"] for host in hosts))


def is_shortcut_on_desktop(shortcuts: dict, rule: dict, **options: Any) -> float:
    """``type`` ``name`` / ``exec``: some desktop file has that ``Name=`` / ``Exec=`` line."""
    if rule["type"] not in ("name", "exec"):
        raise TypeError(f"shortcut rule type {rule['type']!r} is not supported")
    line = f"{rule['type'].capitalize()}={rule[rule['type']]}\n"
    return float(any(line in content for content in shortcuts.values()))


def check_history_deleted(history: list, rule: dict, **options: Any) -> float:
    """``type: keywords``: no history row's URL (first column) holds a keyword."""
    if rule["type"] != "keywords":
        raise TypeError(f"history rule type {rule['type']!r} is not supported")
    urls = [row[0] for row in history]
    return float(not any(keyword in url for keyword in rule["keywords"] for url in urls))


def check_font_size(font_size: dict, rule: dict, **options: Any) -> float:
    """The default font size is ``value``, or strictly between ``min`` and ``max``."""
    size = font_size["default_font_size"]
    if rule["type"] == "value":
        return float(size == rule["value"])
    if rule["type"] == "range":
        return float(rule["min"] < size < rule["max"])
    raise TypeError(f"font size rule type {rule['type']!r} is not supported")


def is_added_to_steam_cart(active_tab: dict, rule: dict, **options: Any) -> float:
    """1 when the page content names every item."""
    return float(all(item in active_tab["content"] for item in rule["items"]))


def compare_htmls(result: str, expected: str, **options: Any) -> float:
    """1 when the two pages' element trees walk alike: names, stripped texts, attributes
    (``ignore_sdnum`` drops LibreOffice's ``sdnum``), and strings."""
    from bs4 import BeautifulSoup, Tag

    with open(result, encoding="utf-8") as a, open(expected, encoding="utf-8") as b:
        first, second = BeautifulSoup(a, "lxml"), BeautifulSoup(b, "lxml")
    ignore_sdnum = options.get("ignore_sdnum", None)

    def same(x, y) -> bool:
        if not (isinstance(x, Tag) and isinstance(y, Tag)):
            return x == y
        if x.name != y.name or x.text.strip() != y.text.strip():
            return False
        if x.attrs == y.attrs:
            return True
        if ignore_sdnum:
            return ({k: v for k, v in x.attrs.items() if k != "sdnum"}
                    == {k: v for k, v in y.attrs.items() if k != "sdnum"})
        return False

    return float(all(same(x, y) for x, y in zip(first.descendants, second.descendants)))


METRICS = {f.__name__: f for f in (
    is_expected_active_tab, is_expected_active_tab_approximate, is_expected_url_pattern_match,
    is_expected_installed_extensions, is_expected_tabs, is_expected_bookmarks, is_expected_search_query,
    is_cookie_deleted, is_shortcut_on_desktop, check_history_deleted, check_font_size,
    is_added_to_steam_cart, compare_htmls)}
