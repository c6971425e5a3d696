"""Replies of the RL abort and version-lag tests, as the local test server (tests/llm_server.py)
gives them: one character a token, continued after a partial reply as a server continues an
aborted request; the first few held until the test has seen them all; and waits on what the
server streamed."""

from __future__ import annotations

import itertools
import threading
import time

#: a reply of one character per token, ending in a move the gym mode parses
REPLY = "thinking " * 6 + "<answer>Right</answer>"
IDS = [1000 + k for k in range(len(REPLY))]
PROMPT = [1, 2, 3]


def continuing(body):
    """The reply, continued after a partial assistant message (continue_final_message), as a
    server keeps sampling from where the aborted request stopped."""
    done = 0
    if body.get("continue_final_message"):
        assert body["messages"][-1]["role"] == "assistant" and body.get("add_generation_prompt") is False
        done = len(body["messages"][-1]["content"])
        assert REPLY.startswith(body["messages"][-1]["content"])
    return {"reply": REPLY[done:], "token_ids": IDS[done:], "logprobs": [-0.5] * (len(IDS) - done),
            "prompt_token_ids": PROMPT + IDS[:done]}


def wait_until(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.005)


def held(count: int):
    """A policy whose first ``count`` replies begin when the test sets the event it returns
    (once it has seen all ``count`` requests) and stream at 10 tokens a second (about 8 s a
    reply): under load the first then ends neither before the last request begins (``count``
    were never in flight at once) nor before the test's suspend. Later replies (after the
    update) stream at the server's rate."""
    asked = threading.Event()
    first = itertools.count()

    def policy(body):
        if next(first) < count:
            asked.wait(60)
            return {**continuing(body), "token_rate": 10}
        return continuing(body)

    return policy, asked


def each_streamed(server, count: int, tokens: int = 3) -> bool:
    """Each of the first ``count`` requests' streams has sent ``tokens`` tokens."""
    return all(server.streamed.get(index, 0) >= tokens for index in range(count))
