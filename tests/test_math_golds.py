"""math: a task's own answer (its gold) is read as a reply that writes it is, in the forms math
datasets write their answers: MATH's and MATH-500's (and the ``\\boxed{}`` their ``solution`` ends
in), GSM8K's numbers with thousands commas, NuminaMath's and DeepScaleR's LaTeX, AIME's integers
with leading zeros, verl's ``reward_model.ground_truth``. For each gold, a reply that boxes the
gold itself scores 1, a reply that writes it another way scores 1 where math-verify's
equivalence allows, and a wrong reply scores 0; each graded through a run of the Runner, as a
trainer's rewards come.

* A reply whose last line is the gold, with no box and no answer line, answers the gold, and so
  does an answer line that writes it with words in ``\\text{}`` or a matrix's environment: their
  last number was taken (``\\frac{1}{2}`` was 2, ``\\frac{1}{2} \\text{ hour}`` 2,
  ``\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}`` 2), or nothing where the last line holds none
  (``$\\infty$``, ``$C$``, ``\\text{Monday}``).
* A choice written with its value (``\\textbf{(C) } 4``) is answered by its letter or its value:
  math-verify read c*4, so neither C nor 4 scored. A repeating decimal (``0.\\overline{36}``) is
  its fraction, which math-verify could not parse; ``\\varnothing`` is ``\\emptyset``; a number with
  its unit in one ``\\text{}`` (``\\text{5 cm}``) is the number (math-verify read 5cm); a vector in
  angle brackets is a tuple (math-verify read ``\\langle 1, 2 \\rangle`` as 2), an ordinal's raised
  suffix a unit (it read ``5^\\text{th}`` as 5 to the power of th); math delimiters around a gold and
  a closing full stop are no part of it (``\\frac{1}{2}.`` took no 0.5), and GSM8K's worked solution
  answers what follows its last ``####`` (math-verify read one ending ``= $6.00\\n#### 6`` as 4).
* A gold whose LaTeX math-verify cannot parse is its text: it read the number its fallback found
  in it (``E_{0}^{2} + 3`` as 3), which a reply of 3 matched, and not the reply that wrote the gold.
* A number in a base is its value beside another in a base (``52_9`` matched ``52_8``: math-verify
  dropped both bases), its digits beside a number in none (``52``).
* A modulus after a residue is no part of its value: math-verify read ``7 \\text{ (mod } 9)`` as
  9, so the reply that wrote the gold scored 0 and ``\\boxed{9}`` scored 1; it read
  ``7 \\pmod 9`` as 7 - 9do, so ``\\boxed{7}`` scored 0.

The agent below is imported by spawned workers as ``test_math_golds:…``, so this module
imports nothing from conftest.
"""

from __future__ import annotations

from pathlib import Path

from parallel_rollout.agents import Agent
from test_math_tricks import run_tasks

