"""How an answer is read before math-verify parses it: the task's answer and the reply's alike.

Both answers of a grading go through the same reading (``read_answer``), each beside the
other, so a form that the task's answer writes is read as a reply that writes it the same
way is::

    answer ─► its final answer: what follows GSM8K's last ``####``; no math delimiters
              around it, no closing full stop (``\\frac{1}{2}.``)
           ─► a choice with its value (``\\textbf{(C) } 4``) as its letter or its value,
              as the other answer names a letter or a value
           ─► unicode symbols as LaTeX's commands (``3 · 4`` is 12, ``60°`` is ``60^\\circ``);
              ``\\varnothing`` as ``\\emptyset``, ``0.\\overline{36}`` as 36/99, no modulus after
              a residue (``7 \\pmod{9}`` is 7), ``\\langle…\\rangle`` a tuple, ``5^\\text{th}`` 5,
              ``52_8`` its value beside another number in a base
           ─► text groups as they show (``\\text{3}4`` is 34, ``3 \\text{ (or 4)}`` 3 or 4,
              ``\\text{5 cm}`` 5 \\text{ cm})
           ─► what LaTeX shows of it: no ``\\phantom``, no style switch, spacing a space
           ─► its numbers as written: ``5.`` is 5, ``10\\,000`` 10000, ``5 6`` two numbers,
              ``1e3`` 1000 (math-verify read 3e), ``3(4)`` 12
           ─► a percent in the problem's unit (``3\\%`` is 0.03, or 3 where it speaks of percent)
           ─► letters after a number that the problem names as variables kept (``6m``), where
              math-verify drops them as a unit

math-verify alone read each of these otherwise (``3\\;4`` and ``\\phantom{4}3`` as 7, ``1e3`` as
3e, ``5.`` not at all, ``3\\%`` both as 3 and 0.03, ``7 \\text{ (mod } 9)`` as 9, ``6m`` as 6).
What the reading cannot see, a parse that lost or kept one side of what the answer says, is
checked on the parse (``math_answers``).
"""

from __future__ import annotations

import re

#: digits that spaces part in threes after a first group of one to three (``1 000 000``, thin
#: spaces ``1\u202f000`` and ``1\\,000`` too), as the SI writes a number: one number
_THOUSANDS = r"\d{1,3}(?:(?: |\u2009|\u202f|\\,)\d{3}(?!\d))+"
# A sign counts only when it is not a binary minus ("3-5" ends in 5, not -5).
# e-notation is the number's (2.5e6), not a last number 6; "1 000" one number, not 1 and 000.
NUMBER = re.compile(rf"(?:(?<![\w)\]}}])-)?(?:(?<![\w.]){_THOUSANDS}|\d+(?:,\d{{3}})*)(?:\.\d+)?"
                    r"(?:[eE][+-]?\d+\b)?(?:\s*/\s*\d+(?:\.\d+)?)?")
