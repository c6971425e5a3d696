"""The request path of one ``ModelClient`` (model_client.py): how one call's reply is got.

``ModelClient`` makes a call its turn's (calls.py) and builds its request; this part sends it
and gets the reply text, filling the call's record (``_turn``) and the attempt's usage::

    _answer(request)             notes an endpoint failure (``endpoint_failure``), then
      _complete                  refuses an unsendable request; tells the worker of retries
        _complete_retrying       retries (retries.py), moves to another server (servers.Route),
                                 asks again after an abort (partial_rollout continues the reply)
          _attempt               one request: the reply, its tokens and usage, as the Wire reads it
            _send                renames max_tokens / fits the token limit once each (context_room)
              _request           plain HTTP, or streamed through the policy gate (gated_request.py)

Its state is the attempt's route and server, the HTTP clients made on first use, the gate,
the usage counts and the worker's ear for a failing endpoint; ``ModelClient.start`` resets
them at each attempt.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from ..errors import AttemptCancelled, ConfigError
from . import calls, context_room, openai_request, partial_reply, stream_abort, streaming
from .episode import AgentError, EndpointRefused, ModelUnavailable
from .gated_request import GatedRequests
from .retries import Retryable, failure_of, retrying, unlisted
from .servers import Route
from .wire import MalformedResponse, Wire


class LeftOut(Exception):
    """The server a request was to go to lists another model, found when it was asked
    (``ModelRequests._first_visit``: not heard at the start, or failing since as a restart
    does): the trajectory moves on before anything is sent there."""


class ModelRequests:
    """The requests of one client's calls: routing, retries, the policy gate and the usage
    counts (``ModelClient`` is one, with the turn bookkeeping on top)."""

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
        #: the connections of the HTTP clients: a cancel shuts the request under way (stream_abort.py)
        self._sockets = stream_abort.Sockets()
        #: the policy gate each request passes under an RL scheduler (gated_request.py)
        self._gate = GatedRequests(config, self._sockets) if getattr(config, "policy_gate", None) else None
        self._usage = zero_usage(config.model)
        #: the record of the call under way (filled as it runs)
        self._turn: dict[str, Any] = {}
        #: the attempt's key (the gate's staleness bookkeeping)
        self._key: str | None = None
        #: the request about to be sent is a retry (counted by ``_sent``)
        self._retrying = False
        #: the worker's ear for a failing endpoint (``AttemptInfo.on_model_retry``), and
        #: whether it was told of one in the call under way
        self._on_model_retry: Callable[[bool], None] | None = None
        self._told_retry = False
        #: whether the episode was cancelled
        self._cancelled = False
        #: set by a cancel: ends a wait between two requests of a call's retries (``_retry_wait``)
        self._cancel_wakes = threading.Event()
        #: the endpoint's failure a call of this attempt raised (ModelUnavailable, EndpointRefused):
        #: the worker records the attempt as it even when the agent caught it and went on
        self.endpoint_failure: AgentError | None = None

    @property
    def endpoint(self) -> str:
        """The URL the last (or next) request goes to."""
        return f"{self.base_url.rstrip('/')}{self._path}"

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
            # abortable requests: their connections are traced
            self._clients[self.base_url] = OpenAI(api_key=key, base_url=self.base_url, max_retries=0,
                                                  timeout=self.timeout_s, http_client=self._sockets.http_client())
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
                sent = partial_reply.continued(request, partial, tokens="prompt" in request)
            try:
                policy = retrying(self.max_retries, self.backoff_base_s, self.backoff_max_s,
                                  lambda: self._route.can_move(failed), self._count_request,
                                  before_sleep=lambda state: self._tell_retry(True), sleep=self._retry_wait)
                return policy(self._attempt, self._client_or_new(), sent, partial)
            except Retryable as exc:
                failed.append(self.base_url)
                if not self._route.can_move(failed):
                    error = ModelUnavailable if exc.unavailable else AgentError
                    where = (f", the last of {len(failed)} servers that failed it ({', '.join(failed)})"
                             if len(failed) > 1 else "")
                    sent = f"{self.max_retries + 1} request{'s' * (self.max_retries > 0)}"
                    raise error(f"{self.endpoint}: gave up after {sent} for this turn "
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
                    if not self._route.fleet or exc.status is None:
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
            except LeftOut as exc:  # nothing sent there: a move marked so, which the run names once
                move = self._route.move(str(exc), exclude=failed, refused=True)
                move["left_out"] = True
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

    def _first_visit(self) -> None:
        """Before each request: a server the run's start check did not hear (down then), that
        failed since as a restart does (``Retryable.may_have_restarted``), or that this process
        has had no answer from for ``RECHECK_IDLE_S``, takes none until its /models answered
        (``ServerPool.first_visit``, once per server and worker process each time). No answer
        yet fails the request as a refused connection does (retried, or moved on); one listing
        another model is left out (``LeftOut``), so nothing is sent there: not even a request
        racing its start with another model loaded."""
        pool = self._route.pool  # one server is a pool of one, asked the same way
        serves = pool.first_visit(self.base_url, self._serves_the_run)
        if serves is None:
            raise Retryable(pool.said.get(self.base_url, f"{self.base_url} does not answer"), server_down=True)
        if not serves:
            raise LeftOut(pool.said.get(self.base_url, f"{self.base_url} does not serve the run"))

    def _serves_the_run(self, url: str) -> bool | None:
        """GET ``url``/models as the start check does (``probe_models``): whether it serves the
        run (its model listed, or no model list), None when it does not answer; EndpointRefused
        when it does not and no other server of the fleet serves the run either (one server:
        the run's only one, which a restart with another model is to the run as a 404 is)."""
        try:
            openai_request.probe_models(url, self.config.model, agent=getattr(self.config, "agent", "openai"),
                                        fleet=True)  # a proxy's 502 while its server is down: asked again
        except openai_request.ServerRefused as exc:
            self._route.pool.said[url] = exc.answer
            if isinstance(exc, openai_request.ServerUnreachable):
                return None
            if not self._route.fleet:
                if not isinstance(exc, openai_request.ModelNotListed):
                    return True  # a refused key, a path without /v1: the request says so, as without the check
                raise EndpointRefused(unlisted(exc.answer)) from None  # nowhere to go on: the run stops
            pool = self._route.pool
            if not pool.serving(url):  # each server's words: they may list different models
                each = [pool.said.get(u) or f"{u} refuses the run's settings, or was left out by its start check"
                        for u in pool.urls]
                raise EndpointRefused(f"every server of the fleet refuses ({', '.join(pool.urls)}): "
                                      f"{'; '.join(each)}; {exc.fix}") from None
            return False
        except ConfigError:
            return True  # the key missing: the request says so (EndpointRefused), as without the check
        return True

    def _retry_wait(self, seconds: float) -> None:
        """tenacity's sleep before a retry (a backoff, a Retry-After of up to 120 s): a cancel
        ends it, and the call with it, where it slept the wait out and held the cancelled
        attempt (its env loop, its record) for up to --max-retries such waits."""
        if self._cancel_wakes.wait(seconds) and self._cancelled:
            raise AttemptCancelled("the episode was cancelled while its model call waited to retry")

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
        if self._gate is None:
            self._first_visit()  # through the gate: once the gate let it through (``_request``)
        try:
            raw = self._send(client, request, partial)
            if isinstance(raw, partial_reply.Partial):  # streamed through the policy gate
                text, info = self.wire.streamed_reply(raw)
                usage = {"prompt_tokens": raw.prompt_tokens,
                         "completion_tokens": len(raw.token_ids) if raw.has_token_ids else raw.completion_tokens}
                if raw.requests > 1:
                    info.update(versions=raw.versions, partial=True, **partial_reply.unchecked_limit(raw, request))
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
            if isinstance(failure, Retryable) and failure.may_have_restarted:
                self._route.pool.ask_again(self.base_url, str(failure))  # back with another model? asked before its next request
            raise failure from None
        self._route.pool.answered(self.base_url)
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
        policy version) is a ``partial_reply.Partial`` (gated_request.py). The gate's "abort" (a
        weight update) or ``abort()`` (a cancel) closes the stream: ``streaming.Aborted``."""
        if self._gate is None:
            # a cancel shuts its connection (the server stops working on it), even before it
            # connects, and tells the abort_url, if any, the id the request carries (``named``)
            abortable = stream_abort.abortable(self.config, self.base_url, self._sockets)
            request = stream_abort.named(request, abortable)
            if self._cancelled:  # after the abortable is known: a cancel sees it, or is seen here
                raise AttemptCancelled("the episode was cancelled")
            self._sent()
            try:
                return self.wire.send(client, dict(request), rl=False)
            except Exception:
                if abortable.aborted:  # the connection it broke is no failure of the endpoint's
                    raise AttemptCancelled("the episode was cancelled during a model request") from None
                raise
            finally:
                self._sockets.current = None  # answered: a later cancel has no request of its to abort
                abortable.wait_told()
        return self._gate.send(self.wire, client, request, partial, base_url=self.base_url, key=self._key,
                               turn=self._turn, cancelled=lambda: self._cancelled, sent=self._sent,
                               before_send=self._first_visit)


def zero_usage(model: str) -> dict[str, Any]:
    """An attempt's usage before its first request."""
    return {"prompt_tokens": 0, "completion_tokens": 0, "requests": 0, "retries": 0, "model": model}
