"""The summary store: snapshots, stored windows, maturity views (spec monitoring §E.1, E.2, E.4).

Oracles: the same metric on the raw rows of the window (the metric functions are tested against
brute force elsewhere), with the labels that arrived after the view's lag set to 0 in pandas; and
brute-force numpy on the raw rows for n, W, Brier, log loss and the maturity curve.
"""

from __future__ import annotations

import uuid

import ibis
import numpy as np
import pandas as pd
import pytest

import sqlcal
from sqlcal.monitor import store as monitor_store
from sqlcal.options import OptionError
from sqlcal.query import store_tables

DAY0 = pd.Timestamp("2026-10-01")
AS_OF = pd.Timestamp("2026-12-01")
KW = dict(score="p", label="y", weight="w", by="g", time="t", label_time="lt", as_of=AS_OF)
#: the tests that read neither LS-ECE nor smooth ECE skip their two scans
LEAN = dict(KW, ls_ece_sigma=(), smooth_grids=())


def predictions(n: int = 3000, days: int = 6, seed: int = 0) -> pd.DataFrame:
    """Scores from three families (continuous, rounded to 3 decimals, point masses at 0 and 1
    with valid labels), integer weights, exponential label delays per score, seconds-resolved
    timestamps."""
    rng = np.random.default_rng(seed)
    family = rng.integers(0, 3, n)
    p = rng.beta(2, 6, n)
    p = np.where(family == 1, np.round(p, 3), p)
    mass = rng.random(n)
    p = np.where(family == 2, np.where(mass < 0.5, 0.0, np.where(mass < 0.6, 1.0, p)), p)
    y = (rng.random(n) < np.clip(1.2 * p, 0, 1)).astype(np.int64)
    y = np.where(p == 0, 0, np.where(p == 1, 1, y))
    t = DAY0 + pd.to_timedelta(rng.integers(0, days * 86400, n), unit="s")
    delay = rng.exponential(1.0 + 4 * p, n)
    lt = t + pd.to_timedelta(np.round(delay * 86400), unit="s")
    lt = pd.Series(lt).where(y == 1, pd.NaT)
    return pd.DataFrame({"p": p, "y": y, "w": rng.integers(1, 4, n).astype(float),
                         "g": rng.choice(["a", "b"], n), "t": pd.Series(t), "lt": lt})


def window_rows(df: pd.DataFrame, first: int, last: int, lag: float | None = None):
    """The raw rows of days first..last (0-based), labels arriving after ``lag`` days set to 0."""
    start, end = DAY0 + pd.Timedelta(days=first), DAY0 + pd.Timedelta(days=last + 1)
    out = df[(df["t"] >= start) & (df["t"] < end)].copy()
    if lag is not None:
        late = (out["lt"] - out["t"]) >= pd.Timedelta(days=lag)
        out.loc[late.fillna(False) & (out.y == 1), "y"] = 0
    return out.drop(columns=["lt"])


METRICS = {
    "ece": lambda s, **k: sqlcal.ece(s, bins=15, **k),
    "ece_8_from_cells": lambda s, **k: sqlcal.ece(s, bins=8, **k),
    "brier": lambda s, **k: sqlcal.brier(s, **k),
    "log_loss": lambda s, **k: sqlcal.log_loss(s, **k),
    "reliability": lambda s, **k: sqlcal.reliability(s, bins=15, **k),
    "cutoff_grid": lambda s, **k: sqlcal.cutoff_error(s, method="grid", **k),
    "smooth_ece": lambda s, **k: sqlcal.smooth_ece(s, **k),
    # its interval too: summary version 4 keeps the logit grid's split moments it reads
    "ls_ece": lambda s, **k: sqlcal.ls_ece(s, **k),
}


