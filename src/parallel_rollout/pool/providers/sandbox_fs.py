"""What a process sandbox sees of the host, and how the runner reaches its agent: the system
folders bound read-only (merged-/usr symlinks kept) and their programs' data of /var, the
host's secrets masked by an empty file, the sandbox's user in its /etc/passwd, folders and
guest files its user can walk and read, the guest's python3 (one under the bound folders), and
the agent's listening socket, bound and listened on by the runner outside the sandbox so that
no code inside can unlink it and answer in the agent's place (see process.py, "The boundary");
the folders no command may write (the sandbox's root and /dev, read-only once built), and its
pseudo-terminals capped (:func:`cap_ptys`)."""

from __future__ import annotations

import fcntl
import functools
import logging
import os
import shutil
import socket
import subprocess
import threading
from pathlib import Path

from ...errors import VMError
from . import images
from .common import write_new_file

log = logging.getLogger(__name__)

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


def socket_removed(path: Path) -> str | None:
    """Why the agent's socket at ``path`` (``listen``'s) cannot be reached, when it was
    removed on the host, with its folder or the VM's: no code in the sandbox sees that
    folder, so it is not the task's doing. None while the socket is there."""
    if path.is_socket():
        return None
    gone = next((folder for folder in (path.parent.parent, path.parent) if not folder.is_dir()), None)
    what = f"its folder {gone}" if gone is not None else f"its agent's socket {path}"
    return (f"{what} was removed from outside (no code in the sandbox sees that folder: not the "
            "task's doing)")


def system_binds(etc: Path | None = None) -> list[str]:
    """Read-only binds of the system folders, /etc's copy (``system_data.prepare_etc``) at
    /etc where there is one; merged-/usr symlinks stay symlinks."""
    args = []
    for path in SYSTEM_DIRS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", str(etc) if path == "/etc" and etc is not None else path, path]
    return args


def secret_masks(empty: Path, etc: Path | None = None) -> list[str]:
    """An empty file over each of the host's secrets (/dev/null would not do: binds are
    nodev, so opening it fails instead of reading nothing); none over /etc's copy ``etc``,
    which holds none of them."""
    if etc is not None:
        return []
    empty.touch(mode=0o444)
    return [arg for path in SECRET_FILES if os.path.isfile(path)
            for arg in ("--ro-bind", str(empty), path)]


def seen_in_sandboxes(path: str) -> bool:
    """Whether a sandbox sees ``path`` (a real path) as the host has it, so that hiding it
    takes a mask: a system folder holds it, and it is not a folder that holds the guest's
    python3 (a cache named ``/usr/local``), without which no command runs."""
    systems = [os.path.realpath(top) for top in SYSTEM_DIRS if os.path.isdir(top)]
    python = os.path.realpath(guest_python() or "/usr/bin/python3")
    return any(path.startswith(top.rstrip("/") + "/") for top in systems) and not python.startswith(path + "/")


def hidden_masks(empty: Path, paths) -> list[str]:
    """An empty file (or folder) over each of ``paths`` (real paths) that a system folder
    holds: the run's task file, read-only in the sandbox else, where a task's answer read
    its own check or tests (a dataset pip-installed under /usr/local), an OSWorld gold file or
    the download cache that keeps them. Never a folder that holds the guest's python3 (a cache
    named ``/usr/local``), without which no command runs."""
    args = []
    for path in paths:
        if not seen_in_sandboxes(path):
            continue
        if os.path.isdir(path):
            (empty.parent / "empty-dir").mkdir(mode=0o555, exist_ok=True)
            args += ["--ro-bind", str(empty.parent / "empty-dir"), path]
        elif os.path.exists(path):
            empty.touch(mode=0o444)
            args += ["--ro-bind", str(empty), path]
    return args


def open_dirs(*paths: str) -> list[str]:
    """Folders made 0755 ahead of the binds in them: bwrap (0.8) makes a bind's missing
    parents 0700, whatever the umask, which would shut the commands' user out."""
    return [arg for path in paths for arg in ("--perms", "0755", "--dir", path)]


