"""Peer conventions against the peers themselves: uncertainty-calibration's equal-mass bins
(``strategy="uncertainty_calibration"``) against the library (``import calibration``), run with
the plain plug-in estimator it documents (``lower_bound_scaling_ce(..., debias=False,
binning_scheme=get_equal_bins)``; ``get_ece_em`` for L1), on data shaped like real classifier
outputs (issue 20 item 8)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import sqlcal

calibration = pytest.importorskip("calibration", reason="uncertainty-calibration is a test extra")
if not hasattr(calibration, "get_equal_bins"):  # calibration-belt installs a module of that name
    pytest.skip("the 'calibration' module is not uncertainty-calibration's", allow_module_level=True)

NORMS = {1: "l1", 2: "l2"}


def peer_ce(p, y, bins, power):
    return calibration.lower_bound_scaling_ce(p, y, p=power, debias=False, num_bins=bins,
                                              binning_scheme=calibration.get_equal_bins)


def classifier_like(seed, distinct=100_000, repeats=20_007):
    """Scores like an image classifier's: 10^5 distinct values, about 80% within 1e-3 of 0 or 1,
    each of ``repeats`` rows repeating a score already drawn (ties), a few exact 0s and 1s;
    labels drawn slightly miscalibrated."""
    rng = np.random.default_rng(seed)
    logit = np.concatenate([rng.normal(-9, 2.5, distinct // 2), rng.normal(9, 2.5, distinct // 2)])
    pool = 1 / (1 + np.exp(-logit))
    pool[:3], pool[-3:] = 0.0, 1.0
    p = np.concatenate([pool, rng.choice(pool, repeats)])
    rng.shuffle(p)
    y = (rng.random(len(p)) < np.clip(0.97 * p + 0.01, 0, 1)).astype(np.int64)
    return p, y


def test_the_data_is_shaped_like_classifier_outputs():
    p, _ = classifier_like(0)
    assert len(np.unique(p)) >= 99_990
    assert np.mean((p < 1e-3) | (p > 1 - 1e-3)) > 0.7
    assert len(np.unique(p)) < len(p)


@pytest.mark.parametrize("bins", [10, 15, 100])
@pytest.mark.parametrize("power", [1, 2])
def test_uncertainty_calibration_ece_equals_the_peer_on_classifier_outputs(bins, power):
    p, y = classifier_like(1)
    want = peer_ce(p, y, bins, power)
    got = sqlcal.ece(pd.DataFrame({"p": p, "y": y}), score="p", label="y", bins=bins,
                     strategy="uncertainty_calibration", norm=NORMS[power])
    assert abs(got.iloc[0, 0] - want) <= 1e-12
    assert got["binning"][0] == f"uncertainty_calibration({bins})"
    if power == 1:  # get_ece_em is the same estimator, top-label mode being the identity in 1-D
        assert abs(got.iloc[0, 0] - calibration.get_ece_em(p, y, num_bins=bins)) <= 1e-12


def test_the_peer_differs_from_numpy_quantile_bins_on_this_data():
    """The convention is needed: sqlcal's quantile edges give another number here."""
    p, y = classifier_like(1)
    df = pd.DataFrame({"p": p, "y": y})
    quantile = sqlcal.ece(df, score="p", label="y", bins=15, strategy="quantile")["ece"][0]
    assert abs(quantile - peer_ce(p, y, 15, 1)) > 1e-9


def test_every_engine_equals_the_peer_with_groups(upload):
    p, y = classifier_like(2, distinct=4_000, repeats=1_000)
    g = np.where(np.arange(len(p)) % 3 == 0, "a", "b")
    df = pd.DataFrame({"p": p, "y": y, "g": g})
    for power in (1, 2):
        out = sqlcal.ece(upload(df), score="p", label="y", by="g", bins=15,
                         strategy="uncertainty_calibration", norm=NORMS[power]).set_index("g")
        for key in ("a", "b"):
            mask = g == key
            want = peer_ce(p[mask], y[mask], 15, power)
            assert abs(out.iloc[:, 0][key] - want) <= 1e-12


