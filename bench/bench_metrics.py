"""Benchmark: sqlcal's grouped calibration metrics against a bare grouped scan and a fetch-then-compute peer.

Run from the repository root::

    python bench/bench_metrics.py --rows 1e6 1e7                # the usual check (a few minutes)
    python bench/bench_metrics.py --rows 1e8                    # on demand only: ~2 GB of data
    python bench/bench_metrics.py --rows 1e6 --groups 10 --out bench/out/results.json

Data. For each row count a DuckDB file ``bench/out/preds_<rows>_<groups>g.duckdb`` (gitignored) holds
table ``preds``: ``g`` VARCHAR ('g0'..'g9'), ``p`` DOUBLE ~ Beta(2, 5), ``y`` TINYINT ~
Bernoulli(sigmoid(1.5 logit(p) + 0.2)) (over-confident with a shift, so the gap changes sign across
the score range and the binning matters), ``w`` DOUBLE ~ Exp(1). It is generated with numpy in chunks
of 1e6 rows and reused when it already holds the right number of rows.

Measurement. Every task runs in a fresh subprocess (``--task NAME``) that imports, connects with
``ibis.duckdb.connect(path, read_only=True, threads=2)`` and then runs the task 3 times. Reported:
wall seconds and CPU seconds (user + sys of all threads, ``time.process_time``), each the median of
the 3 repetitions; peak RSS (``ru_maxrss`` of the process plus its children) over the whole
subprocess, and ``+RSS``, the peak minus the high-water mark already reached after imports and
connecting (the part the task itself adds). Imports and connecting are not timed. (On Linux a child's
ru_maxrss starts at its parent's high-water mark, so data are generated in a subprocess too and the
driver stays small; the process image's own ``VmHWM`` is recorded in the JSON as a cross-check.)

Tasks, all grouped by ``g``:

    floor        SELECT g, count(*), sum(p), sum(y) FROM preds GROUP BY g  (the bare grouped scan)
    ece          sqlcal.ece, 15 equal-width bins, validation pass included (fresh call each time)
    ece_w        the same with weight='w'
    ece_q        sqlcal.ece strategy='quantile' (exact engine quantiles), unweighted
    hl           sqlcal.hosmer_lemeshow (deciles of risk)
    totals       sqlcal.brier + sqlcal.spiegelhalter (totals-only metrics)
    report       one sqlcal.source, then ece, reliability, brier_decomposition, brier, log_loss,
                 spiegelhalter, hosmer_lemeshow on it
    peer         fetch g, p, y to arrow/numpy, then per group: 15-bin ECE (np.bincount),
                 sklearn brier_score_loss and sklearn calibration_curve
    peer_user    the peer as its users write it (the README's comparison): fetch g, p, y to Arrow,
                 numpy arrays, then per group a boolean mask and np.histogram (counts, Σp, Σy)
                 for the 15-bin ECE
    ece_brier_curve  one sqlcal.source, then sqlcal.report(metrics=("ece", "brier")) and
                 sqlcal.reliability (15 bins) on it
    peer_user_curve  peer_user plus, per group, scikit-learn brier_score_loss and
                 calibration_curve (the same three results as ece_brier_curve)
    peer_q       fetch as above, then per group the quantile ECE (np.quantile edges + searchsorted)

Ratios. ``CPU/floor`` = CPU(task) / CPU(floor) for the sqlcal tasks: how many bare grouped scans a
metric costs (targets: equal-width and totals-only metrics <= 3x, quantile metrics <= 5x).
For the peers, ``peer/sqlcal CPU`` = CPU(peer) / CPU(ece) (CPU(peer_q) / CPU(ece_q)), and ``peer/sqlcal
RSS`` the same for peak RSS (targets at 1e7 rows: >= 3x and >= 10x). The targets are printed, not
asserted. The peers' ECE values are checked against sqlcal's (they use the same bins).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out"
CHUNK = 1_000_000
BINS = 15
THREADS = 2
REPS = 3

SQLCAL_TASKS = ["ece", "ece_w", "ece_q", "hl", "totals", "report", "ece_brier_curve", "cutoff",
                "cutoff_grid",
                "ls_ece", "smooth_ece", "tce", "tce_q", "isotonic", "isotonic_levels",
                "isotonic_engine"]
TASKS = ["floor", "sort", *SQLCAL_TASKS, "peer", "peer_user", "peer_user_curve", "peer_q",
         "peer_cutoff", "peer_smece", "peer_tce", "peer_isotonic"]
CPU_TARGET = {"ece": 3, "ece_w": 3, "totals": 3, "ece_q": 5, "hl": 5,
              "cutoff_grid": 3}  # x CPU(floor)
SORT_TARGET = {"cutoff": 1.5}  # x CPU(sort): exact cutoff vs the cheapest exact alternative
PEERS = {"peer": "ece", "peer_user": "ece", "peer_user_curve": "ece_brier_curve",
         "peer_q": "ece_q", "peer_cutoff": "cutoff",
         "peer_smece": "smooth_ece", "peer_tce": "tce_q",
         "peer_isotonic": "isotonic"}  # peer -> sqlcal task


# -- data ----------------------------------------------------------------------------------------


def db_path(rows: int, groups: int) -> Path:
    return OUT / f"preds_{rows}_{groups}g.duckdb"


def ensure_data(rows: int, groups: int) -> Path:
    """Create the table ``preds`` with ``rows`` rows unless a file with that many rows exists."""
    import duckdb
    import pyarrow as pa

    path = db_path(rows, groups)
    if path.exists():
        try:  # an unreadable file (e.g. written by a newer DuckDB) is regenerated too
            with duckdb.connect(str(path), read_only=True) as con:
                if con.execute("SELECT count(*) FROM preds").fetchone()[0] == rows:
                    return path
        except duckdb.Error:
            pass
        path.unlink()
    OUT.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.duckdb")
    tmp.unlink(missing_ok=True)
    print(f"generating {rows:,} rows into {path.relative_to(ROOT)} ...", file=sys.stderr)
    with duckdb.connect(str(tmp)) as con:
        con.execute("CREATE TABLE preds (g VARCHAR, p DOUBLE, y TINYINT, w DOUBLE)")
        for i, start in enumerate(range(0, rows, CHUNK)):
            n = min(CHUNK, rows - start)
            rng = np.random.default_rng([20240, i])
            p = rng.beta(2.0, 5.0, n)
            true = 1.0 / (1.0 + np.exp(-(1.5 * np.log(p / (1.0 - p)) + 0.2)))
            chunk = pa.table({  # noqa: F841 (read by the INSERT below)
                "gi": rng.integers(0, groups, n, dtype=np.int16),
                "p": p,
                "y": (rng.random(n) < true).astype(np.int8),
                "w": rng.exponential(1.0, n),
            })
            con.execute("INSERT INTO preds SELECT 'g' || gi, p, y, w FROM chunk")
        con.execute("CHECKPOINT")
    tmp.rename(path)
    return path


# -- tasks (run inside the subprocess) -----------------------------------------------------------


def _fetch(t):
    """The peer's fetch: g, p, y to arrow, then numpy arrays sorted by group."""
    import pyarrow.compute as pc

    at = t.select("g", "p", "y").to_pyarrow().combine_chunks()
    g = pc.dictionary_encode(at["g"]).chunk(0)
    codes = g.indices.to_numpy()
    keys = g.dictionary.to_pylist()
    order = np.argsort(codes, kind="stable")
    p = at["p"].to_numpy()[order]
    y = at["y"].to_numpy()[order].astype(np.float64)
    bounds = np.concatenate([[0], np.cumsum(np.bincount(codes, minlength=len(keys)))])
    return {k: (p[bounds[i]:bounds[i + 1]], y[bounds[i]:bounds[i + 1]]) for i, k in enumerate(keys)}


