"""One agent's requests through an RL scheduler's policy gate.

Under an RL scheduler every model request passes the gate (``gate_client.GateClient``): it
waits there while weights update, then streams (``streaming.py``), so the gate's abort (a
weight update) or a cancel (``ModelClient.abort``) closes it at once and the server stops
decoding (``stream_abort.py``). The gate hears when the request ends, with the oldest policy
version among the tokens kept (its staleness) and whether the server left it unanswered.

``ModelClient`` makes one ``GatedRequests`` per agent when the run has a policy gate and
sends each request through ``send``; the retries, and asking again after an abort, stay the
client's.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Callable

from ..errors import AttemptCancelled
from . import partial_reply, stream_abort, streaming
from .episode import AgentError


class GatedRequests:
    """The policy gate of one agent, and the streamed request under way (``abort`` may come
    from another thread)."""

    def __init__(self, config, sockets: stream_abort.Sockets) -> None:
        """``sockets``: the connections of the client's HTTP clients (``Sockets.http_client``),
        which an abort before the response shuts."""
        from ..gate_client import GateClient

        self.config = config
        self.gate = GateClient(config.policy_gate, getattr(config, "policy_gate_key", None))
        #: the streamed request under way (abort() closes it)
        self._abortable: stream_abort.Abortable | None = None
        self._sockets = sockets

    def forget(self, key: str) -> None:
        """A new attempt of ``key``: staleness judges its tokens, not a failed attempt's."""
        with contextlib.suppress(ConnectionError):  # a gone gate fails the attempt's first request
            self.gate.forget(key)

    def abort(self) -> None:
        """Close the request under way, or end its wait at a suspended gate (the gate
        reconnects at the next request)."""
        abortable = self._abortable
        if abortable is not None:
            abortable.abort()
        self.gate.close()

    def send(self, wire, client, request: dict[str, Any], partial: partial_reply.Partial | None, *,
             base_url: str, key: str | None, turn: dict[str, Any], cancelled: Callable[[], bool],
             sent: Callable[[], None], before_send: Callable[[], None] = lambda: None) -> partial_reply.Partial:
        """One streamed request past the gate: its reply (``partial`` followed by it, every
        token with its policy version). The gate's abort or a cancel closes the stream:
        ``streaming.Aborted``; ``AttemptCancelled`` when ``cancelled()`` before it streams.
        ``turn`` gets the gate wait, the model time and the policy version; ``sent()`` is
        called as the request leaves (never for one cancelled at the gate); ``before_send()``
        just before, past the gate, may stop it (a fleet's server asked its /models again: a
        weight update's wait may outlast a restart), and the gate hears the request ended."""
        import openai

        abortable = stream_abort.abortable(self.config, base_url, self._sockets)
        request = stream_abort.named(request, abortable)  # aborted in the server's queue: no stream's id to tell
        self._abortable = abortable
        if cancelled():  # after the abortable is known: a cancel sees it, or is seen here
            self._abortable = None
            raise AttemptCancelled("the episode was cancelled")
        try:
            version, waited = self.gate.begin(key, on_abort=abortable.abort, cancelled=cancelled)
        except ConnectionError as exc:
            if cancelled():  # abort() hung up on the gate while the request waited there
                raise AttemptCancelled("the episode was cancelled while its model request waited for a "
                                       "weight update") from None
            raise AgentError(f"the RL scheduler's policy gate failed: {exc}") from None
        turn["gate_wait_s"] = round(turn.get("gate_wait_s", 0.0) + waited, 4)
        started = time.time()
        kept = None  # the oldest version among the tokens kept: the gate judges staleness by it
        unanswered = False  # no answer in time: what tells a hung server from long replies
        try:
            if not partial_reply.nothing_left(request, partial):  # a continuation with no room is never sent
                before_send()
                sent()
            reply = wire.send_streamed(client, dict(request), abortable, partial)
            if reply.finish_reason == streaming.SERVER_ABORT:  # ended by the server: aborted, not answered
                raise streaming.Aborted(reply, by_server=True)
        except openai.APITimeoutError:  # nothing came back within api_timeout_s
            unanswered = True
            raise
        except streaming.StreamBroken as exc:  # no chunk for api_timeout_s: as unanswered
            unanswered = exc.timed_out
            raise
        except streaming.Aborted as exc:
            exc.partial, exc.version = (partial or partial_reply.Partial()).extend(exc.reply, version), version
            if getattr(self.config, "partial_rollout", False):
                kept = exc.partial.oldest
            raise
        else:
            # a reply that came whole before an abort is kept: its versions say whose it is
            whole = (partial or partial_reply.Partial()).extend(reply, version)
            kept = whole.oldest
        finally:
            self._abortable = None
            abortable.wait_told()  # the gate hears the end once the abort_url was told
            # every request's time, an aborted one's too: the turn's model time (metrics)
            turn["model_s"] = round(turn.get("model_s", 0.0) + time.time() - started, 4)
            try:
                self.gate.end(kept, unanswered=unanswered)
            except ConnectionError:
                pass
        turn.update(policy_version=version, model_started_at=round(started, 4),
                    model_ended_at=round(time.time(), 4))
        return whole
