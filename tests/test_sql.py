"""The plain-SQL reductions in sql/ are the library's own queries: regenerated, parsed, and run."""

from __future__ import annotations

from pathlib import Path

import ibis
import numpy as np
import pytest
import sqlglot

import sqlcal
from sqlcal.export import sqlgen
from tests.conftest import calibration_data

SQL = Path(__file__).resolve().parents[1] / "sql"


@pytest.mark.parametrize("dialect", sqlgen.DIALECTS, ids=lambda d: f"dialect-{d}")
def test_sql_folder_is_up_to_date_and_parses(dialect):
    for name, text in sqlgen.render(dialect).items():
        path = SQL / dialect / f"{name}.sql"
        assert path.read_text() == text, f"{path} is stale: run python -m sqlcal.export.sqlgen"
        read = "spark" if dialect == "databricks" else dialect
        assert sqlglot.parse_one(text, read=read) is not None


def test_duckdb_sql_runs_and_gives_the_library_numbers():
    df = calibration_data(2000, seed=3, groups=3, weights=True)
    df = df.rename(columns={"p": "score", "y": "label", "w": "weight", "g": "segment"})
    con = ibis.duckdb.connect()
    con.create_table("predictions", df)
    bins = con.raw_sql((SQL / "duckdb" / "uniform_bins_15.sql").read_text()).df()
    ece = bins.groupby("segment").apply(
        lambda f: (f.swy - f.swp).abs().sum() / f.W.sum(), include_groups=False)
    want = sqlcal.ece(df, score="score", label="label", weight="weight", by="segment")
    np.testing.assert_allclose(ece.sort_index().to_numpy(), want.ece.to_numpy(), rtol=1e-12)


@pytest.mark.parametrize("dialect", ["duckdb", "postgres", "bigquery", "snowflake", "trino", "spark"],
                         ids=lambda d: f"dialect-{d}")
def test_sql_command_prints_parseable_sql(capsys, dialect):
    from sqlcal.cli.commands import main

    assert main(["sql", "ece", "--dialect", dialect, "--table", "preds", "--score", "p",
                 "--label", "y", "--by", "segment,day"]) == 0
    text = capsys.readouterr().out
    tree = sqlglot.parse_one(text, read=dialect)
    assert "preds" in text and tree.find(sqlglot.exp.Group) is not None


def test_sql_command_runs_on_duckdb(capsys):
    from sqlcal.cli.commands import main

    df = calibration_data(500, seed=4, groups=2)
    con = ibis.duckdb.connect()
    con.create_table("preds", df)
    main(["sql", "brier", "--table", "preds", "--score", "p", "--label", "y", "--by", "g"])
    totals = con.raw_sql(capsys.readouterr().out).df().sort_values("g")
    want = sqlcal.brier(df, score="p", label="y", by="g")
    np.testing.assert_allclose(totals.sw_sq_resid / totals.n, want.brier, rtol=1e-12)
