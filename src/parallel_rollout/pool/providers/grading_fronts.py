"""The grading wrappers' fronts at the real paths of a guest's programs, in the process, docker
and qemu guests (every guest we build; a ``remote`` machine is the user's, and has none).

The wrappers (``guest/grading_bin``) work through a grading command's PATH and PYTHONPATH, so a
check that runs a program by its path (``/usr/bin/env -i …``, ``/usr/bin/git status``,
``/usr/bin/jq``, ``/usr/bin/python3 -I``) or from a PATH of its own reached the system's program
past them, and a wrong answer scored 1. In those guests the real path of each program that has a
wrapper (:func:`fronted_programs`) is ``grading_bin/system_front``, and the guest python's own
``sitecustomize.py`` is ``grading_bin/system_sitecustomize.py``: a grading command's process
(``PARALLEL_ROLLOUT_GRADING_SINCE`` in its environment, or a process of a session the agent noted
as a grading command's, ``guest/agent_sessions.py``, when a check ran it with an environment of
its own) goes to the wrapper, every other process
to the system's program, kept at :data:`SYSTEM_ORIGINALS` under the name it was run by (the
other names of a fronted program in the bin folders too: ``gmake`` of make, ``git-upload-pack``
of git, ``pager`` of less). A mount namespace per grading command cannot do it instead: seccomp
refuses mount and unshare to every process of a process VM, and a docker guest's agent has no
CAP_SYS_ADMIN.

One plan (:func:`plan`) from the guest's files as they are, three ways to lay it:

* a process VM binds a folder made once per provider (:func:`prepare`) over the host's
  ``/usr/bin`` and another at :data:`SYSTEM_ORIGINALS`, with the host's ``/usr`` in it
  (:data:`HOST_USR`), at each boot (:func:`bwrap_binds`): in the first, each front is a link to
  the wrappers' ``system_front``, each other program a link to its file under :data:`HOST_USR`
  (its own ``../lib`` and ``../share`` there are the host's), each link of ``/usr/bin`` the same
  link, and a python's file the host's, bound over it (a link would move its ``sys.prefix``);
  in the second each original is a link into :data:`HOST_USR` (sitecustomize.py's a copy).
  Five binds where every wrapper's front file by file was 51 more, and each bind costs every
  boot (bwrap reads the whole mount table again after each): a sandbox's start costs what one
  with no front does within the measure's spread (0.88-1.14 of it), where every front file by
  file doubled it (``benchmarks/perf/binds.py --fronts``). A program of ``/usr/bin`` then has its real path under :data:`HOST_USR`
  (``readlink -f``, perl's ``$^X``, node's ``process.execPath``), ``/usr/bin`` holds links
  where the host has files, and what a run hides is hidden there too (:func:`mirrored_masks`).
  A program the host gets since is in the folder made again at the next boot (:func:`current`);
  without a folder (it could not be made) a sandbox binds env's, git's and python's fronts file
  by file (:data:`AT_BOOT`), and python's encodings from a folder of its own
  (:func:`prepare_encodings`: without it the host's, with no front);
* a qemu image's tree gets them moved in place (:func:`install_in_tree`);
* a docker image's tarball gets them as extra files (:func:`tarball_files`).

Each lays python's ``encodings`` with its front too (``python_front.py``: a grading python run
with an environment of its own is started again there, before ``site`` reads a ``.pth`` of the
answer's): the process VM's folder holds the package as bytecode alone (no folder of the check's
``pycache_prefix`` is read for it), bound over the package's folder and again under
:data:`HOST_USR`; the images get its source and bytecode in place of their own, and the package
as bytecode alone in the stdlib's zip, which python reads first.

Left as it is: a program whose real file is of another name (``vi`` of ``vim.basic``, psql of
pg_wrapper, ``npm`` of ``npm-cli.js``: a multi-call program, or one an alternative names), in an
image one whose real file is outside ``/usr/bin`` and ``/bin`` (java, javac, mvn: they find their homes
by their paths, which a move loses; a process VM's originals stay in the host's /usr, so it fronts
them where they are, ``/usr/lib/jvm/…/bin/java``), one that finds its own files beside it (:data:`FINDS_ITSELF`), a hard link in an image's
tarball, and python itself (the sitecustomize.py front leads a grading python to the rules; a
front in python's place would move its ``sys.executable``).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import stat
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from . import agent_folder, images, python_front, sandbox_fs

GRADING_BIN = images.GUEST_SOURCE_DIR / "grading_bin"
#: where a guest keeps the system's programs that a grading front takes the place of (the
#: wrappers' ./system_front, ./system_sitecustomize.py and ./wrap.sh name it)
SYSTEM_ORIGINALS = "/opt/system-originals"
#: the fronts, in grading_bin
PROGRAM_FRONT = "system_front"
SITECUSTOMIZE_FRONT = "system_sitecustomize.py"
#: programs of grading_bin without a front of their own: python's (see the module doc), the
#: helper git runs (no system program of that name), the front itself, and the shell it runs in
#: (``#!/bin/sh``: sh's front would run itself; each ``sh -c`` of every program would pay it)
NOT_FRONTED = ("python", "python3", "git_external_diff", PROGRAM_FRONT, "sh", "dash")
#: programs that find their own files by their path, which a move to SYSTEM_ORIGINALS loses:
#: left without a front
FINDS_ITSELF = {"cmake": "its CMAKE_ROOT is found beside its executable (empty when moved)",
                "valgrind": "Debian's is a script that runs $0.bin"}
#: the programs a process VM without its fronts' folder fronts (with python's sitecustomize.py),
#: file by file: each bind costs every boot of a sandbox more than its own mount (bwrap reads the
#: whole mount table again after each): every wrapper's front so, 51 binds more, took a sandbox's
#: start (``/bin/true``) from 11-17 to 32-43 ms of wall time, these from 11-17 to 18-22
AT_BOOT = ("env", "git")
#: under a provider's base folder, the fronts' folders (:func:`prepare`): not a run's name
FOLDERS = ".grading-fronts"
#: the folder whose fronts a process VM's folder lays: the one every fronted program is in
FRONTED = "/usr/bin"
#: where a process VM sees the host's /usr, which its originals and other programs link into
HOST_USR = f"{SYSTEM_ORIGINALS}/usr"
#: programs of FRONTED bound over the folder's as they are, not linked: an interpreter that
#: finds its prefix by its real path (a link would move a python's ``sys.prefix``)
BOUND_AS_THEY_ARE = re.compile(r"python\d+(\.\d+)*")
#: where a fronted program is looked for, and the folders whose other names of it are kept
PROGRAM_FOLDERS = ("/usr/bin", "/bin")
NAME_FOLDERS = ("/usr/bin", "/bin", "/usr/sbin", "/sbin", "/usr/local/bin")


def fronted_programs() -> tuple[str, ...]:
    """Every program of grading_bin that a guest fronts: each wrapper but python's."""
    return tuple(sorted(path.name for path in GRADING_BIN.iterdir()
                        if path.is_file() and os.access(path, os.X_OK) and path.name not in NOT_FRONTED
                        and not path.name.startswith("python3.")))


