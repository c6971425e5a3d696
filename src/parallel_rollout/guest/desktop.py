"""Desktop routes of the guest agent: an X display (Xvfb) with a window manager, a D-Bus
session with the AT-SPI accessibility bus, and OSWorld's desktop routes on top of them.
This module starts the desktop and holds what its routes share (:class:`DesktopError`,
:func:`helper`, :func:`require_desktop`); the routes are in ``desktop_routes.py``, the
screenshot in ``desktop_screen.py``, windows and the accessibility tree in
``desktop_windows.py``. ``agent_server.py`` imports them only when a desktop route is called or
``--desktop WxH`` is given, so an agent without a desktop starts as fast as before.

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

**Who runs it.** With ``--run-as`` (the process provider as root, docker, qemu) every process of the
desktop runs as the commands' unprivileged user with no capabilities (``agent_commands.as_user``): the
session bus, Xvfb, the window manager, the apps ``/setup/launch`` and ``/setup/open_file`` start, the
recorder and every helper (wmctrl, xdotool, dbus-send, the AT-SPI walker). The session bus admits one
uid, that one, and apps that refuse root (VLC) just run. The agent keeps its own user and is an X client
only at boot, before any command runs (the probe that Xvfb is up): the X server is then the user's, and
screenshots are taken by a child as that user (``desktop_screen.py``).

Every process of the desktop is a child of the agent's sandbox or VM and dies with it. The AT-SPI bus is
started before "ready", not on the first app's demand, so that it is part of the snapshot: when the
first app (pcmanfm's GTK 2 bridge) and the registry came up at the same time on a slow guest, the app
sometimes never mapped its window (seen under TCG, after a reset, in about one open of ten). Starting it
costs ~0.1 s of a boot.

Like the rest of the agent this is standard library only: screenshots read the frame buffer with
``XGetImage`` and the pointer with ``XFixesGetCursorImage`` through ctypes (libX11 and libXfixes come
with Xvfb's dependencies), paste the cursor at the pointer as OSWorld does, and encode the PNG with
zlib. Windows are handled with ``wmctrl``/``xdotool``, recordings with ``ffmpeg -f x11grab``.

**Accessibility.** ``GET /accessibility`` answers OSWorld's ``{"AT": xml}``: a ``desktop-frame`` root
with OSWorld's namespaces, then the AT-SPI tree of each app that exposes one (walked by
``atspi_tree.py`` in a child ``python3`` that can import the system's pyatspi), then, for every window
whose process has no such tree (xterm, a hung app), an ``application``/``frame`` pair with its title,
class and geometry from the window list. Which apps have a tree: GTK apps always; once the bus is up the
desktop says an assistive technology runs (``org.a11y.Status.IsEnabled``, as GNOME's accessibility
switch does on OSWorld's Ubuntu), and only then do Chromium (the browser and the page) and Thunderbird
join; LibreOffice runs on its GTK 3 plugin (``SAL_USE_VCLPLUGIN=gtk3`` where Debian's libreoffice-gtk3
is installed), its only one with an AT-SPI bridge. The walker gets :func:`atspi_timeout` seconds and is
killed after that; a walk that fails or times out, a missing pyatspi, or a desktop without a bus
(dbus-daemon or at-spi2-core not installed, or ``PARALLEL_ROLLOUT_ATSPI=0``; GTK apps then run with
``NO_AT_BRIDGE=1``) leaves the window list alone, so the answer always comes, in bounded time.

**Bounded waits.** ``/setup/open_file`` waits ``desktop_routes.OPEN_TIMEOUT_S`` at most (never OSWorld's
1800 s), then answers 500 (OSWorld's shape); helpers and the AT-SPI walk have short timeouts of their own.
"""

from __future__ import annotations

import os
import subprocess
import time

try:
    from .agent_commands import as_user, give
    from .agent_http import HTTPError
    from .agent_output import readable_within
except ImportError:  # a sibling file in the guest, not a package
    from agent_commands import as_user, give  # type: ignore[no-redef]
    from agent_http import HTTPError  # type: ignore[no-redef]
    from agent_output import readable_within  # type: ignore[no-redef]

