"""Per-VM cgroups: the memory, process-count and CPU limits of a whole sandbox.

A process sandbox is a tree of processes that the kernel can only limit as a whole through
a cgroup; per-process rlimits (RLIMIT_AS, RLIMIT_NPROC) bound one process, or one uid across
the host, never the sandbox's sum (one exception, the fallback of :func:`process_cap`:
RLIMIT_NPROC inside a sandbox's own user namespace). Each VM gets ``<our cgroup>/parallel-rollout/<run>/<vm>``
in every writable hierarchy that has a controller we use, with:

=============  ===================  =========================================
limit          cgroup v2            cgroup v1
=============  ===================  =========================================
memory_mb      ``memory.max``       ``memory.limit_in_bytes`` (+ ``memsw``)
max_processes  ``pids.max``         ``pids.max``
CPU share      ``cpu.weight`` 100   ``cpu.shares`` 1024 (every VM the same)
=============  ===================  =========================================

Both versions are handled because both exist in the wild: a pure v2 host, a hybrid host
whose v2 mount has no controllers (v1 does the work), or a container with a delegated v2
subtree. Whether a controller works is not guessed from permissions: :func:`available`
probes once per process (a throw-away cgroup is made, its limit files written, a process
moved in, all removed again), because a CI runner or a container often shows a writable
hierarchy that still refuses (v2's "no internal processes" rule, a read-only mount, a
cgroup namespace whose root holds the container's processes). A controller that fails the
probe is absent from :func:`available`, :func:`why_unavailable` says why, and the provider
says what it falls back to: never a hostile sandbox without the limit it was promised.

The sandbox joins its cgroups before bubblewrap forks anything (the shell in front of it
writes its pid to each :attr:`VMCgroup.procs`), so no process of the VM ever runs outside
them.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import shutil
import secrets
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from ...errors import ConfigError, VMError
from ...worker_cgroup import kill_member

log = logging.getLogger(__name__)

#: the first Linux whose RLIMIT_NPROC counts per user namespace (ucounts rlimits)
NPROC_PER_USERNS = (5, 14)

#: controller -> (v2 file, v1 file) of the limit we set
LIMIT_FILES = {"memory": ("memory.max", "memory.limit_in_bytes"),
               "pids": ("pids.max", "pids.max"),
               "cpu": ("cpu.weight", "cpu.shares")}
#: the CPU share every VM gets: the defaults, written so that each VM is its own group
CPU_WEIGHT = {2: 100, 1: 1024}
TOP = "parallel-rollout"


@dataclass(frozen=True)
class Hierarchy:
    """A writable cgroup hierarchy: our own cgroup in it, its version and controllers."""

    root: Path
    version: int
    controllers: frozenset[str]


def hierarchies() -> list[Hierarchy]:
    """The writable hierarchies that have a controller we use, v2 first."""
    try:
        mounts = Path("/proc/self/mounts").read_text().splitlines()
        own = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return []
    found = []
    for line in mounts:
        fields = line.split()
        if len(fields) < 4:
            continue
        mountpoint, fstype, opts = fields[1], fields[2], set(fields[3].split(","))
        if fstype == "cgroup2":
            rel = next((l.split(":", 2)[2] for l in own if l.startswith("0::")), "/")
            root = Path(mountpoint) / rel.lstrip("/")
            controllers = set(_read(root / "cgroup.subtree_control").split())
            if rel == "/" or not _read(root / "cgroup.procs").strip():
                # we may delegate what we have (a cgroup holding processes cannot, in v2)
                controllers |= set(_read(root / "cgroup.controllers").split())
            version = 2
        elif fstype == "cgroup":
            controllers = opts & set(LIMIT_FILES)
            rel = next((l.split(":", 2)[2] for l in own
                        if controllers & set(l.split(":")[1].split(","))), "/")
            root = Path(mountpoint) / rel.lstrip("/")
            version = 1
        else:
            continue
        controllers &= set(LIMIT_FILES)
        if controllers and os.access(root, os.W_OK):
            found.append(Hierarchy(root, version, frozenset(controllers)))
    return sorted(found, key=lambda h: -h.version)


def available() -> frozenset[str]:
    """The controllers (memory, pids, cpu) that passed the probe on some hierarchy."""
    return frozenset(_probe()[0])


def why_unavailable(controller: str) -> str:
    """Why ``controller`` cannot limit a sandbox here ("" when it can)."""
    working, why = _probe()
    if controller in working:
        return ""
    return why.get(controller) or (f"no writable cgroup hierarchy has the {controller} "
                                   "controller (cgroup v2 not delegated to us, or not root?)")


@functools.lru_cache(maxsize=None)
def _probe() -> tuple[dict[str, Hierarchy], dict[str, str]]:
    """controller -> the first hierarchy where a cgroup can be made, limited and joined;
    controller -> why not, for the others that some hierarchy claims."""
    working: dict[str, Hierarchy] = {}
    why: dict[str, str] = {}
    for hierarchy in hierarchies():
        todo = set(hierarchy.controllers) - set(working)
        if not todo:
            continue
        failed = _try(hierarchy, todo)
        for controller in todo:
            if controller in failed:
                why.setdefault(controller, failed[controller])
            else:
                working[controller] = hierarchy
    return working, why


def _try(hierarchy: Hierarchy, controllers: set[str]) -> dict[str, str]:
    """Make a throw-away cgroup in ``hierarchy``, rewrite each controller's limit file with
    its own value and move a process in; controller -> what failed."""
    top = hierarchy.root / TOP
    path = top / f"probe-{os.getpid()}-{secrets.token_hex(3)}"
    failed: dict[str, str] = {}
    try:
        path.mkdir(parents=True)
    except OSError as exc:
        return {c: f"cannot make a cgroup under {hierarchy.root}: {exc}" for c in controllers}
    try:
        if hierarchy.version == 2:
            _enable_controllers(path, controllers)
        for controller in controllers:
            name = path / LIMIT_FILES[controller][0 if hierarchy.version == 2 else 1]
            try:
                name.write_text(name.read_text().strip())
            except OSError as exc:
                failed[controller] = (f"cannot set {name.name} in a cgroup under "
                                      f"{hierarchy.root}: {exc}")
        if len(failed) < len(controllers):
            try:
                join = subprocess.run(["/bin/sh", "-c", 'echo $$ > "$1"', "probe",
                                       str(path / "cgroup.procs")],
                                      capture_output=True, text=True, timeout=10)
                error = join.stderr.strip() if join.returncode else ""
            except (OSError, subprocess.TimeoutExpired) as exc:
                error = str(exc)
            if error:
                failed.update({c: f"cannot move a process into a cgroup under "
                                  f"{hierarchy.root}: {error}" for c in controllers})
    finally:
        remove_paths([str(path)], parents=False)
        try:
            top.rmdir()
        except OSError:
            pass
    return failed


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


class VMCgroup:
    """The cgroups of one VM, one per hierarchy that carries a limit we set."""

    def __init__(self, run_id: str, vm_id: str, *, memory_bytes: int | None = None,
                 max_processes: int | None = None) -> None:
        wanted = {"cpu": None}
        if memory_bytes is not None:
            wanted["memory"] = memory_bytes
        if max_processes is not None:
            wanted["pids"] = max_processes
        #: cgroup folder -> (version, {controller: value})
        self.groups: dict[Path, tuple[int, dict[str, int | None]]] = {}
        #: made and limited (``create``): the folder's next sandboxes reuse them (``renew``)
        self.made = False
        working = _probe()[0]
        for controller, value in wanted.items():
            hierarchy = working.get(controller)
            if hierarchy is None:
                if controller != "cpu":
                    raise VMError(f"cannot limit {controller} here: "
                                  f"{why_unavailable(controller)}")
                continue
            path = hierarchy.root / TOP / run_id / vm_id
            self.groups.setdefault(path, (hierarchy.version, {}))[1][controller] = value

    @property
    def paths(self) -> list[str]:
        """The cgroup folders, as recorded in the VM's meta.json for a sweep."""
        return [str(path) for path in self.groups]

    def create(self) -> None:
        """Make the folders and write the limits; VMError when the kernel refuses."""
        for path, (version, limits) in self.groups.items():
            try:
                _mkdir(path)
                if version == 2:
                    _enable_controllers(path, set(limits))
                for controller, value in limits.items():
                    if value is None:
                        value = CPU_WEIGHT[version]
                    name = LIMIT_FILES[controller][0 if version == 2 else 1]
                    if controller == "cpu" and not (path / name).exists():
                        continue  # an equal share is a nicety, not a limit anyone asked for
                    (path / name).write_text(str(value))
                    if controller == "memory":
                        _no_swap(path, version, value)
                        if version == 1:  # the folder's last sandbox's peak (oom_counts)
                            (path / "memory.max_usage_in_bytes").write_text("0")
            except OSError as exc:
                raise VMError(f"cannot set up the cgroup {path}: {exc}") from exc
        self.made = True

    def renew(self) -> None:
        """Ready for the next sandbox of the folder: the cgroups and their limits outlive
        each sandbox (nothing in one can reach them: no /sys, no mount), so only cgroup v1's
        peak usage is reset (``oom_counts``), unless they are gone (made again, ``create``)."""
        if not self.made or not all(os.path.isdir(path) for path in self.groups):
            self.create()
            return
        for path, (version, limits) in self.groups.items():
            if version == 1 and "memory" in limits:
                try:
                    (path / "memory.max_usage_in_bytes").write_text("0")
                except OSError as exc:
                    raise VMError(f"cannot set up the cgroup {path}: {exc}") from exc

    @property
    def procs(self) -> list[str]:
        """The ``cgroup.procs`` files a VM's first process writes its pid to, to join them
        (the shell in front of bwrap: ``sandbox_processes.guarded``)."""
        return [str(path / "cgroup.procs") for path in self.groups]

    def remove(self) -> None:
        """Remove the folders (and the run's, when empty)."""
        remove_paths(self.paths)


