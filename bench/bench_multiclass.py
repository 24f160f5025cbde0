"""Multiclass at scale: top-label ECE and the temperature fit in DuckDB (from Parquet) against
numpy on the arrays loaded from the same Parquet, wide and long layouts.

    nice -n 5 python bench/bench_multiclass.py --n 1000000          # develop
    nice -n 5 python bench/bench_multiclass.py --n 10000000 --classes 10

Data: logits ~ N(0, 2²), probabilities their softmax (float64), the true class drawn from
softmax(logits / 1.5) (an overconfident model). Wide: one column per class and the true class
(int); long: one row per example and class (example, cls, prob, label). Times are one run
each, wall and CPU seconds of this process (DuckDB's threads included); the numpy times exclude
the load, stated on its own. The generated files are deleted at the end.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from scipy import optimize, special

import sqlcal


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def timed(f):
    w, c = time.perf_counter(), cpu()
    out = f()
    return out, time.perf_counter() - w, cpu() - c


def write(folder: str, n: int, k: int, seed: int = 0, chunk: int = 1_000_000) -> tuple:
    rng = np.random.default_rng(seed)
    wide_path, long_path = os.path.join(folder, "wide.parquet"), os.path.join(folder, "long.parquet")
    names = [f"p{j}" for j in range(k)]
    wide_writer = long_writer = None
    for start in range(0, n, chunk):
        m = min(chunk, n - start)
        z = rng.normal(0, 2.0, (m, k))
        p = special.softmax(z, axis=1)
        q = special.softmax(z / 1.5, axis=1)
        y = (q.cumsum(1) < rng.random((m, 1))).sum(1).clip(0, k - 1)
        wide = pa.table({**{c: p[:, j] for j, c in enumerate(names)}, "y": y.astype(np.int64)})
        ex = np.repeat(np.arange(start, start + m), k)
        cls = np.tile(np.arange(k), m)
        long = pa.table({"example": ex, "cls": cls, "prob": p.ravel(),
                         "label": (cls == np.repeat(y, k)).astype(np.int8)})
        wide_writer = wide_writer or pq.ParquetWriter(wide_path, wide.schema)
        long_writer = long_writer or pq.ParquetWriter(long_path, long.schema)
        wide_writer.write_table(wide)
        long_writer.write_table(long)
    wide_writer.close()
    long_writer.close()
    return wide_path, long_path, names


def numpy_top_ece(p: np.ndarray, y: np.ndarray, bins: int = 15) -> float:
    top = p.argmax(1)
    conf = p[np.arange(len(p)), top]
    correct = (top == y).astype(float)
    ids = np.minimum((conf * bins).astype(int), bins - 1)
    n = np.bincount(ids, minlength=bins)
    gap = np.bincount(ids, correct, bins) - np.bincount(ids, conf, bins)
    return float(np.abs(gap).sum() / n.sum())


def numpy_temperature(p: np.ndarray, y: np.ndarray) -> float:
    logp = np.log(p)
    rows = np.arange(len(y))

    def nll(t):
        return -special.log_softmax(logp / t, axis=1)[rows, y].sum()

    return optimize.minimize_scalar(nll, bounds=(0.05, 20), method="bounded",
                                    options={"xatol": 1e-9}).x


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--layouts", default="wide,long")
    parser.add_argument("--skip-long-fit", action="store_true",
                        help="no temperature fit on the long layout")
    args = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="sqlcal_bench_mc_")
    try:
        (paths), gen_w, _ = timed(lambda: write(folder, args.n, args.classes))
        wide_path, long_path, names = paths
        print(f"n={args.n:,} examples x {args.classes} classes; generated in {gen_w:.1f} s; "
              f"wide {os.path.getsize(wide_path) / 1e6:.0f} MB, long "
              f"{os.path.getsize(long_path) / 1e6:.0f} MB")
        (arrays), load_w, load_c = timed(lambda: pq.read_table(wide_path).to_pandas())
        p, y = arrays[names].to_numpy(), arrays["y"].to_numpy()
        print(f"numpy load of the wide Parquet: {load_w:.2f} s wall, {load_c:.2f} CPU s")
        want_ece, w, c = timed(lambda: numpy_top_ece(p, y))  # noqa: F821 (deleted below)
        print(f"numpy top-label ECE: {want_ece:.12f}  {w:.2f} s wall, {c:.2f} CPU s")
        want_t, w, c = timed(lambda: numpy_temperature(p, y))  # noqa: F821 (deleted below)
        print(f"numpy temperature (scipy bounded): {want_t:.9f}  {w:.2f} s wall, {c:.2f} CPU s")
        del arrays, p, y
        for layout in args.layouts.split(","):
            if layout == "wide":
                options = dict(format="wide", probs=names, label="y",
                               classes=list(range(args.classes)))
                path = wide_path
            else:
                options = dict(format="long", example="example", cls="cls", prob="prob",
                               label="label")
                path = long_path

            def top_ece():
                table = sqlcal.multiclass(path, **options)
                return sqlcal.ece(table, score="score", label="label", bins=15).ece.iloc[0]

            got, w, c = timed(top_ece)
            print(f"sqlcal {layout}: top-label ECE {got:.12f} (|diff| {abs(got - want_ece):.1e})"
                  f"  {w:.2f} s wall, {c:.2f} CPU s (checks + metric)")
            if layout == "long" and args.skip_long_fit:
                continue
            fit, w, c = timed(lambda: sqlcal.temperature_scaling(path, **options))
            t = fit.temperature
            print(f"sqlcal {layout}: temperature {t:.9f} (rel diff {abs(t / want_t - 1):.1e}), "
                  f"{int(fit.table.scans.iloc[0])} Newton scans + checks  {w:.2f} s wall, "
                  f"{c:.2f} CPU s")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