#: the display a desktop takes: the first free one (:0 in a VM of this project's, whose sandbox
#: has its own /tmp and network namespace) unless ``--display`` names one; the start sets it
DISPLAY = ":0"
#: where X servers put their sockets
X11_SOCKETS = "/tmp/.X11-unix"
#: the displays a desktop looks among for a free one
DISPLAYS_TRIED = 64
#: seconds a helper command (wmctrl, xdotool) may take
HELPER_TIMEOUT_S = 10.0
#: seconds Xvfb and the window manager may take to come up
START_TIMEOUT_S = 20.0
#: seconds the AT-SPI bus's activation may take (the session bus itself has the desktop's
#: START_TIMEOUT_S, as Xvfb: a TCG guest on a loaded machine took more than 5 s for it)
BUS_TIMEOUT_S = 5.0
#: seconds the AT-SPI walker may take before /accessibility answers with the window list
#: (LibreOffice's 2000 nodes take 2-7 s on a loaded machine); ``PARALLEL_ROLLOUT_ATSPI_TIMEOUT``
#: in the agent's environment sets it. Below GuestClient.accessibility_tree's 30 s, so the
#: fallback reaches the caller in time
ATSPI_TIMEOUT_S = 20.0
ATSPI_TIMEOUT_ENV = "PARALLEL_ROLLOUT_ATSPI_TIMEOUT"
#: ``0`` in the agent's environment: no session bus, no AT-SPI, the window list only
ATSPI_ENV = "PARALLEL_ROLLOUT_ATSPI"
#: the AT-SPI bus launcher, dbus-activated (org.a11y.Bus) on the session bus
BUS_LAUNCHER = "at-spi-bus-launcher"
LIBEXEC_DIRS = ("/usr/libexec", "/usr/lib/at-spi2-core")
#: LibreOffice's GTK 3 plugin (Debian's libreoffice-gtk3): the only one of its plugins with an
#: AT-SPI bridge (the default, X11 "gen", has none); apps get SAL_USE_VCLPLUGIN=gtk3 with it
LIBREOFFICE_GTK3 = "/usr/lib/libreoffice/program/libvclplug_gtk3lo.so"

state = {"width": 0, "height": 0, "xvfb": None, "wm": None, "bus": None}


class DesktopError(HTTPError):
    """The desktop is missing or a desktop step failed; (status, message) for the answer."""


# ------------------------------------------------------------------------------ start-up


#: the user folders a desktop's home has (OSWorld's tasks write to ~/Desktop without making it)
HOME_FOLDERS = ("~/Desktop", "~/Documents", "~/Downloads", "~/Music", "~/Pictures", "~/Videos")


