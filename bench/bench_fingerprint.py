"""The snapshot's fingerprint query against the one it replaced (count, Σw, Σwp, Σwy per period
and group): CPU seconds of this process, DuckDB's threads included, best of three runs each, on
the predictions of ``bench_monitor.write_days`` (4 groups, label delays).

    nice -n 5 python bench/bench_fingerprint.py --rows 10000000 --days 7

Writes its data to a temporary folder and deletes it afterwards.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile

import pandas as pd
from bench_monitor import cpu, write_days

from sqlcal.monitor import store
from sqlcal.query import reductions
from sqlcal.query.executor import source


def old_fingerprints(src):
    r = src.rows
    return reductions.execute(r.group_by(["period_start", *src.by[:-2]]).aggregate(
        n=r.count(), W=r.w.sum(), swp=(r.w * r.p).sum(), swy=(r.w * r.y).sum()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--days", type=int, default=7)
    args = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="sqlcal-bench-")
    try:
        path = os.path.join(folder, "rows.parquet")
        write_days(path, args.days, args.rows // args.days)
        base = store.resolve_table(path, None)
        rows = store._periods(base, by=("g",), label="y", time="t", label_time="lt",
                              as_of=pd.Timestamp("2027-01-01"), grain="day",
                              delays=(0, 1, 2, 3, 5, 7, 14, 30), start=None, end=None,
                              seconds=86400)
        src = source(rows, score="p", label="y", weight="w",
                     by=("key_g", "period_start", "delay"))
        for name, call in (("count, Σw, Σwp, Σwy per period and group (before)",
                            lambda: old_fingerprints(src)),
                           ("per group, delay and label, whole-number sums (now)",
                            lambda: store._fingerprints(src))):
            best = min(cpu(call)[1:] for _ in range(3))
            print(f"{args.rows:>12,} rows  {name}: {best[0]:.2f} CPU s, {best[1]:.2f} s wall")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
