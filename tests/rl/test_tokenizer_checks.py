"""A tokenizer's checks, as a trainer meets them: templates that write the last reply apart
(Qwen3's) extend the history by the sampled ids and give one segment, chat() refuses messages
that do not extend the conversation sent, a tokenizer folder that does not load, a broken
template file, bad token settings, max_model_len without a tokenizer, a tokenizer not the
served model's and a server that returns no token ids are refused before any episode."""

from __future__ import annotations


import pytest

from llm_server import LLMServer
from parallel_rollout.rl import EnvManagerConfig
from rl_support import lake_set, rl_config
from token_model import LAST_REPLY_TEMPLATE, TokenModel, masked_in, server_sampled, three_rights, write_tokenizer


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    return write_tokenizer(tmp_path_factory.mktemp("tokenizer"))


def test_a_template_that_writes_the_last_reply_apart_still_extends_the_history(tmp_path):
    """Qwen3's template writes a conversation's last reply with an empty <think> block and the
    same reply without it once a user message follows: the history grows by the sampled ids,
    the end of turn the template adds (only the part not sampled: a reply cut at the token
    limit has no <|im_end|>) and the new message, never a re-rendered reply."""
    from parallel_rollout.agents.tokens import ChatTokenizer

    tokenizer = ChatTokenizer(write_tokenizer(tmp_path, template=LAST_REPLY_TEMPLATE))
    ids = tokenizer.first_prompt([{"role": "system", "content": "s"}, {"role": "user", "content": "u1"}])
    for reply, user in (("<think>x</think>\n\nA<|im_end|>", "u2"), ("B B", "u3")):  # the second one cut
        sampled = tokenizer.encode(reply)
        ids += sampled + tokenizer.continuation(sampled, [{"role": "user", "content": user}])
    assert tokenizer.decode(ids) == (
        "<|im_start|>system\ns<|im_end|>\n<|im_start|>user\nu1<|im_end|>\n<|im_start|>assistant\n"
        "<think>x</think>\n\nA<|im_end|>\n<|im_start|>user\nu2<|im_end|>\n<|im_start|>assistant\n"
        "B B<|im_end|>\n<|im_start|>user\nu3<|im_end|>\n<|im_start|>assistant\n")


def test_tokenizer_chat_refuses_messages_that_do_not_extend_the_conversation_sent(tmp_path, tokenizer_dir):
    """With tokenizer=, chat() tokenizes only the messages after those already sent and the
    last reply: an agent that asked the same question again, or sent a shortened conversation,
    had a prompt of the history with its reply and nothing new sent in its place (the model
    asked to continue after its own reply), silently. Now a ValueError before anything is sent."""
    from parallel_rollout.agents import ModelClient
    from parallel_rollout.config import RunConfig

    model = TokenModel(tokenizer_dir, three_rights)
    server = LLMServer(policy=model).start()
    try:
        client = ModelClient(RunConfig(mode="gym", agent="openai", base_url=server.url, model="m",
                                       tokenizer=str(tokenizer_dir)))
        first = [{"role": "system", "content": "s"}, {"role": "user", "content": "u1"}]
        reply = client.chat(first)
        for messages, why in ((first, "message 2 is not the last reply as an assistant message"),
                              ([first[0], {"role": "user", "content": "u2"}], "message 1 is not the one sent before"),
                              (first + [{"role": "assistant", "content": reply.text}], "nothing new follows")):
            with pytest.raises(ValueError, match=f"chat\\(\\) takes the whole conversation so far.*{why}"):
                client.chat(messages)
        assert len(server.requests) == 1  # nothing was sent for them
        again = client.chat(first + [{"role": "assistant", "content": reply.text}, {"role": "user", "content": "u2"}])
        assert again.prompt_token_ids[:len(reply.prompt_token_ids) + len(reply.token_ids)] == \
            reply.prompt_token_ids + reply.token_ids
        assert model.tokenizer.decode(again.prompt_token_ids, skip_special_tokens=False).endswith("u2<|im_end|>\n<|im_start|>assistant\n")
    finally:
        server.stop()


