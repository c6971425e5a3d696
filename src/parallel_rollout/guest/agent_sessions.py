"""The grading commands' sessions, noted where the grading fronts read them.

A program that has a grading wrapper is, at its real path, a front
(``grading_bin/system_front``, laid by ``pool/providers/grading_fronts.py``) that sends a
grading command's process to the wrapper. The grading environment's
``PARALLEL_ROLLOUT_GRADING_SINCE`` says so, but a check that runs a program with an environment
of its own (``subprocess.run(["/usr/bin/git", "status"], env={})``, bash's ``exec -c``, an
``os.execve`` with a cleared one) loses it, and the answer's repo config rigged the check's git
again. What no descendant loses so is its session: every command starts one of its own
(``agent_spawn.spawn``), whose id is its first process's pid. For each grading command the
agent writes ``SESSIONS/<that pid>``, the grading environment's names a front gives back
(:data:`GIVEN_BACK`, one ``NAME=value`` a line), before that command can run anything and
removes it once the command has ended; a front whose environment lacks the marker reads its
session id from ``/proc/self/stat`` and that file (python, which has no front, through its
``sitecustomize.py`` front: ``grading_bin/system_sitecustomize.py``). The folder is there only while a grading
command is: every call of those programs pays the front's look, graded or not, and outside
grading it is one stat (dash reads ``/proc/self/stat`` a byte a syscall, ~0.4 ms of CPU a call
under a process VM's seccomp filter where it read it on every call).

The race of the start (the command runs before its pid is known) is closed by
``SESSIONS/starting``, written before the start and removed once the pid's file is there (grading
starts one at a time): a front that finds no file of its session reads that one. A process of
the graded code that calls a front in that moment gets the wrapper: it gains nothing by it.

Trust: :data:`SESSIONS` is the agent's (``/run/guest``: a process VM's own tmpfs, a docker
guest's bind of the host's socket folder, a qemu guest's made by its init, each the agent's
user's with mode 0755; where it is not so, nothing is noted and the fronts read the environment
only). Where the commands run as another user (``--run-as``) they can neither write nor remove
a file in it. Where they run as the agent's user (a process VM of a runner without subordinate
uids) the check's own code could remove its session's file, as it could signal the agent itself;
what the graded code left at that path before is removed when the folder is made anew, and a
front takes only plain names from a file (no code).
A descendant that calls
``setsid()`` leaves the session and with it the wrappers: only the graded code's own program
would, and the graded code gains nothing from unwrapped programs; the check's own calls stay in
the session. A process of the session that outlives the command (``server &``) loses the file
when the command's answer is given.

Standard library only: this file is copied next to ``server.py`` into every guest.
"""

from __future__ import annotations

import _thread
import os
import stat

#: where the agent notes the grading commands' sessions (the fronts name it: grading_bin/system_front)
SESSIONS = "/run/guest/grading"
#: the file of the grading command being started
STARTING = "starting"
#: the names of a grading command's environment a front gives back when they are not set: those
#: the wrappers read (their PATH first, the grading start's time, the graded home) and those
#: ``grading_bin/env`` keeps for what it runs
GIVEN_BACK = ("PATH", "PYTHONPATH", "PYTHONNOUSERSITE", "PYTHONUSERBASE", "PYTHONSAFEPATH", "PYTHONDONTWRITEBYTECODE",
              "GIT_CONFIG_GLOBAL", "PIP_CONFIG_FILE", "NPM_CONFIG_USERCONFIG", "PSQLRC", "PARALLEL_ROLLOUT_GRADING_SINCE",
              "PARALLEL_ROLLOUT_GRADED_HOME")
#: grading commands start one at a time (STARTING is one file), and SESSIONS is made and removed
#: under it too
_lock = _thread.allocate_lock()
#: grading commands noted now: SESSIONS is there while there is one
_open = 0
#: whether the folder SESSIONS is made in was found fit (None: not looked at yet)
_fit: bool | None = None


def _folder_fit() -> bool:
    """Whether no one but the agent's user can write the folder SESSIONS is made in."""
    global _fit
    if _fit is None:
        try:
            info = os.lstat(os.path.dirname(SESSIONS))
            _fit = stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid() and not info.st_mode & 0o022
        except OSError:
            _fit = False
    return _fit


def _remove_folder() -> None:
    """SESSIONS and its files gone, or whatever else is at its path."""
    try:
        info = os.lstat(SESSIONS)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(info.st_mode):
        os.unlink(SESSIONS)
        return
    for name in os.listdir(SESSIONS):
        os.unlink(os.path.join(SESSIONS, name))
    os.rmdir(SESSIONS)


def _opened() -> None:
    """One more grading command noted (under :data:`_lock`): SESSIONS made anew for the first
    (what a former agent left there, or where the commands run as the agent's user their
    processes made, removed first)."""
    global _open
    if _open == 0:
        _remove_folder()
        os.mkdir(SESSIONS, 0o755)
    _open += 1


def _closed() -> None:
    """One grading command fewer (under :data:`_lock`): SESSIONS removed after the last, so that
    a front outside any grading command reads nothing but that it is not there."""
    global _open
    _open -= 1
    if _open == 0:
        try:
            _remove_folder()
        except OSError:
            pass


def _write(name: str, text: str) -> None:
    """``SESSIONS/name`` holding ``text``, whole at once (a front never reads half of it)."""
    scratch = os.path.join(SESSIONS, f".{name}.new")
    fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)
    os.rename(scratch, os.path.join(SESSIONS, name))


def _remove(name: str) -> None:
    try:
        os.unlink(os.path.join(SESSIONS, name))
    except FileNotFoundError:
        pass


class Session:
    """A grading command's session noted for the fronts, where the folder is fit::

        with Session(env) as session:
            proc = spawn(...)        # in a session of its own
            session.started(proc.pid)
        ...                          # the command runs
        session.end()                # it has ended

    Nothing is noted (each call a no-op) where the folder is not fit or the environment holds no
    grading start."""

    def __init__(self, env: dict) -> None:
        self.text = "".join(f"{name}={env[name]}\n" for name in GIVEN_BACK
                            if name in env and "\n" not in env[name] and "\0" not in env[name])
        self.on = "PARALLEL_ROLLOUT_GRADING_SINCE" in env and _folder_fit()
        self.pid: int | None = None

    def __enter__(self) -> "Session":
        if self.on:
            _lock.acquire()
            try:
                _opened()
            except OSError:
                self.on = False
                _lock.release()
                return self
            try:
                _write(STARTING, self.text)
            except OSError:
                self.on = False
                _closed()
                _lock.release()
        return self

    def started(self, pid: int) -> None:
        """The command's first process is ``pid`` (its session's id)."""
        if self.on:
            try:
                _write(str(pid), self.text)
            except OSError:  # the fronts read its environment alone, as where the folder is not fit
                return
            self.pid = pid

    def __exit__(self, *exc) -> None:
        if self.on:
            try:
                _remove(STARTING)
                if self.pid is None:
                    _closed()
            finally:
                _lock.release()

    def end(self) -> None:
        """The command has ended: its session's file goes."""
        if self.pid is not None:
            with _lock:
                _remove(str(self.pid))
                _closed()
            self.pid = None
