"""math: replies that scored 1 without being right, each graded by what it says, through a
run of the Runner, as a trainer's rewards come.

* A percent sign is the answer's value (3% is 0.03), unless the problem speaks of percent.
  math-verify takes ``9\\%`` for 9 (a "what percent" question's gold is often the bare number),
  so a policy that appended ``\\%`` to every answer was never worse off and was paid for a slip
  of a factor 100 too: ``\\boxed{3\\%}`` scored for an answer of 3 and of 0.03, ``\\boxed{300\\%}``
  for 300 and 3.
* An equation between numbers is a claim that they are equal. math-verify grades an equation's
  right side (``2+2=4`` is 4), so a false one scored too: ``\\boxed{3=4}`` for 4, ``x=4=3`` for 3.
* A decimal matches to six places and to a thousandth of the answer's size: math-verify's six
  places alone took ``0.0`` for 1/2^30 and ``0.0000014`` for 0.000001.
* A negation is kept: math-verify read ``\\neq 3`` and ``x \\not= 3`` as 3.
* Two numbers joined by a relation math-verify keeps one side of are a hedge: ``3 \\approx 4``
  was 3, ``3 \\sim 4`` and ``3 \\vee 4`` were 4.

The agent below is imported by spawned workers as ``test_math_tricks:…``, so this module
imports nothing from conftest.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from parallel_rollout.agents import Agent
from parallel_rollout.config import build_config
from parallel_rollout.runner import Runner

#: task id -> (problem, the task's answer, the reply, its reward)
CASES = {
    # a percent sign on an answer that is no percentage is its value: 3% is 0.03, not 3
    "count-3": ("How many apples are left?", "3", "So \\boxed{3\\%}.", 0.0),
    "count-300": ("How many pages did she read?", "300", "\\boxed{300\\%}", 0.0),
    "count-plain": ("How many pages did she read?", "300", "\\boxed{300}", 1.0),
    # ... and is right where its value is
    "prob-0.03": ("What is the probability of a red ball?", "0.03", "\\boxed{3\\%}", 1.0),
    "ratio-3": ("By what factor did the price grow?", "3", "Answer: $300\\%$", 1.0),
    "frac": ("What share of the cake is left?", "\\frac{1}{8}", "\\boxed{12.5\\%}", 1.0),
    # a problem that asks for a percent: its bare number is the answer, with or without the sign
    "asks-percent": ("What percent of the students passed?", "25", "\\boxed{25\\%}", 1.0),
    "asks-percent-sign": ("What is $5$ as a \\% of $20$?", "25", "\\boxed{25\\%}", 1.0),
    "asks-percent-bare": ("What percent of the students passed?", "25", "\\boxed{25}", 1.0),
    "asks-percent-decimal": ("What percent of the students passed?", "2.5", "\\boxed{2.5\\%}", 1.0),
    "asks-percent-fraction": ("What percent is $1$ of $3$?", "33\\frac{1}{3}", "\\boxed{33\\frac{1}{3}\\%}", 1.0),
    # ... in the problem's unit alone: 2500% is no 25 there, nor 300% a 3 of a problem with a percent in it
    "asks-percent-100x": ("What percent of the students passed?", "25", "\\boxed{2500\\%}", 0.0),
    "speaks-percent-100x": ("What is $5\\%$ of $60$?", "3", "\\boxed{300\\%}", 0.0),
    "speaks-percent-word": ("What is $5\\%$ of $60$?", "3", "\\boxed{300 \\text{ percent}}", 0.0),
    # a percent spelt out is a percent sign
    "count-word": ("How many pages did she read?", "25", "\\boxed{25 \\text{ percent}}", 0.0),
    "count-pct": ("How many pages did she read?", "25", "\\boxed{25 \\text{pct}}", 0.0),
    "prob-word": ("What is the probability of a red ball?", "0.25", "\\boxed{25 \\text{ percent}}", 1.0),
    # an answer that has the sign itself
    "gold-percent": ("How did the price change?", "25\\%", "\\boxed{25\\%}", 1.0),
    "gold-percent-value": ("How did the price change?", "25\\%", "\\boxed{0.25}", 1.0),
    # a false equation is a wrong answer, whatever its right side
    "false": ("What is $2+2$?", "4", "\\boxed{3=4}", 0.0),
    "false-chain": ("Solve $x+1=4$.", "3", "\\boxed{x=4=3}", 0.0),
    "false-through-x": ("Solve $x+1=5$.", "4", "\\boxed{3=x=4}", 0.0),
    "false-pi": ("Round $\\pi$ down.", "3", "\\boxed{\\pi=3}", 0.0),
    # a true one, a worked step or a value named, is right
    "worked": ("What is $2+2$?", "4", "\\boxed{2+2=4}", 1.0),
    "named": ("Solve $x+1=5$.", "4", "\\boxed{x=4}", 1.0),
    "worked-chain": ("Solve $x=2+2$.", "4", "\\boxed{x = 2+2 = 4}", 1.0),
    "fraction": ("What is $6/2$?", "3", "\\boxed{\\frac{6}{2} = 3}", 1.0),
    "binomial": ("How many pairs of 5?", "10", "\\boxed{\\binom{5}{2} = 10}", 1.0),
    "function": ("What is $f(2)$ for $f(x)=2x+1$?", "5", "\\boxed{f(2) = 5}", 1.0),
    "decimal": ("What is $1/3$ to six places?", "0.333333", "\\boxed{\\frac{1}{3} = 0.333333}", 1.0),
    "line": ("Which line?", "y=2x+1", "\\boxed{y = 2x + 1}", 1.0),
    "two-values": ("Solve $(x-3)(x-4)=0$.", "3, 4", "\\boxed{x = 3, x = 4}", 1.0),
    # a negation that math-verify drops says no to the number it keeps
    "not-equal": ("Solve $x+1=4$.", "3", "\\boxed{x \\not= 3}", 0.0),
    "neq": ("Solve $x+1=4$.", "3", "\\boxed{\\neq 3}", 0.0),
    "neq-right": ("Where is $1/(x-3)$ defined?", "x \\neq 3", "\\boxed{x \\neq 3}", 1.0),
    # two numbers joined by a relation math-verify keeps one side of are a hedge (3 \approx 4 was
    # 3, 3 \sim 4, 3 \Rightarrow 4, 3 \vee 4 and 3 | 4 were 4); an approximation holds to its places
    "approx": ("What is $2+1$?", "3", "\\boxed{3 \\approx 4}", 0.0),
    "approx-places": ("What is $2+1$?", "3", "\\boxed{3 \\approx 3.4}", 0.0),
    "approx-right": ("What is the area of a unit disc?", "\\pi", "\\boxed{\\pi \\approx 3.14}", 1.0),
    "sim": ("What is $2+2$?", "4", "\\boxed{3 \\sim 4}", 0.0),
    "implies": ("What is $2+2$?", "4", "\\boxed{3 \\Rightarrow 4}", 0.0),
    "vee": ("What is $2+2$?", "4", "\\boxed{3 \\vee 4}", 0.0),
    "bar": ("What is $2+2$?", "4", "\\boxed{3 | 4}", 0.0),
    "abs": ("What is $|-4|$?", "4", "\\boxed{|-4|}", 1.0),
    "abs-sum": ("What is $|3|+|4|$?", "7", "\\boxed{|3| + |4|}", 1.0),
    "implies-worked": ("Solve $2x=8$.", "4", "\\boxed{2x = 8 \\Rightarrow x = 4}", 1.0),
    "limit": ("What is $\\lim_{x \\to 0} \\frac{\\sin x}{x}$?", "1", "\\boxed{\\lim_{x \\to 0} \\frac{\\sin x}{x} = 1}", 1.0),
    # ... and so are two numbers parted by what LaTeX sets apart: a column, a line, dots, an
    # invisible delimiter, rows of cases (math-verify kept the last, or added them up: 3 \\ 4 was 7)
    "column": ("What is $2+2$?", "4", "\\boxed{3 & 4}", 0.0),
    "line-break": ("What is $3+4$?", "7", "\\boxed{3 \\\\ 4}", 0.0),
    "ldots": ("What is $3+4$?", "7", "\\boxed{3 \\ldots 4}", 0.0),
    "dots": ("What is $2+2$?", "4", "\\boxed{3 \\dots 4}", 0.0),
    "right-dot": ("What is $2+2$?", "4", "\\boxed{3 \\right. 4}", 0.0),
    "evaluated": ("What is $2+2$?", "4", "\\boxed{\\left. 3 \\right| 4}", 0.0),
    "cases": ("What is $2+2$?", "4", "\\boxed{\\begin{cases} 3 \\\\ 4 \\end{cases}}", 0.0),
    "substack": ("What is $2+2$?", "4", "\\boxed{\\substack{3 \\\\ 4}}", 0.0),
    "atop": ("What is $2+2$?", "4", "\\boxed{3 \\atop 4}", 0.0),
    "or-operator": ("What is $2+2$?", "4", "\\boxed{3 \\operatorname{or} 4}", 0.0),
    # ... and by any of the many symbols math-verify drops what comes before (3 \ll 4 was 4)
    **{f"symbol-{name}": ("What is $2+2$?", "4", f"\\boxed{{3 \\{name} 4}}", 0.0)
       for name in ("ll", "in", "star", "cup", "oplus", "colon", "dag", "forall", "uparrow", "S", "circ")},
    "degrees": ("What is the angle of an equilateral triangle?", "60", "\\boxed{60^\\circ}", 1.0),
    "degrees-braced": ("What is the angle of an equilateral triangle?", "60", "\\boxed{60^{\\circ}}", 1.0),
    "in-set": ("Where is $x$?", "[1, 3)", "\\boxed{x \\in [1, 3)}", 1.0),
    "abs-left-right": ("What is $|3|+|-4|$?", "7", "\\boxed{\\left|3\\right| + \\left|-4\\right|}", 1.0),
    "sum-dots": ("What is $1+2+\\dots+10$?", "55", "\\boxed{1 + 2 + \\dots + 10 = 55}", 1.0),
    # an answer line that names numbers as alternatives names them all: "3 or 4" was its last, 4
    "line-or": ("What is $2+2$?", "4", "Answer: 3 or 4", 0.0),
    "line-either": ("What is $2+2$?", "4", "The answer is either 3 or 4.", 0.0),
    "line-maybe": ("What is $2+2$?", "4", "Final answer: 3, maybe 4", 0.0),
    "line-text-or": ("What is $2+2$?", "4", "The answer is $3 \\text{ or } 4$.", 0.0),
    "line-or-both": ("Solve $(x-3)(x-4)=0$.", "3, 4", "Answer: 3 or 4", 1.0),
    "line-sum": ("What is $3+4$?", "7", "Answer: the total is 3 + 4 = 7", 1.0),
    "line-units": ("How wide is it?", "12", "Answer: the width is 12 cm", 1.0),
    # a symbol written in unicode is its LaTeX command: math-verify dropped what ≈, ∨, →, ∈, · and ≠ join
    "unicode-approx": ("What is $2+1$?", "3", "\\boxed{3 ≈ 4}", 0.0),
    "unicode-or": ("What is $2+2$?", "4", "\\boxed{3 ∨ 4}", 0.0),
    "unicode-arrow": ("What is $2+2$?", "4", "\\boxed{3 → 4}", 0.0),
    "unicode-in": ("What is $2+2$?", "4", "\\boxed{3 ∈ 4}", 0.0),
    "unicode-neq": ("Solve $x+1=4$.", "3", "\\boxed{≠ 3}", 0.0),
    "unicode-dot": ("What is $2+2$?", "4", "\\boxed{3 · 4}", 0.0),
    "unicode-dot-right": ("What is $3 \\cdot 4$?", "12", "\\boxed{3 · 4}", 1.0),
    "unicode-sqrt": ("What is $\\sqrt{9}$?", "3", "\\boxed{√9}", 1.0),
    "unicode-times": ("What is $3 \\times 4$?", "12", "\\boxed{3×4}", 1.0),
    "unicode-degrees": ("What is the angle of an equilateral triangle?", "60", "\\boxed{60°}", 1.0),
    "unicode-degrees-sum": ("What is the angle of an equilateral triangle?", "60", "\\boxed{6°0}", 0.0),
    # ... and so does a reply's last line, where no answer line or box is
    "reply-or": ("What is $2+2$?", "4", "I think it is 3 or 4", 0.0),
    "reply-formulas-or": ("What is $2+2$?", "4", "Adding them up, it is $3$ or $4$.", 0.0),
    "reply-or-both": ("Solve $(x-3)(x-4)=0$.", "3, 4", "So x is 3 or 4", 1.0),
    "reply-working": ("What is $2+2$?", "4", "Either 2 or 2 more, whichever:\n2 + 2 makes 4", 1.0),
    # ... and a last line that is one formula is the answer, with what it offers as alternatives (rows
    # of cases were their last row, 4); a stray line after the working is none
    "last-line-text-or": ("What is $2+1$?", "3", "Adding up:\n$3 \\text{ or } 4$", 0.0),
    "last-line-cases": ("What is $2+2$?", "4", "Adding up:\n$\\begin{cases} 3 \\\\ 4 \\end{cases}$", 0.0),
    "last-line-words-or": ("Which day?", "\\text{Tuesday}", "Counting on:\n$\\text{Monday or Tuesday}$", 0.0),
    "last-line-right": ("What is $1/2$?", "\\frac{1}{2}", "Halving 1:\n$\\frac{1}{2}$", 1.0),
    "last-line-stray": ("What is $1+2$?", "3", "I get 3.\n---", 1.0),
    "last-line-ps": ("What is $1+2$?", "3", "I get 3.\nP.S.", 1.0),
    # a formula in math delimiters is math, its letters too (x^2 + xy's last number, 2, was its answer)
    "product-answer-line": ("Expand $x(x+y)$.", "x^2 + xy", "The answer is $x^2 + xy$.", 1.0),
    "product-last-line": ("Expand $x(x+y)$.", "x^2 + xy", "Expanding:\n$x^2 + xy$", 1.0),
    "product-prose": ("Expand $x(x+y)$.", "x^2 + xy", "We get $x^2 + xy$ in the end.", 1.0),
    "product-names": ("What is the total?", "2RC+R+C", "The answer is $2RC+R+C$.", 1.0),
    "product-exponent": ("What is the degree of $x^2 + xy$?", "2", "The answer is $x^2 + xy$.", 0.0),
    "product-or": ("What is $2+2$?", "4", "Answer: $3 or 4$", 0.0),
    # a temperature's unit, C or F after the degree, is a unit as \\text{C} is (math-verify read 60°C as 60C)
    **{f"celsius-{name}": ("How hot is the water?", "60", f"\\boxed{{{reply}}}", 1.0)
       for name, reply in (("unicode", "60°C"), ("spaced", "60 °C"), ("sign", "60℃"), ("circ", "60^\\circ C"),
                           ("braced", "60^{\\circ}F"), ("text", "60 \\text{ °C}"), ("mathrm", "60\\,^{\\circ}\\mathrm{C}"))},
    "celsius-sum": ("How hot is the water?", "60", "\\boxed{6°C0}", 0.0),
    "celsius-two": ("How hot is the water?", "70", "\\boxed{60°C 70}", 0.0),
    "celsius-or": ("How hot is the water?", "70", "\\boxed{60°C \\text{ or } 70°C}", 0.0),
    "celsius-letter": ("Which is the boiling water, A, B or C?", "C", "\\boxed{60°C}", 0.0),
    # letters after a number that the problem names as variables are a product, not a unit math-verify
    # drops (it read a gold 6m as 6: a reply of 6 scored 1, m6 scored 0); letters it names none stay a unit
    **{f"variable-{name}": ("Let $m$ be a positive integer. How many cells of a $4m \\times 4m$ board are blue?",
                           "6m", f"\\boxed{{{reply}}}", reward)
       for name, reply, reward in (("gold", "6m", 1.0), ("dropped", "6", 0.0), ("commuted", "m6", 1.0), ("other", "7m", 0.0))},
    "variable-pair": ("Simplify $(a+b)^2 - a^2 - b^2$.", "2ab", "\\boxed{2ba}", 1.0),
    "variable-pair-dropped": ("Simplify $(a+b)^2 - a^2 - b^2$.", "2ab", "\\boxed{2}", 0.0),
    "variable-sum-dropped": ("Simplify $x + c + c$.", "x + 2c", "\\boxed{x + 2}", 0.0),
    "unit-meters": ("How far does it go, in meters?", "5", "\\boxed{5 m}", 1.0),
    "unit-seconds": ("How long does it take, in seconds?", "12", "\\boxed{12s}", 1.0),
    # a number before a bracket multiplies it: math-verify added 3(4) up (7)
    "bracket-sum": ("What is $3+4$?", "7", "\\boxed{3(4)}", 0.0),
    "bracket-product": ("What is $3 \\cdot 4$?", "12", "\\boxed{3(4)}", 1.0),
    "bracket-left-right": ("What is $3 \\cdot 4$?", "12", "\\boxed{3 \\left(4\\right)}", 1.0),
    "bracket-expression": ("Expand $2(x+1)$.", "2x+2", "\\boxed{2(x+1)}", 1.0),
    # a decimal matches to six places, and to its size: 0.0 is not a tiny answer
    "tiny-zero": ("What is the chance of 30 heads in 30 tosses?", "\\frac{1}{1073741824}", "\\boxed{0.0}", 0.0),
    "tiny-off": ("What is $10^{-6}$?", "0.000001", "\\boxed{0.0000014}", 0.0),
    "tiny-right": ("What is the chance of 30 heads in 30 tosses?", "\\frac{1}{1073741824}",
                   "\\boxed{9.31322574615479e-10}", 1.0),
    "third": ("What is $1/3$?", "\\frac{1}{3}", "\\boxed{0.333333}", 1.0),
    "half": ("What is $1/2$?", "\\frac{1}{2}", "\\boxed{0.5000004}", 1.0),
    "zero": ("What is $1-1$?", "0", "\\boxed{0.0}", 1.0),
    # LaTeX's spacing is a space, and what \\phantom hides is no part of the answer: math-verify
    # added 3\\;4 up to 7 and read \\phantom{4}3, which shows 3, as 7
    "phantom": ("What is $3+4$?", "7", "\\boxed{\\phantom{4}3}", 0.0),
    "phantom-right": ("What is $1+2$?", "3", "\\boxed{\\phantom{4}3}", 1.0),
    "spaced-sum": ("What is $3+4$?", "7", "\\boxed{3\\;4}", 0.0),
    "quad-sum": ("What is $3+4$?", "7", "\\boxed{3\\quad 4}", 0.0),
    "hspace": ("What is $2+2$?", "4", "\\boxed{3\\hspace{1em}4}", 0.0),
    "styles": ("What is $2+2$?", "4", "\\boxed{\\displaystyle 3 \\scriptstyle 4}", 0.0),
    "style-right": ("What is $2+2$?", "4", "\\boxed{\\displaystyle 4}", 1.0),
    "spaced-list": ("Solve $(x-3)(x-4)=0$.", "3, 4", "\\boxed{3\\; 4}", 1.0),
    "thousands": ("How many?", "10000", "\\boxed{10\\,000}", 1.0),
    "thousands-space": ("How many?", "1000000", "\\boxed{1 000 000}", 1.0),
    "thousands-space-thin": ("How many?", "1000000", "\\boxed{1\u202f000\u2009000}", 1.0),
    "thousands-space-sum": ("What is $1+2$?", "3", "\\boxed{1 000}", 0.0),
    # ... in prose too, without a box (its last number was 000); a number before it, 7 100, is no 100 then
    "thousands-prose": ("How many apples?", "1000", "There are 1 000 apples.", 1.0),
    "thousands-prose-million": ("How many?", "1000000", "So 1 000 000 in all.", 1.0),
    "thousands-prose-thin": ("How many apples?", "1000", "There are 1\u202f000 apples.", 1.0),
    "thousands-prose-range": ("How many at most?", "2000", "It takes between 1 000 and 2 000.", 1.0),
    "thousands-prose-range-first": ("How many at least?", "1000", "It takes between 1 000 and 2 000.", 0.0),
    "thousands-prose-hedge": ("What is $50+50$?", "100", "It is 7 100.", 0.0),
    "thousands-prose-year": ("How many people came?", "100", "In 2019 100 people came.", 1.0),
    # the ways a right answer is written score 1, whatever the checks above take apart
    "honest-dfrac": ("What is $1/2$?", "\\frac{1}{2}", "So it is $\\dfrac{1}{2}$.", 1.0),
    "honest-decimal": ("What is $1/2$?", "\\frac{1}{2}", "Answer: 0.5", 1.0),
    "honest-root": ("What is $\\sin 60^\\circ$?", "\\frac{\\sqrt{3}}{2}", "\\boxed{\\sqrt{3}/2}", 1.0),
    "honest-named": ("Solve $x+1=5$.", "4", "So $x = 4$.", 1.0),
    "honest-period": ("What is $2+2$?", "4", "The answer is \\boxed{4.}", 1.0),
    "honest-comma": ("How many?", "1000", "\\boxed{1{,}000}", 1.0),
    "honest-units-prose": ("How wide is it?", "12", "The width is $12\\text{ cm}$.", 1.0),
    # a \\text{} shows what it says: a number offered in it as an alternative is one (3 \\text{ (or 4)}
    # was 3), its digits are digits (\\text{3}4 shows 34; math-verify read 3 \\cdot 4)
    "text-or": ("What is $2+1$?", "3", "\\boxed{3 \\text{ (or 4)}}", 0.0),
    "text-or-maybe": ("What is $2+1$?", "3", "\\boxed{3 \\mbox{, maybe 4}}", 0.0),
    "text-or-both": ("Solve $(x-3)(x-4)=0$.", "3, 4", "\\boxed{3 \\text{ (or 4)}}", 1.0),
    "text-digits": ("What is $30+4$?", "34", "\\boxed{\\text{3}4}", 1.0),
    "text-digits-product": ("What is $3 \\cdot 4$?", "12", "\\boxed{\\text{3}4}", 0.0),
    "text-units": ("How wide is it?", "12", "\\boxed{12\\text{ cm}}", 1.0),
    # a script on nothing (a small 3 before the 4) shows a number math-verify dropped: {}_3 4 was 4
    "prescript-sub": ("What is $2+2$?", "4", "\\boxed{{}_3 4}", 0.0),
    "prescript-sup": ("What is $2+2$?", "4", "\\boxed{{}^{3} 4}", 0.0),
    "prescript-phantom": ("What is $2+2$?", "4", "\\boxed{\\vphantom{x}_3 4}", 0.0),
    "prescript-strut": ("What is $2+2$?", "4", "\\boxed{\\strut_3 4}", 0.0),
    "subscript": ("What is $x_1$ if $x_1 = 4$?", "4", "\\boxed{x_1 = 4}", 1.0),
    # a task's answer with a percent has one reading too, the problem's unit: 25\\% is 25 in a problem
    # that speaks of percent, 0.25 elsewhere (math-verify took both 25 and 0.25 for it)
    "gold-percent-asks-value": ("By what percent did the price rise?", "25\\%", "\\boxed{0.25}", 0.0),
    "gold-percent-asks-number": ("By what percent did the price rise?", "25\\%", "\\boxed{25}", 1.0),
    "gold-percent-asks-sign": ("By what percent did the price rise?", "25\\%", "\\boxed{25\\%}", 1.0),
    "gold-percent-bare": ("How did the price change?", "25\\%", "\\boxed{25}", 0.0),
    # a number math-verify's reading lost is a wrong answer: where the LaTeX does not parse it takes
    # the last number it finds (3 \\relax 4, \\color{red}{3} 4, 3 ? 4 were 4), and it drops all from the
    # first \\text{} of an answer that ends in text (3 \\text{ hours } 4 \\text{ minutes} was 3)
    "lost-unknown": ("What is $2+2$?", "4", "\\boxed{3 \\relax 4}", 0.0),
    "lost-color": ("What is $2+2$?", "4", "\\boxed{\\color{red}{3} 4}", 0.0),
    "lost-question": ("What is $2+2$?", "4", "\\boxed{3 ? 4}", 0.0),
    "lost-units": ("What is $1+2$?", "3", "\\boxed{3 \\text{ hours } 4 \\text{ minutes}}", 0.0),
    "lost-units-sum": ("What is $1+2$?", "3", "\\boxed{3\\text{ cm} + 4\\text{ cm}}", 0.0),
    "kept-color": ("What is $2+2$?", "4", "\\boxed{\\color{red} 4}", 1.0),
    "kept-area": ("What is the area?", "12", "\\boxed{12\\text{ cm}^2}", 1.0),
    "kept-aside": ("What is $2+2$?", "4", "\\boxed{4 \\text{ (since 2+2=4)}}", 1.0),
    "kept-money": ("How much?", "1000.5", "\\boxed{\\$1{,}000.50}", 1.0),
    "kept-speed": ("How fast is light?", "3 \\times 10^8", "\\boxed{3 \\times 10^8 \\text{ m/s}}", 1.0),
    "kept-modulus": ("Solve $x+2 \\equiv 0 \\pmod 9$.", "7", "\\boxed{x \\equiv 7 \\pmod{9}}", 1.0),
    "kept-half": ("What is half?", "\\frac{1}{2}", "\\boxed{0.5 \\text{ cm}}", 1.0),
    # a group holding a number shows that number's digits where it stands: 3{4} shows 34 (math-verify added 7)
    "brace-sum": ("What is $3+4$?", "7", "\\boxed{3{4}}", 0.0),
    "brace-lead-sum": ("What is $3+4$?", "7", "\\boxed{{3}{4}}", 0.0),
    "brace-digits": ("What is $30+4$?", "34", "\\boxed{3{4}}", 1.0),
    "brace-fraction": ("What is $3/4$?", "\\frac{3}{4}", "\\boxed{\\frac{3}{4}}", 1.0),
    "brace-power": ("What is $2^3$?", "8", "\\boxed{{2}^{3}}", 1.0),
}


class ReplyAgent(Agent):
    """Replies the case's reply to its task."""

    def reset(self, task) -> None:
        self.reply = CASES[task.id][2]

    def act(self, observation):
        return self.reply


