"""Benchmark: TCE (PAVA-BC bins, the default) against a bare grouped sort of the scores, and the
rows it fetches.

Run from the repository root::

    python bench/bench_tce.py --rows 1e7          # a minute or two
    python bench/bench_tce.py --rows 1e8 --no-levels   # on demand: ~1.5 GB of Parquet

Data: ``bench/out/tce_<rows>.parquet`` (gitignored, deleted after the run unless ``--keep``),
generated in DuckDB SQL (no Python loop): ``p`` ~ Beta-like (the square of a uniform, 53-bit
continuous, so about one distinct score per row), ``y`` ~ Bernoulli(p^0.9) (slightly
miscalibrated).

Every task runs in a fresh subprocess, connects with ``threads=2`` and reports wall and CPU
seconds (user + sys of all threads):

    sort     CREATE TEMP TABLE AS SELECT p, count(*), sum(y) FROM rows GROUP BY p ORDER BY p
             (the bare grouped sort of the scores: what fetching the levels costs the engine)
    tce      sqlcal.tce(path, score="p", label="y"), counting the rows every summary returned
    levels   the same with the levels read whole (the method before: one row per score)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

OUT = os.path.join(os.path.dirname(__file__), "out")


def generate(path: str, rows: int) -> None:
    import duckdb

    if os.path.exists(path):
        return
    os.makedirs(OUT, exist_ok=True)
    con = duckdb.connect()
    con.execute("SELECT setseed(0.25)")
    con.execute(f"""
        COPY (SELECT p, (random() < pow(p, 0.9))::TINYINT AS y
              FROM (SELECT random() * random() AS p FROM range({rows})))
        TO '{path}' (FORMAT parquet, ROW_GROUP_SIZE 1000000)""")


def task(name: str, path: str) -> dict:
    import ibis

    import sqlcal
    from sqlcal.metrics import tce as tce_module
    from sqlcal.query import planner

    con = ibis.duckdb.connect(threads=2)
    fetched: list = []
    if name == "levels":
        tce_module.LEVEL_CAP = 10**12
    original = planner.fetch

    def counting(src, summary):
        frame = original(src, summary)
        fetched.append((summary.kind, len(frame)))
        return frame

    planner.fetch = counting
    cpu, wall = time.process_time(), time.time()
    if name == "sort":
        con.raw_sql(f"CREATE TEMP TABLE s AS SELECT p, count(*) AS n, sum(y) AS k "
                    f"FROM read_parquet('{path}') GROUP BY p ORDER BY p")
        value = None
    else:
        out = sqlcal.tce(con.read_parquet(path), score="p", label="y")
        value = float(out["tce"].iloc[0])
    return {"task": name, "wall": time.time() - wall, "cpu": time.process_time() - cpu,
            "tce": value, "fetched": fetched}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=float, default=1e7)
    parser.add_argument("--keep", action="store_true", help="keep the generated Parquet file")
    parser.add_argument("--no-levels", action="store_true",
                        help="skip the levels task (at 10^8 it fetches 10^8 rows)")
    parser.add_argument("--task", help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.task:
        print(json.dumps(task(args.task, args.path)))
        return
    rows = int(args.rows)
    path = os.path.join(OUT, f"tce_{rows}.parquet")
    generate(path, rows)
    try:
        results = {}
        for name in ("sort", "tce") + (() if args.no_levels else ("levels",)):
            done = subprocess.run([sys.executable, __file__, "--task", name, "--path", path],
                                  capture_output=True, text=True, check=True)
            results[name] = json.loads(done.stdout.strip().splitlines()[-1])
            r = results[name]
            rows_fetched = sum(n for _, n in r["fetched"])
            print(f"{name:7s} wall {r['wall']:7.1f} s  cpu {r['cpu']:7.1f} s  "
                  f"rows fetched {rows_fetched:>10,}  tce {r['tce']}")
        ratio = results["tce"]["cpu"] / results["sort"]["cpu"]
        print(f"tce / sort CPU: {ratio:.2f}x; fetches: {results['tce']['fetched']}")
        if "levels" in results:
            assert results["tce"]["tce"] == results["levels"]["tce"], "TCE differs"
    finally:
        if not args.keep:
            os.remove(path)


if __name__ == "__main__":
    main()
