"""The process of a ``command`` agent (``agents.command``): how it is started, talked to
over its pipes, and stopped.

One ``AgentProcess`` per running agent command: its stdin and stdout pipes, a thread reading
stdout line by line into a queue (a buffered text pipe cannot be select()ed reliably), and
its stderr in a temporary file, not a pipe that could fill and block the agent. ``exchange``
writes one line and waits for one back; a line read while no request waited is a stray
(``StrayLine``); a process that cannot carry on the conversation raises ``ProcessBroken``.

Stopping (``stop``, also a ``weakref.finalize``, so a collected agent stops its process):
EOF on stdin, then SIGTERM, then SIGKILL to the whole process group. Each agent runs in its
own session (a Ctrl-C at the terminal is the runner's to handle, not the agent's) and starts
with a parent-death signal (SIGKILL): a worker that dies by another's hand takes its agents
with it, though what an agent started itself outlives it then.
"""

from __future__ import annotations

import os
import queue
import shutil
import signal
import subprocess
import tempfile
import threading
import weakref
from typing import IO

from .episode import AgentError

#: characters of the agent's stderr quoted in an error
STDERR_TAIL = 2000
#: seconds a stopping agent gets after its stdin closes, and again after SIGTERM
STOP_GRACE_S = 1.0


class ProcessBroken(Exception):
    """The agent process cannot carry on the conversation (exited, hung, closed a pipe)."""

    def __init__(self, message: str, gone: bool = True) -> None:
        super().__init__(message)
        #: False when it is alive but silent (a timeout)
        self.gone = gone


class StrayLine(Exception):
    """The agent wrote a line no observation asked for: it and we disagree on the turn."""


class AgentProcess:
    """One running agent command: its pipes, its stderr file, and the thread reading stdout."""

    def __init__(self, argv: list[str], command: str) -> None:
        self._stderr = tempfile.TemporaryFile(prefix="pr-agent-stderr-")
        try:
            self._popen = subprocess.Popen(
                _dies_with_its_loop(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
                text=True, encoding="utf-8", errors="replace", bufsize=1, start_new_session=True,
            )
        except OSError as exc:
            self._stderr.close()
            raise AgentError(f"cannot start --agent-cmd {command!r}: {exc.strerror or exc}") from None
        self._lines: queue.Queue[str | None] = queue.Queue()
        #: the reader found EOF while strays were drained (``stray_line``)
        self._eof = False
        #: an observation was sent: from then on every line read between requests is a stray
        self._asked = False
        # A reader thread, because a buffered text pipe cannot be select()ed reliably; it
        # ends at EOF, which stop() guarantees by ending the process.
        threading.Thread(target=_read_lines, args=(self._popen.stdout, self._lines),
                         name=f"agent-cmd-{self._popen.pid}", daemon=True).start()
        # Not a method of self: the finalizer must not keep this object alive.
        self.stop = weakref.finalize(self, _stop, self._popen)

    def alive(self) -> bool:
        """Whether the process is still running."""
        return self._popen.poll() is None

    def stray_line(self) -> str | None:
        """The first line the agent wrote that no request is waiting for (every line read
        so far is one when no request is under way), or None; an EOF found meanwhile is kept
        for the next ``exchange``."""
        stray = None
        while True:
            try:
                line = self._lines.get_nowait()
            except queue.Empty:
                return stray
            if line is None:
                self._eof = True
            elif stray is None:
                stray = line.rstrip("\r\n")

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
            raise ProcessBroken(f"the agent closed its stdout ({self._exit_description()})")
        try:
            self._popen.stdin.write(line + "\n")
            self._popen.stdin.flush()
            self._asked = True
        except (BrokenPipeError, OSError, ValueError):
            raise ProcessBroken(f"the agent process is gone ({self._exit_description()})") from None
        try:
            reply = self._lines.get(timeout=timeout_s)
        except queue.Empty:
            raise ProcessBroken(f"no reply within {timeout_s:g} s", gone=False) from None
        if reply is None:
            raise ProcessBroken(f"the agent closed its stdout without replying ({self._exit_description()})")
        return reply.rstrip("\r\n")

    def stderr_report(self) -> str:
        """``; stderr tail: ...`` for error messages, or "" when it wrote nothing."""
        try:
            size = os.fstat(self._stderr.fileno()).st_size
            tail = os.pread(self._stderr.fileno(), STDERR_TAIL, max(0, size - STDERR_TAIL))
        except (OSError, ValueError):
            return ""
        text = tail.decode("utf-8", "replace").strip()
        return f"; stderr tail:\n{text}" if text else "; its stderr is empty"

    def _exit_description(self) -> str:
        try:
            # EOF usually means it is exiting; give it a moment to report a status.
            code = self._popen.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            return "it is still running"
        if code < 0:
            return f"it was killed by signal {-code}"
        return f"it exited with status {code}"


def _dies_with_its_loop(argv: list[str]) -> list[str]:
    """``argv`` under ``setpriv --pdeathsig KILL``: the kernel kills the agent when the env
    loop's thread that started it ends, the worker's death included (a worker killed from
    outside has no runner's hand on its tree, and its orphans would be init's). setpriv
    sets it and execs, rather than a ``preexec_fn``, which is unsafe in a threaded worker."""
    return [_SETPRIV, "--pdeathsig", "KILL", "--", *argv] if _SETPRIV else argv


#: util-linux's setpriv (./dev installs it); without it an orphan is possible, not a failure
_SETPRIV = shutil.which("setpriv")


def _read_lines(stream: IO[str], lines: "queue.Queue[str | None]") -> None:
    # The stream is closed here, not by _stop: closing a pipe another thread is reading
    # would block until that read returns anyway.
    with stream:
        for line in stream:
            lines.put(line)
    lines.put(None)


def _stop(popen: subprocess.Popen) -> None:
    """EOF on stdin, then SIGTERM, then SIGKILL to the agent's whole process group."""
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
    # Children the agent started (a shell wrapper's, a server it spawned) share its group.
    _signal_group(popen.pid, signal.SIGKILL)


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
