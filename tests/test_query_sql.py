"""SQL text is compiled in one place (sqlcal.query.sql) with one fallback: Ibis's text where Ibis
compiles the dialect, else DuckDB's statement transpiled by sqlglot; no other module compiles."""

from __future__ import annotations

import ast
from pathlib import Path

import ibis
import pytest
import sqlglot

from sqlcal.query.sql import to_sql, to_tree

PACKAGE = Path(__file__).resolve().parents[1] / "sqlcal"


def _query():
    t = ibis.table({"g": "string", "p": "float64"}, name="preds")
    return t.group_by("g").aggregate(lnp=(t.p.ln() * 2).sum(), n=t.count())


@pytest.mark.parametrize("dialect", ["duckdb", "postgres", "databricks", "bigquery",
                                     "snowflake", "trino"])
def test_a_dialect_ibis_compiles_keeps_ibis_text(dialect):
    assert to_sql(_query(), dialect) == ibis.to_sql(_query(), dialect=dialect).strip()
    read = "spark" if dialect == "databricks" else dialect
    assert to_tree(_query(), dialect) == sqlglot.parse_one(to_sql(_query(), dialect), read=read)


def test_a_dialect_ibis_cannot_compile_is_duckdbs_statement_transpiled():
    # "spark" is sqlglot's name of Spark SQL, not Ibis's (Ibis's "pyspark" compiles only while
    # a Spark session runs in the process, and falls back otherwise)
    with pytest.raises(Exception):
        ibis.to_sql(_query(), dialect="spark")
    duckdb = ibis.to_sql(_query(), dialect="duckdb")
    (want,) = sqlglot.transpile(duckdb, read="duckdb", write="spark")
    assert to_sql(_query(), "spark") == want
    assert to_tree(_query(), "spark").sql(dialect="spark") == want
    assert "`preds`" in want and sqlglot.parse_one(want, read="spark").find(sqlglot.exp.Group)
    assert sqlglot.parse_one(to_sql(_query(), "pyspark"), read="spark").find(sqlglot.exp.Group)


def test_no_module_outside_the_query_layer_compiles_sql():
    # a compile-with-fallback copied into a module again would call ibis.to_sql there
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.relative_to(PACKAGE).parts[0] == "query":
            continue
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr == "to_sql" and \
                    isinstance(node.value, ast.Name) and node.value.id == "ibis":
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert found == [], "compile through sqlcal.query.sql.to_sql: " + ", ".join(found)
