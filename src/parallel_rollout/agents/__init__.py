"""Agents: who chooses the actions (``oracle``, ``openai``, ``command``, ``module:Class``
plugins), and ``ModelClient``, the one way an agent calls the policy (imported on first use:
it brings the HTTP client and the retry policy).

What an agent raises to say what went wrong: ``ModelUnavailable`` (the model endpoint did not
answer: infrastructure, the attempt retried, never graded), ``EndpointRefused`` (the endpoint
refused the run's settings: the run stops), ``AgentError`` or any other exception (the
agent's own error, graded), ``LengthCut`` / ``ContextOverflow`` (the episode ends, graded 0)."""

from typing import Any

from .base import Agent, get_agent
from .episode import AgentError, AttemptInfo, ContextOverflow, EndpointRefused, EpisodeCut, LengthCut, ModelUnavailable

__all__ = ["Agent", "AgentError", "AttemptInfo", "ContextOverflow", "EndpointRefused", "EpisodeCut", "LengthCut",
           "ModelClient", "ModelUnavailable", "Reply", "get_agent"]


def __getattr__(name: str) -> Any:
    if name in ("ModelClient", "Reply"):
        from . import model_client

        return getattr(model_client, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
