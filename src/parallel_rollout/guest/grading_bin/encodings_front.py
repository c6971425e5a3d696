

# ---- the grading front, appended to the guest python's own encodings/__init__.py in the source and
# bytecode laid over that module's own in the process, docker and qemu guests (../../pool/providers/
# python_front.py). Python imports encodings as it starts, before `site`, which runs the lines of a
# .pth of the user site that begin with "import" before any sitecustomize.py: a grading command's
# python run with an environment of its own (`subprocess.run(["python3", …], env={"HOME": home})`,
# bash's `exec -c`) ran the answer's ~/.local/lib/python3.*/site-packages/*.pth so (`import os;
# os._exit(0)` passed the check). Such a python is started again here, before `site`, as
# ./system_sitecustomize.py starts it (with the grading names, PYTHONNOUSERSITE among them).
# Outside grading: one stat.
def _parallel_rollout_front():
    import posix
    if posix.environ.get(b"PARALLEL_ROLLOUT_GRADING_SINCE"):
        return  # a grading command's own environment: it read PYTHONNOUSERSITE
    try:
        posix.stat("/run/guest/grading")  # there only while a grading command runs
    except OSError:
        return
    import _io  # builtins.open is not set yet
    path = "/opt/parallel-rollout/grading_bin/system_sitecustomize.py"
    try:
        with _io.open(path, "rb") as source:
            code = compile(source.read(), path, "exec")
        exec(code, {"__name__": "encodings_front", "__file__": path, "open": _io.open})
    except Exception:  # noqa: BLE001 - the python starts as ever; the sitecustomize.py front comes later
        pass


_parallel_rollout_front()
del _parallel_rollout_front
