"""The dbt package sql/dbt/: its files are current, and on DuckDB and PostgreSQL (through
dbt-duckdb and dbt-postgres) its generic test passes a calibrated model and fails a miscalibrated
one for every metric, and its per-group values equal sqlcal.from_summaries on the library's own
statements over the same rows to 1e-9.

The test project (tests/dbt_project) is built once per adapter with one ``dbt build``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import sqlcal
from sqlcal import dbtgen

ROOT = Path(__file__).resolve().parents[1]
PROJECT = Path(__file__).resolve().parent / "dbt_project"
PG = dict(host="localhost", port=5432, user="postgres", password="postgres", dbname="sqlcal_test")
METRICS = ("ece", "mce", "citl", "brier", "log_loss", "spiegelhalter_z", "cutoff_error")
#: the test's metric -> the library's metric, options and result column
LIBRARY = {"ece": ("ece", {}, "ece"), "mce": ("ece", {"norm": "max"}, "mce"),
           "citl": ("calibration_in_the_large", {}, "citl"), "brier": ("brier", {}, "brier"),
           "log_loss": ("log_loss", {}, "log_loss"), "spiegelhalter_z": ("spiegelhalter", {}, "z"),
           "cutoff_error": ("cutoff_error", {"method": "grid"}, "lower_bound")}


def test_generated_files_are_current():
    for name, text in dbtgen.render().items():
        path = ROOT / "sql" / "dbt" / name
        assert path.exists() and path.read_text() == text, \
            f"sql/dbt/{name} is stale: run `python -m sqlcal.dbtgen`"


def _dbt() -> str:
    exe = shutil.which("dbt")
    if exe is None:
        pytest.skip("dbt is not installed (pip install '.[dbt]')")
    return exe


def _seed() -> pd.DataFrame:
    """Two segments, fractional weights, tied scores, an overconfident segment b."""
    rng = np.random.default_rng(18)
    n = 400
    score = np.round(rng.uniform(0, 1, n), 2)  # ties
    segment = np.where(np.arange(n) % 3 == 0, "b", "a")
    truth = np.where(segment == "b", score**2, score)
    label = (rng.uniform(0, 1, n) < truth).astype(int)
    weight = np.round(rng.uniform(0.5, 3, n), 3)
    return pd.DataFrame({"segment": segment, "score": score, "label": label, "weight": weight})


def _build(tmp_path: Path, adapter: str) -> tuple[Path, subprocess.CompletedProcess]:
    dbt = _dbt()
    project = tmp_path / "project"
    shutil.copytree(PROJECT, project)
    (project / "dbt_packages").mkdir()
    (project / "dbt_packages" / "sqlcal").symlink_to(ROOT / "sql" / "dbt")
    (project / "seeds").mkdir()
    _seed().to_csv(project / "seeds" / "predictions.csv", index=False)
    if adapter == "duckdb":
        target = {"type": "duckdb", "path": str(tmp_path / "dbt.duckdb"), "threads": 2}
    else:
        target = {"type": "postgres", **{k: v for k, v in PG.items() if k != "dbname"},
                  "dbname": PG["dbname"], "schema": f"sqlcal_dbt_{os.getpid()}", "threads": 2}
    profile = {"sqlcal_tests": {"target": "test", "outputs": {"test": target}}}
    (project / "profiles.yml").write_text(json.dumps(profile))
    env = {**os.environ, "DBT_SEND_ANONYMOUS_USAGE_STATS": "false", "DO_NOT_TRACK": "1"}
    run = subprocess.run([dbt, "build", "--profiles-dir", str(project), "--project-dir",
                          str(project)], capture_output=True, text=True, env=env, timeout=300)
    return project, run


def _library(frame: pd.DataFrame, metric: str, weighted: bool) -> pd.DataFrame:
    """The library's value: its own statements on DuckDB over the same rows, finished by
    sqlcal.from_summaries."""
    import duckdb
    name, options, column = LIBRARY[metric]
    options = {**options, **({"bins": 10} if name == "ece" else {}),
               **({"cells": 256} if name == "cutoff_error" else {})}
    kw = dict(score="score", label="label", weight="weight" if weighted else None,
              by=["segment"] if weighted else [])
    con = duckdb.connect()
    con.register("preds", frame)
    sql = sqlcal.summary_sql(name, table="preds", **kw, **options)
    frames = {k: con.sql(text).df() for k, text in sql.items()}
    out = sqlcal.from_summaries(name, frames, **kw, **options)
    return out.rename(columns={column: "expected"})


@pytest.fixture(scope="module", params=["duckdb", "postgres"])
def built(request, tmp_path_factory):
    adapter = request.param
    if adapter == "postgres":
        psycopg = pytest.importorskip("psycopg", reason="psycopg is not installed")
        try:
            psycopg.connect(**PG, connect_timeout=3).close()
        except psycopg.OperationalError as e:
            if os.environ.get("SQLCAL_STRICT_ENGINES"):
                raise
            pytest.skip(f"PostgreSQL is not reachable: {e}")
    tmp = tmp_path_factory.mktemp(f"dbt_{adapter}")
    project, run = _build(tmp, adapter)
    results = json.loads((project / "target" / "run_results.json").read_text())
    if adapter == "duckdb":
        import duckdb
        con = duckdb.connect(str(tmp / "dbt.duckdb"), read_only=True)
        values, table = con.sql("select * from seed_values").df(), con.sql(
            "select * from predictions").df()
        con.close()
    else:
        import psycopg
        schema = f"sqlcal_dbt_{os.getpid()}"
        with psycopg.connect(**PG) as con:
            values = _fetch(con, f"select * from {schema}.seed_values")
            table = _fetch(con, f"select * from {schema}.predictions")
            con.execute(f"drop schema {schema} cascade")
    yield adapter, run, {r["unique_id"].split(".")[2]: r for r in results["results"]}, \
        values, table


def _fetch(con, sql):
    cur = con.execute(sql)
    return pd.DataFrame(cur.fetchall(), columns=[d.name for d in cur.description])


def test_calibrated_passes_and_miscalibrated_fails(built):
    adapter, run, results, _, _ = built
    status = {name: r["status"] for name, r in results.items()}
    for metric in METRICS:
        assert status[f"calibrated_{metric}"] == "pass", (metric, run.stdout[-3000:])
        assert status[f"miscalibrated_{metric}"] == "fail", (metric, run.stdout[-3000:])
    assert status["calibrated_ece_where"] == "pass"
    assert status["miscalibrated_ece_where"] == "fail"
    # one failing row per group: segments a and b
    assert results["miscalibrated_ece"]["failures"] == 2
    assert results["miscalibrated_ece_where"]["failures"] == 1
    assert run.returncode != 0 and "miscalibrated_ece" in run.stdout


def test_values_equal_the_library(built):
    adapter, run, _, values, table = built
    table = table.astype({"score": float, "label": float, "weight": float})
    assert len(table) == 400
    for metric in METRICS:
        for weighted in (True, False):
            got = values[(values["metric"] == metric)
                         & (values["variant"] == ("weighted" if weighted else "unweighted"))]
            want = _library(table, metric, weighted)
            if weighted:
                got = got.sort_values("segment").reset_index(drop=True)
                want = want.sort_values("segment").reset_index(drop=True)
                assert list(got["segment"]) == list(want["segment"]) == ["a", "b"]
            assert len(got) == len(want) >= 1
            np.testing.assert_allclose(got["value"].astype(float), want["expected"],
                                       rtol=1e-9, atol=1e-12, err_msg=f"{adapter} {metric}")
            np.testing.assert_allclose(got["w_total"].astype(float), want["W"], rtol=1e-12)
