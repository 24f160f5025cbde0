"""Benchmark: the intervals of issue 34, their coverage and their cost.

Run from the repository root::

    nice -n 10 python bench/bench_intervals.py coverage --rows 1e3,1e4,1e5 --reps 400
    nice -n 10 python bench/bench_intervals.py smooth --rows 5e3 --reps 200
    nice -n 10 python bench/bench_intervals.py tce --rows 1e3,1e4 --reps 150
    nice -n 10 python bench/bench_intervals.py compare --rows 1e5 --reps 200
    nice -n 10 python bench/bench_intervals.py cost --rows 1e6     # 1e8 for the issue's figure

**coverage**: the share of 95% intervals holding the population value, for each metric
(ece, rmsce, mce, brier, log_loss, citl, cutoff: the cutoff error), population (calibrated, over-confident, low base rate)
and weighting (none, sampling, frequency) of ``tests/intervals_sim.py``; every sample is one
group of one summary summed in numpy, the finishes run all groups at once. Prints a Markdown
table (docs/performance.md, "Intervals").

**smooth**: the same for LS-ECE (σ = 0.1, 500 replicates; the population's LS-ECE at σ from
``tests/intervals_sim.py``'s quadrature) in every population × weighting, and TCE (PAVA-BC, the
binomial and the t-test, 500 replicates; the expected TCE at n, the mean TCE of ``--reps``
other samples) on unweighted samples.

**tce**: TCE's interval alone (PAVA-BC, the exact binomial test, 1,000 replicates of the
bootstrap that cuts the bins again) in every population, unweighted and with frequency
weights; the expected TCE at n is the mean TCE of 2·``--reps`` other samples. It prints
first the CPU seconds of 1,000 replicates of one sample of each size (PAVA-BC and quantile
bins).

**compare**: the paired comparison's rejection rate at 5% when the two score columns are equal
in distribution (false positives) and when the baseline is shifted by ``--shift`` in logit
(power), per metric (``tests/test_compare.py``'s populations).

**cost**: CPU and wall seconds of the default report with and without its intervals, on a
DuckDB table of ``--rows`` rows made by DuckDB itself (p ~ U(0, 1), y ~ Bernoulli(p), 100
groups); "without" runs the same code with every interval's summary parts turned off
(``bootstrap=0`` and no delta-method sums). Each task runs in a fresh subprocess, once. The
machine is shared: compare ratios within one run only. Target (shown, not asserted): the
intervals add at most one scan's worth of CPU (the ``floor`` task, a bare GROUP BY).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np
import pandas as pd

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def coverage(rows, reps: int, seed: int) -> pd.DataFrame:
    from tests.intervals_sim import POPULATIONS
    from tests.test_intervals import _coverage

    out = []
    metrics = ("ece", "rmsce", "mce", "brier", "log_loss", "citl", "cutoff")
    for n in rows:
        for kind in POPULATIONS:
            for weights in ("none", "sampling", "frequency"):
                t = time.time()
                c = _coverage(kind, weights, int(n), reps, metrics, seed=seed)
                out.append({"rows": int(n), "population": kind, "weights": weights, **c,
                            "seconds": round(time.time() - t, 1)})
                print(out[-1], flush=True)
    return pd.DataFrame(out)


def smooth(rows, reps: int, seed: int) -> pd.DataFrame:
    from tests.intervals_sim import POPULATIONS
    from tests.test_intervals_smooth import _ls_ece_coverage, _tce_coverage

    out = []
    for n in rows:
        for kind in POPULATIONS:
            for weights in ("none", "sampling", "frequency"):
                t = time.time()
                c = _ls_ece_coverage(kind, weights, int(n), reps, seed=seed, replicates=500)
                out.append({"rows": int(n), "metric": "ls_ece", "population": kind,
                            "weights": weights, "coverage": c,
                            "seconds": round(time.time() - t, 1)})
                print(out[-1], flush=True)
            for test in ("ttest", "binomial"):
                t = time.time()
                c = _tce_coverage(kind, int(n), reps, test, seed=seed, replicates=500)
                out.append({"rows": int(n), "metric": f"tce ({test})", "population": kind,
                            "weights": "none", "coverage": c,
                            "seconds": round(time.time() - t, 1)})
                print(out[-1], flush=True)
    return pd.DataFrame(out)


def tce(rows, reps: int, seed: int) -> pd.DataFrame:
    from sqlcal.metrics.tce import refit_draws, tce_bins_finish
    from tests.intervals_sim import POPULATIONS, sample
    from tests.test_intervals_smooth import _levels, _tce_coverage

    out = []
    for n in rows:
        # the cost: CPU seconds of 1,000 replicates on one over-confident sample of n rows
        p, y, _ = sample("overconfident", int(n), np.random.default_rng(seed))
        units: list = []
        tce_bins_finish(_levels(p, y), by=[], units=units)
        for strategy in ("pavabc", "quantile"):
            c0 = time.process_time()
            refit_draws(pd.concat(units), int(n), strategy=strategy, n_min=int(n) // 20,
                        n_max=int(n) // 5, bins=10, tail_rule="code", alpha=0.05,
                        test="binomial", replicates=1000, rng=np.random.default_rng(seed))
            print({"rows": int(n), "strategy": strategy,
                   "cpu_seconds_1000_replicates": round(time.process_time() - c0, 2)},
                  flush=True)
        for kind in POPULATIONS:
            for weights in ("none", "frequency"):
                t = time.time()
                c = _tce_coverage(kind, int(n), reps, "binomial", seed=seed, replicates=1000,
                                  weights=weights)
                out.append({"rows": int(n), "population": kind, "weights": weights,
                            "coverage": c, "seconds": round(time.time() - t, 1)})
                print(out[-1], flush=True)
    return pd.DataFrame(out)


def compare(rows: int, reps: int, shift: float) -> pd.DataFrame:
    from tests.test_compare import _rejections

    metrics = ["ece", "rmsce", "brier", "log_loss", "calibration_in_the_large"]
    out = []
    for s, name in ((0.0, "false positives"), (shift, f"power (shift {shift})")):
        rates = _rejections(rows, reps, s, 3, metrics)
        out.append({"rows": rows, "case": name, **rates})
        print(out[-1], flush=True)
    return pd.DataFrame(out)


TASKS = {
    "floor": "con.sql('SELECT g, count(*), sum(p), sum(y) FROM preds GROUP BY g').fetchall()",
    "report_without": "report(without=True)",
    "report_with": "report(without=False)",
}

CHILD = r"""
import json, sys, time
sys.path.insert(0, {root!r})
import duckdb, sqlcal
path, task = {path!r}, {task!r}
con = duckdb.connect(path, read_only=True)