def _enable_controllers(path: Path, controllers: set[str]) -> None:
    # v2: a controller's files exist in a cgroup only when every parent delegates it
    if all((path / LIMIT_FILES[c][0]).exists() for c in controllers if c != "cpu"):
        return
    for parent in reversed(path.parents):
        control = parent / "cgroup.subtree_control"
        if parent in path.parents and control.exists():
            for controller in controllers:
                try:
                    control.write_text(f"+{controller}")
                except OSError:
                    pass  # the parent holds processes, or does not delegate: checked below


def _no_swap(path: Path, version: int, limit: int) -> None:
    # without this a memory hog swaps instead of meeting its limit, where there is swap
    swap = path / ("memory.swap.max" if version == 2 else "memory.memsw.limit_in_bytes")
    if swap.exists():
        try:
            swap.write_text("0" if version == 2 else str(limit))
        except OSError:
            pass


def nproc_caps_a_sandbox() -> bool:
    """Whether RLIMIT_NPROC set inside a sandbox caps that sandbox, as ``pids.max`` would.

    Since Linux 5.14 rlimit counts are per user namespace (ucounts): a process's
    RLIMIT_NPROC is checked against the processes of its uid *in its own namespace*, and the
    parent namespace's count against the limit its creator had. A runner that is not root
    gives each sandbox a user namespace of its own (bwrap ``--unshare-user``), so a limit set
    there (util-linux ``prlimit``) caps that VM alone. As root there is no such namespace and
    every VM's commands share one uid host-wide: only a cgroup can cap one VM."""
    release = tuple(int(p) for p in re.findall(r"\d+", os.uname().release)[:2])
    return (os.geteuid() != 0 and release >= NPROC_PER_USERNS
            and shutil.which("prlimit") is not None)


