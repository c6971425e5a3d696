"""Bound over the guest python's own sitecustomize.py in a process VM
(pool/providers/sandbox_argv.py), so read by every python there that runs ``site``, the graded
code's too. A grading command's python (``PARALLEL_ROLLOUT_GRADING_SINCE`` in its environment,
which ``-I`` and ``-E`` hide from Python, not from ``os.environ``) that found no
./sitecustomize.py on its PYTHONPATH loads it from here: ``/usr/bin/python3 -I -m unittest``
by its path, a check's own ``PYTHONPATH=src /usr/bin/pytest``, which ran with none of the
wrappers' rules. Then, as for every python, the system's own sitecustomize, bound at
/opt/system-originals/sitecustomize.py. Loaded again by ./sitecustomize.py (as the system's), it
runs only that.

A grading command's python run with an environment of its own (a check's ``subprocess.run(["python3",
"-m", "unittest", …], env={})``, ``[sys.executable, …]`` so) has no marker; python has no front, so
it is this file that knows it by its session, as ./system_front does (the agent's note,
../agent_sessions.py: ``/run/guest/grading/<session id>``, or ``.../starting``), and starts the
python again, by its own path, with the names the note gives back where they are not set: before
this, python had read no PYTHONSAFEPATH (the current folder, the home, first on sys.path: the
answer's ~/json.py), no PYTHONNOUSERSITE (its usercustomize.py ran next) and no PYTHONPATH (the
wrappers' rules). Outside grading the folder is not there: one stat more per python. A .pth file of
the user site runs before any sitecustomize.py: in the process, docker and qemu guests
./encodings_front.py runs this file first, as python imports encodings (``__name__``
"encodings_front"), for the start again alone.
"""

import os as _os
import sys as _sys


def _run(path, globals_):
    try:
        with open(path, "rb") as source:
            code = compile(source.read(), path, "exec")
    except OSError:
        return
    exec(code, globals_)


def _session_names():
    """The names the agent noted for this process's grading session (``NAME=value`` lines; a
    plain name only, as ./system_front takes them), or None outside any."""
    if not _os.path.isdir("/run/guest/grading"):
        return None
    try:
        with open("/proc/self/stat", "rb") as stat:
            # pid (comm) state ppid pgrp session …: the comm past its last ") "
            session = stat.read().rsplit(b") ", 1)[1].split()[3].decode()
    except (OSError, IndexError):
        return None
    for name in (session, "starting"):
        try:
            with open(f"/run/guest/grading/{name}", encoding="utf-8") as noted:
                lines = noted.read().splitlines()
        except (OSError, ValueError):
            continue
        names = dict(line.split("=", 1) for line in lines if "=" in line)
        return {name: value for name, value in names.items()
                if name and not name.strip("ABCDEFGHIJKLMNOPQRSTUVWXYZ_")}
    return None


def _again_with_the_session_names():
    """A python of a grading session whose environment lost the marker, started again with the
    session's names where they are not set: it reads them as it starts (PYTHONSAFEPATH,
    PYTHONNOUSERSITE, PYTHONPATH)."""
    names = _session_names()
    argv = getattr(_sys, "orig_argv", None)  # its own words, python 3.10 on
    if not names or not names.get("PARALLEL_ROLLOUT_GRADING_SINCE") or not argv:
        return
    env = {**names, **_os.environ}
    # the marker too where the check set it empty: so started, this python reads it (no loop)
    env["PARALLEL_ROLLOUT_GRADING_SINCE"] = names["PARALLEL_ROLLOUT_GRADING_SINCE"]
    # by its own path: a name alone would be looked for on the wrappers' PATH now
    executable = _sys.executable or _os.path.realpath("/proc/self/exe")
    _os.execve(executable, [executable, *argv[1:]], env)


_primary = getattr(_sys.modules.get("sitecustomize"), "__dict__", None) is globals()
#: run by ./encodings_front.py as python imports encodings, before `site` reads a .pth of the user site
_early = __name__ == "encodings_front"
if (_primary or _early) and not _os.environ.get("PARALLEL_ROLLOUT_GRADING_SINCE"):
    _again_with_the_session_names()
if _early:
    pass  # only that: `site` comes next, and with it this file as sitecustomize
elif _primary and _os.environ.get("PARALLEL_ROLLOUT_GRADING_SINCE"):
    # the wrappers' folder where every guest has them (images.GUEST_GRADING_BIN); their
    # sitecustomize runs this file again last, as the system's
    _run("/opt/parallel-rollout/grading_bin/sitecustomize.py",
         {"__name__": "sitecustomize", "__file__": "/opt/parallel-rollout/grading_bin/sitecustomize.py"})
else:
    _run("/opt/system-originals/sitecustomize.py", globals())
