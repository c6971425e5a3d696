"""Wire: what one model request looks like on the wire, chat messages or token ids.

``ModelClient`` (model_client.py) does the calling; its Wire turns a turn's request into what
is sent and reads what comes back::

    chat:   {"messages": …}                  POST …/chat/completions
    tokens: {"prompt": [ids …]} (history)  POST …/completions
    prepare(request) ─► send / send_streamed ─► reply / streamed_reply ─► (text, usage, turn info)
    accept(info)  (tokens: the sampled ids join the history)

**Chat** (no tokenizer): any OpenAI-compatible chat endpoint. Under an RL scheduler it asks for
``logprobs`` and vLLM's ``return_token_ids`` and records what comes back; the server renders
the chat template every turn, so a trajectory may break into segments (``rl/segments.py``).
**Tokens** (``RunConfig.tokenizer``): the Wire keeps the token history and sends token ids to
``/v1/completions`` (vLLM takes a list of ids as ``prompt``), tokenizing only each new
observation (``tokens.ChatTokenizer``): one exact sequence per episode. ``max_model_len``
bounds it: a prompt that reaches it ends the episode as ``context_overflow``, and each reply
may take at most what is left. A request that already holds a ``prompt`` of ids (an agent's
own token-in call, ``ModelClient.generate``) goes to ``/completions`` as it is.

Every turn records ``stop_reason`` (the server's ``finish_reason``: stop, length, tool_calls,
abort …), ``matched_stop`` where the server says which stop string or token id it matched
(vLLM's ``stop_reason``, SGLang's ``matched_stop``: ``calls.matched_stop_of``) and a reply's ``tool_calls`` as they came (a reply of tool calls alone, content null,
is a reply, not a malformed one; ``tools.py`` makes actions of them). A server's "maximum
context length" / "too long" 4xx is a ``ContextOverflow`` (``is_overflow``), not an error.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from . import context_room, partial_reply, streaming
from .calls import matched_stop_of
from .episode import AgentError, ContextOverflow, TokenIdsNotReturned, says_overflow
from .streaming import logprobs_of, token_ids_of

log = logging.getLogger("parallel_rollout")

#: characters of an error body quoted in messages
BODY_EXCERPT = 300
#: what to do when a server answers without token ids
NO_TOKEN_IDS_HINT = ("serve the policy with vLLM >= 0.10.2 (the agent asks for return_token_ids and logprobs), "
                     "or set tokenizer= in the run config so the agent sends and keeps token ids itself")

#: what a token-id prompt answered without its sampled token ids is told
NO_IDS_FOR_IDS = ("the server returned no token ids for a token-id prompt (tokenizer= and generate() send token "
                  "ids to /completions and keep the ids it samples): serve the policy with vLLM >= 0.10.2, which "
                  "returns them when asked (return_token_ids), or run without tokenizer= (chat requests)")


class MalformedResponse(Exception):
    """A 2xx response whose body is not a usable completion; ``content_type``: the answer's,
    where known (``not_an_api_answer`` tells the endpoint's fault from the reply's)."""

    def __init__(self, problem: str, content_type: str | None = None) -> None:
        super().__init__(problem)
        self.content_type = content_type


def not_an_api_answer(content_type: str | None) -> bool:
    """Whether a malformed answer came as something no model API answers with (an HTML page:
    a proxy's, a login's; plain text): the endpoint is not serving the API, which is its
    fault (``ModelUnavailable`` once the retries run out), not the reply's. JSON or an event
    stream that holds no completion, or no Content-Type at all, stays the reply's."""
    if not content_type:
        return False
    kind = content_type.split(";")[0].strip().lower()
    return not (kind in ("application/json", "text/event-stream") or kind.endswith("+json"))


