"""ProcessProvider: every "VM" is a bubblewrap sandbox running the guest agent. The default.

::

    owning process ── launcher thread ──fork──► bwrap (host pid = info.private["pid"])
                                                  └─ pid 1 of a new pid namespace
                                                       └─ python3 guest/server.py --unix ...
                                                            └─ the commands the host asks for

    <base>/<run_id>/<vm_id>/      base: $PARALLEL_ROLLOUT_PROCESS_DIR or /tmp/parallel-rollout/process
        home/        bound read-write at /home/user (HOME, the cwd): the VM's disk
        sock/        bound at /run/guest; the agent listens on sock/agent.sock
        meta.json    run id, vm id, owner pid, bwrap pid and start times: what sweep() reads
        agent.log    the agent's (and bwrap's) stderr, quoted when a boot fails

**Isolation.** Own pid, ipc, uts and network namespaces (only ``lo`` inside), system folders
bound read-only, fresh ``/proc``, ``/dev`` and ``/tmp``, a clean environment, ``setsid``.
It is a sandbox against accidents and runaway processes, not a security boundary against a
hostile root user: the sandbox runs as the caller's uid.

**Reset = restart.** A snapshot is a folder whose content is the initial home. Reset kills
the bwrap process and the pid namespace's init; the kernel then kills every process in the
namespace, and we wait until the init is gone, which happens only after all of them are.
Then the home is replaced by a fresh copy of the snapshot and a new sandbox starts. The
cost is dominated by the agent's Python start-up (see ``guest/server.py``); readiness is a
pipe the agent writes to once it listens, so nobody polls.

**Desktop** (``options.desktop``, the osworld mode). The agent starts with ``--desktop WxH``:
a D-Bus session bus, Xvfb on display :0 and openbox, inside the sandbox, before it says ready
(see ``guest/desktop.py``; the AT-SPI bus and its registry start there too, and the walker
``guest/atspi_tree.py`` is bound next to the agent). The desktop is therefore part of the
snapshot: a reset kills it with every window, app and bus of the task and the next boot
brings a clean one (~0.2 s on 2 cores; the agent alone is ~60 ms). ``PARALLEL_ROLLOUT_ATSPI``
in the host's environment is passed on (``0``: no bus, the window list only).
``guest/shim/pyautogui.py`` is on PYTHONPATH and ``python`` names the guest's python3, so
OSWorld's ``python -c "import pyautogui; ..."`` actions run as they do in an OSWorld image.
The apps come from the host's /usr (Debian packages ``./dev`` installs: xvfb, openbox, xterm,
mousepad, pcmanfm, xdotool, wmctrl, ffmpeg, dbus, at-spi2-core, python3-pyatspi).

**The launcher thread.** ``--die-with-parent`` is PR_SET_PDEATHSIG, which fires when the
*thread* that forked bwrap exits, not its process. The pool starts and resets VMs from
short-lived threads, so every bwrap is forked by one long-lived daemon thread per process:
sandboxes live exactly as long as the process that owns them.

**Limits.** ``memory_mb`` is RLIMIT_AS (address space, per process) on every command the
agent runs, through util-linux ``prlimit``; the agent itself is not limited. It bounds each
process, not the sandbox's sum. ``max_processes`` is the ``pids.max`` of a cgroup per VM
(RLIMIT_NPROC cannot work: it counts per uid across the host, and root is exempt); a machine
without a writable pids cgroup gets a ConfigError rather than a silently ignored limit.

**Sweep.** Every VM folder is labelled with its run id and its owner. ``sweep(run_id)``
kills and removes every sandbox of that run; ``sweep()`` removes those whose owning process
is gone. A recorded pid is killed only if it is still the same process (start time and the
VM folder in its command line), never a recycled pid.
"""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import signal
import subprocess
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Callable

import psutil

from ...errors import ConfigError, ProviderUnavailable, VMError
from . import images
from .base import Provider, ProviderOptions, VMInfo

