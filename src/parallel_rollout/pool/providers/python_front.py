"""The guest python's ``encodings`` package with the grading front at its end, as its source and
bytecode laid over that module's own: bound by a process VM (``grading_fronts.prepare`` makes them
with the fronts' folder), written into the docker and qemu images (``grading_fronts.tarball_files``,
``install_in_tree``).

Python imports ``encodings`` as it starts, before ``site``; ``site`` runs each line beginning
with ``import`` of a ``.pth`` file of the user site (``~/.local/lib/python3.X/site-packages``)
before any ``sitecustomize.py``. A grading command's python run with an environment of its own
(a check's ``subprocess.run(["python3", …], env={})`` or ``env={"HOME": home}``, bash's
``exec -c``) has no PYTHONNOUSERSITE, and the answer's ``.pth`` of ``import os; os._exit(0)``
passed its check before the sitecustomize.py front could start it again with the grading names.
``grading_bin/encodings_front.py``, appended to the module's own source, starts it again there
(by its session, as the sitecustomize.py front does); any other python pays one stat.

The bytecode is an unchecked hash-based pyc (PEP 552) of the fronted source: python takes it
without looking at the source, and its hash is that source's, so ``--check-hash-based-pycs
always`` takes it too. A python that reads its bytecode elsewhere (``PYTHONPYCACHEPREFIX``, ``-X
pycache_prefix``: a check's own folder), or finds none, compiles the fronted source: the front
runs there too (the answer's ``.pth`` passed such a check before the source had it). Left as it
is: in an image, a python other than the guest's (each has its own ``encodings``; the images
hold none, Debian's bookworm has python3.11 alone).
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
#: run by a python (-I -S): the fronted source, where its bytecode goes, the module's path in the
#: guest (its code's file name)
_COMPILE = """\
import importlib.util, marshal, sys
source, out, name = sys.argv[1:4]
with open(source, "rb") as handle:
    source = handle.read()
flags = (1).to_bytes(4, "little")  # hash-based, unchecked
header = importlib.util.MAGIC_NUMBER + flags + importlib.util.source_hash(source)
with open(out, "wb") as handle:
    handle.write(header + marshal.dumps(compile(source, name, "exec")))
"""
#: run by the guest python (-I -S): its encodings' source and cached paths, a line each
_WHERE = "import encodings, importlib.util as u; print(encodings.__file__); print(u.cache_from_source(encodings.__file__))"


def fronted_source(source: bytes) -> bytes:
    """The module's own ``source`` with the front at its end."""
    return source + b"\n" + ENCODINGS_FRONT.read_bytes()


def _compile(python: str, source: Path, name: str, out: Path) -> None:
    subprocess.run([python, "-I", "-S", "-c", _COMPILE, str(source), str(out), name],
                   capture_output=True, timeout=COMPILE_TIMEOUT_S, check=True)


def write_fronted(python: str, folder: Path) -> list[tuple[str, str]]:
    """The host's ``python``'s encodings with the front, its source and bytecode written into
    ``folder`` (a process VM's fronts' folder): (file name in ``folder``, the module's own file
    it goes over), none where the module is not under ``/usr`` (bwrap cannot make a file in the
    read-only ``/usr``, nor bind over one that is not there), the bytecode left out (and a
    warning) where ``python`` cannot compile it."""
    try:
        where = subprocess.run([python, "-I", "-S", "-c", _WHERE], capture_output=True, timeout=COMPILE_TIMEOUT_S,
                               check=True).stdout.decode(errors="replace").split()
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning("%s's encodings could not be found (%s): a grading command's python run with an "
                    "environment of its own reads a .pth of the answer's", python, exc)
        return []
    if len(where) != 2 or not where[0].startswith("/usr/") or not Path(where[0]).is_file():
        return []
    (folder / "encodings.py").write_bytes(fronted_source(Path(where[0]).read_bytes()))
    laid = [("encodings.py", where[0])]
    if where[1].startswith("/usr/") and Path(where[1]).is_file():
        try:
            _compile(python, folder / "encodings.py", where[0], folder / "encodings.pyc")
            laid.append(("encodings.pyc", where[1]))
        except (OSError, subprocess.SubprocessError) as exc:
            log.warning("%s's encodings could not be compiled with the grading front (%s): its python "
                        "compiles the fronted source as it starts", python, exc)
    for name, _ in laid:
        (folder / name).chmod(0o644)
    return laid


def image_bytecode(source: bytes, magic: bytes, name: str) -> bytes | None:
    """A guest image's fronted encodings (``source``: :func:`fronted_source`'s, at ``name`` in the
    guest) as bytecode of the python whose bytecode begins with ``magic``; None when no python
    of the host is of its version, or none compiles it."""
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
