"""A small OpenAI-compatible chat server on 127.0.0.1 for tests: scripted faults, then a policy.

``POST /v1/chat/completions`` answers each request with the next step of ``script`` (consumed
in order, shared by every client) and, once the script is used up, with ``policy(body)``.
A step is one of::

    {"reply": "text", "usage": {"prompt_tokens": 3, "completion_tokens": 2}}   # usage optional
    {"status": 429, "retry_after": 1}          # also "retry_after_ms", "retry_after_date"
    {"status": 500}
    {"status": 400, "error": {"message": "…", "param": "max_tokens"}}   # the error body's "error"
    {"sleep": 5, "reply": "late"}              # answers after the client has given up
    {"hang_up": True}                          # the connection closed without an answer (a killed server)
    {"malformed": "not json" | "no choices" | "null content" | "html page"}   # html page: text/html
    {"reply": "text", "token_ids": [3], "logprobs": [-0.2], "prompt_token_ids": [...]}  # as vLLM
    {"reply": None, "tool_calls": [{"id": …, "type": "function", "function": {…}}]}  # tool calls

``POST /v1/completions`` (a token-id or text ``prompt``, as vLLM takes it) is answered the same
way, in the completions shape: ``choices[0].text``, ``token_ids``, ``logprobs.token_logprobs``.
A step may carry ``"finish_reason"`` (default "stop") and a status step a ``"message"``; a
chat step ``"content_type"`` (the answer's Content-Type instead of application/json). A step's
``"choice"`` joins its choice: vLLM's ``{"stop_reason": "</act>"}`` (the stop matched; null at
EOS), SGLang's ``{"matched_stop": 2}``; streamed, on the last chunk, and as null on the others
(vLLM's chunks carry ``stop_reason: null`` until the last).

``routes`` adds POST endpoints (path → handler(body) → JSON answer), e.g. a trainer's weight push.

``TokenModel`` (tests/token_model.py) is a policy that speaks in tokens, as vLLM does.

**Streaming.** A request with ``"stream": true`` is answered as Server-Sent Events, as vLLM
streams: one chunk per token (a token-id step's ids, each with its logprob and a share of
the text, or the step's ``"pieces"``: one text per token; otherwise a word), ``token_rate`` tokens a second (None: at once; a step's
``"token_rate"`` overrides it), ``prompt_token_ids`` in the first chunk, finish_reason in the
last, then a usage chunk and ``[DONE]``; a step with ``"ignore_stream": True`` is answered whole,
as a server that ignores ``stream`` would. A client that hangs up mid-stream is an abort: it is
logged in ``aborts`` (``time`` monotonic, ``request`` index, ``tokens`` sent before it). A stream's id is
``cmpl-<request index>`` (what an ``abort_url`` is told). A step's ``"queue_s"`` holds the reply
(streamed or whole) that long before its first byte, as a busy server's queue does; a hang-up
meanwhile is an abort.

**Misbehaving streams.** A step's ``"chunks"`` (a list of choice dicts) is streamed as they
are, one chunk each (``prompt_token_ids`` in the first when the step has them), then usage and
``[DONE]``, or, with ``"then": "stall"``, nothing more while the connection stays open, or with
``"then": "keepalive"``, an SSE comment (``: keepalive``) every ``keepalive_s`` (0.2) and nothing else,
or with ``"then": "close"`` the connection closed (no finish_reason, no ``[DONE]``), with
``"then": "cut"`` closed short of the Content-Length it announced (httpx's RemoteProtocolError):
chunks that pair token ids and logprobs wrongly, a stream that stalls after its first chunk.
A chunk ``{"raw": payload}`` is streamed as that payload, as it is: an error event
(``{"error": {…}}``, SGLang's answer to a request its scheduler aborted, a prompt too long).

**The model's context.** ``max_model_len`` refuses a request past it before any step is taken,
as vLLM does (``context_refusal``: recorded with its ``refused`` message).

``GET /v1/models`` lists ``models`` ("test-model", and "m" and RunConfig's default model, the names
the tests' runs give: what a preflight and a run's worker ask); ``model_listings`` counts those calls.
``missing_routes`` are answered 404 (``{"detail": "Not Found"}``, FastAPI's), as a server without
that route would; a POST with neither ``messages`` nor ``prompt`` is answered 400 before any step
is taken, as vLLM does (``bodiless`` counts them).

Every request is recorded (``requests``: body, arrival time, step, Authorization header, every
header, the path) for assertions. The
solvers, policies that answer like a perfect model would (``shell_solver``, ``lookup_solver``,
``lake_tool_solver``), live in ``llm_solvers.py`` and are imported from here too.
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

import pytest

from llm_solvers import (call_tool, first_user_message, lake_tool_solver, lookup_solver,  # noqa: F401 - their home
                         reply_with_counts, shell_solver)

Step = dict[str, Any]
Policy = Callable[[dict[str, Any]], Step]


class _Listener(ThreadingHTTPServer):
    # A model server's listen backlog (uvicorn's is 2048), not socketserver's 5: every streamed
    # reply closes its connection, so env loops that end their turns together connect
    # together, and a full backlog drops their SYNs for a second-long retransmit each.
    request_queue_size = 128


class LLMServer:
    """The server, its script and its request log; ``url`` is the base URL (``…/v1``)."""

    def __init__(self, script: list[Step] | None = None, policy: Policy | None = None,
                 routes: dict[str, Callable[[dict[str, Any]], Any]] | None = None,
                 token_rate: float | None = None, max_model_len: int | None = None, port: int = 0) -> None:
        self.script = list(script or [])
        #: the model's context, as vLLM's --max-model-len (None: no limit; ``context_refusal``)
        self.max_model_len = max_model_len
        #: streamed tokens a second (None: all at once)
        self.token_rate = token_rate
        #: streams the client hung up on: {"time", "request", "tokens"}
        self.aborts: list[dict[str, Any]] = []
        #: tokens streamed, in all
        self.tokens_streamed = 0
        #: tokens streamed, by request index
        self.streamed: dict[int, int] = {}
        self.policy = policy
        #: extra POST routes: path -> handler(body) -> JSON answer (a trainer's weight push)
        self.routes = dict(routes or {})
        self.requests: list[dict[str, Any]] = []
        #: GET /v1/models calls served
        self.model_listings = 0
        #: the model ids GET /v1/models lists (another: a server restarted with another model);
        #: also the names the tests' runs give (``m``, RunConfig's default): a run's worker asks
        #: its one server's /models before its first request (agents/servers.py)
        self.models = ["test-model", "m", "gpt-4.1-2025-04-14"]
        #: POST routes answered 404 as FastAPI does (a completions-only server: {"/v1/chat/completions"})
        self.missing_routes: set[str] = set()
        #: POSTs without messages or prompt, answered 400 before sampling (no step), as vLLM does
        self.bodiless = 0
        self._lock = threading.Lock()
        # the index of the request this handler thread recorded last: its stream's id, taken
        # when the request came, not when its step was chosen (a policy may wait for others)
        self._asked = threading.local()
        # Set at shutdown so a sleeping step ends instead of holding a thread.
        self._closing = threading.Event()
        self._httpd = _Listener(("127.0.0.1", port), _handler(self))  # port 0: any free one
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="llm-server", daemon=True)

    @property
    def url(self) -> str:
        """The base URL to give the OpenAI client."""
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> "LLMServer":
        """Serve in a background thread."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket; requests on open connections get no answer."""
        self._closing.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)

    def next_step(self, body: dict[str, Any], authorization: str | None = None,
                  headers: dict[str, str] | None = None, path: str | None = None) -> Step:
        """The scripted step for this request (recorded), else the policy's."""
        with self._lock:
            step = self.script.pop(0) if self.script else None
            entry = {"body": body, "time": time.monotonic(), "step": step, "authorization": authorization,
                     "headers": dict(headers or {}), "path": path}
            self.requests.append(entry)
            self._asked.index = len(self.requests) - 1
        if step is None:
            if self.policy is None:
                raise AssertionError("the llm server's script ran out and it has no policy")
            step = self.policy(body)
            entry["step"] = step
        return step

    def sleep(self, seconds: float) -> None:
        """Wait, but not past shutdown."""
        self._closing.wait(seconds)


