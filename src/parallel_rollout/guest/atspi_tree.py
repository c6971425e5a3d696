"""The AT-SPI walker behind ``GET /accessibility``: every application registered on the
desktop's accessibility bus, as XML in OSWorld's shape. Run by ``desktop.py`` as a child::

    desktop.py (python3 -I -S, standard library only)
        └─ /usr/bin/python3 -I atspi_tree.py      killed when it outlives ATSPI_TIMEOUT_S
               pyatspi ──D-Bus──► at-spi2-registryd, and every app's atk-bridge
               stdout: a JSON line per app, {"pid", "name", "xml"} or {"error": why}

It is a separate process because pyatspi lives in the system's dist-packages (Debian's
``python3-pyatspi``), which the agent's ``-S`` interpreter cannot import, and because an
AT-SPI client blocks on an app that stopped answering: the parent's hard timeout is the only
bound that always holds. Within it, each app's result is printed as soon as it is complete,
so a kill loses only the apps not walked yet (``desktop.py`` shows their windows from the
window list). Each call also has libatspi's own timeout (:data:`CALL_TIMEOUT_MS`), after
which pyatspi mostly answers a default (an empty name, ``childCount`` -1) rather than raise:
an app that does not answer its first call is skipped, one that hangs half-way costs a
timeout per call until the parent's kill.

**The node shape** is OSWorld's (``desktop_env/server/main.py``, Linux): the tag is the role
name with spaces as dashes (``push-button``), ``name`` the accessible name, and namespaced
attributes: ``st:<state>="true"`` for each state, ``attr:<key>`` for the object attributes,
``cp:screencoord="(x, y)"`` and ``cp:size="(w, h)"`` for visible and showing components,
``val:value|min|max|step``, ``act:<action>_desc|_kb``, ``image``/``selection="true"``; the
element's text is the Text interface's content. Each app's XML is a fragment that uses the
prefixes; ``desktop.py`` declares them on the ``desktop-frame`` root (:data:`NAMESPACES`
there). Walks stop at OSWorld's limits: depth 50, 1024 children per node, 5000 nodes.
"""

from __future__ import annotations

import json
import re
import sys
from xml.sax.saxutils import escape, quoteattr

MAX_DEPTH = 50
MAX_WIDTH = 1024
#: nodes per walk, over every app: what bounds the answer's size
MAX_NODES = 5000
#: libatspi's timeout per call, and during an app's first seconds on the bus
CALL_TIMEOUT_MS = 1000
STARTUP_TIMEOUT_MS = 3000

# characters XML 1.0 cannot carry (apps do put control characters into their text), and
# U+FFFC/U+FFFD, the placeholders GTK puts where an embedded object sits in the text
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff\ufffc\ufffd]")
_NOT_NAME = re.compile(r"[^A-Za-z0-9_.-]")


class _Budget:
    """The nodes a walk may still visit."""

    def __init__(self, nodes: int) -> None:
        self.left = nodes

    def take(self) -> bool:
        """Spend one node; False once there are none left."""
        if self.left <= 0:
            return False
        self.left -= 1
        return True


def _xml_name(raw: str, fallback: str) -> str:
    """``raw`` as an XML name: other characters become dashes; a letter or _ first."""
    name = _NOT_NAME.sub("-", raw.strip().replace(" ", "-"))
    if not name:
        return fallback
    return name if name[0].isalpha() or name[0] == "_" else "_" + name


def _clean(text) -> str:
    return _NOT_XML.sub("", str(text))


def _interface(node, query: str):
    """The node's ``query`` interface (queryText, ...), or None where it has none."""
    try:
        return getattr(node, query)()
    except NotImplementedError:
        return None


def _read(read, *args):
    """``read(*args)``, or None when the app fails it: Chromium's sliders have a Value
    interface whose reads answer "Get failed"; as OSWorld's walker, the node keeps the rest."""
    try:
        return read(*args)
    except NotImplementedError:
        return None
    except Exception as exc:  # pyatspi raises GLib.GError, whose module we do not import
        if any(word in str(exc).lower() for word in ("timeout", "timed out", "noreply")):
            raise  # a hung app: its walk ends (see walk), not one timeout per node
        return None