#: metrics a stored window serves from the levels (levels=True)
LEVELS_METRICS = {
    "cutoff_exact": lambda s: sqlcal.cutoff_error(s),
    "ece_equal_mass": lambda s: sqlcal.ece(s, strategy="quantile"),
    "calibration_slope": lambda s: sqlcal.calibration_slope(s),
    "tce": lambda s: sqlcal.tce(s),
}


#: the trust columns of a stored window's results (a scan's have none)
STORED_FACTS = ["window", "maturity", "window_exact", "window_bound"]


def assert_same(a: pd.DataFrame, b: pd.DataFrame, what: str) -> None:
    if "window" in a and "window" not in b:  # a stored window against a scan
        assert a["window_exact"].all() and (a["window_bound"] == 0).all(), what
        a = a.drop(columns=STORED_FACTS)  # every column else, the intervals included (issue 34)
    assert list(a.columns) == list(b.columns), what
    assert len(a) == len(b), what
    for col in a.columns:
        x, y = a[col].to_numpy(), b[col].to_numpy()
        if a[col].dtype.kind in "fc":
            np.testing.assert_allclose(x.astype(float), y.astype(float), rtol=1e-12, atol=1e-13,
                                       err_msg=f"{what}: {col}")
        else:
            assert (x == y).all(), f"{what}: {col}"


def store_for(con):
    """A store on the engine under test (a fresh prefix); an in-memory DuckDB for DuckDB, and
    for Spark too (its reductions are what differs; a table write there costs seconds)."""
    if con.name in ("duckdb", "pyspark"):
        return ibis.duckdb.connect(), "sqlcal_"
    return con, f"sqlcal_{uuid.uuid4().hex[:8]}_"


def drop_store(store, prefix) -> None:
    for name in store.list_tables():
        if name.startswith(prefix):
            store.drop_table(name)


def test_merged_windows_equal_a_rescan(con, upload):
    df = predictions()
    store, prefix = store_for(con)
    try:
        # Spark: each query costs seconds here, so the optional summaries (levels, the logit
        # grid) are checked on DuckDB and PostgreSQL only
        spark = con.name == "pyspark"
        out = sqlcal.snapshot(upload(df), store=store, prefix=prefix, levels=not spark,
                              ls_ece_sigma=() if spark else (0.1,), **KW)
        assert (out["status"] == "written").all() and out["n"].sum() == len(df)
        for (first, last), view in [((1, 3), "all"), ((0, 5), "lag:3d")]:
            src = sqlcal.stored(store, prefix=prefix, maturity=view,
                                start=DAY0 + pd.Timedelta(days=first),
                                end=DAY0 + pd.Timedelta(days=last))
            raw = window_rows(df, first, last, lag=3 if view == "lag:3d" else None)
            rescan = sqlcal.source(raw, score="p", label="y", weight="w", by="g")
            what = f"{con.name} days {first}-{last} {view}"
            for name, metric in METRICS.items():
                if not (spark and name == "ls_ece"):
                    assert_same(metric(src), metric(rescan), f"{what} {name}")
            if not spark:  # the levels serve the exact-mode metrics and the fits
                for name, metric in LEVELS_METRICS.items():
                    assert_same(metric(src), metric(rescan), f"{what} {name} from levels")
            # independent oracle: numpy on the raw rows
            brier = sqlcal.brier(src).set_index("g")
            for g, part in raw.groupby("g"):
                assert brier.loc[g, "n"] == len(part)
                assert brier.loc[g, "W"] == part.w.sum()
                want = (part.w * (part.y - part.p) ** 2).sum() / part.w.sum()
                assert brier.loc[g, "brier"] == pytest.approx(want, rel=1e-12)
    finally:
        if con.name == "postgres":
            drop_store(store, prefix)


