"""The Agent interface and the lookup of built-in and plugin agents.

An agent chooses actions; it calls the policy through its ``model`` (a ``ModelClient``, made
on first use), which brings routing, retries, the RL policy gate, token capture and stop
reasons with it: an agent that calls only ``self.model.chat`` records in the trajectory what
the built-in ``openai`` agent records (``turn_record`` and ``usage`` default to the client's).
``reset`` and ``act`` may be ``async def``: the worker runs them on the env loop's own event
loop (``self.model.achat`` then awaits the call).
"""

from __future__ import annotations

import abc
import inspect
from typing import TYPE_CHECKING, Any, ClassVar

from ..plugins import Registry
from .episode import AgentError, AttemptInfo, ContextOverflow, EpisodeCut, LengthCut

if TYPE_CHECKING:
    from ..config import RunConfig
    from ..tasks import Task
    from .model_client import ModelClient

__all__ = ["AGENTS", "MODEL_KEYS", "MODEL_OPTIONS", "Agent", "AgentError", "AttemptInfo", "ContextOverflow", "EpisodeCut",
           "LengthCut", "get_agent", "refused_by_agent", "run_maybe_async"]

#: the model client's settings with no flag of their own (config-file keys, run()'s keywords)
MODEL_KEYS: frozenset[str] = frozenset({"tokenizer", "max_model_len", "on_length", "api_timeout_s", "partial_rollout",
                                        "abort_url", "policy_gate"})
#: the run settings an agent's ModelClient (``self.model``) reads: every agent's by default
MODEL_OPTIONS: frozenset[str] = frozenset({"model", "base_url", "temperature", "max_tokens", "sampling",
                                           "extra_body", "session_header", "server_cooldown"}) | MODEL_KEYS


