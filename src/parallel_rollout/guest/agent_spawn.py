"""How the guest agent starts a command's process: ``subprocess`` minus its start-up cost.

::

    agent_commands.run ──► spawn(argv, cwd, env, user, pass_fds, merge_stderr)
                              │ CPython 3.9-3.13: _posixsubprocess.fork_exec, as Popen calls it
                              │ any other Python: subprocess.Popen
                              ▼
                           Child (pid, args, stdout, stderr, returncode, poll, wait, kill)

**Why.** The agent starts afresh at every ``process`` VM reset, and ``import subprocess``
(with the ``locale``, ``re``, ``enum``, ``signal``, ``threading`` and ``selectors`` it
imports) was ~25 ms of the ~50 ms of CPU the agent's start took here: half of it. The
command itself starts the way ``Popen`` starts it, through the same C function with the
arguments ``Popen`` gives it: a vfork where it can, close_fds, its own session, the
commands' user set in the child (``user``: uid, gid, no supplementary groups), default
signal dispositions, an exec failure read back through a close-on-exec pipe and raised as the
``OSError`` ``Popen`` raises (``FileNotFoundError``, ``PermissionError``,
``NotADirectoryError`` for a working folder that is not one).

:data:`FAST` says which way this Python goes; ``fork_exec``'s arguments are private and
changed in 3.9 and 3.11, so a Python this file does not know uses ``subprocess.Popen``.

Standard library only: this file is copied next to ``server.py`` into every guest.
"""

from __future__ import annotations

import os
import sys

try:
    import _posixsubprocess
except ImportError:  # not CPython on POSIX
    _posixsubprocess = None

#: SIGKILL (and SIGSTOP) without the ``signal`` module (its enums cost ~10 ms to import)
try:
    from _signal import SIGKILL, SIGSTOP
except ImportError:
    from signal import SIGKILL, SIGSTOP

#: whether this Python's ``fork_exec`` takes the arguments :func:`_fork_exec` gives it
FAST = (_posixsubprocess is not None and sys.implementation.name == "cpython"
        and (3, 9) <= sys.version_info[:2] <= (3, 13))


