"""The oracle agent: replays a task's reference, to validate a benchmark and the harness."""

from __future__ import annotations

from typing import Any

from .base import Agent


class OracleAgent(Agent):
    """Replays ``task.reference`` one action per turn, then says done."""

    name = "oracle"

    def reset(self, task) -> None:
        """Queue the task's reference actions."""
        reference = task.get("reference")
        if reference is None:
            raise ValueError(f"task {task.id!r} has no 'reference' for the oracle agent to replay")
        self._actions = list(reference)

    def act(self, observation: dict[str, Any]) -> Any:
        """The next reference action, then DONE."""
        if self._actions:
            return {"command": self._actions.pop(0)}
        return "DONE"