def _handler(server: LLMServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format, *args):  # noqa: A002 - the base class's name
            pass  # keep pytest output clean

        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            if len(raw) < length:
                # the client hung up mid-request (an abort while the request was being sent):
                # a real server never sees a request, so none is recorded or answered
                self.close_connection = True
                return
            body = json.loads(raw or b"{}")
            if server._closing.is_set():
                # stopped: a kept-alive connection is hung up on without an answer, as a
                # killed server's would be (shutdown alone ends only new connections)
                self.close_connection = True
                return
            if self.path.rstrip("/") in server.routes:
                return self._send(200, server.routes[self.path.rstrip("/")](body))
            if (self.path.rstrip("/") not in ("/v1/chat/completions", "/v1/completions")
                    or self.path.rstrip("/") in server.missing_routes):
                return self._send(404, {"detail": "Not Found"} if self.path.rstrip("/") in server.missing_routes
                                  else {"error": {"message": f"no route {self.path}"}})
            if "messages" not in body and "prompt" not in body:  # refused before sampling, as vLLM does
                with server._lock:
                    server.bodiless += 1
                return self._send(400, {"error": {"message": "1 validation error: messages: Field required"}})
            refusal = context_refusal(body, server.max_model_len)
            if refusal is not None:  # refused before sampling, as vLLM does: no step is taken
                with server._lock:
                    server.requests.append({"body": body, "time": time.monotonic(), "step": None,
                                            "refused": refusal["error"]["message"], "path": self.path.rstrip("/")})
                return self._send(400, refusal)
            step = server.next_step(body, self.headers.get("Authorization"),
                                    {k.lower(): v for k, v in self.headers.items()}, self.path.rstrip("/"))
            if step.get("queue_s") and not self._still_there(step["queue_s"]):
                with server._lock:  # hung up on while queued: an abort, streamed or not
                    server.aborts.append({"time": time.monotonic(), "request": server._asked.index, "tokens": 0})
                return
            try:
                if body.get("stream") and "chunks" in step:
                    self._stream_chunks(step, body, server._asked.index)
                elif (body.get("stream") and ("reply" in step or "tool_calls" in step) and "sleep" not in step
                        and not step.get("ignore_stream")):
                    self._stream(step, body, server._asked.index)
                elif self.path.rstrip("/") == "/v1/completions":
                    self._answer_completion(step, body)
                else:
                    self._answer(step, body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client timed out and hung up: that is what a sleep step tests

        def do_GET(self):
            if self.path.rstrip("/") != "/v1/models":
                return self._send(404, {"error": {"message": f"no route {self.path}"}})
            with server._lock:
                server.model_listings += 1
            self._send(200, {"object": "list", "data": [{"id": m, "object": "model"} for m in server.models]})

        def _answer(self, step: Step, body: dict[str, Any]) -> None:
            if "sleep" in step:
                server.sleep(step["sleep"])
            if step.get("hang_up"):
                self.close_connection = True  # no answer: the client sees the connection closed
                return
            if "status" in step:
                headers = {}
                if "retry_after" in step:
                    headers["Retry-After"] = str(step["retry_after"])
                if "retry_after_ms" in step:
                    headers["retry-after-ms"] = str(step["retry_after_ms"])
                if "retry_after_date" in step:
                    headers["Retry-After"] = formatdate(time.time() + step["retry_after_date"], usegmt=True)
                error = step.get("error", {"message": step.get("message", f"scripted {step['status']}")})
                return self._send(step["status"], {"error": error}, headers)
            kind = step.get("malformed")
            content_type = step.get("content_type", "application/json")
            if kind == "not json":
                return self._send_raw(200, b"<html>upstream gateway hiccup</html>", content_type=content_type)
            if kind == "html page":
                return self._send_raw(200, b"<!DOCTYPE html>\n<html><body>Sign in to the proxy</body></html>",
                                      content_type="text/html; charset=utf-8")
            if kind == "no choices":
                return self._send(200, {"id": "x", "object": "chat.completion", "choices": []},
                                  content_type=content_type)
            if kind == "null content":
                return self._send(200, completion(None, body.get("model", "?")), content_type=content_type)
            if kind is not None:
                raise AssertionError(f"unknown malformed kind {kind!r}")
            answer = completion(step["reply"], body.get("model", "?"), step.get("usage"))
            if "token_ids" in step:  # as vLLM answers with return_token_ids and logprobs
                choice = answer["choices"][0]
                choice["token_ids"] = step["token_ids"]
                choice["logprobs"] = {"content": [{"token": f"token_id:{t}", "logprob": lp, "top_logprobs": []}
                                                  for t, lp in zip(step["token_ids"], step["logprobs"])]}
                answer["prompt_token_ids"] = step.get("prompt_token_ids", [])
                answer.update(step.get("extra", {}))
            if step.get("tool_calls"):
                answer["choices"][0]["message"]["tool_calls"] = step["tool_calls"]
            answer["choices"][0]["finish_reason"] = step.get(
                "finish_reason", "tool_calls" if step.get("tool_calls") else "stop")
            answer["choices"][0].update(step.get("choice", {}))
            self._send(200, answer, content_type=content_type)

        def _answer_completion(self, step: Step, body: dict[str, Any]) -> None:
            if "status" in step:
                return self._send(step["status"], {"error": {"message": step.get("message", "scripted")}})
            choice = {"index": 0, "text": step["reply"], "finish_reason": step.get("finish_reason", "stop"),
                      **step.get("choice", {})}
            if "token_ids" in step:  # vLLM's return_token_ids
                choice["token_ids"] = step["token_ids"]
                choice["prompt_token_ids"] = step.get("prompt_token_ids", [])
                choice["logprobs"] = {"token_logprobs": step["logprobs"],
                                      "tokens": [f"token_id:{t}" for t in step["token_ids"]]}
            usage = step.get("usage") or {"prompt_tokens": 10, "completion_tokens": 5}
            self._send(200, {"id": "cmpl-test", "object": "text_completion", "created": int(time.time()),
                             "model": body.get("model", "?"), "choices": [choice], "usage": usage})

        def _stream(self, step: Step, body: dict[str, Any], index: int) -> None:
            chat = self.path.rstrip("/") == "/v1/chat/completions"
            text, ids = step.get("reply") or "", step.get("token_ids")
            # a reply with nothing left (a continuation at its end) still ends with a finish_reason
            pieces = step.get("pieces") or _pieces(text, len(ids) if ids is not None else None) or [""]
            if ids is not None and len(ids) < len(pieces):
                ids, step = ids + [None], {**step, "logprobs": list(step["logprobs"]) + [None]}
            rate = step.get("token_rate", server.token_rate)
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            sent = 0
            try:
                for k, piece in enumerate(pieces):
                    if rate:
                        server.sleep(1.0 / rate)
                    choice: dict[str, Any] = {"index": 0, "finish_reason": None,
                                              **dict.fromkeys(step.get("choice", {}))}
                    if chat:
                        choice["delta"] = {"content": piece} if k else {"role": "assistant", "content": piece}
                    else:
                        choice["text"] = piece
                    if ids is not None and ids[k] is None:
                        choice["token_ids"] = []
                    elif ids is not None:
                        choice["token_ids"] = [ids[k]]
                        logprob = step["logprobs"][k]
                        choice["logprobs"] = ({"content": [{"token": f"token_id:{ids[k]}", "logprob": logprob,
                                                            "top_logprobs": []}]} if chat
                                              else {"token_logprobs": [logprob], "tokens": [f"token_id:{ids[k]}"]})
                    if k == len(pieces) - 1 and step.get("tool_calls") and chat:
                        # as OpenAI streams them: the name in one delta, the arguments in two
                        for i, call in enumerate(step["tool_calls"]):
                            args = call["function"]["arguments"]
                            for part in ({"index": i, "id": call["id"], "type": "function",
                                          "function": {"name": call["function"]["name"], "arguments": ""}},
                                         {"index": i, "function": {"arguments": args[:len(args) // 2]}},
                                         {"index": i, "function": {"arguments": args[len(args) // 2:]}}):
                                self._event({"id": f"cmpl-{index}", "object": "chat.completion.chunk",
                                             "choices": [{"index": 0, "finish_reason": None,
                                                          "delta": {"tool_calls": [part]}}]})
                    if k == len(pieces) - 1:
                        choice["finish_reason"] = step.get("finish_reason",
                                                           "tool_calls" if step.get("tool_calls") else "stop")
                        choice.update(step.get("choice", {}))
                    chunk: dict[str, Any] = {"id": f"cmpl-{index}", "object": "chat.completion.chunk",
                                             "model": body.get("model", "?"), "choices": [choice]}
                    if k == 0 and ids is not None:
                        chunk["prompt_token_ids"] = step.get("prompt_token_ids", [])
                    self._event(chunk)
                    if piece or (ids is not None and ids[k] is not None):  # not the empty last chunk
                        sent += 1
                        with server._lock:
                            server.tokens_streamed += 1
                            server.streamed[index] = sent
                usage = step.get("usage") or {"prompt_tokens": 10, "completion_tokens": len(pieces)}
                self._event({"id": f"cmpl-{index}", "choices": [], "usage": usage})
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                with server._lock:
                    server.aborts.append({"time": time.monotonic(), "request": index, "tokens": sent})

        def _stream_chunks(self, step: Step, body: dict[str, Any], index: int) -> None:
            """A step's ``chunks`` as they are (the module docstring's misbehaving streams)."""
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            if step.get("then") == "cut":
                self.send_header("Content-Length", str(10**6))
            self.end_headers()
            self.close_connection = True
            try:
                for k, choice in enumerate(step["chunks"]):
                    chunk = choice["raw"] if "raw" in choice else {
                        "id": f"cmpl-{index}", "object": "chat.completion.chunk",
                        "model": body.get("model", "?"), "choices": [choice]}
                    if k == 0 and "prompt_token_ids" in step:
                        chunk["prompt_token_ids"] = step["prompt_token_ids"]
                    self._event(chunk)
                if step.get("then") == "stall":
                    server.sleep(3600)
                    return
                if step.get("then") in ("close", "cut"):
                    return
                while step.get("then") == "keepalive" and not server._closing.is_set():
                    server.sleep(step.get("keepalive_s", 0.2))
                    self.wfile.write(b": keepalive\n\n")
                    self.wfile.flush()
                self._event({"id": f"cmpl-{index}", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 1}})
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                with server._lock:
                    server.aborts.append({"time": time.monotonic(), "request": index, "tokens": 0})

        def _still_there(self, seconds: float) -> bool:
            """Wait ``seconds`` (a queued request); False as soon as the client hangs up."""
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline and not server._closing.is_set():
                if select.select([self.connection], [], [], 0.02)[0] and not self.connection.recv(1, socket.MSG_PEEK):
                    return False
            return True

        def _event(self, payload: Any) -> None:
            self.wfile.write(b"data: " + json.dumps(payload).encode() + b"\n\n")
            self.wfile.flush()

        def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None,
                  content_type: str = "application/json") -> None:
            self._send_raw(status, json.dumps(payload).encode(), headers, content_type)

        def _send_raw(self, status: int, data: bytes, headers: dict[str, str] | None = None,
                      content_type: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

    return Handler


def _pieces(text: str, count: int | None) -> list[str]:
    """``text`` in ``count`` pieces (one per token id), or in words."""
    if count is None:
        words = text.split(" ")
        return [w if k == 0 else " " + w for k, w in enumerate(words)]
    if count == 0:
        return []
    step = len(text) / count
    return [text[round(k * step): round((k + 1) * step)] for k in range(count)]


def context_refusal(body: dict[str, Any], max_model_len: int | None) -> dict[str, Any] | None:
    """vLLM's 400 (0.6–0.11's wording, vllm/entrypoints/openai/serving_engine.py) for a request
    past ``max_model_len``: a prompt that does not fit itself, or prompt + max_tokens past it
    although the prompt fits; None when it fits. A prompt's tokens are a token-id prompt's ids,
    else the words of the messages (as ``reply_with_counts`` counts them)."""
    if max_model_len is None:
        return None
    prompt = body.get("prompt")
    tokens = len(prompt) if isinstance(prompt, list) else sum(
        len(str(m.get("content") or "").split()) for m in body.get("messages") or [])
    limit = body.get("max_completion_tokens") or body.get("max_tokens")
    if tokens >= max_model_len:
        message = (f"This model's maximum context length is {max_model_len} tokens. However, your request has "
                   f"{tokens} input tokens. Please reduce the length of the input messages.")
    elif limit is not None and tokens + limit > max_model_len:
        message = (f"'max_tokens' or 'max_completion_tokens' is too large: {limit}. This model's maximum context "
                   f"length is {max_model_len} tokens and your request has {tokens} input tokens ({limit} > "
                   f"{max_model_len} - {tokens}).")
    else:
        return None
    return {"error": {"message": message, "type": "BadRequestError", "param": None, "code": 400}}


def completion(content: str | None, model: str, usage: dict[str, int] | None = None) -> dict[str, Any]:
    """A chat.completion body."""
    usage = usage or {"prompt_tokens": 10, "completion_tokens": 5}
    usage = {**usage, "total_tokens": usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0)}
    return {"id": "chatcmpl-test", "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": content}}],
            "usage": usage}


@pytest.fixture
def llm_server():
    """``llm_server(script=…, policy=…)`` starts a server; all are stopped after the test."""
    servers: list[LLMServer] = []

    def start(script: list[Step] | None = None, policy: Policy | None = None, routes=None,
              token_rate: float | None = None, max_model_len: int | None = None) -> LLMServer:
        server = LLMServer(script, policy, routes, token_rate, max_model_len).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()
