"""Guest images built from Debian's own packages, shared by the providers that boot one.

::

    build_rootfs(dest, include=[...])          debootstrap --variant=minbase --include=...
        │                                       (downloads kept in <cache>/debs)
        │  apt_install=[...]                    then apt-get install in the tree, in bwrap
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

**Two stages.** debootstrap resolves plain dependencies only: a package that needs a virtual
one (LibreOffice needs ``perl:any`` and a ``dbus-system-bus``) makes it fail. Those packages
go to ``apt_install``: after debootstrap, ``apt-get install --no-install-recommends`` runs in
the tree, which bwrap makes the root (with /proc, /dev, the host's resolv.conf and the same
download cache); a ``policy-rc.d`` keeps package scripts from starting services.

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
from ...provenance import program
from . import orphans
from .host_dirs import IMAGE_CACHE

#: a child run under this prefix is SIGKILLed when the thread that started it ends (a killed
#: owner): ``setpriv --pdeathsig KILL``, where setpriv is installed
DEATHSIG = [shutil.which("setpriv"), "--pdeathsig", "KILL"] if shutil.which("setpriv") else []

CACHE_ENV = IMAGE_CACHE.env
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
#: the agent's files, siblings of server.py (guest/agent_server.py says what each holds)
GUEST_AGENT_FILES = ("server.py", "agent_server.py", "agent_http.py", "agent_json.py",
                     "agent_commands.py", "agent_spawn.py", "agent_grading.py", "agent_output.py",
                     "agent_files.py", "agent_setup.py", "agent_scripts.py", "agent_reap.py",
                     "agent_sessions.py")
#: what a desktop guest needs next to them: the desktop's routes and the AT-SPI walker
GUEST_DESKTOP_FILES = ("desktop.py", "desktop_screen.py", "desktop_windows.py",
                       "desktop_routes.py", "atspi_tree.py")
#: on the PYTHONPATH of desktop guests: the xdotool-backed ``pyautogui`` module
GUEST_SHIM_DIR = f"{GUEST_DIR}/shim"
#: wrappers of programs as OSWorld's tasks start them (``sudo -S``, ``/usr/bin/vlc``,
#: ``/usr/bin/thunderbird``): first on the PATH of a desktop guest (:func:`guest_path`)
GUEST_SHIM_BIN = f"{GUEST_SHIM_DIR}/bin"
#: wrappers of curl, jq, sqlite3, file, wget, psql, node, git, mvn, gdb, tmux, less, gpg, ImageMagick, ssh, vim, npm, pytest, valgrind, make, javac, java, prove and cmake,
#: first on a grading command's PATH in every guest (``guest/agent_grading.py``)
GUEST_GRADING_BIN = f"{GUEST_DIR}/grading_bin"
#: the PATH of a guest's agent and of the commands it runs
GUEST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: what every guest image holds beyond minbase
GUEST_PACKAGES = ("python3",)
#: the programs OSWorld's tasks run in their setup and grading beyond the apps, as Ubuntu has
#: them (``scripts/osworld_programs.py`` lists what a task set runs and the image lacks):
#: gsettings and gio (libglib2.0-bin) with GNOME's schemas (org.gnome.desktop.*, and
#: org.gnome.shell's favorite-apps) and dconf, whose service the session bus starts so that
#: a setting outlives the process that set it; gvfs for gio's trash:///; bc, zip, unzip, jq,
#: xsel, update-desktop-database, git, pip; gnome-terminal; pactl with PulseAudio
DESKTOP_TOOLS = ("libglib2.0-bin", "gsettings-desktop-schemas", "gnome-shell-common",
                 "dconf-gsettings-backend", "dconf-service", "gvfs", "bc", "zip", "unzip", "jq",
                 "xsel", "desktop-file-utils", "git", "python3-pip", "gnome-terminal",
                 "pulseaudio", "pulseaudio-utils")
#: apt-get installs these into the desktop image after debootstrap (see "Two stages")
#: (OSWorld's domains that Debian packages: LibreOffice with its GTK 3 plugin, the one with an
#: AT-SPI bridge, Chromium with socat for OSWorld's 9222 -> 1337 DevTools forward, GIMP, VLC,
#: Thunderbird; ImageMagick paints wallpapers)
DESKTOP_APT_PACKAGES = ("libreoffice-writer", "libreoffice-calc", "libreoffice-impress",
                        "libreoffice-gtk3", "chromium", "socat", "gimp", "vlc", "thunderbird",
                        "imagemagick", *DESKTOP_TOOLS)
#: an apt-get stage (update + install) that has not finished by then is stuck
APT_TIMEOUT_S = 1800.0
#: what a desktop guest image (osworld mode) holds beyond minbase: the X server and a window
#: manager, the apps the desktop tasks use (terminal, editor, file manager), input and window
#: tools, ffmpeg for recordings, a D-Bus session bus and AT-SPI for the accessibility tree
#: (with the GTK 2 bridge, for pcmanfm); LibreOffice comes in the second stage
#: (``DESKTOP_APT_PACKAGES``). ``dbus-x11`` is named because debootstrap does not resolve
#: virtual packages (GTK's dconf needs a ``dbus-session-bus``).
DESKTOP_PACKAGES = ("python3", "python-is-python3", "xvfb", "openbox", "xterm", "mousepad",
                    "pcmanfm", "xdotool", "wmctrl", "x11-utils", "ffmpeg", "fonts-dejavu-core",
                    "libx11-6", "libxfixes3", "dbus", "dbus-x11", "at-spi2-core",
                    "python3-pyatspi", "libatk-adaptor", "libgail-common")

Log = Callable[[str], None]


def cache_dir() -> Path:
    """Where built images live: ``$PARALLEL_ROLLOUT_CACHE`` or ``~/.cache/parallel-rollout``
    (``host_dirs.IMAGE_CACHE``, which a command agent's program never sees)."""
    return IMAGE_CACHE.path()


def recipe_key(*parts: object) -> str:
    """A short stable hash of a recipe (anything JSON-serializable) for cache names and tags."""
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def build_command(provider: str, desktop: bool = False) -> str:
    """The command that builds ``provider``'s guest image, as the user reaches the tool (``./dev``
    has no ``parallel-rollout`` on PATH): the fix a missing image's message names."""
    return f"{program()} image build --provider {provider}" + (" --desktop" if desktop else "")


def check_debootstrap() -> str:
    """The debootstrap executable; ProviderUnavailable (with the fix) when it cannot run."""
    found = shutil.which("debootstrap") or next(
        (p for p in ("/usr/sbin/debootstrap", "/sbin/debootstrap") if os.access(p, os.X_OK)), None)
    if found is None:
        raise ProviderUnavailable("building a guest image needs debootstrap; install it with: "
                                  "apt-get install debootstrap")
    if os.geteuid() != 0:
        raise ProviderUnavailable("debootstrap must run as root (it chroots and creates device "
                                  f"nodes): run `{program()} image build` with sudo")
    return found


def rootfs_tarball(include: Iterable[str] = ("python3",), *, apt_install: Iterable[str] = (),
                   suite: str = DEFAULT_SUITE, variant: str = "minbase",
                   mirror: str = DEFAULT_MIRROR, slim: bool = True, force: bool = False,
                   log: Log = print) -> Path:
    """The cached tarball of a debootstrapped Debian tree with ``include``, plus
    ``apt_install`` installed by apt-get over it (built now when missing or ``force``).

    The tarball holds the tree's content at its top level (``./usr``, ``./etc``, ...), with
    owners, modes and device nodes as debootstrap made them. With ``apt_install`` the
    debootstrap stage is a tarball of its own, cached as well.
    """
    packages = sorted(set(include))
    second = sorted(set(apt_install))
    base = None
    if second:
        base = rootfs_tarball(packages, suite=suite, variant=variant, mirror=mirror, slim=slim,
                              force=force, log=log)
    tarball = rootfs_tarball_path(packages, apt_install=second, suite=suite, variant=variant,
                                  mirror=mirror, slim=slim)
    key = tarball.stem.rsplit("-", 1)[1]
    store = tarball.parent
    store.mkdir(parents=True, exist_ok=True)
    with _locked(store / f"{key}.lock"):
        # the folders of builds of this tree that were killed (each build holds the lock)
        for stale in store.glob(f".build-{key}-*"):
            shutil.rmtree(stale, ignore_errors=True)
        if tarball.exists() and not force:
            log(f"[image] rootfs cached: {tarball} ({_size_mb(tarball):.0f} MB)")
            return tarball
        started = time.monotonic()
        debs = cache_dir() / "debs"
        debs.mkdir(parents=True, exist_ok=True)
        # the tree is made next to the cache, not in /tmp: tmpfs may be small or noexec
        with tempfile.TemporaryDirectory(prefix=f".build-{key}-", dir=store) as work:
            tree = Path(work) / "rootfs"
            if base is None:
                argv = [check_debootstrap(), f"--variant={variant}",
                        f"--include={','.join(packages)}", f"--cache-dir={debs}", suite,
                        str(tree), mirror]
                log(f"[image] debootstrap {suite} ({variant}, +{','.join(packages)}) "
                    f"from {mirror}")
                _run_logged(argv, log, timeout=DEBOOTSTRAP_TIMEOUT_S, what="debootstrap")
            else:
                bwrap = _check_bwrap()
                _extract(base, tree, log)
                _apt_install(bwrap, tree, second, suite=suite, mirror=mirror, debs=debs, log=log)
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


def rootfs_tarball_path(include: Iterable[str] = ("python3",), *, apt_install: Iterable[str] = (),
                        suite: str = DEFAULT_SUITE, variant: str = "minbase",
                        mirror: str = DEFAULT_MIRROR, slim: bool = True) -> Path:
    """Where :func:`rootfs_tarball` keeps the tree of that recipe (built or not)."""
    key = recipe_key("rootfs", RECIPE_VERSION, suite, variant, sorted(set(include)), mirror, slim)
    if set(apt_install):
        key = recipe_key("rootfs+apt", key, sorted(set(apt_install)))
    return cache_dir() / "rootfs" / f"{suite}-{variant}-{key}.tar"


def build_rootfs(dest: str | os.PathLike, include: Iterable[str] = ("python3",), *,
                 apt_install: Iterable[str] = (), suite: str = DEFAULT_SUITE,
                 variant: str = "minbase", mirror: str = DEFAULT_MIRROR, slim: bool = True,
                 force: bool = False, log: Log = print) -> Path:
    """A Debian tree at ``dest`` (which must not exist or be empty), from the cached tarball
    of the recipe; debootstrap runs only when that tarball is missing or ``force``."""
    dest = Path(dest)
    if dest.exists() and any(dest.iterdir()):
        raise VMError(f"build_rootfs: {dest} exists and is not empty")
    tarball = rootfs_tarball(include, apt_install=apt_install, suite=suite, variant=variant,
                             mirror=mirror, slim=slim, force=force, log=log)
    _extract(tarball, dest, log)
    return dest


def _extract(tarball: Path, dest: Path, log: Log) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    log(f"[image] extracting {tarball.name} into {dest}")
    # tar(1), not tarfile: it restores device nodes, owners and hard links faithfully and fast
    _run_logged(["tar", "-C", str(dest), "--numeric-owner", "-xpf", str(tarball)], log,
                timeout=600, what="tar")


def guest_recipe(desktop: bool = False) -> dict[str, tuple[str, ...]]:
    """What a guest image's Debian tree holds beyond minbase, with a desktop or without: the
    ``include`` and ``apt_install`` arguments of :func:`rootfs_tarball`."""
    if desktop:
        return {"include": DESKTOP_PACKAGES, "apt_install": DESKTOP_APT_PACKAGES}
    return {"include": GUEST_PACKAGES, "apt_install": ()}


def guest_path(desktop: bool = False) -> str:
    """The PATH of a guest's agent and of the commands and apps it starts: a desktop's has
    :data:`GUEST_SHIM_BIN` first, so OSWorld's ``echo password | sudo -S CMD`` and its
    ``/usr/bin/vlc`` launches (``guest/desktop_routes.resolve_app``) reach the shims."""
    return f"{GUEST_SHIM_BIN}:{GUEST_PATH}" if desktop else GUEST_PATH


def guest_files() -> dict[str, tuple[bytes, int]]:
    """Every file of the guest package (its modules, the shims' and the grading wrappers'
    programs) by the path an image puts it at: (content, mode), the programs executable."""
    sources = [*GUEST_SOURCE_DIR.rglob("*.py"), *(GUEST_SOURCE_DIR / "shim" / "bin").iterdir(),
               *(GUEST_SOURCE_DIR / "grading_bin").iterdir()]
    return {f"{GUEST_DIR}/{path.relative_to(GUEST_SOURCE_DIR).as_posix()}":
            (path.read_bytes(), 0o755 if path.stat().st_mode & 0o111 else 0o644)
            for path in sorted(sources) if "__pycache__" not in path.parts}


def guest_digest() -> str:
    """A hash of the guest package (contents and modes): an image made from another one is
    stale."""
    return recipe_key(sorted((name, hashlib.sha256(data).hexdigest(), mode)
                             for name, (data, mode) in guest_files().items()))


#: the user graded code (and a desktop) runs as in every guest, as OSWorld's guest calls it
GUEST_USER = "user"
GUEST_USER_HOME = "/home/user"


def with_guest_user(kind: str, text: str, uid: int, home: str = GUEST_USER_HOME) -> str:
    """``text``, an /etc/passwd or /etc/group (``kind``), with :data:`GUEST_USER` as ``uid``
    (group ``uid``, home ``home``) in place of any entry of that name or id: programs look
    their user up (dbus-daemon refuses to start without, xterm finds no shell)."""
    line = (f"{GUEST_USER}:x:{uid}:{uid}::{home}:/bin/bash" if kind == "passwd"
            else f"{GUEST_USER}:x:{uid}:")
    # entries of that name or id give way (their third field is the id)
    kept = [entry for entry in text.splitlines() if entry.split(":")[0] != GUEST_USER
            and entry.split(":")[2:3] != [str(uid)]]
    return "\n".join([*kept, line]) + "\n"


def guest_user_files(tarball: Path, uid: int) -> dict[str, tuple[bytes, int]]:
    """/etc/passwd and /etc/group of the tree in ``tarball`` with :data:`GUEST_USER` as
    ``uid``, as :func:`copy_with_extra_files` takes them (they replace the tree's)."""
    found: dict[str, str] = {}
    with tarfile.open(tarball) as archive:
        for member in archive:
            kind = member.name.lstrip("./")
            if kind in ("etc/passwd", "etc/group") and member.isfile():
                handle = archive.extractfile(member)
                found[kind] = handle.read().decode("utf-8", errors="replace") if handle else ""
                if len(found) == 2:
                    break
    return {f"/etc/{kind}": (with_guest_user(kind, found.get(f"etc/{kind}", ""), uid).encode(), 0o644)
            for kind in ("passwd", "group")}


def copy_with_extra_files(tarball: Path, dest: Path,
                          files: dict[str, tuple[bytes | str | None, int]]) -> Path:
    """Copy ``tarball`` to ``dest`` and append ``files`` (path inside -> (content, mode);
    content None makes a folder, a str a link to it), creating their parent folders; return ``dest``. Used to
    add the guest agent. A file the tarball has already is replaced (``tar --delete`` first:
    ``docker import`` refuses a path twice)."""
    shutil.copyfile(tarball, dest)
    with tarfile.open(dest) as archive:
        present = set(archive.getnames())
    replaced = [name for inner, (content, _) in files.items() if content is not None
                for name in ("./" + inner.lstrip("/"), inner.lstrip("/")) if name in present]
    if replaced:
        subprocess.run(["tar", "--delete", "-f", str(dest), *replaced], check=True,
                       timeout=600, capture_output=True)
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
            if content is None or isinstance(content, str):
                entry.type, entry.linkname = (tarfile.DIRTYPE, "") if content is None else (tarfile.SYMTYPE, content)
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


def _check_bwrap() -> str:
    found = shutil.which("bwrap")
    if found is None:
        raise ProviderUnavailable("installing packages into a guest image needs bubblewrap; "
                                  "install it with: apt-get install bubblewrap")
    return found


def _apt_install(bwrap: str, tree: Path, packages: list[str], *, suite: str, mirror: str,
                 debs: Path, log: Log) -> None:
    """apt-get install ``packages`` (no recommends) in ``tree``, made the root by bwrap."""
    (tree / "etc" / "apt" / "sources.list").write_text(f"deb {mirror} {suite} main\n")
    policy = tree / "usr" / "sbin" / "policy-rc.d"
    policy.write_text("#!/bin/sh\n# no service starts while the image is built\nexit 101\n")
    policy.chmod(0o755)
    (debs / "partial").mkdir(parents=True, exist_ok=True)
    apt = "apt-get -q -o Acquire::Languages=none -o Acquire::Check-Valid-Until=false"
    script = (f"{apt} update && {apt} install -y --no-install-recommends "
              + " ".join(packages))
    argv = [bwrap, "--bind", str(tree), "/", "--proc", "/proc", "--dev", "/dev",
            "--perms", "1777", "--tmpfs", "/tmp",
            "--ro-bind", "/etc/resolv.conf", "/etc/resolv.conf",
            "--bind", str(debs), "/var/cache/apt/archives",
            "--unshare-pid", "--unshare-ipc", "--die-with-parent",
            "--setenv", "DEBIAN_FRONTEND", "noninteractive",
            "--setenv", "PATH", "/usr/sbin:/usr/bin:/sbin:/bin", "--", "/bin/sh", "-c", script]
    log(f"[image] apt-get install {' '.join(packages)} (without recommends) in the tree")
    try:
        # its pid namespace's init, which bwrap leaves unreaped, is ours to reap: under a pid 1
        # that reaps nothing (a container's) it stayed a zombie per build
        with orphans.bwrap_init(argv) as report:
            _run_logged(report.argv, log, timeout=APT_TIMEOUT_S, what="apt-get", pass_fds=report.pass_fds)
    finally:
        policy.unlink()


def _run_logged(argv: list[str], log: Log, *, timeout: float, what: str, pass_fds: tuple[int, ...] = ()) -> None:
    """Run ``argv`` (with ``pass_fds``), passing its output lines to ``log``; VMError with the tail on failure.
    It dies with the build (DEATHSIG): a build killed by a cron job's ``timeout`` (SIGTERM)
    or SIGKILL left its debootstrap running on, filling a folder no build would pack."""
    tail: list[str] = []
    proc = subprocess.Popen([*DEATHSIG, *argv], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, errors="replace", pass_fds=pass_fds)
    deadline = time.monotonic() + timeout
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip()
            tail = (tail + [line])[-20:]
            if line.startswith(("I: Retrieving", "I: Validating", "I: Extracting",
                                "I: Unpacking", "I: Configuring", "Get:", "Selecting ",
                                "Preparing to unpack", "Unpacking ", "Setting up ",
                                "(Reading database")):
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
