"""The events label layout (spec monitoring §C.2): outcomes in a separate table joined to the
predictions on an example id store the same delay-bucketed label parts as the column layout.

Oracle: the column layout's store of the same data (itself checked against rescans and brute
force in test_monitor_store), every stored table row by row to 1e-12, on every engine; and the
joined rows built in pandas.
"""

from __future__ import annotations

import uuid

import ibis
import numpy as np
import pandas as pd
import pytest

import sqlcal
from sqlcal.errors import InvalidInputError
from sqlcal.monitor import schema
from sqlcal.options import OptionError

DAY0 = pd.Timestamp("2026-10-01")
AS_OF = pd.Timestamp("2026-10-09")
COMMON = dict(score="p", weight="w", by="g", time="t", as_of=AS_OF, ls_ece_sigma=(),
              smooth_grids=())


def both_layouts(n: int = 600, days: int = 3, seed: int = 11):
    """(column-layout rows, predictions, events): positives with exponential delays (some
    arriving after as_of, one with no known time), explicit negative outcomes with a time, and
    examples with no event row."""
    rng = np.random.default_rng(seed)
    p = np.round(rng.beta(2, 5, n), 4)
    y = (rng.random(n) < p).astype(np.int64)
    t = DAY0 + pd.to_timedelta(rng.integers(0, days * 86400, n), unit="s")
    lt = pd.Series(t + pd.to_timedelta(np.round(rng.exponential(2.0, n) * 86400), unit="s"))
    recorded = (y == 1) | (rng.random(n) < 0.3)  # some negatives are recorded as outcome 0
    lt = lt.where(recorded, pd.NaT)
    first_pos = int(np.flatnonzero(y == 1)[0])
    lt.iloc[first_pos] = pd.NaT  # a positive whose arrival time is unknown
    ids = rng.permutation(n) + 1000
    rows = pd.DataFrame({"id": ids, "p": p, "w": rng.integers(1, 4, n).astype(float),
                         "g": rng.choice(["a", "b"], n), "t": pd.Series(t), "y": y, "lt": lt})
    predictions = rows.drop(columns=["y", "lt"])
    events = rows.loc[recorded | (np.arange(n) == first_pos), ["id", "y", "lt"]].sample(
        frac=1.0, random_state=1).reset_index(drop=True)
    return rows, predictions, events


def stored_tables(store, prefix) -> dict:
    """Every summary table of a store, without the spec hash, sorted on its key columns."""
    out = {}
    for kind in schema.TABLES:
        name = schema.table_name(kind, prefix)
        if name not in store.list_tables():
            continue
        frame = store.table(name).execute().drop(columns=["spec_hash"])
        keys = ["period_start", "delay", "group_keys",
                *[c for c, _ in (*schema.TABLES[kind]["params"], *schema.TABLES[kind]["keys"])]]
        out[kind] = frame.sort_values(keys, ignore_index=True)
    return out


@pytest.fixture(scope="module")
def column_layout():
    """The column layout's store of the same data, from the frame on DuckDB: the oracle."""
    rows, predictions, events = both_layouts()
    store = ibis.duckdb.connect()
    report = sqlcal.snapshot(rows, store=store, prefix="col_", label="y", label_time="lt",
                             **COMMON)
    return rows, predictions, events, report, stored_tables(store, "col_")


