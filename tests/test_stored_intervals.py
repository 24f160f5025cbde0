"""The intervals of a stored window (issue 34): summary version 3 keeps Σw(y − p)⁴ and the
variance weight's moments, so a window's Brier, log loss, CITL and binned intervals equal a scan
of its rows, under no, frequency and sampling weights, on each engine; an adjusted window's are
the delta method's on the estimated label sums. Summary version 4 keeps the logit grid's split
moments, so LS-ECE's interval equals a scan's too. A store version 2 or 3 wrote stays readable
(the intervals whose sums it lacks NaN, with a warning naming the periods), and a version 4 daily
run continues it: the tables take the new columns, the spec stays one, and the periods written
again give them.

Oracles: the same metric on a scan of the window's rows (each interval is tested against
brute force and simulation in tests/test_intervals.py and tests/test_intervals_smooth.py); the
stored split moments against numpy sums over the raw rows; for the adjusted view, brute-force
numpy on the raw rows with each adjusted label ŷ (a row is a positive of weight ŷ and a negative
of weight 1 − ŷ: every stored sum is linear in the label).
"""

from __future__ import annotations

import uuid
import warnings

import ibis
import numpy as np
import pandas as pd
import pytest
from scipy import stats

import sqlcal
from sqlcal.errors import StoreError
from sqlcal.metrics.intervals import REPLICATES, SEED
from sqlcal.metrics.smooth import ls_ece_finish
from sqlcal.monitor import schema
from sqlcal.monitor import store as monitor_store
from sqlcal.query import store_tables
from tests.intervals_sim import logit_grid_frame

DAY0 = pd.Timestamp("2026-10-01")
KW = dict(score="p", label="y", by="g", time="t", label_time="lt", ls_ece_sigma=(),
          smooth_grids=())
#: the metrics with an interval a stored window serves from its totals, bins and cells
METRICS = {
    "brier": sqlcal.brier,
    "log_loss": sqlcal.log_loss,
    "calibration_in_the_large": sqlcal.calibration_in_the_large,
    "normalized_entropy": sqlcal.normalized_entropy,
    "ece_15_stored_bins": lambda s: sqlcal.ece(s, bins=15),
    "ece_16_from_cells": lambda s: sqlcal.ece(s, bins=16),
    "rmsce_15": lambda s: sqlcal.ece(s, bins=15, norm="l2"),
    "mce_15": lambda s: sqlcal.ece(s, bins=15, norm="max"),
    "brier_decomposition": lambda s: sqlcal.brier_decomposition(s, bins=15),
    "debiased_ece": lambda s: sqlcal.debiased_ece(s, bins=15),
    "reliability": lambda s: sqlcal.reliability(s, bins=15),
}
FACTS = ["window", "maturity", "window_exact", "window_bound"]


def predictions(n: int = 4000, days: int = 5, seed: int = 4) -> pd.DataFrame:
    """Two groups; fractional weights ``w``, whole ones ``wi``; label delays growing with the
    score."""
    rng = np.random.default_rng(seed)
    p = rng.beta(2, 5, n)
    y = (rng.random(n) < np.clip(1.15 * p, 0, 1)).astype(np.int64)
    t = DAY0 + pd.to_timedelta(rng.integers(0, days * 86400, n), unit="s")
    delay = rng.exponential(0.5 + 4 * p, n)
    lt = pd.Series(t + pd.to_timedelta(np.round(delay * 86400), unit="s")).where(y == 1, pd.NaT)
    return pd.DataFrame({"p": p, "y": y, "w": np.round(rng.uniform(0.2, 3.0, n), 3),
                         "wi": rng.integers(1, 4, n).astype(float),
                         "g": rng.choice(["a", "b"], n), "t": pd.Series(t), "lt": lt})


def store_for(con):
    """A store on the engine under test: an in-memory DuckDB for DuckDB, the PostgreSQL
    database under a fresh prefix."""
    if con.name in ("duckdb", "pyspark"):
        return ibis.duckdb.connect(), f"s{uuid.uuid4().hex[:8]}_"
    return con, f"sqlcal_{uuid.uuid4().hex[:8]}_"


