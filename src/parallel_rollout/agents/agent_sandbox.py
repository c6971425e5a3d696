"""The sandbox a ``command`` agent's program runs in (bubblewrap): what it sees of the host,
and the start's probe that it can be made here (``check_sandbox``).

``in_own_pid_namespace`` wraps an argv: a PID namespace and a session of its own, so that it
cannot signal its worker, and a view of the host's filesystem in which it can change only
scratch space and its own folders, never the runner's code, and reaches nothing hidden.
``agents.command_process`` starts every agent so; ``agents.command`` probes it before the run.

The view, mount by mount in bubblewrap's order (a later mount covers an earlier one)::

    /                        read-only, every mount under it too (the cgroup tree among them)
    /dev                     the host's devices, as they are
    /proc                    its PID namespace's own; /proc/sys read-only
    writable                 /tmp, /var/tmp, /dev/shm, $HOME, its current folder (the runner's)
    pins                     each folder between a writable one and a path protected inside it,
                             bound on itself (still writable): a mount point cannot be renamed
    the runner's code        read-only again where it lies inside a writable folder: the
                             parallel_rollout package, its project (an editable install),
                             sys.prefix, sys.base_prefix, sys.exec_prefix, site-packages
    hidden                   the caller's: a folder an empty read-only tmpfs (a transient
                             socket folder, pymp-*, an empty tmpfs), a file /dev/null

Why the pins: a read-only bind protects what lies below its mount point, not the name that
leads there. An agent that renamed the folder above it (``~/.pyenv``, which holds the
interpreter of ``~/.pyenv/versions/3.11.7``) could put a folder of its own by the old name,
an interpreter it wrote, which every later run would start; a folder that is a mount point
cannot be renamed or removed (EBUSY). The same holds for a hidden folder or file inside a
writable one (the VM folders under ``/tmp``).

What is writable and what is the runner's code (``HostView``) is worked out once per process
(``host_view``: a worker's current folder, $HOME and interpreter do not change); what is
hidden is the caller's to say at each start (a run may make a VM folder meanwhile).
"""

from __future__ import annotations

import functools
import os
import shutil
import site
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..pool.providers import orphans
from ..pool.providers.host_dirs import existing, outermost, transient_socket_folder

#: scratch space an agent's program may write, besides $HOME and its current folder
SCRATCH = ("/tmp", "/var/tmp", "/dev/shm")


@dataclass(frozen=True)
class HostView:
    """What of the host's filesystem an agent's program may write, and what inside that it
    may not: real paths, none inside another of its kind."""

    #: bound read-write over the read-only host
    writable: tuple[str, ...]
    #: the runner's code and interpreter that lie inside ``writable``, bound read-only again
    readonly: tuple[str, ...]


def host_view() -> HostView:
    """This process's view: the writable folders (``SCRATCH``, $HOME, the current folder)
    but those inside the runner's code, and the runner's code that lies inside them; worked
    out once for each current folder and $HOME (a worker has one of each)."""
    return _host_view(current_folder(), os.path.expanduser("~"))


@functools.lru_cache(maxsize=8)
def _host_view(cwd: str, home: str) -> HostView:
    code = [path for path in outermost(runner_code()) if path != "/"]
    writable = [path for path in outermost(existing([*SCRATCH, home, cwd]))
                if path != "/" and not any(within(path, top) for top in code)]
    return HostView(tuple(writable), tuple(path for path in code
                                           if any(within(path, top) for top in writable)))


def runner_code() -> list[str]:
    """The real paths of the runner's own code and interpreter, as far as they exist: the
    ``parallel_rollout`` package and, installed as editable (outside every prefix), its
    project's folder (the nearest with a pyproject.toml above it); ``sys.prefix``,
    ``sys.base_prefix``, ``sys.exec_prefix``, the interpreter, every site-packages folder
    (the user's too when the interpreter reads it)."""
    package = Path(__file__).resolve().parents[1]
    prefixes = existing([sys.prefix, sys.base_prefix, sys.exec_prefix, *site.getsitepackages()])
    found = [str(package), *prefixes, sys.executable]
    if site.ENABLE_USER_SITE:
        found.append(site.getusersitepackages())
    if not any(within(str(package), prefix) for prefix in prefixes):
        found += [str(folder) for folder in package.parents if (folder / "pyproject.toml").is_file()][:1]
    return existing(found)