def test_a_snapshot_twice_writes_nothing_and_late_rows_make_a_new_version():
    df = predictions(seed=1)
    store = ibis.duckdb.connect()
    sqlcal.snapshot(df, store=store, **LEAN)
    sizes = {t: store.table(t).count().execute() for t in store.list_tables()}
    again = sqlcal.snapshot(df, store=store, **LEAN)
    assert (again["status"] == "unchanged").all() and (again["version"] == 1).all()
    assert {t: store.table(t).count().execute() for t in store.list_tables()} == sizes

    rng = np.random.default_rng(7)
    late = predictions(n=200, days=1, seed=3)
    late["t"] = late["t"] + pd.Timedelta(days=2)  # day 2 only
    late["lt"] = late["lt"] + pd.Timedelta(days=2)
    late["w"] = rng.integers(1, 3, len(late)).astype(float)
    both = pd.concat([df, late], ignore_index=True)
    out = sqlcal.snapshot(both, store=store, **LEAN)
    day2 = DAY0 + pd.Timedelta(days=2)
    assert out.loc[out.status == "written", "period_start"].tolist() == [day2]
    assert out.set_index("period_start").loc[day2, "version"] == 2
    manifest = monitor_store.manifest(store)
    day2_rows = manifest[manifest.period_start == day2].sort_values("version")
    assert day2_rows["current"].tolist() == [False, True]
    src = sqlcal.stored(store, maturity="all")
    rescan = sqlcal.source(window_rows(both, 0, 5), score="p", label="y", weight="w", by="g")
    for name in ("ece", "brier", "cutoff_grid"):
        assert_same(METRICS[name](src), METRICS[name](rescan), name)


def test_a_snapshot_that_dies_before_its_manifest_row_leaves_the_old_version_read():
    df = predictions(seed=2)
    store = ibis.duckdb.connect()
    sqlcal.snapshot(df, store=store, **LEAN)
    before = sqlcal.brier(sqlcal.stored(store, maturity="all"))
    changed = df.assign(w=df.w + 1)

    def crash(*args, **kwargs):
        raise RuntimeError("killed")

    # the process dies once the rows are written and before the manifest names them
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(store_tables.Writer, "clear_current", crash)
        with pytest.raises(RuntimeError, match="killed"):
            sqlcal.snapshot(changed, store=store, **LEAN)
    assert_same(sqlcal.brier(sqlcal.stored(store, maturity="all")), before, "after a crash")
    assert set(monitor_store.manifest(store)["version"]) == {1}


def test_a_store_table_sqlcal_did_not_write_is_refused():
    store = ibis.duckdb.connect()
    store.create_table("sqlcal_sum_totals", pd.DataFrame({"x": [1, 2]}))
    with pytest.raises(monitor_store.StoreError, match="no manifest"):
        sqlcal.snapshot(predictions(n=100), store=store, **KW)
    assert store.table("sqlcal_sum_totals").execute()["x"].tolist() == [1, 2]
    store.create_table("sqlcal_snapshots", pd.DataFrame({"x": [1]}))
    with pytest.raises(monitor_store.StoreError, match="not a sqlcal manifest"):
        sqlcal.snapshot(predictions(n=100), store=store, **KW)


def test_a_metric_needing_an_unstored_summary_names_the_snapshot_option():
    store = ibis.duckdb.connect()
    sqlcal.snapshot(predictions(n=500), store=store, **LEAN)
    src = sqlcal.stored(store, maturity="all")
    with pytest.raises(OptionError, match=r"levels=True"):
        sqlcal.cutoff_error(src)
    with pytest.raises(OptionError, match=r"bins=10"):
        sqlcal.ece(sqlcal.stored(store, maturity="all"), bins=10)
    with pytest.raises(OptionError, match=r"ls_ece_sigma=0\.2"):
        sqlcal.ls_ece(sqlcal.stored(store, maturity="all"), noise_scale=0.2)
    with pytest.raises(OptionError, match=r"lag:<a>d takes a delay edge"):
        sqlcal.stored(store, maturity="lag:4d")


