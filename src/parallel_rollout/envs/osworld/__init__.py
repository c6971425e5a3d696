"""The ``osworld`` mode: OSWorld's tasks, action spaces and scoring on a desktop VM."""

from .env import OSWorldEnv

__all__ = ["OSWorldEnv"]
