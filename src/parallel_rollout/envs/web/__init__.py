"""``web`` mode: MiniWoB++ in Chromium inside the VM (see ``env``)."""

from .env import WebEnv

__all__ = ["WebEnv"]
