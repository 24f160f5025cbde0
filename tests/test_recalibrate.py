"""Recalibration maps (isotonic, Platt, modified Platt), calibration slope, CORP decomposition.

Oracles: scikit-learn's IsotonicRegression and LogisticRegression on raw rows, a brute-force
numpy Fisher information / sandwich on raw rows, model-diagnostics' ``decompose``, and the
cutoff paper's Fig. 4 values (spec seed000 §3.3).
"""

from __future__ import annotations

import duckdb
import numpy as np
import pandas as pd
import pytest
from sklearn.isotonic import IsotonicRegression
from sklearn.linear_model import LogisticRegression

import sqlcal
from sqlcal.inputs.sources import InvalidInputError
from sqlcal.recalibration import fits
from tests.conftest import calibration_data


def _data(n=3000, seed=0, groups=2, ties=True, weights=True):
    df = calibration_data(n, seed, groups=groups, ties=ties, weights=weights)
    if weights:
        df["w"] = np.round(df["w"]).astype(float)  # whole numbers: frequency weights
    return df


def _logit(p):
    q = np.clip(p, fits.CLIP, 1 - fits.CLIP)
    return np.log(q / (1 - q))


def _sk_logistic(x, y, w):
    """Unpenalised weighted logistic regression on raw rows (scikit-learn, tight tolerance)."""
    fit = LogisticRegression(C=np.inf, tol=1e-13, max_iter=10_000).fit(
        x[:, None], y, sample_weight=w)
    return fit.intercept_[0], fit.coef_[0, 0]


GRID = np.linspace(-0.05, 1.05, 2201)


# -- isotonic ---------------------------------------------------------------------------------


def test_isotonic_equals_sklearn_on_raw_rows(upload):
    df = _data()
    fitted = sqlcal.isotonic(upload(df), score="p", label="y", weight="w", by="g")
    for g, part in df.groupby("g"):
        ref = IsotonicRegression(out_of_bounds="clip").fit(part.p, part.y, sample_weight=part.w)
        np.testing.assert_allclose(fitted.transform(GRID, {"g": g}), ref.predict(GRID),
                                   rtol=0, atol=1e-12)
        np.testing.assert_allclose(fitted.transform(part.p.to_numpy(), {"g": g}),
                                   ref.predict(part.p), rtol=0, atol=1e-12)
    # blocks are strictly increasing and hold every row
    for _, part in fitted.table.groupby("g"):
        assert np.all(np.diff(part.value) > 0) and np.all(part.hi.to_numpy()[:-1] < part.lo.to_numpy()[1:])
    assert fitted.table.W.sum() == df.w.sum()  # levels of weight 0 carry nothing


def test_isotonic_step_interpolation_and_clipping():
    df = pd.DataFrame({"p": [0.1, 0.2, 0.3, 0.4], "y": [0, 1, 0, 1]})
    step = sqlcal.isotonic(df, score="p", label="y", interpolation="step")
    # blocks {0.1}: 0, {0.2, 0.3}: 0.5, {0.4}: 1 (hand PAV)
    assert step.transform([0.0, 0.1, 0.15, 0.25, 0.35, 0.4, 2]).tolist() == [0, 0, 0, .5, .5, 1, 1]
    linear = sqlcal.isotonic(df, score="p", label="y")
    np.testing.assert_allclose(linear.transform([0.15, 0.35]), [0.25, 0.75], atol=1e-15)
    with pytest.raises(ValueError, match="interpolation"):
        sqlcal.isotonic(df, score="p", label="y", interpolation="cubic")


