"""What a model-backed agent says to the model, and how it reads the reply back, per mode.

Everything mode-specific about talking to an LLM lives here, so a prompt is read and changed
in one place::

    observation ─► render(mode, observation) ─► user message ─► model
    action      ◄─ parse(mode, reply_text)   ◄─ assistant message ◄┘

``SYSTEM_PROMPTS[mode]`` opens each episode's conversation. Modes:

- ``shell``: one command per reply in a ```` ```bash ```` block, or ``DONE`` alone when the
  task is finished. ``parse`` returns ``{"command": ...}`` or ``"DONE"``.
- ``py`` (HumanEval): the completed function in a ```` ```python ```` block. ``parse``
  returns the reply text as is; the env picks the code out of the fences.
- ``math``: reasoning, then the final answer in ``\\boxed{}``. ``parse`` returns the text;
  the env extracts the boxed answer.
- ``gym`` (FrozenLake, Sokoban): the game's rules in the first message, the grid, then one
  move as ``<answer>Right</answer>``. ``parse`` returns the text; the env finds the move.
- ``web`` (MiniWoB++): the task and the page's elements as an indented list (a screenshot
  too when the task asks); one action as a ```` ```json ```` object or a BrowserGym-style
  call. ``parse`` returns the dict, the call string, or ``"DONE"``.
- ``rag``: the question, then each search's results; one JSON action per reply,
  ``{"search": "...", "k": 5}`` or ``{"answer": "..."}``. ``parse`` returns that object.

A mode without an entry here gets a generic prompt: the observation as JSON, and the reply
text as the action.
"""

from __future__ import annotations

import json
import re
from typing import Any, Mapping

from ..envs.fences import fenced_blocks

SHELL_SYSTEM = """\
You are operating a Linux shell to complete a task. Each of your replies runs exactly one \
shell command: put it in a single fenced block, like

```bash
ls -la ~
```

After each command you will see its exit status, standard output and standard error. \
Commands run in a fresh shell each time (cd and variables do not carry over; files do). \
Do not run interactive programs. When the task is complete, reply with the single word \
DONE and nothing else."""

PY_SYSTEM = """\
You are an expert Python programmer. You will be given a function signature and docstring. \
Reply with the complete function, including the signature and any imports it needs, in one \
```python fenced block. Do not include tests or example usage."""

MATH_SYSTEM = """\
You are a careful mathematician. Solve the problem, reasoning step by step, then give the \
final answer in the form \\boxed{ANSWER} at the end of your reply. Put only the final \
answer inside the box, in its simplest exact form."""

GENERIC_SYSTEM = """\
You are an agent acting in an environment. Each user message is the current observation as \
JSON. Reply with your next action."""

#: the system message that opens an episode, per mode
SYSTEM_PROMPTS = {"shell": SHELL_SYSTEM, "py": PY_SYSTEM, "math": MATH_SYSTEM}

#: characters of command output or test output shown to the model per turn
OUTPUT_TAIL = 3000


def system_prompt(mode: str) -> str:
    """The system message for ``mode`` (the generic one for a mode not listed here)."""
    return SYSTEM_PROMPTS.get(mode, GENERIC_SYSTEM)


def render(mode: str, observation: Mapping[str, Any]) -> str | list[dict[str, Any]]:
    """The user message for one turn of ``mode``: text, or OpenAI content parts (osworld:
    text and a screenshot image)."""
    renderer = _RENDERERS.get(mode, _render_generic)
    return renderer(observation)


def parse(mode: str, reply_text: str) -> Any:
    """The action a model's reply stands for in ``mode``."""
    parser = _PARSERS.get(mode)
    return parser(reply_text) if parser else reply_text


# -- shell ----------------------------------------------------------------------------------


def _render_shell(observation: Mapping[str, Any]) -> str:
    instruction = observation.get("instruction") or ""
    if observation.get("returncode") is None:
        # The first observation: nothing has run yet, so the task is all there is to say.
        return f"Task: {instruction}\n\nReply with your first command."
    parts = [f"Exit status: {observation.get('returncode')}"]
    for label, key in (("stdout", "output"), ("stderr", "error")):
        text = (observation.get(key) or "").rstrip("\n")
        parts.append(f"{label}:\n{_tail(text)}" if text else f"{label}: (empty)")
    parts.append("Reply with the next command, or DONE if the task is complete.")
    return "\n\n".join(parts)


_SHELL_TAGS = {"", "bash", "sh", "shell", "console", "zsh"}
_DONE = re.compile(r"^[`*\s]*DONE[`*.!\s]*$")


