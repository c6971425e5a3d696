"""GuestClient: the host's side of the guest agent protocol (see ``guest/agent_server.py``).

One client per VM address, ``unix:/path/to/sock`` (the process provider) or
``http://host:port`` (docker, qemu, OSWorld images). Each call opens one connection, sends
one request and reads one answer; the agent closes the connection after answering, so there
is no pooled connection to go stale when a VM is reset underneath the client.

Failures split in two, because the worker treats them differently:

* the VM is not answering — connection refused or reset, no socket file, a socket timeout,
  a 5xx — raises :class:`~parallel_rollout.errors.GuestUnreachable` / ``VMError``, an
  infrastructure failure (the VM is marked dead, the attempt is retried elsewhere);
* the agent answered that *our request* is wrong (4xx) raises :class:`GuestRequestError`, a
  ``ValueError``: a bug in the caller or the task, not in the VM; so does a request too
  large for the agent to read (:data:`MAX_REQUEST_BYTES`, an action of megabytes), refused
  here before it is sent.

A command that runs and fails (non-zero exit, not found, timed out) is neither: its answer
dict comes back with ``status: "error"`` for the caller to judge.

A command's answer is bounded: the agent keeps only the tail of its output (``tail``, or
8 MiB per stream), and this side reads at most :data:`MAX_COMMAND_REPLY_BYTES` of it, so
an answer that prints a gigabyte costs the worker no more than that.

``isolated=True`` (``execute``, ``run_python``, ``run_bash_script``) runs a grading
command, in an environment the graded code cannot change (``guest/agent_grading.py``):
every check, judge and getter passes it.

Every call has an HTTP timeout: the command's own timeout (which the agent enforces by
killing the command) plus :data:`TIMEOUT_MARGIN_S`, so a hung agent never hangs the host.
Only the standard library's ``http.client`` is used; worker processes import this.
"""

from __future__ import annotations

import http.client
import json as jsonlib
import socket
import time
import uuid
from typing import Any, Callable

from ..errors import GuestKeyRefused, GuestUnreachable, VMError

#: extra seconds the host waits beyond a command's timeout, for the agent to answer
TIMEOUT_MARGIN_S = 10.0
#: the most a command's answer may take: the agent keeps 8 MiB of each stream by default,
#: which JSON's escapes can make larger
MAX_COMMAND_REPLY_BYTES = 64 * 2**20
#: the longest request body the agent reads (its ``--max-body-mb`` default, mirrored): a longer
#: one is refused here, before it is sent, as the agent would refuse it (413), instead of
#: being cut off mid-send and taken for a VM that stopped answering
MAX_REQUEST_BYTES = 256 * 2**20
#: the agent's own defaults, mirrored so the HTTP timeout can cover them
_SERVER_DEFAULT_TIMEOUTS = {"execute": 120.0, "run_python": 30.0, "run_bash_script": 100.0}


class GuestRequestError(ValueError):
    """The guest agent rejected a request as malformed (HTTP 4xx); not a VM failure."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"guest agent answered {status}: {message}")
        self.status = status
        self.message = message


class GuestResponse:
    """One answer of the agent: status code, content type and raw body."""

    __slots__ = ("status", "content_type", "body")

    def __init__(self, status: int, content_type: str, body: bytes) -> None:
        self.status = status
        self.content_type = content_type
        self.body = body

    def json(self) -> Any:
        """The body decoded as JSON."""
        return jsonlib.loads(self.body)

    @property
    def text(self) -> str:
        """The body decoded as UTF-8."""
        return self.body.decode("utf-8", "replace")

    def __repr__(self) -> str:
        return f"GuestResponse({self.status}, {self.content_type!r}, {len(self.body)} bytes)"


class _UnixHTTPConnection(http.client.HTTPConnection):
    """http.client over an AF_UNIX socket."""

    def __init__(self, socket_path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.socket_path = socket_path

    def connect(self) -> None:
        """Connect to the unix socket instead of host:port."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.socket_path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


#: what follows a guest address to name the key its relay asks for (``http://127.0.0.1:PORT#pr-key=HEX``)
KEY_MARK = "#pr-key="
#: the first line of a connection to such a relay: ``PR-KEY <key>``
KEY_LINE = "PR-KEY"


