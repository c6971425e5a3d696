"""The guest agent's HTTP layer: parse one request, dispatch it to a route, write one answer.

::

    client ──► Handler.handle: request line, headers, a Content-Length body ──► Request
                 │ server.resolve(path) -> (method, route function)   (agent_server.py's table)
                 ▼
               route(Request) -> (status, payload) ──► one response, ``Connection: close``

**Why not http.server.** Start-up time is the cost of a ``process`` VM reset: the sandbox is
torn down and the agent starts afresh each time. ``http.server`` drags in ``email``,
``http.client`` and ``ssl`` (about 35 ms of a 60 ms start) for a protocol subset that fits in
a page, so the layer here is our own. For the same reason it is built on the C modules
under the standard library's (``_socket``, ``_thread``, and ``_json`` through
``agent_json``): ``socket``, ``socketserver``, ``threading`` and ``json`` import ``enum``,
``re``, ``functools`` and ``collections``, ~15 ms of CPU at every start. One thread per
connection, as ``socketserver.ThreadingMixIn`` had it.

**Errors.** A route raises :class:`HTTPError` for a request it cannot make sense of; the
answer is that status with ``{"status": "error", "message"}``. An unknown route is 404, a
known route with the wrong method 405, an unexpected exception 500 with its text (a bug, never
a user error); the server keeps serving in every case. Request bodies are JSON objects, url-
encoded forms or multipart/form-data (:func:`parse_multipart`); :func:`field` checks a JSON
field's type and says what is wrong.

Standard library only: this file is copied next to ``server.py`` into every guest.
"""

from __future__ import annotations

import _socket
import _thread
import os
import sys

try:
    from . import agent_json
except ImportError:  # a sibling file in the guest, not a package
    import agent_json  # type: ignore[no-redef]

#: a slow or silent client must not pin a thread forever
IO_TIMEOUT_S = 60.0
MAX_HEADER_LINE = 16 * 1024
MAX_HEADERS = 100
#: connections waiting to be accepted (socketserver's was 5)
LISTEN_BACKLOG = 16

_REASONS = {
    100: "Continue", 200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found",
    405: "Method Not Allowed", 408: "Request Timeout", 411: "Length Required",
    413: "Payload Too Large", 500: "Internal Server Error", 501: "Not Implemented",
    503: "Service Unavailable",
}

#: ``--verbose``: log every request's method, path and status
verbose = False
#: the first line of a connection to an agent started with a key: ``PR-KEY <key>`` (what
#: ``GuestClient`` sends for an address with ``#pr-key=``, as to a QEMU guest's relay)
KEY_LINE = b"PR-KEY "


def log(message: str) -> None:
    """One line to the agent's stderr (agent.log on the host)."""
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
            value = agent_json.loads(self.body)
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


def field(body: dict, name: str, types: tuple, default=None, required: bool = False):
    """``body[name]`` checked against ``types``; HTTPError 400 saying what is wrong."""
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


def timeout_field(body: dict, default: float) -> float:
    """The request's positive ``timeout`` in seconds, or ``default``."""
    value = field(body, "timeout", (int, float), default)
    if not value > 0:
        raise HTTPError(400, f"field 'timeout' must be positive, got {value}")
    return float(value)


def parse_multipart(ctype: str, body: bytes) -> dict[str, bytes]:
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


# --------------------------------------------------------------------------------- HTTP


class _Reader:
    """Buffered reads from a socket: ``readline(limit)`` and ``read(n)`` as a socket file's."""

    __slots__ = ("conn", "buffer")

    def __init__(self, conn) -> None:
        self.conn = conn
        self.buffer = b""

    def readline(self, limit: int) -> bytes:
        """Up to and with the next newline, at most ``limit`` bytes; b"" at the end."""
        while b"\n" not in self.buffer and len(self.buffer) < limit:
            chunk = self.conn.recv(65536)
            if not chunk:
                break
            self.buffer += chunk
        end = self.buffer.find(b"\n", 0, limit) + 1 or limit
        line, self.buffer = self.buffer[:end], self.buffer[end:]
        return line

    def read(self, size: int) -> bytes:
        """``size`` bytes, fewer only at the end of the stream."""
        parts, have = [self.buffer[:size]], min(len(self.buffer), size)
        self.buffer = self.buffer[size:]
        while have < size:
            chunk = self.conn.recv(min(size - have, 1 << 20))
            if not chunk:
                break
            parts.append(chunk)
            have += len(chunk)
        return b"".join(parts)


