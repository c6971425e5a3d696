"""How a command's text reaches its interpreter (``agent_commands``): the scripts an
interpreter reads (a grading script, a ``run_python`` or ``run_bash_script`` body, a shell
command too long for one exec argument), and what is said of a command whose own content no
exec can carry. A sibling file of the guest agent, standard library only.
"""

from __future__ import annotations

import os

#: the longest single argument an exec takes, its terminating NUL included (Linux's
#: MAX_ARG_STRLEN, 32 pages): a longer ``sh -c`` command would fail with E2BIG
MAX_ARG_BYTES = 32 * 4096
#: errno of an exec whose arguments and environment are too long (``errno.E2BIG``)
E2BIG = 7


def too_long_for_exec(command: str) -> bool:
    """Whether ``command`` is too long to be one argument of an exec."""
    return len(command) >= MAX_ARG_BYTES // 4 and \
        len(command.encode("utf-8", "surrogatepass")) >= MAX_ARG_BYTES


def unstartable(exc: Exception, argv, env: dict | None) -> str:
    """Why a command could not start because of its own content, said to its author: an
    argument list past the system's limit, a NUL byte, text no command line can hold."""
    if isinstance(exc, OSError):  # E2BIG
        size = sum(len(part.encode("utf-8", "surrogatepass")) + 1 for part in argv)
        size += sum(len(f"{k}={v}".encode("utf-8", "surrogatepass")) + 1
                    for k, v in (env if env is not None else os.environ).items())
        return (f"argument list too long: the command is {size} bytes with its environment, "
                "more than one exec can take; write long content to a file in steps")
    if isinstance(exc, UnicodeError):
        return f"the command holds text no command line can carry: {exc}"
    if "null" in str(exc):
        return "the command holds a NUL byte, which no command line can carry"
    return f"the command cannot be started: {exc}"


class Script:
    """``with Script(text, suffix, sealed, owner=...) as (path, fds)``: a script holding ``text`` for
    the command's interpreter, and the fds the command must inherit to read it.

    A grading script (``sealed``; a shell command too long for an exec's argument too) is a
    sealed memfd, read as ``/proc/self/fd/N``: never a
    file in /tmp, so nothing of the graded code (a daemon left running, as an osworld task
    may) can read it (the py judge holds the tests) or rewrite it between its writing and
    its start. Other scripts (and a guest without sealable memfds) are a temp file given to
    the commands' user (``owner``: its uid and gid), removed afterwards."""

    def __init__(self, text: str, suffix: str, sealed: bool, name: str = "grading",
                 owner: tuple[int, int] | None = None) -> None:
        import fcntl

        # a lone surrogate (JSON can carry one) reaches the interpreter, which refuses it as
        # the command's own error, instead of failing the request
        data = text.encode("utf-8", "surrogatepass")
        if sealed and hasattr(os, "memfd_create") and hasattr(fcntl, "F_ADD_SEALS"):
            self.fd = os.memfd_create(f"{name}{suffix}", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
            self.path, self.fds = f"/proc/self/fd/{self.fd}", (self.fd,)
            view = memoryview(data)
            while view:
                view = view[os.write(self.fd, view):]
            fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK
                        | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE)
            return
        import tempfile

        self.fd, self.path = tempfile.mkstemp(prefix="guest_exec_", suffix=suffix)
        self.fds = ()
        with os.fdopen(self.fd, "wb") as handle:
            handle.write(data)
        self.fd = None
        if owner is not None:  # the commands' user reads it
            os.lchown(self.path, *owner)

    def __enter__(self):
        return self.path, self.fds

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Remove the script (or close its memfd); never raises."""
        try:
            if self.fd is None:
                os.unlink(self.path)
            else:
                os.close(self.fd)
        except OSError:
            pass
