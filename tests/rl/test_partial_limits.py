"""A partial rollout's continuation and the turn's limits: max_tokens is the whole turn's, the
tokens sampled before the abort included (counted by their ids, else by the server's usage;
what nobody counted is said, not guessed)."""

from __future__ import annotations

import threading
import time

import pytest

from llm_server import llm_server  # noqa: F401 - fixture
from parallel_rollout.agents import ModelClient, partial_reply
from parallel_rollout.config import RunConfig
from parallel_rollout.policy_gate import PolicyGate

USER = [{"role": "user", "content": "go"}]


@pytest.fixture
def gate():
    gate = PolicyGate(version=2)
    yield gate
    gate.close()


def _client(server, gate: PolicyGate, **changes) -> ModelClient:
    config = RunConfig(mode="gym", agent="openai", base_url=server.url, model="m", max_retries=1,
                       policy_gate=gate.path, policy_gate_key=gate.key, partial_rollout=True, **changes)
    client = ModelClient(config)
    client.backoff_base_s = 0.01
    return client


def test_a_chat_continuation_without_token_ids_takes_off_what_the_usage_counted(gate, llm_server):
    """A server that streams no token ids aborts the reply after 4 tokens (its usage says so):
    the continuation may sample 16 more of max_tokens=20, not 20 again (a turn of 24)."""
    server = llm_server(script=[{"reply": "<answer> R i", "finish_reason": "abort",
                                 "usage": {"prompt_tokens": 10, "completion_tokens": 4}},
                                {"reply": "ght </answer>", "usage": {"prompt_tokens": 14, "completion_tokens": 2}}])
    client = _client(server, gate, max_tokens=20)
    reply = client.chat(USER)
    assert reply.text == "<answer> R ight </answer>" and reply.stop_reason == "stop"
    assert server.requests[0]["body"]["max_tokens"] == 20
    assert server.requests[1]["body"]["max_tokens"] == 16
    turn = client.turn_record()
    assert turn["partial"] and "max_tokens_unchecked" not in turn
    assert client.usage()["completion_tokens"] == 6


