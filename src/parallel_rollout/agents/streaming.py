"""Streamed model requests that can be aborted mid-reply, and the partial replies they leave.

Under an RL scheduler every model request streams (SSE, ``stream=True`` with
``stream_options.include_usage``), so a weight update or a cancel can end it at once::

    agent thread                                   gate-watch thread (policy_gate.GateClient)
    send(stream=True) ─► headers ─► Abortable.attach(socket)
    read chunks: text, token_ids, logprobs …       ◄── "abort" ── Abortable.abort()
                 ◄── recv fails ───────────────────    socket.shutdown(): the server sees the
    Aborted(partial)                                   client hang up and stops decoding

vLLM streams the sampled ``token_ids`` of each chunk (``return_token_ids``), the prompt's in
the first, and per-token logprobs; the reply is assembled from them (``StreamedReply``). Closing
the connection is how a vLLM request is aborted; for a server that needs to be told,
``RunConfig.abort_url`` is POSTed ``{"request_id": id, "rid": id}`` (the stream's id; SGLang's
``/abort_request`` reads ``rid``) on every abort, a path there being on the request's own server
(``stream_abort.abort_endpoint``; the kill switch and the sockets an abort shuts live there too).

**Not a stream.** An answer whose Content-Type is no event stream's, or whose first line is
no SSE line, is a body (``NotAStream``): the Wire takes a whole completion as the reply (a
server that ignores ``stream``) and fails the request on anything else, quoting what came.

**Partial rollouts.** The tokens of an aborted reply are kept, and the request continued from
them after the update: ``partial_reply.py``.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any, Iterable

from .calls import matched_stop_of
from .episode import RETRYABLE_STATUS, AgentError, ContextOverflow, says_overflow
from .stream_abort import Abortable

log = logging.getLogger("parallel_rollout")

#: the finish_reason of a reply the server ended itself, told to abort it by something other
#: than this client (a trainer aborting every request on the server for a weight update:
#: SGLang's abort, vLLM's): no answer of the policy, but an aborted request (``Aborted.by_server``)
SERVER_ABORT = "abort"


class Aborted(Exception):
    """The request was aborted mid-reply (a weight update or a cancel; ``by_server``: the
    server ended it, ``SERVER_ABORT``). ``reply``: what the server streamed before;
    ``partial``: the whole turn's tokens so far (``partial_reply.Partial``) and ``version`` the request's policy version
    (set by the agent, which knows it)."""

    def __init__(self, reply: "StreamedReply", partial: Any = None, by_server: bool = False) -> None:
        super().__init__("the model request was aborted")
        self.reply = reply
        self.partial = partial
        self.by_server = by_server
        self.version: int | None = None


class StreamBroken(Exception):
    """The stream broke or ended early, not by an abort (a retry may fix it): a transport
    failure, the endpoint's (model_unavailable when the retries run out; malformed content is
    MalformedChunk or AgentError instead); ``timed_out``: the server sent no chunk for the
    client's read timeout (counted as unanswered)."""

    def __init__(self, problem: str, timed_out: bool = False) -> None:
        super().__init__(problem)
        self.timed_out = timed_out


class ServerFailed(StreamBroken):
    """The server streamed an error event that says it failed, not the request: a 5xx, 408,
    409 or 429 ``code`` (SGLang's scheduler abort of a request it cannot serve, 503; vLLM's
    EngineDeadError, 500), vLLM's dead-engine words under any code (its releases before
    0.10 streamed every error as 400), or no code at all. A retry may fix it: the endpoint's
    failure (``model_unavailable`` when the retries run out), as a broken stream is."""


class MalformedChunk(Exception):
    """Token ids and logprobs that do not pair up (2 ids, 1 logprob): the endpoint's fault."""


class NotAStream(Exception):
    """A stream request was answered with a body that is no event stream (by its
    Content-Type, or a first line that is no SSE field): a server that ignores ``stream``,
    or something in front of it (a proxy's page). ``body`` and ``content_type`` are what
    came, for the caller to read as a whole reply (``whole_reply``) or refuse."""

    def __init__(self, body: str, content_type: str) -> None:
        super().__init__(f"a body ({content_type or 'no Content-Type'}), not an event stream")
        self.body = body
        self.content_type = content_type