@pytest.mark.parametrize("case", ["ties across blocks", "adjacent floats", "fewer rows than bins",
                                  "one row", "zeros and ones", "few levels"])
def test_edge_cases_equal_the_peer(case):
    """Where a cut lands on a tie, where the midpoint of two neighbouring doubles rounds onto
    one of them (so that score joins the lower bin), and fewer rows than bins (min(B, N) blocks)."""
    rng = np.random.default_rng(3)
    if case == "ties across blocks":
        p = np.repeat([0.1, 0.2, 0.2000001, 0.7, 0.9], [7, 40, 3, 25, 11])
    elif case == "adjacent floats":
        base = 0.3
        p = np.array([base, np.nextafter(base, 1), np.nextafter(np.nextafter(base, 1), 1)] * 9
                     + [np.nextafter(base, 0)] * 4)
    elif case == "fewer rows than bins":
        p = rng.random(9)
    elif case == "one row":
        p = np.array([0.25])
    elif case == "zeros and ones":
        p = np.concatenate([np.zeros(30), np.ones(31), 1e-4 * rng.random(20)])
    else:
        p = rng.choice([0.05, 0.5, 0.95], 200)
    y = (rng.random(len(p)) < p).astype(np.int64)
    df = pd.DataFrame({"p": p, "y": y})
    for bins in (2, 5, 15):
        for power in (1, 2):
            got = sqlcal.ece(df, score="p", label="y", bins=bins,
                             strategy="uncertainty_calibration", norm=NORMS[power]).iloc[0, 0]
            assert abs(got - peer_ce(p, y, bins, power)) <= 1e-12, (bins, power)


def test_reliability_bins_are_the_peers_bins():
    """Bin by bin: the rows in each bin and the interior edges are those of get_equal_bins and
    the peer's own binning (searchsorted on its edges)."""
    p, y = classifier_like(4, distinct=20_000, repeats=5_000)
    bins = 12
    edges = calibration.get_equal_bins(list(p), num_bins=bins)
    counts = np.bincount(np.searchsorted(edges, p), minlength=len(edges))
    table = sqlcal.reliability(pd.DataFrame({"p": p, "y": y}), score="p", label="y", bins=bins,
                               strategy="uncertainty_calibration", ci=None)
    assert table["n"].tolist() == [int(c) for c in counts if c]
    # the upper edge of every bin but the last is the peer's edge
    assert np.array_equal(table["bin_upper"].to_numpy()[:-1], np.asarray(edges[:-1]))


def test_whole_number_weights_are_repeated_rows():
    rng = np.random.default_rng(5)
    p = rng.random(300)
    y = (rng.random(300) < p).astype(np.int64)
    w = rng.integers(0, 4, 300)
    df = pd.DataFrame({"p": p, "y": y, "w": w.astype(float)})
    for power in (1, 2):
        got = sqlcal.ece(df, score="p", label="y", weight="w", bins=7,
                         strategy="uncertainty_calibration", norm=NORMS[power]).iloc[0, 0]
        want = peer_ce(np.repeat(p, w), np.repeat(y, w), 7, power)
        assert abs(got - want) <= 1e-12


def test_fractional_weights_are_refused():
    df = pd.DataFrame({"p": [0.1, 0.4, 0.8], "y": [0, 1, 1], "w": [0.5, 1.0, 2.0]})
    with pytest.raises(ValueError, match=r"strategy='uncertainty_calibration'.*'w'.*fractional"):
        sqlcal.ece(df, score="p", label="y", weight="w", bins=2,
                   strategy="uncertainty_calibration")


def test_hosmer_lemeshow_keeps_its_two_strategies():
    df = pd.DataFrame({"p": [0.1, 0.4, 0.8, 0.9], "y": [0, 1, 1, 1]})
    with pytest.raises(ValueError, match="strategy"):
        sqlcal.hosmer_lemeshow(df, score="p", label="y", bins=2,
                               strategy="uncertainty_calibration")
