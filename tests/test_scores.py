"""Totals-summary metrics against scikit-learn and brute-force numpy."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import sqlcal
from tests import oracle
from tests.conftest import calibration_data

TOL = dict(rtol=1e-12, atol=1e-12)


def test_brier_matches_sklearn_weighted_grouped(upload):
    from sklearn.metrics import brier_score_loss

    df = calibration_data(3000, seed=1, groups=3, weights=True)
    got = sqlcal.brier(upload(df), score="p", label="y", weight="w", by="g")
    for _, row in got.iterrows():
        part = df[df.g == row.g]
        want = brier_score_loss(part.y, part.p, sample_weight=part.w)
        np.testing.assert_allclose(row.brier, want, **TOL)


def test_log_loss_matches_sklearn(upload):
    from sklearn.metrics import log_loss

    df = calibration_data(3000, seed=2, weights=True)
    df["p"] = df.p.clip(1e-6, 1 - 1e-6)
    got = sqlcal.log_loss(upload(df), score="p", label="y", weight="w")
    want = log_loss(df.y, df.p, sample_weight=df.w)
    np.testing.assert_allclose(got.log_loss.iloc[0], want, **TOL)
    assert got.n_infinite.iloc[0] == 0


def test_log_loss_edges_are_exact(upload):
    # 0·log 0 = 0 where the label matches; an impossible outcome makes the loss infinite
    df = pd.DataFrame({"p": [0.0, 1.0, 0.5, 0.0], "y": [0, 1, 1, 1], "g": ["a", "a", "a", "b"]})
    got = sqlcal.log_loss(upload(df), score="p", label="y", by="g")
    np.testing.assert_allclose(got.log_loss.iloc[0], np.log(2) / 3, **TOL)
    assert got.log_loss.iloc[1] == np.inf and got.n_infinite.iloc[1] == 1


def test_spiegelhalter_two_sided(upload):
    df = calibration_data(4000, seed=3, groups=2)
    # an under-confident segment: scores pulled towards 1/2 give z < 0
    df.loc[df.g == "g1", "p"] = 0.5 + 0.5 * (df.p[df.g == "g1"] - 0.5)
    got = sqlcal.spiegelhalter(upload(df), score="p", label="y", by="g")
    for _, row in got.iterrows():
        part = df[df.g == row.g]
        z, p = oracle.spiegelhalter(part.p, part.y)
        np.testing.assert_allclose([row.z, row.p_value], [z, p], rtol=1e-10, atol=1e-300)
    assert got.z.iloc[1] < 0 and got.p_value.iloc[1] < 0.05  # MAPIE would say p = 1 here


def test_spiegelhalter_weight_kinds(upload):
    df = calibration_data(1000, seed=4, weights=True)
    freq = sqlcal.spiegelhalter(upload(df), score="p", label="y", weight="w",
                                weight_kind="frequency")
    samp = sqlcal.spiegelhalter(upload(df), score="p", label="y", weight="w",
                                weight_kind="sampling")
    # non-integer weights are sampling weights unless said otherwise; whole numbers, frequencies
    auto = sqlcal.spiegelhalter(upload(df), score="p", label="y", weight="w")
    assert auto.z.iloc[0] == samp.z.iloc[0] and auto.weight_kind.iloc[0] == "sampling"
    counts = sqlcal.spiegelhalter(upload(df.assign(w=np.ceil(df.w))), score="p", label="y",
                                  weight="w")
    assert counts.weight_kind.iloc[0] == "frequency"
    p, y, w = df.p, df.y, df.w
    num = (w * (y - p) * (1 - 2 * p)).sum()
    v = (1 - 2 * p) ** 2 * p * (1 - p)
    np.testing.assert_allclose(freq.z.iloc[0], num / np.sqrt((w * v).sum()), **TOL)
    np.testing.assert_allclose(samp.z.iloc[0], num / np.sqrt((w**2 * v).sum()), **TOL)


def test_spiegelhalter_without_variance(upload):
    # scores of 0, 1/2 and 1 only: no null variance. Consistent labels: undefined; a score of 1
    # with label 0 is certain miscalibration: infinite Z, p = 0
    df = pd.DataFrame({"p": [0.5, 0.5, 1.0, 0.0, 1.0], "y": [0, 1, 1, 0, 0],
                       "g": ["a", "a", "a", "b", "b"]})
    got = sqlcal.spiegelhalter(upload(df), score="p", label="y", by="g").set_index("g")
    assert np.isnan(got.z["a"]) and np.isnan(got.p_value["a"])
    assert got.z["b"] == np.inf and got.p_value["b"] == 0  # Brier worse than calibration allows


def test_calibration_in_the_large(upload):
    df = calibration_data(2000, seed=5, weights=True)
    got = sqlcal.calibration_in_the_large(upload(df), score="p", label="y", weight="w").iloc[0]
    mean_p = np.average(df.p, weights=df.w)
    rate = np.average(df.y, weights=df.w)
    np.testing.assert_allclose([got.citl, got.mean_score, got.observed, got.oe_ratio],
                               [mean_p - rate, mean_p, rate, rate / mean_p], **TOL)


def test_hand_values(upload):
    # four rows checked by hand: Brier (0.01 + 0.64 + 0.04 + 0.01) / 4 = 0.175;
    # two bins: |0.5 - 0.15| * 2/4 + |1 - 0.85| * 2/4 = 0.25
    df = pd.DataFrame({"p": [0.1, 0.2, 0.8, 0.9], "y": [0, 1, 1, 1]})
    t = upload(df)
    assert sqlcal.brier(t, score="p", label="y").brier.iloc[0] == pytest.approx(0.175, abs=1e-15)
    assert sqlcal.ece(t, score="p", label="y", bins=2).ece.iloc[0] == pytest.approx(0.25, abs=1e-15)
    assert sqlcal.ece(t, score="p", label="y", bins=2, norm="max").mce.iloc[0] == pytest.approx(0.35)
