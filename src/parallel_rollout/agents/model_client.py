"""ModelClient: the one way an agent calls the policy, with what a trainer needs built in.

Every agent has one (``Agent.model``, made on first use); the ``openai`` agent uses nothing
else, so a ``module:Class`` agent that calls only its ModelClient gets all the openai agent
gets::

    reply = self.model.chat(messages, tools=None, temperature=…)     # chat messages
    reply = self.model.generate(prompt_token_ids, max_tokens=…)      # the token-in form
    reply.text, reply.tool_calls (as they came), reply.stop_reason, reply.matched_stop,
    reply.token_ids, reply.logprobs, reply.prompt_token_ids, reply.policy_version
    await self.model.achat(…) / agenerate(…)                         # for async agents

What a call does for the agent:

* **Routing.** Every request of an attempt goes to one server (several ``base_url``: the
  least-loaded at the attempt's start, ``servers.Route``) with the attempt's session id header;
  a server that refuses the connection, or whose retries run out, cools down and the call
  moves on to another (``server_moves`` in the turn and in ``usage()``); so does one that
  refuses the key or the model (401, 403, 404, 405) while another may serve it.
* **Sampling.** The run config's temperature, max_tokens and ``sampling`` table, then the
  attempt's overrides (a scheduler's ``sampling=``), then the call's keyword arguments.
* **Retries** (``retries.py``): 429, 5xx, timeouts, connection errors, malformed bodies, up to
  ``--max-retries``; then ``AgentError`` naming the endpoint. A refused key or an unknown
  model or path (401, 403, 404, 405) is ``EndpointRefused``, other 4xx an ``AgentError``, at once.
* **The policy gate** (under an RL scheduler): each request waits while weights update and
  streams (``streaming.py``), so a weight update or a cancel (``abort()``) closes it at once
  and the server stops decoding. An aborted call is asked again after the update, from
  scratch or, with ``partial_rollout``, continuing its partial reply, each token with the
  version that sampled it; an abort never spends a retry.
* **Token capture.** Under a gate, or with ``tokenizer=`` (the Wire keeps the episode's
  token history and sends ids: ``wire.py``), the turn records the request, token ids,
  logprobs and policy version; every turn records ``stop_reason``.
* **Stop reasons.** A reply cut at the token limit under ``on_length="end"`` raises
  ``LengthCut``; a prompt past the model's context raises ``ContextOverflow``: the episode
  ends graded at reward 0 (statuses truncated / context_overflow), never retried.

The worker starts the client at each attempt (``start``: a new route, usage from zero, an
empty token history) and writes ``turn_record()`` into the trajectory after each ``act``, with
``usage()`` in the record: the turn's last call, and the calls before it in the same ``act``
(a "plan" call, then an "act" call) in ``earlier_calls``, each with its own sampled tokens
(``calls.py``). With ``tokenizer=`` a ``chat`` call takes the whole conversation,
the last reply appended as an assistant message: only what is new since is tokenized.

This module is the client's calls and their turns; how one call's request is sent, retried,
moved and gated is ``model_requests.py`` (``ModelRequests``, which the client is).
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from typing import Any, Callable, Sequence

from ..errors import AttemptCancelled
from . import calls, openai_request
from .episode import AttemptInfo, ContextOverflow, EpisodeCut, LengthCut
from .model_requests import ModelRequests, zero_usage
from .calls import Reply

__all__ = ["ModelClient", "Reply"]  # Reply: calls.py, the answer of one call


class ModelClient(ModelRequests):
    """One agent's calls to the policy (one per agent; ``abort`` may come from another
    thread). Its calls take turns (``_one_call``): an async agent's ``asyncio.gather`` of two
    ``achat`` calls ran both at once in one turn record, token history and gate connection,
    and each wrote its reply into the other's record (a call's sampled ids lost, or filed
    under the other's prompt); now the second waits for the first, and both are the turn's."""

    def __init__(self, config) -> None:
        super().__init__(config)  # the request path's state: route, wire, gate, usage (model_requests.py)
        #: held by the call under way (chat, generate) and by start(): the calls of one client
        #: take turns, and a new attempt starts once a call of the last one has ended
        self._one_call = threading.Lock()
        #: start()s so far: a call waiting for its turn when the next attempt started is not sent
        self._attempts = 0
        #: which turn each call is recorded under: the one whose act made it (calls.Turns)
        self._turns = calls.Turns()
        #: the attempt started (None: outside a worker) and its sampling overrides
        self._started: AttemptInfo | None = None
        self._sampling: dict[str, Any] = {}

    @property
    def gated(self) -> bool:
        """Whether calls pass an RL scheduler's policy gate."""
        return self._gate is not None

    def start(self, info: AttemptInfo | None = None, label: str = "episode") -> None:
        """A new episode: its server and session id, usage from zero, an empty token history.
        The worker calls it at each attempt; again with the same attempt it does nothing, so
        an agent's ``reset`` may call it too (outside a worker, ``info`` None, each call starts
        afresh, its session id made of ``label``). A call of the last attempt still under way
        (an agent's gathered call that outlived its act) ends first; one still waiting for its
        turn raises AttemptCancelled: neither writes into this attempt's record."""
        if info is not None and info == self._started:
            return
        with self._one_call:
            self._attempts += 1
            self._turns.reset()
            self._start(info, label)

    def _start(self, info: AttemptInfo | None, label: str) -> None:
        self._started = info
        self._on_model_retry = info.on_model_retry if info else None
        self._key = info.key if info else None
        self._sampling = dict(info.sampling) if info else {}
        self._usage = zero_usage(self.config.model)
        self._turn = {}
        self.wire.reset()
        self.endpoint_failure = None
        # the least-loaded server keeps every request of this attempt (its prefix cache)
        self._route.start(info.session_id if info else f"{label}-{uuid.uuid4().hex[:12]}",
                          info.loop if info else 0, info.servers_left_out if info else (),
                          info.servers_unheard if info else ())
        self._use_server(self._route.url)
        self._cancelled = False
        self._cancel_wakes.clear()
        if self._gate is not None and info is not None and info.attempt > 0:
            self._gate.forget(info.key)  # staleness judges the tokens of this attempt, not a failed one's

    def chat(self, messages: Sequence[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
             **sampling: Any) -> Reply:
        """One chat turn: the reply to ``messages`` (``tools`` offered as the request's tools;
        ``sampling`` over the run's and the attempt's). ``AgentError`` when retries run out,
        ``LengthCut``/``ContextOverflow`` when the episode cannot go on, ``AttemptCancelled``
        after ``abort()``; TypeError or ValueError, before anything is sent, for a request
        that cannot be sent (``openai_request.chat_arguments``, ``check_sendable``)."""
        return self._call(None, self._chat, messages, tools, **sampling)

    def _chat(self, ticket: calls.Ticket, messages, tools, **sampling: Any) -> Reply:
        messages, tools = openai_request.chat_arguments(messages, tools)
        with self._turn_of_call():
            self._begin(ticket, {"request": messages} if self._gate is not None else {})
            request: dict[str, Any] = {"model": self.config.model, "messages": messages}
            self._path = "/chat/completions"
            self._sample(request, sampling)
            if tools:
                request["tools"] = tools
            with self._cut_keeps_the_turn(ticket):
                prepared = self.wire.prepare(request)
                self._path = self.wire.path_of(prepared)  # with a tokenizer: token ids to /completions
                return self._finish(self._answer(prepared))

    def generate(self, prompt_token_ids: Sequence[int], **sampling: Any) -> Reply:
        """The token-in form: the reply to the agent's own prompt ids, sent as they are to
        ``{base_url}/completions`` (vLLM takes a list of ids as ``prompt``); the reply's
        ``token_ids`` are what was sampled. Errors as ``chat``."""
        return self._call(None, self._generate, prompt_token_ids, **sampling)

    def _generate(self, ticket: calls.Ticket, prompt_token_ids: Sequence[int], **sampling: Any) -> Reply:
        with self._turn_of_call():
            self._begin(ticket, {"request": {"prompt_token_ids": list(prompt_token_ids)}} if self._gate is not None else {})
            request: dict[str, Any] = {"model": self.config.model, "prompt": list(prompt_token_ids)}
            self._path = "/completions"
            self._sample(request, sampling)
            with self._cut_keeps_the_turn(ticket):
                return self._finish(self._answer(self.wire.prepare_ids(request)))

    async def achat(self, messages: Sequence[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
                    **sampling: Any) -> Reply:
        """``chat`` for async agents (the call runs in a thread; ``abort()`` still ends it). The
        call is the turn's under way when the coroutine first runs, however long it outlives
        the ``act`` that made it (``turn_record`` waits for it)."""
        return await calls.in_thread(self._turns, self._chat, messages, tools, **sampling)

    async def agenerate(self, prompt_token_ids: Sequence[int], **sampling: Any) -> Reply:
        """``generate`` for async agents."""
        return await calls.in_thread(self._turns, self._generate, prompt_token_ids, **sampling)

    def _call(self, ticket: calls.Ticket | None, call: Callable[..., Reply], *args: Any, **kwargs: Any) -> Reply:
        """``call`` as the call ``ticket`` (a new one, of the turn under way, when None)."""
        return calls.run_made(self._turns, ticket or self._turns.made(), call, *args, **kwargs)

    @contextlib.contextmanager
    def _turn_of_call(self):
        """One call's turn at the client (``_one_call``); AttemptCancelled, nothing sent, when
        the next attempt started while it waited."""
        attempts = self._attempts
        with self._one_call:
            if attempts != self._attempts:
                raise AttemptCancelled("the attempt this model call was made in has ended")
            yield

    def begin_turn(self) -> None:
        """A new turn (the worker's call before each ``act``): the calls since the last
        ``turn_record()`` are its (an agent's ``reset`` asking for a plan: turn 1's), none
        once a turn was recorded."""
        self._turns.begin()

    def turn_record(self) -> dict[str, Any]:
        """The turn's record: its last call's (the reply and its stop_reason, and tool_calls;
        under an RL scheduler, or with a tokenizer, the request, the policy version, and token
        ids / logprobs when the server sent them; the server and its moves with several
        servers) and, when the turn made more calls, theirs in ``earlier_calls`` (``calls.py``).
        The calls since the last ``turn_record()`` make the turn: the next call begins a new one.
        It waits for the turn's calls still under way or waiting for their turn (an async
        agent's that outlived its act: ``calls.Turns``), each then marked ``outlived_act`` and
        kept in ``outlived_calls``, never the turn's own: that is the last call that ended
        before ``act`` returned (none when every call outlived it)."""
        return self._turns.record()

    def cut_turn(self, cut: EpisodeCut) -> dict[str, Any]:
        """The turn ``cut`` ended (the worker's, after ``act`` raised it): ``turn_record``'s
        of the cut turn, the cut call last, once the turn's other calls have ended; ``cut.turn``
        when no call of this client raised it."""
        record = self._turns.cut_record(cut)
        return cut.turn if record is None else record

    def usage(self) -> dict[str, Any]:
        """Tokens, requests and retries of the episode so far; with several servers, the
        server it ended on and its moves (``server_moves``)."""
        if not self._route.fleet:
            return dict(self._usage)
        return {**self._usage, "server": self._route.url, "server_moves": list(self._route.moves)}

    def abort(self) -> None:
        """The episode was cancelled (from any thread): close the request under way (the
        server stops decoding it), or end its wait at a suspended gate; this call and every
        later one raise AttemptCancelled."""
        self._cancelled = True
        self._cancel_wakes.set()  # a call waiting to retry ends now (_retry_wait)
        if self._gate is not None:
            self._gate.abort()  # a request waiting at a suspended gate ends too (reconnects next attempt)
        else:
            self._sockets.abort()  # the server sees its client hang up (vLLM aborts the request)

    # -- one call ----------------------------------------------------------------------------

    def _begin(self, ticket: calls.Ticket, turn: dict[str, Any]) -> None:
        if self._cancelled:
            raise AttemptCancelled("the episode was cancelled")
        if self._started is None and not self._route.session:
            self._start(None, "episode")  # used without a worker and without start(): an episode of its own
        self._turn = turn
        self._turns.runs(ticket, turn)  # the next call of the turn that made it

    @contextlib.contextmanager
    def _cut_keeps_the_turn(self, ticket: calls.Ticket):
        """An EpisodeCut ends the episode with the whole turn: the calls answered before the
        one cut (or refused, a context overflow) keep their sampled tokens in the trajectory."""
        try:
            yield
        except EpisodeCut as cut:
            self._turns.cut(ticket, cut, cut.turn)
            answered = self._turns.answered_before(ticket)
            if answered:
                cut.turn = calls.turn_of(answered + ([cut.turn] if cut.turn else []))
            raise

    def _sample(self, request: dict[str, Any], sampling: dict[str, Any]) -> None:
        """The request's sampling fields: the run's, the attempt's overrides, the call's."""
        own, extras = openai_request.sampled_fields(self.config, {**self._sampling, **sampling})
        if "temperature" in own:
            request["temperature"] = own["temperature"]
        if "max_tokens" in own:
            request[openai_request.token_limit_name(self.endpoint, self.config.model)] = own["max_tokens"]
        if extras:
            request["extra_body"] = extras
        request["extra_headers"] = self._route.headers()

    def _finish(self, text: str) -> Reply:
        """The Reply of a whole turn; the episode's end when its stop reason says so."""
        turn = self._turn
        turn.setdefault("reply", text)  # a split call's last piece has its own (calls.split_retokenized)
        if self._route.fleet:
            turn["server"] = self._route.url
        stop = turn.get("stop_reason") or "unknown"
        if stop == "length" and self.wire.context_full():
            raise ContextOverflow(f"the reply reached max_model_len={self.config.max_model_len} tokens",
                                  turn=turn)
        if stop == "length" and getattr(self.config, "on_length", "parse") == "end":
            raise LengthCut(f"{self.endpoint}: the reply was cut at the token limit (stop_reason length; "
                            "on_length='end' ends the episode)", turn=turn)
        return Reply(text, list(turn.get("tool_calls") or []), stop, dict(turn))
