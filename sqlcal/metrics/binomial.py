"""The exact two-sided binomial test of TCE, as sets of accepted probabilities.

``scipy.stats.binomtest(k, n, q).pvalue`` (two-sided, "minlike") is not monotone in q, so the set
A(k, n, α) = {q : p-value > α} is a union of intervals, usually one (k = 29, n = 2501 has an
island). The test is TCE's: Matsubara, Tax, Mudd & Guy (2023), TCE: A Test-Based Approach to
Measuring Calibration Error. ``acceptance_set`` finds every interval from the structure of the
p-value:

- for q > k/n the tail set is {j ≥ k+1 : f(j) ≤ c·f(k)} ∪ {0..k} with c = 1 + 1e-7, and j belongs to
  it iff q ≤ t_j, logit(t_j) = (ln c + ln C(n,k) − ln C(n,j))/(j − k), nondecreasing in j;
- on (t_{j−1}, t_j] the p-value is g_j(q) = F(k; q) + S_j(q) (S_j = P(X ≥ j)), quasi-convex with
  its minimum at logit(q_m) = (ln C(n−1,k) − ln C(n−1,j−1))/(j − 1 − k);
- so each segment contributes at most one accepted piece at each end, found by bisection;
- q < k/n follows by symmetry: pval(k, n, q) = pval(n − k, n, 1 − q).

Endpoints are accurate to far better than ``GUARD`` relative (about 1e-12 absolute for lower
endpoints, which come through the mirror 1 − q); a score within ``guard(endpoint)`` (1e-9 relative,
at least 1e-11 absolute) of an endpoint is decided by the p-value itself (:func:`pvalue`), for
parity with scipy's floating-point decisions.
"""

from __future__ import annotations

import numpy as np
from scipy import special, stats

C = 1 + 1e-7  # scipy's relative tolerance on "as likely as the observed outcome"
GUARD = 1e-9


def pvalue(k: int, n: int, q) -> np.ndarray:
    """scipy's two-sided binomtest p-value, for many q (a loop over scipy: use on few values)."""
    q = np.atleast_1d(np.asarray(q, float))
    return np.array([stats.binomtest(int(k), int(n), float(v)).pvalue for v in q])


def acceptance_set(k: int, n: int, alpha: float) -> list[tuple[float, float]]:
    """Closed intervals [lo, hi] whose union is {q ∈ [0, 1] : binomtest(k, n, q).pvalue > α},
    up to floating rounding at the endpoints."""
    k, n = int(k), int(n)
    if n <= 0:
        return [(0.0, 1.0)]
    right = _right_side(k, n, alpha)
    left = [(1 - hi, 1 - lo) for lo, hi in _right_side(n - k, n, alpha)]
    pieces = sorted(left + [(k / n, k / n)] + right)
    merged = []
    for lo, hi in pieces:
        # pieces that touch up to rounding (the left side is mirrored through 1 − q, exact only
        # to an ulp of 1) are one interval
        if merged and lo <= merged[-1][1] + 4 * np.spacing(1.0):
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return [(max(lo, 0.0), min(hi, 1.0)) for lo, hi in merged]


