"""Segment discovery at scale: engine statements, GROUP BY branches, CPU against a bare scan, and
peak memory, for sqlcal.segments on a DuckDB table of N rows and K features (depth 2 and 3).

    nice -n 10 python bench/bench_segments.py --rows 1000000 --features 20 --depths 2 3

The table is generated in DuckDB by one CREATE TABLE ... AS SELECT FROM range(N) (no rows pass
through Python). Every feature is drawn independently of the others and of the score, each from its own
uniform u_j = hash(64·i + j) / 2^64 (a distinct hashed integer per row and column), with the
cardinalities of a realistic table (``FEATURES``: four binary columns with shares 0.5 to 0.02,
three with 3-8 values, seven with 10-50, one with 100, and log-uniform columns with 10, 30, 50,
300 and 800 values whose tails are rare: value k of a log-uniform column over c values has
probability ln((k + 2)/(k + 1)) / ln(c + 1), so the last of 800 values holds 1.9e-4 of the rows).
The score is logit-normal, logit p = -1.4 + 0.9·z with z standard normal (Box-Muller from two
more hashes; mean score about 0.22); labels are Bernoulli(p) except in the planted segment
f1 = 1 AND f7 = 3 (3% of rows), where the logit is shifted by +0.3.

Each measurement runs in a fresh process (the generation's memory does not count), reading the
database file: CPU is that process's user + system time (DuckDB runs in-process, so every engine
thread is counted), peak memory its maximum resident set. Two baselines run in the same process
first: a bare scan (one aggregate of Σp, Σy and the row count) and one GROUP BY of a 30-value
feature with the six sums a segment branch computes. The database is deleted at the end unless
--keep.

    nice -n 10 python bench/bench_segments.py --rows 1000000 --depths --mcgrad

times MCGrad's MulticalibrationError (``pip install '.[peers]'``) with its defaults on the
same table read into pandas (its memory: a boolean mask of n rows per segment, at most 1000
segments by default, so about n kB).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import resource
import shutil
import subprocess
import tempfile
import time
from queue import Empty

import numpy as np

#: (kind, parameter) per feature: ("binary", share of ones), ("uniform", values),
#: ("loguniform", values)
FEATURES = (
    ("binary", 0.5), ("binary", 0.3), ("binary", 0.1), ("binary", 0.02),
    ("uniform", 3), ("uniform", 5), ("uniform", 8),
    ("uniform", 10), ("uniform", 12), ("uniform", 20), ("uniform", 25), ("uniform", 30),
    ("uniform", 40), ("uniform", 50), ("loguniform", 10), ("loguniform", 30),
    ("loguniform", 50), ("uniform", 100), ("loguniform", 300), ("loguniform", 800),
)
#: the planted segment and its logit shift
PLANTED, SHIFT = "f1 = 1 AND f7 = 3", 0.3


def _u(j: int) -> str:
    """A uniform in [0, 1) from the hash of a distinct integer per (row, column)."""
    return f"(hash(i * 64 + {j}) / 18446744073709551616.0)"


def _feature(j: int) -> str:
    kind, param = FEATURES[j % len(FEATURES)]
    if kind == "binary":
        expr = f"CAST({_u(j)} < {param} AS TINYINT)"
    elif kind == "uniform":
        expr = f"CAST(floor({_u(j)} * {param}) AS SMALLINT)"
    else:
        expr = f"CAST(least(floor(exp({_u(j)} * ln({param} + 1))) - 1, {param - 1}) AS SMALLINT)"
    return f"{expr} AS f{j}"


def generate(path: str, rows: int, features: int) -> float:
    """Write table ``preds`` (p, y, f0..f{features-1}) to the DuckDB file; seconds taken."""
    import duckdb

    t0 = time.perf_counter()
    con = duckdb.connect(path)
    cols = ", ".join(_feature(j) for j in range(features))
    z = f"sqrt(-2 * ln(1 - {_u(60)})) * cos(2 * pi() * {_u(61)})"
    con.execute(f"""
        CREATE TABLE preds AS
        WITH base AS (
            SELECT -1.4 + 0.9 * {z} AS logit, {_u(62)} AS v, {cols} FROM range({rows}) t(i))
        SELECT 1 / (1 + exp(-logit)) AS p,
               CAST(v < 1 / (1 + exp(-(logit + CASE WHEN {PLANTED} THEN {SHIFT} ELSE 0 END)))
                    AS TINYINT) AS y,
               * EXCLUDE (logit, v)
        FROM base""")
    con.close()
    return time.perf_counter() - t0


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _measure(path: str, features: int, depth: int, mode: str, queue,
             strategy: str = "lattice") -> None:
    import ibis

    import sqlcal

    con = ibis.duckdb.connect(path, read_only=True)
    table = con.table("preds")
    c0, w0 = _cpu(), time.perf_counter()
    table.aggregate(sp=table.p.sum(), sy=table.y.sum(), n=table.count()).execute()
    bare_cpu, bare_wall = _cpu() - c0, time.perf_counter() - w0
    c0 = _cpu()
    pq = table.p * table.p
    table.group_by("f11").aggregate(n=table.count(), w=table.count(), sp=table.p.sum(),
                                    sy=table.y.sum(), spp=pq.sum(),
                                    syp=(table.y * table.p).sum()).execute()
    group_cpu = _cpu() - c0
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    names = [f"f{j}" for j in range(features)]
    c0, w0 = _cpu(), time.perf_counter()
    out = sqlcal.segments(table, score="p", label="y", features=names, max_depth=depth,
                          mode=mode, strategy=strategy)
    cpu, wall = _cpu() - c0, time.perf_counter() - w0
    top = out[out.explained_by.isna()].iloc[0]
    searched = json.loads(out.searched.iloc[0])
    queue.put(dict(
        depth=depth, mode=mode, strategy=strategy, statements=int(out.statements.iloc[0]),
        scans=searched["scans"], min_support=searched["min_support"],
        branches=int(out.branches.iloc[0]), family_size=int(out.family_size.iloc[0]),
        evaluated=sum(lv["evaluated"] for lv in searched["levels"]),
        bound_pruned=sum(lv["bound_pruned"] for lv in searched["levels"]),
        pooled_values=sum(searched["pooled_values"].values()),
        significant=int(out.significant.sum()),
        cpu_s=round(cpu, 1), wall_s=round(wall, 1), bare_scan_cpu_s=round(bare_cpu, 3),
        bare_scan_wall_s=round(bare_wall, 3), one_group_by_cpu_s=round(group_cpu, 3),
        cpu_over_bare=round(cpu / max(bare_cpu, 1e-9)),
        cpu_over_group_by=round(cpu / max(group_cpu, 1e-9), 1),
        peak_rss_mb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        rss_before_mb=round(rss0 / 1024),
        top_segment=top.segment, top_significant=bool(top.significant)))
    # no disconnect: the cube (strategy="cube") is a cached table Ibis drops when collected,
    # which needs the connection; the process ends here


def _measure_mcgrad(path: str, features: int, queue) -> None:
    """MCGrad's MulticalibrationError with its defaults (depth 3, the 2 most frequent values of
    each feature plus __OTHER, at most 1000 segments, float32) on the table read into pandas."""
    import duckdb
    from mcgrad.metrics import MulticalibrationError

    con = duckdb.connect(path, read_only=True)
    frame = con.execute("SELECT * FROM preds").df()
    con.close()
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    c0, w0 = _cpu(), time.perf_counter()
    mce = MulticalibrationError(frame, label_column="y", score_column="p",
                                categorical_segment_columns=[f"f{j}" for j in range(features)])
    sigma, absolute = float(mce.mce_sigma), float(mce.mce)
    cpu, wall = _cpu() - c0, time.perf_counter() - w0
    segments = _mcgrad_segments(mce)
    worst = segments[int(np.argmax(mce.segments_ecce_sigma))]
    queue.put(dict(peer="mcgrad", segments=int(mce.total_number_segments),
                   deepest=max(s.count(" AND ") + 1 if s else 0 for s in segments), mce_sigma=round(sigma, 3),
                   mce=round(absolute, 6), worst_segment=worst, cpu_s=round(cpu, 1),
                   wall_s=round(wall, 1),
                   peak_rss_mb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
                   rss_after_load_mb=round(rss0 / 1024)))


def _mcgrad_segments(mce) -> list:
    out: dict = {0: ""}
    for col, value, idx in mce._segments[1].itertuples(index=False):
        out[idx] = " AND ".join(filter(None, [out.get(idx, ""), f"{col} = {value}"]))
    return [out[i] for i in range(mce.total_number_segments)]


def _result(proc, queue, timeout: float | None = None, **what) -> dict:
    """The child's result, or its exit code when it died (e.g. out of memory), or the CPU
    seconds it had used when it was stopped after ``timeout`` wall seconds."""
    t0 = time.perf_counter()
    while proc.is_alive() or not queue.empty():
        try:
            return queue.get(timeout=5)
        except Empty:
            if timeout and time.perf_counter() - t0 > timeout:
                cpu = _child_cpu(proc.pid)
                proc.terminate()
                proc.join()
                return dict(what, failed=f"stopped after {timeout:.0f} wall s",
                            cpu_s_so_far=cpu)
    proc.join()
    return dict(what, failed=f"exit code {proc.exitcode}")


def _child_cpu(pid: int) -> float | None:
    """A running process's user + system CPU seconds (Linux /proc), else None."""
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return round((int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), 1)
    except (OSError, IndexError, ValueError):
        return None