def _inner(name: str) -> str:
    """A tarball member's name (``./usr/bin/git``) as the guest's path."""
    return "/" + name.removeprefix("./").strip("/")


class GuestFiles:
    """A guest's files as the plan reads them: the host's (a process VM's /usr), a tree on disk
    (``root``), or a tarball's members; links are followed from the guest's root."""

    def __init__(self, root: str = "/", tarball: Path | None = None) -> None:
        self.root = root
        self.tarball = tarball
        self.members: dict[str, tarfile.TarInfo] | None = None
        self.linked: set[str] = set()
        if tarball is not None:
            with tarfile.open(tarball) as archive:
                self.members = {_inner(m.name): m for m in archive}
            self.members.pop("/", None)
            self.linked = {_inner(m.linkname) for m in self.members.values() if m.islnk()}

    def _host(self, path: str) -> str:
        return os.path.join(self.root, path.lstrip("/"))

    def readlink(self, path: str) -> str | None:
        if self.members is not None:
            member = self.members.get(path)
            return member.linkname if member is not None and member.issym() else None
        try:
            return os.readlink(self._host(path))
        except OSError:
            return None

    def is_program(self, path: str) -> bool:
        """A regular file of its own (no hard link of a tarball, whose other names a front
        in its place would change too)."""
        if self.members is not None:
            member = self.members.get(path)
            return member is not None and member.isfile() and path not in self.linked
        return os.path.isfile(self._host(path)) and not os.path.islink(self._host(path))

    def listdir(self, folder: str) -> list[str]:
        if self.members is not None:
            prefix = folder.rstrip("/") + "/"
            return [name[len(prefix):] for name in self.members
                    if name.startswith(prefix) and "/" not in name[len(prefix):]]
        try:
            return os.listdir(self._host(folder))
        except OSError:
            return []

    def read(self, path: str) -> bytes | None:
        """The content of the regular file at ``path`` (no link followed), or None."""
        if self.members is not None:
            member = self.members.get(path)
            if member is None or not member.isfile():
                return None
            with tarfile.open(self.tarball) as archive:
                handle = archive.extractfile(member)
                return handle.read() if handle else None
        try:
            return Path(self._host(path)).read_bytes() if not os.path.islink(self._host(path)) else None
        except OSError:
            return None

    def read_all(self, folder: str, suffix: str) -> dict[str, bytes]:
        """The regular files of ``folder`` whose names end with ``suffix``, by their paths (a
        tarball read once)."""
        paths = [f"{folder.rstrip('/')}/{name}" for name in self.listdir(folder) if name.endswith(suffix)]
        if self.members is None:
            return {path: data for path in paths if (data := self.read(path)) is not None}
        found = {}
        with tarfile.open(self.tarball) as archive:
            for path in sorted(paths, key=lambda path: self.members[path].offset_data):  # type: ignore[index]
                member = self.members[path]
                if member.isfile() and (handle := archive.extractfile(member)):
                    found[path] = handle.read()
        return found

    def real(self, path: str) -> str:
        """``path`` with every link on it followed (an absolute link from the guest's root)."""
        parts, done, hops = [p for p in path.split("/") if p], "/", 0
        while parts:
            part = parts.pop(0)
            if part in (".", ".."):
                done = done if part == "." else os.path.dirname(done)
                continue
            here = os.path.join(done, part)
            target = self.readlink(here)
            if target is None or hops > 40:
                done = here
                continue
            hops += 1
            parts = [p for p in target.split("/") if p] + parts
            done = "/" if target.startswith("/") else done
        return done


