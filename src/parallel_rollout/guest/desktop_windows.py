"""Windows of the desktop and OSWorld's accessibility tree.

Windows are listed and handled with ``wmctrl``/``xdotool``. ``GET /accessibility`` answers
OSWorld's ``{"AT": xml}``: a ``desktop-frame`` root with OSWorld's namespaces, then the AT-SPI
tree of each app that exposes one (walked by ``atspi_tree.py`` in a child ``python3`` that can
import the system's pyatspi, killed after ``desktop.atspi_timeout()``), then, for every window whose
process has no such tree (xterm, a hung app), an ``application``/``frame`` pair with its
title, class and geometry from the window list.
"""

from __future__ import annotations

import os
import signal
import subprocess

try:
    from .agent_commands import as_user
    from .desktop import ATSPI_ENV, DesktopError, atspi_timeout, find, helper, require_desktop, state
except ImportError:  # a sibling file in the guest, not a package
    from agent_commands import as_user  # type: ignore[no-redef]
    from desktop import (ATSPI_ENV, DesktopError, atspi_timeout, find, helper,  # type: ignore[no-redef]
                         require_desktop, state)

#: the walker, next to this file in every guest (the sandbox binds it, the images copy it),
#: and who runs it
WALKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "atspi_tree.py")
SYSTEM_PYTHON = "/usr/bin/python3"
#: OSWorld's namespaces (desktop_env/server/main.py, Ubuntu): declared on the root element
NAMESPACES = {
    "st": "https://accessibility.ubuntu.example.org/ns/state",
    "attr": "https://accessibility.ubuntu.example.org/ns/attributes",
    "cp": "https://accessibility.ubuntu.example.org/ns/component",
    "doc": "https://accessibility.ubuntu.example.org/ns/document",
    "docattr": "https://accessibility.ubuntu.example.org/ns/document/attributes",
    "txt": "https://accessibility.ubuntu.example.org/ns/text",
    "val": "https://accessibility.ubuntu.example.org/ns/value",
    "act": "https://accessibility.ubuntu.example.org/ns/action",
}


def list_windows() -> list[dict]:
    """Every managed window: id, pid, geometry, WM_CLASS and title (``wmctrl -lpGx``)."""
    require_desktop()
    import re

    result = helper(["wmctrl", "-lpGx"], check=False)
    # "<class> <machine> <title>": a class may hold spaces (Chromium's instance names its
    # profile: "chromium (/tmp/p).Chromium"), so it ends at the machine, this VM's name or N/A
    machine = re.compile(r"\s+(?:%s|N/A)(?:\s|$)" % re.escape(os.uname().nodename))
    windows = []
    for line in result.stdout.splitlines():
        parts = line.split(None, 7)
        if len(parts) < 8:
            continue
        wid, desktop, pid, x, y, w, h, rest = parts
        found = machine.search(rest)
        wm_class, title = ((rest[:found.start()], rest[found.end():]) if found
                           else (rest.split(None, 1)[0], ""))
        windows.append({"id": wid, "pid": int(pid), "x": int(x), "y": int(y), "width": int(w),
                        "height": int(h), "class": wm_class, "title": title})
    return windows


def _active_window_id() -> int | None:
    result = helper(["xdotool", "getactivewindow"], check=False)
    try:
        return int(result.stdout.strip())
    except ValueError:
        return None


def accessibility_xml() -> str:
    """The desktop as OSWorld's XML: the AT-SPI tree of every app that exposes one, and an
    application node per window (title, class, geometry) for the windows of the others."""
    windows = list_windows()
    apps = _atspi_apps()
    covered = {app["pid"] for app in apps}
    active = _active_window_id()
    fragments = [app["xml"] for app in apps]
    for win in windows:
        if win["pid"] in covered:
            continue
        app = win["class"].split(".")[-1]
        is_active = active is not None and int(win["id"], 16) == active
        fragments.append(
            f'<application name={_quote(app)} st:pid="{win["pid"]}">'
            f'<frame name={_quote(win["title"])} class={_quote(win["class"])} '
            f'window-id="{win["id"]}" st:active="{str(is_active).lower()}" '
            f'cp:screencoord="({win["x"]}, {win["y"]})" '
            f'cp:size="({win["width"]}, {win["height"]})"/></application>')
    declarations = " ".join(f"xmlns:{prefix}={_quote(uri)}" for prefix, uri in NAMESPACES.items())
    return "\n".join([f'<desktop-frame {declarations} name="Desktop" cp:screencoord="(0, 0)" '
                      f'cp:size="({state["width"]}, {state["height"]})">',
                      *fragments, "</desktop-frame>"])


def _atspi_apps() -> list[dict]:
    """The walker's apps (``{"pid", "name", "xml"}``): [] when there is no AT-SPI bus or the
    walker fails, those it finished when it outlives atspi_timeout() (reasons: agent.log)."""
    if not os.environ.get("DBUS_SESSION_BUS_ADDRESS") or os.environ.get(ATSPI_ENV) == "0":
        return []
    # Debian's python3-pyatspi is for the system's interpreter, which a python3 earlier on
    # PATH (/usr/local/bin) may not be
    python = SYSTEM_PYTHON if os.access(SYSTEM_PYTHON, os.X_OK) else find("python3")
    if python is None:
        return _walk_failed("no python3")
    try:
        # -I, not -S: pyatspi is in the system's dist-packages, which site.py adds
        walker = subprocess.Popen(as_user([python, "-I", WALKER]), stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  start_new_session=True)
    except OSError as exc:
        return _walk_failed(f"cannot start {python}: {exc}")
    try:
        out, err = walker.communicate(timeout=atspi_timeout())
    except subprocess.TimeoutExpired:
        _walk_failed(f"killed after {atspi_timeout():g}s")
        try:
            os.killpg(walker.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass  # it ended on its own meanwhile
        try:
            out, err = walker.communicate(timeout=1.0)  # what it printed before the kill
        except subprocess.TimeoutExpired:
            # something outside its group holds its pipes: the answer does not wait for it
            walker.stdout.close()
            walker.stderr.close()
            walker.wait()
            return []
    if walker.returncode not in (0, -signal.SIGKILL):
        _walk_failed(f"exit status {walker.returncode}: "
                     f"{err.decode('utf-8', 'replace').strip()[-500:]}")
    import json

    apps = []
    for line in out.decode("utf-8", "replace").splitlines():
        try:
            result = json.loads(line)
        except ValueError:
            continue  # the line the kill cut short
        if "error" in result:
            _walk_failed(result["error"])
        else:
            apps.append(result)
    return apps


def _walk_failed(reason: str) -> list:
    import sys

    print(f"desktop: AT-SPI walk: {reason}; the window list stands in", file=sys.stderr)
    return []


def _quote(value: str) -> str:
    """``value`` as a double-quoted XML attribute (xml.sax.saxutils costs ~20 ms of start-up)."""
    for char, entity in (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"), ('"', "&quot;"),
                         ("\n", "&#10;"), ("\r", "&#13;"), ("\t", "&#9;")):
        value = value.replace(char, entity)
    return f'"{value}"'


def wmctrl_window(action: str, window_name: str, strict: bool, by_class: bool) -> None:
    """``wmctrl -<action>`` on a window by title (``strict``: exact, ``by_class``: WM_CLASS)."""
    flags = "-" + ("x" if by_class else "") + ("F" if strict else "") + action
    result = helper(["wmctrl", flags, window_name], check=False)
    if result.returncode != 0:
        raise DesktopError(404, f"no window matches {window_name!r}")

