"""Trajectories as training data, through a RolloutScheduler on the real engine: the test
model (token_model.TokenModel) renders a Qwen3-like chat template that drops earlier <think>
blocks, answers with token ids, logprobs and finish_reason, takes token-id prompts on
/v1/completions and refuses prompts past its token budget with a 400.

Chat (no tokenizer): the drift the template causes is a segment break, never a wrong
sequence; a context overflow and a length cut are recorded outcomes kept in their group.
Tokens (``tokenizer=``): the agent sends token ids and a trajectory is one exact segment;
``max_model_len`` ends an episode as context_overflow; ``on_length="end"`` as truncated."""

from __future__ import annotations

import threading
import time

import pytest

from llm_server import LLMServer
from parallel_rollout.rl import EnvManagerConfig
from parallel_rollout.rl.segments import NoTokenIds
from rl_support import Switch, lake_set, rl_config
from token_model import TokenModel, masked_in, server_sampled, three_rights, write_tokenizer

#: the model's context in both engines (tokens)
BUDGET = 2000


def long_lefts(turn: int) -> str:
    """Left at the start stays there: the conversation grows by a long reply a turn."""
    return "Left " * 120 + "<answer>Left</answer>"


ANSWER = "<answer>Right</answer>"


def rights_and_more(turn: int) -> str:
    """Right, then words a reply cut at len(ANSWER)'s tokens loses: still a move when parsed."""
    return ANSWER + " because the goal is to the right of me"


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    return write_tokenizer(tmp_path_factory.mktemp("tokenizer"))


def _engine(tmp_path_factory, tokenizer_dir, name, **config):
    folder = tmp_path_factory.mktemp(name)
    switch = Switch(TokenModel(tokenizer_dir, three_rights))
    server = LLMServer(policy=switch).start()
    from parallel_rollout.rl import RolloutScheduler

    base = RolloutScheduler(rl_config(folder, server, num_rollouts=1, envs_per_worker=2, **config),
                            EnvManagerConfig(tags=["FrozenLake"]), name="base")
    return base, switch, server, folder


@pytest.fixture(scope="module")
def chat(tmp_path_factory, tokenizer_dir):
    """An engine whose agents talk chat (the server renders the template)."""
    base, switch, server, folder = _engine(tmp_path_factory, tokenizer_dir, "chat")
    yield base, switch, server, folder
    base.close()
    server.stop()


@pytest.fixture(scope="module")
def tokens(tmp_path_factory, tokenizer_dir):
    """An engine whose agents keep the token history (tokenizer=, max_model_len, on_length=end)."""
    base, switch, server, folder = _engine(tmp_path_factory, tokenizer_dir, "tokens", tokenizer=str(tokenizer_dir),
                                           max_model_len=BUDGET, on_length="end")
    yield base, switch, server, folder
    base.close()
    server.stop()


def _batch(engine, tokenizer_dir, replies, desc, budget=None, limit=None, name="line", wrap=None):
    """A batch of one group of 2 on ``engine``; ``wrap(model)`` is the server's policy if given."""
    base, switch, server, folder = engine
    model = TokenModel(tokenizer_dir, replies, budget=budget, limit=limit)
    switch.policy = wrap(model) if wrap else model
    del server.requests[:]
    train = base.sibling(EnvManagerConfig(group_size=2, tags=[name],
                                          task_sets=lake_set(folder, name=name, desc=desc, max_steps=60)))
    try:
        batch = train.get_batch(batch_size=2, step=0)
        assert train.stats()["groups_dropped"] == 0, train.stats()
    finally:
        train.close()
    assert len(batch) == 2 and {t.group_id for t in batch} == {batch[0].group_id}
    return batch, model


def _check_fields(trajectory):
    """Equal lengths; nothing but sampled tokens carries a logprob or a version; each sampled
    token has its turn's logprob and its turn's policy version."""
    sampled_logprobs, sampled_versions = [], []
    for segment in trajectory.segments():
        n = len(segment.input_ids)
        assert len(segment.loss_mask) == len(segment.logprobs) == len(segment.versions) == n
        for mask, logprob, version in zip(segment.loss_mask, segment.logprobs, segment.versions):
            assert mask in (0, 1)
            if mask:
                assert logprob < 0 and version >= 0
                sampled_logprobs.append(logprob)
                sampled_versions.append(version)
            else:
                assert logprob == 0.0 and version == -1
    turns = trajectory.turns
    assert sampled_logprobs == [lp for turn in turns for lp in turn["logprobs"]]
    assert sampled_versions == [turn["policy_version"] for turn in turns for _ in turn["token_ids"]]


