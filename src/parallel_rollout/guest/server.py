"""The guest agent: a small HTTP server that runs inside every VM and does what the host asks.

::

    host (GuestClient) ──HTTP/1.1 over a unix socket or TCP──► this server (one thread/request)
                                                                  │ subprocess, start_new_session
                                                                  ▼
                                                   the command's own process group (killed
                                                   as a whole when it outlives its timeout)

It runs with nothing but the standard library, since it is copied as a single file into
sandboxes and VM images that only have ``python3``::

    python3 server.py --unix /path/to/sock        # what the process provider does
    python3 server.py --host 0.0.0.0 --port 5000  # what a VM image does (OSWorld's port)

**Routes** follow OSWorld's guest server (``desktop_env/server/main.py``) where they overlap,
with the same JSON shapes, so one client drives both: ``GET /health``, ``GET /platform``,
``POST /execute`` (alias ``/setup/execute``), ``POST /run_python``, ``POST /run_bash_script``,
``POST /file``, ``POST /setup/upload``, ``POST /list_directory``. The desktop routes
(``/screenshot``, ``/setup/launch``, ``/setup/open_file``, ``/accessibility``, recording …) live
in ``desktop.py``, imported on their first call (or at start-up with ``--desktop WxH``, which
starts Xvfb and a window manager before the agent says it is ready).

**Errors.** A request the server cannot make sense of (bad JSON, a missing or mistyped field,
a body over ``--max-body-mb``, a bad path) gets a 4xx with ``{"status": "error", "message":
...}`` saying what is wrong; an unknown route gets 404, a known route with the wrong method
405. A command that *runs but fails* is not an HTTP error: the answer is 200 with
``status: "error"``, because the request itself was fine. The three cases:

* command not found / not executable: 200 ``{status: "error", returncode: 127 | 126,
  output: "", error: <OS message>, message: "command not found: ..."}`` (the shell's codes);
* timeout: the command's whole process group gets SIGKILL, then 200 ``{status: "error",
  timeout: true, returncode: <-9, or the exit code if the leader had already exited>, output,
  error: <what was captured before the kill>, message: "timed out after Ns"}``;
* anything unexpected in the server itself: 500 with the exception text (a bug, never a user
  error). The server keeps serving in every case.

**Why no http.server.** Start-up time is the cost of a ``process`` VM reset: the sandbox is
torn down and this server starts afresh each time. ``http.server`` drags in ``email``,
``http.client`` and ``ssl`` — about 35 ms of a 60 ms start — for a protocol subset that fits
in a page: request line, headers, a ``Content-Length`` body, one response per connection
(``Connection: close``). So the HTTP layer here is our own, on ``socketserver`` with
``ThreadingMixIn``, and the rarer modules (``subprocess``, ``urllib.parse``, ``base64``) are
imported on first use.

**Limits.** ``--limit-as BYTES`` runs every command under util-linux ``prlimit --as``
(RLIMIT_AS per process, inherited by its children); the agent itself stays unlimited so that
a greedy command cannot take the agent down with it.

**Readiness.** With ``--ready-fd N`` the server writes ``ready\\n`` to file descriptor N once
it listens, then closes it: the host waits on a pipe instead of polling the socket.
"""

from __future__ import annotations

import json
import os
import socket
import socketserver
import sys

DEFAULT_EXECUTE_TIMEOUT_S = 120.0
DEFAULT_PYTHON_TIMEOUT_S = 30.0
DEFAULT_BASH_TIMEOUT_S = 100.0
#: a slow or silent client must not pin a thread forever
IO_TIMEOUT_S = 60.0
MAX_HEADER_LINE = 16 * 1024
MAX_HEADERS = 100
#: a directory listing bigger than this is cut short (and says so)
MAX_LIST_ENTRIES = 20_000

_REASONS = {
    100: "Continue", 200: "OK", 400: "Bad Request", 404: "Not Found",
    405: "Method Not Allowed", 408: "Request Timeout", 411: "Length Required",
    413: "Payload Too Large", 500: "Internal Server Error", 501: "Not Implemented",
}