@pytest.mark.parametrize("weights", [False, True])
def test_isotonic_engine_passes_equal_numpy(upload, monkeypatch, weights):
    """Grouped PAV passes in the engine (forced with a small LEVEL_CAP) give the same blocks."""
    df = calibration_data(1000, 3, groups=2, ties=False, weights=weights)
    t = upload(df)
    cols = dict(score="p", label="y", by="g", weight="w" if weights else None)
    whole = sqlcal.isotonic(t, **cols)
    monkeypatch.setattr(fits, "LEVEL_CAP", 40)
    passed = sqlcal.isotonic(t, **cols, method="engine")
    assert passed.info["passes"] > 3 and passed.info["exact"]
    assert len(passed.table) == len(whole.table)
    np.testing.assert_allclose(passed.table.value, whole.table.value, rtol=1e-12, atol=1e-15)
    np.testing.assert_array_equal(passed.table.lo, whole.table.lo)
    np.testing.assert_array_equal(passed.table.n, whole.table.n)


def test_isotonic_in_sample_cutoff_error_is_zero(upload):
    """Lemma D.1 / Claim 6: the fit's in-sample cutoff error is 0 (ties of the map pooled)."""
    df = _data(seed=5)
    t = upload(df)
    fitted = sqlcal.isotonic(t, score="p", label="y", weight="w", by="g")
    mapped = fitted.apply(t, "p")
    err = sqlcal.cutoff_error(mapped, score="calibrated", label="y", weight="w", by="g")
    assert err.cutoff_error.max() < 1e-13
    before = sqlcal.cutoff_error(t, score="p", label="y", weight="w", by="g")
    assert before.cutoff_error.min() > 0.01
    # the map creates ties: in-sample, one distinct calibrated score per block
    rows = mapped.execute()
    assert rows.groupby("g").calibrated.nunique().sum() == len(fitted.table)


def test_exported_sql_equals_numpy(upload, con):
    df = _data(seed=7)
    fitted = sqlcal.isotonic(df, score="p", label="y", weight="w", by="g")
    platt = sqlcal.platt(df, score="p", label="y", weight="w", by="g")
    probe = pd.DataFrame({"p": np.concatenate([GRID, GRID]), "g": ["g0"] * len(GRID) + ["g1"] * len(GRID)})
    t = upload(probe)
    # bit for bit for isotonic maps; Platt's exp/log may differ from numpy's in the last ulp
    for m, tol in ((fitted, 0), (platt, 1e-15)):
        want = m.transform_frame(probe, "p")
        got = m.apply(t, "p").execute().sort_values(["g", "p"])
        np.testing.assert_allclose(got.calibrated, want, rtol=tol, atol=tol)
        # through a mapping table written to the engine, joined to the rows
        name = f"map_{type(m).__name__.lower()}_{con.name}"
        mapping = m.write(con, name, overwrite=True)
        try:
            joined = m.apply(t, "p", mapping=mapping).execute().sort_values(["g", "p"])
            np.testing.assert_allclose(joined.calibrated, want, rtol=tol, atol=tol)
        finally:
            con.drop_table(name, force=True)


def test_to_sql_runs_in_duckdb():
    df = _data(seed=8)
    probe = pd.DataFrame({"score": np.concatenate([GRID, [np.nan]]), "g": "g1"})
    db = duckdb.connect()
    db.register("preds", probe)
    for m in (sqlcal.isotonic(df, score="p", label="y", by="g"),
              sqlcal.platt(df, score="p", label="y", by="g", feature="score")):
        sql = m.to_sql("preds", "score", dialect="duckdb")
        got = db.sql(sql).df()
        want = m.transform(probe.score.to_numpy(), {"g": "g1"})
        np.testing.assert_allclose(got.calibrated.to_numpy(float), want, rtol=1e-15, atol=0)
        assert np.isnan(got.calibrated.iloc[-1])
        # the other dialects compile too (BigQuery/Snowflake/Postgres text for a warehouse job)
        assert list(got.columns) == ["score", "g", "calibrated"]  # SELECT *, the map
        for dialect in ("postgres", "bigquery", "snowflake", "trino", "pyspark"):
            text = m.to_sql("preds", "score", dialect=dialect)
            assert text.startswith("SELECT") and "calibrated" in text


def test_unknown_group_maps_to_null():
    df = _data(seed=9)
    m = sqlcal.isotonic(df, score="p", label="y", by="g")
    assert np.isnan(m.transform([0.5], {"g": "nope"})).all()
    assert "IsotonicMap" in m._repr_html_() and "<table" in m._repr_html_()


