"""A small OpenAI-compatible chat server on 127.0.0.1 for tests: scripted faults, then a policy.

``POST /v1/chat/completions`` answers each request with the next step of ``script`` (consumed
in order, shared by every client) and, once the script is used up, with ``policy(body)``.
A step is one of::

    {"reply": "text", "usage": {"prompt_tokens": 3, "completion_tokens": 2}}   # usage optional
    {"status": 429, "retry_after": 1}          # also "retry_after_ms", "retry_after_date"
    {"status": 500}
    {"status": 400, "error": {"message": "…", "param": "max_tokens"}}   # the error body's "error"
    {"sleep": 5, "reply": "late"}              # answers after the client has given up
    {"malformed": "not json" | "no choices" | "null content"}
    {"reply": "text", "token_ids": [3], "logprobs": [-0.2], "prompt_token_ids": [...]}  # as vLLM

``routes`` adds POST endpoints (path → handler(body) → JSON answer), e.g. a trainer's weight push.

``GET /v1/models`` lists one model (what a preflight asks); ``model_listings`` counts those calls.

Every request is recorded (``requests``: body, arrival time, step, Authorization header, every
header) for assertions. The
solvers are policies that answer like a perfect model would: ``shell_solver`` replays each
task's reference commands, found by the instruction in the conversation's first user message;
``lookup_solver`` answers from a dict keyed by a text that occurs in the first user message
(a math problem → ``\\boxed{answer}``, a HumanEval prompt → its canonical solution).
"""

from __future__ import annotations

import json
import threading
import time
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable

import pytest

Step = dict[str, Any]
Policy = Callable[[dict[str, Any]], Step]


class LLMServer:
    """The server, its script and its request log; ``url`` is the base URL (``…/v1``)."""

    def __init__(self, script: list[Step] | None = None, policy: Policy | None = None,
                 routes: dict[str, Callable[[dict[str, Any]], Any]] | None = None) -> None:
        self.script = list(script or [])
        self.policy = policy
        #: extra POST routes: path -> handler(body) -> JSON answer (a trainer's weight push)
        self.routes = dict(routes or {})
        self.requests: list[dict[str, Any]] = []
        #: GET /v1/models calls served
        self.model_listings = 0
        self._lock = threading.Lock()
        # Set at shutdown so a sleeping step ends instead of holding a thread.
        self._closing = threading.Event()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
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
        """Stop serving and close the socket."""
        self._closing.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)

    def next_step(self, body: dict[str, Any], authorization: str | None = None,
                  headers: dict[str, str] | None = None) -> Step:
        """The scripted step for this request (recorded), else the policy's."""
        with self._lock:
            step = self.script.pop(0) if self.script else None
            entry = {"body": body, "time": time.monotonic(), "step": step, "authorization": authorization,
                     "headers": dict(headers or {})}
            self.requests.append(entry)
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
            body = json.loads(self.rfile.read(length) or b"{}")
            if self.path.rstrip("/") in server.routes:
                return self._send(200, server.routes[self.path.rstrip("/")](body))
            if self.path.rstrip("/") != "/v1/chat/completions":
                return self._send(404, {"error": {"message": f"no route {self.path}"}})
            step = server.next_step(body, self.headers.get("Authorization"),
                                    {k.lower(): v for k, v in self.headers.items()})
            try:
                self._answer(step, body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client timed out and hung up: that is what a sleep step tests

        def do_GET(self):
            if self.path.rstrip("/") != "/v1/models":
                return self._send(404, {"error": {"message": f"no route {self.path}"}})
            with server._lock:
                server.model_listings += 1
            self._send(200, {"object": "list", "data": [{"id": "test-model", "object": "model"}]})

        def _answer(self, step: Step, body: dict[str, Any]) -> None:
            if "sleep" in step:
                server.sleep(step["sleep"])
            if "status" in step:
                headers = {}
                if "retry_after" in step:
                    headers["Retry-After"] = str(step["retry_after"])
                if "retry_after_ms" in step:
                    headers["retry-after-ms"] = str(step["retry_after_ms"])
                if "retry_after_date" in step:
                    headers["Retry-After"] = formatdate(time.time() + step["retry_after_date"], usegmt=True)
                error = step.get("error", {"message": f"scripted {step['status']}"})
                return self._send(step["status"], {"error": error}, headers)
            kind = step.get("malformed")
            if kind == "not json":
                return self._send_raw(200, b"<html>upstream gateway hiccup</html>")
            if kind == "no choices":
                return self._send(200, {"id": "x", "object": "chat.completion", "choices": []})
            if kind == "null content":
                return self._send(200, completion(None, body.get("model", "?")))
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
            self._send(200, answer)

        def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
            self._send_raw(status, json.dumps(payload).encode(), headers)

        def _send_raw(self, status: int, data: bytes, headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

    return Handler


def completion(content: str | None, model: str, usage: dict[str, int] | None = None) -> dict[str, Any]:
    """A chat.completion body."""
    usage = usage or {"prompt_tokens": 10, "completion_tokens": 5}
    usage = {**usage, "total_tokens": usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0)}
    return {"id": "chatcmpl-test", "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": content}}],
            "usage": usage}


def reply_with_counts(body: dict[str, Any], text: str) -> Step:
    """A reply step whose usage counts words, so totals are checkable and never zero."""
    prompt_words = sum(len(str(m.get("content", "")).split()) for m in body["messages"])
    return {"reply": text, "usage": {"prompt_tokens": prompt_words, "completion_tokens": len(text.split())}}


def first_user_message(body: dict[str, Any]) -> str:
    """The content of the conversation's first user message."""
    return next(m["content"] for m in body["messages"] if m["role"] == "user")


def shell_solver(tasks_path: Path) -> Policy:
    """Replays each shell task's reference commands, one per turn in a ```bash block, then DONE."""
    tasks = [json.loads(line) for line in Path(tasks_path).read_text().splitlines() if line.strip()]

    def policy(body: dict[str, Any]) -> Step:
        first = first_user_message(body)
        task = next((t for t in tasks if t["instruction"] in first), None)
        if task is None:
            raise AssertionError(f"no task's instruction is in the first user message: {first[:200]!r}")
        turn = sum(1 for m in body["messages"] if m["role"] == "assistant")
        commands = task["reference"]
        text = f"```bash\n{commands[turn]}\n```" if turn < len(commands) else "DONE"
        return reply_with_counts(body, text)

    return policy


def lookup_solver(answers: dict[str, str]) -> Policy:
    """Answers with ``answers[key]`` for the key that occurs in the first user message."""

    def policy(body: dict[str, Any]) -> Step:
        first = first_user_message(body)
        for key, answer in answers.items():
            if key in first:
                return reply_with_counts(body, answer)
        raise AssertionError(f"no known question in {first[:200]!r}")

    return policy


@pytest.fixture
def llm_server():
    """``llm_server(script=…, policy=…)`` starts a server; all are stopped after the test."""
    servers: list[LLMServer] = []

    def start(script: list[Step] | None = None, policy: Policy | None = None, routes=None) -> LLMServer:
        server = LLMServer(script, policy, routes).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()
