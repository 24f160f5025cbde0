"""The summary store's sums are declared once (sqlcal.query.declared.STORE_SUMS) and rendered three
times: the snapshot's query, the plain SQL of sql/<dialect>/store_*.sql and the dbt package's store
macros. On the same rows each rendering gives the same columns, in the declaration's order, and
the same values; a sum added to one rendering and not the others fails here."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import numpy as np
import pandas as pd

import sqlcal
from sqlcal.export import dbtgen, sqlgen
from sqlcal.monitor import schema
from sqlcal.query import declared, reductions
from sqlcal.query.declared import StoredSum, store_sums

ROOT = Path(__file__).resolve().parents[1]
#: store table -> its sql/ file and the dbt macro's parameter
KINDS = {"totals": ("store_totals", {}), "cells": ("store_cells_16384", {"cells": 2**14}),
         "bins": ("store_bins_15", {"bins": 15})}
#: the dbt adapter of an Ibis backend, the sql/ folder of its dialect, its identifier quote
ENGINE = {"duckdb": ("duckdb", "duckdb", '"'), "postgres": ("postgres", "postgres", '"'),
          "pyspark": ("spark", "databricks", "`")}


def _rows() -> pd.DataFrame:
    """Three days in two segments: fractional weights, scores 0 and 1 (the logarithms' edges,
    the p = 0 and p = 1 counts), tied scores, labels not known yet (NULL)."""
    rng = np.random.default_rng(33)
    n = 900
    score = np.round(rng.beta(2, 5, n), 3)
    score[:6] = [0.0, 0.0, 1.0, 1.0, 0.5, 0.5]
    label = (rng.uniform(size=n) < score).astype(float)
    label[:6] = [0, 1, 0, 1, 1, 0]
    label[rng.uniform(size=n) < 0.05] = np.nan
    return pd.DataFrame({
        "segment": np.where(rng.uniform(size=n) < 0.4, "b", "a"), "score": score,
        "label": label, "weight": np.round(rng.uniform(0.5, 3, n), 3),
        "time": pd.Timestamp("2026-11-01") + pd.to_timedelta(rng.integers(0, 3 * 86400, n),
                                                             unit="s")})


def _values(table: str) -> list[str]:
    return [s.name for s in store_sums(table)]


def _keyed(frame: pd.DataFrame, table: str) -> pd.DataFrame:
    """The rows of one store table under common names, sorted: segment, period_start, delay,
    the table's key, then its sums in the declaration's order."""
    frame = frame.rename(columns={"key_segment": "segment"})
    key = [c for c, _ in schema.TABLES[table]["keys"]]
    cols = ["segment", "period_start", "delay", *key]
    frame = frame[[*cols, *_values(table)]].copy()
    frame["period_start"] = pd.to_datetime(frame["period_start"]).astype("datetime64[ns]")
    frame = frame.astype({c: float for c in frame if c not in ("segment", "period_start")})
    return frame.sort_values(cols, ignore_index=True)


def _value_columns(frame: pd.DataFrame, table: str) -> list[str]:
    """A rendering's columns that are not keys or leading columns, in its order."""
    keys = {c for c, _ in (*schema.LEADING, *schema.TABLES[table]["keys"],
                           *schema.TABLES[table]["params"])}
    return [c for c in frame.columns if c not in keys and c not in ("segment", "key_segment")]


@functools.lru_cache
def _store_macros(quote: str):
    import jinja2

    class Adapter:
        def quote(self, name: str) -> str:
            return f"{quote}{name}{quote}"
    text = (ROOT / "sql" / "dbt" / "macros" / "store.sql").read_text()
    env = jinja2.Environment(extensions=["jinja2.ext.do"])
    return env.from_string(text, globals={"adapter": Adapter()}).module


def _dbt_macro(adapter: str, table: str):
    module = _store_macros("`" if adapter in ("spark", "bigquery") else '"')
    return (getattr(module, f"{adapter}__store_{table}", None)
            or getattr(module, f"default__store_{table}"))


