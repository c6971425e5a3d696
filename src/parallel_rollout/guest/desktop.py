"""Desktop routes of the guest agent: an X display (Xvfb) with a window manager, a D-Bus
session with the AT-SPI accessibility bus, and OSWorld's desktop routes on top of them.
Imported by ``server.py`` only when a desktop route is called or ``--desktop WxH`` is given,
so an agent without a desktop starts as fast as before.

::

    server.py --desktop 1920x1080
        └─ start_desktop(): dbus-daemon --session (ready when it prints its address)
                            Xvfb :0 (ready when it writes its display number to -displayfd)
                            openbox (ready when the root window has _NET_SUPPORTING_WM_CHECK)
                            (every command the agent runs inherits DISPLAY=:0 and
                            DBUS_SESSION_BUS_ADDRESS)
                            the AT-SPI bus: asking the session bus for org.a11y.Bus activates
                            at-spi-bus-launcher, which starts the accessibility bus (a second
                            dbus-daemon); a ping there activates at-spi2-registryd
           then "ready" to the host; GTK apps (mousepad, pcmanfm) register on the AT-SPI bus,
           xterm does not

Every process of the desktop is a child of the agent's sandbox or VM and dies with it. The
AT-SPI bus is started before "ready", not on the first app's demand, so that it is part of
the snapshot: when the first app (pcmanfm's GTK 2 bridge) and the registry came up at the
same time on a slow guest, the app sometimes never mapped its window (seen under TCG, after
a reset, in about one open of ten). Starting it costs ~0.1 s of a boot.

Like the rest of the agent this is standard library only: screenshots read the frame buffer
with ``XGetImage`` and the pointer with ``XFixesGetCursorImage`` through ctypes (libX11 and
libXfixes come with Xvfb's dependencies), paste the cursor at the pointer as OSWorld does, and
encode the PNG with zlib. Windows are handled with ``wmctrl``/``xdotool``, recordings with
``ffmpeg -f x11grab``.

**Accessibility.** ``GET /accessibility`` answers OSWorld's ``{"AT": xml}``: a
``desktop-frame`` root with OSWorld's namespaces, then the AT-SPI tree of each app that
exposes one (walked by ``atspi_tree.py`` in a child ``python3`` that can import the system's
pyatspi), then, for every window whose process has no such tree (xterm, a hung app), an
``application``/``frame`` pair with its title, class and geometry from the window list. The
walker gets :data:`ATSPI_TIMEOUT_S` and is killed after that; a walk that fails or times out,
a missing pyatspi, or a desktop without a bus (dbus-daemon or at-spi2-core not installed, or
``PARALLEL_ROLLOUT_ATSPI=0``; GTK apps then run with ``NO_AT_BRIDGE=1``) leaves the window
list alone, so the answer always comes, in bounded time.

**Bounded waits.** Every route finishes in bounded time: ``/setup/open_file`` waits for the
window at most ``timeout`` seconds (default :data:`OPEN_TIMEOUT_S`, never OSWorld's 1800 s)
and answers 500 ``{"status": "error", "message": ...}`` when it does not appear (OSWorld's
shape); helper commands have short timeouts; the AT-SPI walk has its own (above).
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import threading
import time
import zlib

#: the display every desktop VM uses: the sandbox has its own /tmp and network namespace
DISPLAY = ":0"
#: seconds /setup/open_file waits for the file's window unless the request says otherwise
OPEN_TIMEOUT_S = 30.0
#: seconds a helper command (wmctrl, xdotool) may take
HELPER_TIMEOUT_S = 10.0
#: seconds Xvfb and the window manager may take to come up
START_TIMEOUT_S = 20.0
#: seconds the session bus may take; a later one is killed and the desktop has no AT-SPI
BUS_TIMEOUT_S = 5.0
RECORDING_PATH = "/tmp/recording.mp4"
#: seconds the AT-SPI walker may take before /accessibility answers with the window list:
#: below GuestClient.accessibility_tree's 10 s, so the fallback reaches the caller in time
ATSPI_TIMEOUT_S = 8.0
#: ``0`` in the agent's environment: no session bus, no AT-SPI, the window list only
ATSPI_ENV = "PARALLEL_ROLLOUT_ATSPI"
#: the AT-SPI bus launcher, dbus-activated (org.a11y.Bus) on the session bus
BUS_LAUNCHER = "at-spi-bus-launcher"
LIBEXEC_DIRS = ("/usr/libexec", "/usr/lib/at-spi2-core")
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

_state = {"width": 0, "height": 0, "xvfb": None, "wm": None, "bus": None}
_recorder_lock = threading.Lock()
_recorder: dict = {"proc": None}


class DesktopError(Exception):
    """The desktop is missing or a desktop step failed; (status, message) for the answer."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