def _binned_ece(p, y, b):
    sp = np.bincount(b, weights=p, minlength=BINS)
    sy = np.bincount(b, weights=y, minlength=BINS)
    return float(np.abs(sy - sp).sum() / len(p))


def task_peer(t):
    from sklearn.calibration import calibration_curve
    from sklearn.metrics import brier_score_loss

    out = {}
    for k, (p, y) in _fetch(t).items():
        ece = _binned_ece(p, y, np.minimum((p * BINS).astype(np.int64), BINS - 1))
        brier_score_loss(y, p)
        calibration_curve(y, p, n_bins=BINS)
        out[k] = ece
    return out


def task_peer_cutoff(t):
    """Fetch, then per group: sort, merge ties, running residual sum, range (exact cutoff)."""
    out = {}
    for k, (p, y) in _fetch(t).items():
        order = np.argsort(p, kind="stable")
        ps, r = p[order], (y - p)[order]
        last = np.append(ps[1:] != ps[:-1], True)  # ends of tie groups
        s = np.concatenate([[0.0], np.cumsum(r)[last]])
        out[k] = float((s.max() - s.min()) / len(p))
    return out


def task_peer_tce(t):
    """The reference's way: one scipy binomtest per prediction (quantile bins). Too slow to run
    in full: 2,000 predictions per group are timed and the CPU time is scaled to all rows."""
    from scipy import stats

    out = {}
    for k, (p, y) in _fetch(t).items():
        order = np.argsort(p, kind="stable")
        ids = np.empty(len(p), int)
        ids[order] = ((np.arange(len(p)) + 1) * 10 - 1) // len(p)
        sample = np.random.default_rng(0).choice(len(p), min(2000, len(p)), replace=False)
        kb = np.bincount(ids, weights=y)
        nb = np.bincount(ids)
        start = time.process_time()
        rejected = sum(stats.binomtest(int(kb[ids[i]]), int(nb[ids[i]]), p[i]).pvalue <= 0.05
                       for i in sample)
        spent = time.process_time() - start
        out[k] = {"sample_tce": 100 * rejected / len(sample),
                  "extrapolated_cpu_s": spent * len(p) / len(sample)}
    return out


