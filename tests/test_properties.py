"""Invariants checked with hypothesis: integer weights equal row duplication, group-by equals
filtering, and row order never matters."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import sqlcal

#: examples per property on each engine. The invariants are the library's (its queries' shape and
#: its finishes), searched with 15 examples on DuckDB; the other engines run the same queries, so
#: fewer examples check their arithmetic and grouping: 5 on PostgreSQL (15 took 575 s of the
#: CI-like run on 2 busy cores, 150 queries an example), 2 on Spark, where every query is a job
EXAMPLES = {"duckdb": 15, "postgres": 5, "pyspark": 2}


def examples(con) -> settings:
    return settings(max_examples=EXAMPLES[con.name], deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])

# (metric, options, value columns compared)
METRICS = [
    (sqlcal.ece, dict(bins=5), ["ece", "n_bins"]),
    (sqlcal.ece, dict(bins=4, norm="max", convention="sklearn"), ["mce"]),
    (sqlcal.ece, dict(bins=4, strategy="quantile", norm="l2"), ["rmsce"]),
    (sqlcal.brier, {}, ["brier"]),
    (sqlcal.log_loss, {}, ["log_loss"]),
    (sqlcal.spiegelhalter, {}, ["z", "p_value"]),
    (sqlcal.hosmer_lemeshow, dict(bins=4), ["hl_statistic", "p_value", "dof"]),
    (sqlcal.brier_decomposition, dict(bins=3), ["reliability", "resolution",
                                                "within_bin_variance", "within_bin_covariance"]),
    (sqlcal.calibration_in_the_large, {}, ["citl", "oe_ratio"]),
    (sqlcal.decompose, {}, ["mean_loss", "miscalibration", "discrimination", "uncertainty"]),
]


@st.composite
def predictions(draw, max_rows=40):
    n = draw(st.integers(2, max_rows))
    tied = draw(st.booleans())
    score = (st.sampled_from([0.0, 0.1, 0.25, 0.3, 0.5, 0.7, 0.9, 1.0]) if tied
             else st.floats(0.001, 0.999))
    rows = draw(st.lists(st.tuples(score, st.integers(0, 1), st.integers(0, 3),
                                   st.sampled_from(["a", "b"])), min_size=n, max_size=n))
    df = pd.DataFrame(rows, columns=["p", "y", "w", "g"])
    df["w"] = df.w.astype(float)
    if not (df.w > 0).any():  # a table of weight 0 has no rows to measure: tested elsewhere
        df.loc[0, "w"] = 1.0
    return df


def values(metric, opts, cols, data, **kw):
    out = metric(data, score="p", label="y", by="g", **opts, **kw)
    return out.set_index("g")[cols]


def close(a: pd.DataFrame, b: pd.DataFrame):
    np.testing.assert_allclose(a.to_numpy(float), b.to_numpy(float), rtol=1e-9, atol=1e-12)


def test_weights_equal_row_duplication(con, upload):
    examples(con)(given(df=predictions())(lambda df: _duplication(upload, df)))()


def _duplication(upload, df):
    expanded = df.loc[df.index.repeat(df.w.astype(int))].drop(columns="w")
    assume(len(expanded) > 0)
    weighted, plain = upload(df), upload(expanded)
    for metric, opts, cols in METRICS:
        got = values(metric, opts, cols, weighted, weight="w")
        want = values(metric, opts, cols, plain)
        close(got.loc[want.index], want)
        # a group whose rows all have weight 0 is reported with NULL values
        empty = got.drop(index=want.index)
        assert empty[cols[0]].isna().all()


def test_group_by_equals_filtering(con, upload):
    examples(con)(given(df=predictions())(lambda df: _filtering(upload, df)))()


def _filtering(upload, df):
    t = upload(df)
    # each group's rows uploaded once, for every metric (a table per metric and group was most
    # of an example's time on PostgreSQL and Spark)
    parts = {g: upload(df[df.g == g]) for g in df.g.unique()}
    for metric, opts, cols in METRICS:
        grouped = values(metric, opts, cols, t, weight="w")
        for g in grouped.index:
            alone = metric(parts[g], score="p", label="y", weight="w", **opts)
            close(grouped.loc[[g]], alone[cols])


def test_permutation_invariance(con, upload):
    strategy = given(df=predictions(), seed=st.integers(0, 2**32 - 1))
    examples(con)(strategy(lambda df, seed: _permutation(upload, df, seed)))()


def _permutation(upload, df, seed):
    shuffled = df.sample(frac=1, random_state=np.random.RandomState(seed))
    a, b = upload(df), upload(shuffled)
    for metric, opts, cols in METRICS:
        close(values(metric, opts, cols, a, weight="w"), values(metric, opts, cols, b, weight="w"))
