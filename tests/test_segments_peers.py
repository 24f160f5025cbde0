"""sqlcal's segment quantities against the two installable peers that search segments, on tables
where their conventions and sqlcal's coincide:

- MCGrad 0.1.5 (facebookincubator/MCGrad), ``mcgrad.metrics.MulticalibrationError``: per segment
  the ECCE, the range of the cumulative differences :math:`\\sum w(y-p)/W_S` in score order
  including 0 (Arrieta-Ibarra et al. 2022), its σ scale ECCE/σ_S with
  :math:`\\sigma_S = \\sqrt{\\sum_S w^2 p(1-p)}/W_S`, ``mce_sigma`` the largest over every segment
  (the whole table is segment 0) and ``mce`` = mce_sigma × the whole table's σ. Matched here: no
  feature has more values than ``max_values_per_segment_feature`` (MCGrad keeps that many minus
  one and pools the rest into ``__OTHER``), no missing values (MCGrad's ``__NA``, sqlcal's
  ``__null__``), ``max_n_segments=None`` (its default stops after 1000), ``float64`` (its
  default is float32), distinct scores (MCGrad orders tied scores by its sort, sqlcal's Kuiper
  keeps a tie as one step), sampling weights (its σ uses Σw²), and support counted in rows
  (``min_samples_per_segment``) on unweighted rows, where sqlcal's ``min_support`` (Σw) is the same.
- SliceLine (Sagadeeva & Boehm 2021) as the ``sliceline`` package 0.3: score
  :math:`\\alpha(\\bar e_S/\\bar e - 1) - (1-\\alpha)(n/|S| - 1)` of a slice of size |S| and error
  sum Σ_S e, top-k over slices of size ≥ ``min_sup`` with score > 0 and at most ``max_l``
  predicates. It needs only |S| and Σ_S e per slice: with the per-row error as sqlcal's 0/1 label
  (a misclassification indicator), sqlcal.segments' ``n`` and ``observed``·``W`` are exactly these.

The peers are the ``peers`` extra; a test skips, with the reason, when its peer is missing.
"""

from __future__ import annotations

import json
import math
import warnings
from itertools import combinations

import numpy as np
import pandas as pd
import pytest

import sqlcal

FEATURES = ["a", "b", "c"]


def _mcgrad():
    return pytest.importorskip("mcgrad.metrics", reason="MCGrad (the peers extra) is not "
                               "installed: pip install 'sqlcal[peers]'")


def _frame(n: int, seed: int, all_positive: bool = False) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({"a": rng.choice(["u", "v"], n),
                       "b": rng.choice(["x", "y", "z"], n),
                       "c": rng.choice(["k1", "k2", "k3", "k4"], n, p=[0.4, 0.3, 0.2, 0.1]),
                       "p": rng.uniform(0.05, 0.95, n)})  # distinct scores
    logit = np.log(df.p / (1 - df.p)) + 0.8 * (df.a.eq("u") & df.b.eq("x"))
    df["y"] = (rng.uniform(size=n) < 1 / (1 + np.exp(-logit))).astype(int)
    if all_positive:
        df["y"] = 1
    df["w"] = rng.uniform(0.5, 2.0, n)
    return df


def _mcgrad_segments(mce) -> list:
    """MCGrad's segments in its order, each as a sorted tuple of (feature, value)."""
    out: dict = {0: ()}
    for col, value, idx in mce._segments[1].itertuples(index=False):
        out[idx] = tuple(sorted(out.get(idx, ()) + ((col, value),)))
    return [out[i] for i in range(mce.total_number_segments)]


def _ours(row, features=FEATURES) -> tuple:
    return tuple(sorted((f, row[f]) for f in features if isinstance(row[f], str)))


