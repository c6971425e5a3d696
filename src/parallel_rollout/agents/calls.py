"""A turn's model calls: every call an agent's ``act`` makes is in the turn's record, and
``Reply``, one call's answer as the agent gets it (``ModelClient.chat`` / ``generate``).

An agent may call the policy more than once a turn (a "plan" call, then an "act" call). Each
call samples tokens a trainer must see, so the turn's record (``ModelClient.turn_record``)
holds them all::

    turn record = the act's last call's fields (request, prompt_token_ids, token_ids,
                  logprobs, policy_version, versions, stop_reason, reply …), as a one-call
                  turn's are: the last call that ended before ``act`` returned
                + "earlier_calls": [the record of each call before it, oldest first]
                  (only when there was one: a one-call turn's record is as it always was)
                + "outlived_calls": [each call still under way when ``act`` returned, in the
                  order they ran, each marked "outlived_act": true] (only when there was one)

Each other call has the same fields as the turn's own (its prompt as the server saw it, its
sampled ids, logprobs, versions, stop reason). ``segments()`` reads a turn as its calls in
the order they ran (``calls_of``: earlier, own, outlived; calls of one client take turns,
so a call that outlived the act ran after every call that did not). A reader that knows no
``earlier_calls`` still reads the turn's own call exactly as before: the format only adds
fields. A call that outlived its act (the loser of an ``asyncio.wait(FIRST_COMPLETED)``
race, a background task) is never the turn's own sample, though it ended last: the act's
move did not come from it. When every call of a turn outlived its act (it returned before
any ended), the turn has no own call fields, only ``outlived_calls``. A turn whose ``act``
called no model (the worker's ``Agent.begin_turn`` before each ``act``) records no model
exchange at all.

**A partial rollout's reply the server re-tokenized.** In chat, a reply continued after a
weight update (``partial_rollout``) is continued from its text, which the server tokenizes
again: the ids it then conditions on need not be the ids it sampled (another valid
tokenization; a partial UTF-8 character whose ids came before their text). Where they are not
(``partial_reply.Partial.retokenized``), the call's record is split (``split_retokenized``): what
was sampled before is an earlier call of its own (its prompt, its ids as they were sampled,
each with its logprob and version, ``stop_reason`` "abort"), and the call's own fields hold
what followed, its ``prompt_token_ids`` what the server saw (``retokenized``: true) and its
``reply`` the text that followed (the pieces' replies joined are the reply's text, which the
agent's Reply keeps whole). Nothing
sampled is dropped and nothing is stitched: segments() starts a new segment there (drift).
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import functools
import threading
from typing import Any, Callable

#: the field of a turn's record that holds its earlier calls
EARLIER_CALLS = "earlier_calls"
#: the field, true, of a call still under way (or waiting for its turn) when its ``act``
#: returned: the turn's record waited for it (``Turns.record``)
OUTLIVED_ACT = "outlived_act"
#: the field of a turn's record that holds those calls, after its own (never its own sample)
OUTLIVED_CALLS = "outlived_calls"
#: the fields of a turn's record that hold calls other than its own
CALL_LISTS = (EARLIER_CALLS, OUTLIVED_CALLS)
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
    """The calls a turn's (or a call's) record holds, in the order they ran: its
    ``earlier_calls``, its own fields (without those lists), its ``outlived_calls``."""
    own = {key: value for key, value in record.items() if key not in CALL_LISTS}
    earlier, outlived = (record.get(name) for name in CALL_LISTS)
    return [*_listed(earlier), own, *_listed(outlived)]


def _listed(calls: Any) -> list[dict[str, Any]]:
    return [call for call in calls if isinstance(call, dict)] if isinstance(calls, list) else []


def turn_of(records: list[dict[str, Any]], outlived: list[dict[str, Any]] = ()) -> dict[str, Any]:
    """One turn's record of its calls' records (oldest first, each maybe holding earlier
    calls of its own): the last call's fields, the others in ``earlier_calls``; the records
    of the calls that ``outlived`` its act (in the order they ran) in ``outlived_calls``,
    each piece marked ``outlived_act``."""
    flat = [call for record in records for call in calls_of(record)]
    turn = dict(flat[-1]) if flat else {}
    if len(flat) > 1:
        turn[EARLIER_CALLS] = flat[:-1]
    late = [{**call, OUTLIVED_ACT: True} for record in outlived for call in calls_of(record)]
    if late:
        turn[OUTLIVED_CALLS] = late
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


class Ticket:
    """One call of a client: the turn it belongs to (the one under way when it was made)
    and, once it runs, its record."""

    __slots__ = ("turn", "record", "outlived")

    def __init__(self, turn: int) -> None:
        self.turn = turn
        self.record: dict[str, Any] | None = None
        #: it was still under way when its turn was recorded (its act had returned)
        self.outlived = False


class Turns:
    """Which turn each call of one client is recorded under: the turn whose ``act`` made it.

    A call is made (``made``) in the turn under way, runs (``runs``, its record filed under
    that turn, in the order calls run) and ends (``ended``). ``record()``, the worker's after
    ``act``, waits for the turn's calls still under way or waiting for their turn (an async
    agent's call that lost an ``asyncio.wait(FIRST_COMPLETED)`` race, one fired as a
    background task): their sampled ids are the turn's, each under its own prompt, marked
    ``outlived_act``, in its ``outlived_calls`` (never its own sample: that is the last call
    that ended before ``act`` returned); they were filed under the next turn. A call
    made after the turn was recorded begins the next one (``begin``: the worker's before each
    ``act``; calls made in ``reset`` are turn 1's). Thread-safe: calls run in threads."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._turn = 0  # the turn under way (unique in the client's life: a stray call of a past one files nowhere)
        self._recorded = False  # whether its record was taken: the next call begins a new turn
        self._calls: dict[int, list[dict[str, Any]]] = {}
        self._running: dict[int, list[Ticket]] = {}
        #: the call an EpisodeCut ended, the cut, and the cut call's own record as it raised it
        self._cut: tuple[Ticket, BaseException, dict[str, Any]] | None = None

    def reset(self) -> None:
        """A new episode: no turn's calls kept."""
        with self._lock:
            self._turn, self._recorded = self._turn + 1, False
            self._calls, self._running, self._cut = {}, {}, None
            self._lock.notify_all()

    def begin(self) -> None:
        """A new turn, once the last one was recorded."""
        with self._lock:
            self._current()

    def _current(self) -> int:
        if self._recorded:
            self._turn, self._recorded = self._turn + 1, False
        return self._turn

    def made(self) -> Ticket:
        """A call is made: its ticket, in the turn under way, counted until it ``ended``."""
        with self._lock:
            ticket = Ticket(self._current())
            self._running.setdefault(ticket.turn, []).append(ticket)
            return ticket

    def runs(self, ticket: Ticket, record: dict[str, Any]) -> None:
        """The call is sent now (its turn at the client): ``record``, filled as it runs, is
        its turn's next call."""
        with self._lock:
            ticket.record = record
            self._calls.setdefault(ticket.turn, []).append(record)

    def ended(self, ticket: Ticket) -> None:
        """The call ended (answered, failed or never sent)."""
        with self._lock:
            running = self._running.get(ticket.turn, [])
            if ticket in running:
                running.remove(ticket)
            if ticket.outlived and ticket.record is not None:
                ticket.record[OUTLIVED_ACT] = True
            self._lock.notify_all()

    def answered_before(self, ticket: Ticket) -> list[dict[str, Any]]:
        """The calls of the ticket's turn answered before it ran (a cut keeps them)."""
        with self._lock:
            return [call for call in self._calls.get(ticket.turn, [])
                    if call is not ticket.record and "reply" in call]

    def record(self) -> dict[str, Any]:
        """The turn's record, once its calls have ended: the act's answered calls in the order
        they ran, and its last one answered or not, the turn's own (``turn_of``); those that
        outlived it, answered, in ``outlived_calls``. The next call begins a new turn."""
        with self._lock:
            made = self._ended_calls(self._turn)
        acted, late = _outlived_apart(made)
        return turn_of([call for call in acted[:-1] if "reply" in call] + acted[-1:], late)

    def cut(self, ticket: Ticket, cut: BaseException, own: dict[str, Any]) -> None:
        """The call ``ticket`` raised ``cut`` (an EpisodeCut), its record as the cut holds it
        ``own`` ({} when the model did not reply)."""
        with self._lock:
            self._cut = (ticket, cut, dict(own))

    def cut_record(self, cut: BaseException) -> dict[str, Any] | None:
        """The cut turn's record, once its other calls have ended (a gathered call that
        outlived the cut act, sampled all the same): its answered calls in the order they ran,
        the cut call last, those that outlived the act in ``outlived_calls``; None when ``cut``
        was not raised by a call of this client."""
        with self._lock:
            if self._cut is None or self._cut[1] is not cut:
                return None
            ticket, _, own = self._cut
            self._cut = None
            made = self._ended_calls(ticket.turn)
        acted, late = _outlived_apart([call for call in made if call is not ticket.record])
        return turn_of([call for call in acted if "reply" in call] + ([own] if own else []), late)

    def _ended_calls(self, turn: int) -> list[dict[str, Any]]:
        """``turn``'s calls, once those under way or waiting for their turn have ended (each
        then marked outlived); the turn is recorded: the next call begins a new one. Under
        the lock."""
        for ticket in self._running.get(turn, []):
            ticket.outlived = True
        while self._running.get(turn) and turn == self._turn:
            self._lock.wait()
        self._recorded = self._recorded or turn == self._turn  # not a new episode's, started meanwhile
        self._running.pop(turn, None)
        return self._calls.pop(turn, [])


def _outlived_apart(made: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A turn's calls (in the order they ran) as those of its act and those answered that
    outlived it (one that failed after its act returned sampled nothing)."""
    acted = [call for call in made if not call.get(OUTLIVED_ACT)]
    return acted, [call for call in made if call.get(OUTLIVED_ACT) and "reply" in call]


def run_made(turns: Turns, ticket: Ticket, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``call(ticket, …)``, the call ``ticket`` ended when it returns or raises: its turn's
    record waits for it until then."""
    try:
        return call(ticket, *args, **kwargs)
    finally:
        turns.ended(ticket)


async def in_thread(turns: Turns, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``run_made`` in a thread (as ``asyncio.to_thread``), the call made now: its ticket is
    taken on the event loop, in the ``act`` that awaits or fires it, not when its thread runs."""
    ticket = turns.made()
    try:
        running = asyncio.get_running_loop().run_in_executor(
            None, functools.partial(contextvars.copy_context().run, run_made, turns, ticket, call, *args, **kwargs))
    except BaseException:
        turns.ended(ticket)
        raise
    return await running


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