def keyed_address(address: str, key: str) -> str:
    """``address`` with the key its relay asks for: what a VMInfo carries, never shown."""
    return f"{address}{KEY_MARK}{key}"


def shown_address(address: str) -> str:
    """``address`` without the key it may carry: what a message may show."""
    return address.partition(KEY_MARK)[0]


class _KeyedHTTPConnection(http.client.HTTPConnection):
    """An HTTP connection that says the relay's key line first, when there is one."""

    def __init__(self, host: str, port: int, timeout: float, preamble: bytes) -> None:
        super().__init__(host, port, timeout=timeout)
        self._preamble = preamble

    def connect(self) -> None:
        super().connect()
        if self._preamble:
            self.sock.sendall(self._preamble)


class GuestClient:
    """Talks to one guest agent at ``unix:/path`` or ``http://host:port``."""

    def __init__(self, address: str, timeout_s: float = 30.0) -> None:
        #: as given, the key included (what a VMInfo carries to the workers)
        self.address = address
        address, _, key = address.partition(KEY_MARK)
        #: the line sent first on each connection to a relay that asks for the VM's key
        #: (a QEMU guest's: its port is on the host's loopback, which any process reaches)
        self._preamble = f"{KEY_LINE} {key}\n".encode() if key else b""
        #: the address without its key: what messages and the repr show
        self._where = address
        self.timeout_s = timeout_s
        #: when this client was made (``time.monotonic()``): a worker makes one per lease, so
        #: before the attempt's first act; what ``refuse_proc_links`` dates links from
        self.made_at = time.monotonic()
        if address.startswith("unix:"):
            self._unix_path: str | None = address[len("unix:"):]
            self._host, self._port = "", 0
        elif address.startswith("http://"):
            self._unix_path = None
            hostport = address[len("http://"):].rstrip("/")
            host, _, port = hostport.rpartition(":")
            if not host or not port.isdigit():
                raise ValueError(f"guest address needs host:port: {address!r}")
            self._host, self._port = host.strip("[]"), int(port)
        else:
            raise ValueError(f"guest address must be unix:/path or http://host:port, "
                             f"got {address!r}")

    def __repr__(self) -> str:
        return f"GuestClient({self._where!r})"

    # ------------------------------------------------------------------ transport

    def request(self, method: str, path: str, json: Any = None, *, data: bytes | None = None,
                content_type: str | None = None, timeout: float | None = None,
                check: bool = True, max_bytes: int | None = None) -> GuestResponse:
        """Send one request; GuestUnreachable when the agent does not answer, and with
        ``check`` GuestRequestError on 4xx and VMError on 5xx. VMError when the answer is
        longer than ``max_bytes`` (None: no bound): it is not read. A body longer than
        MAX_REQUEST_BYTES is GuestRequestError (413) at once: the caller's, never the VM's."""
        headers = {}
        if json is not None:
            data = jsonlib.dumps(json).encode("utf-8")
            content_type = "application/json"
        if data is not None and len(data) > MAX_REQUEST_BYTES:
            raise GuestRequestError(413, f"{method} {path}: a body of {len(data)} bytes is more than the "
                                         f"{MAX_REQUEST_BYTES} the guest agent reads; not sent")
        if content_type:
            headers["Content-Type"] = content_type
        timeout = self.timeout_s if timeout is None else timeout
        if self._unix_path is not None:
            conn: http.client.HTTPConnection = _UnixHTTPConnection(self._unix_path, timeout)
        else:
            conn = _KeyedHTTPConnection(self._host, self._port, timeout=timeout, preamble=self._preamble)
        try:
            conn.request(method, path, body=data, headers=headers)
            answer = conn.getresponse()
            if max_bytes is not None and (answer.length or 0) > max_bytes:
                raise VMError(f"guest agent at {self._where} answered {method} {path} with "
                              f"{answer.length} bytes, more than the {max_bytes} allowed")
            body = answer.read() if max_bytes is None else answer.read(max_bytes + 1)
            if max_bytes is not None and len(body) > max_bytes:
                raise VMError(f"guest agent at {self._where} answered {method} {path} with "
                              f"more than the {max_bytes} bytes allowed")
        except (OSError, http.client.HTTPException) as exc:
            # socket.timeout, refused, reset, no socket file, a half-written answer
            raise GuestUnreachable(
                f"guest agent at {self._where} did not answer {method} {path}: "
                f"{type(exc).__name__}: {exc}") from exc
        finally:
            conn.close()
        response = GuestResponse(answer.status, answer.getheader("Content-Type", ""), body)
        if check:
            self.check_answer(method, path, response)
        return response

    def check_answer(self, method: str, path: str, response: GuestResponse) -> None:
        """GuestRequestError for a 4xx answer to ``method path``, VMError for a 5xx one."""
        if response.status < 400:
            return
        message = _error_message(response)
        if response.status < 500:
            raise GuestRequestError(response.status, f"{method} {path}: {message}")
        raise VMError(f"guest agent at {self._where} failed on {method} {path} "
                      f"({response.status}): {message}")

    def _json_call(self, path: str, payload: dict, command_timeout: float | None,
                   default_key: str) -> dict:
        wait = command_timeout if command_timeout is not None else \
            _SERVER_DEFAULT_TIMEOUTS[default_key]
        return self.request("POST", path, json=payload, timeout=wait + TIMEOUT_MARGIN_S,
                            max_bytes=MAX_COMMAND_REPLY_BYTES).json()

    # -------------------------------------------------------------------- routes

    def health(self) -> dict:
        """GET /health: ``{"status": "ok", "pid": ..., "vm": ...}``."""
        return self.request("GET", "/health").json()

    def wait_ready(self, timeout_s: float) -> None:
        """Poll /health until the agent answers; GuestUnreachable after ``timeout_s``."""
        wait_ready(self, time.monotonic() + timeout_s, budget_s=timeout_s)

    def platform(self) -> str:
        """GET /platform: the guest's ``platform.system()`` (e.g. ``Linux``)."""
        return self.request("GET", "/platform").text

    def execute(self, command: list[str] | str, shell: bool = False,
                timeout: float | None = None, cwd: str | None = None,
                env: dict[str, str] | None = None, *, isolated: bool = False,
                tail: int | None = None, refuse_proc_links: bool = False) -> dict:
        """POST /execute: ``{status, output, error, returncode}`` (+ ``timeout``/``message``);
        ``isolated``: a grading command; ``tail``: characters of each stream to keep;
        ``refuse_proc_links``: not run (126) when the graded code left a link into a process's
        folder of ``/proc`` (a shell task's check: ``agent_grading.links_into_processes``),
        one made since this client was: a link the machine held before the lease (a machine
        of one's own: another program's, in ``/tmp``) is not the attempt's."""
        payload: dict[str, Any] = {"command": command, "shell": shell, **_options(isolated, tail)}
        if refuse_proc_links:
            payload["refuse_proc_links"] = True
            payload["links_made_within_s"] = round(time.monotonic() - self.made_at, 3)
        if timeout is not None:
            payload["timeout"] = timeout
        if cwd is not None:
            payload["cwd"] = cwd
        if env is not None:
            payload["env"] = env
        return self._json_call("/execute", payload, timeout, "execute")

    def reap(self) -> bool:
        """POST /reap: kill every process the VM's commands left; False when the agent is
        older than the route (a remote VM's own agent); VMError when some survived it (the
        task broke its VM: graded 0, never graded beside them)."""
        response = self.request("POST", "/reap", json={}, check=False, timeout=20.0)
        if response.status == 404:
            return False
        self.check_answer("POST", "/reap", response)
        left = response.json().get("left") or 0
        if left:  # a check run beside them could be raced or faked: no grade
            raise VMError(f"guest agent at {self._where}: {left} process(es) the commands left survived "
                          "/reap (killed round after round for 5 s, and longer while rounds left fewer)")
        return True

    def run_python(self, code: str, timeout: float | None = None, *, isolated: bool = False,
                   tail: int | None = None) -> dict:
        """POST /run_python: ``{status, message, need_more, output, error, return_code}``;
        ``isolated`` runs ``python3 -I`` in the grading environment."""
        payload: dict[str, Any] = {"code": code, **_options(isolated, tail)}
        if timeout is not None:
            payload["timeout"] = timeout
        return self._json_call("/run_python", payload, timeout, "run_python")

    def run_bash_script(self, script: str, timeout: float | None = None,
                        working_dir: str | None = None, *, isolated: bool = False,
                        tail: int | None = None) -> dict:
        """POST /run_bash_script: ``{status, output, error: "", returncode}``."""
        payload: dict[str, Any] = {"script": script, **_options(isolated, tail)}
        if timeout is not None:
            payload["timeout"] = timeout
        if working_dir is not None:
            payload["working_dir"] = working_dir
        return self._json_call("/run_bash_script", payload, timeout, "run_bash_script")

    def read_file(self, path: str) -> bytes:
        """POST /file: the file's bytes; FileNotFoundError when the guest has no such file."""
        from urllib.parse import urlencode

        response = self.request("POST", "/file", data=urlencode({"file_path": path}).encode(),
                                content_type="application/x-www-form-urlencoded",
                                check=False)
        if response.status == 404:
            raise FileNotFoundError(f"{path} (in the guest at {self._where})")
        self.check_answer("POST", "/file", response)
        return response.body

    def write_file(self, path: str, data: bytes) -> None:
        """POST /setup/upload (multipart, as OSWorld's clients send it); makes parent dirs."""
        boundary = uuid.uuid4().hex
        body = b"".join([
            f"--{boundary}\r\nContent-Disposition: form-data; name=\"file_path\"\r\n\r\n"
            .encode(), path.encode("utf-8"), b"\r\n",
            f"--{boundary}\r\nContent-Disposition: form-data; name=\"file_data\"; "
            f"filename=\"upload\"\r\nContent-Type: application/octet-stream\r\n\r\n".encode(),
            data, f"\r\n--{boundary}--\r\n".encode(),
        ])
        self.request("POST", "/setup/upload", data=body,
                     content_type=f"multipart/form-data; boundary={boundary}")

    def list_directory(self, path: str) -> dict:
        """POST /list_directory: ``{"directory_tree": {type, name, children}}``."""
        return self.request("POST", "/list_directory", json={"path": path}).json()

    # ------------------------------------------------------------- desktop routes

    def screenshot(self, timeout: float = 10.0) -> bytes:
        """GET /screenshot: PNG bytes (cursor drawn); VMError when they are not a PNG."""
        body = self.request("GET", "/screenshot", timeout=timeout).body
        if not body.startswith(b"\x89PNG") and not body.startswith(b"\xff\xd8"):
            raise VMError(f"guest agent at {self._where}: /screenshot answered no image")
        return body

    def accessibility_tree(self, timeout: float = 30.0) -> str:
        """GET /accessibility: the desktop as XML (OSWorld's ``{"AT": xml}``)."""
        return self.request("GET", "/accessibility", timeout=timeout).json()["AT"]

    def cursor_position(self) -> tuple[int, int]:
        """GET /cursor_position: ``(x, y)``."""
        x, y = self.request("GET", "/cursor_position", timeout=10.0).json()
        return int(x), int(y)

    def screen_size(self) -> tuple[int, int]:
        """POST /screen_size: ``(width, height)``."""
        size = self.request("POST", "/screen_size", timeout=10.0).json()
        return int(size["width"]), int(size["height"])

    def launch(self, command: list[str] | str, shell: bool = False) -> str:
        """POST /setup/launch: start a program without waiting for it; FileNotFoundError
        ("app not installed") when the guest has no such program: the VM answered."""
        response = self.request("POST", "/setup/launch", json={"command": command, "shell": shell},
                                timeout=30.0, check=False)
        if response.status == 404:
            raise FileNotFoundError(_error_message(response))
        self.check_answer("POST", "/setup/launch", response)
        return response.text

    def open_file(self, path: str, timeout: float = 30.0) -> str:
        """POST /setup/open_file: open ``path`` and wait (at most ``timeout`` s) for its
        window; TimeoutError when it does not appear, FileNotFoundError when there is no
        such file. Neither is a VM failure: the VM answered."""
        response = self.request("POST", "/setup/open_file", json={"path": path, "timeout": timeout},
                                timeout=timeout + TIMEOUT_MARGIN_S, check=False)
        if response.status == 404:
            raise FileNotFoundError(f"{path} (in the guest at {self._where})")
        if response.status == 500:
            raise TimeoutError(f"open_file {path!r}: {_error_message(response)}")
        self.check_answer("POST", "/setup/open_file", response)
        return response.text

    def activate_window(self, window_name: str, strict: bool = False, by_class: bool = False) -> None:
        """POST /setup/activate_window; LookupError when no window matches."""
        self._window_call("/setup/activate_window", window_name, strict, by_class)

    def close_window(self, window_name: str, strict: bool = False, by_class: bool = False) -> None:
        """POST /setup/close_window; LookupError when no window matches."""
        self._window_call("/setup/close_window", window_name, strict, by_class)

    def _window_call(self, path: str, window_name: str, strict: bool, by_class: bool) -> None:
        response = self.request("POST", path, json={"window_name": window_name, "strict": strict,
                                                    "by_class": by_class},
                                timeout=20.0, check=False)
        if response.status == 404:
            raise LookupError(f"{path}: {_error_message(response)}")
        self.check_answer("POST", path, response)

    def start_recording(self) -> None:
        """POST /start_recording (ffmpeg x11grab in the guest)."""
        self.request("POST", "/start_recording", timeout=20.0)

    def end_recording(self) -> bytes:
        """POST /end_recording: the mp4's bytes."""
        return self.request("POST", "/end_recording", timeout=60.0).body