def test_mcgrad_segment_ecce_and_mce_equal_sqlcal_kuiper_per_segment():
    """Per segment, MCGrad's ECCE and ECCE/σ equal sqlcal.kuiper's range (kuiper × null_sd) and
    statistic with sampling weights on the segment's rows; so do mce_sigma (their largest)
    and mce (mce_sigma × the whole table's σ). Weighted rows, depth 2, 36 segments."""
    metrics = _mcgrad()
    df = _frame(3000, 7)
    mce = metrics.MulticalibrationError(
        df, label_column="y", score_column="p", weight_column="w",
        categorical_segment_columns=FEATURES, max_depth=2, max_values_per_segment_feature=10,
        min_samples_per_segment=10, max_n_segments=None, precision_dtype="float64")
    theirs = _mcgrad_segments(mce)
    # every conjunction up to depth 2 (and the whole table), the rows of each stacked with its
    # name: one sqlcal.kuiper query grouped by segment
    parts, names = [], {}
    for depth in range(3):
        for cols in combinations(FEATURES, depth):
            groups = df.groupby(list(cols)) if cols else [((), df)]
            for values, rows in groups:
                values = values if isinstance(values, tuple) else (values,)
                key = tuple(sorted(zip(cols, values)))
                names[key] = f"s{len(names)}"
                parts.append(rows[["p", "y", "w"]].assign(segment=names[key]))
    assert sorted(theirs) == sorted(names)  # no segment below 10 rows: the same family
    k = sqlcal.kuiper(pd.concat(parts, ignore_index=True), score="p", label="y", weight="w",
                      by="segment", weight_kind="sampling").set_index("segment")
    statistic = np.array([k.at[names[s], "kuiper"] for s in theirs])
    ecce = statistic * np.array([k.at[names[s], "null_sd"] for s in theirs])
    np.testing.assert_allclose(statistic, mce.segments_ecce_sigma, rtol=1e-9)
    np.testing.assert_allclose(ecce, mce.segments_ecce, rtol=1e-9)
    assert math.isclose(statistic.max(), mce.mce_sigma, rel_tol=1e-9)
    assert math.isclose(statistic.max() * k.at[names[()], "null_sd"], mce.mce, rel_tol=1e-9)
    assert theirs[int(np.argmax(statistic))] == (("a", "u"), ("b", "x"))  # the planted one


@pytest.mark.parametrize("all_positive", [False, True], ids=["bernoulli", "all_positive"])
def test_mcgrad_family_and_multicalibration_sigma(all_positive):
    """sqlcal's family (segments of at least min_support rows up to max_depth) is MCGrad's with
    min_samples_per_segment = min_support, less its segment 0 (the whole table), and some
    depth-2 segments fall below the threshold on both sides. Per segment sqlcal's residual test
    |z| = |Σ(y − p)|/√Σp(1 − p) is the end point of MCGrad's cumulative path on the σ scale, so
    it never exceeds MCGrad's ECCE/σ, and equals it when every residual of a segment has one sign
    (a cumulative path that only rises): the all-positive table, where multicalibration's
    mc_sigma is MCGrad's largest σ-scale ECCE over the segments, and its multiaccuracy and
    worst_segment follow from MCGrad's absolute ECCE times the segment's share of rows."""
    metrics = _mcgrad()
    df = _frame(3000, 3, all_positive=all_positive)
    support = 150
    mce = metrics.MulticalibrationError(
        df, label_column="y", score_column="p", categorical_segment_columns=FEATURES,
        max_depth=2, max_values_per_segment_feature=10, min_samples_per_segment=support,
        max_n_segments=None, precision_dtype="float64")
    theirs = _mcgrad_segments(mce)
    sigma = dict(zip(theirs, mce.segments_ecce_sigma))
    found = sqlcal.segments(df, score="p", label="y", features=FEATURES, max_depth=2,
                            min_support=support, min_expected=0.0, mode="full", fdr="none",
                            top_k=None)
    ours = {_ours(row): row["z"] for _, row in found.iterrows()}
    assert len(theirs) < 1 + 9 + 26  # the threshold dropped segments
    assert sorted(ours) == sorted(theirs[1:])
    assert int(found["family_size"].iloc[0]) == mce.total_number_segments - 1
    z = np.array([abs(ours[s]) for s in theirs[1:]])
    ecce_sigma = np.array([sigma[s] for s in theirs[1:]])
    assert np.all(z <= ecce_sigma * (1 + 1e-12))
    audit = sqlcal.multicalibration(df, score="p", label="y", features=FEATURES, max_depth=2,
                                    min_support=support, min_expected=0.0)
    assert int(audit["n_segments"].iloc[0]) == mce.total_number_segments - 1
    if all_positive:
        np.testing.assert_allclose(z, ecce_sigma, rtol=1e-9)
        assert math.isclose(audit["mc_sigma"].iloc[0], ecce_sigma.max(), rel_tol=1e-9)
        # multiaccuracy max |Σ_S (y − p)|/n is MCGrad's ECCE_S (= |Σ_S (y − p)|/n_S here)
        # times n_S/n; worst_segment is its segment
        share = np.array([df[list(dict(s))].eq(pd.Series(dict(s))).all(axis=1).mean()
                          for s in theirs[1:]])
        mass = mce.segments_ecce[1:] * share
        assert math.isclose(audit["multiaccuracy"].iloc[0], mass.max(), rel_tol=1e-9)
        worst = theirs[1 + int(np.argmax(mass))]
        text = found.loc[[_ours(r) == worst for _, r in found.iterrows()], "segment"].item()
        assert audit["worst_segment"].iloc[0] == text
    else:
        assert audit["mc_sigma"].iloc[0] < ecce_sigma.max()  # the path overshoots its end


