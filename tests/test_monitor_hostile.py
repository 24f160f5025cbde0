"""The summary store against careless and hostile use: a store that is not a database, two
snapshots at once, years of stored days, a long-lived process, settings that would blind the
monitor, and group keys named like the store's own columns.

Oracles: numpy on the raw rows (counts, weights, Brier), and the store's own tables read back
with plain SQL (what is left in a connection).
"""

from __future__ import annotations

import multiprocessing
import uuid

import duckdb
import ibis
import numpy as np
import pandas as pd
import pytest

import sqlcal
from sqlcal.errors import InvalidInputError
from sqlcal.monitor import store as monitor_store
from sqlcal.monitor.stored import daily
from sqlcal.options import OptionError

DAY0 = pd.Timestamp("2026-10-01")
LEAN = dict(score="p", label="y", weight="w", by="g", time="t", label_time="lt",
            as_of="2027-01-01", ls_ece_sigma=(), smooth_grids=())


def rows(n: int = 2000, days: int = 5, seed: int = 0, groups=("a", "b")) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    p = rng.beta(2, 5, n)
    y = (rng.random(n) < p).astype(np.int64)
    t = DAY0 + pd.to_timedelta(rng.integers(0, days * 86400, n), unit="s")
    lt = pd.Series(t + pd.to_timedelta(rng.integers(0, 3 * 86400, n), unit="s"))
    return pd.DataFrame({"p": p, "y": y, "w": rng.integers(1, 4, n).astype(float),
                         "g": rng.choice(list(groups), n), "t": pd.Series(t),
                         "lt": lt.where(y == 1)})


def per_day(df: pd.DataFrame, key: str = "g") -> pd.DataFrame:
    """numpy on the raw rows: n, W and Σwy per group and day."""
    day = df["t"].dt.floor("D").rename("day")
    w = df["w"] if "w" in df else df["weight"]
    return df.assign(wy=w * df.y, wt=w).groupby([df[key], day]).agg(
        n=("p", "size"), W=("wt", "sum"), swy=("wy", "sum"))


def assert_counts_equal_a_rescan(store, prefix: str, df: pd.DataFrame) -> None:
    stored = daily(store, "totals", prefix=prefix, maturity="all").set_index(
        ["g", "period_start"]).sort_index()
    want = per_day(df).rename_axis(["g", "period_start"])
    assert stored.index.equals(want.index)
    assert (stored["n"] == want["n"]).all(), (stored["n"], want["n"])
    np.testing.assert_allclose(stored["W"], want["W"], rtol=1e-12)
    np.testing.assert_allclose(stored["swy"], want["swy"], rtol=1e-12)


# -- a store is a database ---------------------------------------------------------------------


