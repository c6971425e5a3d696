"""The statistics of the regression gate (``--compare-to``) and of the report's intervals,
against scipy and hand counts: McNemar's exact test, the Wilcoxon signed-rank test (exact,
with ties, normal), Wilson's interval."""

from __future__ import annotations

import math

import pytest

from parallel_rollout.report.stats import mcnemar_exact, signed_rank_test, wilson_interval

scipy_stats = pytest.importorskip("scipy.stats")


@pytest.mark.parametrize("b,c", [(0, 0), (6, 0), (5, 1), (3, 9), (20, 11), (140, 100)])
def test_mcnemar_exact_matches_scipy_binomtest(b, c):
    result = mcnemar_exact(b, c)
    expected = 1.0 if b + c == 0 else scipy_stats.binomtest(b, b + c, 0.5).pvalue
    assert math.isclose(result.p_value, expected, rel_tol=1e-9, abs_tol=1e-15)


def test_mcnemar_hand_computed():
    # 6 discordant pairs all one way: 2 * (1/2)^6
    assert mcnemar_exact(6, 0).p_value == 2 / 64 and mcnemar_exact(6, 0).significant
    assert not mcnemar_exact(5, 0).significant  # 2/32 = 0.0625


@pytest.mark.parametrize("diffs", [
    [0.5, -0.2, 0.9, 0.1, -0.05, 0.7, 0.3, 0.25],
    [1.5, 2.25, -0.75, 3.5, 0.125, -2.0, 4.0, 1.0, 0.5, 2.75, -0.3, 5.0],
])
def test_signed_rank_exact_matches_scipy(diffs):
    result = signed_rank_test(diffs)
    expected = scipy_stats.wilcoxon(diffs, method="exact", alternative="two-sided")
    assert result.test.endswith("exact")
    assert math.isclose(result.p_value, expected.pvalue, rel_tol=1e-9)


def test_signed_rank_with_ties_matches_a_permutation_count():
    # ties and zeros: the exact distribution over 2^n sign patterns, counted by brute force
    diffs = [1.0, 1.0, -1.0, 0.5, 0.5, 2.0, 0.0, 1.0, -0.5, 2.0]
    result = signed_rank_test(diffs)
    nonzero = [d for d in diffs if d]
    ranks = scipy_stats.rankdata([abs(d) for d in nonzero])
    observed = sum(r for r, d in zip(ranks, nonzero) if d > 0)
    centre = sum(ranks) / 2
    count = 0
    for mask in range(2 ** len(nonzero)):
        w = sum(r for i, r in enumerate(ranks) if mask >> i & 1)
        count += abs(w - centre) >= abs(observed - centre) - 1e-9
    assert math.isclose(result.p_value, count / 2 ** len(nonzero), rel_tol=1e-9)


def test_signed_rank_normal_matches_scipy_for_many_pairs():
    diffs = [((i * 37) % 23 - 9) / 7 for i in range(200)]
    result = signed_rank_test(diffs)
    expected = scipy_stats.wilcoxon(diffs, method="approx", correction=False, zero_method="wilcox")
    assert result.test.endswith("normal")
    assert math.isclose(result.p_value, expected.pvalue, rel_tol=1e-6)


def test_wilson_interval_hand_computed():
    low, high = wilson_interval(8, 10)
    assert (round(low, 4), round(high, 4)) == (0.4902, 0.9433)
    assert wilson_interval(0, 5)[0] == 0.0 and wilson_interval(5, 5)[1] == 1.0
    assert wilson_interval(0, 0) is None