def unreadable_by_others(paths) -> list[str]:
    """The files (and files of folders) among ``paths`` that another user cannot read, or
    run where the owner can: bound as they are, they would fail the sandbox's user."""
    found = []
    for top in map(Path, paths):
        for path in [top, *sorted(top.rglob("*"))] if top.is_dir() else [top]:
            mode = path.stat().st_mode
            wanted = 0o005 if path.is_dir() or mode & 0o100 else 0o004
            if mode & wanted != wanted and "__pycache__" not in path.parts:
                found.append(f"{path} ({oct(mode & 0o777)})")
    return found


def user_entries(folder: Path, uid: int, home: str) -> list[str]:
    """The host's /etc/passwd and /etc/group with the sandbox's user (``uid``, group ``uid``)
    added (``images.with_guest_user``), written to ``folder`` and bound read-only over the
    host's."""
    args = []
    for name, text in _user_files(uid, home):
        write_new(folder / name, text)  # a folder's every boot binds the same: written once
        args += ["--ro-bind", str(folder / name), f"/etc/{name}"]
    return args


def write_new(path: Path, text: str) -> None:
    """``path`` holds ``text``: left alone when it does, else written as a new file. Not
    truncated: ext4 flushes a file truncated to zero when it is closed (``auto_da_alloc``),
    which cost ~2 ms of the pool's CPU per file at every reset."""
    try:
        if path.read_text(encoding="utf-8") == text:
            return
    except (OSError, UnicodeDecodeError):
        pass
    write_new_file(path, text)


@functools.lru_cache(maxsize=256)  # a uid per VM (sandbox_uids.py)
def _user_files(uid: int, home: str) -> tuple[tuple[str, str], ...]:
    """(name, text) of the sandbox's passwd and group: the same for every boot of a run, so
    the host's files are read once per process, not at every sandbox (each reset boots one)."""
    files = []
    for name in ("passwd", "group"):
        try:
            host = Path("/etc", name).read_text(encoding="utf-8", errors="replace")
        except OSError:
            host = ""
        files.append((name, images.with_guest_user(name, host, uid, home)))
    return tuple(files)


def guest_python() -> str | None:
    # only an interpreter under the bound system folders exists inside the sandbox
    found = shutil.which("python3", path="/usr/local/bin:/usr/bin")
    return found if found and found.startswith("/usr/") else None


#: pseudo-terminals one sandbox may hold. The kernel's ``kernel.pty.max`` (4096, 1024 of
#: them reserved for the host's own /dev/pts) is one pool shared by every sandbox and
#: container of the machine: without a cap, one VM took all 3072 and every other VM's
#: ``openpty`` failed. 64 is more than a task with a terminal or a few needs, and 48 VMs'
#: worth before the shared pool could run dry
MAX_PTYS = 64
#: how bwrap's ``--dev`` mounts the sandbox's own devpts: what a remount gives where the
#: sandbox's mount table cannot be read (a remount resets every option not given)
DEVPTS_OPTIONS = "mode=620,ptmxmode=666"
_NS_GET_PARENT = 0xB702  # ioctl: the user namespace that owns this one
_CLONE_FS, _CLONE_NEWNS = 0x200, 0x20000
_MS_NOSUID, _MS_NOEXEC, _MS_REMOUNT = 0x2, 0x8, 0x20


#: folders of /var that files of the system folders link to, the data of system programs
#: (root's, read-only here): aspell's dictionaries (``/usr/lib/aspell/*.rws`` are links into
#: /var/lib/aspell: without them ``aspell list`` printed nothing, and a check that the
#: answer's text has no misspelt word passed any text), the spelling dictionaries' registry,
#: ghostscript's CMaps and font maps, the SGML and XML catalogs (``/etc/sgml/catalog``),
#: LibreOffice's bundled extensions, PostgreSQL's full-text dictionaries. No folder of /var
#: that a program writes or that holds the host's own state (apt, dpkg, docker, the logs …)
SYSTEM_DATA = ("/var/lib/aspell", "/var/lib/dictionaries-common", "/var/cache/dictionaries-common",
               "/var/lib/ispell", "/var/lib/ghostscript", "/var/lib/sgml-base", "/var/lib/xml-core",
               "/var/lib/libreoffice/share", "/var/cache/postgresql/dicts")


