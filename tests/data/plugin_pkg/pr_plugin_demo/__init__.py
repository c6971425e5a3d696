"""A third-party plugin: the ``echo-word`` mode, the ``echo-agent`` agent and the
``logged-process`` provider, found by parallel-rollout through entry points.

``echo-word``: a task names a word; the agent's action is a word, which the env prints in the
VM (``printf``) and reads back; reward 1 when the VM printed the task's word.
``echo-agent``: answers the task's word, reversed when the task says ``"wrong": true``.
``logged-process``: the process provider, appending one line per VM start to the file named
by ``$PR_PLUGIN_LOG`` so a test can see the plugin provider really ran.
"""

from __future__ import annotations

import os
import shlex

from parallel_rollout.agents.base import Agent
from parallel_rollout.envs.base import Env, StepResult, require
from parallel_rollout.pool.providers.process import ProcessProvider


class EchoWordEnv(Env):
    """Print the agent's word in the VM; reward 1 when it is the task's word."""

    name = "echo-word"
    vm_scope = "episode"
    default_max_turns = 1
    turn_limit_status = "failure"

    @staticmethod
    def validate_task(payload) -> None:
        """word is a string."""
        require(payload, "word", str)

    @staticmethod
    def reference_actions(task):
        """The task's word."""
        return [task.get("word")]

    def reset(self, task, vm):
        """Nothing printed yet."""
        self.task, self.vm, self.printed = task, vm, None
        return {"instruction": f"say {task.get('word')}"}

    def step(self, action):
        """Print the word in the VM and keep what came back."""
        result = self.vm.execute(f"printf %s {shlex.quote(str(action))}", shell=True, timeout=30)
        self.printed = result.get("output")
        return StepResult({"printed": self.printed}, done=True)

    def evaluate(self):
        """1 when the VM printed the task's word."""
        return float(self.printed == self.task.get("word")), {"printed": self.printed}


class EchoAgent(Agent):
    """Answers the task's word (reversed for a task marked wrong)."""

    name = "echo-agent"

    def reset(self, task) -> None:
        self.task = task

    def act(self, observation):
        word = self.task.get("word")
        return word[::-1] if self.task.get("wrong") else word


class LoggedProcessProvider(ProcessProvider):
    """The process provider, logging each VM it starts to ``$PR_PLUGIN_LOG``."""

    def start(self, vm_id):
        info = super().start(vm_id)
        with open(os.environ["PR_PLUGIN_LOG"], "a") as log:
            log.write(f"{vm_id}\n")
        return info
