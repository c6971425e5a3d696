"""A worker's process group: what its agent starts dies with the worker.

Each worker process leads a process group of its own (``lead_group``, before it runs an
attempt). The processes its agent starts join it, and stay in it when they leave the
worker's process tree (a shell's ``cmd &``, a double fork, the children of a worker that
died, which init adopts). Once the worker has ended, whichever way (its run's end, a
timeout kill, a death, ``os._exit``), ``kill_group`` SIGKILLs what is left of the group::

    worker process ── ends ──► LocalBackend (its parent, on its host) ── kill_group(pid)

Only a process that leaves the group itself (``setsid``, ``start_new_session=True``) is out
of its reach. The pool's VMs belong to another process (the Manager), in another group.

This module imports nothing of the project: any layer may use it.
"""

from __future__ import annotations

import os
import signal


def lead_group() -> None:
    """Make this process the leader of a process group of its own: what it starts joins it."""
    os.setpgid(0, 0)


def kill_group(pid: int | None) -> None:
    """SIGKILL what is left of the process group that ``pid`` led, once that process has
    ended: those it left behind (reparented to init, out of a tree kill's reach) die with it."""
    if pid is None:
        return
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # no process left in it (or never made: the worker died before its first line)
