"""Agents: who chooses the actions. ``oracle`` and ``module:Class`` plugins so far."""

from .base import Agent, ContextOverflow, EpisodeCut, LengthCut, get_agent

__all__ = ["Agent", "ContextOverflow", "EpisodeCut", "LengthCut", "get_agent"]