def put_pyautogui_shim() -> None:
    """On a machine whose commands' ``python`` has no pyautogui (one's own Debian machine given
    ``--desktop``, for ``--provider-name remote``), this agent's xdotool-backed one (``shim/``)
    goes on the PYTHONPATH of the commands it runs, as this project's images and sandboxes put
    it: OSWorld's actions are ``python -c "import pyautogui; …"``, and each failed there. A
    PYTHONPATH that holds one already (the images', the sandboxes') is left as it is."""
    paths = [path for path in os.environ.get("PYTHONPATH", "").split(os.pathsep) if path]
    shim = os.path.join(os.path.dirname(os.path.abspath(__file__)), "shim")
    if any(os.path.isfile(os.path.join(path, "pyautogui.py")) for path in paths) \
            or not os.path.isfile(os.path.join(shim, "pyautogui.py")):
        return
    try:
        found = subprocess.run(["python", "-c", "import importlib.util, sys; "
                                "sys.exit(importlib.util.find_spec('pyautogui') is None)"],
                               stdin=subprocess.DEVNULL, capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return  # no python to give it to: an osworld run says so at its first episode
    if not found:
        os.environ["PYTHONPATH"] = os.pathsep.join([shim, *paths])


def free_display() -> str:
    """The first display no X server holds (``_x_held``) nor another agent starting now claimed (``/tmp/.X<N>-claim``
    locked, an abstract socket bound, for this agent's life): two agents of one host each took :0."""
    import fcntl
    import socket

    global _claim
    for number in range(DISPLAYS_TRIED):
        if _x_held(number):
            continue
        try:
            fd = os.open(f"/tmp/.X{number}-claim", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError:
            continue  # another user's claim
        # and the same claim in the network's abstract sockets, where X's own is: agents whose
        # /tmp is their own (systemd's PrivateTmp) both took :0 (one Xvfb exited at start)
        abstract = socket.socket(socket.AF_UNIX)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # else an agent starting now has it
            abstract.bind(f"\0parallel-rollout-display-{number}")
            if _x_held(number):  # taken while this one looked
                raise OSError
        except OSError:
            abstract.close()
            os.close(fd)
            continue
        _claim = (fd, abstract)
        return f":{number}"
    raise RuntimeError(f"no free X display among :0-:{DISPLAYS_TRIED - 1}; name one with --display")


def _x_held(number: int) -> bool:
    """Whether an X server holds display ``number``: its socket is bound (in /tmp or abstract) or its
    lock names a live pid. A killed one leaves neither, and X takes its display; a host had none left."""
    path = f"{X11_SOCKETS}/X{number}"
    try:  # bound sockets, by path or abstract name (X's own, one per network namespace)
        with open("/proc/net/unix", encoding="utf-8", errors="replace") as handle:
            if any(line.rstrip().endswith((f" {path}", f" @{path}")) for line in handle):
                return True
    except OSError:
        return os.path.lexists(path) or os.path.lexists(f"/tmp/.X{number}-lock")
    lock_path = f"/tmp/.X{number}-lock"
    try:
        with open(lock_path, encoding="ascii", errors="replace") as lock:
            os.kill(int(lock.read().strip()), 0)
    except (FileNotFoundError, ProcessLookupError):  # no lock, or its pid gone: free, a killed
        # one's files (which the desktop's user may not remove) go
        return not _sibling("agent_commands").take_over((path, lock_path))
    except (OSError, ValueError):
        return True  # cannot tell (another's), or alive and another user's
    return True


#: this agent's claims on its display (see free_display): a locked file and a socket, held open
_claim = None


def _per_display(path: str) -> str:
    """``path`` for this desktop: as it is for :0, else with the display's number added (two
    desktops of one host do not share their session bus, runtime folder or openbox config)."""
    number = DISPLAY.lstrip(":")
    return path if number == "0" else f"{path}-{number}"


def start_desktop(width: int, height: int, wm: str = "openbox", display: str | None = None) -> None:
    """Start the session bus, Xvfb at WxH on ``display`` (the first free one when None) and the
    window manager; return once all are ready (a session bus that cannot start leaves a desktop
    without AT-SPI, see the module doc)."""
    global DISPLAY
    deadline = time.monotonic() + START_TIMEOUT_S
    DISPLAY = display or free_display()
    put_pyautogui_shim()
    for folder in HOME_FOLDERS:  # as on OSWorld's Ubuntu, whose tasks take them for granted
        os.makedirs(os.path.expanduser(folder), exist_ok=True)
        give(os.path.expanduser(folder))
    # GTK apps and the AT-SPI bus: a private runtime folder, where the bus puts its socket
    runtime = _per_display("/tmp/xdg-runtime")
    os.makedirs(runtime, mode=0o700, exist_ok=True)
    give(runtime)
    os.environ.setdefault("XDG_RUNTIME_DIR", runtime)
    if os.path.exists(LIBREOFFICE_GTK3):  # LibreOffice's AT-SPI bridge is its GTK 3 plugin's
        os.environ.setdefault("SAL_USE_VCLPLUGIN", "gtk3")
    _seed_libreoffice_profile()
    bus = _spawn_session_bus()  # comes up while Xvfb does
    try:  # X's socket folder, made as a system's boot makes it (Xvfb as a user cannot)
        os.makedirs(X11_SOCKETS, exist_ok=True)
        os.chmod(X11_SOCKETS, 0o1777)
    except OSError:
        pass  # there already, not ours: Xvfb says in agent.log if it cannot use it
    read_fd, write_fd = os.pipe()
    xvfb = subprocess.Popen(as_user(
        ["Xvfb", DISPLAY, "-screen", "0", f"{width}x{height}x24", "-nolisten", "tcp", "-noreset",
         "-displayfd", str(write_fd)]),
        pass_fds=(write_fd,), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=None, start_new_session=True)  # into agent.log
    os.close(write_fd)
    try:
        _read_line(read_fd, deadline, f"Xvfb on {DISPLAY}")
    finally:
        os.close(read_fd)
    os.environ["DISPLAY"] = DISPLAY
    # -noreset: by default X resets (and refuses connections for a moment) whenever its last
    # client leaves; this probe and the readiness checks below are such clients
    x11 = _sibling("desktop_screen").xlib()[0]
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
    _await_session_bus(bus, deadline)
    state.update(width=width, height=height, xvfb=xvfb)
    argv = [wm]
    if wm == "openbox":
        config = _openbox_config()
        argv += ["--sm-disable"] + (["--config-file", config] if config else [])
    manager = subprocess.Popen(as_user(argv),
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=None, start_new_session=True)  # into agent.log
    state["wm"] = manager
    delay = 0.005
    while not _wm_ready():
        if manager.poll() is not None:
            raise RuntimeError(f"{wm} exited with status {manager.returncode} "
                               f"(Xvfb: {'running' if xvfb.poll() is None else xvfb.returncode})")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{wm} did not come up within {START_TIMEOUT_S:g}s")
        time.sleep(delay)
        delay = min(delay * 2, 0.05)
    if state["bus"] is not None:
        _start_accessibility_bus(deadline)


#: LibreOffice's settings in a home where it ran before, as on OSWorld's image: no Tip of the
#: Day dialog at its start, which would take the keys a task's setup sends (the Impress task
#: graded by check_left_panel presses F10, View, eleven times down to Slide Pane)
LIBREOFFICE_SETTINGS = "~/.config/libreoffice/4/user/registrymodifications.xcu"
LIBREOFFICE_SETTINGS_XML = (
    '<?xml version="1.0" encoding="UTF-8"?>\n<oor:items xmlns:oor="http://openoffice.org/2001/registry"'
    ' xmlns:xs="http://www.w3.org/2001/XMLSchema" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">\n'
    '<item oor:path="/org.openoffice.Office.Common/Misc"><prop oor:name="ShowTipOfTheDay" oor:op="fuse">'
    '<value>false</value></prop></item>\n</oor:items>\n')


def _seed_libreoffice_profile() -> None:
    """Write LIBREOFFICE_SETTINGS where LibreOffice is installed and the home has none."""
    path = os.path.expanduser(LIBREOFFICE_SETTINGS)
    if not os.path.isdir(os.path.dirname(LIBREOFFICE_GTK3)) or os.path.exists(path):
        return
    home = os.path.expanduser("~")
    folder = home
    for part in os.path.relpath(os.path.dirname(path), home).split(os.sep):
        folder = os.path.join(folder, part)
        if not os.path.isdir(folder):
            os.mkdir(folder, 0o700)
            give(folder)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(LIBREOFFICE_SETTINGS_XML)
    give(path)


#: the system's openbox configuration, and where ours (with OSWorld's keys added) is written
OPENBOX_RC = "/etc/xdg/openbox/rc.xml"
OPENBOX_OURS = "/tmp/openbox-rc.xml"
#: keys Ubuntu's GNOME desktop has that OSWorld's tasks press: ctrl+alt+t opens a terminal
#: titled "Terminal" (tasks then activate the window of that name)
OPENBOX_KEYS = '<keybind key="C-A-t"><action name="Execute"><command>xterm -title Terminal</command></action></keybind>'


def _openbox_config() -> str | None:
    """The system's rc.xml with OSWorld's keys added, written to /tmp; None without one."""
    try:
        with open(OPENBOX_RC, encoding="utf-8") as handle:
            text = handle.read()
    except OSError:
        return None
    if "<keyboard>" not in text:
        return None
    ours = _per_display(OPENBOX_OURS)
    with open(ours, "w", encoding="utf-8") as handle:
        handle.write(text.replace("<keyboard>", "<keyboard>" + OPENBOX_KEYS, 1))
    return ours


def _start_accessibility_bus(deadline: float) -> None:
    """Activate the AT-SPI bus and its registry now (see the module doc); a failure is only
    logged: apps then activate them on demand, as without this."""
    timeout = max(0.5, min(BUS_TIMEOUT_S, deadline - time.monotonic()))
    reply = f"--reply-timeout={int(timeout * 1000)}"
    try:
        found = helper(["dbus-send", "--session", "--print-reply", reply, "--dest=org.a11y.Bus",
                         "/org/a11y/bus", "org.a11y.Bus.GetAddress"], timeout=timeout)
        address = found.stdout.split('"')[1] if found.stdout.count('"') >= 2 else ""
        if not address:
            raise DesktopError(500, f"org.a11y.Bus gave no address: {found.stdout.strip()!r}")
        helper(["dbus-send", f"--bus={address}", "--print-reply", reply,
                 "--dest=org.a11y.atspi.Registry", "/org/a11y/atspi/accessible/root",
                 "org.freedesktop.DBus.Peer.Ping"], timeout=timeout)
        # "an assistive technology runs", as GNOME's toolkit-accessibility says on OSWorld's
        # Ubuntu: Chromium and Thunderbird join the bus only then (GTK apps always do)
        helper(["dbus-send", "--session", "--print-reply", reply, "--dest=org.a11y.Bus",
                 "/org/a11y/bus", "org.freedesktop.DBus.Properties.Set", "string:org.a11y.Status",
                 "string:IsEnabled", "variant:boolean:true"], timeout=timeout)
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


#: the desktop session bus's address
SESSION_BUS = "unix:path=/tmp/dbus-session"


def _spawn_session_bus():
    """Start dbus-daemon for the desktop's session, or say in agent.log why there is none;
    (process, read end of its address pipe) or None."""
    if os.environ.get(ATSPI_ENV, "1") == "0":
        reason = f"{ATSPI_ENV}=0"
    elif not find(BUS_LAUNCHER, LIBEXEC_DIRS):
        reason = "at-spi2-core is not installed"
    elif not find("dbus-daemon"):
        reason = "dbus-daemon is not installed"
    else:
        read_fd, write_fd = os.pipe()
        try:
            bus = subprocess.Popen(as_user(
                # a socket of a fixed name (the session config's is random): a reset VM's
                # /tmp is then the same as at its first boot (pool/providers/verify.py)
                ["dbus-daemon", "--session", "--nofork", "--nopidfile", f"--address={_per_display(SESSION_BUS)}",
                 f"--print-address={write_fd}"]),
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


def _await_session_bus(spawned, deadline: float) -> None:
    """Export the bus's address to every command the agent runs once dbus-daemon has said
    it; a bus that fails or is not up by the desktop's ``deadline`` (Xvfb's too) is killed
    and the desktop goes on without AT-SPI."""
    if spawned is None:
        return
    bus, read_fd = spawned
    try:
        address = _read_line(read_fd, deadline, "dbus-daemon").decode().strip()
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
    state["bus"] = bus


def atspi_timeout() -> float:
    """:data:`ATSPI_TIMEOUT_S`, or the positive number of seconds ATSPI_TIMEOUT_ENV says."""
    try:
        seconds = float(os.environ.get(ATSPI_TIMEOUT_ENV, ATSPI_TIMEOUT_S))
    except ValueError:
        seconds = 0.0
    return seconds if seconds > 0 else ATSPI_TIMEOUT_S


def _no_accessibility(reason: str) -> None:
    import sys

    print(f"desktop: no AT-SPI bus ({reason}); /accessibility answers with the window list",
          file=sys.stderr)
    # without a bus, GTK's atk-bridge would look for one (dbus-launch --autolaunch) in every app
    os.environ.setdefault("NO_AT_BRIDGE", "1")


def find(program: str, extra_dirs: tuple[str, ...] = ()) -> str | None:
    """``program`` on PATH or in ``extra_dirs`` (shutil.which: ~3 ms more of start-up)."""
    dirs = [d for d in os.environ.get("PATH", os.defpath).split(os.pathsep) if d]
    for folder in (*dirs, *extra_dirs):
        path = os.path.join(folder, program)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def _wait_readable(fd: int, deadline: float, what: str) -> None:
    remaining = deadline - time.monotonic()
    if remaining <= 0 or not readable_within(fd, remaining):
        raise RuntimeError(f"{what} was not ready in time")


def _wm_ready() -> bool:
    result = helper(["xprop", "-root", "_NET_SUPPORTING_WM_CHECK"], check=False)
    return "window id" in result.stdout


def require_desktop() -> None:
    if not os.environ.get("DISPLAY"):
        # 503, not 404: the route exists, this VM cannot serve it
        raise DesktopError(503, "this VM has no desktop (start the agent with --desktop WxH)")


def helper(argv: list[str], check: bool = True, timeout: float = HELPER_TIMEOUT_S):
    """Run a desktop helper (wmctrl, xdotool, dbus-send …) as the desktop's user; its
    result, DesktopError 500 when it is missing, late or (``check``) fails."""
    if find(argv[0]) is None:  # setpriv would say it only as its own exit status
        raise DesktopError(500, f"{argv[0]} is not installed in this VM")
    try:
        result = subprocess.run(as_user(argv), stdin=subprocess.DEVNULL, capture_output=True,
                                text=True, timeout=timeout)
    except FileNotFoundError:
        raise DesktopError(500, f"{argv[0]} is not installed in this VM") from None
    except subprocess.TimeoutExpired:
        raise DesktopError(500, f"{argv[0]} did not answer within {timeout:g}s") from None
    if check and result.returncode != 0:
        raise DesktopError(500, f"{' '.join(argv)} failed ({result.returncode}): "
                                f"{result.stderr.strip()[:500]}")
    return result



def _sibling(name: str):
    """A guest module next to this one (see agent_server.py's)."""
    import importlib

    return importlib.import_module(f"{__package__}.{name}" if __package__ else name)
