"""Grading an answer against gold answers: exact match and token F1 as SQuAD scores them.

SQuAD v1.1's official evaluation normalizes both strings the same way (lower case, drop
punctuation, drop the articles a/an/the, collapse white space), then scores

* **EM**: 1 when the normalized prediction equals a normalized gold answer;
* **F1**: the harmonic mean of token precision and recall (tokens counted as a multiset),
  0 when no token is shared;

each as the maximum over the gold answers. This module follows that definition; the test
checks it against an implementation written independently inside the test. One exception: a
gold answer the normalization empties (an article: "A", the blood type or the vitamin) is
compared, and the prediction with it, with the articles kept; SQuAD's way scored its right
answer F1 0 and any article or punctuation ("the") EM 1. A gold answer of punctuation alone
(the operator "!") is compared as written, case and spacing aside: emptied, it matched an empty
answer, or any punctuation, EM 1.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from typing import Iterable

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text: str, articles: bool = False) -> str:
    """SQuAD's normalization: lower case, no punctuation, no articles (kept with ``articles``),
    single spaces."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join((text if articles else _ARTICLES.sub(" ", text)).split())


def _normalized(prediction: str, gold: str) -> tuple[str, str]:
    """Both normalized, the articles kept where the gold answer is nothing else, the
    punctuation too where it is nothing but punctuation."""
    articles = not normalize_answer(gold)
    if articles and not normalize_answer(gold, articles):
        return " ".join(prediction.lower().split()), " ".join(gold.lower().split())
    return normalize_answer(prediction, articles), normalize_answer(gold, articles)


def exact_match(prediction: str, gold: str) -> float:
    """1.0 when the normalized strings are equal."""
    predicted, expected = _normalized(prediction, gold)
    return float(predicted == expected)


def token_f1(prediction: str, gold: str) -> float:
    """Token-level F1 of the normalized strings (0 when they share no token)."""
    predicted, expected = (text.split() for text in _normalized(prediction, gold))
    shared = sum((Counter(predicted) & Counter(expected)).values())
    if shared == 0:
        return 0.0
    precision = shared / len(predicted)
    recall = shared / len(expected)
    return 2 * precision * recall / (precision + recall)


def grade(prediction: str, golds: Iterable[str]) -> dict[str, float]:
    """``{"em": …, "f1": …}``, each the best over the gold answers."""
    golds = list(golds)
    return {
        "em": max(exact_match(prediction, gold) for gold in golds),
        "f1": max(token_f1(prediction, gold) for gold in golds),
    }
