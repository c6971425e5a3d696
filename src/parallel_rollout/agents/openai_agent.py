"""The ``openai`` agent: a chat model behind any OpenAI-compatible endpoint chooses the actions.

One conversation per episode, kept by the agent (one instance per env loop, so no locking)::

    reset(task)      messages = [system(mode)]
    act(obs)         messages += user(render(mode, obs))
                     ModelClient.prepare ──► POST {base_url}/chat/completions ──► retry loop ──► reply text
                     (tokenizer=: token ids to {base_url}/completions; agents/model_client.py)
                     messages += assistant(reply);  return parse(mode, reply)

Every turn records the reply's ``stop_reason``. A reply cut at the token limit is parsed, or
ends the episode (``on_length="end"``: ``LengthCut``, status truncated); a prompt past the
model's context ends it as ``ContextOverflow`` (status context_overflow): graded at reward 0,
never retried.

The official ``openai`` client does the HTTP with its own retries turned off
(``max_retries=0``): its retry loop has no hook to count requests and retries into
``usage()``, and it would not retry a malformed body. ``tenacity`` runs the retries instead
(``_retrying``): a ``before`` hook counts every request and retry, a ``retry`` predicate
retries only ``_Retryable`` failures, and the wait honours what the server asked for. A turn
is retried up to ``--max-retries`` times on 429, 5xx, 408/409, timeouts, connection errors and
malformed bodies (not JSON, no choices, no message, null content). The wait honours the
server's ``retry-after-ms`` / ``Retry-After`` (seconds or an HTTP date); otherwise it backs off
exponentially with "equal jitter" (half the step fixed, half random), so many env loops
hitting one rate limit do not retry in step.
When the retries run out the turn raises ``AgentError`` naming the endpoint and what was
wrong; the worker turns it into a graded ``error`` record. Other 4xx (bad key, unknown model)
fail at once: retrying cannot fix them.

Under an RL scheduler (a policy gate) every request streams (``streaming.py``): the gate's
"abort" (a weight update) or ``abort()`` (a cancelled member) closes it at once, and the
server stops decoding. An aborted turn is asked again after the update, from scratch or, with
``partial_rollout``, continuing its partial reply; it never spends a retry. A cancel ends the
episode (``AttemptCancelled``).

Where requests go, the key, the token limit's name and the extra generation parameters
follow the OpenAI client's conventions: ``openai_request.py`` says how. ``check_config`` says
before the run starts when a key is needed and missing.

With ``tool_calls=True`` each request offers the mode's actions as tools and a reply's
``tool_calls`` become the action, its observation answered as a ``tool`` message
(``tools.py``). With several ``base_url`` servers every request of an attempt goes to the
server ``servers.Route`` chose at ``reset`` with the attempt's session id header; a server
that refuses the connection, or whose retries run out, cools down and the turn moves on to
another (``server_moves`` in the turn and in ``usage()``). An attempt's sampling overrides
(``attempt_info.sampling``: a scheduler's ``sampling=``) are merged over the run config's.
"""

from __future__ import annotations

import datetime
import email.utils
import random
import time
import uuid
from typing import Any, Mapping

import tenacity

from ..errors import AttemptCancelled, ConfigError
from . import openai_request, prompts, streaming, tools
from .base import Agent, AgentError, ContextOverflow, LengthCut
from .model_client import MalformedResponse, ModelClient, excerpt, is_overflow, reply_of
from .servers import Route

__all__ = ["OpenAIAgent", "MalformedResponse", "parse_retry_after", "reply_of"]

#: longest server-requested wait honoured; a longer one is cut to this (a retry that comes
#: early costs one more 429, a wait past the task timeout would cost the attempt)
MAX_RETRY_AFTER_S = 120.0
#: HTTP statuses worth retrying: rate limits, server trouble, request timeout, lock conflict
RETRYABLE_STATUS = frozenset({408, 409, 429}) | frozenset(range(500, 600))