class Wire:
    """The wire format of one agent's model requests: chat messages, or token ids with a
    tokenizer (one token history per episode)."""

    def __init__(self, config) -> None:
        self.config = config
        self._folder = getattr(config, "tokenizer", None)
        #: a ChatTokenizer (token in, token out; loaded by the first reset), or None (chat)
        self.tokenizer = None
        self._history: list[int] = []
        self._sampled: list[int] = []
        #: the turn's prompt ids and message count (None: an agent's own ids, no history)
        self._pending: tuple[list[int], int | None] = ([], 0)
        #: messages of the conversation already in the history (the reply the agent appends
        #: included), and those sent, as they were (``_check_extends``)
        self._tokenized = 0
        self._sent: list[dict[str, Any]] = []
        self._pending_sent: list[dict[str, Any]] = []
        #: whether the turn under way sends token ids (tokenizer=, or ``prepare_ids``)
        self.sends_ids = False
        #: whether the server reported other prompt ids than were sent (logged once)
        self._differed = False
        #: whether a reply's sampled ids decoded to its text by the tokenizer (``check_tokenizer``)
        self._matched = False

    @property
    def path(self) -> str:
        """The endpoint's path under the base URL for the run's requests."""
        return "/completions" if self._folder else "/chat/completions"

    @staticmethod
    def path_of(request: dict[str, Any]) -> str:
        """The endpoint's path for one prepared request: ids go to ``/completions``."""
        return "/completions" if "prompt" in request else "/chat/completions"

    def reset(self) -> None:
        """A new episode: an empty token history (the tokenizer is loaded on the first one:
        the worker makes agents outside any attempt, where an error would not be a record)."""
        if self._folder and self.tokenizer is None:
            from .tokens import ChatTokenizer

            self.tokenizer = ChatTokenizer(self._folder)
        self._history, self._sampled, self._tokenized, self._sent = [], [], 0, []

    def prepare(self, request: dict[str, Any]) -> dict[str, Any]:
        """The request to send for a chat request (``model``, ``messages``, sampling); made
        once per turn, so retries send the same. ContextOverflow when the token budget is
        spent."""
        self.sends_ids = self.tokenizer is not None
        if self.tokenizer is None:
            return request
        request = dict(request)
        messages = request.pop("messages")
        self._check_extends(messages)
        new = messages[self._tokenized:]
        for message in new:
            if not isinstance(message.get("content"), str):
                raise AgentError("tokenizer=: token in, token out takes text messages only; this "
                                 "observation has content parts (images); run without a tokenizer")
        if self._history:
            # The sampled ids of the last reply are already in the history: start after its end.
            prompt = self._history + self.tokenizer.continuation(self._sampled, new)
        else:
            prompt = self.tokenizer.first_prompt(new)
        self._pending, self._pending_sent = (prompt, len(messages)), [dict(m) for m in messages]
        request["prompt"] = prompt
        return self._bounded(request, prompt)

    def _check_extends(self, messages: list[dict[str, Any]]) -> None:
        """ValueError unless ``messages`` are the conversation already sent, then the last reply
        as an assistant message, then at least one new message: only those are tokenized, after
        the history the model saw, so anything else (a conversation shortened or edited, the
        same one asked again) would be silently sent as something the agent did not ask."""
        if not self._history:
            return
        reply = self._tokenized - 1
        if messages[:reply] != self._sent:
            where = next((k for k, (a, b) in enumerate(zip(messages, self._sent)) if a != b), len(messages))
            why = f"message {where} is not the one sent before"
        elif len(messages) <= reply or messages[reply].get("role") != "assistant":
            why = f"message {reply} is not the last reply as an assistant message"
        elif len(messages) == self._tokenized:
            why = "nothing new follows the last reply"
        else:
            return
        raise ValueError(f"tokenizer=: chat() takes the whole conversation so far, the last reply appended as an "
                         f"assistant message, then what is new ({len(self._sent)} message(s) sent, then the reply); "
                         f"got {len(messages)} message(s): {why}. Token in, token out keeps the token history the "
                         "model saw and tokenizes only what is new; for a prompt of your own call generate() with "
                         "its token ids")

    def prepare_ids(self, request: dict[str, Any]) -> dict[str, Any]:
        """The request for an agent's own token ids (``request["prompt"]``): sent as they are,
        bounded by ``max_model_len`` like the history; the history is not touched."""
        prompt = request["prompt"]
        if not isinstance(prompt, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in prompt):
            raise AgentError("generate(): prompt_token_ids must be a list of int token ids")
        self.sends_ids = True
        self._pending = (list(prompt), None)
        return self._bounded(dict(request), list(prompt))

    def _bounded(self, request: dict[str, Any], prompt: list[int]) -> dict[str, Any]:
        """A token-id request's ``max_tokens`` within what ``max_model_len`` leaves."""
        # /completions knows max_tokens only
        limit = request.pop("max_completion_tokens", None) or request.pop("max_tokens", None)
        budget = getattr(self.config, "max_model_len", None)
        if budget is not None:
            if len(prompt) >= budget:
                raise ContextOverflow(f"the episode's {len(prompt)} prompt tokens reach max_model_len={budget}")
            limit = min(limit or budget, budget - len(prompt))
        if limit is not None:
            request["max_tokens"] = limit
        return request

    def send(self, client, request: dict[str, Any], rl: bool):
        """One HTTP request; with ``rl`` (or tokens) it asks for token ids and logprobs."""
        if "prompt" in request:
            extra = {**request.pop("extra_body", {}), "return_token_ids": True}
            return client.completions.with_raw_response.create(**request, logprobs=1, extra_body=extra)
        if not rl:
            return client.chat.completions.with_raw_response.create(**request)
        extra = {**request.pop("extra_body", {}), "return_token_ids": True}
        return client.chat.completions.with_raw_response.create(**request, logprobs=True, extra_body=extra)

    def send_streamed(self, client, request: dict[str, Any], abortable, partial=None):
        """The request streamed (RL: abortable mid-reply), asking for token ids and logprobs:
        a ``streaming.StreamedReply``; ``streaming.Aborted`` when ``abortable`` ended it.
        A continuation of ``partial`` (``partial_reply.continued``) that has no token left to
        sample (its max_tokens 0: the partial holds the turn's max_tokens, or all
        ``max_model_len`` leaves) is not sent, and one the server refuses as past its context
        (the partial filled it; one whose refusal leaves room for fewer tokens is raised, and
        asked again with those: context_room.py) is not an overflow: either is an empty reply that ends the
        turn with stop reason length, the tokens sampled before kept, as a reply that reached
        the limit unaborted ends (a ContextOverflow here lost them)."""
        import openai

        request = dict(request)
        extra = {**request.pop("extra_body", {}), "return_token_ids": True}
        logprobs = 1 if "prompt" in request else True
        path = self.path_of(request)
        if partial_reply.nothing_left(request, partial):
            return streaming.StreamedReply(finish_reason="length")
        try:
            return streaming.stream(client, path, {**request, "logprobs": logprobs, "extra_body": extra}, abortable)
        except streaming.NotAStream as exc:
            return _whole_streamed(exc, path)
        except (openai.APIStatusError, ContextOverflow) as exc:
            said = exc.response.text if isinstance(exc, openai.APIStatusError) else str(exc)
            if partial is None or not (isinstance(exc, ContextOverflow) or is_overflow(exc.status_code, said)):
                raise
            if isinstance(exc, openai.APIStatusError) and context_room.fit(dict(request), exc.status_code, said):
                raise  # the context has room for fewer tokens: asked again with those (ModelClient._send)
            log.info("%s: a continued reply reached the model's context (%s): the turn ends there (length)",
                     path, excerpt(said))
            return streaming.StreamedReply(finish_reason="length")

    def streamed_reply(self, partial) -> tuple[str, dict[str, Any]]:
        """(reply text, turn info) of a whole streamed reply (``partial_reply.Partial``, every
        token with its version); TokenIdsNotReturned when a token-id prompt got no token ids."""
        info: dict[str, Any] = {"stop_reason": partial.finish_reason or "unknown", **partial.matched}
        if self.sends_ids:
            if not partial.has_token_ids:
                raise TokenIdsNotReturned(NO_IDS_FOR_IDS)
            info.update(self._prompt_seen(partial.prompt_token_ids))
        elif partial.prompt_token_ids is not None:
            info["prompt_token_ids"] = partial.prompt_token_ids
        if partial.has_token_ids:
            info["token_ids"] = partial.token_ids
            info["logprobs"] = partial.logprobs if len(partial.logprobs) == len(partial.token_ids) else None
        if partial.tool_calls:
            info["tool_calls"] = partial.tool_calls
        return partial.text, info

    def reply(self, body: bytes | str) -> tuple[str, dict[str, int], dict[str, Any]]:
        """(reply text, token usage, turn info) of a response body; MalformedResponse saying
        what is wrong otherwise."""
        if not self.sends_ids:
            text, usage = reply_of(body)
            return text, usage, turn_info(body)
        data = _body_object(body)
        choice = _first_choice(data, body)
        text = choice.get("text")
        if not isinstance(text, str):
            raise MalformedResponse(f"choices[0].text is {_json_type(text)}")
        sampled = choice.get("token_ids")
        if not isinstance(sampled, list):
            raise TokenIdsNotReturned(NO_IDS_FOR_IDS)
        # checked as a streamed reply's are (one chunk): they go into a trainer's tensors as they are
        whole = streaming.StreamedReply(whole=True)
        whole.add({"prompt_token_ids": data.get("prompt_token_ids"),
                   "choices": [{**{k: v for k, v in choice.items() if k != "text"}, "index": 0}]})
        info = {**self._prompt_seen(whole.prompt_token_ids), "token_ids": whole.token_ids,
                "logprobs": whole.logprobs if isinstance(choice.get("logprobs"), dict) else None,
                "stop_reason": choice.get("finish_reason") or "unknown", **matched_stop_of(choice)}
        return text, _usage(data), info

    def _prompt_seen(self, reported: list[int] | None) -> dict[str, Any]:
        """A token-id turn's ``prompt_token_ids``: what the server reports it saw when it reports
        them (an empty report is none), else the ids sent. A report that differs (a server that
        prepends a BOS) is what the trainer's tensors need: the turn records it, marked
        ``prompt_differs``, and the first such turn of the client is logged."""
        sent = self._pending[0]
        if not reported or reported == sent:
            return {"prompt_token_ids": sent}
        if not self._differed:
            self._differed = True
            log.warning("the model server reports other prompt token ids than were sent (%d sent, starting %s; "
                        "%d seen, starting %s): turns record what it saw (prompt_differs)",
                        len(sent), sent[:5], len(reported), reported[:5])
        return {"prompt_token_ids": reported, "prompt_differs": True}

    def check_tokenizer(self, text: str, info: dict[str, Any], server: str | None) -> None:
        """TokenizerMismatch when the reply's sampled ids do not decode to its text by the
        run's tokenizer folder (``tokens.ChatTokenizer.mismatch``), until one reply does: the
        folder is then the served model's (the first replies of each agent are checked)."""
        if self.tokenizer is None or self._matched or not self.sends_ids or not info.get("token_ids"):
            return
        decoded = self.tokenizer.mismatch(text, info["token_ids"])
        if decoded is None:
            self._matched = bool(text.strip())
            return
        from .episode import TokenizerMismatch

        raise TokenizerMismatch(
            f"tokenizer={str(self._folder)!r} is not the tokenizer of the model the server runs "
            f"(model {getattr(self.config, 'model', None)!r} at {server}): the server's reply {excerpt(text)[:80]!r} "
            f"came as token ids {info['token_ids'][:8]}{'…' if len(info['token_ids']) > 8 else ''}, which this "
            f"folder decodes as {excerpt(decoded)[:80]!r}. Its ids are not what the model saw and wrote, and a "
            "trainer would train on them: give tokenizer= the served model's own tokenizer folder")

    def accept(self, info: dict[str, Any]) -> None:
        """A reply was taken: its sampled ids extend the token history (tokenizer= only)."""
        prompt, count = self._pending
        if self.tokenizer is None or count is None:
            return
        self._sampled = list(info["token_ids"])
        self._history = prompt + self._sampled
        self._tokenized = count + 1  # the agent appends the reply as the next message
        self._sent = self._pending_sent


    def context_full(self) -> bool:
        """Whether the token history fills ``max_model_len`` (tokens only): a reply cut
        there ran out of context, not out of ``max_tokens``."""
        budget = getattr(self.config, "max_model_len", None)
        return self.tokenizer is not None and budget is not None and len(self._history) >= budget


