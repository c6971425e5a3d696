"""The process of a ``command`` agent (``agents.command``): how it is started, talked to
over its pipes, and stopped.

One ``AgentProcess`` per running agent command: its stdin and stdout pipes, a thread reading
stdout line by line into a queue (a buffered pipe cannot be select()ed reliably), and one
draining its stderr, so that the pipe never fills and blocks the agent. Both are bounded,
whatever the agent writes: a line longer than ``MAX_REPLY_BYTES`` is not read into memory
(the reader stops at the limit and the attempt fails with a protocol error), at most
``LINES_KEPT`` lines wait in the queue (a reply answers one request: more unread lines hold a
stray, and the reader waits, the agent blocked on its full pipe, until the next request finds
it), and of stderr only the last ``STDERR_KEPT`` bytes are kept, in memory (nothing goes to
the host's disk). ``exchange`` writes one line and waits for one back, both by one deadline (its stdin
is non-blocking: an agent that does not read it cannot hold a large observation's write past
the deadline, ``NoReply``); a line read while no
request waited is a stray (``StrayLine``); a process that cannot carry on the conversation
raises ``ProcessBroken``, ``ProcessKilled`` when its bubblewrap was killed by a signal, which
only something outside its namespace can send.

The command runs in a PID namespace and a session of its own, with the host's VM folders, the
runner's caches and the run's task and answer files hidden (``agents.agent_sandbox``,
bubblewrap): it cannot signal its worker, nor anything but what it started itself.

Stopping (``stop``, also a ``weakref.finalize``, so a collected agent stops its process):
EOF on stdin, then SIGTERM, then SIGKILL to the whole process group. Each agent runs in its
own session (a Ctrl-C at the terminal is the runner's to handle, not the agent's) and its
namespace dies with its worker's thread: a worker that dies by another's hand takes its
agents, and everything they started, with it. From the fork on, not only once bwrap has set
its parent-death signal: the fork runs ``setpriv --pdeathsig KILL`` and a shell that exits
unless its parent is still the worker before it execs bwrap (``sandbox_processes.guarded``,
as for a VM's sandbox), so a worker SIGKILLed as it starts an agent leaves no agent running.
"""

from __future__ import annotations

import os
import queue
import select
import signal
import subprocess
import threading
import time
import weakref
from typing import IO

from ..pool.providers import orphans
from ..pool.providers.sandbox_processes import guarded
from .agent_sandbox import in_own_pid_namespace
from .episode import AgentError

#: characters of the agent's stderr quoted in an error
STDERR_TAIL = 2000
#: bytes of the agent's stderr kept, the tail (room for STDERR_TAIL characters of UTF-8)
STDERR_KEPT = 4 * STDERR_TAIL
#: the longest line the agent may write (its reply: one JSON action), newline included
MAX_REPLY_BYTES = 16 * 2**20
#: lines read from stdout that wait for the conversation to take them: a reply, and what
#: follows it (a stray line, the EOF); the reader waits while this many do
LINES_KEPT = 2
#: how much of stdout and stderr one read takes
_CHUNK = 64 * 1024
#: seconds a stopping agent gets after its stdin closes, and again after SIGTERM
STOP_GRACE_S = 1.0


class ProcessBroken(Exception):
    """The agent process cannot carry on the conversation (exited, hung, closed a pipe)."""

    def __init__(self, message: str, gone: bool = True) -> None:
        super().__init__(message)
        #: False when it is alive but silent (a timeout)
        self.gone = gone


