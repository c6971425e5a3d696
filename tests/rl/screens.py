"""An OSWorld-shaped test mode and its stand-in model: big screenshots, many turns, no VM.

``screens:ScreenEnv`` (a task: ``{"id", "mode": "screens:ScreenEnv", "turns": 100,
"images": FOLDER}``) returns ``{"instruction", "screenshot_path"}`` observations, one screen
file of FOLDER per turn (``write_screens`` makes them: incompressible bytes of a given size),
and ends after ``turns`` turns with reward 1.

``screens:ScreenAgent`` stands in for the openai agent and its model (the one stand-in the
tests allow) without HTTP, so thousands of multi-megabyte requests cost no JSON parsing in a
server: it keeps the conversation exactly as ``OpenAIAgent`` does (the osworld rendering, a
base64 screenshot per user message, the last ``KEEP_IMAGES`` kept) and records per turn what
the agent records under an RL scheduler: the request, the reply, token ids, logprobs,
stop_reason and policy_version.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from parallel_rollout.agents import Agent
from parallel_rollout.agents import prompts
from parallel_rollout.agents.openai_agent import KEEP_IMAGES, drop_old_images
from parallel_rollout.envs.base import Env, StepResult

MODE = "screens:ScreenEnv"
AGENT = "screens:ScreenAgent"


def write_screens(folder: Path, count: int, size: int) -> Path:
    """``count`` screen files of ``size`` random bytes (as incompressible as a real PNG)."""
    folder.mkdir(parents=True, exist_ok=True)
    for index in range(count):
        path = folder / f"screen-{index}.png"
        if not path.exists() or path.stat().st_size != size:
            path.write_bytes(os.urandom(size))
    return folder


class ScreenEnv(Env):
    """``turns`` turns, a new screenshot each; the episode succeeds at its last turn."""

    vm_scope = None

    def reset(self, task, vm) -> dict[str, Any]:
        """The first screen."""
        self._task, self._turn = task, 0
        return self._observation()

    def _observation(self) -> dict[str, Any]:
        path = Path(self._task.get("images")) / f"screen-{self._turn}.png"
        return {"instruction": f"Task {self._task.id}: look at each screen", "screenshot_path": str(path)}

    def step(self, action: Any) -> StepResult:
        """The next screen; done after ``turns`` turns."""
        self._turn += 1
        done = self._turn >= int(self._task.get("turns"))
        return StepResult(self._observation() if not done else {"instruction": "done"}, done=done)

    def evaluate(self) -> tuple[float, dict[str, Any]]:
        """1 for an episode that used every turn."""
        return float(self._turn >= int(self._task.get("turns"))), {}


class ScreenAgent(Agent):
    """The openai agent's conversation without the HTTP: a fixed reply of three tokens."""

    def reset(self, task) -> None:
        """A new conversation, as OpenAIAgent starts it."""
        self._messages = [{"role": "system", "content": prompts.system_prompt("osworld")}]
        self._prompt: list[int] = [1, 2, 3]
        self._turn: dict[str, Any] = {}

    def act(self, observation: dict[str, Any]) -> Any:
        """The osworld rendering of the observation, then a WAIT."""
        self._messages.append({"role": "user", "content": prompts.render("osworld", observation)})
        drop_old_images(self._messages, KEEP_IMAGES)
        sampled = [7, 8, 9]
        self._turn = {"request": list(self._messages), "reply": "WAIT", "prompt_token_ids": list(self._prompt),
                      "token_ids": sampled, "logprobs": [-0.5] * 3, "stop_reason": "stop", "policy_version": 0}
        self._prompt += sampled + [4, 5]  # the next observation's (stand-in) tokens
        self._messages.append({"role": "assistant", "content": "WAIT"})
        return "WAIT"

    def turn_record(self) -> dict[str, Any]:
        """What OpenAIAgent records of a turn under an RL scheduler."""
        return dict(self._turn)