def _sampled(trajectory):
    return [i for turn in trajectory.turns for i in turn["token_ids"]]


def test_chat_drift_is_a_segment_break_and_masked_in_ids_are_the_sampled_ones(chat, tokenizer_dir):
    batch, model = _batch(chat, tokenizer_dir, three_rights, ["SFFG"])
    for trajectory in batch:
        assert trajectory.status == "success" and len(trajectory.turns) == 3, trajectory.record
        turns = trajectory.turns
        assert [t["stop_reason"] for t in turns] == ["stop"] * 3
        segments = trajectory.segments()
        # turn 2's prompt lost turn 1's <think> block: a new segment starts there
        assert trajectory.drift == 1 and [s.turns for s in segments] == [[0], [1, 2]]
        assert masked_in(segments) == _sampled(trajectory) == server_sampled(model, three_rights, 3)
        assert segments[0].input_ids == turns[0]["prompt_token_ids"] + turns[0]["token_ids"]
        assert segments[1].input_ids == turns[2]["prompt_token_ids"] + turns[2]["token_ids"]
        _check_fields(trajectory)
        # every prompt is one the server rendered and answered
        assert all(turn["prompt_token_ids"] in model.prompts for turn in turns)
        # the server saw the re-rendered prompt; nothing was stitched across the break
        assert turns[1]["prompt_token_ids"][: len(segments[0])] != segments[0].input_ids


def test_chat_context_overflow_is_kept_in_its_group_at_reward_0(chat, tokenizer_dir):
    batch, model = _batch(chat, tokenizer_dir, long_lefts, ["SFFG"], budget=BUDGET)
    for trajectory in batch:
        assert trajectory.status == "context_overflow" and trajectory.reward == 0.0, trajectory.record
        assert trajectory.cut and not trajectory.failed and not trajectory.placeholder
        assert "maximum context length" in trajectory.record["failure"]["message"]
        assert len(trajectory.turns) >= 2  # the turns before the overflow are training data
        assert masked_in(trajectory.segments()) == _sampled(trajectory)


class OverflowOnce:
    """The test model, but the first request of a second turn is refused as too long (vLLM's
    400): one member of the group overflows, the other goes on."""

    def __init__(self, model) -> None:
        self.model, self.refused, self._lock = model, [], threading.Lock()

    def __call__(self, body):
        turn = 1 + sum(1 for m in body["messages"] if m["role"] == "assistant")
        with self._lock:
            if turn == 2 and not self.refused:
                self.refused.append(body)
                return {"status": 400, "message": f"This model's maximum context length is {BUDGET} tokens. "
                                                  f"However, you requested {BUDGET + 1} tokens in the messages."}
        return self.model(body)


def test_chat_one_member_overflows_and_its_group_is_kept(chat, tokenizer_dir):
    """A group whose members end differently: the overflow is the member's outcome (reward 0,
    one turn of training data), the other member's success stands beside it, nothing retried."""
    wrappers = []
    batch, model = _batch(chat, tokenizer_dir, three_rights, ["SFFG"],
                          wrap=lambda m: wrappers.append(OverflowOnce(m)) or wrappers[-1])
    _, _, server, _ = chat
    assert len(wrappers[0].refused) == 1 and len(server.requests) == 1 + 3 + 1  # the 400 was not retried
    by_status = {t.status: t for t in batch}
    assert sorted(by_status) == ["context_overflow", "success"], [t.record for t in batch]
    overflow, success = by_status["context_overflow"], by_status["success"]
    assert overflow.reward == 0.0 and overflow.cut and not overflow.failed and not overflow.placeholder
    assert success.reward == 1.0 and len(success.turns) == 3
    assert len(overflow.turns) == 1 and overflow.record["turns"] == 1
    assert masked_in(overflow.segments()) == server_sampled(model, three_rights, 1)
    assert overflow.group_id == success.group_id and sorted(t.member for t in batch) == [0, 1]