#: the least a VM's share of the runner's own process limit leaves it
MIN_NPROC_SHARE = 64


def nproc_share(vms: int) -> int | None:
    """A VM's share of this runner's own RLIMIT_NPROC when ``vms`` VMs run at once: the
    limit split among them and the runner itself (its workers and their threads count too),
    at least MIN_NPROC_SHARE; None when the runner has no such limit. What a VM's processes
    may count against without a pids cgroup: the processes of every sandbox's user namespace
    also count against the runner's uid, up to the limit it had when it made them."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NPROC)
    if soft == resource.RLIM_INFINITY:
        return None
    return max(MIN_NPROC_SHARE, soft // (max(1, vms) + 1))


def process_cap(requested: int | None, default: int, vms: int = 1) -> tuple[int | None, int | None]:
    """How a process sandbox caps a VM's processes at ``requested`` (``default`` when None):
    ``(pids.max, None)`` with a pids cgroup, ``(None, RLIMIT_NPROC)`` where that caps a
    sandbox, else ``(None, None)`` with a warning; ConfigError for a bad or uncappable
    explicit ``requested``. With RLIMIT_NPROC the default is at most the VM's share of the
    runner's own limit among ``vms`` VMs (:func:`nproc_share`): at 4096 each, one VM's fork
    bomb took a limit of 2000 whole, and every other VM's commands failed to start."""
    if requested is not None and requested <= 0:
        raise ConfigError(f"max_processes must be positive, got {requested}")
    cap = requested or default
    if "pids" in available():
        return cap, None
    if nproc_caps_a_sandbox():
        share = nproc_share(vms)
        return None, cap if requested is not None or share is None else min(cap, share)
    if requested is not None:
        raise ConfigError(
            "max_processes needs a working pids cgroup (cgroup v1 pids, or v2 with the pids "
            "controller delegated) or, for a runner that is not root, Linux 5.14 or later and "
            "util-linux prlimit (RLIMIT_NPROC in the sandbox's user namespace): "
            + why_unavailable("pids"))
    log.warning("no pids cgroup (%s) and RLIMIT_NPROC cannot cap a sandbox here (root, or "
                "Linux before 5.14): a VM's processes are not capped", why_unavailable("pids"))
    return None, None


