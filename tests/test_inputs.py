"""Every kind of input gives the same numbers: Ibis tables, files and globs, database files and
URLs, in-memory frames; filters by expression and by SQL string."""

from __future__ import annotations

import ibis
import numpy as np
import pyarrow as pa
import pytest

import sqlcal
from tests.conftest import calibration_data


@pytest.fixture(scope="module")
def df():
    return calibration_data(500, seed=3, groups=2, weights=True)


@pytest.fixture(scope="module")
def want(df):
    return sqlcal.ece(df, score="p", label="y", weight="w", by="g")


def same(got, want):
    np.testing.assert_allclose(got.ece.to_numpy(), want.ece.to_numpy(), rtol=1e-12)
    assert got.g.tolist() == want.g.tolist()


def test_files_globs_and_databases(tmp_path, df, want):
    kw = dict(score="p", label="y", weight="w", by="g")
    df.iloc[:250].to_parquet(tmp_path / "part1.parquet")
    df.iloc[250:].to_parquet(tmp_path / "part2.parquet")
    same(sqlcal.ece(str(tmp_path / "*.parquet"), **kw), want)
    same(sqlcal.ece(tmp_path, **kw), want)  # a folder of parquet files
    df.to_csv(tmp_path / "preds.csv", index=False)
    same(sqlcal.ece(str(tmp_path / "preds.csv"), **kw), want)

    db = tmp_path / "preds.duckdb"
    con = ibis.duckdb.connect(db)
    con.create_table("preds", df)
    con.create_table("other", df.iloc[:10])
    con.disconnect()
    same(sqlcal.ece(str(db), table="preds", **kw), want)
    same(sqlcal.ece((f"duckdb://{db}", "preds"), **kw), want)
    with pytest.raises(ValueError, match="name one with table="):
        sqlcal.ece(str(db), **kw)


def test_in_memory_frames(df, want):
    kw = dict(score="p", label="y", weight="w", by="g")
    same(sqlcal.ece(pa.Table.from_pandas(df), **kw), want)
    polars = pytest.importorskip("polars", reason="polars is not installed")
    same(sqlcal.ece(polars.from_pandas(df), **kw), want)


def test_where_expression_and_sql_string(upload, df):
    t = upload(df)
    kw = dict(score="p", label="y", weight="w", by="g")
    want = sqlcal.ece(df[df.p > 0.3], **kw)
    same(sqlcal.ece(t, where=t.p > 0.3, **kw), want)
    same(sqlcal.ece(t, where=lambda t: t.p > 0.3, **kw), want)
    same(sqlcal.ece(t, where="p > 0.3", **kw), want)
    same(sqlcal.ece(df, where="p > 0.3", **kw), want)  # an in-memory frame too
    with pytest.raises(ValueError, match="subqueries are not allowed"):
        sqlcal.ece(t, where="p > (SELECT 0.3)", **kw)


def test_unknown_inputs():
    with pytest.raises(FileNotFoundError):
        sqlcal.ece("missing.parquet", score="p", label="y")
    with pytest.raises(ValueError, match="cannot tell how to read"):
        sqlcal.ece("preds.xlsx", score="p", label="y")
    with pytest.raises(TypeError, match="cannot read data of type"):
        sqlcal.ece(42, score="p", label="y")


def test_hive_partitioned_folder_and_named_schema(tmp_path, df):
    kw = dict(score="p", label="y", weight="w")
    df = df.assign(day=np.where(np.arange(len(df)) % 2, "2026-11-01", "2026-11-02"))
    folder = tmp_path / "preds"
    df.to_parquet(folder, partition_cols=["day"])
    got = sqlcal.ece(str(folder), by="day", **kw)
    want = sqlcal.ece(df, by="day", **kw)
    np.testing.assert_allclose(got.ece, want.ece, rtol=1e-12)
    assert sqlcal.ece(str(folder), where="day = '2026-11-01'", **kw).n.iloc[0] == (
        df.day == "2026-11-01").sum()

    db = tmp_path / "schemas.duckdb"
    con = ibis.duckdb.connect(db)
    con.raw_sql("CREATE SCHEMA scoring")
    con.create_table("preds", df.drop(columns="day"), database="scoring")
    con.disconnect()
    got = sqlcal.ece(str(db), table="scoring.preds", **kw)
    np.testing.assert_allclose(got.ece, sqlcal.ece(df, **kw).ece, rtol=1e-12)
