"""Benchmark: the cost of many groups. ECE and the default report on a fixed number of rows split
into 1 to 10^5 groups, each task in a fresh process.

Run from the repository root::

    nice -n 5 python bench/bench_groups.py                       # 10^6 rows; 1, 100, 10^4, 10^5
    nice -n 5 python bench/bench_groups.py --groups 1 1000 --tasks ece
    nice -n 5 python bench/bench_groups.py --commit HEAD~3       # an earlier commit's sqlcal/

Data. One DuckDB file per group count, ``<dir>/groups_<rows>_<groups>g.duckdb`` (``--dir``,
default ``bench/out``; deleted after the run unless ``--keep``), table ``preds`` written by
DuckDB's own SQL: ``g`` BIGINT = hash(i) mod G (every group about rows/G rows), ``p`` DOUBLE a
continuous score σ(−1 + 1.2 z), ``y`` TINYINT ~ Bernoulli(σ(logit(p)/1.1)).

Measurement. A task imports sqlcal, opens the file read-only, then calls ``sqlcal.ece`` or
``sqlcal.report`` (default metrics) once with ``score="p", label="y", by="g"``. Reported: the
CPU seconds of the call (user + sys of every thread, ``getrusage``) and the resident memory it
adds (peak minus the high-water mark after imports). ``× 1 group`` is the CPU over the same
task's at one group.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out"
TASKS = ("ece", "report")
GENERATE_SQL = """
CREATE TABLE preds AS
SELECT (hash(3 * i) % {groups})::BIGINT AS g, s AS p,
       (((hash(3 * i + 1) >> 11)::DOUBLE + 0.5) * pow(2, -53)
        < 1 / (1 + exp(-ln(s / (1 - s)) / 1.1)))::TINYINT AS y
FROM (SELECT i, 1 / (1 + exp(-(-1 + 1.2 * sqrt(-2 * ln(((hash(3 * i + 2) >> 11)::DOUBLE + 0.5)
                                                       * pow(2, -53)))
                                   * cos(2 * pi() * ((hash(3 * i + 4) >> 11)::DOUBLE + 0.5)
                                         * pow(2, -53))))) AS s
      FROM range({rows}) t(i))
"""


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def task_main(name: str, db: str) -> None:
    import ibis

    import sqlcal

    con = ibis.duckdb.connect(db, read_only=True)
    t = con.table("preds")
    base = peak_mb()
    c0 = cpu_s()
    out = getattr(sqlcal, name)(t, score="p", label="y", by="g")
    print(json.dumps({"cpu_s": cpu_s() - c0, "added_rss_mb": peak_mb() - base,
                      "result_rows": len(out), "sqlcal": sqlcal.__file__}))


def make_data(path: Path, rows: int, groups: int) -> None:
    import duckdb

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.duckdb")
    tmp.unlink(missing_ok=True)
    with duckdb.connect(str(tmp)) as con:
        con.execute(GENERATE_SQL.format(rows=rows, groups=groups))
        con.execute("CHECKPOINT")
    tmp.rename(path)


def export(commit: str) -> Path:
    """The commit's sqlcal/ package, extracted under bench/out/ (as bench_report.py does)."""
    sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", commit], check=True,
                         capture_output=True, text=True).stdout.strip()
    dest = OUT / f"src_{sha[:12]}"
    if not (dest / "sqlcal" / "__init__.py").exists():
        dest.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", sha, "sqlcal"],
                                 check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=float, default=1e6)
    ap.add_argument("--groups", type=int, nargs="+", default=[1, 100, 10_000, 100_000])
    ap.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS)
    ap.add_argument("--dir", type=Path, default=OUT)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--commit", help="measure this commit's sqlcal/ instead of the working tree")
    ap.add_argument("--timeout", type=float, default=1800,
                    help="stop a task after this many wall seconds (and say so)")
    ap.add_argument("--task", help=argparse.SUPPRESS)
    ap.add_argument("--db", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.task:
        return task_main(args.task, args.db)
    import os

    rows = int(args.rows)
    env = dict(os.environ)
    if args.commit:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(export(args.commit)),
                                                          env.get("PYTHONPATH")]))
    results = {}
    for groups in args.groups:
        db = args.dir / f"groups_{rows}_{groups}g.duckdb"
        if not db.exists():
            make_data(db, rows, groups)
        try:
            for name in args.tasks:
                t0 = time.perf_counter()
                try:
                    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()),
                                           "--task", name, "--db", str(db)],
                                          capture_output=True, text=True, env=env,
                                          timeout=args.timeout)
                except subprocess.TimeoutExpired:
                    results[(name, groups)] = {"timeout": args.timeout}
                    print(f"  {groups} groups {name}: stopped after {args.timeout:.0f} s",
                          file=sys.stderr)
                    continue
                if proc.returncode:
                    print(f"{name} at {groups} groups FAILED:\n{proc.stderr[-3000:]}",
                          file=sys.stderr)
                    results[(name, groups)] = None
                    continue
                results[(name, groups)] = json.loads(proc.stdout.strip().splitlines()[-1])
                print(f"  {groups} groups {name}: {time.perf_counter() - t0:.0f} s wall "
                      f"{results[(name, groups)]}", file=sys.stderr)
        finally:
            if not args.keep:
                db.unlink(missing_ok=True)
    what = f"commit {args.commit}" if args.commit else "working tree"
    print(f"\n### many groups: {rows:,} rows, DuckDB, one run each ({what})\n")
    print("| task | groups | CPU s | × 1 group | +RSS MB |")
    print("|---|---|---|---|---|")
    for (name, groups), r in results.items():
        if r is None:
            print(f"| `{name}` | {groups:,} | error | | |")
            continue
        if "timeout" in r:
            print(f"| `{name}` | {groups:,} | not done in {r['timeout']:.0f} s (wall) | | |")
            continue
        one = results.get((name, min(args.groups)))
        ratio = f"{r['cpu_s'] / one['cpu_s']:.1f}" if one and "cpu_s" in one else ""
        print(f"| `{name}` | {groups:,} | {r['cpu_s']:.2f} | {ratio} | {r['added_rss_mb']:.0f} |")


if __name__ == "__main__":
    main()
