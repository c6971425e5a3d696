"""math mode: answer extraction, grading by math-verify (also off the main thread), task
validation, the shipped benchmark checked against itself, and runs through the Runner.

The plugin agents at the bottom are imported by spawned workers as ``test_math:…``, so this
module imports nothing from conftest (that would make a sandbox folder in every worker).
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from parallel_rollout.agents import Agent
from parallel_rollout.config import build_config
from parallel_rollout.envs import task_validators
from parallel_rollout.envs.math import MathEnv, extract_answer, grade
from parallel_rollout.envs.math_grader import close_graders
from parallel_rollout.runner import Runner
from parallel_rollout.tasks import Task, load_tasks

MATH_TASKS = Path(__file__).resolve().parent.parent / "benchmarks" / "math_tasks.jsonl"


@pytest.fixture(autouse=True, scope="module")
def stop_graders():
    """Grading in this process starts grader processes (math-verify's import: seconds each),
    kept for the module's next gradings (the leak check allows them); stopped at its end."""
    yield
    close_graders()

#: reply -> (extracted answer, how it was found)
EXTRACTION = {
    "so $\\boxed{\\frac{1}{2}}$": ("\\frac{1}{2}", "boxed"),
    "nested: \\boxed{\\frac{\\sqrt{3}}{\\sqrt{2}}} done": ("\\frac{\\sqrt{3}}{\\sqrt{2}}", "boxed"),
    "first \\boxed{1}, on reflection \\boxed{2}": ("2", "boxed"),
    "a set \\boxed{\\{1, 2\\}}": ("\\{1, 2\\}", "boxed"),
    "no braces: \\boxed 12.": ("12", "boxed"),
    "\\fbox{7}": ("7", "boxed"),
    "complete \\boxed{4} then cut off \\boxed{5": ("4", "boxed"),
    "Work...\nAnswer: $x^2+1$": ("x^2+1", "answer_line"),
    "Work...\n**Final answer:** 42.": ("42", "answer_line"),
    "The answer is 5.": ("5", "answer_line"),
    "Answer: $\\frac{1}{2}$.": ("\\frac{1}{2}", "answer_line"),
    "Answer: $5$ or $6$": ("5, 6", "answer_line"),  # both named: its last alone was a hedge
    "Answer: the width is 12 cm": ("12", "answer_line"),
    "\\frac{1}{2}": ("\\frac{1}{2}", "formula"),
    "$(-\\infty, 2]$": ("(-\\infty, 2]", "formula"),
    "-3": ("-3", "formula"),
    "I get 3 apples, then 4,000 pears": ("4000", "last_number"),
    "There are 1 000 apples.": ("1000", "last_number"),  # digits in threes: one number (was 000)
    "So 1 000 000 in all.": ("1000000", "last_number"),
    "There are 1\u2009000 or so": ("1000", "last_number"),
    "It takes between 1 000 and 2 000.": ("2000", "last_number"),
    "It is 3 4 here": ("4", "last_number"),  # not in threes: two numbers
    "In 2019 100 people came": ("100", "last_number"),
    "so x is -7 or so": ("-7", "last_number"),
    "it is 3/4 of the way": ("3/4", "last_number"),
    "the distance is about 2.5e6 m": ("2.5e6", "last_number"),
    "Answer: the mass is 1.2e-3 kg": ("1.2e-3", "answer_line"),
    "I have no idea.": (None, None),
    "": (None, None),
}


@pytest.mark.parametrize("reply", sorted(EXTRACTION))
def test_extraction(reply):
    assert extract_answer(reply) == EXTRACTION[reply]


#: (task's answer, extracted answer, whether they agree)
GRADING = [
    ("1/2", "0.5", True),
    ("1/2", "\\frac{1}{2}", True),
    ("1/2", "\\dfrac12", True),
    ("0.5", "\\frac{1}{2}", True),
    ("2\\sqrt{3}", "\\sqrt{12}", True),
    ("2\\sqrt{3}", "2*sqrt(3)", True),
    ("x^2+1", "1+x^2", True),
    ("x^2+1", "x**2+1", True),
    ("\\frac{\\pi}{4}", "\\pi/4", True),
    ("(-\\infty, 2]", "(-\\infty,2]", True),
    ("[1, 3)", "[1,3)", True),
    ("\\{-1, 0, 1\\}", "\\{1, -1, 0\\}", True),
    ("(7, 3)", "(7,3)", True),
    ("5", "5.0", True),
    ("-3", "-3", True),
    # Decimals count to six places: a rounded 1/3 is not 1/3.
    ("1/3", "0.333333", True),
    ("1/3", "0.33", False),
    ("\\frac{1}{2}", "2", False),
    ("[1, 3]", "(1, 3]", False),
    ("[1, 3)", "[1, 3]", False),
    ("x^2+1", "x^2-1", False),
    ("-3", "3", False),
    ("\\{-1, 0, 1\\}", "\\{-1, 1\\}", False),
    ("(7, 3)", "(3, 7)", False),
    # e-notation is a power of ten (math-verify reads a small e as Euler's number: 1e3 was 3e),
    # a closing decimal point is the number's (math-verify could not parse 5.); neither makes
    # a near miss, a different number or two answers right
    ("1000", "1e3", True),
    ("1000", "1e+3", True),
    ("0.001", "1e-3", True),
    ("2500", "2.5e3", True),
    ("1e-05", "0.00001", True),  # a task's answer 0.00001 (a JSON number), as Python writes it
    ("5", "5.", True),
    ("-5", "-5.", True),
    ("(5, 6)", "(5., 6.)", True),
    ("1/2", "\\frac{1.}{2.}", True),
    # a thin space parts digits in threes (MATH writes 10\,000): no product; spaces alone, no sum
    ("1000", "1\\,000", True),
    ("10\\,000", "10000", True),
    ("1000000", "1\\,000\\,000", True),
    ("12345.678", "12\\,345.678", True),
    ("1", "1\\,000", False),
    ("100", "1\\,00", False),
    ("11", "5 6", False),
    ("56", "5 6", False),
    ("2e - 1", "2e-1", True),  # beside Euler's number, 2e-1 stays 2e - 1
    # e-notation in a longer answer is a power of ten too (math-verify read 2e5+1 as 10e + 1)
    ("200001", "2e5+1", True),
    ("2e5+1", "200001", True),
    ("100000", "\\frac{2e5}{2}", True),
    ("1.0015", "1.5e-3 + 1", True),
    ("(200000, 3)", "(2e5, 3)", True),
    ("10e + 1", "2e5+1", False),
    ("10e", "2e5", False),
    ("200002", "2e5+1", False),
    ("3e + 1", "e + 2e+1", True),  # beside Euler's number, 2e+1 in a sum stays 2e + 1
    ("2e^{5}+1", "2e^5+1", True),
    ("1001", "1e3", False),
    ("1000", "2.5e3", False),
    ("5", "5.5", False),
    ("5", "5, 6.", False),
    ("6", "5., 6.", False),
]


@pytest.mark.parametrize("expected, answer, correct", GRADING)
def test_grading(expected, answer, correct):
    result = grade(expected, answer)
    assert result["correct"] is correct, result
    assert result["reason"] == ("correct" if correct else "wrong")


def test_grading_off_the_main_thread():
    """math-verify's own timeouts need the main thread; envs run on worker threads."""
    results = []
    thread = threading.Thread(target=lambda: results.append(grade("\\frac{1}{2}", "0.5")))
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert results == [{"correct": True, "reason": "correct", "parsed": "1/2"}]


def test_a_ruinous_answer_times_out_on_a_thread():
    """Ten characters that sympy would spend hours on: the grader is killed."""
    results = []
    started = time.monotonic()
    thread = threading.Thread(target=lambda: results.append(grade("5", "9^{9^{9}}", timeout_s=1.0)))
    thread.start()
    thread.join(timeout=30)
    assert results and results[0]["reason"] == "timeout", results
    assert time.monotonic() - started < 10
    # The grader still works after a kill.
    assert grade("5", "5")["correct"]


def test_an_overlong_answer_is_not_graded():
    result = grade("1", "1+" * 600 + "0")
    assert result == {"correct": False, "reason": "answer_too_long"}


#: a bad payload -> text its error must contain
BAD_TASKS = [
    ({"answer": "1"}, "'problem'"),
    ({"problem": 3, "answer": "1"}, "'problem' must be a string, got 3"),
    ({"problem": "  ", "answer": "1"}, "'problem' must not be empty"),
    ({"problem": "p"}, "'answer'"),
    ({"problem": "p", "answer": None}, "'answer' must be a string or a number, got null"),
    ({"problem": "p", "answer": True}, "'answer' must be a string or a number, got true"),
    ({"problem": "p", "answer": ""}, "'answer' must not be empty"),
    ({"problem": "p", "answer": float("nan")}, "'answer' must be a finite number"),
    ({"problem": "p", "answer": "\\frac{1}{2"}, "'answer' has unbalanced braces"),
    ({"problem": "p", "answer": "1" * 2000}, "'answer' is longer than"),
]


@pytest.mark.parametrize("payload, message", BAD_TASKS)
def test_validation_names_the_field(payload, message):
    with pytest.raises(ValueError, match=message.replace("\\", "\\\\").replace("(", "\\(")):
        MathEnv.validate_task(payload)


@pytest.mark.parametrize("answer", ["3", 3, -2.5, "\\frac{1}{2}", "(-\\infty, 2]"])
def test_validation_accepts(answer):
    MathEnv.validate_task({"problem": "p", "answer": answer})


def make_env(**flags) -> MathEnv:
    return MathEnv(build_config({"mode": "math", **flags}))


def episode(env: MathEnv, answer, *actions):
    """Reset on a one-off task, play ``actions``; (reward, details, step results)."""
    env.reset(Task(id="t", mode="math", payload={"problem": "p", "answer": answer}), None)
    steps = [env.step(action) for action in actions]
    reward, details = env.evaluate()
    return reward, details, steps


#: action -> reason in the details; none of them may raise (None may: no mode takes it for an
#: action, tests/test_plugins_actions.py)
GARBAGE = [
    ({"foo": 1}, "no_answer"),
    (["\\boxed{7}"], "no_answer"),
    (b"\\boxed{7}", "no_answer"),
    ("", "no_answer"),
    ("I will not answer.", "no_answer"),
    ("\\boxed{}", "no_answer"),
    ("\\boxed{" + "{" * 5000, "no_answer"),
    ("\\boxed{" + "x" * 5000 + "}", "answer_too_long"),
    ("\\boxed{\\frac{}{}}", "unparseable"),
    ("\\boxed{1/0}", "wrong"),
    ("\\boxed{0}", "wrong"),
]


@pytest.mark.parametrize("action, reason", GARBAGE, ids=[repr(a)[:30] for a, _ in GARBAGE])
def test_garbage_scores_zero_with_a_reason(action, reason):
    reward, details, steps = episode(make_env(), "7", action)
    assert reward == 0.0
    assert details["reason"] == reason, details
    assert details["expected"] == "7" and details["tries"] == 1
    assert steps[-1].done


@pytest.mark.parametrize("action", [{"answer": "7"}, {"answer": 7}, {"content": "so \\boxed{7}"}, 7.0,
                                    "Final answer: 7"])
def test_accepted_action_shapes(action):
    reward, details, _ = episode(make_env(), 7, action)
    assert reward == 1.0, details


@pytest.mark.parametrize("answer, reply", [(0.00001, "\\boxed{0.00001}"), (1e20, "$\\boxed{10^{20}}$"),
                                           (1000, "\\boxed{1e3}"), (5, "so \\boxed{5.}")])
def test_a_number_answer_grades_the_same_number_correct(answer, reply):
    """A task's answer given as a JSON number is graded as that number (0.00001 reached the grader
    as Python writes it, 1e-05, which math-verify read as e - 5), and a reply's e-notation or
    closing decimal point is the number it writes."""
    reward, details, _ = episode(make_env(), answer, reply)
    assert reward == 1.0, details


def test_one_answer_ends_the_episode_by_default():
    env = make_env()
    reward, details, steps = episode(env, "7", "\\boxed{6}")
    assert steps[0].done and "feedback" not in steps[0].observation
    assert reward == 0.0 and details["extracted"] == "6" and details["method"] == "boxed"


def test_explicit_max_turns_allows_retries_with_feedback():
    env = make_env(max_turns=3)
    reward, details, steps = episode(env, "7", "\\boxed{6}", "no idea", "\\boxed{7}")
    assert [s.done for s in steps] == [False, False, True]
    assert [s.observation.get("feedback") for s in steps] == ["incorrect", "no answer found", None]
    assert reward == 1.0 and details["tries"] == 3
    # Out of tries: the last wrong answer ends the episode.
    reward, details, steps = episode(env, "7", "1", "2", "3")
    assert [s.done for s in steps] == [False, False, True] and reward == 0.0


def test_every_shipped_task_grades_its_own_answer():
    """The oracle's reply to each benchmark task is graded correct: the benchmark is consistent."""
    tasks = load_tasks(MATH_TASKS, default_mode="math", validators=task_validators())
    assert len(tasks) >= 50
    env = make_env()
    wrong = {}
    for task in tasks:
        env.reset(task, None)
        (reply,) = MathEnv.reference_actions(task)
        env.step(reply)
        reward, details = env.evaluate()
        if reward != 1.0:
            wrong[task.id] = details
    assert not wrong


def run(tmp_path, **flags):
    base = dict(mode="math", data=str(MATH_TASKS), agent="oracle", num_rollouts=2, progress=False,
                output_dir=str(tmp_path / "out"), run_id="m")
    base.update(flags)
    return Runner(build_config(base)).run()


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines() if line.strip()]


