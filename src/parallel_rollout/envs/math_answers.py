"""What an answer says that math-verify's parse loses or misreads, checked on what it parsed.

math-verify grades an equation's right side (``2+2=4`` is 4), so a false equation (``3=4``)
scored for 4; it drops some negations (``\\neq 3`` was 3), scripts on nothing (``{}_3 4`` was
4) and numbers of LaTeX it cannot parse (``3 \\relax 4`` was 4); it matches decimals to six
places, which a tiny answer has none of (``0.0`` matched 1/2^30). Each check here runs in a
grader process (``math_grader``), on math-verify's parse of the answer, with sympy.
"""

from __future__ import annotations

import re
from typing import Any

#: digits of the largest number an equation of an answer is checked with (``false_equation``)
MAX_DIGITS = 10_000
#: a negated relation (``\\neq``, ``\\not=``), which math-verify parses as ``Ne`` or drops (``\\neq 3``
#: and ``x \\not= 3`` were 3)
_NEGATION = re.compile(r"\\(?:not|neq?)(?![A-Za-z])")
#: a sub- or superscript with a number in it on nothing (``{}_3 4``, ``{}^{3} 4``, ``\\vphantom{x}_3 4``: a
#: small 3 before the 4), which math-verify drops (all were 4)
_PRESCRIPT = re.compile(r"(?:^|[{(\[,=+\-*/<>]|\{\s*\})\s*[_^]\s*(?:\{[^{}]*\d|\d)")
#: a number as the answer shows it; a text group with the unit power after it and a modulus, whose
#: numbers are no part of its value (``12\\text{ cm}^2``, ``4 \\text{ (since 2+2=4)}``,
#: ``x \\equiv 7 \\pmod{9}``)
_SHOWN_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_ASIDE = re.compile(r"\\(?:text|mbox)\s*\{[^{}]*\}(?:\^\s*(?:\d|\{[^{}]*\}))?|\\pmod\s*(?:\{[^{}]*\}|\d+)")
#: a bar, or an invisible delimiter: parts numbers (``3 | 4``, ``3 \\right. 4`` were 4) where the
#: parse kept one of them, not where it read the whole (``|3| + |4|``, ``\\left|3\\right|``)
_BAR = r"\\(?:left|right)\s*[.|]|(?<![\\a-z])\|"
#: a relation or connective math-verify keeps one side of (``3 \\approx 4`` was 3; ``3 \\sim 4``,
#: ``3 \\Rightarrow 4``, ``3 \\vee 4``, ``3 | 4`` were 4): between two numbers, a hedge
_ONE_SIDED = re.compile(r"\\(?:approx|approxeq|thickapprox|sim|simeq|thicksim|backsim|cong|doteq|asymp|bumpeq"
                        r"|Bumpeq|propto|to|gets|mapsto|(?:long)?(?:left|right|leftright)arrow"
                        r"|(?:Long)?(?:Left|Right|Leftright)arrow|iff|implies|impliedby|mid|vee|lor|wedge|land"
                        r"|setminus|backslash|therefore|because|vdash|parallel|perp|coloneqq|eqqcolon"
                        r"|dots|ldots|cdots|vdots|ddots|dotsc|dotsb|atop|above"
                        # symbols math-verify drops what comes before (3 \\ll 4 was 4)
                        r"|lessgtr|gtrless|ll|gg|in|notin|ni|subset|supset|subseteq|supseteq|sqsubset|sqsupset"
                        r"|prec|succ|preceq|succeq|dagger|dag|ddagger|ddag|star|ast|bullet|diamond|oplus|ominus"
                        r"|otimes|oslash|odot|uplus|cup|cap|sqcup|sqcap|amalg|wr|lhd|rhd|unlhd|unrhd|triangleleft"
                        r"|triangleright|smile|frown|bowtie|models|top|bot|forall|exists|nexists|partial|checkmark"
                        r"|S|P|uparrow|downarrow|updownarrow|Uparrow|Downarrow|nearrow|searrow|swarrow|nwarrow"
                        r"|hookrightarrow|hookleftarrow|rightharpoonup|rightharpoondown|leftharpoonup"
                        r"|rightleftharpoons|longmapsto|colon|ldotp)(?![A-Za-z])"
                        r"|(?<![\\^_])\\circ(?![A-Za-z])"  # not a degree sign, 30^\\circ
                        r"|\\\\|&|:=|\\operatorname\s*\{\s*(?:or|and|xor)\s*\}|" + _BAR)
