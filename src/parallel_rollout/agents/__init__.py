"""Agents: who chooses the actions. ``oracle`` and ``module:Class`` plugins so far."""

from .base import Agent, get_agent

__all__ = ["Agent", "get_agent"]
