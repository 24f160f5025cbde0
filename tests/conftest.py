"""Shared fixtures: the engine connection ``con`` and a helper that uploads a frame to it.

``con`` runs every engine test on DuckDB, on PostgreSQL when a server answers at
``SQLCAL_POSTGRES_URL`` (default ``postgres://postgres:postgres@localhost:5432/sqlcal_test``;
``.ci/run`` starts one), and on Spark (PySpark in local mode, one session for the whole run) when
``pyspark`` is installed. A missing engine is a skip with the reason printed (``-ra``).
"""

from __future__ import annotations

import itertools
import os

import ibis
import numpy as np
import pandas as pd
import pytest

_names = (f"t{i}" for i in itertools.count())
POSTGRES_URL = os.environ.get("SQLCAL_POSTGRES_URL",
                              "postgres://postgres:postgres@localhost:5432/sqlcal_test")
ENGINES = ["duckdb", "postgres", "spark"]


def _postgres():
    try:
        return ibis.connect(POSTGRES_URL)
    except Exception as e:  # no server, no driver, no database
        pytest.skip(f"PostgreSQL is not reachable at {POSTGRES_URL}: {type(e).__name__}: "
                    f"{str(e).splitlines()[0] if str(e) else ''}")


def _spark():
    try:
        from pyspark.sql import SparkSession
    except ImportError as e:
        pytest.skip(f"Spark is not installed ({e}); pip install 'ibis-framework[pyspark]'")
    spark = (SparkSession.builder.master("local[2]").appName("sqlcal-tests")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             .config("spark.default.parallelism", "2").config("spark.sql.adaptive.enabled", "false")
             .config("spark.sql.execution.arrow.pyspark.enabled", "true")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return ibis.pyspark.connect(spark)


@pytest.fixture(scope="session", params=ENGINES)
def con(request):
    """An engine connection; every metric test runs against each engine available."""
    if request.param == "duckdb":
        return ibis.duckdb.connect()
    return _postgres() if request.param == "postgres" else _spark()


@pytest.fixture
def upload(con):
    """upload(df) -> an Ibis table holding df in the engine under test."""

    def _upload(df: pd.DataFrame):
        # temporary: nothing is left in the server's database or Spark's warehouse folder
        name = next(_names)
        if con.name == "pyspark":  # Ibis 12's PySpark backend has no temporary tables
            con._session.createDataFrame(df).createOrReplaceTempView(name)
            return con.table(name)
        return con.create_table(name, df, temp=con.name == "postgres")

    return _upload


def calibration_data(n: int, seed: int = 0, *, groups: int = 0, ties: bool = False,
                     weights: bool = False) -> pd.DataFrame:
    """Scores with a sign-crossing miscalibration (binning matters), optional groups/ties/weights."""
    rng = np.random.default_rng(seed)
    p = rng.beta(2, 3, n)
    if ties:
        p = np.round(p, 2)
    logit = np.log(np.clip(p, 1e-9, 1) / np.clip(1 - p, 1e-9, 1))
    y = (rng.random(n) < 1 / (1 + np.exp(-(1.5 * logit + 0.2)))).astype(np.int64)
    df = pd.DataFrame({"p": p, "y": y})
    if groups:
        df["g"] = rng.choice([f"g{i}" for i in range(groups)], n)
    if weights:
        df["w"] = rng.exponential(size=n)
    return df


def pytest_terminal_summary(terminalreporter):
    """Print how many tests ran on each engine."""
    counts = {}
    for outcome in ("passed", "failed", "skipped"):
        for report in terminalreporter.stats.get(outcome, []):
            for engine in ENGINES:
                if f"[{engine}" in report.nodeid:
                    counts.setdefault(engine, {}).setdefault(outcome, 0)
                    counts[engine][outcome] += 1
    for engine, by_outcome in counts.items():
        summary = ", ".join(f"{n} {o}" for o, n in sorted(by_outcome.items()))
        terminalreporter.write_line(f"engine {engine}: {summary}")
