"""py mode: HumanEval through the pool, failure kinds, multi-turn, hostile code in the VM."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import assert_exactly_once, read_results, write_tasks
from parallel_rollout.pool.providers import cgroups
from parallel_rollout.config import build_config
from parallel_rollout.envs.py import build_program, extract_code, load_humaneval
from parallel_rollout.runner import Runner

PROMPT = 'def add(a, b):\n    """Return a + b."""\n'
TEST = "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(-1, 1) == 0\n"
GOOD = "    return a + b\n"


def task(task_id, answers, **extra):
    return {"id": task_id, "mode": "py", "prompt": PROMPT, "entry_point": "add", "test": TEST,
            "canonical_solution": GOOD, "answers": answers, **extra}


def run(tmp_path, tasks, run_id="py", **flags):
    data = write_tasks(tmp_path / f"{run_id}.jsonl", tasks) if isinstance(tasks, list) else tasks
    base = dict(mode="py", data=str(data), agent="py_agents:ScriptedAnswerAgent", num_rollouts=2,
                num_vms=2, use_vm_pool=True, output_dir=str(tmp_path / "out"), run_id=run_id, progress=False)
    base.update(flags)
    return Runner(build_config(base)).run()


# the oracle on all 164 problems through the pool: tests/test_readme_commands.py runs it as the
# README prints it, through ./dev and the CLI


WRONG_AGENT = """
import json, sys
for line in sys.stdin:
    json.loads(line)                      # one observation per line
    print(json.dumps("    return None\\n"), flush=True)   # one action per line
