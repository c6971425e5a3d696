"""The guest python's ``encodings`` package with the grading front at its end: in a process VM a
folder of the package's bytecode alone, bound over the module's own (``grading_fronts.prepare``
makes it with the fronts' folder); in the docker and qemu images its source and bytecode
(``grading_fronts.tarball_files``, ``install_in_tree``).

Python imports ``encodings`` as it starts, before ``site``; ``site`` runs each line beginning
with ``import`` of a ``.pth`` file of the user site (``~/.local/lib/python3.X/site-packages``)
before any ``sitecustomize.py``. A grading command's python run with an environment of its own
(a check's ``subprocess.run(["python3", …], env={})`` or ``env={"HOME": home}``, bash's
``exec -c``) has no PYTHONNOUSERSITE, and the answer's ``.pth`` of ``import os; os._exit(0)``
passed its check before the sitecustomize.py front could start it again with the grading names.
``grading_bin/encodings_front.py``, appended to the module's own source, starts it again there
(by its session, as the sitecustomize.py front does); any other python pays one stat.

A python that reads its bytecode elsewhere (``PYTHONPYCACHEPREFIX``, ``-X pycache_prefix``: a
folder of the check's) read there a timestamp pyc of ``encodings`` whose date and size the
answer made its source's, where it could guess the folder (``/tmp/pyc``): before any front, so
its ``os._exit(0)`` passed the check. A package of bytecode alone (PEP 3147's ``__init__.pyc``
beside no source) is read as it is, never from such a folder; the front then keeps a grading
python from reading there bytecode written before the grading command began (the module's
others, ``sitecustomize``'s: ``grading_bin/graded_imports.py``). In the images (their own
source and bytecode, an unchecked hash-based pyc of the fronted source: ``--check-hash-based-pycs
always`` takes it too) a python that reads its bytecode elsewhere compiles the fronted source, or
reads such a pyc. Under ``-X frozen_modules=off`` python reads its startup modules from their
sources (``codecs``, which ``encodings`` imports first; ``os``, ``site`` …), and their bytecode
from such a folder, before the front at the end: the answer's pycs of them ran (``os._exit(0)``
passed the check). ``grading_bin/encodings_head.py``, put before the module's first import, sets
a grading python's folder aside (the stdlib's own bytecode is read) until the end has laid
those rules. Left as it is: in an image, a python other than the guest's (each has its own
``encodings``; the images hold none, Debian's bookworm has python3.11 alone).
"""

from __future__ import annotations

import io
import logging
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from . import images, sandbox_fs

log = logging.getLogger(__name__)

#: the front's source, in grading_bin: its end, and its head (before the module's first import)
ENCODINGS_FRONT = images.GUEST_SOURCE_DIR / "grading_bin" / "encodings_front.py"
ENCODINGS_HEAD = images.GUEST_SOURCE_DIR / "grading_bin" / "encodings_head.py"
#: seconds a python may take to compile it
COMPILE_TIMEOUT_S = 30
#: run by a python (-I -S): for each module, its source, where its bytecode goes and its path in the
#: guest (its code's file name), three words
_COMPILE = """\
import importlib.util, marshal, sys
words = sys.argv[1:]
for source, out, name in zip(words[::3], words[1::3], words[2::3]):
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
    """The module's own ``source`` with the front's head before its first import (after its
    docstring) and the front at its end."""
    first = re.search(rb"^(import|from) ", source, re.MULTILINE)
    at = first.start() if first else 0
    return source[:at] + ENCODINGS_HEAD.read_bytes() + source[at:] + b"\n" + ENCODINGS_FRONT.read_bytes()


def _compile(python: str, *modules: tuple[Path, Path, str]) -> None:
    """Each of ``modules`` (its source, its bytecode's file, its path in the guest) compiled by ``python``."""
    subprocess.run([python, "-I", "-S", "-c", _COMPILE, *(str(word) for module in modules for word in module)],
                   capture_output=True, timeout=COMPILE_TIMEOUT_S, check=True)


def write_fronted(python: str, folder: Path) -> list[tuple[str, str]]:
    """The host's ``python``'s encodings package with the front, as bytecode alone, written into
    ``folder`` (a process VM's fronts' folder) as ``encodings``: (its name in ``folder``, the
    package's folder it goes over); none where the package is not under ``/usr`` (bwrap cannot
    bind over what is not there), or (a warning) where ``python`` cannot compile it."""
    try:
        where = subprocess.run([python, "-I", "-S", "-c", _WHERE], capture_output=True, timeout=COMPILE_TIMEOUT_S,
                               check=True).stdout.decode(errors="replace").split()
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning("%s's encodings could not be found (%s): a grading command's python run with an "
                    "environment of its own reads a .pth of the answer's", python, exc)
        return []
    if len(where) != 2 or not where[0].startswith("/usr/") or not Path(where[0]).is_file():
        return []
    package = Path(where[0]).parent
    laid = folder / "encodings"
    laid.mkdir()
    fronted = folder / "encodings.py"
    fronted.write_bytes(fronted_source(Path(where[0]).read_bytes()))
    modules = [(fronted if source.name == "__init__.py" else source, laid / (source.stem + ".pyc"), str(source))
               for source in sorted(package.glob("*.py"))]
    try:
        _compile(python, *modules)
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning("%s's encodings could not be compiled with the grading front (%s): a grading command's "
                    "python run with an environment of its own reads a .pth of the answer's", python, exc)
        return []
    finally:
        fronted.unlink()
    for _, pyc, _ in modules:
        pyc.chmod(0o644)
    laid.chmod(0o755)
    return [("encodings", str(package))]


def image_bytecode(sources: dict[str, bytes], magic: bytes) -> dict[str, bytes] | None:
    """A guest image's modules (their paths in the guest -> their sources, the fronted encodings'
    :func:`fronted_source`'s) as bytecode of the python whose bytecode begins with ``magic``, by
    the same paths; None when no python of the host is of its version, or none compiles them."""
    with tempfile.TemporaryDirectory(prefix="pr-encodings-") as scratch:
        modules = []
        for number, (name, source) in enumerate(sources.items()):
            (Path(scratch) / f"{number}.py").write_bytes(source)
            modules.append((Path(scratch) / f"{number}.py", Path(scratch) / f"{number}.pyc", name))
        for python in dict.fromkeys(p for p in (sandbox_fs.guest_python(), sys.executable) if p):
            try:
                _compile(python, *modules)
                data = {name: out.read_bytes() for _, out, name in modules}
            except (OSError, subprocess.SubprocessError):
                continue
            if all(code[:4] == magic for code in data.values()):
                return data
    return None


def bytecode_zip(package: str, bytecode: dict[str, bytes]) -> bytes:
    """A zip of ``package``'s ``bytecode`` alone (a module's guest path -> its bytecode), as
    ``package/<module>.pyc``: the guest image's ``/usr/lib/python3X.zip``, first on every python's
    ``sys.path``, whose ``encodings`` python reads as it starts, never from a folder of the check's
    ``pycache_prefix``. Its dates are fixed: the same image's zip is the same."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as archive:
        for name, code in sorted(bytecode.items()):
            entry = zipfile.ZipInfo(f"{package}/{os.path.splitext(os.path.basename(name))[0]}.pyc", (1980, 1, 1, 0, 0, 0))
            entry.external_attr = 0o644 << 16
            archive.writestr(entry, code)
    return out.getvalue()
