"""Exported SQL for the smooth, TCE and distance families: summary_sql's statements run on each
engine and from_summaries gives the direct call's table (1e-9 relative), for every metric and
the forms that matter (one-shot histograms, and the levels for forms that refine with follow-up
passes: the automatic smooth ECE bandwidth, TCE's uniform and quantile bins, the distances'
method="auto")."""

from __future__ import annotations

import functools
import json

import numpy as np
import pandas as pd
import pytest

import sqlcal
from sqlcal.query import executor
from tests.test_export import DIALECT, _run
from tests.test_smooth import classifier_outputs

#: (metric, options, the statements summary_sql gives)
CASES = [
    # (20 replicates: the interval's path from the exported grid, without the default 1,000's
    # half a minute a call; the default options round-trip in FROM_LEVELS below)
    ("ls_ece", {"bootstrap": 20, "seed": 3}, ["logit_grid"]),
    ("ls_ece", {"noise_scale": 0.5, "noise": "uniform", "bootstrap": 20, "seed": 3},
     ["logit_grid"]),
    ("smooth_ece", {}, ["levels"]),
    ("smooth_ece", {"sigma": 0.05}, ["smooth_cells_16384_1000"]),
    ("smooth_ece", {"sigma": 1 / 256}, ["smooth_cells_16384_2560"]),
    ("smooth_ece", {"sigma": 0.05, "bootstrap": 20, "seed": 3}, ["smooth_cells_16384_1000"]),
    ("smooth_ece", {"bootstrap": 20, "seed": 3}, ["levels"]),
    ("smooth_reliability", {"points": 21}, ["levels"]),
    ("smooth_reliability", {"sigma": 0.1, "points": 21}, ["smooth_cells_16384_1000"]),
    ("tce", {}, ["levels"]),
    ("tce", {"strategy": "uniform", "bins": 5}, ["levels"]),
    ("tce", {"strategy": "quantile", "bins": 5, "test": "ttest"}, ["levels"]),
    ("tce_bins", {"strategy": "uniform", "bins": 4}, ["levels"]),
    ("tce_bins", {"n_min": 50, "n_max": 400}, ["levels"]),
    ("lipschitz_calibration_error", {}, ["levels"]),
    ("lipschitz_calibration_error", {"method": "grid"}, ["score_cells_16384"]),
    ("lipschitz_calibration_error", {"method": "exact", "lipschitz": 2.0}, ["levels"]),
    ("distance_to_calibration", {"grid": 32, "lower_levels": 16}, ["levels"]),
    ("distance_to_calibration", {"method": "grid", "grid": 32, "lower_levels": 16},
     ["score_cells_16384"]),
    ("interval_calibration_error", {}, ["levels"]),
    ("interval_calibration_error", {"method": "grid"}, ["score_cells_16384"]),
    ("interval_calibration_error", {"bins": 10, "method": "grid"}, ["uniform_bins_10"]),
]


def data(n: int, weighted: bool) -> pd.DataFrame:
    """Confident classifier outputs (the automatic smooth ECE bandwidth lands below 0.01, on
    grids a follow-up splits the cells for), a tenth tied, two groups, whole weights (TCE counts
    predictions)."""
    df = classifier_outputs(n, 41, groups=2)
    if weighted:
        df["w"] = np.random.default_rng(41).integers(1, 4, len(df)).astype(float)
    return df


def same(got: pd.DataFrame, want: pd.DataFrame, what: str) -> None:
    assert list(got.columns) == list(want.columns), what
    assert len(got) == len(want), what
    for c in want.columns:
        a, b = got[c].tolist(), want[c].tolist()
        if want[c].dtype.kind in "fiub":
            np.testing.assert_allclose(np.asarray(a, float), np.asarray(b, float), rtol=1e-9,
                                       atol=1e-12, err_msg=f"{what}: {c}")
        elif c == "accepted":  # TCE's accepted intervals: lists of (low, high)
            for x, y in zip(a, b):
                np.testing.assert_allclose(np.asarray(x, float), np.asarray(y, float),
                                           rtol=1e-9, err_msg=f"{what}: {c}")
        else:
            assert a == b, f"{what}: {c}"


@pytest.mark.parametrize("weighted", [False, True])
def test_every_metric_of_the_families_round_trips_through_exported_sql(con, upload, weighted):
    df = data(6000 if con.name == "duckdb" else 2500, weighted)
    t = upload(df)
    kw = dict(score="p", label="y", by="g", weight="w" if weighted else None)
    for metric, options, names in CASES:
        what = f"{metric} {options}"
        sql = sqlcal.summary_sql(metric, dialect=DIALECT[con.name], table=t.get_name(), **kw,
                                 **options)
        assert list(sql) == names, what
        frames = {name: _run(con, text) for name, text in sql.items()}
        got = sqlcal.from_summaries(metric, frames, **kw, **options)
        want = getattr(sqlcal, metric)(t, **kw, **options)
        keys = [c for c in ("g", "bin", "t") if c in want]
        same(got.sort_values(keys, ignore_index=True), want.sort_values(keys, ignore_index=True),
             what)