@dataclass
class Plan:
    """What goes where: ``fronts`` (a real path -> the front of grading_bin that takes its
    place) and ``originals`` (a path under :data:`SYSTEM_ORIGINALS` -> the real path whose
    system program it is)."""

    fronts: dict[str, str] = field(default_factory=dict)
    originals: dict[str, str] = field(default_factory=dict)


def plan(files: GuestFiles, python: str, programs: Iterable[str] | None = None, homes_kept: bool = False) -> Plan:
    """The fronts of the guest whose files are ``files`` and whose python is ``python``.
    ``homes_kept``: the originals stay where they are (a process VM's, links into :data:`HOST_USR`),
    so a program whose real file is elsewhere under /usr (java and javac in the JDK's bin, mvn) is
    fronted too: ``/usr/bin/java`` or ``$JAVA_HOME/bin/java`` by its path ran past the wrapper, and
    loaded the answer's service providers from the home (a check that exits 3 passed)."""
    done = Plan()
    for name in fronted_programs() if programs is None else programs:
        real = next((r for r in (files.real(f"{folder}/{name}") for folder in PROGRAM_FOLDERS)
                     if files.is_program(r)), None)
        in_bin = real is not None and files.real(os.path.dirname(real)) in map(files.real, PROGRAM_FOLDERS)
        if real is not None and os.path.basename(real) == name and real not in done.fronts \
                and (in_bin or homes_kept and real.startswith("/usr/")) and name not in FINDS_ITSELF \
                and real != files.real("/bin/sh"):  # a bash that is /bin/sh: the front's own shell
            done.fronts[real] = PROGRAM_FRONT
            done.originals[f"{SYSTEM_ORIGINALS}/{name}"] = real
    site = _sitecustomize(files, python)
    if os.path.basename(site) == "sitecustomize.py" and files.is_program(site):
        done.fronts[site] = SITECUSTOMIZE_FRONT
        done.originals[f"{SYSTEM_ORIGINALS}/sitecustomize.py"] = site
    # the other names of a fronted program (the front runs the original of the name it was run by)
    for folder in dict.fromkeys(files.real(f) for f in NAME_FOLDERS):
        for name in sorted(files.listdir(folder)):
            kept = f"{SYSTEM_ORIGINALS}/{name}"
            if kept not in done.originals and files.readlink(f"{folder}/{name}") is not None:
                real = files.real(f"{folder}/{name}")
                if done.fronts.get(real) == PROGRAM_FRONT:
                    done.originals[kept] = real
    return done


