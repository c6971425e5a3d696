"""A test model that speaks in tokens, as vLLM does, served by tests/llm_server.py.

``TokenModel`` is a policy that speaks in tokens: ``write_tokenizer(folder)``
writes a small byte-level BPE tokenizer (built with the ``tokenizers`` package, no download) and
a chat template that drops the ``<think>`` blocks of earlier assistant turns when it renders a
conversation again (as Qwen3's does); the model renders chat requests with it, answers with
the prompt's and the reply's token ids, logprobs and finish_reason (``length`` past the
request's ``max_tokens``), takes token-id prompts on ``/v1/completions``, and answers 400
"maximum context length" past its token budget.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from llm_server import Step


#: Qwen3's habit in one line: an assistant turn before the last message loses its <think> block
THINK_DROPPING_TEMPLATE = (
    "{% for m in messages %}{% if m['role'] == 'assistant' and not loop.last %}"
    "{{ '<|im_start|>assistant\\n' + m['content'].split('</think>')[-1].lstrip() + '<|im_end|>\\n' }}"
    "{% else %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
#: Qwen3's other habit: the last assistant message, when it answers the last user message, is
#: written with an empty <think> block; the same message is written without one once a new
#: user message follows (so a conversation ending in a reply is no prefix of the next one)
LAST_REPLY_TEMPLATE = (
    "{%- set ns = namespace(last_user=-1) %}"
    "{%- for m in messages %}{%- if m['role'] == 'user' %}{%- set ns.last_user = loop.index0 %}{%- endif %}"
    "{%- endfor %}"
    "{%- for m in messages %}{%- if m['role'] == 'assistant' %}"
    "{%- set body = m['content'].split('</think>')[-1].lstrip('\\n') %}"
    "{%- if loop.last and loop.index0 > ns.last_user %}"
    "{{- '<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n' + body + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>assistant\\n' + body + '<|im_end|>\\n' }}{%- endif %}"
    "{%- else %}{{- '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def write_tokenizer(folder: Path, corpus: list[str] | None = None, template: str = THINK_DROPPING_TEMPLATE) -> Path:
    """A byte-level BPE tokenizer (tokenizer.json) with a chat template (tokenizer_config.json;
    the think-dropping one unless told) in ``folder``: what ``RunConfig.tokenizer`` points at."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=SPECIAL_TOKENS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    text = corpus or ["You are at row 0, column 1. <answer>Right</answer> <think>go right</think> "
                      "Reply with your move as <answer>Left|Down|Right|Up</answer>. The lake:"] * 20
    tokenizer.train_from_iterator(text, trainer)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "chat_template": template, "eos_token": "<|im_end|>", "bos_token": None}))
    return folder


class TokenModel:
    """A policy that renders, tokenizes and samples like vLLM (see the module docstring).

    ``replies(turn)`` gives the reply text of the conversation's turn (1-based); the reply's
    ids are its encoding plus ``<|im_end|>`` (the stop token, sampled like any other)."""

    def __init__(self, folder: Path, replies: Callable[[int], str], budget: int | None = None,
                 limit: int | None = None) -> None:
        import jinja2
        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_file(str(Path(folder) / "tokenizer.json"))
        self.template = jinja2.Environment().from_string(THINK_DROPPING_TEMPLATE)
        self.replies = replies
        self.budget = budget
        #: the most tokens a reply may have (the request's max_tokens may say fewer)
        self.limit = limit
        self.end_id = self.tokenizer.token_to_id("<|im_end|>")
        #: the prompt ids of every request answered, in order (chat and completions)
        self.prompts: list[list[int]] = []

    def encode(self, text: str) -> list[int]:
        """The ids of ``text``."""
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def __call__(self, body: dict[str, Any]) -> Step:
        if "messages" in body:
            prompt = self.encode(self.template.render(messages=body["messages"], add_generation_prompt=True))
        else:
            prompt = list(body["prompt"])
            if not all(isinstance(i, int) for i in prompt):
                return {"status": 400, "message": "this test model takes token-id prompts only"}
        if self.budget is not None and len(prompt) + 1 > self.budget:
            return {"status": 400, "message": f"This model's maximum context length is {self.budget} tokens. "
                                              f"However, you requested {len(prompt)} tokens in the messages."}
        text = self.tokenizer.decode(prompt, skip_special_tokens=False)
        turn = text.count("<|im_start|>assistant")
        ids = self.encode(self.replies(turn)) + [self.end_id]
        finish = "stop"
        limits = [n for n in (body.get("max_tokens"), body.get("max_completion_tokens"), self.limit) if n]
        limit = min(limits) if limits else None
        if limit is not None and len(ids) > limit:
            ids, finish = ids[:limit], "length"
        self.prompts.append(prompt)
        reply = self.tokenizer.decode([i for i in ids if i != self.end_id], skip_special_tokens=False)
        return {"reply": reply, "token_ids": ids, "prompt_token_ids": prompt, "finish_reason": finish,
                "logprobs": [-0.01 * (k + 1) for k in range(len(ids))],
                "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(ids)}}


THINKING = "<think>the goal is to the right</think><answer>Right</answer>"


def three_rights(turn: int) -> str:
    """Replies of a TokenModel: right three times reaches G of SFFG; the first reply thinks
    aloud (dropped on re-render)."""
    return THINKING if turn == 1 else "<answer>Right</answer>"


def server_sampled(model: TokenModel, replies: Callable[[int], str], turns: int, limit: int | None = None) -> list[int]:
    """What the test model sampled in turns 1..``turns`` (its reply ids, cut at ``limit``),
    worked out from the model, not from what the agent recorded."""
    ids = [model.encode(replies(turn)) + [model.end_id] for turn in range(1, turns + 1)]
    return [i for each in ids for i in each[:limit]]


def masked_in(segments) -> list[int]:
    """The ids of ``segments`` their loss masks train on."""
    return [i for s in segments for i, m in zip(s.input_ids, s.loss_mask) if m]
