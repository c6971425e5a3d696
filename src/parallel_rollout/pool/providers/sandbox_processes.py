"""The processes of a bubblewrap sandbox: who forks them, how they are killed and waited for.

**The launcher thread.** ``bwrap --die-with-parent`` is PR_SET_PDEATHSIG, which fires when
the *thread* that forked bwrap exits, not its process. The pool starts and resets VMs from
short-lived threads, so every bwrap is forked by one long-lived daemon thread per process:
sandboxes live exactly as long as the process that owns them.

**Dying with the owner from the first instruction.** bwrap sets up its parent-death signal
when it starts, so an owner killed between the fork and that moment (the pool's Manager
SIGKILLed while a boot or a reset forks) left a bwrap that started anyway, re-parented,
after the sweep that follows the crash had looked; killed by SIGPIPE at its first word on
--info-fd, it left its child waiting forever (a bare bwrap with no child). So the fork first
runs ``setpriv --pdeathsig KILL``, then a shell that exits unless its parent is still the
owner (the owner died before the signal was set), then execs the sandbox (``guarded``). The
same shell moves itself into the VM's cgroups first (``cgroups``: no process of the VM ever
runs outside them): one shell in front of bwrap, not two.

**On the way out.** --die-with-parent kills a bwrap when its owner exits, but not bwrap's
child while it waits for bwrap's word (below): it has no parent-death signal yet. An owner
that exits with a boot under way (the pool's Manager after a shutdown, or following a dead
runner, with no sweep to come) kills what it still runs first (``kill_all``, at exit).

**Reaping.** The init is bwrap's child, and orphaned when bwrap dies first (a kill) or exits
without waiting for it (the agent's exit): the owner is a child subreaper while the sandbox
lives and while it kills it (a hold from ``launch`` to ``kill_sandbox``), so it comes to the
owner, which reaps it by pid once it has exited (``orphans.py``), not to a pid 1 that may
never reap it (a container's). An owner with no sandbox is none: other orphans of its
descendants go to pid 1, as they would without it.

**Killing.** A sandbox is bwrap (host pid ``pid``) and the init of its pid namespace
(``init_pid``, reported on bwrap's ``--info-fd``). Both get SIGKILL; the kernel lets the init
finish exiting only after every other process of its namespace has, so waiting for the
init is waiting for the whole sandbox. A recorded pid is signalled only while it is the same
process (start time), never a recycled pid: the init through a pidfd opened before its start
time is checked, on which the wait then polls; bwrap, the owner's unreaped child, through its
``Popen``. One process has no record: bwrap's child between
its fork and the init's exec, which waits for a word from bwrap. If bwrap dies there (killed
before it reported the init), that child waits forever as an orphan; the VM's cgroups (which
it was forked into) and its folder in its command line still find it.
"""

from __future__ import annotations

import atexit
import functools
import logging
import multiprocessing.util
import os
import queue
import shutil
import signal
import subprocess
import threading
import time
from concurrent.futures import Future
from pathlib import Path

from ...errors import VMError
from ...guest.agent_output import pidfd_exited, wait_exit
from . import cgroups, orphans
from .common import create_time, exit_status, runs_vm, same_process, signal_name, started_at
from .halted import halted_tree

log = logging.getLogger(__name__)

#: how long a killed sandbox may take to disappear before we call it stuck
KILL_WAIT_S = 5.0
#: how long death_cause waits for a sandbox whose agent stopped answering to finish exiting
DEATH_WAIT_S = 2.0


#: bwrap processes this process started, so it can reap them (no zombies)
children: dict[int, subprocess.Popen] = {}


