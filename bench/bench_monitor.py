"""Monitoring cost: a day's snapshot against a bare grouped scan of the day, and a 28-day window
served from the summary store against a rescan of the window's rows (CPU seconds of this
process, DuckDB's threads included; one run each).

    nice -n 5 python bench/bench_monitor.py --day-rows 10000000 --window-rows 1000000

Writes its data to a temporary folder and deletes it afterwards.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

import duckdb
import ibis

import sqlcal

DAY0 = "2026-10-01"


def write_days(path: str, days: int, rows_per_day: int, seed: int = 0) -> None:
    """Predictions of ``days`` days, ``rows_per_day`` each, 4 groups, Beta-like scores, labels
    drawn from them, integer weights, label delays, as one Parquet file (made in DuckDB)."""
    n = days * rows_per_day
    con = duckdb.connect()
    con.execute(f"SELECT setseed({seed / 1000})")
    con.execute(f"""
        COPY (
          WITH r AS (SELECT i, random() AS u1, random() AS u2, random() AS u3, random() AS u4
                     FROM range({n}) t(i))
          SELECT 'g' || (i % 4)::VARCHAR AS g,
                 u1 * u1 * 0.8 AS p,
                 (u2 < u1 * u1 * 0.8)::INT AS y,
                 (1 + floor(u3 * 3))::DOUBLE AS w,
                 TIMESTAMP '{DAY0}' + to_seconds(floor(i / {rows_per_day}) * 86400
                                                 + floor(u4 * 86400)) AS t,
                 TIMESTAMP '{DAY0}' + to_seconds(floor(i / {rows_per_day}) * 86400
                                                 + floor(u4 * 86400) + floor(u3 * 5 * 86400)) AS lt
          FROM r
        ) TO '{path}' (FORMAT parquet)""")
    con.close()


def metrics(src):
    return (sqlcal.ece(src), sqlcal.brier(src), sqlcal.log_loss(src),
            sqlcal.cutoff_error(src, method="grid"), sqlcal.smooth_ece(src, sigma=0.05))


def cpu(call):
    start_cpu, start_wall = time.process_time(), time.perf_counter()
    out = call()
    return out, time.process_time() - start_cpu, time.perf_counter() - start_wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--day-rows", type=int, default=10_000_000)
    parser.add_argument("--window-rows", type=int, default=1_000_000,
                        help="rows per day of the 28-day window")
    parser.add_argument("--days", type=int, default=28)
    args = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="sqlcal_bench_monitor_")
    try:
        day = os.path.join(folder, "day.parquet")
        write_days(day, 1, args.day_rows)
        kw = dict(score="p", label="y", weight="w", by="g", time="t", label_time="lt",
                  as_of="2026-12-31")
        table = sqlcal.source(day, score="p", label="y").rows  # warm the file's metadata
        del table
        bare = ibis.duckdb.connect().read_parquet(day)
        scan = bare.group_by("g").aggregate(n=bare.count(), swp=(bare.w * bare.p).sum(),
                                            swy=(bare.w * bare.y).sum())
        _, scan_cpu, scan_wall = cpu(lambda: scan.execute())
        store = ibis.duckdb.connect()
        _, snap_cpu, snap_wall = cpu(lambda: sqlcal.snapshot(day, store=store, **kw))
        _, day_cpu, _ = cpu(lambda: metrics(sqlcal.source(day, score="p", label="y",
                                                          weight="w", by="g")))
        print(f"one day of {args.day_rows:,} rows, 4 groups: bare grouped scan "
              f"{scan_cpu:.2f} CPU s ({scan_wall:.2f} s wall); snapshot {snap_cpu:.2f} CPU s "
              f"({snap_wall:.2f} s wall), {snap_cpu / scan_cpu:.1f}x the bare scan, "
              f"{snap_cpu / day_cpu:.1f}x the five metrics below computed once from the day's "
              f"rows ({day_cpu:.2f} CPU s)")
        os.remove(day)

        window = os.path.join(folder, "window.parquet")
        write_days(window, args.days, args.window_rows, seed=1)
        store = ibis.duckdb.connect()
        _, all_cpu, _ = cpu(lambda: sqlcal.snapshot(window, store=store, **kw))
        rows = store.table("sqlcal_sum_cells").count().execute()

        stored, stored_cpu, stored_wall = cpu(lambda: metrics(sqlcal.stored(store,
                                                                            maturity="all")))
        rescan, rescan_cpu, rescan_wall = cpu(lambda: metrics(sqlcal.source(
            window, score="p", label="y", weight="w", by="g")))
        worst = max(float((a.select_dtypes("number") - b.select_dtypes("number")).abs().max()
                          .max()) for a, b in zip(stored, rescan))
        print(f"{args.days} days x {args.window_rows:,} rows: snapshot of all days "
              f"{all_cpu:.2f} CPU s ({rows:,} stored cell rows); ece + brier + log_loss + "
              f"cutoff_error(grid) + smooth_ece(sigma=0.05) from the store {stored_cpu:.3f} CPU s "
              f"({stored_wall:.3f} s wall) vs rescan {rescan_cpu:.2f} CPU s "
              f"({rescan_wall:.2f} s wall): {100 * stored_cpu / rescan_cpu:.1f}% of the "
              f"rescan; largest difference {worst:.1e}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