# ------------------------------------------------------------------------------ start-up


def start_desktop(width: int, height: int, wm: str = "openbox") -> None:
    """Start the session bus, Xvfb at WxH and the window manager; return once all are ready
    (a session bus that cannot start leaves a desktop without AT-SPI, see the module doc)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    # GTK apps and the AT-SPI bus: a private runtime folder, where the bus puts its socket
    runtime = "/tmp/xdg-runtime"
    os.makedirs(runtime, mode=0o700, exist_ok=True)
    os.environ.setdefault("XDG_RUNTIME_DIR", runtime)
    bus = _spawn_session_bus()  # comes up while Xvfb does
    bus_deadline = time.monotonic() + BUS_TIMEOUT_S
    read_fd, write_fd = os.pipe()
    xvfb = subprocess.Popen(
        ["Xvfb", DISPLAY, "-screen", "0", f"{width}x{height}x24", "-nolisten", "tcp", "-noreset",
         "-displayfd", str(write_fd)],
        pass_fds=(write_fd,), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=None, start_new_session=True)  # into agent.log
    os.close(write_fd)
    try:
        _read_line(read_fd, deadline, "Xvfb")
    finally:
        os.close(read_fd)
    os.environ["DISPLAY"] = DISPLAY
    # -noreset: by default X resets (and refuses connections for a moment) whenever its last
    # client leaves; this probe and the readiness checks below are such clients
    x11 = _xlib()[0]
    delay = 0.002
    while True:
        connection = x11.XOpenDisplay(DISPLAY.encode())
        if connection:
            x11.XCloseDisplay(connection)
            break
        if xvfb.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"Xvfb never accepted a connection on {DISPLAY}")
        time.sleep(delay)
        delay = min(delay * 2, 0.05)
    _await_session_bus(bus, deadline, bus_deadline)
    _state.update(width=width, height=height, xvfb=xvfb)
    manager = subprocess.Popen([wm, "--sm-disable"] if wm == "openbox" else [wm],
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=None, start_new_session=True)  # into agent.log
    _state["wm"] = manager
    delay = 0.005
    while not _wm_ready():
        if manager.poll() is not None:
            raise RuntimeError(f"{wm} exited with status {manager.returncode} "
                               f"(Xvfb: {'running' if xvfb.poll() is None else xvfb.returncode})")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{wm} did not come up within {START_TIMEOUT_S:g}s")
        time.sleep(delay)
        delay = min(delay * 2, 0.05)
    if _state["bus"] is not None:
        _start_accessibility_bus(deadline)


def _start_accessibility_bus(deadline: float) -> None:
    """Activate the AT-SPI bus and its registry now (see the module doc); a failure is only
    logged: apps then activate them on demand, as without this."""
    timeout = max(0.5, min(BUS_TIMEOUT_S, deadline - time.monotonic()))
    reply = f"--reply-timeout={int(timeout * 1000)}"
    try:
        found = _helper(["dbus-send", "--session", "--print-reply", reply, "--dest=org.a11y.Bus",
                         "/org/a11y/bus", "org.a11y.Bus.GetAddress"], timeout=timeout)
        address = found.stdout.split('"')[1] if found.stdout.count('"') >= 2 else ""
        if not address:
            raise DesktopError(500, f"org.a11y.Bus gave no address: {found.stdout.strip()!r}")
        _helper(["dbus-send", f"--bus={address}", "--print-reply", reply,
                 "--dest=org.a11y.atspi.Registry", "/org/a11y/atspi/accessible/root",
                 "org.freedesktop.DBus.Peer.Ping"], timeout=timeout)
    except DesktopError as exc:
        import sys

        print(f"desktop: the AT-SPI bus did not start ahead ({exc.message}); apps start it "
              "on demand", file=sys.stderr)


def _read_line(fd: int, deadline: float, what: str) -> bytes:
    """Read a pipe up to its first newline: what Xvfb and dbus-daemon write once ready."""
    # Read up to the newline: closing the pipe while the writer is still writing would make
    # its write fail, which Xvfb treats as fatal.
    got = b""
    while not got.endswith(b"\n"):
        _wait_readable(fd, deadline, what)
        chunk = os.read(fd, 256)
        if not chunk:
            raise RuntimeError(f"{what} exited before it was ready")
        got += chunk
    return got


def _spawn_session_bus():
    """Start dbus-daemon for the desktop's session, or say in agent.log why there is none;
    (process, read end of its address pipe) or None."""
    if os.environ.get(ATSPI_ENV, "1") == "0":
        reason = f"{ATSPI_ENV}=0"
    elif not _find(BUS_LAUNCHER, LIBEXEC_DIRS):
        reason = "at-spi2-core is not installed"
    elif not _find("dbus-daemon"):
        reason = "dbus-daemon is not installed"
    else:
        read_fd, write_fd = os.pipe()
        try:
            bus = subprocess.Popen(
                ["dbus-daemon", "--session", "--nofork", "--nopidfile",
                 f"--print-address={write_fd}"],
                # what the services it activates get: at-spi-bus-launcher marks the display
                env={**os.environ, "DISPLAY": DISPLAY},
                pass_fds=(write_fd,), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=None, start_new_session=True)  # into agent.log
        except OSError as exc:
            os.close(read_fd)
            reason = f"dbus-daemon does not start: {exc}"
        else:
            return bus, read_fd
        finally:
            os.close(write_fd)
    _no_accessibility(reason)
    return None


def _await_session_bus(spawned, deadline: float, bus_deadline: float) -> None:
    """Export the bus's address to every command the agent runs once dbus-daemon has said
    it; a bus that fails or is late is killed and the desktop goes on without AT-SPI."""
    if spawned is None:
        return
    bus, read_fd = spawned
    try:
        address = _read_line(read_fd, min(deadline, bus_deadline), "dbus-daemon").decode().strip()
    except RuntimeError as exc:
        bus.kill()
        bus.wait()
        _no_accessibility(str(exc))
        return
    finally:
        os.close(read_fd)
    os.environ["DBUS_SESSION_BUS_ADDRESS"] = address
    # GTK 3 apps (mousepad) bring their bridge along; GTK 2 apps (pcmanfm) load it as a
    # module (Debian's libatk-adaptor), and GTK 3 skips these two names
    modules = [m for m in os.environ.get("GTK_MODULES", "").split(":") if m]
    os.environ["GTK_MODULES"] = ":".join(modules + [m for m in ("gail", "atk-bridge")
                                                    if m not in modules])
    _state["bus"] = bus


def _no_accessibility(reason: str) -> None:
    import sys

    print(f"desktop: no AT-SPI bus ({reason}); /accessibility answers with the window list",
          file=sys.stderr)
    # without a bus, GTK's atk-bridge would look for one (dbus-launch --autolaunch) in every app
    os.environ.setdefault("NO_AT_BRIDGE", "1")


def _find(program: str, extra_dirs: tuple[str, ...] = ()) -> str | None:
    """``program`` on PATH or in ``extra_dirs`` (shutil.which: ~3 ms more of start-up)."""
    dirs = [d for d in os.environ.get("PATH", os.defpath).split(os.pathsep) if d]
    for folder in (*dirs, *extra_dirs):
        path = os.path.join(folder, program)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def _wait_readable(fd: int, deadline: float, what: str) -> None:
    import select

    remaining = deadline - time.monotonic()
    if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
        raise RuntimeError(f"{what} was not ready in time")


def _wm_ready() -> bool:
    result = _helper(["xprop", "-root", "_NET_SUPPORTING_WM_CHECK"], check=False)
    return "window id" in result.stdout


def _require_desktop() -> None:
    if not os.environ.get("DISPLAY"):
        raise DesktopError(404, "this VM has no desktop (start the agent with --desktop WxH)")


def _helper(argv: list[str], check: bool = True, timeout: float = HELPER_TIMEOUT_S):
    try:
        result = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True,
                                text=True, timeout=timeout)
    except FileNotFoundError:
        raise DesktopError(500, f"{argv[0]} is not installed in this VM") from None
    except subprocess.TimeoutExpired:
        raise DesktopError(500, f"{argv[0]} did not answer within {timeout:g}s") from None
    if check and result.returncode != 0:
        raise DesktopError(500, f"{' '.join(argv)} failed ({result.returncode}): "
                                f"{result.stderr.strip()[:500]}")
    return result


# ---------------------------------------------------------------------------- screenshot


class _XImage(ctypes.Structure):
    _fields_ = [("width", ctypes.c_int), ("height", ctypes.c_int), ("xoffset", ctypes.c_int),
                ("format", ctypes.c_int), ("data", ctypes.POINTER(ctypes.c_ubyte)),
                ("byte_order", ctypes.c_int), ("bitmap_unit", ctypes.c_int),
                ("bitmap_bit_order", ctypes.c_int), ("bitmap_pad", ctypes.c_int),
                ("depth", ctypes.c_int), ("bytes_per_line", ctypes.c_int),
                ("bits_per_pixel", ctypes.c_int)]


class _CursorImage(ctypes.Structure):
    _fields_ = [("x", ctypes.c_short), ("y", ctypes.c_short), ("width", ctypes.c_ushort),
                ("height", ctypes.c_ushort), ("xhot", ctypes.c_ushort),
                ("yhot", ctypes.c_ushort), ("cursor_serial", ctypes.c_ulong),
                ("pixels", ctypes.POINTER(ctypes.c_ulong))]


_libs: dict = {}
_x_lock = threading.Lock()


def _xlib():
    if not _libs:
        x11 = ctypes.CDLL("libX11.so.6")
        x11.XOpenDisplay.restype = ctypes.c_void_p
        x11.XOpenDisplay.argtypes = [ctypes.c_char_p]
        x11.XDefaultRootWindow.restype = ctypes.c_ulong
        x11.XDefaultRootWindow.argtypes = [ctypes.c_void_p]
        x11.XGetImage.restype = ctypes.POINTER(_XImage)
        x11.XGetImage.argtypes = [ctypes.c_void_p, ctypes.c_ulong, ctypes.c_int, ctypes.c_int,
                                  ctypes.c_uint, ctypes.c_uint, ctypes.c_ulong, ctypes.c_int]
        x11.XDestroyImage.argtypes = [ctypes.POINTER(_XImage)]
        x11.XCloseDisplay.argtypes = [ctypes.c_void_p]
        x11.XFree.argtypes = [ctypes.c_void_p]
        _libs["x11"] = x11
        try:
            fixes = ctypes.CDLL("libXfixes.so.3")
            fixes.XFixesGetCursorImage.restype = ctypes.POINTER(_CursorImage)
            fixes.XFixesGetCursorImage.argtypes = [ctypes.c_void_p]
            _libs["xfixes"] = fixes
        except OSError:
            _libs["xfixes"] = None
    return _libs["x11"], _libs["xfixes"]


def screenshot_png() -> bytes:
    """The screen as PNG bytes, with the cursor pasted at the pointer."""
    _require_desktop()
    x11, fixes = _xlib()
    with _x_lock:
        display = x11.XOpenDisplay(os.environ["DISPLAY"].encode())
        if not display:
            raise DesktopError(500, f"cannot open display {os.environ['DISPLAY']}")
        try:
            width, height = _state["width"] or 0, _state["height"] or 0
            image = x11.XGetImage(display, x11.XDefaultRootWindow(display), 0, 0, width,
                                  height, 0xFFFFFFFF, 2)  # 2 = ZPixmap
            if not image:
                raise DesktopError(500, "XGetImage failed")
            try:
                info = image.contents
                stride = info.bytes_per_line
                raw = ctypes.string_at(info.data, stride * info.height)
                bpp = info.bits_per_pixel
            finally:
                x11.XDestroyImage(image)
            cursor = _cursor(fixes, display, x11)
        finally:
            x11.XCloseDisplay(display)
    if bpp != 32:
        raise DesktopError(500, f"unsupported screen depth: {bpp} bits per pixel")
    rgb = bytearray(width * height * 3)
    pixels = raw if stride == width * 4 else b"".join(
        raw[row * stride:row * stride + width * 4] for row in range(height))
    # X gives B, G, R, pad per pixel (little-endian); PNG wants R, G, B
    rgb[0::3], rgb[1::3], rgb[2::3] = pixels[2::4], pixels[1::4], pixels[0::4]
    if cursor is not None:
        _paste_cursor(rgb, width, height, *cursor)
    return _encode_png(rgb, width, height)


def _cursor(fixes, display, x11):
    if fixes is None:
        return None
    image = fixes.XFixesGetCursorImage(display)
    if not image:
        return None
    try:
        c = image.contents
        count = c.width * c.height
        argb = [c.pixels[i] & 0xFFFFFFFF for i in range(count)]
        return (c.x - c.xhot, c.y - c.yhot, c.width, c.height, argb)
    finally:
        x11.XFree(image)


def _paste_cursor(rgb: bytearray, width: int, height: int, left: int, top: int,
                  cw: int, ch: int, argb: list[int]) -> None:
    """Alpha-blend the cursor's premultiplied ARGB pixels onto the RGB frame."""
    for cy in range(ch):
        y = top + cy
        if not 0 <= y < height:
            continue
        for cx in range(cw):
            x = left + cx
            pixel = argb[cy * cw + cx]
            alpha = pixel >> 24
            if not alpha or not 0 <= x < width:
                continue
            at = (y * width + x) * 3
            keep = 255 - alpha
            for channel, shift in enumerate((16, 8, 0)):
                rgb[at + channel] = min(255, ((pixel >> shift) & 0xFF) + rgb[at + channel] * keep // 255)


def _encode_png(rgb: bytes | bytearray, width: int, height: int) -> bytes:
    import struct

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

    row = width * 3
    view = memoryview(rgb)
    scanlines = b"".join(b"\x00" + view[y * row:(y + 1) * row] for y in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
            + chunk(b"IDAT", zlib.compress(scanlines, 1)) + chunk(b"IEND", b""))


# -------------------------------------------------------------------------------- windows


def list_windows() -> list[dict]:
    """Every managed window: id, pid, geometry, WM_CLASS and title (``wmctrl -lpGx``)."""
    _require_desktop()
    result = _helper(["wmctrl", "-lpGx"], check=False)
    windows = []
    for line in result.stdout.splitlines():
        parts = line.split(None, 8)
        if len(parts) < 8:
            continue
        wid, desktop, pid, x, y, w, h, wm_class = parts[:8]
        title = parts[8].split(None, 1)[1] if len(parts) > 8 and " " in parts[8] else ""
        windows.append({"id": wid, "pid": int(pid), "x": int(x), "y": int(y), "width": int(w),
                        "height": int(h), "class": wm_class, "title": title})
    return windows


def _active_window_id() -> int | None:
    result = _helper(["xdotool", "getactivewindow"], check=False)
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
                      f'cp:size="({_state["width"]}, {_state["height"]})">',
                      *fragments, "</desktop-frame>"])


