"""bubblewrap's command line for a process VM: its namespaces, privileges, binds, tmpfs
folders, environment, and the guest agent's options.

Everything but the file descriptors a boot passes in (the seccomp program, bwrap's info
pipe, the agent's listening socket and ready pipe) is the same at every boot of a VM's
folder, so the provider builds it once per folder (``folder_argv``, which also writes the
folder's files it binds: the empty file over the host's secrets, the sandbox's passwd and
group) and adds the fds at each boot (``boot_argv``)::

    bwrap <namespaces> <privileges> <binds, tmpfs, env> --info-fd N --
        python3 -I -S /opt/parallel-rollout/server.py --listen-fd N --ready-fd N <agent options>

What each option is for is ``process.py``'s module doc ("The boundary").
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from . import grading_fronts, images, sandbox_fs

#: the namespaces every sandbox (and the standby it boots from) gets of its own
NAMESPACE_FLAGS = ("--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net")
GUEST_HOME = "/home/user"
GUEST_SOCK_DIR = "/run/guest"
GUEST_SNAPSHOT = "/run/snapshot"
GUEST_AGENT = images.GUEST_AGENT_PATH
#: what the agent keeps when the runner is root: switch to the commands' user and drop its
#: bounding set (setpriv), signal its processes, and hand it files. A desktop VM's agent
#: keeps the same and nothing more: the desktop (session bus, Xvfb, openbox, AT-SPI), the
#: apps and the helpers all run as the commands' user with no capabilities (guest/desktop.py),
#: so xterm has no ids to drop to and VLC no root to refuse, and no user namespace is needed
AGENT_CAPS = ("CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP", "CAP_KILL", "CAP_CHOWN",
              "CAP_FOWNER", "CAP_DAC_OVERRIDE")
#: sizes of the sandbox's tmpfs folders
TMP_SIZE_MB = 512
HOME_SIZE_MB = 1024
AGENT_SOURCES = tuple(images.GUEST_SOURCE_DIR / name for name in images.GUEST_AGENT_FILES)
#: guest files a desktop VM needs next to the agent: the desktop routes and the AT-SPI walker
DESKTOP_SOURCES = tuple(images.GUEST_SOURCE_DIR / name for name in images.GUEST_DESKTOP_FILES)
#: the guest's AT-SPI switch and the walk's time limit (guest/desktop.py's, not imported:
#: ctypes and all for two names), passed on from the host when set
ATSPI_ENVS = ("PARALLEL_ROLLOUT_ATSPI", "PARALLEL_ROLLOUT_ATSPI_TIMEOUT")
SHIM_DIR = images.GUEST_SOURCE_DIR / "shim"
#: the grading commands' wrappers (curl, jq, sqlite3, file, wget, psql, node, git, mvn, gdb, tmux, less, gpg, ImageMagick, ssh,
#: vim, npm, pytest, valgrind, make, javac), bound into every sandbox
GRADING_BIN = images.GUEST_SOURCE_DIR / "grading_bin"
GUEST_SHIM = images.GUEST_SHIM_DIR
GUEST_BIN = f"{images.GUEST_DIR}/bin"


@dataclass(frozen=True)
class SandboxSpec:
    """What a provider's every sandbox shares: the programs, the snapshot, the limits."""

    bwrap: str
    #: the guest's python3 (one under the bound system folders)
    python: str
    #: the agent's folder made ahead (``agent_folder.prepare``: its modules, their bytecode, the
    #: grading wrappers), bound whole; None: the package's files, compiled at each boot
    agent_dir: Path | None
    #: the folder whose content becomes the home, or None
    snapshot: Path | None
    desktop: bool
    #: a desktop's ``WxH``
    screen: str
    #: the user's or the pool's memory limit, MB (sizes the tmpfs folders), or None
    memory_mb: int | None
    #: RLIMIT_AS per process, bytes: only where no memory cgroup bounds the sandbox
    limit_as: int | None
    #: RLIMIT_NPROC, where it caps a sandbox and no pids cgroup does
    limit_nproc: int | None
    #: files no command may read (``ProviderOptions.hidden_files``: the run's task file)
    hidden_files: tuple[str, ...] = ()
    #: the grading wrappers' fronts' folder made ahead (``grading_fronts.prepare``), bound over
    #: /usr/bin; None: env's, git's and python's fronts bound file by file
    fronts_dir: Path | None = None
    #: without ``fronts_dir``, python's encodings with its front (``grading_fronts.prepare_encodings``)
    encodings_dir: Path | None = None
    #: the system data of /var, copied once (``system_data.prepare``), bound at /var; None: its
    #: folders bound one by one
    system_data_dir: Path | None = None
    #: /etc as another user reads it, copied once (``system_data.prepare_etc``), bound at /etc;
    #: None: the host's, with its secrets masked
    etc_dir: Path | None = None

    def tmpfs_mb(self, size_mb: int) -> int:
        """A tmpfs's size: its pages are charged to the VM's memory cgroup and never freed
        by a kill, so /tmp, /dev/shm and the home together stay under half of memory_mb (a
        full disk must not leave the agent without memory). Without a memory limit the
        pages are the host's: the same sizes keep a full disk within what the user gave."""
        if self.memory_mb is None:
            return size_mb
        return max(1, min(size_mb, self.memory_mb // 6))


def agent_binds(spec: SandboxSpec) -> list[str]:
    """The agent's files where it lives: its folder in one bind (a mount the fewer: see
    ``agent_folder``), or file by file with the folder's bytecode: beside a desktop's
    modules, or where the folder's file system runs no program (a ``noexec`` /tmp: the
    grading wrappers are bound from the package then), or without a folder."""
    if spec.agent_dir is not None and not spec.desktop and _runs_programs(spec.agent_dir):
        return ["--ro-bind", str(spec.agent_dir), images.GUEST_DIR]
    binds = [arg for source in AGENT_SOURCES for arg in
             ("--ro-bind", str(source), str(Path(GUEST_AGENT).with_name(source.name)))]
    if spec.agent_dir is not None:
        binds += ["--ro-bind", str(spec.agent_dir / "__pycache__"),
                  str(Path(GUEST_AGENT).with_name("__pycache__"))]
    return [*binds, "--ro-bind", str(GRADING_BIN), images.GUEST_GRADING_BIN]


def _runs_programs(folder: Path) -> bool:
    """Whether programs in ``folder`` can run: not on a file system mounted ``noexec``, which
    a bind keeps."""
    try:
        return not os.statvfs(folder).f_flag & os.ST_NOEXEC
    except OSError:
        return False


def boot_argv(spec: SandboxSpec, parts: tuple[list[str], list[str]], ready_fd: int,
              info_fd: int, listen_fd: int) -> list[str]:
    """bwrap's argv for one boot: a folder's ``parts`` (``folder_argv``) and these fds."""
    sandbox, agent = parts
    return [*sandbox, "--info-fd", str(info_fd),
            "--", spec.python, "-I", "-S", GUEST_AGENT,  # -S: site.py costs ~5 ms per boot
            "--listen-fd", str(listen_fd), "--ready-fd", str(ready_fd), *agent]


def folder_argv(spec: SandboxSpec, vm_id: str, vm_dir: Path,
                uid: int | None) -> tuple[list[str], list[str]]:
    """bwrap's options and the agent's options but its fds, for the boots of ``vm_id`` in
    ``vm_dir`` whose commands run as ``uid`` (None: the runner's own, in a user namespace);
    writes the folder's files they bind."""
    agent: list[str] = []
    if spec.limit_as:
        agent += ["--limit-as", str(spec.limit_as)]
    if spec.limit_nproc:
        agent += ["--limit-nproc", str(spec.limit_nproc)]
    agent += ["--reap-all"]  # bwrap's --unshare-pid: every process it sees is the VM's
    if uid is not None:
        agent += ["--run-as", f"{uid}:{uid}"]
        privileges = ["--cap-drop", "ALL"] + [a for cap in AGENT_CAPS for a in ("--cap-add", cap)]
    else:
        privileges = ["--unshare-user", "--disable-userns", "--cap-drop", "ALL"]
    snapshot: list[str] = []
    if spec.snapshot is not None:
        snapshot = ["--ro-bind", str(spec.snapshot), GUEST_SNAPSHOT]
        agent += ["--seed-home", GUEST_SNAPSHOT]
    desktop: list[str] = []
    path = images.guest_path()
    if spec.desktop:
        agent += ["--desktop", spec.screen]
        desktop = [arg for source in DESKTOP_SOURCES for arg in
                   ("--ro-bind", str(source), str(Path(GUEST_AGENT).with_name(source.name)))]
        desktop += ["--ro-bind", str(SHIM_DIR), GUEST_SHIM,
                    "--ro-bind", spec.python, f"{GUEST_BIN}/python",
                    "--setenv", "PYTHONPATH", GUEST_SHIM]
        for name in ATSPI_ENVS:
            if os.environ.get(name):
                desktop += ["--setenv", name, os.environ[name]]
        desktop += sandbox_fs.font_cache()
        path = f"{GUEST_BIN}:{images.guest_path(desktop=True)}"  # python, the shims
    masks = sandbox_fs.hidden_masks(vm_dir / "empty", spec.hidden_files)
    sandbox = [
        spec.bwrap,
        *NAMESPACE_FLAGS, *privileges, "--die-with-parent", "--new-session",
        "--hostname", vm_id,
        *sandbox_fs.system_binds(spec.etc_dir), *sandbox_fs.system_data(spec.system_data_dir),
        *sandbox_fs.secret_masks(vm_dir / "empty", spec.etc_dir),
        *masks,
        *(sandbox_fs.user_entries(vm_dir, uid, GUEST_HOME) if uid is not None else ()),
        "--proc", "/proc", "--dev", "/dev",
        # shared memory (Chromium, multiprocessing) for the commands' user too
        "--perms", "1777", "--size", str(spec.tmpfs_mb(TMP_SIZE_MB) * 2**20),
        "--tmpfs", "/dev/shm",
        "--perms", "1777", "--size", str(spec.tmpfs_mb(TMP_SIZE_MB) * 2**20), "--tmpfs", "/tmp",
        "--perms", "0755", "--size", str(spec.tmpfs_mb(HOME_SIZE_MB) * 2**20),
        "--tmpfs", GUEST_HOME,
        # the guest's files (a desktop's shim and python among them) for its user too
        *sandbox_fs.open_dirs(os.path.dirname(images.GUEST_DIR), images.GUEST_DIR),
        *grading_fronts.bwrap_binds(spec.python, spec.fronts_dir, spec.encodings_dir),
        # what no command may read, where the fronts' folder shows the host's /usr again
        *(grading_fronts.mirrored_masks(masks) if spec.fronts_dir is not None else ()),
        *snapshot,
        # the agent's socket lives outside (its fd is passed in): nothing in here can
        # unlink it and bind its own; /run/guest is the sandbox's own scratch folder
        "--perms", "0755", "--size", str(16 * 2**20), "--tmpfs", GUEST_SOCK_DIR,
        *agent_binds(spec),
        "--chdir", GUEST_HOME,
        "--clearenv",
        "--setenv", "PATH", path, "--setenv", "HOME", GUEST_HOME,
        "--setenv", "LANG", "C.UTF-8", "--setenv", "USER", "user",
        "--setenv", "PARALLEL_ROLLOUT_VM", vm_id,
        *desktop, *sandbox_fs.read_only_root(),
    ]
    return sandbox, agent
