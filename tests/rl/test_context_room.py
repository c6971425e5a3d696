"""A request whose prompt fits the model's context but prompt + max_tokens does not: vLLM and
SGLang refuse it with a 400 that gives both numbers, and the request is sent once more with
max_tokens lowered to what the context leaves (agents/context_room.py); only a prompt that
does not fit itself is a context overflow."""

from __future__ import annotations

import pytest

from llm_server import llm_server  # noqa: F401 - fixture
from parallel_rollout.agents import ModelClient
from parallel_rollout.agents.context_room import fit, room_left
from parallel_rollout.agents.episode import ContextOverflow
from parallel_rollout.config import RunConfig
from parallel_rollout.policy_gate import PolicyGate

#: the servers' wordings (their sources: vLLM's serving_engine.py over its releases and
#: renderers/params.py, SGLang's tokenizer_manager.py), context 4096, prompt 3596, max_tokens 1000
FITS = [
    "This model's maximum context length is 4096 tokens. However, you requested 4596 tokens (3596 in the "
    "messages, 1000 in the completion). Please reduce the length of the messages or completion.",
    "'max_tokens' or 'max_completion_tokens' is too large: 1000. This model's maximum context length is 4096 "
    "tokens and your request has 3596 input tokens (1000 > 4096 - 3596).",
    "You passed 3596 input tokens and requested 1000 output tokens. However, the model's context length is only "
    "4096 tokens, resulting in a maximum input length of 3096 tokens. Please reduce the length of the input prompt.",
    "This model's maximum context length is 4096 tokens. However, you requested 1000 output tokens and your prompt "
    "contains at least 3596 input tokens, for a total of at least 4596 tokens.",
    "Requested token count exceeds the model's maximum context length of 4096 tokens. You requested a total of "
    "4596 tokens: 3596 tokens from the input messages and 1000 tokens for the completion. Please reduce the "
    "number of tokens in the input messages or the completion to fit within the limit.",
]
#: prompts that do not fit themselves, and vLLM's count of characters (no token count)
OVERFLOWS = [
    "This model's maximum context length is 4096 tokens. However, your request has 4100 input tokens. Please "
    "reduce the length of the input messages.",
    "This model's maximum context length is 4096 tokens. However, you requested 4100 tokens in the messages, "
    "Please reduce the length of the messages.",
    "The input (4100 tokens) is longer than the model's context length (4096 tokens).",
    "You passed 20000 input characters and requested 1000 output tokens. However, the model's context length is "
    "only 4096 tokens, resulting in a maximum input length of 3096 tokens (at most 12384 characters).",
    "This model's maximum context length is 4096 tokens. However, you requested 0 output tokens and your prompt "
    "contains at least 4097 input tokens, for a total of at least 4097 tokens.",
]


@pytest.fixture
def servers(request):
    """``llm_server`` (tests/llm_server.py): ``servers(policy=…, max_model_len=…)`` starts one."""
    return request.getfixturevalue("llm_server")


USER = [{"role": "user", "content": "one two three four five six seven eight nine ten"}]  # 10 "tokens"


@pytest.mark.parametrize("said", FITS)
def test_a_refusal_that_gives_both_numbers_lowers_max_tokens_to_the_room_left(said):
    assert room_left(said) == 500
    request = {"max_tokens": 1000}
    assert fit(request, 400, f'{{"error": {{"message": "{said}"}}}}') == 500 and request == {"max_tokens": 500}


@pytest.mark.parametrize("said", OVERFLOWS)
def test_a_prompt_that_does_not_fit_itself_leaves_no_room(said):
    request = {"max_tokens": 1000}
    assert fit(request, 400, said) is None and request == {"max_tokens": 1000}


def _limits(server) -> list[int]:
    """The token limit of each request the server got (max_completion_tokens, where the client
    names it so)."""
    return [r["body"].get("max_tokens") or r["body"].get("max_completion_tokens") for r in server.requests]


