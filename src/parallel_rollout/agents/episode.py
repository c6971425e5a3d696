"""What an episode's agent-side failures are, and which attempt an episode belongs to."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

from ..errors import RolloutError


class AgentError(RolloutError):
    """An agent could not produce an action (model API gave up, agent process broke); graded."""


class ModelUnavailable(AgentError):
    """The model endpoint did not answer a turn within --max-retries requests (connection
    refused or reset, no response in time, HTTP 408/409/429/5xx): the server's state, not the
    policy's answer. Infrastructure: retried, never graded; the batch runner stops a run whose
    endpoint fails attempt after attempt, leaving them to a resume."""

    kind = "model_unavailable"
    infrastructure = True


class EndpointRefused(AgentError):
    """The model endpoint refused the run's settings (HTTP 401 or 403: the key; 404: the
    model, or the path under --base-url; 405: a URL that takes no POST of the API): no request can succeed until they are fixed, so it
    says nothing of the policy. Infrastructure: never graded; the batch runner stops the run
    at the first one (exit 2), its attempts left to a resume (retries.REFUSING_STATUS), and an
    RL scheduler's get_batch raises it as a ConfigError (SETTINGS_MISMATCHES). With several
    servers the client raises it only when every one refuses (servers.ServerPool.refuse)."""

    kind = "endpoint_refused"
    infrastructure = True
    #: the HTTP status that refused (401, 403, 404, 405); None when no server answered so (a key
    #: missing before any request, a tokenizer that is not the served model's)
    status: int | None = None
    #: the endpoint and what it answered (with ``status``), without what to fix
    answer: str = ""


class TokenizerMismatch(EndpointRefused):
    """With ``tokenizer=``, the server's sampled token ids do not decode, by the run's
    tokenizer folder, to the reply's text: the folder is not the served model's, so the
    token history the agent keeps, and a trainer's tensors, would be ids of other text. The
    run's settings, as a refused model is: the batch runner stops at it (exit 2), and an RL
    scheduler's get_batch raises it as a ConfigError (``rl.budget``)."""


class TokenIdsNotReturned(EndpointRefused):
    """A token-id prompt (``tokenizer=``, ``generate()``) answered without the sampled token
    ids: the server does not return them (vLLM before 0.10.2), so no turn can be kept token
    for token. The run's settings against this server, as ``TokenizerMismatch``: not the
    policy's answer (it was every sample's final ``error``, graded 0)."""


#: the failures (their type names in a record) that say the run's settings do not fit the
#: model server: an RL scheduler's get_batch raises them as a ConfigError (``rl.budget``), as
#: a run stops at them (exit 2). A key or model the endpoint refuses (every server of a fleet)
#: is one: it spent max_failed_groups groups, each member's retries, before a RolloutError
SETTINGS_MISMATCHES = frozenset({"EndpointRefused", "TokenizerMismatch", "TokenIdsNotReturned"})


class AgentKilled(AgentError):
    """A ``command`` agent's process was killed from outside while its attempt ran: its
    bubblewrap died of a signal, which nothing inside its PID namespace and session can send
    it (an operator, the host's OOM killer). The runner's failure, like a VM killed from
    outside: infrastructure, retried, never graded."""

    kind = "agent_killed"
    infrastructure = True


class EpisodeCut(AgentError):
    """The model cannot go on with this episode; it ends graded at reward 0 (or, where the
    attempt asks, the env's reward of the episode so far) and is kept (an
    RL group keeps it as an outcome: the trainer masks or penalises it, it is not a failure).
    ``turn``: the cut turn's model exchange, written as the episode's last turn when the
    model did reply (its sampled tokens belong to the episode); {} when it did not."""

    #: the episode's reward as it stood when cut, set by the worker where the attempt asks
    #: for it (``Assignment.grade_cut``); else 0
    reward = 0.0

    def __init__(self, message: str, turn: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.turn = dict(turn or {})


class ContextOverflow(EpisodeCut):
    """The conversation no longer fits the model's context (the server said so, or the
    token budget ``max_model_len`` is reached)."""

    kind = "context_overflow"


#: HTTP statuses of a failure a retry may fix: rate limits, server trouble, request timeout,
#: lock conflict (a request's status, or the code of a stream's error event)
RETRYABLE_STATUS = frozenset({408, 409, 429}) | frozenset(range(500, 600))
#: words of an error that mean the prompt no longer fits the model's context: vLLM's and
#: OpenAI's 400s, SGLang's ("The input (N tokens) is longer than the model's context length",
#: and its scheduler's abort of a prompt past its limit, "Input length (N tokens) exceeds the
#: maximum allowed length (M tokens)", streamed as an error event)
OVERFLOW_WORDS = ("maximum context length", "context length", "context_length_exceeded", "too long",
                  "prompt is too long", "exceeds the context", "exceeds the maximum allowed length")


def says_overflow(text: str) -> bool:
    """Whether a server's error text says the prompt does not fit the model's context."""
    return any(word in text.lower() for word in OVERFLOW_WORDS)


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
    #: the env loop's index in the run (worker index × envs_per_worker + slot): with several
    #: servers, where its ties start in the list (servers.py), so one-loop workers spread
    loop: int = 0
    #: the worker's ear for the model endpoint's trouble: called with True when a request of
    #: a turn failed and is to be tried again (before the retry's wait), with False once that
    #: turn's call ended; an attempt whose time runs out in between was the endpoint's, not
    #: the task's (``backends.base.late_failures``)
    on_model_retry: Callable[[bool], None] | None = dataclasses.field(default=None, compare=False, repr=False)
    #: the local files that hold the task's answer key (``envs.answer_files_of``: an OSWorld
    #: task's gold files), which an agent that runs a program of its own withholds from it
    #: (the ``command`` agent): a task given in Python names them in no file of the run; and
    #: an RL scheduler's task set files, which no file of the run names either
    withheld: tuple[str, ...] = ()
    #: the servers of the fleet the run's start check found not serving its model: the
    #: agent's model client leaves them out (``agents/servers.py``)
    servers_left_out: tuple[str, ...] = ()
    #: those it did not hear (down then): the client asks each at its first visit (``agents/servers.py``)
    servers_unheard: tuple[str, ...] = ()

    @property
    def session_id(self) -> str:
        """An id unique per attempt: the session header's value (agents/servers.py)."""
        return f"{self.key}@{self.attempt}"