def test_the_automatic_bandwidth_reads_finer_grids_here():
    # the data above exercise the follow-up: the bandwidth search reaches σ < 0.01, whose grid
    # (more than 1000 intervals) the first histogram was not split at
    out = sqlcal.smooth_ece(data(6000, False), score="p", label="y", by="g")
    assert (out.sigma < 0.01).all()


def test_smooth_ece_statement_is_the_histogram_it_reads():
    # the statement holds the 2^14 cells split at relplot's grid, with the offsets' moments
    sql = sqlcal.summary_sql("smooth_ece", table="preds", score="p", label="y", sigma=0.05)
    text = sql["smooth_cells_16384_1000"]
    assert "16384" in text and "1000" in text
    for column in ("swd", "swyd", "swrd", "chk_y_count"):
        assert column in text
    # PAVA-BC reads the levels (one pass), not a histogram; the automatic bandwidth exports them
    for metric in ("tce", "smooth_ece"):
        sql = sqlcal.summary_sql(metric, table="preds", score="p", label="y")
        assert list(sql) == ["levels"], metric
        assert sql["levels"].startswith("-- levels: one row per group and distinct score")


#: one-shot forms finished from the exported levels alone (every summary evaluated from them)
FROM_LEVELS = [("ls_ece", {}), ("smooth_ece", {"sigma": 1 / 256}),
               ("smooth_reliability", {"sigma": 0.1, "points": 11}),
               ("tce", {"strategy": "quantile", "bins": 4}),
               ("distance_to_calibration", {"method": "grid", "grid": 16, "lower_levels": 8}),
               ("interval_calibration_error", {"bins": 12, "method": "grid"})]


@functools.lru_cache
def _direct_on_the_frame(metric: str, options: str) -> pd.DataFrame:
    """The direct call on the local frame of the test below: the same on every engine, so once
    per process (LS-ECE's default interval alone takes seconds)."""
    return getattr(sqlcal, metric)(data(2000, weighted=True), score="p", label="y", by="g",
                                   weight="w", **json.loads(options))


def test_one_shot_forms_finish_from_the_exported_levels_too(con, upload):
    df = data(2000, weighted=True)
    t = upload(df)
    kw = dict(score="p", label="y", by="g", weight="w")
    sql = sqlcal.summary_sql("smooth_ece", dialect=DIALECT[con.name], table=t.get_name(), **kw)
    levels = _run(con, sql["levels"])
    for metric, options in FROM_LEVELS:
        got = sqlcal.from_summaries(metric, {"levels": levels}, **kw, **options)
        want = _direct_on_the_frame(metric, json.dumps(options)).copy()
        keys = [c for c in ("g", "t") if c in want]
        same(got.sort_values(keys, ignore_index=True), want.sort_values(keys, ignore_index=True),
             f"{metric} {options}")


#: the one-shot forms: NEEDS declares every summary they read (TCE's PAVA-BC reads its score
#: cells, then levels: the levels statement is its one-shot export)
ONE_SHOT = [("ls_ece", {}), ("smooth_ece", {"sigma": 0.05}),
            ("smooth_reliability", {"sigma": 1 / 256}),
            ("lipschitz_calibration_error", {"method": "grid"}),
            ("lipschitz_calibration_error", {"method": "exact"}),
            ("distance_to_calibration", {"method": "grid", "grid": 16, "lower_levels": 8}),
            ("interval_calibration_error", {"method": "exact"}),
            ("interval_calibration_error", {"bins": 10})]


@pytest.mark.parametrize("metric, options", ONE_SHOT, ids=lambda v: str(v))
def test_declared_needs_are_what_each_one_shot_form_reads(metric, options, monkeypatch):
    import inspect

    from sqlcal.metrics._registry import get
    from sqlcal.options import check
    from sqlcal.query import planner

    function = getattr(sqlcal, metric)
    src = sqlcal.source(data(800, weighted=True), score="p", label="y", weight="w", by="g")
    chosen = {k: v.default for k, v in inspect.signature(function).parameters.items()
              if v.default is not v.empty and v.kind == v.KEYWORD_ONLY}
    chosen |= check(metric, options)
    planner.prefetch(src, get(metric).needs(src, chosen))
    monkeypatch.setattr(executor, "run", lambda s, build, **kw: (_ for _ in ()).throw(AssertionError(
        f"{metric} {options} ran a scan its registered needs did not declare")))
    assert len(function(src, **options))