@pytest.mark.parametrize("name", ["p.parquet", "p.csv", "folder", "existing.parquet", "p"])
def test_a_store_that_is_not_a_database_is_refused_before_any_work(tmp_path, name, capsys):
    df = rows(n=200)
    path = tmp_path / name
    if name == "folder":
        path.mkdir()
    if name == "existing.parquet":
        df.to_parquet(path)
    before = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*")}
    with pytest.raises(monitor_store.StoreError, match="a store is a database"):
        sqlcal.snapshot(df, store=str(path), **LEAN)
    assert {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*")} == before
    # the command: exit 2 and one line, nothing written, nothing reported as written
    data = tmp_path / "w.duckdb"
    with duckdb.connect(str(data)) as con:
        con.register("df", df)
        con.execute("CREATE TABLE predictions AS SELECT * FROM df")
    toml = tmp_path / "m.toml"
    toml.write_text(f'[source]\ndata = "{data}"\ntable = "predictions"\nscore = "p"\n'
                    f'label = "y"\ntime = "t"\n[snapshot]\nstore = "{path}"\n')
    from sqlcal.cli.commands import main
    assert main(["snapshot", "--config", str(toml), "--as-of", "2027-01-01"]) == 2
    out = capsys.readouterr()
    assert "written" not in out.out and "a store is a database" in out.err
    assert not (tmp_path / name).is_file() or name == "existing.parquet"
    # a reader finds no store where there is none, and creates nothing
    with pytest.raises(monitor_store.StoreError, match="no store at"):
        sqlcal.stored(str(tmp_path / "none.duckdb"))
    assert not (tmp_path / "none.duckdb").exists()


# -- two snapshots at once ---------------------------------------------------------------------


def _snapshot_in_a_process(barrier, data: str, store: str, prefix: str, queue) -> None:
    try:
        barrier.wait(timeout=120)  # both start their snapshot at the same moment
        out = sqlcal.snapshot(data, table="predictions", store=store, prefix=prefix, **LEAN)
        queue.put(("ok", out["status"].tolist()))
    except Exception as e:  # reported to the test, which judges it
        queue.put((type(e).__name__, str(e)))


@pytest.mark.parametrize("engine, fresh", [("postgres", False), ("postgres", True),
                                           ("duckdb", False)])
def test_two_snapshots_at_once_store_every_row_once(tmp_path, engine, fresh):
    """Two processes snapshot the same days at the same moment (a retried cron job, two
    schedulers): into a store that holds the first days already (on main both wrote version 1
    of the others: every count doubled), or into a new one (both created its tables)."""
    from tests.conftest import POSTGRES_URL, _postgres

    df = rows(n=6000, days=6, seed=4)
    data = str(tmp_path / "w.duckdb")
    with duckdb.connect(data) as con:
        con.register("df", df)
        con.execute("CREATE TABLE predictions AS SELECT * FROM df")
    prefix = f"sqlcal_{uuid.uuid4().hex[:8]}_"
    if engine == "postgres":
        pg = _postgres()
        store = POSTGRES_URL
    else:
        store = str(tmp_path / "s.duckdb")
    if not fresh:
        sqlcal.snapshot(data, table="predictions", store=pg if engine == "postgres" else store,
                        prefix=prefix, end=DAY0 + pd.Timedelta(days=1), **LEAN)
        monitor_store.close(store)
    ctx = multiprocessing.get_context("spawn")
    barrier, queue = ctx.Barrier(2), ctx.Queue()
    runs = [ctx.Process(target=_snapshot_in_a_process, args=(barrier, data, store, prefix, queue))
            for _ in range(2)]
    for run in runs:
        run.start()
    results = [queue.get(timeout=600) for _ in runs]
    for run in runs:
        run.join(timeout=60)
    try:
        ok = [r for r in results if r[0] == "ok"]
        if engine == "postgres":  # the second waits for the first, then finds nothing to do
            assert len(ok) == 2, results
            written = [r[1].count("written") for r in ok]
            assert sorted(written) == [0, 6 if fresh else 4], results
        else:  # DuckDB lets one process write a file: the other is refused, cleanly
            assert len(ok) >= 1, results
            for kind, message in results:
                if kind != "ok":
                    assert kind == "StoreError" and "another process" in message, message
        reader = pg if engine == "postgres" else store
        assert_counts_equal_a_rescan(reader, prefix, df)
        versions = monitor_store.manifest(reader, prefix)
        assert len(versions) == 6 and set(versions["version"]) == {1}
    finally:
        if engine == "postgres":
            for name in pg.list_tables():
                if name.startswith(prefix):
                    pg.drop_table(name)


def test_a_manifest_version_is_published_once(tmp_path):
    """The unique (spec_hash, period_start, version): a second row of a published version is
    refused by the engine itself."""
    store = ibis.duckdb.connect()
    sqlcal.snapshot(rows(n=300), store=store, **LEAN)
    one = monitor_store.manifest(store).iloc[[0]]
    with pytest.raises(Exception, match="(?i)constraint|unique|duplicate"):
        store.insert("sqlcal_snapshots", one)


# -- years of stored days ----------------------------------------------------------------------


def test_a_store_of_1100_days_is_read_and_checked():
    rng = np.random.default_rng(1)
    days = 1100
    n = days * 4
    p = rng.uniform(0.05, 0.95, n)
    df = pd.DataFrame({"p": p, "y": (rng.random(n) < p).astype(int), "g": "a",
                       "t": DAY0 + pd.to_timedelta(np.repeat(np.arange(days), 4) * 86400
                                                   + rng.integers(0, 86400, n), unit="s")})
    store = ibis.duckdb.connect()
    sqlcal.snapshot(df, score="p", label="y", by="g", time="t", store=store,
                    as_of=DAY0 + pd.Timedelta(days=days + 40), bins=(), ls_ece_sigma=(),
                    smooth_grids=())
    src = sqlcal.stored(store, maturity="all")
    brier = sqlcal.brier(src)
    assert brier["n"].item() == n
    assert brier["brier"].item() == pytest.approx(np.mean((df.y - df.p) ** 2), rel=1e-12)
    found = sqlcal.detect(store)
    assert found.path["day"].nunique() == days
    assert found.path["n"].sum() == n


# -- a long-lived process ----------------------------------------------------------------------


def _leftovers(store) -> dict:
    """What a connection holds besides tables: registered frames (DuckDB views), temporary
    tables (PostgreSQL), and its tables."""
    if store.name == "duckdb":
        views = store.con.execute("SELECT count(*) FROM duckdb_views() WHERE NOT internal"
                                  ).fetchone()[0]
        return {"views": views, "tables": sorted(store.list_tables())}
    temp = store.raw_sql("SELECT count(*) FROM pg_class WHERE relnamespace = "
                         "pg_my_temp_schema()").fetchone()[0]
    return {"temporary": temp}


RUNS = 10


@pytest.mark.parametrize("engine", ["duckdb", "postgres"])
def test_repeated_snapshots_in_one_process_leave_nothing_registered(engine):
    """Ten forced snapshots and stored windows in one process (each registered six in-memory
    tables that stayed until exit: 447 -> 789 MB after 30 runs): the store's connection and the
    default engine hold exactly what they held before, plus the store's own tables."""
    if engine == "postgres":
        from tests.conftest import _postgres
        store, prefix = _postgres(), f"sqlcal_{uuid.uuid4().hex[:8]}_"
    else:
        store, prefix = ibis.duckdb.connect(), "sqlcal_"
    before = _leftovers(store)
    default = ibis.get_backend()  # where the frame of the predictions is registered
    frames = _leftovers(default)["views"]
    df = rows(n=500, days=3)
    try:
        for _ in range(RUNS):
            out = sqlcal.snapshot(df, store=store, prefix=prefix, force=True, **LEAN)
            assert (out["status"] == "written").all()
            sqlcal.brier(sqlcal.stored(store, prefix=prefix, maturity="all"))
        after = _leftovers(store)
        if engine == "duckdb":
            assert after["views"] == before["views"] == 0
            assert set(after["tables"]) == {f"{prefix}{t}" for t in (
                "snapshots", "checks", "sum_totals", "sum_cells", "sum_bins")} - {
                f"{prefix}checks"}
        else:
            assert after == before
        assert _leftovers(default)["views"] == frames
        assert_counts_equal_a_rescan(store, prefix, df)
        assert set(monitor_store.manifest(store, prefix)["version"]) == set(range(1, RUNS + 1))
    finally:
        if engine == "postgres":
            for name in store.list_tables():
                if name.startswith(prefix):
                    store.drop_table(name)


# -- settings that would blind the monitor -----------------------------------------------------


def test_rows_with_a_null_time_are_counted_and_refused_or_left_out(tmp_path, capsys):
    df = rows(n=400)
    df.loc[df.index[:7], "t"] = pd.NaT
    store = ibis.duckdb.connect()
    with pytest.raises(InvalidInputError, match=r"time column 't' has 7 rows with NULL"):
        sqlcal.snapshot(df, store=store, **LEAN)
    assert store.list_tables() == []
    out = sqlcal.snapshot(df, store=store, on_invalid="drop", **LEAN)
    untimed = out[out["period_start"].isna()]
    assert untimed["n"].tolist() == [7] and untimed["status"].tolist() == ["left out: NULL time"]
    assert untimed["W"].item() == df.w[:7].sum()
    assert out["n"].sum() == len(df)
    assert_counts_equal_a_rescan(store, "sqlcal_", df[df.t.notna()])
    # the command says so too: exit 2 naming the column and the count, or the count left out
    from sqlcal.cli.commands import main

    data = tmp_path / "w.duckdb"
    with duckdb.connect(str(data)) as con:
        con.register("df", df)
        con.execute("CREATE TABLE predictions AS SELECT * FROM df")
    toml = tmp_path / "m.toml"
    config = (f'[source]\ndata = "{data}"\ntable = "predictions"\nscore = "p"\nlabel = "y"\n'
              f'time = "t"\n{{}}[snapshot]\nstore = "{tmp_path / "s.duckdb"}"\n')
    toml.write_text(config.format(""))
    assert main(["snapshot", "--config", str(toml), "--as-of", "2027-01-01"]) == 2
    assert "time column 't' has 7 rows with NULL" in capsys.readouterr().err
    toml.write_text(config.format('on_invalid = "drop"\n'))
    assert main(["snapshot", "--config", str(toml), "--as-of", "2027-01-01"]) == 0
    assert "7 rows with a NULL 't' left out" in capsys.readouterr().out
    monitor_store.close(str(tmp_path / "s.duckdb"))


def test_a_period_not_on_the_grain_is_refused_and_nothing_written(tmp_path, capsys):
    from sqlcal.cli.commands import main

    df = rows(n=400)
    data, store = tmp_path / "w.duckdb", tmp_path / "s.duckdb"
    with duckdb.connect(str(data)) as con:
        con.register("df", df)
        con.execute("CREATE TABLE predictions AS SELECT * FROM df")
    toml = tmp_path / "m.toml"
    toml.write_text(f'[source]\ndata = "{data}"\ntable = "predictions"\nscore = "p"\n'
                    f'label = "y"\ntime = "t"\n[snapshot]\nstore = "{store}"\n')
    for flag in ("--period", "--since", "--until"):
        assert main(["snapshot", "--config", str(toml), flag, "2026-10-03 00:00:01"]) == 2
        err = capsys.readouterr().err
        assert flag in err and "not the start of a day" in err
    assert not store.exists()
    assert main(["snapshot", "--config", str(toml), "--period", "2026-10-03"]) == 0
    assert "1 of 1 periods written" in capsys.readouterr().out
    written = monitor_store.manifest(str(store))
    assert written["period_start"].tolist() == [pd.Timestamp("2026-10-03")]
    assert written["rows_scanned"].item() == int((df.t.dt.floor("D") == "2026-10-03").sum())
    monitor_store.close(str(store))


@pytest.mark.parametrize("setting, named", [
    ('[labels]\nhorizon = "-5d"\n', "horizon"),
    ('[labels]\nsettle = "nand"\n', "settle"),
    ('[detect]\nreference = "2020-01-01..2020-01-31"\n', "reference"),
    ('[detect]\ntolerance = { absolute = nan }\n', "tolerance"),
    ('[windows]\nlast_7d = { days = 7 }\n[metrics]\nbrier = {}\n[[alerts]]\nwindow = "last_7d"\n'
     'metric = "brier"\nabove = nan\n', "finite"),
    ('[windows]\nlast_7d = { days = 7 }\n[metrics]\nbrier = {}\n[[alerts]]\nwindow = "last_7d"\n'
     'metric = "brier"\nabove = true\n', "number"),
])
def test_settings_that_would_blind_the_monitor_are_refused(tmp_path, capsys, setting, named):
    from sqlcal.cli.commands import main

    df = rows(n=3000, days=40)
    store = str(tmp_path / "s.duckdb")
    sqlcal.snapshot(df, store=store, **LEAN)
    monitor_store.close(store)
    toml = tmp_path / "m.toml"
    toml.write_text('[source]\ndata = "unused.duckdb"\nscore = "p"\nlabel = "y"\ntime = "t"\n'
                    f'by = ["g"]\nweight = "w"\n[snapshot]\nstore = "{store}"\n{setting}')
    assert main(["monitor", "--config", str(toml), "--no-results"]) == 2
    err = capsys.readouterr().err
    assert named in err and err.count("\n") == 1, err
    monitor_store.close(store)


def test_a_reference_without_data_is_refused_in_python():
    df = rows(n=3000, days=40)
    store = ibis.duckdb.connect()
    sqlcal.snapshot(df, store=store, **LEAN)
    with pytest.raises(OptionError, match="reference 2027-02-01..2027-02-28 holds no mature day"):
        sqlcal.detect(store, reference=("2027-02-01", "2027-02-28"))
    # a group with no data in the reference: the reference null would compare it with nothing
    late = rows(n=600, days=10, seed=3, groups=("c",))
    late["t"] += pd.Timedelta(days=30)
    late["lt"] += pd.Timedelta(days=30)
    store = ibis.duckdb.connect()
    sqlcal.snapshot(pd.concat([df, late], ignore_index=True), store=store, **LEAN)
    with pytest.raises(OptionError, match=r"holds no data of 1 groups \(\[\{'g': 'c'\}\]\)"):
        sqlcal.detect(store, reference=("2026-10-01", "2026-10-28"), null="reference")


# -- group keys named like the store's own columns ---------------------------------------------


@pytest.mark.parametrize("key", ["n", "W", "swy", "delay", "period_start", "version",
                                 "group_keys", "key_g", "cell"])
def test_a_key_named_like_a_store_column_keeps_its_groups(key):
    # (the weight column is renamed: DuckDB's names are case-insensitive, so "W" and "w" would
    # be one column of the frame's table)
    df = rows(n=1500, days=4).rename(columns={"g": key, "w": "weight"})
    store = ibis.duckdb.connect()
    sqlcal.snapshot(df, store=store, **{**LEAN, "by": key, "weight": "weight"})
    stored = daily(store, "totals", maturity="all")
    # the key keeps its name; sqlcal's column of that name takes a trailing _
    own = {c: c + "_" if c == key else c for c in ("period_start", "n", "W")}
    assert stored.columns[0] == key and own["period_start"] in stored.columns
    stored = stored.sort_values([key, own["period_start"]], ignore_index=True)
    want = per_day(df, key).reset_index(drop=True)
    assert (stored[own["n"]].to_numpy() == want["n"].to_numpy()).all()
    np.testing.assert_allclose(stored[own["W"]], want["W"], rtol=1e-12)
    n = own["n"]
    path = sqlcal.detect(store, horizon="1d").path
    assert path.columns[0] == key and sorted(set(path[key])) == ["a", "b"]
    assert path.groupby(key)[n].sum().to_dict() == df.groupby(key).size().to_dict()


@pytest.mark.parametrize("key", ["delay", "period_start", "version", "group_keys", "key_g",
                                 "n"])
def test_a_stored_window_by_a_key_named_like_a_store_column_equals_the_scan(key):
    df = rows(n=1500, days=4).rename(columns={"g": key})
    store = ibis.duckdb.connect()
    sqlcal.snapshot(df, store=store, **{**LEAN, "by": key})
    src = sqlcal.stored(store, maturity="all")
    scan = sqlcal.source(df, score="p", label="y", weight="w", by=key)
    facts = ["window", "maturity", "window_exact", "window_bound"]  # the stored window's own
    for name, metric in (("brier", sqlcal.brier), ("ece", lambda s: sqlcal.ece(s, bins=16))):
        got, want = metric(src).drop(columns=facts), metric(scan)
        # the intervals too: the store keeps what they read (issue 34)
        pd.testing.assert_frame_equal(got, want, check_exact=False, rtol=1e-12)
