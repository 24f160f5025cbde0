"""Binned metrics against brute-force numpy on the raw rows and against peers with matched
conventions (scikit-learn, relplot), to 1e-12."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

import sqlcal
from tests import oracle
from tests.conftest import calibration_data

TOL = dict(rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("convention", ["sqlcal", "sklearn", "netcal", "relplot"])
@pytest.mark.parametrize("norm", ["l1", "l2", "max"])
def test_ece_matches_brute_force(upload, convention, norm):
    df = calibration_data(3000, seed=1, groups=3, weights=True)
    df.loc[:20, "p"] = [0, 0.1, 0.3, 0.5, 0.6, 0.7, 1.0] * 3  # edge values
    got = sqlcal.ece(upload(df), score="p", label="y", weight="w", by="g", bins=10, norm=norm,
                     convention=convention)
    name = {"l1": "ece", "l2": "rmsce", "max": "mce"}[norm]
    for _, row in got.iterrows():
        part = df[df.g == row.g]
        ids = oracle.bin_ids(part.p, 10, convention)
        want = oracle.binned_ece(part.p, part.y, part.w, ids, norm)
        np.testing.assert_allclose(row[name], want, **TOL)
        assert row.n == len(part)
        np.testing.assert_allclose(row.W, part.w.sum(), **TOL)
        assert row.n_bins == len(np.unique(ids))


@pytest.mark.parametrize("convention", ["sklearn", "netcal", "relplot"])
def test_scores_on_inexact_edges_join_the_peer_bin(upload, convention):
    """Scores equal to numpy's linspace edges for B = 11 and 13 (17-digit decimals that DuckDB
    reads as DECIMAL literals an ulp off): the bin ids must still match the peer's."""
    for bins in (11, 13):
        edges = np.linspace(0, 1, bins + 1)
        df = pd.DataFrame({"p": np.repeat(edges, 2), "y": [0, 1] * len(edges)})
        got = sqlcal.reliability(upload(df), score="p", label="y", bins=bins, ci=None,
                                 convention=convention)
        ids = oracle.bin_ids(df.p, bins, convention)
        want = np.bincount(ids, minlength=ids.max() + 1)
        np.testing.assert_array_equal(got.n.to_numpy(), want[want > 0])


# spec peers.md §2.1: which neighbour an exact value joins, per library, with 10 bins
EDGE_PROBE = {
    # p:    sqlcal (floor)  sklearn  netcal  relplot
    0.0: (0, 0, 0, 0),
    0.1: (1, 0, 1, 1),
    0.3: (3, 2, 2, 2),
    0.5: (5, 4, 5, 5),
    0.6: (6, 5, 5, 5),
    0.7: (7, 6, 6, 6),
    1.0: (9, 9, 9, 10),
}


@pytest.mark.parametrize("i, convention", enumerate(["sqlcal", "sklearn", "netcal", "relplot"]))
def test_edge_values_follow_each_peer(upload, i, convention):
    df = pd.DataFrame({"p": list(EDGE_PROBE), "y": [0] * len(EDGE_PROBE)})
    df["g"] = df.p.astype(str)  # one probe per group, so each reports its own bin
    got = sqlcal.reliability(upload(df), score="p", label="y", by="g", bins=10,
                             convention=convention)
    assert dict(zip(got.score_min, got.bin)) == {p: ids[i] for p, ids in EDGE_PROBE.items()}


def test_sklearn_calibration_curve_uniform(upload):
    from sklearn.calibration import calibration_curve

    df = calibration_data(5000, seed=2)
    df.loc[:6, "p"] = [0, 0.2, 0.4, 0.6, 0.8, 1.0, 0.3]
    prob_true, prob_pred = calibration_curve(df.y, df.p, n_bins=5)
    got = sqlcal.reliability(upload(df), score="p", label="y", bins=5, convention="sklearn")
    np.testing.assert_allclose(got.observed, prob_true, **TOL)
    np.testing.assert_allclose(got.mean_score, prob_pred, **TOL)


@pytest.mark.parametrize("ties", [False, True])
def test_sklearn_calibration_curve_quantile(upload, ties):
    from sklearn.calibration import calibration_curve

    df = calibration_data(4001, seed=3, ties=ties)
    prob_true, prob_pred = calibration_curve(df.y, df.p, n_bins=10, strategy="quantile")
    got = sqlcal.reliability(upload(df), score="p", label="y", bins=10, strategy="quantile")
    np.testing.assert_allclose(got.observed, prob_true, **TOL)
    np.testing.assert_allclose(got.mean_score, prob_pred, **TOL)
    # ties are never split: every score value lives in exactly one bin
    assert (got.score_max.to_numpy()[:-1] < got.score_min.to_numpy()[1:]).all()


