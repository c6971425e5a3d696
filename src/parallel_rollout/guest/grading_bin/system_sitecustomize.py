"""Bound over the guest python's own sitecustomize.py in a process VM
(pool/providers/sandbox_argv.py), so read by every python there that runs ``site``, the graded
code's too. A grading command's python (``PARALLEL_ROLLOUT_GRADING_SINCE`` in its environment,
which ``-I`` and ``-E`` hide from Python, not from ``os.environ``) that found no
./sitecustomize.py on its PYTHONPATH loads it from here: ``/usr/bin/python3 -I -m unittest``
by its path, a check's own ``PYTHONPATH=src /usr/bin/pytest``, which ran with none of the
wrappers' rules. Then, as for every python, the system's own sitecustomize, bound at
/opt/system-originals/sitecustomize.py. Loaded again by ./sitecustomize.py (as the system's), it
runs only that.
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


_primary = getattr(_sys.modules.get("sitecustomize"), "__dict__", None) is globals()
if _primary and _os.environ.get("PARALLEL_ROLLOUT_GRADING_SINCE"):
    # the wrappers' folder where every guest has them (images.GUEST_GRADING_BIN); their
    # sitecustomize runs this file again last, as the system's
    _run("/opt/parallel-rollout/grading_bin/sitecustomize.py",
         {"__name__": "sitecustomize", "__file__": "/opt/parallel-rollout/grading_bin/sitecustomize.py"})
else:
    _run("/opt/system-originals/sitecustomize.py", globals())
