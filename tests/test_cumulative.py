"""Cutoff calibration error, Kuiper and KS against brute force over all intervals, the specs'
hand-checked fixtures, and independent forms of the Brownian-motion distributions."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import integrate, stats

import sqlcal
from sqlcal.metrics.cumulative import ks_sf, kuiper_sf
from tests.conftest import calibration_data


def brute_force_cutoff(p, y, w):
    """max over all intervals [a, b] of distinct scores of |Σ w (y − p)| / W, by enumeration."""
    p, y, w = (np.asarray(a, float) for a in (p, y, w))
    levels = np.unique(p)
    best, where = 0.0, (np.nan, np.nan, np.nan)
    for i, a in enumerate(levels):
        for b in levels[i:]:
            m = (p >= a) & (p <= b)
            s = (w[m] * (y[m] - p[m])).sum()
            if abs(s) > best + 1e-15:
                best, where = abs(s), (a, b, s)
    return best / w.sum(), where


# (scores, labels, weights, value): spec seed000 §3.5 and seed004 §11
FIXTURES = [
    ([0.2, 0.2, 0.8, 0.8], [1, 0, 0, 0], None, 0.4),
    ([0.2, 0.2, 0.8, 0.8], [1, 0, 0, 0], [1, 3, 1, 1], 1.6 / 6),
    ([0.2, 0.2, 0.8, 0.8], [0, 1, 1, 1], None, 0.25),
    ([0.5, 0.5], [1, 0], None, 0.0),
    ([0.1, 0.2, 0.3, 0.4, 0.5], [1, 0, 1, 0, 1], None, 0.3),
    ([0.3, 0.3, 0.9], [1, 0, 0], [2, 1, 1], 0.275),
    ([0.1, 0.4, 0.6, 0.9], [0, 1, 0, 1], None, 0.15),
    ([0.7], [0], None, 0.7),
]


@pytest.mark.parametrize("p, y, w, want", FIXTURES)
@pytest.mark.parametrize("method", ["exact", "grid"])
def test_hand_checked_fixtures(upload, p, y, w, want, method):
    df = pd.DataFrame({"p": p, "y": y, "w": w or [1.0] * len(p)})
    got = sqlcal.cutoff_error(upload(df), score="p", label="y", weight="w", method=method).iloc[0]
    if method == "exact":
        assert got.cutoff_error == pytest.approx(want, abs=1e-12)
        assert got.grid_bound == 0
    else:  # grid mode brackets the exact value
        assert got.cutoff_error <= want + 1e-12 <= got.cutoff_error + got.grid_bound + 2e-12


@pytest.mark.parametrize("seed", range(4))
def test_matches_brute_force_with_ties_weights_groups(upload, seed):
    rng = np.random.default_rng(seed)
    df = calibration_data(90, seed=seed, groups=3, ties=True, weights=True)  # scores to 0.01
    if seed % 2:
        df["p"] = np.round(df.p, 1)  # heavier ties
    df.loc[rng.random(len(df)) < 0.1, "w"] = 0.0
    got = sqlcal.cutoff_error(upload(df), score="p", label="y", weight="w", by="g",
                              cells=[4, 4096, 2, 1024][seed])
    for _, row in got.iterrows():
        part = df[df.g == row.g]
        want, (a, b, s) = brute_force_cutoff(part.p, part.y, part.w)
        assert row.cutoff_error == pytest.approx(want, abs=1e-12)
        # the reported worst interval (lower exclusive, upper inclusive) holds the reported gap
        m = (part.p > row.interval_lower) & (part.p <= row.interval_upper)
        mass = (part.w[m] * (part.y[m] - part.p[m])).sum() / part.w.sum()
        assert mass == pytest.approx(row.interval_gap, abs=1e-12)
        assert abs(row.interval_gap) == pytest.approx(want, abs=1e-12)
        assert row.excursion_above + row.excursion_below == pytest.approx(want, abs=1e-12)


def test_ties_are_one_unit_whatever_the_row_order(upload):
    # a ROWS frame over raw rows gives 0.45 or 0.40 depending on the tie order (seed000 §3.5)
    df = pd.DataFrame({"p": [0.2, 0.2, 0.8, 0.8], "y": [1, 0, 0, 0]})
    for order in ([0, 1, 2, 3], [1, 0, 3, 2]):
        got = sqlcal.cutoff_error(upload(df.iloc[order]), score="p", label="y")
        assert got.cutoff_error.iloc[0] == pytest.approx(0.4, abs=1e-15)


def test_grid_mode_brackets_exact(upload):
    df = calibration_data(20000, seed=5, groups=2, weights=True)
    t = upload(df)
    exact = sqlcal.cutoff_error(t, score="p", label="y", weight="w", by="g")
    for cells in (16, 1024):
        grid = sqlcal.cutoff_error(t, score="p", label="y", weight="w", by="g", method="grid",
                                   cells=cells)
        assert (grid.cutoff_error <= exact.cutoff_error + 1e-12).all()
        assert (exact.cutoff_error <= grid.cutoff_error + grid.grid_bound + 1e-12).all()
    assert (grid.grid_bound < 0.01).all()  # 1024 cells: a tight bracket


def test_bounds_formulas(upload):
    df = calibration_data(5000, seed=6)
    got = sqlcal.cutoff_error(upload(df), score="p", label="y", confidence=0.98, epsilon=0.05).iloc[0]
    n, c = 5000, got.cutoff_error
    assert got.upper_bound == pytest.approx(min(1, c + np.sqrt(2 * np.log(100) / n)), abs=1e-12)
    assert got.lower_bound == pytest.approx(max(0, c - (20 + np.sqrt(2 * np.log(100))) / np.sqrt(n)),
                                            abs=1e-12)
    sigma = np.sqrt((df.p * (1 - df.p)).sum()) / n
    assert got.noise_floor == pytest.approx(2 * np.sqrt(2 / np.pi) * sigma, rel=1e-12)
    assert got.certified_within == (got.upper_bound <= 0.05)
    assert not got.certified_beyond  # the lower bound is vacuous at n = 5000


def test_noise_floor_is_the_mean_of_a_calibrated_model():
    # perfectly calibrated labels: the average cutoff error matches the stated noise floor
    rng = np.random.default_rng(7)
    p = rng.beta(2, 3, 2000)
    values = []
    for _ in range(200):
        df = pd.DataFrame({"p": p, "y": (rng.random(p.size) < p).astype(int)})
        s = np.concatenate([[0], np.cumsum((df.y.to_numpy() - p)[np.argsort(p)])])
        values.append((s.max() - s.min()) / p.size)
    floor = sqlcal.cutoff_error(df, score="p", label="y").noise_floor.iloc[0]
    assert np.mean(values) == pytest.approx(floor, rel=0.1)


@pytest.mark.parametrize("name", ["kuiper", "ks"])
def test_statistics_match_the_definition(upload, name):
    df = calibration_data(3000, seed=8, groups=2, ties=True, weights=True)
    t = upload(df)
    for kind, power in (("frequency", 1), ("sampling", 2)):
        got = getattr(sqlcal, name)(t, score="p", label="y", weight="w", by="g", weight_kind=kind)
        for _, row in got.iterrows():
            part = df[df.g == row.g].sort_values("p")
            lv = part.assign(r=part.w * (part.y - part.p)).groupby("p").r.sum()
            s = np.concatenate([[0.0], np.cumsum(lv.to_numpy())])
            spread = s.max() - s.min() if name == "kuiper" else np.abs(s).max()
            scale = np.sqrt((part.w**power * part.p * (1 - part.p)).sum())
            assert row[name] == pytest.approx(spread / scale, rel=1e-10)
            want_p = (kuiper_sf if name == "kuiper" else ks_sf)(spread / scale)[0]
            assert row.p_value == pytest.approx(want_p, rel=1e-12)


def test_kuiper_tail_equals_the_integrated_density():
    # independent form: the density of the range of Brownian motion (spec seed004 §3.5),
    # integrated numerically; and the spec's quantiles
    def density(r):
        k = np.arange(1, 200)
        return 8 / np.sqrt(2 * np.pi) * np.sum((-1.0) ** (k - 1) * k**2 * np.exp(-k**2 * r**2 / 2))

    for v in (0.8, 1.2, 2.0, 3.0, 4.5):
        want = integrate.quad(density, v, 40, epsabs=1e-14, limit=200)[0]
        assert kuiper_sf(v)[0] == pytest.approx(want, rel=1e-8, abs=1e-14)
    np.testing.assert_allclose(kuiper_sf([2.2412, 2.4977, 3.0233]), [0.10, 0.05, 0.01],
                               atol=2e-5)


def test_ks_tail_equals_the_theta_series():
    # independent form: P(sup|B| < x) = (4/π) Σ (−1)^k/(2k+1) exp(−(2k+1)²π²/(8x²))
    for x in (0.3, 0.7, 1.0, 1.5, 2.5):
        k = np.arange(0, 400)
        cdf = 4 / np.pi * np.sum((-1.0) ** k / (2 * k + 1)
                                 * np.exp(-((2 * k + 1) ** 2) * np.pi**2 / (8 * x**2)))
        assert ks_sf(x)[0] == pytest.approx(1 - cdf, rel=1e-10, abs=1e-15)


def test_p_values_stay_in_the_unit_interval_and_are_tiny_for_huge_statistics():
    big = np.array([5.0, 10.0, 39.3, 100.0])
    for sf in (ks_sf, kuiper_sf):
        values = sf(big)
        assert ((values >= 0) & (values <= 1)).all()
        assert values[0] > 0 and values[1] < 1e-20
    assert ks_sf(39.3)[0] >= 0  # MAPIE returns -2.4e-11 here (spec peers.md §4.2)


def test_p_values_are_uniform_under_calibration():
    rng = np.random.default_rng(9)
    p = rng.beta(2, 3, 4000)
    order = np.argsort(p)
    sigma = np.sqrt((p * (1 - p)).sum())
    pk, pd_ = [], []
    for _ in range(400):
        y = (rng.random(p.size) < p).astype(float)
        s = np.concatenate([[0], np.cumsum((y - p)[order])])
        pk.append(kuiper_sf((s.max() - s.min()) / sigma)[0])
        pd_.append(ks_sf(np.abs(s).max() / sigma)[0])
    for values in (pk, pd_):
        assert stats.kstest(values, "uniform").pvalue > 0.001


def test_float_accumulation_at_ten_million_rows():
    # scores with 30 fractional bits and 0/1 labels: every residual is an exact integer multiple
    # of 2^-30, so the oracle's int64 running sum is exact. DuckDB only: uploading 10^7 rows to
    # a server takes minutes, and the sums are the engine's DOUBLE sums either way
    import ibis

    con = ibis.duckdb.connect()
    n = 10_000_000
    rng = np.random.default_rng(10)
    k = rng.integers(0, 2**30, n)
    p = k / 2.0**30
    y = (rng.random(n) < np.clip(p * 1.05, 0, 1)).astype(np.int8)
    t = con.create_table("accumulation", pd.DataFrame({"p": p, "y": y}), overwrite=True)
    order = np.argsort(k, kind="stable")
    resid = (y.astype(np.int64) << 30) - k  # (y − p)·2^30, exact
    s = np.concatenate([[0], np.cumsum(resid[order])])
    last = np.concatenate([k[order][1:] != k[order][:-1], [True]])  # ends of tie groups
    s_levels = np.concatenate([[0], s[1:][last]])
    want = (s_levels.max() - s_levels.min()) / 2.0**30 / n
    got = sqlcal.cutoff_error(t, score="p", label="y").cutoff_error.iloc[0]
    assert got == pytest.approx(want, rel=1e-9)
    assert abs(got - want) < n * 1.1e-16  # the documented worst-case bound
