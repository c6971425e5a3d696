"""What desktop tests read off a VM (the pixels of a /screenshot, the window list, processes)
and a random agent. Workers import the agent by name (``desktop_support:RandomAgent``), so
this module imports nothing of tests/: which ``conftest`` a worker would find depends on the
order pytest put the test folders on sys.path."""

from __future__ import annotations

import random
import time
import zlib

from parallel_rollout.agents.base import Agent
from parallel_rollout.envs.osworld import actions as acts
from parallel_rollout.guest.client import GuestClient

#: the screen of the desktop tests
WIDTH, HEIGHT = 1024, 768


def pixels(png: bytes) -> tuple[int, int, bytes]:
    """Width, height and RGB rows of one of our PNGs (8-bit RGB, filter 0 on every row)."""
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    data, at = b"", 8
    while at < len(png):
        length = int.from_bytes(png[at:at + 4], "big")
        if png[at + 4:at + 8] == b"IDAT":
            data += png[at + 8:at + 8 + length]
        at += 12 + length
    raw = zlib.decompress(data)
    row = width * 3 + 1
    assert all(raw[y * row] == 0 for y in range(height))
    return width, height, b"".join(raw[y * row + 1:(y + 1) * row] for y in range(height))


def changed(before: bytes, after: bytes, width: int, box: tuple[int, int, int, int]) -> int:
    """How many pixels of ``box`` (x0, y0, x1, y1) differ between two RGB frames."""
    x0, y0, x1, y1 = box
    count = 0
    for y in range(y0, y1):
        a = before[(y * width + x0) * 3:(y * width + x1) * 3]
        b = after[(y * width + x0) * 3:(y * width + x1) * 3]
        count += sum(1 for i in range(0, len(a), 3) if a[i:i + 3] != b[i:i + 3])
    return count


#: a terminal with big letters in the screen's top-left corner, titled "big"
BIG_TERMINAL = ["xterm", "-T", "big", "-fa", "Monospace", "-fs", "28", "-geometry", "40x6+0+0"]


def assert_typing_shows(client: GuestClient, settle_s: float) -> None:
    """Type a row of W's through the VM's pyautogui into the focused BIG_TERMINAL (already
    shown) and check the screenshot: its top rows change, nothing below the window does."""
    width, height, before = pixels(client.screenshot())
    assert (width, height) == (WIDTH, HEIGHT)
    # the agent's own action code, through the guest's pyautogui (the xdotool shim)
    code = acts.computer13_to_code({"action_type": "TYPING", "parameters": {"text": "WWWWWWWWWWWW"}})
    typed = client.execute(["python", "-c", "import pyautogui; " + code])
    assert typed["returncode"] == 0, typed
    time.sleep(settle_s)
    _, _, after = pixels(client.screenshot())
    assert changed(before, after, width, (0, 0, 600, 200)) > 500
    assert changed(before, after, width, (0, 400, WIDTH, HEIGHT)) == 0


def window_titles(client: GuestClient) -> list[str]:
    """The titles of the desktop's windows, as ``wmctrl -l`` lists them."""
    listing = client.execute(["wmctrl", "-l"])
    if listing["returncode"] != 0 and "client list" in listing["error"]:
        return []  # openbox publishes the list with the first window it manages
    if listing["returncode"] != 0 and "BadWindow" in listing["error"]:
        return []  # a window went while wmctrl read it (LibreOffice's splash): ask again
    assert listing["returncode"] == 0, listing
    return [line.split(None, 3)[3] if len(line.split(None, 3)) == 4 else ""
            for line in listing["output"].splitlines()]


def wait_window(client: GuestClient, title: str, present: bool = True,
                timeout_s: float = 15.0) -> None:
    """Wait until a window whose title holds ``title`` is there (or gone, with
    ``present=False``)."""
    deadline = time.monotonic() + timeout_s
    while any(title in shown for shown in window_titles(client)) != present:
        assert time.monotonic() < deadline, \
            f"window {title!r} present={not present} after {timeout_s:g} s"
        time.sleep(0.2)


def wait_process(client: GuestClient, name: str, timeout_s: float = 15.0) -> None:
    """Wait until a process named ``name`` runs in the VM: a launch returns once its
    launcher started, which may exec the program a moment later (setpriv, a shell)."""
    deadline = time.monotonic() + timeout_s
    while name not in process_names(client):
        assert time.monotonic() < deadline, f"no process {name!r} after {timeout_s:g} s"
        time.sleep(0.1)


def process_names(client: GuestClient) -> set[str]:
    """The names of every process in the VM (from /proc: images need not have ps)."""
    code = ("import os\nfor p in os.listdir('/proc'):\n    if p.isdigit():\n        try:\n"
            "            print(open(f'/proc/{p}/comm').read().strip())\n"
            "        except OSError:\n            pass\n")
    result = client.execute(["python3", "-c", code])
    assert result["returncode"] == 0, result
    return set(result["output"].split())


class RandomAgent(Agent):
    """Random computer_13 actions (never DONE or FAIL): what a desktop task must not reward."""

    name = "random"

    def reset(self, task) -> None:
        self.rng = random.Random(task.id)

    def act(self, observation):
        kind = self.rng.choice(["CLICK", "TYPING", "PRESS", "HOTKEY", "SCROLL", "MOVE_TO"])
        x, y = self.rng.randrange(WIDTH), self.rng.randrange(HEIGHT)
        params = {"CLICK": {"x": x, "y": y}, "MOVE_TO": {"x": x, "y": y},
                  "TYPING": {"text": "".join(self.rng.choice("abcxyz ") for _ in range(6))},
                  "PRESS": {"key": self.rng.choice(["a", "tab", "left", "space", "x"])},
                  "HOTKEY": {"keys": ["shift", self.rng.choice("abc")]},
                  "SCROLL": {"dx": 0, "dy": self.rng.choice([-2, 2])}}[kind]
        return {"action_type": kind, "parameters": params}


class ScriptAgent(Agent):
    """Replays the task's own ``script`` (pyautogui code run in the VM, or WAIT/DONE/FAIL), one
    action a turn, then DONE: an agent's code as a red team writes it (``--action-space
    pyautogui``), for the hostile osworld rows."""

    name = "script"
    task_fields = frozenset({"script"})

    def reset(self, task) -> None:
        self.actions = list(task.get("script") or [])

    def act(self, observation):
        return self.actions.pop(0) if self.actions else "DONE"
