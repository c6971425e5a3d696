"""What a grading command's python imports from the folders the graded code writes (the home,
whatever HOME the check gives it, ./graded_folders: /tmp, /var/tmp, /dev/shm, /run/lock … and
below), installed by ./sitecustomize.py as it starts.

Two ways the graded code's files were imported in place of the check's own, under the name of
a module the check wrote there (`cd ~ && python3 -m unittest discover -p test_check.py` of
its `~/test_check.py`, `cd ~ && pytest test_check.py`), and its `os._exit(0)` passed failing
tests:

- a module beside it that Python finds first under that name: a package (`~/test_check/`
  with an `__init__.py`) or an extension module (`~/test_check.so`, whose constructor runs as
  it loads). A source file the check wrote (its ctime since the grading command began,
  `PARALLEL_ROLLOUT_GRADING_SINCE`) is imported before one the graded code left beside it;
  a module of the graded code's own (`import fast` of its `~/fast.so`) is imported as ever.
- bytecode in `__pycache__` that Python reads without comparing it to its source (a pyc of
  PEP 552's unchecked hashes), or whose date and size were made to match: bytecode older
  (by ctime, which no user can set back) than its source is not read there, and the source
  is compiled. A cache written after its source (a virtualenv's, pip's) is read as ever. So
  with pytest's own cache of the tests it rewrites (`__pycache__/test_check.*-pytest-*.pyc`),
  which it takes when the source's mtime and size match, numbers the graded code can write.
  Bytecode read from a folder of the check's choosing (``PYTHONPYCACHEPREFIX``, ``-X
  pycache_prefix``), not beside its source, is read only if written since the grading command
  began: where the graded code could guess the folder (``/tmp/pyc``) it left there pycs of
  ``sitecustomize``, of these wrappers', of a stdlib module, their date and size the source's.
  ./encodings_front.py keeps to that from python's start (:func:`guard_bytecode`).
"""

import os

from _frozen_importlib_external import (BYTECODE_SUFFIXES, EXTENSION_SUFFIXES, SOURCE_SUFFIXES, ExtensionFileLoader,
                                        FileFinder, SourceFileLoader, SourcelessFileLoader, spec_from_file_location)

_TOPS = []


def homes():
    """The graded code's home, real: HOME, and the home the grading environment named
    (``PARALLEL_ROLLOUT_GRADED_HOME``), which a check's own HOME does not move: with its
    ``HOME=/nonexistent`` (or ``env -u HOME``) the home was no folder of the graded code's, and
    its ~/test_check/ package was what the check's ~/test_check.py imported."""
    found = (os.environ.get("HOME", ""), os.environ.get("PARALLEL_ROLLOUT_GRADED_HOME", ""))
    return list(dict.fromkeys(os.path.realpath(home) for home in found if home))


def writable_folders(listed=os.path.join(os.path.dirname(os.path.abspath(__file__)), "graded_folders")):
    """The folders every user may write (``listed``, ./graded_folders: one a line), real."""
    with open(listed) as lines:
        return list(dict.fromkeys(os.path.realpath(line.strip()) for line in lines if line.startswith("/")))


def _graded(path):
    """Whether ``path`` (a real path) is in a folder the graded code writes."""
    if not _TOPS:
        _TOPS.extend([*writable_folders(), *homes()])
    return any(path == top or path.startswith(top + "/") for top in _TOPS)


def _since_ns():
    """The grading command's start, in ns (None outside one)."""
    since = os.environ.get("PARALLEL_ROLLOUT_GRADING_SINCE", "")
    seconds, _, nanos = since.partition(".")
    if not (seconds.isdigit() and nanos.isdigit()):
        return None
    return int(seconds) * 10**9 + int(nanos.ljust(9, "0")[:9])


def _by_the_check(path, since, written=False):
    """``path`` is there and was changed since the grading command began (its ctime); with
    ``written``, was written since, as ./wrap.sh's made_by_the_check says it: its mtime since,
    its ctime no earlier, one name. What shadows the check's source, or is its bytecode, is
    the check's only so: by its ctime alone, a check's own ``chmod -R go-w ~`` (``chown``)
    dated the answer's ~/test_check/__init__.py, or its bytecode of ~/test_check.py, since."""
    try:
        status = os.stat(path)
    except OSError:
        return False
    if not written:
        return status.st_ctime_ns >= since
    return status.st_mtime_ns >= since and status.st_ctime_ns >= status.st_mtime_ns and status.st_nlink == 1