class Handler:
    """Reads one request, dispatches it, writes one response, closes the connection."""

    def __init__(self, server: "Server", conn) -> None:
        self.server = server
        self.connection = conn
        self.rfile = _Reader(conn)

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
        if verbose:
            log(f"{req.method} {req.path} -> {status}")
        self._send(status, payload)

    def _dispatch(self, req: Request):
        try:
            route = self.server.resolve(req.path)
        except ImportError as exc:  # a lazy route's module this machine lacks (the desktop's, or what it imports)
            return 503, {"status": "error", "message": f"{req.path}: this agent cannot serve it: {exc}"}
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
            import traceback

            log(f"error in {req.path}:\n{traceback.format_exc()}")
            return 500, {"status": "error", "message": f"{type(exc).__name__}: {exc}"}

    def _read_request(self) -> Request | None:
        line = self.rfile.readline(MAX_HEADER_LINE + 1)
        if not line:
            return None
        if self.server.key is not None:
            line = self._check_key(line)
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
            self.connection.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        body = self.rfile.read(length) if length else b""
        if len(body) < length:
            raise HTTPError(400, f"body ended after {len(body)} of {length} bytes")
        return Request(method, target.split("?", 1)[0], headers, body)

    def _check_key(self, line: bytes) -> bytes:
        """The request line after a ``PR-KEY`` line that names the agent's key; HTTPError 401
        (logged, without what was said) for a connection that does not start with it."""
        from _operator import _compare_digest

        said = line.rstrip(b"\r\n")
        if said.startswith(KEY_LINE) and _compare_digest(said[len(KEY_LINE):], self.server.key):
            return self.rfile.readline(MAX_HEADER_LINE + 1)
        try:
            peer = self.connection.getpeername()
        except OSError:
            peer = "?"
        what = "a wrong key" if said.startswith(KEY_LINE) else "no key"
        log(f"refused a connection from {peer or 'a unix socket'} with {what} (the agent was started with one)")
        raise HTTPError(401, "this guest agent takes requests only with its key (a PR-KEY line first)")

    def _send(self, status: int, payload) -> None:
        if isinstance(payload, tuple):  # (content type, bytes): a PNG, an mp4
            ctype, data = payload
        elif isinstance(payload, bytes):
            ctype, data = "application/octet-stream", payload
        elif isinstance(payload, str):
            ctype, data = "text/plain; charset=utf-8", payload.encode("utf-8")
        else:
            ctype, data = "application/json", agent_json.dumps(payload).encode("utf-8")
        head = (f"HTTP/1.1 {status} {_REASONS.get(status, 'Unknown')}\r\n"
                f"Content-Type: {ctype}\r\nContent-Length: {len(data)}\r\n"
                f"Connection: close\r\n\r\n")
        try:
            self.connection.sendall(head.encode("latin-1") + data)
        except OSError:
            pass  # the client gave up; nothing to do

    def _discard_rest(self) -> None:
        # Closing with unread bytes makes the kernel send RST, which can destroy the error
        # answer before the client reads it; swallow a bounded amount first.
        try:
            self.connection.shutdown(_socket.SHUT_WR)
            self.connection.settimeout(1.0)
            budget = 64 * 1024 * 1024
            while budget > 0:
                chunk = self.connection.recv(65536)
                if not chunk:
                    break
                budget -= len(chunk)
        except OSError:
            pass


class Server:
    """A listening socket and the agent's route table; :meth:`serve_forever` answers each
    connection on a thread of its own."""

    def __init__(self, listener, resolve, max_body_bytes: int, key: bytes | None = None) -> None:
        self.socket = listener
        self.resolve = resolve
        self.max_body_bytes = max_body_bytes
        #: with a key, every connection must say it first (``Handler._check_key``)
        self.key = key
        self.server_address = listener.getsockname()

    def serve_forever(self) -> None:
        """Accept until the listening socket is closed. A failed accept (out of
        descriptors) is skipped, as socketserver skipped it. A connection whose thread cannot
        start (the commands' processes fill pids.max: a fork bomb) is served on this thread,
        the others waiting: the /reap that ends such a bomb must be answered."""
        import time

        while True:
            try:
                # _socket's accept (socket.socket.accept wraps it): accept4(SOCK_CLOEXEC),
                # so no command the agent runs inherits the connection
                fd, _ = self.socket._accept()  # noqa: SLF001
            except OSError:
                if self.socket.fileno() == -1:
                    return
                time.sleep(0.01)  # not a busy loop while the descriptors are out
                continue
            conn = _socket.socket(self.socket.family, self.socket.type, 0, fileno=fd)
            try:
                _thread.start_new_thread(self._serve, (conn,))
            except RuntimeError:  # can't start new thread
                self._serve(conn)

    def _serve(self, conn) -> None:
        try:
            Handler(self, conn).handle()
        except Exception:  # a handler bug must not take the agent down
            import traceback

            log(f"unhandled error:\n{traceback.format_exc()}")
        finally:
            try:
                conn.shutdown(_socket.SHUT_WR)
            except OSError:
                pass
            conn.close()


def make_server(resolve, *, unix: str | None = None, host: str = "127.0.0.1", port: int = 5000,
                max_body_mb: float = 256, listen_fd: int | None = None, key: bytes | None = None) -> Server:
    """A bound, listening server (not yet serving) for a unix socket path, host:port, or a
    unix socket the caller bound and listens on (``listen_fd``: its path is not ours to see);
    ``resolve(path)`` answers ``(method, route)`` or None for an unknown path; with ``key``,
    a connection that does not say it first is answered 401."""
    if listen_fd is not None:
        listener = _socket.socket(fileno=listen_fd)
        os.set_inheritable(listen_fd, False)  # no command the agent runs may hold it
    elif unix:
        try:
            os.unlink(unix)  # a stale socket from a previous life of this VM
        except FileNotFoundError:
            pass
        listener = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        listener.bind(unix)
        listener.listen(LISTEN_BACKLOG)
    else:
        listener = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
        listener.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
        listener.bind((host, port))
        listener.listen(LISTEN_BACKLOG)
    return Server(listener, resolve, int(max_body_mb * 1024 * 1024), key)
