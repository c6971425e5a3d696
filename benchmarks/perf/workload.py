"""The benchmark's workload: a think-then-run task, as envs, an agent and a provider plugin.

A task says how long the agent thinks (``think_s``: a model call, simulated by a wait in the
worker, outside any VM) and which command then runs in a VM through the guest agent
(``command``, e.g. ``sleep 0.05``). The env records how long that command held the guest
(``vm_s``, measured around the ``/execute`` call) so the benchmark can add up the VM time
the tasks really needed.

Three modes, named to the runner by their ``module:Class`` path (``MODES``; spawned workers
import this module by that path: the benchmark's folder is on the ``sys.path`` they inherit):

* ``perf_call``    — vm_scope "call": the VM is leased only around the command (design a);
* ``perf_episode`` — vm_scope "episode": the VM is held for the whole episode, think time
  included, as OSWorld's runner and the sandbox-per-task harnesses do (designs b and c);
* ``perf_none``    — no VM: the zero-length task that measures the runner's own overhead.

``FreshSandboxProvider`` is the process provider whose reset stops the sandbox (its folder
removed) and starts a brand-new one: design c, a fresh sandbox for every task;
``FreshDockerProvider`` and ``FreshQemuProvider`` the same on docker and qemu (resets.py).
"""

from __future__ import annotations

import time
from typing import Any

from parallel_rollout.agents.base import Agent
from parallel_rollout.envs.base import Env, StepResult, require
from parallel_rollout.pool.providers.base import VMInfo
from parallel_rollout.pool.providers.docker import DockerProvider
from parallel_rollout.pool.providers.process import ProcessProvider
from parallel_rollout.pool.providers.qemu import QemuProvider

MODES = {
    "perf_call": "workload:CallEnv",
    "perf_episode": "workload:EpisodeEnv",
    "perf_none": "workload:NoVMEnv",
    # the same on VMs with a desktop (resets.py: QEMU desktops)
    "perf_call_desktop": "workload:DesktopCallEnv",
    "perf_episode_desktop": "workload:DesktopEpisodeEnv",
}


class ThinkAgent(Agent):
    """The model: waits ``think_s`` (a model call), then asks for the task's command."""

    def reset(self, task) -> None:
        self.task = task

    def act(self, observation: dict[str, Any]) -> Any:
        think_s = float(self.task.get("think_s", 0.0))
        if think_s > 0:
            time.sleep(think_s)
        return {"command": self.task.get("command")}


class _WorkloadEnv(Env):
    """One step: run the action's command in a VM (if any); reward 1 when it exits 0."""

    default_max_turns = 1
    turn_limit_status = "failure"

    @staticmethod
    def validate_task(payload) -> None:
        """think_s is a number; command a string (absent: nothing runs in the VM)."""
        require(payload, "think_s", (int, float), optional=True)
        require(payload, "command", str, optional=True)

    def reset(self, task, vm) -> dict[str, Any]:
        """Nothing runs yet."""
        self.task, self.vm = task, vm
        self.vm_s = 0.0
        #: wall-clock times of the lease around the command (CallEnv), for measure.lease_split
        self.marks: dict[str, float] = {}
        self.returncode: int | None = 0
        return {}

    def step(self, action: Any) -> StepResult:
        """Run the command, timing how long the guest took."""
        command = action.get("command") if isinstance(action, dict) else None
        if command:
            self._run(command)
        return StepResult({}, done=True)

    def _run(self, command: str) -> None:
        raise NotImplementedError

    def _execute(self, client, command: str) -> None:
        started = time.perf_counter()
        result = client.execute(command, shell=True, timeout=60)
        self.vm_s += time.perf_counter() - started
        self.returncode = result.get("returncode")

    def evaluate(self) -> tuple[float, dict[str, Any]]:
        """Reward 1 when the command exited 0; the VM time (and the lease's marks) go into
        the record."""
        extra: dict[str, Any] = {"vm_s": round(self.vm_s, 6)}
        if self.marks:
            extra["marks"] = {name: round(at, 6) for name, at in self.marks.items()}
        return (1.0 if self.returncode == 0 else 0.0), extra


class CallEnv(_WorkloadEnv):
    """Leases a VM only around the command: no VM waits while the agent thinks."""

    name = "perf_call"
    vm_scope = "call"

    def _run(self, command: str) -> None:
        # time.time(), as events.jsonl: "leased" once the block has its client, "ran" once
        # the command has answered, "released" once the release has answered
        with self.vm.lease() as client:
            self.marks["leased"] = time.time()
            self._execute(client, command)
            self.marks["ran"] = time.time()
        self.marks["released"] = time.time()


class EpisodeEnv(_WorkloadEnv):
    """Holds its VM for the episode, think time included."""

    name = "perf_episode"
    vm_scope = "episode"

    def _run(self, command: str) -> None:
        self._execute(self.vm, command)


class NoVMEnv(_WorkloadEnv):
    """No VM, nothing to run: only the runner's own work per task is left."""

    name = "perf_none"
    vm_scope = None

    def _run(self, command: str) -> None:
        pass


class DesktopCallEnv(CallEnv):
    """perf_call on VMs with a desktop."""

    name = "perf_call_desktop"
    needs_desktop = True


class DesktopEpisodeEnv(EpisodeEnv):
    """perf_episode on VMs with a desktop."""

    name = "perf_episode_desktop"
    needs_desktop = True


class _Fresh:
    """A brand-new VM for every task: reset = stop (everything of the VM removed) + start."""

    def reset(self, info: VMInfo) -> VMInfo:
        """Stop the VM and everything it left, then boot a new one from the snapshot."""
        self.stop(info)
        return self.start(info.vm_id)


class FreshSandboxProvider(_Fresh, ProcessProvider):
    """Design c on the process provider."""


class FreshDockerProvider(_Fresh, DockerProvider):
    """Design c on docker: a new container from the image per task (no spare handed out)."""

    def _make_spare(self, vm_id: str) -> None:
        """No spare container: every task waits for its own boot."""


class FreshQemuProvider(_Fresh, QemuProvider):
    """Design c on qemu: a new QEMU process (and overlay) per task."""
