"""What of the machine a pool's VMs may hold between them: memory, pids and open files.

Every VM of a pool draws from pools the kernel keeps for the whole machine (or, for memory,
for the runner's own cgroup), and one hostile VM that drains one starves every process that
shares it: the runner, the other VMs' agents and their innocent tasks. Per-VM limits are
therefore each VM's *share* of these pools, chosen so that all the pool's VMs together
cannot exhaust them:

=================  =====================================  ======================================
pool               what a VM takes of it                  a VM's share
=================  =====================================  ======================================
memory             its cgroup's ``memory.max``            80% (``DEFAULT_MEMORY_SHARE``)
                   (the default: ``base.default_memory_   of the least of the host's RAM and
                   mb``)                                  the runner's cgroup limit, / VMs
``kernel.pid_max`` ``pids.max`` (a pid per process and    TABLE_SHARE of the least of
                   thread, the sandbox's own pid          ``kernel.pid_max`` and
                   namespace included)                    ``kernel.threads-max``, / VMs
``fs.file-max``    ``pids.max`` × RLIMIT_NOFILE (each     TABLE_SHARE of ``fs.file-max``, / VMs
                   process at most RLIMIT_NOFILE open)
=================  =====================================  ======================================

**Memory.** A process sandbox's cgroups are children of the runner's own (``cgroups.py``) and a
QEMU guest's RAM is a process of the runner's, so a memory limit on the runner's cgroup or
an ancestor (a container, a systemd unit, a CI pod) bounds the runner *and* its VMs: a VM
that filled its tmpfs within its own limit took the runner's cgroup over its limit, and the
kernel's OOM killer chose there, the runner (the largest process: tmpfs pages belong to no
process). So that limit (:func:`memory_ceiling`: v2 ``memory.max`` and ``memory.high``, over
which the cgroup is throttled to a crawl, v1 ``memory.limit_in_bytes``; the least of the
cgroup's and its ancestors') counts as the machine's memory, and a pool whose VMs' limits add
up to more than its share is refused before anything starts (:func:`check_pool_memory`).

**Pids and files.** Without a share, 8 VMs of 4096 processes held the whole of a
``kernel.pid_max`` of 32768, and 15 processes of 20,000 files each took 300,000 of the host's
2.4 million (an answer of ~124 processes takes them all, within its memory): every other
process of the machine then got ENFILE. The pool's VMs may hold TABLE_SHARE of each table;
the rest is the host's reserve (the runner, other runs, everything else the machine runs).
RLIMIT_NOFILE is DEFAULT_NOFILE (Linux's usual soft limit) unless the share is too small
for it at the VM's process cap; the default process cap is lowered first, down to
MIN_DEFAULT_PROCESSES (:func:`process_limits`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ...errors import ConfigError
from . import cgroups

#: the part of the host's memory (or the runner's cgroup's) that a pool's VMs may hold between them
DEFAULT_MEMORY_SHARE = 0.8

#: the share of the machine's pid and file tables that a pool's VMs may hold together
TABLE_SHARE = 0.5
#: open files per process in a sandbox, unless a VM's share of the file table is smaller
DEFAULT_NOFILE = 1024
#: the least open files per process an explicit --vm-max-processes may leave
MIN_NOFILE = 64
#: how low the default process cap goes to keep DEFAULT_NOFILE (py mode's own default)
MIN_DEFAULT_PROCESSES = 256
#: the least share of the pid table a VM must have: its guest agent, a shell and a command
MIN_VM_PROCESSES = 16
#: a cgroup v1 memory limit at least this big is "no limit" (the kernel shows ~2**63)
_V1_UNLIMITED = 2**62


@dataclass(frozen=True)
class Ceiling:
    """The tightest memory limit on the runner's cgroup: where it is set, and how much."""

    limit_bytes: int
    path: Path

    def __str__(self) -> str:
        return f"{self.path.name} of {self.path.parent} ({self.limit_bytes // 2**20} MB)"


