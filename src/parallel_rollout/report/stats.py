"""The statistics the report, ``compare`` and the gates print: exact where it is cheap.

* ``wilson_interval``: the Wilson score interval of a success rate; unlike the normal
  interval it stays inside [0, 1] and is honest at 0/n and n/n.
* ``mcnemar_exact``: McNemar's exact test for paired pass/fail outcomes. Only the discordant
  samples count (b passed in A and failed in B, c the reverse); under "no difference" each
  discordant sample is a fair coin, so the p-value is a two-sided binomial test of b out of
  b + c at 1/2.
* ``signed_rank_test``: a paired test for rewards that assumes no distribution: the
  Wilcoxon signed-rank statistic, exact (its whole null distribution, counted) up to
  ``EXACT_MAX_PAIRS`` nonzero differences, the normal approximation with the tie
  correction above that.

Pure standard library: the runtime has no scipy; the tests check these against scipy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Sequence

#: two-sided 95% normal quantile
Z_95 = NormalDist().inv_cdf(0.975)
#: nonzero paired differences up to which the signed-rank test counts its exact distribution
EXACT_MAX_PAIRS = 60
#: p-value below which a difference is called significant
ALPHA = 0.05


def wilson_interval(successes: int, n: int, z: float = Z_95) -> tuple[float, float] | None:
    """The Wilson score interval (low, high) of ``successes`` out of ``n``; None when n is 0."""
    if n <= 0:
        return None
    low, high = wilson_at(successes / n, n, z)
    # exact at the ends (0/n, n/n), where rounding would leave 1e-17 off the bound
    return (0.0 if successes == 0 else low), (1.0 if successes == n else high)


def wilson_at(p: float, n: float, z: float = Z_95) -> tuple[float, float]:
    """The Wilson score interval of a rate ``p`` observed over ``n`` trials (``n`` may be an
    effective, fractional number: clustered.py)."""
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def binom_two_sided_half(k: int, n: int) -> float:
    """Two-sided p-value of ``k`` successes in ``n`` fair coin flips (exact)."""
    if n == 0:
        return 1.0
    low = min(k, n - k)
    # P(X <= low) for X ~ Binomial(n, 1/2), summed as integers to stay exact for large n
    tail = sum(math.comb(n, i) for i in range(low + 1))
    return min(1.0, 2 * tail / 2**n)


@dataclass(frozen=True)
class PairedResult:
    """A paired test's outcome: what it compared and how surprising the difference is."""

    test: str
    pairs: int
    statistic: float
    p_value: float

    @property
    def significant(self) -> bool:
        """Below ``ALPHA``."""
        return self.p_value < ALPHA


def mcnemar_exact(pass_to_fail: int, fail_to_pass: int) -> PairedResult:
    """McNemar's exact test: ``pass_to_fail`` (b) against ``fail_to_pass`` (c)."""
    n = pass_to_fail + fail_to_pass
    return PairedResult("mcnemar_exact", n, float(pass_to_fail), binom_two_sided_half(pass_to_fail, n))


def _midranks(values: Sequence[float]) -> list[float]:
    """Ranks 1..n of ``values``, ties sharing their mean rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for m in range(i, j + 1):
            ranks[order[m]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def signed_rank_test(differences: Sequence[float]) -> PairedResult:
    """Wilcoxon signed-rank test of paired differences (B - A); zero differences dropped."""
    diffs = [d for d in differences if d != 0]
    n = len(diffs)
    if n == 0:
        return PairedResult("wilcoxon_signed_rank", 0, 0.0, 1.0)
    ranks = _midranks([abs(d) for d in diffs])
    w_plus = sum(r for r, d in zip(ranks, diffs) if d > 0)
    if n <= EXACT_MAX_PAIRS:
        p = _exact_signed_rank_p(ranks, w_plus)
        return PairedResult("wilcoxon_signed_rank_exact", n, w_plus, p)
    mean = n * (n + 1) / 4
    ties: dict[float, int] = {}
    for r in ranks:
        ties[r] = ties.get(r, 0) + 1
    var = n * (n + 1) * (2 * n + 1) / 24 - sum(t**3 - t for t in ties.values()) / 48
    if var <= 0:
        return PairedResult("wilcoxon_signed_rank_normal", n, w_plus, 1.0)
    z = (w_plus - mean) / math.sqrt(var)
    p = min(1.0, 2 * (1 - NormalDist().cdf(abs(z))))
    return PairedResult("wilcoxon_signed_rank_normal", n, w_plus, p)


def _exact_signed_rank_p(ranks: Sequence[float], w_plus: float) -> float:
    """Two-sided exact p-value of W+ given the ranks: every sign pattern equally likely.

    Midranks are multiples of 1/2, so doubled they are integers and the null distribution
    of W+ is counted exactly by a subset-sum table."""
    doubled = [round(2 * r) for r in ranks]
    total = sum(doubled)
    counts = [0] * (total + 1)
    counts[0] = 1
    reach = 0
    for r in doubled:
        reach += r
        for s in range(reach, r - 1, -1):
            counts[s] += counts[s - r]
    observed = round(2 * w_plus)
    # symmetric around total / 2: the tail on the observed side, doubled
    if 2 * observed >= total:
        tail = sum(counts[observed:])
    else:
        tail = sum(counts[: observed + 1])
    return min(1.0, 2 * tail / 2 ** len(doubled))