class Agent(abc.ABC):
    """Chooses the next action from an observation; one instance per env loop."""

    name: ClassVar[str] = ""
    #: the situational RunConfig fields this agent honours: those of its ``self.model``
    #: (--model, --base-url, --temperature …), which every agent has; an agent that calls no
    #: model (the oracle) says ``frozenset()``, so a run refuses --model for it
    options: ClassVar[frozenset[str]] = MODEL_OPTIONS
    #: whether it calls the model through ``self.model``, which decides whether the run checks
    #: the model settings before it starts (the key where the endpoint needs one, the URL's
    #: form, the openai package: ``model_checks.py``): True always (the openai agent), None
    #: when the run gives it --model or --base-url (the default), False never
    uses_model: ClassVar[bool | None] = None
    #: which of ``self.model``'s calls it makes, so that the endpoint check (``--check-endpoint``,
    #: the RL scheduler's before its first batch) asks each one's route of the server: ``"chat"``
    #: (``chat``/``achat``: ``/chat/completions``, or ``/completions`` with a ``tokenizer``),
    #: ``"generate"`` (``generate``/``agenerate``: ``/completions``). None, the default: not
    #: said, so a server with either route passes (a completions-only server then fails an
    #: agent that calls ``chat`` at its first request, not at the check)
    model_calls: ClassVar[frozenset[str] | None] = None
    #: task fields this agent reads beyond its mode's (a test agent's scripted answer): a task
    #: file may carry them; any other field a built-in mode does not know is refused at load
    task_fields: ClassVar[frozenset[str]] = frozenset()
    #: whether ``reset`` gets the task whole, its answer key included (``Env.answer_fields``:
    #: tests, checks, gold answers, references): only an agent that replays references by
    #: design (the oracle) says True; every other agent gets the task without them
    sees_answer_key: ClassVar[bool] = False
    #: the attempt of the episode ``reset`` starts (None outside a worker, e.g. in a test)
    attempt_info: AttemptInfo | None = None

    def __new__(cls, *args: Any, **kwargs: Any) -> "Agent":
        # __init__'s fields, set before it runs: an agent whose own __init__ does not call
        # super().__init__(config) has self.config and self.model all the same (it failed
        # every attempt with "'MyAgent' object has no attribute 'config'" at its first chat)
        agent = super().__new__(cls)
        agent.config = args[0] if args else kwargs.get("config")
        agent.sample_key = None
        agent._model_client = None
        return agent

    def __init__(self, config: "RunConfig") -> None:
        self.config = config
        #: the engine's key of the sample the episode under way belongs to (set by the
        #: worker; the policy gate keeps the policy versions each key's requests got)
        self.sample_key: str | None = None
        self._model_client: "ModelClient | None" = None

    @property
    def model(self) -> "ModelClient":
        """This agent's way to the policy (``ModelClient``), made on first use and started
        on the attempt under way."""
        if self.__dict__.get("_model_client") is None:  # a subclass may skip __init__'s field
            from .model_client import ModelClient  # tenacity and the HTTP parts only when used

            self._model_client = ModelClient(self.config)
            self._model_client.start(self.attempt_info)
        return self._model_client

    def model_failure(self) -> AgentError | None:
        """The endpoint's failure ``self.model`` raised in this attempt (``ModelUnavailable``,
        ``EndpointRefused``), or None: the worker records the attempt as that failure
        (infrastructure, never graded) even when the agent caught it and went on."""
        client = self.__dict__.get("_model_client")
        return client.endpoint_failure if client is not None else None

    def begin_attempt(self, info: AttemptInfo) -> None:
        """The worker's call before ``reset``: the episode belongs to attempt ``info``; the
        model client (if made) starts it (its server, session id, usage)."""
        self.attempt_info = info
        self.sample_key = info.key
        if self.__dict__.get("_model_client") is not None:
            self._model_client.start(info)

    def begin_turn(self) -> None:
        """The worker's call before each ``act``: the model client's calls from here on are
        this turn's (``turn_record``), so a turn whose ``act`` calls no model records no model
        exchange, not the previous turn's again; those made in ``reset`` (a plan asked for
        before the first observation) are turn 1's."""
        client = self.__dict__.get("_model_client")
        if client is not None:
            client.begin_turn()

    @abc.abstractmethod
    def reset(self, task: "Task") -> None:
        """Start a new episode of ``task`` (without its answer key unless ``sees_answer_key``)."""

    @abc.abstractmethod
    def act(self, observation: dict[str, Any]) -> Any:
        """The next action for the environment."""

    def end_episode(self) -> None:
        """The worker's call once the episode is graded (not after one that failed): an
        exception fails the attempt as the agent's error. The command agent checks here that
        its process wrote no line after its last reply; nothing by default."""

    def turn_record(self) -> dict[str, Any]:
        """What the last ``act`` exchanged with a model (request, reply, token ids, logprobs,
        policy version), added to the turn's trajectory line: the model client's calls since
        the last turn (the act's last one's fields, the others in ``earlier_calls``, those that
        outlived the act in ``outlived_calls``); {} for agents that never called it."""
        client = self.__dict__.get("_model_client")
        return client.turn_record() if client is not None else {}

    def cut_turn(self, cut: EpisodeCut) -> dict[str, Any]:
        """The model exchange of the turn whose ``act`` raised ``cut``, written as the
        episode's last turn: the model client's (every call of the turn, those that outlived
        the act too: ``ModelClient.cut_turn``); ``cut.turn`` for agents that never called it."""
        client = self.__dict__.get("_model_client")
        return client.cut_turn(cut) if client is not None else cut.turn

    def usage(self) -> dict[str, Any]:
        """Resource use of the episode so far (token counts, requests, retries), recorded
        with the attempt: the model client's; {} for agents that never called it."""
        client = self.__dict__.get("_model_client")
        return client.usage() if client is not None else {}

    def abort(self) -> None:
        """The episode was cancelled (called from another thread): the model client closes
        the request under way and its calls raise ``AttemptCancelled``; the worker stops the
        episode at its next turn in any case."""
        client = self.__dict__.get("_model_client")
        if client is not None:
            client.abort()


def run_maybe_async(value: Any, loop_of: Any) -> Any:
    """``value`` itself, or what it resolves to when an ``async def`` agent method returned
    an awaitable: run on the event loop ``loop_of()`` gives (one per env loop, kept)."""
    if inspect.isawaitable(value):
        return loop_of().run_until_complete(value)
    return value


#: built-in agents, ``parallel_rollout.agents`` entry points and ``module:Class`` paths
AGENTS: Registry[Agent] = Registry("agent", {
    "oracle": "parallel_rollout.agents.oracle:OracleAgent",
    "openai": "parallel_rollout.agents.openai_agent:OpenAIAgent",
    "command": "parallel_rollout.agents.command:CommandAgent",
}, Agent, made_with=("config",))


def get_agent(name: str, said: str | None = None) -> type[Agent]:
    """The agent class for a name (built-in or plugin) or a ``module:Class`` import path; its
    errors name the setting that gave it as ``said`` (``--agent``, ``agent in run.toml``)."""
    return AGENTS.load(name, said)


def refused_by_agent(agent_cls: type[Agent], tasks: list[Task]) -> list[tuple[Task, str]]:
    """The tasks the agent's ``check_task`` refuses (the oracle's without a reference), each
    with its refusal ("FILE:LINE: --agent oracle: task 'x' has no 'reference' …")."""
    from ..errors import TaskFileError

    check_task = getattr(agent_cls, "check_task", None)
    refused = []
    for task in tasks if check_task is not None else ():
        try:
            check_task(task)
        except TaskFileError as exc:
            refused.append((task, str(exc)))
    return refused