def memory_ceiling(mountinfo: str | None = None, own: str | None = None) -> Ceiling | None:
    """The least memory limit of the runner's own cgroup and its ancestors, as far as its
    cgroup mounts show them (a container's cgroup namespace shows its own root); None without
    one. ``mountinfo``, ``own``: /proc/self/mountinfo and /proc/self/cgroup's text."""
    try:
        mountinfo = Path("/proc/self/mountinfo").read_text() if mountinfo is None else mountinfo
        own = Path("/proc/self/cgroup").read_text() if own is None else own
    except OSError:
        return None
    best: Ceiling | None = None
    for line in mountinfo.splitlines():
        fields = line.split()
        if "-" not in fields[6:]:
            continue
        dash = fields.index("-", 6)
        root, mountpoint = fields[3], fields[4]
        fstype, superopts = fields[dash + 1], set(fields[dash + 3].split(",")) if len(fields) > dash + 3 else set()
        if fstype == "cgroup2":
            rel = next((l.split(":", 2)[2] for l in own.splitlines() if l.startswith("0::")), None)
            files = ("memory.max", "memory.high")
        elif fstype == "cgroup" and "memory" in superopts:
            rel = next((l.split(":", 2)[2] for l in own.splitlines()
                        if "memory" in l.split(":")[1].split(",")), None)
            files = ("memory.limit_in_bytes",)
        else:
            continue
        if rel is None:
            continue
        if root != "/" and rel != root and not rel.startswith(root.rstrip("/") + "/"):
            continue  # a mount of another subtree: its limits are not ours
        top = Path(mountpoint)
        path = top / rel[len(root.rstrip("/")):].lstrip("/")
        for folder in (path, *path.parents):
            for name in files:
                value = _limit(folder / name)
                if value is not None and (best is None or value < best.limit_bytes):
                    best = Ceiling(value, folder / name)
            if folder == top:
                break
    return best


def _limit(path: Path) -> int | None:
    """A cgroup memory limit file's value in bytes; None for none (``max``, v1's ~2**63,
    no such file)."""
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if not text.isdigit():
        return None
    value = int(text)
    return value if value < _V1_UNLIMITED else None


def memory_total_mb(in_runner_cgroup: bool = True) -> tuple[int, Ceiling | None]:
    """The memory a pool's VMs and the runner share: the host's RAM, or (``in_runner_cgroup``,
    VMs whose memory counts in the runner's cgroup) the runner's cgroup limit when less;
    (MB, that limit or None)."""
    import psutil

    host_mb = psutil.virtual_memory().total // 2**20
    ceiling = memory_ceiling() if in_runner_cgroup else None
    if ceiling is not None and ceiling.limit_bytes // 2**20 < host_mb:
        return ceiling.limit_bytes // 2**20, ceiling
    return host_mb, None


def check_pool_memory(memory_mb: int, vms: int, *, explicit: bool) -> None:
    """ConfigError when ``vms`` VMs of ``memory_mb`` each (the pool's, in the runner's cgroup)
    add up to more than their share of a memory limit on the runner's cgroup: past it that
    cgroup's OOM killer, not the VM's, would choose (the runner, with everything it holds)."""
    total_mb, ceiling = memory_total_mb()
    if ceiling is None:
        return  # the host's RAM: its OOM killer chooses among every process (VMs first)
    allowed = int(DEFAULT_MEMORY_SHARE * total_mb)
    if vms * memory_mb <= allowed:
        return
    which = (f"--vm-memory-mb {memory_mb}" if explicit
             else f"the least default memory of a VM ({memory_mb} MB)")
    fix = (f"give --vm-memory-mb at most {allowed // vms}" if explicit and allowed // vms > 0
           else "run fewer VMs (--num-vms, --num-rollouts) or give a smaller --vm-memory-mb")
    raise ConfigError(
        f"{which} for {vms} VM(s) is {vms * memory_mb} MB, more than the runner's cgroup allows: "
        f"its memory limit is {ceiling}, and the VMs may hold {int(DEFAULT_MEMORY_SHARE * 100)}% "
        f"of it ({allowed} MB; the rest is the runner's): {fix}, or raise that limit")