def _sitecustomize(files: GuestFiles, python: str) -> str:
    """The real path of ``python``'s own sitecustomize.py (where it would be)."""
    return files.real(os.path.join(_stdlib(files, python), "sitecustomize.py"))


def _stdlib(files: GuestFiles, python: str) -> str:
    """The real path of ``python``'s standard library's folder (``/usr/lib/python3.11``)."""
    executable = files.real(python)
    return files.real(os.path.join(os.path.dirname(os.path.dirname(executable)), "lib",
                                   os.path.basename(executable)))


def image_encodings(files: GuestFiles, python: str) -> dict[str, bytes]:
    """A guest image's ``python``'s encodings with the grading front (python_front.py) by the
    paths they go at: its source, and where it keeps bytecode and a python of the host is of its
    version, its bytecode and the package's as bytecode alone in the stdlib's zip
    (``/usr/lib/python311.zip``, which the image lacks: python reads it first)."""
    stdlib = _stdlib(files, python)
    folder = os.path.join(stdlib, "encodings")
    module = f"{folder}/__init__.py"
    if not (source := files.read(module)):
        return {}
    fronted = {module: python_front.fronted_source(source)}
    cached = sorted(f"{folder}/__pycache__/{name}" for name in files.listdir(f"{folder}/__pycache__")
                    if re.fullmatch(r"__init__\.[\w-]+\.pyc", name))
    old = files.read(cached[0]) if cached else None
    sources = {**files.read_all(folder, ".py"), **fronted}
    if old and (data := python_front.image_bytecode(sources, old[:4])):
        fronted[cached[0]] = data[module]
        version = os.path.basename(stdlib).removeprefix("python").replace(".", "")
        fronted[f"{os.path.dirname(stdlib)}/python{version}.zip"] = python_front.bytecode_zip("encodings", data)
    return fronted


@functools.lru_cache(maxsize=4)
def host_plan(python: str) -> Plan:
    """The plan of a process VM without its fronts' folder: :data:`AT_BOOT`'s fronts."""
    return plan(GuestFiles(), python, AT_BOOT)


def bwrap_binds(python: str, folder: Path | None = None, encodings: Path | None = None) -> list[str]:
    """A process VM's bwrap options that lay its fronts: ``folder``'s (:func:`prepare`), or
    without one :func:`host_plan` file by file, the originals bound beside the fronts, and
    python's encodings with its front from ``encodings`` (:func:`prepare_encodings`)."""
    if folder is not None:
        return [*sandbox_fs.open_dirs(SYSTEM_ORIGINALS), "--ro-bind", str(folder / "bin"), FRONTED,
                "--ro-bind", str(folder / "originals"), SYSTEM_ORIGINALS, "--ro-bind", "/usr", HOST_USR,
                *_folder_binds(folder)]
    laid = host_plan(os.path.abspath(python))
    binds = sandbox_fs.open_dirs(SYSTEM_ORIGINALS)
    for kept, real in laid.originals.items():
        binds += ["--ro-bind", real, kept]
    for real, front in laid.fronts.items():
        binds += ["--ro-bind", str(GRADING_BIN / front), real]
    return binds + list(_folder_binds(encodings) if encodings is not None else ())


@functools.lru_cache(maxsize=4)
def _folder_binds(folder: Path) -> tuple[str, ...]:
    """binds.json's options, a file of the folder's own (``./…``) by its path."""
    binds = json.loads((folder / "binds.json").read_text(encoding="utf-8"))
    return tuple(str(folder / part[2:]) if part.startswith("./") else part for part in binds)


def mirrored_masks(masks: list[str]) -> list[str]:
    """``sandbox_fs.hidden_masks``' masks of files under /usr again where a process VM's
    fronts' folder shows the host's /usr (:data:`HOST_USR`): hidden there too."""
    found = []
    for at in range(0, len(masks) - 2, 3):
        flag, source, path = masks[at:at + 3]
        if flag == "--ro-bind" and path.startswith("/usr/"):
            found += [flag, source, HOST_USR + path[len("/usr"):]]
    return found


