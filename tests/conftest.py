"""Shared fixtures: the engine connection ``con`` and a helper that uploads a frame to it.

``con`` runs every engine test on DuckDB, on PostgreSQL when a server answers at
``SQLCAL_POSTGRES_URL`` (default ``postgres://postgres:postgres@localhost:5432/sqlcal_test``;
``.ci/run`` starts one), and on Spark (PySpark in local mode, one session for the whole run) when
``pyspark`` is installed. A missing engine is a skip with the reason printed (``-ra``); with
``SQLCAL_STRICT_ENGINES=1`` (``.ci/run`` sets it) it is a failure instead.

Local Spark runs some parametrised tests with part of their parameters (:data:`SPARK_CASES`).
``spark_cluster`` runs a representative subset (:data:`CLUSTER_TESTS`, or tests marked
``@pytest.mark.cluster``) on a Spark standalone cluster at ``SQLCAL_SPARK_MASTER`` (e.g.
``spark://127.0.0.1:7077``; ``.ci/spark-cluster start`` runs a master and two workers on loopback);
without that variable it is skipped with the reason printed. One Spark session lives at a time in
the process: switching between local mode and the cluster stops the other one.
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
ENGINES = ["duckdb", "postgres", "spark", "spark_cluster"]
SPARK_MASTER = os.environ.get("SQLCAL_SPARK_MASTER", "")
#: a missing engine (or dbt, for its tests) fails instead of skipping
STRICT = os.environ.get("SQLCAL_STRICT_ENGINES", "") not in ("", "0")
#: the engine tests that also run on the Spark cluster: one per metric family, and maps (a name
#: with [ids] selects that case only; about 20 s on two workers after the session's 18 s)
CLUSTER_TESTS = {
    "test_binned.py::test_ece_matches_brute_force[spark_cluster-l1-relplot]",
    "test_binned.py::test_brier_decomposition_exact[spark_cluster-quantile]",
    "test_cumulative.py::test_matches_brute_force_with_ties_weights_groups[spark_cluster-1]",
    "test_tce.py::test_rejections_equal_a_binomtest_loop[spark_cluster-True-pavabc]",
    "test_smooth.py::test_smooth_ece_matches_relplot[spark_cluster-5000-True]",
    "test_distance.py::test_fixture_d_discretized_with_weights",
    "test_decision.py::test_risk_gap_matches_brute_force[spark_cluster-0]",
    "test_scores.py::test_brier_matches_sklearn_weighted_grouped",
    "test_recalibrate.py::test_exported_sql_equals_numpy",
}

#: the parametrised engine tests that run on local Spark with some of their parameters only (the
#: ids after ``spark-``): each axis once against a fixed other, where DuckDB and PostgreSQL run
#: the whole cross product; every query is a Spark job of seconds
SPARK_CASES = {
    # every peer's bin edges in the engine (l1), every norm once (sqlcal's edges)
    "test_binned.py::test_ece_matches_brute_force": {
        "l1-sqlcal", "l1-sklearn", "l1-netcal", "l1-relplot", "l2-sqlcal", "max-sqlcal"},
    # the exact method on every hand-checked fixture, the grid on the weighted ones
    "test_cumulative.py::test_hand_checked_fixtures": {
        *(f"exact-p{i}-y{i}-{w}" for i, w in enumerate(
            ["None-0.4", "w1-0.26666666666666666", "None-0.25", "None-0.0", "None-0.3",
             "w5-0.275", "None-0.15", "None-0.7"])),
        "grid-p1-y1-w1-0.26666666666666666", "grid-p5-y5-w5-0.275"},
    # a tie at a threshold that is not a binary fraction, and at one that is
    "test_decision.py::test_threshold_and_payoff_forms_of_a_task_agree_at_ties": {"0.1", "0.25"},
    "test_distance.py::test_lipschitz_error_equals_the_primal_lp_and_emd_the_transport_lp": {
        "0", "1", "2"},
    # weighted: the weight column's path through every statement (unweighted on the others)
    "test_export_smooth_tce_distance.py::"
    "test_every_metric_of_the_families_round_trips_through_exported_sql": {"True"},
    "test_recalibrate.py::test_isotonic_engine_passes_equal_numpy": {"True"},
    # (weighted-zoom) both weightings and both refinements, each once
    "test_export_binned_cumulative.py::test_refining_forms_round_trip_through_the_levels": {
        "True-True", "False-False"},
    # whole and fractional weights (the integer and float PAV sums); no weight on the others
    "test_finishes_recalibrate.py::test_engine_summaries_equal_their_local_evaluation": {
        "whole", "fractional"},
}


def engine_missing(reason: str):
    """Skip the test because an engine or tool is missing, or fail it in strict mode."""
    if STRICT:
        pytest.fail(f"{reason} (SQLCAL_STRICT_ENGINES is set: a missing engine fails)",
                    pytrace=False)
    pytest.skip(reason)


def _postgres():
    try:
        return ibis.connect(POSTGRES_URL)
    except Exception as e:  # no server, no driver, no database
        reason = (f"PostgreSQL is not reachable at {POSTGRES_URL}: {type(e).__name__}: "
                  f"{str(e).splitlines()[0] if str(e) else ''}")
    engine_missing(reason)


def _spark(master: str = "local[2]"):
    try:
        from pyspark.sql import SparkSession
    except ImportError as e:
        engine_missing(f"Spark is not installed ({e}); pip install 'ibis-framework[pyspark]'")
    active = SparkSession.getActiveSession()
    if active is not None and active.sparkContext.master != master:
        active.stop()  # one SparkContext per process: local mode and the cluster take turns
    builder = SparkSession.builder
    if master != "local[2]":  # executors in their own JVMs: small, and the driver reachable
        import sys

        builder = (builder.config("spark.executor.memory", "512m")
                   .config("spark.executor.cores", "1").config("spark.cores.max", "2")
                   .config("spark.driver.host", "127.0.0.1")
                   .config("spark.pyspark.python", sys.executable))
    spark = (builder.master(master).appName("sqlcal-tests")
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
    if request.param == "spark_cluster":
        if not SPARK_MASTER:
            engine_missing("no Spark cluster: set SQLCAL_SPARK_MASTER=spark://127.0.0.1:7077 "
                           "after .ci/spark-cluster start")
        return _spark(SPARK_MASTER)
    return _postgres() if request.param == "postgres" else _spark()


def pytest_configure(config):
    config.addinivalue_line("markers", "cluster: also run on the Spark cluster (spark_cluster)")


@pytest.hookimpl(tryfirst=True)  # before xdist's, which reads the groups this marks
def pytest_collection_modifyitems(config, items):
    """The Spark cluster runs the representative subset only, not every Spark test twice."""
    keep, drop, seen = [], [], set()
    for item in items:
        on_cluster = "[spark_cluster" in item.nodeid or "-spark_cluster" in item.nodeid
        case = item.nodeid.split("/")[-1]
        chosen = case in CLUSTER_TESTS or case.split("[")[0] in CLUSTER_TESTS
        spark_params = case.partition("[spark-")[2][:-1]
        if spark_params and case.split("[")[0] in SPARK_CASES:
            seen.add((case.split("[")[0], spark_params))
            if spark_params not in SPARK_CASES[case.split("[")[0]]:
                drop.append(item)
                continue
        if on_cluster and not chosen and not item.get_closest_marker("cluster"):
            drop.append(item)
        else:
            keep.append(item)
    for name in {name for name, _ in seen}:  # renamed parameters would drop all Spark cases
        ids = [ids for seen_name, ids in seen if seen_name == name]
        if len(ids) > 1 and not SPARK_CASES[name] & set(ids):
            raise pytest.UsageError(f"SPARK_CASES[{name!r}] names none of its Spark cases {ids}")
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def _on_cluster(nodeid: str) -> bool:
    return ("[spark_cluster" in nodeid or "-spark_cluster" in nodeid
            or "test_cluster_engines" in nodeid)


def pytest_xdist_make_scheduler(config, log):
    """``--dist loadgroup`` with the Spark cluster's cases as one work unit, on one worker.

    A worker holds one Spark session at a time, so the cluster's cases together switch it to the
    cluster once. The unit is chosen here from the test ids themselves, not from an
    ``xdist_group`` mark: xdist applies those marks by renaming the ids, which pytest 9.2 no
    longer allows (grouping then silently stopped, both workers opened cluster applications and
    the run stalled; a second application waits for the cores the first holds). A stall of any
    kind now fails its test after the per-test ``timeout`` of ``pyproject.toml``.
    """
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class ClusterAsOneUnit(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return "spark_cluster" if _on_cluster(nodeid) else super()._split_scope(nodeid)

    return ClusterAsOneUnit(config, log)


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
            for engine in sorted(ENGINES, key=len, reverse=True):  # spark_cluster first
                if f"[{engine}" in report.nodeid:
                    counts.setdefault(engine, {}).setdefault(outcome, 0)
                    counts[engine][outcome] += 1
                    break
    for engine, by_outcome in counts.items():
        summary = ", ".join(f"{n} {o}" for o, n in sorted(by_outcome.items()))
        terminalreporter.write_line(f"engine {engine}: {summary}")
