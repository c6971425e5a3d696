"""The web mode's actions: JSON objects, or BrowserGym-style function-call strings, checked on
the host before anything reaches the browser.

========================================================  ==================================
JSON                                                      BrowserGym-style string
========================================================  ==================================
``{"action": "click", "ref": 12}``                        ``click("12")``
``{"action": "click", "x": 80, "y": 100}``                ``mouse_click(80, 100)``
``{"action": "type", "ref": 5, "text": "hello"}``         ``fill("5", "hello")``
``{"action": "type", "text": "hello"}`` (focused field)   ``keyboard_type("hello")``
``{"action": "press", "key": "Enter"}`` (also ctrl+a)     ``keyboard_press("Enter")``
``{"action": "scroll", "dy": 100}`` (+ ``ref`` or x/y)    ``scroll(0, 100)``
``{"action": "select", "ref": 7, "option": "Peru"}``      ``select_option("7", "Peru")``
``{"action": "wait", "ms": 500}``                         ``noop(500)``
``{"action": "done"}`` (or ``DONE``): stop the episode    ``done()``
========================================================  ==================================

``ref`` is the element's ref in the last observation's DOM list (negative refs are text
pieces: clicked at their centre). A ``type`` with a ``ref`` focuses that field and clears it
first (``"clear": false`` keeps its text); its text is at most ``MAX_TYPE_CHARS`` characters
and holds no ``<`` (nor does a pressed key), which a page showing typed text as HTML ran as script.
Any action may carry ``ms``, a pause after it, bounded as a wait's.
"""

from __future__ import annotations

import ast
import json
import math
from typing import Any

KINDS = ("click", "type", "press", "scroll", "select", "wait", "done")
#: longest wait one action may ask for
MAX_WAIT_MS = 10_000
#: longest text one type action may send: the guest types it a key at a time (two DevTools calls
#: each), and a text past the driver's call timeout ended the episode as the VM's breaking; no
#: MiniWoB field needs more than a few hundred characters
MAX_TYPE_CHARS = 2_000
#: what no text typed and no key pressed may hold: a page that shows typed text as HTML (MiniWoB's
#: terminal writes each command line into the page so) ran ``<img src=x onerror=core.endEpisode(1)>``
#: as the agent's script, which graded the page 1; no MiniWoB task takes one
TAG_OPEN = "<"
_CALLS = {
    "click": ("click", ("ref",)), "dblclick": ("click", ("ref",)),
    "mouse_click": ("click", ("x", "y")), "fill": ("type", ("ref", "text")),
    "keyboard_type": ("type", ("text",)), "keyboard_press": ("press", ("key",)),
    "press": ("press", ("ref", "key")), "scroll": ("scroll", ("dx", "dy")),
    "select_option": ("select", ("ref", "option")), "noop": ("wait", ("ms",)),
    "done": ("done", ()), "send_msg_to_user": ("done", ("message",)),
}


class ActionError(ValueError):
    """An action the mode cannot carry out; the message says what a good one looks like."""


def parse_action(action: Any) -> dict[str, Any]:
    """A checked action dict from a JSON object, a JSON string, a function-call string or the
    word DONE; ActionError otherwise."""
    if isinstance(action, str):
        text = action.strip()
        if text.strip("`*.! ").upper() == "DONE":
            return {"action": "done"}
        if text.startswith("{"):
            try:
                action = json.loads(text)
            except ValueError as exc:
                raise ActionError(f"the action is not valid JSON: {exc}") from None
        else:
            action = _parse_call(text)
    if not isinstance(action, dict):
        raise ActionError(f"an action is a JSON object like {{\"action\": \"click\", \"ref\": 3}}, "
                          f"got {type(action).__name__}")
    return _check(dict(action))