def parse_shell(reply_text: str) -> Any:
    """``{"command": ...}`` from the reply's bash block (or its bare text), or ``"DONE"``."""
    blocks = [body.strip() for tag, body in fenced_blocks(reply_text) if tag in _SHELL_TAGS]
    blocks = [b for b in blocks if b]
    if blocks:
        if len(blocks) == 1 and _DONE.match(blocks[0]):
            return "DONE"
        # Several blocks despite the prompt: run them all rather than silently drop some.
        return {"command": "\n".join(_strip_prompts(b) for b in blocks)}
    text = reply_text.strip()
    if any(_DONE.match(line) for line in text.splitlines()):
        return "DONE"
    return {"command": text}


def _strip_prompts(block: str) -> str:
    # Models copy the look of a terminal: "$ ls" means "ls".
    lines = block.splitlines()
    if lines and all(line.startswith("$ ") or not line.strip() for line in lines):
        return "\n".join(line[2:] for line in lines)
    return block


# -- py (HumanEval) -------------------------------------------------------------------------


def _render_py(observation: Mapping[str, Any]) -> str:
    feedback = observation.get("feedback")
    if not feedback:
        return (f"Complete the function `{observation.get('entry_point')}`:\n\n"
                f"```python\n{observation.get('prompt', '')}\n```")
    parts = [f"Your solution failed the tests ({feedback.get('kind')})."]
    if feedback.get("detail"):
        parts.append(f"Details:\n{_tail(feedback['detail'])}")
    if feedback.get("output_tail"):
        parts.append(f"Output:\n{_tail(feedback['output_tail'])}")
    parts.append("Reply with the corrected complete function in one ```python block.")
    return "\n\n".join(parts)


# -- math -----------------------------------------------------------------------------------


def _render_math(observation: Mapping[str, Any]) -> str:
    text = f"Problem: {observation.get('problem', '')}"
    if observation.get("feedback"):
        # Only if the math env ever gives a second turn; otherwise one problem, one reply.
        text += f"\n\nFeedback: {observation['feedback']}"
    return text + "\n\nGive the final answer as \\boxed{...}."


# -- anything else --------------------------------------------------------------------------


def _render_generic(observation: Mapping[str, Any]) -> str:
    return json.dumps(observation, ensure_ascii=False, indent=2, default=str)


def _tail(text: str) -> str:
    if len(text) <= OUTPUT_TAIL:
        return text
    return f"[… {len(text) - OUTPUT_TAIL} characters cut …]\n{text[-OUTPUT_TAIL:]}"


def _ends(text: str) -> str:
    """Both ends of a long text, cut in the middle: an XML tree keeps its root's tags."""
    if len(text) <= OUTPUT_TAIL:
        return text
    half = OUTPUT_TAIL // 2
    return f"{text[:half]}\n[… {len(text) - 2 * half} characters cut …]\n{text[-half:]}"


# -- osworld --------------------------------------------------------------------------------

OSWORLD_SYSTEM = """\
You operate a Linux desktop (openbox, xterm, mousepad, pcmanfm) to complete the user's task.
Each turn you get the task, a screenshot and/or the accessibility tree as XML. Answer with ONE action:
- computer_13: a ```json block such as {"action_type": "CLICK", "parameters": {"x": 200, "y": 150}}.
  Types: MOVE_TO, CLICK, MOUSE_DOWN, MOUSE_UP, RIGHT_CLICK, DOUBLE_CLICK, DRAG_TO, SCROLL (dx, dy),
  TYPING (text), PRESS/KEY_DOWN/KEY_UP (key), HOTKEY (keys: list), WAIT, FAIL, DONE.
- pyautogui: a ```python block of pyautogui calls, e.g. pyautogui.typewrite('ls\\n').
Reply DONE when the task is complete, FAIL if it cannot be done, WAIT to let the screen settle."""
SYSTEM_PROMPTS["osworld"] = OSWORLD_SYSTEM


def _render_osworld(observation: Mapping[str, Any]) -> list[dict[str, Any]]:
    """OpenAI vision content: the task (+ a11y tree, + last error) as text, the screenshot
    as a base64 PNG image."""
    import base64

    text = f"Task: {observation.get('instruction')}"
    if observation.get("error"):
        text += f"\nYour last action was not executed: {observation['error']}"
    if observation.get("accessibility_tree"):
        text += "\nAccessibility tree:\n" + _ends(observation["accessibility_tree"])
    content: list[dict[str, Any]] = [{"type": "text", "text": text}]
    path = observation.get("screenshot_path")
    if path:
        with open(path, "rb") as fh:
            data = base64.b64encode(fh.read()).decode("ascii")
        content.append({"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}"}})
    return content


_SPECIAL = re.compile(r"^[`*\s]*(WAIT|FAIL|DONE)[`*.!\s]*$")