# -- Platt ------------------------------------------------------------------------------------


@pytest.mark.parametrize("feature", ["logit", "score"])
def test_platt_equals_weighted_logistic_fit(upload, feature):
    df = _data(seed=11)
    fitted = sqlcal.platt(upload(df), score="p", label="y", weight="w", by="g",
                          feature=feature, smoothed_targets=False)
    for (g, part), (_, row) in zip(df.groupby("g"), fitted.table.iterrows()):
        assert row.g == g
        x = _logit(part.p.to_numpy()) if feature == "logit" else part.p.to_numpy()
        a, b = _sk_logistic(x, part.y.to_numpy(), part.w.to_numpy())
        assert row.a == pytest.approx(a, abs=1e-7) and row.b == pytest.approx(b, abs=1e-7)


def test_platt_smoothed_targets(upload):
    """Platt's targets (N₊+1)/(N₊+2), 1/(N₋+2): a logistic fit on rows split into a target-1
    part of weight w·t and a target-0 part of weight w·(1 − t)."""
    df = _data(seed=12, groups=0)
    fitted = sqlcal.platt(upload(df), score="p", label="y", weight="w")
    pos = float((df.w * df.y).sum())
    neg = float(df.w.sum()) - pos
    t = np.where(df.y == 1, (pos + 1) / (pos + 2), 1 / (neg + 2))
    x = _logit(df.p.to_numpy())
    a, b = _sk_logistic(np.concatenate([x, x]), np.r_[np.ones(len(x)), np.zeros(len(x))],
                        np.concatenate([df.w * t, df.w * (1 - t)]))
    assert fitted.table.a[0] == pytest.approx(a, abs=1e-7)
    assert fitted.table.b[0] == pytest.approx(b, abs=1e-7)


def test_platt_engine_newton_equals_levels(upload, monkeypatch):
    df = calibration_data(3000, 13, groups=2, weights=True)
    t = upload(df)
    cols = dict(score="p", label="y", weight="w", by="g")
    small = sqlcal.platt(t, **cols)
    slope_small = sqlcal.calibration_slope(t, **cols)
    monkeypatch.setattr(fits, "LEVEL_CAP", 10)
    large = sqlcal.platt(t, **cols)
    slope_large = sqlcal.calibration_slope(t, **cols)
    np.testing.assert_allclose(large.table[["a", "b"]], small.table[["a", "b"]], atol=1e-10)
    cols = ["slope", "slope_se", "intercept", "intercept_se", "joint_intercept"]
    np.testing.assert_allclose(slope_large[cols], slope_small[cols], rtol=1e-8)


def test_fig4_platt_and_modified_platt():
    """Spec seed000 §3.3: f ~ U{0, .25, .5, 1}, Y = 1 iff f ∈ {0, 1}; population Platt on raw f.
    Its cutoff error is 0.24293600 > ε_n = 22.45/sqrt(4e5): modified Platt falls back to 0.5."""
    df = pd.DataFrame({"f": [0.0, 0.25, 0.5, 1.0], "y": [1, 0, 0, 1], "w": [1e5] * 4})
    plain = sqlcal.platt(df, score="f", label="y", weight="w", feature="score",
                         smoothed_targets=False)
    assert plain.table.a[0] == pytest.approx(-0.40580424, abs=2e-7)
    assert plain.table.b[0] == pytest.approx(0.93089507, abs=2e-7)
    np.testing.assert_allclose(plain.transform([0, .25, .5, 1]),
                               [0.39991861, 0.45683758, 0.51490641, 0.62833740], atol=1e-7)
    modified = sqlcal.platt(df, score="f", label="y", weight="w", feature="score",
                            smoothed_targets=False, modified=True)
    assert modified.table.cutoff_error[0] == pytest.approx(0.24293600, abs=1e-7)
    assert modified.table.constant[0] == 0.5
    assert modified.transform([0.1, 0.9]).tolist() == [0.5, 0.5]
    # a calibrated-enough fit is kept: the tolerance is generous
    kept = sqlcal.platt(df, score="f", label="y", weight="w", feature="score",
                        smoothed_targets=False, modified=True, epsilon=0.3)
    assert np.isnan(kept.table.constant[0])
    with pytest.raises(ValueError, match="feature"):
        sqlcal.platt(df, score="f", label="y", feature="probit")