def system_data_found() -> list[str]:
    """The folders of :data:`SYSTEM_DATA` the host has (not links: those are not bound)."""
    return [path for path in SYSTEM_DATA if os.path.isdir(path) and not os.path.islink(path)]


def system_data(folder: Path | None = None) -> list[str]:
    """The folders of :data:`SYSTEM_DATA` the host has, read-only: their copy's ``folder``
    (``system_data.prepare``) bound at /var, one bind; without it each bound as it is, in
    folders made for them (and /var/cache, for :func:`font_cache`) that hold nothing else."""
    if folder is not None:
        return ["--ro-bind", str(folder), "/var"]
    found = system_data_found()
    parents = {"/var", "/var/cache"} | {str(parent) for path in found for parent in Path(path).parents
                                         if parent != Path("/")}
    return [*open_dirs(*sorted(parents)),  # a folder's name sorts before its folders'
            *(arg for path in found for arg in ("--ro-bind", path, path))]


def font_cache() -> list[str]:
    """The system's font cache for a desktop, read-only: without it every app start
    rebuilds it (seconds). /var/cache is :func:`system_data`'s."""
    if not os.path.isdir("/var/cache/fontconfig"):
        return []
    return ["--ro-bind", "/var/cache/fontconfig", "/var/cache/fontconfig"]


#: files of the sandbox's own /proc that reach the whole machine's kernel: a sysctl and the
#: SysRq trigger ask a writer for uid 0, not for a capability, so the agent of a root
#: runner's sandbox (uid 0, its few capabilities) could set ``kernel.core_pattern`` (a
#: program the kernel then runs as the host's root) or reboot the host. bwrap covers
#: /proc/irq and /proc/bus itself, not these; Docker makes all four read-only.
KERNEL_KNOBS = ("/proc/sys", "/proc/sysrq-trigger")


def read_only_root() -> list[str]:
    """bwrap's last steps: :data:`KERNEL_KNOBS` read-only over the new /proc (a sysctl of
    a namespace the sandbox has its own, such as ``net.*``, still reads as its own), then the
    sandbox's root (its folders /opt, /run, /home …) and /dev made read-only, the mounts in
    them (the home, /tmp, /dev/shm, /dev/pts …) kept as they are. As root nothing there is
    the commands' to write anyway; as another user bwrap makes both as that user, so the
    commands could add a module to the agent's folder (which is on the agent's ``sys.path``),
    a program to a folder of a desktop's PATH, or replace /dev/stdin."""
    knobs = [arg for path in KERNEL_KNOBS for arg in ("--ro-bind-try", path, path)]  # a kernel may lack one
    return [*knobs, "--remount-ro", "/dev", "--remount-ro", "/"]


def cap_ptys(init_pid: int, own_userns: bool, limit: int = MAX_PTYS) -> str | None:
    """Remount the devpts of a sandbox or container (whose init is ``init_pid``) with
    ``max=limit`` and the options it has, from the host: the mount is in its mount
    namespace, entered for one remount (as root by a thread of this process,
    :func:`_remount_from_thread`; else by ``nsenter … mount``). ``own_userns``: the sandbox
    has a user namespace of its own (a runner that is not root), whose owner, bwrap's outer
    namespace, holds the right to remount there. None when done, else why not, logged once
    per process (the VM then runs uncapped)."""
    why = _remount_devpts(init_pid, own_userns, limit)
    if why and not _warned:
        _warned.append(why)
        log.warning("cannot cap a sandbox's pseudo-terminals (%s): one VM may take the "
                    "machine's", why)
    return why


#: the cause, once cap_ptys has warned
_warned: list[str] = []


