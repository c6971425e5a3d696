"""A partial rollout continued in chat (``partial_rollout=True``, no tokenizer) is continued
from its text, which the server tokenizes again: when the ids it then conditions on are not
the ids it sampled (another tokenization of the same text, or a partial UTF-8 character whose
first byte's id came before its text and was held back), the turn is split there: what was
sampled before the abort stays as it was sampled, in a segment of its own, and what follows
starts a new segment from the prompt the server reported (drift). Never a stitched sequence.

The test server streams two ids a character (the first byte's with no text, as a detokenizer
holds back an incomplete character, then the character); the stream stops after ``held`` ids
until the test has aborted it, so the cut is exact."""

from __future__ import annotations

import threading
import time

import pytest

from llm_server import llm_server  # noqa: F401 - fixture
from parallel_rollout.agents import ModelClient
from parallel_rollout.agents.calls import calls_of
from parallel_rollout.config import RunConfig
from parallel_rollout.policy_gate import PolicyGate
from parallel_rollout.rl.segments import build_segments

REPLY = "thinking " * 2 + "<answer>Right</answer>"
#: two ids a character: its first byte's (streamed with no text) and the rest's (with it)
IDS = [1000 + k for k in range(2 * len(REPLY))]
PIECES = [piece for char in REPLY for piece in ("", char)]
PROMPT = [1, 2, 3]


def server_tokenizing(canonical: bool):
    """The test model: continuing an assistant message, it conditions on its own ids of the
    text it got (``canonical``: the ids it samples, two a character; else one id a character,
    another valid tokenization) and samples the rest of the reply."""

    def policy(body):
        done = 0
        if body.get("continue_final_message"):
            done = len(body["messages"][-1]["content"])
            assert REPLY.startswith(body["messages"][-1]["content"])
        seen = IDS[: 2 * done] if canonical else [9000 + ord(char) for char in REPLY[:done]]
        return {"reply": REPLY[done:], "token_ids": IDS[2 * done:], "pieces": PIECES[2 * done:],
                "logprobs": [-0.5] * (len(IDS) - 2 * done), "prompt_token_ids": PROMPT + seen}

    return policy


@pytest.mark.parametrize("held, canonical", [(6, True), (7, True), (6, False)],
                         ids=["same-ids", "held-back-byte", "other-tokenization"])
def test_a_continuation_the_server_retokenized_starts_a_segment_from_what_it_saw(llm_server, held, canonical):
    server = llm_server(policy=server_tokenizing(canonical), token_rate=200)
    release = threading.Event()

    def sleep(seconds):  # the first stream stops after `held` ids until the test aborted it
        if server.tokens_streamed == held and not release.is_set():
            release.wait(10)
        time.sleep(seconds)

    server.sleep = sleep
    gate = PolicyGate(version=6)
    try:
        client = ModelClient(RunConfig(mode="gym", agent="openai", base_url=server.url, model="m",
                                       policy_gate=gate.path, policy_gate_key=gate.key, partial_rollout=True, max_retries=2))
        client.start()
        got: list = []
        thread = threading.Thread(target=lambda: got.append(client.chat([{"role": "user", "content": "go"}])),
                                  daemon=True)
        thread.start()
        deadline = time.monotonic() + 10
        while server.tokens_streamed < held:
            assert time.monotonic() < deadline, "the stream did not come"
            time.sleep(0.005)
        time.sleep(0.3)  # the client has read every id sent
        gate.suspend(abort=True)
        # the client has closed its stream (suspend returns before): an id the server sends on
        # release is never read, as it could be under load
        assert gate.wait_aborted(10)
        release.set()
        deadline = time.monotonic() + 5
        while not server.aborts:
            assert time.monotonic() < deadline, "the stream was not aborted"
            time.sleep(0.005)
        gate.resume(7)
        thread.join(10)
    finally:
        gate.close()
    (reply,) = got
    assert reply.text == REPLY and [r["step"]["prompt_token_ids"] for r in server.requests][0] == PROMPT
    done = held // 2  # the characters of the partial text: a held-back first byte has none
    seen = server.requests[1]["step"]["prompt_token_ids"]
    sampled = IDS[:held] + IDS[2 * done:]  # the first byte held back is sampled again after the update
    assert reply.token_ids == sampled and reply.prompt_token_ids == PROMPT  # the whole reply's, for the agent
    turn = client.turn_record()
    segments = build_segments([turn])
    masked = [(i, v) for s in segments for i, m, v in zip(s.input_ids, s.loss_mask, s.versions) if m]
    assert masked == [(i, 6) for i in IDS[:held]] + [(i, 7) for i in IDS[2 * done:]]
    if seen == PROMPT + IDS[:held]:  # the server saw the ids it sampled: one exact sequence
        assert (held, canonical) == (6, True)
        assert [s.input_ids for s in segments] == [PROMPT + IDS]
        assert turn["partial"] is True and "earlier_calls" not in turn and turn["token_ids"] == IDS
    else:  # what was sampled before, as it was sampled; then what the server saw, and what followed
        assert [s.input_ids for s in segments] == [PROMPT + IDS[:held], seen + IDS[2 * done:]]
        assert [s.loss_mask for s in segments] == [[0] * 3 + [1] * held, [0] * len(seen) + [1] * (len(IDS) - 2 * done)]
        (before,) = turn["earlier_calls"]
        assert before["stop_reason"] == "abort" and before["versions"] == [6] * held
        assert before["prompt_token_ids"] == PROMPT and before["reply"] == REPLY[:done]
        assert turn["retokenized"] is True and turn["prompt_token_ids"] == seen and turn["policy_version"] == 7
        # each piece has its own text: joined, the reply once (the last piece held it whole)
        assert turn["reply"] == REPLY[done:] and "".join(c["reply"] for c in calls_of(turn)) == REPLY
        assert turn["versions"] == [7] * (len(IDS) - 2 * done)