# -- calibration slope ------------------------------------------------------------------------


def _fisher(x, y, w, a, b):
    mu = 1 / (1 + np.exp(-(a + b * x)))
    X = np.column_stack([np.ones_like(x), x])
    H = (X * (w * mu * (1 - mu))[:, None]).T @ X
    meat = (X * ((w * (y - mu)) ** 2)[:, None]).T @ X
    cov = np.linalg.inv(H)
    return cov, cov @ meat @ cov


@pytest.mark.parametrize("kind", ["frequency", "sampling"])
def test_calibration_slope_and_standard_errors(upload, kind):
    df = calibration_data(3000, 21, groups=2, weights=True)
    out = sqlcal.calibration_slope(upload(df), score="p", label="y", weight="w", by="g",
                                   weight_kind=kind)
    for (g, part), (_, row) in zip(df.groupby("g"), out.iterrows()):
        x, y, w = _logit(part.p.to_numpy()), part.y.to_numpy(float), part.w.to_numpy()
        a, b = _sk_logistic(x, y, w)
        assert row.slope == pytest.approx(b, abs=1e-7)
        assert row.joint_intercept == pytest.approx(a, abs=1e-7)
        model, robust = _fisher(x, y, w, row.joint_intercept, row.slope)
        cov = model if kind == "frequency" else robust
        assert row.slope_se == pytest.approx(np.sqrt(cov[1, 1]), rel=1e-8)
        # the intercept with logit(p) as an offset: the root of Σw(y − σ(a + x)) = 0
        from scipy.optimize import brentq
        a0 = brentq(lambda c: np.sum(w * (y - 1 / (1 + np.exp(-(c + x))))), -10, 10, xtol=1e-14)
        assert row.intercept == pytest.approx(a0, abs=1e-9)
        mu = 1 / (1 + np.exp(-(a0 + x)))
        info = np.sum(w * mu * (1 - mu))
        se = (np.sqrt(1 / info) if kind == "frequency"
              else np.sqrt(np.sum((w * (y - mu)) ** 2)) / info)
        assert row.intercept_se == pytest.approx(se, rel=1e-8)
    assert (out.weight_kind == kind).all()


def test_calibration_slope_of_a_calibrated_model_is_one():
    rng = np.random.default_rng(4)
    p = rng.uniform(0.02, 0.98, 200_000)
    df = pd.DataFrame({"p": p, "y": (rng.random(p.size) < p).astype(int)})
    out = sqlcal.calibration_slope(df, score="p", label="y")
    assert abs(out.slope[0] - 1) < 4 * out.slope_se[0]
    assert abs(out.intercept[0]) < 4 * out.intercept_se[0]


# -- CORP decomposition -----------------------------------------------------------------------


@pytest.mark.parametrize("scoring", ["brier", "log_loss"])
def test_decompose_equals_model_diagnostics(upload, scoring):
    md = pytest.importorskip("model_diagnostics.scoring")
    df = _data(seed=31)
    df["w"] += 1  # model-diagnostics' isotonic fit divides by a block's weight, even when 0
    out = sqlcal.decompose(upload(df), score="p", label="y", weight="w", by="g", scoring=scoring)
    fn = md.SquaredError() if scoring == "brier" else md.LogLoss()
    for (g, part), (_, row) in zip(df.groupby("g"), out.iterrows()):
        ref = md.decompose(part.y.to_numpy(float), part.p.to_numpy(), part.w.to_numpy(),
                           scoring_function=fn).row(0, named=True)
        for col in ("miscalibration", "discrimination", "uncertainty", "score"):
            ours = "mean_loss" if col == "score" else col  # model-diagnostics' name
            assert row[ours] == pytest.approx(ref[col], rel=1e-9, abs=1e-12), col
        assert row.mean_loss == pytest.approx(row.miscalibration - row.discrimination
                                          + row.uncertainty, abs=1e-12)