def drop_store(store, prefix) -> None:
    for name in store.list_tables():
        if name.startswith(prefix):
            store.drop_table(name)


def assert_equal(got: pd.DataFrame, want: pd.DataFrame, what: str) -> None:
    """Every column of ``want`` (the intervals included) equal to 1e-9 relative."""
    got = got.drop(columns=[c for c in FACTS if c in got])
    assert list(got.columns) == list(want.columns), what
    assert len(got) == len(want), what
    for col in want.columns:
        x, y = got[col].to_numpy(), want[col].to_numpy()
        if want[col].dtype.kind in "fc":
            np.testing.assert_allclose(x.astype(float), y.astype(float), rtol=1e-9, atol=1e-12,
                                       err_msg=f"{what}: {col}")
        else:
            assert [str(v) for v in x] == [str(v) for v in y], f"{what}: {col}"


def interval_columns(frame: pd.DataFrame) -> list[str]:
    return [c for c in frame.columns if c in ("ci_lower", "ci_upper")
            or c.endswith(("_lower", "_upper"))]


@pytest.mark.parametrize("weight", ["w", "wi", None], ids=["sampling", "frequency", "none"])
def test_a_stored_window_gives_the_intervals_of_a_scan(con, upload, weight):
    df = predictions()
    store, prefix = store_for(con)
    try:
        sqlcal.snapshot(upload(df), store=store, prefix=prefix, weight=weight,
                        as_of="2027-01-01", **KW)
        first, last = DAY0 + pd.Timedelta(days=1), DAY0 + pd.Timedelta(days=3)
        src = sqlcal.stored(store, prefix=prefix, start=first, end=last)  # mature
        raw = df[(df.t >= first) & (df.t < last + pd.Timedelta(days=1))]
        scan = sqlcal.source(raw, score="p", label="y", weight=weight, by="g")
        kinds = set()
        for name, metric in METRICS.items():
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # no interval left out
                got, want = metric(src), metric(scan)
            columns = interval_columns(want)
            assert columns and want[columns].notna().all().all(), name
            assert_equal(got, want, f"{con.name} {weight} {name}")
            kinds |= set(want.get("weight_kind", ()))
        assert kinds == {"sampling" if weight == "w" else "frequency"}
    finally:
        if store is con:
            drop_store(store, prefix)


# -- LS-ECE: the logit grid's split moments (summary version 4) ------------------------------

#: LS-ECE's default noise scale, and the stored logit grid's step σ/20 and clip
SIGMA, CLIP = 0.1, 1e-6
LS_ECE = {"ls_ece": sqlcal.ls_ece,
          "ls_ece_uniform": lambda s: sqlcal.ls_ece(s, noise="uniform", grid_step=SIGMA / 20)}


@pytest.mark.parametrize("weight", ["w", "wi", None], ids=["sampling", "frequency", "none"])
def test_a_stored_window_gives_ls_eces_interval_of_a_scan(con, upload, weight):
    """The mature and the lag views of a window: LS-ECE's interval (Gaussian and uniform noise)
    equals that of a scan of the rows they admit, to 1e-9, under no, frequency and sampling
    weights."""
    df = predictions()
    store, prefix = store_for(con)
    try:
        sqlcal.snapshot(upload(df), store=store, prefix=prefix, weight=weight,
                        as_of="2027-01-01", **{**KW, "ls_ece_sigma": (SIGMA,)})
        first, last = DAY0 + pd.Timedelta(days=1), DAY0 + pd.Timedelta(days=3)
        inside = (df.t >= first) & (df.t < last + pd.Timedelta(days=1))
        late = df["lt"] - df.t >= pd.Timedelta(days=2)  # a label after two days: 0 at lag:2d
        views = {"mature": df[inside],
                 "lag:2d": df[inside].assign(y=np.where(late[inside], 0, df.y[inside]))}
        for view, raw in views.items():
            src = sqlcal.stored(store, prefix=prefix, start=first, end=last, maturity=view)
            scan = sqlcal.source(raw, score="p", label="y", weight=weight, by="g")
            for name, metric in LS_ECE.items():
                with warnings.catch_warnings():
                    warnings.simplefilter("error")  # no interval left out
                    got, want = metric(src), metric(scan)
                assert want[["ci_lower", "ci_upper"]].notna().all().all(), name
                assert (want["ci_lower"] < want["ci_upper"]).all(), name
                assert set(want["weight_kind"]) == {"sampling" if weight == "w" else "frequency"}
                assert_equal(got, want, f"{con.name} {weight} {view} {name}")
    finally:
        if store is con:
            drop_store(store, prefix)