class _Launcher:
    """The one long-lived thread that forks every sandbox of this process (see module doc)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        # atexit for a plain process; a multiprocessing child (the pool's Manager) runs
        # multiprocessing's finalizers instead
        atexit.register(kill_all)
        multiprocessing.util.Finalize(None, kill_all, exitpriority=10)
        self._requests: queue.SimpleQueue = queue.SimpleQueue()
        thread = threading.Thread(target=self._loop, name="bwrap-launcher", daemon=True)
        thread.start()

    def _loop(self) -> None:
        while True:
            future, argv, kwargs = self._requests.get()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(subprocess.Popen(argv, **kwargs))
            except BaseException as exc:  # hand every failure back to the caller
                future.set_exception(exc)

    def popen(self, argv: list[str], *, die_with_owner: bool = False,
              cgroup_procs: list[str] | tuple[str, ...] = (), nofile: int | None = None,
              **kwargs) -> subprocess.Popen:
        """subprocess.Popen, forked from the launcher thread; ``die_with_owner``: SIGKILLed
        when this process dies, from the fork on; ``cgroup_procs``: the ``cgroup.procs``
        files it joins before ``argv`` starts; ``nofile``: its RLIMIT_NOFILE (``guarded``)."""
        future: Future = Future()
        self._requests.put((future, guarded(argv, self.pid if die_with_owner else None,
                                            cgroup_procs, nofile), kwargs))
        return future.result()


#: the shell in front of a sandbox: $0 is the owner's pid ("-": no guard), whose death it was
#: forked too late to see (its parent-death signal is already set here); $1 the RLIMIT_NOFILE
#: (soft and hard) of it and all it starts ("-": as it is); then each argument up to "--" is a
#: cgroup.procs file it moves itself into; then the sandbox's argv. It also makes itself the
#: OOM killer's first choice (oom_score_adj 1000, inherited, and set with CAP_SYS_RESOURCE one
#: the sandbox cannot lower): over a limit that holds the runner too (its cgroup's, the host's), a VM's
#: process goes before the runner, whatever memory the VM holds in its tmpfs, which counts
#: for no process
_LAUNCH = ('if [ "$0" != - ] && [ "$PPID" != "$0" ]; then exit 125; fi; '
           'if [ "$1" != - ]; then ulimit -n "$1" || exit 125; fi; shift; '
           '{ echo 1000 > /proc/self/oom_score_adj; } 2>/dev/null; '
           'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"')


def guarded(argv: list[str], owner: int | None,
            cgroup_procs: list[str] | tuple[str, ...] = (), nofile: int | None = None) -> list[str]:
    """``argv`` behind ``setpriv --pdeathsig KILL`` and a shell that exits unless its parent
    is still ``owner`` (killed when the forking thread dies, from the fork on: see the module
    doc), sets RLIMIT_NOFILE ``nofile`` and joins ``cgroup_procs`` before it execs ``argv``.
    Without an owner, or without a setpriv that has --pdeathsig (util-linux 2.33+), only the
    shell (none without cgroups or a ``nofile``)."""
    limits = [str(nofile) if nofile is not None else "-", *cgroup_procs, "--"]
    setpriv = _setpriv() if owner is not None else None
    if setpriv is not None:
        return [setpriv, "--pdeathsig", "KILL", "--", "/bin/sh", "-c", _LAUNCH, str(owner), *limits, *argv]
    if cgroup_procs or nofile is not None:
        return ["/bin/sh", "-c", _LAUNCH, "-", *limits, *argv]
    return argv


@functools.lru_cache(maxsize=None)
def _setpriv() -> str | None:
    path = shutil.which("setpriv")
    try:
        if path and subprocess.run([path, "--pdeathsig", "KILL", "--", "true"],
                                   capture_output=True, timeout=10).returncode == 0:
            return path
    except (OSError, subprocess.TimeoutExpired):
        pass
    log.warning("no setpriv with --pdeathsig (util-linux 2.33+): a sandbox forked just as "
                "its owner is killed may outlive it until the next sweep")
    return None


_launcher_lock = threading.Lock()
_launcher_instance: _Launcher | None = None


def launcher() -> _Launcher:
    global _launcher_instance
    with _launcher_lock:
        # after a fork the thread is gone from the child: start a new one there
        if _launcher_instance is None or _launcher_instance.pid != os.getpid():
            _launcher_instance = _Launcher()
        return _launcher_instance


def kill_sandbox(private: dict) -> None:
    """SIGKILL bwrap and the namespace init, and wait until the init (hence every process
    of the namespace) is gone; VMError if it outlives KILL_WAIT_S."""
    pid, init_pid = private.get("pid"), private.get("init_pid")
    init_created = private.get("init_create_time")
    unreported = init_pid is None
    if unreported and same_process(pid, private.get("create_time")):
        init_pid, init_created = _unreported_init(pid)
    # forgotten before it is killed: a death_cause asked meanwhile must not take the
    # pool's own kill for one from outside
    proc = children.pop(pid, None)
    with orphans.adopting():  # the init, orphaned as bwrap dies, comes to us
        try:
            _kill(private, pid, init_pid, init_created, proc, unreported)
        finally:
            if proc is not None:
                orphans.release()  # the hold the sandbox's launch took (sandbox_launch.py)


def _kill(private: dict, pid, init_pid, init_created, proc: subprocess.Popen | None, unreported: bool) -> None:
    """``kill_sandbox``'s kill and wait, and the init's reaping."""
    #: what must be gone before we return: (pid, start time, its pidfd or None)
    watched: list[tuple[int, float, int | None]] = []
    try:
        for target, created in ((init_pid, init_created), (pid, private.get("create_time"))):
            if target == pid and proc is not None:
                # our own unreaped child: its pid cannot have been taken (send_signal reaps
                # first and signals only a child that still runs); waited for below
                proc.send_signal(signal.SIGKILL)
                continue
            fd = pidfd_of(target, created)
            if fd is not None:
                watched.append((target, created, fd))
                try:
                    signal.pidfd_send_signal(fd, signal.SIGKILL)
                except ProcessLookupError:
                    pass  # exited already: its pidfd is readable
            elif same_process(target, created):  # no pidfds here: by its start time
                watched.append((target, created, None))
                try:
                    os.kill(target, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        if proc is not None:
            try:
                wait_exit(proc, KILL_WAIT_S)
            except subprocess.TimeoutExpired:
                raise VMError(f"bwrap {pid} survived SIGKILL for {KILL_WAIT_S}s") from None
        # The init is bwrap's child, re-parented when bwrap dies; the kernel lets it finish
        # exiting (its pidfd polls readable) only after every other process of its pid
        # namespace has.
        deadline = time.monotonic() + KILL_WAIT_S
        if not all(pidfd_exited(fd, deadline - time.monotonic()) for _, _, fd in watched if fd is not None):
            raise VMError(f"sandbox {private.get('vm_dir')} survived SIGKILL for {KILL_WAIT_S}s")
        delay = 0.0005
        while any(same_process(target, created) for target, created, fd in watched if fd is None):
            if time.monotonic() > deadline:
                raise VMError(f"sandbox {private.get('vm_dir')} survived SIGKILL "
                              f"for {KILL_WAIT_S}s")
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
    finally:
        for _, _, fd in watched:
            if fd is not None:
                os.close(fd)
        orphans.reap(init_pid)  # ours once bwrap is gone: its zombie, had we not reaped it
        if unreported:
            # the orphan of the module doc, which no pid names (a reported init is that very
            # child, killed above): by the VM's cgroups, and where there are none, its folder
            cgroups.kill_paths(private.get("cgroups") or [])
            if private.get("vm_dir"):
                kill_unrecorded(Path(private["vm_dir"]))


def pidfd_of(pid, created) -> int | None:
    """A pidfd of ``pid`` while it is the process that started at ``created`` (checked after
    the open, so the fd cannot name a process that took the pid since); None when it is
    gone, or where pidfds do not exist (Linux < 5.3)."""
    if not pid or created is None:
        return None
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None
    if same_process(pid, created):
        return fd
    os.close(fd)
    return None


def death_cause(private: dict, run_as: int | None) -> str | None:
    """Why a sandbox died or stopped answering, when its task cannot have done it; None
    when the task may have (or while it runs and nothing tells otherwise):

    * its bwrap killed by a signal: nothing inside can signal it (it is outside the pid
      namespace) and the pool's own kills forget it first (``kill_sandbox``);
    * the host's OOM killer: a kill in the VM's memory cgroup whose limit was never reached
      (reached, the task used its memory up: its own doing);
    * ``run_as`` set (the runner is root): its agent or namespace init killed by a signal,
      which the task's user cannot send (bwrap then exits 128 + the signal). As another
      user the task shares the agent's uid and may have killed it itself;
    * ``run_as`` set, the sandbox still running: its agent or namespace init stopped
      (SIGSTOP) or traced (ptrace), which the task's user cannot do to a process of
      another user (``halted_process``)."""
    proc = children.get(private.get("pid"))  # None: stopped by the pool, or not ours
    if proc is not None and run_as is not None and proc.poll() is None:
        halted = halted_process(private, run_as)  # said at once: the wait below is for a dying sandbox
        if halted:
            return halted
    status = exit_status(proc, DEATH_WAIT_S) if proc is not None else None
    if status is None:
        return halted_process(private, run_as) if proc is not None and run_as is not None else None
    kills, limit_hits = (now - then for now, then in zip(
        cgroups.oom_counts(private.get("cgroups") or []), private.get("oom_baseline") or (0, 0)))
    if limit_hits:
        return None
    if kills:
        return f"the host's OOM killer killed {kills} of its processes (its memory limit was never reached)"
    if status < 0:
        return f"its bwrap (pid {private['pid']}) was killed by {signal_name(-status)}, which the pool did not send"
    if status > 128 and run_as is not None:
        return (f"its guest agent or namespace init died of {signal_name(status - 128)}, which the "
                f"task's user (uid {run_as}) cannot send")
    return None


def halted_process(private: dict, run_as: int) -> str | None:
    """Which process of a running sandbox that the task's user (``run_as``) cannot signal
    or trace is stopped or traced (its guest agent, its namespace init: an outside act that
    makes the agent stop answering, as a kill does; ``halted.halted_tree``), or None."""
    init_pid, created = private.get("init_pid"), private.get("init_create_time")
    if not init_pid or created is None or not same_process(init_pid, created):
        return None
    return halted_tree(init_pid, run_as)


def kill_all() -> None:
    """Kill every sandbox this process started and has not stopped, each with bwrap's child
    too (``kill_sandbox`` stops a bwrap that has not reported it and kills both): what an
    owner does on its way out (see the module doc). Never raises."""
    if _launcher_instance is None or _launcher_instance.pid != os.getpid():
        return  # a forked child's copy of the parent's list: not its sandboxes
    for pid, proc in list(children.items()):
        if proc.poll() is None:  # ours and unreaped: the pid cannot have been reused
            try:
                kill_sandbox({"pid": pid, "create_time": create_time(pid)})
            except Exception:  # noqa: BLE001 - best effort on the way out
                pass


def _unreported_init(pid: int) -> tuple[int | None, float | None]:
    """The namespace init of a bwrap that has not reported it yet (a boot that failed before
    --info-fd said), as (pid, create time), or (None, None).

    It must be killed by hand: bwrap's --die-with-parent is set up by the init itself, and an
    init whose bwrap dies before that outlives it as an orphan sandbox. bwrap is stopped
    first, so that it cannot fork the init after we looked."""
    import psutil  # a failed boot's path only: the pool's Manager need not import it

    try:
        os.kill(pid, signal.SIGSTOP)
        bwrap = psutil.Process(pid)
        # kill() returns before the signal lands; until then bwrap may still fork
        deadline = time.monotonic() + KILL_WAIT_S
        while bwrap.status() not in (psutil.STATUS_STOPPED, psutil.STATUS_ZOMBIE):
            if time.monotonic() > deadline:
                break
            time.sleep(0.0005)
        children = bwrap.children()
    except (ProcessLookupError, psutil.Error):
        return None, None
    for child in children:
        try:
            return child.pid, child.create_time()
        except psutil.Error:
            continue
    return None, None


def sandbox_alive(meta: dict, vm_dir: Path) -> bool:
    return is_our_bwrap(meta.get("pid"), meta.get("create_time"), vm_dir)


def is_our_bwrap(pid, create_time, vm_dir: Path) -> bool:
    """Whether ``pid`` is still the bwrap of ``vm_dir``."""
    return runs_vm(pid, create_time, vm_dir)


def kill_unrecorded(vm_dir: Path) -> None:
    """SIGKILL every bwrap whose command line names ``vm_dir``, and wait (at most
    KILL_WAIT_S) until each has exited: one started by an owner killed before it could
    record it in meta.json (its --die-with-parent not set up yet), or the orphaned child of
    a bwrap killed before it reported its init."""
    import psutil  # a failed boot's and a sweep's path only

    folder = f"{vm_dir}/"
    killed = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        try:
            if proc.info["name"] == "bwrap" and any(folder in arg for arg in proc.info["cmdline"] or ()):
                proc.kill()
                killed.append(proc)
        except psutil.Error:
            pass
    killed_all = list(killed)
    deadline = time.monotonic() + KILL_WAIT_S
    while killed and time.monotonic() < deadline:
        time.sleep(0.005)
        # exited counts as gone even unreaped: an orphan's zombie may wait long for its reaper
        killed = [proc for proc in killed if same_process(proc.pid, proc.create_time())]
    for proc in killed_all:
        orphans.reap(proc.pid)  # bwrap's orphaned child is the init of its pid namespace


def kill_recorded(meta: dict, vm_dir: Path) -> None:
    """Kill what meta.json records, if it is still that sandbox."""
    if is_our_bwrap(meta.get("pid"), meta.get("create_time"), vm_dir):
        private = dict(meta)
    else:
        # bwrap is gone; its init may linger for a moment, and is known by its start time
        private = {"init_pid": meta.get("init_pid"),
                   "init_create_time": meta.get("init_create_time")}
    try:
        kill_sandbox(private)
    except VMError:
        pass  # sweep is best effort; the folder goes regardless
    if started_at(meta.get("pid"), meta.get("create_time")):
        # an owner killed by SIGKILL left its bwrap to this process, which started it and
        # adopts while it lives (orphans.py): gone now, ours to reap
        orphans.reap(meta.get("pid"), recorded=True)


def read_until(fd: int, terminator: bytes, deadline: float, budget: str,
               bwrap_pidfd: int | None = None) -> bytes:
    """Bytes from a pipe up to ``terminator`` or EOF; VMError at the deadline, the boot's
    ``budget`` named as the user set it (``2s (boot-timeout-s in run.toml)``), or as soon as
    the bwrap of ``bwrap_pidfd`` has exited with the pipe still empty and open: its child,
    which holds the pipe's write end, waits for a word from bwrap that will never come (a
    bwrap killed after it reported the init, before it let it go on: the ready pipe), so no
    EOF comes either. Any fd: a pool of a few hundred VMs holds fds above select()'s 1023
    (poll, never select)."""
    import select

    poller = select.poll()
    poller.register(fd, select.POLLIN)
    if bwrap_pidfd is not None:
        poller.register(bwrap_pidfd, select.POLLIN)
    data = b""
    while terminator not in data:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise VMError(f"timed out waiting for the guest agent after {budget}")
        ready = {ready_fd for ready_fd, _ in poller.poll(remaining * 1000)}
        if fd in ready:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            data += chunk
        elif bwrap_pidfd in ready:
            raise VMError(f"bwrap {_exit_said(bwrap_pidfd)} before the guest agent was ready")
    return data


def _exit_said(pidfd: int) -> str:
    """How the exited process of ``pidfd`` ended (``was killed by SIGTERM``), left unreaped."""
    try:
        info = os.waitid(os.P_PIDFD, pidfd, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except (AttributeError, OSError):
        info = None
    if info is None:
        return "exited"
    if info.si_code == os.CLD_EXITED:
        return f"exited with status {info.si_status}"
    return f"was killed by {signal_name(info.si_status)}"
