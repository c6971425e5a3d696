"""The guest agent's folder of a process sandbox, made once per provider: the agent's
modules, their bytecode compiled by the guest's python, and the grading wrappers, in one
folder a sandbox binds read-only where the agent lives (``/opt/parallel-rollout``).

**One bind, not nine.** Bound file by file, the agent's seven modules, their ``__pycache__``
and the grading wrappers were nine of a sandbox's 35 mounts, and bubblewrap reads the whole
mount table again after each bind it makes (to remount what lies below it): ~2 ms of the
machine's CPU and of the boot's time per sandbox (``benchmarks/perf/README.md``). A desktop
sandbox still binds its modules one by one beside the agent's (the folder is read-only,
so nothing can be bound into it), with the folder's ``__pycache__``; so does one whose
folder lies on a file system mounted ``noexec`` (a hardened /tmp), where the wrappers could
not run (``sandbox_argv.agent_binds``).

**Bytecode.** The modules are compiled by the guest's python (its own cache tag and magic
number), so a boot loads them instead of compiling ~1,400 lines again (~5 ms of CPU per
reset); the desktop's modules (``AgentFiles.others``) are compiled into the same
``__pycache__``, where, with no source beside them, nothing but a desktop sandbox's imports
find them.

**Kept between runs.** Folders live under ``<base>/.agent-bytecode/<key>``, the key made of
the interpreter and each file's path, size and time: a changed source gets a new folder, and
a run keeps the one it started with. Each boot marks its folder used (its time) and makes it
again if it went; another provider removes the folders no boot used for a week. A folder
that cannot be made (a source python cannot compile, a full disk) leaves the sandboxes to
bind the package's files and compile them at each boot, as they did before it, with a
warning.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

#: seconds after its last boot that another provider removes an agent's folder
KEEP_S = 7 * 86400
#: under the provider's base folder: not a run's name, so sweeps pass it by
FOLDERS = ".agent-bytecode"

#: run by the guest's python: each module's bytecode into the folder's __pycache__
_COMPILE = """import importlib.util, os, py_compile, sys
cache = os.path.join(sys.argv[1], "__pycache__")
for src in sys.argv[2:]:
    name = os.path.basename(importlib.util.cache_from_source(src))
    py_compile.compile(src, cfile=os.path.join(cache, name), doraise=True)
"""


@dataclass(frozen=True)
class AgentFiles:
    """What an agent's folder is made of."""

    #: the guest's python3, which compiles the modules
    python: str
    #: copied in and compiled: the agent's modules
    modules: tuple[Path, ...]
    #: compiled only: modules a desktop sandbox binds beside the folder's
    others: tuple[Path, ...] = ()
    #: copied in whole, by name: the grading wrappers
    dirs: tuple[Path, ...] = ()

    def key(self) -> str:
        """What the folder was made from: the interpreter and every file's path, size, time."""
        files = [*self.modules, *self.others, *(f for d in self.dirs for f in sorted(d.rglob("*")))]
        made_from = [(self.python, os.stat(self.python).st_mtime_ns)]
        made_from += [(str(f), st.st_size, st.st_mtime_ns) for f in files for st in [f.stat()]]
        return hashlib.sha256(repr(made_from).encode()).hexdigest()[:16]


def prepare(files: AgentFiles, base: Path) -> Path | None:
    """The folder made of ``files`` under ``base`` (made now if it is not there yet); None,
    and a warning, when it cannot be made. Removes the others no boot used for KEEP_S."""
    folder = base / FOLDERS / files.key()
    made = use(folder, files)
    if made is not None:
        prune(folder)
    return made


def use(folder: Path, files: AgentFiles) -> Path | None:
    """``folder`` marked as used now (its time: what the pruning of other providers reads),
    made again if it is gone; None, and a warning, when it cannot be made."""
    return made(folder, lambda scratch: _make(scratch, files),
                "the agent's folder could not be made (%s%s): each sandbox binds its files and compiles them")


def made(folder: Path, make, warning: str) -> Path | None:
    """``folder`` marked as used now, or made by ``make(scratch)`` in a scratch folder beside
    it and renamed; None, and ``warning`` (its error, its output), when it cannot be made."""
    try:
        os.utime(folder)
        return folder
    except OSError:  # not there, or a file in the way (making it then says why)
        pass
    # a scratch of this call's own: one named by the pid alone was another boot thread's too
    # (each removed the other's), or one an interrupted run() left to the next of the process
    scratch = None
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
        make(scratch)
        os.rename(scratch, folder)
        scratch = None
    except (OSError, subprocess.SubprocessError) as exc:
        if folder.is_dir():  # another provider made it first
            return folder
        detail = getattr(exc, "stderr", b"") or b""
        log.warning(warning, exc, f": {detail.decode(errors='replace').strip()}" if detail else "")
        return None
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    return folder


def made_and_pruned(folder: Path, make, warning: str) -> Path | None:
    """:func:`made`, then the folders beside it that no provider used for KEEP_S removed."""
    kept = made(folder, make, warning)
    if kept is not None:
        prune(kept)
    return kept


def _make(scratch: Path, files: AgentFiles) -> None:
    """The folder's content in ``scratch``: files 0644 (0755 where the source may be run),
    folders 0755, whatever the umask or the checkout's modes: the commands' user reads the
    wrappers and runs them."""
    for module in files.modules:
        _copy(module, scratch / module.name)
    for source in files.dirs:
        shutil.copytree(source, scratch / source.name, copy_function=_copy)
    cache = scratch / "__pycache__"
    cache.mkdir()
    subprocess.run([files.python, "-I", "-S", "-c", _COMPILE, str(scratch),
                    *(str(scratch / m.name) for m in files.modules), *map(str, files.others)],
                   check=True, capture_output=True, timeout=60)
    for compiled in cache.iterdir():
        os.chmod(compiled, 0o644)
    for folder in [scratch, *(p for p in scratch.rglob("*") if p.is_dir())]:
        os.chmod(folder, 0o755)


def _copy(source: Path | str, target: Path | str) -> None:
    """``source`` copied with its times (the bytecode records a module's: it stays valid for
    the package's own file too, where a sandbox binds that one: a desktop's, a noexec
    folder's) and mode 0755 where it may be run, else 0644."""
    shutil.copy2(source, target)
    os.chmod(target, 0o755 if os.stat(source).st_mode & 0o111 else 0o644)


def prune(keep: Path) -> None:
    """Remove the folders beside ``keep`` that no boot used for KEEP_S (a pool still running
    with one marks it at each boot, and makes it again if it went)."""
    old = time.time() - KEEP_S
    for folder in keep.parent.iterdir():
        try:
            if folder != keep and folder.stat().st_mtime < old:
                shutil.rmtree(folder)
        except OSError:  # another provider removed it first
            pass
