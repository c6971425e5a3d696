"""``shell`` mode: run commands in a VM, then grade with a check command (exit 0 = reward 1).

A task: ``instruction``; optional ``setup`` commands run before the agent acts; ``check``, a
command whose exit status grades the end state; ``reference``, the commands the oracle
replays; ``timeout``, the seconds each command (setup, action, check) may run, 60 unless
given: an action cut by it has ``timeout`` (the message) in its observation, a check cut by
it grades 0 with ``check_timeout`` in the record's ``eval``. An action is
``{"command": "..."}`` (or the bare command string); ``{"done": true}`` or ``"DONE"`` ends
the episode. A setup command that fails or times out is ``setup_failed`` (never graded,
retried, then left for ``--resume``), as no answer has run yet. Before the check runs, the agent kills every process the
answer left behind (``/reap``): a daemon cannot change the end state while it is graded. A
task whose check is about a process left running says ``"reap": false``. The check runs as a
grading command (``isolated``: a cleared environment, system folders on ``PATH``, Python
without user site-packages or the home on its path, no shell startup file), so nothing the
answer left in the home but the files the check inspects can change its verdict; and not at
all (graded 0) over a link the answer left into a process's folder of ``/proc``, where what
the check reads is its own (``/proc/self/cmdline``: its arguments).
"""

from __future__ import annotations

import reprlib
from typing import Any, Mapping

from ..errors import TaskSetupFailed
from .base import Env, StepResult, reject_none, require, require_seconds, require_str_list

#: seconds one command may run unless the task says otherwise
DEFAULT_COMMAND_TIMEOUT_S = 60.0
#: characters of command output kept in observations and trajectories
OUTPUT_TAIL = 4000
#: what a shell action is, for the error an action of another kind gets
_SHELL_ACTION = "a shell action is {'command': str} or 'DONE'"