@dataclass
class StreamedReply:
    """What the chunks of a streamed reply add up to."""

    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float | None] = field(default_factory=list)
    prompt_token_ids: list[int] | None = None
    finish_reason: str | None = None
    usage: dict[str, int] = field(default_factory=dict)
    #: whether the server sent token ids at all
    has_token_ids: bool = False
    #: tool calls as their deltas build them, by index (id, type, function name, arguments)
    tool_calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    #: the choices folded in (what a MalformedChunk names)
    chunks: int = 0
    #: a whole (not streamed) reply, read as one chunk: a MalformedChunk names the reply
    whole: bool = False
    #: the finishing choice's ``{"matched_stop": …}`` (``calls.matched_stop_of``)
    matched: dict[str, Any] = field(default_factory=dict)

    @property
    def uncounted(self) -> bool:
        """Whether it sampled something nobody counted: neither token ids nor usage."""
        return bool(self.text or self.tool_calls) and not self.has_token_ids and "completion_tokens" not in self.usage

    def whole_tool_calls(self) -> list[dict[str, Any]]:
        """The tool calls the deltas made, in index order, shaped as a non-streamed reply's."""
        return [self.tool_calls[index] for index in sorted(self.tool_calls)]

    def _add_tool_call(self, part: Any) -> None:
        if not isinstance(part, dict):
            return
        call = self.tool_calls.setdefault(int(part.get("index") or 0),
                                          {"id": None, "type": "function", "function": {"name": "", "arguments": ""}})
        if part.get("id"):
            call["id"] = part["id"]
        function = part.get("function") if isinstance(part.get("function"), dict) else {}
        if isinstance(function.get("name"), str):
            call["function"]["name"] += function["name"]
        if isinstance(function.get("arguments"), str):
            call["function"]["arguments"] += function["arguments"]

    def _pair(self, ids: list[int] | None, logprobs: list[float | None] | None) -> None:
        """One chunk's token ids and logprobs, paired: ids without logprobs get None (NaN in a
        segment) on their own tokens only; MalformedChunk when they do not pair."""
        self.chunks += 1
        why = None
        if ids is None and logprobs and self.has_token_ids:
            why = f"{len(logprobs)} logprob(s) and no token ids, where earlier chunks had ids"
        elif ids is not None and logprobs is not None and len(logprobs) != len(ids):
            why = f"{len(ids)} token id(s) (choices[0].token_ids) and {len(logprobs)} logprob(s) (choices[0].logprobs)"
        elif ids is not None and len(self.logprobs) != len(self.token_ids):
            why = "token ids, where an earlier chunk had logprobs without token ids"
        if why:
            where = "reply" if self.whole else f"stream chunk {self.chunks}"
            raise MalformedChunk(f"the model server's {where} holds {why}: its token ids and logprobs do not pair up")
        if ids is None:
            self.logprobs.extend(logprobs or [])
            return
        self.has_token_ids = True
        self.token_ids.extend(ids)
        self.logprobs.extend(logprobs if logprobs is not None else [None] * len(ids))

    def add(self, chunk: dict[str, Any]) -> None:
        """Fold one SSE chunk (chat or completions shape) in; AgentError naming the field when
        token ids or logprobs are of another type (they go into a trainer's tensors as they are)."""
        if chunk.get("prompt_token_ids") is not None:
            self.prompt_token_ids = token_ids_of(chunk["prompt_token_ids"], "prompt_token_ids")
        if isinstance(chunk.get("usage"), dict):
            self.usage = {k: v for k, v in chunk["usage"].items()
                          if k in ("prompt_tokens", "completion_tokens") and isinstance(v, int)}
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta")
            for name, kind, word in (("delta", dict, "object"), ("finish_reason", str, "string")):
                if choice.get(name) is not None and not isinstance(choice[name], kind):
                    raise AgentError(f"the model server's choices[0].{name} is no {word}: {json.dumps(choice[name])[:200]}")
            text = delta.get("content") if delta is not None else choice.get("text")
            if isinstance(text, str):
                self.text += text
            if delta is not None and isinstance(delta.get("tool_calls"), list):
                for part in delta["tool_calls"]:
                    self._add_tool_call(part)
            if choice.get("prompt_token_ids") is not None:
                self.prompt_token_ids = token_ids_of(choice["prompt_token_ids"], "choices[0].prompt_token_ids")
            ids = token_ids_of(choice["token_ids"], "choices[0].token_ids") if choice.get("token_ids") is not None \
                else None
            self._pair(ids, _chunk_logprobs(choice.get("logprobs")))
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
                self.matched = matched_stop_of(choice)  # vLLM's earlier chunks say null: not theirs


#: how far above 0 a sampled token's logprob may be: a server's float32 log-softmax can put a
#: near-certain token's a few 1e-6 above 0 (rounding, logits in the tens); 1e-4 leaves room for
#: that and refuses anything that is no probability (a logprob of 3.0: probability 20)
LOGPROB_SLACK = 1e-4


