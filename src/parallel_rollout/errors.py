"""One exception class per cause of failure; every failure ends up as a record."""

from __future__ import annotations

import signal
import sys
from typing import Any

#: the signals that stop a run cleanly (exit 130): Ctrl-C, SIGTERM, and a closed ssh session's SIGHUP
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def handled_stop_signals() -> tuple[int, ...]:
    """The STOP_SIGNALS a run sets its handler for: those not ignored. One the process started
    with ignored (``nohup`` ignores SIGHUP; a scheduler or a background job may ignore one)
    was ignored on purpose and stays so: no handler of the CLI or the runner ever replaces an
    ignored signal, so it is still SIG_IGN here, and the workers, which inherit it, keep it."""
    return tuple(sig for sig in STOP_SIGNALS if signal.getsignal(sig) is not signal.SIG_IGN)


def _runner_orders_the_stop(signum: int, frame: object) -> None:
    """SIGTERM in the run's helper processes: see ``follow_the_runner_on_sigterm``."""


def follow_the_runner_on_sigterm() -> None:
    """In a process the runner stops itself (the pool's Manager, the workers' server): a
    SIGTERM sent to the whole job (``timeout``, Airflow's kill, ``kill -TERM -PGID``, a
    systemd stop) reaches it with the runner, which stops the run in order (finishing what
    completes within seconds, then stopping the pool); dying of it first lost those attempts
    and logged the pool's death. A handler, not SIG_IGN: the programs it starts (VMs) get
    SIGTERM's default back at exec, and the workers it forks set theirs. Kept ignored when the
    run was started with it ignored."""
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN:
        signal.signal(signal.SIGTERM, _runner_orders_the_stop)


def importing_the_parents_main() -> bool:
    """True while multiprocessing runs the parent's main module in a child (spawn's
    ``prepare``, a server's preload): that module's code is not this process's command."""
    mp_process = sys.modules.get("multiprocessing.process")
    return bool(mp_process and getattr(mp_process.current_process(), "_inheriting", False))


class RolloutError(Exception):
    """Base of every error the runner itself raises."""

    #: the failure type written to results.jsonl
    kind = "error"
    #: infrastructure failures are retried on another VM and never graded
    infrastructure = False
    #: the task's own error, never graded yet not retried (the record's ``task_fault``):
    #: "task_file" (a resume, which refuses an edited task file, leaves it) or "file_missing"
    #: (a file the task names: a resume runs it again, once the file is there)
    task_fault: str | None = None


class WorkerDied(RolloutError):
    """A worker process exited while it held an attempt."""

    kind = "worker_died"
    infrastructure = True


class GraderKilled(RolloutError):
    """A grader process of the worker (the math mode's) died during a grading of a signal
    that no limit of its own explains (not its CPU limit, not its deadline, not a crash
    of its grading, no OOM kill counted), or could not start (not spawned, ended or too
    slow as it started): killed from outside, as a worker can be. Infrastructure, retried,
    recorded as ``worker_died``; the answer is graded again on the next attempt."""

    kind = "worker_died"
    infrastructure = True


class AgentEndedWorker(RolloutError):
    """The worker exited with a status of its own (``os._exit``: no signal) while its attempt
    was in the agent's turns: an in-process agent (a plugin's code) ended it. The agent's
    error, graded 0 and final like any other, so that an agent cannot erase an attempt it is
    failing by ending the process that would record it. A worker killed by a signal (the
    OOM killer, an operator) stays ``WorkerDied``."""

    kind = "error"


class TaskTimeout(RolloutError):
    """An attempt ran past --task-timeout; graded as a failure, not retried."""

    kind = "task_timeout"


class TaskSetupFailed(RolloutError):
    """The env could not set its task up before the agent acted (a file it names that cannot
    be had, an app the VM lacks, a setup step that failed): no score, since the agent did
    nothing to earn a 0; retried on another VM, then left ungraded for ``--resume``."""

    kind = "setup_failed"
    infrastructure = True


class TaskFileFault(TaskSetupFailed):
    """What the task file itself got wrong, found only as an attempt runs (a rule without a
    key its metric reads): ``setup_failed``, never graded as any, but not retried (every
    attempt would end so, each after the agent's whole episode) nor run again by a resume
    (which refuses an edited task file). Its record says ``task_fault: "task_file"``. A VM
    that failed to set the task up stays ``TaskSetupFailed``, retried."""

    task_fault = "task_file"


class TaskFileMissing(TaskFileFault):
    """A file the task names by a path (a gold file, a step's input) that is not there: not
    retried either (no other VM has it), but a resume runs it again (once), the file put in
    place (the task file itself unchanged). ``task_fault: "file_missing"``."""

    task_fault = "file_missing"


class AttemptCancelled(RolloutError):
    """A front end cancelled the attempt; its record is dropped by the engine."""

    kind = "cancelled"


class LeaseTimeout(RolloutError):
    """No VM became idle within the lease timeout."""

    kind = "lease_timeout"
    infrastructure = True


class PoolExhausted(RolloutError):
    """Every VM is dead and the replacement budget is spent: no lease can ever succeed."""

    kind = "pool_exhausted"
    infrastructure = True


class PoolClosed(RolloutError):
    """The pool was shut down; no more leases."""

    kind = "pool_closed"
    infrastructure = True


class VMError(RolloutError):
    """A VM or its provider failed (boot, reset, crash)."""

    kind = "vm_error"
    infrastructure = True


