"""The policy gate: model requests pass it, so a weight update can stop them and say which
policy version each turn was generated with.

The gate lives in the trainer's process (one per engine, shared by every scheduler on it); the
agents in the worker processes reach it over a unix socket whose path travels to them in
``RunConfig.policy_gate``, or over TCP (``tcp://HOST:PORT``, ``PolicyGate(host=...)``) when
they run on other hosts (the ray backend). One connection per env loop (the agent's side,
``GateClient``, is ``gate_client.py``), a line protocol::

    agent                          gate
    "key <secret>\\n"   ─►  (first line of every connection) a wrong or missing key: the
                                     connection is closed, "refused" said, and a warning logged
    "begin [<key>]\\n"   ─►  waits while suspended ─►  "go <version>\\n"
    … the model request (streamed) …
                         ◄─  "abort\\n"   (unsolicited, at most once, only between go and end:
                                           suspend(abort=True))
    "end [<kept>|-]\\n"  ─►  "ok\\n" | "redo\\n" (the request was aborted)

``suspend()`` closes the gate and waits until no request is between begin and end;
``suspend(abort=True)`` returns at once: it marks the requests in flight and sends each of
their connections "abort", on which the agent closes its streaming HTTP request, so the
model server stops decoding it (vLLM aborts a request whose client hung up). The agent then
asks again after ``resume`` (from scratch, or continuing its partial reply). Every line the
gate sends is written under its lock, so "abort" always falls between "go" and the answer to
"end". ``resume(version)`` reopens it with a new policy version: a whole number, never below
the current one (``check_version``).

``<key>`` names the sample a request belongs to (the engine's key of an RL group member);
``<kept>`` is the oldest policy version among the tokens the agent keeps after this request
(its reply, or a partial reply it will continue; none when an aborted turn starts over). The
gate keeps the oldest per key (``oldest_version``): how a scheduler judges a group's
staleness by the versions that sampled its tokens, running or complete. ``-`` says the
request got no answer at all within its timeout: ``unanswered`` counts them, how a scheduler tells a hung or stopped server from long replies
(``rl/budget.py``). A worker that dies between
begin and end closes its connection, which counts as its end: a killed process never holds
the gate shut.

``<secret>`` is the gate's ``key``, random per gate, which reaches the workers as its address
does (``RunConfig.policy_gate_key``: pickled to them, never in config.json, a log line or an
environment variable): whoever else reaches the port (an agent's code in a sandbox with a
network, another user of the host: TCP listens to every process that can route to it) could
otherwise say "begin" and never "end", and no ``suspend()`` would return. A unix-socket gate
asks for it too, though its folder is the trainer's user's alone (``mkdtemp``: 0700) and
hidden from every sandbox (``GATE_FOLDER_PREFIX``).
"""

from __future__ import annotations

import hmac
import logging
import operator
import os
import secrets
import socket
import tempfile
import threading
from collections import Counter
from pathlib import Path
from typing import Any

from .errors import ConfigError
from .gate_client import CONNECT_TIMEOUT_S, GateClient, no_delay

log = logging.getLogger("parallel_rollout")

__all__ = ["GATE_FOLDER_PREFIX", "GateClient", "PolicyGate", "whole_number_from"]  # GateClient: gate_client.py


#: the temp folder's subfolder a local gate listens in (``pr-gate-*``): hidden from a command
#: agent's program (``pool.providers.host_dirs.RUNNER_SOCKET_FOLDERS``), which could hold a
#: request "in flight" there and a ``suspend()`` with it
GATE_FOLDER_PREFIX = "pr-gate-"

#: how many settled samples (``forget``) the gate remembers, newest kept: a request of one
#: that begins after it was settled (it waited at a suspended gate, or the drop's cancel had
#: yet to reach its agent) keeps nothing at its "end". Such a request comes within a cancel's
#: reach of the settling, not thousands of settled samples later
SETTLED_REMEMBERED = 16384