_verbose = False
#: RLIMIT_AS in bytes for every command this agent runs (``--limit-as``); None: no limit
_limit_as: int | None = None


def _log(message: str) -> None:
    sys.stderr.write(f"guest-agent[{os.getpid()}]: {message}\n")
    sys.stderr.flush()


class HTTPError(Exception):
    """A request the server refuses; becomes a JSON ``{"status": "error", "message"}``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class Request:
    """One parsed HTTP request: method, path, lower-cased headers and the raw body."""

    __slots__ = ("method", "path", "headers", "body")

    def __init__(self, method: str, path: str, headers: dict[str, str], body: bytes) -> None:
        self.method = method
        self.path = path
        self.headers = headers
        self.body = body

    def json(self) -> dict:
        """The body as a JSON object; HTTPError 400 when it is anything else."""
        if not self.body:
            raise HTTPError(400, "expected a JSON object body, got an empty body")
        try:
            value = json.loads(self.body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise HTTPError(400, f"body is not valid JSON: {exc}") from None
        if not isinstance(value, dict):
            raise HTTPError(400, f"expected a JSON object body, got {type(value).__name__}")
        return value

    def form(self) -> dict[str, str]:
        """Fields of a url-encoded form, or of a JSON object body (both are accepted)."""
        ctype = self.headers.get("content-type", "")
        if ctype.startswith("application/json"):
            return {k: v for k, v in self.json().items() if isinstance(v, str)}
        from urllib.parse import parse_qs

        try:
            text = self.body.decode("utf-8")
        except UnicodeDecodeError:
            raise HTTPError(400, "form body is not UTF-8") from None
        return {k: v[0] for k, v in parse_qs(text, keep_blank_values=True).items()}


# ---------------------------------------------------------------------------- validation


def _field(body: dict, name: str, types: tuple, default=None, required: bool = False):
    if name not in body or body[name] is None:
        if required:
            raise HTTPError(400, f"missing required field {name!r}")
        return default
    value = body[name]
    # bool is an int subclass: a timeout of `true` is a client bug, not one second
    if isinstance(value, bool) and bool not in types:
        raise HTTPError(400, f"field {name!r} must be {_type_names(types)}, got bool")
    if not isinstance(value, types):
        raise HTTPError(
            400, f"field {name!r} must be {_type_names(types)}, got {type(value).__name__}"
        )
    return value


def _type_names(types: tuple) -> str:
    names = {str: "a string", list: "a list", bool: "a boolean", dict: "an object",
             int: "a number", float: "a number"}
    return " or ".join(dict.fromkeys(names[t] for t in types))


def _timeout(body: dict, default: float) -> float:
    value = _field(body, "timeout", (int, float), default)
    if not value > 0:
        raise HTTPError(400, f"field 'timeout' must be positive, got {value}")
    return float(value)


def _expand(path: str) -> str:
    return os.path.expandvars(os.path.expanduser(path))


def _home() -> str:
    return os.environ.get("HOME") or os.getcwd()


# ------------------------------------------------------------------------------ commands


def _run(argv, *, shell: bool, timeout: float, cwd: str | None = None,
         env: dict | None = None, merge_stderr: bool = False) -> dict:
    """Run a command in its own session; the whole group is killed when it times out.

    Returns ``{returncode, output, error}`` plus ``timeout: True, message`` on a timeout, or
    ``not_found: True, message`` when the program cannot be started.
    """
    import subprocess

    program = argv if isinstance(argv, str) else (argv[0] if argv else "")
    cwd = _expand(cwd) if cwd else _home()
    if not os.path.isdir(cwd):
        raise HTTPError(400, f"working directory does not exist: {cwd}")
    full_env = None
    if env:
        full_env = dict(os.environ)
        full_env.update(env)
    if _limit_as is not None:
        argv, shell = _with_limits(argv, shell, full_env)
        if argv is None:
            return {"returncode": 127, "output": "", "error": "No such file or directory",
                    "not_found": True, "message": f"command not found: {program}"}
    try:
        proc = subprocess.Popen(
            argv, shell=shell, cwd=cwd, env=full_env,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
            start_new_session=True,  # its own process group, so a timeout kills its children
        )
    except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
        code = 126 if isinstance(exc, PermissionError) else 127
        what = "permission denied" if code == 126 else "command not found"
        return {"returncode": code, "output": "", "error": str(exc),
                "not_found": True, "message": f"{what}: {program}"}
    try:
        out, err = proc.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc.pid)
        try:
            # a child that escaped the group (setsid) may still hold the pipes open
            out, err = proc.communicate(timeout=2.0)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = b"", b""
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
            proc.wait()
    result = {
        "returncode": proc.returncode,
        "output": (out or b"").decode("utf-8", "replace"),
        "error": (err or b"").decode("utf-8", "replace"),
    }
    if timed_out:
        result["timeout"] = True
        result["message"] = f"timed out after {timeout:g}s; its process group was killed"
    return result


def _with_limits(argv, shell: bool, env: dict | None):
    """The command wrapped in util-linux ``prlimit``; (None, False) when it does not exist.

    A wrapper binary, not ``preexec_fn``: Python code between fork and exec can deadlock in a
    threaded server. prlimit execs the command itself, so a missing program would show up as
    its exit code 127 with status "success"; look it up first to answer like the plain path.
    """
    if shell:
        argv = ["/bin/sh", "-c", argv]
    elif "/" not in argv[0]:
        import shutil

        path = (env or os.environ).get("PATH", os.defpath)
        if shutil.which(argv[0], path=path) is None:
            return None, False
    return ["prlimit", f"--as={_limit_as}", "--"] + list(argv), False


def _kill_group(pgid: int) -> None:
    import signal

    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _command_argv(body: dict):
    command = _field(body, "command", (list, str), required=True)
    shell = _field(body, "shell", (bool,), False)
    if isinstance(command, list):
        if not command or not all(isinstance(part, str) for part in command):
            raise HTTPError(400, "field 'command' must be a non-empty list of strings")
        if shell:
            import shlex

            command = shlex.join(command)
    elif not shell:
        import shlex

        try:
            command = shlex.split(command)
        except ValueError as exc:
            raise HTTPError(400, f"cannot split command: {exc}") from None
        if not command:
            raise HTTPError(400, "field 'command' is empty")
    if isinstance(command, list):
        # like OSWorld: "~/x" arguments mean the guest user's home
        command = [os.path.expanduser(p) if p.startswith("~") else p for p in command]
    return command, shell


def route_execute(req: Request):
    """POST /execute: run a command, OSWorld's ``{status, output, error, returncode}``."""
    body = req.json()
    argv, shell = _command_argv(body)
    timeout = _timeout(body, DEFAULT_EXECUTE_TIMEOUT_S)
    cwd = _field(body, "cwd", (str,))
    env = _field(body, "env", (dict,))
    if env and not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise HTTPError(400, "field 'env' must map strings to strings")
    result = _run(argv, shell=shell, timeout=timeout, cwd=cwd, env=env)
    failed = result.pop("not_found", False) or result.get("timeout", False)
    result["status"] = "error" if failed else "success"
    return 200, result


