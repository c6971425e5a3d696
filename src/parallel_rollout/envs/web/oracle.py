"""Scripted MiniWoB++ solvers, written for this project: each reads the utterance and the DOM
list of the current observation and answers the next action, so the harness can be checked
without a model.

Every solver is stateless: it looks at what the page shows now (which boxes are ticked,
what a field holds, which tab is open) and does the next missing thing, finishing with the
submit button. An environment without a solver gets a wait, so its episode ends at the
page's time limit (or at --max-turns, whichever comes first) with reward 0 (how the oracle
fails: cleanly, never hanging).
"""

from __future__ import annotations

import re
from typing import Any, Callable, Mapping

Dom = list[dict[str, Any]]
WAIT = {"action": "wait", "ms": 1000}
_ORDINALS = {"1st": 0, "2nd": 1, "3rd": 2, "4th": 3, "5th": 4, "6th": 5, "7th": 6, "8th": 7, "9th": 8}


def quoted(utterance: str) -> list[str]:
    """The strings between double quotes, in order."""
    return re.findall(r'"([^"]*)"', utterance)


def find(dom: Dom, tag: str | None = None, text: str | None = None, **fields: Any) -> list[dict[str, Any]]:
    """Elements with this tag (a prefix such as ``input`` matches ``input_text``), exact text
    and field values."""
    found = []
    for el in dom:
        if tag is not None and not (el["tag"] == tag or el["tag"].startswith(tag + "_")):
            continue
        if text is not None and (el.get("text") or "").strip() != text:
            continue
        if all(el.get(k) == v for k, v in fields.items()):
            found.append(el)
    return found


def visible(el: Mapping[str, Any]) -> bool:
    """On screen (jQuery UI parks hidden helper text far to the left)."""
    return el["left"] + el["width"] > 0 and el["top"] + el["height"] > 0


def click(el: Mapping[str, Any]) -> dict[str, Any]:
    return {"action": "click", "ref": el["ref"]}


def submit(dom: Dom, label: str = "Submit") -> dict[str, Any]:
    """Click the button labelled ``label`` (any case), else the page's #subbtn."""
    for el in dom:
        if el["tag"] == "button" and (el.get("text") or "").strip().lower() == label.lower():
            return click(el)
    buttons = find(dom, id="subbtn") or find(dom, "button")
    return click(buttons[-1]) if buttons else WAIT


def fill(field: Mapping[str, Any], text: str, dom: Dom, button: str = "Submit") -> dict[str, Any]:
    """Type ``text`` into ``field`` unless it already holds it; then submit."""
    if field.get("value", "") != text:
        return {"action": "type", "ref": field["ref"], "text": text}
    return submit(dom, button)


def label_of(dom: Dom, el: Mapping[str, Any]) -> str:
    """The text next to an input: its siblings' text (MiniWoB wraps input and text in one
    label)."""
    return " ".join((s.get("text") or "").strip() for s in dom
                    if s.get("parent") == el.get("parent") and s is not el and s.get("text")).strip()


def first_field(dom: Dom) -> dict[str, Any] | None:
    fields = find(dom, "input_text") + find(dom, "textarea")
    return fields[0] if fields else None


# -- solvers ------------------------------------------------------------------------------------


def click_quoted_button(obs):
    want = quoted(obs["utterance"])[-1]
    return click(find(obs["dom"], "button", want)[0])


def click_link(obs):
    want = quoted(obs["utterance"])[-1]
    links = [el for el in find(obs["dom"], text=want) if el["tag"] != "t" and visible(el)]
    return click(links[0]) if links else None


def click_dialog(obs):
    return click(next(el for el in obs["dom"] if "ui-dialog-titlebar-close" in el.get("classes", "")))


def click_dialog_2(obs):
    want = quoted(obs["utterance"])[-1]
    if want.lower() == "x":
        return click_dialog(obs)
    return click(find(obs["dom"], "button", want)[0])


def click_test(obs):
    return click(find(obs["dom"], "button")[0])


def click_test_2(obs):
    word = re.search(r"button (\w+)", obs["utterance"]).group(1)
    return click(find(obs["dom"], "button", word)[0])


