"""Which stop a reply ended on: vLLM's ``stop_reason`` (the ``stop`` string or token id matched,
null at EOS) and SGLang's ``matched_stop`` on a choice are recorded on the turn as
``matched_stop``, next to its ``stop_reason`` (the finish_reason), streamed or not, so a trainer
knows an agent's action terminator was hit (and, by the ids, whether it is in the tokens)."""

from __future__ import annotations

import pytest

from llm_server import llm_server  # noqa: F401 - fixture
from parallel_rollout.agents import ModelClient
from parallel_rollout.config import RunConfig
from parallel_rollout.policy_gate import PolicyGate
from parallel_rollout.rl import EnvManagerConfig
from rl_support import TINY, lake_set, rl_config

USER = [{"role": "user", "content": "go"}]
#: a reply as vLLM samples it, its ids and logprobs
SAMPLED = {"reply": "<answer>Right", "pieces": ["<answer>", "Right"], "token_ids": [41, 42],
           "logprobs": [-0.1, -0.2], "prompt_token_ids": [1, 2, 3]}


@pytest.fixture
def servers(request):
    """``llm_server`` (tests/llm_server.py): ``servers(script=…)`` starts one."""
    return request.getfixturevalue("llm_server")


@pytest.fixture
def gate():
    gate = PolicyGate(version=1)
    yield gate
    gate.close()


def _client(server, gate: PolicyGate | None = None, **changes) -> ModelClient:
    if gate is not None:
        changes.update(policy_gate=gate.path, policy_gate_key=gate.key)
    return ModelClient(RunConfig(mode="gym", agent="openai", base_url=server.url, model="m",
                                 **{"max_retries": 0, **changes}))


#: (what the server's choice says, what the turn records)
SAID = [({"stop_reason": "</answer>"}, "</answer>"),  # vLLM, a stop string
        ({"stop_reason": 151645}, 151645),  # vLLM, a stop_token_ids id
        ({"stop_reason": None}, None),  # vLLM at EOS
        ({"matched_stop": "</answer>"}, "</answer>")]  # SGLang


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize(("choice", "matched"), SAID, ids=["vllm-string", "vllm-token", "vllm-eos", "sglang"])
def test_a_chat_turn_records_the_stop_it_matched_next_to_its_stop_reason(servers, gate, streamed, choice, matched):
    server = servers(script=[{**SAMPLED, "choice": choice}])
    client = _client(server, gate if streamed else None)
    reply = client.chat(USER)
    turn = client.turn_record()
    assert turn["stop_reason"] == "stop" and "matched_stop" in turn and turn["matched_stop"] == matched
    assert reply.matched_stop == matched
    assert server.requests[0]["body"].get("stream", False) is streamed


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
def test_a_token_in_turn_records_the_stop_it_matched(servers, gate, streamed):
    server = servers(script=[{**SAMPLED, "choice": {"stop_reason": "</answer>"}}])
    client = _client(server, gate if streamed else None)
    reply = client.generate([1, 2, 3])
    assert server.requests[0]["path"] == "/v1/completions"
    assert reply.matched_stop == "</answer>" and client.turn_record()["matched_stop"] == "</answer>"


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
def test_a_server_that_says_nothing_of_it_leaves_no_matched_stop(servers, gate, streamed):
    server = servers(script=[dict(SAMPLED)])
    client = _client(server, gate if streamed else None)
    assert client.chat(USER).matched_stop is None and "matched_stop" not in client.turn_record()


def test_a_continued_reply_records_the_stop_its_last_request_matched(servers, gate):
    """partial_rollout: the aborted request matched nothing; the continuation's stop is the turn's."""
    aborted = {"reply": "<ans", "pieces": ["<ans"], "token_ids": [40], "logprobs": [-0.3],
               "prompt_token_ids": [1, 2, 3], "finish_reason": "abort", "choice": {"stop_reason": None}}
    rest = {"reply": "wer>Right", "pieces": ["wer>", "Right"], "token_ids": [41, 42], "logprobs": [-0.1, -0.2],
            "prompt_token_ids": [1, 2, 3, 40], "choice": {"stop_reason": "</answer>"}}
    server = servers(script=[aborted, rest])
    client = _client(server, gate, partial_rollout=True, max_retries=1)  # a server's abort is asked again
    assert client.chat(USER).matched_stop == "</answer>"
    turn = client.turn_record()
    assert turn["matched_stop"] == "</answer>" and turn["token_ids"] == [40, 41, 42] and turn["partial"]


def test_a_trajectory_holds_the_stop_each_turn_matched(tmp_path, servers, schedulers):
    """What a trainer reads: every turn of a trajectory the scheduler hands out (from its file)
    says which stop its reply matched, beside the segments of its tokens."""
    server = servers(policy=lambda body: {**SAMPLED, "choice": {"stop_reason": "</answer>"}})
    train = schedulers(rl_config(tmp_path, server, num_rollouts=1, envs_per_worker=1),
                       EnvManagerConfig(num_env_groups=1, group_size=1, tags=["lakes"],
                                        task_sets=lake_set(tmp_path, desc=TINY, max_steps=4)))
    (trajectory,) = train.get_batch(batch_size=1, step=0)
    assert trajectory.success and len(trajectory.turns) == 2, trajectory.record
    assert [turn["matched_stop"] for turn in trajectory.turns] == ["</answer>", "</answer>"]
    assert [turn["stop_reason"] for turn in trajectory.turns] == ["stop", "stop"]
    assert sorted(index for segment in trajectory.segments() for index in segment.turns) == [0, 1]
