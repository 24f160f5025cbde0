"""Equal-mass edges where scores crowd a few score cells (click logs near 0): the wanted cells
split by log-odds (sqlcal.metrics.cells.logit_split) must give numpy's quantile edges and the
brute-force bin sums, on every engine, with the local evaluators agreeing with the engine's."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import sqlcal
from sqlcal.metrics import cells
from sqlcal.query import declared, local, reductions
from tests import oracle

TOL = dict(rtol=1e-12, atol=1e-15)


def clicks(n: int, seed: int) -> pd.DataFrame:
    """Log-normal scores around 1e-3 in two slices, a few tied scores and whole weights."""
    rng = np.random.default_rng(seed)
    p = np.minimum(np.exp(np.log(1e-3) + 0.9 * rng.standard_normal(n)), 0.999)
    p[:60] = np.round(p[:60], 5)  # ties
    return pd.DataFrame({"g": rng.integers(0, 2, n), "p": p,
                         "y": (rng.random(n) < 40 * p).astype(int),
                         "w": rng.integers(1, 4, n).astype(float)})


@pytest.fixture
def split_used(monkeypatch):
    """Force the split (a few rows per piece) and record each split's result."""
    monkeypatch.setattr(cells, "LEVEL_ROWS", 40)
    calls = []
    original = cells.logit_split

    def spy(*args, **kwargs):
        out = original(*args, **kwargs)
        calls.append(out)
        return out

    monkeypatch.setattr(cells, "logit_split", spy)
    return calls


def test_split_edges_and_bins_match_numpy(upload, split_used):
    df = clicks(3000, seed=21)
    t = upload(df)
    got = sqlcal.calibration_ratio(t, score="p", label="y", weight="w", by="g", deciles=10)
    assert split_used and split_used[0] is not None and split_used[0][1] is None
    for g, part in got.groupby("g"):
        rows = df[df.g == g]
        ids, edges = oracle.quantile_bin_ids(rows.p, rows.w, 10)
        np.testing.assert_array_equal(part.bin_upper.to_numpy()[:-1], edges[part.bin.to_numpy()[:-1]])
        sums = rows.assign(b=ids, wp=rows.w * rows.p, wy=rows.w * rows.y).groupby("b")
        np.testing.assert_array_equal(part.n.to_numpy(), sums.size().to_numpy())
        np.testing.assert_allclose(part.expected_positives.to_numpy(), sums.wp.sum().to_numpy(), **TOL)
        np.testing.assert_allclose(part.observed_positives.to_numpy(), sums.wy.sum().to_numpy(), **TOL)


def test_split_serves_quantile_ece_and_hosmer_lemeshow(con, upload, split_used):
    if con.name == "pyspark":
        pytest.skip("Spark runs the split through the test above (six more Spark queries here "
                    "would cost CI about 25 s)")
    df = clicks(2000, seed=22)
    t = upload(df)
    ece = sqlcal.ece(t, score="p", label="y", by="g", strategy="quantile", bins=8)
    hl = sqlcal.hosmer_lemeshow(t, score="p", label="y", by="g", bins=8)
    assert split_used and all(s is not None for s in split_used)
    for g in (0, 1):
        rows = df[df.g == g]
        ids, _ = oracle.quantile_bin_ids(rows.p, np.ones(len(rows)), 8)
        want = oracle.binned_ece(rows.p, rows.y, np.ones(len(rows)), ids)
        np.testing.assert_allclose(ece.loc[ece.g == g, "ece"].iloc[0], want, **TOL)
        assert hl.loc[hl.g == g, "n_bins"].iloc[0] == len(np.unique(ids))


def test_out_of_order_split_falls_back_to_the_zoom(con, upload, monkeypatch):
    """An engine whose log-odds cell decreased somewhere (pieces overlapping) must not give
    wrong edges: the search zooms 2^k-fold instead."""
    if con.name != "duckdb":
        pytest.skip("the fallback is engine-independent: checked on DuckDB only")
    monkeypatch.setattr(cells, "LEVEL_ROWS", 40)
    monkeypatch.setattr(reductions, "logit_cell",
                        lambda p, scale: ((p * 1e6).floor() % 3).cast("int64"))
    calls = []
    original = cells.logit_split
    monkeypatch.setattr(cells, "logit_split",
                        lambda *a, **k: calls.append(original(*a, **k)) or calls[-1])
    df = clicks(1500, seed=23)
    got = sqlcal.calibration_ratio(upload(df), score="p", label="y", deciles=5)
    assert calls == [None]
    _, edges = oracle.quantile_bin_ids(df.p, np.ones(len(df)), 5)
    np.testing.assert_array_equal(got.bin_upper.to_numpy()[:-1], edges)


def test_local_evaluators_match_the_engine(con, upload):
    if con.name != "duckdb":
        pytest.skip("engine-vs-local on DuckDB; the other engines run the metric tests above")
    df = clicks(1200, seed=24)
    t = upload(df)
    src = sqlcal.source(t, score="p", label="y", weight="w", by="g")
    levels = reductions.reduce(declared.levels("sums", "sw2", "ny"), src.rows, src.by,
                              weighted=True).execute()
    levels = reductions.fill_unweighted(levels)
    # one range for every group, as the split reads (the engine reads the union of the ranges);
    # a group's internal key values: the integer key's NULL flag, then its value
    g0, g1 = (False, 0), (False, 1)
    asked = [declared.logit_cells_within(64, 1024, [(g0, 0.0, 2 / 1024), (g1, 0.0, 2 / 1024)],
                                         "sums", "moments"),
             declared.levels_in_cells(2**14, [(g0, 5), (g0, 17), (g1, 9)], "sums"),
             declared.logit_cells_in_cells(256, 2**14, [(g0, 5), (g0, 17), (g1, 9)],
                                           "sums", "ny")]
    for summary in asked:
        engine = reductions.reduce(summary, src.rows, src.by, weighted=True).execute()
        engine = engine.sort_values(list(engine.columns[:len(src.by) + 1]), ignore_index=True)
        mine = local.evaluate(summary, levels, src.by)[list(engine.columns)]
        assert len(engine) > 0
        pd.testing.assert_frame_equal(mine.reset_index(drop=True), engine, check_dtype=False,
                                      rtol=1e-12)