#: what LaTeX sets apart as a column, a line, dots, rows (``3 & 4``, ``3 \\\\ 4`` was 7, ``3 \\ldots 4``
#: 7, ``\\begin{cases} 3 \\\\ 4 \\end{cases}`` 4) is a connective too; ``\\begin``/``\\end`` of rows
#: that are no matrix are dropped from the sides
_ROWS = re.compile(r"\\(?:begin|end)\s*\{(?:cases|aligned|align|alignat|gathered|gather|split|eqnarray|array|multline)"
                   r"\*?\}(?:\s*\{[^{}]*\})?")
#: the relations that say two numbers are near: their sides may differ by a rounding
_NEAR = frozenset({"\\approx", "\\approxeq", "\\thickapprox", "\\sim", "\\simeq", "\\thicksim", "\\backsim",
                   "\\cong", "\\doteq", "\\asymp", "\\bumpeq", "\\Bumpeq"})
#: a side that is a decimal written out, rounded to as many places as it has
_DECIMAL = re.compile(r"\s*[+-]?\d*\.(\d+)\s*")
_OPENS, _CLOSES = frozenset("{(["), frozenset("})]")
#: rows stacked in one place (``\\substack{3 \\\\ 4}`` was 4): parted as rows are
_SUBSTACK = re.compile(r"\\substack\s*\{")


def misread(extracted: str, pred: list[Any]) -> tuple[str, Any] | None:
    """``(why, what it parsed)`` when the answer ``extracted``, parsed as ``pred``, says other
    than the parse: a negation the parse dropped, a number in a script on nothing, an equation
    between different numbers, two numbers joined by a relation the parse kept one side of."""
    from sympy import Basic, Ne

    exprs = [item for item in pred if isinstance(item, Basic)]
    if exprs and _NEGATION.search(extracted) and not any(item.has(Ne) for item in exprs):
        return "the answer's negation was dropped in parsing", pred[0]
    if exprs and _PRESCRIPT.search(extracted):
        return "the answer writes a number as a script on nothing, which the parse dropped", pred[0]
    if exprs and lost_number(extracted, pred):
        return "the answer writes a number that math-verify's reading of it lost", pred[0]
    false = next((item for item in pred if false_equation(item)), None)
    if false is not None:
        return "the answer's equation is false", false
    if pred and two_numbers(extracted, pred[0]):
        return "the answer names two different numbers, of which the parse kept one", pred[0]
    return None


def lost_number(extracted: str, pred: list[Any]) -> bool:
    """Whether math-verify's reading ``pred`` of ``extracted`` lost a number the answer shows
    outside its text: where the LaTeX does not parse, math-verify takes the last number it finds
    (``3 \\relax 4``, ``\\color{red}{3} 4`` and ``3 ? 4`` were 4), and its removal of units drops
    all from an answer's first text group when it ends in one (``3 \\text{ hours } 4 \\text{
    minutes}`` was 3). The numbers of an equation's last side count, as math-verify grades it."""
    from dataclasses import replace

    from latex2sympy2_extended.math_normalization import normalize_latex
    from math_verify import LatexExtractionConfig, parse

    config = replace(LatexExtractionConfig().normalization_config, boxed="none", nits=False)
    # an equation's last side is its answer (1 + 2 + \\dots + 10 = 55, which does not parse, is 55)
    last_side = re.split(r"(?<![\\<>!])=", normalize_latex(extracted, replace(config, units=False)))[-1]
    shown = _values(_ASIDE.sub(" ", last_side))
    if any(not isinstance(item, str) for item in parse(as_latex(extracted), parsing_timeout=None,
                                                        extraction_config=[LatexExtractionConfig()])):
        kept = normalize_latex(extracted, config)  # what its LaTeX reading parsed
    else:
        kept = str(pred[0])  # what its fallback found in the text
    return not shown <= _values(kept)


