"""A stream request (every model request under an RL scheduler's policy gate) answered with
no event stream: a server that ignores ``stream=true`` and sends a whole completion is taken
at its word, token ids and logprobs included; a body that is no completion (an HTML page, a
proxy's answer, JSON without choices) fails the turn saying what came, its start quoted,
never "the stream ended without a finish_reason"."""

from __future__ import annotations

import re

import pytest

from llm_server import llm_server  # noqa: F401 - fixture
from parallel_rollout.agents import ModelClient
from parallel_rollout.agents.episode import AgentError
from parallel_rollout.config import RunConfig
from parallel_rollout.policy_gate import PolicyGate

USER = [{"role": "user", "content": "go"}]
WHOLE = {"reply": "<answer>Right</answer>", "token_ids": [11, 12], "logprobs": [-0.1, -0.2],
         "prompt_token_ids": [5, 6], "ignore_stream": True}


@pytest.fixture
def gate():
    gate = PolicyGate(version=4)
    yield gate
    gate.close()


def _client(server, gate: PolicyGate) -> ModelClient:
    config = RunConfig(mode="gym", agent="openai", base_url=server.url, model="m", max_retries=1,
                       policy_gate=gate.path, policy_gate_key=gate.key)
    client = ModelClient(config)
    client.backoff_base_s = 0.01
    return client


@pytest.mark.parametrize("content_type", ["application/json", "text/event-stream"])
def test_a_whole_chat_completion_answering_a_stream_request_is_the_reply(gate, llm_server, content_type):
    """Whatever its Content-Type says (a body labelled an event stream whose first line is
    JSON, not an SSE field), a whole completion is read as one."""
    server = llm_server(script=[{**WHOLE, "content_type": content_type}])
    reply = _client(server, gate).chat(USER)
    assert server.requests[0]["body"]["stream"] is True
    assert reply.text == "<answer>Right</answer>" and reply.stop_reason == "stop"
    assert reply.token_ids == [11, 12] and reply.logprobs == [-0.1, -0.2] and reply.prompt_token_ids == [5, 6]
    assert reply.policy_version == 4 and gate.in_flight == 0


def test_whole_tool_calls_and_a_whole_completions_reply_are_read_too(gate, llm_server):
    call = {"id": "call_0", "type": "function", "function": {"name": "move", "arguments": '{"direction": "Up"}'}}
    server = llm_server(script=[{"reply": None, "tool_calls": [call], "ignore_stream": True},
                                {"reply": "ab", "token_ids": [7, 8], "logprobs": [-0.3, -0.4], "ignore_stream": True}])
    client = _client(server, gate)
    reply = client.chat(USER, tools=[{"type": "function", "function": {"name": "move", "parameters": {}}}])
    assert reply.tool_calls == [call] and reply.stop_reason == "tool_calls" and reply.text == ""
    generated = client.generate([1, 2, 3])
    assert server.requests[1]["path"] == "/v1/completions"
    assert generated.text == "ab" and generated.token_ids == [7, 8] and generated.logprobs == [-0.3, -0.4]


@pytest.mark.parametrize("step, says", [
    ({"malformed": "html page"}, r"Content-Type text/html; charset=utf-8, not an event stream; the body is not "
                                 r"JSON: '<!DOCTYPE html>\\n<html><body>Sign in to the proxy"),
    ({"malformed": "not json"}, r"Content-Type application/json, not an event stream; the body is not JSON: "
                                r"'<html>upstream gateway hiccup</html>'"),
    ({"malformed": "no choices"}, r"not an event stream; no 'choices' in the body: '\{\"id\": \"x\""),
    ({"malformed": "no choices", "content_type": "text/event-stream"},
     r"Content-Type text/event-stream, not an event stream; no 'choices' in the body"),
    ({"malformed": "null content"}, r"not an event stream; choices\[0\].message.content is null"),
], ids=["html-page", "html-as-json", "no-choices", "no-choices-as-sse", "null-content"])
def test_a_body_that_is_no_stream_and_no_completion_says_what_came(gate, llm_server, step, says):
    server = llm_server(script=[step, step])
    with pytest.raises(AgentError) as caught:
        _client(server, gate).chat(USER)
    message = str(caught.value)
    assert "malformed response: the server answered stream=true with " in message, message
    assert re.search(says, message), message
    assert "stream ended without" not in message, message
    assert len(server.requests) == 2 and gate.in_flight == 0  # retried like any malformed body


@pytest.mark.parametrize("step, field", [
    ({"reply": "ab", "token_ids": ["a", "b"], "logprobs": [-0.1, -0.2]}, r"choices\[0\]\.token_ids"),
    ({"reply": "ab", "token_ids": [1, True], "logprobs": [-0.1, -0.2]}, r"choices\[0\]\.token_ids"),
    ({"reply": "ab", "token_ids": [1, 2], "logprobs": [-0.1, -0.2], "prompt_token_ids": [5, "6"]},
     r"prompt_token_ids"),
    ({"reply": "ab", "token_ids": [1, 2], "logprobs": ["low", -0.2]}, r"choices\[0\]\.logprobs"),
    ({**WHOLE, "token_ids": ["a", "b"]}, r"choices\[0\]\.token_ids"),
], ids=["str-ids", "bool-id", "str-prompt-id", "str-logprob", "whole-str-ids"])
def test_token_ids_and_logprobs_of_the_wrong_type_are_refused_naming_the_field(gate, llm_server, step, field):
    """String token ids used to reach the trajectory, and segments() put them in input_ids."""
    server = llm_server(script=[step])
    with pytest.raises(AgentError, match=r"the model server's " + field + r".* (no list of int token ids|not numbers)"):
        _client(server, gate).chat(USER)
    assert len(server.requests) == 1 and gate.in_flight == 0  # the server's format: not retried


