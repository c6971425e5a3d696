"""OSWorld's desktop routes of the guest agent: screenshot, pointer and sizes, the
accessibility tree, launching and opening, window focus and close, screen recording, the
terminal's text and the wallpaper.

Each takes the server's Request and returns ``(status, payload)``; a desktop that is missing
or a helper that fails raises :class:`~desktop.DesktopError`, which the HTTP layer answers.

**Bounded waits.** Every route finishes in bounded time: ``/setup/open_file`` waits for the
window at most ``timeout`` seconds (default :data:`OPEN_TIMEOUT_S`, never OSWorld's 1800 s)
and answers 500 ``{"status": "error", "message": ...}`` when it does not appear (OSWorld's
shape); helper commands have short timeouts.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time

try:
    from . import agent_reap
    from .agent_commands import as_user, wrapped
    from .desktop import DesktopError, helper, require_desktop, state
    from .desktop_screen import screenshot_png
    from .desktop_windows import accessibility_xml, list_windows, wmctrl_window
except ImportError:  # sibling files in the guest, not a package
    import agent_reap  # type: ignore[no-redef]
    from agent_commands import as_user, wrapped  # type: ignore[no-redef]
    from desktop import DesktopError, helper, require_desktop, state  # type: ignore[no-redef]
    from desktop_screen import screenshot_png  # type: ignore[no-redef]
    from desktop_windows import accessibility_xml, list_windows, wmctrl_window  # type: ignore[no-redef]

#: seconds /setup/open_file waits for the file's window unless the request says otherwise
OPEN_TIMEOUT_S = 30.0
RECORDING_PATH = "/tmp/recording.mp4"
_recorder_lock = threading.Lock()
_recorder: dict = {"proc": None}


def _json(req) -> dict:
    return req.json() if req.body else {}


def route_screenshot(req):
    """GET /screenshot: PNG of the screen with the cursor drawn."""
    return 200, ("image/png", screenshot_png())


def route_cursor_position(req):
    """GET /cursor_position: ``[x, y]``."""
    require_desktop()
    result = helper(["xdotool", "getmouselocation", "--shell"])
    values = dict(line.split("=", 1) for line in result.stdout.split() if "=" in line)
    return 200, [int(values.get("X", 0)), int(values.get("Y", 0))]


def route_screen_size(req):
    """POST /screen_size: ``{width, height}``."""
    require_desktop()
    return 200, {"width": state["width"], "height": state["height"]}


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


#: programs OSWorld's tasks launch that Debian names otherwise: where the first is missing,
#: the second runs (OSWorld's own server does the same for google-chrome on arm). Chromium
#: gets --no-sandbox: its sandbox needs user namespaces, which the VM's sandbox does not give;
#: and Chrome's profile folder, which OSWorld's setup steps edit (Preferences, History …);
#: and the page's content in the accessibility tree, not only the browser's own widgets.
CHROME_AS_CHROMIUM = ("chromium", "--no-sandbox", "--no-first-run", "--no-default-browser-check",
                      "--password-store=basic", "--user-data-dir=~/.config/google-chrome",
                      "--force-renderer-accessibility")
APP_ALIASES = {"google-chrome": CHROME_AS_CHROMIUM, "google-chrome-stable": CHROME_AS_CHROMIUM}


def _home_option(part: str) -> str:
    """``--option=~/path`` with the home folder filled in (other parts as they are)."""
    name, _, value = part.partition("=")
    return f"{name}={os.path.expanduser(value)}" if value.startswith("~") else part


def resolve_app(command: list[str]) -> list[str]:
    """``command`` with an aliased program replaced (see APP_ALIASES), or a /usr/bin program
    by its shim (``shim/bin``: vlc, thunderbird, sudo); DesktopError 404 "app not installed"
    when its program is on neither PATH nor the alias table."""
    import shutil

    program = command[0]
    shim = shutil.which(os.path.basename(program))
    if program.startswith("/usr/bin/") and shim and "/shim/bin/" in shim:
        return [shim, *command[1:]]  # /usr/bin/thunderbird as OSWorld launches it: the shim
    if "/" in program or shutil.which(program):
        return command
    alias = APP_ALIASES.get(program)
    if alias and shutil.which(alias[0]):
        return [*(_home_option(part) for part in alias), *command[1:]]
    raise DesktopError(404, f"app not installed: {program} is not in this VM"
                            f"{' (nor ' + alias[0] + ')' if alias else ''}")


#: OSWorld's Chrome tasks' DevTools ports, fixed ports of the machine: Chrome's own
#: (``--remote-debugging-port=1337``) and socat's forward to it (``tcp-listen:9222,fork``)
DEVTOOLS_PORTS = (9222, 1337)
#: what an agent that maps them tells its commands (the Chrome getters' guest program,
#: ``envs/osworld/chrome.py``): ``9222=P,1337=Q``
DEVTOOLS_ENV = "PARALLEL_ROLLOUT_DEVTOOLS_PORTS"
#: the first desktop agent of a network holds this abstract socket (a network namespace's:
#: a sandbox's own, a host's shared by its agents, whatever their /tmp) and keeps OSWorld's ports
DEVTOOLS_CLAIM = "\0parallel-rollout-devtools-claim"
#: OSWorld's port -> this desktop's (empty: OSWorld's own); see claim_devtools_ports
devtools_ports: dict = {}
_devtools_claim = None
#: where a command line names a DevTools port: Chrome's flag, socat's listen and its loopback target
_PORT_ARGS = r"(--remote-debugging-port=|\btcp[46]?-l(?:isten)?:|\btcp[46]?:(?:localhost|127\.0\.0\.1|\[::1\]):)(\d+)\b"


def claim_devtools_ports() -> dict:
    """This desktop's DevTools ports. The network's first desktop agent (the one holding
    DEVTOOLS_CLAIM: every agent of this project's VMs, whose sandbox has its own network)
    keeps OSWorld's; another (two remote agents of one host) gets ports the OS gives, which
    /setup/launch writes into a task's Chrome and socat command lines and DEVTOOLS_ENV tells
    the getters. Both started Chrome on 1337 and socat on 9222: the second's could not
    listen, and its task's getters read the first agent's browser."""
    import socket

    global _devtools_claim
    claim = socket.socket(socket.AF_UNIX)
    try:
        claim.bind(DEVTOOLS_CLAIM)
        _devtools_claim = claim  # held for the agent's life
        return devtools_ports
    except OSError:
        claim.close()  # another agent of this network holds it
    probes = [socket.socket() for _ in DEVTOOLS_PORTS]
    try:
        for port, probe in zip(DEVTOOLS_PORTS, probes):
            probe.bind(("127.0.0.1", 0))
            devtools_ports[port] = probe.getsockname()[1]
    finally:
        for probe in probes:
            probe.close()
    os.environ[DEVTOOLS_ENV] = ",".join(f"{ours}={theirs}" for ours, theirs in devtools_ports.items())
    return devtools_ports


def devtools_mapped(command):
    """``command`` (argv or shell text) with OSWorld's DevTools ports made this desktop's."""
    if not devtools_ports:
        return command
    import re

    def mapped(text: str) -> str:
        return re.sub(_PORT_ARGS, lambda m: m.group(1) + str(devtools_ports.get(int(m.group(2)), m.group(2))),
                      text, flags=re.IGNORECASE)
    return mapped(command) if isinstance(command, str) else [mapped(part) for part in command]


#: the names OSWorld's tasks stop Chrome by (``pkill chrome`` before a getter reads its profile:
#: Chrome writes Preferences, Bookmarks and History at exit, a setting changed a moment ago only
#: then); Chromium, which runs for it (APP_ALIASES), is named otherwise and went on running
CHROME_NAMES = ("chrome", "google-chrome", "google-chrome-stable")
#: seconds /setup/launch of such a pkill waits for Chromium to have exited
BROWSER_EXIT_TIMEOUT_S = 15.0


def stops_chrome(command) -> bool:
    """Whether ``command`` is a ``pkill``/``killall`` of Chrome on a VM where Chromium runs
    for Chrome (and is named otherwise: the task's pattern misses it)."""
    import shutil

    return (isinstance(command, list) and os.path.basename(command[0]) in ("pkill", "killall")
            and any(part in CHROME_NAMES for part in command[1:])
            and not shutil.which("google-chrome") and bool(shutil.which(CHROME_AS_CHROMIUM[0])))


def stop_own_chromium(started: subprocess.Popen) -> None:
    """After the task's pkill (``started``): end this agent's Chromium as the pkill ends
    Chrome (SIGTERM to each browser process: it writes its profile and exits) and wait
    (BROWSER_EXIT_TIMEOUT_S at most) for every process of it to be gone, so the next step's
    launch starts it afresh on the files it wrote. Only this agent's: on a host of two desktop
    agents of one user, a pkill of Chromium by name ended the other agent's browser too."""
    name = CHROME_AS_CHROMIUM[0]
    deadline = time.monotonic() + BROWSER_EXIT_TIMEOUT_S
    with contextlib.suppress(subprocess.TimeoutExpired):
        started.wait(BROWSER_EXIT_TIMEOUT_S)
    own = agent_reap.own_processes(name)
    for pid, parent in own.items():
        if parent not in own:  # a browser, not one of its zygotes or renderers
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGTERM)
    while own and time.monotonic() < deadline:
        time.sleep(0.2)
        own = agent_reap.own_processes(name)


def route_launch(req):
    """POST /setup/launch: start a command without waiting for it; 404 "app not installed"
    when its program is missing. OSWorld's DevTools ports in it become this desktop's
    (claim_devtools_ports); a ``pkill chrome`` stops this agent's Chromium too and answers
    once it has exited (stop_own_chromium)."""
    require_desktop()
    body = _json(req)
    command, shell = body.get("command"), bool(body.get("shell", False))
    if isinstance(command, str) and not shell:
        import shlex

        command = shlex.split(command)
    if not command or not (isinstance(command, str) or all(isinstance(p, str) for p in command)):
        return 400, {"status": "error", "message": "field 'command' must be a string or a list of strings"}
    command = devtools_mapped(command)
    stops = stops_chrome(command)
    if isinstance(command, list):
        command = resolve_app([os.path.expanduser(p) if p.startswith("~") else p for p in command])
    argv, shell = wrapped(command, shell)  # as the commands' user, like /execute
    if argv is None:
        raise DesktopError(404, f"app not installed: {command[0]} is not in this VM")
    try:
        started = subprocess.Popen(argv, shell=shell, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL, start_new_session=True,
                                   cwd=os.environ.get("HOME"))
    except OSError as exc:
        return 500, {"status": "error", "message": f"cannot launch {command!r}: {exc}"}
    if stops:
        stop_own_chromium(started)
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
    require_desktop()
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
    started, _ = wrapped(argv, False)
    if started is None:
        return 500, {"status": "error", "message": f"cannot open {path}: {argv[0]} is not "
                     "in this VM"}
    try:
        subprocess.Popen(started, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
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
    require_desktop()
    wmctrl_window("a", name, bool(body.get("strict")), bool(body.get("by_class")))
    return 200, "Window activated successfully"


def route_close_window(req):
    """POST /setup/close_window: ``wmctrl -c`` (``-F`` strict, ``-x`` by class)."""
    body = _json(req)
    name = body.get("window_name")
    if not isinstance(name, str) or not name:
        return 400, {"status": "error", "message": "missing required field 'window_name'"}
    require_desktop()
    wmctrl_window("c", name, bool(body.get("strict")), bool(body.get("by_class")))
    return 200, "Window closed successfully"


def route_start_recording(req):
    """POST /start_recording: ffmpeg x11grab into /tmp/recording.mp4; one recorder per VM."""
    require_desktop()
    with _recorder_lock:
        proc = _recorder["proc"]
        if proc is not None and proc.poll() is None:
            return 400, {"status": "error", "message": "Recording is already in progress."}
        try:
            os.unlink(RECORDING_PATH)
        except FileNotFoundError:
            pass
        size = f"{state['width']}x{state['height']}"
        argv = ["ffmpeg", "-y", "-loglevel", "error", "-f", "x11grab", "-draw_mouse", "1",
                "-video_size", size, "-framerate", "10", "-i", os.environ["DISPLAY"],
                "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", RECORDING_PATH]
        try:
            proc = subprocess.Popen(as_user(argv), stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                    start_new_session=True)
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


#: where /setup/change_wallpaper records the wallpaper's path (the VM's /tmp: a reset forgets it)
WALLPAPER_RECORD = "/tmp/.parallel-rollout-wallpaper"
#: programs that paint an image on the root window, tried in turn (ImageMagick comes with
#: the desktop image), with the exit codes that mean done: ImageMagick 6's ``display -window
#: root`` exits 1 after painting; each gets HELPER_TIMEOUT_S
WALLPAPER_SETTERS = (
    ("xwallpaper", lambda path, w, h: ["xwallpaper", "--zoom", path], (0,)),
    ("feh", lambda path, w, h: ["feh", "--no-fehbg", "--bg-scale", path], (0,)),
    ("display", lambda path, w, h: ["display", "-window", "root", "-resize", f"{w}x{h}!", path],
     (0, 1)),
)


def route_terminal(req):
    """GET /terminal: OSWorld's ``{"output": text or null, "status": "success"}``, the text
    of the focused terminal of the active window, from the accessibility tree (null when no
    such terminal exposes one: xterm does not)."""
    require_desktop()
    import xml.etree.ElementTree as ET

    tree = ET.fromstring(accessibility_xml())
    state = "{https://accessibility.ubuntu.example.org/ns/state}"
    found = [node for frame in tree.iter("frame") if frame.get(f"{state}active") == "true"
             for node in frame.iter("terminal") if node.get(f"{state}focused") == "true"]
    output = (found[0].text or "").rstrip() if len(found) == 1 else None
    return 200, {"output": output, "status": "success"}


def route_change_wallpaper(req):
    """POST /setup/change_wallpaper ``{path}``: paint the image on the root window (and tell
    GNOME's gsettings where there is one), remembered for /wallpaper."""
    require_desktop()
    path = _json(req).get("path")
    if not isinstance(path, str) or not path:
        return 400, {"status": "error", "message": "Path not supplied!"}
    full = os.path.expandvars(os.path.expanduser(path))
    if not os.path.isfile(full):
        return 404, {"status": "error", "message": f"File not found: {full}"}
    import shutil

    painted = None
    for program, argv, done in WALLPAPER_SETTERS:
        if shutil.which(program):
            result = helper(argv(full, state["width"], state["height"]), check=False)
            if result.returncode not in done:
                return 500, {"status": "error", "message": f"{program} failed "
                             f"({result.returncode}): {result.stderr.strip()[:500]}"}
            painted = program
            break
    if shutil.which("gsettings"):
        helper(["gsettings", "set", "org.gnome.desktop.background", "picture-uri",
                f"file://{full}"], check=False)
        painted = painted or "gsettings"
    if painted is None:
        return 500, {"status": "error", "message": "no wallpaper setter in this VM "
                     f"(one of {', '.join(p for p, _, _ in WALLPAPER_SETTERS)})"}
    with open(WALLPAPER_RECORD, "w", encoding="utf-8") as handle:
        handle.write(full)
    return 200, "Wallpaper changed successfully"


def route_wallpaper(req):
    """POST /wallpaper: the wallpaper image's bytes (OSWorld's answer); 404 when none is set."""
    require_desktop()
    try:
        with open(WALLPAPER_RECORD, encoding="utf-8") as handle:
            path = handle.read().strip()
    except FileNotFoundError:
        return 404, {"status": "error", "message": "no wallpaper has been set in this VM"}
    try:
        with open(path, "rb") as handle:
            return 200, ("application/octet-stream", handle.read())
    except OSError as exc:
        return 404, {"status": "error", "message": f"wallpaper {path}: {exc.strerror}"}


#: path -> (method, function) for the server's dispatcher
ROUTES = {
    "/terminal": ("GET", route_terminal),
    "/wallpaper": ("POST", route_wallpaper),
    "/setup/change_wallpaper": ("POST", route_change_wallpaper),
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
