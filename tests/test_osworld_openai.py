"""The ``openai`` agent end to end on shipped osworld tasks, against a local test LLM server.

The "model" (tests/llm_server.py on 127.0.0.1) is strict about what it is sent and perfect in
what it answers. Each request must carry, in its newest user message, the task as text and the
screenshot as an OpenAI vision part ``{"type": "image_url", "image_url": {"url":
"data:image/png;base64,…"}}`` that decodes to a PNG of the run's screen size; with
``--observation-type screenshot_a11y_tree`` also the accessibility tree (OSWorld's XML)
as text; never more than the three newest screenshots in the conversation. It answers with the
task's reference actions, one per turn, then DONE: as computer_13 JSON in a ```json block, or
with ``--action-space pyautogui`` as the same actions' pyautogui code in a ```python block. The
tasks then succeed only if the whole loop works: screenshot → message → reply → parse →
action in the desktop VM → evaluator. Problems the server sees are collected and asserted in
the test (an assertion inside the server thread would only look like a 500 to the agent).
"""

from __future__ import annotations

import base64
import os
import json
import shutil
import threading
from typing import Any

import pytest

from conftest import ROOT, assert_exactly_once, write_tasks
from llm_server import llm_server, reply_with_counts  # noqa: F401 - fixture
from parallel_rollout.agents.openai_agent import KEEP_IMAGES
from parallel_rollout.config import build_config
from parallel_rollout.envs.osworld import actions as acts
from parallel_rollout.runner import Runner
from test_osworld_taskset import EXAMPLES, needs_set

TASKS = ROOT / "benchmarks" / "osworld_tasks.jsonl"
WIDTH, HEIGHT = 1024, 768
#: a terminal task, an editor task with 6 actions (past KEEP_IMAGES screenshots), an
#: infeasible one (the reply is FAIL), a file-manager task
SUBSET = ("terminal-echo-file", "editor-delete-line", "terminal-bluetooth-infeasible",
          "files-new-folder")

pytestmark = pytest.mark.skipif(
    not all(shutil.which(p) for p in ("Xvfb", "openbox", "xterm", "mousepad", "pcmanfm", "xdotool", "wmctrl")),
    reason="the desktop packages are missing (./dev installs them)")


def subset() -> list[dict]:
    tasks = {t["id"]: t for t in map(json.loads, TASKS.read_text().splitlines()) if t}
    return [tasks[task_id] for task_id in SUBSET]


class DesktopModel:
    """The server's policy: check each request like a vision model's API would need it, then
    answer the task's next reference action in the run's action space."""

    def __init__(self, tasks: list[dict], action_space: str, a11y: bool) -> None:
        self.tasks = tasks
        self.action_space = action_space
        self.a11y = a11y
        self.problems: list[str] = []
        self.images_seen = 0
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        messages = body["messages"]
        task = self._task_of(messages)
        turn = sum(1 for m in messages if m["role"] == "assistant")
        self._check(task["id"], turn, messages)
        reference = list(task["reference"])
        if acts.special(reference[-1]) not in ("DONE", "FAIL"):
            reference.append("DONE")
        action = reference[min(turn, len(reference) - 1)]
        return reply_with_counts(body, self._reply(action))

    def _reply(self, action: Any) -> str:
        special = acts.special(action)
        if special:
            return f"The screen shows the result.\n{special}"
        if self.action_space == "computer_13":
            return f"Next:\n```json\n{json.dumps(action)}\n```"
        code = acts.computer13_to_code(action, WIDTH, HEIGHT)
        return f"Next:\n```python\n{code}\n```"

    def _task_of(self, messages: list[dict]) -> dict:
        first = next(m for m in messages if m["role"] == "user")
        text = " ".join(p.get("text", "") for p in first["content"] if isinstance(p, dict))
        for task in self.tasks:
            if f"Task: {task['instruction']}" in text:
                return task
        raise AssertionError(f"no task's instruction in the first user message: {text[:200]!r}")

    def _check(self, task_id: str, turn: int, messages: list[dict]) -> None:
        where = f"{task_id} turn {turn}"
        last = messages[-1]
        problems = []
        if last["role"] != "user" or not isinstance(last["content"], list):
            problems.append(f"{where}: the last message is not a user message with content parts")
        else:
            texts = [p["text"] for p in last["content"] if p.get("type") == "text"]
            images = [p for p in last["content"] if p.get("type") == "image_url"]
            if not texts or not texts[0].startswith("Task: "):
                problems.append(f"{where}: no text part with the task")
            if len(images) != 1:
                problems.append(f"{where}: {len(images)} image parts, expected 1")
            for image in images:
                problems += [f"{where}: {p}" for p in _png_problems(image)]
            tree = "\n".join(texts)
            if self.a11y and not ("<desktop-frame" in tree and "</desktop-frame>" in tree):
                problems.append(f"{where}: no accessibility tree in the text")
            if not self.a11y and "<desktop-frame" in tree:
                problems.append(f"{where}: an accessibility tree nobody asked for")
        kept = sum(1 for m in messages if isinstance(m.get("content"), list)
                   for p in m["content"] if p.get("type") == "image_url")
        if kept > KEEP_IMAGES:
            problems.append(f"{where}: {kept} screenshots in the conversation")
        with self._lock:
            self.images_seen += 1
            self.problems += problems


