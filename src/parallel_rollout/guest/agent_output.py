"""What a command's output may cost the guest agent: its pipes are read as it writes, and
only the tail the request keeps is held in memory.

::

    command ──stdout pipe──► poll() loop ──► Tail(keep): the last ``keep`` bytes, a count of
            ──stderr pipe──►                 the bytes dropped before them

An answer that prints 1 GB costs the agent ``keep`` bytes per stream (plus a 64 KiB read
buffer), not 1 GB: ``subprocess.communicate`` would hold it all, then the JSON answer a
copy, then the host's client another. ``keep`` comes from the request (``tail``: the
characters the caller keeps, times 4 for UTF-8) or :data:`DEFAULT_KEEP_BYTES`.

Standard library only: this file is copied next to ``server.py`` into every guest.
"""

from __future__ import annotations

import os
import time

#: bytes of each stream kept when the request names no ``tail``: 8 MiB, more than any
#: caller that reads a whole answer (an osworld getter, a browser's page) needs
DEFAULT_KEEP_BYTES = 8 << 20
#: bytes read from a pipe at a time
CHUNK = 65536
#: seconds a command's output is still read once it has exited, when a process it left
#: running holds its pipes open (see :func:`collect`)
HELD_GRACE_S = 0.25
#: pipes of exited commands read by :data:`DRAIN` at most; more are closed at once
MAX_DRAINED = 64


class Tail:
    """The last ``limit`` bytes written to one pipe, and how many came before them."""

    __slots__ = ("limit", "data", "dropped")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.data = bytearray()
        self.dropped = 0

    def add(self, chunk: bytes) -> None:
        """Append ``chunk``, dropping what falls out of the tail."""
        self.data += chunk
        excess = len(self.data) - self.limit
        if excess > 0:
            del self.data[:excess]
            self.dropped += excess

    def text(self, chars: int | None) -> str:
        """The tail decoded (a sequence cut in half at its start becomes U+FFFD), at most
        ``chars`` characters of it when given."""
        text = bytes(self.data).decode("utf-8", "replace")
        if chars is None or len(text) <= chars:
            return text
        return text[len(text) - chars:]


def keep_bytes(tail_chars: int | None) -> int:
    """Bytes of a stream to keep for a request that keeps ``tail_chars`` characters (None:
    the default): UTF-8 spends at most 4 bytes on a character."""
    return DEFAULT_KEEP_BYTES if tail_chars is None else max(1, 4 * tail_chars)


def collect(pipes: dict, deadline: float, proc=None) -> bool:
    """Read the pipes ``{file object: Tail}`` into their tails until every one is at its
    end (True) or ``deadline`` (``time.monotonic()``) has passed (False). A pipe at its end
    is dropped from ``pipes``, so a second call goes on with those still open.

    With ``proc`` (the command that writes them): once it has exited, only for
    :data:`HELD_GRACE_S` more, what is left in the pipes and what its background processes
    write then. A process it left running that holds a pipe open (``server &``) keeps it
    from its end, but a shell that started it has returned by then."""
    import select

    poller = select.poll()
    by_fd = {}
    for stream in pipes:
        by_fd[stream.fileno()] = stream
        poller.register(stream.fileno(), select.POLLIN)
    exit_fd, slice_s = _watch_exit(proc, poller)
    try:
        while by_fd:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            events = poller.poll(min(remaining, slice_s) * 1000)
            if proc is not None and (exit_fd in dict(events) or (exit_fd is None and proc.poll() is not None)):
                deadline = min(deadline, time.monotonic() + HELD_GRACE_S)
                proc, slice_s = None, float("inf")
                if exit_fd is not None:
                    poller.unregister(exit_fd)
            for fd, _ in events:
                if fd not in by_fd:
                    continue  # the exit's pidfd
                chunk = os.read(fd, CHUNK)
                if chunk:
                    pipes[by_fd[fd]].add(chunk)
                else:  # the writers are gone (or closed it): nothing more will come
                    poller.unregister(fd)
                    del pipes[by_fd.pop(fd)]
        return True
    finally:
        if exit_fd is not None:
            os.close(exit_fd)