_WIDGETS = {"button": ("button",), "text": ("input_text",), "textarea": ("textarea",),
            "checkbox": ("input_checkbox",), "radio": ("input_radio",)}


def click_widget(obs):
    kind = quoted(obs["utterance"])[-1]
    for el in obs["dom"]:
        if el["tag"] in _WIDGETS.get(kind, (kind,)):
            return click(el)
    return None


def focus_text(obs):
    fields = sorted(find(obs["dom"], "input_text"), key=lambda el: el["top"])
    match = re.search(r"(\d+(?:st|nd|rd|th))", obs["utterance"])
    return click(fields[_ORDINALS[match.group(1)] if match else 0])


def click_option(obs):
    want = re.search(r"Select (.*) and click Submit", obs["utterance"]).group(1)
    for el in find(obs["dom"], "input_radio"):
        if label_of(obs["dom"], el) == want:
            return click(el) if not el.get("value") else submit(obs["dom"])
    return None


def click_checkboxes(obs):
    words = re.search(r"Select (.*) and click Submit", obs["utterance"]).group(1)
    wanted = set() if words.strip() == "nothing" else {w.strip() for w in words.split(",")}
    for el in find(obs["dom"], "input_checkbox"):
        if (label_of(obs["dom"], el) in wanted) != bool(el.get("value")):
            return click(el)
    return submit(obs["dom"])


def enter_text(obs):
    return fill(first_field(obs["dom"]), quoted(obs["utterance"])[0], obs["dom"])


def enter_text_2(obs):
    text = quoted(obs["utterance"])[0]
    text = text.upper() if "upper case" in obs["utterance"] else text.lower()
    return fill(first_field(obs["dom"]), text, obs["dom"])


def enter_password(obs):
    password = quoted(obs["utterance"])[0]
    for el in find(obs["dom"], "input_password"):
        if el.get("value", "") != password:
            return {"action": "type", "ref": el["ref"], "text": password}
    return submit(obs["dom"])


def login_user(obs):
    user, password = quoted(obs["utterance"])[:2]
    for el, text in ((find(obs["dom"], "input_text")[0], user), (find(obs["dom"], "input_password")[0], password)):
        if el.get("value", "") != text:
            return {"action": "type", "ref": el["ref"], "text": text}
    return submit(obs["dom"], "Login")


def click_tab(obs):
    number = re.search(r"Tab #(\d+)", obs["utterance"]).group(1)
    return click(find(obs["dom"], "a", f"Tab #{number}")[0])


def _next_section(dom: Dom, tag: str, active: str) -> dict[str, Any] | None:
    """The section header after the open one (the first when none is open)."""
    headers = [el for el in dom if el["tag"] == tag and ("ui-tabs-tab" in el.get("classes", "")
                                                         or "ui-accordion-header" in el.get("classes", ""))]
    if not headers:
        return None
    opened = [i for i, el in enumerate(headers) if active in el.get("classes", "").split()]
    index = (opened[0] + 1) % len(headers) if opened else 0
    return headers[index]


def click_tab_2(obs):
    found = click_link(obs)
    if found:
        return found
    tab = _next_section(obs["dom"], "li", "ui-tabs-active")
    return click(find(obs["dom"], "a", parent=tab["ref"])[0]) if tab else WAIT


def click_collapsible(obs):
    header = find(obs["dom"], "h3")[0]
    if "ui-accordion-header-collapsed" in header.get("classes", "").split():
        return click(header)
    return submit(obs["dom"])


def click_collapsible_2(obs):
    found = click_link(obs)
    if found:
        return found
    header = _next_section(obs["dom"], "h3", "ui-accordion-header-active")
    return click(header) if header else WAIT


def choose_list(obs):
    want = re.search(r"Select (.*) from the list", obs["utterance"]).group(1)
    select = find(obs["dom"], "select")[0]
    if select.get("value") != want:
        return {"action": "select", "ref": select["ref"], "option": want}
    return submit(obs["dom"])


