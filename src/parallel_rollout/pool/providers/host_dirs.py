"""Where the providers that run VMs on this host keep them: each one's base folder (its VMs'
folders, their guest agents' sockets, the process provider's cached guest-agent bytecode)
and the sandbox uids' lock files (``sandbox_uids.py``); the runner's caches (``data_caches``:
built images, OSWorld's downloads, the rag mode's indexes); and the control sockets
(``control_sockets``) through which the container daemons (the docker provider's VMs, and the
host) or the runner itself (its fork server, a Ray node) are driven.

One statement of these folders, which their providers and modes read (``process``,
``docker``, ``qemu``, ``sandbox_uids``, ``images``, ``envs.osworld.downloads``,
``envs.rag.corpus``) and which ``private_folders`` and ``data_caches`` list for what must
never reach them: the ``command`` agent's program is shown an empty, read-only folder in place
of each (``agents.agent_sandbox``), so that it can neither replace a VM's guest agent nor the
code every later sandbox runs, nor read or rewrite a gold file a check compares against or the
image a VM boots from; each control socket is ``/dev/null`` to it, and each folder of
them empty, so that it cannot drive Docker (start a container with the host's / in it, or
exec into a VM) nor have the runner's fork server fork code of its own outside its sandbox. A light module:
it imports no provider.
"""

from __future__ import annotations

import fnmatch
import glob
import os
import tempfile
from pathlib import Path
from typing import NamedTuple

from ...errors import ConfigError
from ...policy_gate import GATE_FOLDER_PREFIX
from .common import SHARED_TMP, secure_base_dir


class BaseDir(NamedTuple):
    """A provider's base folder: ``$env``, else ``default``."""

    env: str
    default: str

    def path(self) -> Path:
        """The folder this process's environment names, else the default (``~`` expanded)."""
        return Path(os.environ.get(self.env) or self.default).expanduser()

    def default_path(self) -> Path:
        """The default, whatever the environment names (``~`` expanded)."""
        return Path(self.default).expanduser()


PROCESS = BaseDir("PARALLEL_ROLLOUT_PROCESS_DIR", "/tmp/parallel-rollout/process")
DOCKER = BaseDir("PARALLEL_ROLLOUT_DOCKER_DIR", "/tmp/parallel-rollout/docker")
QEMU = BaseDir("PARALLEL_ROLLOUT_QEMU_DIR", "/tmp/parallel-rollout/qemu")
#: the runner's caches: built images and root filesystems (``images``; a QEMU VM's disk is an
#: overlay on the cached image, read live), and OSWorld's downloads (``envs.osworld.downloads``:
#: a task's input files and the gold files its checks compare against, fetched once per machine)
IMAGE_CACHE = BaseDir("PARALLEL_ROLLOUT_CACHE", "~/.cache/parallel-rollout")
OSWORLD_CACHE = BaseDir("PARALLEL_ROLLOUT_OSWORLD_CACHE", "~/.cache/parallel-rollout/osworld")
#: where the Docker CLI finds its daemon when $DOCKER_HOST names none (``scripts/dockerd.sh``'s)
DEFAULT_DOCKER_HOST = "unix:///var/run/docker.sock"
#: the container daemons' control sockets and run folders: Docker's socket; containerd's
#: folder (its socket, its ttrpc and debug sockets, its shims' sockets under s/) and
#: dockerd's (the containerd dockerd starts itself keeps its sockets in containerd/ there);
#: podman's; rootless Docker's and podman's in the user's runtime folder, Docker Desktop's
#: and a docker context's in ~/.docker (``~`` and ``$XDG_RUNTIME_DIR`` expanded)
DAEMON_SOCKETS = ("/var/run/docker.sock", "/run/docker.sock", "/run/containerd", "/run/docker", "/run/podman",
                  "$XDG_RUNTIME_DIR/docker.sock", "$XDG_RUNTIME_DIR/podman", "~/.docker/run/docker.sock",
                  "~/.docker/desktop/docker.sock")
#: where Python's multiprocessing keeps its sockets (``pymp-*`` in the temp folder: the
#: runner's fork server, which on Python 3.11 runs whatever a connection sends it, without
#: an authentication key; its Manager's), Ray's session folders (a raylet's, a plasma store's)
#: and an RL scheduler's policy gate (``pr-gate-*``: a connection that says "begin" and never
#: "end" held the trainer's ``suspend()`` for ever)
RUNNER_SOCKET_FOLDERS = ("{tmp}/pymp-*", "/tmp/pymp-*", "$RAY_TMPDIR", "/tmp/ray",
                         f"{{tmp}}/{GATE_FOLDER_PREFIX}*", f"/tmp/{GATE_FOLDER_PREFIX}*")
#: the lock files of the sandbox uids' range, one per uid: host-wide, whatever folder a run's VMs use
UIDS_LOCK_DIR = SHARED_TMP / "parallel-rollout" / "uids"