def test_relplot_binned_ece(upload):
    import relplot

    df = calibration_data(5000, seed=4)
    df.loc[:8, "p"] = [0, 0.1, 0.3, 0.6, 0.7, 1.0, 1.0, 0.95, 0.999]
    for nbins in (7, 10, 15):
        want = relplot.metrics.binnedECE(df.p.to_numpy(), df.y.to_numpy(), nbins=nbins)
        got = sqlcal.ece(upload(df), score="p", label="y", bins=nbins, convention="relplot")
        np.testing.assert_allclose(got.ece.iloc[0], want, **TOL)


@pytest.mark.parametrize("ties", [False, True])
def test_weighted_quantile_bins_equal_expanded_rows(upload, ties):
    df = calibration_data(1500, seed=5, ties=ties, groups=2)
    df["w"] = np.random.default_rng(5).integers(0, 4, len(df)).astype(float)
    got = sqlcal.ece(upload(df), score="p", label="y", weight="w", by="g", bins=7,
                     strategy="quantile")
    for _, row in got.iterrows():
        part = df[df.g == row.g]
        ids, _ = oracle.quantile_bin_ids(part.p, part.w, 7)
        np.testing.assert_allclose(row.ece, oracle.binned_ece(part.p, part.y, part.w, ids), **TOL)
        # the oracle itself equals numpy's quantile on the duplicated rows
        expanded = np.repeat(part.p.to_numpy(), part.w.to_numpy().astype(int))
        np.testing.assert_array_equal(oracle.quantile_bin_ids(part.p, part.w, 7)[1],
                                      np.quantile(expanded, np.linspace(0, 1, 8)[1:-1]))


@pytest.mark.parametrize("ties", [False, True])
def test_quantile_edges_are_numpys_to_the_last_bit(upload, ties):
    df = calibration_data(3001, seed=6, ties=ties, groups=2)
    got = sqlcal.reliability(upload(df), score="p", label="y", by="g", bins=9,
                             strategy="quantile", ci=None)
    for g, part in got.groupby("g"):
        edges = np.quantile(df.p[df.g == g], np.linspace(0, 1, 10)[1:-1])
        inner = part.bin_upper.to_numpy()[:-1]  # each bin's upper edge, but the last bin's
        expect = edges[part.bin.to_numpy()[:-1]]
        np.testing.assert_array_equal(inner, expect)


@pytest.mark.parametrize("strategy", ["uniform", "quantile"])
def test_brier_decomposition_exact(upload, strategy):
    df = calibration_data(3000, seed=7, groups=2, weights=True)
    df["w"] = np.ceil(df.w * 3)  # counts: equal-mass edges are then exact, not float-rounded
    got = sqlcal.brier_decomposition(upload(df), score="p", label="y", weight="w", by="g",
                                     bins=8, strategy=strategy)
    for _, row in got.iterrows():
        part = df[df.g == row.g]
        ids = (oracle.bin_ids(part.p, 8) if strategy == "uniform"
               else oracle.quantile_bin_ids(part.p, part.w, 8)[0])
        want = oracle.brier_parts(part.p, part.y, part.w, ids)
        for k, v in want.items():
            np.testing.assert_allclose(row[k], v, rtol=1e-10, atol=1e-12)
        identity = (row.reliability - row.resolution + row.uncertainty + row.within_bin_variance
                    - row.within_bin_covariance - row.label_variance)
        np.testing.assert_allclose(identity, row.brier, rtol=1e-12)


def test_brier_decomposition_soft_labels(upload):
    df = calibration_data(1000, seed=8)
    df["y"] = np.random.default_rng(8).random(len(df))
    got = sqlcal.brier_decomposition(upload(df), score="p", label="y", soft_labels=True, bins=5)
    row = got.iloc[0]
    want = oracle.brier_parts(df.p, df.y, np.ones(len(df)), oracle.bin_ids(df.p, 5))
    for k, v in want.items():
        np.testing.assert_allclose(row[k], v, rtol=1e-10, atol=1e-12)
    assert row.label_variance > 0