def use_autocomplete(obs):
    words = quoted(obs["utterance"])
    start, end = words[0], (words[1] if len(words) > 1 else "")
    field = find(obs["dom"], "input_text")[0]
    value = field.get("value", "")
    if value.startswith(start) and value.endswith(end) and len(value) > len(start):
        return submit(obs["dom"])
    items = [el for el in obs["dom"] if "ui-menu-item" in el.get("classes", "") and el.get("text")]
    for el in items:
        if el["text"].startswith(start) and el["text"].endswith(end):
            return click(el)
    if value != start:
        return {"action": "type", "ref": field["ref"], "text": start}
    return {"action": "wait", "ms": 300}


def find_word(obs):
    nth = _ORDINALS[re.search(r"(\d+(?:st|nd|rd|th)) word", obs["utterance"]).group(1)]
    paragraph = find(obs["dom"], "p")[0]
    words = paragraph["text"].split()
    return fill(find(obs["dom"], "input_text")[0], words[nth].strip(".,;:!?"), obs["dom"])


def read_table(obs):
    key = re.search(r"value of (.*) into", obs["utterance"]).group(1).strip()
    dom = obs["dom"]
    cell = next(el for el in dom if el["tag"] in ("td", "th") and (el.get("text") or "").strip() == key)
    row = [el for el in dom if el["tag"] in ("td", "th") and el.get("parent") == cell.get("parent") and el is not cell]
    return fill(find(dom, "input_text")[0], row[0]["text"].strip(), dom)


def simple_arithmetic(obs):
    dom = obs["dom"]
    problem = next(el["text"] for el in dom if re.fullmatch(r"\s*-?\d+\s*[-+x*/]\s*-?\d+\s*=?\s*", el.get("text") or ""))
    a, op, b = re.match(r"\s*(-?\d+)\s*([-+x*/])\s*(-?\d+)", problem).groups()
    a, b = int(a), int(b)
    answer = {"+": a + b, "-": a - b, "x": a * b, "*": a * b, "/": a // b if b else 0}[op]
    return fill(find(dom, "input_text")[0], str(answer), dom)


def copy_paste(obs):
    dom = obs["dom"]
    source = find(dom, "textarea")[0]
    return fill(find(dom, "input_text")[0], source.get("value", source.get("text", "")), dom)


def scroll_text(obs):
    dom = obs["dom"]
    source = find(dom, "textarea")[0]
    words = (source.get("value") or source.get("text") or "").split()
    return fill(find(dom, "input_text")[0], words[-1] if words else "", dom)


def text_transform(obs):
    dom = obs["dom"]
    field = find(dom, "input_text")[0]
    captcha = find(dom, id="captcha")[0]
    shown = "".join(el.get("text", "") for el in dom if el.get("parent") == captcha["ref"])
    return fill(field, shown.replace(" ", ""), dom)


SOLVERS: dict[str, Callable[[Mapping[str, Any]], Any]] = {
    "click-button": click_quoted_button, "unicode-test": click_quoted_button,
    "click-link": click_link, "click-dialog": click_dialog, "click-dialog-2": click_dialog_2,
    "click-test": click_test, "click-test-2": click_test_2, "click-test-transfer": click_test_2,
    "click-widget": click_widget, "focus-text": focus_text, "focus-text-2": focus_text,
    "click-option": click_option, "click-checkboxes": click_checkboxes,
    "click-checkboxes-large": click_checkboxes, "click-checkboxes-transfer": click_checkboxes,
    "enter-text": enter_text, "enter-text-dynamic": enter_text, "enter-text-2": enter_text_2,
    "enter-password": enter_password, "login-user": login_user, "click-tab": click_tab,
    "click-tab-2": click_tab_2, "click-collapsible": click_collapsible,
    "click-collapsible-2": click_collapsible_2, "choose-list": choose_list,
    "use-autocomplete": use_autocomplete, "find-word": find_word, "read-table": read_table,
    "simple-arithmetic": simple_arithmetic, "copy-paste": copy_paste, "scroll-text": scroll_text,
    "text-transform": text_transform,
}


def next_action(env: str, observation: Mapping[str, Any]) -> Any:
    """The solver's next action for ``env``; a wait when there is no solver, the page is done,
    or the solver finds nothing to do."""
    solver = SOLVERS.get(env)
    if solver is None or observation.get("done") or not observation.get("dom"):
        return WAIT
    try:
        action = solver(observation)
    except (StopIteration, IndexError, AttributeError, KeyError, ValueError):
        action = None
    return action or WAIT