def logit_moments(rows: pd.DataFrame, weight: str | None) -> pd.DataFrame:
    """Per group, day and logit cell k, from the raw rows in numpy: Σv·a·b over the row's shares
    a, b ∈ {1 − f, f} of the cell's two nodes (f its position in the cell, the logit of its
    clipped score over the step), label-free and times y, under v = w and v = w²."""
    p = np.clip(rows.p.to_numpy(), CLIP, 1 - CLIP)
    x = (np.log(p) - np.log1p(-p)) / (SIGMA / 20)
    k = np.floor(x)
    f = x - k
    w = rows[weight].to_numpy() if weight else np.ones(len(rows))
    y = rows.y.to_numpy(float)
    terms = {}
    for pre, v in (("q", w), ("qv", w * w)):
        for lab, z in (("", 1.0), ("y", y)):
            for ab, share in (("ll", (1 - f) ** 2), ("lh", (1 - f) * f), ("hh", f ** 2)):
                terms[f"{pre}{lab}_{ab}"] = v * z * share
    frame = pd.DataFrame(terms).assign(g=rows.g.to_numpy(), day=rows.t.dt.floor("D").to_numpy(),
                                       k=k.astype(np.int64))
    return frame.groupby(["g", "day", "k"]).sum().sort_index()


@pytest.mark.parametrize("weight", ["w", None], ids=["weights", "none"])
def test_the_stored_split_moments_equal_numpy_sums_over_the_rows(weight):
    """Each period's stored split moments (their label parts summed over the delay buckets)
    equal numpy's sums over its rows, the variance weight's ones (v = w²) included."""
    from sqlcal.monitor.stored import daily

    df = predictions(n=1500, days=3, seed=5)
    store = ibis.duckdb.connect()
    sqlcal.snapshot(df, store=store, weight=weight, as_of="2027-01-01",
                    **{**KW, "ls_ece_sigma": (SIGMA,)})
    stored = daily(store, "logit", maturity="all").rename(columns={"period_start": "day"})
    stored = stored.set_index(["g", "day", "k"]).sort_index()
    want = logit_moments(df, weight)
    assert stored.index.equals(want.index)
    for column in want.columns:
        np.testing.assert_allclose(stored[column].to_numpy(float), want[column].to_numpy(),
                                   rtol=1e-12, atol=1e-12, err_msg=column)


# -- the adjusted view -------------------------------------------------------------------------


def adjusted_labels(df: pd.DataFrame, as_of, mature_age: float, bins: int = 8,
                    K: int = 2**14) -> pd.DataFrame:
    """Every row with its adjusted label ``y_hat``: 1 for a positive known at ``as_of`` in a
    mature period, y·1[delay < lag]/F̂_b(lag) in an immature one (F̂ from the mature rows'
    delays per group and score bin of equal weight), and ``lag`` (inf: mature)."""
    edges = list(schema.DELAYS)
    day = df.t.dt.floor("D")
    age = (as_of - (day + pd.Timedelta(days=1))).dt.total_seconds() / 86400
    known = (df.y == 1) & (df["lt"] <= as_of)
    delay = ((df["lt"] - df.t).dt.total_seconds() / 86400).to_numpy()
    cell = np.minimum(np.floor(df.p * K), K - 1).astype(int)
    out = []
    for _, rows in df.groupby("g"):
        cohort = rows[(age >= mature_age)[rows.index]]
        W = cohort.w.groupby(cell[cohort.index]).sum().sort_index()
        before = W.cumsum() - W
        bin_start = pd.Series(np.minimum((before / W.sum() * bins).astype(int), bins - 1),
                              index=W.index)
        starts = bin_start.groupby(bin_start).apply(lambda s: s.index.min())
        c = cell[rows.index].to_numpy()
        b = starts.index.to_numpy()[np.maximum(np.searchsorted(starts.to_numpy(), c,
                                                               "right") - 1, 0)]
        pos = cohort[known[cohort.index]]
        pos_bin = bin_start.reindex(cell[pos.index]).to_numpy()
        pos_delay = delay[df.index.get_indexer(pos.index)]
        a = age[rows.index].to_numpy()
        lag = np.array([np.inf if x >= mature_age else max([e for e in edges[1:] if e <= x],
                                                           default=0.0) for x in a])
        F = {(k, e): pos.w[(pos_bin == k) & (pos_delay < e)].sum() / pos.w[pos_bin == k].sum()
             for k in range(bins) for e in edges[1:]}
        y_hat = np.where(known[rows.index], 1.0, 0.0)
        d = delay[df.index.get_indexer(rows.index)]
        for i in np.flatnonzero(np.isfinite(lag) & (lag > 0)):
            y_hat[i] = float(y_hat[i] == 1 and d[i] < lag[i]) / F[b[i], lag[i]]
        out.append(rows.assign(y_hat=y_hat, lag=lag))
    return pd.concat(out)