def test_decompose_soft_labels_and_identity():
    md = pytest.importorskip("model_diagnostics.scoring")
    rng = np.random.default_rng(2)
    df = pd.DataFrame({"p": np.round(rng.random(500), 2), "y": rng.random(500)})
    out = sqlcal.decompose(df, score="p", label="y", soft_labels=True)
    ref = md.decompose(df.y.to_numpy(), df.p.to_numpy(), scoring_function=md.SquaredError())
    for col in ("miscalibration", "discrimination", "uncertainty", "score"):
        ours = "mean_loss" if col == "score" else col  # model-diagnostics' name
        assert out[ours][0] == pytest.approx(ref[col][0], rel=1e-9)
    # a recalibrated model has no miscalibration left
    m = sqlcal.isotonic(df, score="p", label="y", soft_labels=True)
    df["q"] = m.transform(df.p.to_numpy())
    again = sqlcal.decompose(df, score="q", label="y", soft_labels=True)
    assert abs(again.miscalibration[0]) < 1e-15
    assert again.discrimination[0] == pytest.approx(out.discrimination[0], rel=1e-12)
    with pytest.raises(ValueError, match="scoring"):
        sqlcal.decompose(df, score="p", label="y", soft_labels=True, scoring="crps")


def test_weights_equal_duplication_for_isotonic_and_platt():
    df = _data(800, seed=41, groups=0)
    dup = df.loc[df.index.repeat(df.w.astype(int))].drop(columns="w")
    a = sqlcal.isotonic(df, score="p", label="y", weight="w")
    b = sqlcal.isotonic(dup, score="p", label="y")
    np.testing.assert_allclose(a.table.value, b.table.value, atol=1e-15)
    pa = sqlcal.platt(df, score="p", label="y", weight="w").table
    pb = sqlcal.platt(dup, score="p", label="y").table
    np.testing.assert_allclose(pa[["a", "b"]], pb[["a", "b"]], atol=1e-10)


def test_isotonic_grid_is_exact_for_discrete_scores(upload):
    df = _data(seed=51)  # scores with two decimals: one distinct score per 2^-16 cell
    t = upload(df)
    grid = sqlcal.isotonic(t, score="p", label="y", weight="w", by="g", method="grid")
    levels = sqlcal.isotonic(t, score="p", label="y", weight="w", by="g", method="exact")
    assert grid.info["exact"] and grid.info["mixed_cells"] == 0
    pd.testing.assert_frame_equal(grid.table, levels.table)


def test_isotonic_grid_is_the_fit_of_the_cell_rounded_score(upload):
    """With mixed cells the grid fit is exact isotonic regression of the cell id (scikit-learn on
    floor(p·cells)), flagged inexact; its in-sample cutoff error is still 0."""
    df = calibration_data(3000, 52, groups=2, weights=True)
    t = upload(df)
    grid = sqlcal.isotonic(t, score="p", label="y", weight="w", by="g", method="grid", cells=64)
    assert not grid.info["exact"] and grid.info["mixed_cells"] > 0
    for g, part in df.groupby("g"):
        cell = np.minimum(np.floor(part.p * 64), 63)
        ref = IsotonicRegression().fit(cell, part.y, sample_weight=part.w).predict(cell)
        np.testing.assert_allclose(grid.transform(part.p.to_numpy(), {"g": g}), ref, atol=1e-12)
    mapped = grid.apply(t, "p")
    err = sqlcal.cutoff_error(mapped, score="calibrated", label="y", weight="w", by="g")
    assert err.cutoff_error.max() < 1e-13
    with pytest.raises(ValueError, match="power of two"):
        sqlcal.isotonic(t, score="p", label="y", method="grid", cells=1000)
    with pytest.raises(ValueError, match="method"):
        sqlcal.isotonic(t, score="p", label="y", method="bisect")


