"""The ``command`` agent: any executable that speaks JSON lines on stdin/stdout chooses the actions.

``--agent-cmd "python my_agent.py"`` (split like a shell would, but run without one) starts
one long-lived process per env loop, on the first turn; it serves episode after episode and
is started again if it died. The protocol, one JSON object per line in each direction:

    we send, every turn    {"type": "observation", "task_id": "hello-file", "mode": "shell",
                            "turn": 1, "observation": {...},
                            "task": {"id": ..., "mode": ..., "instruction": ..., ...}}
    it replies             one line of JSON: the action

``task`` (the task as written in the task file, without its mode's answer key,
``Env.answer_fields``: HumanEval's tests and canonical solution, a shell task's check and
reference …, which only the oracle gets) comes only with turn 1, which also marks the start
of a new episode. The action is any JSON value, as the mode expects it: a string
for ``py`` and ``math``, ``{"command": "ls"}`` or ``"DONE"`` for ``shell``. Logs go to stderr,
never stdout. When its stdin closes, the agent should exit. A complete shell agent::

    import json, sys
    for line in sys.stdin:
        msg = json.loads(line)
        done = msg["turn"] > 1 and msg["observation"].get("returncode") is not None
        print(json.dumps("DONE" if done else {"command": "ls ~"}), flush=True)

A reply that is not JSON, a process that exits or closes its stdout, or no reply within
``--task-timeout`` fails the attempt with ``AgentError`` quoting the tail of the agent's
stderr; the process is then stopped, since it and we no longer agree on which turn it is.
So does a line no observation asked for (a second line after a reply, or one written once
the episode ended): before each observation is sent, and once the episode is graded
(``end_episode``), every line already read from the agent is a stray line; the attempt
fails with a protocol error quoting it, and the process is stopped, so that a stray line is
never taken as the answer to a later turn nor reaches another task's episode. One the agent
writes after its episode was checked is found before the next episode's first observation:
that process is stopped (a warning says so) and the new episode starts with a fresh one.
stderr goes to a temporary file, not a pipe that could fill and block the agent.

No agent process outlives its agent: each runs in its own session (a Ctrl-C at the terminal
is the runner's to handle, not the agent's), and a ``weakref.finalize`` stops its whole
process group when the agent is garbage-collected or the worker exits — EOF on stdin
first, then SIGTERM, then SIGKILL. A worker killed outright (task timeout, SIGKILL) has its
process tree, this process included, killed by the runner; a worker that dies by another's
hand (the OOM killer, an operator) takes its agents with it: each starts with a parent-death
signal (SIGKILL), though what an agent started itself outlives it then.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
import weakref
from typing import IO, Any

from ..errors import ConfigError
from .base import Agent
from .episode import AgentError

log = logging.getLogger(__name__)

#: characters of the agent's stderr quoted in an error
STDERR_TAIL = 2000
#: seconds a stopping agent gets after its stdin closes, and again after SIGTERM
STOP_GRACE_S = 1.0


class CommandAgent(Agent):
    """An external program, driven over JSON lines on its stdin and stdout."""

    name = "command"
    options = frozenset({"agent_cmd"})

    def __init__(self, config) -> None:
        super().__init__(config)
        self.command = config.agent_cmd
        #: seconds to wait for one reply; the runner's task timeout also covers a hang
        self.reply_timeout_s = config.task_timeout
        self._process: _AgentProcess | None = None
        self._task = None
        self._turn = 0

    @classmethod
    def check_config(cls, config) -> None:
        """Raise ConfigError before the run when --agent-cmd is missing or cannot be run."""
        argv = _split(config.agent_cmd)
        if shutil.which(argv[0]) is None:
            raise ConfigError(f"--agent-cmd: {argv[0]!r} is not an executable file "
                              "(nor a program on PATH)")

    def reset(self, task) -> None:
        """Start a new episode; the agent learns of it from the next message's turn 1."""
        self._task = task
        self._turn = 0

    def act(self, observation: dict[str, Any]) -> Any:
        """Send the observation, return the JSON value the agent answers with."""
        task = self._task
        self._turn += 1
        message: dict[str, Any] = {"type": "observation", "task_id": task.id, "mode": task.mode,
                                   "turn": self._turn, "observation": observation}
        if self._turn == 1:
            message["task"] = {"id": task.id, "mode": task.mode, "seed": task.seed,
                               "tags": list(task.tags), **task.payload}
            self._drop_strays_of_an_earlier_episode()
        reused = self._process is not None
        process = self._running_process()
        where = f"--agent-cmd {self.command!r}, task {task.id!r} turn {self._turn}"
        line_out = json.dumps(message, default=str)
        try:
            try:
                line = process.exchange(line_out, self.reply_timeout_s)
            except _Broken as exc:
                if not (exc.gone and reused and self._turn == 1):
                    raise
                # It was exiting after its last episode when we looked (or it serves one
                # episode per process): a new episode deserves a fresh process.
                self._stop_process()
                process = self._running_process()
                line = process.exchange(line_out, self.reply_timeout_s)
        except _Stray as exc:
            self._stop_process()
            raise AgentError(f"{where}: {exc}{process.stderr_report()}") from None
        except _Broken as exc:
            # Stopped before the stderr tail is read, so the tail is complete.
            self._stop_process()
            raise AgentError(f"{where}: {exc}{process.stderr_report()}") from None
        try:
            return json.loads(line)
        except ValueError:
            self._stop_process()
            raise AgentError(
                f"{where}: the reply is not JSON: {line[:300]!r} (write one JSON action per line "
                f"to stdout; logs go to stderr){process.stderr_report()}"
            ) from None

    def end_episode(self) -> None:
        """The episode is graded: a line the agent wrote after its last reply answers no
        observation; the attempt fails with a protocol error quoting it."""
        process = self._process
        if process is None or self._task is None:
            return
        stray = process.stray_line()
        if stray is not None:
            self._stop_process()
            raise AgentError(
                f"--agent-cmd {self.command!r}, task {self._task.id!r}: protocol error: after its reply "
                f"to turn {self._turn} the agent wrote a line no observation asked for: {stray[:300]!r} "
                f"(write exactly one JSON line per observation){process.stderr_report()}")

    def close(self) -> None:
        """Stop the agent process now (it is also stopped when the agent is collected)."""
        self._stop_process()

    def _drop_strays_of_an_earlier_episode(self) -> None:
        """A line written after the last episode was checked belongs to no episode: the
        process that wrote it is stopped, and this episode gets a fresh one."""
        if self._process is None:
            return
        stray = self._process.stray_line()
        if stray is not None:
            log.warning("--agent-cmd %r wrote a line after its last episode ended, which no observation "
                        "asked for: %r; stopping it, task %r starts with a new process",
                        self.command, stray[:300], self._task.id)
            self._stop_process()

    def _running_process(self) -> "_AgentProcess":
        if self._process is not None and not self._process.alive():
            self._stop_process()
            log.warning("--agent-cmd %r exited between episodes; starting it again", self.command)
        if self._process is None:
            # Split here, not in __init__: the worker constructs agents outside any attempt,
            # where a ConfigError would end the env loop instead of becoming a record.
            self._process = _AgentProcess(_split(self.command), self.command)
        return self._process

    def _stop_process(self) -> None:
        if self._process is not None:
            self._process.stop()
            self._process = None