def task_peer_isotonic(t):
    """Fetch, then per group scikit-learn's IsotonicRegression (it sorts and pools ties itself)."""
    from sklearn.isotonic import IsotonicRegression

    out = {}
    for g, (p, y) in _fetch(t).items():
        fit = IsotonicRegression(out_of_bounds="clip").fit(p, y)
        out[g] = float(np.mean(fit.predict(p)))  # = the group's rate: a check both must share
    return out


def task_peer_q(t):
    out = {}
    for k, (p, y) in _fetch(t).items():
        edges = np.quantile(p, np.arange(1, BINS) / BINS)
        out[k] = _binned_ece(p, y, np.searchsorted(edges, p, side="left"))  # right-closed bins
    return out


def _user_fetch(t):
    """The peer's fetch as users write it: the columns to Arrow, then numpy arrays (the group
    as dictionary codes, so a mask per group compares integers, not strings)."""
    at = t.select("g", "p", "y").to_pyarrow().combine_chunks()
    g = at["g"].dictionary_encode().chunk(0)
    keys = np.asarray(g.dictionary.to_pylist(), dtype=object)
    return (keys, g.indices.to_numpy()), at["p"].to_numpy(), at["y"].to_numpy().astype(np.float64)


def _user_ece(p, y):
    """15-bin ECE with np.histogram on [0, 1] (last bin closed, as sqlcal's bins)."""
    counts, _ = np.histogram(p, bins=BINS, range=(0.0, 1.0))
    sum_p, _ = np.histogram(p, bins=BINS, range=(0.0, 1.0), weights=p)
    sum_y, _ = np.histogram(p, bins=BINS, range=(0.0, 1.0), weights=y)
    return float(np.abs(sum_y - sum_p).sum() / counts.sum())


def task_peer_user(t, curve: bool = False):
    from sklearn.calibration import calibration_curve
    from sklearn.metrics import brier_score_loss

    (keys, codes), p, y = _user_fetch(t)
    out = {}
    for i, k in enumerate(keys):
        mask = codes == i
        pk, yk = p[mask], y[mask]
        out[str(k)] = _user_ece(pk, yk)
        if curve:
            brier_score_loss(yk, pk)
            calibration_curve(yk, pk, n_bins=BINS)
    return out


def _ece_dict(df):
    return dict(zip(df["g"], df["ece"].astype(float)))