# -- edge cases (from an independent review) --------------------------------------------------


def test_logistic_fits_that_do_not_exist_are_nan_with_a_warning():
    one_score = pd.DataFrame({"p": [0.3] * 50, "y": [0, 1] * 25})
    with pytest.warns(RuntimeWarning, match="singular"):
        out = sqlcal.calibration_slope(one_score, score="p", label="y")
    assert np.isnan(out.slope[0]) and np.isnan(out.slope_se[0])
    separable = pd.DataFrame({"p": np.linspace(0.05, 0.95, 40)})
    separable["y"] = (separable.p > 0.5).astype(int)
    with pytest.warns(RuntimeWarning, match="separates"):
        out = sqlcal.calibration_slope(separable, score="p", label="y")
    assert np.isnan(out.slope[0])
    all_ones = pd.DataFrame({"p": np.linspace(0.05, 0.95, 40), "y": 1})
    with pytest.warns(RuntimeWarning, match="separates"):
        fit = sqlcal.platt(all_ones, score="p", label="y", smoothed_targets=False)
    assert np.isnan(fit.transform([0.5])).all()
    # smoothed targets keep every fit finite; modified Platt maps a group without a fit to its rate
    assert np.isfinite(sqlcal.platt(all_ones, score="p", label="y").table.b[0])
    with pytest.warns(RuntimeWarning):
        modified = sqlcal.platt(one_score, score="p", label="y", modified=True)
    assert modified.transform([0.1, 0.9]).tolist() == [0.5, 0.5]
    # a group without weight is NaN quietly, as in every metric; group b (one row) is warned of
    empty = pd.DataFrame({"p": [0.2, 0.7, 0.4], "y": [0, 1, 1], "w": [0.0, 0.0, 1.0],
                          "g": ["a", "a", "b"]})
    with pytest.warns(RuntimeWarning, match=r"group \('b',\)") as caught:
        out = sqlcal.platt(empty, score="p", label="y", weight="w", by="g")
    assert np.isnan(out.table.a).all()
    assert not any("'a'" in str(w.message) for w in caught)


def test_smoothed_targets_do_not_depend_on_the_scale_of_sampling_weights():
    df = calibration_data(2000, 61, weights=True)
    a = sqlcal.platt(df, score="p", label="y", weight="w").table
    df["w"] = df.w / df.w.sum()
    b = sqlcal.platt(df, score="p", label="y", weight="w").table
    np.testing.assert_allclose(a[["a", "b"]], b[["a", "b"]], rtol=1e-9)


def test_engine_passes_are_exact_with_zero_weights(upload, monkeypatch):
    df = calibration_data(2000, 62, weights=True)
    df["w"] = np.round(df.w)  # about 40% zeros
    t = upload(df)
    levels = sqlcal.isotonic(t, score="p", label="y", weight="w", method="exact")
    monkeypatch.setattr(fits, "LEVEL_CAP", 40)
    engine = sqlcal.isotonic(t, score="p", label="y", weight="w", method="engine")
    np.testing.assert_allclose(engine.table.value, levels.table.value, atol=1e-15)
    np.testing.assert_array_equal(engine.table.lo, levels.table.lo)


