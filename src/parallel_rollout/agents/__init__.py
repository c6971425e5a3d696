"""Agents: who chooses the actions (``oracle``, ``openai``, ``command``, ``module:Class``
plugins), and ``ModelClient``, the one way an agent calls the policy (imported on first use:
it brings the HTTP client and the retry policy)."""

from typing import Any

from .base import Agent, get_agent
from .episode import AttemptInfo, ContextOverflow, EpisodeCut, LengthCut

__all__ = ["Agent", "AttemptInfo", "ContextOverflow", "EpisodeCut", "LengthCut", "ModelClient", "Reply", "get_agent"]


def __getattr__(name: str) -> Any:
    if name in ("ModelClient", "Reply"):
        from . import model_client

        return getattr(model_client, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
