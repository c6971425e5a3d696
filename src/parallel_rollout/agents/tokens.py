"""ChatTokenizer: a local Hugging Face tokenizer folder, its chat template rendered piecewise.

Token in, token out (``RunConfig.tokenizer``): the agent keeps the episode's token history and
only ever appends to it, so what the trainer gets is exactly what the model saw and sampled::

    turn 1   ids = encode(template([system, user₁], generation prompt))
    turn t   ids += sampled₍t−1₎ + (encode(what template(base + [user_t]) writes after base's
                                           reply content) minus the ids the reply already ends with)

``base`` is a fixed three-message conversation ending in a reply: what the template writes
after that reply's content, with the new messages after it, is the end of the reply's turn
(``<|im_end|>\n``), the new messages and the generation prompt, without the default system
prompt some templates add to a conversation that does not start with one. Only what follows
the reply's content is taken, so a template that writes a conversation's last reply apart
(Qwen3's empty ``<think>`` block on a reply that answers the last user message) is read as
well as one that does not. Of the end of turn, the part the model sampled (its stop token)
is not added twice; a reply cut at the token limit gets all of it. Earlier turns are never
re-rendered, so a template that drops earlier ``<think>`` blocks (or any other rewrite)
cannot change tokens the policy already sampled.

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
        template, where = _chat_template(self.folder, config)
        if not isinstance(template, str):
            raise ConfigError(f"{config_path}: no 'chat_template' (a string), and no {_TEMPLATE_FILES[0]} beside "
                              "it: the agent renders the conversation with it")
        self._specials = {name: _token_text(config.get(name)) for name in ("bos_token", "eos_token")}
        # as transformers renders chat templates (trim_blocks, lstrip_blocks, {% break %})
        env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                           extensions=["jinja2.ext.loopcontrols"])
        env.globals["raise_exception"] = _raise
        env.filters["tojson"] = lambda value, indent=None: json.dumps(value, indent=indent, ensure_ascii=False)
        try:
            self._template = env.from_string(template)
            if self.render(_BASE, add_generation_prompt=False).count(_MARK) != len(_BASE):
                raise ConfigError(f"{where}: the chat template drops a message's content (the agent needs the "
                                  "system, user and assistant messages written out)")
            self.continuation([], [{"role": "user", "content": "?"}])  # a next turn can be written
        except jinja2.TemplateError as exc:
            raise ConfigError(f"{where}: the chat template does not render a conversation: "
                              f"{type(exc).__name__}: {exc}") from None

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

    def mismatch(self, text: str, ids: list[int]) -> str | None:
        """None when the server's sampled ``ids`` decode to its reply ``text`` by this
        tokenizer, else what they decode to. Whitespace is left out (a sentencepiece decoder
        drops a first token's leading space), and the text may stop short of the ids (a stop
        string the server leaves out of the text, a character whose last bytes have not come):
        a folder of another model's tokenizer decodes the ids to other words."""
        def plain(value: str) -> str:
            return "".join(value.replace("\ufffd", "").split())

        said = plain(text)
        decoded = [self._tokenizer.decode(list(ids), skip_special_tokens=skip) for skip in (True, False)]
        if not said or any(plain(found).startswith(said) for found in decoded):
            return None
        return decoded[0]

    def first_prompt(self, messages: list[dict[str, Any]]) -> list[int]:
        """The first turn's prompt: the whole conversation so far, with the generation prompt."""
        return self.encode(self.render(messages, add_generation_prompt=True))

    def continuation(self, sampled: list[int], messages: list[dict[str, Any]]) -> list[int]:
        """What follows a reply's sampled ids: the end of turn the template writes (the part
        the model did not sample), then ``messages`` alone with the generation prompt."""
        full = self.render(_BASE + list(messages), add_generation_prompt=True)
        # base's reply is the last mark: the new messages hold none (ConfigError if they do)
        if full.count(_MARK) != len(_BASE):
            raise ConfigError(f"{self.folder}: cannot find where the new messages start in the chat template's "
                              f"text (a message contains {_MARK!r}, or the template drops one)")
        after = self.encode(full[full.rfind(_MARK) + len(_MARK):])
        # The longest start of it the sampled ids already end with (the stop token), in ids:
        # a reply's text ending in "<" is not half of "<|im_end|>".
        done = next(k for k in range(min(len(after), len(sampled)), -1, -1) if sampled[len(sampled) - k:] == after[:k])
        return after[done:]


#: where a tokenizer folder may keep its chat template when tokenizer_config.json has none
#: (transformers writes chat_template.jinja since 4.50; processors wrote chat_template.json)
_TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json")


def _chat_template(folder: Path, config: dict[str, Any]) -> tuple[Any, Path]:
    """The folder's default chat template (None if it has none) and the file it came from."""
    template, where = config.get("chat_template"), folder / "tokenizer_config.json"
    if template is None:
        for name in _TEMPLATE_FILES:
            path = folder / name
            if path.is_file():
                try:
                    text = path.read_text(encoding="utf-8")
                    template = json.loads(text).get("chat_template") if name.endswith(".json") else text
                except (OSError, ValueError, AttributeError) as exc:
                    raise ConfigError(f"{path}: cannot read the chat template: {exc}") from None
                where = path
                break
    if isinstance(template, list):  # [{"name": "default", "template": ...}, ...]
        template = next((t.get("template") for t in template if isinstance(t, dict) and t.get("name") == "default"),
                        None)
    return template, where


def _token_text(value: Any) -> str | None:
    """A special token of tokenizer_config.json: a string, or {"content": ...}."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _raise(message: str) -> None:
    raise ConfigError(f"the chat template refused the conversation: {message}")