class SandboxViolation(VMError):
    """The VM broke while it ran the task's own actions (a killed guest agent, a VM that
    stopped answering) and its provider found no cause outside the task (else ``VMKilled``):
    the task's failure, graded 0 and not retried; the VM restarts from its snapshot without
    spending the replacement budget."""

    kind = "sandbox_violation"
    infrastructure = False


class VMKilled(RolloutError):
    """A VM died under a task of something the task did not do, as its provider tells
    (``Provider.death_cause``: its sandbox killed by a signal the pool did not send, its
    agent stopped or traced from outside, the host's OOM killer, the machine gone, a process
    VM's socket removed on the host): infrastructure, retried on another VM, never the
    task's ``sandbox_violation``. Recorded as ``vm_error``; its message says why. Not a
    VMError, so that nothing on its way out grades it as the task's again."""

    kind = "vm_error"
    infrastructure = True


class GuestUnreachable(VMError):
    """The guest agent inside a VM did not answer."""

    kind = "guest_unreachable"


class GuestKeyRefused(VMError):
    """The guest agent answered 401: it asks for a key the client did not give it, or for
    another one (a remote agent's ``--key-file`` against the run's ``--vm-key-file``). No wait
    mends that."""


class AgentNotMade(RolloutError):
    """The run's agent could not be made (its constructor raised: a missing key, a bad option,
    a typo): every attempt of every worker would end so, as ``error`` graded 0 and final, so
    that a resume after the fix ran none of them. The engine stops the run at the first one
    (exit 1, the attempt left to a resume), as it does for a guest that lacks what the mode
    needs."""

    kind = "agent_not_made"
    infrastructure = False


class GuestPrerequisiteMissing(RolloutError):
    """The leased VM lacks what the mode needs in it (the web mode's Chromium): no broken VM
    to replace and no task's failure, but a guest image to fix. The engine stops the run at
    the first one (exit 1, the attempt left to a resume) instead of retrying it on VM after
    VM; the VM itself is released as usual."""

    kind = "guest_prerequisite_missing"
    infrastructure = True


class VMSettingsMismatch(RolloutError):
    """A VM that booted is not what the run's settings ask for, and no retry or replacement
    can change that (a remote machine whose screen is not --screen-width x --screen-height or
    that runs no desktop, whose agent refuses the --vm-key-file, whose --reset-command names a
    program not found, whose agent cannot run --verify-reset's probe: no /run_python, an address
    whose server has no GET /platform: no guest agent): the run's settings to fix, not a flaky machine. The provider's
    ``start`` raises it, at a machine's first boot in the run; the
    pool boots no replacement and fails every later lease with it, and the run stops at once
    (exit 2, as for a bad flag), its attempts left to a resume."""

    kind = "vm_settings_mismatch"
    infrastructure = True


class ProviderUnavailable(RolloutError):
    """A provider cannot run on this machine (missing binary, no daemon); says how to fix it."""

    kind = "provider_unavailable"


class ConfigError(Exception):
    """A bad flag, config file or task file; reported before anything runs. The core and the
    Python API raise it as is; the CLI maps it to a usage error (exit 2)."""


class TaskFileError(ConfigError):
    """A task file that cannot be loaded; the message starts with ``file:line:``."""

    #: bad records one error lists (the count says how many more)
    MAX_SHOWN = 20

    @classmethod
    def of_records(cls, where: str, bad: list[str], what: str = "bad task records") -> "TaskFileError":
        """One error naming every bad record of ``where`` (the first MAX_SHOWN, and how many
        more): a fix-and-rerun per record is slow on a big set; one alone reads as itself."""
        if len(bad) == 1:
            return cls(bad[0])
        shown = bad[:cls.MAX_SHOWN] + ([f"… and {len(bad) - cls.MAX_SHOWN} more"] if len(bad) > cls.MAX_SHOWN else [])
        return cls(f"{where}: {len(bad)} {what}:\n" + "\n".join(f"  {line}" for line in shown))


class ModeConflict(TaskFileError):
    """A task that names another mode than the run's --mode."""


class RunLocked(ConfigError):
    """Another run holds the run folder's lock; the CLI exits 75 (EX_TEMPFAIL) so cron retries."""


class ClusterUnreachable(ConfigError):
    """The Ray cluster of ``--backend ray`` cannot be reached (nothing takes a connection at
    its address, ``auto`` finds none) or refuses this driver: a prerequisite missing, nothing
    ran (exit 2); the message names the address."""


class InterruptedBeforeStart(KeyboardInterrupt):
    """Ctrl-C or SIGTERM came while the run was being prepared, before its folder opened:
    nothing ran and nothing was written; the CLI exits 130 as for a later interrupt. A
    KeyboardInterrupt, so that no ``except Exception`` on the way (a plugin's import) takes it."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"interrupted by signal {signum} before the run started: nothing ran")
        self.signum = signum


class RunInterrupted(KeyboardInterrupt):
    """``api.run``: Ctrl-C or SIGTERM stopped a run that had started; it was closed as the
    CLI closes one (summary written, resumable) and ``outcome`` is its RunOutcome (exit code
    130). A KeyboardInterrupt, so that a script looping over runs stops as Ctrl-C stops Python."""

    def __init__(self, outcome: Any, resume: str) -> None:
        super().__init__(f"the run in {outcome.run_dir} was interrupted and closed; {resume} continues it")
        self.outcome = outcome


def raise_interrupted(signum: int, frame: object) -> None:
    """A signal handler for the time before a run opens its folder: ends what it prepares
    with InterruptedBeforeStart (after that, the run stops itself cleanly)."""
    raise InterruptedBeforeStart(signum)