@pytest.mark.parametrize("dof, offset", [("out_of_sample", 0), ("in_sample", 2)])
def test_hosmer_lemeshow_on_deciles(upload, dof, offset):
    df = calibration_data(5000, seed=9)
    got = sqlcal.hosmer_lemeshow(upload(df), score="p", label="y", dof=dof)
    # deciles of risk as pandas/pycaleva make them: pd.qcut (linear quantiles, right-closed)
    ids = pd.qcut(df.p, 10, labels=False)
    stat, d, p = oracle.hosmer_lemeshow(df.p, df.y, ids, offset)
    row = got.iloc[0]
    np.testing.assert_allclose(row.hl_statistic, stat, **TOL)
    assert row.dof == d and row.n_bins == 10
    np.testing.assert_allclose(row.p_value, p, rtol=1e-10)


@pytest.mark.parametrize("ci, method", [("wilson", "wilson"), ("clopper-pearson", "exact")])
def test_reliability_intervals_match_scipy(upload, ci, method):
    df = calibration_data(800, seed=10)
    got = sqlcal.reliability(upload(df), score="p", label="y", bins=6, ci=ci, confidence=0.9)
    ids = oracle.bin_ids(df.p, 6)
    for _, row in got.iterrows():
        m = ids == row.bin
        k, n = int(df.y[m].sum()), int(m.sum())
        want = stats.binomtest(k, n).proportion_ci(confidence_level=0.9, method=method)
        np.testing.assert_allclose([row.ci_lower, row.ci_upper], [want.low, want.high],
                                   rtol=1e-9, atol=1e-12)


def test_reliability_sampling_weights_use_effective_size(upload):
    df = calibration_data(500, seed=11, weights=True)
    got = sqlcal.reliability(upload(df), score="p", label="y", weight="w", bins=3,
                             weight_kind="sampling")
    ids = oracle.bin_ids(df.p, 3)
    z = stats.norm.isf(0.025)
    for _, row in got.iterrows():
        m = ids == row.bin
        w, y = df.w[m].to_numpy(), df.y[m].to_numpy()
        phat = (w * y).sum() / w.sum()
        # the design's effective size: the binomial variance over the linearized variance of
        # the weighted mean, Σw²(y − ȳ)²/W² (Kish's W²/Σw² when w does not vary with y)
        n_eff = phat * (1 - phat) * w.sum() ** 2 / np.sum(w * w * (y - phat) ** 2)
        # Wilson's interval: the p solving (phat - p)^2 = z^2 p (1 - p) / n_eff
        a, b, c = 1 + z**2 / n_eff, -(2 * phat + z**2 / n_eff), phat**2
        roots = np.sort(np.roots([a, b, c]))
        np.testing.assert_allclose([row.ci_lower, row.ci_upper], roots, rtol=1e-9)


@pytest.mark.parametrize("ties", [False, True])
def test_equal_mass_bins_through_zoomed_cells(upload, monkeypatch, ties):
    # force the histogram to zoom (split the wanted cells 1024-fold) before fetching levels
    from sqlcal.metrics import cells

    monkeypatch.setattr(cells, "LEVEL_ROWS", 20)
    df = calibration_data(4000, seed=12, ties=ties, groups=2)
    df["w"] = np.random.default_rng(12).integers(1, 4, len(df)).astype(float)
    t = upload(df)
    got = sqlcal.reliability(t, score="p", label="y", weight="w", by="g", bins=8,
                             strategy="quantile", ci=None)
    for g, part in got.groupby("g"):
        rows = df[df.g == g]
        ids, edges = oracle.quantile_bin_ids(rows.p, rows.w, 8)
        np.testing.assert_array_equal(part.bin_upper.to_numpy()[:-1], edges[part.bin.to_numpy()[:-1]])
        want = rows.assign(b=ids).groupby("b").apply(lambda f: np.average(f.y, weights=f.w),
                                                     include_groups=False)
        np.testing.assert_allclose(part.observed.to_numpy(), want.to_numpy(), **TOL)