def _chunk_logprobs(logprobs: Any) -> list[float | None] | None:
    """A choice's logprobs (chat's ``content`` or completions' ``token_logprobs``), checked
    (``logprobs_of``); None when it has none (``logprobs: null``, or an empty list: nothing to
    lose). Anything else (a bare list of numbers, a string) is no shape the APIs send: read as
    null it made every token's logprob NaN."""
    if logprobs is None or logprobs == []:
        return None
    if not isinstance(logprobs, dict):
        raise AgentError("the model server's choices[0].logprobs is neither null nor an object (chat's "
                         "{'content': [...]}, completions' {'token_logprobs': [...]}): "
                         f"{json.dumps(logprobs)[:200]}")
    if isinstance(logprobs.get("content"), list):  # chat
        return logprobs_of([item.get("logprob") for item in logprobs["content"] if isinstance(item, dict)],
                           "choices[0].logprobs.content")
    if isinstance(logprobs.get("token_logprobs"), list):  # completions
        return logprobs_of(logprobs["token_logprobs"], "choices[0].logprobs.token_logprobs")
    return None


def token_ids_of(value: Any, field: str) -> list[int]:
    """``value`` as token ids: a list of ints (not bools) >= 0; AgentError naming ``field`` else."""
    if not isinstance(value, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in value):
        raise AgentError(f"the model server's {field} holds what is no list of int token ids: "
                         f"{json.dumps(value)[:200]}")
    negative = [i for i in value if i < 0]
    if negative:
        raise AgentError(f"the model server's {field} holds negative token ids, which no vocabulary has: "
                         f"{negative[:10]}")
    return value


def logprobs_of(values: list[Any], field: str) -> list[float | None]:
    """``values`` as logprobs: numbers, or null where the server has none; AgentError naming
    ``field`` for anything else, and for numbers that are no log-probability of a sampled
    token: NaN, infinite, or above 0 (past ``LOGPROB_SLACK``)."""
    if not all(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) for v in values):
        raise AgentError(f"the model server's {field} holds logprobs that are not numbers: {json.dumps(values)[:200]}")
    impossible = [v for v in values if v is not None and not (math.isfinite(v) and v <= LOGPROB_SLACK)]
    if impossible:
        raise AgentError(f"the model server's {field} holds logprobs that are no log-probability of a sampled "
                         f"token (NaN, infinite, or above 0 by more than {LOGPROB_SLACK:g}): {impossible[:10]}")
    return values


#: how the lines of an SSE stream begin (a comment or a field); a body's first line does not
_SSE_LINES = (":", "data:", "event:", "id:", "retry:")


def _event_lines(response) -> Iterable[str]:
    """The lines of a streamed response; NotAStream with the whole body when its
    Content-Type is another than an event stream's or its first line is no SSE line (a
    JSON body sent as an event stream). Read past silently, either ended every turn as a
    stream without a finish_reason (as an empty stream still does)."""
    content_type = response.headers.get("content-type", "")
    lines = iter(response.iter_lines())
    first = next((line for line in lines if line.strip()), "")
    if (content_type and "event-stream" not in content_type.lower()) or (first and not first.startswith(_SSE_LINES)):
        raise NotAStream("\n".join([first, *lines]), content_type)
    return itertools.chain([first], lines)


def _watched(lines: Iterable[str], reply: StreamedReply, stall_s: float | None) -> Iterable[str]:
    """``lines``; StreamBroken (timed out) once ``stall_s`` passed without a chunk (SSE comments are none)."""
    last, seen = time.monotonic(), reply.chunks
    for line in lines:
        if reply.chunks != seen:
            last, seen = time.monotonic(), reply.chunks
        elif stall_s is not None and time.monotonic() - last > stall_s:
            raise StreamBroken(f"no chunk within {stall_s:g} s, only SSE comments (keep-alive)", timed_out=True)
        yield line


def whole_reply(chunk: dict[str, Any]) -> StreamedReply:
    """The StreamedReply of a whole (non-streamed) completion, chat or completions shape,
    as its one chunk: a chat choice's ``message`` read as a ``delta`` (tool calls given
    their index), token ids, logprobs and usage where they are."""
    choices = []
    for choice in chunk.get("choices") or []:
        message = choice.get("message") if isinstance(choice, dict) else None
        if isinstance(message, dict):
            calls = message.get("tool_calls") if isinstance(message.get("tool_calls"), list) else []
            delta = {"content": message.get("content"),
                     "tool_calls": [{**call, "index": index} for index, call in enumerate(calls)
                                    if isinstance(call, dict)]}
            choice = {**{k: v for k, v in choice.items() if k != "message"}, "delta": delta}
        choices.append(choice)
    reply = StreamedReply(whole=True)
    reply.add({**chunk, "choices": choices})
    return reply