def _png_problems(part: dict) -> list[str]:
    """What is wrong with one image part (OpenAI's vision format, a PNG of the screen)."""
    url = (part.get("image_url") or {}).get("url", "")
    prefix = "data:image/png;base64,"
    if not url.startswith(prefix):
        return [f"image url is not a base64 PNG data URL: {url[:40]!r}"]
    try:
        png = base64.b64decode(url[len(prefix):], validate=True)
    except ValueError as exc:
        return [f"image is not valid base64: {exc}"]
    if not png.startswith(b"\x89PNG\r\n\x1a\n") or png[12:16] != b"IHDR":
        return ["image does not decode to a PNG"]
    size = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    return [] if size == (WIDTH, HEIGHT) else [f"screenshot is {size}, not {(WIDTH, HEIGHT)}"]


@pytest.mark.parametrize("action_space, observation_type", [
    ("computer_13", "screenshot_a11y_tree"),
    ("pyautogui", "screenshot"),
])
def test_openai_agent_solves_desktop_tasks_from_screenshots(tmp_path, llm_server, monkeypatch,
                                                            action_space, observation_type):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    tasks = subset()
    model = DesktopModel(tasks, action_space, a11y=observation_type == "screenshot_a11y_tree")
    server = llm_server(policy=model)
    server.models.append("test-vision")  # the model the run gives
    data = write_tasks(tmp_path / "tasks.jsonl", tasks)
    cfg = build_config(dict(
        mode="osworld", data=str(data), agent="openai", base_url=server.url, model="test-vision",
        action_space=action_space, observation_type=observation_type, num_rollouts=2, num_vms=2,
        use_vm_pool=True, output_dir=str(tmp_path / "out"), run_id=action_space, progress=False,
        screen_width=WIDTH, screen_height=HEIGHT, max_turns=10))
    outcome = Runner(cfg).run()
    assert not model.problems, model.problems
    finals = assert_exactly_once(outcome.run_dir, {f"{t['id']}#0" for t in tasks})
    failed = {k: (r["status"], r.get("eval"), r.get("failure")) for k, r in finals.items()
              if r["status"] != "success"}
    assert not failed
    assert outcome.exit_code == 0, outcome.message
    # one request per turn: each reference action (+ DONE where the reference has none)
    turns = sum(len(t["reference"]) + (acts.special(t["reference"][-1]) not in ("DONE", "FAIL"))
                for t in tasks)
    assert len(server.requests) == model.images_seen == turns
    assert {r["body"]["model"] for r in server.requests} == {"test-vision"}


#: an infeasible task of OSWorld's os domain with no config steps: FAIL passes it
INFEASIBLE = ("os", "b3d4a89c-53f2-4d6b-8b6a-541fb5d205fa")


