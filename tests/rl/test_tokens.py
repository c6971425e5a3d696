"""Trajectories as training data, through a RolloutScheduler on the real engine: the test
model (llm_server.TokenModel) renders a Qwen3-like chat template that drops earlier <think>
blocks, answers with token ids, logprobs and finish_reason, takes token-id prompts on
/v1/completions and refuses prompts past its token budget with a 400.

Chat (no tokenizer): the drift the template causes is a segment break, never a wrong
sequence; a context overflow and a length cut are recorded outcomes kept in their group.
Tokens (``tokenizer=``): the agent sends token ids and a trajectory is one exact segment;
``max_model_len`` ends an episode as context_overflow; ``on_length="end"`` as truncated."""

from __future__ import annotations

import pytest

from llm_server import LLMServer, TokenModel, write_tokenizer
from parallel_rollout.rl import EnvManagerConfig
from parallel_rollout.rl.segments import NoTokenIds
from rl_support import Switch, lake_set, rl_config

#: the model's context in both engines (tokens)
BUDGET = 2000
THINKING = "<think>the goal is to the right</think><answer>Right</answer>"


def three_rights(turn: int) -> str:
    """Right three times reaches G of SFFG; the first reply thinks aloud (dropped on re-render)."""
    return THINKING if turn == 1 else "<answer>Right</answer>"


def long_lefts(turn: int) -> str:
    """Left at the start stays there: the conversation grows by a long reply a turn."""
    return "Left " * 120 + "<answer>Left</answer>"


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


def _batch(engine, tokenizer_dir, replies, desc, budget=None, limit=None, name="line"):
    base, switch, server, folder = engine
    switch.policy = TokenModel(tokenizer_dir, replies, budget=budget, limit=limit)
    del server.requests[:]
    train = base.sibling(EnvManagerConfig(group_size=2, tags=[name],
                                          task_sets=lake_set(folder, name=name, desc=desc, max_steps=60)))
    try:
        batch = train.get_batch(batch_size=2, step=0)
        assert train.stats()["groups_dropped"] == 0, train.stats()
    finally:
        train.close()
    assert len(batch) == 2 and {t.group_id for t in batch} == {batch[0].group_id}
    return batch, switch.policy


def _check_fields(segment):
    """Equal lengths; nothing but sampled tokens carries a logprob or a version."""
    n = len(segment.input_ids)
    assert len(segment.loss_mask) == len(segment.logprobs) == len(segment.versions) == n
    for mask, logprob, version in zip(segment.loss_mask, segment.logprobs, segment.versions):
        assert mask in (0, 1)
        if mask:
            assert logprob < 0 and version == 0
        else:
            assert logprob == 0.0 and version == -1


def _sampled(trajectory):
    return [i for turn in trajectory.turns for i in turn["token_ids"]]


def _masked_in(segments):
    return [i for s in segments for i, m in zip(s.input_ids, s.loss_mask) if m]


def test_chat_drift_is_a_segment_break_and_masked_in_ids_are_the_sampled_ones(chat, tokenizer_dir):
    batch, model = _batch(chat, tokenizer_dir, three_rights, ["SFFG"])
    for trajectory in batch:
        assert trajectory.status == "success" and len(trajectory.turns) == 3, trajectory.record
        turns = trajectory.turns
        assert [t["stop_reason"] for t in turns] == ["stop"] * 3
        segments = trajectory.segments()
        # turn 2's prompt lost turn 1's <think> block: a new segment starts there
        assert trajectory.drift == 1 and [s.turns for s in segments] == [[0], [1, 2]]
        assert _masked_in(segments) == _sampled(trajectory)
        assert segments[0].input_ids == turns[0]["prompt_token_ids"] + turns[0]["token_ids"]
        assert segments[1].input_ids == turns[2]["prompt_token_ids"] + turns[2]["token_ids"]
        for segment in segments:
            _check_fields(segment)
        # the server saw the re-rendered prompt; nothing was stitched across the break
        assert turns[1]["prompt_token_ids"][: len(segments[0])] != segments[0].input_ids


def test_chat_context_overflow_is_kept_in_its_group_at_reward_0(chat, tokenizer_dir):
    batch, model = _batch(chat, tokenizer_dir, long_lefts, ["SFFG"], budget=BUDGET)
    for trajectory in batch:
        assert trajectory.status == "context_overflow" and trajectory.reward == 0.0, trajectory.record
        assert trajectory.cut and not trajectory.failed and not trajectory.placeholder
        assert "maximum context length" in trajectory.record["failure"]["message"]
        assert len(trajectory.turns) >= 2  # the turns before the overflow are training data
        assert _masked_in(trajectory.segments()) == _sampled(trajectory)


