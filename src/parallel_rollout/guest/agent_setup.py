"""OSWorld's setup routes that need no desktop: ``/setup/download_file``, ``/desktop_path`` and
``/execute_with_verification`` (alias ``/setup/execute_with_verification``), with the request
and answer shapes of OSWorld's guest server (``desktop_env/server/main.py``).

::

    /setup/download_file {url, path}      ──► urllib, 3 attempts ──► the file at path
    /execute_with_verification {command, shell, verification, max_wait_time, check_interval}
        run the command (agent_commands.run, bounded) ──► poll the verification until it holds
        or max_wait_time passes: window_exists (a window title holds the name, wmctrl -l),
        command_success (a shell command exits 0 within 5 s)

Failures keep OSWorld's statuses, so its clients read them as they read its server's: a
download that fails every attempt is a 500, a verification that never holds is a 500 with
``status: "verification_failed"``. Imported on first use (see ``agent_server.py``).
"""

from __future__ import annotations

import os
import time

try:
    from .agent_commands import DEFAULT_EXECUTE_TIMEOUT_S, expand, home, run
    from .agent_http import HTTPError, Request, field
except ImportError:  # a sibling file in the guest, not a package
    from agent_commands import DEFAULT_EXECUTE_TIMEOUT_S, expand, home, run  # type: ignore[no-redef]
    from agent_http import HTTPError, Request, field  # type: ignore[no-redef]

#: attempts and per-attempt timeout of /setup/download_file (OSWorld: 3 and 300 s)
DOWNLOAD_ATTEMPTS = 3
DOWNLOAD_TIMEOUT_S = 300.0
#: longest verification wait a request may ask for: the host's client must outlast it
MAX_VERIFY_WAIT_S = 600.0
#: seconds one ``command_success`` check may run (OSWorld's)
VERIFY_COMMAND_TIMEOUT_S = 5.0


def route_desktop_path(req: Request):
    """POST /desktop_path: ``{"desktop_path": ~/Desktop}``, OSWorld's answer on Linux."""
    return 200, {"desktop_path": os.path.join(home(), "Desktop")}


def route_download_file(req: Request):
    """POST /setup/download_file: fetch ``url`` into ``path`` (parents made), 3 attempts."""
    body = req.json()
    url = field(body, "url", (str,))
    path = field(body, "path", (str,))
    if not url or not path:
        raise HTTPError(400, "Path or URL not supplied!")
    target = expand(path)
    os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
    from urllib.request import urlopen

    error = None
    for _ in range(DOWNLOAD_ATTEMPTS):
        try:
            with urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response, open(target, "wb") as out:
                expected = int(response.headers.get("Content-Length") or 0)
                while True:
                    chunk = response.read(1 << 16)
                    if not chunk:
                        break
                    out.write(chunk)
            size = os.path.getsize(target)
            if expected and size != expected:
                raise OSError(f"download incomplete: expected {expected} bytes, got {size}")
            return 200, f"File downloaded successfully: {size} bytes"
        except (OSError, ValueError) as exc:  # URLError and HTTPError are OSErrors
            error = exc
            try:
                os.unlink(target)
            except OSError:
                pass
    raise HTTPError(500, f"Failed to download {url}. No retries left. Error: {error}")


def route_execute_with_verification(req: Request):
    """POST /execute_with_verification: run ``command``, then wait for ``verification``."""
    body = req.json()
    shell = field(body, "shell", (bool,), False)
    command = field(body, "command", (list, str), required=True)
    verification = field(body, "verification", (dict,), {})
    max_wait = field(body, "max_wait_time", (int, float), 10)
    interval = field(body, "check_interval", (int, float), 1)
    if not 0 <= max_wait <= MAX_VERIFY_WAIT_S or not interval > 0:
        raise HTTPError(400, f"max_wait_time must be 0-{MAX_VERIFY_WAIT_S:g} s and "
                             "check_interval positive")
    window = verification.get("window_exists")
    check = verification.get("command_success")
    if window is not None and not os.environ.get("DISPLAY"):
        raise HTTPError(503, "this VM has no desktop: window_exists cannot be verified "
                             "(start the agent with --desktop WxH)")
    if isinstance(command, str) and not shell:
        import shlex

        command = shlex.split(command)
    if not command:
        raise HTTPError(400, "field 'command' is empty")
    if isinstance(command, list):
        command = [os.path.expanduser(p) if p.startswith("~") else p for p in command]
    result = run(command, shell=shell, timeout=DEFAULT_EXECUTE_TIMEOUT_S)
    if result.get("not_found"):
        raise HTTPError(500, result["message"])
    started = time.monotonic()
    answer = {"output": result["output"], "error": result["error"],
              "returncode": result["returncode"]}
    while True:
        if _holds(window, check):
            return 200, {"status": "success", **answer, "verification": "passed",
                         "wait_time": time.monotonic() - started}
        if time.monotonic() - started + interval > max_wait:
            break
        time.sleep(interval)
    return 500, {"status": "verification_failed", **answer, "verification": "failed",
                 "wait_time": max_wait}


def _holds(window, check) -> bool:
    """Both verification criteria that are given hold (none given: it holds at once)."""
    if window is not None:
        listed = run(["wmctrl", "-l"], shell=False, timeout=VERIFY_COMMAND_TIMEOUT_S)
        if listed["returncode"] != 0 or str(window).lower() not in listed["output"].lower():
            return False
    if check is not None:
        tried = run(str(check), shell=True, timeout=VERIFY_COMMAND_TIMEOUT_S)
        if tried["returncode"] != 0 or tried.get("timeout"):
            return False
    return True


#: path -> (method, function) for the server's dispatcher
ROUTES = {
    "/desktop_path": ("POST", route_desktop_path),
    "/setup/download_file": ("POST", route_download_file),
    "/execute_with_verification": ("POST", route_execute_with_verification),
    "/setup/execute_with_verification": ("POST", route_execute_with_verification),
}
