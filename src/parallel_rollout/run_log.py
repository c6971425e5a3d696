"""A run's ``run.log``: the handler the Runner puts on the project's logger (``logs``) while
its folder is open, which keeps INFO there, gives the logger its level back when the last one
closes, and begins with the warnings a CLI command said before the folder opened (a cut worker
count, a variable nothing reads, a setting not used), which a cron job's console said and
run.log, read the next day, had none of.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from .logs import PROJECT_LOGGER, RUN_LOG_FORMAT


class _RunLog(logging.FileHandler):
    """A run's ``run.log`` (``run_log_handler``)."""


#: the project logger's level before the first run.log raised it to INFO, and that INFO:
#: given back when the last run.log is closed (``close_run_log``)
_raised_from: list[int] = []
_RUN_LOGS = threading.Lock()


class _BeforeTheRunLog(logging.Handler):
    """The warnings a command said before its run's folder opened (a cut worker count, a variable
    nothing reads, a setting not used), which its run.log writes first when it opens."""

    def emit(self, record: logging.LogRecord) -> None:
        project = logging.getLogger(PROJECT_LOGGER)
        if len(self.kept) < 1000 and not any(isinstance(h, _RunLog) for h in project.handlers):
            self.kept.append(record)  # bounded: a process whose command opened no run.log


_BEFORE = _BeforeTheRunLog(logging.WARNING)
_BEFORE.kept: list[logging.LogRecord] = []


def keep_until_the_run_log() -> None:
    """A CLI command begins: its warnings are kept for the run.log it may open, until it ends
    (``forget_the_kept``), an earlier command's forgotten (one process runs several: CliRunner,
    an embedding program)."""
    _BEFORE.kept = []
    logging.getLogger(PROJECT_LOGGER).addHandler(_BEFORE)  # once: a handler is added once


def forget_the_kept() -> None:
    """A CLI command ends: the warnings it kept and no run.log wrote were its own, no later
    run's (a ``run()`` of the same process: a notebook's after its CliRunner's, a script's
    after the CLI's main), and nothing is kept until the next command begins."""
    logging.getLogger(PROJECT_LOGGER).removeHandler(_BEFORE)
    _BEFORE.kept = []


def run_log_handler(path: Any) -> logging.Handler:
    """The handler of a run's ``run.log``, on the project's logger, which is made to keep
    INFO (DEBUG stays when ``-v`` asked for it) while a run.log is open; it begins with the
    warnings said before it opened (``keep_until_the_run_log``)."""
    handler = _RunLog(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter(RUN_LOG_FORMAT))
    project = logging.getLogger(PROJECT_LOGGER)
    with _RUN_LOGS:
        kept, _BEFORE.kept = _BEFORE.kept, []
        for record in kept:
            handler.handle(record)
        project.addHandler(handler)
        if project.getEffectiveLevel() > logging.INFO:
            _raised_from.append(project.level)
            project.setLevel(logging.INFO)
    return handler


def close_run_log(handler: logging.Handler) -> None:
    """Take a run's run.log off the project's logger and close it. The last one open gives
    the logger back the level it had (Python's default, a script's ``setLevel``): left at
    INFO, every later INFO line of the package (a second run's preparation, an RL
    scheduler's) went to the handlers of a script's ``logging.basicConfig()`` after the run."""
    project = logging.getLogger(PROJECT_LOGGER)
    with _RUN_LOGS:
        project.removeHandler(handler)
        if _raised_from and not any(isinstance(h, _RunLog) for h in project.handlers):
            if project.level == logging.INFO:  # not set anew since (set_verbosity)
                project.setLevel(_raised_from[0])
            _raised_from.clear()
    handler.close()