def test_snapshot_options_are_checked_before_any_query():
    df = predictions(n=50)
    for bad, match in [({"grain": "week"}, "grain"), ({"cells": 1000}, "cells"),
                       ({"delays": (1, 2)}, "delays"), ({"by": ["g", "g"]}, "by"),
                       ({"horizon": "a month"}, "horizon"), ({"horizon": "-5d"}, "horizon"),
                       ({"settle": "nand"}, "settle"), ({"score": "delay"}, "score"),
                       ({"start": "2026-10-01 00:00:01"}, "start")]:
        with pytest.raises(OptionError, match=match):
            sqlcal.snapshot(df, store=ibis.duckdb.connect(), **{**KW, **bad})


def delayed_stream(days: int = 40, per_day: int = 400, seed: int = 5) -> pd.DataFrame:
    """Calibrated scores, labels whose delay (days) is exponential with a mean growing with the
    score (so the curve differs between score bins), unit weights."""
    rng = np.random.default_rng(seed)
    n = days * per_day
    p = rng.beta(2, 5, n)
    y = (rng.random(n) < p).astype(np.int64)
    t = DAY0 + pd.to_timedelta(np.repeat(np.arange(days), per_day) * 86400
                               + rng.integers(0, 86400, n), unit="s")
    delay = rng.exponential(0.5 + 6 * p, n)
    lt = pd.Series(t + pd.to_timedelta(np.round(delay * 86400), unit="s")).where(y == 1, pd.NaT)
    return pd.DataFrame({"p": p, "y": y, "w": 1.0, "g": "a", "t": pd.Series(t), "lt": lt})


def brute_force_bins(free: pd.DataFrame, bins: int, K: int = 2**14) -> dict:
    """cell -> score bin: equal label-free weight, cells whole (numpy on the raw rows)."""
    cell = np.minimum(np.floor(free.p.to_numpy() * K), K - 1).astype(int)
    W = pd.Series(free.w.to_numpy()).groupby(cell).sum().sort_index()
    before = W.cumsum() - W
    return dict(zip(W.index, np.minimum((before / W.sum() * bins).astype(int), bins - 1)))


def test_the_maturity_curve_equals_brute_force_on_the_raw_rows():
    from sqlcal.monitor.maturity import maturity

    df = delayed_stream()
    store = ibis.duckdb.connect()
    as_of = DAY0 + pd.Timedelta(days=41)
    sqlcal.snapshot(df, store=store, **{**LEAN, "as_of": as_of})
    curve = maturity(store, bins=4, horizon="20d", settle="1d")
    mature = df[df.t < DAY0 + pd.Timedelta(days=41 - 21)]  # period end + 21 days <= as_of
    bin_of = brute_force_bins(mature, 4)
    cell = np.minimum(np.floor(mature.p * 2**14), 2**14 - 1).astype(int)
    mature = mature.assign(score_bin=cell.map(bin_of))
    pos = mature[(mature.y == 1) & (mature["lt"] <= as_of)]
    delay = (pos["lt"] - pos["t"]).dt.total_seconds() / 86400
    assert curve["cohorts"].iloc[0] == 20
    for b in range(-1, 4):
        mine = pos if b < 0 else pos[pos.score_bin == b]
        d = delay[mine.index]
        for a in (1, 2, 3, 5, 7, 14, 30):
            row = curve[(curve.score_bin == b) & (curve.delay == a)].iloc[0]
            want = mine.w[d < a].sum() / mine.w.sum()
            assert row.F_hat == pytest.approx(want, rel=1e-12, abs=1e-15)
            assert row.F_lower <= row.F_hat <= row.F_upper
    # the bins differ: slower labels at higher scores
    at_2 = curve[curve.delay == 2].set_index("score_bin")["F_hat"]
    assert at_2[0] > at_2[3] + 0.1