class ShellEnv(Env):
    """Commands in a sandbox, graded by the task's check command."""

    name = "shell"
    vm_scope = "episode"

    task_fields = frozenset({"instruction", "check", "setup", "reference", "reap", "timeout"})
    #: an agent that ran the check (or replayed the reference) before it finished would pass
    #: by trial; the setup stays: it says only what the VM holds, which the agent can look at
    answer_fields = frozenset({"check", "reference"})
    seed_is_secret = False  # nothing in a shell episode draws on it

    @staticmethod
    def validate_task(payload: Mapping[str, Any]) -> None:
        """instruction and check are strings; setup and reference are lists of strings."""
        require(payload, "instruction", str)
        require(payload, "check", str)
        if not payload["check"].strip():
            # the shell runs an empty command as a success: every answer would pass
            raise ValueError("field 'check' is empty: a check command grades the end state "
                             "(exit 0 = success), and an empty one would pass every answer")
        require_str_list(payload, "setup")
        require_str_list(payload, "reference")
        require(payload, "reap", bool, optional=True)
        require_seconds(payload, "timeout")
        _refuse_nul_bytes(payload)

    @staticmethod
    def reference_actions(task) -> list[Any]:
        """The reference commands, then DONE."""
        if "reference" not in task.payload:
            raise ValueError(f"task {task.id!r} has no 'reference' commands")
        return [{"command": command} for command in task.get("reference")] + ["DONE"]

    def reset(self, task, vm) -> dict[str, Any]:
        """Run the task's setup commands; the first observation is the instruction. A setup
        command that fails (an exit status, its timeout) is ``TaskSetupFailed``: the agent has
        done nothing to earn a 0, so the attempt is not graded (infrastructure, retried)."""
        self.task = task
        self.vm = vm
        self.timeout_s = float(task.get("timeout", DEFAULT_COMMAND_TIMEOUT_S))
        for index, command in enumerate(task.get("setup", []), start=1):
            result = self._run(command)
            if result["returncode"] != 0:
                raise TaskSetupFailed(
                    f"setup command {index} of task {task.id!r} failed with exit status "
                    f"{result['returncode']}: {command!r}: "
                    f"{result['timeout'] or result['error'][-500:] or result['output'][-500:] or '(it wrote nothing)'}"
                )
        # the keys of every later observation, an agent reading any of them before its first command
        return {"instruction": task.get("instruction"), "output": "", "error": "", "returncode": None}

    def step(self, action: Any) -> StepResult:
        """Run one command; ``done`` ends the episode."""
        reject_none(action, _SHELL_ACTION)
        if action == "DONE" or (isinstance(action, dict) and action.get("done")):
            return StepResult({"instruction": self.task.get("instruction")}, done=True)
        command = action.get("command") if isinstance(action, dict) else action
        if not isinstance(command, str):
            raise ValueError(f"{_SHELL_ACTION}, got {type(action).__name__} {reprlib.repr(action)}")
        result = self._run(command)
        observation = {
            "instruction": self.task.get("instruction"),
            "output": result["output"][-OUTPUT_TAIL:],
            "error": result["error"][-OUTPUT_TAIL:],
            "returncode": result["returncode"],
        }
        if result["timeout"]:  # the agent learns it was cut, not only a -9
            observation["timeout"] = result["timeout"]
        if result["note"]:  # it returned while a process it started holds its output
            observation["note"] = result["note"]
        return StepResult(observation)

    def evaluate(self) -> tuple[float, dict[str, Any]]:
        """Reward 1 when the check command exits 0, run once every process the answer
        left is gone: a daemon of the answer cannot fake or race the check."""
        if self.task.get("reap", True):
            self.vm.reap()
        # not run over a link the answer left into /proc/self (…/cmdline holds the check's own
        # arguments: grep -qx 37 ~/count.txt passed over one): graded 0, with why
        result = self._run(self.task.get("check"), isolated=True)
        # stderr too: "command not found" or a failed assertion's message is where a user looks
        details = {"check_returncode": result["returncode"], "check_output": result["output"][-500:],
                   "check_error": result["error"][-500:], "check_timeout": result["timeout"]}
        passed = result["returncode"] == 0 and not result["timeout"]
        return (1.0 if passed else 0.0), details

    def _run(self, command: str, isolated: bool = False) -> dict[str, Any]:
        # the agent keeps only the tail this mode keeps: an answer that prints a gigabyte
        # costs neither side more
        result = self.vm.execute(command, shell=True, timeout=self.timeout_s,
                                 isolated=isolated, tail=OUTPUT_TAIL, refuse_proc_links=isolated)
        timed_out = bool(result.get("timeout"))
        return {
            "returncode": result.get("returncode"),
            "output": result.get("output") or "",
            "error": result.get("error") or ("" if timed_out else result.get("message")) or "",
            # the task's limit, said in its own words: None unless it cut the command
            "timeout": (f"{'check' if isolated else 'command'} timed out after {self.timeout_s:g}s (the "
                        f"task's 'timeout', {DEFAULT_COMMAND_TIMEOUT_S:g}s by default); its process group "
                        "was killed" if timed_out else None),
            "note": result.get("note"),
        }


def _refuse_nul_bytes(payload: Mapping[str, Any]) -> None:
    """ValueError for a NUL byte in the check or a setup command (JSON's ``\\u0000``): no
    command line carries one, so the guest refuses to start it (exit 126) and every answer
    failed the check, or every attempt its setup (never graded, a ``--resume`` the same)."""
    commands = [("field 'check'", payload["check"], "every answer would fail it")]
    commands += [(f"field 'setup' command {index}", command, "every attempt would be setup_failed")
                 for index, command in enumerate(payload.get("setup", []), start=1)]
    for where, command, cost in commands:
        if "\0" in command:
            raise ValueError(f"{where} holds a NUL byte (character {command.index(chr(0)) + 1}), "
                             f"which no command line can carry: {cost}")
