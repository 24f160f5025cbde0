"""Benchmark: normalized entropy and the calibration ratio per slice on a click log.

Run from the repository root::

    nice -n 10 python bench/bench_lowrate.py --rows 1e7      # develop: about a minute
    nice -n 10 python bench/bench_lowrate.py --rows 1e8      # the issue's size (~0.8 GB, minutes)
    python bench/bench_lowrate.py --rows 1e5                 # a smoke run
    nice -n 10 python bench/bench_lowrate.py --rows 1e7 --queries   # each engine query timed

Data. A DuckDB table ``clicks`` (slice, p, y) made by DuckDB itself in
``bench/out/clicks_<rows>.duckdb``: 100 slices, log-normal scores with median 1e-3 (σ = 0.9),
outcomes Bernoulli(p), so the base rate is about 1.5e-3. Deleted at the end unless ``--keep``.

Measurement. Each task runs in a fresh subprocess that opens the file read-only and runs once
(the issue asks for one run); reported: CPU seconds (``time.process_time``: user + sys of all
threads) and wall seconds. The machine is shared: compare ratios within one run only.

    floor     SELECT slice, count(*), sum(p), sum(y) FROM clicks GROUP BY slice
    ne_cr     sqlcal.report(..., by="slice", metrics=["normalized_entropy", "calibration_ratio"])
    deciles   sqlcal.calibration_ratio(..., by="slice", deciles=10): its equal-mass search starts
              from the log-odds histogram carried in the first scan
    deciles_cells  the same starting from the 2^k score cells (the search before the log-odds
              histogram moved into the first scan: the crowded cells split by log-odds)

``--queries`` runs each task once more with every engine query timed (a wrapper of
``sqlcal.query.reductions.execute``): per query its CPU seconds, the rows it returned and its columns
(the summary's keys and sums), then the rest of the task's CPU (Python: compiling the queries,
the pandas search and finish). The task's own figure comes from the untimed run.

Targets (shown, not asserted): ne_cr CPU <= 2x floor; deciles CPU <= ne_cr + one floor.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"
TASKS = ("floor", "ne_cr", "deciles", "deciles_cells")
FLOOR_SQL = "SELECT slice, count(*), sum(p), sum(y) FROM clicks GROUP BY slice"


def make_data(path: Path, rows: int) -> None:
    import duckdb

    con = duckdb.connect(str(path))
    con.execute("SELECT setseed(0.21)")
    # Box-Muller normal; scores clipped below 1
    con.execute(f"""
        CREATE TABLE clicks AS
        SELECT (i % 100)::INTEGER AS slice, p, (random() < p)::INTEGER AS y
        FROM (SELECT i, least(exp(ln(1e-3) + 0.9 * sqrt(-2 * ln(1 - random()))
                                   * cos(2 * pi() * random())), 0.999) AS p
              FROM range({rows}) t(i))
    """)
    con.close()


def run_task(task: str, path: str, queries: bool = False) -> dict:
    import ibis

    import sqlcal
    from sqlcal.query import reductions

    log = []
    if queries:  # every engine query timed: CPU, rows returned, columns
        execute = reductions.execute

        def timed(expr):
            c0 = time.process_time()
            out = execute(expr)
            log.append({"cpu_s": time.process_time() - c0, "rows": len(out),
                        "columns": ",".join(out.columns[:6])})
            return out

        reductions.execute = timed
    if task == "deciles_cells":  # the search from the 2^k score cells (before the first scan
        # carried the log-odds histogram)
        from sqlcal.metrics import cells, lowrate

        start = cells.equal_mass_bins
        lowrate.equal_mass_bins = lambda src, bins, parts, strategy, first: start(
            src, bins, parts, strategy)
    con = ibis.duckdb.connect(path, read_only=True)
    cpu, wall = time.process_time(), time.perf_counter()
    if task == "floor":
        con.raw_sql(FLOOR_SQL).fetchall()
    elif task == "ne_cr":
        sqlcal.report(path, table="clicks", score="p", label="y", by="slice",
                      metrics=["normalized_entropy", "calibration_ratio"])
    elif task in ("deciles", "deciles_cells"):
        sqlcal.calibration_ratio(path, table="clicks", score="p", label="y", by="slice",
                                 deciles=10)
    out = {"cpu_s": time.process_time() - cpu, "wall_s": time.perf_counter() - wall}
    if queries:
        out["queries"] = log
        out["python_cpu_s"] = out["cpu_s"] - sum(q["cpu_s"] for q in log)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=float, default=1e7)
    ap.add_argument("--keep", action="store_true", help="keep the data file")
    ap.add_argument("--queries", action="store_true",
                    help="also run each task with every engine query timed")
    ap.add_argument("--task", help=argparse.SUPPRESS)
    ap.add_argument("--path", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.task:  # inside the subprocess
        print(json.dumps(run_task(args.task, args.path, args.queries)))
        return
    rows = int(args.rows)
    OUT.mkdir(exist_ok=True)
    path = OUT / f"clicks_{rows}.duckdb"
    if not path.exists():
        t = time.perf_counter()
        make_data(path, rows)
        print(f"data: {rows:,} rows in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    results = {}
    try:
        for task in TASKS:
            out = subprocess.run([sys.executable, __file__, "--task", task, "--path", str(path)],
                                 capture_output=True, text=True, check=True, cwd=ROOT)
            results[task] = json.loads(out.stdout.strip().splitlines()[-1])
            print(f"{task:13s} cpu {results[task]['cpu_s']:7.2f} s  wall "
                  f"{results[task]['wall_s']:7.2f} s", file=sys.stderr)
            if args.queries and task != "floor":
                out = subprocess.run([sys.executable, __file__, "--task", task, "--path",
                                      str(path), "--queries"], capture_output=True, text=True,
                                     check=True, cwd=ROOT)
                timed = json.loads(out.stdout.strip().splitlines()[-1])
                results[task]["queries"] = timed["queries"]
                for q in timed["queries"]:
                    print(f"    query cpu {q['cpu_s']:7.2f} s  rows {q['rows']:9,d}  "
                          f"{q['columns']}", file=sys.stderr)
                print(f"    python cpu {timed['python_cpu_s']:6.2f} s", file=sys.stderr)
    finally:
        if not args.keep:
            os.remove(path)
    floor = results["floor"]["cpu_s"]
    summary = {"rows": rows, "slices": 100, "tasks": results,
               "ne_cr_over_floor": results["ne_cr"]["cpu_s"] / floor,
               "deciles_extra_scans": (results["deciles"]["cpu_s"] - results["ne_cr"]["cpu_s"])
               / floor,
               "deciles_over_floor": results["deciles"]["cpu_s"] / floor,
               "deciles_cells_over_floor": results["deciles_cells"]["cpu_s"] / floor,
               "commit": subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True,
                                        text=True, cwd=ROOT).stdout.strip()}
    (OUT / f"lowrate_{rows}.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
