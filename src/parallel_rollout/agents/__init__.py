"""Agents: who chooses the actions. ``oracle`` and ``module:Class`` plugins so far."""

from .base import Agent, AttemptInfo, ContextOverflow, EpisodeCut, LengthCut, get_agent

__all__ = ["Agent", "AttemptInfo", "ContextOverflow", "EpisodeCut", "LengthCut", "get_agent"]
