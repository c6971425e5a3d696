"""The guest python's ``encodings`` package with the grading front at its end, as bytecode laid
over that module's own: bound by a process VM (``grading_fronts.prepare`` makes it with the fronts'
folder), written into the docker and qemu images (``grading_fronts.tarball_files``,
``install_in_tree``).

Python imports ``encodings`` as it starts, before ``site``; ``site`` runs each line beginning
with ``import`` of a ``.pth`` file of the user site (``~/.local/lib/python3.X/site-packages``)
before any ``sitecustomize.py``. A grading command's python run with an environment of its own
(a check's ``subprocess.run(["python3", …], env={})`` or ``env={"HOME": home}``, bash's
``exec -c``) has no PYTHONNOUSERSITE, and the answer's ``.pth`` of ``import os; os._exit(0)``
passed its check before the sitecustomize.py front could start it again with the grading names.
``grading_bin/encodings_front.py``, compiled after the module's own source, starts it again
there (by its session, as the sitecustomize.py front does); any other python pays one stat.

The bytecode is an unchecked hash-based pyc (PEP 552): python takes it without looking at the
source's times, and its hash is the source's own, so ``--check-hash-based-pycs always`` takes it
too. Left as it is: a python that reads its bytecode elsewhere (``PYTHONPYCACHEPREFIX``, ``-X
pycache_prefix``), one whose cached file the guest lacks (a process VM cannot bind over a file
that is not there), and in an image a python of another version than the host's (its bytecode is
compiled by the host's python: the same magic number, or none).
"""

from __future__ import annotations

import logging
import subprocess
import sys
import tempfile
from pathlib import Path

from . import images, sandbox_fs

log = logging.getLogger(__name__)

#: the front's source, in grading_bin
ENCODINGS_FRONT = images.GUEST_SOURCE_DIR / "grading_bin" / "encodings_front.py"
#: seconds a python may take to compile it
COMPILE_TIMEOUT_S = 30
#: run by a python (-I -S): the front, the module's source, where the bytecode goes, the module's
#: path in the guest (its code's file name)
_COMPILE = """\
import importlib.util, marshal, sys
front, source, out, name = sys.argv[1:5]
with open(source, "rb") as handle:
    source = handle.read()
with open(front, "rb") as handle:
    front = handle.read()
code = compile(source + b"\\n" + front, name, "exec")
flags = (1).to_bytes(4, "little")  # hash-based, unchecked
header = importlib.util.MAGIC_NUMBER + flags + importlib.util.source_hash(source)
with open(out, "wb") as handle:
    handle.write(header + marshal.dumps(code))
"""
#: run by the guest python (-I -S): its encodings' source and cached paths, a line each
_WHERE = "import encodings, importlib.util as u; print(encodings.__file__); print(u.cache_from_source(encodings.__file__))"


def _compile(python: str, source: Path, name: str, out: Path) -> None:
    subprocess.run([python, "-I", "-S", "-c", _COMPILE, str(ENCODINGS_FRONT), str(source), str(out), name],
                   capture_output=True, timeout=COMPILE_TIMEOUT_S, check=True)


def write_bytecode(python: str, out: Path) -> str | None:
    """The host's ``python``'s encodings with the front, as bytecode written to ``out`` (a process
    VM's); the path of the module's own bytecode, where it goes, or None (and a warning where
    ``python`` cannot compile it) when there is none to lay: bwrap cannot make a file in the
    read-only ``/usr``."""
    try:
        where = subprocess.run([python, "-I", "-S", "-c", _WHERE], capture_output=True, timeout=COMPILE_TIMEOUT_S,
                               check=True).stdout.decode(errors="replace").split()
        if len(where) != 2 or not where[1].startswith("/usr/") or not Path(where[1]).is_file():
            return None
        _compile(python, Path(where[0]), where[0], out)
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning("%s's encodings could not be compiled with the grading front (%s): a grading command's "
                    "python run with an environment of its own reads a .pth of the answer's", python, exc)
        return None
    out.chmod(0o644)
    return where[1]


def image_bytecode(source: bytes, magic: bytes, name: str) -> bytes | None:
    """A guest image's encodings (``source``, at ``name`` in the guest) with the front, as
    bytecode of the python whose bytecode begins with ``magic``; None when no python of the host
    is of its version, or none compiles it."""
    with tempfile.TemporaryDirectory(prefix="pr-encodings-") as scratch:
        (Path(scratch) / "source.py").write_bytes(source)
        for python in dict.fromkeys(p for p in (sandbox_fs.guest_python(), sys.executable) if p):
            out = Path(scratch) / "out.pyc"
            try:
                _compile(python, Path(scratch) / "source.py", name, out)
                data = out.read_bytes()
            except (OSError, subprocess.SubprocessError):
                continue
            if data[:4] == magic:
                return data
    return None
