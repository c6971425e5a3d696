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
from parallel_rollout.agents.episode import AgentError, ContextOverflow, ModelUnavailable
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


# -- errors streamed after the 200 -------------------------------------------------------------
# What vLLM's and SGLang's OpenAI servers stream when a request fails after its 200, replayed
# byte for byte by the test server, and what the model client makes of each: the server's
# failure is retried and then the endpoint's (model_unavailable, infrastructure), a request
# error is the member's error quoting the server, a prompt past the context is context_overflow.
#
# Both servers stream a failure as one event, ``data: {"error": {...}}``, then (SGLang) the
# usage chunk and ``[DONE]``: SGLang's ``OpenAIServingBase.create_streaming_error_response``
# (python/sglang/srt/entrypoints/openai/serving_base.py), sent by serving_chat.py's
# ``_generate_chat_stream`` for a request its scheduler aborted with a status code
# (``FINISH_ABORT(message, HTTPStatus...)``: code.name as the type, code.value as the code);
# vLLM's ``OpenAIServing.create_streaming_error_response`` (vllm/entrypoints/openai/engine/
# serving.py), which gives an exception that is no validation error code 500, InternalServerError
# (its EngineDeadError: vllm/v1/engine/exceptions.py).


def _sglang(message: str, status: str, code: int) -> dict:
    return {"raw": {"error": {"object": "error", "message": message, "type": status, "param": None, "code": code}}}


#: SGLang's scheduler aborting a request it cannot serve with HTTPStatus.SERVICE_UNAVAILABLE (a full
#: queue): the event's shape is serving_chat.py's, its wording here the test's own
SGLANG_QUEUE_FULL = _sglang("The request queue is full.", "SERVICE_UNAVAILABLE", 503)
#: vLLM's engine core died under the request (EngineDeadError, streamed as InternalServerError)
VLLM_ENGINE_DEAD = {"raw": {"error": {"message": "EngineCore encountered an issue. See stack trace (above) for "
                                                 "the root cause.", "type": "InternalServerError", "param": None,
                                      "code": 500}}}
#: the same before vLLM 0.10, whose stream generator gave every exception the default 400
VLLM_ENGINE_DEAD_OLD = {"raw": {"error": {"object": "error", "message": "EngineCore encountered an issue. See stack "
                                          "trace (above) for the root cause.", "type": "BadRequestError",
                                          "param": None, "code": 400}}}
#: a request error SGLang finds once streaming began (a tool call its parser refuses: ValueError, 400)
SGLANG_BAD_REQUEST = _sglang("Tool call arguments must be a JSON object.", "BadRequestError", 400)
#: SGLang's scheduler abort of a prompt past its context (FINISH_ABORT, 400)
SGLANG_TOO_LONG = _sglang("Input length (4099 tokens) exceeds the maximum allowed length (4096 tokens). Use a "
                          "shorter input or enable --allow-auto-truncate.", "BAD_REQUEST", 400)


@pytest.mark.parametrize("event", [SGLANG_QUEUE_FULL, VLLM_ENGINE_DEAD, VLLM_ENGINE_DEAD_OLD],
                         ids=["sglang-queue-full", "vllm-engine-dead", "vllm-engine-dead-before-0.10"])
def test_a_server_failure_streamed_as_an_error_event_is_retried(gate, llm_server, event):
    """It was the member's AgentError at once ("the model server streamed an error"), graded
    as the policy's failure: a busy or dying server cost the group a member."""
    server = llm_server(script=[{"chunks": [event]}, {"reply": "<answer>Right</answer>"}])
    client = _client(server, gate)
    assert client.chat(USER).text == "<answer>Right</answer>"
    assert len(server.requests) == 2 and client.usage()["retries"] == 1 and gate.in_flight == 0


def test_a_server_failure_streamed_every_time_is_the_endpoints_failure(gate, llm_server):
    server = llm_server(script=[{"chunks": [VLLM_ENGINE_DEAD]}] * 2)
    client = _client(server, gate)
    with pytest.raises(ModelUnavailable, match="EngineCore encountered an issue") as caught:
        client.chat(USER)
    assert caught.value.infrastructure and len(server.requests) == 2
    assert client.endpoint_failure is caught.value


def test_a_request_error_streamed_as_an_error_event_is_the_members_error_with_the_servers_words(gate, llm_server):
    server = llm_server(script=[{"chunks": [SGLANG_BAD_REQUEST]}, {"reply": "never asked"}])
    with pytest.raises(AgentError, match="Tool call arguments must be a JSON object") as caught:
        _client(server, gate).chat(USER)
    assert not isinstance(caught.value, ModelUnavailable) and len(server.requests) == 1


def test_a_prompt_too_long_streamed_as_an_error_event_stays_a_context_overflow(gate, llm_server):
    server = llm_server(script=[{"chunks": [SGLANG_TOO_LONG]}])
    with pytest.raises(ContextOverflow, match="exceeds the maximum allowed length"):
        _client(server, gate).chat(USER)
    assert len(server.requests) == 1
