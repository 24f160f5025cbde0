"""The core report on the same table in each engine: a record of time, not a target.

    python bench/bench_engines.py --rows 1e7      # needs bench/out/preds_<rows>_10g.duckdb
                                                  # (made by bench_metrics.py), a PostgreSQL
                                                  # at SQLCAL_POSTGRES_URL and pyspark

For each engine the table is loaded first (DuckDB: the file; PostgreSQL: COPY; Spark: Parquet),
then ``sqlcal.report(table, score="p", label="y", by="g")`` (its eleven default metrics, one
pass per summary) runs once; wall and CPU seconds of this process are printed (a server's or
Spark's own CPU is not in them).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import time
from pathlib import Path

OUT = Path(__file__).resolve().parent / "out"


def timed(label, fn):
    wall, cpu = time.perf_counter(), time.process_time()
    value = fn()
    print(f"| {label} | {time.perf_counter() - wall:.1f} | {time.process_time() - cpu:.1f} |",
          flush=True)
    return value


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=float, default=1e7)
    args = ap.parse_args()
    import ibis

    import sqlcal

    db = OUT / f"preds_{int(args.rows)}_10g.duckdb"
    parquet = OUT / f"preds_{int(args.rows)}_10g.parquet"
    duck = ibis.duckdb.connect(db, read_only=True, threads=2)
    if not parquet.exists():
        duck.table("preds").to_parquet(parquet)
    kw = dict(score="p", label="y", by="g")
    print("| step | wall s | CPU s (client) |\n|---|---|---|")
    timed("DuckDB: report", lambda: sqlcal.report(duck.table("preds"), **kw))

    url = os.environ.get("SQLCAL_POSTGRES_URL",
                         "postgres://postgres:postgres@localhost:5432/sqlcal_test")
    csv = OUT / f"preds_{int(args.rows)}.csv"
    if not csv.exists():
        duck.table("preds").to_csv(csv)
    pg = ibis.connect(url)
    pg.raw_sql("DROP TABLE IF EXISTS bench_preds")
    pg.raw_sql("CREATE TABLE bench_preds (g TEXT, p DOUBLE PRECISION, y SMALLINT, "
               "w DOUBLE PRECISION)")
    timed("PostgreSQL: COPY", lambda: subprocess.run(
        ["psql", url.replace("postgres://", "postgresql://"), "-qc",
         f"\\copy bench_preds FROM '{csv}' CSV HEADER"], check=True))
    pg.raw_sql("ANALYZE bench_preds")
    timed("PostgreSQL: report", lambda: sqlcal.report(pg.table("bench_preds"), **kw))
    pg.raw_sql("DROP TABLE bench_preds")

    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.driver.memory", "6g").config("spark.sql.shuffle.partitions", "8")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark.read.parquet(str(parquet)).createOrReplaceTempView("preds")
    con = ibis.pyspark.connect(spark)
    timed("Spark: report", lambda: sqlcal.report(con.table("preds"), **kw))


if __name__ == "__main__":
    main()
