"""Segments: a trajectory's turns as training data, token for token.

Each turn records what the server saw and sampled: ``prompt_token_ids`` (the whole prompt,
as rendered), ``token_ids`` (sampled), ``logprobs`` (one per sampled token) and the
``policy_version`` of the request (a turn continued across a weight update, ``partial``,
has ``versions``: one per sampled token, e.g. ``[6, 6, …, 7, 7]``). A trajectory is one
sequence while every prompt extends the previous prompt + completion (append-only history:
always so with a tokenizer, where the agent sends the ids itself)::

    turn 1  [ prompt₁ ·························][ sampled₁ ]
    turn 2  [ prompt₁ ·························][ sampled₁ ][ obs₂ ··· ][ sampled₂ ]
    segment  input_ids  = prompt₁ + sampled₁ + obs₂ + sampled₂
             loss_mask  =    0…0  +   1…1    +  0…0 +   1…1
             logprobs   =    0.0  +  lp₁     +  0.0 +  lp₂
             versions   =    -1   +  v₁      +  -1  +  v₂

A turn whose agent called the model more than once (a "plan" call, then an "act" call)
holds its earlier calls in ``earlier_calls`` and those that outlived its act in
``outlived_calls`` (``agents/calls.py``): the turn is its calls in the order they ran
(``calls_of``), each one a prompt and its sampled ids as above, so every sampled token is in a segment
with loss_mask 1, in the context the server sampled it in (a plan's reply, seen again in the
act call's prompt, is the sampled ids already in the sequence, not prompt tokens).

When a call's prompt does not start with the sequence so far (the server re-rendered the chat
template differently: a template that drops earlier ``<think>`` blocks; an agent whose calls
are no one conversation), the call starts a new segment (tinker's ``trajectory_to_data`` and
Agent Lightning merge the same way): never a sequence the model did not see.
``len(segments) - 1`` is the trajectory's ``drift``. A partial rollout continued in chat
from a text the server tokenized to other ids is such a break too: its record is split into
calls where that happened (``agents/calls.py``, ``split_retokenized``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..agents.calls import calls_of
from ..agents.wire import NO_TOKEN_IDS_HINT
from ..errors import RolloutError


class NoTokenIds(RolloutError):
    """A turn without token ids: the server did not return them."""

    kind = "no_token_ids"


@dataclass
class Segment:
    """One exact token sequence; every list has one entry per token."""

    #: the tokens, prompt and sampled, in order
    input_ids: list[int] = field(default_factory=list)
    #: 1 on tokens the policy sampled, 0 on prompt, observation and template tokens
    loss_mask: list[int] = field(default_factory=list)
    #: the sampling logprob of each sampled token (NaN where the server sent none); 0.0 elsewhere
    logprobs: list[float] = field(default_factory=list)
    #: the policy version that sampled each token; -1 where loss_mask is 0
    versions: list[int] = field(default_factory=list)
    #: the trajectory's turns (0-based) in this segment, each once (a turn of several calls may
    #: be in two, when one of its calls starts a new segment)
    turns: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.input_ids)

    def _context(self, ids: list[int]) -> None:
        self.input_ids.extend(ids)
        self.loss_mask.extend([0] * len(ids))
        self.logprobs.extend([0.0] * len(ids))
        self.versions.extend([-1] * len(ids))

    def _sampled(self, ids: list[int], logprobs: list[float], versions: list[int]) -> None:
        self.input_ids.extend(ids)
        self.loss_mask.extend([1] * len(ids))
        self.logprobs.extend(logprobs)
        self.versions.extend(versions)


def build_segments(turns: list[dict[str, Any]], where: str = "trajectory") -> list[Segment]:
    """The segments of ``turns`` (see the module docstring); NoTokenIds naming the turn when
    one of its calls has no token ids or an empty prompt, ValueError when its logprobs do not match its tokens."""
    segments: list[Segment] = []
    current: Segment | None = None
    for index, turn in enumerate(turns):
        made = turn.get("turn", index + 1)
        calls = calls_of(turn)
        for number, call in enumerate(calls, 1):
            if not _EXCHANGE & call.keys():
                continue  # a turn whose act called no model (the agent acted on its own)
            name = f"turn {made}" if len(calls) == 1 else f"turn {made}, call {number} of {len(calls)}"
            prompt, sampled, logprobs, versions = _call_data(call, f"{where}: {name}")
            if current is not None and prompt[: len(current)] == current.input_ids:
                current._context(prompt[len(current):])
            else:
                current = Segment()
                segments.append(current)
                current._context(prompt)
            current._sampled(sampled, logprobs, versions)
            if not current.turns or current.turns[-1] != index:
                current.turns.append(index)
    return segments


def tokens_without_logprob(turns: list[dict[str, Any]]) -> tuple[int, int]:
    """(sampled tokens, those of them without a logprob) in ``turns``: the NaN a segment holds
    where the server sent none (``logprobs`` null or absent for a call, or null for a token)."""
    sampled = missing = 0
    for turn in turns:
        for call in calls_of(turn):
            ids, logprobs = call.get("token_ids"), call.get("logprobs")
            if not isinstance(ids, list):
                continue  # no token ids: segments() raises NoTokenIds for it
            sampled += len(ids)
            missing += len(ids) if not isinstance(logprobs, list) else sum(1 for lp in logprobs if lp is None)
    return sampled, missing


#: what a turn's record holds when its act called the model (every call records a stop_reason)
_EXCHANGE = frozenset({"reply", "stop_reason", "prompt_token_ids", "token_ids"})


def _call_data(call: dict[str, Any], name: str) -> tuple[list[int], list[int], list[float], list[int]]:
    """One model call's prompt ids, sampled ids, logprobs and versions (one per sampled id)."""
    prompt, sampled = call.get("prompt_token_ids"), call.get("token_ids")
    if not isinstance(prompt, list) or not isinstance(sampled, list):
        missing = "prompt_token_ids" if not isinstance(prompt, list) else "token_ids"
        raise NoTokenIds(f"{name} has no {missing}: the model server returned no token ids: {NO_TOKEN_IDS_HINT}")
    if not prompt:  # sampled tokens without their context: no sequence the model saw
        raise NoTokenIds(f"{name} has an empty prompt_token_ids: the model server reported no prompt tokens "
                         f"for a prompt it answered: {NO_TOKEN_IDS_HINT}")
    logprobs = call.get("logprobs")
    if logprobs is None:
        logprobs = [math.nan] * len(sampled)
    if len(logprobs) != len(sampled):
        raise ValueError(f"{name} has {len(sampled)} token ids but {len(logprobs)} logprobs")
    logprobs = [math.nan if lp is None else float(lp) for lp in logprobs]
    version = call.get("policy_version")
    versions = call.get("versions")  # a partial rollout's call: one version per token
    if not isinstance(versions, list) or len(versions) != len(sampled):
        versions = [-1 if version is None else int(version)] * len(sampled)
    return prompt, sampled, logprobs, [int(v) for v in versions]
