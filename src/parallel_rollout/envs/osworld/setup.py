"""OSWorld's ``config`` (and ``evaluator.postconfig``) steps, run through the guest routes.

A step is ``{"type": T, "parameters": {...}}``. Supported types: ``execute`` (alias
``command``), ``launch``, ``open``, ``sleep``, ``activate_window``, ``close_window``,
``upload_file``, ``download``. ``download`` and ``upload_file`` read ``file://`` URLs, local
paths (relative ones from the task file's folder) or http(s) URLs, fetched once per machine
into the download cache keyed by URL (:mod:`.downloads`; ``$PARALLEL_ROLLOUT_OSWORLD_CACHE``,
default ``~/.cache/parallel-rollout/osworld``). Every
step has a bounded wait; a failing step raises :class:`SetupError` naming the task, the
step's index and its type. A step's parameter read as a flag (:data:`FLAGS`: ``shell``,
``strict``) given a string other than "true" is refused at load: the string reads as true,
``"shell": "false"`` ran the command in a shell, as OSWorld's own controller does (a flag
reaches the guest as the boolean it reads as there, ``"shell": "true"`` and ``1`` true, ``null``
false; a list, an object or another number is refused: surely a mistake); so is a
parameter the step does not read (``"shel": true`` was ignored, the command run without a
shell) or one it needs that is missing, which failed only as the step ran, and a value not of
the kind its code needs (:data:`VALUES`, :mod:`.step_values`: ``"seconds": "two"``, a number
as a ``download``'s ``path``), which failed there too.
"""

from __future__ import annotations

import inspect
import logging
import time
from pathlib import Path
from typing import Any

from .account_steps import CHECKS as ACCOUNT_CHECKS
from .account_steps import STEPS as ACCOUNT_STEPS
from .account_steps import VALUES as ACCOUNT_VALUES
from .browser_steps import STEPS as BROWSER_STEPS
from .browser_steps import VALUES as BROWSER_VALUES
from .rule_keys import unread_hint
from .step_values import COMMAND, FLAG, SECONDS, TEXT, WHOLE, Objects
# SetupError and cache_root are read here as setup.X by the env and the tests
from .sources import SetupError, SourceMissing, cache_root, local_source  # noqa: F401

log = logging.getLogger(__name__)

STEP_TYPES = ("execute", "command", "launch", "open", "sleep", "activate_window",
              "close_window", "upload_file", "download")
#: seconds ``open`` waits for the file's window (a task may say ``timeout``); LibreOffice may
#: take a minute on a loaded machine (OSWorld's own server waits far longer)
OPEN_TIMEOUT_S = 90.0
#: longest ``sleep`` a task may ask for
MAX_SLEEP_S = 60.0


def check_steps(steps: Any, where: str) -> None:
    """ValueError naming the first unsupported or malformed step: a parameter it does not
    read or one it needs missing, or a value not of the kind :data:`VALUES` asks (a string
    other than "true" given to one read as a flag among them)."""
    if not isinstance(steps, list):
        raise ValueError(f"{where} must be a list of steps")
    for index, step in enumerate(steps, start=1):
        if not isinstance(step, dict) or not isinstance(step.get("type"), str):
            raise ValueError(f"{where} step {index} must be an object with a 'type'")
        if step["type"] not in STEPS:
            raise ValueError(f"{where} step {index}: unsupported step type {step['type']!r}")
        if not isinstance(step.get("parameters", {}), dict):
            raise ValueError(f"{where} step {index}: 'parameters' must be an object")
        params = step.get("parameters") or {}
        problem = _parameters_problem(step["type"], params) or _values_problem(step["type"], params) \
            or (CHECKS[step["type"]](params) if step["type"] in CHECKS else None)
        if problem:
            raise ValueError(f"{where} step {index} ({step['type']}): {problem}")