#: a decimal point that closes a number (``5.``) at the end of the answer or of one of its
#: items (before a comma, a closing bracket or brace, a percent sign): not ``5. 6.``, read as 5 6
_CLOSING_POINT = re.compile(r"(?<=\d)\.(?=\s*(?:$|[,;)\]}%]|\\[}%)\]]|\\right))")
#: a thin space that parts a number's digits in threes (``10\\,000``, as MATH's answers write
#: it): math-verify read it as a product, 10*0
_THIN_SPACE = re.compile(r"(?<=\d)\\,(?=\d{3}(?!\d))")
#: a number right before a bracket, which multiplies it (``3(4)`` is 12; math-verify read 7)
_TIMES_BRACKET = re.compile(r"(?<=\d)\s*(?=\(|\\left\s*\()")
#: a group that holds a number alone and is no command's argument nor a script: it shows the number
#: where it stands (``3{4}`` is 34; math-verify added 7)
_NUMBER_GROUP = re.compile(r"(?<![\\A-Za-z^_}\]\s])(\s*)\{\s*(\d+(?:\.\d+)?)\s*\}")
_SPACED_THOUSANDS = re.compile(rf"[+-]?{_THOUSANDS}(?:\.\d+)?")
#: numbers with nothing but spaces between them (``5 6``): math-verify added them up (11)
_SPACED_NUMBERS = re.compile(r"[+-]?\d+(?:\.\d+)?(?:\s+\d+(?:\.\d+)?)+")
#: a number in e-notation, alone or in a longer answer (``2e5+1``, ``\\frac{2e5}{2}``): its
#: mantissa, its exponent's sign and its digits; no part of a name or of a longer number
_E_NUMBER = re.compile(r"(?<![A-Za-z0-9_.])(\d+(?:\.\d*)?|\.\d+)[eE]([+-]?)(\d+)(?![A-Za-z0-9_.])")
#: Euler's number: an e that is no part of a word (commands removed first)
_EULER = re.compile(r"(?<![A-Za-z])e(?![A-Za-z])")
#: words that offer numbers as alternatives ("3 or 4", "either 3 or 4", "3, maybe 4")
ALTERNATIVES = re.compile(r"\b(?:or|either|nor|maybe|perhaps|possibly|probably|otherwise)\b", re.IGNORECASE)
#: a percent sign, LaTeX's or plain
_PERCENT = re.compile(r"\\?%")
#: a percent spelt out (``25 \\text{ percent}``, ``25 pct``), which math-verify takes for a percent
#: sign (``\\text{ percent}`` it dropped: 25)
_PERCENT_WORD = re.compile(r"\\(?:text|textrm|mathrm|mbox)\s*\{\s*(?:\\?%|percent(?:age)?|pct)\s*\}"
                           r"|(?<![A-Za-z\\])(?:percent(?:age)?|pct)(?![A-Za-z])", re.IGNORECASE)
#: LaTeX's horizontal spacing: a space (math-verify read ``3\\;4`` as 7, ``3\\hspace{1em}4`` as 4)
_SPACING = re.compile(r"(?<!\\)\\(?:[,:;> ]|quad|qquad|enspace|thinspace|medspace|thickspace"
                      r"|hspace\*?\s*\{[^{}]*\}|text\s*\{\s*\}|mbox\s*\{\s*\})|~")
#: what LaTeX leaves invisible (``\\phantom{4}3`` shows 3; math-verify read 7)
_PHANTOM = re.compile(r"\\[hv]?phantom\s*(?=\{)")
#: math symbols written in unicode, as the LaTeX commands math-verify knows: it read ``3 · 4`` and
#: ``3 ∨ 4`` as 4, ``3 ≈ 4`` as 3, ``≠ 3`` as 3 (it drops what it does not know)
_SYMBOLS = {"≈": "\\approx", "∼": "\\sim", "≃": "\\simeq", "≅": "\\cong", "≡": "\\equiv", "≠": "\\neq",
            "≤": "\\le", "≥": "\\ge", "∝": "\\propto", "∨": "\\vee", "∧": "\\wedge", "¬": "\\neg",
            "→": "\\to", "←": "\\leftarrow", "↔": "\\leftrightarrow", "⇒": "\\Rightarrow", "⟹": "\\implies",
            "⇐": "\\Leftarrow", "⇔": "\\iff", "⟺": "\\iff", "↦": "\\mapsto", "∈": "\\in", "∉": "\\notin",
            "∋": "\\ni", "⊂": "\\subset", "⊆": "\\subseteq", "∪": "\\cup", "∩": "\\cap", "∖": "\\setminus",
            "∣": "\\mid", "∀": "\\forall", "∃": "\\exists", "∴": "\\therefore", "∵": "\\because",
            "…": "\\ldots", "⋯": "\\cdots", "·": "\\cdot", "⋅": "\\cdot", "∙": "\\cdot", "×": "\\times",
            "÷": "\\div", "±": "\\pm", "∓": "\\mp", "√": "\\sqrt", "π": "\\pi", "∞": "\\infty", "−": "-",
            "°": "^\\circ", "∅": "\\emptyset", "℃": "^\\circ \\text{C}", "℉": "^\\circ \\text{F}"}
_SYMBOL = re.compile("|".join(map(re.escape, _SYMBOLS)))
#: a temperature's unit, a bare C or F after a degree (``60°C``, ``60^\\circ F``): a unit in text, as
#: math-verify drops it from ``60^\\circ\\text{C}`` (it read the bare letter as a variable, 60C)
_DEGREE_UNIT = re.compile(r"(\^\s*(?:\\circ|\{\s*\\circ\s*\}))\s*([CF])(?![A-Za-z])")
#: "mod" as a word of the answer: in text (``\\text{mod }``, ``\\mathrm{mod}``), a command or bare
_MOD_WORD = (r"(?:\\(?:text(?:rm|normal|up)?|mathrm|mbox|operatorname)\s*\{\s*mod\s*\}"
             r"|\\[bp]?mod(?![A-Za-z])|mod(?![A-Za-z]))")