def in_own_pid_namespace(argv: list[str], hidden: tuple[str, ...] = (), view: HostView | None = None) -> list[str]:
    """``argv`` under bubblewrap, in a PID namespace of its own: it and what it starts see and
    can signal only one another, never its worker (its parent is the namespace's init, which
    ignores them), so it cannot erase an attempt it is failing by killing the process that
    would record it; and in a session of its own (``--new-session``), so that a signal to its
    process group cannot reach its bubblewrap either (only a signal from outside kills that:
    ``ProcessKilled``, the runner's failure, not the agent's).

    The filesystem is the host's, read-only but for ``view.writable`` (``host_view`` unless
    given), with the runner's code inside those read-only again (the module's docstring), and
    ``hidden``: what exists of it when it starts is replaced by nothing it can read or change:
    a folder by an empty read-only tmpfs (the providers' VM folders: sockets of guest agents,
    the guest agent's cached bytecode; an OSWorld task folder; its run's folder: it can
    neither read a record's ``eval``, the expected answer, nor write a record of its own; a
    container daemon's run folder), a file by ``/dev/null``, which it cannot open (a task
    file: the answer key) nor connect to (a container daemon's socket).

    ``--die-with-parent`` is the parent-death signal (SIGKILL) that setpriv gave it before:
    the env loop's thread that started it ends, the worker's death included, and the
    namespace dies with everything in it. As root it holds no capability (``--cap-drop ALL``:
    no mount, setns, ptrace, module, no file of another user's, no raw socket); it keeps
    root's uid, so a root-owned file in a writable folder it can change by its mode bits, but
    nothing elsewhere: the cgroup tree is read-only with the rest (a ``cgroup.kill`` there
    would kill the worker). Unprivileged, bubblewrap makes a user namespace and the agent
    holds no capability."""
    view = host_view() if view is None else view
    hiding: list[str] = []
    covered: list[str] = []
    protected = list(view.readonly)
    # by real path: one reached through a symlink is what it points to (a symlink into a
    # folder hidden already would be mounted over again, inside a read-only tmpfs: bwrap fails)
    for path in dict.fromkeys(os.path.realpath(path) for path in hidden):
        if any(within(path, top) for top in covered):
            continue  # inside a folder already hidden
        if os.path.isdir(path):
            hiding += ["--tmpfs", path]
            # a transient socket folder's tmpfs stays writable: another process's folder
            # removed between the two steps took the tmpfs with it, and bwrap failed the
            # agent's start ("Can't remount readonly … Unable to find … in mount table");
            # what it writes there stays in its own tmpfs, and the sockets stay out of reach
            if not transient_socket_folder(path):
                hiding += ["--remount-ro", path]
            covered.append(path)
        elif os.path.exists(path):  # a file, a socket
            hiding += ["--ro-bind", os.devnull, path]
        else:
            continue
        protected.append(path)
    pins = sorted({pin for path in protected for pin in _pins(path, view)})
    return [*_SANDBOX, *_binds("--bind", view.writable), *_binds("--bind", pins),
            *_binds("--ro-bind", view.readonly), *hiding, "--", *argv]


#: bubblewrap, which the process provider needs too (./dev installs it)
_BWRAP = shutil.which("bwrap")
_SANDBOX = [_BWRAP or "bwrap", "--unshare-pid", "--die-with-parent", "--new-session", "--ro-bind", "/", "/",
            "--dev-bind", "/dev", "/dev", "--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys"]
if os.geteuid() == 0:
    _SANDBOX += ["--cap-drop", "ALL"]


def check_sandbox(hidden: tuple[str, ...] = ()) -> str | None:
    """Why an agent command cannot be started in a PID namespace of its own here, with the
    view of the host an agent's start gives it and ``hidden`` hidden (no bubblewrap, or one
    that cannot make the namespace: no user namespaces for this user; or cannot bind what it
    shows writable, pin or bind read-only, or mount what hides a folder or a file: a folder
    of the runner's code inside a writable folder, a folder and a file to hide are probed
    too, whatever exists of them here), or None when it can: a host where that fails is
    refused before the run, not found by every attempt."""
    if _BWRAP is None:
        return "bubblewrap (bwrap) is not installed: apt-get install bubblewrap (./dev installs it)"
    view = host_view()
    with tempfile.TemporaryDirectory(prefix="parallel-rollout-probe-") as scratch:
        code, folder, file = (os.path.join(scratch, "pinned", name) for name in ("code", "folder", "file"))
        for made in (code, folder):
            os.makedirs(made)
        open(file, "w").close()
        probe_view = HostView(view.writable, (*view.readonly, os.path.realpath(code)))
        try:
            probe = orphans.run_bwrap(in_own_pid_namespace(["true"], (*hidden, folder, file), probe_view),
                                      capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"bubblewrap cannot run: {exc}"
    if probe.returncode != 0:
        return (f"bubblewrap cannot make a PID namespace here with the view of the host it gives the agent (the "
                f"host read-only but for {', '.join(view.writable)}; the runner's code read-only inside those; "
                f"the folders and files it hides from the agent): {probe.stderr.strip()[-500:]}")
    return None


def _pins(path: str, view: HostView) -> list[str]:
    """The folders between the deepest writable folder that holds ``path`` and ``path``,
    none when no writable folder holds it or a read-only one lies between (bound on itself,
    a folder cannot be renamed, nor what lies inside it moved away)."""
    real = os.path.realpath(path)
    tops = [top for top in view.writable if within(real, top)]
    if not tops:
        return []
    top = max(tops, key=len)
    if any(within(real, code) and within(code, top) and code != real for code in view.readonly):
        return []
    pins = []
    folder = os.path.dirname(real)
    while folder != top and within(folder, top):
        pins.append(folder)
        folder = os.path.dirname(folder)
    return pins


def _binds(option: str, paths) -> list[str]:
    return [part for path in paths for part in (option, path, path)]


def within(path: str, top: str) -> bool:
    """Whether ``path`` is ``top`` or lies inside it (both absolute and normalized)."""
    return path == top or path.startswith(top.rstrip("/") + "/")


def current_folder() -> str:
    try:
        return os.getcwd()
    except OSError:  # removed under it: nothing of it to write
        return ""
