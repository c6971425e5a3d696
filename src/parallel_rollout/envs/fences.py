"""Markdown fenced code blocks in a model's reply: what the agents' parsers (shell commands,
OSWorld actions, JSON actions) and the ``py`` mode (the answer's code) read."""

from __future__ import annotations


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(lower-case info tag, body) of every ``` fenced block; an unclosed last block counts
    (a reply cut off by max_tokens). As in CommonMark, a fence indented by a list item
    (``1. Code:`` then ``   ```python``) takes as much indentation off each line of its
    body, so the code keeps only its own."""
    blocks: list[tuple[str, str]] = []
    tag: str | None = None
    indent = 0
    body: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if tag is None:
            if stripped.startswith("```"):
                tag, body = stripped[3:].strip().lower(), []
                indent = len(line) - len(line.lstrip(" "))
        elif stripped.startswith("```"):
            blocks.append((tag, "\n".join(body)))
            tag = None
        else:
            lead = len(line) - len(line.lstrip(" "))
            body.append(line[min(lead, indent):])
    if tag is not None:
        blocks.append((tag, "\n".join(body)))
    return blocks