def test_the_events_layout_stores_what_the_column_layout_stores(con, upload, column_layout):
    rows, predictions, events, column, a = column_layout
    if con.name in ("duckdb", "pyspark"):  # Spark: a store table write costs seconds there
        store, prefix = ibis.duckdb.connect(), "ev_"
    else:
        store, prefix = con, f"ev_{uuid.uuid4().hex[:8]}_"
    try:
        joined = sqlcal.snapshot(upload(predictions), events=upload(events), key="id",
                                 store=store, prefix=prefix, label="y", label_time="lt",
                                 **COMMON)
        pd.testing.assert_frame_equal(column, joined)
        b = stored_tables(store, prefix)
        assert sorted(a) == sorted(b) and len(a) >= 3
        for kind in a:
            assert list(a[kind].columns) == list(b[kind].columns), kind
            assert len(a[kind]) == len(b[kind]), kind
            for col in a[kind].columns:
                x, y = a[kind][col].to_numpy(), b[kind][col].to_numpy()
                if a[kind][col].dtype.kind == "f":
                    np.testing.assert_allclose(x, y, rtol=1e-12, atol=1e-13,
                                               err_msg=f"{con.name} {kind}.{col}")
                else:
                    assert (pd.Series(x).astype(str) == pd.Series(y).astype(str)).all(), \
                        f"{con.name} {kind}.{col}"
        # the delay buckets hold what the raw rows say (brute force): positives known at as_of
        totals = a["totals"]
        known = rows[(rows.y == 1) & ~(rows["lt"] > AS_OF)]
        days = (known["lt"] - known.t).dt.total_seconds() / 86400
        bucket = np.where(known["lt"].isna(), schema.DELAY_UNKNOWN,
                          [schema.delay_bucket(d, schema.DELAYS) for d in days.fillna(0)])
        want = known.w.groupby(bucket).sum()
        got = totals[totals.delay != schema.DELAY_LABEL_FREE].groupby("delay")["swy"].sum()
        pd.testing.assert_series_equal(got.sort_index(), want.sort_index(), check_names=False,
                                       check_index_type=False, rtol=1e-12)
    finally:
        if con.name == "postgres":
            for name in store.list_tables():
                if name.startswith(prefix):
                    store.drop_table(name)


def test_the_events_layout_is_checked_at_the_boundary():
    rows, predictions, events = both_layouts(n=60, days=1)
    store = ibis.duckdb.connect()
    kw = dict(COMMON, store=store, label="y", label_time="lt")
    with pytest.raises(OptionError, match="events= needs key="):
        sqlcal.snapshot(predictions, events=events, **kw)
    with pytest.raises(OptionError, match="key= names the example id"):
        sqlcal.snapshot(rows, key="id", **kw)
    with pytest.raises(OptionError, match=r"\['y', 'lt'\] are columns of the predictions"):
        sqlcal.snapshot(rows, events=events, key="id", **kw)
    with pytest.raises(InvalidInputError, match="'outcome' is not in the events table"):
        sqlcal.snapshot(predictions, events=events, key="id", **{**kw, "label": "outcome"})
    twice = pd.concat([events, events.iloc[:3]], ignore_index=True)
    with pytest.raises(InvalidInputError, match="3 values of key 'id' have more than one"):
        sqlcal.snapshot(predictions, events=twice, key="id", **kw)
    assert not [t for t in store.list_tables() if t.startswith("sqlcal_")]


def test_an_events_table_named_in_the_configuration(tmp_path):
    import duckdb

    from sqlcal.monitor import config as monitor_config

    rows, predictions, events = both_layouts(n=300, days=2, seed=3)
    path = tmp_path / "w.duckdb"
    with duckdb.connect(str(path)) as db:
        db.register("p", predictions)
        db.register("e", events)
        db.execute("CREATE TABLE predictions AS SELECT * FROM p")
        db.execute("CREATE TABLE conversions AS SELECT * FROM e")
    store = str(tmp_path / "s.duckdb")
    config = monitor_config.validate({
        "source": {"data": str(path), "table": "predictions", "score": "p", "label": "y",
                   "weight": "w", "by": "g", "time": "t"},
        "labels": {"layout": "events", "events": "conversions", "key": "id",
                   "event_time": "lt"},
        "snapshot": {"store": store, "prefix": "a_", "ls_ece_sigma": [], "smooth_grids": []}})
    out = monitor_config.run_snapshot(config, since=DAY0, until=DAY0 + pd.Timedelta(days=1),
                                      now=AS_OF)
    assert (out["status"] == "written").all() and out["n"].sum() == len(rows)
    sqlcal.snapshot(rows, store=store, prefix="b_", **dict(COMMON, label="y", label_time="lt",
                                                          levels=False))
    for name in ("ece", "brier", "log_loss"):
        mine = getattr(sqlcal, name)(sqlcal.stored(store, prefix="a_", maturity="lag:2d"))
        want = getattr(sqlcal, name)(sqlcal.stored(store, prefix="b_", maturity="lag:2d"))
        pd.testing.assert_frame_equal(mine, want, rtol=1e-12)
