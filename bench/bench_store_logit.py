"""The summary store's logit-grid scan with and without the split moments of LS-ECE's interval
(summary version 4): CPU seconds of this process, DuckDB's threads included, of the scan a
snapshot runs per logit grid, on a day written as bench_monitor.py writes it; ``--runs`` runs of
each form, interleaved, and their medians.

    nice -n 5 python bench/bench_store_logit.py --day-rows 2000000

``none``: the point value's sums only (version 3's scan); ``stored``: with the six label-free
split moments the snapshot computes (their label parts are the positives' groups' own, taken in
pandas); ``all``: had the engine also summed the six label parts.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time

import ibis
from bench_monitor import write_days

from sqlcal.query import declared, reductions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--day-rows", type=int, default=2_000_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="sqlcal_bench_store_logit_")
    try:
        day = os.path.join(folder, "day.parquet")
        write_days(day, 1, args.day_rows)
        t = ibis.duckdb.connect().read_parquet(day)
        # the snapshot's rows: negatives in one group (delay -1), positives in theirs
        rows = t.select(g=t.g, p=t.p, y=t.y.cast("float64"), w=t.w,
                        delay=ibis.ifelse(t.y == 1, 0, -1))
        forms = {"none": (), "stored": declared.store_sums("logit", label=False),
                 "all": declared.store_sums("logit")}
        times: dict[str, list[float]] = {name: [] for name in forms}
        for _ in range(args.runs):
            for name, stored in forms.items():
                scan = reductions.logit_grid(rows, ["g", "delay"], 0.1 / 20, 1e-6,
                                             weighted=True, stored=stored)
                start = time.process_time()
                scan.execute()
                times[name].append(time.process_time() - start)
        for name, values in times.items():
            print(f"{name:6s} median {statistics.median(values):.2f} CPU s "
                  f"({', '.join(f'{v:.2f}' for v in values)})")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