def _query(con, text: str) -> pd.DataFrame:
    if con.name == "pyspark":
        return con._session.sql(text).toPandas()
    return con.sql(text).to_pandas()


def test_the_store_tables_list_the_declared_sums():
    for table in ("totals", "bins", "cells", "levels"):
        for part, label in (("label_free", False), ("label", True)):
            assert [c for c, _ in schema.TABLES[table][part]] == \
                [s.name for s in store_sums(table, label=label)], (table, part)
    assert schema.MINIMA >= {s.name for s in declared.STORE_SUMS if s.merge == "min"}
    assert schema.MAXIMA >= {s.name for s in declared.STORE_SUMS if s.merge == "max"}
    # days of sql/store_*.sql rows merge by the declared rules (declared.merge)
    assert all(declared.rule(s.name) == s.merge for s in declared.STORE_SUMS)


def test_snapshot_sql_folder_and_dbt_macros_give_the_same_sums(con, upload):
    """The same rows through the three renderings, on each engine: the snapshot (a source of the
    engine, the store in DuckDB), sql/<dialect>/store_*.sql and the dbt macro of the engine's
    adapter, run on the engine. Every rendering's value columns are the declared ones, in
    order, and the values agree to 1e-12."""
    adapter, dialect, q = ENGINE[con.name]
    df = _rows()
    store = __import__("ibis").duckdb.connect()
    sqlcal.snapshot(upload(df), score="score", label="label", weight="weight", by="segment",
                    time="time", store=store, as_of="2026-12-31", cells=2**14, bins=(15,))
    predictions = upload(df).get_name().split(".")[-1]
    inputs = df.assign(key_segment=df.segment, p=df.score, y=df.label.fillna(0.0),
                       w=df.weight, period_start=df.time.dt.floor("D"))
    relation = upload(inputs[["key_segment", "p", "y", "w", "period_start"]]).get_name()
    relation = relation.split(".")[-1]
    for table, (stem, params) in KINDS.items():
        snapshot = store.table(schema.table_name(table)).to_pandas()
        text = "\n".join(line for line in (ROOT / "sql" / dialect / f"{stem}.sql").read_text()
                         .splitlines() if not line.startswith("--"))
        plain = _query(con, re.sub(rf"{q}predictions{q}", f"{q}{predictions}{q}", text)
                       .rstrip().rstrip(";"))
        dbt = _query(con, _dbt_macro(adapter, table)(f"{q}{relation}{q}", ["key_segment"],
                                                     *params.values()))
        for name, frame in (("snapshot", snapshot), ("sql/", plain), ("dbt", dbt)):
            assert _value_columns(frame, table) == _values(table), (table, name)
        want = _keyed(snapshot, table)
        assert len(want) and set(want["delay"]) == {schema.DELAY_LABEL_FREE,
                                                      schema.DELAY_UNKNOWN}
        for name, frame in (("sql/", plain), ("dbt", dbt)):
            pd.testing.assert_frame_equal(_keyed(frame, table), want, rtol=1e-12,
                                          obj=f"{table}: {name} against the snapshot")


def test_each_rendering_reads_the_declaration(monkeypatch):
    """A sum declared in STORE_SUMS reaches every rendering: the snapshot's scan, the sql/
    statement and the dbt macro (so a sum is added in one place)."""
    extra = StoredSum("swppp", ("w", "p", "p", "p"), tables=("totals",))
    monkeypatch.setattr(declared, "STORE_SUMS", (*declared.STORE_SUMS, extra))
    rows = __import__("ibis").table({"g": "string", "p": "float64", "y": "float64",
                                     "w": "float64", "delay": "int64"}, name="rows")
    assert "swppp" in reductions.store_scan(rows, ["g", "delay"], 1024, [(15, "sqlcal")]).columns
    assert "swppp" in sqlgen.store_rows("totals").columns
    assert '"swppp"' in dbtgen.store_sql("totals", "duckdb")
    assert "swppp" not in sqlgen.store_rows("cells", cells=1024).columns