def _code_digest(*paths: str | Path) -> str:
    """A digest of the code that lays the fronts out (this module's, python_front's …)."""
    return hashlib.sha256(b"".join(Path(path).read_bytes() for path in paths)).hexdigest()[:16]


@functools.lru_cache(maxsize=4)
def _made_with(python: str) -> tuple[str, ...]:
    digest = _code_digest(__file__, python_front.__file__, python_front.ENCODINGS_FRONT, python_front.ENCODINGS_HEAD)
    return (python, str(GRADING_BIN), digest, *fronted_programs())


def folder_key(python: str) -> str:
    """What a fronts' folder is made from: the python, the wrappers' place, this code, and
    when the folders the plan reads last changed (a program installed since: a new folder)."""
    times = []
    encodings = os.path.join(_stdlib(GuestFiles(), python), "encodings", "__init__.py")
    for path in dict.fromkeys((*map(os.path.realpath, (*PROGRAM_FOLDERS, *NAME_FOLDERS, FRONTED)),
                               _sitecustomize(GuestFiles(), python), encodings)):
        try:
            times.append(os.stat(path).st_mtime_ns)
        except OSError:
            times.append(0)
    made_from = (*_made_with(python), *times)
    return hashlib.sha256(repr(made_from).encode()).hexdigest()[:16]


def prepare(python: str, base: Path) -> Path | None:
    """A process VM's fronts' folder under ``base`` for the guest's ``python``, made now if
    it is not there (or the host's programs changed since: :func:`folder_key`); None, and a
    warning, when it cannot be made. Removes the others no provider used for a week."""
    python = os.path.abspath(python)
    if os.path.realpath(FRONTED) != FRONTED:
        return None
    folder = base / FOLDERS / folder_key(python)
    return agent_folder.made_and_pruned(folder, lambda scratch: _make(scratch, python),
                                        "the grading fronts' folder could not be made (%s%s): a process VM "
                                        "fronts env, git and python only")


def prepare_encodings(python: str, base: Path) -> Path | None:
    """A process VM's folder of the guest ``python``'s encodings with its front alone, under
    ``base``: what a sandbox binds where :func:`prepare` could make no fronts' folder, whose
    VMs had the host's encodings, no front (the answer's .pth, its pycs in a check's cache
    folder, ran in a check's python); None, and a warning, when it cannot be made either."""
    python = os.path.abspath(python)
    return agent_folder.made(base / FOLDERS / f"encodings-{folder_key(python)}",
                             lambda scratch: _write_binds(scratch, _encodings_binds(python, scratch)),
                             "python's encodings front could not be made either (%s%s)")


def _encodings_binds(python: str, scratch: Path, *usr_again: str) -> list[str]:
    """python's encodings with its front (python_front.py), bytecode alone, written into
    ``scratch``: its binds over the package by /usr and by each of ``usr_again``."""
    return [arg for name, real in python_front.write_fronted(python, scratch) for usr in ("/usr", *usr_again)
            for arg in ("--ro-bind", f"./{name}", usr + real[len("/usr"):])]


def _write_binds(scratch: Path, binds: list[str]) -> None:
    """``scratch``'s binds.json (:func:`_folder_binds`), ``scratch`` readable by every user."""
    (scratch / "binds.json").write_text(json.dumps(binds), encoding="utf-8")
    os.chmod(scratch / "binds.json", 0o644)
    os.chmod(scratch, 0o755)


def current(folder: Path, python: str) -> bool:
    """Whether ``folder`` (:func:`prepare`'s) is there and made from the host's programs as
    they are: a boot's check (a few stats)."""
    return folder.name == folder_key(os.path.abspath(python)) and folder.is_dir()


