"""An agent for the rag tests: searches the task's reference queries, then submits the task's
``submit`` text (a deliberately wrong or partly right answer) instead of the gold one."""

from __future__ import annotations

from parallel_rollout.agents.base import Agent


class SubmitAgent(Agent):
    """Reference searches, then ``{"answer": task.submit}``."""

    task_fields = frozenset({"submit"})

    def reset(self, task) -> None:
        queries = (task.get("reference") or {}).get("queries", [])
        self.actions = [{"search": q, "k": 3} for q in queries] + [{"answer": task.get("submit")}]

    def act(self, observation):
        return self.actions.pop(0)