def run_task(name: str, con):
    """Run one task once; return a small JSON-able check value (ECE per group where there is one)."""
    import sqlcal

    t = con.table("preds")
    kw = dict(score="p", label="y", by="g")
    if name == "floor":
        con.raw_sql("SELECT g, count(*), sum(p), sum(y) FROM preds GROUP BY g").fetchall()
    elif name == "ece":
        return _ece_dict(sqlcal.ece(t, **kw, bins=BINS))
    elif name == "ece_w":
        sqlcal.ece(t, **kw, weight="w", bins=BINS)
    elif name == "ece_q":
        return _ece_dict(sqlcal.ece(t, **kw, bins=BINS, strategy="quantile"))
    elif name == "hl":
        sqlcal.hosmer_lemeshow(t, **kw)
    elif name == "sort":  # the cheapest exact alternative for the cutoff error: a bare sort
        con.raw_sql("SELECT max(x) FROM (SELECT p + 0 AS x FROM preds ORDER BY p)").fetchall()
    elif name == "totals":
        sqlcal.brier(t, **kw)
    elif name == "report":  # every default metric of sqlcal.report, one pass per summary
        sqlcal.report(t, **kw)
    elif name == "cutoff":
        df = sqlcal.cutoff_error(t, **kw)
        return dict(zip(df["g"], df["cutoff_error"].astype(float)))
    elif name == "cutoff_grid":
        sqlcal.cutoff_error(t, **kw, method="grid")
    elif name == "peer_cutoff":
        return task_peer_cutoff(t)
    elif name == "ls_ece":
        sqlcal.ls_ece(t, **kw, noise_scale=0.1)
    elif name == "smooth_ece":
        df = sqlcal.smooth_ece(t, **kw)
        return dict(zip(df["g"], df["smooth_ece"].astype(float)))
    elif name == "tce":  # PAVA-BC bins (the paper's default)
        df = sqlcal.tce(t, **kw)
        return dict(zip(df["g"], df["tce"].astype(float)))
    elif name == "tce_q":
        df = sqlcal.tce(t, **kw, strategy="quantile")
        return dict(zip(df["g"], df["tce"].astype(float)))
    elif name == "peer_tce":
        return task_peer_tce(t)
    elif name in ("isotonic", "isotonic_levels", "isotonic_engine"):
        method = {"isotonic": "auto", "isotonic_levels": "exact", "isotonic_engine": "engine"}
        m = sqlcal.isotonic(t, **kw, method=method[name])
        return {g: float(part["value"].to_numpy() @ part["W"].to_numpy() / part["W"].sum())
                for g, part in m.table.groupby("g")}
    elif name == "peer_isotonic":
        return task_peer_isotonic(t)
    elif name == "peer_smece":
        import relplot

        return {k: float(relplot.smECE(p, y)) for k, (p, y) in _fetch(t).items()}
    elif name == "peer":
        return task_peer(t)
    elif name == "peer_user":
        return task_peer_user(t)
    elif name == "peer_user_curve":
        return task_peer_user(t, curve=True)
    elif name == "ece_brier_curve":
        src = sqlcal.source(t, **kw)
        df = sqlcal.report(src, metrics=("ece", "brier"), bins=BINS)
        sqlcal.reliability(src, bins=BINS)
        return _ece_dict(df)
    elif name == "peer_q":
        return task_peer_q(t)
    else:
        raise ValueError(f"unknown task {name!r}")
    return None