def _atspi_apps() -> list[dict]:
    """The walker's apps (``{"pid", "name", "xml"}``): [] when there is no AT-SPI bus or the
    walker fails, those it finished when it outlives ATSPI_TIMEOUT_S (reasons: agent.log)."""
    if not os.environ.get("DBUS_SESSION_BUS_ADDRESS") or os.environ.get(ATSPI_ENV) == "0":
        return []
    # Debian's python3-pyatspi is for the system's interpreter, which a python3 earlier on
    # PATH (/usr/local/bin) may not be
    python = SYSTEM_PYTHON if os.access(SYSTEM_PYTHON, os.X_OK) else _find("python3")
    if python is None:
        return _walk_failed("no python3")
    try:
        # -I, not -S: pyatspi is in the system's dist-packages, which site.py adds
        walker = subprocess.Popen([python, "-I", WALKER], stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  start_new_session=True)
    except OSError as exc:
        return _walk_failed(f"cannot start {python}: {exc}")
    try:
        out, err = walker.communicate(timeout=ATSPI_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        _walk_failed(f"killed after {ATSPI_TIMEOUT_S:g}s")
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


def _wmctrl_window(action: str, window_name: str, strict: bool, by_class: bool) -> None:
    flags = "-" + ("x" if by_class else "") + ("F" if strict else "") + action
    result = _helper(["wmctrl", flags, window_name], check=False)
    if result.returncode != 0:
        raise DesktopError(404, f"no window matches {window_name!r}")


# -------------------------------------------------------------------------------- routes
# Each takes the server's Request and returns (status, payload) like the server's routes.


def _json(req) -> dict:
    return req.json() if req.body else {}


def route_screenshot(req):
    """GET /screenshot: PNG of the screen with the cursor drawn."""
    return 200, ("image/png", screenshot_png())


def route_cursor_position(req):
    """GET /cursor_position: ``[x, y]``."""
    _require_desktop()
    result = _helper(["xdotool", "getmouselocation", "--shell"])
    values = dict(line.split("=", 1) for line in result.stdout.split() if "=" in line)
    return 200, [int(values.get("X", 0)), int(values.get("Y", 0))]


def route_screen_size(req):
    """POST /screen_size: ``{width, height}``."""
    _require_desktop()
    return 200, {"width": _state["width"], "height": _state["height"]}


def route_window_size(req):
    """POST /window_size: ``{width, height}`` of the first window of WM_CLASS ``app_class_name``."""
    name = req.form().get("app_class_name")
    if not name:
        return 400, {"status": "error", "message": "missing required field 'app_class_name'"}
    for win in list_windows():
        if name.lower() in win["class"].lower().split("."):
            return 200, {"width": win["width"], "height": win["height"]}
    return 404, {"status": "error", "message": f"no window of class {name!r}"}


def route_accessibility(req):
    """GET /accessibility: ``{"AT": xml}``."""
    return 200, {"AT": accessibility_xml()}


def route_launch(req):
    """POST /setup/launch: start a command without waiting for it."""
    _require_desktop()
    body = _json(req)
    command, shell = body.get("command"), bool(body.get("shell", False))
    if isinstance(command, str) and not shell:
        import shlex

        command = shlex.split(command)
    if not command or not (isinstance(command, str) or all(isinstance(p, str) for p in command)):
        return 400, {"status": "error", "message": "field 'command' must be a string or a list of strings"}
    if isinstance(command, list):
        command = [os.path.expanduser(p) if p.startswith("~") else p for p in command]
    try:
        subprocess.Popen(command, shell=shell, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True,
                         cwd=os.environ.get("HOME"))
    except OSError as exc:
        return 500, {"status": "error", "message": f"cannot launch {command!r}: {exc}"}
    return 200, f"{command} launched successfully"


#: the program that opens a file of a given suffix when the request names none
OPENERS = {".txt": "mousepad", ".md": "mousepad", ".py": "mousepad", ".json": "mousepad",
           ".csv": "mousepad", ".log": "mousepad", ".sh": "mousepad", ".conf": "mousepad"}
#: office documents open in LibreOffice where the desktop has it (as on OSWorld's images)
OFFICE_SUFFIXES = (".odt", ".ods", ".odp", ".doc", ".docx", ".xls", ".xlsx", ".ppt", ".pptx",
                   ".rtf")


def route_open_file(req):
    """POST /setup/open_file: open ``path`` (a file or a program on PATH) and wait, at most
    ``timeout`` seconds, for a window whose title holds its name."""
    _require_desktop()
    body = _json(req)
    path = body.get("path")
    if not isinstance(path, str) or not path:
        return 400, {"status": "error", "message": "missing required field 'path'"}
    timeout = body.get("timeout", OPEN_TIMEOUT_S)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        return 400, {"status": "error", "message": "field 'timeout' must be a positive number"}
    full = os.path.expandvars(os.path.expanduser(path))
    import shutil

    if os.path.isdir(full):
        argv = [body.get("opener") or "pcmanfm", full]
    elif os.path.exists(full):
        suffix = os.path.splitext(full)[1].lower()
        opener = body.get("opener") or OPENERS.get(suffix)
        if opener is None and suffix in OFFICE_SUFFIXES and shutil.which("soffice"):
            opener = "soffice"
        opener = opener or ("xdg-open" if shutil.which("xdg-open") else "mousepad")
        argv = [opener, full]
    elif shutil.which(path):
        argv = [path]
    else:
        return 404, {"status": "error", "message": f"File not found: {path}"}
    try:
        subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True,
                         cwd=os.environ.get("HOME"))
    except OSError as exc:
        return 500, {"status": "error", "message": f"cannot open {path}: {exc}"}
    name = os.path.basename(full.rstrip("/")) or full
    deadline = time.monotonic() + float(timeout)
    while time.monotonic() < deadline:
        if any(name in win["title"] for win in list_windows()):
            return 200, f"{path} opened successfully"
        time.sleep(0.1)
    return 500, {"status": "error", "timeout": True,
                 "message": f"no window for {path} appeared within {float(timeout):g}s"}