def _parse_call(text: str) -> dict[str, Any]:
    try:
        node = ast.parse(text, mode="eval").body
    except SyntaxError:
        raise ActionError(f"not an action: {text[:120]!r}; send a JSON object or a call such as "
                          "click(\"12\")") from None
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name) or node.func.id not in _CALLS:
        raise ActionError(f"unknown action call {text[:80]!r}; known: {', '.join(sorted(_CALLS))}")
    kind, names = _CALLS[node.func.id]
    try:
        args = [ast.literal_eval(arg) for arg in node.args]
        kwargs = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords if kw.arg}
    except ValueError:
        raise ActionError(f"{node.func.id}(): arguments must be literals") from None
    if len(args) > len(names):
        raise ActionError(f"{node.func.id}() takes {len(names)} arguments, got {len(args)}")
    fields: dict[str, Any] = {"action": kind, **dict(zip(names, args)), **kwargs}
    if node.func.id == "press" and "ref" in fields:
        fields.pop("ref")  # the key goes to the focused element, as keyboard_press does
    if node.func.id == "dblclick":
        fields["clicks"] = 2
    fields.pop("message", None)
    return fields


def _ref(action: dict[str, Any]) -> None:
    ref = action.get("ref")
    if isinstance(ref, str) and ref.lstrip("-").isdigit():
        action["ref"] = ref = int(ref)
    if isinstance(ref, bool) or not isinstance(ref, int) or ref == 0:
        raise ActionError(f"{action['action']}: 'ref' must be an element's ref from the DOM list, got {ref!r}")


def _number(action: dict[str, Any], name: str, default: float | None = None) -> None:
    if name not in action and default is not None:
        action[name] = default
    value = action.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ActionError(f"{action['action']}: {name!r} must be a number, got {value!r}")
    if not math.isfinite(value):  # JSON as Python reads it takes Infinity and NaN; the browser never answered
        raise ActionError(f"{action['action']}: {name!r} must be a finite number, got {value!r}")


def _no_markup(action: dict[str, Any], name: str) -> None:
    if TAG_OPEN in action[name]:
        raise ActionError(f"{action['action']}: {name!r} must not hold {TAG_OPEN!r}: a page that shows typed text "
                          "as HTML would run it as a script, and no MiniWoB task takes one")


def _check(action: dict[str, Any]) -> dict[str, Any]:
    kind = action["action"] if "action" in action else action.pop("type", None)
    if kind not in KINDS:
        raise ActionError(f"'action' must be one of {', '.join(KINDS)}, got {kind!r}")
    action["action"] = kind
    if kind == "click":
        if "ref" in action:
            _ref(action)
        else:
            _number(action, "x")
            _number(action, "y")
        clicks = action.setdefault("clicks", 1)
        if clicks not in (1, 2, 3):
            raise ActionError("click: 'clicks' must be 1, 2 or 3")
    elif kind == "type":
        if not isinstance(action.get("text"), str):
            raise ActionError(f"type: 'text' must be a string, got {action.get('text')!r}")
        if len(action["text"]) > MAX_TYPE_CHARS:
            raise ActionError(f"type: 'text' must be at most {MAX_TYPE_CHARS} characters, got {len(action['text'])}")
        _no_markup(action, "text")
        if "ref" in action:
            _ref(action)
    elif kind == "press":
        if not isinstance(action.get("key"), str) or not action["key"]:
            raise ActionError("press: 'key' must name a key such as Enter, Tab, ArrowDown or ctrl+a")
        _no_markup(action, "key")  # one '<' a press, the tag's rest a type: the terminal joins them
    elif kind == "scroll":
        _number(action, "dx", 0)
        _number(action, "dy", 0)
        if "ref" in action:
            _ref(action)
        elif "x" in action or "y" in action:  # where the wheel turns (the task's area without)
            _number(action, "x", 80)
            _number(action, "y", 130)
    elif kind == "select":
        _ref(action)
        if not isinstance(action.get("option"), str):
            raise ActionError("select: 'option' must be the option's text")
    if kind == "wait" or "ms" in action:  # the pause after any action: a click's was unchecked, and
        # 1e300 broke the driver's sleep (the episode ended as the VM's breaking, not the agent's action)
        _number(action, "ms", 500)
        action["ms"] = min(max(0, action["ms"]), MAX_WAIT_MS)
    return action