def test_chat_length_cut_carries_its_stop_reason_and_is_parsed(chat, tokenizer_dir):
    """on_length="parse" (the default): a reply cut at the token limit is still the move it
    holds, so the episode goes on to the goal; every turn says it was cut."""
    limit = len(TokenModel(tokenizer_dir, rights_and_more).encode(ANSWER))
    batch, model = _batch(chat, tokenizer_dir, rights_and_more, ["SFFG"], limit=limit)
    assert model.encode(rights_and_more(1))[:limit] == model.encode(ANSWER)  # the cut keeps the answer
    for trajectory in batch:
        assert trajectory.status == "success" and trajectory.reward == 1.0, trajectory.record
        assert len(trajectory.turns) == 3 and not trajectory.cut
        assert [t["stop_reason"] for t in trajectory.turns] == ["length"] * 3
        assert [t["reply"] for t in trajectory.turns] == [ANSWER] * 3
        assert masked_in(trajectory.segments()) == server_sampled(model, rights_and_more, 3, limit)


def test_tokenizer_one_segment_and_the_server_gets_token_ids(tokens, tokenizer_dir):
    batch, model = _batch(tokens, tokenizer_dir, three_rights, ["SFFG"])
    _, _, server, _ = tokens
    bodies = [r["body"] for r in server.requests]
    assert [r["path"] for r in server.requests] == ["/v1/completions"] * 6
    assert len(bodies) == 6 and all("messages" not in b and isinstance(b["prompt"], list) for b in bodies)
    assert all(isinstance(i, int) for b in bodies for i in b["prompt"])
    for trajectory in batch:
        assert trajectory.status == "success" and len(trajectory.turns) == 3, trajectory.record
        segments = trajectory.segments()
        assert len(segments) == 1 and trajectory.drift == 0
        assert masked_in(segments) == _sampled(trajectory) == server_sampled(model, three_rights, 3)
        last = trajectory.turns[-1]
        assert segments[0].input_ids == last["prompt_token_ids"] + last["token_ids"]
        _check_fields(trajectory)
        # the first reply's <think> block stays in the history: nothing is re-rendered
        text = model.tokenizer.decode(segments[0].input_ids, skip_special_tokens=False)
        assert text.count("<think>") == 1 and text.count("<|im_start|>assistant") == 3
    assert all(p in model.prompts for t in batch for p in (turn["prompt_token_ids"] for turn in t.turns))


def test_tokenizer_max_model_len_ends_the_episode_as_context_overflow(tokens, tokenizer_dir):
    batch, model = _batch(tokens, tokenizer_dir, long_lefts, ["SFFG"])
    for trajectory in batch:
        assert trajectory.status == "context_overflow" and trajectory.reward == 0.0, trajectory.record
        assert "max_model_len=2000" in trajectory.record["failure"]["message"]
        segments = trajectory.segments()
        assert len(segments) == 1 and len(segments[0]) <= BUDGET
        assert masked_in(segments) == _sampled(trajectory)
    # the agent stopped before the server could refuse: every prompt fit
    assert all(len(p) < BUDGET for p in model.prompts)


def test_tokenizer_length_cut_with_on_length_end_is_truncated(tokens, tokenizer_dir):
    """on_length="end": the same cut reply, which "parse" plays to the goal, ends the episode
    at its first turn as truncated, reward 0, its sampled tokens kept."""
    limit = len(TokenModel(tokenizer_dir, rights_and_more).encode(ANSWER))
    batch, model = _batch(tokens, tokenizer_dir, rights_and_more, ["SFFG"], limit=limit)
    for trajectory in batch:
        assert trajectory.status == "truncated" and trajectory.reward == 0.0, trajectory.record
        assert trajectory.cut and not trajectory.failed
        assert [t["stop_reason"] for t in trajectory.turns] == ["length"]
        message = trajectory.record["failure"]["message"]
        assert "on_length='end'" in message
        assert "/v1/completions:" in message and "chat/completions" not in message, message  # the path used
        assert masked_in(trajectory.segments()) == server_sampled(model, rights_and_more, 1, limit)


def test_a_server_without_token_ids_gets_a_clear_error(chat, tokenizer_dir):
    base, switch, server, folder = chat
    switch.policy = lambda body: {"reply": "<answer>Right</answer>"}  # an OpenAI-compatible server, no ids
    train = base.sibling(EnvManagerConfig(group_size=1, tags=["plain"],
                                          task_sets=lake_set(folder, name="plain", desc=["SFFG"])))
    try:
        [trajectory] = train.get_batch(batch_size=1, step=0)
    finally:
        train.close()
    assert trajectory.status == "success" and trajectory.turns[0]["stop_reason"] == "stop"
    with pytest.raises(NoTokenIds, match="returned no token ids.*return_token_ids.*tokenizer="):
        trajectory.segments()