def is_overflow(status: int, body: str) -> bool:
    """Whether an HTTP error says the prompt no longer fits the model's context."""
    return status in (400, 413, 422) and says_overflow(body)


def reply_of(body: bytes | str) -> tuple[str, dict[str, int]]:
    """(reply text, token usage) of a chat completion body; MalformedResponse saying what is
    wrong otherwise."""
    data = _body_object(body)
    choice = _first_choice(data, body)
    message = choice.get("message")
    if not isinstance(message, dict):
        raise MalformedResponse(f"choices[0] has no 'message': {excerpt(body)!r}")
    content = message.get("content")
    if content is None and isinstance(message.get("tool_calls"), list) and message["tool_calls"]:
        return "", _usage(data)  # a reply of tool calls only: turn_info carries them
    if not isinstance(content, str):
        why = f"finish_reason {choice.get('finish_reason')!r}"
        if message.get("refusal"):
            why += f", refusal {message['refusal']!r}"
        if message.get("tool_calls"):
            why += ", the model called a tool"
        raise MalformedResponse(f"choices[0].message.content is {_json_type(content)} ({why})")
    return content, _usage(data)


def turn_info(body: bytes | str) -> dict[str, Any]:
    """A chat completion's stop reason, and its token ids and logprobs where the server sent
    them: vLLM's ``choices[0].token_ids`` / ``prompt_token_ids`` (``return_token_ids``) and
    OpenAI's ``choices[0].logprobs.content[].logprob``."""
    try:
        data = json.loads(body)
        choice = data["choices"][0]
    except (ValueError, KeyError, IndexError, TypeError):
        return {}
    info: dict[str, Any] = {"stop_reason": choice.get("finish_reason") or "unknown", **matched_stop_of(choice)}
    calls = (choice.get("message") or {}).get("tool_calls") if isinstance(choice.get("message"), dict) else None
    if isinstance(calls, list) and calls:
        info["tool_calls"] = calls  # as they came: the agent (or a trainer) reads them
    # checked as a streamed reply's are: they go into a trainer's tensors as they are
    if choice.get("token_ids") is not None:
        info["token_ids"] = token_ids_of(choice["token_ids"], "choices[0].token_ids")
    prompt_ids = data.get("prompt_token_ids", choice.get("prompt_token_ids"))
    if prompt_ids is not None:
        info["prompt_token_ids"] = token_ids_of(prompt_ids, "prompt_token_ids")
    content = (choice.get("logprobs") or {}).get("content") if isinstance(choice.get("logprobs"), dict) else None
    if isinstance(content, list):
        info["logprobs"] = logprobs_of([item.get("logprob") for item in content if isinstance(item, dict)],
                                       "choices[0].logprobs.content")
    return info