def run_tasks(tmp_path: Path, tasks: dict[str, tuple[str, str]], agent: str) -> list[dict]:
    """The records of a run of ``agent`` (``module:Class``) on ``tasks`` (task id -> (problem, the
    task's answer)), one rollout each."""
    pytest.importorskip("math_verify")
    data = tmp_path / "cases.jsonl"
    data.write_text("".join(json.dumps({"id": task_id, "mode": "math", "problem": problem, "answer": answer}) + "\n"
                            for task_id, (problem, answer) in tasks.items()))
    outcome = Runner(build_config(dict(mode="math", data=str(data), agent=agent,
                                       num_rollouts=1, progress=False, output_dir=str(tmp_path / "out"),
                                       run_id="r", task_timeout=60))).run()
    assert outcome.exit_code in (0, 1), outcome.message
    return [json.loads(line) for line in (outcome.run_dir / "results.jsonl").read_text().splitlines()]


def test_a_reply_scores_what_it_says(tmp_path: Path):
    records = run_tasks(tmp_path, {task_id: case[:2] for task_id, case in CASES.items()}, "test_math_tricks:ReplyAgent")
    rewards = {r["task_id"]: r["reward"] for r in records}
    assert rewards == {task_id: reward for task_id, (_, _, _, reward) in CASES.items()}, \
        {r["task_id"]: r["eval"] for r in records if r["reward"] != CASES[r["task_id"]][3]}