def test_sliceline_top_slices_equal_the_score_of_sqlcal_segment_sums():
    """SliceLine's top-k slices and their statistics (score, error sum, max error, size) equal
    its published score evaluated on sqlcal.segments' per-segment sums (mode="full": every
    segment of at least min_sup rows up to depth 3, no test, no pruning), with the per-row error
    the 0/1 misclassification at threshold 0.5 as sqlcal's label. Its max error is 1 for any
    slice with an error (0/1 errors)."""
    slicefinder = pytest.importorskip("sliceline.slicefinder", reason="sliceline (the peers "
                                      "extra) is not installed: pip install 'sqlcal[peers]'")
    rng = np.random.default_rng(11)
    n, features, alpha, k, min_sup = 4000, ["a", "b", "c", "d"], 0.95, 5, 40
    df = pd.DataFrame({"a": rng.choice(["u", "v"], n), "b": rng.choice(["x", "y", "z"], n),
                       "c": rng.choice(["k1", "k2", "k3", "k4"], n, p=[.4, .3, .2, .1]),
                       "d": rng.choice(["m", "n", "o"], n), "p": rng.uniform(0.05, 0.95, n)})
    flipped = (df.a.eq("u") & df.b.eq("x")) | df.c.eq("k4")  # the truth turned around there
    truth = np.where(flipped, np.clip(1.3 - df.p, 0, 1), df.p)
    df["y"] = (rng.uniform(size=n) < truth).astype(int)
    df["error"] = ((df.p >= 0.5).astype(int) != df.y).astype(int)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numba is optional; without it sliceline warns
        sf = slicefinder.Slicefinder(alpha=alpha, k=k, max_l=3, min_sup=min_sup,
                                     verbose=False)
        sf.fit(df[features].to_numpy(), df["error"].to_numpy())
    found = sqlcal.segments(df, score="p", label="error", features=features, max_depth=3,
                            min_support=min_sup, min_expected=0.0, mode="full", fdr="none",
                            top_k=None)
    mean_error = df["error"].mean()
    size, errors = found["n"].to_numpy(float), (found["observed"] * found["W"]).to_numpy()
    found["score"] = alpha * (errors / size / mean_error - 1) - (1 - alpha) * (n / size - 1)
    ranked = found[found.score > 0].sort_values("score", ascending=False, kind="stable")
    assert ranked.score.iloc[k - 1] > ranked.score.iloc[k]  # no tie at the k-th slice
    top = ranked.head(k)
    theirs = [tuple(sorted((f, v) for f, v in zip(features, s) if v is not None))
              for s in sf.top_slices_]
    assert [_ours(row, features) for _, row in top.iterrows()] == theirs
    stats = pd.DataFrame(sf.top_slices_statistics_)
    np.testing.assert_allclose(stats["slice_score"], top["score"], rtol=1e-12)
    np.testing.assert_allclose(stats["sum_slice_error"], errors[top.index], rtol=1e-12)
    np.testing.assert_array_equal(stats["slice_size"], top["n"])
    np.testing.assert_array_equal(stats["max_slice_error"], 1.0)


def _sliceline_table(n=4000, seed=11):
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({"a": rng.choice(["u", "v"], n), "b": rng.choice(["x", "y", "z"], n),
                       "c": rng.choice(["k1", "k2", "k3", "k4"], n, p=[.4, .3, .2, .1]),
                       "d": rng.choice(["m", "n", "o"], n), "p": rng.uniform(0.05, 0.95, n)})
    flipped = (df.a.eq("u") & df.b.eq("x")) | df.c.eq("k4")
    df["y"] = (rng.uniform(size=n) < np.where(flipped, np.clip(1.3 - df.p, 0, 1), df.p)
               ).astype(int)
    return df


def _sliceline_oracle(df, features, alpha, min_sup, depth):
    """Every slice up to ``depth`` enumerated on the rows: size, Σ(y − p)², max (y − p)² and
    SliceLine's score (a numpy transcription of SystemDS sliceLine's ``score``)."""
    e = (df.y - df.p) ** 2
    rows = []
    for k in range(1, depth + 1):
        for cols in combinations(features, k):
            for values, idx in df.groupby(list(cols) if k > 1 else cols[0]).groups.items():
                values = values if k > 1 else (values,)
                size, err = len(idx), float(e[idx].sum())
                if size >= min_sup:
                    score = alpha * (err / size / e.mean() - 1) - (1 - alpha) * (len(df) / size - 1)
                    rows.append(dict(key=tuple(sorted(zip(cols, values))), size=size,
                                     error=err, max_error=float(e[idx].max()), score=score))
    return pd.DataFrame(rows).sort_values("score", ascending=False, kind="stable")