#: the task's answer -> (replies that say the same another way, wrong replies)
GOLDS = {
    # multiple choice (MATH, NuminaMath's amc_aime)
    r"\text{(C)}": (["C", r"\text{C}", "(C)"], [r"\text{(D)}", "D"]),
    r"\textbf{(A)}": (["A"], ["B"]),
    r"\mathrm{(B)}": (["B"], ["A"]),
    "(B)": (["B"], ["A"]),
    "C": ([r"\text{(C)}", r"\textbf{(C) } 4"], ["D", r"\textbf{(D) } 4", r"\textbf{(C) } 4 \text{ or (D) } 5"]),
    # a choice written with its value (AMC's, in MATH and NuminaMath): its letter or its value (math-verify
    # read the letter times the value, c*4, which neither C nor 4 was)
    r"\textbf{(C) } 4": (["C", "(C)", r"\text{(C)}", "4", r"\textbf{(C)}\ 4"],
                         ["D", "5", r"\textbf{(D) } 4", r"\textbf{(C) } 5", "C, D", r"C \text{ or } D"]),
    r"\textbf{(C) }4": (["C", "4"], ["D", "5"]),
    r"\text{(B)}\ \frac{1}{2}": (["B", r"\frac{1}{2}", "0.5"], ["A", r"\frac{1}{3}"]),
    r"\mathrm{(D)}\ 25": (["D", "25"], ["C", "24"]),
    "4": ([r"\textbf{(C) } 4"], [r"\textbf{(C) } 5", r"\textbf{(C) } 4 \text{ or (D) } 5"]),
    # fractions and decimals, repeating ones too (math-verify could not parse 0.\overline{36})
    r"0.\overline{36}": ([r"\frac{4}{11}"], ["0.36", r"\frac{4}{10}"]),
    r"3.\overline{6}": ([r"\frac{11}{3}"], ["3.6"]),
    r"0.1\overline{6}": ([r"\frac{1}{6}"], ["0.16"]),
    r"\frac{2}{3}": ([r"0.\overline{6}"], ["0.67", r"0.\overline{7}"]),
    r"\frac{1}{2}": (["0.5", "1/2"], [r"\frac{1}{3}"]),
    r"\dfrac{1}{2}": (["0.5", r"\frac12"], [r"\frac{1}{3}"]),
    r"\tfrac{1}{2}": (["0.5"], [r"\frac{1}{3}"]),
    r"\dfrac12": (["0.5"], [r"\frac{1}{3}"]),
    r"-\frac{1}{2}": (["-0.5"], [r"\frac{1}{2}"]),
    r"\frac{-1}{2}": (["-0.5"], ["0.5"]),
    "0.5": ([r"\frac{1}{2}"], ["0.6"]),
    # ... in math delimiters or with a closing full stop, as some datasets keep them (a gold \frac{1}{2}.
    # or \[\frac{1}{2}\] took no 0.5)
    r"\[\frac{1}{2}\]": (["0.5", r"\frac{1}{2}"], ["2"]),
    r"\frac{1}{2}.": (["0.5", r"\frac{1}{2}"], ["2"]),
    r"$\frac{1}{2}$": (["0.5"], ["2"]),
    "(1, 2).": (["(1,2)"], ["(2, 1)"]),
    ".5": (["0.5"], ["5"]),
    "1.5": ([r"\frac{3}{2}"], ["1.6"]),
    r"6\frac{1}{2}": (["6.5", r"\frac{13}{2}"], ["3"]),
    # money, percent, thousands (MATH, GSM8K)
    r"\$5.00": (["5", r"\$5"], ["6"]),
    r"\$18.90": (["18.90", "18.9"], ["18.80"]),
    r"\$1,\!000": (["1000"], ["100"]),
    r"5\%": ([r"5\%", "0.05"], [r"6\%"]),
    "10{,}000": (["10000", "10,000"], ["1000"]),
    "10,000": (["10000", "10{,}000"], ["1000"]),
    "1,000": (["1000"], ["100", "1", "0"]),
    "1,000,000": (["1000000"], ["1000"]),
    "1{,}000{,}000": (["1000000"], ["1000"]),
    r"1\,000": (["1000"], ["1"]),
    "#### 1,000": (["1000"], ["100"]),
    "#### 42": (["42"], ["43"]),
    # GSM8K's worked solution, whose final answer follows its last #### (math-verify read an earlier number)
    "The fine is $4.00 and the fee $2.00, so $4.00 + $2.00 = $<<4+2=6.00>>6.00 in all.\n#### 6": (["6", "6.00"], ["4", "2"]),
    "The class has $174, so it needs $26 more because 200 minus 174 equals 26.\n#### 26": (["26"], ["174", "200"]),
    "Each box holds 3 * 4 = <<3*4=12>>12 cans, so 100 boxes hold 1,200 cans.\n#### 1,200": (["1200", "1,200"], ["12", "100"]),
    # AIME: integers with leading zeros
    "033": (["33"], ["34"]),
    "007": (["7"], ["70"]),
    "070": (["70"], ["7"]),
    "000": (["0"], ["1"]),
    # numbers in a base (MATH's number theory): its digits, or the same number in a base; another base's
    # digits are no answer (math-verify dropped both bases: 52_9 matched 52_8)
    "52_8": (["52", "52_{8}", "101010_2"], ["52_9", "42", "53_8"]),
    "4210_{5}": (["4210", "4210_5"], ["4210_{6}", "4211_5"]),
    # named values, tuples, intervals, sets
    "x = 3": (["3"], ["4"]),
    "(1, 2)": (["(1,2)"], ["(2, 1)"]),
    "(3,-1)": (["(3, -1)"], ["(-1, 3)"]),
    r"\left( 1, 2 \right)": (["(1, 2)"], ["(2, 1)"]),
    "[0, 1)": (["[0,1)"], ["[0, 1]"]),
    r"x \in [2, 5]": (["[2, 5]"], ["[2, 6]"]),
    r"(0, \infty)": ([r"(0,\infty)"], [r"[0,\infty)"]),
    r"(-\infty, 1) \cup (2, \infty)": ([r"(-\infty,1)\cup(2,\infty)"], [r"(-\infty, 1] \cup (2, \infty)"]),
    r"\{1,2\}": ([r"\{2, 1\}"], [r"\{1, 3\}"]),
    r"\{1, 2, 3\}": ([r"\{3,2,1\}"], [r"\{1,2\}"]),
    # several answers
    "1, 2": (["2, 1", "1,2"], ["1", "1, 3"]),
    "-1, 2": (["2, -1"], ["-1"]),
    r"\frac{1}{2}, 3": (["3, 0.5"], ["3"]),
    r"2 \text{ and } 3": (["2, 3", "3, 2"], ["2", "2, 4"]),
    r"x = 2 \text{ or } x = 3": (["2, 3"], ["2"]),
    r"1 \pm \sqrt{2}": ([r"1 + \sqrt{2}, 1 - \sqrt{2}"], [r"1 + \sqrt{2}"]),
    # radicals, pi, powers, expressions
    r"2\sqrt{3}": ([r"\sqrt{12}"], [r"3\sqrt{2}"]),
    r"\frac{\sqrt{3}}{2}": ([r"\sqrt{3}/2"], [r"\frac{\sqrt{2}}{2}"]),
    r"\sqrt[3]{2}": (["2^{1/3}"], [r"\sqrt{2}"]),
    r"\pi/2": ([r"\frac{\pi}{2}"], [r"\pi"]),
    r"\dfrac{3}{4}\pi": ([r"\frac{3\pi}{4}"], [r"\frac{\pi}{4}"]),
    "2^{10}": (["1024"], ["1023"]),
    "a^2 + b^2": (["b^2+a^2"], ["a^2 - b^2"]),
    "x^2 + 2x + 1": (["(x+1)^2"], ["x^2+1"]),
    "y = 2x + 3": (["y=2x+3"], ["y = 2x + 4"]),
    "3 + 2i": (["2i + 3"], ["3 - 2i"]),
    # degrees, infinity, words, units
    r"90^\circ": (["90"], ["80"]),
    r"90^{\circ}": (["90"], ["80"]),
    r"\infty": ([r"\infty"], [r"-\infty", "0"]),
    r"\text{Monday}": (["Monday", r"\text{monday}"], [r"\text{Tuesday}", "Tuesday"]),
    r"\text{odd}": (["odd"], [r"\text{even}"]),
    r"\text{No}": (["No"], ["Yes"]),
    r"5 \text{ cm}": (["5"], ["6"]),
    r"\text{5 cm}": (["5", r"5 \text{ cm}"], ["6"]),
    r"\text{12 dollars}": (["12", r"\$12"], ["13"]),
    # an ordinal's raised suffix (math-verify read 5 to the power of th)
    r"5^\text{th}": (["5", r"5\text{th}", "5^{th}"], ["6"]),
    r"21^{\text{st}}": (["21"], ["22"]),
    # the empty set (math-verify read \varnothing as a symbol of that name)
    r"\emptyset": ([r"\varnothing", r"\{\}", "∅"], [r"\{0\}"]),
    r"\varnothing": ([r"\emptyset"], [r"\{0\}"]),
    r"5\text{ cm}^2": (["5"], ["6"]),
    r"\frac{1}{2} \text{ hour}": ([r"\frac{1}{2}"], ["1"]),
    # matrices and vectors
    r"\begin{pmatrix} 1 & 2 \\ 3 & 4 \end{pmatrix}": ([r"\begin{pmatrix}1&2\\3&4\end{pmatrix}"],
                                                       [r"\begin{pmatrix} 1 & 2 \\ 3 & 5 \end{pmatrix}"]),
    r"\begin{pmatrix} 1 \\ 2 \end{pmatrix}": ([r"\begin{pmatrix}1\\2\end{pmatrix}"], [r"\begin{pmatrix} 1 \\ 3 \end{pmatrix}"]),
    # ... in angle brackets (math-verify read the last number, 2)
    r"\langle 1, 2 \rangle": ([r"(1, 2)", r"\left\langle 1,2\right\rangle"], [r"\langle 2, 1 \rangle", "2"]),
    r"\left\langle 1, -2, 3 \right\rangle": (["(1,-2,3)"], ["(1,2,3)", "3"]),
    # LaTeX math-verify cannot parse (Minerva's E_{0}): it fell back to a number in the text, 2 or 3,
    # which a reply of that number matched, while the reply that wrote the gold itself scored 0
    r"\hbar \omega(v+1 / 2)-\frac{E_{0}^{2} e^{2}}{2 m \omega^{2}}": ([], ["2", "1"]),
    r"E_{0}^{2} + 3": ([], ["3", "2"]),
    # a residue and its modulus: the residue is the answer (math-verify read 7 \text{ (mod } 9) as 9,
    # 7 \pmod 9 as 7 - 9do, 3 \bmod 9 as 9)
    r"7 \pmod 9": (["7", r"7 \pmod{9}", r"x \equiv 7 \pmod 9"], ["9", "8", r"7 \cdot 9"]),
    r"3 \pmod{9}": (["3"], ["4", "9"]),
    r"7 \text{ (mod } 9)": (["7"], ["9", "8"]),
    r"7 \text{ (mod 9)}": (["7"], ["9"]),
    r"7 \ (\text{mod } 9)": (["7"], ["9"]),
    r"7 \ (\mathrm{mod}\ 9)": (["7"], ["9"]),
    r"7 \left(\bmod 9\right)": (["7"], ["9"]),
    r"8 \text{ (mod } 11)": (["8"], ["11"]),
    r"n \equiv 3 \pmod{7}": (["3"], ["7"]),
    r"3 \mod 9": (["3"], ["4", "9"]),
    r"3 \bmod 9": (["3"], ["4", "9"]),
    # ... and a reply's modulus is no answer either
    "7": ([r"7 \pmod 9", r"7 \text{ (mod } 9)"], [r"9 \pmod 7", r"9 \text{ (mod } 7)"]),
    "9": ([], [r"7 \pmod 9", r"7 \text{ (mod } 9)", r"7 (\bmod 9)", r"7 \bmod 9", r"\pmod{9}"]),
}


