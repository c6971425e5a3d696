"""Guest images built from Debian's own packages, shared by the providers that boot one.

::

    build_rootfs(dest, include=[...])          debootstrap --variant=minbase --include=...
        │                                       (downloads kept in <cache>/debs)
        ▼
    <cache>/rootfs/<key>.tar   ◄── cached: a second call only extracts it (or hands it over)
        │
        ├─► docker: + the guest agent ──► `docker import --change CMD/LABEL/...`
        └─► qemu:   + kernel, agent    ──► a disk image (the qemu provider's own step)

``<cache>`` is ``$PARALLEL_ROLLOUT_CACHE`` or ``~/.cache/parallel-rollout``. ``<key>`` is a
hash of the recipe (suite, variant, packages, mirror, slimming, ``RECIPE_VERSION``): a
changed recipe builds anew, an unchanged one never does unless ``force``. Nothing here
knows about Docker or QEMU; providers start from :func:`rootfs_tarball` or
:func:`build_rootfs` and add their own layer.

**Why debootstrap.** No container registry is reachable from where this runs, but Debian's
package mirror is; debootstrap builds a root filesystem from Debian's signed packages alone
(it checks the Release file against the archive keyring). It needs root (it chroots and
makes device nodes): :func:`check_debootstrap` says so, with the install hint.

**Concurrency.** Two processes (two engineers' test runs, two CI jobs) may build the same
recipe at once: the build holds an ``flock`` on ``<key>.lock``, and the finished tarball
appears by an atomic rename, so a reader never sees half a file and the second builder
finds the first one's result.

**Slim.** ``slim=True`` drops documentation, man pages, locales and apt's package lists from
the tree (about a third of a minbase+python3 rootfs); the package database stays, so apt
still works inside the guest once it has lists again.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterable, Iterator

from ...errors import ProviderUnavailable, VMError

CACHE_ENV = "PARALLEL_ROLLOUT_CACHE"
DEFAULT_SUITE = "bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
#: bump when the recipe below changes in a way the key does not capture
RECIPE_VERSION = 1
#: a debootstrap that has not finished by then is stuck (a dead mirror, a full disk)
DEBOOTSTRAP_TIMEOUT_S = 1800.0
#: folders emptied by slim=True (their content only; the folders stay)
SLIM_DIRS = ("usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/locale",
             "usr/share/lintian", "var/lib/apt/lists", "var/cache/apt", "var/log")
GUEST_AGENT_SOURCE = Path(__file__).resolve().parents[2] / "guest" / "server.py"
#: the guest package on the host: the agent, its desktop routes, the shims
GUEST_SOURCE_DIR = GUEST_AGENT_SOURCE.parent
#: where images put the guest package; providers run the agent from here
GUEST_DIR = "/opt/parallel-rollout"
GUEST_AGENT_PATH = f"{GUEST_DIR}/server.py"
#: on the PYTHONPATH of desktop guests: the xdotool-backed ``pyautogui`` module
GUEST_SHIM_DIR = f"{GUEST_DIR}/shim"
#: what every guest image holds beyond minbase
GUEST_PACKAGES = ("python3",)
#: what a desktop guest image (osworld mode) holds beyond minbase: the X server and a window
#: manager, the apps the desktop tasks use (terminal, editor, file manager), input and window
#: tools, ffmpeg for recordings, a D-Bus session bus and AT-SPI for the accessibility tree
#: (with the GTK 2 bridge, for pcmanfm). LibreOffice is not in it: debootstrap cannot
#: resolve its virtual dependencies; the process provider has it from the host's packages.
#: ``dbus-x11`` is named because debootstrap does not resolve virtual packages (GTK's
#: dconf needs a ``dbus-session-bus``).
DESKTOP_PACKAGES = ("python3", "python-is-python3", "xvfb", "openbox", "xterm", "mousepad",
                    "pcmanfm", "xdotool", "wmctrl", "x11-utils", "ffmpeg", "fonts-dejavu-core",
                    "libx11-6", "libxfixes3", "dbus", "dbus-x11", "at-spi2-core",
                    "python3-pyatspi", "libatk-adaptor", "libgail-common")

Log = Callable[[str], None]


def cache_dir() -> Path:
    """Where built images live: ``$PARALLEL_ROLLOUT_CACHE`` or ``~/.cache/parallel-rollout``."""
    configured = os.environ.get(CACHE_ENV)
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "parallel-rollout"


def recipe_key(*parts: object) -> str:
    """A short stable hash of a recipe (anything JSON-serializable) for cache names and tags."""
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def check_debootstrap() -> str:
    """The debootstrap executable; ProviderUnavailable (with the fix) when it cannot run."""
    found = shutil.which("debootstrap") or next(
        (p for p in ("/usr/sbin/debootstrap", "/sbin/debootstrap") if os.access(p, os.X_OK)), None)
    if found is None:
        raise ProviderUnavailable("building a guest image needs debootstrap; install it with: "
                                  "apt-get install debootstrap")
    if os.geteuid() != 0:
        raise ProviderUnavailable("debootstrap must run as root (it chroots and creates device "
                                  "nodes): run `parallel-rollout image build` with sudo")
    return found


def rootfs_tarball(include: Iterable[str] = ("python3",), *, suite: str = DEFAULT_SUITE,
                   variant: str = "minbase", mirror: str = DEFAULT_MIRROR, slim: bool = True,
                   force: bool = False, log: Log = print) -> Path:
    """The cached tarball of a debootstrapped Debian tree (built now when missing or ``force``).

    The tarball holds the tree's content at its top level (``./usr``, ``./etc``, ...), with
    owners, modes and device nodes as debootstrap made them.
    """
    packages = sorted(set(include))
    key = recipe_key("rootfs", RECIPE_VERSION, suite, variant, packages, mirror, slim)
    store = cache_dir() / "rootfs"
    store.mkdir(parents=True, exist_ok=True)
    tarball = store / f"{suite}-{variant}-{key}.tar"
    with _locked(store / f"{key}.lock"):
        if tarball.exists() and not force:
            log(f"[image] rootfs cached: {tarball} ({_size_mb(tarball):.0f} MB)")
            return tarball
        debootstrap = check_debootstrap()
        started = time.monotonic()
        # the tree is made next to the cache, not in /tmp: tmpfs may be small or noexec
        with tempfile.TemporaryDirectory(prefix=f".build-{key}-", dir=store) as work:
            tree = Path(work) / "rootfs"
            debs = cache_dir() / "debs"
            debs.mkdir(parents=True, exist_ok=True)
            argv = [debootstrap, f"--variant={variant}", f"--include={','.join(packages)}",
                    f"--cache-dir={debs}", suite, str(tree), mirror]
            log(f"[image] debootstrap {suite} ({variant}, +{','.join(packages)}) from {mirror}")
            _run_logged(argv, log, timeout=DEBOOTSTRAP_TIMEOUT_S, what="debootstrap")
            if slim:
                freed = _slim(tree)
                log(f"[image] slimmed the tree by {freed / 1e6:.0f} MB")
            log(f"[image] packing the tree into {tarball.name}")
            partial = tarball.with_suffix(".tar.partial")
            _pack(tree, partial)
            partial.replace(tarball)  # atomic: a reader sees a whole tarball or none
        log(f"[image] rootfs built in {time.monotonic() - started:.0f}s: {tarball} "
            f"({_size_mb(tarball):.0f} MB)")
        return tarball


def build_rootfs(dest: str | os.PathLike, include: Iterable[str] = ("python3",), *,
                 suite: str = DEFAULT_SUITE, variant: str = "minbase",
                 mirror: str = DEFAULT_MIRROR, slim: bool = True, force: bool = False,
                 log: Log = print) -> Path:
    """A Debian tree at ``dest`` (which must not exist or be empty), from the cached tarball
    of the recipe; debootstrap runs only when that tarball is missing or ``force``."""
    dest = Path(dest)
    if dest.exists() and any(dest.iterdir()):
        raise VMError(f"build_rootfs: {dest} exists and is not empty")
    tarball = rootfs_tarball(include, suite=suite, variant=variant, mirror=mirror, slim=slim,
                             force=force, log=log)
    dest.mkdir(parents=True, exist_ok=True)
    log(f"[image] extracting the rootfs into {dest}")
    # tar(1), not tarfile: it restores device nodes, owners and hard links faithfully and fast
    _run_logged(["tar", "-C", str(dest), "--numeric-owner", "-xpf", str(tarball)], log,
                timeout=600, what="tar")
    return dest


def guest_packages(desktop: bool = False) -> tuple[str, ...]:
    """What a guest image's Debian tree holds beyond minbase, with a desktop or without."""
    return DESKTOP_PACKAGES if desktop else GUEST_PACKAGES