def _sysctl(name: str) -> int | None:
    try:
        return int(Path("/proc/sys", *name.split(".")).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


@dataclass(frozen=True)
class TableShares:
    """A VM's share of the machine's pid and file tables (None: the table is unbounded or
    cannot be read), and where each comes from."""

    pids: int | None
    files: int | None
    pid_table: str
    file_table: str


def table_shares(vms: int) -> TableShares:
    """TABLE_SHARE of ``kernel.pid_max`` (``kernel.threads-max`` when less) and of
    ``fs.file-max``, divided among ``vms`` VMs."""
    vms = max(1, vms)
    tables = [(count, name) for name in ("kernel.pid_max", "kernel.threads-max")
              if (count := _sysctl(name)) is not None]
    pid_count, pid_name = min(tables) if tables else (None, "kernel.pid_max")
    file_max = _sysctl("fs.file-max")
    if file_max is not None and file_max >= 2**62:
        file_max = None  # systemd's LONG_MAX: no table to exhaust
    return TableShares(
        pids=None if pid_count is None else int(TABLE_SHARE * pid_count) // vms,
        files=None if file_max is None else int(TABLE_SHARE * file_max) // vms,
        pid_table=f"{pid_name} {pid_count}", file_table=f"fs.file-max {file_max}")


def vm_process_limits(requested: int | None, default: int, vms: int) -> tuple[int | None, int | None, int]:
    """A process sandbox's (pids.max, RLIMIT_NPROC, RLIMIT_NOFILE): ``cgroups.process_cap``
    of ``requested`` (``default`` when None), within the VM's table shares
    (:func:`process_limits`)."""
    pids_max, nproc = cgroups.process_cap(requested, default, vms)
    cap, nofile = process_limits(pids_max or nproc, explicit=requested is not None, vms=vms)
    return (cap if pids_max else None), (cap if nproc else None), nofile


def process_limits(cap: int | None, *, explicit: bool, vms: int) -> tuple[int | None, int]:
    """(the VM's process cap, RLIMIT_NOFILE) for a VM of a pool of ``vms`` whose processes
    are capped at ``cap`` (None: not capped), within its :func:`table_shares`: a default cap
    goes down to the pid share, then (not below MIN_DEFAULT_PROCESSES) to what the file share
    allows at DEFAULT_NOFILE each; RLIMIT_NOFILE is then DEFAULT_NOFILE or the file share /
    the cap. ConfigError for an explicit ``cap`` over the pid share, or one that would leave
    fewer than MIN_NOFILE open files a process."""
    shares = table_shares(vms)
    if cap is not None and shares.pids is not None and shares.pids < MIN_VM_PROCESSES:
        # a default cap went down to it: 0 divided the file share by zero (a traceback)
        raise ConfigError(
            f"{vms} VMs (the pool's and its spares) leave each {shares.pids} processes of the machine's pid "
            f"table ({shares.pid_table}: {int(TABLE_SHARE * 100)}% for the VMs), fewer than the "
            f"{MIN_VM_PROCESSES} a VM needs: run fewer VMs (--num-vms, --spare-vms)")
    if cap is not None and shares.pids is not None and cap > shares.pids:
        if explicit:
            raise ConfigError(
                f"--vm-max-processes {cap} for {vms} VM(s) is more than their share of the machine's "
                f"pid table ({shares.pid_table}: {int(TABLE_SHARE * 100)}% for the VMs, the rest is the "
                f"host's reserve): give at most {shares.pids}, or run fewer VMs")
        cap = shares.pids
    if cap is None or shares.files is None:
        return cap, DEFAULT_NOFILE
    if not explicit and cap * DEFAULT_NOFILE > shares.files:
        cap = max(min(cap, MIN_DEFAULT_PROCESSES), shares.files // DEFAULT_NOFILE)
    nofile = min(DEFAULT_NOFILE, shares.files // cap)
    if nofile < MIN_NOFILE:
        flag = f"--vm-max-processes {cap}" if explicit else f"the least process cap of a VM ({cap})"
        raise ConfigError(
            f"{flag} for {vms} VM(s) leaves each process {nofile} open files of the VMs' share of the "
            f"machine's file table ({shares.file_table}: {int(TABLE_SHARE * 100)}% for the VMs), "
            f"fewer than {MIN_NOFILE}: give a smaller --vm-max-processes, or run fewer VMs")
    return cap, nofile
