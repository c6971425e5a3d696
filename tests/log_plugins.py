"""Plugins that log, for tests/test_logs.py and tests/test_ray_backend.py: agents (run in the
worker processes) and a provider (runs in the pool's Manager process), each under its own
logger, as a third party's code would."""

from __future__ import annotations

import logging
import os
import signal
import time

from parallel_rollout.agents.oracle import OracleAgent
from parallel_rollout.pool.providers.process import ProcessProvider

log = logging.getLogger("log_plugins")
project_log = logging.getLogger("parallel_rollout.log_plugins")


class LoggingOracle(OracleAgent):
    """The oracle, with a WARNING and two INFO lines (its own logger's, the project's) per task."""

    def reset(self, task) -> None:
        """Log, then queue the reference actions."""
        log.warning("agent-warning for %s", task.id)
        log.info("agent-info-foreign for %s", task.id)
        project_log.info("agent-info for %s", task.id)
        super().reset(task)


class LoggingProcessProvider(ProcessProvider):
    """The process provider, with a WARNING at each boot (in the Manager process)."""

    def start(self, vm_id: str):
        """Log, then boot the sandbox."""
        log.warning("provider-warning booting %s", vm_id)
        return super().start(vm_id)


class FlagNamingOracle(OracleAgent):
    """The oracle, with a project's WARNING per task that names a setting as the CLI's flag
    (``--max-turns N``), as the package's own warnings do: what run() says as its keyword."""

    def reset(self, task) -> None:
        """Warn, then queue the reference actions."""
        project_log.warning("task %s: --max-turns %d", task.id, self.config.max_turns)
        super().reset(task)


class WarnsAndDies(OracleAgent):
    """Warns (a project's WARNING, its last words), then kills its own process on the spot: a
    Ray worker actor that dies before it answers again (tests/test_ray_backend.py)."""

    def reset(self, task) -> None:
        """Warn, then die by SIGKILL (no clean-up, no flush)."""
        project_log.warning("last words before dying on task %s", task.id)
        os.kill(os.getpid(), signal.SIGKILL)


class WarnsAndHangs(OracleAgent):
    """Warns (a project's WARNING), then hangs: a worker actor whose lines no answer has taken
    when its driver is killed (tests/test_ray_backend.py)."""

    def reset(self, task) -> None:
        """Warn, then sleep for ten minutes."""
        project_log.warning("unsaid words of a killed driver's task %s", task.id)
        time.sleep(600)


class WarnsAndKillsItsPool(ProcessProvider):
    """The process provider, whose boot of a VM of the second node's pool (``n1-vm-*``) warns,
    then kills its own process, the pool actor's (tests/test_ray_backend.py)."""

    def start(self, vm_id: str):
        """Warn and die on the second node; boot the sandbox elsewhere."""
        if vm_id.startswith("n1-"):
            project_log.warning("last words of the pool booting %s", vm_id)
            os.kill(os.getpid(), signal.SIGKILL)
        return super().start(vm_id)
