"""A turn's model calls: every call an agent's ``act`` makes is in the turn's record.

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
call exactly as before: the format only adds a field.
"""

from __future__ import annotations

from typing import Any

#: the field of a turn's record that holds its earlier calls
EARLIER_CALLS = "earlier_calls"


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