class OpenAIAgent(Agent):
    """Chat completions from an OpenAI-compatible endpoint, one conversation per episode."""

    name = "openai"
    options = frozenset({"model", "base_url", "temperature", "max_tokens", "sampling", "extra_body",
                         "tool_calls", "session_header", "server_cooldown"})
    #: first backoff wait in seconds, doubled per retry; tests shrink it
    backoff_base_s = 1.0
    #: longest backoff wait in seconds
    backoff_max_s = 30.0

    def __init__(self, config) -> None:
        super().__init__(config)
        #: which server each trajectory talks to, with which session id (servers.py)
        self._route = Route(openai_request.resolve_base_urls(config.base_url),
                            getattr(config, "server_cooldown", 30.0),
                            getattr(config, "session_header", "X-Session-ID"))
        #: how the policy is called: chat messages, or token ids with a tokenizer
        self._model = ModelClient(config)
        self._use_server(self._route.url)
        self.max_retries = config.max_retries
        self.timeout_s = config.api_timeout_s
        # Made on first use: the worker constructs agents outside any attempt, where an
        # exception would end the env loop instead of becoming a record.
        self._clients: dict[str, Any] = {}
        self._mode = ""
        #: the mode's tools (tool_calls=True), and the last reply's calls awaiting answers
        self._tools: list[dict[str, Any]] | None = None
        self._calls: list[dict[str, Any]] = []
        self._messages: list[dict[str, str]] = []
        self._usage = _zero_usage(config.model)
        # RL schedulers: a gate each model request passes (weight updates, policy versions)
        self._gate = None
        if getattr(config, "policy_gate", None):
            from ..policy_gate import GateClient

            self._gate = GateClient(config.policy_gate)
        self._turn: dict[str, Any] = {}
        #: the streamed request under way (abort() closes it) and whether the episode was cancelled
        self._abortable = None
        self._cancelled = False

    @classmethod
    def check_config(cls, config) -> None:
        """Raise ConfigError before the run when the key is missing, openai is not installed or
        the tokenizer folder does not load (config.py checks the ranges of --temperature and
        --max-tokens)."""
        for url in openai_request.resolve_base_urls(config.base_url):
            if openai_request.api_key(url) is None:
                raise ConfigError(openai_request.missing_key_message(url))
        if getattr(config, "tool_calls", False) and config.mode not in tools.TOOLS:
            raise ConfigError(f"--tool-calls: mode {config.mode!r} has no tools (modes with tools: "
                              f"{', '.join(sorted(tools.TOOLS))})")
        if getattr(config, "tool_calls", False) and getattr(config, "tokenizer", None):
            raise ConfigError("tool_calls=True needs chat requests; token in, token out (tokenizer=) "
                              "sends no tools: give one of them")
        try:
            import openai  # noqa: F401
        except ImportError:
            raise ConfigError("--agent openai needs the 'openai' package: pip install openai") from None
        if getattr(config, "tokenizer", None):
            from .tokens import ChatTokenizer

            ChatTokenizer(config.tokenizer)  # loads it: a bad folder stops the run before it starts

    @classmethod
    def check_endpoint(cls, config) -> str:
        """The preflight's probe of every server (GET /models); ConfigError when one is unusable."""
        return "; ".join(openai_request.probe_models(url, config.model)
                         for url in openai_request.resolve_base_urls(config.base_url))

    def reset(self, task) -> None:
        """Start a new conversation with the mode's system prompt; usage starts from zero."""
        self._mode = task.mode
        self._messages = [{"role": "system", "content": prompts.system_prompt(task.mode)}]
        self._usage = _zero_usage(self.config.model)
        self._model.reset()
        self._tools = tools.tools_for(task.mode) if getattr(self.config, "tool_calls", False) else None
        self._calls = []
        # the least-loaded server keeps every request of this attempt (its prefix cache)
        info = self.attempt_info
        self._route.start(info.session_id if info else f"{task.id}-{uuid.uuid4().hex[:12]}")
        self._use_server(self._route.url)

        self._cancelled = False

    def act(self, observation: dict[str, Any]) -> Any:
        """Send the observation, return the parsed reply; AgentError when retries run out."""
        if self._cancelled:
            raise AttemptCancelled("the episode was cancelled")
        content = prompts.render(self._mode, observation)
        if self._calls:  # the observation answers the last reply's tool call
            self._messages += tools.tool_messages(self._calls, content)
        else:
            self._messages.append({"role": "user", "content": content})
        _drop_old_images(self._messages, KEEP_IMAGES)
        self._turn = {"request": list(self._messages)} if self._gate is not None else {}
        reply = self._complete()
        self._calls = list(self._turn.get("tool_calls") or [])
        self._messages.append(tools.assistant_message(reply, self._calls))
        self._turn["reply"] = reply
        if self._route.pool is not None:
            self._turn["server"] = self._route.url
        if self._turn.get("stop_reason") == "length" and self._model.context_full():
            raise ContextOverflow(f"the reply reached max_model_len={self.config.max_model_len} tokens",
                                  turn=self._turn)
        if self._turn.get("stop_reason") == "length" and self.config.on_length == "end":
            raise LengthCut(f"{self.endpoint}: the reply was cut at the token limit (stop_reason length; "
                            "on_length='end' ends the episode)", turn=self._turn)
        return tools.action_of(self._mode, self._calls) if self._calls else prompts.parse(self._mode, reply)

    def turn_record(self) -> dict[str, Any]:
        """The last turn's model exchange: the reply and its stop_reason, and under an RL
        scheduler (or with a tokenizer) the request, the policy version, and token ids /
        logprobs when the server sent them."""
        return dict(self._turn)

    def usage(self) -> dict[str, Any]:
        """Tokens, requests and retries of the episode so far; with several servers, the
        server it ended on and its moves (``server_moves``)."""
        if self._route.pool is None:
            return dict(self._usage)
        return {**self._usage, "server": self._route.url, "server_moves": list(self._route.moves)}

    def _use_server(self, url: str) -> None:
        """Send the next requests to ``url``."""
        self.base_url = url
        self.endpoint = f"{url.rstrip('/')}{self._model.path}"

    def _client_or_new(self):
        if self.base_url not in self._clients:
            from openai import OpenAI  # imported here: only runs with this agent need it

            key = openai_request.api_key(self.base_url)
            if key is None:
                # check_config stops a run before this; here for direct (Python API) use.
                raise ConfigError(openai_request.missing_key_message(self.base_url))
            self._clients[self.base_url] = OpenAI(api_key=key, base_url=self.base_url,
                                                  max_retries=0, timeout=self.timeout_s)
        return self._clients[self.base_url]

    def _complete(self) -> str:
        """One turn's reply text, retrying what a retry can fix; a server that fails moves
        the trajectory on to another (several servers)."""
        request: dict[str, Any] = {"model": self.config.model, "messages": self._messages}
        info = self.attempt_info
        own, extras = openai_request.sampled_fields(self.config, info.sampling if info else None)
        if "temperature" in own:
            request["temperature"] = own["temperature"]
        if "max_tokens" in own:
            request[openai_request.token_limit_name(self.endpoint, self.config.model)] = own["max_tokens"]
        if extras:
            request["extra_body"] = extras
        if self._tools:
            request["tools"] = self._tools
        request["extra_headers"] = self._route.headers()
        request = self._model.prepare(request)  # once a turn: every retry sends the same
        partial = None  # the reply sampled before a weight update, with partial_rollout
        while True:
            sent = request
            if partial is not None:
                sent = streaming.continued(request, partial, tokens=self._model.tokenizer is not None)
            try:
                return self._retrying()(self._attempt, self._client_or_new(), sent, partial)
            except _Retryable as exc:
                if not self._route.can_move():
                    raise AgentError(f"{self.endpoint}: gave up after {self.max_retries + 1} requests for "
                                     f"this turn (--max-retries {self.max_retries}); last error: {exc}") from None
                move = self._route.move(f"{self.endpoint}: {exc}")
                self._use_server(self._route.url)
                self._turn.setdefault("server_moves", []).append(move)
            except streaming.Aborted as exc:
                # Not a retry: an abort never spends --max-retries, however often it happens.
                self._turn["redone"] = self._turn.get("redone", 0) + 1
                if self._cancelled:
                    raise AttemptCancelled("the episode was cancelled during a model request") from None
                kept = exc.partial.text or exc.partial.token_ids
                partial = exc.partial if kept and getattr(self.config, "partial_rollout", False) else None

    def _retrying(self) -> tenacity.Retrying:
        """The retry policy of one turn (made per turn: tests shrink the backoff)."""
        half = self.backoff_base_s / 2
        backoff = (tenacity.wait_exponential(multiplier=half, max=self.backoff_max_s / 2)
                   + tenacity.wait_random_exponential(multiplier=half, max=self.backoff_max_s / 2))

        def wait(state: tenacity.RetryCallState) -> float:
            retry_after = getattr(state.outcome.exception(), "retry_after", None)
            if retry_after is not None:
                # A little jitter on top still spreads loops that got the same Retry-After.
                return min(retry_after, MAX_RETRY_AFTER_S) * (1 + 0.1 * random.random())
            return backoff(state)

        return tenacity.Retrying(
            stop=tenacity.stop_after_attempt(self.max_retries + 1),
            wait=wait,
            # a refused or reset connection moves on at once when another server is up
            retry=tenacity.retry_if_exception(lambda exc: isinstance(exc, _Retryable) and not (
                exc.server_down and self._route.can_move())),
            before=self._count_request,
            reraise=True,
        )

    def _count_request(self, state: tenacity.RetryCallState) -> None:
        """tenacity's ``before`` hook: every attempt is a request, every later one a retry."""
        self._usage["requests"] += 1
        if state.attempt_number > 1:
            self._usage["retries"] += 1

    def _attempt(self, client, request: dict[str, Any], partial=None) -> str:
        """One request: the reply text; _Retryable for what a retry may fix, AgentError for
        what it cannot, streaming.Aborted when a weight update or a cancel ended it."""
        import openai

        try:
            raw = self._send(client, request, partial)
            if isinstance(raw, streaming.Partial):  # streamed through the policy gate
                text, info = self._model.streamed_reply(raw)
                usage = {"prompt_tokens": raw.prompt_tokens,
                         "completion_tokens": len(raw.token_ids) if raw.has_token_ids else 0}
                if raw.requests > 1:
                    info.update(versions=raw.versions, partial=True)
            else:
                text, usage, info = self._model.reply(raw.content)
        except openai.APIStatusError as exc:
            problem = f"HTTP {exc.status_code}: {excerpt(exc.response.text)}"
            if is_overflow(exc.status_code, exc.response.text):
                raise ContextOverflow(f"{self.endpoint}: {problem}") from None
            if exc.status_code not in RETRYABLE_STATUS:
                raise AgentError(f"{self.endpoint}: {problem} (not retried)") from None
            raise _Retryable(problem, parse_retry_after(exc.response.headers)) from None
        except openai.APITimeoutError:
            raise _Retryable(f"no response within {self.timeout_s} s") from None
        except openai.APIConnectionError as exc:
            raise _Retryable(f"connection failed: {exc.__cause__ or exc}", server_down=True) from None
        except streaming.StreamBroken as exc:
            raise _Retryable(f"the reply stream broke: {exc}") from None
        except MalformedResponse as exc:
            raise _Retryable(f"malformed response: {exc}") from None
        self._usage["prompt_tokens"] += usage.get("prompt_tokens", 0)
        self._usage["completion_tokens"] += usage.get("completion_tokens", 0)
        self._turn.update(info if self._gate is not None or self._model.tokenizer is not None
                          else {"stop_reason": info.get("stop_reason"),
                                **({"tool_calls": info["tool_calls"]} if "tool_calls" in info else {})})
        self._model.accept(info)
        return text

    def _send(self, client, request: dict[str, Any], partial=None):
        """``_request``, sent again once with ``max_completion_tokens`` when the server
        refuses ``max_tokens`` (OpenAI's reasoning models; openai_request.py)."""
        import openai

        try:
            return self._request(client, request, partial)
        except openai.APIStatusError as exc:
            if not openai_request.adopt_completion_tokens(request, self.endpoint, exc.status_code,
                                                          exc.response.text):
                raise
        self._usage["requests"] += 1
        return self._request(client, request, partial)

    def _request(self, client, request: dict[str, Any], partial=None):
        """One HTTP request: the raw response; through the policy gate when there is one, a
        streamed request whose reply (``partial`` followed by it, every token with its
        policy version) is a ``streaming.Partial``. The gate's "abort" (a weight update) or
        ``abort()`` (a cancel) closes the stream: ``streaming.Aborted``."""
        if self._gate is None:
            return self._model.send(client, dict(request), rl=False)
        abortable = streaming.Abortable(getattr(self.config, "abort_url", None))
        self._abortable = abortable
        if self._cancelled:
            abortable.abort()
        try:
            version, waited = self._gate.begin(self.sample_key, on_abort=abortable.abort)
        except ConnectionError as exc:
            raise AgentError(f"the RL scheduler's policy gate is gone: {exc}") from None
        self._turn["gate_wait_s"] = round(self._turn.get("gate_wait_s", 0.0) + waited, 4)
        started = time.time()
        kept = None  # the oldest version among the tokens kept: the gate judges staleness by it
        try:
            reply = self._model.send_streamed(client, dict(request), abortable)
        except streaming.Aborted as exc:
            exc.partial = (partial or streaming.Partial()).extend(exc.reply, version)
            if getattr(self.config, "partial_rollout", False):
                kept = exc.partial.oldest
            raise
        else:
            # a reply that came whole before an abort is kept: its versions say whose it is
            whole = (partial or streaming.Partial()).extend(reply, version)
            kept = whole.oldest
        finally:
            self._abortable = None
            try:
                self._gate.end(kept)
            except ConnectionError:
                pass
        self._turn.update(policy_version=version, model_started_at=round(started, 4),
                          model_ended_at=round(time.time(), 4))
        return whole

    def abort(self) -> None:
        """The episode was cancelled: close the model request under way (the server stops
        decoding it); ``act`` raises AttemptCancelled."""
        self._cancelled = True
        abortable = self._abortable
        if abortable is not None:
            abortable.abort()