DEFAULT_BASE_DIR = "/tmp/parallel-rollout/process"
BASE_DIR_ENV = "PARALLEL_ROLLOUT_PROCESS_DIR"
GUEST_HOME = "/home/user"
GUEST_SOCK_DIR = "/run/guest"
GUEST_AGENT = images.GUEST_AGENT_PATH
SOCKET_NAME = "agent.sock"
#: sun_path holds 108 bytes; keep a margin
MAX_SOCKET_PATH = 100
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
GUEST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: how long a killed sandbox may take to disappear before we call it stuck
KILL_WAIT_S = 5.0
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_AGENT_SOURCES = tuple(images.GUEST_SOURCE_DIR / name for name in images.GUEST_AGENT_FILES)
#: guest files a desktop VM needs next to the agent: the desktop routes and the AT-SPI walker
_DESKTOP_SOURCES = tuple(images.GUEST_SOURCE_DIR / name for name in images.GUEST_DESKTOP_FILES)
#: the guest's AT-SPI switch (guest/desktop.py's, not imported: ctypes and all for a name),
#: passed on from the host when set
ATSPI_ENV = "PARALLEL_ROLLOUT_ATSPI"
_SHIM_DIR = images.GUEST_SOURCE_DIR / "shim"
GUEST_SHIM = images.GUEST_SHIM_DIR
GUEST_BIN = f"{images.GUEST_DIR}/bin"
#: what a desktop VM needs on the host's /usr, by the Debian package that has it
DESKTOP_PROGRAMS = {"Xvfb": "xvfb", "openbox": "openbox", "xdotool": "xdotool",
                    "wmctrl": "wmctrl", "xprop": "x11-utils"}


def base_dir_default() -> Path:
    """Where sandboxes live unless told otherwise: $PARALLEL_ROLLOUT_PROCESS_DIR or /tmp/..."""
    return Path(os.environ.get(BASE_DIR_ENV) or DEFAULT_BASE_DIR)