def test_sliceline_effect_returns_the_top_k_slices_of_the_squared_error(con, upload):
    """segments(effect="sliceline", mode="full"): exactly the top-k slices of positive SliceLine
    score of e = (y − p)², with their score, error sum, max error and size, against brute-force
    enumeration of every slice on the rows, on every engine."""
    features, alpha, k = ["a", "b", "c", "d"], 0.95, 6
    df = _sliceline_table()
    out = sqlcal.segments(upload(df), score="p", label="y", features=features, max_depth=3,
                          effect="sliceline", sliceline_alpha=alpha, min_support=32, top_k=k,
                          mode="full", fdr="none")
    oracle = _sliceline_oracle(df, features, alpha, 32, 3)
    top = oracle[oracle.score > 0].head(k)
    assert oracle.score.iloc[k - 1] > oracle.score.iloc[k]
    assert [_ours(r, features) for _, r in out.iterrows()] == list(top.key)
    np.testing.assert_allclose(out.score, top.score, rtol=1e-10)
    np.testing.assert_allclose(out.harm, top.score, rtol=1e-10)
    np.testing.assert_allclose(out.error_sum, top.error, rtol=1e-10)
    np.testing.assert_allclose(out.max_error, top.max_error, rtol=1e-12)
    np.testing.assert_array_equal(out.n, top["size"])
    # SystemDS's default alpha = 0.5 gives no slice of positive score here: one empty row
    none = sqlcal.segments(df, score="p", label="y", features=features, max_depth=3,
                           effect="sliceline", min_support=32, top_k=k, mode="full")
    assert len(none) == 1 and none.segment.isna().all()
    assert (_sliceline_oracle(df, features, 0.5, 32, 3).score <= 0).all()


def test_sliceline_effect_split_mode_prunes_without_losing_a_top_slice():
    """Split mode ranks by fold A's score with the bound's pruning: the top-k equal fold A's
    brute-force top-k (the bound never cuts a top slice), tested on fold B."""
    features, alpha, k = ["a", "b", "c", "d"], 0.9, 8
    df = _sliceline_table(n=8000, seed=3)
    out = sqlcal.segments(df, score="p", label="y", features=features, max_depth=3,
                          effect="sliceline", sliceline_alpha=alpha, min_support=32, top_k=k,
                          min_expected=0.0)
    x = np.abs(df.p.to_numpy() * 9_999_991.0)
    c = 2.0 ** 52
    u = np.where(x < c, np.abs(x - ((x + c) - c)), 0.0) * 2
    a, b = df[u < 0.5].reset_index(drop=True), df[u >= 0.5].reset_index(drop=True)
    oracle_a = _sliceline_oracle(a, features, alpha, 32, 3)
    top = oracle_a[oracle_a.score > 0].head(k)
    assert oracle_a.score.iloc[k - 1] > oracle_a.score.iloc[k]
    assert [_ours(r, features) for _, r in out.iterrows()] == list(top.key)
    pruned = sum(lv["bound_pruned"] for lv in json.loads(out.searched[0])["levels"])
    assert pruned > 0
    oracle_b = _sliceline_oracle(b, features, alpha, 1, 3).set_index("key")
    np.testing.assert_allclose(out.score, oracle_b.loc[list(top.key), "score"], rtol=1e-10)


def test_sliceline_package_agrees_with_the_sliceline_effect():
    """The sliceline package (Sagadeeva & Boehm's SliceLine) on e = (y − p)²: its top-k slices
    and statistics equal segments(effect="sliceline")."""
    slicefinder = pytest.importorskip("sliceline.slicefinder", reason="sliceline (the peers "
                                      "extra) is not installed: pip install 'sqlcal[peers]'")
    features, alpha, k = ["a", "b", "c", "d"], 0.95, 5
    df = _sliceline_table()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sf = slicefinder.Slicefinder(alpha=alpha, k=k, max_l=3, min_sup=32, verbose=False)
        sf.fit(df[features].to_numpy(), ((df.y - df.p) ** 2).to_numpy())
    out = sqlcal.segments(df, score="p", label="y", features=features, max_depth=3,
                          effect="sliceline", sliceline_alpha=alpha, min_support=32, top_k=k,
                          mode="full", fdr="none")
    theirs = [tuple(sorted((f, v) for f, v in zip(features, s) if v is not None))
              for s in sf.top_slices_]
    assert [_ours(r, features) for _, r in out.iterrows()] == theirs
    stats = pd.DataFrame(sf.top_slices_statistics_)
    np.testing.assert_allclose(stats["slice_score"], out.score, rtol=1e-9)
    np.testing.assert_allclose(stats["sum_slice_error"], out.error_sum, rtol=1e-9)
    np.testing.assert_allclose(stats["max_slice_error"], out.max_error, rtol=1e-9)
    np.testing.assert_array_equal(stats["slice_size"], out.n)