@pytest.mark.parametrize("step, field", [
    ({"reply": "ab", "token_ids": ["a", "b"], "logprobs": [-0.1, -0.2]}, r"choices\[0\]\.token_ids"),
    ({"reply": "ab", "token_ids": [1, True], "logprobs": [-0.1, -0.2]}, r"choices\[0\]\.token_ids"),
    ({"reply": "ab", "token_ids": [1, 2], "logprobs": ["low", -0.2]}, r"choices\[0\]\.logprobs"),
], ids=["str-ids", "bool-id", "str-logprob"])
def test_token_ids_sent_outside_a_gate_are_checked_as_a_streamed_reply_s(llm_server, step, field):
    """Outside a policy gate a token-id request (generate(), or a tokenizer's history) is not
    streamed: its reply's token ids and logprobs reached the turn unchecked (strings in a
    trainer's input_ids), where a streamed reply's were refused."""
    server = llm_server(script=[step])
    client = ModelClient(RunConfig(mode="gym", agent="openai", base_url=server.url, model="m", max_retries=1))
    with pytest.raises(AgentError, match=r"the model server's " + field + r".* (no list of int token ids|not numbers)"):
        client.generate([5, 6])
    assert len(server.requests) == 1  # the server's format: not retried
    good = llm_server(script=[{"reply": "ab", "token_ids": [1, 2], "logprobs": [-0.1, -0.2]}])
    client = ModelClient(RunConfig(mode="gym", agent="openai", base_url=good.url, model="m", max_retries=1))
    reply = client.generate([5, 6])
    assert (reply.token_ids, reply.prompt_token_ids, reply.logprobs) == ([1, 2], [5, 6], [-0.1, -0.2])


IMPOSSIBLE = {
    "negative-id": ({"token_ids": [-5, 2], "logprobs": [-0.1, -0.2]}, r"token_ids holds negative token ids.*-5"),
    "positive-logprob": ({"token_ids": [1, 2], "logprobs": [-0.1, 3.0]}, r"logprobs.* no log-probability.*3\.0"),
    "nan-logprob": ({"token_ids": [1, 2], "logprobs": [float("nan"), -0.2]}, r"logprobs.* no log-probability.*nan"),
    "inf-logprob": ({"token_ids": [1, 2], "logprobs": [-0.1, float("-inf")]}, r"logprobs.* no log-probability.*inf"),
}


@pytest.mark.parametrize("how", ["streamed", "whole", "generate", "chat"])
@pytest.mark.parametrize("name", list(IMPOSSIBLE))
def test_token_ids_and_logprobs_that_are_impossible_are_refused_naming_the_field(gate, llm_server, name, how):
    """Numbers of the right type that no server can mean: a negative token id, a logprob above 0
    (a probability above 1), NaN or infinite (NaN was stored as null, then read by segments()
    as 'the server sent none'). They went into a batch; now they fail the model request."""
    fields, message = IMPOSSIBLE[name]
    server = llm_server(script=[{"reply": "ab", **fields, **({"ignore_stream": True} if how == "whole" else {})}])
    if how in ("streamed", "whole"):
        call = lambda: _client(server, gate).chat(USER)  # noqa: E731
    else:
        client = ModelClient(RunConfig(mode="gym", agent="openai", base_url=server.url, model="m", max_retries=1))
        call = (lambda: client.generate([5, 6])) if how == "generate" else (lambda: client.chat(USER))  # noqa: E731
    with pytest.raises(AgentError, match=r"the model server's .*" + message):
        call()
    assert len(server.requests) == 1  # the server's answer: not retried


def test_a_logprob_a_rounding_above_0_is_taken(gate, llm_server):
    """A float32 log-softmax can put a near-certain token's logprob a hair above 0."""
    server = llm_server(script=[{"reply": "ab", "token_ids": [1, 2], "logprobs": [3e-7, -0.0]}])
    assert _client(server, gate).chat(USER).logprobs == [3e-7, -0.0]


@pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "not-streamed"])
def test_an_answer_that_is_no_api_s_is_the_endpoint_s_failure(gate, llm_server, streamed):
    """An HTML page (a proxy's login) for every answer: ModelUnavailable (infrastructure, the
    endpoint's), where JSON that is no completion stays the reply's AgentError."""
    from parallel_rollout.agents.episode import ModelUnavailable

    server = llm_server(script=[{"malformed": "html page"}] * 2 + [{"malformed": "no choices"}] * 2)
    config = RunConfig(mode="gym", agent="openai", base_url=server.url, model="m", max_retries=1)
    client = _client(server, gate) if streamed else ModelClient(config)
    client.backoff_base_s = 0.01
    with pytest.raises(ModelUnavailable, match="Sign in to the proxy"):
        client.chat(USER)
    with pytest.raises(AgentError, match="no 'choices'") as caught:
        client.chat(USER)
    assert not isinstance(caught.value, ModelUnavailable)


def test_a_stream_request_that_cannot_be_built_raises_its_own_error_not_a_broken_stream(llm_server):
    """What fails before any answer came and is no openai error (which wraps every transport
    failure) is the request's own: the client could not encode it. It used to be read as a
    broken stream, which the agent retries and the scheduler blames on the endpoint."""
    from openai import OpenAI

    from parallel_rollout.agents import stream_abort, streaming

    server = llm_server(script=[{"reply": "never"}])
    client = OpenAI(api_key="EMPTY", base_url=server.url, max_retries=0)
    request = {"model": "m", "messages": [{"role": "user", "content": object()}]}
    with pytest.raises(TypeError, match="Object of type object is not JSON serializable"):
        streaming.stream(client, "/chat/completions", request, stream_abort.Abortable())
    assert server.requests == []