def _length_reply(body):
    """A reply that uses all the max_tokens it was given, as a model that goes on would."""
    left = body.get("max_tokens") or body.get("max_completion_tokens")
    ids = list(range(100, 100 + left))
    return {"reply": " ".join(["w"] * left), "pieces": ["w "] * left, "token_ids": ids,
            "logprobs": [-0.5] * left, "prompt_token_ids": list(range(10)), "finish_reason": "length"}


def test_a_chat_turn_past_the_context_by_its_max_tokens_is_sent_again_with_what_is_left(servers):
    """vLLM with --max-model-len 16 and a 10-token prompt refuses max_tokens=10 (the old client
    ended the episode as context_overflow though the prompt fits): asked again with 6, the turn
    ends with stop reason length, its 6 tokens kept."""
    server = servers(policy=_length_reply, max_model_len=16)
    client = ModelClient(RunConfig(mode="gym", agent="openai", base_url=server.url, model="m", max_tokens=10))
    reply = client.chat(USER)
    assert reply.stop_reason == "length" and reply.text == " ".join(["w"] * 6)
    assert _limits(server) == [10, 6]
    assert "is too large: 10" in server.requests[0]["refused"]
    assert client.turn_record()["max_tokens_fitted"] == 6
    assert client.usage()["requests"] == 2 and client.usage()["retries"] == 0


def test_a_prompt_that_does_not_fit_itself_is_still_a_context_overflow(servers):
    server = servers(policy=_length_reply, max_model_len=10)
    client = ModelClient(RunConfig(mode="gym", agent="openai", base_url=server.url, model="m", max_tokens=10))
    with pytest.raises(ContextOverflow, match="your request has 10 input tokens"):
        client.chat(USER)
    assert len(server.requests) == 1


def test_a_streamed_turn_under_a_scheduler_is_fitted_and_token_exact(servers):
    """Under the policy gate (streamed requests), the same: the refused request is sent again
    once with what is left, and the turn holds exactly the ids sampled."""
    gate = PolicyGate(version=3)
    try:
        server = servers(policy=_length_reply, max_model_len=14)
        client = ModelClient(RunConfig(mode="gym", agent="openai", base_url=server.url, model="m", max_tokens=8,
                                       policy_gate=gate.path, policy_gate_key=gate.key))
        reply = client.chat(USER)
        turn = client.turn_record()
        assert _limits(server) == [8, 4]
        assert reply.stop_reason == "length" and turn["token_ids"] == [100, 101, 102, 103]
        assert turn["logprobs"] == [-0.5] * 4 and turn["max_tokens_fitted"] == 4 and turn["policy_version"] == 3
    finally:
        gate.close()


def test_a_continuation_past_the_context_samples_what_is_left_of_it(servers):
    """partial_rollout: a continuation refused by its max_tokens while its prompt fits is sent
    again with what is left, not ended at once with the tokens sampled before."""
    gate = PolicyGate(version=2)
    try:
        # 2 tokens whose text the server counts as 4 when it reads it back (its chat template)
        aborted = {"reply": "a b c d", "pieces": ["a b ", "c d"], "token_ids": [7, 8], "logprobs": [-0.1, -0.2],
                   "prompt_token_ids": list(range(10)), "finish_reason": "abort"}
        # the continuation's prompt ids as the server reports them: the prompt + the ids sampled
        server = servers(script=[aborted], policy=lambda body: {**_length_reply(body),
                                                                   "prompt_token_ids": list(range(10)) + [7, 8]},
                            max_model_len=20)
        client = ModelClient(RunConfig(mode="gym", agent="openai", base_url=server.url, model="m", max_tokens=10,
                                       max_retries=1, policy_gate=gate.path, policy_gate_key=gate.key,
                                       partial_rollout=True))
        client.backoff_base_s = 0.01
        reply = client.chat(USER)
        # 10 + 10 fit; the continuation's prompt + "a b c d" (14) and 8 left of max_tokens do not: 6 fit
        assert _limits(server) == [10, 8, 6]
        turn = client.turn_record()
        assert reply.stop_reason == "length" and turn["token_ids"] == [7, 8, 100, 101, 102, 103, 104, 105]
        assert turn["max_tokens_fitted"] == 6 and turn["partial"]
    finally:
        gate.close()
