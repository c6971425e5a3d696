"""A small pyautogui-compatible module backed by xdotool, for guests without pyautogui.

OSWorld runs every action as ``python -c "import pyautogui; ...; <code>"`` inside the VM.
The process sandbox has no pip-installed pyautogui (it is not a Debian package), so the
provider puts this folder on PYTHONPATH: the calls OSWorld's action spaces and agents use
(moveTo, click, doubleClick, rightClick, middleClick, tripleClick, mouseDown, mouseUp, dragTo,
scroll/vscroll/hscroll, typewrite/write, press, keyDown, keyUp, hotkey, position, size,
screenshot, pixel, pixelMatchesColor) with pyautogui's argument names, executed with xdotool.
An OSWorld image has the real pyautogui and never sees this folder.

Where it matters to agents it behaves as pyautogui does: a move or drag with ``duration`` (at
least ``MINIMUM_DURATION``) goes through the points of its ``tween`` over that time, so a drag
is seen by the app as one; ``screenshot()`` returns an image (a PIL ``Image`` when the guest
has Pillow, else a ``Screenshot`` with the same ``size``, ``getpixel``, ``save``, ``crop``),
saved to ``imageFilename`` too when given; and a function this module lacks
(``locateOnScreen`` …) raises an AttributeError that names it, not a bare one.
"""

from __future__ import annotations

import os
import subprocess
import time

FAILSAFE = False
PAUSE = 0.0
MINIMUM_DURATION = 0.1
#: seconds between the steps of a move with a duration (pyautogui's MINIMUM_SLEEP)
MINIMUM_SLEEP = 0.05

KEYBOARD_KEYS = [
    "\t", "\n", "\r", " ", "!", '"', "#", "$", "%", "&", "'", "(", ")", "*", "+", ",", "-",
    ".", "/", "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", ":", ";", "<", "=", ">", "?",
    "@", "[", "\\", "]", "^", "_", "`", "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k",
    "l", "m", "n", "o", "p", "q", "r", "s", "t", "u", "v", "w", "x", "y", "z", "{", "|", "}",
    "~", "accept", "add", "alt", "altleft", "altright", "apps", "backspace", "browserback",
    "browserfavorites", "browserforward", "browserhome", "browserrefresh", "browsersearch",
    "browserstop", "capslock", "clear", "convert", "ctrl", "ctrlleft", "ctrlright", "decimal",
    "del", "delete", "divide", "down", "end", "enter", "esc", "escape", "execute", "f1", "f10",
    "f11", "f12", "f13", "f14", "f15", "f16", "f17", "f18", "f19", "f2", "f20", "f21", "f22",
    "f23", "f24", "f3", "f4", "f5", "f6", "f7", "f8", "f9", "final", "fn", "hanguel", "hangul",
    "hanja", "help", "home", "insert", "junja", "kana", "kanji", "launchapp1", "launchapp2",
    "launchmail", "launchmediaselect", "left", "modechange", "multiply", "nexttrack",
    "nonconvert", "num0", "num1", "num2", "num3", "num4", "num5", "num6", "num7", "num8",
    "num9", "numlock", "pagedown", "pageup", "pause", "pgdn", "pgup", "playpause", "prevtrack",
    "print", "printscreen", "prntscrn", "prtsc", "prtscr", "return", "right", "scrolllock",
    "select", "separator", "shift", "shiftleft", "shiftright", "sleep", "space", "stop",
    "subtract", "tab", "up", "volumedown", "volumemute", "volumeup", "win", "winleft",
    "winright", "yen", "command", "option", "optionleft", "optionright",
]