def test_every_export_agrees_on_null_keys_null_and_nan_scores(upload, con):
    df = pd.DataFrame({"p": np.linspace(0.01, 0.99, 200)})
    df["y"] = (np.arange(200) % 3 == 0).astype(int)
    df["g"] = np.where(np.arange(200) % 2, "x", None)
    fitted = [sqlcal.isotonic(df, score="p", label="y", by="g"),
              sqlcal.platt(df, score="p", label="y", by="g"),
              sqlcal.platt(df, score="p", label="y", by="g", modified=True, epsilon=0.0)]
    probe = pd.DataFrame({"p": [0.0, 0.3, np.nan, None, 1.0] * 2,
                          "g": ["x"] * 5 + [None] * 5}, dtype=object)
    probe["p"] = probe.p.astype(float)
    t = upload(probe)
    for i, m in enumerate(fitted):
        want = m.transform_frame(probe, "p")
        name = f"map_null_{i}_{con.name}"
        mapping = m.write(con, name, overwrite=True)
        try:
            for got in (m.apply(t, "p"), m.apply(t, "p", mapping=mapping)):
                frame = got.execute()
                frame = frame.assign(_g=frame.g.fillna("~"), _p=frame.p.fillna(-1.0)).sort_values(
                    ["_g", "_p"], kind="stable")
                ref = probe.assign(want=want, _g=probe.g.fillna("~"),
                                   _p=probe.p.fillna(-1.0)).sort_values(["_g", "_p"],
                                                                        kind="stable")
                np.testing.assert_allclose(frame.calibrated.to_numpy(float), ref.want, rtol=1e-15)
        finally:
            con.drop_table(name, force=True)
    assert np.isnan(want[2]) and not np.isnan(want[5 + 1])


def test_platt_maps_with_huge_exponents_run_on_every_engine(upload):
    """PostgreSQL's exp() raises on overflow: the exponent is clipped at ±700."""
    df = pd.DataFrame({"p": [0.0, 0.2, 0.5, 0.8, 1.0] * 20, "y": [0, 0, 1, 1, 1] * 20})
    m = sqlcal.platt(df, score="p", label="y", feature="score")
    m.table.loc[0, "b"] = 5000.0  # a steep map, as separable labels give
    got = m.apply(upload(df), "p").execute().sort_values("p")
    np.testing.assert_allclose(got.calibrated, m.transform(got.p.to_numpy()), atol=1e-300)


def test_maps_take_boolean_keys_and_frames_with_repeated_index():
    df = calibration_data(1000, 63)
    df["flag"] = df.p > 0.4
    m = sqlcal.isotonic(df, score="p", label="y", by="flag")
    db = duckdb.connect()
    db.register("preds", df)
    got = db.sql(m.to_sql("preds", "p")).df()
    np.testing.assert_allclose(got.calibrated, m.transform_frame(got, "p"), rtol=0)
    twice = pd.concat([df, df])
    np.testing.assert_allclose(m.transform_frame(twice, "p")[: len(df)],
                               m.transform_frame(df, "p"))
    # rows of weight 0 are absent rows: a table of them has nothing to fit
    with pytest.raises(InvalidInputError, match="no rows to measure"):
        sqlcal.isotonic(df.assign(w=0.0), score="p", label="y", weight="w")


@pytest.mark.parametrize("weights", [False, True])
def test_large_sources_get_the_exact_fit_by_refining_the_grid(upload, monkeypatch, weights):
    """Above LEVEL_CAP rows, auto reads the grid, checks the KKT conditions inside every mixed
    cell with one windowed scan, and replaces failing cells by their levels: the exact fit.
    Coarse grids make most cells mixed; NULL keys form a group of their own."""
    df = calibration_data(6000, 71, groups=2, weights=weights)
    df.loc[df.index % 7 == 0, "g"] = None
    t = upload(df)
    cols = dict(score="p", label="y", by="g", weight="w" if weights else None)
    exact = sqlcal.isotonic(t, **cols, method="exact")
    monkeypatch.setattr(fits, "LEVEL_CAP", 100)
    for cells in (2**16, 256, 16):
        fit = sqlcal.isotonic(t, **cols, cells=cells)
        assert fit.info["method"] == "grid, refined" and fit.info["exact"]
        assert fit.info["refined_cells"] > 0
        assert len(fit.table) == len(exact.table)
        np.testing.assert_allclose(fit.transform_frame(df, "p"), exact.transform_frame(df, "p"),
                                   rtol=0, atol=1e-15)
    grid_only = sqlcal.isotonic(t, **cols, method="grid", cells=16)
    assert not grid_only.info["exact"]
