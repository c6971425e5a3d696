"""``math`` mode: a problem, one answer in the reply, graded by math-verify; no VM.

A task: ``problem`` (text, LaTeX allowed) and ``answer`` (LaTeX or plain: ``\\frac{1}{2}``,
``2\\sqrt{3}``, ``[1,3)``, ``x^2+1``, or a number). The agent replies with text; the env
takes one final answer out of it and grades it against the task's answer::

    reply ─► extract: the last \\boxed{…}/\\fbox{…} (nested braces; "\\boxed 5" too)
                    ─► else the last "Answer:" / "Final answer:" / "answer is" line
                       (numbers it offers as alternatives, "3 or 4", are all its answer)
                    ─► else the whole reply when it is one short formula (words in its
                       \\text{} and its environments' names are no prose: ``5 \\text{ cm}``)
                    ─► else its last line when that is one formula, in $…$ (or \\[…\\])
                       or bare with a number, a command or a choice's letter in it
                    ─► else the formula in $…$ (or \\(…\\)) that holds the last number
                       (in math delimiters letters are math, ``$x^2 + xy$``, but "or" is not)
                    ─► else the last number in the reply (the numbers of its line, when
                       that line offers them as alternatives)
          ─► grade:  math-verify parse(answer), parse(extracted), verify(gold, pred)
                     in a grader process with a deadline  ─► reward 1.0 / 0.0 + details

So ``1/2``, ``0.5``, ``\\frac{1}{2}`` and ``\\dfrac12`` agree; decimals count when they match
to six places and to a thousandth of the answer's size (``0.333333`` is 1/3, ``0.33`` is not,
``0.0`` is no 1/2^30: ``math_answers``); intervals keep their brackets; ``1e3``
is 1000 and ``5.`` is 5 (``math_reading``: math-verify alone read 3e and nothing); ``3\\%``
is 0.03 where the problem speaks of no percent and 3 where it does, one reading, never both,
the task's answer's too; ``\\text{3}4`` is 34 and ``3 \\text{ (or 4)}``
3 or 4 (math-verify read 3 \\cdot 4 and 3); ``3\\;4`` is two numbers and
``\\phantom{4}3`` is 3 (math-verify read both as 7: each answer, the task's and the reply's, is read
alike first, ``math_reading``), and an equation that
sets two different numbers equal (``3 = 4``) is wrong, whatever its right side, as is a
negation math-verify drops (``\\neq 3`` was 3), and two numbers joined by a relation
math-verify keeps one side of (``3 \\approx 4`` was 3, ``3 \\vee 4`` 4; an approximation holds
to its places, ``\\pi \\approx 3.14``: ``math_answers``).

The grade runs in a grader process with a deadline (``math_grader``: why a process, and why
not a fork of the threaded worker). A short answer can still be ruinous — ``9^{9^{9}}`` is
ten characters and sympy will try to compute it — so a length cap alone would not do; the
cap (``MAX_ANSWER_CHARS``) only keeps details small and spares the grader junk. math-verify
comes with the ``[math]`` extra: a run of this mode without it is refused before it starts.

Turns: one answer ends the episode (``default_max_turns = 1``). With an explicit
``--max-turns N`` > 1 a wrong or missing answer gets ``feedback`` ("incorrect" or "no
answer found") and the agent may answer again, up to N tries; the last try is graded.
A reply with no answer, garbage or an unparseable answer scores 0 with the reason in the
details; nothing the agent sends makes the env raise.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Any, Mapping

from .base import Env, StepResult, reject_none, require
from .math_grader import DEFAULT_GRADE_TIMEOUT_S, INSTALL_HINT, grade_isolated
from .math_reading import ALTERNATIVES, NUMBER, TEXT_COMMANDS, braced, read_answer, unwrap, written_numbers

#: longest extracted answer that is graded; longer ones score 0 without a grade
MAX_ANSWER_CHARS = 1000

_BOX = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
# "Answer: 5", "**Final answer:** $5$", "The answer is 5." — the rest of the line is the answer.
# (One run of spaces before the colon: two in a row made a reply of "answer" and 10,000 spaces
# take seconds to search, 20,000 half a minute.)
_ANSWER_LINE = re.compile(r"(?:final\s+answer|answer)\s*(?:\*\*\s*)?(?::|is\b)\s*(?:\*\*)?(.*)$",
                          re.IGNORECASE | re.MULTILINE)
#: the math delimiters, openers and closers ($$…$$, $…$, \\(…\\), \\[…\\]), in the order they are tried
_DELIMITERS = (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))
_OPENER = re.compile(r"\$|\\[(\[]")
#: what a brace group is made of: an escaped character (``\\{`` is a literal brace), a brace
_BRACE_TOKEN = re.compile(r"\\.|[{}]", re.DOTALL)
_TOKEN = re.compile(r"[^\s$]+")
_WORD = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{2,}")
#: words a bare formula may contain without being prose
_FORMULA_WORDS = frozenset({"sqrt", "pi", "inf", "infty", "oo", "sin", "cos", "tan", "cot", "sec", "csc",
                            "log", "ln", "exp", "arcsin", "arccos", "arctan"})
#: where a formula shows words that are no prose: its text (``5 \\text{ cm}``, ``\\text{Monday}``,
#: ``7 \\text{ (mod } 9)``) and the names of its environments (``\\begin{pmatrix}``)
_SHOWN_WORDS = re.compile(rf"\\(?:{TEXT_COMMANDS}|operatorname|begin|end)\s*\{{[^{{}}]*\}}")
#: a line that a bare formula answers on: it writes a number, a command or a choice's letter (``C``, ``(B)``)
_ANSWERS = re.compile(r"\d|\\[A-Za-z]|^\(?[A-Z]\)?$")


def _closing_braces(text: str) -> dict[int, int]:
    """Where each brace group of ``text`` that closes closes: ``{`` index -> ``}`` index, in one
    pass, as :func:`math_reading.braced` finds them one by one (which, for each of many unclosed boxes,
    read to the end: a 70 KB reply of ``\\boxed{`` took 74 s)."""
    closes: dict[int, int] = {}
    opened: list[int] = []
    for token in _BRACE_TOKEN.finditer(text):
        if token.group() == "{":
            opened.append(token.start())
        elif token.group() == "}" and opened:
            closes[opened.pop()] = token.start()
    return closes


def _last_boxed(text: str) -> str | None:
    """The content of the last complete ``\\boxed``/``\\fbox`` in ``text``."""
    closes = None
    for match in reversed(list(_BOX.finditer(text))):
        rest = match.end()
        while rest < len(text) and text[rest] in " \t":
            rest += 1
        if rest < len(text) and text[rest] == "{":
            closes = _closing_braces(text) if closes is None else closes
            content = text[rest + 1:closes[rest]] if rest in closes else None
        else:
            # "\boxed 12": LaTeX would box one token, but a model means the whole number.
            token = _TOKEN.match(text, rest)
            content = token.group(0).rstrip(".,;") if token else None
        if content and content.strip():
            return content.strip()
    return None


def _is_formula(text: str, delimited: bool = False) -> bool:
    """One short line with no prose words: the reply is the answer itself. Written in math
    delimiters (``delimited``), its letters are math (``$x^2+xy$``, ``$2RC+R+C$``: their last
    number, 2, was taken), save the words that offer alternatives (``$3 or 4$``)."""
    # An empty or unclosed \boxed is a failed answer, not a formula.
    if not text or "\n" in text or len(text) > 200 or _BOX.search(text):
        return False
    words = _WORD.findall(_SHOWN_WORDS.sub(" ", text))
    if delimited:
        return not any(ALTERNATIVES.fullmatch(word) for word in words)
    return all(word.lower() in _FORMULA_WORDS for word in words)


def _delimited(fragment: str, formula: str) -> bool:
    """Whether ``formula``, unwrapped from ``fragment``, was written in math delimiters."""
    return formula != fragment.replace("**", "").strip().rstrip(".").strip()


def _last_number(text: str) -> str | None:
    numbers = written_numbers(text)
    return numbers[-1] if numbers else None


def _alternatives(fragment: str) -> str | None:
    """The different numbers of a prose ``fragment`` that offers them as alternatives ("3 or 4",
    "either", "3, maybe 4"), as a list: its last number alone (4) let a reply answer twice."""
    if not ALTERNATIVES.search(fragment):
        return None
    values: dict[Fraction | str, str] = {}
    for number in written_numbers(fragment):
        numerator, _, denominator = number.partition("/")
        try:
            values.setdefault(Fraction(numerator) / Fraction(denominator or 1), number)
        except ZeroDivisionError:  # 1/0: no value, but a number written
            values.setdefault(number, number)
    return ", ".join(values.values()) if len(values) > 1 else None


def _formula_of_last_number(text: str) -> str | None:
    """The formula in math delimiters that holds the reply's last number, when it is one
    ("The probability is $\\frac{1}{2}$.": ``\\frac{1}{2}``, not its last number 2)."""
    numbers = list(NUMBER.finditer(text))
    if not numbers:
        return None
    at = numbers[-1].start()
    for start, end, inner in _formulas(text):
        if start < at < end and _is_formula(inner.strip(), delimited=True):
            return inner.strip()
    return None


def _formulas(text: str):
    """``(start, end, inner)`` of each formula in math delimiters, left to right: each opener
    with the nearest closer after one character at least, none nested (what a regular
    expression's search gives, ``\\$\\$(.+?)\\$\\$|\\$(.+?)\\$|…``), in linear time: a closer's
    place is looked for again only past where it was found (the search for each of many
    unclosed ``\\(`` read to the end: a 40 KB reply of them took 20 s)."""
    found: dict[str, int] = {}  # closer -> its next place from the last look (-1: none after it)
    pos = 0
    while (opener := _OPENER.search(text, pos)) is not None:
        start = pos = opener.start()
        for left, right in _DELIMITERS:
            if not text.startswith(left, start):
                continue
            begin = start + len(left)
            if right not in found or -1 < found[right] < begin + 1:
                found[right] = text.find(right, begin + 1)
            if found[right] != -1:
                yield start, found[right] + len(right), text[begin:found[right]]
                pos = found[right] + len(right)
                break
        else:
            pos = start + 1


def _last_formula_line(reply: str) -> str | None:
    """The reply's last line when it is one formula: wholly in math delimiters, or bare and writing
    a number, a command or a choice's letter ("…\\n$\\frac{1}{2}$", whose last number was 2;
    "…\\n$\\infty$" and "…\\nC", which hold none; not "…\\n---")."""
    line = next((line for line in reversed(reply.splitlines()) if line.strip()), "")
    formula = unwrap(line)
    if _delimited(line, formula):
        return formula if _is_formula(formula, delimited=True) else None
    return formula if _is_formula(formula) and _ANSWERS.search(formula) else None


def extract_answer(reply: str) -> tuple[str | None, str | None]:
    """(final answer, how it was found) from a reply; (None, None) when it has none."""
    boxed = _last_boxed(reply)
    if boxed is not None:
        return boxed, "boxed"
    lines = [m.group(1) for m in _ANSWER_LINE.finditer(reply) if unwrap(m.group(1))]
    if lines:
        fragment = unwrap(lines[-1])
        # "Answer: the width is 12 cm" — prose on the answer line: keep its number (or the
        # formula that holds it: "Answer: the probability is $\frac{1}{2}$")
        if not _is_formula(fragment, _delimited(lines[-1], fragment)) and _last_number(fragment) is not None:
            found = _alternatives(fragment) or _formula_of_last_number(fragment) or _last_number(fragment)
            return found, "answer_line"
        return fragment, "answer_line"
    whole = unwrap(reply)
    if _is_formula(whole):
        return whole, "formula"
    line = _last_formula_line(reply)
    if line is not None:
        return line, "last_line"
    # the last line that holds a number, where it offers numbers as alternatives ("3 or 4")
    last_line = next((line for line in reversed(reply.splitlines()) if NUMBER.search(line)), "")
    alternatives = _alternatives(last_line)
    if alternatives is not None:
        return alternatives, "last_number"
    formula = _formula_of_last_number(reply)
    if formula is not None:
        return formula, "last_formula"
    number = _last_number(reply)
    if number is not None:
        return number, "last_number"
    return None, None


def grade(expected: str, extracted: str, timeout_s: float = DEFAULT_GRADE_TIMEOUT_S,
          problem: str = "") -> dict[str, Any]:
    """``{"correct": bool, "reason": ...}`` for an extracted answer to ``problem``; safe on any
    thread, bounded by ``timeout_s``; raises only ``GraderKilled`` (its grader killed from
    outside: retried)."""
    if len(extracted) > MAX_ANSWER_CHARS:
        return {"correct": False, "reason": "answer_too_long"}
    answer = read_answer(extracted, expected, problem)
    return grade_isolated(read_answer(expected, extracted, problem), answer, timeout_s)


def _reply_text(action: Any) -> tuple[str | None, bool]:
    """(text, whether it is the answer itself rather than a reply to search) of an action."""
    if isinstance(action, dict):
        if "answer" in action:
            action, direct = action["answer"], True
        else:
            action, direct = action.get("content"), False
    else:
        direct = False
    if isinstance(action, bool) or action is None:
        return None, direct
    if isinstance(action, (int, float)):
        return str(action), True
    return (action, direct) if isinstance(action, str) else (None, direct)


class MathEnv(Env):
    """Math problems whose answers are graded by math-verify; no VM."""

    name = "math"
    vm_scope = None
    default_max_turns = 1
    #: seconds one grade may take; an instance attribute can shrink it
    grade_timeout_s = DEFAULT_GRADE_TIMEOUT_S

    #: the gold answer and the columns math datasets keep it or its worked solution in: MATH's,
    #: MATH-500's, NuminaMath's and DeepScaleR's ``solution`` (which ends in the \boxed answer),
    #: verl's ``reward_model`` (its ground truth) and ``extra_info`` (its gsm8k preprocessing
    #: keeps the solution there), OpenMathInstruct's ``expected_answer`` and ``generated_solution``
    answer_fields = frozenset({"answer", "solution", "extra_info", "reward_model", "ground_truth",
                               "expected_answer", "generated_solution"})
    task_fields = frozenset({"problem", "data_source", "ability"}) | answer_fields  # verl's columns too
    seed_is_secret = False  # nothing in a math episode draws on it

    @staticmethod
    def validate_task(payload: Mapping[str, Any]) -> None:
        """problem is a non-empty string; answer a non-empty string or a finite number."""
        require(payload, "problem", str)
        if not payload["problem"].strip():
            raise ValueError("field 'problem' must not be empty")
        require(payload, "answer", (str, int, float))
        answer = payload["answer"]
        if isinstance(answer, float) and not math.isfinite(answer):
            raise ValueError(f"field 'answer' must be a finite number, got {answer!r}")
        if isinstance(answer, str):
            if not answer.strip():
                raise ValueError("field 'answer' must not be empty")
            if len(answer) > MAX_ANSWER_CHARS:
                raise ValueError(f"field 'answer' is longer than {MAX_ANSWER_CHARS} characters")
            # The oracle's reply is \boxed{answer}: unbalanced braces would cut it short.
            if braced("{" + answer + "}", 0) != answer:
                raise ValueError(f"field 'answer' has unbalanced braces: {answer!r}")

    @classmethod
    def prepare_run(cls, tasks) -> None:
        """Refuse the run at once when math-verify (the ``[math]`` extra) is missing."""
        import importlib.util

        from ..errors import ConfigError

        if importlib.util.find_spec("math_verify") is None:
            raise ConfigError(f"the math mode grades with math-verify; {INSTALL_HINT}")

    @staticmethod
    def reference_actions(task) -> list[Any]:
        """A reply that boxes the task's answer."""
        return [f"The final answer is $\\boxed{{{task.get('answer')}}}$."]

    def reset(self, task, vm) -> dict[str, Any]:
        """Nothing to set up: the first observation is the problem."""
        self.task = task
        self.tries = 0
        self.verdict: dict[str, Any] = {"correct": False, "reason": "no_reply", "extracted": None, "method": None}
        explicit = "max_turns" in self.config.explicit
        self.max_tries = self.config.max_turns if explicit else self.default_max_turns
        return {"problem": task.get("problem")}

    def step(self, action: Any) -> StepResult:
        """Extract and grade one answer; done when it is right or the tries are used up."""
        reject_none(action, "a math action is the reply's text or {'answer': ...}")
        self.tries += 1
        text, direct = _reply_text(action)
        if text is None:
            extracted, method = None, None
            reason = f"the reply is a {type(action).__name__}, not text"
        elif direct:
            extracted, method = unwrap(_last_boxed(text) or text) or None, "answer_field"
            reason = "no answer in the reply"
        else:
            extracted, method = extract_answer(text)
            reason = "no answer in the reply"
        if extracted is None:
            self.verdict = {"correct": False, "reason": "no_answer", "detail": reason,
                            "extracted": None, "method": None}
        else:
            self.verdict = {**grade(str(self.task.get("answer")), extracted, self.grade_timeout_s,
                                    str(self.task.get("problem"))),
                            "extracted": extracted[:MAX_ANSWER_CHARS], "method": method}
        done = self.verdict["correct"] or self.tries >= (self.max_tries or 1)
        observation: dict[str, Any] = {"problem": self.task.get("problem")}
        if not done:
            observation["feedback"] = "no answer found" if extracted is None else "incorrect"
            observation["tries"] = self.tries
        return StepResult(observation, done=done, info={"extracted": extracted, "method": method})

    def evaluate(self) -> tuple[float, dict[str, Any]]:
        """Reward 1 when the last answer equals the task's answer."""
        details = {**self.verdict, "expected": str(self.task.get("answer")), "tries": self.tries}
        return (1.0 if self.verdict["correct"] else 0.0), details