def delta_oracle(rows: pd.DataFrame, z: float) -> pd.DataFrame:
    """Per group, from the raw rows with adjusted labels ŷ and sampling weights (v = w²): the
    Brier score and CITL with their delta-method intervals, a row counted as a positive of
    weight ŷ and a negative of weight 1 − ŷ (its sums Σw·f(p, y) become Σw·(ŷ f(p, 1) +
    (1 − ŷ) f(p, 0)))."""
    out = {}
    for g, r in rows.groupby("g"):
        w, p, y = r.w.to_numpy(), r.p.to_numpy(), r.y_hat.to_numpy()
        v, W = w * w, w.sum()

        def mix(f):
            return y * f(1.0) + (1 - y) * f(0.0)
        bs = (w * mix(lambda t: (t - p) ** 2)).sum() / W
        var_bs = (v * mix(lambda t: ((t - p) ** 2 - bs) ** 2)).sum() / W ** 2
        c = (w * (p - y)).sum() / W
        var_c = (v * mix(lambda t: (p - t - c) ** 2)).sum() / W ** 2
        out[g] = {"brier": bs, "brier_lower": max(bs - z * np.sqrt(var_bs), 0.0),
                  "brier_upper": bs + z * np.sqrt(var_bs), "citl": c,
                  "citl_lower": c - z * np.sqrt(var_c), "citl_upper": c + z * np.sqrt(var_c)}
    return pd.DataFrame(out).T


