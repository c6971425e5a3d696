"""The orphaned namespace inits of bubblewrap sandboxes: adopted and reaped by the process
that started them, never left as zombies under a pid 1 that reaps nothing.

::

    owner (a child subreaper) ──► bwrap ──► init of the sandbox's pid namespace (bwrap too)
                    ▲   killed, or exited on the     │  orphaned: comes to the owner,
                    │   agent's word without a wait  │  not to the container's pid 1
                    └──────── reap(init pid) ◄───────┘

A sandbox's init is outer bwrap's child, and outer bwrap never reaps it: it exits as soon as
the init reports the agent's exit status (its event fd), and a kill (a reset, a standby
swap, a stop) takes it first. The init is then an orphan, re-parented to the nearest child
subreaper or to pid 1, whose zombie stays until that one reaps it. A container whose pid 1 is
the command or a ``sh`` (``docker run`` without --init, a Kubernetes pod) reaps nothing:
every sandbox left a zombie, until the pid limit refused forks.

So the process that forks sandboxes declares itself a child subreaper (``adopt``), and reaps
each init it has killed or seen exit (``reap``), by its pid; a probe's bwrap (the process
provider's, the command agent's) is adopted and reaped for its run only (``run_bwrap``). Never ``waitpid(-1)``: that
would take exit statuses that ``subprocess.Popen`` objects of this process wait for. A pid is
reaped only while it is a child of this process that is the init of a pid namespace below
ours (its last ``NSpid`` is 1): no process this one forked itself is one, and the pid of a
child, running or a zombie, is not reused before its parent (us) reaps it.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import json
import logging
import os
import subprocess
from collections.abc import Iterator

from ...guest.agent_output import readable_within

log = logging.getLogger(__name__)

#: prctl(2) options (linux/prctl.h)
PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37


def _prctl(option: int, arg) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, arg, 0, 0, 0) == 0
    except (OSError, AttributeError):  # not Linux, or no prctl in this libc
        return False


def adopt() -> bool:
    """Make this process the child subreaper of everything it starts (orphans of its
    descendants come to it, not to pid 1); whether it is one now."""
    if not _prctl(PR_SET_CHILD_SUBREAPER, 1):
        log.debug("prctl(PR_SET_CHILD_SUBREAPER) failed: killed sandboxes' inits go to pid 1")
        return False
    return True


def is_subreaper() -> bool:
    """Whether this process is a child subreaper."""
    flag = ctypes.c_int(0)
    return _prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(flag)) and bool(flag.value)


@contextlib.contextmanager
def adopting() -> Iterator[None]:
    """A child subreaper for the block only (a probe's sandbox), unless it was one already."""
    was = is_subreaper()
    adopt()
    try:
        yield
    finally:
        if not was:
            _prctl(PR_SET_CHILD_SUBREAPER, 0)


@functools.lru_cache(maxsize=None)
def _own_depth() -> int:
    """How many pid namespaces this process is in (its ``NSpid``'s length; 1 without it)."""
    try:
        with open("/proc/self/status") as status:
            return max(1, next((len(line.split()) - 1 for line in status if line.startswith("NSpid:")), 1))
    except OSError:
        return 1


def reap(pid, wait_s: float = 0.0) -> bool:
    """Reap ``pid`` if it is a child of this process that is the init of a pid namespace
    below ours (see the module doc) and has exited, or exits within ``wait_s`` seconds;
    whether it did. Never raises."""
    if not pid:
        return False
    try:
        with open(f"/proc/{pid}/status") as status:
            fields = dict(line.split(":", 1) for line in status if ":" in line)
    except (OSError, ValueError):
        return False
    nspids = fields.get("NSpid", "").split()
    if fields.get("PPid", "").strip() != str(os.getpid()) or len(nspids) <= _own_depth() or nspids[-1] != "1":
        return False
    if wait_s > 0:
        with contextlib.suppress(OSError, AttributeError):  # no pidfds: what has exited by now
            fd = os.pidfd_open(int(pid))
            try:
                readable_within(fd, wait_s)
            finally:
                os.close(fd)
    try:
        return os.waitpid(int(pid), os.WNOHANG)[0] == int(pid)
    except ChildProcessError:
        return False


def run_bwrap(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    """``subprocess.run(argv, **kwargs)`` of a bwrap that makes a pid namespace (a probe),
    whose init bwrap leaves unreaped as it exits: adopted for the run and reaped after it,
    its pid read from ``--info-fd``."""
    info_r, info_w = os.pipe()
    try:
        with adopting():
            try:
                done = subprocess.run([argv[0], "--info-fd", str(info_w), *argv[1:]], pass_fds=(info_w,), **kwargs)
            finally:
                os.close(info_w)
            os.set_blocking(info_r, False)
            try:
                reap(int(json.loads(os.read(info_r, 65536))["child-pid"]), wait_s=5)
            except (OSError, ValueError, KeyError, TypeError):
                pass  # bwrap made no namespace: nothing to reap
    finally:
        os.close(info_r)
    return done
