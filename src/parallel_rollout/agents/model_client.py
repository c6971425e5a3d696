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
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from typing import Any, Callable, Sequence

from ..errors import AttemptCancelled
from . import calls, context_room, openai_request, streaming
from .episode import AgentError, AttemptInfo, ContextOverflow, EndpointRefused, EpisodeCut, LengthCut, ModelUnavailable
from .gated_request import GatedRequests
from .retries import Retryable, failure_of, retrying
from .servers import Route
from .calls import Reply
from .wire import MalformedResponse, Wire

__all__ = ["ModelClient", "Reply"]  # Reply: calls.py, the answer of one call


class ModelClient:
    """One agent's calls to the policy (one per agent; ``abort`` may come from another
    thread). Its calls take turns (``_one_call``): an async agent's ``asyncio.gather`` of two
    ``achat`` calls ran both at once in one turn record, token history and gate connection,
    and each wrote its reply into the other's record (a call's sampled ids lost, or filed
    under the other's prompt); now the second waits for the first, and both are the turn's."""

    #: first backoff wait in seconds, doubled per retry; tests shrink it
    backoff_base_s = 1.0
    #: longest backoff wait in seconds
    backoff_max_s = 30.0

    def __init__(self, config) -> None:
        self.config = config
        #: which server each trajectory talks to, with which session id (servers.py)
        self._route = Route(openai_request.resolve_base_urls(config.base_url),
                            getattr(config, "server_cooldown", 30.0),
                            getattr(config, "session_header", "X-Session-ID"))
        #: what is sent: chat messages, or token ids with a tokenizer
        self.wire = Wire(config)
        self._path = self.wire.path
        self._use_server(self._route.url)
        self.max_retries = config.max_retries
        self.timeout_s = config.api_timeout_s
        # Made on first use: the worker constructs agents outside any attempt, where an
        # exception would end the env loop instead of becoming a record.
        self._clients: dict[str, Any] = {}
        #: the policy gate each request passes under an RL scheduler (gated_request.py)
        self._gate = GatedRequests(config) if getattr(config, "policy_gate", None) else None
        self._usage = _zero_usage(config.model)
        #: held by the call under way (chat, generate) and by start(): the calls of one client
        #: take turns, and a new attempt starts once a call of the last one has ended
        self._one_call = threading.Lock()
        #: start()s so far: a call waiting for its turn when the next attempt started is not sent
        self._attempts = 0
        #: the record of the call under way (filled as it runs)
        self._turn: dict[str, Any] = {}
        #: which turn each call is recorded under: the one whose act made it (calls.Turns)
        self._turns = calls.Turns()
        #: the attempt started (None: outside a worker), its key and sampling overrides
        self._started: AttemptInfo | None = None
        self._key: str | None = None
        self._sampling: dict[str, Any] = {}
        #: the request about to be sent is a retry (counted by ``_sent``)
        self._retrying = False
        #: the worker's ear for a failing endpoint (``AttemptInfo.on_model_retry``), and
        #: whether it was told of one in the call under way
        self._on_model_retry: Callable[[bool], None] | None = None
        self._told_retry = False
        #: whether the episode was cancelled
        self._cancelled = False
        #: the endpoint's failure a call of this attempt raised (ModelUnavailable, EndpointRefused):
        #: the worker records the attempt as it even when the agent caught it and went on
        self.endpoint_failure: AgentError | None = None

    @property
    def gated(self) -> bool:
        """Whether calls pass an RL scheduler's policy gate."""
        return self._gate is not None

    @property
    def endpoint(self) -> str:
        """The URL the last (or next) request goes to."""
        return f"{self.base_url.rstrip('/')}{self._path}"

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
        self._usage = _zero_usage(self.config.model)
        self._turn = {}
        self.wire.reset()
        self.endpoint_failure = None
        # the least-loaded server keeps every request of this attempt (its prefix cache)
        self._route.start(info.session_id if info else f"{label}-{uuid.uuid4().hex[:12]}",
                          info.loop if info else 0)
        self._use_server(self._route.url)
        self._cancelled = False
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
        agent's that outlived its act: ``calls.Turns``), each then marked ``outlived_act``."""
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
        if self._route.pool is None:
            return dict(self._usage)
        return {**self._usage, "server": self._route.url, "server_moves": list(self._route.moves)}

    def abort(self) -> None:
        """The episode was cancelled (from any thread): close the request under way (the
        server stops decoding it), or end its wait at a suspended gate; this call and every
        later one raise AttemptCancelled."""
        self._cancelled = True
        if self._gate is not None:
            self._gate.abort()  # a request waiting at a suspended gate ends too (reconnects next attempt)

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
        if self._route.pool is not None:
            turn["server"] = self._route.url
        stop = turn.get("stop_reason") or "unknown"
        if stop == "length" and self.wire.context_full():
            raise ContextOverflow(f"the reply reached max_model_len={self.config.max_model_len} tokens",
                                  turn=turn)
        if stop == "length" and getattr(self.config, "on_length", "parse") == "end":
            raise LengthCut(f"{self.endpoint}: the reply was cut at the token limit (stop_reason length; "
                            "on_length='end' ends the episode)", turn=turn)
        return Reply(text, list(turn.get("tool_calls") or []), stop, dict(turn))

    def _use_server(self, url: str) -> None:
        """Send the next requests to ``url``."""
        self.base_url = url

    def _client_or_new(self):
        if self.base_url not in self._clients:
            from openai import OpenAI  # imported here: only runs that call a model need it

            key = openai_request.api_key(self.base_url)
            if key is None:
                # The run's start stops an agent that says it calls the model (model_checks.py);
                # one it could not tell (a plugin given no --model) ends here: the settings'
                # fault, no attempt's, and the batch runner stops the run at it.
                agent = getattr(self.config, "agent", "openai")
                raise EndpointRefused(openai_request.missing_key_message(self.base_url, agent))
            extra = {}
            if self._gate is not None:  # abortable requests: their connections are traced
                extra["http_client"] = self._gate.http_client()
            self._clients[self.base_url] = OpenAI(api_key=key, base_url=self.base_url,
                                                  max_retries=0, timeout=self.timeout_s, **extra)
        return self._clients[self.base_url]

    def _answer(self, request: dict[str, Any]) -> str:
        """``_complete``, noting an endpoint failure (``endpoint_failure``) before it is raised:
        an agent's ``except Exception`` must not turn the endpoint's state into a graded outcome."""
        try:
            return self._complete(request)
        except (ModelUnavailable, EndpointRefused) as exc:
            self.endpoint_failure = exc
            raise

    def _complete(self, request: dict[str, Any]) -> str:
        """One turn's reply text, retrying what a retry can fix; a server that fails moves
        the trajectory on to another (several servers); an abort asks again. The worker hears
        of a failed request that is to be retried, and of the call's end (``_tell_retry``)."""
        openai_request.check_sendable(request)  # the agent's error, not the endpoint's: never sent
        try:
            return self._complete_retrying(request)
        finally:
            self._tell_retry(False)

    def _complete_retrying(self, request: dict[str, Any]) -> str:
        """``_complete``'s requests: retries, moves to another server, aborts asked again."""
        partial = None  # the reply sampled before a weight update, with partial_rollout
        server_aborts = (0, None)  # requests the server aborted in a row, at one policy version
        failed: list[str] = []  # the servers that failed this turn: it moves to each at most once
        refused: list[str] = []  # those of them that refused the run's key or model (a fleet's)
        while True:
            sent = request
            if partial is not None:
                sent = streaming.continued(request, partial, tokens="prompt" in request)
            try:
                policy = retrying(self.max_retries, self.backoff_base_s, self.backoff_max_s,
                                  lambda: self._route.can_move(failed), self._count_request,
                                  before_sleep=lambda state: self._tell_retry(True))
                return policy(self._attempt, self._client_or_new(), sent, partial)
            except Retryable as exc:
                failed.append(self.base_url)
                if not self._route.can_move(failed):
                    error = ModelUnavailable if exc.unavailable else AgentError
                    where = (f", the last of {len(failed)} servers that failed it ({', '.join(failed)})"
                             if len(failed) > 1 else "")
                    raise error(f"{self.endpoint}: gave up after {self.max_retries + 1} requests for this turn "
                                f"(--max-retries {self.max_retries}){where}; last error: {exc}") from None
                move = self._route.move(f"{self.endpoint}: {exc}", exclude=failed)
                self._use_server(self._route.url)
                self._turn.setdefault("server_moves", []).append(move)
            except EndpointRefused as exc:
                # a fleet's server that refuses the key or the model is that server's settings
                # (restarted with another model, a wrong entry): out of the rotation while
                # another may serve; the run stops only when every server refuses
                failed.append(self.base_url)
                refused.append(self.base_url)
                if exc.status is None or not self._route.can_leave_refusal(failed):
                    if self._route.pool is None or exc.status is None:
                        raise
                    pool = self._route.pool
                    if set(pool.urls) <= {*refused, *pool.refusing()}:
                        raise EndpointRefused(f"every server of the fleet refuses ({', '.join(pool.urls)}); "
                                              f"the last: {exc}") from None
                    # another failed this turn without refusing (down, overloaded): it may come back
                    raise ModelUnavailable(f"{exc}; the other servers failed this turn "
                                           f"({', '.join(u for u in failed if u not in refused)})") from None
                move = self._route.move(exc.answer or str(exc), exclude=failed, refused=True)
                self._use_server(self._route.url)
                self._turn.setdefault("server_moves", []).append(move)
            except streaming.Aborted as exc:
                # Not a retry: an abort never spends --max-retries, however often it happens.
                self._turn["redone"] = self._turn.get("redone", 0) + 1
                if self._cancelled:
                    raise AttemptCancelled("the episode was cancelled during a model request") from None
                if exc.by_server:  # no weight update between (the same version): the server's failure
                    server_aborts = (server_aborts[0] + 1 if server_aborts[1] == exc.version else 1, exc.version)
                    if server_aborts[0] > self.max_retries:
                        raise ModelUnavailable(f"{self.endpoint}: the server aborted {server_aborts[0]} requests of "
                                               f"this turn in a row (finish_reason 'abort') at policy version "
                                               f"{exc.version} (--max-retries {self.max_retries})") from None
                kept = exc.partial.text or exc.partial.token_ids
                partial = exc.partial if kept and getattr(self.config, "partial_rollout", False) else None

    def _tell_retry(self, failing: bool) -> None:
        """Tell the worker the endpoint failed a request this call will try again (True),
        or that the call is over (False), once each."""
        if self._on_model_retry is not None and failing != self._told_retry:
            self._told_retry = failing
            self._on_model_retry(failing)

    def _count_request(self, state) -> None:
        """tenacity's ``before`` hook: every attempt after the first is a retry, counted once
        its request is sent (``_sent``)."""
        self._retrying = state.attempt_number > 1

    def _sent(self) -> None:
        """A request leaves now: count it (and the retry it is). Only here: a request that
        waited at the gate and was cancelled there, or failed the gate, was never sent."""
        self._usage["requests"] += 1
        if self._retrying:
            self._usage["retries"] += 1
            self._retrying = False

    def _attempt(self, client, request: dict[str, Any], partial=None) -> str:
        """One request: the reply text; Retryable for what a retry may fix, AgentError for
        what it cannot, streaming.Aborted when a weight update or a cancel ended it."""
        try:
            raw = self._send(client, request, partial)
            if isinstance(raw, streaming.Partial):  # streamed through the policy gate
                text, info = self.wire.streamed_reply(raw)
                usage = {"prompt_tokens": raw.prompt_tokens,
                         "completion_tokens": len(raw.token_ids) if raw.has_token_ids else raw.completion_tokens}
                if raw.requests > 1:
                    info.update(versions=raw.versions, partial=True, **streaming.unchecked_limit(raw, request))
                    if not self.wire.sends_ids:  # in chat the server re-tokenized the partial text
                        info = calls.split_retokenized(info, raw.retokenized, text)
            else:
                try:
                    text, usage, info = self.wire.reply(raw.content)
                except MalformedResponse as exc:
                    exc.content_type = raw.headers.get("content-type")
                    raise
                if info.get("stop_reason") == streaming.SERVER_ABORT:  # cut short by the server: no answer
                    raise Retryable("the server aborted the request (finish_reason 'abort')", unavailable=True)
        except Exception as exc:  # the HTTP client's and the stream's failures, as the call's (retries.py)
            failure = failure_of(exc, self.endpoint, request.get("model"), self.base_url, self.timeout_s)
            if failure is None:
                raise
            raise failure from None
        self._usage["prompt_tokens"] += usage.get("prompt_tokens", 0)
        self._usage["completion_tokens"] += usage.get("completion_tokens", 0)
        self._turn.update(info if self._gate is not None or self.wire.sends_ids
                          else {"stop_reason": info.get("stop_reason"),
                                **{name: info[name] for name in ("matched_stop", "tool_calls") if name in info}})
        self.wire.check_tokenizer(text, info, self.base_url)
        self.wire.accept(info)
        return text

    def _send(self, client, request: dict[str, Any], partial=None):
        """``_request``, sent again once with ``max_completion_tokens`` when the server
        refuses ``max_tokens`` (OpenAI's reasoning models; openai_request.py), and once with
        its token limit lowered to what the model's context leaves when the server refuses
        prompt + limit past it while the prompt fits (vLLM's and SGLang's 400 that give both
        numbers; context_room.py): the turn records the limit it got (``max_tokens_fitted``)."""
        import openai

        renamed = fitted = False
        while True:
            try:
                return self._request(client, request, partial)
            except openai.APIStatusError as exc:
                status, said = exc.status_code, exc.response.text
                if not renamed and openai_request.adopt_completion_tokens(request, self.endpoint, status, said):
                    renamed = True
                elif not fitted and (room := context_room.fit(request, status, said)) is not None:
                    fitted = True
                    self._turn["max_tokens_fitted"] = room
                else:
                    raise

    def _request(self, client, request: dict[str, Any], partial=None):
        """One HTTP request: the raw response; through the policy gate when there is one, a
        streamed request whose reply (``partial`` followed by it, every token with its
        policy version) is a ``streaming.Partial`` (gated_request.py). The gate's "abort" (a
        weight update) or ``abort()`` (a cancel) closes the stream: ``streaming.Aborted``."""
        if self._gate is None:
            self._sent()
            return self.wire.send(client, dict(request), rl=False)
        return self._gate.send(self.wire, client, request, partial, base_url=self.base_url, key=self._key,
                               turn=self._turn, cancelled=lambda: self._cancelled, sent=self._sent)


def _zero_usage(model: str) -> dict[str, Any]:
    return {"prompt_tokens": 0, "completion_tokens": 0, "requests": 0, "retries": 0, "model": model}
