"""The guest's pyautogui shim (guest/shim/pyautogui.py) on a real X server: screenshot()
returns an image (PIL's when Pillow is there, the shim's own otherwise) and saves it when
asked, drags move through their path over ``duration``, a missing function is named."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from PIL import Image

import parallel_rollout.guest as guest_package

SHIM = Path(guest_package.__file__).resolve().parent / "shim"
pytestmark = pytest.mark.skipif(
    not all(shutil.which(p) for p in ("Xvfb", "xdotool", "import", "xsetroot")),
    reason="needs Xvfb, xdotool, ImageMagick's import and xsetroot")


def start_xvfb() -> tuple[subprocess.Popen, str]:
    """An Xvfb (320x240, pure red root) on a free display; (process, DISPLAY)."""
    # a random high display: other sessions' servers (in sandboxes with their own /tmp, so
    # no lock file shows them) hold low numbers, and -displayfd does not skip those
    for number in random.sample(range(300, 900), 10):
        name = f":{number}"
        server = subprocess.Popen(["Xvfb", name, "-screen", "0", "320x240x24", "-noreset", "-nolisten", "tcp"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while server.poll() is None and time.monotonic() < deadline:
            # -noreset: the root's colour would go with xsetroot, the last client, otherwise
            if subprocess.run(["xsetroot", "-display", name, "-solid", "#ff0000"],
                              stderr=subprocess.DEVNULL).returncode == 0:
                return server, name
            time.sleep(0.1)
        stop_xvfb(server)
    raise AssertionError("no Xvfb started on 10 displays")


def stop_xvfb(server: subprocess.Popen) -> None:
    """SIGTERM (it removes its lock file and socket then), SIGKILL if it lingers."""
    server.terminate()
    try:
        server.wait(timeout=10)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


@pytest.fixture
def display():
    """A running Xvfb; yields its DISPLAY."""
    server, name = start_xvfb()
    yield name
    stop_xvfb(server)


def guest_python(display: str, code: str, with_pillow: bool) -> dict:
    """Run ``code`` as an OSWorld action runs in a guest (``import pyautogui`` from the shim
    folder); it prints one JSON line. Without Pillow: the system python with no site
    packages, as in the process sandbox and the images."""
    python = [sys.executable] if with_pillow else ["/usr/bin/python3", "-S"]
    env = {"PATH": os.environ["PATH"], "DISPLAY": display, "PYTHONPATH": str(SHIM)}
    proc = subprocess.run([*python, "-c", "import json, pyautogui\n" + textwrap.dedent(code)],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


SCREENSHOT = """
    shot = pyautogui.screenshot({path!r})
    part = pyautogui.screenshot(region=(10, 20, 30, 40))
    print(json.dumps({{"type": type(shot).__module__ + "." + type(shot).__name__, "size": list(shot.size),
                      "pixel": list(shot.getpixel((5, 5)))[:3], "part": list(part.size),
                      "screen_pixel": list(pyautogui.pixel(100, 100)),
                      "matches": pyautogui.pixelMatchesColor(1, 1, (250, 5, 0), tolerance=5)}}))
"""


@pytest.mark.parametrize("with_pillow, kind", [(False, "pyautogui.Screenshot"), (True, "PIL.Image.Image")])
def test_screenshot_returns_an_image_and_saves_it(display, tmp_path, with_pillow, kind):
    path = tmp_path / "shot.png"
    got = guest_python(display, SCREENSHOT.format(path=str(path)), with_pillow)
    assert got == {"type": kind, "size": [320, 240], "pixel": [255, 0, 0], "part": [30, 40],
                   "screen_pixel": [255, 0, 0], "matches": True}
    with Image.open(path) as saved:  # a real PNG of the screen
        assert saved.size == (320, 240) and saved.convert("RGB").getpixel((300, 200)) == (255, 0, 0)


DRAG = """
    import threading, time
    pyautogui.moveTo(10, 10)
    seen, done = [], threading.Event()
    def watch():
        while not done.is_set():
            seen.append(pyautogui.position()[0])
            time.sleep(0.02)
    watcher = threading.Thread(target=watch)
    watcher.start()
    started = time.monotonic()
    pyautogui.dragTo(300, 200, duration={duration})
    elapsed = time.monotonic() - started
    done.set()
    watcher.join()
    print(json.dumps({{"elapsed": elapsed, "between": sorted({{x for x in seen if 10 < x < 300}}),
                      "end": list(pyautogui.position())}}))
"""


def test_a_drag_with_a_duration_moves_through_its_path(display):
    got = guest_python(display, DRAG.format(duration=0.6), with_pillow=False)
    assert got["end"] == [300, 200]
    assert got["elapsed"] >= 0.6
    assert len(got["between"]) >= 3, got  # seen on its way, not only at both ends


def test_a_missing_function_is_named(display):
    got = guest_python(display, """
        try:
            pyautogui.locateOnScreen("button.png")
        except AttributeError as exc:
            message = str(exc)
        print(json.dumps({"message": message, "has": hasattr(pyautogui, "locateCenterOnScreen")}))
    """, with_pillow=False)
    assert got["message"].startswith("pyautogui.locateOnScreen is not available: this guest has no real pyautogui")
    assert got["has"] is False


STAY = """
    import time
    pyautogui.moveTo(50, 60)
    timings = {}
    for name, move in [("moveTo", lambda: pyautogui.moveTo(50, 60)),
                       ("moveRel", lambda: pyautogui.moveRel(0, 0)),
                       # OSWorld's MOVE_TO: a random duration along easeInElastic, whose first
                       # steps round to the start
                       ("elastic", lambda: pyautogui.moveTo(52, 61, 0.85, pyautogui.easeInElastic))]:
        started = time.monotonic()
        move()
        timings[name] = time.monotonic() - started
    print(json.dumps({"timings": timings, "end": list(pyautogui.position())}))
"""


def test_a_move_to_where_the_pointer_already_is_does_not_wait(display):
    """``xdotool mousemove --sync`` to the pointer's own position waits for a motion that
    never comes (seconds); the shim skips such steps instead."""
    got = guest_python(display, STAY, with_pillow=False)
    assert got["end"] == [52, 61]
    assert got["timings"]["moveTo"] < 2 and got["timings"]["moveRel"] < 2, got
    assert got["timings"]["elastic"] < 3, got  # its 0.85 s, plus the steps' xdotool calls
