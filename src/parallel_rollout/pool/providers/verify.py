"""Reset verification: what a VM must look like right after a reset, and how it differs.

A provider checks a reset against a *fingerprint* of its snapshot taken once, at snapshot
time: for every file of the home (or the provider's writable layer) its name, kind, size and
mtime, and in ``full`` mode a hash of its content. After a reset the pool asks the provider
to verify the VM (``Provider.verify``); the provider fingerprints the VM's home again
and lists the VM's processes and ``/tmp``, and this module compares them:

* the home identical to the snapshot's fingerprint (directories by name only: copying a
  tree changes a folder's mtime, never a file's);
* ``/tmp`` (and ``/dev/shm``) as a fresh boot leaves them: empty, or only what the
  desktop itself makes at boot;
* no process but the guest agent's own (and the desktop's at boot);
* on a desktop, no window but those of the desktop at boot (``wmctrl -l`` through the
  guest agent: the one check that calls into the VM, ~10 ms, desktops only).

A VM with any difference is quarantined by the pool: marked dead with the differences in
``events.jsonl``, never handed out. Who pays for it (the replacement budget, issue 16):

* **after a task** (the check that follows each reset): free. What the task left may be why
  it differs, and no task may end a run: the VM restarts from its snapshot without spending
  the budget (``after_task`` in its event names the task);
* **before its first lease** (every VM the pool boots or restarts is checked once, against the
  same fingerprint, before it goes IDLE): no task ran on it, so a difference is the
  provider's fault (a snapshot or a restore that leaves something) and spends the budget
  like a failed boot. When the budget is spent the run stops with the pool's usual message
  ("every VM ... is dead and the replacement budget is spent ..."). On the remote provider a
  ``--reset-command`` that does not take away what a task left shows here: the restart
  runs it again and is still dirty.

The modes (``--verify-reset``):

``off``   nothing is checked;
``fast``  names, kinds, sizes and mtimes, processes, /tmp (a few ms: the default where the
          provider can look without booting anything, see each provider);
``full``  as fast, plus a SHA-256 of every file's content; on docker also the container's
          whole writable layer (``docker diff``, ``layer_diff.py``: fast does not see a file
          a task leaves outside the home, /tmp and /dev/shm, such as /var/tmp).

Where each provider looks: process and docker from the host (``HostView``, on by default);
qemu, remote, vmware and virtualbox through a probe the guest agent runs (``GuestView``,
``verify_guest.py``; off unless asked for). A provider without ``verify`` (a plugin) refuses
an explicit fast or full with a ConfigError naming it (``Provider.__init__``); nothing is
silently ignored.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import stat
import time
from pathlib import Path
from typing import Iterable

log = logging.getLogger(__name__)

from ...errors import ConfigError
from .common import create_time, read_proc
from .halted import children_of

MODES = ("off", "fast", "full")
#: desktop services that may start after the agent says ready: one more of each is allowed
DESKTOP_LAZY = ("at-spi-bus-laun", "at-spi2-registr", "dbus-daemon")
DEFAULT_MODE = "fast"
#: differences listed in full; beyond that only their count
MAX_DIFFERENCES = 20

#: one entry of a tree's fingerprint: (kind, size, mtime_ns, sha256 or "")
Entry = tuple[str, int, int, str]


def check_mode(mode: str | None) -> str:
    """``mode`` when it is one of MODES (None: the default), else a ConfigError naming them."""
    if mode is None:
        return DEFAULT_MODE
    if mode not in MODES:
        raise ConfigError(f"--verify-reset must be one of {', '.join(MODES)}, got {mode!r}")
    return mode


def tree_fingerprint(root: str | os.PathLike, full: bool = False) -> dict[str, Entry]:
    """Every entry under ``root`` (not ``root`` itself) by its path relative to ``root``.

    Symbolic links are not followed (their target is their content); a folder's size and
    mtime are left out (0), since seeding a home changes them. ``full`` hashes each regular
    file. A ``root`` that does not exist has an empty fingerprint. A folder below it that may
    not be listed is an entry with nothing in it, one that cannot be looked at an ``other``
    one: a probe run as a user that is not root meets them in every /tmp."""
    found: dict[str, Entry] = {}
    stack = [(os.fspath(root), "")]
    while stack:
        folder, prefix = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except (FileNotFoundError, NotADirectoryError):
            continue
        except PermissionError:
            if not prefix:  # ``root`` itself: the caller's to say (a VM the host may not look into)
                raise
            continue  # another user's folder (/tmp/systemd-private-…): the folder is seen, not what it holds
        for entry in entries:
            rel = prefix + entry.name
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:  # gone since the folder was read
                continue
            except OSError as exc:  # a FUSE mount whose daemon ended (ENOTCONN), another user's (EACCES)
                found[rel] = ("other", 0, 0, f"unreadable: {exc.strerror}")
                continue
            if stat.S_ISDIR(st.st_mode):
                found[rel] = ("dir", 0, 0, "")
                stack.append((entry.path, rel + "/"))
            elif stat.S_ISLNK(st.st_mode):
                found[rel] = ("link", 0, 0, os.readlink(entry.path))
            elif stat.S_ISREG(st.st_mode):
                found[rel] = ("file", st.st_size, st.st_mtime_ns,
                              file_sha256(entry.path) if full else "")
            else:
                found[rel] = ("other", 0, 0, "")
    return found


def file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    except OSError as exc:  # unreadable: a difference in itself, named by the error
        return f"unreadable: {exc.strerror}"
    return digest.hexdigest()


def diff_trees(where: str, expected: dict[str, Entry], actual: dict[str, Entry]) -> list[str]:
    """What differs between two fingerprints, one line per path: ``where``-prefixed."""
    differences = []
    for rel in sorted(expected.keys() | actual.keys()):
        want, got = expected.get(rel), actual.get(rel)
        if want == got:
            continue
        if got is None:
            differences.append(f"{where}/{rel}: missing ({want[0]})")
        elif want is None:
            size = f", {got[1]} bytes" if got[0] == "file" else ""
            differences.append(f"{where}/{rel}: not in the snapshot ({got[0]}{size})")
        elif want[0] != got[0]:
            differences.append(f"{where}/{rel}: a {got[0]}, the snapshot has a {want[0]}")
        elif want[1] != got[1]:
            differences.append(f"{where}/{rel}: {got[1]} bytes, the snapshot has {want[1]}")
        elif want[2] != got[2]:
            differences.append(f"{where}/{rel}: modified (mtime differs from the snapshot)")
        else:
            differences.append(f"{where}/{rel}: content differs from the snapshot")
    return differences


def unexpected_processes(processes: Iterable[tuple[int, str, str]],
                         allowed: Iterable[str]) -> list[str]:
    """One line per process whose name (comm) is not ``allowed``: ``(pid, comm, cmdline)``."""
    allowed = set(allowed)
    return [f"process {pid} ({comm}) left running: {cmdline[:120]}"
            for pid, comm, cmdline in sorted(processes) if comm not in allowed]


def namespace_processes(init_pid: int, proc: str = "/proc") -> list[tuple[int, str, str]]:
    """``(host pid, comm, cmdline)`` of every process in ``init_pid``'s pid namespace, seen
    from the host (no call into the guest); empty when ``init_pid`` is gone.

    Every process of the namespace descends from its init (orphans are re-parented to it),
    and the namespace's own /proc (``/proc/<init>/root/proc``) counts them: when the init's
    descendants are as many, they are all of them, found in a few reads; otherwise (a
    process came or went meanwhile, or the VM has no /proc of its own) every process of the
    host is looked at."""
    try:
        namespace = os.readlink(f"{proc}/{init_pid}/ns/pid")
    except OSError:
        return []
    pids = _descendants(init_pid, proc)
    try:
        inside = sum(name.isdigit() for name in os.listdir(f"{proc}/{init_pid}/root/proc"))
    except OSError:
        inside = -1
    if pids is None or len(pids) != inside:
        pids = [int(name) for name in os.listdir(proc) if name.isdigit()]
    found = []
    for pid in pids:
        try:
            if os.readlink(f"{proc}/{pid}/ns/pid") != namespace:
                continue
            comm = read_proc(f"{proc}/{pid}/comm").decode(errors="replace").strip()
            cmdline = read_proc(f"{proc}/{pid}/cmdline").replace(b"\0", b" ")
            if not cmdline:  # in the middle of its exec (its new name, not yet its arguments): once more
                time.sleep(0.01)
                cmdline = read_proc(f"{proc}/{pid}/cmdline").replace(b"\0", b" ")
        except OSError:  # exited meanwhile, or not ours to read
            continue
        found.append((pid, comm, cmdline.decode(errors="replace").strip()))
    return found


def _descendants(pid: int, proc: str) -> list[int] | None:
    """``pid`` and every process below it (each thread's ``children``), None when a
    ``children`` file cannot be read."""
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        found.append(parent)
        try:
            todo += children_of(parent, proc, strict=True)
        except OSError:
            return None
    return found


def guest_windows(address: str) -> list[str]:
    """The titles of the desktop's managed windows, asked of the VM's agent (``wmctrl -l``);
    one line saying so when it cannot answer."""
    from ...guest.client import GuestClient

    try:
        result = GuestClient(address, timeout_s=10.0).execute(["wmctrl", "-l"], timeout=10.0,
                                                                      isolated=True)
    except Exception as exc:  # noqa: BLE001 - an agent that cannot list windows is a difference
        return [f"(cannot list windows: {exc})"]
    if result.get("returncode") != 0:
        error = (result.get("error") or "").strip()
        if "client list" in error:
            return []  # openbox publishes its list with the first window it manages
        return [f"(cannot list windows: {error[:120]})"]
    return sorted((line.split(None, 3) + [""] * 4)[3] for line in result["output"].splitlines()
                  if line.strip())


def summarize(differences: list[str], fresh: bool = False) -> str:
    """The reason a quarantine gives: the count and the first few differences; ``fresh``:
    of a VM no task ran on (booted or restored, before its first lease)."""
    shown = "; ".join(differences[:3])
    more = f" (+{len(differences) - 3} more)" if len(differences) > 3 else ""
    what = ("verification of a fresh VM failed (no task ran on it: the provider's fault, "
            "charged to the replacement budget)" if fresh else "reset verification failed")
    return f"{what}, {len(differences)} difference(s): {shown}{more}"


def capped(differences: list[str]) -> list[str]:
    """At most MAX_DIFFERENCES lines, the last saying how many were left out."""
    if len(differences) <= MAX_DIFFERENCES:
        return differences
    return differences[:MAX_DIFFERENCES] + [f"... and {len(differences) - MAX_DIFFERENCES} more"]


class HostView:
    """Verifies VMs whose root and pid namespace the host sees through ``/proc/<pid>``: a
    bubblewrap sandbox (the process provider) or a container (docker). ``pid`` is the VM's
    init as the host numbers it.

    The home is compared with the snapshot folder's fingerprint (taken once, the first time
    it is needed); without a snapshot folder (docker: the image is the snapshot) with the
    home of the VM's first boot, whose files older than that boot are the image's.
    ``/tmp``, ``/dev/shm`` and the processes are compared with what the VM had at its first
    boot (``baseline``, called by the provider's start): the snapshot of a sandbox is its
    first boot. Files a boot itself makes in the home (a desktop's caches) are compared by
    name and kind only."""

    def __init__(self, mode: str, home: str, snapshot: Path | None,
                 spare_processes: Iterable[str] = (), windows: bool = False) -> None:
        self.mode = check_mode(mode)
        #: a desktop: its windows are checked too (through the agent at ``address``)
        self.windows = windows
        self.home = home
        self.snapshot = snapshot
        #: processes that may come and go at boot (a desktop's lazily started services)
        self.spare_processes = frozenset(spare_processes)
        self._snapshot_print: dict[str, Entry] | None = None
        self._baselines: dict[str, dict] = {}

    def _observe(self, pid: int | None, address: str | None) -> dict:
        """What the VM holds now, read from the host through ``/proc/<pid>/root``; raises
        LookupError when its init is gone."""
        root = f"/proc/{pid}/root"
        booted = create_time(pid)
        if booted is None or not os.path.isdir(root + "/proc"):
            raise LookupError(f"the VM's init (pid {pid}) is gone")
        return {"home": tree_fingerprint(root + self.home, self.mode == "full"),
                "tmp": tree_fingerprint(root + "/tmp"),
                "shm": tree_fingerprint(root + "/dev/shm"),
                "processes": namespace_processes(pid),
                "booted_ns": int((booted - 1) * 1e9)}

    def snapshot_print(self) -> dict[str, Entry]:
        if self._snapshot_print is None:
            self._snapshot_print = ({} if self.snapshot is None else
                                    tree_fingerprint(self.snapshot, self.mode == "full"))
        return self._snapshot_print

    def baseline(self, key: str, pid: int | None, address: str | None = None,
                 keep: bool = False) -> None:
        """Record what a freshly booted VM has besides its snapshot (no-op when off);
        ``keep``: an existing baseline of ``key`` stays (a machine's, taken at its first
        boot, against which every later restore of it is checked)."""
        if self.mode == "off" or (keep and key in self._baselines):
            return
        try:
            seen = self._observe(pid, address)
        except PermissionError as exc:
            # a host that may not look into its VMs (another user's namespace, hardened
            # /proc) cannot verify cheaply: say so once and check nothing
            log.warning("reset verification is off: cannot look into the VM (%s)", exc)
            self.mode = "off"
            return
        home = seen["home"]
        if self.snapshot is None:  # the image's files are older than the VM's boot
            snap = {rel: e for rel, e in home.items() if e[0] != "file" or e[2] < seen["booted_ns"]}
        else:
            snap = self.snapshot_print()
        self._baselines[key] = {
            "home": snap,
            "tmp": scratch_print(seen["tmp"]),
            "shm": scratch_print(seen["shm"]),
            "home_extra": {rel: entry[0] for rel, entry in home.items() if rel not in snap},
            "processes": _count(comm for _, comm, _ in seen["processes"]),
            "windows": guest_windows(address) if self.windows and address else [],
        }

    def forget(self, key: str) -> None:
        self._baselines.pop(key, None)

    def check(self, key: str, pid: int | None, address: str | None = None) -> list[str]:
        """The differences of the VM ``key`` (init ``pid``, agent at ``address``) from its
        snapshot and first boot."""
        if self.mode == "off" or key not in self._baselines:
            return []
        base = self._baselines[key]
        try:
            seen = self._observe(pid, address)
        except LookupError as exc:
            return [str(exc)]
        differences = []
        home = seen["home"]
        extra = {rel: home.pop(rel) for rel in list(home) if rel in base["home_extra"]
                 and home[rel][0] == base["home_extra"][rel]}
        missing_extra = base["home_extra"].keys() - extra.keys() - home.keys()
        differences += diff_trees(self.home, base["home"], home)
        differences += [f"{self.home}/{rel}: missing (made at boot)" for rel in sorted(missing_extra)]
        for where, name in (("/tmp", "tmp"), ("/dev/shm", "shm")):
            differences += diff_scratch(where, base[name], scratch_print(seen[name]))
        room = dict(base["processes"])
        for comm in self.spare_processes:
            room[comm] = room.get(comm, 0) + 1
        left = []
        for pid_, comm, cmdline in sorted(map(tuple, seen["processes"])):  # the boot's are oldest
            if room.get(comm, 0) > 0:
                room[comm] -= 1
            else:
                left.append((pid_, comm, cmdline))
        differences += unexpected_processes(left, ())
        if self.windows and address:
            windows = guest_windows(address)
            for title in base["windows"]:
                if title in windows:
                    windows.remove(title)
            differences += [f"window {title!r} left open" for title in windows]
        return capped(differences)


def scratch_print(fingerprint: dict[str, Entry]) -> dict[tuple[str, str], int]:
    """A scratch folder (/tmp) as a boot leaves it: how many entries of each name pattern
    and kind. Names a boot makes at random (``dbus-hWWWE2S9A0``) are a pattern
    (``dbus-*``), so two boots match, and one more of them than the boot made still shows."""
    counts: dict[tuple[str, str], int] = {}
    for rel, entry in fingerprint.items():
        if rel.startswith(_SESSION_RUNTIME):
            continue
        key = (name_pattern(rel), entry[0])
        counts[key] = counts.get(key, 0) + 1
    return counts


#: a desktop session's runtime folder (XDG_RUNTIME_DIR): the AT-SPI bus and dconf make
#: their entries in it when a client first asks, earlier or later from boot to boot, so its
#: content is not compared (the folder itself is)
_SESSION_RUNTIME = "xdg-runtime/"
#: a random tail of a name: 6 or more letters and digits after a separator
_RANDOM_TAIL = re.compile(r"(?<=[-_.])[A-Za-z0-9]{6,}(?=(\.[A-Za-z0-9]{1,5})?$)")


def name_pattern(path: str) -> str:
    """``path`` with the parts of its names a boot makes at random as ``*``."""
    return "/".join(_RANDOM_TAIL.sub(_star, part) for part in path.split("/"))


def _star(match: re.Match) -> str:
    token = match.group(0)
    random = any(c.isdigit() for c in token) or (token.lower() != token and token.upper() != token)
    return "*" if random else token


def diff_scratch(where: str, expected: dict[tuple[str, str], int],
                 actual: dict[tuple[str, str], int]) -> list[str]:
    """What differs between two scratch folders' patterns, one line per pattern."""
    differences = []
    for name, kind in sorted(expected.keys() | actual.keys()):
        want, got = expected.get((name, kind), 0), actual.get((name, kind), 0)
        if got > want:
            more = f", {got - want} of them" if got - want > 1 else ""
            differences.append(f"{where}/{name}: not in the snapshot ({kind}{more})")
        elif got < want:
            differences.append(f"{where}/{name}: missing ({kind})")
    return differences


def _count(names: Iterable[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    return counts
