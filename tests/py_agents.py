"""Agents for the py-mode tests: they answer from the task's own ``answers`` list."""

from __future__ import annotations

import time

from parallel_rollout.agents.base import Agent
from chaos_plugins import first_time


class ScriptedAnswerAgent(Agent):
    """Answers turn n with ``task.answers[n]`` (the last one again when they run out).

    An answer ``{"once": code, "then": code}`` gives ``once`` on the first attempt of the
    task in the test and ``then`` afterwards; ``task.think_s`` sleeps before each answer,
    like a model thinking."""

    task_fields = frozenset({"answers", "think_s"})

    def reset(self, task) -> None:
        self.task = task
        self.turn = 0

    def act(self, observation):
        answers = self.task.get("answers")
        answer = answers[min(self.turn, len(answers) - 1)]
        self.turn += 1
        time.sleep(self.task.get("think_s", 0))
        if isinstance(answer, dict):
            answer = answer["once"] if first_time(f"{self.task.id}.{self.turn}") else answer["then"]
        return answer
