"""``GET /accessibility`` on a desktop VM of the process provider: the AT-SPI tree of the apps
that expose one (mousepad's frame and the text typed into it, through the real routes), the
window list for those that do not (xterm), and the window list alone, in bounded time, when
AT-SPI is off, dead or hung. Last, the walker's XML from fake AT-SPI objects: OSWorld's node
shape, and text no app can break."""

from __future__ import annotations

import os
import shutil
import time
import xml.etree.ElementTree as ET
from types import SimpleNamespace

import pytest

from desktop_support import wait_window
from parallel_rollout.envs.osworld import actions as acts
from parallel_rollout.guest import atspi_tree, desktop
from parallel_rollout.guest.client import GuestClient
from test_osworld import desktop_vm  # noqa: F401 - fixture

#: OSWorld's namespaces (desktop_env/server/main.py), written out rather than taken from
#: desktop.py, so that a change there fails here
ST = "https://accessibility.ubuntu.example.org/ns/state"
CP = "https://accessibility.ubuntu.example.org/ns/component"
OSWORLD_NAMESPACES = {
    "st": ST, "cp": CP,
    "attr": "https://accessibility.ubuntu.example.org/ns/attributes",
    "doc": "https://accessibility.ubuntu.example.org/ns/document",
    "docattr": "https://accessibility.ubuntu.example.org/ns/document/attributes",
    "txt": "https://accessibility.ubuntu.example.org/ns/text",
    "val": "https://accessibility.ubuntu.example.org/ns/value",
    "act": "https://accessibility.ubuntu.example.org/ns/action",
}
TYPED = "typed into mousepad 42"
#: seconds the hung walks below get
WALK_TIMEOUT_S = 4.0
#: an xterm title with every character XML must escape
ODD_TITLE = 'odd "term" <&> title'

needs_atspi = pytest.mark.skipif(
    not all(shutil.which(p) for p in ("Xvfb", "openbox", "xterm", "mousepad", "dbus-daemon"))
    or not desktop.find(desktop.BUS_LAUNCHER, desktop.LIBEXEC_DIRS)
    or not os.path.isdir("/usr/lib/python3/dist-packages/pyatspi"),
    reason="the desktop or AT-SPI packages are missing (./dev installs them)")


def _open_editor_and_terminal(client: GuestClient) -> None:
    """An xterm (no AT-SPI), then mousepad on ~/notes.txt, focused."""
    client.launch(["xterm", "-T", ODD_TITLE])
    wait_window(client, ODD_TITLE)
    client.execute("touch ~/notes.txt", shell=True)
    client.open_file("~/notes.txt", timeout=20)
    client.activate_window("notes.txt")


def _applications(tree: str) -> dict[str, ET.Element]:
    root = ET.fromstring(tree)
    assert root.tag == "desktop-frame"
    return {app.get("name"): app for app in root}


def _window_list_frame(app: ET.Element) -> ET.Element:
    """The one frame of a window-list application node (no AT-SPI subtree under it)."""
    frames = list(app)
    assert len(frames) == 1 and frames[0].tag == "frame" and not list(frames[0]), \
        ET.tostring(app, encoding="unicode")[:500]
    assert frames[0].get("window-id", "").startswith("0x")
    return frames[0]


@needs_atspi
def test_the_tree_holds_mousepad_and_what_was_typed_into_it(desktop_vm):
    provider, holder = desktop_vm
    client = GuestClient(holder["info"].address)
    _open_editor_and_terminal(client)
    code = acts.computer13_to_code({"action_type": "TYPING", "parameters": {"text": TYPED}})
    assert client.execute(["python", "-c", "import pyautogui; " + code])["returncode"] == 0
    deadline = time.monotonic() + 15
    while True:
        started = time.monotonic()
        tree = client.accessibility_tree()
        took = time.monotonic() - started
        if TYPED in tree or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert took < desktop.ATSPI_TIMEOUT_S
    for prefix, uri in OSWORLD_NAMESPACES.items():
        assert f'xmlns:{prefix}="{uri}"' in tree.split(">", 1)[0]
    apps = _applications(tree)
    # mousepad's own tree: its frame, named by the window title, with OSWorld's attributes
    editor = apps["mousepad"]
    frame = next(node for node in editor if node.tag == "frame")
    assert "notes.txt" in frame.get("name")
    assert frame.get(f"{{{ST}}}showing") == "true" and frame.get(f"{{{ST}}}active") == "true"
    assert frame.get(f"{{{CP}}}screencoord", "").startswith("(")
    assert frame.get(f"{{{CP}}}size", "").startswith("(")
    texts = [node for node in frame.iter("text") if node.text and TYPED in node.text]
    assert len(texts) == 1, [node.text for node in frame.iter("text")]
    assert texts[0].get(f"{{{ST}}}editable") == "true"
    assert len(list(frame.iter())) > 50  # menus, tool bar, ...: a real tree
    # xterm has no AT-SPI: the window list stands in for it, its title escaped
    assert _window_list_frame(apps["XTerm"]).get("name") == ODD_TITLE


