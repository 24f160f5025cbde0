"""Segment discovery at scale: engine statements, GROUP BY branches, CPU against a bare scan, and
peak memory, for sqlcal.segments on a DuckDB table of N rows and K features (depth 2 and 3).

    nice -n 10 python bench/bench_segments.py --rows 1000000 --features 20 --depths 2 3

The table is generated in DuckDB (no rows pass through Python): feature j of row i is
hash(1024·i + j) mod c_j with cardinalities cycling through 2, 3, 5, 10, 30, 100, 1000, 10000; the score
p = 0.02 + 0.9·u, u uniform from another hash; labels are Bernoulli(p) except in the planted
segment f0 = 0 AND f1 = 1, where the logit is shifted by 0.3. The database is deleted at the end
unless --keep. CPU is the process's user + system time (DuckDB runs in-process), so it counts
every engine thread; the bare scan is one aggregate of Σp, Σy and the row count.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import tempfile
import time

import ibis

import sqlcal

CARDS = (2, 3, 5, 10, 30, 100, 1000, 10000)


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _generate(con, rows: int, features: int) -> None:
    # one hash of a distinct integer per (row, column): hash(i, j) for j of equal parity gave
    # dependent binary columns
    cols = ", ".join(f"CAST(hash(i * 1024 + {j}) % {CARDS[j % len(CARDS)]} AS INTEGER) AS f{j}"
                     for j in range(features))
    con.raw_sql(f"""
        CREATE TABLE base AS
        SELECT i, 0.02 + 0.9 * ((hash(i * 1024 + 1000) % 1000003) / 1000003.0) AS p,
               (hash(i * 1024 + 1001) % 1000003) / 1000003.0 AS v, {cols}
        FROM range({rows}) t(i)""")
    shift = "CASE WHEN f0 = 0 AND f1 = 1 THEN 0.3 ELSE 0 END"
    con.raw_sql(f"""
        CREATE TABLE preds AS
        SELECT * EXCLUDE (v),
               CAST(v < 1 / (1 + exp(-(ln(p / (1 - p)) + {shift}))) AS INTEGER) AS y
        FROM base""")
    con.raw_sql("DROP TABLE base")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--features", type=int, default=20)
    parser.add_argument("--depths", type=int, nargs="+", default=[2, 3])
    parser.add_argument("--mode", default="split", choices=["split", "full"])
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="sqlcal_bench_segments_")
    path = os.path.join(folder, "preds.duckdb")
    try:
        con = ibis.duckdb.connect(path)
        t0 = time.perf_counter()
        _generate(con, args.rows, args.features)
        print(f"generated {args.rows} rows x {args.features} features in "
              f"{time.perf_counter() - t0:.1f} s", flush=True)
        table = con.table("preds")
        c0, w0 = _cpu(), time.perf_counter()
        table.aggregate(sp=table.p.sum(), sy=table.y.sum(), n=table.count()).execute()
        bare_cpu, bare_wall = _cpu() - c0, time.perf_counter() - w0
        results = []
        features = [f"f{j}" for j in range(args.features)]
        for depth in args.depths:
            c0, w0 = _cpu(), time.perf_counter()
            out = sqlcal.segments(table, score="p", label="y", features=features,
                                  max_depth=depth, mode=args.mode)
            cpu, wall = _cpu() - c0, time.perf_counter() - w0
            top = out[out.explained_by.isna()].iloc[0]
            searched = json.loads(out.searched.iloc[0])
            results.append(dict(
                rows=args.rows, features=args.features, depth=depth, mode=args.mode,
                statements=int(out.statements.iloc[0]), branches=int(out.branches.iloc[0]),
                family_size=int(out.family_size.iloc[0]),
                evaluated=sum(lv["evaluated"] for lv in searched["levels"]),
                bound_pruned=sum(lv["bound_pruned"] for lv in searched["levels"]),
                cpu_s=round(cpu, 2), wall_s=round(wall, 2), bare_scan_cpu_s=round(bare_cpu, 3),
                cpu_over_bare=round(cpu / max(bare_cpu, 1e-9), 1),
                peak_rss_mb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
                top_segment=top.segment, top_significant=bool(top.significant)))
            print(json.dumps(results[-1]), flush=True)
        con.disconnect()
    finally:
        if args.keep:
            print(f"kept {path}")
        else:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