class _GradedFolderFinder(FileFinder):
    """A folder's finder that imports the check's own source before what shadows it."""

    def find_spec(self, fullname, target=None):
        spec = super().find_spec(fullname, target)
        since = _since_ns()
        if spec is None or spec.origin is None or since is None:
            return spec
        tail = fullname.rpartition(".")[2]
        for suffix in SOURCE_SUFFIXES:
            source = os.path.join(self.path, tail + suffix)
            if (os.path.abspath(spec.origin) != os.path.abspath(source) and _by_the_check(source, since)
                    and not _by_the_check(spec.origin, since, written=True)):
                return spec_from_file_location(fullname, source, loader=SourceFileLoader(fullname, source))
        return spec


def _folder_hook(path):
    """sys.path_hooks' entry: a :class:`_GradedFolderFinder` for a folder the graded code writes."""
    folder = os.path.realpath(path or ".")
    if not _graded(folder) or not os.path.isdir(folder):
        raise ImportError("not a folder of the graded code's")
    return _GradedFolderFinder(path or ".", (ExtensionFileLoader, EXTENSION_SUFFIXES),
                               (SourceFileLoader, SOURCE_SUFFIXES), (SourcelessFileLoader, BYTECODE_SUFFIXES))


def _stale(bytecode, source):
    """``bytecode``, in a graded folder, is older than its ``source`` (by ctime), or was not
    written by the grading command where its source was changed by it; or, in a folder of the
    check's choosing (not the source's ``__pycache__``), was not written by the grading command."""
    since = _since_ns()
    if since is not None and os.path.dirname(bytecode) != os.path.join(os.path.dirname(source), "__pycache__"):
        return not _by_the_check(bytecode, since, written=True)  # in the check's cache folder (pycache_prefix)
    if not _graded(os.path.realpath(bytecode)):
        return False
    if since is not None and _by_the_check(source, since) and not _by_the_check(bytecode, since, written=True):
        return True
    try:
        return os.stat(bytecode).st_ctime_ns < os.stat(source).st_ctime_ns
    except OSError:
        return False  # the reader says why


#: Python's own (this file may run twice: as ./encodings_front.py's, then as a module)
_read = getattr(SourceFileLoader.get_data, "unguarded", SourceFileLoader.get_data)


def _get_data(self, path):
    """SourceFileLoader's get_data, but no bytecode older than its source in a graded folder,
    nor from the check's cache folder older than the grading command."""
    if path != self.path and path.endswith(tuple(BYTECODE_SUFFIXES)) and _stale(path, self.path):
        raise OSError(f"{path}: bytecode older than its source {self.path} or the grading command, not read in it")
    return _read(self, path)


_get_data.unguarded = _read


def guard_bytecode():
    """Python's source loader reads no bytecode :func:`_stale` names (./encodings_front.py's,
    for what python imports before ./sitecustomize.py)."""
    SourceFileLoader.get_data = _get_data


def fresh_pytest_cache(rewrite):
    """``_pytest.assertion.rewrite``, loaded: its ``_read_pyc(source, pyc)`` reads no cache older
    than its source in a graded folder (./sitecustomize.py calls it as pytest loads)."""
    read = getattr(rewrite, "_read_pyc", None)
    if read is None:
        return

    def fresh_read_pyc(source, pyc, *rest, **named):
        return None if _stale(os.fspath(pyc), os.fspath(source)) else read(source, pyc, *rest, **named)
    rewrite._read_pyc = fresh_read_pyc


def install(path_hooks, importer_cache):
    """Put the rules above before Python's own, for every folder not yet imported from (once:
    ./module_folder_last.py installs them too, where ./sitecustomize.py may not have run)."""
    if any(getattr(hook, "graded_imports", False) for hook in path_hooks):
        return
    _folder_hook.graded_imports = True
    guard_bytecode()
    path_hooks.insert(0, _folder_hook)
    for folder in [f for f in importer_cache if _graded(os.path.realpath(f or "."))]:
        del importer_cache[folder]