class ProcessProvider(Provider):
    """VMs as bubblewrap sandboxes; a snapshot is a folder copied into the home."""

    name = "process"

    def __init__(self, run_id: str, options: ProviderOptions | None = None,
                 base_dir: str | os.PathLike | None = None) -> None:
        super().__init__(run_id, options)
        _check_name("run id", run_id)
        if self.options.path_to_vm:
            raise ConfigError(
                "the process provider has no VM image: path_to_vm cannot be honoured "
                "(give a snapshot folder with snapshot_name, or use the qemu provider)")
        self.base_dir = Path(base_dir) if base_dir else base_dir_default()
        self.run_dir = self.base_dir / run_id
        self.snapshot: Path | None = None
        if self.options.snapshot_name:
            self.snapshot = Path(self.options.snapshot_name).expanduser().resolve()
            if not self.snapshot.is_dir():
                raise ConfigError(
                    f"process provider snapshot {self.options.snapshot_name!r} is not a folder "
                    f"({self.snapshot}); a snapshot is a folder whose content becomes the home")
        if self.options.memory_mb is not None:
            if self.options.memory_mb <= 0:
                raise ConfigError(f"memory_mb must be positive, got {self.options.memory_mb}")
            if shutil.which("prlimit") is None:
                raise ConfigError("memory_mb needs util-linux prlimit (apt-get install "
                                  "util-linux); the process provider cannot enforce it")
        self._pids_cgroup: Path | None = None
        if self.options.max_processes is not None:
            if self.options.max_processes <= 0:
                raise ConfigError(
                    f"max_processes must be positive, got {self.options.max_processes}")
            self._pids_cgroup = _pids_cgroup_root()
            if self._pids_cgroup is None:
                raise ConfigError(
                    "max_processes needs a writable pids cgroup (cgroup v1 pids, or v2 with "
                    "the pids controller delegated); RLIMIT_NPROC cannot cap a sandbox")
        self._python = _guest_python()
        if self.options.desktop:
            missing = sorted({pkg for prog, pkg in DESKTOP_PROGRAMS.items() if not shutil.which(prog)})
            if missing:
                raise ConfigError("a desktop VM needs " + ", ".join(missing)
                                  + f"; install with: apt-get install {' '.join(missing)} (./dev does)")

    @classmethod
    def supported_limits(cls) -> frozenset[str]:
        """memory_mb with util-linux prlimit; max_processes with a writable pids cgroup."""
        limits = set()
        if shutil.which("prlimit"):
            limits.add("memory_mb")
        if _pids_cgroup_root() is not None:
            limits.add("max_processes")
        return frozenset(limits)

    def __repr__(self) -> str:
        return f"ProcessProvider(run_id={self.run_id!r}, base_dir={str(self.base_dir)!r})"

    # ------------------------------------------------------------------- contract

    @classmethod
    def check_available(cls) -> None:
        """ProviderUnavailable unless bwrap exists and can create the namespaces we use."""
        bwrap = shutil.which("bwrap")
        if bwrap is None:
            raise ProviderUnavailable("bubblewrap (bwrap) is not installed; install it with: "
                                      "apt-get install bubblewrap")
        if _guest_python() is None:
            raise ProviderUnavailable("the process provider needs python3 under /usr")
        argv = [bwrap, *_namespace_flags(), *_system_binds(), "--proc", "/proc",
                "--dev", "/dev", "--", "/bin/true"]
        try:
            probe = subprocess.run(argv, capture_output=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ProviderUnavailable(f"bubblewrap does not run here: {exc}") from exc
        if probe.returncode != 0:
            raise ProviderUnavailable(
                "bubblewrap cannot create namespaces here (unprivileged user namespaces "
                "disabled, or a container without CAP_SYS_ADMIN?): "
                + probe.stderr.decode(errors="replace").strip())

    def start(self, vm_id: str) -> VMInfo:
        """Create the VM folder from the snapshot, start the sandbox, wait for its agent."""
        _check_name("vm id", vm_id)
        vm_dir = self.run_dir / vm_id
        socket_path = vm_dir / "sock" / SOCKET_NAME
        if len(str(socket_path)) > MAX_SOCKET_PATH:
            raise ConfigError(
                f"socket path {socket_path} is longer than {MAX_SOCKET_PATH} characters; "
                f"set {BASE_DIR_ENV} to a shorter folder or use shorter run/vm ids")
        if vm_dir.exists():
            meta = _read_meta(vm_dir)
            if meta and _sandbox_alive(meta, vm_dir):
                raise VMError(f"VM {vm_id} of run {self.run_id} is already running "
                              f"(pid {meta.get('pid')})")
            shutil.rmtree(vm_dir, ignore_errors=True)
        _make_vm_dir(vm_dir)
        try:
            self._restore_home(vm_dir)
            if self._pids_cgroup is not None:
                _make_cgroup(self._cgroup_dir(vm_id), self.options.max_processes)
            return self._boot(vm_id, vm_dir)
        except BaseException:
            # The pool has no VMInfo for a VM that never booted, so nobody would ever call
            # stop() on it: its folder (and cgroup) would stay until a sweep.
            shutil.rmtree(vm_dir, ignore_errors=True)
            _remove_run_dir_if_empty(vm_dir.parent)
            if self._pids_cgroup is not None:
                _remove_cgroup(self._cgroup_dir(vm_id))
            raise

    def reset(self, info: VMInfo) -> VMInfo:
        """Kill every process of the sandbox, restore the home, start it again."""
        vm_dir = Path(info.private["vm_dir"])
        if not vm_dir.is_dir():
            raise VMError(f"VM {info.vm_id}: its folder {vm_dir} is gone; it was stopped "
                          "or swept")
        _kill_sandbox(info.private)
        self._restore_home(vm_dir)
        return self._boot(info.vm_id, vm_dir)

    def healthy(self, info: VMInfo) -> bool:
        """The bwrap process is the one we started and its agent answers /health quickly."""
        if not _same_process(info.private.get("pid"), info.private.get("create_time")):
            return False
        from ...guest.client import GuestClient

        try:
            GuestClient(info.address, timeout_s=2.0).health()
        except Exception:  # unreachable, malformed: either way not healthy
            return False
        return True

    def stop(self, info: VMInfo) -> None:
        """Kill the sandbox and remove its folder (and cgroup); a second call does nothing."""
        try:
            _kill_sandbox(info.private)
        finally:
            shutil.rmtree(info.private["vm_dir"], ignore_errors=True)
            _remove_run_dir_if_empty(Path(info.private["vm_dir"]).parent)
            if self._pids_cgroup is not None:
                _remove_cgroup(self._cgroup_dir(info.vm_id))

    @classmethod
    def sweep(cls, run_id: str | None = None,
              base_dir: str | os.PathLike | None = None) -> list[str]:
        """Kill and remove the sandboxes of ``run_id`` (any state), or, without a run id,
        those whose owning process is gone; return the removed VM ids."""
        def kill(meta: dict, vm_dir: Path) -> None:
            _kill_recorded(meta, vm_dir)
            if meta.get("cgroup"):
                _remove_cgroup(Path(meta["cgroup"]))

        return sweep_vm_folders(Path(base_dir) if base_dir else base_dir_default(), run_id, kill)

    # ------------------------------------------------------------------- internals

    def _cgroup_dir(self, vm_id: str) -> Path:
        return self._pids_cgroup / "parallel-rollout" / self.run_id / vm_id

    def _restore_home(self, vm_dir: Path) -> None:
        home = vm_dir / "home"
        if home.exists():
            shutil.rmtree(home)
        if self.snapshot is None:
            home.mkdir()
        else:
            shutil.copytree(self.snapshot, home, symlinks=True)

    def _argv(self, vm_id: str, vm_dir: Path, ready_fd: int, info_fd: int) -> list[str]:
        agent = [self._python, "-I", "-S", GUEST_AGENT,  # -S: site.py costs ~5 ms per boot
                 "--unix", f"{GUEST_SOCK_DIR}/{SOCKET_NAME}", "--ready-fd", str(ready_fd)]
        if self.options.memory_mb is not None:
            agent += ["--limit-as", str(self.options.memory_mb * 1024 * 1024)]
        desktop: list[str] = []
        path = GUEST_PATH
        if self.options.desktop:
            agent += ["--desktop", self.options.screen]
            desktop = [arg for source in _DESKTOP_SOURCES for arg in
                       ("--ro-bind", str(source), str(Path(GUEST_AGENT).with_name(source.name)))]
            desktop += ["--ro-bind", str(_SHIM_DIR), GUEST_SHIM,
                       "--ro-bind", self._python, f"{GUEST_BIN}/python",
                       "--setenv", "PYTHONPATH", GUEST_SHIM]
            if os.environ.get(ATSPI_ENV):
                desktop += ["--setenv", ATSPI_ENV, os.environ[ATSPI_ENV]]
            if os.path.isdir("/var/cache/fontconfig"):
                # without the system's font cache every app start rebuilds it (seconds)
                desktop += ["--ro-bind", "/var/cache/fontconfig", "/var/cache/fontconfig"]
            # shim/bin: wrappers of apps that refuse to run as the sandbox's root (vlc)
            path = f"{GUEST_BIN}:{GUEST_SHIM}/bin:{GUEST_PATH}"
        return [
            shutil.which("bwrap") or "bwrap",
            *_namespace_flags(), "--die-with-parent", "--new-session",
            "--hostname", vm_id,
            *_system_binds(),
            "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
            "--bind", str(vm_dir / "home"), GUEST_HOME,
            "--bind", str(vm_dir / "sock"), GUEST_SOCK_DIR,
            *[arg for source in _AGENT_SOURCES for arg in
              ("--ro-bind", str(source), str(Path(GUEST_AGENT).with_name(source.name)))],
            "--chdir", GUEST_HOME,
            "--clearenv",
            "--setenv", "PATH", path, "--setenv", "HOME", GUEST_HOME,
            "--setenv", "LANG", "C.UTF-8", "--setenv", "USER", "user",
            "--setenv", "PARALLEL_ROLLOUT_VM", vm_id,
            *desktop,
            "--info-fd", str(info_fd),
            "--", *agent,
        ]

    def _boot(self, vm_id: str, vm_dir: Path) -> VMInfo:
        """Start the sandbox and wait for the agent's ready line; VMError (with the agent's
        log) when it does not come within boot_timeout_s."""
        ready_r, ready_w = os.pipe()
        info_r, info_w = os.pipe()
        argv = self._argv(vm_id, vm_dir, ready_w, info_w)
        cgroup = None
        if self._pids_cgroup is not None:
            cgroup = self._cgroup_dir(vm_id)
            # join the cgroup before bwrap forks anything: a shell that moves itself, then execs
            argv = ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"',
                    str(cgroup / "cgroup.procs"), *argv]
        log_path = vm_dir / "agent.log"
        try:
            with open(log_path, "ab") as log:
                proc = _launcher().popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=log, pass_fds=(ready_w, info_w),
                                         start_new_session=True)
        except OSError as exc:
            for fd in (ready_r, ready_w, info_r, info_w):
                os.close(fd)
            raise VMError(f"VM {vm_id}: cannot start bwrap: {exc}") from exc
        os.close(ready_w)
        os.close(info_w)
        _children[proc.pid] = proc
        private = {"pid": proc.pid, "create_time": _create_time(proc.pid),
                   "vm_dir": str(vm_dir), "cgroup": str(cgroup) if cgroup else None}
        try:
            deadline = time.monotonic() + self.options.boot_timeout_s
            info = _read_until(info_r, b"}", deadline)
            try:
                init_pid = json.loads(info)["child-pid"]
            except (ValueError, KeyError) as exc:
                raise VMError(f"bwrap gave no child pid (got {info!r})") from exc
            private["init_pid"] = init_pid
            private["init_create_time"] = _create_time(init_pid)
            self._write_meta(vm_id, vm_dir, private)
            if not _read_until(ready_r, b"\n", deadline).startswith(b"ready"):
                raise VMError("the guest agent exited before it was ready")
        except VMError as exc:
            _kill_sandbox(private)
            tail = _tail(log_path)
            raise VMError(f"VM {vm_id} did not boot: {exc}; agent log: {tail}") from None
        finally:
            os.close(ready_r)
            os.close(info_r)
        address = f"unix:{vm_dir / 'sock' / SOCKET_NAME}"
        return VMInfo(vm_id=vm_id, provider=self.name, address=address, run_id=self.run_id,
                      private=private)

    def _write_meta(self, vm_id: str, vm_dir: Path, private: dict) -> None:
        me = psutil.Process()
        meta = {"run_id": self.run_id, "vm_id": vm_id, "created": time.time(),
                "owner_pid": me.pid, "owner_create_time": me.create_time(), **private}
        tmp = vm_dir / "meta.json.tmp"
        tmp.write_text(json.dumps(meta, indent=1))
        tmp.replace(vm_dir / "meta.json")  # sweep must never read half a file
        (vm_dir / "pid").write_text(f"{private['pid']}\n")