class NoReply(ProcessBroken):
    """No reply came within the time given: the agent is alive but silent (a hang)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, gone=False)


class ProcessKilled(ProcessBroken):
    """Its bubblewrap died of a signal: sent from outside its namespace (an operator, the OOM
    killer), since what runs inside can signal only its own namespace and session."""


class _TooLong(str):
    """What the stdout reader queues instead of a line longer than MAX_REPLY_BYTES: its
    first bytes, for the message (the reader stops there)."""


class StrayLine(Exception):
    """The agent wrote a line no observation asked for: it and we disagree on the turn."""


class AgentProcess:
    """One running agent command: its pipes and the threads reading stdout and stderr."""

    def __init__(self, argv: list[str], command: str, hidden: tuple[str, ...] = ()) -> None:
        #: its namespace's init, which its bubblewrap leaves unreaped as it ends: ours to reap
        init = orphans.InitReport(in_own_pid_namespace(argv, hidden))
        try:
            self._popen = subprocess.Popen(
                guarded(init.argv, os.getpid()), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, start_new_session=True, pass_fds=init.pass_fds,
            )
        except OSError as exc:
            init.reap()
            raise AgentError(f"cannot start --agent-cmd {command!r}: {exc.strerror or exc}") from None
        self._lines: queue.Queue[str | None] = queue.Queue(maxsize=LINES_KEPT)
        #: set when the process is stopped: the stdout reader no longer waits for room
        self._stopped = threading.Event()
        #: the last STDERR_KEPT bytes of its stderr
        self._stderr_tail = bytearray()
        self._stderr_reader = threading.Thread(target=_keep_tail, args=(self._popen.stderr, self._stderr_tail),
                                               name=f"agent-cmd-stderr-{self._popen.pid}", daemon=True)
        self._stderr_reader.start()
        # Written without blocking (``_write``): an agent that does not read its stdin must
        # not hold a large observation's write past the reply's deadline.
        os.set_blocking(self._popen.stdin.fileno(), False)
        #: the reader found EOF while strays were drained (``stray_line``)
        self._eof = False
        #: an observation was sent: from then on every line read between requests is a stray
        self._asked = False
        # A reader thread, because a buffered pipe cannot be select()ed reliably; it
        # ends at EOF, which stop() guarantees by ending the process.
        threading.Thread(target=_read_lines, args=(self._popen.stdout, self._lines, self._stopped),
                         name=f"agent-cmd-{self._popen.pid}", daemon=True).start()
        # Not a method of self: the finalizer must not keep this object alive.
        self.stop = weakref.finalize(self, _stop, self._popen, self._stopped, init)

    def alive(self) -> bool:
        """Whether the process is still running."""
        return self._popen.poll() is None

    def kill(self) -> None:
        """Stop it at once: SIGKILL to its process group (a hung agent gets no grace), then ``stop``."""
        with orphans.adopting():  # its init, orphaned as its bubblewrap dies, comes to us (``_stop``)
            _signal_group(self._popen.pid, signal.SIGKILL)
            self.stop()

    def stray_line(self) -> str | None:
        """The first line the agent wrote that no request is waiting for (every line read
        so far is one when no request is under way), or None; an EOF found meanwhile is kept
        for the next ``exchange``."""
        stray = None
        for _ in range(LINES_KEPT + 1):  # what waits, and what the reader held meanwhile
            try:
                line = self._lines.get_nowait()
            except queue.Empty:
                break
            if line is None:
                self._eof = True
            elif stray is None:
                stray = _too_long(line) if isinstance(line, _TooLong) else line.rstrip("\r\n")
        return stray

    def exchange(self, line: str, timeout_s: float) -> str:
        """Write one line, read one line back; ProcessBroken when that is impossible, StrayLine when
        a line came that no request asked for."""
        # a line before the first request is read as its reply (a banner that is not JSON is
        # refused as such; one that is makes the real reply a stray line, found next time)
        stray = self.stray_line() if self._asked else None
        if stray is not None:
            raise StrayLine(f"protocol error: before this observation was sent the agent wrote a line "
                         f"no observation asked for: {stray[:300]!r} (write exactly one JSON line per "
                         "observation; logs go to stderr)")
        if self._eof:
            raise self._broken("the agent closed its stdout")
        deadline = time.monotonic() + timeout_s
        try:
            self._write(line.encode("utf-8") + b"\n", deadline)
            self._asked = True
        except (BrokenPipeError, OSError, ValueError):
            raise self._broken("the agent process is gone") from None
        try:
            reply = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise NoReply(f"no reply within {timeout_s:g} s") from None
        if reply is None:
            raise self._broken("the agent closed its stdout without replying")
        if isinstance(reply, _TooLong):  # alive, but its reply cannot be read: no fresh try
            raise ProcessBroken(f"protocol error: {_too_long(reply)}", gone=False)
        return reply.rstrip("\r\n")

    def _write(self, data: bytes, deadline: float) -> None:
        """Write ``data`` to its stdin by ``deadline`` (monotonic), or NoReply: an agent that
        does not read leaves a line longer than the pipe holds unwritten."""
        fd = self._popen.stdin.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        view = memoryview(data)
        while view:
            left = deadline - time.monotonic()
            if left <= 0:
                raise NoReply(f"the agent did not read its observation ({len(data) - len(view)} of "
                              f"{len(data)} bytes written) in time")
            if not poller.poll(left * 1000):
                continue
            try:
                view = view[os.write(fd, view):]
            except BlockingIOError:
                continue

    def stderr_report(self) -> str:
        """``; stderr tail: ...`` for error messages, or "; its stderr is empty". Called once
        the process is stopped, the tail is complete (what it wrote until its stderr closed)."""
        self._stderr_reader.join(timeout=STOP_GRACE_S)
        text = bytes(self._stderr_tail).decode("utf-8", "replace")[-STDERR_TAIL:].strip()
        return f"; stderr tail:\n{text}" if text else "; its stderr is empty"

    def _broken(self, what: str) -> ProcessBroken:
        """``what`` happened to the conversation: ProcessKilled when its bubblewrap died of a
        signal (from outside: nothing inside can signal it), else ProcessBroken."""
        try:
            # EOF usually means it is exiting; give it a moment to report a status.
            code = self._popen.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            return ProcessBroken(f"{what} (it is still running)")
        if code < 0:  # bubblewrap itself
            return ProcessKilled(f"{what} (its bubblewrap was killed by signal {-code}, from outside its "
                                 "namespace: not the agent's doing)")
        if code > 128:  # bubblewrap passes a signal on as 128 + its number, as a shell does
            return ProcessBroken(f"{what} (it exited with status {code}: killed by signal {code - 128}?)")
        return ProcessBroken(f"{what} (it exited with status {code})")


def _read_lines(stream: IO[bytes], lines: "queue.Queue[str | None]", stopped: threading.Event) -> None:
    """Queue each line of ``stream``, then None at its EOF; while LINES_KEPT lines wait, read
    no further (the agent blocks on its full pipe) until one is taken or the process stops."""
    # The stream is closed here, not by _stop: closing a pipe another thread is reading
    # would block until that read returns anyway.
    with stream:
        while True:
            line = stream.readline(MAX_REPLY_BYTES + 1)
            if not line:
                break
            if len(line) > MAX_REPLY_BYTES:
                # not read further: the agent blocks on a full pipe until it is stopped
                _put(lines, _TooLong(line[:300].decode("utf-8", "replace")), stopped)
                return
            if not _put(lines, line.decode("utf-8", "replace"), stopped):
                return  # stopped: what it writes now is nobody's
    _put(lines, None, stopped)


def _put(lines: "queue.Queue[str | None]", item: str | None, stopped: threading.Event) -> bool:
    """Put ``item`` once there is room; False, dropping it, when the process stopped first."""
    while not stopped.is_set():
        try:
            lines.put(item, timeout=0.2)
            return True
        except queue.Full:
            continue
    return False


def _too_long(start: str) -> str:
    return (f"the agent wrote a line longer than {MAX_REPLY_BYTES} bytes, the most one line (one JSON action) "
            f"may take; it starts {start[:200]!r}")


def _keep_tail(stream: IO[bytes], tail: bytearray) -> None:
    """Read ``stream`` to its end, keeping its last STDERR_KEPT bytes in ``tail``."""
    with stream:
        while True:
            chunk = stream.read1(_CHUNK)
            if not chunk:
                return
            tail += chunk
            if len(tail) > STDERR_KEPT:
                del tail[:-STDERR_KEPT]


def _stop(popen: subprocess.Popen, stopped: threading.Event, init: orphans.InitReport) -> None:
    """EOF on stdin, then SIGTERM, then SIGKILL to the agent's whole process group; its
    namespace's init reaped. The worker is a child subreaper meanwhile (only then: it runs
    plugins' code, whose orphans are not its to keep), so the init comes to it as its
    bubblewrap ends, not to a pid 1 that may reap nothing (a container's): one zombie per
    agent. An agent that ended on its own before leaves its init to pid 1."""
    stopped.set()  # the stdout reader drops what it still reads, and ends at its EOF
    with orphans.adopting():
        try:
            popen.stdin.close()
        except OSError:
            pass
        try:
            popen.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            _signal_group(popen.pid, signal.SIGTERM)
            try:
                popen.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                _signal_group(popen.pid, signal.SIGKILL)
                popen.wait()
        # Its bubblewrap's group; what the agent started dies with its namespace.
        _signal_group(popen.pid, signal.SIGKILL)
        init.reap()


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