def _options(isolated: bool, tail: int | None) -> dict[str, Any]:
    """The optional fields of a command request, only those set (an older agent, a
    remote VM's own, then sees the requests it always saw)."""
    options: dict[str, Any] = {}
    if isolated:
        options["isolated"] = True
    if tail is not None:
        options["tail"] = tail
    return options


def _error_message(response: GuestResponse) -> str:
    try:
        payload = response.json()
    except ValueError:
        return response.text[:500]
    if isinstance(payload, dict):
        return str(payload.get("message") or payload.get("error") or payload)
    return str(payload)


def wait_ready(client: GuestClient, deadline: float, *, route: str = "/health",
               accept: Callable[[GuestResponse], bool] | None = None,
               check_alive: Callable[[], None] | None = None, budget_s: float | None = None,
               max_delay_s: float = 0.25) -> GuestResponse:
    """THE readiness wait of every provider: poll ``GET route`` until the agent answers 200
    and ``accept(response)`` holds, backing off from 5 ms to ``max_delay_s``.

    ``check_alive()`` runs between tries (at most once a second) and raises when the VM is
    gone for good (its QEMU exited, its container stopped), so nobody waits for a corpse.
    GuestUnreachable at ``deadline``, saying the last thing that went wrong (its ``answered``:
    the last answer's HTTP status, None when there was none); GuestKeyRefused
    (a VMError) at once when the agent answers 401 (it asks for a key the client does not have)."""
    delay, next_check, last, status = 0.005, time.monotonic(), "no answer", None
    while True:
        remaining = deadline - time.monotonic()
        try:
            response = client.request("GET", route, timeout=max(0.05, min(remaining, 2.0)),
                                      check=False)
            if response.status == 200 and (accept is None or accept(response)):
                return response
            last, status = f"answered {response.status}: {response.body[:200]!r}", response.status
            if response.status == 401:  # an agent that asks for a key refused ours (or none): no wait mends that
                raise GuestKeyRefused(f"guest agent at {shown_address(client.address)} refused the key the run gave it, or "
                              f"its lack (a remote agent's --key-file against --vm-key-file): {last}")
        except GuestUnreachable as exc:
            last, status = repr(exc.__cause__ or exc), None
        except ValueError as exc:  # accept() could not read a half-started agent's answer
            last, status = str(exc), None
        if check_alive is not None and time.monotonic() >= next_check:
            check_alive()
            next_check = time.monotonic() + 1.0
        if time.monotonic() + delay > deadline:
            budget = f"{budget_s:g}s" if budget_s is not None else "the boot timeout"
            unready = GuestUnreachable(f"guest agent at {shown_address(client.address)} not ready after {budget} "
                                       f"(GET {route}; last error: {last})")
            unready.answered = status  # the HTTP status of the last answer, None: no answer
            raise unready
        time.sleep(delay)
        delay = min(delay * 2, max_delay_s)