def _remount_devpts(init_pid: int, own_userns: bool, limit: int) -> str | None:
    # bwrap chroots its processes below its mount namespace's root: the init's root is theirs
    argv = ["nsenter", f"--mount=/proc/{init_pid}/ns/mnt", f"--root=/proc/{init_pid}/root"]
    pass_fds: tuple[int, ...] = ()
    try:
        # never the host's devpts (a remount changes it for every mount of it, in every
        # namespace): only a sandbox fully built (its agent ready) has one of its own
        if os.stat(f"/proc/{init_pid}/root/dev/pts").st_dev == os.stat("/dev/pts").st_dev:
            return f"the /dev/pts of process {init_pid} is the host's"
        options = f"{_devpts_options(init_pid)},max={limit}"
        if not own_userns and not _thread_failed:
            why = _remount_from_thread(init_pid, options)
            if why is None:
                return None
            log.debug("cannot remount a devpts from a thread (%s): by nsenter", why)
        if own_userns:
            # --disable-userns nests the init in a second namespace, which holds no rights
            inner = os.open(f"/proc/{init_pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
            try:
                outer = fcntl.ioctl(inner, _NS_GET_PARENT)
            finally:
                os.close(inner)
            pass_fds = (outer,)
            argv[1:1] = ["--preserve-credentials", f"--user=/proc/self/fd/{outer}"]
        argv += ["mount", "-n", "-t", "devpts", "-o", f"remount,nosuid,noexec,{options}", "devpts", "/dev/pts"]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=10, pass_fds=pass_fds)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    finally:
        for fd in pass_fds:
            os.close(fd)
    return None if proc.returncode == 0 else (proc.stderr.strip() or f"exit status {proc.returncode}")


def _remount_from_thread(init_pid: int, options: str) -> str | None:
    """The remount without a program: from a thread of this process, which first takes a
    root and working folder of its own (``unshare(CLONE_FS)``, which also lets a thread of a
    threaded process join another mount namespace), then joins the sandbox's, chroots to its
    init's root and remounts (what ``nsenter --mount --root … mount`` does, without the two
    programs: ~5 ms of a boot here). The thread ends there: the process's other threads
    never left their namespace. A runner that is root only (one that is not needs the
    sandbox's owning user namespace, which a threaded process cannot join). None when done,
    else why not (the caller then runs nsenter)."""
    outcome: list[str | None] = []
    thread = threading.Thread(target=lambda: outcome.append(_remount_here(init_pid, options)),
                              name="devpts-cap", daemon=True)
    thread.start()
    thread.join()
    return outcome[0] if outcome else "the remount's thread failed"


#: why a thread of this process could not join a sandbox's mount namespace, once it could not
_thread_failed: list[str] = []


@functools.lru_cache(maxsize=1)
def _libc():
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def _remount_here(init_pid: int, options: str) -> str | None:
    import ctypes

    libc = _libc()
    unshare, setns, mount = libc.unshare, libc.setns, libc.mount  # looked up before the setns
    fds = []
    try:
        fds.append(os.open(f"/proc/{init_pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC))
        fds.append(os.open(f"/proc/{init_pid}/root", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
        for call, args in ((unshare, (_CLONE_FS,)), (setns, (fds[0], _CLONE_NEWNS))):
            if call(*args) != 0:
                why = f"{call.__name__}: {os.strerror(ctypes.get_errno())}"
                _thread_failed.append(why)  # this process cannot: by nsenter from now on
                return why
        os.fchdir(fds[1])
        os.chroot(".")
        if mount(b"devpts", b"/dev/pts", b"devpts", _MS_REMOUNT | _MS_NOSUID | _MS_NOEXEC,
                 options.encode()) != 0:
            return f"mount: {os.strerror(ctypes.get_errno())}"
        return None
    except OSError as exc:
        return str(exc)
    finally:
        for fd in fds:
            os.close(fd)


def _devpts_options(pid: int) -> str:
    """The options of the devpts at /dev/pts of process ``pid`` (docker's has gid=5, bwrap's
    none) but rw and max, which a remount would otherwise reset; DEVPTS_OPTIONS if unread."""
    found = DEVPTS_OPTIONS
    try:
        with open(f"/proc/{pid}/mountinfo", encoding="utf-8") as handle:
            for line in handle:  # the last one mounted there is the one in use
                fields, _, fs = line.partition(" - ")
                if fields.split()[4:5] == ["/dev/pts"] and fs.startswith("devpts "):
                    found = ",".join(o for o in fs.split()[2].split(",")
                                     if o not in ("rw", "ro") and not o.startswith("max=")) or DEVPTS_OPTIONS
    except (OSError, IndexError):
        pass
    return found
