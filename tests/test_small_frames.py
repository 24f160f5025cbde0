"""In-memory frames run compiled statements from a plan cache (sqlcal.query.reductions.execute_planned):
the statement is the one sqlcal.summary_sql exports, the numbers are those of the uncached Ibis
path, and a second frame of the same shape compiles nothing."""

from __future__ import annotations

import ibis
import numpy as np
import pandas as pd
import pytest

import sqlcal
from sqlcal.errors import InvalidInputError
from sqlcal.query import reductions

METRICS = [sqlcal.ece, sqlcal.brier, sqlcal.log_loss, sqlcal.calibration_in_the_large,
           sqlcal.spiegelhalter]


def frame(n: int = 3000, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    p = np.round(rng.beta(2, 5, n), 4)
    return pd.DataFrame({"g": rng.choice(["a", "b", "c"], n), "p": p,
                         "y": (rng.random(n) < p).astype(float), "w": rng.uniform(0.1, 2, n)})


@pytest.mark.parametrize("metric", METRICS, ids=lambda f: f.__name__)
def test_cached_statement_is_the_exported_one(metric):
    df = frame()[["p", "y"]]
    reductions._PLANS.clear()
    metric(df, score="p", label="y")
    (sql, *_), = reductions._PLANS.values()
    exported = sqlcal.summary_sql(metric.__name__, table=reductions.ROWS, score="p", label="y")
    assert [sql + ";"] == list(exported.values())


@pytest.mark.parametrize("metric", METRICS, ids=lambda f: f.__name__)
def test_cached_path_equals_the_ibis_path(metric):
    # an Ibis table is never planned: it compiles and runs through Ibis, as before
    # the second frame of each shape runs the cached statement; integer labels make the
    # engine's sums HUGEINT, cast back to the Ibis schema
    for seed, labels in ((1, float), (2, float), (3, int), (4, int)):
        df = frame(seed=seed).astype({"y": labels})
        got = metric(df, score="p", label="y", weight="w", by="g")
        want = metric(ibis.memtable(df), score="p", label="y", weight="w", by="g")
        pd.testing.assert_frame_equal(got, want)


def test_second_frame_compiles_nothing_and_reads_its_own_rows():
    reductions._PLANS.clear()
    a, b = frame(seed=3), frame(seed=4)
    sqlcal.brier(a, score="p", label="y", by="g")
    plans = dict(reductions._PLANS)
    got = sqlcal.brier(b, score="p", label="y", by="g")
    assert reductions._PLANS == plans
    for _, row in got.iterrows():
        part = b[b.g == row.g]
        np.testing.assert_allclose(row.brier, np.mean((part.y - part.p) ** 2), rtol=1e-12)


def test_plans_are_keyed_on_schema_and_filter_text():
    reductions._PLANS.clear()
    df = frame(seed=5)
    full = sqlcal.ece(df, score="p", label="y")
    high = sqlcal.ece(df, score="p", label="y", where="p > 0.3")
    as_int = sqlcal.ece(df.assign(y=df.y.astype(int)), score="p", label="y")
    assert len(reductions._PLANS) == 3
    part = df[df.p > 0.3]
    assert high.n.iloc[0] == len(part) and full.n.iloc[0] == len(df)
    np.testing.assert_allclose(as_int.ece.iloc[0], full.ece.iloc[0], rtol=1e-12)


def test_nan_score_in_a_frame_is_named():
    # pandas NaN reaches the engine as NULL, as when Ibis registered the frame
    df = frame(seed=6)[["p", "y"]]
    df.loc[3, "p"] = np.nan
    with pytest.raises(InvalidInputError, match="score column 'p' has 1 rows that are NULL"):
        sqlcal.ece(df, score="p", label="y")


def test_threads_measure_frames_at_once():
    # each thread reads its frames through its own DuckDB connection
    from concurrent.futures import ThreadPoolExecutor

    frames = [frame(n=2000, seed=10 + i) for i in range(8)]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda df: sqlcal.brier(df, score="p", label="y", weight="w"), frames))
    for df, out in zip(frames, got):
        want = np.average((df.y - df.p) ** 2, weights=df.w)
        np.testing.assert_allclose(out.brier.iloc[0], want, rtol=1e-12)


def test_dropped_rows_of_each_frame_are_its_own():
    # on_invalid="drop" filters in the cached statement; each frame drops its own bad rows
    reductions._PLANS.clear()
    for seed, bad in ((20, [0, 5]), (21, [7, 8, 9])):
        df = frame(seed=seed)
        df.loc[bad, "p"] = 1.5
        with pytest.warns(UserWarning, match="dropped"):
            got = sqlcal.ece(df, score="p", label="y", by="g", on_invalid="drop")
        with pytest.warns(UserWarning, match="dropped"):
            want = sqlcal.ece(ibis.memtable(df), score="p", label="y", by="g",
                              on_invalid="drop")
        pd.testing.assert_frame_equal(got, want)
        assert got.n_dropped.sum() == len(bad) and got.n.sum() == len(df) - len(bad)


def test_wide_frames_register_only_the_columns_read():
    # feature columns of any type beside the scores are not converted; a filter may name them
    rng = np.random.default_rng(30)
    df = frame(seed=30).assign(note=lambda d: np.where(d.p > 0.5, "high", "low"),
                               **{f"x{i}": rng.random(3000) for i in range(20)})
    got = sqlcal.brier(df, score="p", label="y", weight="w", by="g")
    want = sqlcal.brier(ibis.memtable(df), score="p", label="y", weight="w", by="g")
    pd.testing.assert_frame_equal(got, want)
    got = sqlcal.brier(df, score="p", label="y", where="note = 'high' AND x3 < 0.5")
    part = df[(df.note == "high") & (df.x3 < 0.5)]
    np.testing.assert_allclose(got.brier.iloc[0], np.mean((part.y - part.p) ** 2), rtol=1e-12)
