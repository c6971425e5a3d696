"""Grading an answer against gold answers: exact match and token F1 as SQuAD scores them.

SQuAD v1.1's official evaluation normalizes both strings the same way (lower case, drop
punctuation, drop the articles a/an/the, collapse white space), then scores

* **EM**: 1 when the normalized prediction equals a normalized gold answer;
* **F1**: the harmonic mean of token precision and recall (tokens counted as a multiset),
  0 when no token is shared;

each as the maximum over the gold answers. This module follows that definition; the test
checks it against an implementation written independently inside the test.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from typing import Iterable

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD's normalization: lower case, no punctuation, no articles, single spaces."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, gold: str) -> float:
    """1.0 when the normalized strings are equal."""
    return float(normalize_answer(prediction) == normalize_answer(gold))


def token_f1(prediction: str, gold: str) -> float:
    """Token-level F1 of the normalized strings (0 when they share no token)."""
    predicted = normalize_answer(prediction).split()
    expected = normalize_answer(gold).split()
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