def route_activate_window(req):
    """POST /setup/activate_window: ``wmctrl -a`` (``-F`` strict, ``-x`` by class)."""
    body = _json(req)
    name = body.get("window_name")
    if not isinstance(name, str) or not name:
        return 400, {"status": "error", "message": "missing required field 'window_name'"}
    _require_desktop()
    _wmctrl_window("a", name, bool(body.get("strict")), bool(body.get("by_class")))
    return 200, "Window activated successfully"


def route_close_window(req):
    """POST /setup/close_window: ``wmctrl -c`` (``-F`` strict, ``-x`` by class)."""
    body = _json(req)
    name = body.get("window_name")
    if not isinstance(name, str) or not name:
        return 400, {"status": "error", "message": "missing required field 'window_name'"}
    _require_desktop()
    _wmctrl_window("c", name, bool(body.get("strict")), bool(body.get("by_class")))
    return 200, "Window closed successfully"


def route_start_recording(req):
    """POST /start_recording: ffmpeg x11grab into /tmp/recording.mp4; one recorder per VM."""
    _require_desktop()
    with _recorder_lock:
        proc = _recorder["proc"]
        if proc is not None and proc.poll() is None:
            return 400, {"status": "error", "message": "Recording is already in progress."}
        try:
            os.unlink(RECORDING_PATH)
        except FileNotFoundError:
            pass
        size = f"{_state['width']}x{_state['height']}"
        argv = ["ffmpeg", "-y", "-loglevel", "error", "-f", "x11grab", "-draw_mouse", "1",
                "-video_size", size, "-framerate", "10", "-i", os.environ["DISPLAY"],
                "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", RECORDING_PATH]
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE, start_new_session=True)
        except OSError as exc:
            return 500, {"status": "error", "message": f"cannot start ffmpeg: {exc}"}
        try:
            proc.wait(timeout=1.0)
            message = (proc.stderr.read() or b"").decode("utf-8", "replace")[-500:]
            return 500, {"status": "error", "message": f"ffmpeg exited at once: {message}"}
        except subprocess.TimeoutExpired:
            pass
        _recorder["proc"] = proc
    return 200, {"status": "success", "message": "Started recording successfully."}