def _values(text: str) -> set[Any]:
    """The values of the numbers ``text`` writes (``1,000`` one number, ``5.50`` as ``5.5``)."""
    from fractions import Fraction

    return {Fraction(number) for number in _SHOWN_NUMBER.findall(re.sub(r"(?<=\d),(?=\d{3})", "", text))}


def as_parsed_latex(answer: str, parsed: list[Any]) -> list[Any]:
    """``parsed``, math-verify's parse of ``answer``, without what its fallback found in the text
    where the answer's LaTeX did not parse: a number of it, no value of the answer (a task's answer
    ``\\hbar \\omega(v+1/2)-\\frac{E_{0}^{2} e^{2}}{2 m \\omega^{2}}`` was read as 2, which a reply of 2
    matched); its text alone then, which only the same text matches."""
    from math_verify import LatexExtractionConfig, parse

    if any(not isinstance(item, str) for item in parse(as_latex(answer), parsing_timeout=None,
                                                        extraction_config=[LatexExtractionConfig()])):
        return parsed
    return [item for item in parsed if isinstance(item, str)] or parsed


def as_latex(answer: str) -> str:
    """``answer`` as math-verify's parse takes a boxed answer."""
    # Python's power operator is common in replies; LaTeX parsing reads "**" as nonsense.
    return "$\\boxed{" + answer.replace("**", "^") + "}$"


def _sides(extracted: str) -> tuple[list[str], set[str]]:
    """The sides of ``extracted`` parted at its outermost connectives that math-verify keeps one
    side of (or adds up), ``\\begin``/``\\end`` of rows dropped; and the kinds of those parting
    it (``near``: ``\\approx`` and kin, ``bar``: a bar or an invisible delimiter, ``other``);
    ``[extracted]`` when it has none."""
    extracted = _substacks_opened(extracted)
    depth, last, sides, kinds = 0, 0, [], set()
    cuts = {match.start(): match for match in _ONE_SIDED.finditer(extracted)}
    index = 0
    while index < len(extracted):
        char = extracted[index]
        if index in cuts and depth == 0 and not re.search(r"\\(?:left|right|[bB]ig+[lr]?)\s*$", extracted[:index]):
            match = cuts[index]
            sides.append(extracted[last:index])
            cut = match.group()
            kinds.add("near" if cut in _NEAR else "bar" if re.fullmatch(_BAR, cut) else "other")
            last = index = match.end()
            continue
        if char == "\\":  # a command; \\{ and \\} group as braces do (\\{x \\mid x > 0\\})
            char = extracted[index + 1:index + 2]
            depth = max(depth + (char == "{") - (char == "}"), 0)
            index += 2
            continue
        depth += char in _OPENS
        depth = max(depth - (char in _CLOSES), 0)
        index += 1
    return [_ROWS.sub(" ", side) for side in sides + [extracted[last:]]], kinds


def _substacks_opened(text: str) -> str:
    """``text`` with each ``\\substack{…}`` written as its rows (``\\substack{3 \\\\ 4}``: 3 \\\\ 4)."""
    while (match := _SUBSTACK.search(text)) is not None:
        depth = 0
        for end in range(match.end() - 1, len(text)):
            if text[end - 1] != "\\":
                depth += {"{": 1, "}": -1}.get(text[end], 0)
            if depth == 0:
                break
        else:
            return text  # never closed
        text = text[:match.start()] + text[match.end():end] + text[end + 1:]
    return text


