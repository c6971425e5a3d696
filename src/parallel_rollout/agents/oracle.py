"""The oracle agent: replays a task's reference, to validate a benchmark and the harness."""

from __future__ import annotations

from typing import Any

from ..envs import get_env
from .base import Agent


class OracleAgent(Agent):
    """Replays the mode's reference actions for the task (shell commands, HumanEval's
    canonical solution, the math answer), one per turn; a mode whose env has
    ``replan(task, observation)`` (gym) is asked for each move instead."""

    name = "oracle"
    options = frozenset()  # it calls no model: --model and the rest are refused
    sees_answer_key = True  # the references it replays are the answer key

    @staticmethod
    def check_task(task) -> None:
        """Reject, before the run starts, a task the oracle cannot replay."""
        from ..errors import TaskFileError

        try:
            get_env(task.mode).reference_actions(task)
        except ValueError as exc:
            raise TaskFileError(f"{task.source}: --agent oracle: {exc}") from None

    def reset(self, task) -> None:
        """Queue the task's reference actions."""
        self._task = task
        self._replan = getattr(get_env(task.mode), "replan", None)
        self._actions = list(get_env(task.mode).reference_actions(task))

    def act(self, observation: dict[str, Any]) -> Any:
        """The next reference action (the last one again once they run out)."""
        if self._replan is not None:
            return self._replan(self._task, observation)
        if len(self._actions) > 1:
            return self._actions.pop(0)
        return self._actions[0] if self._actions else "DONE"