def guest_files() -> dict[str, bytes]:
    """Every source file of the guest package, by the path an image puts it at."""
    return {f"{GUEST_DIR}/{path.relative_to(GUEST_SOURCE_DIR).as_posix()}": path.read_bytes()
            for path in sorted(GUEST_SOURCE_DIR.rglob("*.py")) if "__pycache__" not in path.parts}


def guest_digest() -> str:
    """A hash of the guest package: an image made from another one is stale."""
    return recipe_key(sorted((name, hashlib.sha256(data).hexdigest())
                             for name, data in guest_files().items()))


def copy_with_extra_files(tarball: Path, dest: Path,
                          files: dict[str, tuple[bytes | None, int]]) -> Path:
    """Copy ``tarball`` to ``dest`` and append ``files`` (path inside -> (content, mode);
    content None makes a folder), creating their parent folders; return ``dest``. Used to
    add the guest agent."""
    shutil.copyfile(tarball, dest)
    with tarfile.open(dest, "a") as archive:
        present = set(archive.getnames())
        now = time.time()
        for inner, (content, mode) in sorted(files.items()):
            parts = Path(inner.lstrip("/")).parts
            for depth in range(1, len(parts)):
                folder = "./" + "/".join(parts[:depth])
                if folder not in present and folder[2:] not in present:
                    entry = tarfile.TarInfo(folder)
                    entry.type, entry.mode, entry.mtime = tarfile.DIRTYPE, 0o755, now
                    archive.addfile(entry)
                    present.add(folder)
            entry = tarfile.TarInfo("./" + "/".join(parts))
            entry.mode, entry.mtime = mode, now
            if content is None:
                entry.type = tarfile.DIRTYPE
                archive.addfile(entry)
            else:
                entry.size = len(content)
                archive.addfile(entry, io.BytesIO(content))
    return dest