class Child:
    """A started command, as much of ``subprocess.Popen``'s interface as the agent uses:
    ``pid``, ``args``, ``stdout``/``stderr`` (unbuffered binary files of its pipes; stderr
    None when merged), ``returncode`` (negative: the signal that ended it), ``poll()``,
    ``wait(timeout)`` (``subprocess.TimeoutExpired`` when it runs on), ``kill()``."""

    def __init__(self, pid: int, args, stdout, stderr) -> None:
        self.pid, self.args, self.stdout, self.stderr = pid, args, stdout, stderr
        self.returncode: int | None = None

    def poll(self) -> int | None:
        """The exit code once the command has exited (reaping it), else None."""
        if self.returncode is None:
            self._reap(os.WNOHANG)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Its exit code, waiting for it; ``timeout``: polling as ``Popen`` does (the agent
        waits through a pidfd first, ``agent_output.wait_exit``)."""
        if timeout is None:
            while self.returncode is None:
                self._reap(0)
            return self.returncode
        import time

        deadline, delay = time.monotonic() + timeout, 0.0005
        while self.poll() is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                import subprocess

                raise subprocess.TimeoutExpired(self.args, timeout)
            delay = min(delay * 2, remaining, 0.05)
            time.sleep(delay)
        return self.returncode

    def kill(self) -> None:
        """SIGKILL, unless it was already reaped (its pid may be another process's by now)."""
        if self.poll() is None:
            try:
                os.kill(self.pid, SIGKILL)
            except ProcessLookupError:
                pass

    def _reap(self, flags: int) -> None:
        try:
            pid, status = os.waitpid(self.pid, flags)
        except ChildProcessError:  # reaped elsewhere: its status is lost, as Popen says 0
            self.returncode = 0
            return
        if pid == self.pid:
            self.returncode = os.waitstatus_to_exitcode(status)


def spawn(argv: list[str], *, cwd: str, env: dict | None = None, user: tuple | None = None,
          pass_fds: tuple = (), merge_stderr: bool = False):
    """Start ``argv`` in a session of its own with its stdin on /dev/null and its output on
    pipes (stderr into stdout's when ``merge_stderr``); ``user``: ``(uid, gid)`` it runs as,
    with no supplementary groups. A :class:`Child`, or a ``subprocess.Popen`` where
    :data:`FAST` is False; the ``OSError`` ``Popen`` raises when it cannot start."""
    if not FAST:
        import subprocess

        switch = dict(user=user[0], group=user[1], extra_groups=[]) if user else {}
        return subprocess.Popen(argv, cwd=cwd, env=env, pass_fds=pass_fds, **switch,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
                                start_new_session=True)
    opened: list[int] = []  # every fd of ours to close, whatever happens

    def pipe() -> tuple[int, int]:
        ends = os.pipe()  # close-on-exec: fork_exec puts the child's ends on 0, 1, 2
        opened.extend(ends)
        return ends

    try:
        null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
        opened.append(null)
        out_read, out_write = pipe()
        err_read, err_write = (-1, out_write) if merge_stderr else pipe()
        errpipe_read, errpipe_write = pipe()
        while errpipe_write < 3:  # as Popen: not on a descriptor the child's stdio takes
            errpipe_write = os.dup(errpipe_write)
            opened.append(errpipe_write)
        pid = _fork_exec(argv, cwd, env, user,
                         (null, out_read, out_write, err_read, err_write, errpipe_read, errpipe_write),
                         tuple(sorted({*map(int, pass_fds), errpipe_write})))
        for fd in (null, out_write, err_write, errpipe_write):
            _close(fd, opened)
        failure = _read_all(errpipe_read)
        if failure:
            _raise_start_failure(pid, failure, argv[0], cwd)
        stdout = open(out_read, "rb", buffering=0)
        opened.remove(out_read)
        stderr = None
        if not merge_stderr:
            stderr = open(err_read, "rb", buffering=0)
            opened.remove(err_read)
        return Child(pid, argv, stdout, stderr)
    finally:
        for fd in opened:
            os.close(fd)


def _fork_exec(argv: list[str], cwd: str, env: dict | None, user: tuple | None,
               fds: tuple, keep: tuple) -> int:
    """``_posixsubprocess.fork_exec`` with the arguments ``Popen`` gives it on this Python."""
    null, out_read, out_write, err_read, err_write, errpipe_read, errpipe_write = fds
    program = os.fsencode(argv[0])
    if os.path.dirname(program):
        executables = (program,)
    else:  # what Popen (and os.execvpe) look through: the command's own PATH
        executables = tuple(os.path.join(os.fsencode(folder), program)
                            for folder in os.get_exec_path(env))
    env_list = None
    if env is not None:
        env_list = []
        for key, value in env.items():
            key = os.fsencode(key)
            if b"=" in key:
                raise ValueError("illegal environment variable name")
            env_list.append(key + b"=" + os.fsencode(value))
    uid, gid, groups = (user[0], user[1], []) if user else (None, None, None)
    head = (argv, executables, True, keep, cwd, env_list,
            null, -1, out_read, out_write, err_read, err_write, errpipe_read, errpipe_write,
            True, True)  # restore_signals, start_new_session
    if sys.version_info >= (3, 11):  # process_group and allow_vfork came in 3.11
        return _posixsubprocess.fork_exec(*head, -1, gid, groups, uid, -1, None, True)
    return _posixsubprocess.fork_exec(*head, gid, groups, uid, -1, None)


def _read_all(fd: int) -> bytes:
    """What the child wrote on the error pipe before its exec closed it."""
    parts = []
    while True:
        part = os.read(fd, 50000)
        if not part:
            return b"".join(parts)
        parts.append(part)


def _raise_start_failure(pid: int, failure: bytes, program: str, cwd: str) -> None:
    """Reap a child that never ran its program, and raise what ``Popen`` raises: the child
    wrote ``ExceptionName:hex errno:where`` (``noexec[:chdir]``: before its exec)."""
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass
    name, _, rest = failure.partition(b":")
    hex_errno, _, where = rest.partition(b":")
    if name != b"OSError" or not hex_errno:
        raise RuntimeError(f"cannot start {program}: {failure.decode('utf-8', 'replace')}")
    number = int(hex_errno, 16)
    if where == b"noexec:chdir" or (where == b"noexec" and sys.version_info < (3, 13)):
        filename = cwd  # before 3.13 a failure before the exec was taken as the chdir's
    else:
        filename = None if where == b"noexec" else program
    raise OSError(number, os.strerror(number), filename)


def _close(fd: int, opened: list[int]) -> None:
    if fd in opened:
        opened.remove(fd)
        os.close(fd)