def test_a_continuation_whose_aborted_part_nobody_counted_says_so(gate, llm_server, caplog, monkeypatch):
    """The trainer's own abort closes a stream of a server that sends no token ids before its
    usage chunk: nobody knows how many tokens came. The continuation is not given a guess:
    the turn says max_tokens_unchecked (it may be longer than max_tokens), and the log once."""
    monkeypatch.setattr(partial_reply, "_told_unchecked", [])
    server = llm_server(script=[{"reply": "w " * 40 + "<answer>Right</answer>", "token_rate": 40},
                                {"reply": "<answer>Right</answer>"}])
    client = _client(server, gate, max_tokens=100)
    got: list = []
    thread = threading.Thread(target=lambda: got.append(client.chat(USER)), daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while server.tokens_streamed < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    gate.suspend(abort=True)
    while not server.aborts and time.monotonic() < deadline:
        time.sleep(0.01)
    gate.resume(3)
    thread.join(10)
    assert got and got[0].text.endswith("<answer>Right</answer>") and got[0].text.startswith("w w")
    assert server.requests[1]["body"]["max_tokens"] == 100  # not guessed
    turn = client.turn_record()
    assert turn["partial"] and turn["max_tokens_unchecked"] is True
    assert [r for r in caplog.records if "max_tokens_unchecked" in r.getMessage()]


def test_a_continuation_with_token_ids_is_never_marked(gate, llm_server):
    ids = {"token_ids": [10, 11], "logprobs": [-0.1, -0.2], "prompt_token_ids": [1, 2, 3]}
    server = llm_server(script=[{"reply": "<answer>Ri", **ids, "finish_reason": "abort", "usage": {"prompt_tokens": 3}},
                                {"reply": "ght</answer>", "token_ids": [12], "logprobs": [-0.3],
                                 "prompt_token_ids": [1, 2, 3, 10, 11]}])
    client = _client(server, gate, max_tokens=20)
    client.chat(USER)
    assert server.requests[1]["body"]["max_tokens"] == 18
    assert "max_tokens_unchecked" not in client.turn_record()


def test_a_continuation_with_no_room_left_in_max_model_len_keeps_the_sampled_tokens(gate, llm_server, tmp_path):
    """Token in, token out: the server aborted the reply right after its last token fitting
    max_model_len. Continuing it sent a prompt of max_model_len tokens, which the server refused
    ("maximum context length"), and the ContextOverflow lost every token sampled: now nothing
    is sent, and the turn ends there, stop reason length, its tokens kept in the cut episode."""
    from token_model import write_tokenizer
    from tokenizers import Tokenizer

    from parallel_rollout.agents.episode import ContextOverflow

    folder = write_tokenizer(tmp_path / "tok")
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    ids = tokenizer.encode("<think>go right</think> " * 40).ids
    budget = 120

    def policy(body):
        prompt = body["prompt"]
        if len(prompt) + 1 > budget:
            return {"status": 400, "message": f"This model's maximum context length is {budget} tokens. "
                                              f"However, you requested {len(prompt)} tokens in the messages."}
        left = body["max_tokens"]
        pieces = [tokenizer.decode([i]) for i in ids[:left]]  # the text of the ids, as a server streams it
        return {"reply": "".join(pieces), "pieces": pieces, "token_ids": ids[:left], "logprobs": [-0.1] * left,
                "prompt_token_ids": prompt, "finish_reason": "abort"}

    server = llm_server(policy=policy)
    client = _client(server, gate, tokenizer=str(folder), max_model_len=budget)
    with pytest.raises(ContextOverflow, match="max_model_len=120") as cut:
        client.chat(USER)
    first = server.requests[0]["body"]
    left = budget - len(first["prompt"])
    assert first["max_tokens"] == left and len(server.requests) == 1  # nothing more sent
    turn = cut.value.turn
    assert turn["token_ids"] == ids[:left] and turn["stop_reason"] == "length" and turn["versions"] == [2] * left
    assert client.usage()["requests"] == 1


def test_a_chat_continuation_past_the_servers_context_ends_the_turn_with_its_tokens(gate, llm_server):
    """In chat only the server knows its context: its 400 "maximum context length" to a
    continuation means the partial reply filled it; the turn ends there (length), the ids
    sampled before kept, instead of a ContextOverflow that lost them."""
    server = llm_server(script=[{"reply": "<answer>Ri", "token_ids": [10, 11], "logprobs": [-0.1, -0.2],
                                 "prompt_token_ids": [1, 2, 3], "finish_reason": "abort"},
                                {"status": 400, "message": "This model's maximum context length is 5 tokens. "
                                                           "However, you requested 5 tokens in the messages."}])
    client = _client(server, gate)
    reply = client.chat(USER)
    assert reply.text == "<answer>Ri" and reply.stop_reason == "length"
    assert reply.token_ids == [10, 11] and reply.logprobs == [-0.1, -0.2]
    turn = client.turn_record()
    assert turn["partial"] and turn["versions"] == [2, 2] and len(server.requests) == 2


#: SGLang's answer to a prompt longer than its context once the stream has begun: its scheduler
#: aborts the request (FINISH_ABORT, 400) and serving_chat streams the abort as an error event
SGLANG_TOO_LONG = {"raw": {"error": {"object": "error", "message": "Input length (4099 tokens) exceeds the maximum "
                                     "allowed length (4096 tokens). Use a shorter input or enable "
                                     "--allow-auto-truncate.", "type": "BAD_REQUEST", "param": None, "code": 400}}}


def test_a_prompt_too_long_that_sglang_streams_as_an_error_event_is_a_context_overflow(gate, llm_server):
    """It was the agent's error ("the model server streamed an error"), so the member failed
    where a trainer expects context_overflow: an outcome, kept in its group."""
    from parallel_rollout.agents.episode import ContextOverflow

    server = llm_server(script=[{"chunks": [SGLANG_TOO_LONG]}])
    with pytest.raises(ContextOverflow, match=r"Input length \(4099 tokens\) exceeds the maximum allowed length"):
        _client(server, gate).chat(USER)
    assert len(server.requests) == 1 and gate.in_flight == 0


def test_a_continuation_sglang_refuses_as_too_long_ends_the_turn_with_its_tokens(gate, llm_server):
    server = llm_server(script=[{"reply": "<answer>Ri", "token_ids": [10, 11], "logprobs": [-0.1, -0.2],
                                 "prompt_token_ids": [1, 2, 3], "finish_reason": "abort"},
                                {"chunks": [SGLANG_TOO_LONG]}])
    reply = _client(server, gate).chat(USER)
    assert reply.stop_reason == "length" and reply.token_ids == [10, 11]
