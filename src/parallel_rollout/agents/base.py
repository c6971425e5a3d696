"""The Agent interface and the lookup of built-in and plugin agents."""

from __future__ import annotations

import abc
import importlib
from typing import TYPE_CHECKING, Any, ClassVar

from ..errors import ConfigError, RolloutError

if TYPE_CHECKING:
    from ..config import RunConfig
    from ..tasks import Task

_AGENTS = {
    "oracle": "parallel_rollout.agents.oracle:OracleAgent",
    "openai": "parallel_rollout.agents.openai_agent:OpenAIAgent",
    "command": "parallel_rollout.agents.command:CommandAgent",
}


class AgentError(RolloutError):
    """An agent could not produce an action (model API gave up, agent process broke); graded."""


class Agent(abc.ABC):
    """Chooses the next action from an observation; one instance per env loop."""

    name: ClassVar[str] = ""
    #: the situational RunConfig fields this agent honours (model, temperature …)
    options: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, config: "RunConfig") -> None:
        self.config = config

    @abc.abstractmethod
    def reset(self, task: "Task") -> None:
        """Start a new episode of ``task``."""

    @abc.abstractmethod
    def act(self, observation: dict[str, Any]) -> Any:
        """The next action for the environment."""

    def turn_record(self) -> dict[str, Any]:
        """What the last ``act`` exchanged with a model (request, reply, token ids, logprobs,
        policy version), added to the turn's trajectory line; {} for agents without one."""
        return {}

    def usage(self) -> dict[str, Any]:
        """Resource use of the episode so far (token counts), recorded with the attempt."""
        return {}


def agent_names() -> list[str]:
    """The built-in agent names (plugins are ``module:Class``)."""
    return sorted(_AGENTS)


def get_agent(name: str) -> type[Agent]:
    """The agent class for a built-in name or a ``module:Class`` import path."""
    target = _AGENTS.get(name, name)
    if ":" not in target:
        raise ConfigError(
            f"unknown agent {name!r}; use one of {', '.join(agent_names())} or module:Class"
        )
    module_name, _, class_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"--agent {name}: cannot import module {module_name!r}: {exc}") from None
    cls = getattr(module, class_name, None)
    if not (isinstance(cls, type) and issubclass(cls, Agent)):
        raise ConfigError(f"--agent {name}: {class_name!r} in {module_name} is not an Agent subclass")
    return cls