class UpdateAtTurn2:
    """The test model, but the first request of a second turn starts a weight update
    (``suspend(); resume(version)`` in another thread, as a trainer does) and is answered once
    the gate is shut: the turns after it are sampled by the new version."""

    def __init__(self, model, scheduler, version: int) -> None:
        self.model, self.scheduler, self.version = model, scheduler, version
        self.thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def __call__(self, body):
        turn = 1 + sum(1 for m in body["messages"] if m["role"] == "assistant")
        with self._lock:
            first = turn == 2 and self.thread is None
            if first:
                self.thread = threading.Thread(target=self._update, daemon=True)
                self.thread.start()
        if first:
            gate = self.scheduler._shared.gate
            deadline = time.monotonic() + 10
            while gate.is_open and time.monotonic() < deadline:
                time.sleep(0.01)
            assert not gate.is_open, "the update never shut the gate"
        return self.model(body)

    def _update(self):
        self.scheduler.suspend()  # waits for this request, which is in flight
        self.scheduler.resume(policy_version=self.version)


def test_versions_per_token_across_a_weight_update(chat, tokenizer_dir):
    """A weight update in the middle of the episodes: each sampled token of a segment carries
    the version of the policy that sampled its turn, and a trajectory holds both."""
    base = chat[0]
    old = base.policy_version
    updates = []
    batch, model = _batch(chat, tokenizer_dir, three_rights, ["SFFG"],
                          wrap=lambda m: updates.append(UpdateAtTurn2(m, base, old + 1)) or updates[-1])
    updates[0].thread.join(10)
    assert base.policy_version == old + 1
    seen = []
    for trajectory in batch:
        assert trajectory.status == "success" and len(trajectory.turns) == 3, trajectory.record
        versions = trajectory.policy_versions
        seen.append(versions)
        assert versions == sorted(versions) and set(versions) <= {old, old + 1} and versions[-1] == old + 1
        _check_fields(trajectory)  # every sampled token: its turn's version
        masked = [v for s in trajectory.segments() for v, m in zip(s.versions, s.loss_mask) if m]
        assert masked == [v for turn in trajectory.turns for v in [turn["policy_version"]] * len(turn["token_ids"])]
    # the member whose request started the update: turns 1 and 2 by the old policy, 3 by the new
    assert [old, old, old + 1] in seen, seen


def test_the_readme_tensors_snippet_builds_rows_from_segments(chat, tokenizer_dir):
    """The README's trainer loop, as printed: one padded row per segment, the loss mask on
    exactly the sampled ids."""
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    section = readme.split("### Training data: `segments()`", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)  # noqa: S102 - the snippet under test
    batch, model = _batch(chat, tokenizer_dir, three_rights, ["SFFG"])
    rows = namespace["tensors"](batch, namespace["grpo_advantages"](batch, group_size=2))
    assert len(rows["input_ids"]) == sum(len(t.segments()) for t in batch) == 4  # a drift break each
    assert len({len(row) for field in rows.values() for row in field}) == 1  # one width
    sampled = [i for row, mask in zip(rows["input_ids"], rows["loss_mask"]) for i, m in zip(row, mask) if m]
    assert sampled == [i for t in batch for turn in t.turns for i in turn["token_ids"]]
    # and the loop, on a real scheduler: two steps of one group of 2
    base, folder = chat[0], chat[3]
    trained = []
    train = base.sibling(EnvManagerConfig(group_size=2, tags=["loop"],
                                          task_sets=lake_set(folder, name="loop", desc=["SFFG"], max_steps=60)))
    try:
        namespace["train_loop"](train, trained.append, steps=2, batch_size=2, group_size=2)
    finally:
        train.close()
    assert len(trained) == 2
    for step in trained:
        assert len(step["input_ids"]) == 4  # 2 trajectories, a drift break each
        assert sum(map(sum, step["loss_mask"])) == 2 * len(server_sampled(model, three_rights, 3))
        assert all(v in (-1, base.policy_version) for row in step["versions"] for v in row)
