"""Benchmark: every public metric at a given size, on float32-resolution and on continuous scores,
each in a fresh process: CPU seconds and the resident memory it adds.

Run from the repository root (niced: the machine may be shared)::

    nice -n 5 python bench/bench_memory.py --rows 1e6                     # a smoke run
    nice -n 5 python bench/bench_memory.py --rows 1e8 --dir /big/disk     # ~2.5 GB of data a kind
    nice -n 5 python bench/bench_memory.py --rows 1e7 --metrics tce isotonic --kinds float32

Data. One DuckDB file per score kind, ``<dir>/memory_<kind>_<rows>_<groups>g.duckdb`` (``--dir``,
default ``bench/out``), table ``preds``, written by DuckDB's own SQL from ``range(N)`` (row hashes
as uniforms, so the same on every run; deleted after the run unless ``--keep``):

- ``g`` VARCHAR, ``groups`` groups 'g0', 'g1', ...;
- ``p``: a score s = σ(−1 + 1.2 z), z standard normal, stored as DOUBLE (``continuous``: about one
  distinct score per row) or as FLOAT (``float32``: the resolution of a logged float32 score;
  about 16.7 million distinct scores at 10^8 rows, most of them tied);
- ``y`` TINYINT ~ Bernoulli(σ(logit(s)/1.1)): the model is 10% over-confident;
- ``w`` DOUBLE, whole numbers 1 + ⌊Exp(1)⌋ (frequency weights, for the weighted variants).

Measurement. Every task runs in a fresh subprocess that imports sqlcal, opens the file with
``ibis.duckdb.connect(path, read_only=True)``, then calls one metric once on ``con.table("preds")``
with ``score="p", label="y", by="g"`` (the validation scan included). Reported: CPU seconds (user +
sys of every thread of the process, ``getrusage``) of the call, and ``+RSS``, the process's peak
resident memory minus its high-water mark after imports and connecting (what the call adds: the
engine's buffers for the table and its hash tables, the fetched summaries, the finish). The
driver polls each task's resident memory and stops a task that passes ``--limit-gb`` (12 by
default): the table then says "stopped" with the memory and CPU seconds reached.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out"
KINDS = ("float32", "continuous")

# u_k(i): a uniform in (0, 1) from the row number's hash (53 bits), the same on every run
_U = "((hash(4 * i + {k}) >> 11)::DOUBLE + 0.5) * pow(2, -53)"
GENERATE_SQL = f"""
CREATE TABLE preds AS
SELECT 'g' || (hash(4 * i + 3) % {{groups}})::VARCHAR AS g,
       s::{{type}} AS p,
       (({_U.format(k=2)}) < 1 / (1 + exp(-ln(s / (1 - s)) / 1.1)))::TINYINT AS y,
       1 + floor(-ln({_U.format(k=3)})) AS w
FROM (
  SELECT i, 1 / (1 + exp(-(-1 + 1.2 * sqrt(-2 * ln({_U.format(k=0)}))
                                   * cos(2 * pi() * {_U.format(k=1)})))) AS s
  FROM range({{rows}}) t(i)
)
"""

#: the metrics, each called with its defaults (options a metric requires are given here)
METRICS = {
    "ece": {}, "reliability": {}, "brier_decomposition": {}, "hosmer_lemeshow": {},
    "debiased_ece": {}, "brier": {}, "log_loss": {}, "calibration_in_the_large": {},
    "spiegelhalter": {}, "calibration_ratio": {}, "normalized_entropy": {},
    "cutoff_error": {}, "ks": {}, "kuiper": {}, "smooth_ece": {}, "smooth_reliability": {},
    "ls_ece": {}, "tce": {}, "tce_bins": {}, "distance_to_calibration": {},
    "interval_calibration_error": {}, "lipschitz_calibration_error": {},
    "decision_loss": {"threshold": 0.5}, "calibration_decision_loss": {}, "decision_risk_gap": {},
    "expected_cost": {"actions": {"act": (0.0, 0.3), "wait": (1.0, 0.0)}},
    "calibration_slope": {}, "decompose": {}, "isotonic": {}, "platt": {}, "report": {},
}
#: weighted variants run with --weighted (frequency weights ``w``)
WEIGHTED = ("report",)


def db_path(directory: Path, kind: str, rows: int, groups: int) -> Path:
    return directory / f"memory_{kind}_{rows}_{groups}g.duckdb"


def make_data(path: Path, kind: str, rows: int, groups: int) -> dict:
    """Write the table (in this process: the driver calls it through a subprocess)."""
    import duckdb

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.duckdb")
    tmp.unlink(missing_ok=True)
    t0 = time.process_time()
    with duckdb.connect(str(tmp)) as con:
        con.execute(GENERATE_SQL.format(groups=groups, rows=rows,
                                        type="FLOAT" if kind == "float32" else "DOUBLE"))
        con.execute("CHECKPOINT")
        distinct = con.execute("SELECT count(DISTINCT p) FROM preds").fetchone()[0]
    tmp.rename(path)
    return {"distinct_scores": distinct, "generate_cpu_s": time.process_time() - t0,
            "bytes": path.stat().st_size}


def run_metric(name: str, t, weighted: bool):
    import sqlcal

    kw = dict(score="p", label="y", by="g", **METRICS[name])
    if weighted:
        kw["weight"] = "w"
    return getattr(sqlcal, name)(t, **kw)


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def task_main(name: str, db: str, weighted: bool, report: Path) -> None:
    """Subprocess entry point: one call; its figures as JSON in ``report`` (first the CPU
    seconds spent before the call, which the driver needs if it stops the task)."""
    import ibis

    import sqlcal  # noqa: F401 (imported before the baseline)

    con = ibis.duckdb.connect(db, read_only=True)
    t = con.table("preds")
    base = peak_mb()
    c0, w0 = cpu_s(), time.perf_counter()
    report.write_text(json.dumps({"cpu_before_s": c0}))
    run_metric(name, t, weighted)
    report.write_text(json.dumps({"cpu_s": cpu_s() - c0, "wall_s": time.perf_counter() - w0,
                                  "peak_rss_mb": peak_mb(), "base_rss_mb": base,
                                  "added_rss_mb": peak_mb() - base}))


def rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmRSS:"))
    except (OSError, StopIteration):
        return 0.0


def child_cpu_s(pid: int) -> float:
    """User + sys seconds of a running process (every thread), from /proc."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError):
        return 0.0