_KEYSYMS = {
    "\t": "Tab", "\n": "Return", "\r": "Return", " ": "space", "!": "exclam",
    '"': "quotedbl", "#": "numbersign", "$": "dollar", "%": "percent", "&": "ampersand",
    "'": "apostrophe", "(": "parenleft", ")": "parenright", "*": "asterisk", "+": "plus",
    ",": "comma", "-": "minus", ".": "period", "/": "slash", ":": "colon", ";": "semicolon",
    "<": "less", "=": "equal", ">": "greater", "?": "question", "@": "at",
    "[": "bracketleft", "\\": "backslash", "]": "bracketright", "^": "asciicircum",
    "_": "underscore", "`": "grave", "{": "braceleft", "|": "bar", "}": "braceright",
    "~": "asciitilde", "alt": "Alt_L", "altleft": "Alt_L", "altright": "Alt_R",
    "apps": "Menu", "backspace": "BackSpace", "capslock": "Caps_Lock", "clear": "Clear",
    "ctrl": "Control_L", "ctrlleft": "Control_L", "ctrlright": "Control_R", "del": "Delete",
    "delete": "Delete", "down": "Down", "end": "End", "enter": "Return", "esc": "Escape",
    "escape": "Escape", "execute": "Execute", "help": "Help", "home": "Home",
    "insert": "Insert", "left": "Left", "numlock": "Num_Lock", "pagedown": "Next",
    "pageup": "Prior", "pgdn": "Next", "pgup": "Prior", "pause": "Pause", "print": "Print",
    "printscreen": "Print", "prntscrn": "Print", "prtsc": "Print", "prtscr": "Print",
    "return": "Return", "right": "Right", "scrolllock": "Scroll_Lock", "select": "Select",
    "shift": "Shift_L", "shiftleft": "Shift_L", "shiftright": "Shift_R", "space": "space",
    "tab": "Tab", "up": "Up", "win": "Super_L", "winleft": "Super_L", "winright": "Super_R",
    "command": "Super_L", "option": "Alt_L", "optionleft": "Alt_L", "optionright": "Alt_R",
    "add": "KP_Add", "subtract": "KP_Subtract", "multiply": "KP_Multiply",
    "divide": "KP_Divide", "decimal": "KP_Decimal", "separator": "KP_Separator",
    "volumedown": "XF86AudioLowerVolume", "volumeup": "XF86AudioRaiseVolume",
    "volumemute": "XF86AudioMute", "playpause": "XF86AudioPlay", "nexttrack": "XF86AudioNext",
    "prevtrack": "XF86AudioPrev", "stop": "XF86AudioStop", "sleep": "XF86Sleep",
    "browserback": "XF86Back", "browserforward": "XF86Forward", "browserhome": "XF86HomePage",
    "browserrefresh": "XF86Refresh", "browsersearch": "XF86Search", "browserstop": "XF86Stop",
    "browserfavorites": "XF86Favorites", "launchmail": "XF86Mail", "yen": "yen",
    "modechange": "Mode_switch", "kana": "Kana_Shift", "kanji": "Kanji", "hangul": "Hangul",
    "hanguel": "Hangul", "hanja": "Hangul_Hanja", "convert": "Henkan",
    "nonconvert": "Muhenkan",
}
_BUTTONS = {"left": "1", "middle": "2", "right": "3", "primary": "1", "secondary": "3"}


class FailSafeException(Exception):
    """pyautogui's name, for code that catches it."""


def _keysym(key: str) -> str:
    key = key if len(key) == 1 else key.lower()
    if key in _KEYSYMS:
        return _KEYSYMS[key]
    if len(key) > 1 and key.startswith("num") and key[3:].isdigit():
        return f"KP_{key[3:]}"
    if len(key) > 1 and key[0] == "f" and key[1:].isdigit():
        return key.upper()
    return key


def _xdotool(*args: str) -> str:
    result = subprocess.run(["xdotool", *args], capture_output=True, text=True, timeout=60)
    if PAUSE:
        time.sleep(PAUSE)
    return result.stdout


def size() -> tuple[int, int]:
    """The screen's (width, height)."""
    out = _xdotool("getdisplaygeometry").split()
    return int(out[0]), int(out[1])


def position() -> tuple[int, int]:
    """The pointer's (x, y)."""
    values = dict(part.split("=", 1) for part in _xdotool("getmouselocation", "--shell").split()
                  if "=" in part)
    return int(values.get("X", 0)), int(values.get("Y", 0))


# pyautogui's tweening functions (pytweening's formulas): OSWorld's PythonController passes
# one as moveTo's tween (a random duration along easeInElastic), which a move with a duration
# follows step by step.
def linear(n: float) -> float:
    """The identity tween."""
    return n


def easeInQuad(n: float) -> float:
    """Quadratic ease in."""
    return n * n


def easeOutQuad(n: float) -> float:
    """Quadratic ease out."""
    return -n * (n - 2)


def easeInOutQuad(n: float) -> float:
    """Quadratic ease in, then out."""
    return 2 * n * n if n < 0.5 else -2 * n * n + 4 * n - 1


