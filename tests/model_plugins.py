"""``module:Class`` agents that call the model, as plugin authors write them, for
tests/test_plugins_model.py. They answer ``user_plugins:DoubleEnv``'s tasks (twice n)."""

from __future__ import annotations

from user_plugins import ModelAgent


class DeclaredModelAgent(ModelAgent):
    """Says it calls the model: its settings are checked at start without --model."""

    uses_model = True
