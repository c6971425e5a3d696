"""OSWorld's action spaces: ``computer_13`` (16 typed actions) and ``pyautogui`` (code).

Both end as pyautogui code run in the VM (``python -c "import pyautogui; ..."`` through
POST /execute), as in OSWorld. ``computer_13`` actions are validated against OSWorld's
parameter table first (types, ranges against the screen, key names), so a malformed action is
an error naming the field instead of a silent no-op. Moves are instant here (OSWorld moves over
0.5–1 s with a random easing; the end state is the same and episodes are faster).
"""

from __future__ import annotations

from typing import Any

ACTION_SPACES = ("computer_13", "pyautogui")
#: the three actions that need no VM call
SPECIAL = ("WAIT", "FAIL", "DONE")
ACTION_TYPES = ("MOVE_TO", "CLICK", "MOUSE_DOWN", "MOUSE_UP", "RIGHT_CLICK", "DOUBLE_CLICK",
                "DRAG_TO", "SCROLL", "TYPING", "PRESS", "KEY_DOWN", "KEY_UP", "HOTKEY") + SPECIAL
BUTTONS = ("left", "right", "middle")

# pyautogui's KEYBOARD_KEYS, which computer_13 key parameters must come from
KEYBOARD_KEYS = frozenset(
    list("\t\n\r !\"#$%&'()*+,-./0123456789:;<=>?@[\\]^_`abcdefghijklmnopqrstuvwxyz{|}~")
    + ["accept", "add", "alt", "altleft", "altright", "apps", "backspace", "browserback",
       "browserfavorites", "browserforward", "browserhome", "browserrefresh", "browsersearch",
       "browserstop", "capslock", "clear", "convert", "ctrl", "ctrlleft", "ctrlright",
       "decimal", "del", "delete", "divide", "down", "end", "enter", "esc", "escape",
       "execute", "final", "fn", "hanguel", "hangul", "hanja", "help", "home", "insert",
       "junja", "kana", "kanji", "launchapp1", "launchapp2", "launchmail",
       "launchmediaselect", "left", "modechange", "multiply", "nexttrack", "nonconvert",
       "numlock", "pagedown", "pageup", "pause", "pgdn", "pgup", "playpause", "prevtrack",
       "print", "printscreen", "prntscrn", "prtsc", "prtscr", "return", "right",
       "scrolllock", "select", "separator", "shift", "shiftleft", "shiftright", "sleep",
       "space", "stop", "subtract", "tab", "up", "volumedown", "volumemute", "volumeup",
       "win", "winleft", "winright", "yen", "command", "option", "optionleft", "optionright"]
    + [f"f{i}" for i in range(1, 25)] + [f"num{i}" for i in range(10)])


class ActionError(ValueError):
    """An action that does not fit its action space; the message names the field."""


def special(action: Any) -> str | None:
    """"WAIT"/"FAIL"/"DONE" when ``action`` is one (string, or a dict with that action_type)."""
    if isinstance(action, str) and action.strip() in SPECIAL:
        return action.strip()
    if isinstance(action, dict) and action.get("action_type") in SPECIAL:
        return action["action_type"]
    return None


def _params(action: dict) -> dict:
    params = action.get("parameters")
    if params is None:  # OSWorld accepts the parameters flat, next to action_type
        params = {k: v for k, v in action.items() if k != "action_type"}
    if not isinstance(params, dict):
        raise ActionError("'parameters' must be an object")
    return params


def _number(params: dict, name: str, low: float, high: float, required: bool) -> float | None:
    if name not in params or params[name] is None:
        if required:
            raise ActionError(f"missing parameter {name!r}")
        return None
    value = params[name]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ActionError(f"parameter {name!r} must be a number, got {value!r}")
    if not low <= value <= high:
        raise ActionError(f"parameter {name!r} must be within [{low:g}, {high:g}], got {value}")
    return value


def _key(value: Any, name: str) -> str:
    if not isinstance(value, str) or value.lower() not in KEYBOARD_KEYS and value not in KEYBOARD_KEYS:
        raise ActionError(f"parameter {name!r} must be a pyautogui key name, got {value!r}")
    return value if value in KEYBOARD_KEYS else value.lower()