def easeOutBounce(n: float) -> float:
    """A bounce at the end."""
    for edge, shift, base in ((1 / 2.75, 0.0, 0.0), (2 / 2.75, 1.5 / 2.75, 0.75),
                              (2.5 / 2.75, 2.25 / 2.75, 0.9375)):
        if n < edge:
            return 7.5625 * (n - shift) ** 2 + base
    return 7.5625 * (n - 2.625 / 2.75) ** 2 + 0.984375


def easeInBounce(n: float) -> float:
    """A bounce at the start."""
    return 1 - easeOutBounce(1 - n)


def easeInElastic(n: float, amplitude: float = 1, period: float = 0.3) -> float:
    """An elastic start."""
    import math

    return 1 - (1 - n) if n in (0, 1) else -(amplitude * 2 ** (10 * (n - 1)) * math.sin(
        ((n - 1) - period / (2 * math.pi) * math.asin(1 / amplitude)) * (2 * math.pi) / period))


def _point(x, y, here: tuple[int, int] | None = None) -> tuple[int, int]:
    """(x, y) as integers, a missing one the pointer's (``here`` when the caller knows it)."""
    if isinstance(x, (tuple, list)):
        x, y = x[0], x[1]
    if x is None or y is None:
        here = here or position()
    return int(round(here[0] if x is None else x)), int(round(here[1] if y is None else y))


def moveTo(x=None, y=None, duration=0.0, tween=None, *args, **kwargs) -> None:
    """Move the pointer to (x, y); over ``duration`` seconds along ``tween`` when it is at
    least MINIMUM_DURATION (pyautogui's rule), at once otherwise."""
    here = start_x, start_y = position()  # also for _move: a move to here must not call xdotool
    x, y = _point(x, y, here)
    duration = float(duration or 0.0)
    if duration >= MINIMUM_DURATION:
        # pyautogui's stepping: a pixel per step, but never steps shorter than MINIMUM_SLEEP
        steps = max(1, min(max(abs(x - start_x), abs(y - start_y)), int(duration / MINIMUM_SLEEP)))
        tween = tween or linear
        for step in range(1, steps):
            share = tween(step / steps)
            here = _move(int(round(start_x + (x - start_x) * share)),
                         int(round(start_y + (y - start_y) * share)), here)
            time.sleep(duration / steps)
    _move(x, y, here)


def _move(x: int, y: int, here: tuple[int, int]) -> tuple[int, int]:
    """The pointer moved to (x, y) from ``here``: not at all when it is there already, since
    ``xdotool mousemove --sync`` then waits seconds for a motion that never comes (the first
    steps of an elastic tween round to the start)."""
    if (x, y) != tuple(here):
        _xdotool("mousemove", "--sync", str(x), str(y))
    return x, y


def moveRel(xOffset=0, yOffset=0, duration=0.0, tween=None, *args, **kwargs) -> None:
    """Move the pointer by an offset."""
    if float(duration or 0.0) >= MINIMUM_DURATION:
        here = position()
        moveTo(here[0] + int(xOffset), here[1] + int(yOffset), duration=duration, tween=tween)
        return
    _xdotool("mousemove_relative", "--sync", "--", str(int(xOffset)), str(int(yOffset)))


move = moveRel


def click(x=None, y=None, clicks=1, interval=0.0, button="left", duration=0.0, *args, **kwargs) -> None:
    """Click ``clicks`` times at (x, y), or where the pointer is."""
    if x is not None or y is not None:
        moveTo(x, y)
    _xdotool("click", "--repeat", str(int(clicks)), "--delay", str(int(interval * 1000) or 50),
             _BUTTONS.get(str(button), "1"))


def doubleClick(x=None, y=None, interval=0.0, button="left", *args, **kwargs) -> None:
    """Two clicks."""
    click(x, y, clicks=2, interval=interval, button=button)


def tripleClick(x=None, y=None, interval=0.0, button="left", *args, **kwargs) -> None:
    """Three clicks."""
    click(x, y, clicks=3, interval=interval, button=button)


def rightClick(x=None, y=None, *args, **kwargs) -> None:
    """A right click."""
    click(x, y, button="right")


def middleClick(x=None, y=None, *args, **kwargs) -> None:
    """A middle click."""
    click(x, y, button="middle")


def mouseDown(x=None, y=None, button="left", *args, **kwargs) -> None:
    """Press a mouse button."""
    if x is not None or y is not None:
        moveTo(x, y)
    _xdotool("mousedown", _BUTTONS.get(str(button), "1"))


