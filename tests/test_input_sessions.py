"""sqlcal reads its inputs and nothing else: a DuckDB file is held only while a query runs (an ETL
job in another process may replace it or write to it between two measurements, and the next
measurement sees the new rows), and a PostgreSQL session sqlcal opens from a URL refuses writes
(every transaction read-only), the summary store's writer session excepted."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import ibis
import numpy as np
import pandas as pd
import pytest

import sqlcal
from tests.conftest import POSTGRES_URL, calibration_data, engine_missing

ROOT = Path(__file__).resolve().parents[1]

#: a process that measures the file on each line of its stdin, until "quit": the brute-force
#: numbers it prints are compared with numpy on the rows the test wrote
MEASURER = textwrap.dedent("""
    import json, sys
    import sqlcal
    path = sys.argv[1]
    for line in sys.stdin:
        if line.strip() == "quit":
            break
        out = sqlcal.calibration_in_the_large(path, table="preds", score="p", label="y")
        ece = sqlcal.ece(sqlcal.source(path, table="preds", score="p", label="y"), bins=10)
        print(json.dumps({"n": int(out["n"][0]), "mean_score": float(out["mean_score"][0]),
                          "ece": float(ece["ece"][0])}), flush=True)
""")


def _ece(df: pd.DataFrame, bins: int = 10) -> float:
    b = np.minimum(np.floor(df.p.to_numpy() * bins), bins - 1)
    gaps = pd.DataFrame({"b": b, "r": df.y - df.p}).groupby("b")["r"].sum().abs()
    return float(gaps.sum() / len(df))


def _write(path: Path, df: pd.DataFrame) -> None:
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE preds AS SELECT * FROM df")
    con.close()


def test_another_process_replaces_and_writes_the_file_between_measurements(tmp_path):
    path = tmp_path / "preds.duckdb"
    first = calibration_data(400, seed=1)[["p", "y"]]
    _write(path, first)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get(
        "PYTHONPATH", "")])}
    measurer = subprocess.Popen([sys.executable, "-c", MEASURER, str(path)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=env)

    def measure() -> dict:
        import json

        measurer.stdin.write("go\n")
        measurer.stdin.flush()
        line = measurer.stdout.readline()
        assert line, measurer.stderr.read()
        return json.loads(line)

    def check(got: dict, df: pd.DataFrame) -> None:
        assert got["n"] == len(df)
        np.testing.assert_allclose(got["mean_score"], df.p.mean(), rtol=1e-12)
        np.testing.assert_allclose(got["ece"], _ece(df), rtol=1e-9)

    try:
        check(measure(), first)
        # a writer in this process while the measurer waits: the file takes no lock of sqlcal's
        more = calibration_data(100, seed=2)[["p", "y"]]
        writer = duckdb.connect(str(path))
        writer.execute("INSERT INTO preds SELECT * FROM more")
        writer.close()
        check(measure(), pd.concat([first, more]))
        # an ETL job swaps the file for a new one, then writes to it
        second = calibration_data(300, seed=5)[["p", "y"]]
        _write(tmp_path / "next.duckdb", second)
        os.replace(tmp_path / "next.duckdb", path)
        check(measure(), second)
        writer = duckdb.connect(str(path))
        writer.execute("DELETE FROM preds WHERE p > 0.5")
        writer.close()
        check(measure(), second[second.p <= 0.5])
    finally:
        measurer.communicate("quit\n", timeout=60)


def test_a_source_reads_the_file_as_it_is_at_each_query(tmp_path):
    # in this process too: a source built before a swap gives the new file's numbers after it
    path = tmp_path / "preds.duckdb"
    _write(path, calibration_data(200, seed=3)[["p", "y"]])
    before = sqlcal.brier(str(path), table="preds", score="p", label="y")
    second = calibration_data(300, seed=4)[["p", "y"]]
    _write(tmp_path / "next.duckdb", second)
    os.replace(tmp_path / "next.duckdb", path)
    after = sqlcal.brier(str(path), table="preds", score="p", label="y")
    assert int(before["n"][0]) == 200 and int(after["n"][0]) == 300
    np.testing.assert_allclose(after["brier"][0], np.mean((second.p - second.y) ** 2),
                               rtol=1e-12)
    writer = duckdb.connect(str(path))  # no lock held by this process's read-only session
    writer.execute("DELETE FROM preds")
    writer.close()


# -- PostgreSQL: the measuring session refuses writes ----------------------------------------


@pytest.fixture
def pg_table():
    """A table of predictions in the CI PostgreSQL; its name."""
    psycopg = pytest.importorskip("psycopg")
    try:
        admin = psycopg.connect(POSTGRES_URL.replace("postgres://", "postgresql://", 1),
                                autocommit=True)
    except Exception as e:
        engine_missing(f"PostgreSQL is not reachable at {POSTGRES_URL}: {type(e).__name__}")
    df = calibration_data(3000, seed=8, groups=3)
    admin.execute("DROP TABLE IF EXISTS sqlcal_read_only_probe")
    admin.execute("CREATE TABLE sqlcal_read_only_probe (p double precision, y bigint, g text)")
    with admin.cursor().copy("COPY sqlcal_read_only_probe (p, y, g) FROM STDIN") as copy:
        for row in df[["p", "y", "g"]].itertuples(index=False):
            copy.write_row(row)
    yield df
    from sqlcal.inputs import sources

    sources.connections.pop(POSTGRES_URL, None)
    admin.execute("DROP TABLE IF EXISTS sqlcal_read_only_probe")
    admin.close()


def test_the_postgres_session_of_a_source_refuses_writes(pg_table):
    import psycopg

    from sqlcal.inputs import engines, sources

    sources.connections.pop(POSTGRES_URL, None)  # a session opened by this test's source
    src = sqlcal.source(POSTGRES_URL, table="sqlcal_read_only_probe", score="p", label="y",
                        by="g")
    got = sqlcal.brier(src)
    want = pg_table.assign(sq=(pg_table.p - pg_table.y) ** 2).groupby("g")["sq"].mean()
    np.testing.assert_allclose(got["brier"], want.loc[got["g"]].to_numpy(), rtol=1e-12)
    session = engines.backend_of(src.rows)
    # outside a transaction, inside Ibis's transactions and in its server-side cursors
    with session.raw_sql("SELECT current_setting('transaction_read_only')") as cursor:
        assert cursor.fetchone() == ("on",)
    with session.begin() as cursor:
        assert cursor.execute("SHOW transaction_read_only").fetchone() == ("on",)
    for statement in ("CREATE TABLE sqlcal_sneaky AS SELECT 1 AS x",
                      "INSERT INTO sqlcal_read_only_probe (p, y, g) VALUES (0.5, 1, 'x')",
                      "DELETE FROM sqlcal_read_only_probe"):
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            with session.begin() as cursor:
                cursor.execute(statement)
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            session.raw_sql(statement)
    # a follow-up joined to a small in-memory table: a temporary table of the session
    key = src.by[0]  # the key travels under its internal column in the rows
    cells = pd.DataFrame({key: ["g0", "g1"], "cell": [3, 5]})
    joined = src.rows.mutate(cell=(src.rows.p * 8).floor().cast("int64")).join(
        ibis.memtable(cells), [key, "cell"])
    n = int(joined.count().to_pyarrow().as_py())
    cell = np.floor(pg_table.p * 8)
    assert n == int((((pg_table.g == "g0") & (cell == 3)) | ((pg_table.g == "g1")
                                                            & (cell == 5))).sum())
    with session.raw_sql("SELECT count(*) FROM sqlcal_read_only_probe") as cursor:
        assert cursor.fetchone() == (len(pg_table),)  # nothing was written


def test_the_store_writes_through_a_session_of_its_own(pg_table):
    from sqlcal.inputs import sources
    from sqlcal.monitor import store

    psycopg = pytest.importorskip("psycopg")
    admin = psycopg.connect(POSTGRES_URL.replace("postgres://", "postgresql://", 1),
                            autocommit=True)
    # (without a weight column the snapshot fails on PostgreSQL: the weight 1.0 is a NUMERIC
    # literal there and its sums come back as decimals; a separate bug)
    admin.execute("ALTER TABLE sqlcal_read_only_probe ADD COLUMN w double precision DEFAULT 1")
    admin.execute("ALTER TABLE sqlcal_read_only_probe ADD COLUMN t timestamp")
    admin.execute("UPDATE sqlcal_read_only_probe SET t = timestamp '2026-11-01' "
                  "+ (floor(p * 3)::int * interval '1 day')")
    prefix = "sqlcal_ro_probe_"
    try:
        out = sqlcal.snapshot((POSTGRES_URL, "sqlcal_read_only_probe"), score="p", label="y",
                              weight="w", time="t", store=POSTGRES_URL, prefix=prefix,
                              as_of="2026-12-01")
        assert (out["status"] == "written").all() and out["n"].sum() == len(pg_table)
        reader = sources.connections[POSTGRES_URL]
        writer = store._CONNECTIONS[POSTGRES_URL]
        with reader.raw_sql("SHOW transaction_read_only") as cursor:
            assert cursor.fetchone() == ("on",)
        with writer.raw_sql("SHOW transaction_read_only") as cursor:
            assert cursor.fetchone() == ("off",)
    finally:
        for (name,) in admin.execute("SELECT tablename FROM pg_tables WHERE tablename LIKE "
                                     "%s", (prefix + "%",)).fetchall():
            admin.execute(f'DROP TABLE "{name}"')
        store._CONNECTIONS.pop(POSTGRES_URL, None)
        admin.close()
