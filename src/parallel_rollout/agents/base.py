"""The Agent interface and the lookup of built-in and plugin agents."""

from __future__ import annotations

import abc
import dataclasses
from typing import TYPE_CHECKING, Any, ClassVar, Mapping

from ..errors import RolloutError
from ..plugins import Registry

if TYPE_CHECKING:
    from ..config import RunConfig
    from ..tasks import Task


class AgentError(RolloutError):
    """An agent could not produce an action (model API gave up, agent process broke); graded."""


class EpisodeCut(AgentError):
    """The model cannot go on with this episode; it ends graded at reward 0 and is kept (an
    RL group keeps it as an outcome: the trainer masks or penalises it, it is not a failure).
    ``turn``: the cut turn's model exchange, written as the episode's last turn when the
    model did reply (its sampled tokens belong to the episode); {} when it did not."""

    def __init__(self, message: str, turn: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.turn = dict(turn or {})


class ContextOverflow(EpisodeCut):
    """The conversation no longer fits the model's context (the server said so, or the
    token budget ``max_model_len`` is reached)."""

    kind = "context_overflow"


class LengthCut(EpisodeCut):
    """A reply cut at the token limit (``stop_reason == "length"``) under ``on_length="end"``."""

    kind = "truncated"


@dataclasses.dataclass(frozen=True)
class AttemptInfo:
    """The attempt an agent's next episode belongs to, set by the worker before ``reset``."""

    #: the sample's key (unique within an engine)
    key: str
    attempt: int
    #: sampling overrides of this attempt (a scheduler's ``sampling=``): merged over the run
    #: config's temperature, max_tokens and ``sampling`` table in each model request
    sampling: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def session_id(self) -> str:
        """An id unique per attempt: the session header's value (agents/servers.py)."""
        return f"{self.key}@{self.attempt}"


class Agent(abc.ABC):
    """Chooses the next action from an observation; one instance per env loop."""

    name: ClassVar[str] = ""
    #: the situational RunConfig fields this agent honours (model, temperature …)
    options: ClassVar[frozenset[str]] = frozenset()
    #: the attempt of the episode ``reset`` starts (None outside a worker, e.g. in a test)
    attempt_info: AttemptInfo | None = None

    def __init__(self, config: "RunConfig") -> None:
        self.config = config
        #: the engine's key of the sample the episode under way belongs to (set by the
        #: worker; the policy gate keeps the policy versions each key's requests got)
        self.sample_key: str | None = None

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

    def abort(self) -> None:
        """The episode was cancelled: end the model request under way at once (called from
        another thread) and raise ``AttemptCancelled`` from ``act``. The default does
        nothing: the worker stops the episode at its next turn."""


#: built-in agents, ``parallel_rollout.agents`` entry points and ``module:Class`` paths
AGENTS: Registry[Agent] = Registry("agent", {
    "oracle": "parallel_rollout.agents.oracle:OracleAgent",
    "openai": "parallel_rollout.agents.openai_agent:OpenAIAgent",
    "command": "parallel_rollout.agents.command:CommandAgent",
}, Agent)


def get_agent(name: str) -> type[Agent]:
    """The agent class for a name (built-in or plugin) or a ``module:Class`` import path."""
    return AGENTS.load(name)
