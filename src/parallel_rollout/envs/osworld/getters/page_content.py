"""Getters that read what a page shows (``pdf_from_url`` prints a page to PDF):
``active_tab_html_parse`` picks texts, input values
and URL facts out of the open tab showing the active URL, by CSS class, XPath or label, as
OSWorld's getter does with Playwright (here DOM queries through :func:`..chrome.query`)."""

from __future__ import annotations

from typing import Any

from .. import chrome
from .browser import get_active_url_from_accessTree


def _by_rank(found: dict, texts: list, ranks: dict) -> None:
    for rank, key in ranks.items():
        index = int(rank)
        found[key] = texts[index] if len(texts) > index else ""


def _presence(found: dict, texts: list[str], wanted: list[str]) -> None:
    """class&url: each wanted text shown (case-insensitive) is True; anything shown that no
    wanted text contains sets is_other_exist."""
    for key in wanted:
        if any(key.lower() == text.lower() for text in texts):
            found[key.lower()] = True
    if any(all(text.lower() not in item.lower() for item in wanted) for text in texts):
        found["is_other_exist"] = True
    found.setdefault("is_other_exist", False)


def _queries(config: dict) -> list[tuple[str, Any, dict]]:
    """(what, argument, query) for every DOM read the config asks for, in OSWorld's order."""
    category, plan = config["category"], []
    if category == "class":
        for name, ranks in config.get("class_multiObject", {}).items():
            plan.append(("rank", ranks, {"kind": "texts", "selector": "." + name}))
        for name, ranks in config.get("class_multiObject_child", {}).items():
            plan.append(("rank", ranks, {"kind": "direct_texts", "selector": "." + name}))
        for name, ranks in config.get("class_multiObject_only_child", {}).items():
            plan.append(("rank", ranks, {"kind": "child_texts", "selector": "." + name, "child": "h3"}))
        for name, wanted in config.get("class_multiObject_search_exist", {}).items():
            plan.append(("exist", wanted, {"kind": "texts", "selector": "." + name}))
        for name, key in config.get("class_singleObject", {}).items():
            plan.append(("single", key, {"kind": "texts", "selector": "." + name}))
    elif category == "label":
        for text, key in config.get("labelObject", {}).items():
            plan.append(("value", key, {"kind": "label", "text": text}))
    elif category == "xpath":
        for xpath, key in config.get("xpathObject", {}).items():
            plan.append(("value", key, {"kind": "xpath_text", "xpath": xpath}))
    elif category == "input":
        for xpath, key in config.get("inputObject", {}).items():
            plan.append(("value", key, {"kind": "xpath_value", "xpath": xpath}))
    elif category == "class&url":
        for name, wanted in config.get("class_multiObject", {}).items():
            plan.append(("present", wanted, {"kind": "texts", "selector": "." + name}))
        for name, wanted in config.get("class_multiObject_li", {}).items():
            plan.append(("present", wanted, {"kind": "child_inner_texts", "selector": f".{name} li.catAllProducts",
                                              "child": "span"}))
    return plan


def get_active_tab_html_parse(env, config: dict) -> dict | None:
    """The texts the config names, keyed as it says; {} when no tab shows the active URL."""
    url = get_active_url_from_accessTree(env, config)
    if not isinstance(url, str):
        return None
    return parse_page(env.vm, url, config)