def _whole_streamed(answer, path: str):
    """The reply of a stream request answered with a body (``streaming.NotAStream``): a
    whole completion, checked as a non-streamed one is, is taken as it is (a server that
    ignores ``stream``; an abort then ends a request only before its answer comes); anything
    else is a MalformedResponse that says what came instead of an event stream."""
    what = f"Content-Type {answer.content_type}" if answer.content_type else "no Content-Type"
    try:
        if path == "/completions":
            text = _first_choice(_body_object(answer.body), answer.body).get("text")
            if not isinstance(text, str):
                raise MalformedResponse(f"choices[0].text is {_json_type(text)}")
        else:
            reply_of(answer.body)
        reply = streaming.whole_reply(_body_object(answer.body))
        if reply.finish_reason is None:
            raise MalformedResponse(f"choices[0] has no finish_reason: {excerpt(answer.body)!r}")
    except MalformedResponse as exc:
        raise MalformedResponse(f"the server answered stream=true with {what}, not an event stream; {exc}",
                                answer.content_type) from None
    return reply


def excerpt(body: bytes | str) -> str:
    """The start of a body, for an error message."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else str(body)
    return text if len(text) <= BODY_EXCERPT else text[:BODY_EXCERPT] + "…"


def _body_object(body: bytes | str) -> dict[str, Any]:
    try:
        data = json.loads(body)
    except ValueError:
        raise MalformedResponse(f"the body is not JSON: {excerpt(body)!r}") from None
    if not isinstance(data, dict):
        raise MalformedResponse(f"the body is not a JSON object: {excerpt(body)!r}")
    return data


def _first_choice(data: dict[str, Any], body: bytes | str) -> dict[str, Any]:
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        raise MalformedResponse(f"no 'choices' in the body: {excerpt(body)!r}")
    return choices[0] if isinstance(choices[0], dict) else {}


def _usage(data: dict[str, Any]) -> dict[str, int]:
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    return {name: usage[name] for name in ("prompt_tokens", "completion_tokens")
            if isinstance(usage.get(name), int) and not isinstance(usage.get(name), bool)}


def _json_type(value: Any) -> str:
    return "null" if value is None else f"a {type(value).__name__}, not a string"