def test_oracle_run_solves_every_task_without_a_pool(tmp_path):
    outcome = run(tmp_path)
    total = sum(1 for line in MATH_TASKS.read_text().splitlines() if line.strip())
    assert outcome.exit_code == 0, outcome.message
    assert outcome.summary["successes"] == total >= 50
    assert outcome.summary["status_counts"] == {"success": total}
    assert outcome.summary["vm"] is None
    assert all(r["vm"] is None and r["eval"]["reason"] == "correct" for r in records(outcome.run_dir))


#: task number -> the reply of a model repeating itself to its token limit, in place of the
#: agent's own: each is searched in time linear in its length, and graded as the others (every
#: unclosed group was read to the end, and a run of spaces split two ways: minutes each, and
#: the attempt ended in its task timeout instead)
DEGENERATE = {1: "\\boxed{" * 12000, 3: "The answer" + " " * 50000 + "?", 2: "\\(" * 60000 + " so it is 0"}


class WrongAnswerAgent(Agent):
    """Answers \\boxed{0} to even-numbered tasks and rambles without an answer to odd ones
    (some of them at length: DEGENERATE)."""

    def reset(self, task) -> None:
        self.number = int(task.id.rsplit("-", 1)[-1])

    def act(self, observation):
        if self.number in DEGENERATE:
            return DEGENERATE[self.number]
        return "I am not sure what to say here." if self.number % 2 else "Easy: $\\boxed{0}$."