def spawn(name: str, db: Path, weighted: bool, limit_mb: float) -> dict:
    report = db.with_suffix(f".{name}.json")
    report.unlink(missing_ok=True)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--task", name, "--db", str(db),
           "--report", str(report)]
    if weighted:
        cmd.append("--weighted")
    with open(report.with_suffix(".err"), "w+") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
        peak = 0.0
        while proc.poll() is None:
            time.sleep(0.25)
            peak = max(peak, rss_mb(proc.pid))
            if peak > limit_mb:
                cpu = child_cpu_s(proc.pid)
                proc.kill()
                proc.wait()
                before = json.loads(report.read_text()).get("cpu_before_s", 0.0)
                report.unlink(missing_ok=True)
                return {"stopped": True, "rss_mb": peak, "cpu_s": cpu - before}
        err.seek(0)
        text = err.read().strip()
    report.with_suffix(".err").unlink(missing_ok=True)
    if proc.returncode != 0:
        print(f"{name} FAILED:\n{text[-3000:]}", file=sys.stderr)
        report.unlink(missing_ok=True)
        return {"error": text.splitlines()[-1] if text else f"exit {proc.returncode}"}
    out = json.loads(report.read_text())
    report.unlink()
    return out


def command(args, kind: str, name: str, weighted: bool) -> str:
    rows = f"{args.rows:.0e}".replace("+0", "").replace("+", "")
    return (f"python bench/bench_memory.py --rows {rows} --groups {args.groups} --kinds {kind} "
            f"--metrics {name}" + (" --weighted" if weighted else ""))


def row(name: str, kind: str, weighted: bool, r: dict, cmd: str) -> str:
    label = f"`{name}`" + (", weighted" if weighted else "")
    if "error" in r:
        return f"| {label} | {kind} | error: {r['error'][:80]} | | `{cmd}` |"
    if r.get("stopped"):
        return (f"| {label} | {kind} | stopped at {r['cpu_s']:.1f} | > {r['rss_mb'] / 1024:.1f} GB "
                f"(resident) | `{cmd}` |")
    return f"| {label} | {kind} | {r['cpu_s']:.1f} | {r['added_rss_mb']:.0f} | `{cmd}` |"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=float, default=1e6)
    ap.add_argument("--groups", type=int, default=10)
    ap.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS)
    ap.add_argument("--metrics", nargs="+", default=list(METRICS), choices=list(METRICS))
    ap.add_argument("--weighted", action="store_true",
                    help="also run the weighted variants (frequency weights w) of: "
                    + ", ".join(WEIGHTED))
    ap.add_argument("--dir", type=Path, default=OUT, help="where the data files go")
    ap.add_argument("--keep", action="store_true", help="keep the data files after the run")
    ap.add_argument("--limit-gb", type=float, default=12.0,
                    help="stop a task whose resident memory passes this")
    ap.add_argument("--out", type=Path, help="JSON of the results")
    ap.add_argument("--task", help=argparse.SUPPRESS)  # subprocess entry points
    ap.add_argument("--db", help=argparse.SUPPRESS)
    ap.add_argument("--make-data", help=argparse.SUPPRESS)
    ap.add_argument("--report", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.task:
        return task_main(args.task, args.db, args.weighted, args.report)
    rows = int(args.rows)
    if args.make_data:
        print(json.dumps(make_data(Path(args.db), args.make_data, rows, args.groups)))
        return None
    results, lines = [], []
    for kind in args.kinds:
        db = db_path(args.dir, kind, rows, args.groups)
        if not db.exists():
            print(f"generating {rows:,} rows ({kind}) into {db} ...", file=sys.stderr)
            made = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--make-data",
                                   kind, "--db", str(db), "--rows", str(rows), "--groups",
                                   str(args.groups)], check=True, text=True,
                                  stdout=subprocess.PIPE).stdout
            print(f"  {made.strip()}", file=sys.stderr)
        try:
            for name in args.metrics:
                for weighted in (False, True) if args.weighted and name in WEIGHTED else (False,):
                    t0 = time.perf_counter()
                    r = spawn(name, db, weighted, args.limit_gb * 1024)
                    cmd = command(args, kind, name, weighted)
                    results.append({"metric": name, "kind": kind, "weighted": weighted, **r})
                    lines.append(row(name, kind, weighted, r, cmd))
                    print(f"  {kind} {name}{' weighted' if weighted else ''}: "
                          f"{time.perf_counter() - t0:.0f} s wall  {lines[-1]}", file=sys.stderr)
        finally:
            if not args.keep:
                db.unlink(missing_ok=True)
    print(f"\n### every public metric: {rows:,} rows, {args.groups} groups, DuckDB, one run each\n")
    print("| metric | scores | CPU s | +RSS MB | command |")
    print("|---|---|---|---|---|")
    print("\n".join(lines))
    if args.out:
        args.out.write_text(json.dumps({"rows": rows, "groups": args.groups,
                                        "results": results}, indent=2))


if __name__ == "__main__":
    main()
