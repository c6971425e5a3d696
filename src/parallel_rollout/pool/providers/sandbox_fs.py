"""What a process sandbox sees of the host, and how the runner reaches its agent: the
system folders bound read-only (merged-/usr symlinks kept), the host's secrets masked by an
empty file, the guest's python3 (one under the bound folders), and the agent's listening
socket, bound and listened on by the runner outside the sandbox so that no code inside can
unlink it and answer in the agent's place (see process.py, "The boundary")."""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path

from ...errors import VMError

SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
#: host files no sandbox may read, replaced by empty ones where they exist
SECRET_FILES = ("/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-",
                "/etc/security/opasswd", "/etc/sudoers")


def listen(path: Path) -> socket.socket:
    """The agent's listening unix socket, bound here (0600: only the runner talks to it)."""
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(str(path))
        os.chmod(path, 0o600)
        listener.listen(128)
    except OSError as exc:
        listener.close()
        raise VMError(f"cannot listen on {path}: {exc}") from exc
    return listener


def system_binds() -> list[str]:
    """Read-only binds of the system folders; merged-/usr symlinks stay symlinks."""
    args = []
    for path in SYSTEM_DIRS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    return args


def secret_masks(empty: Path) -> list[str]:
    """An empty file over each of the host's secrets (/dev/null would not do: binds are
    nodev, so opening it fails instead of reading nothing)."""
    empty.touch(mode=0o444)
    return [arg for path in SECRET_FILES if os.path.isfile(path)
            for arg in ("--ro-bind", str(empty), path)]


def guest_python() -> str | None:
    # only an interpreter under the bound system folders exists inside the sandbox
    found = shutil.which("python3", path="/usr/local/bin:/usr/bin")
    return found if found and found.startswith("/usr/") else None