def test_an_adjusted_window_gives_the_delta_method_of_its_estimated_sums():
    df = predictions(n=6000, days=20, seed=7)
    as_of = DAY0 + pd.Timedelta(days=20)
    store = ibis.duckdb.connect()
    view = dict(maturity="adjusted", horizon="8d", settle="1d")
    sqlcal.snapshot(df, store=store, weight="w", as_of=as_of, horizon="8d", settle="1d",
                    levels=True, **KW)
    first, last = DAY0 + pd.Timedelta(days=8), DAY0 + pd.Timedelta(days=19)
    src = sqlcal.stored(store, start=first, end=last, **view)
    rows = adjusted_labels(df, as_of, mature_age=9.0)
    rows = rows[(rows.lag > 0) & (rows.t >= first) & (rows.t < last + pd.Timedelta(days=1))]
    assert 0 < np.isfinite(rows.lag).sum() < len(rows)  # immature periods and mature ones
    want = delta_oracle(rows, float(stats.norm.isf(0.025)))
    for name, metric in (("brier", sqlcal.brier), ("citl", sqlcal.calibration_in_the_large)):
        got = metric(src).set_index("g")
        assert set(got["weight_kind"]) == {"sampling"}
        for column, oracle in (("ci_lower", "_lower"), ("ci_upper", "_upper")):
            np.testing.assert_allclose(got[column], want[name + oracle].astype(float),
                                       rtol=1e-9, err_msg=f"{name} {column}")
    # LS-ECE (from the levels: an adjusted logit grid needs each row's score bin): the logit
    # grid of the raw rows with their adjusted labels, summed in numpy, and its finish
    grids = [logit_grid_frame(r.p.to_numpy(), r.y_hat.to_numpy(), r.w.to_numpy(),
                              r.w.to_numpy() ** 2, SIGMA / 20).assign(g=g)
             for g, r in rows.groupby("g")]
    want = ls_ece_finish(pd.concat(grids), by=["g"], noise_scale=SIGMA, noise="gaussian",
                         step=SIGMA / 20, bootstrap=REPLICATES, seed=SEED,
                         weight_kind="sampling").set_index("g")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a window of version 4 periods keeps the interval
        got = sqlcal.ls_ece(src).set_index("g")
    assert got[["ci_lower", "ci_upper"]].notna().all().all()
    for column in ("ls_ece", "ci_lower", "ci_upper"):
        np.testing.assert_allclose(got[column], want[column], rtol=1e-9, err_msg=column)
    # without the levels the cells serve the same (the immature positives' Σwy·d4, Σw²y...)
    lean_store = ibis.duckdb.connect()
    sqlcal.snapshot(df, store=lean_store, weight="w", as_of=as_of, horizon="8d", settle="1d",
                    **KW)
    lean = sqlcal.stored(lean_store, start=first, end=last, **view)
    for metric in (sqlcal.brier, sqlcal.calibration_in_the_large,
                   lambda s: sqlcal.ece(s, bins=16)):
        a, b = metric(lean), metric(src)
        columns = interval_columns(b)
        assert b[columns].notna().all().all()
        np.testing.assert_allclose(a[columns].to_numpy(float), b[columns].to_numpy(float),
                                   rtol=1e-9, atol=1e-12)
    # a window of mature periods only: the adjusted view is the mature one, intervals included
    old = dict(start=DAY0, end=DAY0 + pd.Timedelta(days=9), horizon="8d", settle="1d")
    for metric in (sqlcal.brier, sqlcal.log_loss, lambda s: sqlcal.ece(s, bins=15),
                   sqlcal.ls_ece):
        a = metric(sqlcal.stored(store, maturity="adjusted", **old)).drop(columns="maturity")
        b = metric(sqlcal.stored(store, maturity="mature", **old)).drop(columns="maturity")
        assert b[interval_columns(b)].notna().all().all()
        pd.testing.assert_frame_equal(a, b, rtol=1e-9)


# -- a store of summary version 2 or 3, then a version 4 daily run ----------------------------


def as_version(store, prefix: str, version: int) -> None:
    """The store as summary ``version`` wrote it: its tables without the columns later versions
    added (the same layout otherwise), its manifest's specs saying ``version``."""
    for kind in schema.TABLES:
        name = schema.table_name(kind, prefix)
        if name in store.list_tables():
            for column in sorted(schema.added_after(kind, version)):
                store.raw_sql(f'ALTER TABLE "{name}" DROP COLUMN "{column}"')
    manifest = schema.table_name("manifest", prefix)
    store.raw_sql(f"""UPDATE "{manifest}" SET "spec" = REPLACE("spec",
                  '"summary_version":{schema.SUMMARY_VERSION}', '"summary_version":{version}')""")


def columns_of(store, name: str) -> list[str]:
    return list(store.table(name).columns)


