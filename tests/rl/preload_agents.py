"""The openai agent as a plugin that says, as its episode starts, whether the model client's
``openai`` package was imported before the attempt began (by the workers' server, which the
worker is a fork of), or is still to be imported in the attempt, on its clock."""

from __future__ import annotations

import sys

from parallel_rollout.agents import AgentError
from parallel_rollout.agents.openai_agent import OpenAIAgent


class ImportedBefore(OpenAIAgent):
    """Fails its episode (the agent's error) when ``openai`` is not imported at its start."""

    def reset(self, task) -> None:
        if "openai" not in sys.modules:
            raise AgentError("the openai package is imported in the attempt, on its clock")
        super().reset(task)