#: a modulus written after a residue (``7 \\pmod{9}``, ``7 \\text{ (mod } 9)``, ``7 \\ (\\mathrm{mod}\\ 9)``,
#: ``7 (\\bmod 9)``): it names the congruence, and is no part of the residue's value (math-verify
#: read ``7 \\text{ (mod } 9)`` and ``7 (\\bmod 9)`` as 9, ``7 \\pmod 9`` as 7 - 9do: a task's answer
#: written so took 9 for its answer and not 7)
_MODULUS = re.compile(r"\\pmod\s*(?:\{[^{}]*\}|[A-Za-z0-9]+)"
                      rf"|(?:\\left\s*)?\(\s*{_MOD_WORD}[^()]*?(?:\\right\s*)?\)"
                      r"|\\(?:text(?:rm|normal|up)?|mathrm|mbox)\s*\{\s*\(\s*mod(?![A-Za-z])"
                      r"(?:[^{}()]*\)\s*\}|\s*\}[^(){}]*\))")
#: a repeating decimal (``0.\\overline{36}``, ``0.1\\overline{6}``): its whole part, the digits before the
#: repetend and the repetend (math-verify could not parse it, so no other way of writing it scored)
_REPEATING = re.compile(r"(?<![\d.])(\d*)\.(\d*)\\overline\s*(?:\{(\d+)\}|(\d))")
#: an ordinal's suffix raised after its number (``5^\\text{th}``, ``5^{th}``): a unit, as ``12\\text{th}`` is
#: (math-verify read 5 to the power of th)
_ORDINAL = re.compile(r"\^\s*(?:\{\s*(st|nd|rd|th)\s*\}|(\{\s*)?\\(?:text|textrm|mathrm|mbox)\s*\{\s*(st|nd|rd|th)\s*\}"
                      r"(?(2)\s*\}))")
