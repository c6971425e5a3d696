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

import dataclasses
import os
import re
from pathlib import Path
from typing import Any

from .agents.base import AGENTS
from .config import NAMED_DATASETS, RunConfig, build_config, settings
from .config_checks import CHOICES, GATE_OFF, PYTHON_CALL
from .envs.registry import MODES
from .errors import ConfigError, InterruptedBeforeStart, ProviderUnavailable, RunInterrupted, RunLocked
from .logs import reworded
from .main_guard import check_guarded
from .pool.providers import PROVIDERS
from .preflight import Preflight
from .preflight import preflight as check_run
from .report.run_data import NotARunFolder, RunData
from .run_end import PYTHON_PROGRAM
from .runner import RunOutcome, Runner

__all__ = ["ConfigError", "InterruptedBeforeStart", "NotARunFolder", "Preflight", "ProviderUnavailable", "RunData",
           "RunInterrupted", "RunLocked", "RunOutcome", "load_run", "preflight", "run"]


def run(config_file: str | Path | None = None, **run_settings: Any) -> RunOutcome:
    """Run every task of ``data`` as rollouts, write ``<output_dir>/<run_id>/`` and return
    the outcome (see the module's doc for the settings and the errors)."""
    check_guarded("run()")
    flags: dict[str, Any] = {}
    try:
        flags = settings(run_settings, "run()")
        with reworded(lambda text: as_called(text, flags)):  # its warnings, as its errors
            runner = Runner(build_config(flags, str(config_file) if config_file else None,
                                         {name: PYTHON_CALL for name in flags}))
            runner.program = PYTHON_PROGRAM  # its resume is said as a call: run(..., resume=True)
            outcome = runner.run()
    except (ConfigError, ProviderUnavailable) as exc:
        # the core says its settings as the CLI's flags: said again as this call spells them
        exc.args = (as_called(str(exc), flags), *exc.args[1:])
        raise
    # why it aborted, which gate failed: free text of tasks and servers too, whose flags are no
    # settings of this call (strict: only a flag with the run's own value is said as a keyword)
    settings_of_run = {name: getattr(runner.config, name) for name in _FIELDS}
    outcome.message = as_called(outcome.message, settings_of_run, strict=True)
    # Ctrl-C stops the caller too, once the run is closed (one as it wrote its summary too)
    if outcome.summary.get("interrupted") or runner.late_signal:
        raise RunInterrupted(outcome, f"run(resume=True, run_id={outcome.run_dir.name!r}, ...)")
    return outcome


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


#: a CLI flag in an error, with the value that may follow it ('x', a number, a word)
_FLAG = (r"(?<![\w-])--(?P<no>no-)?(?P<name>[a-z][a-z0-9]*(?:-[a-z0-9]+)*)(?![\w-])"
         r"(?: (?P<value>'[^']*'|\"[^\"]*\"|-?\d+(?:\.\d+)?(?![\w.])|[\w.:/-]*[\w/-]))?")
#: what is said as it is: a command line to type (`parallel-rollout image build …`), and a
#: quoted text (a task's command, an agent's stderr: 'curl --data x')
_COMMAND = (r"`[^`]*`|(?:parallel-rollout|\./dev|run_parallel_rollout\.py) [^;\n)]*"
            r"""|(?<!\w)'[^'\n]*'(?!\w)|(?<!\w)"[^"\n]*"(?!\w)""")
_FIELDS = {f.name: f.type for f in dataclasses.fields(RunConfig) if f.name not in ("explicit", "sources")}
#: the gates, whose 'none' a call says as None
_GATES = ("fail_under", "compare_to")


def _named(name: str) -> tuple[str, ...] | list[str]:
    """The words setting ``name`` takes as its value (``--agent openai``, ``--backend ray``,
    ``--fail-under none``): such a word after its flag is said as the value it is."""
    if name in ("agent", "mode", "provider_name"):
        registry = {"agent": AGENTS, "mode": MODES, "provider_name": PROVIDERS}[name]
        return [*registry.builtin]  # no plugin scan: a message names the built-in ones
    if name == "data":
        return [*NAMED_DATASETS]
    return GATE_OFF[:1] if name in _GATES else CHOICES.get(name, ())


def as_called(message: str, call: dict[str, Any], strict: bool = False) -> str:
    """``message`` with each CLI flag of a setting said as a ``run()`` keyword: ``--num-vms``
    as ``num_vms``, ``--resume`` as ``resume=True``, ``--agent command`` as ``agent='command'``
    when the call gave that value (a quoted value or a number always), ``--config`` as
    ``config_file``. A command line, a quoted text and the text of the call's own values (an
    agent_cmd's flags) stay as they are; ``strict``: so does every flag not followed by the
    value ``call`` holds (``--fail-under 0.9``)."""
    own = sorted({v for v in call.values() if isinstance(v, str) and len(v) > 2}, key=len, reverse=True)
    kept = "|".join([_COMMAND, *map(re.escape, own)])

    def say(found: re.Match[str]) -> str:
        if found.group("kept") is not None:
            return found.group(0)
        flag, value = found.group("name"), found.group("value")
        name = "config_file" if flag == "config" else flag.replace("-", "_")
        if name not in _FIELDS and name != "config_file":
            return found.group(0)
        given = call.get(name)  # a path given as a Path is said as its text
        if value is not None and value == (os.fspath(given) if isinstance(given, os.PathLike) else given):
            return f"{name}={value!r}"
        if strict:
            number = re.fullmatch(r"-?\d+(?:\.\d+)?", value or "") and isinstance(call.get(name), (int, float))
            return f"{name}={value}" if number and float(value) == call[name] else found.group(0)
        if value and (value[0] in "'\"" or re.fullmatch(r"-?[\d.]+", value)):
            return f"{name}={value}"
        if value and value in _named(name):  # a value the setting takes, not the sentence's next word
            return f"{name}=None" if name in _GATES else f"{name}={value!r}"
        if value and re.search(r"/|\.(jsonl?|toml|gz|parquet|xml|key)$", value):  # a path, a URL: no word of a sentence
            return f"{name}={value!r}"
        rest = f" {value}" if value else ""
        if _FIELDS.get(name, "").startswith("bool"):
            return f"{name}={not found.group('no')}{rest}"
        return f"{name}{rest}"

    return re.sub(f"(?P<kept>{kept})|{_FLAG}", say, message)


def load_run(run_dir: str | Path, *, with_events: bool = True) -> RunData:
    """A run folder's config, summary, records (``.finals``: the attempt that counts per
    sample) and events; NotARunFolder if ``run_dir`` holds neither results nor a config, a
    ConfigError naming ``file:line`` if a line of its results.jsonl is corrupted."""
    return RunData.load(run_dir, with_events=with_events)
