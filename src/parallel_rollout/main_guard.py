"""The main guard a script needs around a call that starts a run (``api.run``, the
``RolloutScheduler`` that starts an engine): refused, with one clear error, when the script's
top level makes the call outside ``if __name__ == "__main__":``.

The pool's Manager (spawned) and the workers' server import the script again, as
``__mp_main__``: there an unguarded call would start a second run of its own, in a process
multiprocessing forbids to start any. Without this check the user got multiprocessing's
"bootstrapping phase" traceback from every helper process, workers that kept dying, and
stray run folders (a trainer: workers that kept dying until the scheduler's engine stopped).
The check runs in the caller, before any folder is made, and in such an import itself.
"""

from __future__ import annotations

import ast
import multiprocessing
import os
import sys
from pathlib import Path

from .errors import ConfigError

_UNGUARDED = ('{call} is called at the top level of {where}, which the run\'s helper processes import again '
              '(the pool\'s Manager, the workers\' server): put the call under `if __name__ == "__main__":`')


def check_guarded(call: str) -> None:
    """ConfigError for a ``call`` (``"run()"``) that the script's top level makes outside ``if
    __name__ == "__main__":``, or that runs in multiprocessing's import of the main module
    (``_inheriting``). A REPL, a notebook, ``python -c``: nothing imports them again."""
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise ConfigError(_UNGUARDED.format(call=call, where="the script"))
    check_main_file(call)
    frame, script = sys._getframe(1), None  # noqa: SLF001 - the script's top level is up the stack
    while frame is not None:
        if frame.f_code.co_name == "<module>" and frame.f_globals.get("__name__") == "__main__":
            script = frame
        frame = frame.f_back
    main_file = getattr(sys.modules.get("__main__"), "__file__", None)
    if script is None or not main_file or not os.path.isfile(script.f_code.co_filename) \
            or os.path.abspath(main_file) != os.path.abspath(script.f_code.co_filename):
        return  # spawn imports __main__.__file__: nothing else is imported again
    try:
        tree = ast.parse(Path(script.f_code.co_filename).read_text())
    except (OSError, SyntaxError, ValueError):
        return
    line = script.f_lineno
    if not any(isinstance(node, ast.If) and "__main__" in ast.unparse(node.test)
               and node.lineno <= line <= (node.end_lineno or line) for node in tree.body):
        raise ConfigError(_UNGUARDED.format(call=call, where=f"{script.f_code.co_filename}:{line}"))


def check_main_file(call: str) -> None:
    """ConfigError for a main module whose file, as multiprocessing passes it to the helper
    processes it starts (they run it again), is no file: a script read from stdin (``python -
    < eval.py``, a shell's here-document: ``<stdin>``) or removed since it started. Each run
    ended with its Manager dead of FileNotFoundError ('no sample ran', exit 1) and a folder."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if path is None or getattr(getattr(main, "__spec__", None), "name", None) is not None:
        return  # a REPL, a notebook, python -c, python -m: nothing is run again from a file
    path = os.path.normpath(os.path.join(multiprocessing.process.ORIGINAL_DIR or "", path))
    if not os.path.isfile(path):
        raise ConfigError(f"{call} cannot start the run's helper processes: they run the main module again "
                          f"from its file, and {path} is none (a script read from stdin, or one removed "
                          "since it started); save the script to a file and run that file")