def test_chat_length_cut_carries_its_stop_reason(chat, tokenizer_dir):
    batch, model = _batch(chat, tokenizer_dir, three_rights, ["SFFG"], limit=4)
    for trajectory in batch:
        # on_length="parse" (the default): the cut reply was parsed and the episode went on
        assert trajectory.turns and all(t["stop_reason"] == "length" for t in trajectory.turns)
        assert all(len(t["token_ids"]) == 4 for t in trajectory.turns)


def test_tokenizer_one_segment_and_the_server_gets_token_ids(tokens, tokenizer_dir):
    batch, model = _batch(tokens, tokenizer_dir, three_rights, ["SFFG"])
    _, _, server, _ = tokens
    bodies = [r["body"] for r in server.requests]
    assert len(bodies) == 6 and all("messages" not in b and isinstance(b["prompt"], list) for b in bodies)
    assert all(isinstance(i, int) for b in bodies for i in b["prompt"])
    for trajectory in batch:
        assert trajectory.status == "success" and len(trajectory.turns) == 3, trajectory.record
        segments = trajectory.segments()
        assert len(segments) == 1 and trajectory.drift == 0
        assert _masked_in(segments) == _sampled(trajectory)
        last = trajectory.turns[-1]
        assert segments[0].input_ids == last["prompt_token_ids"] + last["token_ids"]
        _check_fields(segments[0])
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
        assert _masked_in(segments) == _sampled(trajectory)
    # the agent stopped before the server could refuse: every prompt fit
    assert all(len(p) < BUDGET for p in model.prompts)


def test_tokenizer_length_cut_with_on_length_end_is_truncated(tokens, tokenizer_dir):
    batch, model = _batch(tokens, tokenizer_dir, three_rights, ["SFFG"], limit=4)
    for trajectory in batch:
        assert trajectory.status == "truncated" and trajectory.reward == 0.0, trajectory.record
        assert trajectory.cut
        assert [t["stop_reason"] for t in trajectory.turns] == ["length"]
        assert _masked_in(trajectory.segments()) == trajectory.turns[0]["token_ids"]


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
    batch, _ = _batch(chat, tokenizer_dir, three_rights, ["SFFG"])
    rows = namespace["tensors"](batch, namespace["grpo_advantages"](batch, group_size=2))
    assert len(rows["input_ids"]) == sum(len(t.segments()) for t in batch) == 4  # a drift break each
    assert len({len(row) for field in rows.values() for row in field}) == 1  # one width
    sampled = [i for row, mask in zip(rows["input_ids"], rows["loss_mask"]) for i, m in zip(row, mask) if m]
    assert sampled == [i for t in batch for turn in t.turns for i in turn["token_ids"]]
    trained = []

    class Scheduler:
        def get_batch(self, batch_size, step):
            return batch

    namespace["train_loop"](Scheduler(), trained.append, steps=2, group_size=2)
    assert len(trained) == 2 and trained[0]["loss_mask"] == rows["loss_mask"]


def test_a_tokenizer_folder_that_does_not_load_is_refused_before_any_episode(tmp_path, tokenizer_dir):
    from parallel_rollout.errors import ConfigError
    from parallel_rollout.rl import RolloutScheduler

    server = LLMServer(policy=TokenModel(tokenizer_dir, three_rights)).start()
    try:
        with pytest.raises(ConfigError, match="tokenizer=.*nowhere.*tokenizer.json"):
            RolloutScheduler(rl_config(tmp_path, server, tokenizer=str(tmp_path / "nowhere")))
        broken = tmp_path / "no-template"
        write_tokenizer(broken)
        (broken / "tokenizer_config.json").write_text("{}")
        with pytest.raises(ConfigError, match="no-template/tokenizer_config.json: no 'chat_template'"):
            RolloutScheduler(rl_config(tmp_path, server, tokenizer=str(broken)))
    finally:
        server.stop()


@pytest.mark.parametrize("field, value, message", [("on_length", "cut", "on_length must be 'parse' or 'end'"),
                                                   ("max_model_len", 0, "max_model_len must be at least 1")])
def test_bad_token_settings_are_refused(tmp_path, field, value, message):
    """By the scheduler (the RL path) and by the batch runner's checks."""
    from parallel_rollout.config import RunConfig, validate_ranges
    from parallel_rollout.errors import ConfigError
    from parallel_rollout.rl import RolloutScheduler

    server = LLMServer(policy=lambda body: {"reply": "x"}).start()
    try:
        with pytest.raises(ConfigError, match=message):
            RolloutScheduler(rl_config(tmp_path, server, **{field: value}))
    finally:
        server.stop()
    with pytest.raises(ConfigError, match=message):
        validate_ranges(RunConfig(**{field: value}))
