"""A turn's model calls: every call an agent's ``act`` makes is in the turn's record, and
``Reply``, one call's answer as the agent gets it (``ModelClient.chat`` / ``generate``).

An agent may call the policy more than once a turn (a "plan" call, then an "act" call). Each
call samples tokens a trainer must see, so the turn's record (``ModelClient.turn_record``)
holds them all::

    turn record = the last call's fields (request, prompt_token_ids, token_ids, logprobs,
                  policy_version, versions, stop_reason, reply …), as a one-call turn's are
                + "earlier_calls": [the record of each call before it, oldest first]
                  (only when there was one: a one-call turn's record is as it always was)

Each earlier call has the same fields as the turn's own (its prompt as the server saw it, its
sampled ids, logprobs, versions, stop reason). ``segments()`` reads a turn as its calls in
order (``calls_of``). A reader that knows no ``earlier_calls`` still reads the turn's last
call exactly as before: the format only adds a field. A turn whose ``act`` called no model
(the worker's ``Agent.begin_turn`` before each ``act``) records no model exchange at all.

**A partial rollout's reply the server re-tokenized.** In chat, a reply continued after a
weight update (``partial_rollout``) is continued from its text, which the server tokenizes
again: the ids it then conditions on need not be the ids it sampled (another valid
tokenization; a partial UTF-8 character whose ids came before their text). Where they are not
(``streaming.Partial.retokenized``), the call's record is split (``split_retokenized``): what
was sampled before is an earlier call of its own (its prompt, its ids as they were sampled,
each with its logprob and version, ``stop_reason`` "abort"), and the call's own fields hold
what followed, its ``prompt_token_ids`` what the server saw (``retokenized``: true) and its
``reply`` the text that followed (the pieces' replies joined are the reply's text, which the
agent's Reply keeps whole). Nothing
sampled is dropped and nothing is stitched: segments() starts a new segment there (drift).
"""

from __future__ import annotations

import dataclasses
from typing import Any

#: the field of a turn's record that holds its earlier calls
EARLIER_CALLS = "earlier_calls"
#: the fields of a completion's choice that name the stop a reply ended on: vLLM's
#: ``stop_reason`` (the ``stop`` string or ``stop_token_ids`` id matched; null at EOS or a
#: length stop) and SGLang's ``matched_stop`` (the stop string or token id, its EOS id too)
MATCHED_FIELDS = ("stop_reason", "matched_stop")


def matched_stop_of(choice: Any) -> dict[str, Any]:
    """``{"matched_stop": value}`` of a choice that says what its reply stopped on (a string,
    a token id, or null: ``MATCHED_FIELDS``), recorded next to the call's ``stop_reason``;
    {} of one that says nothing of it (a server that sends neither field)."""
    if not isinstance(choice, dict) or not any(name in choice for name in MATCHED_FIELDS):
        return {}
    value = next((choice[name] for name in MATCHED_FIELDS if choice.get(name) is not None), None)
    if value is not None and (isinstance(value, bool) or not isinstance(value, (str, int))):
        value = str(value)  # neither a string nor a token id: kept as the server said it
    return {"matched_stop": value}


def calls_of(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The calls a turn's (or a call's) record holds, oldest first: its ``earlier_calls``,
    then its own fields (without them)."""
    earlier = record.get(EARLIER_CALLS)
    own = {key: value for key, value in record.items() if key != EARLIER_CALLS}
    return [*(call for call in earlier if isinstance(call, dict)), own] if isinstance(earlier, list) else [own]


def turn_of(records: list[dict[str, Any]]) -> dict[str, Any]:
    """One turn's record of its calls' records (oldest first, each maybe holding earlier
    calls of its own): the last call's fields, the others in ``earlier_calls``."""
    flat = [call for record in records for call in calls_of(record)]
    turn = dict(flat[-1]) if flat else {}
    if len(flat) > 1:
        turn[EARLIER_CALLS] = flat[:-1]
    return turn


def split_retokenized(record: dict[str, Any], breaks: list[tuple[int, int, list[int]]], text: str) -> dict[str, Any]:
    """A continued call's ``record`` (the prompt ids of its first request; every sampled id
    with its logprob and version; its whole reply ``text``) split at ``breaks`` (token index,
    text index, the prompt ids the server reported there): the pieces before the last are
    ``earlier_calls`` (a piece that sampled nothing is left out), the last is the record's own,
    with its own text as ``reply`` (the pieces' replies joined are the whole reply's text)."""
    ids = record.get("token_ids")
    if not breaks or not isinstance(ids, list):
        return record
    logprobs, versions = record.get("logprobs"), record.get("versions")
    starts = [(0, 0, record.get("prompt_token_ids")), *breaks]
    ends = [(at, text_at) for at, text_at, _ in breaks] + [(len(ids), len(text))]
    pieces = []
    for (at, text_at, prompt), (end, text_end) in zip(starts, ends):
        piece = {"prompt_token_ids": prompt, "token_ids": ids[at:end],
                 "logprobs": logprobs[at:end] if isinstance(logprobs, list) else None}
        if isinstance(versions, list):
            piece["versions"] = versions[at:end]
        pieces.append((piece, text[text_at:text_end]))
    earlier = [{**piece, "policy_version": piece.get("versions", [None])[-1], "stop_reason": "abort",
                "reply": piece_text, "partial": True}
               for piece, piece_text in pieces[:-1] if piece["token_ids"]]
    own, own_text = pieces[-1]
    return {**record, **own, "reply": own_text, "retokenized": True, **({EARLIER_CALLS: earlier} if earlier else {})}


def joined(record: dict[str, Any], name: str) -> Any:
    """A call's ``token_ids`` or ``logprobs`` over the pieces its record may be split in
    (``split_retokenized``): the whole reply's; None where a piece has none."""
    pieces = calls_of(record)
    if len(pieces) == 1 or not all(isinstance(piece.get(name), list) for piece in pieces):
        return record.get(name)
    return [value for piece in pieces for value in piece[name]]


@dataclasses.dataclass(frozen=True)
class Reply:
    """One call's answer: the text, the tool calls as they came, the stop reason, and the
    call's record (token ids, logprobs, versions …; ``turn_record()`` holds it, with the
    turn's other calls)."""

    text: str
    tool_calls: list[dict[str, Any]]
    stop_reason: str
    turn: dict[str, Any]

    @property
    def token_ids(self) -> list[int] | None:
        """The sampled token ids (under a gate, with a tokenizer, or from ``generate``): the
        whole reply's, a record split where the server re-tokenized it too (``calls.py``)."""
        return joined(self.turn, "token_ids")

    @property
    def logprobs(self) -> list[float] | None:
        """One logprob per sampled token, where the server sent them."""
        return joined(self.turn, "logprobs")

    @property
    def prompt_token_ids(self) -> list[int] | None:
        """The prompt's token ids (of the call's first request), where known."""
        return calls_of(self.turn)[0].get("prompt_token_ids")

    @property
    def matched_stop(self) -> str | int | None:
        """The stop string or token id the reply ended on, where the server says (vLLM's
        ``stop_reason``, SGLang's ``matched_stop``; None at EOS, or when it says nothing)."""
        return self.turn.get("matched_stop")

    @property
    def policy_version(self) -> int | None:
        """The policy version that answered (under an RL scheduler's gate)."""
        return self.turn.get("policy_version")
