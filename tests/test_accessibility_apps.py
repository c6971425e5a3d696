"""The accessibility tree of the apps OSWorld's tasks grade on it, in desktop VMs of the process
provider: LibreOffice (its GTK 3 plugin, the one with an AT-SPI bridge) with the text typed into
a Writer document and Impress's slide panel (what ``check_left_panel`` looks for); Chromium's
page (a heading and a link served from the VM's loopback) and its address bar (what the
``active_url_from_accessTree`` getter reads), through OSWorld's own ``PythonController``. With
``PARALLEL_ROLLOUT_ATSPI=0`` both apps still start and the window list stands in for them."""

from __future__ import annotations

import importlib.util
import shutil
import time
import xml.etree.ElementTree as ET

import pytest

from desktop_support import wait_window, window_titles
from parallel_rollout.envs.osworld import actions as acts
from parallel_rollout.envs.osworld.getters.browser import active_url
from parallel_rollout.envs.osworld.metrics.slides_checks import check_left_panel
from parallel_rollout.guest import desktop as guest_desktop
from parallel_rollout.guest.client import GuestClient
from test_accessibility import needs_atspi
from test_osworld import desktop_vm  # noqa: F401 - fixture
from test_osworld_controllers import desktop  # noqa: F401 - fixture

TYPED = "57 words typed into writer"  # a first letter would be capitalized by AutoCorrect
HEADING, LINK = "Heading seventy-three", "Link to elsewhere"
PAGE = f"<html><head><title>Tree page</title></head><body><h1>{HEADING}</h1><a href='/x'>{LINK}</a></body></html>"

needs_apps = pytest.mark.skipif(
    not (shutil.which("soffice") and shutil.which("chromium")
         and (guest_desktop.os.path.exists(guest_desktop.LIBREOFFICE_GTK3))),
    reason="LibreOffice (with libreoffice-gtk3) or Chromium is missing (./dev installs them)")


def _apps(tree: str) -> dict[str, ET.Element]:
    return {app.get("name"): app for app in ET.fromstring(tree)}


def _poll(read_tree, holds, what: str, timeout_s: float = 60.0) -> str:
    """The first tree ``holds`` is true of, read until ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        tree = read_tree()
        if holds(tree):
            return tree
        assert time.monotonic() < deadline, f"{what} not in the tree after {timeout_s:g} s: {tree[:2000]}"
        time.sleep(0.5)


def _texts(app: ET.Element, tag: str) -> list[str]:
    return [node.text or "" for node in app.iter(tag)]


@pytest.mark.slow
@needs_atspi
@needs_apps
def test_writer_text_and_impress_slide_panel_are_in_the_tree(desktop_vm):
    provider, holder = desktop_vm
    client = GuestClient(holder["info"].address)
    # no Tip of the Day takes the keys: the desktop's home has LibreOffice's settings
    client.launch(["soffice", "--writer"])
    wait_window(client, "LibreOffice Writer", timeout_s=90)
    # LibreOffice's own tree (not the window list's one frame): an empty document, no slides
    tree = _poll(client.accessibility_tree,
                 lambda t: any(app.iter("document-text") for app in _apps(t).values()),
                 "Writer's document")
    office = _apps(tree)["soffice"]
    assert TYPED not in tree and check_left_panel(tree) == 0.0
    assert any("LibreOffice Writer" in (frame.get("name") or "") for frame in office.iter("frame"))
    client.activate_window("LibreOffice Writer")
    code = acts.computer13_to_code({"action_type": "TYPING", "parameters": {"text": TYPED}})
    assert client.execute(["python", "-c", "import pyautogui; " + code])["returncode"] == 0
    tree = _poll(client.accessibility_tree,
                 lambda t: TYPED in _texts(_apps(t).get("soffice", ET.Element("x")), "paragraph"),
                 "the typed paragraph")
    assert not [title for title in window_titles(client) if "Tip of the Day" in title]
    # Impress, in the same LibreOffice: its slide panel is what OSWorld's task grades on
    client.launch(["soffice", "--impress"])
    wait_window(client, "LibreOffice Impress", timeout_s=60)
    tree = _poll(client.accessibility_tree, lambda t: check_left_panel(t) == 1.0, "Slides View")
    panels = [node for node in _apps(tree)["soffice"].iter("document-frame")
              if node.get("name") == "Slides View"]
    assert len(panels) == 1 and len(list(panels[0].iter())) > 1


@needs_atspi
@needs_apps
@pytest.mark.skipif(importlib.util.find_spec("desktop_env") is None,
                    reason="desktop-env is not installed (./dev installs it for the tests)")
def test_chromium_page_and_address_bar_through_osworlds_controller(desktop):
    from desktop_env.controllers.python import PythonController

    client, port = desktop
    controller = PythonController("127.0.0.1", port)
    controller.retry_times, controller.retry_interval = 1, 0.1
    client.write_file("/tmp/www/index.html", PAGE.encode())
    # the page from the VM's own loopback (the sandbox has its own network namespace)
    client.launch(["python3", "-m", "http.server", "8000", "--bind", "127.0.0.1",
                   "--directory", "/tmp/www"])
    before = controller.get_accessibility_tree()
    assert HEADING not in before and active_url(before) is None
    client.launch(["google-chrome", "http://127.0.0.1:8000/"])  # Chromium, as OSWorld launches it
    tree = _poll(controller.get_accessibility_tree,
                 lambda t: HEADING in _texts(_apps(t).get("Chromium", ET.Element("x")), "heading"),
                 "the page's heading")
    browser = _apps(tree)["Chromium"]
    assert LINK in [node.get("name") for node in browser.iter("link")]
    assert active_url(tree, "http://") == "http://127.0.0.1:8000"


@needs_apps
@pytest.mark.slow  # 7-15 s: the no-bus desktop's own routes are in test_accessibility.py
def test_apps_start_without_accessibility(request, monkeypatch):
    monkeypatch.setenv("PARALLEL_ROLLOUT_ATSPI", "0")
    provider, holder = request.getfixturevalue("desktop_vm")
    client = GuestClient(holder["info"].address)
    client.launch(["soffice", "--writer"])
    client.launch(["google-chrome", "about:blank"])
    wait_window(client, "LibreOffice Writer", timeout_s=90)
    wait_window(client, "Chromium", timeout_s=60)
    apps = _apps(client.accessibility_tree())
    # the window list's application/frame pairs, no AT-SPI tree
    assert "soffice" not in apps and "Chromium" in apps
    assert [node.tag for node in apps["Chromium"].iter()] == ["application", "frame"]
    office = next(app for name, app in apps.items() if "libreoffice" in name.lower())
    assert "LibreOffice Writer" in office[0].get("name")
