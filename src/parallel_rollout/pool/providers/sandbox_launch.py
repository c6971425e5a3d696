"""The launch of one process-provider sandbox: bwrap started under the VM folder's cgroups,
and the wait for its guest agent to say it is ready.

::

    launch ── sandbox_log.start (a shell joins the cgroups, execs bwrap) ──► bwrap
       │  --info-fd:  {"child-pid": N}   the pid namespace's init: written to meta.json at once
       │  ready pipe: "ready"            the agent listens on the socket's fd passed in
       ▼
    the VM's private record (pids, start times, cgroups), or VMError with the agent's log

The agent's socket is bound and listened on here (``sandbox_fs.listen``) and only its fd goes
in; after the start only the agent holds it, so a dead agent's socket refuses at once. Any
failure of the boot, even an interrupt, kills what was started (``kill_sandbox``). A bwrap
that dies mid-boot ends the wait at once (a pidfd polled with the pipes): its child may live on
with the pipes open, waiting for bwrap's word, so their EOF need not come. bwrap's
argv is the provider's (``process.py``, ``sandbox_argv.py``); this is what runs it.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Callable

from ...errors import VMError
from . import cgroups, orphans, sandbox_fs, sandbox_log, seccomp
from .common import create_time, log_tail
from .sandbox_processes import KILL_WAIT_S, children, kill_sandbox, pidfd_of, read_until


def launch(vm_id: str, vm_dir: Path, socket_path: Path, group: cgroups.VMCgroup,
           argv_for: Callable[[int, int, int], list[str]], *, nofile: int, boot_timeout_s: float,
           boot_timeout_said: str, write_meta: Callable[[dict], None], own_userns: bool) -> dict:
    """Start ``vm_id``'s sandbox in ``vm_dir`` (bwrap's argv from ``argv_for(ready_fd,
    info_fd, listen_fd)``) and wait for the agent's ready line: the VM's private record,
    passed to ``write_meta`` as soon as the init's pid is known. VMError (with the agent's
    log) when the agent is not ready within ``boot_timeout_s`` (said as ``boot_timeout_said``)."""
    listener = sandbox_fs.listen(socket_path)
    ready_r, ready_w = os.pipe()
    info_r, info_w = os.pipe()
    seccomp_fd = seccomp.program_fd()
    argv = argv_for(ready_w, info_w, listener.fileno())
    argv = [argv[0], "--seccomp", str(seccomp_fd), *argv[1:]]
    log_path = vm_dir / "agent.log"
    orphans.hold()  # until kill_sandbox: the init bwrap leaves unreaped comes to us (orphans.py)
    try:
        # joins the cgroups before bwrap forks anything: the shell in front of it
        proc, logged = sandbox_log.start(argv, log_path, (ready_w, info_w, seccomp_fd, listener.fileno()),
                                         cgroup_procs=group.procs, nofile=nofile)
    except BaseException as exc:
        orphans.release()
        for fd in (ready_r, ready_w, info_r, info_w):
            os.close(fd)
        if not isinstance(exc, OSError):
            raise
        raise VMError(f"VM {vm_id}: cannot start bwrap: {exc}") from exc
    finally:
        os.close(seccomp_fd)
        # only the agent holds it now: when the agent dies, connecting is refused at once
        listener.close()
    os.close(ready_w)
    os.close(info_w)
    children[proc.pid] = proc
    private = {"pid": proc.pid, "create_time": create_time(proc.pid),
               "vm_dir": str(vm_dir), "cgroups": group.paths,
               "oom_baseline": cgroups.oom_counts(group.paths)}  # the folder's so far
    bwrap_pidfd = pidfd_of(proc.pid, private["create_time"])
    try:
        deadline = time.monotonic() + boot_timeout_s
        info = read_until(info_r, b"}", deadline, boot_timeout_said, bwrap_pidfd)
        try:
            init_pid = json.loads(info)["child-pid"]
        except (ValueError, KeyError) as exc:
            raise VMError(f"bwrap gave no child pid (got {info!r})") from exc
        private["init_pid"] = init_pid
        private["init_create_time"] = create_time(init_pid)
        # what a sweep kills by pid; until now it finds the sandbox by the folder's
        # cgroups and bwrap's command line (``sweep``)
        write_meta(private)
        if not read_until(ready_r, b"\n", deadline, boot_timeout_said, bwrap_pidfd).startswith(b"ready"):
            raise VMError("the guest agent exited before it was ready")
        # once the agent runs, bwrap has built the sandbox: its /dev/pts is there
        sandbox_fs.cap_ptys(init_pid, own_userns=own_userns)
    except BaseException as exc:
        kill_sandbox(private)  # whatever stopped the boot, even an interrupt
        if not isinstance(exc, VMError):
            raise
        logged.wait(KILL_WAIT_S)  # the pipe's last words, in the file
        tail = log_tail(log_path)
        raise VMError(f"VM {vm_id} did not boot: {exc}; agent log: {tail}") from None
    finally:
        for fd in (ready_r, info_r, bwrap_pidfd):
            if fd is not None:
                os.close(fd)
    return private