def kill_paths(paths: list[str]) -> None:
    """SIGKILL every process in these cgroups: cgroup v2's ``cgroup.kill``, or, in a v1
    hierarchy (which has none), each live pid its ``cgroup.procs`` lists until none is (at
    most 2 s).

    This is what reaches a process the pid records miss: bwrap's own child before it execs
    the namespace init, orphaned when bwrap is killed in between (it then waits forever for
    a word from its dead parent)."""
    for name in paths:
        path = Path(name)
        try:
            (path / "cgroup.kill").write_text("1")
            continue
        except FileNotFoundError:
            pass  # v1
        except OSError:
            continue
        # until no live member is left: a pass kills what the last one raced with (a fork),
        # and a process SIGKILLed a moment ago may not have finished exiting yet
        deadline, delay = time.monotonic() + 2.0, 0.0005
        # v1 lines read "N:controllers:/relative/path"; ours ends with TOP/run/vm
        tail = "/" + "/".join(path.parts[-3:])
        while sum(kill_member(pid, tail) for pid in _members(path)) and time.monotonic() < deadline:
            time.sleep(delay)
            delay = min(delay * 2, 0.05)


def oom_counts(paths: list[str]) -> tuple[int, int]:
    """(processes of these cgroups killed by any OOM killer, times their memory limit was
    reached) so far: v2's ``memory.events`` (``oom_kill``, ``oom``), v1's
    ``memory.oom_control`` (``oom_kill``) and ``memory.failcnt``, plus one when the peak
    usage met the limit (some kernels leave failcnt at 0; ``create`` resets the peak); (0, 0)
    without a memory cgroup. A kill with no limit reached is the host's OOM killer."""
    kills = limit_hits = 0
    for name in paths:
        kind = _memory_kind.get(name)
        events = _fields(f"{name}/memory.events") if kind in (None, 2) else {}
        if events:
            _memory_kind[name] = 2
            kills += int(events.get("oom_kill", 0))
            limit_hits += int(events.get("oom", 0))
            continue
        control = _fields(f"{name}/memory.oom_control") if kind in (None, 1) else {}
        if not control:
            if kind is None and os.path.isdir(name):
                _memory_kind[name] = 0  # no memory controller here (a v1 cpu or pids cgroup)
            continue
        _memory_kind[name] = 1
        kills += int(control.get("oom_kill", 0))
        limit_hits += int(_read(Path(name, "memory.failcnt")).strip() or 0)
        peak, limit = _read(Path(name, "memory.max_usage_in_bytes")).strip(), _read(Path(name, "memory.limit_in_bytes")).strip()
        limit_hits += bool(peak and limit and int(peak) >= int(limit))
    return kills, limit_hits


#: a cgroup folder -> the version whose memory files it has, 0 for none: what its hierarchy
#: says, once seen (``oom_counts`` runs at every boot, and v1 spreads them over 3 folders)
_memory_kind: dict[str, int] = {}


def _fields(path: str) -> dict[str, str]:
    """A flat-keyed cgroup file (``name value`` lines), {} when it cannot be read."""
    try:
        with open(path) as handle:
            text = handle.read()
    except OSError:
        return {}
    return dict(parts for parts in map(str.split, text.splitlines()) if len(parts) == 2)


def _members(path: Path) -> list[int]:
    try:
        return [int(line) for line in (path / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def _mkdir(path: Path, attempts: int = 5) -> None:
    """``mkdir -p`` that survives the race with ``remove_paths``: another VM's stop may
    remove the run's folder, then empty, between making it and making ``path`` in it."""
    for attempt in range(attempts):
        try:
            path.mkdir(parents=True, exist_ok=True)
            return
        except FileNotFoundError:
            if attempt == attempts - 1:
                raise


def remove_paths(paths: list[str], parents: bool = True) -> None:
    """Remove cgroup folders once their last process is reaped (which may lag a moment),
    then (``parents``) the run's and our top folder when they are empty."""
    for name in paths:
        path = Path(name)
        _memory_kind.pop(name, None)
        deadline = time.monotonic() + 2.0
        while True:
            try:
                path.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.01)
        for parent in (path.parent, path.parent.parent) if parents else ():
            try:
                parent.rmdir()
            except OSError:
                break
