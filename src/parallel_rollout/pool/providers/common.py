"""Plumbing every local provider shares: names, VM folders, "is it still that process", sweeps.

The process, docker and qemu providers all keep one labelled folder per VM::

    <base>/<run_id>@<pool>/<vm_id>/meta.json     run id, vm id, owner pid and start time, pids ...

``<pool>`` is a key new for each provider, hence each pool (``pool_folder``): two runs of one
run id in two output folders may run at once, and their VMs of one id must never share a
folder (they did: the second run's boots failed, "already running", and spent its VM
replacements). ``sweep_vm_folders`` walks those folders: every VM of a run (each pool's, and
the unkeyed ``<base>/<run_id>`` of earlier versions), or, without a run id, those whose owning
process is gone. A recorded pid is trusted only while it is the same process
(``same_process``: its start time, so a recycled pid is never killed). A pid means nothing
to a sweep in another PID namespace (``unshare --pid --mount-proc``: no such process there),
so a pool also holds a lock on its folder while it lives (``pool_lock.py``: flock, which is
the folder's in every namespace), and a sweep leaves a pool folder whose lock is held as it
does one whose owner's pid runs.

**Start times** are psutil's (``psutil.Process.create_time``: the start in clock ticks since
boot from ``/proc/PID/stat``, over the ticks per second, plus the boot time from
``/proc/stat``, both read at each call), so what one process recorded another compares; they
are read here without psutil, whose Process object reads five files where two do and cost
the pool ~10 of them per reset.

**The base folder** is created 0700 and must be ours: under a shared ``/tmp`` another user
could have made ``/tmp/parallel-rollout`` first (or a symlink in its place) and would then
own, or redirect, every sandbox's files. ``secure_base_dir`` refuses such a folder instead of
following it.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import stat
import subprocess
import time
from pathlib import Path
from typing import Callable

from ...errors import ConfigError, VMError
from ...guest.agent_output import wait_exit
from .pool_lock import hold_pool_lock, pool_held

_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
#: the shared parent every default base folder lives in
SHARED_TMP = Path("/tmp")


def check_name(what: str, value: str) -> None:
    """ConfigError unless ``value`` is a safe folder name and hostname (no slash, no ..)."""
    if not isinstance(value, str) or not _SAFE_NAME.match(value):
        raise ConfigError(f"{what} {value!r} must be 1-64 characters of letters, digits, "
                          "'.', '_' or '-' (starting with a letter or digit)")


#: between a run id and its pool's key in a pool folder's name: no run id has it (``check_name``)
POOL_SEP = "@"


def new_pool_key() -> str:
    """A key of one pool's own (a provider's): its VM folder, and the process provider's
    cgroups, are named by the run id and this."""
    return secrets.token_hex(4)


#: sun_path holds 108 bytes; a unix socket's path is kept within this, with a margin
MAX_SOCKET_PATH = 100
#: a VM folder's name as long as a pool's get (ids count up with replacements, a Ray node's
#: start with ``n<node>-``, a standby's folder adds ``.c``): what a pool's sockets are checked
#: for as it is made
LONG_VM_ID = "n9-vm-999.c"
#: run ids longer than this name their pool folders by a prefix and a hash of the whole
_FOLDER_ID_LEN = 28


def _folder_id(run_id: str) -> str:
    """``run_id`` as its pool folders are named: itself, or for a long one its first 20
    characters and 7 of its hash (a socket's path must stay within sun_path)."""
    if len(run_id) <= _FOLDER_ID_LEN:
        return run_id
    return f"{run_id[:20]}-{hashlib.sha256(run_id.encode()).hexdigest()[:7]}"


def pool_folder(base: Path, run_id: str, key: str) -> Path:
    """The folder of one pool's VMs of ``run_id``: ``<base>/<run_id>@<key>`` (a long run id
    shortened, ``_folder_id``)."""
    return base / f"{_folder_id(run_id)}{POOL_SEP}{key}"


def checked_socket(run_dir: Path, vm_id: str, *parts: str, env: str) -> Path:
    """A VM's unix socket ``run_dir/vm_id/parts…``; ConfigError when sun_path cannot hold
    it. Each provider checks ``LONG_VM_ID``'s as it is made: a base folder too long is a
    usage error before anything starts, not a pool whose every boot fails."""
    path = Path(run_dir, vm_id, *parts)
    if len(str(path)) > MAX_SOCKET_PATH:
        raise ConfigError(f"socket path {path} is longer than {MAX_SOCKET_PATH} characters; "
                          f"set {env} to a shorter folder")
    return path


def run_folders(base: Path, run_id: str | None = None) -> list[Path]:
    """The pool folders of ``run_id`` under ``base`` (with an earlier version's unkeyed
    ``<base>/<run_id>``), or every run's: a dot folder is no run's (a cache)."""
    if run_id is None:
        found = base.iterdir() if base.is_dir() else ()
        return sorted(p for p in found if p.is_dir() and not p.name.startswith("."))
    check_name("run id", run_id)  # letters, digits, "._-": nothing glob reads
    return sorted(p for p in [base / run_id, *base.glob(f"{_folder_id(run_id)}{POOL_SEP}*")] if p.is_dir())


def vm_folders(run_dir: Path) -> list[Path]:
    """The VM folders in a pool folder; none once it is gone (its pool stopped its last VM
    since it was listed: another live run's, which a sweep lists too)."""
    try:
        return sorted(p for p in run_dir.iterdir() if p.is_dir())
    except FileNotFoundError:
        return []


#: clock ticks per second, the unit of a start time in /proc/PID/stat
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[str, float] | None:
    """``pid``'s state letter and start time (psutil's ``create_time``), None when it is gone."""
    found = _stat_ticks(pid)
    if found is None:
        return None
    try:
        system = read_proc("/proc/stat")
    except OSError:
        return None
    at = system.find(b"\nbtime ")
    if at < 0:
        return None
    boot_time = float(system[at + 7:system.index(b"\n", at + 1)])
    return found[0], found[1] / _CLOCK_TICKS + boot_time


def _stat_ticks(pid: int) -> tuple[str, int] | None:
    """``pid``'s state letter and start in clock ticks since the host's boot (its
    /proc/PID/stat alone), None when it is gone."""
    try:
        stat_line = read_proc(f"/proc/{int(pid)}/stat")
    except (OSError, ValueError, TypeError):  # gone, or no pid at all
        return None
    # the name in parentheses may hold spaces and parentheses: the fields follow the last ")"
    fields = stat_line[stat_line.rfind(b")") + 2:].split()
    return (fields[0].decode(), int(fields[19])) if len(fields) >= 20 else None


def start_ticks(pid) -> int | None:
    """When ``pid`` started, in clock ticks since the host's boot, None when it is gone or
    a zombie: a start that no clock step moves, read from /proc/PID/stat alone (not
    /proc/stat, whose size grows with the host's CPUs and interrupts), for checks cheap
    enough to make at every lease (``Provider.still_runs``)."""
    found = _stat_ticks(pid) if pid else None
    return found[1] if found is not None and found[0] not in ("Z", "X") else None


def child_runs(children: dict, pid) -> bool:
    """Whether the child process ``pid`` of this process (its Popen in ``children``) has not
    exited: one ``waitpid(WNOHANG)``; True when it is no child of ours (nothing to tell)."""
    proc = children.get(pid)
    return proc is None or proc.poll() is None


def read_proc(path: str) -> bytes:
    """A /proc file whole, without the layers of ``open`` (/proc/stat passes 64 kB on a
    host of many CPUs and interrupts, a command line may too)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        chunks = [os.read(fd, 65536)]
        while chunks[-1]:
            chunks.append(os.read(fd, 65536))
        return b"".join(chunks)
    finally:
        os.close(fd)


def create_time(pid: int) -> float | None:
    """The start time of ``pid`` (psutil's), None when it is gone."""
    found = _stat(pid)
    return found[1] if found is not None else None


def same_process(pid, created) -> bool:
    """Whether ``pid`` runs and is the process that started at ``created`` (not a reused pid,
    not a zombie)."""
    if not pid or created is None:
        return False
    found = _stat(pid)
    return found is not None and found[0] not in ("Z", "X") and _same_start(found[1] - created)


def started_at(pid, created) -> bool:
    """Whether ``pid``, running or exited and unreaped (a zombie), is the process that
    started at ``created``."""
    found = _stat(pid) if pid and created is not None else None
    return found is not None and _same_start(found[1] - created)


def _same_start(off: float) -> bool:
    """Whether two readings of a start time ``off`` seconds apart are one start. A start time
    is /proc/stat's ``btime`` (whole seconds) plus ticks since boot, and ``btime`` moves by a
    second when a clock step carries the boot time across a whole second: this host's boot
    time was 20 ms below one, and every VM booted before such a step then read 1 s off and was
    declared dead while idle, all at once. A reused pid that started in the same tick a whole
    second or two apart is no likelier than one in the same tick."""
    return abs(off) < 0.01 or (abs(off) < 2.5 and abs(off - round(off)) < 0.01)


def runs_vm(pid, created, vm_dir: Path) -> bool:
    """Whether ``pid`` is still the process we started for ``vm_dir`` (bwrap, QEMU): the
    same process, and its command line names the folder."""
    if not same_process(pid, created):
        return False
    import psutil

    try:
        return str(vm_dir) in " ".join(psutil.Process(pid).cmdline())
    except psutil.Error:
        return False


def process_and_agent_healthy(info, timeout_s: float) -> bool:
    """The VM's recorded process (``pid``, ``create_time``) runs and its agent answers
    /health within ``timeout_s``: the ``healthy`` of providers that own a process per VM."""
    if not same_process(info.private.get("pid"), info.private.get("create_time")):
        return False
    from ...guest.client import GuestClient

    try:
        GuestClient(info.address, timeout_s=timeout_s).health()
    except Exception:  # unreachable, malformed: either way not healthy
        return False
    return True


def exit_status(proc, wait_s: float) -> int | None:
    """``proc``'s exit status once it exits within ``wait_s`` (a VM whose agent stopped
    answering is usually still dying), else None (it runs)."""
    try:
        return wait_exit(proc, wait_s)
    except subprocess.TimeoutExpired:
        return None


def signal_name(number: int) -> str:
    """``SIGKILL`` for 9; ``signal N`` for a number Python does not name."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def owner_label() -> dict:
    """This process as the owner a VM folder records."""
    return dict(_owner_label(os.getpid()))


@functools.lru_cache(maxsize=4)  # by pid: a forked child is another owner
def _owner_label(pid: int) -> tuple:
    # once per process, not at every meta.json (two a boot, one boot a reset)
    return (("owner_pid", pid), ("owner_create_time", create_time(pid)))


def owner_alive(meta: dict) -> bool:
    """Whether the process a meta.json names as owner still runs."""
    return same_process(meta.get("owner_pid"), meta.get("owner_create_time"))


def check_vm_folder_free(run_id: str, vm_id: str, meta: dict | None, running: bool) -> None:
    """VMError unless a boot of ``vm_id`` may take the folder whose meta.json is ``meta``:
    not while its VM is ``running``, nor while it names a live owner other than this process
    (another pool, which may be between two boots of that VM: its folder is left alone even
    while nothing runs in it). Each pool has folders of its own (``pool_folder``): this is a
    guard, which two runs of one run id used to meet at every boot."""
    if meta and running:
        raise VMError(f"VM {vm_id} of run {run_id} is already running (pid {meta.get('pid')})")
    if meta and meta.get("owner_pid") != os.getpid() and owner_alive(meta):
        raise VMError(f"VM {vm_id} of run {run_id} belongs to another live run of that id "
                      f"(pool pid {meta.get('owner_pid')}); its folder is left alone")


def read_meta(vm_dir: Path) -> dict | None:
    """A VM folder's meta.json, None when missing or unreadable."""
    try:
        return json.loads((vm_dir / "meta.json").read_text())
    except (OSError, ValueError):
        return None


def write_meta(vm_dir: Path, meta: dict) -> None:
    """Replace meta.json atomically: a sweep must never read half a file."""
    tmp = f"{vm_dir}/meta.json.tmp"
    write_new_file(tmp, json.dumps(meta))  # no indent: json's C encoder, ~10 times faster
    os.replace(tmp, f"{vm_dir}/meta.json")


def write_new_file(path: str | os.PathLike, text: str) -> None:
    """``path`` replaced by a new file holding ``text``: never truncated, which ext4 flushes
    to disk when it is closed (``auto_da_alloc``: ~2 ms of a boot for a small file). An
    OSError names ``path`` (a full disk's write would name no file: not which disk to free)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    data = memoryview(text.encode())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        while data:
            data = data[os.write(fd, data):]
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, os.fspath(path)) from None
    finally:
        os.close(fd)


def secure_base_dir(base: Path) -> Path:
    """Create ``base`` (and the folders between it and a shared /tmp) mode 0700, and check
    that each is a real folder of ours that nobody else can write; ConfigError otherwise."""
    base = Path(os.path.abspath(base))
    try:
        below_tmp = base.relative_to(SHARED_TMP).parts
    except ValueError:
        below_tmp = ()
    if below_tmp:
        chain = [SHARED_TMP.joinpath(*below_tmp[:i + 1]) for i in range(len(below_tmp))]
    else:
        base.parent.mkdir(parents=True, exist_ok=True)  # a folder the user chose: theirs
        chain = [base]
    for folder in chain:
        try:
            folder.mkdir(mode=0o700)
            continue  # ours, and mkdir's mode is exact (no umask can widen 0700)
        except FileExistsError:
            pass
        except OSError as exc:
            raise ConfigError(f"cannot create the VM folder {folder}: {exc}") from None
        info = os.lstat(folder)
        if not stat.S_ISDIR(info.st_mode):
            raise ConfigError(f"{folder} is not a folder (a symlink?); refusing to keep VMs "
                              "there: remove it or set another base folder")
        if info.st_uid != os.geteuid():
            raise ConfigError(f"{folder} belongs to uid {info.st_uid}, not to us "
                              f"(uid {os.geteuid()}); refusing to keep VMs there: remove it "
                              "or set another base folder")
        if info.st_mode & 0o022:
            raise ConfigError(f"{folder} is writable by other users (mode "
                              f"{stat.S_IMODE(info.st_mode):o}); refusing to keep VMs there: "
                              f"chmod 700 {folder} or set another base folder")
    return base


def make_vm_dir(vm_dir: Path, *subdirs: str, lock_pool: bool = False) -> None:
    """Create ``vm_dir`` (and ``subdirs`` in it); a concurrent stop of the run's last VM may
    remove the run folder between the creation of the parents (FileNotFoundError), or between
    makedirs' mkdir of it and its check that it is a folder (FileExistsError, for a folder that
    is gone), so try again then. With
    ``lock_pool``, the pool folder is made and locked (``hold_pool_lock``) first: a sweep in
    another PID namespace never sees the pool's new VM folder in an unlocked pool folder."""
    targets = [vm_dir / sub for sub in subdirs] or [vm_dir]
    for attempt in range(10):
        try:
            if lock_pool:
                os.makedirs(vm_dir.parent, exist_ok=True)
                hold_pool_lock(vm_dir.parent)
            for target in targets:
                os.makedirs(target, exist_ok=True)
            if lock_pool:
                hold_pool_lock(vm_dir.parent)  # the pool folder made anew meanwhile: locked again
            return
        except (FileNotFoundError, FileExistsError):
            if attempt == 9:
                raise


def remove_vm_dir(vm_dir: Path, tries: int = 20) -> None:
    """Remove a VM folder, then its run folder when that is empty. Tried again a few times
    when something is still there: a sandbox killed a moment ago may still be letting go of
    the files it was writing."""
    for _ in range(tries):
        shutil.rmtree(vm_dir, ignore_errors=True)
        if not vm_dir.exists():
            break
        time.sleep(0.05)
    remove_run_dir_if_empty(vm_dir.parent)


def remove_run_dir_if_empty(run_dir: Path) -> None:
    """rmdir, quietly: another VM of the run may still be there, or it is gone already."""
    try:
        run_dir.rmdir()
    except OSError:
        pass


def swept_name(run_dir: Path, meta: dict, vm_name: str) -> str:
    """How a sweep names a removed VM: ``<run id>/<vm id>`` (every run has a ``vm0``), the
    run id from the VM's label or, without one, from its pool folder's name."""
    return f"{meta.get('run_id') or run_dir.name.split(POOL_SEP)[0]}/{vm_name}"


def sweep_vm_folders(base: Path, run_id: str | None,
                     kill: Callable[[dict, Path], None], orphans_only: bool = False) -> list[str]:
    """Every VM folder of ``run_id``, or, without one (or with ``orphans_only``), those whose
    owner is gone: ``kill(meta, vm_dir)`` stops what the folder records, then the folder
    goes. Returns the removed folders, each as ``<run id>/<folder>`` (``swept_name``)."""
    removed = []
    for run_dir in run_folders(base, run_id):
        metas = {vm_dir: read_meta(vm_dir) or {} for vm_dir in vm_folders(run_dir)}
        # A pool folder is one pool's: where a label names its owner alive (or its lock is
        # held: an owner in another PID namespace), a folder with no label yet is one that
        # pool is making (labelled a moment after its mkdir: a standby boot beside another),
        # not a leftover.
        live = any(owner_alive(meta) for meta in metas.values()) or pool_held(run_dir)
        for vm_dir, meta in metas.items():
            if (run_id is None or orphans_only) and live:
                continue  # a live run: not ours to sweep
            kill(meta, vm_dir)
            shutil.rmtree(vm_dir, ignore_errors=True)
            removed.append(swept_name(run_dir, meta, vm_dir.name))
        remove_run_dir_if_empty(run_dir)
    return removed


def log_tail(path: Path, limit: int = 2000) -> str:
    """The end of a log file, for an error message."""
    try:
        text = path.read_bytes()[-limit:].decode("utf-8", "replace").strip()
    except OSError:
        return "(no log)"
    return text or "(empty)"