def route_run_python(req: Request):
    """POST /run_python: run code with python3 from a temp file, OSWorld's shape."""
    body = req.json()
    code = _field(body, "code", (str,), required=True)
    timeout = _timeout(body, DEFAULT_PYTHON_TIMEOUT_S)
    path = _temp_script(code, ".py")
    try:
        result = _run([sys.executable, path], shell=False, timeout=timeout)
    finally:
        _remove(path)
    ok = result["returncode"] == 0
    answer = {
        "status": "success" if ok else "error",
        "message": result.get("message")
        or ("Command executed successfully" if ok else "Command failed"),
        "need_more": False,
        "output": result["output"],
        "error": result["error"],
        "return_code": result["returncode"],
    }
    if result.get("timeout"):
        answer["timeout"] = True
    return 200, answer


def route_run_bash_script(req: Request):
    """POST /run_bash_script: bash with stderr merged into stdout, OSWorld's shape."""
    body = req.json()
    script = _field(body, "script", (str,), required=True)
    timeout = _timeout(body, DEFAULT_BASH_TIMEOUT_S)
    working_dir = _field(body, "working_dir", (str,))
    path = _temp_script(script, ".sh")
    try:
        result = _run(["/bin/bash", path], shell=False, timeout=timeout,
                      cwd=working_dir, merge_stderr=True)
    finally:
        _remove(path)
    answer = {
        "status": "success" if result["returncode"] == 0 else "error",
        "output": result["output"],
        "error": "",
        "returncode": result["returncode"],
    }
    if "message" in result:
        answer["message"] = result["message"]
    if result.get("timeout"):
        answer["timeout"] = True
    return 200, answer


