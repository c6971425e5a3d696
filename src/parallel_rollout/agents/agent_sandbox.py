"""The sandbox a ``command`` agent's program runs in (bubblewrap): what it sees of the host,
and the start's probe that it can be made here (``check_sandbox``).

``in_own_pid_namespace`` wraps an argv: a PID namespace and a session of its own, so that it
cannot signal its worker, and a view of the host's filesystem with what it must not reach
hidden. ``agents.command_process`` starts every agent so; ``agents.command`` probes it before
the run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile


def in_own_pid_namespace(argv: list[str], hidden: tuple[str, ...] = ()) -> list[str]:
    """``argv`` under bubblewrap, in a PID namespace of its own: it and what it starts see and
    can signal only one another, never its worker (its parent is the namespace's init, which
    ignores them), so it cannot erase an attempt it is failing by killing the process that
    would record it; and in a session of its own (``--new-session``), so that a signal to its
    process group cannot reach its bubblewrap either (only a signal from outside kills that:
    ``ProcessKilled``, the runner's failure, not the agent's).

    The filesystem is the runner's, bound read-write (``/proc`` is the namespace's own, with
    ``/proc/sys`` read-only), but for:

    - ``hidden``: what exists of it when it starts is replaced by nothing it can read or
      change: a folder by an empty read-only tmpfs (the providers' VM folders: sockets of
      guest agents, the guest agent's cached bytecode; an OSWorld task folder; its run's
      folder: it can neither read a record's ``eval``, the expected answer, nor write a
      record of its own), a file by ``/dev/null``, which it cannot open (a task file: the
      answer key).

    ``--die-with-parent`` is the parent-death signal (SIGKILL) that setpriv gave it before:
    the env loop's thread that started it ends, the worker's death included, and the
    namespace dies with everything in it. As root it holds no capability (``--cap-drop ALL``:
    no mount, setns, ptrace, module, no file of another user's, no raw socket); it keeps
    root's uid, so a root-owned file it can read or write by its mode bits it still can, but
    the cgroup tree is read-only (a ``cgroup.kill`` there would kill the worker).
    Unprivileged, bubblewrap makes a user namespace and the agent holds no capability."""
    mounts: list[str] = []
    covered: list[str] = []
    for path in hidden:
        if any(path == top or path.startswith(top.rstrip("/") + "/") for top in covered):
            continue  # inside a folder already hidden
        if os.path.isdir(path):
            mounts += ["--tmpfs", path, "--remount-ro", path]
            covered.append(path)
        elif os.path.exists(path):
            mounts += ["--ro-bind", os.devnull, path]
    return [*_SANDBOX, *mounts, "--", *argv]


#: bubblewrap, which the process provider needs too (./dev installs it)
_BWRAP = shutil.which("bwrap")
_SANDBOX = [_BWRAP or "bwrap", "--unshare-pid", "--die-with-parent", "--new-session", "--dev-bind", "/", "/",
            "--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys"]
if os.geteuid() == 0:
    _SANDBOX += ["--cap-drop", "ALL", "--ro-bind-try", "/sys/fs/cgroup", "/sys/fs/cgroup"]


def check_sandbox(hidden: tuple[str, ...] = ()) -> str | None:
    """Why an agent command cannot be started in a PID namespace of its own here, with
    ``hidden`` hidden as an agent's start hides it (no bubblewrap, or one that cannot make the
    namespace: no user namespaces for this user; or cannot mount what hides a folder or a
    file: a folder of its own and a file of its own are hidden too, whatever exists of
    ``hidden`` yet), or None when it can: a host where that fails is refused before the run,
    not found by every attempt."""
    if _BWRAP is None:
        return "bubblewrap (bwrap) is not installed: apt-get install bubblewrap (./dev installs it)"
    with tempfile.TemporaryDirectory(prefix="parallel-rollout-probe-") as scratch:
        folder, file = os.path.join(scratch, "folder"), os.path.join(scratch, "file")
        os.mkdir(folder)
        open(file, "w").close()
        try:
            probe = subprocess.run(in_own_pid_namespace(["true"], (*hidden, folder, file)), capture_output=True,
                                   text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"bubblewrap cannot run: {exc}"
    if probe.returncode != 0:
        return (f"bubblewrap cannot make a PID namespace here with the folders and files it hides from the "
                f"agent: {probe.stderr.strip()[-500:]}")
    return None
