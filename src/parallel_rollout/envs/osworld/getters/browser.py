"""Getters on the guest browser's tabs: the active tab's URL read from the accessibility tree
(the address bar, as OSWorld reads it), that URL loaded again for its title and HTML, its
query parameters or one of its path parts, and the list of open tabs (through
:mod:`..chrome`)."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlparse

from .. import chrome

#: the address bar, in Google Chrome's tree and in Chromium's
_ADDRESS_BARS = ("application[name=Google\\ Chrome] entry[name=Address\\ and\\ search\\ bar]",
                 "application[name=Chromium] entry[name=Address\\ and\\ search\\ bar]")
_A11Y_NS = {name: f"https://accessibility.ubuntu.example.org/ns/{path}" for name, path in (
    ("st", "state"), ("attr", "attributes"), ("cp", "component"), ("doc", "document"),
    ("docattr", "document/attributes"), ("txt", "text"), ("val", "value"), ("act", "action"))}


def active_url(tree: str, goto_prefix: str = "https://") -> str | None:
    """The URL in the browser's address bar of an accessibility tree (``goto_prefix`` put
    before it: the bar shows no scheme), None when there is none."""
    import lxml.etree
    from lxml.cssselect import CSSSelector

    try:
        root = lxml.etree.fromstring(tree.encode() if isinstance(tree, str) else tree)
    except (ValueError, lxml.etree.XMLSyntaxError):
        return None
    for selector in _ADDRESS_BARS:
        elements = CSSSelector(selector, namespaces=_A11Y_NS)(root)
        if elements:
            # as OSWorld: the last bar must have text, the first one's is used
            return f"{goto_prefix}{elements[0].text}" if elements[-1].text else None
    return None


def get_active_url_from_accessTree(env, config: dict) -> str | None:
    return active_url(env.vm.accessibility_tree(), config.get("goto_prefix", "https://"))


def get_active_tab_info(env, config: dict) -> dict | None:
    """{title, url, content} of the active tab's URL, loaded in a new tab."""
    url = get_active_url_from_accessTree(env, config)
    if url is None:
        return None
    try:
        return chrome.read(env.vm, url)
    except chrome.ChromeError:
        return None


def get_open_tabs_info(env, config: dict) -> list[dict]:
    """[{title, url}] of the open tabs ([] when the browser does not answer)."""
    try:
        return [{"title": p["title"], "url": p["url"]} for p in chrome.pages(env.vm)]
    except chrome.ChromeError:
        return []


def get_active_tab_url_parse(env, config: dict) -> dict | None:
    """The ``parse_keys`` query parameters of the active URL ('' when absent), keys renamed
    by ``replace``, values split on commas with ``split_list``."""
    url = get_active_url_from_accessTree(env, config)
    if url is None:
        return None
    query = parse_qs(urlparse(url).query)
    found = {key: query.get(key, [""])[0] for key in config["parse_keys"]}
    for old, new in config.get("replace", {}).items():
        found[new] = found.pop(old)
    if config.get("split_list", False):
        found = {key: value.split(",") for key, value in found.items()}
    return found


def get_url_dashPart(env, config: dict) -> Any:
    """Part ``partIndex`` of the active URL split on ``/`` (without its query with
    ``needDeleteId``), as a string or ``{key: part}`` (``returnType`` string/json)."""
    url = get_active_url_from_accessTree(env, config)
    if url is None:
        return None
    try:
        index = int(config["partIndex"])
    except (ValueError, TypeError):
        return None
    parts = url.split("/")
    if index >= len(parts):
        return None
    part = parts[index].split("?")[0] if config.get("needDeleteId", False) else parts[index]
    if config["returnType"] == "string":
        return part
    if config["returnType"] == "json":
        return {config["key"]: part}
    return None


GETTERS = {"active_url_from_accessTree": get_active_url_from_accessTree, "active_tab_info": get_active_tab_info,
           "open_tabs_info": get_open_tabs_info, "active_tab_url_parse": get_active_tab_url_parse,
           "url_dashPart": get_url_dashPart}


def _path_facts(url: str, parse_keys: list[str]) -> dict:
    """url_path_parse: a shop's path of ``key,key/value,value`` filter segments read as
    OSWorld's getter reads Macy's product URLs."""
    from urllib.parse import unquote

    path = unquote(urlparse(url).path)
    parts = path.strip("/").split("/")
    pairs: dict[str, Any] = {}
    shirts, short_sleeve = "shirts" in path, "short-sleeve" in path
    for keys_part, values_part in zip(parts, parts[1:]):
        if "," in keys_part and "," in values_part:
            for key, value in zip((k.strip() for k in keys_part.split(",")), (v.strip() for v in values_part.split(","))):
                if key == "Price_discount_range":
                    pairs[key] = [item.strip() for item in value.split("|")] if value else None
                else:
                    pairs[key] = value or None
                shirts = shirts or (key == "Product_department" and value in ("shirts", "Shirts", "Shirt"))
                short_sleeve = short_sleeve or (key == "Sleeve_length" and value in ("short-sleeve", "Short Sleeve"))
            break
    for field in ("Men_regular_size_t", "Price_discount_range"):
        pairs.setdefault(field, None)
    found: dict[str, Any] = {"mens_clothing": True if "mens-clothing" in path else None,
                             "shirts": True if shirts else None, "short_sleeve": True if short_sleeve else None}
    for key in parse_keys:
        if key not in pairs:
            continue
        if key == "Price_discount_range":
            ranges = pairs[key]
            best = ranges is not None and "50_PERCENT_ off & more" in ranges and \
                "30_PERCENT_ off & more" not in ranges and "20_PERCENT_ off & more" not in ranges
            found[key] = "50_PERCENT_ off & more" if best else "not_50_PERCENT_ off & more"
        else:
            found[key] = pairs[key]
    return found


def get_url_path_parse(env, config: dict) -> dict | None:
    url = get_active_url_from_accessTree(env, config)
    return None if url is None else _path_facts(url, config["parse_keys"])


def get_page_info(env, config: dict) -> dict:
    """{title, url, content} of ``config["url"]`` loaded in a new tab."""
    try:
        return chrome.read(env.vm, config["url"])
    except chrome.ChromeError:
        return {"title": "Connection failed", "url": config["url"], "content": ""}


GETTERS.update({"url_path_parse": get_url_path_parse, "page_info": get_page_info})