def mouseUp(x=None, y=None, button="left", *args, **kwargs) -> None:
    """Release a mouse button."""
    if x is not None or y is not None:
        moveTo(x, y)
    _xdotool("mouseup", _BUTTONS.get(str(button), "1"))


def dragTo(x=None, y=None, duration=0.0, tween=None, button="left", *args, **kwargs) -> None:
    """Press, move to (x, y) (over ``duration`` seconds, as moveTo), release."""
    x, y = _point(x, y)
    mouseDown(button=button)
    time.sleep(0.05)
    moveTo(x, y, duration=duration, tween=tween)
    time.sleep(0.05)
    mouseUp(button=button)


def dragRel(xOffset=0, yOffset=0, duration=0.0, tween=None, button="left", *args, **kwargs) -> None:
    """Press, move by an offset, release."""
    here = position()
    dragTo(here[0] + xOffset, here[1] + yOffset, duration=duration, tween=tween, button=button)


drag = dragRel


def scroll(clicks, x=None, y=None, *args, **kwargs) -> None:
    """Scroll up (positive) or down (negative)."""
    vscroll(clicks, x, y)


def vscroll(clicks, x=None, y=None, *args, **kwargs) -> None:
    """Vertical scroll: buttons 4 (up) and 5 (down)."""
    if x is not None or y is not None:
        moveTo(x, y)
    clicks = int(clicks)
    if clicks:
        _xdotool("click", "--repeat", str(abs(clicks)), "--delay", "10", "4" if clicks > 0 else "5")


def hscroll(clicks, x=None, y=None, *args, **kwargs) -> None:
    """Horizontal scroll: buttons 7 (right) and 6 (left)."""
    if x is not None or y is not None:
        moveTo(x, y)
    clicks = int(clicks)
    if clicks:
        _xdotool("click", "--repeat", str(abs(clicks)), "--delay", "10", "7" if clicks > 0 else "6")


def typewrite(message, interval=0.0, *args, **kwargs) -> None:
    """Type a string, or press each key name of a list."""
    if isinstance(message, (list, tuple)):
        for key in message:
            press(key)
        return
    # xdotool types "\n" as Linefeed, which terminals take but GTK entries ignore: send
    # Return (what pyautogui presses) between the lines instead
    delay = str(max(1, int(interval * 1000))) if interval else "3"
    lines = str(message).replace("\r\n", "\n").split("\n")
    for index, line in enumerate(lines):
        for chunk in _chunks(line):
            _xdotool("type", "--delay", delay, "--", chunk)
        if index < len(lines) - 1:
            _xdotool("key", "Return")


write = typewrite


def _chunks(text: str, size: int = 200):
    for start in range(0, len(text), size):
        yield text[start:start + size]


def press(keys, presses=1, interval=0.0, *args, **kwargs) -> None:
    """Press and release a key (or each key of a list) ``presses`` times."""
    keys = [keys] if isinstance(keys, str) else list(keys)
    for _ in range(int(presses)):
        for key in keys:
            _xdotool("key", "--", _keysym(key))
            if interval:
                time.sleep(interval)


def keyDown(key, *args, **kwargs) -> None:
    """Hold a key down."""
    _xdotool("keydown", "--", _keysym(key))


def keyUp(key, *args, **kwargs) -> None:
    """Release a key."""
    _xdotool("keyup", "--", _keysym(key))


def hotkey(*keys, **kwargs) -> None:
    """Press keys together, e.g. ``hotkey("ctrl", "s")``."""
    if len(keys) == 1 and isinstance(keys[0], (list, tuple)):
        keys = tuple(keys[0])
    _xdotool("key", "--", "+".join(_keysym(k) for k in keys))