def _attributes(node, pyatspi) -> tuple[dict[str, str], str]:
    """(attributes, text) of one node in OSWorld's naming."""
    attrs = {"name": node.name or ""}
    for state in node.getState().get_states():
        # STATE_MULTI_LINE -> st:multi_line, as OSWorld names them
        name = str(pyatspi.StateType(int(state))).split("_", 1)[-1].lower()
        attrs["st:" + _xml_name(name, "state")] = "true"
    for key, value in (node.get_attributes() or {}).items():
        if key:
            attrs["attr:" + _xml_name(key, "attribute")] = value
    if attrs.get("st:visible") and attrs.get("st:showing"):
        component = _interface(node, "queryComponent")
        if component is not None:
            box = component.getExtents(pyatspi.XY_SCREEN)
            attrs["cp:screencoord"] = f"({box.x}, {box.y})"
            attrs["cp:size"] = f"({box.width}, {box.height})"
    text_iface = _interface(node, "queryText")
    text = text_iface.getText(0, text_iface.characterCount) if text_iface is not None else ""
    if _interface(node, "queryImage") is not None:
        attrs["image"] = "true"
    if _interface(node, "querySelection") is not None:
        attrs["selection"] = "true"
    value = _interface(node, "queryValue")
    if value is not None:
        for key, read in (("value", "currentValue"), ("min", "minimumValue"),
                          ("max", "maximumValue"), ("step", "minimumIncrement")):
            number = _read(getattr, value, read)
            if number is not None:
                attrs["val:" + key] = str(number)
    action = _interface(node, "queryAction")
    if action is not None:
        for index in range(action.nActions):
            name = _xml_name(action.getName(index), "action")
            attrs[f"act:{name}_desc"] = action.getDescription(index) or ""
            attrs[f"act:{name}_kb"] = action.getKeyBinding(index) or ""
    return attrs, text


def _node_xml(node, depth: int, budget: _Budget, pyatspi) -> str:
    """One node and its subtree as XML (an exception from the bus ends the app's walk)."""
    attrs, text = _attributes(node, pyatspi)
    tag = _xml_name(node.getRoleName(), "unknown")
    children = []
    if depth < MAX_DEPTH:
        for index in range(min(node.childCount, MAX_WIDTH)):
            if not budget.take():
                break
            child = node.getChildAtIndex(index)
            if child is not None:
                children.append(_node_xml(child, depth + 1, budget, pyatspi))
    attributes = "".join(f" {key}={quoteattr(_clean(value))}" for key, value in attrs.items())
    body = escape(_clean(text)) + "".join(children)
    return f"<{tag}{attributes}>{body}</{tag}>" if body else f"<{tag}{attributes}/>"


def walk(emit) -> None:
    """Walk every application on the accessibility bus, calling ``emit`` with each result:
    ``{"pid", "name", "xml"}`` for an app, ``{"error": ...}`` for one that was skipped."""
    import pyatspi

    pyatspi.setTimeout(CALL_TIMEOUT_MS, STARTUP_TIMEOUT_MS)
    desktop = pyatspi.Registry.getDesktop(0)
    budget = _Budget(MAX_NODES)
    for index in range(min(desktop.childCount, MAX_WIDTH)):
        if not budget.take():
            emit({"error": f"stopped at {MAX_NODES} nodes"})
            break
        app = desktop.getChildAtIndex(index)
        if app is None:
            continue
        # pyatspi answers -1 rather than raise when the app's reply timed out
        if app.childCount < 0:
            emit({"error": f"application {index} does not answer"})
            continue
        try:
            pid = app.get_process_id()
            xml = _node_xml(app, 1, budget, pyatspi)
        except Exception as exc:  # a dead app: the window list shows its windows
            emit({"error": f"application {index}: {type(exc).__name__}: {exc}"})
            continue
        emit({"pid": pid, "name": app.name or "", "xml": xml})


def main() -> int:
    """Print the walk as JSON lines, each as soon as it is known (the parent keeps what came
    before it had to kill us); exit 2 when pyatspi is missing."""
    try:
        import pyatspi  # noqa: F401 - only whether it imports
    except ImportError as exc:
        print(f"atspi_tree.py: pyatspi is not installed ({exc}); apt-get install python3-pyatspi",
              file=sys.stderr)
        return 2

    def emit(result: dict) -> None:
        print(json.dumps(result), flush=True)

    walk(emit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