class _Broken(Exception):
    """The agent process cannot carry on the conversation (exited, hung, closed a pipe)."""

    def __init__(self, message: str, gone: bool = True) -> None:
        super().__init__(message)
        #: False when it is alive but silent (a timeout)
        self.gone = gone


class _Stray(Exception):
    """The agent wrote a line no observation asked for: it and we disagree on the turn."""


class _AgentProcess:
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
        """Write one line, read one line back; _Broken when that is impossible, _Stray when
        a line came that no request asked for."""
        # a line before the first request is read as its reply (a banner that is not JSON is
        # refused as such; one that is makes the real reply a stray line, found next time)
        stray = self.stray_line() if self._asked else None
        if stray is not None:
            raise _Stray(f"protocol error: before this observation was sent the agent wrote a line "
                         f"no observation asked for: {stray[:300]!r} (write exactly one JSON line per "
                         "observation; logs go to stderr)")
        if self._eof:
            raise _Broken(f"the agent closed its stdout ({self._exit_description()})")
        try:
            self._popen.stdin.write(line + "\n")
            self._popen.stdin.flush()
            self._asked = True
        except (BrokenPipeError, OSError, ValueError):
            raise _Broken(f"the agent process is gone ({self._exit_description()})") from None
        try:
            reply = self._lines.get(timeout=timeout_s)
        except queue.Empty:
            raise _Broken(f"no reply within {timeout_s:g} s", gone=False) from None
        if reply is None:
            raise _Broken(f"the agent closed its stdout without replying ({self._exit_description()})")
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


def _split(command: str | None) -> list[str]:
    """The argv of --agent-cmd; ConfigError when it is missing or unparseable."""
    if not command or not command.strip():
        raise ConfigError("--agent command needs --agent-cmd, e.g. --agent-cmd 'python my_agent.py'")
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise ConfigError(f"--agent-cmd {command!r}: {exc}") from None
    if not argv:
        raise ConfigError("--agent-cmd is empty")
    return argv