def peak_rss_mb() -> float:
    kb = sum(resource.getrusage(who).ru_maxrss
             for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return kb / 1024  # ru_maxrss is in KiB on Linux


def vmhwm_mb() -> float | None:
    """This process image's own RSS high-water mark (Linux), to cross-check ru_maxrss."""
    try:
        with open("/proc/self/status") as f:
            return next(int(l.split()[1]) / 1024 for l in f if l.startswith("VmHWM:"))
    except (OSError, StopIteration):
        return None


def task_main(name: str, db: str, reps: int) -> None:
    """Subprocess entry point: time ``reps`` runs of one task; print one JSON line."""
    sys.path.insert(0, str(ROOT))
    import ibis
    import sklearn.calibration  # noqa: F401
    import sklearn.metrics  # noqa: F401

    import sqlcal  # noqa: F401  (imported before the baseline, like the peers' sklearn)

    con = ibis.duckdb.connect(db, read_only=True, threads=THREADS)
    con.table("preds")
    base_rss, load = peak_rss_mb(), os.getloadavg()[0]
    walls, cpus, check = [], [], None
    for _ in range(reps):
        w0, c0 = time.perf_counter(), time.process_time()
        check = run_task(name, con)
        walls.append(time.perf_counter() - w0)
        cpus.append(time.process_time() - c0)
    peak = peak_rss_mb()
    print(json.dumps({
        "wall_s": statistics.median(walls), "cpu_s": statistics.median(cpus),
        "walls": walls, "cpus": cpus, "peak_rss_mb": peak, "base_rss_mb": base_rss,
        "task_rss_mb": peak - base_rss, "vmhwm_mb": vmhwm_mb(), "load1": load, "check": check,
    }))


# -- driver --------------------------------------------------------------------------------------


def spawn(name: str, db: Path, reps: int) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--task", name, "--db", str(db),
           "--reps", str(reps)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        print(f"task {name} FAILED:\n{proc.stderr}", file=sys.stderr)
        return {"error": proc.stderr.strip()}
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    if r["vmhwm_mb"] and r["peak_rss_mb"] > 1.05 * r["vmhwm_mb"]:
        print(f"warning: {name}: ru_maxrss {r['peak_rss_mb']:.0f} MB > VmHWM {r['vmhwm_mb']:.0f} MB "
              "(inherited from the driver?)", file=sys.stderr)
    return r


def ratios(res: dict) -> None:
    """Add CPU/floor to the sqlcal tasks and peer/sqlcal ratios to the peers (in place)."""
    ok = lambda k: k in res and "error" not in res[k]  # noqa: E731
    for name in SQLCAL_TASKS:
        if ok(name) and ok("floor"):
            res[name]["cpu_vs_floor"] = res[name]["cpu_s"] / res["floor"]["cpu_s"]
        if ok(name) and ok("sort"):
            res[name]["cpu_vs_sort"] = res[name]["cpu_s"] / res["sort"]["cpu_s"]
    for peer, ref in PEERS.items():
        if ok(peer) and ok(ref):
            res[peer]["cpu_vs_sqlcal"] = res[peer]["cpu_s"] / res[ref]["cpu_s"]
            res[peer]["rss_vs_sqlcal"] = res[peer]["peak_rss_mb"] / res[ref]["peak_rss_mb"]
            res[peer]["task_rss_vs_sqlcal"] = res[peer]["task_rss_mb"] / max(res[ref]["task_rss_mb"], 1)
            a, b = res[peer].get("check") or {}, res[ref].get("check") or {}
            if a and isinstance(next(iter(a.values())), dict):  # extrapolated peer (TCE)
                cpu = sum(v["extrapolated_cpu_s"] for v in a.values())
                res[peer]["cpu_s_extrapolated"] = cpu
                res[peer]["cpu_vs_sqlcal"] = cpu / res[ref]["cpu_s"]
                res[peer]["max_abs_ece_diff"] = None
                continue
            res[peer]["max_abs_ece_diff"] = max(abs(a[k] - b[k]) for k in b) if a and b else None


def fmt(x, spec=".2f", suffix=""):
    return "—" if x is None else f"{x:{spec}}{suffix}"


def table(rows: int, res: dict) -> str:
    head = ("| task | rows | wall s | CPU s | peak RSS MB | +RSS MB | CPU/floor | CPU/sort | "
            "peer/sqlcal CPU | peer/sqlcal RSS (+RSS) |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for name in TASKS:
        r = res.get(name)
        if r is None:
            continue
        if "error" in r:
            lines.append(f"| {name} | {rows:.0e} | ERROR | | | | | | | |")
            continue
        rss = r.get("rss_vs_sqlcal")
        rss_s = "—" if rss is None else f"{rss:.2f}x ({r['task_rss_vs_sqlcal']:.1f}x)"
        lines.append(
            f"| {name} | {rows:.0e} | {r['wall_s']:.3f} | {r['cpu_s']:.3f} | {r['peak_rss_mb']:.0f} | "
            f"{r['task_rss_mb']:.0f} | {fmt(r.get('cpu_vs_floor'), suffix='x')} | "
            f"{fmt(r.get('cpu_vs_sort'), suffix='x')} | "
            f"{fmt(r.get('cpu_vs_sqlcal'), suffix='x')} | {rss_s} |"
        )
    return "\n".join(lines)


def targets(rows: int, res: dict) -> str:
    out = []
    for name, limit in CPU_TARGET.items():
        x = res.get(name, {}).get("cpu_vs_floor")
        if x is not None:
            out.append(f"- {name}: CPU {x:.2f}x floor (target <= {limit}x): "
                       f"{'met' if x <= limit else 'NOT met'}")
    for name, limit in SORT_TARGET.items():
        x = res.get(name, {}).get("cpu_vs_sort")
        if x is not None:
            out.append(f"- {name}: CPU {x:.2f}x a bare sort (target <= {limit}x): "
                       f"{'met' if x <= limit else 'NOT met'}")
    for peer, ref in PEERS.items():
        r = res.get(peer, {})
        if r.get("cpu_vs_sqlcal") is None:
            continue
        scope = "" if rows >= 10**7 else " [targets apply at 1e7]"
        out.append(f"- {peer} vs {ref}: CPU {r['cpu_vs_sqlcal']:.2f}x (target >= 3x: "
                   f"{'met' if r['cpu_vs_sqlcal'] >= 3 else 'NOT met'}), peak RSS "
                   f"{r['rss_vs_sqlcal']:.2f}x (target >= 10x: "
                   f"{'met' if r['rss_vs_sqlcal'] >= 10 else 'NOT met'}; +RSS "
                   f"{r['task_rss_vs_sqlcal']:.1f}x){scope}; max |value diff| "
                   f"{fmt(r.get('max_abs_ece_diff'), '.1e')}")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=float, nargs="+", default=[1e6], help="row counts, e.g. 1e6 1e7")
    ap.add_argument("--groups", type=int, default=10)
    ap.add_argument("--out", type=Path, default=OUT / "results.json")
    ap.add_argument("--tasks", nargs="+", default=TASKS, choices=TASKS, help="subset of tasks")
    ap.add_argument("--reps", type=int, default=REPS)
    ap.add_argument("--keep-data", action="store_true",
                    help="keep the data files of 1e8 rows and more (deleted after the run)")
    ap.add_argument("--task", help=argparse.SUPPRESS)  # subprocess entry point
    ap.add_argument("--db", help=argparse.SUPPRESS)
    ap.add_argument("--make-data", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.task:
        return task_main(args.task, args.db, args.reps)
    if args.make_data:
        return print(ensure_data(int(args.rows[0]), args.groups))

    from importlib.metadata import version

    meta = {"python": platform.python_version(), "ibis": version("ibis-framework"),
            "duckdb": version("duckdb"), "numpy": np.__version__, "cpus": os.cpu_count(),
            "threads": THREADS, "reps": args.reps, "groups": args.groups, "bins": BINS,
            "commit": subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                                     capture_output=True, text=True).stdout.strip(),
            "sqlcal_dirty": bool(subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain",
                                                 "sqlcal"], capture_output=True, text=True).stdout)}
    results = []
    for rows in (int(r) for r in args.rows):
        # In a subprocess: on Linux a child's ru_maxrss starts at its parent's high-water mark
        # (kept across vfork + exec), so the driver itself must stay small.
        db = Path(subprocess.run([sys.executable, __file__, "--make-data", "--rows", str(rows),
                                  "--groups", str(args.groups)], check=True, text=True,
                                 stdout=subprocess.PIPE).stdout.strip())
        res = {}
        for name in args.tasks:
            t0 = time.perf_counter()
            res[name] = spawn(name, db, args.reps)
            print(f"  {rows:.0e} {name}: {time.perf_counter() - t0:.1f}s", file=sys.stderr)
        ratios(res)
        print(f"\n### {rows:,} rows, {args.groups} groups, threads={THREADS}, median of {args.reps}\n")
        print(table(rows, res))
        loads = [r["load1"] for r in res.values() if "load1" in r]
        if loads:  # other work on the machine skews the timings
            print(f"\n1-min load average at task start: {min(loads):.2f}-{max(loads):.2f} "
                  f"on {os.cpu_count()} CPUs")
        print("\nTargets (shown, not asserted):\n" + targets(rows, res), flush=True)
        results.append({"rows": rows, "tasks": res})
        if rows >= 10**8 and not args.keep_data:  # gigabytes: made again on demand
            db.unlink(missing_ok=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"meta": meta, "results": results}, indent=2))
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