def test_a_template_that_writes_the_last_reply_apart_gives_one_segment(tmp_path, tokenizer_dir):
    """The same template through a scheduler: the episode plays to the goal on token ids, one
    segment of exactly what the server saw and sampled."""
    from parallel_rollout.rl import RolloutScheduler

    model = TokenModel(tokenizer_dir, three_rights)
    server = LLMServer(policy=model).start()
    folder = write_tokenizer(tmp_path / "last-reply", template=LAST_REPLY_TEMPLATE)
    train = RolloutScheduler(rl_config(tmp_path, server, num_rollouts=1, envs_per_worker=2, tokenizer=str(folder)),
                             EnvManagerConfig(group_size=2, tags=["line"],
                                              task_sets=lake_set(tmp_path, name="line", desc=["SFFG"], max_steps=60)))
    try:
        batch = train.get_batch(batch_size=2, step=0)
    finally:
        train.close()
        server.stop()
    assert [r["path"] for r in server.requests] == ["/v1/completions"] * 6
    for trajectory in batch:
        assert trajectory.status == "success" and len(trajectory.turns) == 3, trajectory.record
        (segment,) = trajectory.segments()
        last = trajectory.turns[-1]
        assert segment.input_ids == last["prompt_token_ids"] + last["token_ids"] and last["prompt_token_ids"] in model.prompts
        assert masked_in([segment]) == server_sampled(model, three_rights, 3)
        text = model.tokenizer.decode(segment.input_ids, skip_special_tokens=False)
        assert text.count("<think>") == 1 and text.count("<|im_start|>assistant") == 3


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


