"""The policies of tests/llm_server.py that answer like a perfect model would, and their helpers.

``shell_solver`` replays each task's reference commands (as text or as tool calls), found by
the instruction in the conversation's first user message; ``lookup_solver`` answers from a dict
keyed by a text that occurs in the first user message (a math problem → ``\\boxed{answer}``, a
HumanEval prompt → its canonical solution); ``lake_tool_solver`` calls the ``move`` tool along
a FrozenLake's shortest path. ``llm_server`` imports them all, so either module gives them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

Step = dict[str, Any]
Policy = Callable[[dict[str, Any]], Step]


def reply_with_counts(body: dict[str, Any], text: str) -> Step:
    """A reply step whose usage counts words, so totals are checkable and never zero."""
    prompt_words = sum(len(str(m.get("content", "")).split()) for m in body["messages"])
    return {"reply": text, "usage": {"prompt_tokens": prompt_words, "completion_tokens": len(text.split())}}


def call_tool(body: dict[str, Any], name: str, **arguments: Any) -> Step:
    """A reply step of one tool call (content null, as the API sends it), checking first that
    the request offered the tool and that the last reply's call was answered by its id."""
    offered = [t["function"]["name"] for t in body.get("tools") or []]
    if name not in offered:
        raise AssertionError(f"the request offers no tool {name!r} (tools: {offered})")
    turn = sum(1 for m in body["messages"] if m["role"] == "assistant")
    if turn:
        last = [m for m in body["messages"] if m["role"] == "assistant"][-1]
        answered = [m.get("tool_call_id") for m in body["messages"] if m["role"] == "tool"]
        if not last.get("tool_calls") or last["tool_calls"][0]["id"] not in answered:
            raise AssertionError(f"the last reply's tool call is not answered by a tool message: {body['messages'][-2:]}")
    call = {"id": f"call_{turn}", "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)}}
    return {"reply": None, "tool_calls": [call], "usage": {"prompt_tokens": 10, "completion_tokens": 3}}


def lake_tool_solver(body: dict[str, Any]) -> Step:
    """A FrozenLake player calling ``move`` along a shortest path from the latest grid (the
    first user message, then each tool message)."""
    import re

    from parallel_rollout.envs.gym import ACTIONS, shortest_path

    last = [m["content"] for m in body["messages"] if m["role"] in ("user", "tool")][-1]
    grid = [line for line in last.splitlines() if re.fullmatch(r"[SFHGP]+", line)]
    row = next(i for i, line in enumerate(grid) if "P" in line)
    col = grid[row].index("P")
    path = shortest_path([line.replace("P", "F") for line in grid], (row, col))
    return call_tool(body, "move", direction=ACTIONS[path[0]])


def first_user_message(body: dict[str, Any]) -> str:
    """The content of the conversation's first user message."""
    return next(m["content"] for m in body["messages"] if m["role"] == "user")


def shell_solver(tasks_path: Path, tools: bool = False) -> Policy:
    """Replays each shell task's reference commands, one per turn in a ```bash block, then DONE
    (``tools``: as ``run`` tool calls, then a ``done`` call)."""
    tasks = [json.loads(line) for line in Path(tasks_path).read_text().splitlines() if line.strip()]

    def policy(body: dict[str, Any]) -> Step:
        first = first_user_message(body)
        task = next((t for t in tasks if t["instruction"] in first), None)
        if task is None:
            raise AssertionError(f"no task's instruction is in the first user message: {first[:200]!r}")
        turn = sum(1 for m in body["messages"] if m["role"] == "assistant")
        commands = task["reference"]
        if tools:
            return call_tool(body, "run", command=commands[turn]) if turn < len(commands) else call_tool(body, "done")
        text = f"```bash\n{commands[turn]}\n```" if turn < len(commands) else "DONE"
        return reply_with_counts(body, text)

    return policy


def lookup_solver(answers: dict[str, str]) -> Policy:
    """Answers with ``answers[key]`` for the key that occurs in the first user message."""

    def policy(body: dict[str, Any]) -> Step:
        first = first_user_message(body)
        for key, answer in answers.items():
            if key in first:
                return reply_with_counts(body, answer)
        raise AssertionError(f"no known question in {first[:200]!r}")

    return policy