def _parameters_problem(kind: str, params: dict) -> str | None:
    """A parameter of a step that its function does not take, or one it needs that is missing."""
    taken = list(inspect.signature(STEPS[kind]).parameters.values())[1:]  # after the env
    names = [parameter.name for parameter in taken]
    for key in params:
        if key not in names:
            return f"has the parameter {key!r}, which the step does not read ({unread_hint(key, names)})"
    missing = [p.name for p in taken if p.default is p.empty and p.name not in params]
    if missing:
        return f"needs the parameter {missing[0]!r}"
    until = params.get("until") if STEPS[kind] is _execute else None
    for key in until if isinstance(until, dict) else ():
        if key not in UNTIL_KEYS:  # never met: the step would wait out its timeout
            return f"has the key {key!r} in 'until', which the step does not read " \
                   f"({unread_hint(key, list(UNTIL_KEYS))})"
    return None


def _values_problem(kind: str, params: dict) -> str | None:
    """The first parameter of a step whose value is not of the kind :data:`VALUES` asks."""
    for key, value in params.items():
        problem = VALUES[kind][key].problem(value)
        if problem:  # "is …", or "[0] 'url' is …" of a list's object
            return f"parameter {key!r}{'' if problem.startswith('[') else ' '}{problem}"
    return None