class PolicyGate:
    """The trainer's side: open/suspended, the policy version, requests in flight."""

    def __init__(self, version: int = 0, host: str | None = None) -> None:
        """``host``: serve on TCP at that address (a free port) instead of a unix socket."""
        self._cond = threading.Condition()
        #: what every connection must say first ("key <key>"); hand it to the clients as the
        #: address is (``RunConfig.policy_gate_key``)
        self.key = secrets.token_hex(16)
        #: connections closed for a wrong or missing key
        self.refused = 0
        self._open = True
        self._closed = False
        self.version = version
        self._in_flight: set[int] = set()
        #: requests held at ``begin`` while the gate is suspended
        self._waiting = 0
        self._aborted: set[int] = set()
        #: connection id -> (its socket, the key of its request in flight)
        self._peers: dict[int, tuple[socket.socket, str | None]] = {}
        #: sample key -> the oldest policy version its requests got
        self._oldest: dict[str, int] = {}
        #: the samples settled last (``SETTLED_REMEMBERED``), in the order settled: a dict as
        #: an ordered set
        self._settled: dict[str, None] = {}
        #: requests let through, those that ended keeping tokens of a reply (the model
        #: answered: "end <kept>"), and replies thrown away after an abort
        self.requests = 0
        self.replies = 0
        self.aborted = 0
        #: the same two counts by who asked: a sample key's part before its first ":" (an RL
        #: scheduler's samples name it: ``train:…``, ``val@s1:…``), so each scheduler of an
        #: engine counts its own (``requests_of``)
        self._requests_by: Counter[str] = Counter()
        self._aborted_by: Counter[str] = Counter()
        #: connection id -> who asked its request in flight (kept when ``forget`` clears its key)
        self._askers: dict[int, str] = {}
        #: requests that ended with no answer from the server within their timeout ("end -")
        self.unanswered = 0
        self._folder: str | None = None
        if host is None:
            self._folder = tempfile.mkdtemp(prefix=GATE_FOLDER_PREFIX)
            self.path = str(Path(self._folder) / "gate.sock")
            self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self._listener.bind(self.path)
            self._listener.listen(256)
        else:
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            self._listener = socket.create_server((host, 0), family=family, backlog=256)
            shown = f"[{host}]" if family == socket.AF_INET6 else host
            self.path = f"tcp://{shown}:{self._listener.getsockname()[1]}"
        self._conns: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, name="policy-gate", daemon=True)
        self._thread.start()

    @property
    def in_flight(self) -> int:
        """Model requests between begin and end right now."""
        with self._cond:
            return len(self._in_flight)

    @property
    def waiting(self) -> int:
        """Model requests held at the gate right now (it is suspended), not yet let through."""
        with self._cond:
            return self._waiting

    @property
    def is_open(self) -> bool:
        """Whether new model requests may start."""
        with self._cond:
            return self._open

    def suspend(self, abort: bool = False, timeout: float | None = None) -> None:
        """Stop new model requests; wait for those in flight (or, with ``abort``, mark them to
        be redone and return at once). TimeoutError when they outlast ``timeout``."""
        with self._cond:
            self._open = False
            if abort:
                for ident in self._in_flight:
                    self._abort_locked(ident)
                self._in_flight.clear()
                return
            if not self._cond.wait_for(lambda: not self._in_flight or self._closed, timeout):
                raise TimeoutError(f"{len(self._in_flight)} model request(s) still in flight after {timeout} s")

    def wait_aborted(self, timeout: float) -> bool:
        """Wait (at most ``timeout`` seconds) until every request aborted so far has ended:
        its agent said "end" with what it keeps, or hung up. False on timeout. What
        ``oldest_version`` says is then complete, even right after ``suspend(abort=True)``."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._aborted or self._closed, timeout)

    def requests_of(self, asker: str) -> tuple[int, int]:
        """(requests let through, of them aborted) of the samples whose keys start with
        ``asker:`` (an RL scheduler's sample prefix)."""
        with self._cond:
            return self._requests_by[asker], self._aborted_by[asker]

    def oldest_version(self, key: str) -> int | None:
        """The oldest policy version among the tokens sample ``key`` kept; None when none yet."""
        with self._cond:
            return self._oldest.get(key)

    def forget(self, key: str) -> None:
        """Drop what is kept of sample ``key`` (it is settled), and what a request of it still
        in flight would keep at its "end" (a dropped group's member the cancel has yet to
        reach), or a request of it that begins later: it came back, kept for the life of the gate."""
        with self._cond:
            self._oldest.pop(key, None)
            self._settled.pop(key, None)
            self._settled[key] = None
            if len(self._settled) > SETTLED_REMEMBERED:
                del self._settled[next(iter(self._settled))]
            for ident, (conn, sample) in list(self._peers.items()):
                if sample == key:
                    self._peers[ident] = (conn, None)

    def _abort_locked(self, ident: int) -> None:
        """Mark a request aborted and tell its agent (under the lock: see the docstring)."""
        self._aborted.add(ident)
        peer = self._peers.get(ident)
        if peer is not None:
            try:
                peer[0].sendall(b"abort\n")
            except OSError:
                pass  # its agent is gone: the connection's end counts as the request's end

    def resume(self, version: int | None = None) -> None:
        """Let model requests start again, generated by policy ``version`` from now on
        (``check_version``; None keeps the version). Without a ``suspend()`` before, it only
        moves the version on: requests under way keep the one they began with."""
        with self._cond:
            if version is not None:
                self.version = self.check_version(version)
            self._open = True
            self._cond.notify_all()

    def advance(self, version: int) -> tuple[int, set[str]]:
        """Move the version on to ``version`` (``check_version``), the gate left open or
        suspended as it is: (the version before, the samples of the requests in flight that
        began under it or an older one). One step under the lock, so every request that begins
        after it is of ``version``, and those it returns are all that began before."""
        with self._cond:
            version, before = self.check_version(version), self.version
            self.version = version
            return before, ({sample for _, sample in self._peers.values() if sample} if version > before else set())

    def move_on(self, version: int) -> None:
        """Move the version on to ``version`` when it is past the current one, the gate left
        open or suspended as it is (a restored scheduler's saved version: ``load_state_dict``)."""
        with self._cond:
            self.version = max(self.version, version)

    def check_version(self, version: Any) -> int:
        """``version`` as the int a resume may set; ConfigError naming ``policy_version``
        unless it is a whole number >= 0 (an int, or an integer type ``operator.index`` takes,
        numpy's; not a bool) and not below the current version. Every request's answer
        carries it, so it must be an int, and tokens are judged by it (a group's staleness, a
        segment's ``versions``): a version that went back would make old tokens look new. A
        trainer that rolls its weights back gives the old weights a new, higher version."""
        with self._cond:
            current = self.version
        return whole_number_from("policy_version", version, current, "versions only go up (they date every "
                                 "token); give rolled-back weights a new version", noun="version")

    def close(self) -> None:
        """Stop serving; waiting agents are told the gate is gone."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        try:
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() under way
        except OSError:
            pass
        try:
            self._listener.close()
        except OSError:
            pass
        for conn in list(self._conns):
            try:
                conn.shutdown(socket.SHUT_RDWR)
                conn.close()
            except OSError:
                pass
        self._thread.join(2)
        if self._folder is not None:
            try:
                os.unlink(self.path)
                os.rmdir(self._folder)
            except OSError:
                pass

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return  # closed
            no_delay(conn)
            self._conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), name="policy-gate-conn", daemon=True).start()

    def _admitted(self, conn: socket.socket, reader) -> bool:
        """Whether the connection's first line is "key <the gate's key>" (read within the
        connect timeout); else it is refused and logged, and the caller closes it."""
        conn.settimeout(CONNECT_TIMEOUT_S)
        try:
            line = reader.readline(len(self.key) + 16)
        except (OSError, UnicodeDecodeError):
            line = ""
        command, _, given = line.strip().partition(" ")
        if command == "key" and hmac.compare_digest(given.encode("ascii", "replace"), self.key.encode()):
            conn.settimeout(None)
            return True
        with self._cond:
            self.refused += 1
        try:
            peer = conn.getpeername() or "a local process"
        except OSError:
            peer = "a peer gone"
        log.warning("policy gate %s: refused a connection from %s without the gate's key (its first line "
                    "was %s)", self.path, peer, "a key that is not the gate's" if command == "key" else
                    repr(line[:40]) if line else "nothing")
        try:
            conn.sendall(b"refused\n")
        except OSError:
            pass
        return False

    def _serve(self, conn: socket.socket) -> None:
        ident = id(conn)
        reader = conn.makefile("r", encoding="ascii", newline="\n")
        try:
            if not self._admitted(conn, reader):
                return
            for line in reader:
                command, _, key = line.strip().partition(" ")
                if command == "begin":
                    with self._cond:
                        self._waiting += 1
                        try:
                            self._cond.wait_for(lambda: self._open or self._closed)
                        finally:
                            self._waiting -= 1
                        if self._closed:
                            return
                        if _hung_up(conn):  # cancelled while it waited: no request starts
                            return
                        self._in_flight.add(ident)
                        # a settled sample's late request keeps nothing at its end (``forget``)
                        self._peers[ident] = (conn, key if key and key not in self._settled else None)
                        self.requests += 1
                        self._askers[ident] = _asker(key)
                        self._requests_by[self._askers[ident]] += 1
                        conn.sendall(f"go {self.version}\n".encode())
                elif command == "forget":  # a new attempt of sample ``key``: what its earlier ones kept is not its
                    with self._cond:
                        self._oldest.pop(key, None)
                    conn.sendall(b"ok\n")
                elif command == "end":
                    unanswered, key = key == "-", "" if key == "-" else key
                    with self._cond:
                        self.unanswered += unanswered
                        peer = self._peers.get(ident)
                        if key and peer is not None and peer[1]:  # "end <kept version>"
                            self._oldest[peer[1]] = min(self._oldest.get(peer[1], int(key)), int(key))
                        self.replies += bool(key)
                        redo = ident in self._aborted
                        self._aborted.discard(ident)
                        self._in_flight.discard(ident)
                        self._peers.pop(ident, None)
                        self.aborted += redo
                        self._aborted_by[self._askers.pop(ident, "")] += redo
                        self._cond.notify_all()
                        conn.sendall(b"redo\n" if redo else b"ok\n")
        except OSError:
            pass
        finally:
            with self._cond:
                self._in_flight.discard(ident)
                self._aborted.discard(ident)
                self._peers.pop(ident, None)
                self._askers.pop(ident, None)
                self._cond.notify_all()
            if conn in self._conns:
                self._conns.remove(conn)
            try:
                reader.close()
                conn.close()
            except OSError:
                pass


def _asker(key: str | None) -> str:
    """Who a request's sample key belongs to: its part before the first ":" ("" for none)."""
    return key.partition(":")[0] if key and ":" in key else ""


def _hung_up(conn: socket.socket) -> bool:
    """Whether the peer closed ``conn`` (its end read, nothing more to come)."""
    try:
        return conn.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def whole_number_from(name: str, value: Any, current: int, why: str, noun: str | None = None) -> int:
    """``value`` as an int; ConfigError naming ``name`` unless it is a whole number >= 0 (an
    int, or an integer type ``operator.index`` takes, numpy's; not a bool) and not below
    ``current``, the current ``noun`` (``why`` says why it may not go back)."""
    if isinstance(value, bool):
        raise ConfigError(f"{name} must be a whole number >= 0, got {value!r}")
    try:
        number = operator.index(value)
    except TypeError:
        raise ConfigError(f"{name} must be a whole number >= 0, got {value!r} ({type(value).__name__})") from None
    if number < 0:
        raise ConfigError(f"{name} must be a whole number >= 0, got {number}")
    if number < current:
        raise ConfigError(f"{name} {number} is below the current {noun or name} {current}: {why}")
    return number