def _watch_exit(proc, poller) -> tuple[int | None, float]:
    """A pidfd of ``proc`` registered with ``poller`` (it polls readable once ``proc`` has
    exited), and how long each poll may wait: forever with one, 50 ms without (Linux < 5.3,
    no ``proc``: then nothing is watched, or ``proc.poll()`` is asked between polls)."""
    if proc is None:
        return None, float("inf")
    try:
        fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        return None, 0.05
    import select

    poller.register(fd, select.POLLIN)
    return fd, float("inf")


class Drain:
    """One thread reading and dropping what pipes still get: a command's background process
    (a server started with ``&``) goes on as in a terminal instead of dying of SIGPIPE at its
    next line."""

    def __init__(self) -> None:
        import _thread  # not threading: the agent's start imports none of what it imports

        self.lock = _thread.allocate_lock()
        self.streams: dict[int, object] = {}
        self.wake_r, self.wake_w = None, None
        self.started = False

    def add(self, streams: list) -> bool:
        """Read ``streams`` until their end (closing them then); False (the caller closes
        them) when it holds MAX_DRAINED already or its thread cannot start."""
        with self.lock:
            if len(self.streams) + len(streams) > MAX_DRAINED:
                return False
            if not self.started:
                import _thread

                try:
                    self.wake_r, self.wake_w = os.pipe()
                    _thread.start_new_thread(self._run, ())
                except (OSError, RuntimeError):  # no descriptors, or pids.max full (a fork bomb)
                    for fd in (self.wake_r, self.wake_w):
                        if fd is not None:
                            os.close(fd)
                    self.wake_r = self.wake_w = None
                    return False
                self.started = True
            for stream in streams:
                self.streams[stream.fileno()] = stream
        os.write(self.wake_w, b"x")
        return True

    def _run(self) -> None:
        import select

        while True:
            poller = select.poll()
            poller.register(self.wake_r, select.POLLIN)
            with self.lock:
                for fd in self.streams:
                    poller.register(fd, select.POLLIN)
            for fd, _ in poller.poll():
                if fd == self.wake_r:
                    os.read(self.wake_r, CHUNK)
                elif not os.read(fd, CHUNK):
                    with self.lock:
                        self.streams.pop(fd).close()


def wait_exit(proc, timeout: float) -> int:
    """``proc.wait(timeout=timeout)`` (a ``subprocess.Popen`` or an ``agent_spawn.Child``),
    woken by the child's exit: its exit code, ``subprocess.TimeoutExpired`` when it runs on."""
    if not exited_within(proc, timeout):
        import subprocess

        raise subprocess.TimeoutExpired(proc.args, timeout)
    return proc.returncode


def exited_within(proc, timeout: float) -> bool:
    """Whether ``proc`` exits within ``timeout`` seconds (then reaped).

    Popen's wait with a timeout polls, its sleeps doubling from 1 ms up to 50 ms: a command
    whose output had just ended but which had not quite exited yet (one in five here) cost
    the agent a 1 ms sleep, and a sandbox that took 35 ms to die was seen gone at 63 ms. A
    pidfd of the child (unreaped, so its pid is still its own) polls readable the moment it
    exits; where there are none (Linux < 5.3, Python < 3.9), Popen's polling."""
    if proc.poll() is not None:
        return True
    try:
        fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        import subprocess

        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return False
        return True
    try:
        exited = proc.returncode is not None or pidfd_exited(fd, timeout)
    finally:
        os.close(fd)
    if exited:
        proc.wait(timeout=timeout)  # reaped at its first look: the pidfd said it exited
    return exited


def pidfd_exited(fd: int, timeout: float) -> bool:
    """Whether the process of pidfd ``fd`` exits within ``timeout`` seconds (its pidfd polls
    readable)."""
    return readable_within(fd, timeout)


def readable_within(fd: int, timeout: float) -> bool:
    """Whether ``fd`` polls readable (data, its end, an error, a pidfd's exit) within
    ``timeout`` seconds. poll, never select: select() refuses an fd of 1024 or more
    (FD_SETSIZE), and a pool of hundreds of VMs holds more fds than that."""
    import select

    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(max(0.0, timeout) * 1000))


#: the agent's one :class:`Drain`
DRAIN = Drain()
