"""The modes' actions as OpenAI tools, and a reply's ``tool_calls`` back into actions.

With ``tool_calls=True`` (``--tool-calls``) the ``openai`` agent sends ``tools=tools_for(mode)``
with every request. A reply that calls a tool is turned into the mode's action here
(``action_of``); the observation that follows goes back as a ``tool`` message answering that
call (``tool_messages``). A reply without a tool call is parsed as text, as without tools
(``prompts.parse``), so a model may still end an episode by saying DONE.

===========  ==========================================  ==========================================
mode         tools                                        action the env receives
===========  ==========================================  ==========================================
shell        run(command), done()                         {"command": …} / "DONE"
py           submit(code)                                 the code in a ```python block
rag          search(query, k), answer(text)               {"search": …, "k": …} / {"answer": …}
web          click, type, press, scroll, select, done     {"action": name, …arguments} / "DONE"
osworld      computer_13's types, lower case (click …)   {"action_type": "CLICK", "parameters": …}
gym          move(direction)                              "<answer>Right</answer>"
===========  ==========================================  ==========================================

One action per turn: when a reply calls several tools, the first is the action and the
others are answered "not run" (the API wants an answer to every call).
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from .episode import AgentError

#: what each of the other calls of a reply is told
NOT_RUN = "not run: one action per turn; call one tool per reply"


def _tool(name: str, description: str, properties: dict[str, Any] | None = None,
          required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": properties or {}, "required": list(required)}}}


_STR = {"type": "string"}
_INT = {"type": "integer"}
_XY = {"x": {"type": "integer", "description": "screen x in pixels"},
       "y": {"type": "integer", "description": "screen y in pixels"}}

_DONE_TOOL = _tool("done", "The task is complete: end the episode.")

TOOLS: dict[str, list[dict[str, Any]]] = {
    "shell": [
        _tool("run", "Run one shell command (a fresh shell each time; files persist). You get its exit "
                     "status, stdout and stderr.", {"command": _STR}, ("command",)),
        _DONE_TOOL,
    ],
    "py": [_tool("submit", "Submit the complete function (signature, imports, body) to be tested.",
                 {"code": _STR}, ("code",))],
    "rag": [
        _tool("search", "BM25 keyword search over the document collection; shows the best documents.",
              {"query": _STR, "k": {"type": "integer", "minimum": 1, "maximum": 20}}, ("query",)),
        _tool("answer", "Give the final answer (the shortest exact words) and end the episode.",
              {"text": _STR}, ("text",)),
    ],
    "web": [
        _tool("click", "Click an element by its ref, or page coordinates x, y.",
              {"ref": _INT, "x": _INT, "y": _INT}),
        _tool("type", "Type text into a field (its text is replaced).", {"ref": _INT, "text": _STR}, ("text",)),
        _tool("press", "Press a key (Enter, Tab, ArrowDown, ctrl+a …).", {"key": _STR}, ("key",)),
        _tool("scroll", "Scroll an element (or the page) by dy pixels.", {"ref": _INT, "dy": _INT}, ("dy",)),
        _tool("select", "Choose an option of a list.", {"ref": _INT, "option": _STR}, ("ref", "option")),
        _DONE_TOOL,
    ],
    "gym": [_tool("move", "Make one move in the game.",
                  {"direction": {"type": "string", "enum": ["Left", "Down", "Right", "Up"]}}, ("direction",))],
}

_BUTTON = {"type": "string", "enum": ["left", "right", "middle"]}
#: computer_13's action types and their parameters (OSWorld's names)
_COMPUTER_13: dict[str, tuple[str, dict[str, Any], tuple[str, ...]]] = {
    "MOVE_TO": ("Move the mouse to x, y.", _XY, ("x", "y")),
    "CLICK": ("Click (at x, y when given).", {**_XY, "button": _BUTTON, "num_clicks": _INT}, ()),
    "MOUSE_DOWN": ("Press a mouse button.", {"button": _BUTTON}, ()),
    "MOUSE_UP": ("Release a mouse button.", {"button": _BUTTON}, ()),
    "RIGHT_CLICK": ("Right-click (at x, y when given).", _XY, ()),
    "DOUBLE_CLICK": ("Double-click (at x, y when given).", _XY, ()),
    "DRAG_TO": ("Drag with the left button held to x, y.", _XY, ("x", "y")),
    "SCROLL": ("Scroll by dx, dy clicks.", {"dx": _INT, "dy": _INT}, ("dx", "dy")),
    "TYPING": ("Type text.", {"text": _STR}, ("text",)),
    "PRESS": ("Press and release a key.", {"key": _STR}, ("key",)),
    "KEY_DOWN": ("Hold a key down.", {"key": _STR}, ("key",)),
    "KEY_UP": ("Release a key.", {"key": _STR}, ("key",)),
    "HOTKEY": ("Press keys together (ctrl+c: [\"ctrl\", \"c\"]).",
               {"keys": {"type": "array", "items": _STR}}, ("keys",)),
    "WAIT": ("Let the screen settle.", {}, ()),
    "FAIL": ("The task cannot be done.", {}, ()),
    "DONE": ("The task is complete.", {}, ()),
}
TOOLS["osworld"] = [_tool(kind.lower(), *spec) for kind, spec in _COMPUTER_13.items()]


def tools_for(mode: str) -> list[dict[str, Any]]:
    """The OpenAI ``tools`` of ``mode``; AgentError for a mode without tools."""
    try:
        return TOOLS[mode]
    except KeyError:
        raise AgentError(f"tool_calls=True: mode {mode!r} has no tools (modes with tools: "
                         f"{', '.join(sorted(TOOLS))})") from None


def action_of(mode: str, tool_calls: list[dict[str, Any]]) -> Any:
    """The action the first of a reply's ``tool_calls`` stands for in ``mode``. A call the
    mode does not know, or whose arguments are not a JSON object, becomes a text the env
    answers with "not an action" (the episode goes on, as with an unparsable text reply)."""
    function = tool_calls[0].get("function") or {}
    name = str(function.get("name", ""))
    try:
        args = json.loads(function.get("arguments") or "{}")
    except ValueError:
        return f"tool {name!r}: its arguments are not JSON: {function.get('arguments')!r}"
    if not isinstance(args, dict):
        return f"tool {name!r}: its arguments must be a JSON object, got {args!r}"
    known = {tool["function"]["name"] for tool in TOOLS.get(mode, [])}
    if name not in known:
        return f"unknown tool {name!r}; tools: {', '.join(sorted(known))}"
    return _ACTIONS[mode](name, args)


def _shell(name: str, args: Mapping[str, Any]) -> Any:
    return "DONE" if name == "done" else {"command": str(args.get("command", ""))}


def _py(name: str, args: Mapping[str, Any]) -> Any:
    # the py env takes the code out of a fenced block, as from a text reply
    return f"```python\n{args.get('code', '')}\n```"


def _rag(name: str, args: Mapping[str, Any]) -> Any:
    if name == "answer":
        return {"answer": args.get("text", "")}
    return {"search": args.get("query", ""), **({"k": args["k"]} if "k" in args else {})}


def _web(name: str, args: Mapping[str, Any]) -> Any:
    return "DONE" if name == "done" else {"action": name, **args}


def _osworld(name: str, args: Mapping[str, Any]) -> Any:
    kind = name.upper()
    return kind if kind in ("WAIT", "FAIL", "DONE") else {"action_type": kind, "parameters": dict(args)}


def _gym(name: str, args: Mapping[str, Any]) -> Any:
    return f"<answer>{args.get('direction', '')}</answer>"


_ACTIONS = {"shell": _shell, "py": _py, "rag": _rag, "web": _web, "osworld": _osworld, "gym": _gym}


def tool_messages(tool_calls: list[dict[str, Any]], content: Any) -> list[dict[str, Any]]:
    """The ``tool`` messages answering a reply's calls: ``content`` (the next observation,
    rendered) for the first, ``NOT_RUN`` for the others. A tool message holds text only, so
    the images of content parts (a screenshot) follow in a user message."""
    images: list[dict[str, Any]] = []
    if isinstance(content, list):
        images = [part for part in content if part.get("type") != "text"]
        content = "\n".join(part.get("text", "") for part in content if part.get("type") == "text")
    messages = [{"role": "tool", "tool_call_id": str(call.get("id", "")),
                 "content": content if index == 0 else NOT_RUN}
                for index, call in enumerate(tool_calls)]
    if images:
        messages.append({"role": "user", "content": images})
    return messages


def assistant_message(text: str, tool_calls: list[dict[str, Any]] | None) -> dict[str, Any]:
    """The reply as it joins the conversation (content null beside tool calls, as the API
    sends it)."""
    if not tool_calls:
        return {"role": "assistant", "content": text}
    return {"role": "assistant", "content": text or None, "tool_calls": tool_calls}