def two_numbers(extracted: str, whole: Any) -> bool:
    """Whether ``extracted``, parsed as the real number ``whole``, parts two different real
    numbers by a connective math-verify keeps one side of or adds up: ``3 \\approx 4`` was 3,
    ``3 \\vee 4`` 4 and ``3 \\\\ 4`` 7, so a reply naming two answers scored for either (a bar
    only where the parse is one of them: ``|3| + |4|`` is 7). Near relations (``\\approx``) hold to
    the places of their decimal sides (``\\pi \\approx 3.14``); sides that are no number
    (``2x = 8 \\Rightarrow x = 4``) are not compared."""
    from math_verify import parse
    from sympy import Expr

    sides, kinds = _sides(extracted)
    if len(sides) < 2 or not _real(whole, Expr):
        return False
    numbers = []
    for side in sides:
        parsed = parse(as_latex(side), parsing_timeout=None) if side.strip() else []
        if parsed and _real(parsed[0], Expr):
            decimal = _DECIMAL.fullmatch(side)
            numbers.append((parsed[0], len(decimal[1]) if decimal else None))
    if kinds == {"bar"} and not any(not differ(whole, number) for number, _ in numbers):
        return False  # the parse is none of the sides: it read the whole (|3| + |4|)
    near = "near" in kinds
    return any(_apart(a, b, near) for index, a in enumerate(numbers) for b in numbers[index + 1:])


def _real(value: Any, expr_type: type) -> bool:
    return isinstance(value, expr_type) and value.is_number and bool(value.is_extended_real)


def _apart(a: tuple[Any, int | None], b: tuple[Any, int | None], near: bool) -> bool:
    """Whether two sides (a number and its decimal places, None when exact) differ: beyond a
    rounding to the fewer places when ``near``, else at all."""
    places = [p for p in (a[1], b[1]) if p is not None]
    if not (near and places):
        return differ(a[0], b[0])
    return bool(abs((a[0] - b[0]).evalf(30)) > 5 * 10 ** -(min(places) + 1))


def false_equation(expr: Any) -> bool:
    """Whether ``expr`` is an equation (or a chain of them, ``x = 2+2 = 4``) that sets two
    different real numbers equal: ``3 = 4``, ``x = 4 = 3``, ``\\pi = 3``. math-verify grades an
    equation's right side (``2+2 = 4`` is 4), so ``\\boxed{3=4}`` scored for 4. Sides with a
    decimal are left to it (``\\sqrt{2} = 1.414`` is a rounding a reply may write), and sides
    sympy does not know to be real (``\\sqrt[3]{2-\\sqrt{5}}`` is its complex principal root)."""
    from sympy import And, Eq, Expr, Float

    equations = expr.args if isinstance(expr, And) else (expr,)
    if not equations or not all(isinstance(eq, Eq) for eq in equations):
        return False
    numbers = [side for eq in equations for side in (eq.lhs, eq.rhs)
               if isinstance(side, Expr) and side.is_number and side.is_extended_real and not side.atoms(Float)]
    return any(differ(number, numbers[0]) for number in numbers[1:])


def off_in_size(gold: Any, pred: Any) -> bool:
    """Whether a decimal ``pred`` is off the ``gold`` number by more than a thousandth of its
    size: math-verify matches decimals to six places, which a tiny answer has none of (``0.0``
    matched 1/2^30, ``0.0000014`` matched 0.000001)."""
    from sympy import Expr, Float

    if not (isinstance(pred, Float) and isinstance(gold, Expr) and gold.is_number
            and gold.is_extended_real and not gold.is_infinite):
        return False
    return bool(abs((pred - gold).evalf(30)) > abs(gold.evalf(30)) * 1e-3)


def differ(a: Any, b: Any) -> bool:
    """Whether the real numbers ``a`` and ``b`` differ: as 30 digits tell, relatively, and when
    they agree so far, as every digit of the larger and 30 more tell (sympy's simplify leaves
    some equal pairs, identities of trigonometry, unsimplified); past ``MAX_DIGITS`` digits
    that is not known (False: left to math-verify)."""
    if a.is_infinite or b.is_infinite:
        return a != b
    size = abs(a.evalf(30)) + abs(b.evalf(30))
    gap = abs((a - b).evalf(30))
    if not (size.is_Number and gap.is_Number):
        return False
    if gap > size * 1e-20:
        return True
    if size > 10 ** MAX_DIGITS:
        return False
    return bool(abs((a - b).evalf(30 + len(str(int(size))))) > 1e-20)
