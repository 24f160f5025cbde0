"""Benchmark: normalized entropy and the calibration ratio per slice on a click log (issue 21).

Run from the repository root::

    nice -n 10 python bench/bench_lowrate.py --rows 1e7      # develop: about a minute
    nice -n 10 python bench/bench_lowrate.py --rows 1e8      # the issue's size (~1.6 GB, minutes)
    python bench/bench_lowrate.py --rows 1e5                 # a smoke run

Data. A DuckDB table ``clicks`` (slice, p, y) made by DuckDB itself in
``bench/out/clicks_<rows>.duckdb``: 100 slices, log-normal scores with median 1e-3 (σ = 0.9),
outcomes Bernoulli(p), so the base rate is about 1.5e-3. Deleted at the end unless ``--keep``.

Measurement. Each task runs in a fresh subprocess that opens the file read-only and runs once
(the issue asks for one run); reported: CPU seconds (``time.process_time``: user + sys of all
threads) and wall seconds. The machine is shared: compare ratios within one run only.

    floor     SELECT slice, count(*), sum(p), sum(y) FROM clicks GROUP BY slice
    ne_cr     sqlcal.report(..., by="slice", metrics=["normalized_entropy", "calibration_ratio"])
    deciles   sqlcal.calibration_ratio(..., by="slice", deciles=10)
    deciles_zoom  the same with the crowded cells zoomed 2^k-fold (the search before the
              log-odds split, ``sqlcal.metrics.cells.CONCENTRATED = inf``)

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
TASKS = ("floor", "ne_cr", "deciles", "deciles_zoom")
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


def run_task(task: str, path: str) -> dict:
    import ibis

    import sqlcal

    con = ibis.duckdb.connect(path, read_only=True)
    cpu, wall = time.process_time(), time.perf_counter()
    if task == "floor":
        con.raw_sql(FLOOR_SQL).fetchall()
    elif task == "ne_cr":
        sqlcal.report(path, table="clicks", score="p", label="y", by="slice",
                      metrics=["normalized_entropy", "calibration_ratio"])
    elif task in ("deciles", "deciles_zoom"):
        if task == "deciles_zoom":  # the search before the log-odds split: 2^k zooms only
            from sqlcal.metrics import cells
            cells.CONCENTRATED = float("inf")
        sqlcal.calibration_ratio(path, table="clicks", score="p", label="y", by="slice",
                                 deciles=10)
    return {"cpu_s": time.process_time() - cpu, "wall_s": time.perf_counter() - wall}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=float, default=1e7)
    ap.add_argument("--keep", action="store_true", help="keep the data file")
    ap.add_argument("--task", help=argparse.SUPPRESS)
    ap.add_argument("--path", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.task:  # inside the subprocess
        print(json.dumps(run_task(args.task, args.path)))
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
            print(f"{task:8s} cpu {results[task]['cpu_s']:7.2f} s  wall "
                  f"{results[task]['wall_s']:7.2f} s", file=sys.stderr)
    finally:
        if not args.keep:
            os.remove(path)
    floor = results["floor"]["cpu_s"]
    summary = {"rows": rows, "slices": 100, "tasks": results,
               "ne_cr_over_floor": results["ne_cr"]["cpu_s"] / floor,
               "deciles_extra_scans": (results["deciles"]["cpu_s"] - results["ne_cr"]["cpu_s"])
               / floor,
               "deciles_over_floor": results["deciles"]["cpu_s"] / floor,
               "deciles_zoom_over_floor": results["deciles_zoom"]["cpu_s"] / floor,
               "commit": subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True,
                                        text=True, cwd=ROOT).stdout.strip()}
    (OUT / f"lowrate_{rows}.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