def parse_page(vm, url: str, config: dict) -> dict:
    """The texts the config names from the open tab showing ``url`` ({} when none does)."""
    plan = _queries(config)
    try:
        answer = chrome.query(vm, url, [query for _, _, query in plan])
    except chrome.ChromeError:
        answer = None
    if answer is None:
        return {}
    found: dict[str, Any] = {}
    for (what, argument, _), result in zip(plan, answer["results"] or []):
        if what == "rank":
            _by_rank(found, result or [], argument)
        elif what == "single":
            found[argument] = result[0] if result else ""
        elif what == "value":
            found[argument] = result or ""
        elif what == "present":
            _presence(found, result or [], argument)
        elif what == "exist":
            texts = result or []
            for item in argument:
                if item != "is_other_exist":
                    found[item] = item in texts
            if "is_other_exist" in argument:
                if any(text not in argument for text in texts):
                    found["is_other_exist"] = True
                found.setdefault("is_other_exist", False)
    if config["category"] == "class&url":
        page_url = answer["url"].lower()
        for key in config.get("url_include_expected", []):
            found.setdefault(key.lower(), key.lower() in page_url)
        for key, value in config.get("url_include_expected_multichoice", {}).items():
            found.setdefault(value.lower(), key.lower() in page_url)
    return found


#: what OSWorld's getter writes when printing fails (a headful Chrome cannot print)
EMPTY_PDF = b"%PDF-1.4\n%EOF\n"


def get_pdf_from_url(env, config: dict) -> str:
    """``path`` printed to PDF by the guest's browser, saved as ``dest`` (OSWorld's stand-in
    empty PDF when printing fails)."""
    import os

    target = os.path.join(env.cache_dir, config["dest"])
    os.makedirs(env.cache_dir, exist_ok=True)
    try:
        data = chrome.pdf(env.vm, config["path"])
    except chrome.ChromeError:
        data = EMPTY_PDF
    with open(target, "wb") as handle:
        handle.write(data)
    return target


def get_info_from_website(env, config: dict) -> Any:
    """The ``infos`` read from ``url`` (innerText or attribute, after clicking through
    selectors); ``backups`` when any read fails."""
    try:
        return chrome.infos(env.vm, config["url"], config.get("infos", []))
    except chrome.ChromeError:
        return config.get("backups", None)


#: recreation.gov's home page, as OSWorld's getter tries it
RECREATION_URL = "https://www.recreation.gov/"
#: the "next available" button, by the selectors OSWorld's getter tries in turn
_NEXT_AVAILABLE = ["button.next-available", "button[class*='next-available']", "button[class*='next']",
                   ".next-available", "[data-testid*='next']"]


def get_gotoRecreationPage_and_get_html_content(env, config: dict) -> dict:
    """OSWorld's recreation.gov walk: search "Diamond", open the first highlighted result (a
    new tab), press "next available", then read the ``class`` element's text (the
    ``order``-th one): ``{"expected": {class: text}}``, ``__EVALUATION_FAILED__`` when the
    walk or the read fails. ``config["url"]`` may stand in for the site (tests). OSWorld's
    ``selector`` names how the element is picked: by ``class``, its one way (the load refuses
    another)."""
    if config.get("selector", "class") != "class":
        raise ValueError(f"gotoRecreationPage_and_get_html_content picks by 'class', not {config['selector']!r}")
    name = config["class"]
    steps = [{"kind": "fill", "selector": "input#hero-search-input", "value": "Diamond"},
             {"kind": "click", "selector": "button.nav-search-button"},
             {"kind": "click_popup", "selector": ".search-result-highlight--success"},
             {"kind": "click_any", "selectors": _NEXT_AVAILABLE, "timeout": 10},
             {"kind": "texts", "selector": "." + name}]
    try:
        texts = chrome.browse(env.vm, config.get("url", RECREATION_URL), steps)
    except chrome.ChromeError as exc:
        return {"expected": {"error": "__EVALUATION_FAILED__", "error_message": str(exc)}}
    index = int(config["order"]) if "order" in config else 0
    text = texts[index] if texts and len(texts) > index else "__EVALUATION_FAILED__"
    return {"expected": {name: text}}


GETTERS = {"active_tab_html_parse": get_active_tab_html_parse, "pdf_from_url": get_pdf_from_url,
           "info_from_website": get_info_from_website,
           "gotoRecreationPage_and_get_html_content": get_gotoRecreationPage_and_get_html_content}