def _commit() -> str:
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        head = subprocess.run(["git", "-C", here, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", here, "diff", "--quiet", "HEAD", "--",
                                "../sqlcal"]).returncode
        return head + ("+modified" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--features", type=int, default=20)
    parser.add_argument("--depths", type=int, nargs="*", default=[2, 3])
    parser.add_argument("--mode", default="split", choices=["split", "full"])
    parser.add_argument("--strategies", nargs="+", default=["lattice"],
                        choices=["lattice", "cube"])
    parser.add_argument("--dir", default=None, help="where the database file goes")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--db", default=None,
                        help="measure an existing database this script generated (with --keep) "
                             "instead of generating one; it is left in place")
    parser.add_argument("--timeout", type=float, default=None,
                        help="stop a measurement after this many wall seconds")
    parser.add_argument("--mcgrad", action="store_true",
                        help="also time MCGrad's MulticalibrationError (pandas) on the table")
    args = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="sqlcal_bench_segments_", dir=args.dir)
    path = args.db or os.path.join(folder, "preds.duckdb")
    ctx = mp.get_context("spawn")
    try:
        t0 = time.perf_counter()
        if not args.db:
            proc = ctx.Process(target=generate, args=(path, args.rows, args.features))
            proc.start()
            proc.join()
            if proc.exitcode:
                raise SystemExit(f"generation failed ({proc.exitcode})")
        print(json.dumps(dict(rows=args.rows, features=args.features, sqlcal=_commit(),
                              generated_s=round(time.perf_counter() - t0, 1),
                              file_mb=round(os.path.getsize(path) / 2**20))), flush=True)
        for depth in args.depths:
            for strategy in args.strategies:
                queue = ctx.Queue()
                proc = ctx.Process(target=_measure, args=(path, args.features, depth,
                                                          args.mode, queue, strategy))
                proc.start()
                print(json.dumps(dict(rows=args.rows, features=args.features,
                                      **_result(proc, queue, args.timeout, depth=depth,
                                                strategy=strategy))), flush=True)
        if args.mcgrad:
            queue = ctx.Queue()
            proc = ctx.Process(target=_measure_mcgrad, args=(path, args.features, queue))
            proc.start()
            print(json.dumps(dict(rows=args.rows, features=args.features,
                                  **_result(proc, queue, peer="mcgrad"))), flush=True)
    finally:
        if args.keep:
            print(f"kept {path}")
        else:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
