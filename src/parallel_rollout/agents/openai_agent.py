"""The ``openai`` agent: a chat model behind any OpenAI-compatible endpoint chooses the actions.

One conversation per episode, kept by the agent (one instance per env loop, so no locking)::

    reset(task)      messages = [system(mode)]
    act(obs)         messages += user(render(mode, obs))   (or a tool message answering a call)
                     reply = self.model.chat(messages, tools)       (model_client.py)
                     messages += assistant(reply);  return parse(mode, reply) or the tool call's action

Everything about calling the model (servers and session affinity, sampling overrides,
retries, the RL policy gate and its aborts, token capture, stop reasons) is the
``ModelClient``'s, which every agent has: a plugin agent calling ``self.model.chat`` gets the
same. What is this agent's own: the mode's system prompt and rendering (``prompts.py``), the
screenshots kept (``KEEP_IMAGES``), and with ``tool_calls=True`` the mode's actions offered as
tools, a reply's ``tool_calls`` made the action and its observation answered as a ``tool``
message (``tools.py``). It says ``uses_model = True``: the run checks the model settings
before it starts (``model_checks.py``: the key where the endpoint needs one …;
``openai_request.py`` says where requests go and which key they carry); its
``check_config`` checks only its own settings, the tools.
"""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError
from . import prompts, tools
from .base import MODEL_OPTIONS, Agent

__all__ = ["OpenAIAgent", "KEEP_IMAGES", "drop_old_images"]


class OpenAIAgent(Agent):
    """Chat completions from an OpenAI-compatible endpoint, one conversation per episode."""

    name = "openai"
    options = MODEL_OPTIONS | {"tool_calls"}
    uses_model = True
    model_calls = frozenset({"chat"})  # the endpoint check asks chat's route only

    def __init__(self, config) -> None:
        super().__init__(config)
        self._mode = ""
        #: the mode's tools (tool_calls=True), and the last reply's calls awaiting answers
        self._tools: list[dict[str, Any]] | None = None
        self._calls: list[dict[str, Any]] = []
        self._messages: list[dict[str, Any]] = []

    @classmethod
    def check_config(cls, config) -> None:
        """Raise ConfigError before the run when --tool-calls cannot be honoured (the model
        settings are every model-calling agent's: ``model_checks.check_model_settings``)."""
        if getattr(config, "tool_calls", False) and config.mode not in tools.TOOLS:
            raise ConfigError(f"--tool-calls: mode {config.mode!r} has no tools (modes with tools: "
                              f"{', '.join(sorted(tools.TOOLS))})")
        if getattr(config, "tool_calls", False) and getattr(config, "tokenizer", None):
            raise ConfigError("tool_calls=True needs chat requests; token in, token out (tokenizer=) "
                              "sends no tools: give one of them")

    def reset(self, task) -> None:
        """Start a new conversation with the mode's system prompt; the model client starts
        the episode (already started by the worker: usage from zero, the attempt's server)."""
        self._mode = task.mode
        self._messages = [{"role": "system", "content": prompts.system_prompt(task.mode)}]
        self.model.start(self.attempt_info, label=task.id)
        self._tools = tools.tools_for(task.mode) if getattr(self.config, "tool_calls", False) else None
        self._calls = []

    def act(self, observation: dict[str, Any]) -> Any:
        """Send the observation, return the parsed reply (or the tool call's action);
        AgentError when retries run out."""
        content = prompts.render(self._mode, observation)
        if self._calls:  # the observation answers the last reply's tool call
            self._messages += tools.tool_messages(self._calls, content)
        else:
            self._messages.append({"role": "user", "content": content})
        drop_old_images(self._messages, KEEP_IMAGES)
        reply = self.model.chat(self._messages, tools=self._tools)
        self._calls = reply.tool_calls
        self._messages.append(tools.assistant_message(reply.text, self._calls))
        return tools.action_of(self._mode, self._calls) if self._calls else prompts.parse(self._mode, reply.text)


#: screenshots kept in the conversation (older ones become a note), as OSWorld's agents do
KEEP_IMAGES = 3


def drop_old_images(messages: list[dict[str, Any]], keep: int) -> None:
    """Replace every image but the last ``keep`` with a short text part."""
    seen = 0
    for message in reversed(messages):
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for index, part in enumerate(content):
            if part.get("type") == "image_url":
                seen += 1
                if seen > keep:
                    content[index] = {"type": "text", "text": "[older screenshot omitted]"}
