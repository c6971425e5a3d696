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

So the process that forks a sandbox is a child subreaper while the sandbox lives (``hold``
as it starts it, ``release`` once it has killed it and reaped its init by pid: ``reap``) and
while it kills one (``adopting``); the bwrap of a probe (the process provider's, the command
agent's), of an image build's apt-get and of a command agent is adopted for its end only
(``run_bwrap``, ``bwrap_init``, ``InitReport``). Only then, because a subreaper adopts every
orphan of its descendants, not only sandboxes' inits (a daemon a hypervisor CLI detaches, a
test's ``setsid`` grandchild): a process that was one for the rest of its life once it had
started a sandbox kept those as zombies it never reaped, alive to a check by pid.
The holds are counted across threads: the flag is cleared when the last one ends, unless the
process was a subreaper before (the guest agent makes itself one).

An owner killed by SIGKILL reaps nothing: its bwraps die with it (their parent-death signal),
then their inits, and each pair goes to the nearest subreaper above it. So the process that
starts the pool's Manager holds the flag while the Manager lives (``LocalBackend``) and, as
it sweeps the dead Manager's VMs, reaps each bwrap by the pid and start time its meta.json
records, and its init (``sandbox_processes.kill_recorded``); the workers' server holds it for
good and reaps whatever its workers leave (``backends/worker_start.py``). Only the command's
own process does so (``the_commands_process``): a trainer's or a script's, which calling
``run()`` or a scheduler starts children of its own, would keep their orphans as zombies.

Never ``waitpid(-1)``: that would take exit statuses that ``subprocess.Popen`` objects of
this process wait for. A pid is reaped only while it is a child of this process that is the
init of a pid namespace below ours (its last ``NSpid`` is 1), or the bwrap a dead owner
recorded (its pid and start time): no process this one forked itself is either, and the pid
of a child, running or a zombie, is not reused before its parent (us) reaps it.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import json
import logging
import os
import subprocess
import threading
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


def is_subreaper() -> bool:
    """Whether this process is a child subreaper."""
    flag = ctypes.c_int(0)
    return _prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(flag)) and bool(flag.value)


class _Holds:
    """This process's holds on the child subreaper flag (see the module doc)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.count = 0
        #: it was a subreaper before the first hold: never cleared
        self.was = False


_holds_lock = threading.Lock()
_holds = _Holds()


def hold() -> None:
    """Make this process a child subreaper until the matching ``release``."""
    global _holds
    with _holds_lock:
        if _holds.pid != os.getpid():  # a forked child: the flag is not inherited, nor the holds
            _holds = _Holds()
        if _holds.count == 0:
            _holds.was = is_subreaper()
            if not _holds.was and not _prctl(PR_SET_CHILD_SUBREAPER, 1):
                log.debug("prctl(PR_SET_CHILD_SUBREAPER) failed: killed sandboxes' inits go to pid 1")
        _holds.count += 1


def release() -> None:
    """End a ``hold``: the flag is cleared with the last one (unless it was set before)."""
    with _holds_lock:
        if _holds.pid != os.getpid() or _holds.count == 0:
            return
        _holds.count -= 1
        if _holds.count == 0 and not _holds.was:
            _prctl(PR_SET_CHILD_SUBREAPER, 0)


#: whether this process is the command's own (``parallel-rollout run``), whose children are all
#: the run's: the one that adopts what a SIGKILLed Manager leaves (``pool.server.start_pool``)
_commands_process = False


@contextlib.contextmanager
def the_commands_process() -> Iterator[None]:
    """This process is the command's own for the block (the CLI's run): a CLI command run
    in a script's process (click's CliRunner) leaves its later ``run()`` as it was."""
    global _commands_process
    _commands_process = True
    try:
        yield
    finally:
        _commands_process = False


def adopts_for_the_pool() -> bool:
    """Whether this process may be a child subreaper while its pool's Manager lives: the
    command's, not a trainer's or a script's (their own programs' orphans would stay its
    zombies, alive to a check by pid)."""
    return _commands_process


@contextlib.contextmanager
def adopting() -> Iterator[None]:
    """A child subreaper for the block (``hold``, ``release``)."""
    hold()
    try:
        yield
    finally:
        release()


@functools.lru_cache(maxsize=None)
def _own_depth() -> int:
    """How many pid namespaces this process is in (its ``NSpid``'s length; 1 without it)."""
    try:
        with open("/proc/self/status") as status:
            return max(1, next((len(line.split()) - 1 for line in status if line.startswith("NSpid:")), 1))
    except OSError:
        return 1


def reap(pid, wait_s: float = 0.0, recorded: bool = False) -> bool:
    """Reap ``pid`` if it is a child of this process that is the init of a pid namespace
    below ours (see the module doc), or one the caller knows by the pid and start time a
    dead owner recorded (``recorded``: a sandbox's bwrap, adopted as the pool's Manager that
    forked it died), and has exited, or exits within ``wait_s`` seconds; whether it did.
    Never raises."""
    if not pid:
        return False
    try:
        with open(f"/proc/{pid}/status") as status:
            fields = dict(line.split(":", 1) for line in status if ":" in line)
    except (OSError, ValueError):
        return False
    nspids = fields.get("NSpid", "").split()
    if fields.get("PPid", "").strip() != str(os.getpid()):
        return False
    if not recorded and (len(nspids) <= _own_depth() or nspids[-1] != "1"):
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


class InitReport:
    """The ``--info-fd`` of a bwrap that makes a pid namespace: ``argv`` with it, the fd to
    pass (``pass_fds``), and ``reap``, which reaps the init it names once bwrap has ended.

    The fd is a file in memory, not a pipe: bwrap's word on a pipe whose reader was gone
    (this process killed before bwrap said it: a driver killed, and Ray killing its job's
    workers; a worker killed as its agent starts) killed bwrap by SIGPIPE, and bwrap's child,
    which waits for bwrap's word before it runs anything, waited forever under pid 1. bwrap's
    child closes the fd: what the sandbox runs never sees it."""

    def __init__(self, argv: list[str]) -> None:
        self._fd: int | None = os.memfd_create("bwrap-info")
        self.argv = [argv[0], "--info-fd", str(self._fd), *argv[1:]]
        self.pass_fds = (self._fd,)

    def reap(self, wait_s: float = 5.0) -> bool:
        """Reap the init bwrap reported (``reap``: it exits within ``wait_s`` once bwrap is
        gone); whether it did. False when bwrap made no namespace, or after the first call."""
        if self._fd is None:
            return False
        try:
            return reap(int(json.loads(os.pread(self._fd, 65536, 0))["child-pid"]), wait_s=wait_s)
        except (OSError, ValueError, KeyError, TypeError):
            return False  # bwrap made no namespace: nothing to reap
        finally:
            os.close(self._fd)
            self._fd = None


@contextlib.contextmanager
def bwrap_init(argv: list[str]) -> Iterator[InitReport]:
    """For a bwrap that makes a pid namespace and ends within the block (a probe, an image
    build's apt-get), started with the report's ``argv`` and ``pass_fds``: adopted for the
    block, its init reaped after it (bwrap leaves it unreaped as it exits)."""
    report = InitReport(argv)
    with adopting():
        try:
            yield report
        finally:
            report.reap()


def run_bwrap(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    """``subprocess.run(argv, **kwargs)`` of a bwrap that makes a pid namespace (a probe),
    its init reaped after it (``bwrap_init``)."""
    with bwrap_init(argv) as report:
        return subprocess.run(report.argv, pass_fds=report.pass_fds, **kwargs)