def parse_osworld(reply_text: str) -> Any:
    """The actions of a reply, as OSWorld's ``parse_code_from_string`` reads them: every
    fenced block is one, whatever its tag (```python, ```code, ```bash, ``` …: a fence line is
    never run as code); a computer_13 dict from a block holding a JSON object; WAIT/FAIL/DONE
    from a block or a bare word that holds only it; a block of code whose last line is one of
    those is its code, then that word. One action alone, a list of them when the reply holds
    more (the env runs them in order, as one turn, up to a DONE or FAIL); with no block the
    reply itself (the env says what is wrong)."""
    found: list[Any] = []
    for tag, body in fenced_blocks(reply_text):
        body = body.strip()
        if tag not in ("python", "py") and body.startswith("{"):
            try:
                found.append(json.loads(body))
                continue
            except ValueError:
                pass
        if not body or tag == "json":
            continue
        special = _SPECIAL.match(body)
        lines = body.splitlines()
        last = _SPECIAL.match(lines[-1]) if len(lines) > 1 else None
        if special:
            found.append(special.group(1))
        elif last:  # its code, then the word (it was run as code: a NameError, and no end)
            found += ["\n".join(lines[:-1]).strip(), last.group(1)]
        else:
            found.append(body)
    if found:
        return found[0] if len(found) == 1 else found
    stripped = reply_text.strip()
    special = _SPECIAL.match(stripped.splitlines()[-1] if stripped else "")
    if special:
        return special.group(1)
    if stripped.startswith("{"):
        try:
            return json.loads(stripped)
        except ValueError:
            pass
    return stripped


# -- gym (FrozenLake, Sokoban) --------------------------------------------------------------

# As in ROLL, the system message is the game-neutral part; the first observation of an episode
# carries the game's own rules (and Sokoban's legend), so one prompt serves every game.
GYM_SYSTEM = """\
You are a good game player, aiming for the highest reward. The first message explains the \
game and its symbols; each message then shows the grid. Each turn, reply with one move as \
<answer>Right</answer>."""
SYSTEM_PROMPTS["gym"] = GYM_SYSTEM


def _render_gym(observation: Mapping[str, Any]) -> str:
    text = str(observation.get("grid", ""))
    if observation.get("instructions"):
        text = f"{observation['instructions']}\n\n{text}"
    if observation.get("game") == "Sokoban":
        text += f"\n\nBoxes on targets: {observation.get('boxes_on_target')} of {observation.get('num_boxes')}."
    else:
        row, col = observation.get("position", (0, 0))
        text += f"\n\nYou are at row {row}, column {col}."
    if observation.get("error"):
        text += f"\nYour last reply was not a move: {observation['error']}"
    elif observation.get("last_action"):
        blocked = " (blocked: nothing moved)" if observation.get("moved") is False else ""
        text += f"\nYour last move: {observation['last_action']}{blocked}."
    left = observation.get("max_steps", 0) - observation.get("steps", 0)
    return text + f"\nMoves left: {left}. Your move?"


# -- rag ------------------------------------------------------------------------------------

RAG_SYSTEM = """\
You answer a question using a search tool over a document collection. Each reply is ONE \
action, a JSON object in a ```json block:
- {"search": "<query>", "k": 5} searches the collection (BM25 keyword search; k from 1 to \
20) and shows you the best documents;
- {"answer": "<text>"} gives your final answer and ends the episode.
Answer with the shortest exact words or phrase (as the documents spell it), not a sentence."""
SYSTEM_PROMPTS["rag"] = RAG_SYSTEM


def _render_rag(observation: Mapping[str, Any]) -> str:
    text = f"Question: {observation.get('question', '')}"
    if observation.get("error"):
        return text + f"\n\nYour last reply was not an action: {observation['error']}"
    results = observation.get("results")
    if results is None:
        return text + f"\n\nThe collection holds {observation.get('documents', '?')} documents. Your first action?"
    if not results:
        return text + f"\n\nNo document matches {observation.get('query')!r}. Try other words, or answer."
    lines = [f"[{i}] {doc.get('title') or doc.get('id')} (id {doc.get('id')}): {doc.get('text')}"
             for i, doc in enumerate(results, start=1)]
    return "\n\n".join([text, f"Results for {observation.get('query')!r}:", *lines,
                         "Search again, or answer."])


def parse_rag(reply_text: str) -> Any:
    """The JSON action of the reply (a ```json block, else the first JSON object in the
    text); the reply itself when it holds none (the env says what an action looks like)."""
    bodies = [body.strip() for tag, body in fenced_blocks(reply_text) if tag in ("json", "")]
    for body in [*bodies, reply_text]:
        start = body.find("{")
        while start != -1:
            try:
                action, _ = _JSON.raw_decode(body, start)
            except ValueError:
                action = None
            if isinstance(action, dict):
                return action
            start = body.find("{", start + 1)
    return reply_text.strip()