def test_the_maturity_adjusted_ratio_recovers_the_eventual_positives():
    from sqlcal.monitor.maturity import adjusted

    df = delayed_stream(days=45, per_day=500, seed=6)
    as_of = DAY0 + pd.Timedelta(days=45)
    store = ibis.duckdb.connect()
    sqlcal.snapshot(df, store=store, **{**LEAN, "as_of": as_of})
    window = (DAY0 + pd.Timedelta(days=37), DAY0 + pd.Timedelta(days=43))  # ages 1 to 7 days
    out = adjusted(store, start=window[0], end=window[1], bins=4, horizon="20d",
                   settle="1d").iloc[0]
    rows = df[(df.t >= window[0]) & (df.t < window[1] + pd.Timedelta(days=1))]
    truth = (rows.w * rows.y).sum() / (rows.w * rows.p).sum()  # every label, eventually
    seen = rows[(rows.y == 1) & (rows["lt"] <= as_of)]
    naive = seen.w.sum() / (rows.w * rows.p).sum()
    assert out.oe_observed == pytest.approx(naive, rel=1e-12)
    assert out.oe_observed < truth - 0.05  # labels still arriving: biased down
    se = (out.upper - out.lower) / (2 * 1.959963984540054)
    assert abs(out.oe_adjusted - truth) <= 2 * se
    assert 0.05 < out.pending_share < 0.6 and out.estimate
    assert out.periods_left_out == 0


# -- the command and its configuration -----------------------------------------------------------


def monitor_toml(tmp_path, data, store, extra="") -> str:
    path = tmp_path / "monitor.toml"
    path.write_text(f"""
[source]
data = "{data}"
table = "predictions"
score = "p"
label = "y"
weight = "w"
by = ["g"]
time = "t"

[labels]
label_time = "lt"
horizon = "3d"

[snapshot]
store = "{store}"
bins = [15, 10]
{extra}
""")
    return str(path)


def test_the_snapshot_command_writes_once_and_refuses_a_bad_config(tmp_path, capsys):
    import duckdb
    import jsonschema

    from sqlcal.cli import commands
    from sqlcal.monitor import config as monitor_config

    df = predictions(n=800)
    data, store = tmp_path / "w.duckdb", tmp_path / "s.duckdb"
    with duckdb.connect(str(data)) as con:
        con.register("df", df)
        con.execute("CREATE TABLE predictions AS SELECT * FROM df")
    path = monitor_toml(tmp_path, data, store)
    args = ["snapshot", "--config", path, "--since", "2026-10-01", "--until", "2026-10-06"]
    assert commands.main(args) == 0
    assert "6 of 6 periods written" in capsys.readouterr().out
    assert commands.main(args) == 0
    assert "0 of 6 periods written" in capsys.readouterr().out
    src = sqlcal.stored(str(store), maturity="all")
    rescan = sqlcal.source(window_rows(df, 0, 5), score="p", label="y", weight="w", by="g")
    assert_same(sqlcal.ece(src, bins=10), sqlcal.ece(rescan, bins=10), "bins from the config")

    raw = monitor_config.validate({"source": {"data": "x", "score": "p", "label": "y",
                                              "time": "t"}, "snapshot": {"store": "s.duckdb"}})
    assert raw["snapshot"]["prefix"] == "sqlcal_"
    schema_doc = monitor_config.json_schema()
    import tomllib
    jsonschema.validate(tomllib.loads(open(path).read()), schema_doc)
    assert commands.main(["maturity", "--config", path, "--bins", "2", "--json"]) == 0
    curve = pd.read_json(__import__("io").StringIO(capsys.readouterr().out))
    assert set(curve.score_bin) == {-1, 0, 1} and curve.F_hat.between(0, 1).all()
    bad = monitor_toml(tmp_path, data, store, extra="cels = 1024")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(tomllib.loads(open(bad).read()), schema_doc)
    assert commands.main(["snapshot", "--config", bad]) == 2
    assert "[snapshot] has unknown keys ['cels']" in capsys.readouterr().err