def route_end_recording(req):
    """POST /end_recording: stop ffmpeg (SIGINT, then kill after 15 s); the mp4's bytes."""
    with _recorder_lock:
        proc, _recorder["proc"] = _recorder["proc"], None
    if proc is None:
        return 400, {"status": "error", "message": "No recording in progress to stop."}
    try:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    finally:
        if proc.stderr is not None:
            proc.stderr.close()
    if not os.path.isfile(RECORDING_PATH):
        return 500, {"status": "error", "message": "Recording failed: no file was written"}
    with open(RECORDING_PATH, "rb") as handle:
        return 200, ("video/mp4", handle.read())


#: path -> (method, function) for the server's dispatcher
ROUTES = {
    "/screenshot": ("GET", route_screenshot),
    "/cursor_position": ("GET", route_cursor_position),
    "/screen_size": ("POST", route_screen_size),
    "/window_size": ("POST", route_window_size),
    "/accessibility": ("GET", route_accessibility),
    "/setup/launch": ("POST", route_launch),
    "/setup/open_file": ("POST", route_open_file),
    "/setup/activate_window": ("POST", route_activate_window),
    "/setup/close_window": ("POST", route_close_window),
    "/start_recording": ("POST", route_start_recording),
    "/end_recording": ("POST", route_end_recording),
}
