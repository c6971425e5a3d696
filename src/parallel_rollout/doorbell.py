"""The engine thread's doorbell: a pipe it waits on beside the workers' pipes and sentinels,
so that a submit, a cancel, a resume or a close wakes it at once, not at its next tick.

Any thread rings (``ring``); at most one byte waits in the pipe, so a batch that submits
thousands of samples costs one write and one read, not thousands. The engine thread answers
(``answer``) when its wait returned the read end. ``close`` takes the pipe away under the lock
a ring writes under: a ring never writes to a closed (maybe reused) descriptor.
"""

from __future__ import annotations

import os
import threading


class Doorbell:
    """A non-blocking pipe rung from any thread and answered by the one thread that waits on it."""

    def __init__(self) -> None:
        self._read: int | None = None
        self._write: int | None = None
        self._lock = threading.Lock()
        self._rung = False

    def open(self) -> None:
        """Make the pipe, both ends non-blocking."""
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)

    @property
    def fd(self) -> int | None:
        """The end to wait on; None before ``open`` and after ``close``."""
        return self._read

    def ring(self) -> None:
        """Wake the waiting thread: at most one byte waits in the pipe (a batch that submits
        thousands of samples costs one write and one read, not thousands)."""
        if self._rung:
            return  # the engine thread has yet to answer the last ring, and will see ours
        with self._lock:  # never a write to a closed (maybe reused) descriptor
            if self._write is None:
                return
            self._rung = True
            try:
                os.write(self._write, b"!")
            except OSError:
                pass  # full (it rings already) or closing

    def answer(self) -> None:
        """Empty the pipe: the waiting thread's wait returned its read end."""
        # cleared before the pipe is read: a ring that comes after the read
        # writes again, and one before it is answered by this pass
        self._rung = False
        try:
            while os.read(self._read, 4096):
                pass
        except BlockingIOError:
            pass

    def close(self) -> None:
        """Close both ends; a ring after it does nothing."""
        with self._lock:
            fds, self._read, self._write = (self._read, self._write), None, None
        for fd in [fd for fd in fds if fd is not None]:
            os.close(fd)