def placeholders(width: int, height: int, password: str) -> dict[str, str]:
    """The values OSWorld substitutes into ``execute`` commands."""
    return {"{SCREEN_WIDTH}": str(width), "{SCREEN_HEIGHT}": str(height),
            "{SCREEN_WIDTH_HALF}": str(width // 2), "{SCREEN_HEIGHT_HALF}": str(height // 2),
            "{CLIENT_PASSWORD}": password}


def substitute(command: Any, values: dict[str, str]) -> Any:
    """``command`` (a string or a list of strings) with the placeholders replaced."""
    def one(text: str) -> str:
        for key, value in values.items():
            text = text.replace(key, value)
        return text

    if isinstance(command, str):
        return one(command)
    if isinstance(command, list):
        return [one(part) if isinstance(part, str) else part for part in command]
    return command


def run_steps(env, steps: list[dict], what: str) -> None:
    """Run ``steps`` in order; SetupError names the first that fails."""
    for index, step in enumerate(steps, start=1):
        kind = step["type"]
        # a flag reaches the guest as what it reads as in OSWorld ("shell": "true", 1, null):
        # the guest's /execute takes a boolean only
        params = {key: bool(value) if VALUES[kind].get(key) is FLAG else value
                  for key, value in (step.get("parameters") or {}).items()}
        try:
            STEPS[kind](env, **params)
        except SetupError:
            raise
        except TypeError as exc:
            raise SetupError(f"task {env.task.id!r}: {what} step {index} ({kind}): bad parameters: {exc}") from None
        except (OSError, ValueError, LookupError, TimeoutError) as exc:
            raise SetupError(f"task {env.task.id!r}: {what} step {index} ({kind}) failed: {exc}") from None


def _execute(env, command, shell: bool = False, stdout: str = "", stderr: str = "",
             until: dict | None = None, timeout: float = 120.0) -> None:
    command = substitute(command, env.placeholders)
    deadline = time.monotonic() + float(timeout)
    while True:
        result = env.vm.execute(command, shell=shell, timeout=float(timeout))
        if result.get("timeout"):
            raise SetupError(f"task {env.task.id!r}: {command!r} timed out")
        if not until or _until_holds(result, until) or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    for name, key in ((stdout, "output"), (stderr, "error")):
        if name:  # as OSWorld: the output kept in the cache folder, for a cache_file getter
            folder = Path(env.cache_dir)
            folder.mkdir(parents=True, exist_ok=True)
            (folder / name).write_text(result.get(key) or "", encoding="utf-8")


#: what an ``execute`` step's ``until`` may wait for: its command's exit status, or a text in its output
_UNTIL = Objects({}, optional={"returncode": WHOLE, "stdout": TEXT, "stderr": TEXT}, one=True)
UNTIL_KEYS = tuple(_UNTIL.optional)


def _until_holds(result: dict, until: dict) -> bool:
    """Whether one of ``until``'s conditions holds, as OSWorld's ``_execute_setup`` stops at
    the first (its conditions joined by ``or``)."""
    return ("returncode" in until and result.get("returncode") == until["returncode"]
            or "stdout" in until and until["stdout"] in (result.get("output") or "")
            or "stderr" in until and until["stderr"] in (result.get("error") or ""))


def _launch(env, command, shell: bool = False) -> None:
    env.vm.launch(substitute(command, env.placeholders), shell=shell)


def _open(env, path: str, timeout: float = OPEN_TIMEOUT_S) -> None:
    env.vm.open_file(path, timeout=min(float(timeout), env.open_timeout_s))


def _sleep(env, seconds: float) -> None:
    time.sleep(min(float(seconds), MAX_SLEEP_S))


def _activate_window(env, window_name: str, strict: bool = False, by_class: bool = False) -> None:
    _window_step(env, "activate", window_name, strict, by_class)


def _close_window(env, window_name: str, strict: bool = False, by_class: bool = False) -> None:
    _window_step(env, "close", window_name, strict, by_class)


def _window_step(env, verb: str, window_name: str, strict: bool, by_class: bool) -> None:
    """Activate or close a window; none matching is logged and the steps go on, as OSWorld's
    SetupController does (a task's postconfig closes a dialog the agent may have closed)."""
    try:
        getattr(env.vm, f"{verb}_window")(window_name, strict=strict, by_class=by_class)
    except LookupError as exc:
        log.warning("task %r: %s_window %r: %s", env.task.id, verb, window_name, exc)


def _upload_file(env, files: list[dict]) -> None:
    for item in files:
        source = local_source(env.task, item["local_path"], env.cache_root)
        env.vm.write_file(item["path"], source.read_bytes())


def _download(env, files: list[dict]) -> None:
    for item in files:
        source = local_source(env.task, item["url"], env.cache_root)
        env.vm.write_file(item["path"], source.read_bytes())


_WINDOW = {"window_name": TEXT, "strict": FLAG, "by_class": FLAG}
_EXECUTE = {"command": COMMAND, "shell": FLAG, "stdout": TEXT, "stderr": TEXT, "timeout": SECONDS,
            "until": _UNTIL}
#: step type -> parameter -> the kind of value its code needs (:mod:`.step_values`), checked
#: at load: every parameter of every step (a test holds it to the steps' signatures)
VALUES = {"execute": _EXECUTE, "command": _EXECUTE, "launch": {"command": COMMAND, "shell": FLAG},
          "open": {"path": TEXT, "timeout": SECONDS}, "sleep": {"seconds": SECONDS},
          "activate_window": _WINDOW, "close_window": _WINDOW,
          "upload_file": {"files": Objects({"local_path": TEXT, "path": TEXT})},
          "download": {"files": Objects({"url": TEXT, "path": TEXT})}, **BROWSER_VALUES, **ACCOUNT_VALUES}
#: step type -> its check of its parameters together, once each is of its kind (a
#: googledrive's args against its operations)
CHECKS = {**ACCOUNT_CHECKS}
#: step type -> the parameters it reads as a flag (handed to the guest as ``shell``, ``if
#: strict:``): any string but "" reads as true there, so ``"shell": "false"`` ran a shell
FLAGS: dict[str, tuple[str, ...]] = {kind: names for kind, values in VALUES.items()
                                     if (names := tuple(key for key, need in values.items() if need is FLAG))}

#: the registry of step types (type -> function called as ``step(env, **parameters)``)
STEPS = {"execute": _execute, "command": _execute, "launch": _launch, "open": _open,
         "sleep": _sleep, "activate_window": _activate_window, "close_window": _close_window,
         "upload_file": _upload_file, "download": _download, **BROWSER_STEPS, **ACCOUNT_STEPS}
