"""The agent's side of the policy gate (``policy_gate.py``): one connection per env loop.

An agent's model request says "begin [<key>]" and waits for "go <version>" (as long as the
trainer keeps the gate suspended), streams, and says "end [<kept>|-]"; between the two a
reader thread owns the connection's lines, so the gate's unsolicited "abort" closes the
model request at once (``on_abort``). Every connection says "key <secret>" first. The line
protocol, and why the key, are in ``policy_gate.py``'s docstring; here are the client and
the connection (a unix socket path or ``tcp://HOST:PORT``) both sides make.
"""

from __future__ import annotations

import queue
import socket
import threading
import time
from typing import Callable

#: how long an agent waits for the gate's answer to a line before it gives up (seconds);
#: "begin" itself may wait as long as the trainer keeps the gate suspended
CONNECT_TIMEOUT_S = 10.0


class GateClient:
    """The agent's side: one connection per env loop, made on first use, used by that loop's
    thread alone (``close`` excepted): a ``begin`` while another thread's ``end`` still reads
    its answer would race it for the connection's lines.

    Between ``begin`` and ``end`` a reader thread owns the connection's incoming lines: an
    unsolicited "abort" calls the ``on_abort`` given to ``begin`` (which closes the model
    request), and the answer to "end" is handed to ``end``."""

    def __init__(self, path: str, key: str | None = None) -> None:
        """``key``: the gate's ``PolicyGate.key``, said first on every connection."""
        self.path = path
        self.key = key
        self._sock: socket.socket | None = None
        self._reader = None
        self._answers: "queue.Queue[str]" = queue.Queue()
        self._watcher: threading.Thread | None = None
        #: whether the gate aborted the request under way (or the last one)
        self.aborted = False

    def begin(self, key: str | None = None, on_abort: Callable[[], None] | None = None,
              cancelled: Callable[[], bool] | None = None) -> tuple[int, float]:
        """Wait until model requests may start: (policy version, seconds waited). ``key``:
        the sample the request belongs to; ``on_abort``: called (from another thread) when
        the gate aborts the request; ``cancelled``: whether the caller was cancelled, asked
        once the connection is held (a ``close()`` that came while it was being made found
        nothing to hang up). ConnectionError when the gate is gone, its answer is not
        "go <int>", or the caller cancelled; every failure after the gate let the request
        through hangs up, which ends the request there (nothing stays in flight)."""
        started = time.monotonic()
        answer = self._ask(f"begin {key}" if key else "begin", cancelled)
        try:
            version = int(answer[3:]) if answer.startswith("go ") else None
        except ValueError:
            version = None
        if version is None:
            # the gate may have counted the request in flight already: hanging up ends it there,
            # so an answer this side cannot use never holds a suspend() waiting
            self.close()
            raise ConnectionError(f"policy gate {self.path}: unexpected answer {answer!r} (expected 'go <version>')")
        self.aborted = False
        # the reader and the queue of this request's connection: a watcher outliving a
        # close() (a cancel hangs up mid-request) never reads another connection's lines
        self._answers = queue.Queue()
        self._watcher = threading.Thread(target=self._watch, args=(self._reader, self._answers, on_abort),
                                         name="policy-gate-watch", daemon=True)
        try:
            self._watcher.start()
        except BaseException:
            self.close()  # as above: the request the gate counted ends with the connection
            raise
        return version, time.monotonic() - started

    def end(self, kept: int | None = None, unanswered: bool = False) -> bool:
        """Tell the gate the request is over, and ``kept``: the oldest policy version among
        the tokens kept after it (None: none kept), or ``unanswered``: the server sent no
        answer within the request's timeout. True when it was aborted (by a weight update or a cancel)."""
        line = "end -" if unanswered and kept is None else "end" if kept is None else f"end {int(kept)}"
        try:
            self._sock.sendall(f"{line}\n".encode())
        except (OSError, AttributeError) as exc:
            self.close()
            raise ConnectionError(f"policy gate {self.path}: {exc}") from None
        answer = self._answers.get()
        self._watcher = None
        if not answer:
            self.close()
            raise ConnectionError(f"policy gate {self.path} closed")
        return answer == "redo" or self.aborted

    def forget(self, key: str) -> None:
        """Sample ``key`` starts a new attempt: the versions its earlier attempts' tokens were
        sampled by are no longer its (the trainer gets the new attempt's turns only), so
        ``max_version_lag`` no longer judges it by them. ConnectionError when the gate is gone."""
        if self._ask(f"forget {key}") != "ok":
            self.close()
            raise ConnectionError(f"policy gate {self.path}: unexpected answer to forget")

    def close(self) -> None:
        """Hang up (the gate counts any open request as ended); safe from another thread,
        where it ends a ``begin`` waiting at a suspended gate (ConnectionError). The next
        ``begin`` connects again."""
        if self._sock is not None:
            sock, self._sock = self._sock, None
            try:
                sock.shutdown(socket.SHUT_RDWR)  # wakes a reader thread blocked on it
            except OSError:
                pass
            try:
                sock.close()
            except OSError:
                pass

    def _watch(self, reader, answers: "queue.Queue[str]", on_abort: Callable[[], None] | None) -> None:
        """The reader thread of one request: "abort" lines, then the answer to "end"."""
        while True:
            try:
                line = reader.readline()
            except (OSError, ValueError, AttributeError):
                line = ""
            answer = line.strip()
            if answer == "abort":
                self.aborted = True
                if on_abort is not None:
                    on_abort()
                continue
            answers.put(answer)
            return

    def _ask(self, command: str, cancelled: Callable[[], bool] | None = None) -> str:
        hello = ""  # a new connection says the key first, in the same write as its command
        if self._sock is None:
            hello = f"key {self.key or ''}\n"
            try:
                sock = connect(self.path)
            except OSError as exc:
                raise ConnectionError(f"policy gate {self.path} unreachable: {exc}") from None
            sock.settimeout(None)  # "begin" waits as long as the trainer's weight update
            self._sock, self._reader = sock, sock.makefile("r", encoding="ascii", newline="\n")
        if cancelled is not None and cancelled():
            # the cancel sets its flag, then close(): seen here, or its close() hangs up on
            # this connection; either way no request waits at a suspended gate for a resume
            self.close()
            raise ConnectionError(f"policy gate {self.path}: cancelled")
        try:
            self._sock.sendall(f"{hello}{command}\n".encode())
            answer = self._reader.readline()
        except OSError as exc:
            self.close()
            raise ConnectionError(f"policy gate {self.path}: {exc}") from None
        if not answer:
            self.close()
            raise ConnectionError(f"policy gate {self.path} closed")
        if answer.strip() == "refused":
            self.close()
            raise ConnectionError(f"policy gate {self.path} refused the connection: "
                                  f"{'not the gate key' if self.key else 'no gate key'} (RunConfig.policy_gate_key)")
        return answer.strip()


def connect(path: str) -> socket.socket:
    """A connection to a gate at a unix socket path or ``tcp://HOST:PORT``."""
    if path.startswith("tcp://"):
        host, _, port = path[len("tcp://"):].rpartition(":")
        sock = socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S)
        no_delay(sock)
        return sock
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(CONNECT_TIMEOUT_S)
    try:
        sock.connect(path)
    except OSError:
        sock.close()
        raise
    return sock


def no_delay(sock: socket.socket) -> None:
    """One short line each way per model request: no Nagle delay on TCP."""
    if sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