#: the working a reply shows before its last line, the answer (numbers in it, as working has)
WORK = "Adding 1 to 2 gives 3, and so:"


def _cases() -> dict[str, tuple[str, str, float]]:
    """task id -> (the task's answer, the reply, its reward): for each gold, the reply that boxes
    it, the replies that write it as their last line (in math delimiters, and bare) and on an
    answer line, its other ways, its wrong answers (boxed, and as the last line)."""
    cases = {}
    for number, (gold, (same, wrong)) in enumerate(GOLDS.items()):
        cases[f"g{number}-exact"] = (gold, f"The answer is $\\boxed{{{gold}}}$.", 1.0)
        cases[f"g{number}-last-line"] = (gold, f"{WORK}\n${gold}$", 1.0)
        cases[f"g{number}-last-line-bare"] = (gold, f"{WORK}\n{gold}", 1.0)
        cases[f"g{number}-answer-line"] = (gold, f"{WORK}\nFinal answer: {gold}", 1.0)
        for index, reply in enumerate(same):
            cases[f"g{number}-same{index}"] = (gold, f"The answer is $\\boxed{{{reply}}}$.", 1.0)
        for index, reply in enumerate(wrong):
            cases[f"g{number}-wrong{index}"] = (gold, f"The answer is $\\boxed{{{reply}}}$.", 0.0)
            cases[f"g{number}-wrong{index}-last-line"] = (gold, f"{WORK}\n${reply}$", 0.0)
    return cases


CASES = _cases()


class ReplyAgent(Agent):
    """Replies the case's reply to its task."""

    def reset(self, task) -> None:
        self.reply = CASES[task.id][1]

    def act(self, observation):
        return self.reply


def test_a_gold_is_read_as_a_reply_that_writes_it_is(tmp_path: Path):
    records = run_tasks(tmp_path, {task_id: ("Find it.", gold) for task_id, (gold, _, _) in CASES.items()},
                        "test_math_golds:ReplyAgent")
    wrong = {r["task_id"]: (CASES[r["task_id"]][:2], r["eval"]) for r in records
             if r["reward"] != CASES[r["task_id"]][2]}
    assert len(records) == len(CASES) and not wrong, wrong
