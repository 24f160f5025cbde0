"""Acceptance sets of the exact two-sided binomial test against scipy's binomtest itself."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from sqlcal.metrics.binomial import acceptance_set, accepted, decide, near_endpoint


@pytest.mark.parametrize("k, n, want", [  # spec seed001 §1.5, including islands
    (0, 42, [(0, 0.0798517), (0.0891418, 0.0892110)]),
    (1, 30, [(0.0017083, 0.1632307), (0.1750557, 0.1772307)]),
    (0, 50, [(0, 0.067147), (0.072912, 0.074975)]),
    (29, 2501, [(0.0079213, 0.0165385), (0.0165846, 0.0167209)]),
])
def test_spec_acceptance_sets(k, n, want):
    got = acceptance_set(k, n, 0.05)
    np.testing.assert_allclose(np.array(got), np.array(want), atol=1e-6)


def test_decisions_equal_scipy_everywhere():
    rng = np.random.default_rng(0)
    checked = 0
    for _ in range(60):
        n = int(rng.integers(1, 2000))
        k = int(rng.integers(0, n + 1))
        alpha = float(rng.choice([0.05, 0.01, 0.1]))
        intervals = acceptance_set(k, n, alpha)
        q = np.concatenate([rng.random(40), np.linspace(0, 1, 101), [0.0, 1.0, k / n],
                            [e + d for iv in intervals for e in iv for d in (-1e-8, 0, 1e-8)]])
        q = q[(q >= 0) & (q <= 1)]
        want = np.array([stats.binomtest(k, n, v).pvalue <= alpha for v in q])
        np.testing.assert_array_equal(decide(k, n, q, alpha, intervals), want)
        # away from the endpoints the intervals alone decide
        far = ~near_endpoint(q, intervals)
        np.testing.assert_array_equal(~accepted(q[far], intervals), want[far])
        checked += len(q)
    assert checked > 8000


@pytest.mark.parametrize("k, n, q, rejected", [  # spec §1.4 special cases and rounding
    (0, 1, 0.95, False), (1, 1, 0.05, True), (0, 5, 0.5, False), (3, 10, 0.65, True),
    (3, 10, 0.6, False), (0, 10, 0.0, False), (1, 10, 0.0, True), (10, 10, 1.0, False),
])
def test_special_cases(k, n, q, rejected):
    assert decide(k, n, np.array([q]), 0.05)[0] == rejected


def test_large_bins_are_fast_and_one_interval():
    import time

    start = time.perf_counter()
    got = acceptance_set(5_000_000, 10_000_000, 0.05)
    assert time.perf_counter() - start < 5
    half = stats.norm.isf(0.025) * np.sqrt(0.25 / 1e7)
    np.testing.assert_allclose(got, [(0.5 - half, 0.5 + half)], atol=1e-6)


@pytest.mark.parametrize("k, n, alpha", [(1, 1000, 0.05), (5, 100_000, 0.01), (1, 10**6, 0.001)])
def test_lower_endpoints_near_zero(k, n, alpha):
    # review finding: lower endpoints come through the mirror 1 − q and are exact only to
    # ~1e-12 absolute; just below them scipy still accepts
    lo = acceptance_set(k, n, alpha)[0][0]
    q = np.array([lo * (1 - 2e-9), lo * (1 - 1e-6), lo * (1 + 1e-6), lo * 0.5, lo * 1.5])
    want = np.array([stats.binomtest(k, n, v).pvalue <= alpha for v in q])
    np.testing.assert_array_equal(decide(k, n, q, alpha), want)