@pytest.mark.parametrize("old", [2, 3])
def test_a_daily_run_continues_an_older_store(con, upload, old):
    df = predictions(n=3000, days=5, seed=9)
    store, prefix = store_for(con)
    day = [DAY0 + pd.Timedelta(days=k) for k in range(5)]
    opts = dict(store=store, prefix=prefix, weight="w", as_of="2027-01-01",
                **{**KW, "ls_ece_sigma": (SIGMA,)})
    try:
        table = upload(df)  # the predictions table the daily job reads
        sqlcal.snapshot(table, end=day[3], **opts)  # days 0-3, then back to the old version
        as_version(store, prefix, old)
        store_tables._handles(store).clear()  # its tables changed behind sqlcal's back
        assert "q_ll" not in columns_of(store, schema.table_name("logit", prefix))
        assert ("swp4" in columns_of(store, schema.table_name("totals", prefix))) == (old == 3)

        # read as it is: the values of a scan, the intervals whose sums it lacks NaN with the
        # reason: every one for version 2, LS-ECE's for version 3
        window = sqlcal.stored(store, prefix=prefix, end=day[3])
        raw = df[df.t < day[4]]
        scan = sqlcal.source(raw, score="p", label="y", weight="w", by="g")
        lacking = {"ls_ece": sqlcal.ls_ece}
        kept = {}
        if old == 2:
            lacking |= {"brier": sqlcal.brier, "ece": lambda s: sqlcal.ece(s, bins=15)}
        else:
            kept |= {"brier": sqlcal.brier, "ece": lambda s: sqlcal.ece(s, bins=15)}
        for name, metric in lacking.items():
            with pytest.warns(UserWarning, match=r"4 of the window's periods \(2026-10-01, "
                              r"2026-10-02, 2026-10-03, 2026-10-04\) were stored by summary "
                              rf"version {old}, before version \d.*force=True"):
                got = metric(window)
            want = metric(scan)
            assert got[["ci_lower", "ci_upper"]].isna().all().all(), name
            values = [c for c in want.columns if c not in ("ci_lower", "ci_upper")]
            assert_equal(got[values], want[values], f"version {old} window: {name}")
        for name, metric in kept.items():
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                got = metric(window)
            assert_equal(got, metric(scan), f"version {old} window: {name}")

        # the daily run of day 4: the tables take the new columns, the spec stays one
        out = sqlcal.snapshot(table, start=day[4], end=day[4], **opts)
        assert out["status"].tolist() == ["written"]
        for kind in ("totals", "bins", "cells", "logit"):
            name = schema.table_name(kind, prefix)
            key = {"key_g": "string"}
            assert columns_of(store, name) == [c for c, _ in schema.columns(kind, key)], kind
        versions = monitor_store.current_versions(store, prefix)
        assert versions["spec_hash"].nunique() == 1
        assert sorted(versions["spec"].map(schema.stored_version)) == [old] * 4 + [4]
        new = sqlcal.stored(store, prefix=prefix, start=day[4])
        raw4 = df[df.t >= day[4]]
        for metric in (sqlcal.brier, sqlcal.log_loss, lambda s: sqlcal.ece(s, bins=15),
                       sqlcal.ls_ece):
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                got = metric(new)
            assert_equal(got, metric(sqlcal.source(raw4, score="p", label="y", weight="w",
                                                    by="g")), "day 4")
        # a window over both: the old periods lack the sums, so none is summed in part
        with pytest.warns(UserWarning, match="4 of the window's periods"):
            mixed = sqlcal.ls_ece(sqlcal.stored(store, prefix=prefix))
        assert mixed[["ci_lower", "ci_upper"]].isna().all().all()

        # the old periods written again: every window gives its intervals
        again = sqlcal.snapshot(table, end=day[3], force=True, **opts)
        assert (again["status"] == "written").all() and (again["version"] == 2).all()
        every = sqlcal.stored(store, prefix=prefix)
        everything = sqlcal.source(df, score="p", label="y", weight="w", by="g")
        for name, metric in {**METRICS, **LS_ECE}.items():
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                got = metric(every)
            assert_equal(got, metric(everything), f"after the re-snapshot: {name}")
    finally:
        if store is con:
            drop_store(store, prefix)


def test_a_version_1_store_is_still_refused():
    """Version 1 named the key columns as the keys: not a layout version 4 extends."""
    df = predictions(n=300, days=2)
    store = ibis.duckdb.connect()
    sqlcal.snapshot(df, store=store, weight="w", as_of="2027-01-01", **{**KW, "by": ()})
    manifest = schema.table_name("manifest")
    store.raw_sql(f"""UPDATE "{manifest}" SET "spec" = REPLACE("spec",
                  '"summary_version":{schema.SUMMARY_VERSION}', '"summary_version":1')""")
    with pytest.raises(StoreError, match=r"layout \[1\].*new prefix="):
        sqlcal.snapshot(df, store=store, weight="w", as_of="2027-01-02", **{**KW, "by": ()})