_JSON = json.JSONDecoder()


_RENDERERS = {"shell": _render_shell, "py": _render_py, "math": _render_math, "osworld": _render_osworld,
              "gym": _render_gym, "rag": _render_rag}
# py, math and gym hand the whole reply to the env, which knows how to pick out code or \boxed{}.
_PARSERS = {"shell": parse_shell, "osworld": parse_osworld, "rag": parse_rag}


# -- web (MiniWoB++) ------------------------------------------------------------------------

WEB_SYSTEM = """\
You operate a web page in a browser to complete the task stated at the top of each message. \
You see the page's elements as a list, one per line, indented by nesting:
[ref] tag id="..." class="..." text="..." value=... options=[...] @left,top widthxheight focused
Answer with ONE action per reply, as JSON in a ```json block, for example:
{"action": "click", "ref": 12}                       click an element by its ref
{"action": "click", "x": 80, "y": 100}               click at page coordinates
{"action": "type", "ref": 5, "text": "hello"}        type into a field (its text is replaced)
{"action": "press", "key": "Enter"}                  press a key (Tab, ArrowDown, ctrl+a, ...)
{"action": "scroll", "ref": 7, "dy": 100}            scroll an element (or the page) down
{"action": "select", "ref": 4, "option": "Peru"}     choose an option of a list
{"action": "wait", "ms": 500}                        let the page change
BrowserGym-style calls work too: click("12"), fill("5", "hello"), keyboard_press("Enter"). \
The episode ends by itself when the task is graded; reply DONE only if there is nothing left to do."""
SYSTEM_PROMPTS["web"] = WEB_SYSTEM

#: elements of the page shown to the model per turn
WEB_MAX_ELEMENTS = 200


def web_element_line(el: Mapping[str, Any]) -> str:
    """One element of the DOM list as the model sees it (``[ref] tag … @left,top wxh``)."""
    parts = [f"{'  ' * int(el.get('depth', 0))}[{el['ref']}] {el['tag']}"]
    for name, key in (("id", "id"), ("class", "classes"), ("text", "text"), ("value", "value"),
                      ("options", "options")):
        if el.get(key) not in (None, ""):
            parts.append(f"{name}={json.dumps(el[key], ensure_ascii=False)}")
    parts.append(f"@{el['left']},{el['top']} {el['width']}x{el['height']}")
    if el.get("focused"):
        parts.append("focused")
    return " ".join(parts)


def _render_web(observation: Mapping[str, Any]) -> str | list[dict[str, Any]]:
    dom = observation.get("dom") or []
    lines = [f"Task: {observation.get('utterance', '')}"]
    if observation.get("error"):
        lines.append(f"Your last action did nothing: {observation['error']}")
    lines.append("Elements:")
    lines += [web_element_line(el) for el in dom[:WEB_MAX_ELEMENTS]]
    if len(dom) > WEB_MAX_ELEMENTS:
        lines.append(f"[… {len(dom) - WEB_MAX_ELEMENTS} more elements cut …]")
    lines.append("Your next action?")
    text = "\n".join(lines)
    if not observation.get("screenshot_path"):
        return text
    import base64

    with open(observation["screenshot_path"], "rb") as fh:
        data = base64.b64encode(fh.read()).decode("ascii")
    return [{"type": "text", "text": text},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}"}}]


#: a BrowserGym-style call anywhere in a reply: name(args), string arguments may hold parentheses
_CALL = re.compile(r"\b((?:click|dblclick|mouse_click|fill|keyboard_type|keyboard_press|press|scroll|"
                   r"select_option|noop|done|send_msg_to_user)\((?:[^()\"']|\"(?:\\.|[^\"\\])*\"|"
                   r"'(?:\\.|[^'\\])*')*\))")


def parse_web(reply_text: str) -> Any:
    """The action dict of a ```json block (or a bare JSON object), a BrowserGym-style call,
    or DONE; otherwise the reply itself (the env says what is wrong with it)."""
    for tag, body in fenced_blocks(reply_text):
        body = body.strip()
        if body.startswith("{"):
            try:
                return json.loads(body)
            except ValueError:
                continue
        calls = _CALL.findall(body)
        if calls:
            return calls[-1]
    stripped = reply_text.strip()
    if _DONE.match(stripped.splitlines()[-1] if stripped else ""):
        return "DONE"
    start, end = stripped.find("{"), stripped.rfind("}")
    if 0 <= start < end:
        try:
            return json.loads(stripped[start:end + 1])
        except ValueError:
            pass
    calls = _CALL.findall(stripped)
    return calls[-1] if calls else stripped


_RENDERERS["web"] = _render_web
_PARSERS["web"] = parse_web
