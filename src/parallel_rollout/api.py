"""A run from Python, as the CLI's ``run`` makes it, and a run folder read back::

    from parallel_rollout.api import load_run, run

    if __name__ == "__main__":  # the pool's Manager and the workers' server import this file too
        outcome = run(mode="py", data="humaneval", num_rollouts=8, num_vms=2, use_vm_pool=True)
        outcome.exit_code, outcome.summary["success_rate"], outcome.run_dir
        finals = load_run(outcome.run_dir).finals  # "task#sample" -> the attempt that counts

The settings are the flags' names with underscores (``num_vms`` for ``--num-vms``), checked
as a config file's keys are: an unknown name or a wrong type is a ConfigError that names it,
before anything starts. ``config_file`` is a TOML file of the same keys, which the settings
override, as flags override it on the command line.

Where the CLI turns a failure into an exit status, these raise: ConfigError (bad settings, a
task file that does not load: nothing ran), ProviderUnavailable (no bubblewrap, no daemon,
no image), RunLocked (another run holds the folder). A run that started returns its
RunOutcome, whose ``exit_code`` is the CLI's (0 finished, 1 aborted: ``run(resume=True,
run_id=...)`` continues it, 2 the model endpoint refused the key or model, 3 below
``fail_under``, 4 a regression against ``compare_to``), except one that Ctrl-C or SIGTERM
stopped: closed as the CLI closes it, it raises RunInterrupted (a KeyboardInterrupt whose
``outcome`` is that RunOutcome, exit code 130), so a loop over runs stops too.
"""

from __future__ import annotations

import ast
import multiprocessing
import os
import sys
from pathlib import Path
from typing import Any

from .config import PYTHON_CALL, build_config, settings
from .errors import ConfigError, InterruptedBeforeStart, ProviderUnavailable, RunInterrupted, RunLocked
from .report.run_data import NotARunFolder, RunData
from .runner import RunOutcome, Runner

__all__ = ["ConfigError", "InterruptedBeforeStart", "NotARunFolder", "ProviderUnavailable", "RunData", "RunInterrupted",
           "RunLocked", "RunOutcome", "load_run", "run"]


def run(config_file: str | Path | None = None, **run_settings: Any) -> RunOutcome:
    """Run every task of ``data`` as rollouts, write ``<output_dir>/<run_id>/`` and return
    the outcome (see the module's doc for the settings and the errors)."""
    _check_guarded()
    flags = settings(run_settings, "run()")
    outcome = Runner(build_config(flags, str(config_file) if config_file else None,
                                  {name: PYTHON_CALL for name in flags})).run()
    if outcome.summary.get("interrupted"):  # Ctrl-C stops the caller too, once the run is closed
        raise RunInterrupted(outcome, f"run(resume=True, run_id={outcome.run_dir.name!r}, ...)")
    return outcome


def _check_guarded() -> None:
    """ConfigError for a ``run()`` that the script's top level calls outside ``if __name__ ==
    "__main__":``. The pool's Manager (spawned) and the workers' server import the script
    again: there that call would start a second run of its own, in a process multiprocessing
    forbids to start any. Caught in the caller, before any folder is made, and in such an
    import itself (``_inheriting``: multiprocessing is loading the main module)."""
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise ConfigError(_UNGUARDED.format(where="the script"))
    frame, script = sys._getframe(1), None  # noqa: SLF001 - the script's top level is up the stack
    while frame is not None:
        if frame.f_code.co_name == "<module>" and frame.f_globals.get("__name__") == "__main__":
            script = frame
        frame = frame.f_back
    main_file = getattr(sys.modules.get("__main__"), "__file__", None)
    if script is None or not main_file or not os.path.isfile(script.f_code.co_filename) \
            or os.path.abspath(main_file) != os.path.abspath(script.f_code.co_filename):
        return  # a REPL, a notebook, -c: nothing imports it again (spawn imports __main__.__file__)
    frame = script
    try:
        tree = ast.parse(Path(frame.f_code.co_filename).read_text())
    except (OSError, SyntaxError, ValueError):
        return
    line = frame.f_lineno
    if not any(isinstance(node, ast.If) and "__main__" in ast.unparse(node.test)
               and node.lineno <= line <= (node.end_lineno or line) for node in tree.body):
        raise ConfigError(_UNGUARDED.format(where=f"{frame.f_code.co_filename}:{line}"))


_UNGUARDED = ('run() is called at the top level of {where}, which the run\'s helper processes import again '
              '(the pool\'s Manager, the workers\' server): put the call under `if __name__ == "__main__":`')


def load_run(run_dir: str | Path, *, with_events: bool = True) -> RunData:
    """A run folder's config, summary, records (``.finals``: the attempt that counts per
    sample) and events; NotARunFolder if ``run_dir`` holds neither results nor a config, a
    ConfigError naming ``file:line`` if a line of its results.jsonl is corrupted."""
    return RunData.load(run_dir, with_events=with_events)
