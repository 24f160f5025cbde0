"""Exported SQL is the SQL that runs: for every exported metric, summary_sql's statements run on
each engine and from_summaries gives the direct call's table; forms that refine with follow-up
passes export the levels, from which any metric finishes."""

from __future__ import annotations

import re

import duckdb
import numpy as np
import pandas as pd
import pytest

import sqlcal
from sqlcal.export.metric_sql import exportable
from sqlcal.export.sqlgen import one_shot
from tests.conftest import calibration_data

DIALECT = {"duckdb": "duckdb", "postgres": "postgres", "pyspark": "spark"}


def _run(con, text: str) -> pd.DataFrame:
    text = text.rstrip().rstrip(";")
    if con.name == "pyspark":
        return con._session.sql(text).toPandas()
    return con.sql(text).to_pandas()


def _numbers(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[[c for c in frame if frame[c].dtype.kind in "fiub"]]


#: options some metrics cannot do without
REQUIRED = {"decision_loss": {"threshold": 0.3},
            "expected_cost": {"rules": [(-1, 0.5, 1.0, 0.0), (0.5, 1, 0.0, 1.0)],
                              "epsilon": 0.05}}


@pytest.mark.parametrize("weighted", [True, False])
def test_every_exported_metric_runs_anywhere_and_finishes_like_the_direct_call(con, upload,
                                                                               weighted):
    df = calibration_data(1500, seed=11, groups=3, ties=True, weights=weighted)
    t = upload(df)
    kw = dict(score="p", label="y", by="g", weight="w" if weighted else None)
    metrics = exportable() if con.name == "duckdb" else ["ece", "brier", "cutoff_error",
                                                         "hosmer_lemeshow", "spiegelhalter"]
    for metric in metrics:
        options = {**one_shot(metric), **REQUIRED.get(metric, {})}
        sql = sqlcal.summary_sql(metric, dialect=DIALECT[con.name], table=t.get_name(), **kw,
                                 **options)
        frames = {name: _run(con, text) for name, text in sql.items()}
        try:
            want = getattr(sqlcal, metric)(t, **kw, **options)
        except sqlcal.InvalidInputError as refused:  # e.g. TCE refuses fractional weights
            with pytest.raises(sqlcal.InvalidInputError, match=re.escape(str(refused)[:40])):
                sqlcal.from_summaries(metric, frames, **kw, **options)
            continue
        got = sqlcal.from_summaries(metric, frames, **kw, **options)
        key = [c for c in ("g", "bin", "k") if c in want]
        got = got.sort_values(key, ignore_index=True)
        want = want.sort_values(key, ignore_index=True)
        assert list(got.columns) == list(want.columns), metric
        assert got["g"].tolist() == want["g"].tolist(), metric
        np.testing.assert_allclose(_numbers(got).to_numpy(float),
                                   _numbers(want).to_numpy(float), rtol=1e-9, atol=1e-12,
                                   err_msg=metric)


def test_forms_with_follow_up_passes_export_the_levels_with_their_size_said():
    kw = dict(table="preds", score="p", label="y")
    for metric, options in [("hosmer_lemeshow", {}), ("cutoff_error", {}),
                            ("ece", {"strategy": "quantile"})]:
        sql = sqlcal.summary_sql(metric, **kw, **options)
        assert list(sql) == ["levels"], metric
        assert sql["levels"].startswith("-- levels: one row per group and distinct score")
        assert "GROUP BY" in sql["levels"]
    with pytest.raises(ValueError, match="exports .*not 'no_such_metric'"):
        sqlcal.summary_sql("no_such_metric", **kw)
    with pytest.raises(TypeError, match="unexpected keyword argument 'n_bins'"):
        sqlcal.summary_sql("ece", n_bins=3, **kw)


#: one-shot metrics finished from the levels alone (the follow-up forms' own round trips live
#: with their families' tests)
FROM_LEVELS = [("ece", {}), ("ece", {"norm": "max", "convention": "sklearn"}),
               ("reliability", {}), ("brier_decomposition", {}),
               ("hosmer_lemeshow", {"strategy": "uniform"}), ("cutoff_error", {"method": "grid"}),
               ("brier", {}), ("log_loss", {}), ("spiegelhalter", {}),
               ("calibration_in_the_large", {})]


@pytest.mark.parametrize("weights", [None, "whole", "fractional"])
def test_any_metric_finishes_from_the_exported_levels(con, upload, weights):
    # the levels are sufficient for binary labels: every summary is evaluated from them in
    # pandas, exactly (scores at 0 and 1 with the opposite label: infinite log-loss terms)
    df = calibration_data(1200, seed=21, groups=2, ties=True, weights=weights is not None)
    df.loc[:9, "p"], df.loc[:4, "y"] = 0.0, 1
    df.loc[10:19, "p"], df.loc[10:14, "y"] = 1.0, 0
    if weights == "fractional":
        df["w"] = np.random.default_rng(21).uniform(0.1, 3.0, len(df))
    t = upload(df)
    kw = dict(score="p", label="y", by="g", weight="w" if weights else None)
    sql = sqlcal.summary_sql("cutoff_error", dialect=DIALECT[con.name], table=t.get_name(), **kw)
    levels = _run(con, sql["levels"])
    metrics = FROM_LEVELS if con.name == "duckdb" else FROM_LEVELS[:1] + FROM_LEVELS[-4:]
    for metric, options in metrics:
        got = sqlcal.from_summaries(metric, {"levels": levels}, **kw, **options)
        want = getattr(sqlcal, metric)(df, **kw, **options)
        assert list(got.columns) == list(want.columns), metric
        assert got["g"].tolist() == want["g"].tolist(), metric
        np.testing.assert_allclose(_numbers(got).to_numpy(float),
                                   _numbers(want).to_numpy(float), rtol=1e-9, atol=1e-12,
                                   err_msg=f"{metric} {options}")


def test_levels_are_refused_for_soft_labels_and_without_their_checks():
    df = calibration_data(300, seed=22).astype({"y": float})
    df.loc[0, "y"] = 0.5
    con = duckdb.connect()
    con.register("preds", df)
    sql = sqlcal.summary_sql("cutoff_error", table="preds", score="p", label="y")
    levels = con.sql(sql["levels"]).df()
    # a label strictly between 0 and 1 is invalid unless soft labels are asked for, and the
    # levels cannot carry them: the frames' own validation columns refuse it
    with pytest.raises(sqlcal.InvalidInputError, match="invalid rows in score 'p', label 'y'"):
        sqlcal.from_summaries("ece", {"levels": levels}, score="p", label="y")
    with pytest.raises(ValueError, match="no validation columns"):
        sqlcal.from_summaries("ece", {"levels": levels.drop(
            columns=[c for c in levels if c.startswith("chk_")])}, score="p", label="y")


def test_from_summaries_checks_the_frames():
    df = calibration_data(200, seed=12)
    con = duckdb.connect()
    con.register("preds", df)
    sql = sqlcal.summary_sql("ece", table="preds", score="p", label="y")
    frames = {name: con.sql(text).df() for name, text in sql.items()}
    with pytest.raises(ValueError, match="needs the summaries"):
        sqlcal.from_summaries("ece", {}, score="p", label="y")
    with pytest.raises(ValueError, match="no validation columns"):
        sqlcal.from_summaries("ece", {k: f.drop(columns=[c for c in f if c.startswith("chk_")])
                                      for k, f in frames.items()})
    with pytest.raises(ValueError, match="has no columns"):
        sqlcal.from_summaries("ece", frames, by="g")
    # invalid rows are seen in the frames as in the engine
    bad = df.copy()
    bad.loc[0, "p"] = 1.5
    con.register("bad", bad)
    frames = {n: con.sql(t).df() for n, t in
              sqlcal.summary_sql("ece", table="bad", score="p", label="y").items()}
    with pytest.raises(sqlcal.InvalidInputError, match="out of range"):
        sqlcal.from_summaries("ece", frames, score="p", label="y")


def test_summaries_of_days_merge_into_the_week():
    # the merge rule at work: summaries stored per day, finished for any window of days
    from sqlcal.query.declared import merge

    df = calibration_data(3000, seed=13, groups=2, weights=True)
    df["day"] = np.random.default_rng(13).integers(0, 7, len(df))
    con = duckdb.connect()
    frames = []
    for day, part in df.groupby("day"):
        con.register("daily", part.reset_index(drop=True))
        frames.append(con.sql(sqlcal.summary_sql("ece", table="daily", score="p", label="y",
                                                 weight="w", by="g")["uniform_bins_15"]).df())
    week = merge(frames, ["g", "bin"])
    got = sqlcal.from_summaries("ece", {"uniform_bins_15": week}, score="p", label="y",
                                weight="w", by="g")
    want = sqlcal.ece(df, score="p", label="y", weight="w", by="g")
    np.testing.assert_allclose(got.ece, want.ece, rtol=1e-12)
    np.testing.assert_allclose(got.W, want.W, rtol=1e-12)


def test_calibration_slope_sandwich_errors_finish_from_the_levels():
    # fractional (sampling) weights: the sandwich's middle Σw²(y − μ)²(1, x, x²) comes from the
    # levels' Σw² and Σw²y per score; checked against a direct sandwich in numpy
    import duckdb
    from scipy import optimize, special

    rng = np.random.default_rng(5)
    df = pd.DataFrame({"p": np.round(rng.uniform(0.02, 0.98, 800), 2)})
    df["y"] = (rng.uniform(size=len(df)) < df["p"] ** 1.2).astype(int)
    df["w"] = rng.uniform(0.1, 3.0, len(df))
    kw = dict(score="p", label="y", weight="w")
    sql = sqlcal.summary_sql("calibration_slope", table="df", **kw)
    assert list(sql) == ["levels"] and "sw2y" in sql["levels"]
    con = duckdb.connect()
    con.register("df", df)
    frames = {name: con.sql(text).df() for name, text in sql.items()}
    got = sqlcal.from_summaries("calibration_slope", frames, **kw).iloc[0]
    assert got["weight_kind"] == "sampling"
    # numpy: weighted logistic regression of y on logit(p), then the sandwich covariance
    x = np.log(df["p"] / (1 - df["p"])).to_numpy()
    X, y, w = np.column_stack([np.ones_like(x), x]), df["y"].to_numpy(), df["w"].to_numpy()

    def nll(theta):
        eta = X @ theta
        return -np.sum(w * (y * special.log_expit(eta) + (1 - y) * special.log_expit(-eta)))
    theta = optimize.minimize(nll, [0.0, 1.0], method="BFGS", options={"gtol": 1e-12}).x
    mu = special.expit(X @ theta)
    bread = np.linalg.inv((X * (w * mu * (1 - mu))[:, None]).T @ X)
    meat = (X * ((w * (y - mu)) ** 2)[:, None]).T @ X
    cov = bread @ meat @ bread
    np.testing.assert_allclose(got["slope"], theta[1], rtol=1e-6)
    np.testing.assert_allclose(got["slope_se"], np.sqrt(cov[1, 1]), rtol=1e-5)
    direct = sqlcal.calibration_slope(df, **kw).iloc[0]
    for c in ("slope", "slope_se", "intercept", "intercept_se", "joint_intercept"):
        np.testing.assert_allclose(got[c], direct[c], rtol=1e-9, err_msg=c)
