"""A turn's reply over the requests a weight update split it into (partial rollouts).

**Partial rollouts.** The tokens of an aborted reply are kept (``Partial``): after the update
the request continues from them (``continued``) instead of starting over, with token ids
(prompt + partial ids to ``/completions``) or, in chat, by the server's continue-final-message
(the partial text as the last assistant message, ``continue_final_message``). Each token keeps
the policy version that sampled it (``versions``). The continuation's max_tokens is what
the turn's has left: less the ids sampled, else the usage's completion tokens; a part nobody
counted (no ids, a stream closed before its usage chunk) is said (``unchecked_limit``), not
guessed. In chat the server tokenizes that text
again, which need not give the ids it sampled (another valid tokenization; a partial UTF-8
character its detokenizer held back, whose ids came without their text): a continuation whose
reported ``prompt_token_ids`` are not the previous prompt + the ids sampled since is noted in
``retokenized`` (an empty report, ``prompt_token_ids: []``, is none), and in chat the turn's
record is split there (``calls.split_retokenized``); with a tokenizer the ids sent are the
ids sampled, and the turn is never split.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .streaming import StreamedReply

log = logging.getLogger("parallel_rollout")


@dataclass
class Partial:
    """A turn's reply so far, over one or more requests: its text and, per token, id,
    logprob and the policy version that sampled it."""

    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float | None] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    #: the prompt's ids as the server saw them on the turn's first request
    prompt_token_ids: list[int] | None = None
    #: the last request's finish_reason (None while aborted)
    finish_reason: str | None = None
    has_token_ids: bool = False
    #: requests the reply took (1 + continuations)
    requests: int = 0
    #: prompt tokens the server counted, over its requests
    prompt_tokens: int = 0
    #: the oldest policy version that sampled any of it (None: nothing yet)
    oldest: int | None = None
    #: the reply's tool calls, whole (the last request's: a continued reply adds none)
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    #: (token index, text index, the prompt ids the server reported) of each continuation whose
    #: prompt was not the previous prompt + the ids sampled since: the server re-tokenized the text
    retokenized: list[tuple[int, int, list[int]]] = field(default_factory=list)
    #: completion tokens the server counted (its usage chunk), over its requests: the reply's
    #: length from a server that sends no token ids
    completion_tokens: int = 0
    #: requests that sampled something whose length nobody told: no token ids and no usage
    #: (a stream this client closed ends before its usage chunk)
    uncounted: int = 0
    #: the last request's ``{"matched_stop": …}`` (``calls.matched_stop_of``), {} when not said
    matched: dict[str, Any] = field(default_factory=dict)

    @property
    def sampled(self) -> int:
        """Tokens sampled so far as far as known: the ids, else what the server's usage
        counted (``uncounted`` says how many requests' tokens are missing from it)."""
        return len(self.token_ids) if self.has_token_ids else self.completion_tokens

    def _retokenized_by(self, reply: "StreamedReply") -> list[tuple[int, int, list[int]]]:
        """Where ``reply``, continuing this partial, started from a prompt of the server's own
        tokenizing (``retokenized``): [] when it is the last prompt + the ids sampled since, or
        either prompt went unreported (an empty report, ``prompt_token_ids: []``, is none)."""
        if not self.requests or not reply.prompt_token_ids or not self.prompt_token_ids:
            return []
        at, _, prompt = self.retokenized[-1] if self.retokenized else (0, 0, self.prompt_token_ids)
        if reply.prompt_token_ids == prompt + self.token_ids[at:]:
            return []
        return [(len(self.token_ids), len(self.text), reply.prompt_token_ids)]

    def extend(self, reply: "StreamedReply", version: int) -> "Partial":
        """This partial followed by ``reply`` (sampled by ``version``)."""
        logprobs = reply.logprobs if len(reply.logprobs) == len(reply.token_ids) else [None] * len(reply.token_ids)
        return Partial(self.text + reply.text, self.token_ids + reply.token_ids, self.logprobs + logprobs,
                       self.versions + [version] * len(reply.token_ids),
                       self.prompt_token_ids if self.prompt_token_ids is not None else reply.prompt_token_ids,
                       reply.finish_reason, self.has_token_ids or reply.has_token_ids, self.requests + 1,
                       self.prompt_tokens + reply.usage.get("prompt_tokens", 0),
                       self.oldest if not (reply.text or reply.token_ids)
                       else version if self.oldest is None else min(self.oldest, version),
                       reply.whole_tool_calls() or self.tool_calls, self.retokenized + self._retokenized_by(reply),
                       self.completion_tokens + reply.usage.get("completion_tokens", 0),
                       self.uncounted + reply.uncounted, reply.matched)


def continued(request: dict[str, Any], partial: Partial, tokens: bool) -> dict[str, Any]:
    """``request`` continuing after ``partial``: token ids appended to the prompt, or (chat)
    the partial text as the last assistant message the server continues; max_tokens less by
    what was already sampled: its ids, else the completion tokens the server's usage counted
    (``Partial.sampled``; what no one counted, ``Partial.uncounted``, cannot be taken off)."""
    request = dict(request)
    if tokens:
        request["prompt"] = list(request["prompt"]) + partial.token_ids
    else:
        request["messages"] = list(request["messages"]) + [{"role": "assistant", "content": partial.text}]
        request["extra_body"] = {**request.get("extra_body", {}), "add_generation_prompt": False,
                                 "continue_final_message": True}
    for name in LIMITS:
        if request.get(name) is not None:
            request[name] = max(0, request[name] - partial.sampled)  # 0: nothing left (Wire.send_streamed)
    return request


#: the request fields that bound a reply's length
LIMITS = ("max_tokens", "max_completion_tokens")


def nothing_left(request: dict[str, Any], partial: Partial | None) -> bool:
    """Whether ``request`` continues ``partial`` with no token left to sample (``continued``
    made its max_tokens 0): it is never sent (``Wire.send_streamed``)."""
    return partial is not None and any(request.get(name) == 0 for name in LIMITS)
#: whether this process logged a turn ``unchecked_limit`` marked (once is enough to be told)
_told_unchecked: list[bool] = []


def unchecked_limit(partial: Partial, request: dict[str, Any]) -> dict[str, Any]:
    """``{"max_tokens_unchecked": True}`` for the record of a continued reply whose earlier
    requests sampled tokens nobody counted (``Partial.uncounted``: a server that streams no
    token ids, and no usage for a stream this client closed) while ``request`` has a token
    limit: its continuations could not take them off, so the reply may be longer than
    max_tokens; they are not guessed. Logged once per process."""
    if not partial.uncounted or all(request.get(name) is None for name in LIMITS):
        return {}
    if not _told_unchecked:
        _told_unchecked.append(True)
        log.warning("a reply continued after an abort (partial_rollout) may be longer than max_tokens: the model "
                    "server streamed no token ids (return_token_ids) and no usage for the aborted part, so its "
                    "length could not be taken off the continuation's max_tokens; such turns say "
                    "max_tokens_unchecked")
    return {"max_tokens_unchecked": True}