#: a vector's angle brackets (``\\langle 1, 2 \\rangle``), a tuple's: math-verify read the last number, 2
_ANGLE = re.compile(r"\\[lr]angle(?![A-Za-z])")
#: a number written in a base, as MATH's number theory answers are (``52_8``, ``4210_{5}``): its digits
#: and its base, which math-verify dropped (``52_9`` matched ``52_8``)
_BASE_NUMBER = re.compile(r"(?<![\w.])(\d+)_(?:\{\s*(\d+)\s*\}|(\d+))")
#: a number and words in one text group (``\\text{5 cm}``): the number and its unit, as
#: ``5 \\text{ cm}`` is (math-verify read 5cm)
_NUMBER_AND_WORDS = re.compile(r"\s*([+-]?\d+(?:\.\d+)?)\s+([A-Za-z][^\d{}]*)")
#: a style switch, or a strut, which shows nothing itself (``\\displaystyle 3 \\scriptstyle 4`` was 4)
_STYLE = re.compile(r"\\(?:(?:display|text|script|scriptscript)style|(?:math)?strut)(?![A-Za-z])")
#: the commands that set their group as text (``\\text``, ``\\mbox``, ``\\mathrm`` …)
TEXT_COMMANDS = r"text(?:rm|it|bf|sf|tt|normal|up)?|mbox|math(?:rm|it|bf|sf|tt|normal)"
#: a text group: what it holds is shown as written (``\\text{3}4`` shows 34, math-verify read 3 \\cdot 4)
_TEXT = re.compile(rf"\\(?:{TEXT_COMMANDS})\s*(?=\{{)")
#: a problem that speaks of percent, whose answer may be a bare number of percent ("What percent …?")
_SPEAKS_OF_PERCENT = re.compile(r"percent|%", re.IGNORECASE)
#: the final answer after ``####`` that ends a GSM8K solution (``… = 72 clips\\n#### 72``)
_FINAL_MARK = re.compile(r"####[ \t]*([^\n#]*?)\s*$")
#: letters that end an answer after a number, a brace or a space, where math-verify takes them for a
#: unit and drops them (``2ab``, ``6m``, ``x + 2c``: its units include ab, m, c, t, h, s, …)
_LAST_LETTERS = re.compile(r"(?<=[\d}\s])([A-Za-z]+)(\s*)$")
#: a formula in math delimiters (a problem's ``$4 m \\times 4 m$``)
_MATH = re.compile(r"\$\$(.+?)\$\$|\$(.+?)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.DOTALL)
#: a variable: one letter that is no part of a word or a command
_VARIABLE = re.compile(r"(?<![A-Za-z\\])[A-Za-z](?![A-Za-z])")
#: a choice's letter, in brackets (``(C)``, ``\\textbf{(C) }``, ``\\mathrm{(C)}``)
_CHOICE_LETTER = r"(?:\\(?:text(?:bf|rm|normal)?|math(?:rm|bf))\s*\{\s*\(([A-E])\)[\s~]*(?:\\ \s*)?\}|\(([A-E])\))"
#: a choice written with its value, as AMC's answers are in MATH and NuminaMath (``\\textbf{(C) }4``,
#: ``\\text{(B)}\\ \\frac{1}{2}``): math-verify read the letter times the value (c*4), so neither the
#: letter (C) nor the value (4) of a task's answer written so scored
_CHOICE = re.compile(rf"\s*{_CHOICE_LETTER}(?:\s|~|\\[ ,;:]|\\q?quad)*(\S.*)", re.DOTALL)
#: a choice's letter alone (``C``, ``(C)``, ``\\text{(C)}``, ``\\textbf{C}``)
_LETTER = re.compile(r"\s*(?:\\(?:text(?:bf|rm|normal)?|math(?:rm|bf))\s*\{\s*\(?([A-E])\)?\s*\}|\(?([A-E])\)?)\s*")


def braced(text: str, start: int) -> str | None:
    """The content of the brace group opening at ``text[start]``, or None when it never closes."""
    depth = 0
    index = start
    while index < len(text):
        char = text[index]
        if char == "\\":
            index += 2  # \{ and \} are literal braces, not grouping
            continue
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return text[start + 1:index]
        index += 1
    return None


def unwrap(fragment: str) -> str:
    """``fragment`` without markdown bold, math delimiters and a closing full stop."""
    return _undelimited(fragment.replace("**", ""))


def _undelimited(fragment: str) -> str:
    """``fragment`` without math delimiters around it and a closing full stop."""
    fragment = fragment.strip().rstrip(".").strip()
    for left, right in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        inner = fragment[len(left):len(fragment) - len(right)]
        # "$5$ and $6$" is two formulas, not one wrapped in dollars.
        if fragment.startswith(left) and fragment.endswith(right) and len(fragment) >= len(left) + len(right) \
                and left not in inner:
            fragment = inner.strip()
            break
    return fragment.rstrip(".").strip()


def written_numbers(text: str) -> list[str]:
    """The numbers written in ``text``, each as math-verify reads one (no spaces, no commas)."""
    return [re.sub(r"\s+|\\,", "", number).replace(",", "") for number in NUMBER.findall(text)]


def read_answer(answer: str, other: str, problem: str) -> str:
    """``answer`` as math-verify is to parse it, beside the ``other`` answer it is compared with,
    for ``problem``: the task's answer's reading and the reply's are the same (``_final``)."""
    answer, other = _final(answer), _final(other)
    return _variables_kept(_percent_as_value(_plain_numbers(_chosen(answer, other), other), problem), problem)


def _variables_kept(answer: str, problem: str) -> str:
    """``answer`` with the letters that end it after a number kept as the product they are where each
    is a variable of the ``problem`` (``6m`` for "Let $m$ be …" is 6{m}): math-verify drops such
    letters as a unit, so a gold 6m was read as 6, which a reply of 6 matched and one of m6 did not.
    Letters the problem names no variable stay a unit (``5 m``, ``12 s``)."""
    letters = _LAST_LETTERS.search(answer)
    if letters is None or "\\" in answer[max(letters.start() - 1, 0):letters.start()]:
        return answer
    variables = {name for formula in _MATH.finditer(problem)
                 for name in _VARIABLE.findall(next(part for part in formula.groups() if part is not None))}
    if not set(letters[1]) <= variables:
        return answer
    return f"{answer[:letters.start()]}{{{letters[1]}}}{letters[2]}"


def _final(answer: str) -> str:
    """The final answer that ``answer`` states: what follows its last ``####`` where it ends in one,
    as GSM8K's worked solutions do (math-verify read one that ends ``= $6.00\\n#### 6`` as 4, an
    earlier number), without math delimiters around it or a closing full stop (it read a gold
    ``\\[\\frac{1}{2}\\]`` or ``\\frac{1}{2}.`` as no 0.5)."""
    mark = _FINAL_MARK.search(answer)
    answer = mark[1] if mark and mark[1] else answer
    return _undelimited(answer) or answer


def _chosen(answer: str, other: str) -> str:
    """``answer`` as the choice it names where it writes a choice's letter with its value
    (``\\textbf{(C) }4``): its letter beside an ``other`` answer that is a letter alone, its value
    beside one that writes no choice, both beside one that writes them both (and as written
    where its value names another choice: ``\\textbf{(C) }4 \\text{ or (D) }5`` is no C)."""
    choice = _CHOICE.fullmatch(answer)
    if choice is None or _CHOICE.fullmatch(other) or re.search(_CHOICE_LETTER, choice[3]):
        return answer
    return choice[1] or choice[2] if _LETTER.fullmatch(other) else choice[3]


def _plain_numbers(answer: str, other: str) -> str:
    """``answer`` with its numbers written as math-verify reads them, beside the ``other``
    answer it is compared with (and its unicode symbols as LaTeX's: ``3 · 4`` is 12, ``3 ∨ 4``
    no 4; a residue without its modulus: ``7 \\pmod{9}`` is 7): a decimal point that closes a
    number dropped (``5.`` is 5, math-verify cannot parse it), a thin space between its digits
    too (``10\\,000``), numbers parted by spaces alone as a list (``5 6`` is no 11), and
    its numbers in e-notation, whole or in a longer answer (``1e3``, ``2.5e-4``, ``2e5+1``;
    Python writes a task's answer 0.00001 as ``1e-05``), with the capital E that math-verify
    reads as a power of ten (its small e is Euler's number: ``1e3`` was 3e, ``2e5+1`` 10e + 1,
    so 200001 was wrong and 10e + 1 right); one with a signed exponent stays as written where
    ``other`` holds Euler's number (``2e-1`` beside ``2e - 1`` stays 2e - 1)."""
    answer = _SYMBOL.sub(lambda symbol: f" {_SYMBOLS[symbol[0]]} ", answer)
    # \varnothing is the \emptyset math-verify knows (it read a symbol named varnothing), and a
    # repeating decimal the fraction it is
    answer = _REPEATING.sub(_as_fraction, re.sub(r"\\varnothing(?![A-Za-z])", r"\\emptyset", answer))
    answer = _in_bases(answer, other)
    answer = _ORDINAL.sub(lambda ordinal: f"\\text{{{ordinal[1] or ordinal[3]}}}", answer)
    answer = _ANGLE.sub(lambda bracket: "(" if bracket[0] == "\\langle" else ")", answer)
    # \bmod between numbers is the operation math-verify reads \mod as (it read 3 \bmod 9 as 9)
    answer = re.sub(r"\\bmod(?![A-Za-z])", r"\\mod", _MODULUS.sub(" ", answer))
    answer = _shown_text(_DEGREE_UNIT.sub(r"\1\\text{\2}", answer))
    answer = _SPACING.sub(" ", _THIN_SPACE.sub("", _CLOSING_POINT.sub("", _visible(answer))))
    while (grouped := _NUMBER_GROUP.sub(r"\1\2", answer)) != answer:  # {3}{4}: 3{4}, then 34
        answer = grouped
    answer = _TIMES_BRACKET.sub(" \\\\cdot ", answer)
    if _SPACED_THOUSANDS.fullmatch(answer.strip()):
        return "".join(answer.split())  # 1 000 000: one number, its digits in threes
    if _SPACED_NUMBERS.fullmatch(answer.strip()):
        return ", ".join(answer.split())  # as many numbers as it writes, not their sum
    euler = _EULER.search(re.sub(r"\\[A-Za-z]+", "", _E_NUMBER.sub("", other)))
    return _E_NUMBER.sub(lambda number: number[0] if number[2] and euler else
                         f"{number[1]}E{number[2]}{number[3]}", answer)


def _in_bases(answer: str, other: str) -> str:
    """``answer``'s numbers written in a base as their values where the ``other`` answer writes one
    in a base too (``52_9`` beside ``52_8`` is 47, not 52: math-verify dropped both bases); beside
    an answer that writes none, as its digits (``52_8`` beside ``52`` is 52, as before)."""
    if not _BASE_NUMBER.search(other):
        return answer

    def value(number: re.Match) -> str:
        try:
            return str(int(number[1], int(number[2] or number[3])))
        except ValueError:  # a digit the base has not (5_2), or a base past 36
            return number[0]
    return _BASE_NUMBER.sub(value, answer)


def _as_fraction(repeating: re.Match) -> str:
    """A repeating decimal's ``_REPEATING`` match as the fraction it is (``0.1\\overline{6}``: 1/6)."""
    whole, before, repetend = repeating[1] or "0", repeating[2], repeating[3] or repeating[4]
    denominator = 10 ** len(before) * (10 ** len(repetend) - 1)
    numerator = int(whole) * denominator + int(before + repetend) - int(before or 0)
    return f"\\frac{{{numerator}}}{{{denominator}}}"


def _shown_text(answer: str) -> str:
    """``answer`` with each text group that holds numbers read as it shows them: a number alone
    is that number (``\\text{3}4`` is 34), numbers it offers as alternatives are alternatives
    (``3 \\text{ (or 4)}`` is 3 or 4, as ``3 \\text{ or } 4`` is: math-verify read 3, dropping
    the text; ``3 \\text{ (or } 4`` 4), a number with words is the number and its unit
    (``\\text{5 cm}`` is ``5\\text{ cm}``); other text (``12\\text{ cm}``) stays for math-verify to drop."""
    at = 0
    while (match := _TEXT.search(answer, at)) is not None:
        content = braced(answer, match.end())
        if content is None:
            return answer
        end = match.end() + len(content) + 2
        numbers = written_numbers(content)
        if numbers and re.fullmatch(r"\s*[+-]?\d+(?:\.\d+)?\s*", content):
            shown = content.strip()
        elif ALTERNATIVES.search(content):  # "or" parts what stands either side of it
            parts = [""] * bool(answer[:match.start()].strip()) + numbers + [""] * bool(answer[end:].strip())
            shown = " " + " \\text{ or } ".join(parts) + " "
        elif unit := _NUMBER_AND_WORDS.fullmatch(content):
            shown = f"{unit[1]}\\text{{ {unit[2]}}}"
        else:
            shown = answer[match.start():end]
        answer = answer[:match.start()] + shown + answer[end:]
        at = match.start() + len(shown)
    return answer


def _visible(answer: str) -> str:
    """``answer`` without what ``\\phantom`` (``\\hphantom``, ``\\vphantom``) hides, nor its
    style switches (``\\displaystyle``)."""
    answer = _STYLE.sub(" ", answer)
    while (match := _PHANTOM.search(answer)) is not None:
        hidden = braced(answer, match.end())
        if hidden is None:
            return answer
        answer = answer[:match.start()] + " " + answer[match.end() + len(hidden) + 2:]
    return answer


def _percent_as_value(answer: str, problem: str) -> str:
    """``answer`` (the reply's or the task's) with each percent (a sign, or spelt out) read in
    one unit, the ``problem``'s: where it speaks of percent, its numbers are percents and
    ``25\\%`` is 25; elsewhere a percent is the hundredth it is (``3\\%`` is 0.03). math-verify
    reads ``X\\%`` both ways, X and X/100, so a percent sign on either answer was a hedge:
    ``3\\%`` scored for 3 and for 0.03, ``2500\\%`` for a "What percent …?" of 25 (and
    ``2.5\\%``, a float, only as 0.025); a task's ``25\\%`` took both 25 and 0.25."""
    answer = _PERCENT_WORD.sub(lambda _: "\\%", answer)
    if "%" not in answer:
        return answer
    if _SPEAKS_OF_PERCENT.search(problem):
        return _PERCENT.sub(" ", answer)
    return _PERCENT.sub(lambda _: "\\cdot\\frac{1}{100}", answer)
