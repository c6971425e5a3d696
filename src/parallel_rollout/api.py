"""A run from Python, as the CLI's ``run`` makes it, and a run folder read back::

    from parallel_rollout.api import load_run, run

    if __name__ == "__main__":  # the pool's Manager and the workers' server import this file too
        outcome = run(mode="py", data="humaneval", num_rollouts=8, num_vms=2, use_vm_pool=True)
        outcome.exit_code, outcome.summary["success_rate"], outcome.run_dir
        finals = load_run(outcome.run_dir).finals  # "task#sample" -> the attempt that counts

The settings are the flags' names with underscores (``num_vms`` for ``--num-vms``), checked
as a config file's keys are: an unknown name or a wrong type is a ConfigError that names it,
before anything starts. ``config_file`` is a TOML file of the same keys, which the settings
override, as flags override it on the command line. ``preflight(**settings)`` is the CLI's
``--dry-run`` (``check_endpoint=True``: ``--check-endpoint``): nothing starts, no folder is
made, and what it found is returned (``Preflight.ok``, ``problems``, ``census``).

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

from pathlib import Path
from typing import Any

from .call_spelling import SETTING_TYPES, as_called
from .config import build_config, settings
from .errors import ConfigError, InterruptedBeforeStart, ProviderUnavailable, RunInterrupted, RunLocked
from .logs import reworded
from .main_guard import check_guarded
from .preflight import Preflight
from .preflight import preflight as check_run
from .report.run_data import NotARunFolder, RunData
from .run_end import PYTHON_PROGRAM
from .run_log import forget_the_kept, keep_until_the_run_log
from .runner import RunOutcome, Runner
from .setting_names import PYTHON_CALL

__all__ = ["ConfigError", "InterruptedBeforeStart", "NotARunFolder", "Preflight", "ProviderUnavailable", "RunData",
           "RunInterrupted", "RunLocked", "RunOutcome", "load_run", "preflight", "run"]


def run(config_file: str | Path | None = None, **run_settings: Any) -> RunOutcome:
    """Run every task of ``data`` as rollouts, write ``<output_dir>/<run_id>/`` and return
    the outcome (see the module's doc for the settings and the errors)."""
    check_guarded("run()")
    flags: dict[str, Any] = {}
    keep_until_the_run_log()  # what it warns of before its folder opens (a cut pool) begins its run.log
    try:
        flags = settings(run_settings, "run()")
        with reworded(lambda text: as_called(text, flags)):  # its warnings, as its errors
            runner = Runner(build_config(flags, str(config_file) if config_file else None,
                                         {name: PYTHON_CALL for name in flags}))
            runner.program = PYTHON_PROGRAM  # its resume is said as a call: run(..., resume=True)
            # what its engine says of its own (a record's failure: results.jsonl, a retry's event;
            # its thread's warnings) as its outcome's message is said, below
            runner.said = lambda text: as_called(text, _settings_of(runner), strict=True)
            outcome = runner.run()
    except (ConfigError, ProviderUnavailable) as exc:
        # the core says its settings as the CLI's flags: said again as this call spells them
        exc.args = (as_called(str(exc), flags), *exc.args[1:])
        raise
    finally:
        forget_the_kept()
    # why it aborted, which gate failed: free text of tasks and servers too, whose flags are no
    # settings of this call (strict: only a flag with the run's own value is said as a keyword)
    outcome.message = as_called(outcome.message, _settings_of(runner), strict=True)
    # Ctrl-C stops the caller too, once the run is closed (one as it wrote its summary too)
    if outcome.summary.get("interrupted") or runner.late_signal:
        raise RunInterrupted(outcome, f"run(resume=True, run_id={outcome.run_dir.name!r}, ...)")
    return outcome


def _settings_of(runner: Runner) -> dict[str, Any]:
    """The settings ``runner`` runs with, by their keywords."""
    return {name: getattr(runner.config, name) for name in SETTING_TYPES}


def preflight(config_file: str | Path | None = None, *, check_endpoint: bool = False,
              **run_settings: Any) -> Preflight:
    """The CLI's ``--dry-run`` (``--check-endpoint``) for ``run()``'s settings: everything the
    run needs, checked, nothing started, no folder made; its ``census`` lines, its ``problems``
    (said as this call spells the settings; ``ok`` when there are none) and what ``passed``.
    A setting that does not even make a config (an unknown name, a wrong type) raises
    ConfigError, as ``run()`` does."""
    flags: dict[str, Any] = {}
    try:
        flags = settings(run_settings, "preflight()")
        with reworded(lambda text: as_called(text, flags)):  # its warnings, as run()'s
            found = check_run(build_config(flags, str(config_file) if config_file else None,
                                           {name: "in preflight()" for name in flags}), check_endpoint=check_endpoint)
    except ConfigError as exc:
        exc.args = (as_called(str(exc), flags), *exc.args[1:])
        raise
    found.problems = [as_called(problem, flags).replace("--check-endpoint", "check_endpoint=True")
                      for problem in found.problems]
    return found


def load_run(run_dir: str | Path, *, with_events: bool = True) -> RunData:
    """A run folder's config, summary, records (``.finals``: the attempt that counts per
    sample) and events; NotARunFolder if ``run_dir`` holds neither results nor a config, a
    ConfigError naming ``file:line`` if a line of its results.jsonl is corrupted."""
    return RunData.load(run_dir, with_events=with_events)