def read_events(lines: Iterable[str]) -> Iterable[dict[str, Any]]:
    """The JSON objects of an SSE stream's ``data:`` lines, up to ``[DONE]``."""
    for line in lines:
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            return
        try:
            event = json.loads(data)
        except ValueError:
            raise AgentError(f"the model server streamed a line that is not JSON: {data[:200]!r}") from None
        if isinstance(event, dict) and "error" in event and "choices" not in event:
            raise streamed_error(event["error"])
        yield event


#: vLLM's EngineDeadError (vllm/v1/engine/exceptions.py), whatever code it is streamed with
_ENGINE_DEAD = "EngineCore encountered an issue"


def streamed_error(error: Any) -> Exception:
    """What an error event of a stream (``data: {"error": {"message", "type", "code"}}``: SGLang's
    and vLLM's ``create_streaming_error_response``, sent after the 200) says, by its ``code``
    as the same error's HTTP status would: a prompt past the context is a ContextOverflow
    (SGLang's scheduler abort, "Input length (N tokens) exceeds the maximum allowed length"),
    the server's own failure ``ServerFailed`` (retried: SGLang's 503 of a full queue or an
    unavailable scheduler, vLLM's 500 of a dead engine, an event without a code), another 4xx
    the request's error, AgentError quoting the server's message (not retried)."""
    said = json.dumps(error)[:300]
    problem = f"the model server streamed an error: {said}"
    if says_overflow(said):
        return ContextOverflow(problem)
    code = error.get("code") if isinstance(error, dict) else None
    code = int(code) if isinstance(code, str) and code.isdigit() else code
    if not isinstance(code, int) or isinstance(code, bool) or code in RETRYABLE_STATUS or _ENGINE_DEAD in said:
        return ServerFailed(problem)
    return AgentError(f"{problem} (not retried)")


def stream(client, path: str, request: dict[str, Any], abortable: Abortable) -> StreamedReply:
    """Send ``request`` streamed to ``path`` (``/chat/completions`` or ``/completions``) and
    read the reply; Aborted when ``abortable`` ended it; NotAStream when the answer is a body
    (``_event_lines``). openai's status errors propagate, and so does what failed before any
    answer came that is no openai error (it wraps every transport failure): the request could
    not be built (a body JSON cannot carry), the agent's error, never StreamBroken (retried;
    ``timed_out`` when no chunk came for the client's read timeout, keep-alive comments none)."""
    import openai

    timeout = getattr(getattr(client, "timeout", None), "read", getattr(client, "timeout", None))
    stall_s = float(timeout) if isinstance(timeout, (int, float)) else None  # how long a stream may go without a chunk
    body = {**request, "stream": True, "stream_options": {"include_usage": True}}
    extra = body.pop("extra_body", None) or {}
    resource = client.completions if path == "/completions" else client.chat.completions
    reply = StreamedReply()
    if abortable.aborted:
        raise Aborted(reply)
    answered = False
    try:
        with resource.with_streaming_response.create(**body, extra_body=extra) as response:
            answered = True
            abortable.attach(response.http_response)
            for event in read_events(_watched(_event_lines(response), reply, stall_s)):
                abortable.identify(event.get("id"))
                if abortable.aborted:  # what arrived after the abort is not kept: leaving closes it
                    raise Aborted(reply)
                reply.add(event)
    except (Aborted, AgentError, MalformedChunk, openai.APIStatusError):
        raise
    except NotAStream:
        if abortable.aborted:
            raise Aborted(reply) from None
        raise
    except Exception as exc:  # noqa: BLE001 - the HTTP library's own errors, whichever it is
        if abortable.aborted:
            raise Aborted(reply) from None
        if isinstance(exc, (openai.APIError, StreamBroken)) or not answered:
            raise
        if any(kind.__name__ == "TimeoutException" for kind in type(exc).__mro__):  # httpx's, whichever build
            raise StreamBroken(f"no chunk within {stall_s or 0:g} s ({type(exc).__name__})", timed_out=True) from None
        raise StreamBroken(f"{type(exc).__name__}: {exc}") from None
    if reply.finish_reason is None:
        if abortable.aborted:
            raise Aborted(reply)
        raise StreamBroken("the stream ended without a finish_reason")
    return reply