def report(without):
    import ibis
    t = ibis.duckdb.connect(path, read_only=True).table("preds")
    if without:  # the same code with every interval's sums turned off
        from sqlcal.metrics import binned, scores
        scores._interval = lambda src, o, *extra: ()
        scores._log_loss_parts = lambda src, o: ()
        binned._bootstrap_parts = lambda src, o: ()
        return sqlcal.report(t, score="p", label="y", by="g", bootstrap=0)
    return sqlcal.report(t, score="p", label="y", by="g")

c0, w0 = time.process_time(), time.time()
{code}
print(json.dumps({{"cpu": time.process_time() - c0, "wall": time.time() - w0}}))
"""


def cost(rows: int) -> pd.DataFrame:
    import duckdb

    folder = os.path.join(ROOT, "bench", "out")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"intervals_{rows}.duckdb")
    if not os.path.exists(path):
        con = duckdb.connect(path)
        con.sql(f"CREATE TABLE preds AS SELECT (i % 100)::INTEGER AS g, random() AS p, "
                f"0::INTEGER AS y FROM range({rows}) t(i)")
        con.sql("UPDATE preds SET y = CASE WHEN random() < p THEN 1 ELSE 0 END")
        con.close()
    out = []
    for task, code in TASKS.items():
        script = CHILD.format(root=ROOT, path=path, task=task, code=code)
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                              check=True)
        out.append({"rows": rows, "task": task, **json.loads(done.stdout.strip().splitlines()[-1])})
        print(out[-1], flush=True)
    frame = pd.DataFrame(out)
    cpu = dict(zip(frame["task"], frame["cpu"]))
    print(f"intervals add {cpu['report_with'] - cpu['report_without']:.2f} CPU s; a bare scan "
          f"takes {cpu['floor']:.2f} CPU s (ratio {(cpu['report_with'] - cpu['report_without']) / cpu['floor']:.2f})")
    return frame


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["coverage", "smooth", "tce", "compare", "cost"])
    parser.add_argument("--rows", default="1e4")
    parser.add_argument("--reps", type=int, default=400)
    parser.add_argument("--shift", type=float, default=0.2)
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args()
    rows = [int(float(r)) for r in args.rows.split(",")]
    if args.what == "coverage":
        frame = coverage(rows, args.reps, args.seed)
    elif args.what == "smooth":
        frame = smooth(rows, args.reps, args.seed)
    elif args.what == "tce":
        frame = tce(rows, args.reps, args.seed)
    elif args.what == "compare":
        frame = compare(rows[0], args.reps, args.shift)
    else:
        frame = cost(rows[0])
    print(frame.round(3).to_string(index=False))


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