def _make(scratch: Path, python: str) -> None:
    """The folder's ``bin`` (laid over FRONTED), ``originals`` (at SYSTEM_ORIGINALS) and
    ``binds.json``: what the boots bind into them as it is."""
    laid = plan(GuestFiles(), python, homes_kept=True)
    bin_dir, originals = scratch / "bin", scratch / "originals"
    (originals / HOST_USR.rsplit("/", 1)[1]).mkdir(parents=True)
    bin_dir.mkdir()
    binds: list[str] = []
    for entry in os.scandir(FRONTED):
        path = bin_dir / entry.name
        if laid.fronts.get(entry.path) == PROGRAM_FRONT:
            os.symlink(f"{images.GUEST_GRADING_BIN}/{PROGRAM_FRONT}", path)
        elif entry.is_symlink():
            os.symlink(os.readlink(entry.path), path)
        elif entry.is_file() and (BOUND_AS_THEY_ARE.fullmatch(entry.name)
                                  or entry.path == os.path.realpath(python)):
            path.touch()  # where it is bound
            os.chmod(path, 0o644)
            binds += ["--ro-bind", entry.path, entry.path]
        else:
            os.symlink(f"{HOST_USR}{entry.path[len('/usr'):]}", path)
    for kept, real in laid.originals.items():
        path = originals / os.path.basename(kept)
        if real.startswith("/usr/"):
            os.symlink(HOST_USR.rsplit("/", 1)[1] + real[len("/usr"):], path)
        elif laid.fronts.get(real) == SITECUSTOMIZE_FRONT:  # read, not run: a copy, a bind the fewer
            shutil.copyfile(real, path)
            os.chmod(path, 0o644)
        else:
            path.touch()
            os.chmod(path, 0o644)
            binds += ["--ro-bind", real, kept]
    for real, front in laid.fronts.items():
        if os.path.dirname(real) != FRONTED:
            binds += ["--ro-bind", str(GRADING_BIN / front), real]
    binds += _encodings_binds(python, scratch, HOST_USR)  # by /usr and by the host's /usr here
    for folder in (bin_dir, originals, originals / HOST_USR.rsplit("/", 1)[1]):
        os.chmod(folder, 0o755)
    _write_binds(scratch, binds)


def _front_file(front: str) -> tuple[bytes, int]:
    path = GRADING_BIN / front
    return path.read_bytes(), 0o755 if os.access(path, os.X_OK) else 0o644


def install_in_tree(tree: Path, python: str = "/usr/bin/python3") -> Plan:
    """Lay the plan in a guest image's tree (the qemu image's): each original moved to
    :data:`SYSTEM_ORIGINALS`, its front written in its place, its other names links to it."""
    laid = plan(GuestFiles(str(tree)), python)
    kept_dir = tree / SYSTEM_ORIGINALS.lstrip("/")
    kept_dir.mkdir(parents=True, exist_ok=True)
    moved: dict[str, str] = {}
    for kept, real in laid.originals.items():
        if real not in moved:
            shutil.move(str(tree / real.lstrip("/")), str(tree / kept.lstrip("/")))
            moved[real] = os.path.basename(kept)
        else:
            os.symlink(moved[real], tree / kept.lstrip("/"))
    for real, front in laid.fronts.items():
        data, mode = _front_file(front)
        path = tree / real.lstrip("/")
        path.write_bytes(data)
        path.chmod(mode)
    for path, data in image_encodings(GuestFiles(str(tree)), python).items():
        (tree / path.lstrip("/")).write_bytes(data)
    return laid


def tarball_files(tarball: Path, python: str = "/usr/bin/python3") -> dict[str, tuple[bytes | str, int]]:
    """The plan of a guest image's tarball (the docker image's) as extra files for
    ``images.copy_with_extra_files``: the fronts in the originals' places, each original at
    :data:`SYSTEM_ORIGINALS` with its mode, its other names links to it (a str content)."""
    files = GuestFiles(tarball=tarball)
    laid = plan(files, python)
    extra: dict[str, tuple[bytes | str, int]] = {real: _front_file(front) for real, front in laid.fronts.items()}
    first: dict[str, str] = {}
    with tarfile.open(tarball) as archive:
        for kept, real in laid.originals.items():
            if real in first:
                extra[kept] = (first[real], 0o777)
                continue
            member = files.members[real]  # type: ignore[index]
            handle = archive.extractfile(member)
            extra[kept] = (handle.read() if handle else b"", stat.S_IMODE(member.mode))
            first[real] = os.path.basename(kept)
    extra.update((path, (data, 0o644)) for path, data in image_encodings(files, python).items())
    return extra


def image_key() -> tuple[str, ...]:
    """What an image's cache key takes of the fronts: the programs given one and this module's
    code (the fronts' own contents are the guest package's digest): a built image laid out
    otherwise is rebuilt, never silently stale."""
    return ("grading-fronts", _code_digest(__file__, python_front.__file__), *fronted_programs())