@needs_set
@pytest.mark.parametrize("tag", ["code", "bash", "text"])
def test_a_fenced_block_of_any_tag_is_its_body_as_in_osworld(tmp_path, llm_server, tag):
    """```code\\nFAIL\\n``` is FAIL, as OSWorld's parse_code_from_string reads any tag: the
    fence lines were run as code (a SyntaxError each turn, to --max-turns)."""
    import subprocess
    import sys

    server = llm_server(policy=lambda body: reply_with_counts(
        body, f"The machine has no such device.\n```{tag}\nFAIL\n```"))
    index = tmp_path / "one.json"
    index.write_text(json.dumps({INFEASIBLE[0]: [INFEASIBLE[1]]}))
    done = subprocess.run(
        [sys.executable, "-m", "parallel_rollout", "run", "--mode", "osworld", "--data", str(EXAMPLES),
         "--osworld-index", str(index), "--agent", "openai", "--base-url", server.url, "--max-turns", "2",
         "--num-rollouts", "1", "--output-dir", str(tmp_path / "out"), "--run-id", "r", "--no-progress",
         "--screen-width", "640", "--screen-height", "480"],
        capture_output=True, text=True, timeout=300, env={k: v for k, v in os.environ.items()
                                                         if not k.startswith("OPENAI_")})
    assert done.returncode == 0, done.stderr[-3000:]
    finals = assert_exactly_once(tmp_path / "out" / "r", {f"{INFEASIBLE[1]}#0"})
    record = finals[f"{INFEASIBLE[1]}#0"]
    assert record["status"] == "success" and record["turns"] == 1, record


def test_a_replys_several_actions_run_in_order_as_osworld_runs_them(tmp_path, llm_server):
    """OSWorld runs every fenced block of a reply, and a block whose last line is DONE, FAIL
    or WAIT is its code, then that word. Only the first block ran (a FAIL in a second block
    never came), and a block ending in FAIL ran FAIL as Python (a NameError): an infeasible
    task the model gave up on in its first reply scored 0 after --max-turns turns."""
    two_blocks = {**subset()[2], "id": "gives-up-in-a-second-block"}
    last_line = {**subset()[2], "id": "gives-up-on-the-last-line"}
    replies = {two_blocks["id"]: "Looking first.\n```python\nprint('looking')\n```\nIt cannot be done.\n```\nFAIL\n```",
               last_line["id"]: "```python\nprint('looking')\nFAIL\n```"}
    server = llm_server(policy=lambda body: reply_with_counts(
        body, next(reply for task_id, reply in replies.items() if task_id in json.dumps(body["messages"]))))
    for task in (two_blocks, last_line):  # the id is in the instruction the model sees
        task["instruction"] = f"{task['instruction']} ({task['id']})"
    data = write_tasks(tmp_path / "two.jsonl", [two_blocks, last_line])
    outcome = Runner(build_config(dict(
        mode="osworld", data=str(data), agent="openai", base_url=server.url, action_space="pyautogui",
        num_rollouts=1, max_turns=3, output_dir=str(tmp_path / "out"), run_id="several",
        screen_width=WIDTH, screen_height=HEIGHT, progress=False))).run()
    assert outcome.exit_code == 0, outcome.message
    finals = assert_exactly_once(outcome.run_dir, {f"{t['id']}#0" for t in (two_blocks, last_line)})
    for task in (two_blocks, last_line):
        record = finals[f"{task['id']}#0"]
        assert (record["status"], record["reward"], record["turns"]) == ("success", 1.0, 1), record
        attempt = outcome.run_dir / "trajectories" / task["id"] / "0" / "attempt-0"
        steps = [json.loads(line) for line in (attempt / "traj.jsonl").read_text().splitlines()]
        assert [(s["step_num"], s["action"], s["done"]) for s in steps] == [
            (1, "print('looking')", False), (1, "FAIL", True)], steps
        assert steps[0]["screenshot_file"] is None and (attempt / steps[1]["screenshot_file"]).is_file()
        assert steps[0]["response"] == replies[task["id"]]