def computer13_to_code(action: Any, width: int = 1920, height: int = 1080) -> str:
    """The pyautogui code of a validated computer_13 action (not WAIT/FAIL/DONE)."""
    if not isinstance(action, dict) or "action_type" not in action:
        raise ActionError(f"a computer_13 action is {{'action_type': ..., 'parameters': {{...}}}}, got {action!r}")
    kind = action["action_type"]
    if kind not in ACTION_TYPES:
        raise ActionError(f"unknown action_type {kind!r}; one of {', '.join(ACTION_TYPES)}")
    if kind in SPECIAL:
        raise ActionError(f"{kind} is not executed in the VM")
    p = _params(action)

    def xy(required: bool) -> tuple[float | None, float | None]:
        x = _number(p, "x", 0, width, required)
        y = _number(p, "y", 0, height, required)
        if (x is None) != (y is None):
            raise ActionError("parameters 'x' and 'y' go together")
        return x, y

    def button() -> str:
        value = p.get("button", "left")
        if value not in BUTTONS:
            raise ActionError(f"parameter 'button' must be one of {BUTTONS}, got {value!r}")
        return value

    if kind == "MOVE_TO":
        x, y = xy(True)
        return f"pyautogui.moveTo({x}, {y})"
    if kind == "CLICK":
        x, y = xy(False)
        clicks = p.get("num_clicks", 1)
        if clicks not in (1, 2, 3) or isinstance(clicks, bool):
            raise ActionError(f"parameter 'num_clicks' must be 1, 2 or 3, got {clicks!r}")
        where = f"x={x}, y={y}, " if x is not None else ""
        return f"pyautogui.click({where}button={button()!r}, clicks={clicks})"
    if kind in ("MOUSE_DOWN", "MOUSE_UP"):
        name = "mouseDown" if kind == "MOUSE_DOWN" else "mouseUp"
        return f"pyautogui.{name}(button={button()!r})"
    if kind in ("RIGHT_CLICK", "DOUBLE_CLICK"):
        x, y = xy(False)
        name = "rightClick" if kind == "RIGHT_CLICK" else "doubleClick"
        return f"pyautogui.{name}({x}, {y})" if x is not None else f"pyautogui.{name}()"
    if kind == "DRAG_TO":
        x, y = xy(True)
        return f"pyautogui.dragTo({x}, {y}, duration=1.0, button='left', mouseDownUp=True)"
    if kind == "SCROLL":
        dx, dy = p.get("dx", 0), p.get("dy", 0)
        for name, value in (("dx", dx), ("dy", dy)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise ActionError(f"parameter {name!r} must be an integer, got {value!r}")
        if "dx" not in p and "dy" not in p:
            raise ActionError("SCROLL needs 'dx' or 'dy'")
        parts = ([f"pyautogui.hscroll({dx})"] if dx else []) + ([f"pyautogui.vscroll({dy})"] if dy else [])
        return "; ".join(parts) or "pass"
    if kind == "TYPING":
        text = p.get("text")
        if not isinstance(text, str):
            raise ActionError(f"parameter 'text' must be a string, got {text!r}")
        return f"pyautogui.typewrite({text!r})"
    if kind in ("PRESS", "KEY_DOWN", "KEY_UP"):
        key = _key(p.get("key"), "key")
        name = {"PRESS": "press", "KEY_DOWN": "keyDown", "KEY_UP": "keyUp"}[kind]
        return f"pyautogui.{name}({key!r})"
    # HOTKEY
    keys = p.get("keys")
    if not isinstance(keys, list) or not keys:
        raise ActionError(f"parameter 'keys' must be a non-empty list of key names, got {keys!r}")
    return "pyautogui.hotkey(" + ", ".join(repr(_key(k, "keys")) for k in keys) + ")"


def fix_less_than(code: str) -> str:
    """OSWorld's workaround for xdotool-era '<' typing (its #257): ``press('<')`` and '<'
    inside ``typewrite`` strings become ``hotkey("shift", ",")``."""
    import re

    code = re.sub(r"""pyautogui\.press\(\s*(['"])<\1\s*\)""", 'pyautogui.hotkey("shift", ",")', code)

    def split(match: re.Match) -> str:
        quote, text = match.group(1), match.group(2)
        if "<" not in text:
            return match.group(0)
        pieces = text.split("<")
        calls = []
        for index, piece in enumerate(pieces):
            if piece:
                calls.append(f"pyautogui.typewrite({quote}{piece}{quote})")
            if index < len(pieces) - 1:
                calls.append('pyautogui.hotkey("shift", ",")')
        return "; ".join(calls)

    return re.sub(r"""pyautogui\.typewrite\(\s*(['"])((?:(?!\1)[^\\]|\\.)*)\1\s*\)""", split, code)


def to_code(action: Any, action_space: str, width: int, height: int) -> str:
    """The pyautogui code an action runs as. ``pyautogui`` space: a code string or a dict
    with ``command``; a computer_13 dict is translated too (one reference serves both)."""
    if isinstance(action, dict) and "action_type" in action:
        return computer13_to_code(action, width, height)
    if action_space == "computer_13":
        raise ActionError(f"a computer_13 action is a dict with 'action_type', got {action!r}")
    if isinstance(action, dict) and isinstance(action.get("command"), str):
        action = action["command"]
    if not isinstance(action, str) or not action.strip():
        raise ActionError(f"a pyautogui action is Python code or WAIT/FAIL/DONE, got {action!r}")
    return fix_less_than(action)
