"""An agent for the rag tests: searches the task's question, then submits the task's ``submit``
text (a deliberately wrong or partly right answer) instead of the gold one (which, like the
reference searches, no agent but the oracle sees)."""

from __future__ import annotations

from parallel_rollout.agents.base import Agent


class SubmitAgent(Agent):
    """A search for the question, then ``{"answer": task.submit}``."""

    task_fields = frozenset({"submit"})

    def reset(self, task) -> None:
        self.actions = [{"search": task.get("question"), "k": 3}, {"answer": task.get("submit")}]

    def act(self, observation):
        return self.actions.pop(0)