@needs_atspi
@pytest.mark.parametrize("breaks_it", [
    pytest.param(None, id="atspi-off"),  # PARALLEL_ROLLOUT_ATSPI=0 at boot: no bus at all
    pytest.param("kill -9 {bus} $(pidof at-spi-bus-launcher at-spi2-registryd)",
                 id="a11y-bus-killed"),
    pytest.param("kill -STOP {bus}", id="a11y-bus-hung"),
    pytest.param("kill -STOP $(pidof mousepad)", id="app-hung"),
])
def test_the_window_list_stands_in_in_bounded_time(request, monkeypatch, breaks_it):
    if breaks_it is None:
        monkeypatch.setenv("PARALLEL_ROLLOUT_ATSPI", "0")
    # the agent's bound on the walk, shorter than its default (a LibreOffice walk's)
    monkeypatch.setenv(desktop.ATSPI_TIMEOUT_ENV, str(WALK_TIMEOUT_S))
    provider, holder = request.getfixturevalue("desktop_vm")
    client = GuestClient(holder["info"].address)
    _open_editor_and_terminal(client)
    if breaks_it:
        # AT-SPI was up: mousepad joins its bus a moment after its window shows (seconds on
        # a loaded machine), and until then the tree is the window list's
        deadline = time.monotonic() + 30
        while "mousepad" not in _applications(client.accessibility_tree()):
            assert time.monotonic() < deadline, "mousepad never showed on the AT-SPI bus"
            time.sleep(0.5)
        # [.]: the pattern must not match the shell that runs it
        bus = "$(pgrep -f 'at-spi2/accessibility[.]conf')"
        result = client.execute(breaks_it.format(bus=bus), shell=True)
        assert result["returncode"] == 0, result
    else:
        environment = client.execute("echo $NO_AT_BRIDGE; pgrep -c dbus-daemon", shell=True)
        assert environment["output"].split() == ["1", "0"]
    started = time.monotonic()
    tree = client.accessibility_tree()
    assert time.monotonic() - started < WALK_TIMEOUT_S + 1.5
    apps = _applications(tree)
    assert "notes.txt" in _window_list_frame(apps["Mousepad"]).get("name")
    assert _window_list_frame(apps["XTerm"]).get("name") == ODD_TITLE
    assert "mousepad" not in apps and TYPED not in tree


# ------------------------------------------------------------ the walker's XML, without a bus


class FakeNode:
    """An AT-SPI object as pyatspi shows it: states as numbers, interfaces by query*()."""

    STATES = {"VISIBLE": 30, "SHOWING": 25, "MULTI_LINE": 17, "EDITABLE": 7}

    def __init__(self, role: str, name: str = "", states=(), attributes=None, text=None,
                 extents=None, actions=(), children=()) -> None:
        self.role, self.name, self.text, self.extents = role, name, text, extents
        self.states = [self.STATES[s] for s in states]
        self.attributes, self.actions, self.children = attributes or {}, actions, list(children)
        self.childCount = len(self.children)

    def getRoleName(self) -> str:
        return self.role

    def getState(self):
        return SimpleNamespace(get_states=lambda: self.states)

    def get_attributes(self) -> dict:
        return self.attributes

    def getChildAtIndex(self, index: int):
        return self.children[index]

    def queryComponent(self):
        if self.extents is None:
            raise NotImplementedError
        x, y, width, height = self.extents
        return SimpleNamespace(getExtents=lambda kind: SimpleNamespace(x=x, y=y, width=width,
                                                                       height=height))

    def queryText(self):
        if self.text is None:
            raise NotImplementedError
        return SimpleNamespace(characterCount=len(self.text),
                               getText=lambda start, end: self.text[start:end])

    def queryAction(self):
        if not self.actions:
            raise NotImplementedError
        return SimpleNamespace(nActions=len(self.actions),
                               getName=lambda i: self.actions[i][0],
                               getDescription=lambda i: self.actions[i][1],
                               getKeyBinding=lambda i: self.actions[i][2])

    def _none(self):
        raise NotImplementedError

    queryImage = querySelection = queryValue = _none