# ------------------------------------------------------------------------- launcher

#: bwrap processes this process started, so it can reap them (no zombies)
_children: dict[int, subprocess.Popen] = {}


class _Launcher:
    """The one long-lived thread that forks every sandbox of this process (see module doc)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
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

    def popen(self, argv: list[str], **kwargs) -> subprocess.Popen:
        """subprocess.Popen, forked from the launcher thread."""
        future: Future = Future()
        self._requests.put((future, argv, kwargs))
        return future.result()


_launcher_lock = threading.Lock()
_launcher_instance: _Launcher | None = None


def _launcher() -> _Launcher:
    global _launcher_instance
    with _launcher_lock:
        # after a fork the thread is gone from the child: start a new one there
        if _launcher_instance is None or _launcher_instance.pid != os.getpid():
            _launcher_instance = _Launcher()
        return _launcher_instance


# ------------------------------------------------------------------------ processes


def _create_time(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def _same_process(pid, create_time) -> bool:
    """Whether ``pid`` runs and is the process that had ``create_time`` (not a reused pid)."""
    if not pid or create_time is None:
        return False
    try:
        proc = psutil.Process(pid)
        return (abs(proc.create_time() - create_time) < 0.01
                and proc.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def _kill_sandbox(private: dict) -> None:
    """SIGKILL bwrap and the namespace init, and wait until the init (hence every process
    of the namespace) is gone; VMError if it outlives KILL_WAIT_S."""
    pid, init_pid = private.get("pid"), private.get("init_pid")
    init_created = private.get("init_create_time")
    if init_pid is None and _same_process(pid, private.get("create_time")):
        init_pid, init_created = _unreported_init(pid)
    for target, created in ((init_pid, init_created),
                            (pid, private.get("create_time"))):
        if _same_process(target, created):
            try:
                os.kill(target, signal.SIGKILL)
            except ProcessLookupError:
                pass
    proc = _children.pop(pid, None)
    if proc is not None:
        try:
            proc.wait(timeout=KILL_WAIT_S)
        except subprocess.TimeoutExpired:
            raise VMError(f"bwrap {pid} survived SIGKILL for {KILL_WAIT_S}s") from None
    # The init is bwrap's child, re-parented when bwrap dies; the kernel lets it finish
    # exiting only after every other process of its pid namespace has.
    deadline = time.monotonic() + KILL_WAIT_S
    delay = 0.0005
    while _same_process(init_pid, init_created) or \
            _same_process(pid, private.get("create_time")):
        if time.monotonic() > deadline:
            raise VMError(f"sandbox {private.get('vm_dir')} survived SIGKILL "
                          f"for {KILL_WAIT_S}s")
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def _unreported_init(pid: int) -> tuple[int | None, float | None]:
    """The namespace init of a bwrap that has not reported it yet (a boot that failed before
    --info-fd said), as (pid, create time), or (None, None).

    It must be killed by hand: bwrap's --die-with-parent is set up by the init itself, and an
    init whose bwrap dies before that outlives it as an orphan sandbox. bwrap is stopped
    first, so that it cannot fork the init after we looked."""
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


def _sandbox_alive(meta: dict, vm_dir: Path) -> bool:
    return _is_our_bwrap(meta.get("pid"), meta.get("create_time"), vm_dir)


def _is_our_bwrap(pid, create_time, vm_dir: Path) -> bool:
    if not _same_process(pid, create_time):
        return False
    try:
        return str(vm_dir) in " ".join(psutil.Process(pid).cmdline())
    except psutil.Error:
        return False


def _kill_recorded(meta: dict, vm_dir: Path) -> None:
    """Kill what meta.json records, if it is still that sandbox."""
    if _is_our_bwrap(meta.get("pid"), meta.get("create_time"), vm_dir):
        private = dict(meta)
    else:
        # bwrap is gone; its init may linger for a moment, and is known by its start time
        private = {"init_pid": meta.get("init_pid"),
                   "init_create_time": meta.get("init_create_time")}
    try:
        _kill_sandbox(private)
    except VMError:
        pass  # sweep is best effort; the folder goes regardless


def _read_until(fd: int, terminator: bytes, deadline: float) -> bytes:
    """Bytes from a pipe up to ``terminator`` or EOF; VMError at the deadline."""
    import select

    data = b""
    while terminator not in data:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise VMError("timed out waiting for the guest agent")
        readable, _, _ = select.select([fd], [], [], remaining)
        if not readable:
            continue
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        data += chunk
    return data


def _tail(path: Path, limit: int = 2000) -> str:
    try:
        text = path.read_bytes()[-limit:].decode("utf-8", "replace").strip()
    except OSError:
        return "(no log)"
    return text or "(empty)"


# ---------------------------------------------------------------------- filesystem


def _check_name(what: str, value: str) -> None:
    # these become folder names and a hostname: no slashes, no dot-dot, nothing odd
    if not isinstance(value, str) or not _SAFE_NAME.match(value):
        raise ConfigError(f"{what} {value!r} must be 1-64 characters of letters, digits, "
                          "'.', '_' or '-' (starting with a letter or digit)")


def _read_meta(vm_dir: Path) -> dict | None:
    try:
        return json.loads((vm_dir / "meta.json").read_text())
    except (OSError, ValueError):
        return None


def _make_vm_dir(vm_dir: Path) -> None:
    """Create ``vm_dir/sock``; a concurrent stop of the run's last VM may remove the run
    folder between the creation of the parents, so try again when that happens."""
    for _ in range(10):
        try:
            (vm_dir / "sock").mkdir(parents=True)
            return
        except FileNotFoundError:
            continue
    (vm_dir / "sock").mkdir(parents=True)


def sweep_vm_folders(base: Path, run_id: str | None, kill: Callable[[dict, Path], None]) -> list[str]:
    """The sweep of providers that keep a labelled folder per VM (``<base>/<run>/<vm>/``
    with meta.json): every VM of ``run_id``, or, without one, those whose owning process is
    gone; ``kill(meta, vm_dir)`` stops what the folder records. Returns the removed VM ids."""
    if run_id is not None:
        _check_name("run id", run_id)
        run_dirs = [base / run_id]
    else:
        run_dirs = sorted(p for p in base.iterdir() if p.is_dir()) if base.is_dir() else []
    removed = []
    for run_dir in run_dirs:
        if not run_dir.is_dir():
            continue
        for vm_dir in sorted(p for p in run_dir.iterdir() if p.is_dir()):
            meta = _read_meta(vm_dir) or {}
            if run_id is None and _same_process(meta.get("owner_pid"), meta.get("owner_create_time")):
                continue  # a live run: not ours to sweep
            kill(meta, vm_dir)
            shutil.rmtree(vm_dir, ignore_errors=True)
            removed.append(vm_dir.name)
        _remove_run_dir_if_empty(run_dir)
    return removed


def _remove_run_dir_if_empty(run_dir: Path) -> None:
    try:
        run_dir.rmdir()
    except OSError:
        pass  # not empty, or already gone


def _namespace_flags() -> list[str]:
    return ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net"]


def _system_binds() -> list[str]:
    """Read-only binds of the system folders; merged-/usr symlinks stay symlinks."""
    args = []
    for path in SYSTEM_DIRS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    return args


def _guest_python() -> str | None:
    # only an interpreter under the bound system folders exists inside the sandbox
    found = shutil.which("python3", path="/usr/local/bin:/usr/bin")
    return found if found and found.startswith("/usr/") else None


# -------------------------------------------------------------------------- cgroups


def _pids_cgroup_root() -> Path | None:
    """Our own cgroup in a writable pids hierarchy (v1 or v2), or None."""
    try:
        mounts = Path("/proc/self/mounts").read_text().splitlines()
        own = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in mounts:
        fields = line.split()
        if len(fields) < 4:
            continue
        mountpoint, fstype, opts = fields[1], fields[2], fields[3].split(",")
        if fstype == "cgroup" and "pids" in opts:
            rel = next((l.split(":", 2)[2] for l in own if "pids" in l.split(":")[1].split(",")),
                       "/")
        elif fstype == "cgroup2":
            rel = next((l.split(":", 2)[2] for l in own if l.startswith("0::")), "/")
            if "pids" not in _read(Path(mountpoint) / rel.lstrip("/") / "cgroup.controllers"):
                continue
        else:
            continue
        root = Path(mountpoint) / rel.lstrip("/")
        if os.access(root, os.W_OK):
            return root
    return None


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _make_cgroup(path: Path, max_processes: int) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
        if not (path / "pids.max").exists():
            # cgroup v2: the controller must be enabled down the chain of parents
            for parent in reversed(path.parents):
                control = parent / "cgroup.subtree_control"
                if parent in path.parents and control.exists():
                    try:
                        control.write_text("+pids")
                    except OSError:
                        pass
        (path / "pids.max").write_text(str(max_processes))
    except OSError as exc:
        raise VMError(f"cannot set up the pids cgroup {path}: {exc}") from exc


def _remove_cgroup(path: Path) -> None:
    # a cgroup can be removed once its last process is reaped, which may lag a moment
    deadline = time.monotonic() + 2.0
    while True:
        try:
            path.rmdir()
            break
        except FileNotFoundError:
            break
        except OSError:
            if time.monotonic() > deadline:
                return
            time.sleep(0.01)
    for parent in (path.parent, path.parent.parent):
        try:
            parent.rmdir()  # the run's and our top folder, when they are empty
        except OSError:
            break