def test_equal_mass_bins_of_many_groups_match_numpy(upload):
    """Sixty groups read together (one of one row, one of one distinct score, a NULL key):
    every group's quantile edges are np.quantile's of its own rows to the last bit, and the
    Hosmer-Lemeshow statistic of each group with ten distinct deciles is the oracle's on
    pd.qcut's."""
    df = calibration_data(12000, seed=14, groups=60)
    df.loc[df.g == "g1", "p"] = 0.3
    df = pd.concat([df[df.g != "g2"], df[df.g == "g2"].head(1)], ignore_index=True)
    # numeric keys, NaN for NULL (a NULL string key reaches Spark as the string 'NaN')
    df["g"] = df["g"].str[1:].astype(float).where(df["g"] != "g3")
    t = upload(df)
    got = sqlcal.reliability(t, score="p", label="y", by="g", bins=9, strategy="quantile",
                             ci=None)
    hl = sqlcal.hosmer_lemeshow(t, score="p", label="y", by="g")
    assert got.g.nunique(dropna=False) == 60 and len(hl) == 60
    for g, part in got.groupby("g", dropna=False):
        rows = df[df.g.isna()] if pd.isna(g) else df[df.g == g]
        edges = np.quantile(rows.p, np.linspace(0, 1, 10)[1:-1])
        np.testing.assert_array_equal(part.bin_upper.to_numpy()[:-1],
                                      edges[part.bin.to_numpy()[:-1]])
        if rows.p.nunique() < 10:
            continue
        stat, _, _ = oracle.hosmer_lemeshow(rows.p, rows.y, pd.qcut(rows.p, 10, labels=False), 0)
        row = hl[hl.g.isna()] if pd.isna(g) else hl[hl.g == g]
        np.testing.assert_allclose(row.hl_statistic.iloc[0], stat, **TOL)


def test_equal_mass_bins_with_tied_edges_match_sklearn(upload):
    # review finding: an edge computed as (n−1)·k/B instead of numpy's (n−1)·linspace lands a
    # tied score in the wrong bin; here numpy's edge is 0.7999999999999999
    from sklearn.calibration import calibration_curve

    df = pd.DataFrame({"p": [.4, .6, .6, .6, .7, .8, .9, 1.0], "y": [1, 0, 0, 0, 1, 1, 0, 1]})
    prob_true, prob_pred = calibration_curve(df.y, df.p, n_bins=7, strategy="quantile")
    got = sqlcal.reliability(upload(df), score="p", label="y", bins=7, strategy="quantile", ci=None)
    np.testing.assert_allclose(got.observed, prob_true, **TOL)
    np.testing.assert_allclose(got.mean_score, prob_pred, **TOL)


def test_equal_mass_bins_with_null_numeric_group_keys(upload):
    df = calibration_data(600, seed=13)
    df["g"] = np.random.default_rng(13).choice([1.0, 2.0, np.nan], len(df))
    got = sqlcal.ece(upload(df), score="p", label="y", by="g", strategy="quantile", bins=5)
    assert len(got) == 3 and got.ece.notna().all()
    missing = df[df.g.isna()]
    want = sqlcal.ece(upload(missing.drop(columns="g")), score="p", label="y",
                      strategy="quantile", bins=5)
    assert got.ece.iloc[-1] == pytest.approx(want.ece.iloc[0], abs=1e-15)


def test_rescaled_sampling_weights_leave_equal_mass_bins_unchanged(upload):
    df = calibration_data(2000, seed=14, weights=True)
    a = sqlcal.hosmer_lemeshow(upload(df), score="p", label="y", weight="w", bins=5)
    b = sqlcal.hosmer_lemeshow(upload(df.assign(w=df.w / df.w.sum())), score="p", label="y",
                               weight="w", bins=5)
    assert a.n_bins.iloc[0] == b.n_bins.iloc[0] == 5
    assert a.hl_statistic.iloc[0] == pytest.approx(b.hl_statistic.iloc[0], rel=1e-9)
    assert (a.weight_kind == "sampling").all()


def test_equal_mass_edges_with_sampling_weights(upload):
    # non-integer weights are rescaled to sum to the row count before the positions are taken;
    # edges agree with the oracle to rounding (bin membership of a score lying on an edge can
    # then depend on the last bit, so only the edges are compared)
    df = calibration_data(3000, seed=7, groups=2, weights=True)
    got = sqlcal.reliability(upload(df), score="p", label="y", weight="w", by="g", bins=8,
                             strategy="quantile", ci=None)
    for g, part in got.groupby("g"):
        rows = df[df.g == g]
        _, edges = oracle.quantile_bin_ids(rows.p, rows.w, 8)
        np.testing.assert_allclose(part.bin_upper.to_numpy()[:-1],
                                   edges[part.bin.to_numpy()[:-1]], rtol=0, atol=1e-12)


def test_wilson_interval_holds_the_observed_rate_exactly():
    """At k = 0 (or k = n) rounding used to leave the bound 1e-17 off the rate."""
    from sqlcal.metrics.binned import wilson_interval

    k = np.array([0.0, 0.0, 16.084535, 4.756427, 3.0])
    n = np.array([48.071779, 1.0, 16.084535, 4.756427, 10.0])
    lo, hi = wilson_interval(k, n, 0.95)
    assert np.all(lo <= k / n) and np.all(k / n <= hi)
    assert lo[0] == 0 and lo[1] == 0 and hi[2] == 1 and hi[3] == 1