FAKE_PYATSPI = SimpleNamespace(
    XY_SCREEN=0, StateType=lambda value: "STATE_" + {v: k for k, v in FakeNode.STATES.items()}[value])


def _walked(node: FakeNode, budget: int = 100) -> ET.Element:
    fragment = atspi_tree._node_xml(node, 1, atspi_tree._Budget(budget), FAKE_PYATSPI)
    declarations = " ".join(f'xmlns:{p}="{uri}"' for p, uri in OSWORLD_NAMESPACES.items())
    return ET.fromstring(f"<desktop-frame {declarations}>{fragment}</desktop-frame>")[0]


def test_the_walker_writes_osworld_nodes_that_always_parse():
    editor = FakeNode("text", states=["VISIBLE", "SHOWING", "MULTI_LINE", "EDITABLE"],
                      text="one\ufffc two\x01 <&>", extents=(5, 6, 70, 80))
    hidden = FakeNode("push button", 'Save "now" <&>', states=["VISIBLE"], extents=(1, 1, 1, 1),
                      actions=[("click", "", "<Control>s")])
    frame = FakeNode("frame", "notes.txt\x02 - Mousepad", states=["VISIBLE", "SHOWING"],
                     attributes={"toolkit": "gtk", "odd key!": "x"}, extents=(0, 0, 640, 480),
                     children=[editor, hidden])
    node = _walked(frame)
    assert node.tag == "frame" and node.get("name") == "notes.txt - Mousepad"
    assert node.get(f"{{{ST}}}showing") == "true"
    assert node.get(f"{{{OSWORLD_NAMESPACES['attr']}}}toolkit") == "gtk"
    assert node.get(f"{{{OSWORLD_NAMESPACES['attr']}}}odd-key-") == "x"
    assert (node.get(f"{{{CP}}}screencoord"), node.get(f"{{{CP}}}size")) == ("(0, 0)", "(640, 480)")
    text, button = list(node)
    assert text.tag == "text" and text.text == "one two <&>"
    assert text.get(f"{{{ST}}}multi_line") == text.get(f"{{{ST}}}editable") == "true"
    assert button.tag == "push-button" and button.get("name") == 'Save "now" <&>'
    assert button.get(f"{{{CP}}}size") is None  # visible but not showing: no geometry
    assert button.get(f"{{{OSWORLD_NAMESPACES['act']}}}click_kb") == "<Control>s"
    # the node budget cuts the walk, and what it wrote still parses
    assert len(list(_walked(frame, budget=1))) == 1


class _FailingValue:
    """Chromium's slider: a Value interface whose reads but one fail with ``error``."""

    def __init__(self, error: str) -> None:
        self.error = error

    currentValue = 5.0

    def __getattr__(self, name: str):
        raise RuntimeError(self.error)


def test_a_failing_value_read_costs_its_attribute_and_a_hung_app_its_walk():
    slider = FakeNode("slider", "Zoom", states=["VISIBLE"])
    slider.queryValue = lambda: _FailingValue("atspi_error: Get failed (1)")
    node = _walked(FakeNode("frame", "page", children=[slider]))
    values = {key.split("}")[1]: value for key, value in node[0].attrib.items()
              if key.startswith(f"{{{OSWORLD_NAMESPACES['val']}}}")}
    assert node[0].get("name") == "Zoom" and values == {"value": "5.0"}
    slider.queryValue = lambda: _FailingValue("Timeout was reached")
    with pytest.raises(RuntimeError, match="Timeout"):
        _walked(FakeNode("frame", "page", children=[slider]))