class Screenshot:
    """An RGB image of the screen, for guests without Pillow: PIL's ``size``, ``width``,
    ``height``, ``mode``, ``getpixel``, ``crop``, ``tobytes`` and ``save`` (PNG)."""

    mode = "RGB"

    def __init__(self, width: int, height: int, rgb: bytes) -> None:
        self.width, self.height, self._rgb = width, height, rgb

    @property
    def size(self) -> tuple[int, int]:
        """(width, height)."""
        return self.width, self.height

    def getpixel(self, xy) -> tuple[int, int, int]:
        """The (r, g, b) at (x, y)."""
        x, y = int(xy[0]), int(xy[1])
        if not (0 <= x < self.width and 0 <= y < self.height):
            raise IndexError(f"pixel ({x}, {y}) is outside the {self.width}x{self.height} image")
        at = (y * self.width + x) * 3
        return tuple(self._rgb[at:at + 3])  # type: ignore[return-value]

    def crop(self, box) -> "Screenshot":
        """The part (left, upper, right, lower), as PIL's crop."""
        left, upper, right, lower = (int(v) for v in box)
        rows = [self._rgb[(y * self.width + left) * 3:(y * self.width + right) * 3] for y in range(upper, lower)]
        return Screenshot(right - left, lower - upper, b"".join(rows))

    def tobytes(self) -> bytes:
        """The pixels, row by row, 3 bytes each."""
        return self._rgb

    def save(self, fp, format=None, **kwargs) -> None:
        """Write a PNG to a path or a binary file object."""
        import struct
        import zlib

        def chunk(kind: bytes, data: bytes) -> bytes:
            return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

        stride = self.width * 3
        raw = b"".join(b"\0" + self._rgb[y * stride:(y + 1) * stride] for y in range(self.height))
        png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", self.width, self.height, 8, 2, 0, 0, 0))
               + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b""))
        if hasattr(fp, "write"):
            fp.write(png)
        else:
            with open(fp, "wb") as out:
                out.write(png)


def _capture() -> tuple[int, int, bytes]:
    """(width, height, RGB bytes) of the screen, from ImageMagick's ``import`` as a PPM."""
    result = subprocess.run(["import", "-silent", "-window", "root", "-depth", "8", "ppm:-"],
                            capture_output=True, timeout=30, env=dict(os.environ))
    data = result.stdout
    fields, at = [], 0
    while len(fields) < 4:  # P6, width, height, maxval: whitespace and comments between
        while at < len(data) and data[at:at + 1].isspace():
            at += 1
        if data[at:at + 1] == b"#":
            at = data.index(b"\n", at)
            continue
        end = at
        while end < len(data) and not data[end:end + 1].isspace():
            end += 1
        if end == at:
            break
        fields.append(data[at:end])
        at = end
    if result.returncode != 0 or len(fields) < 4 or fields[0] != b"P6":
        raise OSError(f"screenshot failed: import exited {result.returncode}: "
                      f"{result.stderr.decode(errors='replace').strip()[:300]}")
    width, height = int(fields[1]), int(fields[2])
    return width, height, data[at + 1:at + 1 + width * height * 3]


def screenshot(imageFilename=None, region=None, *args, **kwargs):
    """The screen as an image (PIL's when Pillow is importable, else a ``Screenshot``),
    cropped to ``region`` (left, top, width, height), saved to ``imageFilename`` if given."""
    width, height, rgb = _capture()
    try:
        from PIL import Image
    except ImportError:
        image = Screenshot(width, height, rgb)
    else:
        image = Image.frombytes("RGB", (width, height), rgb)
    if region is not None:
        left, top, w, h = (int(v) for v in region)
        image = image.crop((left, top, left + w, top + h))
    if imageFilename is not None:
        image.save(imageFilename)
    return image


def pixel(x, y) -> tuple[int, int, int]:
    """The (r, g, b) of the screen at (x, y)."""
    return tuple(screenshot(region=(int(x), int(y), 1, 1)).getpixel((0, 0)))[:3]  # type: ignore[return-value]


def pixelMatchesColor(x, y, expectedRGBColor, tolerance=0) -> bool:
    """Whether the pixel at (x, y) is ``expectedRGBColor``, each channel within ``tolerance``."""
    return all(abs(a - b) <= tolerance for a, b in zip(pixel(x, y), expectedRGBColor[:3]))


def sleep(seconds) -> None:
    """time.sleep, as pyautogui.sleep."""
    time.sleep(seconds)


def __getattr__(name: str):
    """A function pyautogui has and this shim does not: say so by name."""
    if name.startswith("__"):
        raise AttributeError(name)
    raise AttributeError(
        f"pyautogui.{name} is not available: this guest has no real pyautogui, only "
        f"parallel-rollout's xdotool shim of its mouse, keyboard and screenshot calls "
        f"(moveTo, click, dragTo, scroll, typewrite, press, hotkey, screenshot, pixel …)")
