"""What an answer says that math-verify's parse loses or misreads, checked on what it parsed.

math-verify grades an equation's right side (``2+2=4`` is 4), so a false equation (``3=4``)
scored for 4; it drops some negations (``\\neq 3`` was 3); it matches decimals to six places,
which a tiny answer has none of (``0.0`` matched 1/2^30). Each check here runs in a grader
process (``math_grader``), on math-verify's parse of the answer, with sympy.
"""

from __future__ import annotations

import re
from typing import Any

#: digits of the largest number an equation of an answer is checked with (``false_equation``)
MAX_DIGITS = 10_000
#: a negated relation (``\\neq``, ``\\not=``), which math-verify parses as ``Ne`` or drops (``\\neq 3``
#: and ``x \\not= 3`` were 3)
_NEGATION = re.compile(r"\\(?:not|neq?)(?![A-Za-z])")


def misread(extracted: str, pred: list[Any]) -> tuple[str, Any] | None:
    """``(why, what it parsed)`` when the answer ``extracted``, parsed as ``pred``, says other
    than the parse: a negation the parse dropped, an equation between different numbers."""
    from sympy import Basic, Ne

    exprs = [item for item in pred if isinstance(item, Basic)]
    if exprs and _NEGATION.search(extracted) and not any(item.has(Ne) for item in exprs):
        return "the answer's negation was dropped in parsing", pred[0]
    false = next((item for item in pred if false_equation(item)), None)
    if false is not None:
        return "the answer's equation is false", false
    return None


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