"""


@pytest.mark.slow
def test_humaneval_wrong_body_fails_all_with_failure_kinds(tmp_path):
    script = tmp_path / "wrong_agent.py"
    script.write_text(WRONG_AGENT)
    outcome = run(tmp_path, "humaneval", agent="command", agent_cmd=f"{sys.executable} {script}",
                  num_rollouts=4, num_vms=2)
    finals = assert_exactly_once(outcome.run_dir, {f"{p['task_id']}#0" for p in load_humaneval()})
    assert outcome.summary["successes"] == 0
    kinds = {r["eval"]["kind"] for r in finals.values()}
    assert kinds <= {"assertion", "exception"} and "assertion" in kinds
    some = next(r for r in finals.values() if r["eval"]["kind"] == "assertion")
    assert "AssertionError" in some["eval"]["detail"]


VERDICTS = {
    "passed": "```python\ndef add(a, b):\n    return a + b\n```",
    "syntax_error": "    return a +\n",
    "assertion": "    return a - b\n",
    "exception": "    raise KeyError('boom')\n",
    "timeout": "    while True:\n        pass\n",
    "killed": "    import os; os._exit(9)\n",
}
#: answers that no parse takes, each its syntax_error, graded 0 within the task timeout: code
#: nested too deep for Python's parser (RecursionError, MemoryError: it was the worker's error,
#: a member a trainer's group may drop, so an answer could escape its 0 that way), and prose
#: with 200 imports before the definition and a tail that never parses (the search for its
#: code took minutes, and the attempt ended in its task timeout)
TOO_DEEP = {"too_deep_sum": "def add(a, b):\n    return " + "1+" * 200000 + "1\n",
            "too_deep_minus": "```python\ndef add(a, b):\n    return " + "-" * 100000 + "1\n```\n",
            "imports_then_unclosed": "Sure.\n" + "import os\n" * 200 + "def add(a, b):\n" + "    x = (\n" * 500}

#: answers that pass and leave something running, passed within the task timeout: the judge
#: waited 5 s for the answer's process to end and 5 s more for its output, past the timeout
PASS_LEAVING = {"passed_leaving_a_thread": "    import threading, time\n"
                "    threading.Thread(target=time.sleep, args=(60,)).start()\n    return a + b\n",
                "passed_leaving_a_process": "    import subprocess\n    subprocess.Popen(['sleep', '60'])\n"
                "    return a + b\n"}


def test_failure_kinds_are_recorded(tmp_path):
    answers = {**VERDICTS, **TOO_DEEP, **PASS_LEAVING}
    # 4 s for those that pass: under the judge's old 5 s wait for what they leave, above what a
    # python's start and the test take on a loaded machine (2 s timed one out at load 12)
    tasks = [task(kind, [answer], timeout=4 if kind in PASS_LEAVING else 2) for kind, answer in answers.items()]
    outcome = run(tmp_path, tasks, task_timeout=30)
    finals = assert_exactly_once(outcome.run_dir, {f"{k}#0" for k in answers})
    for name in PASS_LEAVING:
        assert finals[f"{name}#0"]["eval"]["kind"] == "passed", finals[f"{name}#0"]["eval"]
    for name in TOO_DEEP:
        assert finals[f"{name}#0"]["eval"]["kind"] == "syntax_error", finals[f"{name}#0"]
    for kind in VERDICTS:
        assert finals[f"{kind}#0"]["eval"]["kind"] == kind, finals[f"{kind}#0"]["eval"]
        assert finals[f"{kind}#0"]["success"] == (kind == "passed")
    assert "KeyError: 'boom'" in finals["exception#0"]["eval"]["detail"]
    assert "SyntaxError" in finals["syntax_error#0"]["eval"]["detail"]
    assert {r["status"] for k, r in finals.items() if "passed" not in k} == {"failure"}
    # the timed-out VM was reset and reused, not lost
    assert outcome.summary["vm"]["marked_dead"] == 0


def test_tests_that_print_are_graded_by_their_asserts(tmp_path):
    """What a task's tests print goes to the output tail: it went to the judge's stdout before
    the verdict, which no longer parsed ("killed": a right answer failed), and a value the answer
    returned, printed so, was a verdict of its choosing (tests/hostile_leftovers.py's
    verdict_printed_by_the_tests row)."""
    printing = "def check(candidate):\n    print('got', candidate(2, 3))\n    assert candidate(2, 3) == 5\n"
    tasks = [task("right", [GOOD], test=printing), task("wrong", ["    return 4\n"], test=printing)]
    outcome = run(tmp_path, tasks, num_vms=1)
    finals = assert_exactly_once(outcome.run_dir, {"right#0", "wrong#0"})
    assert finals["right#0"]["eval"]["kind"] == "passed", finals["right#0"]["eval"]
    assert finals["right#0"]["eval"]["output_tail"] == "got 5\n"
    assert finals["wrong#0"]["eval"]["kind"] == "assertion", finals["wrong#0"]["eval"]
    assert finals["wrong#0"]["eval"]["output_tail"] == "got 4\n"


#: tests that expect an error for a negative and catch it broadly, as many a task's do
CATCHING = {"except_exception": "except Exception:", "bare_except": "except:"}
CATCHING_TEST = ("def check(candidate):\n    assert candidate(2, 3) == 5\n    try:\n        candidate(-1, 1)\n"
                 "    {}\n        return\n    assert False, 'a negative must raise'\n")
#: name -> (the body of add(), its verdict): an answer whose process ends where the tests expect
#: an error raised is killed, whatever the tests catch
DYING = {"raises": ("    if a < 0:\n        raise ValueError(a)\n    return a + b\n", "passed"),
         "exits": ("    import os\n    if a < 0:\n        os._exit(0)\n    return a + b\n", "killed"),
         "killed_by_a_signal": ("    import os, signal\n    if a < 0:\n        os.kill(os.getpid(), signal.SIGKILL)\n"
                                "    return a + b\n", "killed"),
         "returns": (GOOD, "assertion")}


def test_an_answer_whose_process_dies_is_killed_whatever_the_tests_catch(tmp_path):
    """The answer's death reached the tests as an exception (ChildDied, an Exception), which
    tests expecting an error caught: ``os._exit(0)`` on a negative passed tests that want it to
    raise, as the right answer does. Its process ended, so it is ``killed``, graded 0."""
    tasks = [task(f"{answer}-{catch}", [body], test=CATCHING_TEST.format(clause))
             for catch, clause in CATCHING.items() for answer, (body, _) in DYING.items()]
    outcome = run(tmp_path, tasks, task_timeout=60)
    finals = assert_exactly_once(outcome.run_dir, {f"{t['id']}#0" for t in tasks})
    for catch in CATCHING:
        for answer, (_, kind) in DYING.items():
            record = finals[f"{answer}-{catch}#0"]
            assert record["eval"]["kind"] == kind, (answer, catch, record["eval"])
            assert record["success"] == (kind == "passed"), record


def test_more_turns_see_feedback_and_every_try_is_kept(tmp_path):
    tasks = [task("retry", ["    return a +\n", "    return a - b\n", GOOD])]
    outcome = run(tmp_path, tasks, max_turns=3)
    record = assert_exactly_once(outcome.run_dir, {"retry#0"})["retry#0"]
    assert record["status"] == "success" and record["turns"] == 3 and record["eval"]["tries"] == 3
    turns = [json.loads(l) for l in (outcome.run_dir / record["trajectory"]).read_text().splitlines()]
    assert [t["observation"]["feedback"]["kind"] for t in turns] == ["syntax_error", "assertion", "passed"]
    one_turn = run(tmp_path, tasks, run_id="one")  # default: one try for py
    assert assert_exactly_once(one_turn.run_dir, {"retry#0"})["retry#0"]["eval"]["kind"] == "syntax_error"


def test_vm_is_leased_only_while_code_runs(tmp_path):
    tasks = [task(f"think{i}", [GOOD], think_s=2.0) for i in range(4)]
    outcome = run(tmp_path, tasks, num_rollouts=4, num_vms=1)
    records = read_results(outcome.run_dir)
    assert {r["status"] for r in records} == {"success"}
    busy = sum(r["duration_s"] for r in records)
    leased = outcome.summary["vm"]["leased_s"]
    # four rollouts thought for 2 s each, in parallel, on one VM: the VM was held only
    # for the executions (a judge and the answer's interpreter each), never during the
    # thinking. Each rollout's time is its 2 s of thinking + its lease wait + its
    # execution, so a VM held only for executions was leased at most busy - 8 s; one held
    # while thinking would have been leased 8 s more. (Relative: a loaded machine slows
    # the executions, not this bound.)
    assert busy >= 8.0
    assert leased <= busy - 8.0 + 0.5, (leased, busy)
    # a lease waits only for the other rollouts' executions, never for their thinking
    assert max(r["lease_wait_s"] for r in records) <= leased + 0.5


def host_can_spawn() -> bool:
    return subprocess.run(["true"], timeout=10).returncode == 0


#: name -> (answer, expected verdict, execution timeout: generous where the verdict must
#: come from the limit, not the clock, even on a loaded machine)
HOSTILE = {
    "infinite_loop": ("    while True:\n        pass\n", "timeout", 3),
    "fork_bomb": ("    import os\n    while True:\n        try:\n            os.fork()\n"
                  "        except OSError:\n            pass\n", "timeout", 3),
    # the VM's memory cgroup kills the hog (killed); without one, RLIMIT_AS: a MemoryError
    "memory_hog": ("    blocks = []\n    while True:\n        blocks.append(bytearray(50 * 2**20))\n",
                   "killed" if "memory" in cgroups.available() else "exception", 30),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_code_is_contained(tmp_path, name):
    code, kind, timeout = HOSTILE[name]
    limits = {"vm_memory_mb": 1024}
    if "pids" in cgroups.available():
        limits["vm_max_processes"] = 64
    elif name == "fork_bomb":
        # nothing else bounds it: it would starve the machine (a CI runner's included)
        pytest.skip(f"no pids cgroup to bound it: {cgroups.why_unavailable('pids')}")
    tasks = [task(name, [code], timeout=timeout), task("after", [GOOD])]
    outcome = run(tmp_path, tasks, num_rollouts=1, num_vms=1, **limits)
    finals = assert_exactly_once(outcome.run_dir, {f"{name}#0", "after#0"})
    assert finals[f"{name}#0"]["eval"]["kind"] == kind, finals[f"{name}#0"]["eval"]
    assert finals["after#0"]["status"] == "success"  # the same VM, reset, still works
    assert outcome.summary["vm"]["marked_dead"] == 0
    assert host_can_spawn()


def test_code_that_kills_the_guest_agent_is_graded_and_its_vm_restarted(tmp_path, monkeypatch):
    monkeypatch.setenv("PR_CHAOS_DIR", str(tmp_path))
    # the answer's parent is the judge; the judge's parent is the guest agent
    killer = ("    import os, signal\n"
              "    stat = open(f'/proc/{os.getppid()}/stat').read()\n"
              "    os.kill(int(stat.rsplit(')', 1)[1].split()[1]), signal.SIGKILL)\n")
    tasks = [task("killer", [{"once": killer, "then": GOOD}])]
    outcome = run(tmp_path, tasks, num_rollouts=1, num_vms=1)
    records = read_results(outcome.run_dir)
    if os.geteuid() == 0:
        # as root the code runs as another user than the agent: it cannot kill it
        assert [(r["attempt"], r["status"], r["final"]) for r in records] == [
            (0, "failure", True)]
        assert "PermissionError" in records[0]["eval"]["detail"], records[0]["eval"]
        assert outcome.summary["vm"]["replacements"] == 0
        return
    # the task's doing: graded 0, not retried; its VM restarts without spending the budget
    assert [(r["attempt"], r["status"], r["final"]) for r in records] == [
        (0, "sandbox_violation", True)]
    assert outcome.summary["vm"]["restarts"] == 1 and outcome.summary["vm"]["replacements"] == 0


@pytest.mark.parametrize("answer,expected", [
    ("```python\ndef add(a, b):\n    return a + b\n```", "def add(a, b):\n    return a + b\n"),
    # the block that defines the entry point, after the imports and definitions of the others
    ("Here:\n```py\nimport math\n```\nand\n```python\ndef add(a, b):\n    return 1\n```",
     "import math\n\ndef add(a, b):\n    return 1\n"),
    ("    return a + b\n", "    return a + b\n"),
])
def test_extract_code(answer, expected):
    assert extract_code(answer, "add") == expected


def test_build_program_body_or_whole_function():
    prompt = "from typing import List\n\n\ndef f(xs: List[int]) -> int:\n    \"\"\"doc\"\"\"\n"
    assert build_program(prompt, "    return 1\n", "f") == prompt + "    return 1\n"
    whole = build_program(prompt, "def f(xs: List[int]) -> int:\n    return 1\n", "f")
    assert whole.startswith("from typing import List\n") and whole.count("def f") == 1


class _JudgeExit:
    """A VM whose judge printed a passing verdict and then exited with ``return_code``: what
    /run_python says of a judge killed after its verdict (or ended otherwise than by its own
    os._exit(0))."""

    def __init__(self, return_code):
        self.return_code = return_code

    def lease(self):
        import contextlib

        return contextlib.nullcontext(self)

    def run_python(self, code, **options):
        verdict = {"kind": "passed", "detail": "", "output": "", "returncode": 0}
        return {"status": "success" if self.return_code == 0 else "error", "output": json.dumps(verdict),
                "error": "Killed" if self.return_code else "", "return_code": self.return_code}


@pytest.mark.parametrize("return_code", [0, -9, 1], ids=["exited-0", "killed", "exit-1"])
def test_a_verdict_counts_only_when_its_judge_exited_0(return_code):
    """Defence in depth: the judge ends with os._exit(0) once its verdict is written; a verdict
    beside any other exit status is no verdict (kind "killed", reward 0), whatever it says."""
    from parallel_rollout.envs import get_env
    from parallel_rollout.tasks import Task

    env = get_env("py")(build_config(dict(mode="py", data="humaneval")))
    env.reset(Task("add", "py", task("add", [])), _JudgeExit(return_code))
    env.step(GOOD)
    reward, details = env.evaluate()
    if return_code == 0:
        assert (reward, details["kind"]) == (1.0, "passed"), details
    else:  # before: 1.0, "passed"
        assert (reward, details["kind"]) == (0.0, "killed"), details
        assert f"exit status {return_code}" in details["detail"], details