def test_daily_summaries_and_the_mature_view_equal_their_days_rows():
    from sqlcal.monitor.stored import daily

    df = predictions(seed=8)
    store = ibis.duckdb.connect()
    sqlcal.snapshot(df, store=store, **LEAN)
    per_day = daily(store, "totals", maturity="lag:2d").set_index(["g", "period_start"])
    assert len(per_day) == 12
    for day in range(6):
        raw = window_rows(df, day, day, lag=2)
        for g, part in raw.groupby("g"):
            row = per_day.loc[(g, DAY0 + pd.Timedelta(days=day))]
            assert row.n == len(part)
            assert row.swy == pytest.approx((part.w * part.y).sum(), rel=1e-12)
            assert row.swp == pytest.approx((part.w * part.p).sum(), rel=1e-12)
            assert row.swpp == pytest.approx((part.w * part.p ** 2).sum(), rel=1e-12)
    # the mature view drops exactly the periods younger than horizon + settle
    at = DAY0 + pd.Timedelta(days=6)  # day k ends at DAY0 + k + 1: mature when k + 1 + 3 <= 6
    src = sqlcal.stored(store, maturity="mature", at=at, horizon="2d", settle="1d")
    rescan = sqlcal.source(window_rows(df, 0, 2), score="p", label="y", weight="w", by="g")
    assert_same(sqlcal.brier(src), sqlcal.brier(rescan), "mature")
    cells = daily(store, "cells", maturity="all")
    assert cells.groupby("period_start")["n"].sum().tolist() == \
        window_rows(df, 0, 5).groupby(df["t"].dt.floor("D"))["p"].size().tolist()


def test_integer_weights_equal_duplicated_rows():
    df = predictions(n=600, seed=9).assign(w=1.0)
    twice = df.assign(w=2.0)
    stores = [ibis.duckdb.connect(), ibis.duckdb.connect()]
    sqlcal.snapshot(twice, store=stores[0], **LEAN)
    sqlcal.snapshot(pd.concat([df, df], ignore_index=True), store=stores[1], **LEAN)
    a, b = (sqlcal.stored(s, maturity="lag:2d") for s in stores)
    for name in ("ece", "brier", "log_loss", "cutoff_grid"):
        x, y = METRICS[name](a), METRICS[name](b)
        x = x.drop(columns=[c for c in ("n", "n_infinite") if c in x])  # row counts
        y = y.drop(columns=[c for c in ("n", "n_infinite") if c in y])
        assert_same(x, y, name)


def _corrected(df: pd.DataFrame, change: str) -> pd.DataFrame:
    """A correction of day 1 that leaves its count, Σw, Σwp and Σwy as they were."""
    df = df.copy()
    day = df.index[(df.t >= DAY0 + pd.Timedelta(days=1)) & (df.t < DAY0 + pd.Timedelta(days=2))]
    rows = df.loc[day]
    if change == "labels swapped":  # a positive and a negative of one weight trade labels
        pos = rows[(rows.y == 1) & (rows.w == 2) & rows.p.between(0.05, 0.95)].index[0]
        neg = rows[(rows.y == 0) & (rows.w == 2) & (rows.g == df.at[pos, "g"])
                   & rows.p.between(0.05, 0.95)].index[0]
        df.loc[[pos, neg], ["y", "lt"]] = df.loc[[neg, pos], ["y", "lt"]].to_numpy()
    elif change == "row moved between groups":
        i = rows.index[0]
        df.at[i, "g"] = "b" if df.at[i, "g"] == "a" else "a"
    else:  # two scores of one weight and label moved by +d and -d
        a, b = rows[(rows.y == 0) & (rows.w == 1) & rows.p.between(0.1, 0.9)].index[:2]
        df.at[a, "p"] += 0.01
        df.at[b, "p"] -= 0.01
    return df


@pytest.mark.parametrize("change", ["labels swapped", "row moved between groups",
                                    "scores moved in opposite directions"])