def _temp_script(text: str, suffix: str) -> str:
    import tempfile

    fd, path = tempfile.mkstemp(prefix="guest_exec_", suffix=suffix)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    return path


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


# --------------------------------------------------------------------------------- files


def route_file(req: Request):
    """POST /file: the bytes of ``file_path`` (form or JSON); 404 when it does not exist."""
    file_path = req.form().get("file_path")
    if not file_path:
        raise HTTPError(400, "missing required field 'file_path'")
    path = _expand(file_path)
    if not os.path.isfile(path):
        # OSWorld's exact shape, which its clients look for
        return 404, {"error": "File not found"}
    try:
        with open(path, "rb") as handle:
            return 200, handle.read()
    except OSError as exc:
        raise HTTPError(400, f"cannot read {path}: {exc.strerror}") from None


def route_upload(req: Request):
    """POST /setup/upload: write ``file_data`` to ``file_path``, creating parent folders."""
    ctype = req.headers.get("content-type", "")
    if ctype.startswith("multipart/form-data"):
        fields = _parse_multipart(ctype, req.body)
        file_path = fields.get("file_path", b"").decode("utf-8", "replace")
        if "file_data" not in fields:
            raise HTTPError(400, "missing multipart file field 'file_data'")
        data = fields["file_data"]
    elif ctype.startswith("application/json"):
        body = req.json()
        file_path = _field(body, "file_path", (str,), required=True)
        import base64
        import binascii

        try:
            data = base64.b64decode(_field(body, "content_b64", (str,), required=True),
                                    validate=True)
        except binascii.Error as exc:
            raise HTTPError(400, f"field 'content_b64' is not base64: {exc}") from None
    else:
        raise HTTPError(400, "expected a multipart/form-data or JSON body")
    if not file_path:
        raise HTTPError(400, "missing required field 'file_path'")
    path = _expand(file_path)
    try:
        parent = os.path.dirname(path)
        if parent:
            os.makedirs(parent, exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(data)
    except OSError as exc:
        raise HTTPError(400, f"cannot write {path}: {exc.strerror}") from None
    return 200, f"File Uploaded: {len(data)} bytes"


def _parse_multipart(ctype: str, body: bytes) -> dict[str, bytes]:
    """Fields of a multipart/form-data body by name (files and plain fields alike)."""
    boundary = None
    for param in ctype.split(";")[1:]:
        key, _, value = param.strip().partition("=")
        if key.lower() == "boundary":
            boundary = value.strip('"')
    if not boundary:
        raise HTTPError(400, "multipart body without a boundary")
    delimiter = b"--" + boundary.encode("latin-1")
    fields: dict[str, bytes] = {}
    # the preamble before the first delimiter and the epilogue after "--" are ignored
    for part in body.split(delimiter)[1:]:
        if part.startswith(b"--"):
            break
        head, sep, content = part.partition(b"\r\n\r\n")
        if not sep:
            raise HTTPError(400, "malformed multipart part (no blank line after headers)")
        if content.endswith(b"\r\n"):
            content = content[:-2]
        name = None
        for line in head.decode("utf-8", "replace").split("\r\n"):
            key, _, value = line.partition(":")
            if key.strip().lower() == "content-disposition":
                for param in value.split(";")[1:]:
                    pkey, _, pvalue = param.strip().partition("=")
                    if pkey.lower() == "name":
                        name = pvalue.strip('"')
        if name is None:
            raise HTTPError(400, "multipart part without a name")
        fields[name] = content
    return fields


def route_list_directory(req: Request):
    """POST /list_directory: the tree under ``path``, OSWorld's ``{directory_tree}``."""
    path = _expand(_field(req.json(), "path", (str,), required=True))
    if not os.path.isdir(path):
        raise HTTPError(400, f"not a directory: {path}")
    budget = [MAX_LIST_ENTRIES]
    tree = _tree(path, os.path.basename(path.rstrip("/")) or path, budget)
    answer = {"directory_tree": tree}
    if budget[0] <= 0:
        answer["truncated"] = True
    return 200, answer


def _tree(path: str, name: str, budget: list) -> dict:
    node = {"type": "directory", "name": name, "children": []}
    try:
        entries = sorted(os.scandir(path), key=lambda e: e.name)
    except OSError:
        return node  # unreadable: shown empty, as OSWorld does
    for entry in entries:
        if budget[0] <= 0:
            break
        budget[0] -= 1
        if entry.is_dir(follow_symlinks=False):
            node["children"].append(_tree(entry.path, entry.name, budget))
        else:
            node["children"].append({"type": "file", "name": entry.name})
    return node


# ------------------------------------------------------------------------------- simple


def route_health(req: Request):
    """GET /health: liveness, plus the pid and the VM id the sandbox gave us."""
    return 200, {"status": "ok", "pid": os.getpid(),
                 "vm": os.environ.get("PARALLEL_ROLLOUT_VM")}


def route_platform(req: Request):
    """GET /platform: ``platform.system()`` as plain text, like OSWorld."""
    return 200, os.uname().sysname  # what platform.system() answers on POSIX, minus its import


#: routes served by desktop.py, imported on first use (see _desktop_route)
DESKTOP_ROUTES = frozenset({
    "/screenshot", "/cursor_position", "/screen_size", "/window_size", "/accessibility",
    "/setup/launch", "/setup/open_file", "/setup/activate_window", "/setup/close_window",
    "/start_recording", "/end_recording",
})


def _desktop_module():
    """desktop.py, next to this file: a package import in tests, a sibling file in a VM."""
    if __package__:
        from . import desktop
    else:
        here = os.path.dirname(os.path.abspath(__file__))
        if here not in sys.path:
            sys.path.insert(0, here)  # -I leaves the script's folder off sys.path
        import desktop  # type: ignore[no-redef]
    return desktop


def _desktop_route(path: str):
    return _desktop_module().ROUTES[path]


ROUTES = {
    "/health": ("GET", route_health),
    "/platform": ("GET", route_platform),
    "/execute": ("POST", route_execute),
    "/setup/execute": ("POST", route_execute),
    "/run_python": ("POST", route_run_python),
    "/run_bash_script": ("POST", route_run_bash_script),
    "/file": ("POST", route_file),
    "/setup/upload": ("POST", route_upload),
    "/list_directory": ("POST", route_list_directory),
}


# --------------------------------------------------------------------------------- HTTP


class Handler(socketserver.StreamRequestHandler):
    """Reads one request, dispatches it, writes one response, closes the connection."""

    def handle(self) -> None:
        """Serve one connection; every failure becomes an HTTP answer or a closed socket."""
        self.connection.settimeout(IO_TIMEOUT_S)
        try:
            req = self._read_request()
        except HTTPError as exc:
            self._send(exc.status, {"status": "error", "message": exc.message})
            self._discard_rest()
            return
        except (OSError, ValueError):
            return  # the client went away or stalled: nobody to answer
        if req is None:
            return
        status, payload = self._dispatch(req)
        if _verbose:
            _log(f"{req.method} {req.path} -> {status}")
        self._send(status, payload)

    def _dispatch(self, req: Request):
        route = ROUTES.get(req.path)
        if route is None and req.path in DESKTOP_ROUTES:
            route = _desktop_route(req.path)
        if route is None:
            return 404, {"status": "error", "message": f"no such route: {req.path}"}
        method, func = route
        if req.method != method:
            return 405, {"status": "error",
                         "message": f"{req.path} takes {method}, not {req.method}"}
        try:
            return func(req)
        except HTTPError as exc:
            return exc.status, {"status": "error", "message": exc.message}
        except Exception as exc:  # a bug here must not take the agent down
            if type(exc).__name__ == "DesktopError":  # desktop.py's refusals and failures
                return exc.status, {"status": "error", "message": exc.message}
            import traceback

            _log(f"error in {req.path}:\n{traceback.format_exc()}")
            return 500, {"status": "error", "message": f"{type(exc).__name__}: {exc}"}

    def _read_request(self) -> Request | None:
        line = self.rfile.readline(MAX_HEADER_LINE + 1)
        if not line:
            return None
        if len(line) > MAX_HEADER_LINE:
            raise HTTPError(400, "request line too long")
        parts = line.decode("latin-1").split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            raise HTTPError(400, f"malformed request line: {line[:80]!r}")
        method, target, _ = parts
        headers: dict[str, str] = {}
        while True:
            line = self.rfile.readline(MAX_HEADER_LINE + 1)
            if len(line) > MAX_HEADER_LINE:
                raise HTTPError(400, "header line too long")
            if line in (b"\r\n", b"\n", b""):
                break
            if len(headers) >= MAX_HEADERS:
                raise HTTPError(400, "too many headers")
            key, sep, value = line.decode("latin-1").partition(":")
            if not sep:
                raise HTTPError(400, f"malformed header line: {line[:80]!r}")
            headers[key.strip().lower()] = value.strip()
        if "chunked" in headers.get("transfer-encoding", "").lower():
            raise HTTPError(411, "chunked bodies are not supported; send Content-Length")
        try:
            length = int(headers.get("content-length", "0"))
        except ValueError:
            raise HTTPError(400, "Content-Length is not a number") from None
        if length < 0:
            raise HTTPError(400, "negative Content-Length")
        if length > self.server.max_body_bytes:
            raise HTTPError(
                413, f"body of {length} bytes exceeds the limit of "
                     f"{self.server.max_body_bytes} bytes")
        if headers.get("expect", "").lower() == "100-continue":
            self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        body = self.rfile.read(length) if length else b""
        if len(body) < length:
            raise HTTPError(400, f"body ended after {len(body)} of {length} bytes")
        return Request(method, target.split("?", 1)[0], headers, body)

    def _send(self, status: int, payload) -> None:
        if isinstance(payload, tuple):  # (content type, bytes): a PNG, an mp4
            ctype, data = payload
        elif isinstance(payload, bytes):
            ctype, data = "application/octet-stream", payload
        elif isinstance(payload, str):
            ctype, data = "text/plain; charset=utf-8", payload.encode("utf-8")
        else:
            ctype, data = "application/json", json.dumps(payload).encode("utf-8")
        head = (f"HTTP/1.1 {status} {_REASONS.get(status, 'Unknown')}\r\n"
                f"Content-Type: {ctype}\r\nContent-Length: {len(data)}\r\n"
                f"Connection: close\r\n\r\n")
        try:
            self.wfile.write(head.encode("latin-1") + data)
            self.wfile.flush()
        except OSError:
            pass  # the client gave up; nothing to do

    def _discard_rest(self) -> None:
        # Closing with unread bytes makes the kernel send RST, which can destroy the error
        # answer before the client reads it; swallow a bounded amount first.
        try:
            self.connection.shutdown(socket.SHUT_WR)
            self.connection.settimeout(1.0)
            budget = 64 * 1024 * 1024
            while budget > 0:
                chunk = self.connection.recv(65536)
                if not chunk:
                    break
                budget -= len(chunk)
        except OSError:
            pass


class _ServerMixin:
    daemon_threads = True  # a hung request must not block shutdown
    max_body_bytes = 256 * 1024 * 1024

    def handle_error(self, request, client_address) -> None:  # noqa: D401
        """Log a handler crash in one block instead of socketserver's bare print."""
        import traceback

        _log(f"unhandled error:\n{traceback.format_exc()}")


class ThreadingUnixServer(_ServerMixin, socketserver.ThreadingMixIn,
                          socketserver.UnixStreamServer):
    """One thread per connection on a unix socket (client_address is '' there)."""


class ThreadingTCPServer(_ServerMixin, socketserver.ThreadingMixIn, socketserver.TCPServer):
    """One thread per connection on TCP."""

    allow_reuse_address = True


def make_server(*, unix: str | None = None, host: str = "127.0.0.1", port: int = 5000,
                max_body_mb: float = 256):
    """A bound, listening server (not yet serving) for a unix socket path or host:port."""
    if unix:
        try:
            os.unlink(unix)  # a stale socket from a previous life of this VM
        except FileNotFoundError:
            pass
        server = ThreadingUnixServer(unix, Handler)
    else:
        server = ThreadingTCPServer((host, port), Handler)
    server.max_body_bytes = int(max_body_mb * 1024 * 1024)
    return server


_USAGE = """usage: server.py [--unix PATH | --host HOST --port PORT] [--ready-fd FD]
                 [--max-body-mb MB] [--limit-as BYTES] [--desktop WxH] [--verbose]

--limit-as BYTES   RLIMIT_AS of every command run (through util-linux prlimit)
--desktop WxH      start Xvfb at WxH and a window manager before saying ready"""
_OPTIONS = {"--unix": str, "--host": str, "--port": int, "--ready-fd": int,
            "--max-body-mb": float, "--limit-as": int, "--desktop": str}


def _parse_args(argv: list[str]) -> dict:
    # argparse (with the re and shutil it imports) would add ~5 ms to every VM reset
    args = {"unix": None, "host": "127.0.0.1", "port": 5000, "ready_fd": None,
            "max_body_mb": 256.0, "verbose": False, "limit_as": None, "desktop": None}
    items = list(argv)
    while items:
        item = items.pop(0)
        if item in ("-h", "--help"):
            print(_USAGE)
            sys.exit(0)
        if item == "--verbose":
            args["verbose"] = True
            continue
        name, eq, value = item.partition("=")
        if name not in _OPTIONS:
            sys.exit(f"{_USAGE}\nserver.py: unknown argument {item!r}")
        if not eq:
            if not items:
                sys.exit(f"{_USAGE}\nserver.py: {name} needs a value")
            value = items.pop(0)
        try:
            args[name[2:].replace("-", "_")] = _OPTIONS[name](value)
        except ValueError:
            sys.exit(f"{_USAGE}\nserver.py: bad value for {name}: {value!r}")
    return args


def _which_prlimit() -> bool:
    return any(os.access(os.path.join(d, "prlimit"), os.X_OK)
               for d in os.environ.get("PATH", os.defpath).split(os.pathsep) if d)


def main(argv: list[str] | None = None) -> int:
    """Serve until killed."""
    global _verbose, _limit_as
    args = _parse_args(sys.argv[1:] if argv is None else argv)
    _verbose = args["verbose"]
    _limit_as = args["limit_as"]
    if _limit_as is not None and not _which_prlimit():
        sys.exit("server.py: --limit-as needs util-linux prlimit on PATH")
    if args["desktop"]:
        width, _, height = args["desktop"].partition("x")
        if not (width.isdigit() and height.isdigit()):
            sys.exit(f"server.py: --desktop takes WIDTHxHEIGHT, got {args['desktop']!r}")
        _desktop_module().start_desktop(int(width), int(height))
    server = make_server(unix=args["unix"], host=args["host"], port=args["port"],
                         max_body_mb=args["max_body_mb"])
    where = args["unix"] or f"{args['host']}:{server.server_address[1]}"
    if args["ready_fd"] is not None:
        os.write(args["ready_fd"], b"ready\n")
        os.close(args["ready_fd"])
    if _verbose:
        _log(f"listening on {where}")
    try:
        server.serve_forever(poll_interval=3600)  # shutdown() is never called: no need to poll
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
