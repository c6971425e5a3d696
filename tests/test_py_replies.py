"""py mode: a model's reply as real models write it, through the CLI and the openai agent.

HumanEval's own check runs ``prompt + completion``: the functions a prompt gives
(HumanEval/10's ``is_palindrome``, /32's ``poly``, /38's ``encode_cyclic``, /50's
``encode_shift``) are there for the answer to call. A chat model answers with the whole
function, often with prose (around a fenced block, or around the bare code), a shell block
before the code, a helper in a block of its own or an indented fence in a list: each such
correct answer must pass, as the package's check passes it.
"""

from __future__ import annotations

import shutil

import pytest
from click.testing import CliRunner

from conftest import read_results, write_tasks
from llm_server import first_user_message, llm_server, reply_with_counts  # noqa: F401 - fixture
from parallel_rollout.cli import main
from parallel_rollout.envs.py import load_humaneval

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")

#: the HumanEval problems whose prompt defines a function besides the entry point
WITH_HELPERS = ("HumanEval/10", "HumanEval/32", "HumanEval/38", "HumanEval/50")


def _signature(problem: dict) -> str:
    return next(line for line in problem["prompt"].splitlines() if line.startswith(f"def {problem['entry_point']}("))


def _whole(problem: dict) -> str:
    return f"{_signature(problem)}\n{problem['canonical_solution']}"


def _indented(code: str, by: str = "   ") -> str:
    return "\n".join(by + line if line else line for line in code.splitlines())


#: reply styles: (name, reply of a problem); each holds a correct answer
STYLES = [
    ("whole function in prose", lambda p: f"Here is the solution:\n\n```python\n{_whole(p)}```\n\nIt works because …"),
    ("a bash block first", lambda p: f"No packages are needed:\n```bash\npython3 --version\n```\n"
                                     f"The function:\n```python\n{_whole(p)}```\n"),
    ("helper in its own block", lambda p: f"A helper:\n```python\nimport math\n\ndef _noop():\n    pass\n```\n"
                                          f"Then:\n```python\n{_signature(p)}\n    _noop()\n{p['canonical_solution']}```\n"
                                          "Usage:\n```python\nprint(_noop())\n```"),
    ("fence in a list item", lambda p: f"1. The code:\n   ```python\n{_indented(_whole(p))}\n   ```\n2. Done."),
    ("no fence, prose around", lambda p: f"Here is the completed function:\n\n{_whole(p)}\n"
                                          f"It returns what the docstring asks for, e.g. {p['entry_point']}(…)."),
    ("a draft in <think>", lambda p: f"<think>\n```python\ndef {p['entry_point']}(*args):\n    return None\n```\n"
                                      f"</think>\n```python\n{_whole(p)}```"),
]


def test_correct_replies_in_the_shapes_models_write_pass_as_humaneval_passes_them(tmp_path, llm_server, monkeypatch):  # noqa: F811
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    problems = {p["task_id"]: p for p in load_humaneval()}
    replies = dict(STYLES)
    tasks = [{**problems[task_id], "id": f"{task_id} ({style})", "mode": "py",
              # a comment names the style to the server; the prompt stays the problem's
              "prompt": f"# reply style: {style}\n" + problems[task_id]["prompt"]}
             for style in replies for task_id in WITH_HELPERS + ("HumanEval/0",)]

    def policy(body):
        first = first_user_message(body)
        style = next(name for name in replies if f"# reply style: {name}\n" in first)
        problem = next(p for p in problems.values() if p["prompt"] in first)
        return reply_with_counts(body, replies[style](problem))

    data = write_tasks(tmp_path / "replies.jsonl", [{k: v for k, v in t.items() if k != "task_id"} for t in tasks])
    server = llm_server(policy=policy)
    result = CliRunner().invoke(main, ["run", "--mode", "py", "--data", str(data), "--agent", "openai",
                                       "--base-url", server.url, "--model", "m", "--num-rollouts", "1",
                                       "--num-vms", "1", "--use-vm-pool", "--output-dir", str(tmp_path / "out"),
                                       "--run-id", "replies", "--no-progress"])
    records = read_results(tmp_path / "out" / "replies")
    failed = {r["task_id"]: (r["eval"]["kind"], r["eval"]["detail"][-300:]) for r in records if not r["success"]}
    assert not failed, failed
    assert len(records) == len(tasks) and result.exit_code == 0, result.output[-2000:]