class _Retryable(Exception):
    """A failed request a retry may fix; ``retry_after``: the wait the server asked for."""

    def __init__(self, problem: str, retry_after: float | None = None, server_down: bool = False) -> None:
        super().__init__(problem)
        self.retry_after = retry_after
        #: the server refused or reset the connection (worth moving to another)
        self.server_down = server_down


#: screenshots kept in the conversation (older ones become a note), as OSWorld's agents do
KEEP_IMAGES = 3


def _drop_old_images(messages: list[dict[str, Any]], keep: int) -> None:
    """Replace every image but the last ``keep`` with a short text part."""
    seen = 0
    for message in reversed(messages):
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for index, part in enumerate(content):
            if part.get("type") == "image_url":
                seen += 1
                if seen > keep:
                    content[index] = {"type": "text", "text": "[older screenshot omitted]"}


def parse_retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds the server asked us to wait (``retry-after-ms``, or ``Retry-After`` as seconds
    or an HTTP date), or None."""
    value = headers.get("retry-after-ms")
    if value is not None:
        try:
            return max(0.0, float(value) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # "-0000" dates parse naive; HTTP dates are GMT
        when = when.replace(tzinfo=datetime.timezone.utc)
    return max(0.0, when.timestamp() - time.time())


def _zero_usage(model: str) -> dict[str, Any]:
    return {"prompt_tokens": 0, "completion_tokens": 0, "requests": 0, "retries": 0, "model": model}