# ----------------------------------------------------------------------------- helpers


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _run_logged(argv: list[str], log: Log, *, timeout: float, what: str) -> None:
    """Run ``argv``, passing its output lines to ``log``; VMError with the tail on failure."""
    tail: list[str] = []
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, errors="replace")
    deadline = time.monotonic() + timeout
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip()
            tail = (tail + [line])[-20:]
            if line.startswith(("I: Retrieving", "I: Validating", "I: Extracting",
                                "I: Unpacking", "I: Configuring")):
                continue  # one line per package: too chatty for a progress log
            log(f"[{what}] {line}")
            if time.monotonic() > deadline:
                break
        proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        pass
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
            raise VMError(f"{what} did not finish within {timeout:.0f}s: " + " | ".join(tail[-5:]))
    if proc.returncode != 0:
        raise VMError(f"{what} failed (exit {proc.returncode}): " + " | ".join(tail[-8:]))


def _slim(tree: Path) -> int:
    freed = 0
    for rel in SLIM_DIRS:
        folder = tree / rel
        if not folder.is_dir() or folder.is_symlink():
            continue
        for child in folder.iterdir():
            if rel == "usr/share/locale" and child.name == "locale.alias":
                continue
            if rel == "var/cache/apt" and child.name == "archives":
                _empty_archives(child)
                continue
            if rel == "var/lib/apt/lists" and child.name == "partial":
                continue
            freed += _du(child)
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
    return freed


def _empty_archives(folder: Path) -> None:
    for deb in folder.glob("*.deb"):
        deb.unlink()


def _du(path: Path) -> int:
    if path.is_symlink() or not path.is_dir():
        try:
            return path.lstat().st_size
        except OSError:
            return 0
    return sum(p.lstat().st_size for p in path.rglob("*") if not p.is_symlink() and p.is_file())


def _pack(tree: Path, dest: Path) -> None:
    subprocess.run(["tar", "-C", str(tree), "--numeric-owner", "--xattrs", "-cf", str(dest), "."],
                   check=True, timeout=600, capture_output=True)


def _size_mb(path: Path) -> float:
    return path.stat().st_size / 1e6