def test_wrong_answers_score_zero_with_reasons(tmp_path):
    lines = MATH_TASKS.read_text().splitlines()[:10]
    data = tmp_path / "ten.jsonl"
    data.write_text("\n".join(lines) + "\n")
    outcome = run(tmp_path, data=str(data), agent="test_math:WrongAnswerAgent", task_timeout=20)
    assert outcome.exit_code == 0, outcome.message
    assert outcome.summary["successes"] == 0
    assert outcome.summary["status_counts"] == {"failure": 10}
    evals = {r["task_id"]: r["eval"] for r in records(outcome.run_dir)}
    assert len(evals) == 10 and {int(t.rsplit("-", 1)[-1]) for t in evals} >= set(DEGENERATE)
    for task_id, details in evals.items():
        if int(task_id.rsplit("-", 1)[-1]) % 2:
            assert details["reason"] == "no_answer" and details["extracted"] is None, details
        else:
            assert details["reason"] == "wrong" and details["extracted"] == "0", details
        assert details["expected"] and details["tries"] == 1


@pytest.mark.slow
def test_envs_per_worker_without_a_pool_is_fine_for_a_mode_without_vms(tmp_path):
    """--envs-per-worker needs --use-vm-pool only where VMs exist; math has none."""
    from parallel_rollout.config import build_config
    from parallel_rollout.runner import Runner

    outcome = Runner(build_config(dict(
        mode="math", data=str(MATH_TASKS), agent="oracle", num_rollouts=1, envs_per_worker=4,
        limit=8, output_dir=str(tmp_path), run_id="k4", progress=False))).run()
    assert outcome.exit_code == 0 and outcome.summary["successes"] == 8