def _right_side(k: int, n: int, alpha: float) -> list[tuple[float, float]]:
    """Accepted intervals with q > k/n, all segments evaluated at once."""
    if k >= n:
        return []
    # beyond q_stop every p-value is ≤ (1 + c(n − k))·F(k; q) ≤ α: only t_j below it matter
    bound = lambda q, _: (1 + C * (n - k)) * stats.binom.cdf(k, n, q)  # noqa: E731
    q_stop = float(_crossings(bound, np.array([k / n]), np.array([1.0]), np.array([0]), alpha,
                              True)[0])
    size = 64
    while True:  # the segments' right ends t_j, for j = k+1 … up to the first beyond q_stop
        inner = np.arange(k + 1, min(k + 1 + size, n + 1))
        log_ratio = (np.log(C) + _log_choose(n, k) - _log_choose(n, inner)) / (inner - k)
        t = np.maximum.accumulate(special.expit(log_ratio))
        if t[-1] > q_stop or inner[-1] == n:
            break
        size *= 4
    last = inner[-1] == n  # then segment n+1, (t_n, 1], has no right tail
    j = np.append(inner, n + 1) if last else inner  # segment j is (t_{j−1}, t_j]
    a = np.concatenate([[k / n], t]) if last else np.concatenate([[k / n], t[:-1]])
    b = np.append(t, 1.0) if last else t
    keep = (b > a) & (a <= q_stop)
    j, a, b = j[keep], a[keep], b[keep]
    if not len(j):
        return []

    def g(q, jj):  # the p-value on segment jj: F(k; q) + P(X ≥ jj)
        return stats.binom.cdf(k, n, q) + np.where(jj <= n, stats.binom.sf(jj - 1, n, q), 0.0)

    with np.errstate(divide="ignore", invalid="ignore"):
        jm = np.minimum(j, n)
        m = special.expit((_log_choose(n - 1, k) - _log_choose(n - 1, jm - 1))
                          / np.maximum(jm - 1 - k, 1))
    m = np.where(j > n, b, np.clip(m, a, b))  # no right tail: g = F(k; q) is decreasing
    first = j == k + 1  # every outcome is in the tail there: the p-value is 1
    whole = first | (g(m, j) > alpha)
    g_a, g_b = g(a, j), g(b, j)
    out = [(x, y) for x, y in zip(a[whole], b[whole])]
    down = ~whole & (g_a > alpha)  # decreasing part [a, m]: accepted up to the crossing
    up = ~whole & (m < b) & (g_b > alpha)  # increasing part [m, b]: accepted after it
    out += list(zip(a[down], _crossings(g, a[down], m[down], j[down], alpha, True)))
    out += list(zip(_crossings(g, m[up], b[up], j[up], alpha, False), b[up]))
    return out


def _crossings(g, lo, hi, j, alpha: float, decreasing: bool) -> np.ndarray:
    """Vectorised bisection for where g(·, j) crosses α on each [lo, hi] (g monotone there),
    down to a width far below GUARD (nearer an endpoint, the p-value itself decides)."""
    lo, hi = np.array(lo, float), np.array(hi, float)
    for _ in range(200):
        active = (hi - lo) > 1e-3 * GUARD * np.maximum(np.abs(lo), 1e-12)
        if not active.any():
            break
        mid = (lo + hi) / 2
        keep_going = (g(mid, j) > alpha) == decreasing  # still on the accepted side
        lo = np.where(active & keep_going, mid, lo)
        hi = np.where(active & ~keep_going, mid, hi)
    return lo if decreasing else hi


def _log_choose(n, k):
    return special.gammaln(n + 1) - special.gammaln(k + 1) - special.gammaln(n - k + 1)


def accepted(q: np.ndarray, intervals: list[tuple[float, float]]) -> np.ndarray:
    """Whether each q lies in the union of the intervals (endpoints included)."""
    q = np.asarray(q, float)
    out = np.zeros(q.shape, bool)
    for lo, hi in intervals:
        out |= (q >= lo) & (q <= hi)
    return out


def guard(end: float) -> float:
    """How near an endpoint a score must be for its decision to be left to the p-value: GUARD
    relative, at least 1e-11 absolute, since lower endpoints come from mirroring the upper side
    of (n − k, n) through 1 − q, where bisection resolves about 1e-12 absolute."""
    return max(GUARD * abs(end), 1e-11)


def near_endpoint(q: np.ndarray, intervals: list[tuple[float, float]]) -> np.ndarray:
    """Scores within GUARD (relative) of an interval endpoint: their decision is a rounding call."""
    q = np.asarray(q, float)
    out = np.zeros(q.shape, bool)
    for end in (e for interval in intervals for e in interval):
        out |= np.abs(q - end) <= guard(end)
    return out


def decide(k: int, n: int, q: np.ndarray, alpha: float,
           intervals: list[tuple[float, float]] | None = None) -> np.ndarray:
    """Rejected (True) or not for each q, exactly as scipy decides (pvalue ≤ α)."""
    q = np.asarray(q, float)
    intervals = acceptance_set(k, n, alpha) if intervals is None else intervals
    rejected = ~accepted(q, intervals)
    close = near_endpoint(q, intervals)
    if close.any():
        rejected[close] = pvalue(k, n, q[close]) <= alpha
    return rejected
