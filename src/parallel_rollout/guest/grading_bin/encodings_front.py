

# ---- the grading front, appended to the guest python's own encodings/__init__.py in the source and
# bytecode laid over that module's own in the process, docker and qemu guests (../../pool/providers/
# python_front.py). Python imports encodings as it starts, before `site`, which runs the lines of a
# .pth of the user site that begin with "import" before any sitecustomize.py: a grading command's
# python run with an environment of its own (`subprocess.run(["python3", …], env={"HOME": home})`,
# bash's `exec -c`) ran the answer's ~/.local/lib/python3.*/site-packages/*.pth so (`import os;
# os._exit(0)` passed the check). Such a python is started again here, before `site`, as
# ./system_sitecustomize.py starts it (with the grading names, PYTHONNOUSERSITE among them).
# Outside grading: one stat. A grading command's python that reads its bytecode from a folder of
# the check's (PYTHONPYCACHEPREFIX, -X pycache_prefix) reads none there written before it began
# (./graded_imports.py): the answer's pycs of sitecustomize, a stdlib module, ran in the check.
# ./encodings_head.py set that folder aside until then (_parallel_rollout_prefix): it is given back
# once the rules are laid, or to a python that turns out to be no grading command's.
def _parallel_rollout_front():
    import posix
    import sys
    if posix.environ.get(b"PARALLEL_ROLLOUT_GRADING_SINCE"):
        # a grading command's own environment: it read PYTHONNOUSERSITE
        if _parallel_rollout_prefix is not None:
            guard = _parallel_rollout_run("/opt/parallel-rollout/grading_bin/graded_imports.py",
                                          "graded_imports_early").get("guard_bytecode")
            if guard is not None:  # else the folder stays aside: no bytecode of it read unguarded
                guard()
                sys.pycache_prefix = _parallel_rollout_prefix
        return
    try:
        posix.stat("/run/guest/grading")  # there only while a grading command runs
    except OSError:
        return
    _parallel_rollout_run("/opt/parallel-rollout/grading_bin/system_sitecustomize.py", "encodings_front")
    if _parallel_rollout_prefix is not None:  # not started again: no grading command's
        sys.pycache_prefix = _parallel_rollout_prefix


def _parallel_rollout_run(path, name):
    """The names ``path`` defines, run as ``name`` with no bytecode (where it failed, those it
    defined before)."""
    import _io  # builtins.open is not set yet
    names = {"__name__": name, "__file__": path, "open": _io.open}
    try:
        with _io.open(path, "rb") as source:
            code = compile(source.read(), path, "exec")
        exec(code, names)
    except Exception:  # noqa: BLE001 - the python starts as ever; the sitecustomize.py front comes later
        names.pop("guard_bytecode", None)
    return names


_parallel_rollout_front()
del _parallel_rollout_front, _parallel_rollout_run, _parallel_rollout_prefix
