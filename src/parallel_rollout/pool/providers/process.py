"""ProcessProvider: every "VM" is a bubblewrap sandbox running the guest agent. The default.

::

    owning process ── launcher thread ──fork──► sh (joins the VM's cgroups) ─exec─► bwrap
                                                  └─ pid 1 of a new pid namespace
                                                       └─ python3 guest/server.py --listen-fd
                                                            └─ the VM's uid ─► commands

    <base>/<run_id>@<pool>/<vm_id>/   base: $PARALLEL_ROLLOUT_PROCESS_DIR or /tmp/parallel-rollout/process;
                                      pool: a key of this provider's own (``common.pool_folder``;
                                      a run id over 28 characters: its first 20 and a hash)
        sock/        sock/agent.sock: bound and listened on here, the agent serves its fd
        meta.json    run id, vm id, owner pid, bwrap pid and start times: what sweep() reads
        agent.log    bwrap's and the agent's output (a pipe, 1 MiB kept: sandbox_log.py), quoted when a boot fails
                     (the boot itself, bwrap started and the agent's ready line: sandbox_launch.py)
    <base>/.agent-bytecode/<key>/  the agent's modules, their bytecode and the grading wrappers,
                                   bound read-only at /opt/parallel-rollout (agent_folder.py)

**The boundary** (bwrap's command line: ``sandbox_argv.py``). Own pid, ipc, uts and
network namespaces (only ``lo`` inside), system
folders bound read-only, the host's secrets (``/etc/shadow`` and kin) replaced by empty
files, the wrapped programs (``env``, ``git``, ``jq`` …) and the guest python's ``sitecustomize.py`` by the grading wrappers' fronts (a
grading command's process reaches the wrappers by those paths too: ``grading_fronts.py``), fresh ``/proc`` and ``/dev``, the sandbox's own root and ``/dev`` read-only once
built, a clean environment, ``setsid``, and:

* *no capabilities.* As root, bwrap keeps for the agent only what it needs to run commands as
  another user (setuid/setgid, kill, chown, reading the home), and the agent runs every
  command as an unprivileged uid of the VM's own (``sandbox_uids.py``: 64000 up, one per
  folder its sandboxes take turns in, so per-user kernel limits such as inotify instances are
  per VM and per sandbox) with no capabilities, an empty bounding
  set and no-new-privileges (``guest/agent_commands.py``); that user cannot signal the agent.
  As another user, bwrap makes a user namespace in which nobody has a capability (the agent
  and the commands then share that uid: they can kill the agent, which costs their attempt,
  but not replace it: see below).
* *the agent's socket is outside.* The runner binds and listens on ``sock/agent.sock`` and
  passes the listening fd in (``--listen-fd``); the sandbox never sees the folder, so no
  command can unlink the socket and bind its own to answer a ``check``. The agent is not
  dumpable when it shares the commands' uid, so they cannot write its memory
  (``/proc/PID/mem``) either; ``pidfd_getfd`` and ``ptrace`` are refused by seccomp.
* *a seccomp filter* (``seccomp.py``): no mount, namespaces, ptrace, keyring, bpf, kernel
  modules, kexec, perf events (the same for a desktop VM, see below).
* *per-VM cgroups* (``cgroups.py``): ``memory.max``, ``pids.max`` and an equal CPU weight
  for the whole sandbox, where a probe shows they work (``cgroups.available``); ``memory.max``
  is ``memory_mb``, else the pool's ``default_memory_mb`` (``base.py``). Without a memory
  cgroup only an explicit ``memory_mb`` applies, as RLIMIT_AS per process (logged either way). ``max_processes`` (DEFAULT_MAX_PROCESSES when unset) goes to ``pids.max``, or
  without a pids cgroup to RLIMIT_NPROC where that caps a sandbox (not root, ``cgroups.nproc_share``:
  at most a VM's share of the runner's own limit); else an explicit one is a ConfigError saying why.
  Both within the VM's share of the machine's memory (the runner's cgroup's limit, when it
  has one), pid and file tables, with RLIMIT_NOFILE to match (``host_share.py``).
* *sized tmpfs* for ``/tmp`` and ``/dev/shm`` (512 MB) and the home (1 GB), each at most a
  sixth of ``memory_mb``: filling them fills the VM's own memory (which its cgroup bounds), never the
  host's disk, and leaves the agent room to live; at most ``sandbox_fs.MAX_PTYS`` ptys (one pool per machine).

It is not a VM: the sandbox shares the host's kernel, so a kernel bug reachable through the
allowed calls is a way out. The docker and qemu providers are the stronger walls.

**Reset = restart.** A snapshot is a folder whose content becomes the home: bound read-only
at /run/snapshot and copied into the home's tmpfs by the agent at start (``--seed-home``).
Reset kills bwrap and the pid namespace's init; the kernel then kills every process of the
namespace, and we wait until the init is gone, which happens only after all of them are
(``sandbox_processes.py``). The new sandbox was booted ahead, the VM's *standby* (``standby.py``:
after each reset the next one boots in another folder of the VM, two where the CPUs outnumber
the VMs), or boots then. Readiness is a pipe the agent writes to once it listens: nobody polls.

**Desktop** (``options.desktop``, the osworld mode). The agent starts with ``--desktop WxH``:
a D-Bus session bus, Xvfb on display :0 and openbox, inside the sandbox, before it says ready
(see ``guest/desktop.py``; the AT-SPI bus and its registry start there too, and the walker
``guest/atspi_tree.py`` is bound next to the agent). The desktop is therefore part of the
snapshot: a reset kills it with every window, app and bus of the task and the next boot
brings a clean one (~0.2 s on 2 cores; the agent alone is ~60 ms). ``PARALLEL_ROLLOUT_ATSPI``
in the host's environment is passed on (``0``: no bus, the window list only), and so is
``PARALLEL_ROLLOUT_ATSPI_TIMEOUT`` (seconds a walk of the tree may take).
``guest/shim/pyautogui.py`` is on PYTHONPATH and ``python`` names the guest's python3, so
OSWorld's ``python -c "import pyautogui; ..."`` actions run as they do in an OSWorld image.
The apps come from the host's /usr (the Debian packages ``./dev`` installs). As root the whole
desktop runs as the commands' user, ``user`` (the VM's uid, in the sandbox's own /etc/passwd:
dbus-daemon and xterm look their user up): the session bus (which admits one uid), Xvfb,
openbox, AT-SPI, every app and every helper of the agent, with no capabilities and no user
namespaces; the agent keeps ``sandbox_argv.AGENT_CAPS`` like any VM's. As another user they
all share the runner's uid in the sandbox's user namespace.

**Sweep.** Every VM folder is labelled with its run id and its owner. ``sweep(run_id)``
kills and removes every sandbox of that run (in the folders of all its pools: two runs of one
run id in two output folders run at once, each in its own); ``sweep()`` removes those whose
owning process is gone. A recorded pid is killed only if it is still the same process (start
time and the VM folder in its command line), never a recycled pid.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import shutil
import subprocess
import time
from pathlib import Path

from ...errors import ConfigError, ProviderUnavailable, VMError
from . import (agent_folder, cgroups, grading_fronts, host_dirs, host_share, images, orphans, sandbox_fs, sandbox_launch,
               seccomp, standby, system_data, verify)
from .sandbox_argv import (AGENT_SOURCES, DESKTOP_SOURCES, GRADING_BIN, GUEST_HOME, NAMESPACE_FLAGS, SHIM_DIR,
                           SandboxSpec, boot_argv, folder_argv)
from .sandbox_uids import SandboxUids
from .base import Provider, ProviderOptions, VMInfo
from .common import (LONG_VM_ID, check_name, check_vm_folder_free, checked_socket, child_runs, make_vm_dir,
                     new_pool_key, owner_label, pool_folder, process_and_agent_healthy, read_meta, remove_vm_dir,
                     same_process, secure_base_dir, sweep_vm_folders, write_meta)
from .sandbox_processes import children, death_cause, kill_recorded, kill_sandbox, kill_unrecorded, sandbox_alive

log = logging.getLogger(__name__)

DEFAULT_BASE_DIR = host_dirs.PROCESS.default
BASE_DIR_ENV = host_dirs.PROCESS.env
SOCKET_NAME = "agent.sock"
#: a VM's process cap when max_processes is not set (docker's --pids-limit default too)
DEFAULT_MAX_PROCESSES = 4096
#: what a desktop VM needs on the host's /usr, by the Debian package that has it
DESKTOP_PROGRAMS = {"Xvfb": "xvfb", "openbox": "openbox", "xdotool": "xdotool",
                    "wmctrl": "wmctrl", "xprop": "x11-utils"}


def base_dir_default() -> Path:
    """Where sandboxes live unless told otherwise: $PARALLEL_ROLLOUT_PROCESS_DIR or /tmp/..."""
    return host_dirs.PROCESS.path()


#: the least --vm-memory-mb a sandbox takes (its guest agent runs in ~6 MB; 4-5 MB starved it)
MIN_MEMORY_MB = 16


class ProcessProvider(Provider):
    """VMs as bubblewrap sandboxes; a snapshot is a folder copied into the home."""

    name = "process"
    vms_in_runner_cgroup = True  # its cgroups are children of the runner's (cgroups.py)
    opens_windows = False
    adopted_by_runner = True  # a dead Manager's bwraps and inits (orphans.py)

    def __init__(self, run_id: str, options: ProviderOptions | None = None,
                 base_dir: str | os.PathLike | None = None) -> None:
        super().__init__(run_id, options)
        if self.options.path_to_vm:
            raise ConfigError(
                "the process provider has no VM image: --path-to-vm cannot be honoured "
                "(give a snapshot folder with --snapshot-name, or use the qemu provider)")
        self.base_dir = Path(base_dir) if base_dir else base_dir_default()
        #: this pool's own: another run of the run id (another output folder) has its own
        #: folders and cgroups, which it must not share or remove (``common.pool_folder``)
        key = new_pool_key()
        self.run_dir = pool_folder(self.base_dir, run_id, key)
        checked_socket(self.run_dir, LONG_VM_ID, "sock", SOCKET_NAME, env=BASE_DIR_ENV)
        self.snapshot: Path | None = None
        if self.options.snapshot_name:
            self.snapshot = Path(self.options.snapshot_name).expanduser().resolve()
            if not self.snapshot.is_dir():  # named by its flag, as docker's and qemu's are
                found = " is a file, not a folder" if self.snapshot.exists() else ": no such folder"
                raise ConfigError(
                    f"--snapshot-name {self.options.snapshot_name!r}{found} ({self.snapshot}); for the "
                    "process provider a snapshot is a folder whose content becomes the home")
        controllers = cgroups.available()
        #: RLIMIT_AS per command: only where no memory cgroup can bound the whole sandbox
        self._limit_as = False
        if self.options.memory_mb is not None:
            if self.options.memory_mb < MIN_MEMORY_MB:
                # less and the guest agent itself runs out: every task fails as a broken VM
                raise ConfigError(f"--vm-memory-mb {self.options.memory_mb} is too little for a sandbox: its "
                                  f"guest agent alone needs ~6 MB, a task's commands more; give at least "
                                  f"{MIN_MEMORY_MB}")
            if "memory" not in controllers:
                if shutil.which("prlimit") is None:
                    raise ConfigError("memory_mb needs a writable memory cgroup or util-linux "
                                      "prlimit (apt-get install util-linux)")
                log.warning("no memory cgroup (%s): memory_mb=%d falls back to RLIMIT_AS "
                            "per process, which does not bound the sandbox's sum",
                            cgroups.why_unavailable("memory"), self.options.memory_mb)
                self._limit_as = True
        elif "memory" not in controllers:  # no default RLIMIT_AS: it would break browsers (base.py)
            log.warning("no memory cgroup (%s): the VMs have no memory limit; --vm-memory-mb sets "
                        "one per process (RLIMIT_AS)", cgroups.why_unavailable("memory"))
        #: the user's memory limit, else the pool's default where a memory cgroup bounds the sum
        self._memory_mb = self.options.memory_limit(bounded="memory" in controllers)
        if self._memory_mb is not None and not self._limit_as:  # within the runner's cgroup's
            host_share.check_pool_memory(self._memory_mb, self.options.pool_size,
                                         explicit=self.options.memory_mb is not None)
        #: a VM's process cap (pids.max, RLIMIT_NPROC per command: ``cgroups.process_cap``) and
        #: RLIMIT_NOFILE of its every process, within its share of the host's tables
        self._pids_max, self._limit_nproc, self._nofile = host_share.vm_process_limits(
            self.options.max_processes, DEFAULT_MAX_PROCESSES, self.options.pool_size)
        self._cgroup_name = f"{run_id}.{key}"  # cgroups are host-wide, as the folders
        #: root runs commands (and a desktop) as a uid of each VM's own (sandbox_uids.py)
        self._uids = SandboxUids(enabled=os.geteuid() == 0)
        python = sandbox_fs.guest_python()
        self._agent_files = agent_dir = fronts_dir = encodings_dir = None
        if python is not None:  # without one, check_available says why
            self._agent_files = agent_folder.AgentFiles(python, AGENT_SOURCES, DESKTOP_SOURCES, (GRADING_BIN,))
            agent_dir = agent_folder.prepare(self._agent_files, secure_base_dir(self.base_dir))
            fronts_dir = grading_fronts.prepare(python, secure_base_dir(self.base_dir))
            encodings_dir = self._encodings_dir(python) if fronts_dir is None else None
        data_dir = system_data.prepare(secure_base_dir(self.base_dir))
        etc_dir = system_data.prepare_etc(secure_base_dir(self.base_dir))
        self._spec = SandboxSpec(
            bwrap=shutil.which("bwrap") or "bwrap", python=python, agent_dir=agent_dir,
            snapshot=self.snapshot, desktop=bool(self.options.desktop), screen=self.options.screen,
            memory_mb=self._memory_mb,
            limit_as=self._memory_mb * 2**20 if self._limit_as else None,
            limit_nproc=self._limit_nproc, hidden_files=self.options.hidden_files, fronts_dir=fronts_dir,
            encodings_dir=encodings_dir, system_data_dir=data_dir, etc_dir=etc_dir)
        #: per VM folder, what its every boot shares, made at its first: its cgroups, and
        #: bwrap's argv but the fds (by VM, folder and uid); forgotten with the folder
        self._groups: dict[str, cgroups.VMCgroup] = {}
        self._argvs: dict[tuple[str, str, int | None], tuple[list[str], list[str]]] = {}
        #: reset verification from the host, through /proc/<init>/root (a few ms: on by default)
        self._view = verify.HostView(self.options.verify_reset or "fast", GUEST_HOME, self.snapshot,
                                     spare_processes=verify.DESKTOP_LAZY if self.options.desktop else (),
                                     windows=self.options.desktop)
        #: each VM's next sandbox, booted after a reset for the next one (standby.py)
        self._standby = standby.Standby(
            self._boot_in, lambda info: same_process(info.private["pid"], info.private["create_time"]),
            lambda info: kill_sandbox(info.private), depth=standby.depth(self.options.pool_size),
            check=self.verify)
        self._uids.check_room(self.options.pool_size, self._standby.depth + 1,
                              f" or with fewer standbys (${standby.STANDBY_ENV}=0: one uid a VM)")
        if self.options.desktop:
            missing = sorted({pkg for prog, pkg in DESKTOP_PROGRAMS.items() if not shutil.which(prog)})
            if missing:
                raise ConfigError("a desktop VM needs " + ", ".join(missing)
                                  + f"; install with: apt-get install {' '.join(missing)} (./dev does)")
        # what the sandbox's user runs of the guest's files: the grading wrappers, a desktop's
        shared = [GRADING_BIN, *((*DESKTOP_SOURCES, SHIM_DIR) if self.options.desktop else ())]
        if self._uids.enabled and (shut := sandbox_fs.unreadable_by_others(shared)):
            raise ConfigError(f"the sandbox's user (uids from {self._uids.first}) cannot read the guest's "
                              f"{', '.join(shut[:3])}: chmod -R o+rX {images.GUEST_SOURCE_DIR}")

    @classmethod
    def supported_limits(cls) -> frozenset[str]:
        """memory_mb with a memory cgroup (else prlimit); max_processes with a pids cgroup
        (else RLIMIT_NPROC, where it caps a sandbox: ``cgroups.nproc_caps_a_sandbox``)."""
        controllers = cgroups.available()
        limits = set()
        if "memory" in controllers or shutil.which("prlimit"):
            limits.add("memory_mb")
        if "pids" in controllers or cgroups.nproc_caps_a_sandbox():
            limits.add("max_processes")
        return frozenset(limits)

    def __repr__(self) -> str:
        return f"ProcessProvider(run_id={self.run_id!r}, base_dir={str(self.base_dir)!r})"

    # ------------------------------------------------------------------- contract
    def _encodings_dir(self, python: str) -> Path:
        """Python's encodings front's folder, for sandboxes without their fronts' folder; a
        grading command's python is not left without that front: ProviderUnavailable."""
        made = grading_fronts.prepare_encodings(python, secure_base_dir(self.base_dir))
        if made is None:
            raise ProviderUnavailable(
                f"neither the grading fronts' folder nor python's encodings front could be made under "
                f"{secure_base_dir(self.base_dir) / grading_fronts.FOLDERS} (the warnings above say why): a check's "
                f"python would run the answer's .pth and bytecode; free space there, or set {BASE_DIR_ENV} to a "
                f"folder that can hold them")
        return made

    @classmethod
    def check_available(cls) -> None:
        """ProviderUnavailable unless bwrap exists and can create the namespaces we use,
        and libseccomp can compile the filter."""
        bwrap = shutil.which("bwrap")
        if bwrap is None:
            raise ProviderUnavailable("bubblewrap (bwrap) is not installed; install it with: "
                                      "apt-get install bubblewrap")
        if sandbox_fs.guest_python() is None:
            raise ProviderUnavailable("the process provider needs python3 under /usr")
        seccomp.program()
        argv = [bwrap, *NAMESPACE_FLAGS, *sandbox_fs.system_binds(), "--proc", "/proc",
                "--dev", "/dev", "--", "/bin/true"]
        try:
            probe = orphans.run_bwrap(argv, capture_output=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ProviderUnavailable(f"bubblewrap does not run here: {exc}") from exc
        if probe.returncode != 0:
            raise ProviderUnavailable(
                "bubblewrap cannot create namespaces here (unprivileged user namespaces "
                "disabled, or a container without CAP_SYS_ADMIN?): "
                + probe.stderr.decode(errors="replace").strip())

    def start(self, vm_id: str) -> VMInfo:
        """Create the VM folder and cgroups, start the sandbox, wait for its agent."""
        check_name("vm id", vm_id)
        vm_dir = self.run_dir / vm_id
        checked_socket(self.run_dir, vm_id, "sock", SOCKET_NAME, env=BASE_DIR_ENV)  # a path too long is named here
        secure_base_dir(self.base_dir)
        for folder in standby.folders(self.run_dir, vm_id):  # the VM's and its standby's
            meta = read_meta(folder)
            check_vm_folder_free(self.run_id, vm_id, meta, bool(meta) and sandbox_alive(meta, folder))
        if vm_dir.exists():
            shutil.rmtree(vm_dir, ignore_errors=True)
        self._forget(vm_dir)
        group = self._cgroup(vm_id)
        self._make_folder(vm_id, vm_dir, group)
        info = None
        try:
            for folder in self._folders(vm_id):  # a uid for each folder its sandboxes take
                self._uids.acquire(folder.name)
            group.create()
            info = self._boot(vm_id, vm_dir, group)
            self._view.baseline(vm_id, info.private["init_pid"], info.address)
            return info
        except BaseException:
            # No VMInfo reaches the pool, so no stop() ever comes: the sandbox (when what
            # failed came after the boot), folder and cgroups would stay until a sweep.
            if info is not None:
                with contextlib.suppress(Exception):
                    kill_sandbox(info.private)
            remove_vm_dir(vm_dir)
            group.remove()
            self._forget(vm_dir)
            self._release_uids(vm_id)
            raise

    def reset(self, info: VMInfo) -> VMInfo:
        """Kill every process of the sandbox and hand out the VM's standby, or start a new
        sandbox with an empty /run/guest (the home is a tmpfs of the sandbox: it dies with
        it and is seeded afresh); then boot the next standby (``standby.py``)."""
        vm_dir = Path(info.private["vm_dir"])
        if not vm_dir.is_dir():
            raise VMError(f"VM {info.vm_id}: its folder {vm_dir} is gone; it was stopped "
                          "or swept")
        swapped = self._standby.swap(info)  # booted: handed out, the old one killed behind it
        if swapped is not None:
            return swapped
        kill_sandbox(info.private)
        new = (self._standby.take(info.vm_id, self.options.boot_timeout_s)
               or self._boot_in(info.vm_id, vm_dir))
        self._standby.prepare(info.vm_id, Path(new.private["vm_dir"]))
        return new

    def verify(self, info: VMInfo) -> list[str]:
        """The home, /tmp, /dev/shm and the processes, seen from the host (``verify.py``)."""
        checked = info.private.pop(standby.BOOT_CHECK, None)  # a standby's, from its boot
        return self._view.check(info.vm_id, info.private["init_pid"], info.address) if checked is None else checked

    def healthy(self, info: VMInfo) -> bool:
        """The bwrap process is the one we started and its agent answers /health quickly."""
        return process_and_agent_healthy(info, timeout_s=2.0)

    def still_runs(self, info: VMInfo) -> bool:
        """bwrap, our child, has not exited (one waitpid; it exits with its sandbox's init)."""
        return child_runs(children, info.private.get("pid"))

    def death_cause(self, info: VMInfo) -> str | None:
        """Why the sandbox died or cannot be reached, when its task cannot have done it: its
        socket removed on the host (``sandbox_fs.socket_removed``), else ``sandbox_processes``.
        None for a sandbox the pool stopped itself (``kill_sandbox`` forgets it first): its
        folder is gone by the pool's own hand."""
        if info.private.get("pid") not in children:
            return None
        vm_dir = Path(info.private["vm_dir"])
        return (sandbox_fs.socket_removed(vm_dir / "sock" / SOCKET_NAME)
                or death_cause(info.private, self._uids.uid(vm_dir.name)))

    def stop(self, info: VMInfo) -> None:
        """Kill the sandbox and remove its folder and cgroups; a second call does nothing."""
        self._view.forget(info.vm_id)
        self._standby.drop(info.vm_id, self.options.boot_timeout_s)
        try:
            kill_sandbox(info.private)
            self._release_uids(info.vm_id)  # once none of its processes is left
        finally:
            cgroups.remove_paths(info.private.get("cgroups") or [])
            for folder in standby.folders(Path(info.private["vm_dir"]).parent, info.vm_id):
                remove_vm_dir(folder)
                cgroups.remove_paths(self._cgroup(folder.name).paths)
                self._forget(folder)

    @classmethod
    def sweep(cls, run_id: str | None = None,
              base_dir: str | os.PathLike | None = None, *, orphans_only: bool = False) -> list[str]:
        """Kill and remove the sandboxes of ``run_id`` (any state), or, without a run id,
        those whose owning process is gone; return the removed VMs as ``<run id>/<vm id>``."""
        def kill(meta: dict, vm_dir: Path) -> None:
            kill_recorded(meta, vm_dir)
            cgroups.kill_paths(meta.get("cgroups") or [])  # whatever escaped the pid records
            kill_unrecorded(vm_dir)
            cgroups.remove_paths(meta.get("cgroups") or [])

        removed = sweep_vm_folders(Path(base_dir) if base_dir else base_dir_default(), run_id, kill,
                                   orphans_only=orphans_only)
        return sorted({standby.vm_of_folder(name) for name in removed})  # a standby's folder is its VM's

    # ------------------------------------------------------------------- internals
    def _boot_in(self, vm_id: str, vm_dir: Path) -> VMInfo:
        """A new sandbox of ``vm_id`` in ``vm_dir`` (its folder or its standby's): the
        folder, its cgroups and most of bwrap's argv are those of its earlier boots."""
        group = self._cgroup(vm_dir.name)
        self._make_folder(vm_id, vm_dir, group)
        group.renew()
        try:
            return self._boot(vm_id, vm_dir, group)
        except BaseException:
            self._forget(vm_dir)  # made again at the next boot, whatever was wrong with it
            raise

    def _folders(self, vm_id: str) -> list[Path]:
        """The folders ``vm_id``'s sandboxes take turns in: its own and its standbys'."""
        return standby.folders(self.run_dir, vm_id, self._standby.depth + 1)

    def _release_uids(self, vm_id: str) -> None:
        """Give back the uids of ``vm_id``'s folders."""
        for folder in self._folders(vm_id):
            self._uids.release(folder.name)

    def _cgroup(self, folder: str) -> cgroups.VMCgroup:
        """The cgroups of one VM folder (a VM and its standby have one each)."""
        group = self._groups.get(folder)
        if group is None:
            memory = self._memory_mb
            group = self._groups[folder] = cgroups.VMCgroup(
                self._cgroup_name, folder,
                max_processes=self._pids_max,
                memory_bytes=None if memory is None or self._limit_as else memory * 2**20)
        return group

    def _forget(self, vm_dir: Path) -> None:
        """Drop what was kept of a folder's boots (removed, or made anew)."""
        self._groups.pop(vm_dir.name, None)
        for key in [key for key in self._argvs if key[1] == str(vm_dir)]:
            self._argvs.pop(key, None)

    def _argv(self, vm_id: str, vm_dir: Path, ready_fd: int, info_fd: int,
              listen_fd: int) -> list[str]:
        """bwrap's argv for a boot of ``vm_id`` in ``vm_dir`` that passes these fds; the
        rest is built at the folder's first boot (``sandbox_argv``)."""
        uid = self._uids.uid(vm_dir.name)
        if self._uids.enabled and uid is None:
            # never a sandbox whose commands would run as root: a standby of a stopped VM
            raise VMError(f"VM {vm_id} holds no sandbox uid for {vm_dir.name} (it was stopped)")
        key = (vm_id, str(vm_dir), uid)
        parts = self._argvs.get(key)
        if parts is None:
            parts = self._argvs[key] = folder_argv(self._spec, vm_id, vm_dir, uid)
        return boot_argv(self._spec, parts, ready_fd, info_fd, listen_fd)

    def _boot(self, vm_id: str, vm_dir: Path, group: cgroups.VMCgroup) -> VMInfo:
        """Start the sandbox and wait for the agent's ready line; VMError (with the agent's
        log) when it does not come within boot_timeout_s."""
        spec = self._spec
        if spec.agent_dir is not None and agent_folder.use(spec.agent_dir, self._agent_files) is None:
            # gone and not made again: the boots bind the package's files, as without it
            self._spec = dataclasses.replace(spec, agent_dir=None)
            self._argvs.clear()
        if (spec.fronts_dir is not None and not grading_fronts.current(spec.fronts_dir, spec.python)
                or spec.encodings_dir is not None and not spec.encodings_dir.is_dir()):
            # gone, or the host's programs changed: made again (None: file by file, as without it)
            fronts_dir = grading_fronts.prepare(spec.python, secure_base_dir(self.base_dir))
            self._spec = dataclasses.replace(self._spec, fronts_dir=fronts_dir, encodings_dir=None if fronts_dir
                                             else self._encodings_dir(spec.python))
            self._argvs.clear()
        for field, prepare in (("system_data_dir", system_data.prepare), ("etc_dir", system_data.prepare_etc)):
            copy = getattr(self._spec, field)
            if copy is not None and not copy.is_dir():
                # gone (a sweep of the base folder): made again, or the host's folders bound as they are
                self._spec = dataclasses.replace(self._spec, **{field: prepare(secure_base_dir(self.base_dir))})
                self._argvs.clear()
        socket_path = vm_dir / "sock" / SOCKET_NAME
        private = sandbox_launch.launch(
            vm_id, vm_dir, socket_path, group,
            lambda ready_w, info_w, listen_fd: self._argv(vm_id, vm_dir, ready_w, info_w, listen_fd),
            nofile=self._nofile, boot_timeout_s=self.options.boot_timeout_s,
            boot_timeout_said=self.options.boot_timeout_said,
            write_meta=lambda private: self._write_meta(vm_id, vm_dir, private),
            own_userns=not self._uids.enabled)
        address = f"unix:{socket_path}"
        return VMInfo(vm_id=vm_id, provider=self.name, address=address, run_id=self.run_id,
                      private=private)

    def _make_folder(self, vm_id: str, vm_dir: Path, group: cgroups.VMCgroup) -> None:
        """``vm_dir`` and its socket folder (the socket is made by ``sandbox_fs.listen``); at
        the folder's first boot, labelled at once (owner, cgroups), before anything runs in
        it: a sweep finds by the label what an owner killed in the middle of the boot leaves,
        and a sweep of orphans (another run of the run id starting) takes an unlabelled folder
        for a leftover. A later boot's folder keeps the label until its own meta replaces it."""
        make_vm_dir(vm_dir, "sock", lock_pool=True)  # a sweep in another PID namespace sees it live
        if not os.path.exists(f"{vm_dir}/meta.json"):
            self._write_meta(vm_id, vm_dir, {"vm_dir": str(vm_dir), "cgroups": group.paths})

    def _write_meta(self, vm_id: str, vm_dir: Path, private: dict) -> None:
        write_meta(vm_dir, {"run_id": self.run_id, "vm_id": vm_id, "created": time.time(),
                            **owner_label(), **private})
