"""Each metric on the same table in each engine: its time, and its agreement with DuckDB.

    python bench/bench_engines.py --rows 1e7 --start-cluster
        # needs bench/out/preds_<rows>_10g.duckdb (made by bench_metrics.py), a PostgreSQL at
        # SQLCAL_POSTGRES_URL and pyspark; --start-cluster runs .ci/spark-cluster start and stop
        # (a master and two 1-core workers on loopback), else SQLCAL_SPARK_MASTER names one
    python bench/bench_engines.py --rows 1e6 --postgres-speed
        # PostgreSQL before/after: pure-Python psycopg and no session settings, the binary
        # psycopg, and binary with sqlcal's settings (work_mem, jit=off)

For each engine the table is loaded first (DuckDB: the file; PostgreSQL: COPY; Spark: Parquet),
then each metric runs once on its own (``sqlcal.report(..., metrics=[name])``, a fresh source:
nothing cached from another metric). Printed: wall seconds, CPU seconds of this process (a
server's or Spark's own CPU is not in them) and the largest relative difference of the metric's
numbers from DuckDB's. PostgreSQL is opened by URL, so sqlcal's session settings apply.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

OUT = Path(__file__).resolve().parent / "out"
ROOT = Path(__file__).resolve().parent.parent
URL = os.environ.get("SQLCAL_POSTGRES_URL",
                     "postgres://postgres:postgres@localhost:5432/sqlcal_test")
METRICS = ["ece", "rmsce", "mce", "ece_quantile", "brier", "log_loss",
           "calibration_in_the_large", "spiegelhalter", "hosmer_lemeshow", "cutoff_error",
           "kuiper", "ks", "ls_ece", "tce"]
KW = dict(score="p", label="y", by="g")


def timed(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    value = fn()
    return value, time.perf_counter() - wall, time.process_time() - cpu


def agreement(frame, ref) -> float:
    """The largest relative difference of the numeric columns, rows matched by group."""
    import numpy as np
    import pandas as pd

    a, b = frame.sort_values("g").reset_index(drop=True), ref.sort_values("g").reset_index(drop=True)
    worst = 0.0
    for col in ref.columns:
        if col == "g" or col not in a or not pd.api.types.is_numeric_dtype(ref[col].dtype) \
                or pd.api.types.is_bool_dtype(ref[col].dtype):
            continue
        x, y = a[col].to_numpy(float), b[col].to_numpy(float)
        both = np.isfinite(x) & np.isfinite(y)
        if (np.isnan(x) != np.isnan(y)).any():
            return float("inf")
        scale = np.maximum(np.abs(y[both]), 1e-300)
        if both.any():
            worst = max(worst, float(np.max(np.abs(x[both] - y[both]) / scale)))
    return worst


def load_postgres(rows: int, duck) -> None:
    import ibis

    csv = OUT / f"preds_{rows}.csv"
    if not csv.exists():
        duck.table("preds").to_csv(csv)
    pg = ibis.connect(URL)
    pg.raw_sql("DROP TABLE IF EXISTS bench_preds").close()
    pg.raw_sql("CREATE TABLE bench_preds (g TEXT, p DOUBLE PRECISION, y SMALLINT, "
               "w DOUBLE PRECISION)").close()
    _, wall, _ = timed(lambda: subprocess.run(
        ["psql", URL.replace("postgres://", "postgresql://"), "-qc",
         f"\\copy bench_preds FROM '{csv}' CSV HEADER"], check=True))
    pg.raw_sql("ANALYZE bench_preds").close()
    print(f"PostgreSQL: COPY of {rows} rows {wall:.1f} s", flush=True)
    csv.unlink()


def spark_session(master: str):
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master(master).appName("sqlcal-bench")
             .config("spark.ui.enabled", "false").config("spark.driver.memory", "4g")
             .config("spark.driver.maxResultSize", "3g").config("spark.driver.host", "127.0.0.1")
             .config("spark.executor.memory", "1g").config("spark.cores.max", "2")
             .config("spark.sql.shuffle.partitions", "8")
             .config("spark.sql.execution.arrow.pyspark.enabled", "true").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def run_metrics(label: str, table_of, metrics, refs: dict) -> None:
    for name in metrics:
        try:
            frame, wall, cpu = timed(lambda: __import__("sqlcal").report(
                table_of(), metrics=[name], **KW))
        except Exception as e:  # noqa: BLE001 -- a record: print and go on
            print(f"| {label} | {name} | failed: {type(e).__name__}: {str(e)[:120]} | | |",
                  flush=True)
            continue
        if label == "DuckDB":
            refs[name] = frame
        agree = agreement(frame, refs[name]) if name in refs else float("nan")
        print(f"| {label} | {name} | {wall:.1f} | {cpu:.1f} | {agree:.1e} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=float, default=1e7)
    ap.add_argument("--engines", nargs="+", default=["duckdb", "postgres", "spark_cluster"],
                    choices=["duckdb", "postgres", "spark_cluster", "spark_local"])
    ap.add_argument("--metrics", nargs="+", default=METRICS)
    ap.add_argument("--start-cluster", action="store_true")
    ap.add_argument("--postgres-speed", action="store_true")
    ap.add_argument("--task", help=argparse.SUPPRESS)
    args = ap.parse_args()
    rows = int(args.rows)
    if args.task:
        return postgres_task(args.task, args.metrics)
    import ibis

    db = OUT / f"preds_{rows}_10g.duckdb"
    duck = ibis.duckdb.connect(db, read_only=True, threads=2)
    if args.postgres_speed:
        return postgres_speed(rows, duck, args.metrics if args.metrics != METRICS
                              else ["reliability", "tce"])
    refs: dict = {}
    print("| engine | metric | wall s | CPU s (client) | max rel. diff from DuckDB |\n"
          "|---|---|---|---|---|", flush=True)
    # DuckDB is the reference even when not printed first
    run_metrics("DuckDB", lambda: duck.table("preds"), args.metrics, refs)
    if "postgres" in args.engines:
        load_postgres(rows, duck)
        run_metrics("PostgreSQL", lambda: (URL, "bench_preds"), args.metrics, refs)
        ibis.connect(URL).raw_sql("DROP TABLE bench_preds").close()
    for engine in ("spark_cluster", "spark_local"):
        if engine not in args.engines:
            continue
        parquet = OUT / f"preds_{rows}_10g.parquet"
        if not parquet.exists():
            duck.table("preds").to_parquet(parquet)
        started = False
        master = "local[2]"
        if engine == "spark_cluster":
            master = os.environ.get("SQLCAL_SPARK_MASTER", "")
            if args.start_cluster:
                subprocess.run([str(ROOT / ".ci" / "spark-cluster"), "start"], check=True,
                               env={**os.environ, "PYTHON": sys.executable})
                master, started = "spark://127.0.0.1:7077", True
        try:
            spark = spark_session(master)
            spark.read.parquet(str(parquet)).repartition(8).createOrReplaceTempView("preds")
            con = ibis.pyspark.connect(spark)
            label = "Spark cluster (2 workers)" if engine == "spark_cluster" else "Spark local[2]"
            run_metrics(label, lambda: con.table("preds"), args.metrics, refs)
            spark.stop()
        finally:
            if started:
                subprocess.run([str(ROOT / ".ci" / "spark-cluster"), "stop"], check=True)
        parquet.unlink()


def postgres_task(config: str, metrics) -> None:
    """One configuration in a fresh process (the psycopg implementation is chosen at import)."""
    import sqlcal
    import sqlcal.inputs.sources  # noqa: F401 (the module the psycopg choice is read in)

    src_module = sys.modules["sqlcal.inputs.sources"]
    if config == "defaults":
        src_module.POSTGRES_SETTINGS = {}
    out = {}
    for name in metrics:
        fn = getattr(sqlcal, name)
        _, wall, cpu = timed(lambda: fn((URL, "bench_preds"), **KW))
        out[name] = (wall, cpu)
    print(json.dumps(out))


def postgres_speed(rows: int, duck, metrics) -> None:
    load_postgres(rows, duck)
    print("| psycopg | session settings | metric | wall s | CPU s (client) |\n|---|---|---|---|---|")
    for impl, config in (("python", "defaults"), ("binary", "defaults"), ("binary", "sqlcal")):
        env = {**os.environ, "PSYCOPG_IMPL": impl}
        run = subprocess.run([sys.executable, __file__, "--rows", str(rows), "--task", config,
                              "--metrics", *metrics], env=env, capture_output=True, text=True,
                             check=True)
        times = json.loads(run.stdout.strip().splitlines()[-1])
        setting = "none (work_mem 4MB, jit on)" if config == "defaults" else \
            "work_mem 256MB, jit off"
        for name, (wall, cpu) in times.items():
            print(f"| {impl} | {setting} | {name} | {wall:.1f} | {cpu:.1f} |", flush=True)
    import ibis

    ibis.connect(URL).raw_sql("DROP TABLE bench_preds").close()


if __name__ == "__main__":
    main()
