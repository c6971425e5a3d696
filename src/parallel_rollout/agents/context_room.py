"""What the model's context leaves a reply, read from a server's "too long" 400.

vLLM and SGLang refuse a request whose prompt + ``max_tokens`` is past the model's context
(``max_model_len``) even when the prompt itself fits, and their 400 says both numbers::

    vLLM, older:   This model's maximum context length is 4096 tokens. However, you requested
                   4596 tokens (3596 in the messages, 1000 in the completion). …
    vLLM 0.6–0.11: 'max_tokens' or 'max_completion_tokens' is too large: 1000. This model's
                   maximum context length is 4096 tokens and your request has 3596 input tokens
                   (1000 > 4096 - 3596).
    vLLM, renderer: You passed 3596 input tokens and requested 1000 output tokens. However, the
                   model's context length is only 4096 tokens, resulting in a maximum input
                   length of 3096 tokens. …
    vLLM, newest:  This model's maximum context length is 4096 tokens. However, you requested
                   1000 output tokens and your prompt contains at least 3596 input tokens, …
    SGLang:        Requested token count exceeds the model's maximum context length of 4096
                   tokens. You requested a total of 4596 tokens: 3596 tokens from the input
                   messages and 1000 tokens for the completion. …

A multi-turn agent whose context grows meets it long before its prompt stops fitting, so such
a refusal is no context overflow: the request is sent once more with its token limit lowered
to what is left (``fit``; ``ModelClient._send``), and the reply ends with finish_reason
``length`` if it reaches it. A prompt that does not fit itself ("your request has N input
tokens", SGLang's "The input (N tokens) is longer than the model's context length") gives no
room and stays a ``ContextOverflow``. vLLM's count of input *characters* (its cheap check
before tokenizing) gives no token count, and is not read.
"""

from __future__ import annotations

import re
from typing import Any

from .episode import says_overflow
from .partial_reply import LIMITS

#: the wordings above: (the model's context, the prompt's tokens)
_WORDINGS = tuple(re.compile(pattern, re.IGNORECASE) for pattern in (
    r"maximum context length is (?P<context>\d+) tokens[.,] however,? you requested \d+ tokens "
    r"\((?P<prompt>\d+) in (?:the messages|your prompt)",
    r"maximum context length is (?P<context>\d+) tokens and your request has (?P<prompt>\d+) input tokens",
    r"you passed (?P<prompt>\d+) input tokens and requested \d+ output tokens\. however, the model's context "
    r"length is only (?P<context>\d+)",
    r"maximum context length is (?P<context>\d+) tokens\. however, you requested \d+ output tokens and your "
    r"prompt contains (?:at least )?(?P<prompt>\d+) input tokens",
    r"maximum context length of (?P<context>\d+) tokens\. you requested a total of [\d.]+ tokens: "
    r"(?P<prompt>\d+) tokens from the input messages",
))


def room_left(said: str) -> int | None:
    """The tokens the model's context leaves a reply after the prompt, by a server's error
    text that gives both numbers (the wordings above); None when it gives neither."""
    for wording in _WORDINGS:
        found = wording.search(said)
        if found:
            return int(found["context"]) - int(found["prompt"])
    return None


def fit(request: dict[str, Any], status: int, said: str) -> int | None:
    """After an error answer: when it is the 400 that refuses prompt + token limit past the
    model's context while the prompt fits (``room_left`` > 0, below the request's limit),
    lower the request's limit to that room and return it (send it again); None otherwise:
    a prompt that does not fit, a refusal without numbers, a request without a limit."""
    if status not in (400, 413, 422) or not says_overflow(said):
        return None
    room = room_left(said)
    names = [name for name in LIMITS if isinstance(request.get(name), int)]
    if room is None or room <= 0 or not names or all(request[name] <= room for name in names):
        return None
    for name in names:
        request[name] = min(request[name], room)
    return room
