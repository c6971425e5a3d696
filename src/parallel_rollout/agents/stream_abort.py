"""How a model request is aborted mid-reply, from any thread (streamed through the policy
gate, or, without one, answered whole, whose connection a cancel shuts): its kill switch
(``Abortable``), the client's sockets an abort shuts before a response has come
(``Sockets``), and the server's abort endpoint for one that must be told (``abort_url``,
``abort_endpoint``; every request carries an id of its own, ``named``, which is told when
no stream's id is known: a request answered whole, or aborted in the server's queue). What a stream is, and what an aborted one leaves: ``agents.streaming``.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import uuid
from typing import Any
from urllib.parse import urlsplit

log = logging.getLogger("parallel_rollout")

#: how long a request's end waits for its abort's POST to be delivered (``Abortable.wait_told``)
TELL_WAIT_S = 2.0


class Sockets:
    """The sockets one model client's HTTP connections run on, noted as each connects (an
    httpx ``"request"`` event hook puts a ``trace`` extension on every request): an abort
    that comes before the response (the request queued at a busy server, or behind a router)
    has no response to close, so it shuts these, which the waiting thread and the server see
    at once. A client sends one request at a time, so that is the request being aborted; the
    idle pooled connections it also ends are replaced on the next request."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._socks: list[socket.socket] = []
        #: the request under way (an Abortable): a connection made after its abort is shut too
        self.current: "Abortable | None" = None

    def http_client(self):
        """An HTTP client for the ``openai`` client whose connections are traced here."""
        from openai import DefaultHttpxClient

        return DefaultHttpxClient(event_hooks={"request": [self.hook]})

    def hook(self, request) -> None:
        """The httpx ``"request"`` event hook: trace the request's connection."""
        request.extensions["trace"] = self._trace

    def _trace(self, name: str, info: dict[str, Any]) -> None:
        if not name.endswith((".connect_tcp.complete", ".connect_unix_socket.complete")):
            return
        stream = info.get("return_value")
        sock = stream.get_extra_info("socket") if stream is not None else None
        if sock is None:
            return
        with self._lock:
            self._socks = [s for s in self._socks if s.fileno() != -1] + [sock]
            late = self.current is not None and self.current.aborted
        if late:
            _shutdown(sock)

    def abort(self) -> None:
        """Abort the request under way (``current``): its connection is shut, and so is one
        it makes after."""
        current = self.current
        if current is not None:
            current.abort()

    def shutdown(self) -> None:
        """Shut every connection (under way or idle)."""
        with self._lock:
            socks = list(self._socks)
        for sock in socks:
            _shutdown(sock)


class Abortable:
    """One request's kill switch, safe from any thread: ``abort()`` before the
    response arrives shuts the client's connections (``sockets``: the request waits at the
    server; without them ``attach`` closes it once the response comes); after, it shuts its
    socket, which wakes the reading thread and tells the server. ``abort_url``: also POST the
    stream's id there (a server that does not stop decoding when its client hangs up)."""

    def __init__(self, abort_url: str | None = None, sockets: Sockets | None = None) -> None:
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self.aborted = False
        self.abort_url = abort_url
        #: the stream's id (its first chunk's "id"), what ``abort_url`` is told
        self.request_id: str | None = None
        #: the id the request carries in its body (``named``): told when no stream's id came
        self.carried_id: str | None = None
        self._told = False
        #: the thread POSTing the id (``_tell``): ``wait_told`` waits for it
        self._teller: threading.Thread | None = None
        self._sockets = sockets
        if sockets is not None:
            sockets.current = self

    def identify(self, request_id: Any) -> None:
        """The stream's id is known (its first chunk)."""
        with self._lock:
            if self.request_id is None and isinstance(request_id, str):
                self.request_id = request_id
                if self.aborted:
                    self._tell()

    def attach(self, http_response) -> None:
        """The streaming response (an httpx.Response) whose socket ``abort`` shuts."""
        stream = (getattr(http_response, "extensions", None) or {}).get("network_stream")
        sock = stream.get_extra_info("socket") if stream is not None else None
        with self._lock:
            self._sock = sock
            if self.aborted:
                _shutdown(sock)

    def abort(self) -> None:
        """End the request now (its reader sees the connection end)."""
        with self._lock:
            self.aborted = True
            _shutdown(self._sock)
            if self.request_id is not None or self.carried_id is not None:
                self._tell()
            waiting = self._sock is None
        if waiting and self._sockets is not None:
            self._sockets.shutdown()  # no response yet: the request still waits at the server

    def _tell(self) -> None:
        """POST the id to ``abort_url`` once, from a thread of its own (under the lock)."""
        if self.abort_url is None or self._told:
            return
        self._told = True
        told = self.request_id or self.carried_id
        self._teller = threading.Thread(target=_post_abort, args=(self.abort_url, told), name="abort-url",
                                        daemon=True)
        self._teller.start()

    def wait_told(self, timeout: float = TELL_WAIT_S) -> None:
        """Wait (at most ``timeout`` seconds) until the abort's POST, if one was begun, is
        delivered: the request's end is heard only then, and a worker stopped right after
        (a scheduler's close(), a run's end) no longer kills the thread before it told."""
        with self._lock:
            teller = self._teller
        if teller is not None:
            teller.join(timeout)


def abortable(config: Any, base_url: str, sockets: Sockets) -> Abortable:
    """The kill switch of one request to ``base_url`` by a client of ``config``, whose abort is
    also POSTed to its ``abort_url`` (``abort_endpoint``) when it has one."""
    return Abortable(abort_endpoint(getattr(config, "abort_url", None), base_url), sockets)


def named(request: dict[str, Any], abortable: Abortable) -> dict[str, Any]:
    """``request`` with an id of its own when ``abortable`` has an abort_url to tell: a request
    answered whole has no stream whose first chunk names it, nor has one aborted while it waits
    in the server's queue (a stream's id, once it came, is told instead). The id goes in the body as
    ``rid`` (SGLang's, which its /abort_request reads) and ``request_id`` (vLLM's); one the
    run's ``extra_body`` gives is kept."""
    if abortable.abort_url is None:
        return request
    extra = dict(request.get("extra_body") or {})
    rid = extra.setdefault("rid", f"rollout-{uuid.uuid4().hex}")
    extra.setdefault("request_id", rid)
    abortable.carried_id = rid
    return {**request, "extra_body": extra}


def abort_endpoint(abort_url: str | None, base_url: str) -> str | None:
    """Where an abort is POSTed: ``abort_url``, or, when it is a path (``/abort_request``),
    that path on the server the request went to (``base_url``'s scheme, host and port)."""
    if not abort_url or not abort_url.startswith("/"):
        return abort_url
    parts = urlsplit(base_url)
    return f"{parts.scheme}://{parts.netloc}{abort_url}"


def _post_abort(url: str, request_id: str) -> None:
    import urllib.error
    import urllib.request

    # "rid": what SGLang's /abort_request reads; "request_id" for everything else
    body = {"request_id": request_id, "rid": request_id}
    request = urllib.request.Request(url, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    try:
        urllib.request.urlopen(request, timeout=10).close()
    except (OSError, urllib.error.URLError, ValueError) as exc:
        log.warning("abort_url %s: the abort of %s was not delivered: %s", url, request_id, exc)


def _shutdown(sock: socket.socket | None) -> None:
    if sock is None:
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed
