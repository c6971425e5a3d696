"""A stream whose chunks a trainer cannot take as they are: token ids and logprobs that do not
pair up in a chunk (the whole turn's logprobs used to become None, status success, nothing
said), a chunk without logprobs (NaN for its own tokens only), and the same checks on a
whole (not streamed) reply. The test server streams the chunks as given (``"chunks"``). And
a reply the server ended itself (``finish_reason: "abort"``), no answer of the policy."""

from __future__ import annotations

import math
import time

import pytest

from llm_server import llm_server  # noqa: F401 - fixture
from parallel_rollout.agents import ModelClient
from parallel_rollout.agents.episode import AgentError, ModelUnavailable
from parallel_rollout.config import RunConfig
from parallel_rollout.policy_gate import PolicyGate
from parallel_rollout.rl.segments import build_segments

USER = [{"role": "user", "content": "go"}]


def choice(text: str, ids: list[int] | None, logprobs: list[float] | None, finish: str | None = None) -> dict:
    """A chat chunk's choice as vLLM streams it: token ids and their logprobs (None: ``null``)."""
    part = {"index": 0, "delta": {"content": text}, "finish_reason": finish,
            "logprobs": None if logprobs is None else {"content": [{"token": "t", "logprob": lp, "top_logprobs": []}
                                                                   for lp in logprobs]}}
    if ids is not None:
        part["token_ids"] = ids
    return part


def stream(*chunks: dict) -> dict:
    return {"chunks": [choice("", None, None), *chunks], "prompt_token_ids": [1, 2, 3]}


@pytest.fixture
def gate():
    gate = PolicyGate(version=2)
    yield gate
    gate.close()


def _client(server, gate: PolicyGate | None, **changes) -> ModelClient:
    config = RunConfig(mode="gym", agent="openai", base_url=server.url, model="m", max_retries=1,
                       policy_gate=gate.path if gate else None, policy_gate_key=gate.key if gate else None, **changes)
    client = ModelClient(config)
    client.backoff_base_s = 0.01
    return client


MISALIGNED = {
    "fewer-logprobs": (stream(choice("<answer>", [10, 11], [-0.1]), choice("Right</answer>", [12], [-0.3], "stop")),
                       r"stream chunk 2 holds 2 token id\(s\) \(choices\[0\]\.token_ids\) and 1 logprob\(s\)"),
    "logprobs-without-ids": (stream(choice("<answer>", [10, 11], [-0.1, -0.2]),
                                    choice("Right</answer>", None, [-0.3], "stop")),
                             r"stream chunk 3 holds 1 logprob\(s\) and no token ids, where earlier chunks had ids"),
    "ids-after-bare-logprobs": (stream(choice("<answer>", None, [-0.1]), choice("Right</answer>", [12], [-0.3], "stop")),
                                r"stream chunk 3 holds token ids, where an earlier chunk had logprobs without"),
}


@pytest.mark.parametrize("name", list(MISALIGNED))
def test_token_ids_and_logprobs_that_do_not_pair_fail_the_request_as_the_endpoint_s(gate, llm_server, name):
    """A chunk of 2 ids and 1 logprob made the whole turn's logprobs None (NaN in every
    segment) and the member a success: now a malformed reply, retried, then the endpoint's
    failure (model_unavailable), saying which chunk."""
    step, says = MISALIGNED[name]
    server = llm_server(script=[step, step])
    with pytest.raises(ModelUnavailable, match=r"malformed response: the model server's " + says):
        _client(server, gate).chat(USER)
    assert len(server.requests) == 2 and gate.in_flight == 0  # retried like any malformed answer


def test_a_chunk_without_logprobs_leaves_nan_on_its_own_tokens_only(gate, llm_server):
    """``logprobs: null`` in one chunk wiped the logprobs of every chunk of the turn."""
    server = llm_server(script=[stream(choice("<answer>", [10, 11], [-0.1, -0.2]),
                                       choice("Right</answer>", [12, 13, 14], None, "stop"))])
    reply = _client(server, gate).chat(USER)
    assert reply.token_ids == [10, 11, 12, 13, 14]
    assert reply.logprobs == [-0.1, -0.2, None, None, None]
    [segment] = build_segments([reply.turn])
    assert segment.logprobs[:5] == [0.0, 0.0, 0.0, -0.1, -0.2]
    assert all(math.isnan(lp) for lp in segment.logprobs[5:])


@pytest.mark.parametrize("logprobs", [[-0.1, -0.2], "-0.1 -0.2", -0.3], ids=["bare-list", "str", "number"])
def test_logprobs_of_no_known_shape_are_refused_not_read_as_none(gate, llm_server, logprobs):
    """A chunk's ``logprobs`` that is neither null nor an object (a bare list of numbers, a
    string) was read as ``null``: NaN on every token, the member a success, as though the
    server had sent none. Now the request fails naming the field, as logprobs that are no
    numbers do (the server's format: not retried)."""
    part = {**choice("<answer>", [10, 11], None, "stop"), "logprobs": logprobs}
    server = llm_server(script=[stream(part), stream(part)])
    with pytest.raises(AgentError, match=r"the model server's choices\[0\]\.logprobs is neither null nor an object"):
        _client(server, gate).chat(USER)
    assert len(server.requests) == 1 and gate.in_flight == 0


def test_an_empty_logprobs_list_on_a_chunk_without_tokens_is_none(gate, llm_server):
    """An empty list where a chunk samples nothing (a role chunk) holds no logprob to lose:
    read as null, as before the check above; the tokens' own logprobs come through."""
    empty = {**choice("", None, None), "logprobs": []}
    server = llm_server(script=[stream(empty, choice("<answer>", [10, 11], [-0.1, -0.2], "stop"))])
    reply = _client(server, gate).chat(USER)
    assert reply.token_ids == [10, 11] and reply.logprobs == [-0.1, -0.2]


@pytest.mark.parametrize("part, field", [
    ({"index": 0, "delta": "<answer>Right</answer>", "token_ids": [10], "finish_reason": "stop"}, r"choices\[0\]\.delta"),
    ({**choice("<answer>Right</answer>", [10], [-0.1]), "finish_reason": 5}, r"choices\[0\]\.finish_reason"),
], ids=["delta-str", "finish-int"])
def test_a_chunk_whose_delta_or_finish_reason_is_of_no_known_type_is_refused(gate, llm_server, part, field):
    """A delta that is no object lost the reply's text silently (an empty reply, parsed as the
    move); a finish_reason that is no string became the turn's stop_reason as it came. Now the
    request fails naming the field, as token ids of another type do (not retried)."""
    server = llm_server(script=[stream(part), stream(part)])
    with pytest.raises(AgentError, match=r"the model server's " + field + r" is no"):
        _client(server, gate).chat(USER)
    assert len(server.requests) == 1 and gate.in_flight == 0


@pytest.mark.parametrize("gated", [True, False], ids=["whole-answer-to-a-stream", "not-streamed"])
def test_a_whole_reply_whose_logprobs_do_not_pair_with_its_ids_is_malformed_too(gate, llm_server, gated):
    """A whole completions reply (a server that ignores stream=true, or generate() outside a
    gate) with 2 ids and 1 logprob reached the turn as it came: segments() raised later. The
    error says the reply, not a "stream chunk 1" of a reply that was no stream."""
    step = {"reply": "ab", "token_ids": [7, 8], "logprobs": [-0.3], "ignore_stream": True}
    server = llm_server(script=[step, step])
    with pytest.raises(ModelUnavailable, match=r"the model server's reply holds 2 token id\(s\) .* and 1 logprob\(s\)"):
        _client(server, gate if gated else None).generate([1, 2, 3])
    assert len(server.requests) == 2


FIRST = choice("<answer>", [10], [-0.1])


@pytest.mark.timeout(60)  # a keep-alive stream was never timed out: the call never ended
@pytest.mark.parametrize("then, says", [("stall", r"no chunk within 1 s \(ReadTimeout\)"),
                                        ("keepalive", r"no chunk within 1 s, only SSE comments \(keep-alive\)")])
def test_a_stream_that_stops_sending_tokens_is_the_endpoint_s_timeout(gate, llm_server, then, says):
    """A stream that stalls after its first chunk was a broken stream, the member's failure
    (the scheduler blamed the members, its hung-endpoint check never fired); one kept open by
    ``: keepalive`` comments was never timed out (each attempt cost a task_timeout). Both are
    now no answer within api_timeout_s: ModelUnavailable, and the gate counts them unanswered."""
    step = {**stream(FIRST), "then": then}
    server = llm_server(script=[step, step])
    started = time.monotonic()
    with pytest.raises(ModelUnavailable, match=r"the reply stream broke: " + says):
        _client(server, gate, api_timeout_s=1.0).chat(USER)
    assert time.monotonic() - started < 6  # two requests of ~1 s each
    assert gate.unanswered == 2 and gate.replies == 0 and gate.in_flight == 0


@pytest.mark.parametrize("then, says", [("close", r"the stream ended without a finish_reason"),
                                        ("cut", r"RemoteProtocolError")])
def test_a_stream_the_server_cuts_mid_reply_is_the_endpoint_s_failure(gate, llm_server, then, says):
    """A stream the server ends mid-reply (closed before a finish_reason, or short of its
    Content-Length) was a malformed reply when the retries ran out: the member's AgentError,
    graded 0, where a connection reset is model_unavailable. A transport failure is the
    endpoint's: ModelUnavailable."""
    step = {**stream(FIRST), "then": then}
    server = llm_server(script=[step, step])
    with pytest.raises(ModelUnavailable, match=r"the reply stream broke: .*" + says):
        _client(server, gate).chat(USER)
    assert len(server.requests) == 2 and gate.in_flight == 0


def test_tokens_that_keep_coming_never_time_out(gate, llm_server):
    """A long reply never counts: 12 tokens at 4 a second (3 s) within api_timeout_s=1."""
    server = llm_server(script=[{"reply": "<answer>Right</answer>", "token_ids": list(range(12)),
                                 "logprobs": [-0.1] * 12, "prompt_token_ids": [1], "token_rate": 4}])
    reply = _client(server, gate, api_timeout_s=1.0).chat(USER)
    assert reply.token_ids == list(range(12)) and gate.unanswered == 0 and len(server.requests) == 1


@pytest.mark.parametrize("how", ["streamed", "not-streamed"])
def test_a_token_prompt_records_the_ids_the_server_says_it_saw(gate, llm_server, caplog, how):
    """A server that prepends a BOS reports [0, 5, 6] for the ids [5, 6] sent: the turn kept
    [5, 6], and a trainer trained on a sequence the model did not see. It records the server's
    report now, marked prompt_differs, logged once; a report that matches (or none) changes nothing."""
    step = {"reply": "ab", "token_ids": [7, 8], "logprobs": [-0.1, -0.2]}
    server = llm_server(script=[{**step, "prompt_token_ids": [0, 5, 6]}, {**step, "prompt_token_ids": [0, 5, 6]},
                                {**step, "prompt_token_ids": [5, 6]}, step])
    client = _client(server, gate if how == "streamed" else None)
    with caplog.at_level("WARNING", logger="parallel_rollout"):
        first, second = client.generate([5, 6]), client.generate([5, 6])
    assert first.prompt_token_ids == second.prompt_token_ids == [0, 5, 6]
    assert first.turn["prompt_differs"] is True
    assert [r.getMessage() for r in caplog.records].count(
        "the model server reports other prompt token ids than were sent (2 sent, starting [5, 6]; 3 seen, "
        "starting [0, 5, 6]): turns record what it saw (prompt_differs)") == 1
    for reply in (client.generate([5, 6]), client.generate([5, 6])):  # the same ids, or an empty report
        assert reply.prompt_token_ids == [5, 6] and "prompt_differs" not in reply.turn


def test_an_empty_prompt_report_is_refused_like_a_missing_one(gate, llm_server):
    """``prompt_token_ids: []`` reached segments() as sampled tokens with no context."""
    from parallel_rollout.rl.segments import NoTokenIds

    server = llm_server(script=[{"reply": "ab", "token_ids": [7, 8], "logprobs": [-0.1, -0.2], "prompt_token_ids": []}])
    reply = _client(server, gate).chat(USER)
    with pytest.raises(NoTokenIds, match=r"turn 1 has an empty prompt_token_ids: the model server reported no "
                                         r"prompt tokens .*return_token_ids"):
        build_segments([{**reply.turn, "turn": 1}])


# A reply the model server ended itself (``finish_reason: "abort"``: it was told to abort
# the request by something other than this client, as a trainer that aborts every request on
# the server for a weight update does, SGLang's abort or vLLM's) is no answer of the policy:
# it was taken as the turn's whole reply and parsed as an action, so the episode played on a
# cut reply and the trainer got it as the policy's outcome. Now, under a policy gate, it is an
# aborted turn as one this client aborts is: continued from its tokens with
# ``partial_rollout``, else asked again, spending no retry; a server that aborts every request
# at one policy version fails the turn as the endpoint's (``ModelUnavailable``) after
# ``max_retries + 1`` of them instead of asking without end. Without a gate it is a failed
# request, retried.

#: the server aborts the reply after two tokens, then (asked again) answers it whole or the rest
CUT = {"reply": "<answer>Ri", "token_ids": [10, 11], "logprobs": [-0.1, -0.2], "prompt_token_ids": [1, 2, 3],
       "finish_reason": "abort"}
REST = {"reply": "ght</answer>", "token_ids": [12, 13], "logprobs": [-0.3, -0.4],
        "prompt_token_ids": [1, 2, 3, 10, 11]}
WHOLE = {"reply": "<answer>Right</answer>", "token_ids": [10, 14, 15], "logprobs": [-0.1, -0.5, -0.6],
         "prompt_token_ids": [1, 2, 3]}


def test_a_reply_the_server_aborted_is_continued_from_its_tokens(gate, llm_server):
    server = llm_server(script=[CUT, REST])
    client = _client(server, gate, partial_rollout=True)
    reply = client.chat(USER)
    assert reply.text == "<answer>Right</answer>" and reply.stop_reason == "stop"
    assert reply.token_ids == [10, 11, 12, 13] and reply.logprobs == [-0.1, -0.2, -0.3, -0.4]
    continued = server.requests[1]["body"]
    assert continued["messages"][-1] == {"role": "assistant", "content": "<answer>Ri"}
    assert continued["continue_final_message"] is True
    turn = client.turn_record()
    assert turn["partial"] and turn["versions"] == [2, 2, 2, 2] and turn["redone"] == 1
    [segment] = build_segments([turn])
    assert [i for i, m in zip(segment.input_ids, segment.loss_mask) if m] == [10, 11, 12, 13]
    assert client.usage()["retries"] == 0  # an abort is never a retry


def test_a_reply_the_server_aborted_is_asked_again_without_partial_rollout(gate, llm_server):
    server = llm_server(script=[CUT, WHOLE])
    client = _client(server, gate)
    reply = client.chat(USER)
    assert reply.text == "<answer>Right</answer>" and reply.stop_reason == "stop"
    assert reply.token_ids == [10, 14, 15]
    assert server.requests[1]["body"]["messages"] == USER  # from scratch
    assert client.usage()["retries"] == 0 and client.turn_record()["redone"] == 1


def test_a_server_that_aborts_every_request_fails_the_turn_instead_of_asking_for_ever(gate, llm_server):
    server = llm_server(script=[CUT] * 5)
    with pytest.raises(ModelUnavailable, match=r"aborted 2 requests of this turn in a row \(finish_reason 'abort'\)"):
        _client(server, gate).chat(USER)
    assert len(server.requests) == 2 and gate.in_flight == 0


def test_without_a_gate_a_reply_the_server_aborted_is_a_failed_request(llm_server):
    server = llm_server(script=[{k: v for k, v in CUT.items() if k != "token_ids"}, {"reply": "<answer>Right</answer>"}])
    client = _client(server, None)
    reply = client.chat(USER)
    assert reply.text == "<answer>Right</answer>" and reply.stop_reason == "stop"
    assert client.usage()["retries"] == 1 and len(server.requests) == 2