def private_folders(make: bool = True) -> list[str]:
    """Every folder above, as this process's environment names it and by default (another
    run on this host may use the default), made now as its provider makes it when missing
    (mode 0700, ours: so that nothing else makes it first and fills it; not with ``make``
    False: those that exist), each once and none inside another one of the list."""
    folders = [UIDS_LOCK_DIR, *(Path(base.default) for base in (PROCESS, DOCKER, QEMU)),
               *(base.path() for base in (PROCESS, DOCKER, QEMU))]
    found: list[str] = []
    for folder in folders:
        try:
            if make:
                secure_base_dir(folder)
        except ConfigError:
            pass  # not ours (another user's, a symlink): hidden all the same when it is a folder
        path = os.path.realpath(folder)
        if os.path.isdir(path) and path not in found:
            found.append(path)
    return outermost(found)


def rag_cache(env: bool = True) -> Path:
    """The rag mode's index cache (``envs.rag.corpus``): ``$PARALLEL_ROLLOUT_CACHE/rag``, else
    ``rag`` in ``$XDG_CACHE_HOME/parallel-rollout`` or ``~/.cache/parallel-rollout`` (with
    ``env`` False: the last, whatever the environment says)."""
    if env and os.environ.get(IMAGE_CACHE.env):
        return IMAGE_CACHE.path() / "rag"
    base = (env and os.environ.get("XDG_CACHE_HOME")) or Path.home() / ".cache"
    return Path(base) / "parallel-rollout" / "rag"


def data_caches(make: bool = True) -> list[str]:
    """The runner's caches, by their real paths, each once (one may lie inside another: the
    defaults do): as this process's environment names them (``IMAGE_CACHE``,
    ``OSWORLD_CACHE``, ``rag_cache``), made now when missing (not with ``make`` False: those
    that exist), so that no program of the runner's user can make one first and fill it with
    files a later run takes for a cached download or image; and the default ones that exist
    when the environment names others (an earlier run's downloads and gold files are there)."""
    named = _known([IMAGE_CACHE.path, OSWORLD_CACHE.path, rag_cache])
    if make:
        for folder in named:
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError:
                pass  # not ours to make (a read-only home): hidden when it exists
    return existing([*named, *_known([IMAGE_CACHE.default_path, OSWORLD_CACHE.default_path,
                                      lambda: rag_cache(env=False)])])


def _known(paths) -> list[Path]:
    """What each of ``paths`` (callables) gives, but those that name a folder under a home
    this process has none of (no $HOME, no passwd entry: RuntimeError)."""
    found = []
    for path in paths:
        try:
            found.append(path())
        except RuntimeError:
            pass
    return found


def control_sockets() -> list[str]:
    """The sockets, and the folders of sockets, through which a process of the runner's
    user could drive the host or the runner itself, as far as they exist now: the container
    daemons' (``DAEMON_SOCKETS``, and the ``unix://`` socket $DOCKER_HOST names: a tcp://
    address is no path to hide), the runner's fork server's and Ray's
    (``RUNNER_SOCKET_FOLDERS``); each once, by its real path."""
    named = [os.path.expanduser(os.path.expandvars(path)) for path in DAEMON_SOCKETS if
             "$" not in os.path.expandvars(path)]  # a variable that is not set names nothing
    docker_host = os.environ.get("DOCKER_HOST", "")
    if docker_host.startswith("unix://"):
        named.append(docker_host[len("unix://"):])
    for pattern in _runner_socket_patterns():
        named += glob.glob(pattern) if "*" in pattern else [pattern]
    return existing(named)


def transient_socket_folder(path: str) -> bool:
    """Whether ``path`` is one of ``RUNNER_SOCKET_FOLDERS``' globbed folders (``pymp-*``, the
    policy gates'): made and removed by processes that come and go, another run's included,
    so one may vanish as a sandbox that hides it starts."""
    return any("*" in pattern and fnmatch.fnmatchcase(path, pattern) for pattern in _runner_socket_patterns())


def _runner_socket_patterns() -> list[str]:
    """``RUNNER_SOCKET_FOLDERS`` as this process's temp folder and environment name them
    (one whose variable is not set names nothing)."""
    patterns = [os.path.expandvars(pattern.format(tmp=tempfile.gettempdir())) for pattern in RUNNER_SOCKET_FOLDERS]
    return [pattern for pattern in patterns if "$" not in pattern]


def outermost(paths: list[str]) -> list[str]:
    """``paths`` (absolute, normalized) but those inside another of them."""
    return [path for path in paths
            if not any(other != path and path.startswith(other.rstrip("/") + "/") for other in paths)]


def existing(paths) -> list[str]:
    """The real paths of those of ``paths`` that exist, each once, in order."""
    real = (os.path.realpath(path) for path in paths if path)
    return list(dict.fromkeys(path for path in real if os.path.exists(path)))