def test_a_template_file_beside_the_config_is_read_and_a_broken_one_named(tmp_path):
    """transformers' newer folders keep the template in chat_template.jinja (older processors in
    chat_template.json): both load; one that does not render is refused naming its file;
    ``{% break %}`` works as transformers allows it."""
    import json

    from parallel_rollout.agents.tokens import ChatTokenizer
    from parallel_rollout.errors import ConfigError

    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    breaking = LAST_REPLY_TEMPLATE.replace("{%- endif %}{%- endfor %}", "{%- endif %}{%- if false %}{% break %}"
                                                                       "{%- endif %}{%- endfor %}", 1)
    assert "{% break %}" in breaking
    for name, text in (("chat_template.jinja", breaking),
                       ("chat_template.json", json.dumps({"chat_template": LAST_REPLY_TEMPLATE}))):
        folder = write_tokenizer(tmp_path / name)
        (folder / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|im_end|>"}))
        (folder / name).write_text(text)
        tokenizer = ChatTokenizer(folder)
        assert tokenizer.decode(tokenizer.first_prompt(messages)) == \
            "<|im_start|>system\ns<|im_end|>\n<|im_start|>user\nu<|im_end|>\n<|im_start|>assistant\n"
    (folder / "chat_template.json").unlink()
    (folder / "chat_template.jinja").write_text("{% for m in messages %}{{ m['content'] }")
    with pytest.raises(ConfigError, match=r"chat_template\.jinja: the chat template does not render a "
                                          r"conversation: TemplateSyntaxError"):
        ChatTokenizer(folder)
    (folder / "chat_template.jinja").unlink()
    with pytest.raises(ConfigError, match=r"tokenizer_config\.json: no 'chat_template' \(a string\), and no "
                                          r"chat_template\.jinja beside it"):
        ChatTokenizer(folder)


@pytest.mark.parametrize("field, value, message", [("on_length", "cut", "on_length must be 'parse' or 'end'"),
                                                   ("max_model_len", 0, "max_model_len must be at least 1")])
def test_bad_token_settings_are_refused(tmp_path, field, value, message):
    """By the scheduler (the RL path) and by the batch runner's checks."""
    from parallel_rollout.config import RunConfig
    from parallel_rollout.config_checks import validate_ranges
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


def test_max_model_len_without_a_tokenizer_is_refused_for_the_openai_agent(tmp_path):
    """It would bound nothing: the openai agent's chat requests are the server's to bound."""
    from parallel_rollout.config import RunConfig
    from parallel_rollout.config_checks import validate_ranges
    from parallel_rollout.errors import ConfigError
    from parallel_rollout.rl import RolloutScheduler

    server = LLMServer(policy=lambda body: {"reply": "x"}).start()
    try:
        with pytest.raises(ConfigError, match=r"max_model_len bounds token-id prompts \(to 2000\).*set tokenizer or"):
            RolloutScheduler(rl_config(tmp_path, server, max_model_len=2000))
    finally:
        server.stop()
    with pytest.raises(ConfigError, match=r"max_model_len bounds token-id prompts \(to 2000\)"):
        validate_ranges(RunConfig(agent="openai", max_model_len=2000))
    validate_ranges(RunConfig(agent="my_agents:TokenAgent", max_model_len=2000))  # generate() is bounded by it



def test_a_tokenizer_folder_not_the_served_models_is_a_config_error(tmp_path, tokenizer_dir, schedulers):
    """tokenizer= given another model's folder: the agent's token history (its prompts) and
    the trainer's segments are ids of other text than the model saw and wrote, and nothing
    said so: get_batch handed out the batch. The server's sampled ids are now decoded by the
    folder and compared with the reply's text: get_batch raises a ConfigError naming the
    folder and the served model, and the served model's own folder passes the same check."""
    from parallel_rollout.errors import ConfigError

    other = write_tokenizer(tmp_path / "other-model", corpus=[
        "The quick brown fox jumps over the lazy dog; 0123456789 pack my box with five dozen jugs."] * 20)
    server = LLMServer(policy=TokenModel(tokenizer_dir, three_rights)).start()
    try:
        tasks = EnvManagerConfig(group_size=2, tags=["line"],
                                 task_sets=lake_set(tmp_path, name="line", desc=["SFFG"], max_steps=60))
        wrong = schedulers(rl_config(tmp_path, server, num_rollouts=1, envs_per_worker=2, tokenizer=str(other),
                                     max_retries=0, run_id="wrong"), tasks)
        with pytest.raises(ConfigError, match=r"tokenizer='.*other-model' is not the tokenizer of the model the "
                                              r"server runs \(model 'table' at http://127\.0\.0\.1:\d+.*"
                                              r"which this folder decodes as"):
            wrong.get_batch(batch_size=2, step=0, timeout=60)
        wrong.close()
        right = schedulers(rl_config(tmp_path, server, num_rollouts=1, envs_per_worker=2,
                                     tokenizer=str(tokenizer_dir), run_id="right"), tasks)
        batch = right.get_batch(batch_size=2, step=0, timeout=60)
        assert [t.status for t in batch] == ["success"] * 2 and len(batch[0].segments()) == 1
    finally:
        server.stop()


def test_a_server_that_returns_no_token_ids_for_token_id_prompts_is_a_config_error(tmp_path, tokenizer_dir,
                                                                                    schedulers):
    """tokenizer= against a server that returns no sampled token ids (vLLM before 0.10.2):
    every member was the agent's own error, graded 0 (a batch run's samples final failures),
    and get_batch raised only after max_failed_groups groups, saying that members fail, not
    the endpoint, and to "set tokenizer=", which was set. It is the settings against this
    server: get_batch raises a ConfigError saying what the server lacks."""
    from parallel_rollout.errors import ConfigError

    server = LLMServer(policy=lambda body: {"reply": "<answer>Right</answer>"}).start()  # text, no ids
    try:
        train = schedulers(rl_config(tmp_path, server, num_rollouts=1, envs_per_worker=2, max_retries=0,
                                     tokenizer=str(tokenizer_dir)),
                           EnvManagerConfig(group_size=2, tags=["line"], task_sets=lake_set(tmp_path, name="line")))
        with pytest.raises(ConfigError, match=r"returned no token ids for a token-id prompt .*vLLM >= 0\.10\.2.*"
                                              r"or run without tokenizer="):
            train.get_batch(batch_size=2, step=0, timeout=60)
        assert train.stats()["groups_started"] < 10  # at the first group, not after max_failed_groups
    finally:
        server.stop()