def test_a_correction_that_keeps_the_period_totals_reaches_the_store(change):
    """The fingerprint changes whenever a stored sum would: a corrected day is written again
    and the stored window equals a rescan of the corrected rows (numpy oracle for Brier)."""
    df = predictions(n=1500, seed=11)
    store = ibis.duckdb.connect()
    sqlcal.snapshot(df, store=store, **LEAN)
    fixed = _corrected(df, change)
    out = sqlcal.snapshot(fixed, store=store, **LEAN)
    assert out.loc[out.status == "written", "period_start"].tolist() == [
        DAY0 + pd.Timedelta(days=1)], change
    src = sqlcal.stored(store, maturity="all")
    rows = window_rows(fixed, 0, 5)
    brier = sqlcal.brier(src).set_index("g")
    for g, part in rows.groupby("g"):
        assert brier.loc[g, "n"] == len(part) and brier.loc[g, "W"] == part.w.sum()
        want = (part.w * (part.y - part.p) ** 2).sum() / part.w.sum()
        assert brier.loc[g, "brier"] == pytest.approx(want, rel=1e-12)
    rescan = sqlcal.source(rows, score="p", label="y", weight="w", by="g")
    assert_same(sqlcal.ece(src, bins=15), sqlcal.ece(rescan, bins=15), change)


def test_a_source_without_weights_is_snapshotted_on_every_engine(con, upload):
    """No weight column: each row weighs 1 (a constant the engine must type as a float; on
    PostgreSQL a bare 1.0 is NUMERIC, which broke the snapshot). The stored window equals numpy
    on the raw rows."""
    df = predictions(n=600, days=2).drop(columns=["w"])
    store, prefix = store_for(con)
    try:
        kw = dict(LEAN, weight=None, bins=(15,))
        out = sqlcal.snapshot(upload(df), store=store, prefix=prefix, **kw)
        assert (out["status"] == "written").all() and out["n"].sum() == len(df)
        assert out["W"].sum() == len(df)
        src = sqlcal.stored(store, prefix=prefix, maturity="all", start=DAY0,
                            end=DAY0 + pd.Timedelta(days=1))
        brier = sqlcal.brier(src).set_index("g")
        ece = sqlcal.ece(src, bins=15).set_index("g")
        for g, part in df.groupby("g"):
            assert brier.loc[g, "n"] == len(part) and brier.loc[g, "W"] == len(part)
            want = ((part.y - part.p) ** 2).mean()
            assert brier.loc[g, "brier"] == pytest.approx(want, rel=1e-12)
            cell = np.minimum((part.p * 15).astype(int), 14)  # uniform(15): [k/15, (k+1)/15)
            gap = part.groupby(cell).apply(lambda b: abs((b.y - b.p).sum()))
            assert ece.loc[g, "ece"] == pytest.approx(gap.sum() / len(part), rel=1e-9)
    finally:
        if con.name == "postgres":
            drop_store(store, prefix)


def test_a_relative_store_path_names_the_file_of_the_working_directory(tmp_path, monkeypatch):
    # a kept connection was keyed by the path as written: after a change of directory the same
    # relative name reached the first folder's store (the documentation's examples, run in one
    # process, each in a folder of its own, found each other's days "unchanged")
    from sqlcal.monitor import store as _store

    for name in ("one", "two"):
        (tmp_path / name).mkdir()
        monkeypatch.chdir(tmp_path / name)
        con = _store.connect("monitor.duckdb", create=True)
        con.raw_sql(f"CREATE TABLE here AS SELECT '{name}' AS folder")
    for name in ("one", "two"):
        monkeypatch.chdir(tmp_path / name)
        con = _store.connect("monitor.duckdb")
        assert con.raw_sql("SELECT folder FROM here").fetchall() == [(name,)]
        _store.close("monitor.duckdb")
    assert not [k for k in _store._CONNECTIONS if str(tmp_path) in k]
