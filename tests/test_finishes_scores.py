"""The totals metrics' finishes without an engine: the totals summary is built here from raw numpy
rows (plain sums per group), finished, and compared with scikit-learn (brier_score_loss and
log_loss with sample_weight) or a brute-force computation on the same rows."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from sqlcal.metrics.scores import (
    brier_finish,
    calibration_in_the_large_finish,
    log_loss_finish,
    spiegelhalter_finish,
)

TOL = dict(rtol=1e-12, atol=1e-14)


def rows(n: int = 2000, seed: int = 0, groups: int = 3) -> pd.DataFrame:
    """Classifier-like rows: scores with ties, 0/1 labels drawn from a miscalibrated model,
    fractional weights, a group key."""
    rng = np.random.default_rng(seed)
    p = np.round(rng.beta(2, 3, n), 3)  # rounded: tied scores
    y = (rng.random(n) < np.clip(1.2 * p - 0.05, 0, 1)).astype(float)
    w = rng.uniform(0.2, 3.0, n)
    return pd.DataFrame({"g": rng.integers(0, groups, n), "p": p, "y": y, "w": w})


def totals_of(df: pd.DataFrame) -> pd.DataFrame:
    """The totals summary of ``df`` per group, by plain sums over its rows (the columns the engine
    query returns, with every part)."""
    out = []
    for g, part in df.groupby("g", sort=True):
        p, y, w = (part[c].to_numpy(float) for c in ("p", "y", "w"))
        infinite = (w > 0) & (((p == 0) & (y > 0)) | ((p == 1) & (y < 1)))
        with np.errstate(divide="ignore", invalid="ignore"):
            term = -(np.where(y > 0, y * np.log(p), 0.0) + np.where(y < 1, (1 - y) * np.log1p(-p), 0.0))
        q = 1 - 2 * p
        out.append({
            "g": g, "n": len(part), "W": w.sum(), "swy": (w * y).sum(), "swp": (w * p).sum(),
            "sw_sq_resid": (w * (y - p) ** 2).sum(),
            "sw_logloss": (w * term)[~infinite].sum(), "n_infinite_logloss": int(infinite.sum()),
            "sw_spieg": (w * (y - p) * q).sum(), "sw_spieg_var": (w * q**2 * p * (1 - p)).sum(),
            "sw2_spieg_var": (w**2 * q**2 * p * (1 - p)).sum(),
        })
    return pd.DataFrame(out)


def test_brier_finish_equals_sklearn_per_group():
    from sklearn.metrics import brier_score_loss

    df = rows(seed=1)
    got = brier_finish(totals_of(df))
    assert len(got) == 3
    for _, row in got.iterrows():
        part = df[df.g == row.g]
        want = brier_score_loss(part.y, part.p, sample_weight=part.w)
        np.testing.assert_allclose(row.brier, want, **TOL)


def test_log_loss_finish_equals_sklearn_per_group():
    from sklearn.metrics import log_loss

    df = rows(seed=2)
    df["p"] = df.p.clip(1e-3, 1 - 1e-3)  # inside sklearn's clipping: the same sum
    got = log_loss_finish(totals_of(df))
    for _, row in got.iterrows():
        part = df[df.g == row.g]
        want = log_loss(part.y, part.p, sample_weight=part.w, labels=[0, 1])
        np.testing.assert_allclose(row.log_loss, want, **TOL)
        assert row.n_infinite == 0


def test_log_loss_finish_infinite_rows():
    # group 0: 0·log 0 terms only (finite, exactly ln 2 / 3 from the p = 1/2 row);
    # group 1: a row with p = 0 and y = 1 makes the loss infinite, counted beside it
    df = pd.DataFrame({"g": [0, 0, 0, 1, 1], "p": [0.0, 1.0, 0.5, 0.0, 0.3],
                       "y": [0.0, 1.0, 1.0, 1.0, 0.0], "w": [1.0, 1.0, 1.0, 2.0, 1.0]})
    got = log_loss_finish(totals_of(df))
    np.testing.assert_allclose(got.log_loss.iloc[0], np.log(2) / 3, **TOL)
    assert got.n_infinite.tolist() == [0, 1]
    assert got.log_loss.iloc[1] == np.inf


def test_calibration_in_the_large_finish_brute_force():
    df = rows(seed=3)
    got = calibration_in_the_large_finish(totals_of(df))
    for _, row in got.iterrows():
        part = df[df.g == row.g]
        mean_score = np.average(part.p, weights=part.w)
        observed = np.average(part.y, weights=part.w)
        np.testing.assert_allclose(row.mean_score, mean_score, **TOL)
        np.testing.assert_allclose(row.observed, observed, **TOL)
        np.testing.assert_allclose(row.citl, mean_score - observed, rtol=1e-10, atol=1e-14)
        np.testing.assert_allclose(row.oe_ratio, (part.w * part.y).sum() / (part.w * part.p).sum(),
                                   **TOL)


def test_calibration_in_the_large_finish_edges():
    # a group with no weight has NaN rates; Σwp = 0 with positives is an infinite O/E ratio
    t = pd.DataFrame({"n": [0, 2], "W": [0.0, 2.0], "swy": [0.0, 1.0], "swp": [0.0, 0.0]})
    got = calibration_in_the_large_finish(t)
    assert np.isnan(got.citl.iloc[0]) and np.isnan(got.oe_ratio.iloc[0])
    assert got.oe_ratio.iloc[1] == np.inf
    assert got.citl.iloc[1] == -0.5


@pytest.mark.parametrize("weight_kind", ["frequency", "sampling"])
def test_spiegelhalter_finish_brute_force(weight_kind):
    df = rows(seed=4)
    got = spiegelhalter_finish(totals_of(df), weight_kind=weight_kind)
    power = 1 if weight_kind == "frequency" else 2
    for _, row in got.iterrows():
        part = df[df.g == row.g]
        p, y, w = part.p.to_numpy(), part.y.to_numpy(), part.w.to_numpy()
        num = sum(wi * (yi - pi) * (1 - 2 * pi) for pi, yi, wi in zip(p, y, w))
        var = sum(wi**power * (1 - 2 * pi) ** 2 * pi * (1 - pi) for pi, wi in zip(p, w))
        z = num / np.sqrt(var)
        np.testing.assert_allclose(row.z, z, rtol=1e-10)
        np.testing.assert_allclose(row.p_value, 2 * stats.norm.sf(abs(z)), rtol=1e-9)


def test_spiegelhalter_finish_unweighted_sampling_reads_the_only_variance():
    # an unweighted summary has no Σw² variance: with w = 1 it is Σw(1-2p)²p(1-p) itself
    df = rows(seed=5).assign(w=1.0)
    t = totals_of(df).drop(columns="sw2_spieg_var")
    a = spiegelhalter_finish(t, weight_kind="sampling")
    b = spiegelhalter_finish(totals_of(df), weight_kind="frequency")
    np.testing.assert_array_equal(a.z.to_numpy(), b.z.to_numpy())


def test_spiegelhalter_finish_zero_variance_and_bad_kind():
    # scores of 0, 1/2, 1 only: the null variance is 0; contradicted certainty gives ±inf
    t = pd.DataFrame({"sw_spieg": [0.0, -1.0], "sw_spieg_var": [0.0, 0.0]})
    got = spiegelhalter_finish(t, weight_kind="frequency")
    assert np.isnan(got.z.iloc[0]) and got.z.iloc[1] == -np.inf
    assert got.p_value.iloc[1] == 0.0
    with pytest.raises(ValueError, match="weight_kind"):
        spiegelhalter_finish(t, weight_kind="auto")
