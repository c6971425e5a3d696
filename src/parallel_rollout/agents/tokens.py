"""ChatTokenizer: a local Hugging Face tokenizer folder, its chat template rendered piecewise.

Token in, token out (``RunConfig.tokenizer``): the agent keeps the episode's token history and
only ever appends to it, so what the trainer gets is exactly what the model saw and sampled::

    turn 1   ids = encode(template([system, user₁], generation prompt))
    turn t   ids += sampled₍t−1₎ + encode(end of turn the template adds after a reply, if not sampled)
                  + encode(template(base + [user_t]) minus template(base))

``base`` is a fixed three-message conversation: rendering the new messages after it, minus
its own rendering, gives the text the template puts for the new messages alone, without the
default system prompt some templates add to a conversation that does not start with one.
Earlier turns are never re-rendered, so a template that drops earlier ``<think>`` blocks (or
any other rewrite) cannot change tokens the policy already sampled.

Needs the ``tokens`` extra (``tokenizers`` and ``jinja2``), imported when a tokenizer is loaded.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import ConfigError

#: the assistant content of the base conversation: a word no template rewrites
_MARK = "parallelrolloutmark"
_BASE = [{"role": "system", "content": _MARK}, {"role": "user", "content": _MARK},
         {"role": "assistant", "content": _MARK}]


class ChatTokenizer:
    """``tokenizer.json`` and the chat template of ``tokenizer_config.json`` in ``folder``."""

    def __init__(self, folder: str | Path) -> None:
        try:
            import jinja2.sandbox
            from tokenizers import Tokenizer
        except ImportError:
            raise ConfigError("tokenizer= needs the 'tokens' extra: pip install 'parallel-rollout[tokens]' "
                              "(tokenizers, jinja2)") from None
        self.folder = Path(folder)
        config_path = self.folder / "tokenizer_config.json"
        try:
            self._tokenizer = Tokenizer.from_file(str(self.folder / "tokenizer.json"))
            config = json.loads(config_path.read_text(encoding="utf-8"))
        except (OSError, ValueError, Exception) as exc:  # tokenizers raises its own Exception
            raise ConfigError(f"tokenizer={str(folder)!r}: cannot load tokenizer.json and tokenizer_config.json "
                              f"from it: {exc}") from None
        template = config.get("chat_template")
        if isinstance(template, list):  # [{"name": "default", "template": ...}, ...]
            template = next((t.get("template") for t in template if t.get("name") == "default"), None)
        if not isinstance(template, str):
            raise ConfigError(f"{config_path}: no 'chat_template' (a string): the agent renders the "
                              "conversation with it")
        self._specials = {name: _token_text(config.get(name)) for name in ("bos_token", "eos_token")}
        env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = _raise
        env.filters["tojson"] = lambda value, indent=None: json.dumps(value, indent=indent, ensure_ascii=False)
        self._template = env.from_string(template)
        self._base = self.render(_BASE, add_generation_prompt=False)
        at = self._base.rfind(_MARK)
        if at < 0:
            raise ConfigError(f"{config_path}: the chat template drops an assistant message's content")
        #: what the template writes after an assistant reply's content (e.g. "<|im_end|>\n")
        self.reply_end = self._base[at + len(_MARK):]

    def render(self, messages: list[dict[str, Any]], add_generation_prompt: bool) -> str:
        """The chat template's text of ``messages``."""
        return self._template.render(messages=messages, add_generation_prompt=add_generation_prompt,
                                     **{k: v for k, v in self._specials.items() if v is not None})

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (special tokens written in it are recognised; none added)."""
        return list(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: list[int]) -> str:
        """The text of ``ids``, special tokens included."""
        return self._tokenizer.decode(list(ids), skip_special_tokens=False)

    def first_prompt(self, messages: list[dict[str, Any]]) -> list[int]:
        """The first turn's prompt: the whole conversation so far, with the generation prompt."""
        return self.encode(self.render(messages, add_generation_prompt=True))

    def continuation(self, sampled: list[int], messages: list[dict[str, Any]]) -> list[int]:
        """What follows a reply's sampled ids: the end of turn the template writes (the part
        the model did not sample), then ``messages`` alone with the generation prompt."""
        text = self.decode(sampled)
        # The longest start of reply_end that the reply already ends with (its stop token).
        done = next(k for k in range(len(self.reply_end), -1, -1) if text.endswith(self.reply_end[:k]))
        full = self.render(_BASE + list(messages), add_generation_prompt=True)
        if not full.startswith(self._base):
            raise ConfigError(f"{self.folder}: the chat template renders a conversation differently when "
                              "messages are added; the token history cannot be extended")
        return self.encode(self.reply_end[done:]) + self.encode(full[len(self._base):])


def _token_text(value: Any) -> str | None:
    """A special token of tokenizer_config.json: a string, or {"content": ...}."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _raise(message: str) -> None:
    raise ConfigError(f"the chat template refused the conversation: {message}")
