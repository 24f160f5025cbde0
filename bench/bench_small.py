"""Benchmark: the fixed cost of a call on a small in-memory frame, against in-memory peers.

Run from the repository root (the peers come with the ``bench`` extra)::

    pip install -e '.[bench]'
    nice -n 10 python bench/bench_small.py                 # 5*10^4 rows, 200 rounds
    nice -n 10 python bench/bench_small.py --rows 1e5 --rounds 400

Data. Real model outputs: a logistic regression fitted with scikit-learn on half of a
``make_classification`` sample (seeded), its predicted probabilities on ``--rows`` held-out rows
(score ``p``) and their labels (``y``, 0/1 integers), in a pandas DataFrame, as a notebook user
has them.

Measurement. CPU seconds per call (``time.process_time``: user + sys of every thread of the
process, DuckDB's included; the machine is shared, so CPU time, not wall time). Each task runs
once to warm up (imports, the first compile), then ``--rounds`` rounds each call every task once,
in turn, so load on the machine falls on all of them alike; the median of each task's calls is
reported, with its ratio to the fastest in-memory peer of the same quantity. Every sqlcal call
gets the pandas frame itself (a new source each time: no caching of the data or its summaries
across calls; only compiled statements are reused, see ``sqlcal.query.reductions.execute_planned``).

Tasks:

    sqlcal.ece         sqlcal.ece(df, score="p", label="y") (15 equal-width bins, validation included)
    sqlcal.brier       sqlcal.brier(df, ...)
    sqlcal.report      sqlcal.report(df, ...) (the default metrics)
    netcal.ECE         netcal.metrics.ECE(15).measure(p, y)
    sklearn.ece        ECE from sklearn.calibration.calibration_curve(y, p, n_bins=15) (mean
                       score and observed rate per non-empty bin) with the bin counts from
                       np.searchsorted on its edges
    sklearn.brier      sklearn.metrics.brier_score_loss(y, p)

The values are checked first: sqlcal's ECE with ``convention="netcal"`` equals netcal's, and with
``convention="sklearn"`` the scikit-learn ECE, to 1e-12; the Brier scores agree to 1e-12.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import pandas as pd


def model_outputs(rows: int, seed: int = 0) -> pd.DataFrame:
    from sklearn.datasets import make_classification
    from sklearn.linear_model import LogisticRegression

    X, y = make_classification(n_samples=2 * rows, n_features=20, n_informative=6,
                               flip_y=0.05, random_state=seed)
    model = LogisticRegression(max_iter=1000).fit(X[:rows], y[:rows])
    return pd.DataFrame({"p": model.predict_proba(X[rows:])[:, 1], "y": y[rows:]})


def tasks(df: pd.DataFrame) -> dict[str, tuple[str, callable]]:
    """name -> (quantity, call)."""
    from netcal.metrics import ECE
    from sklearn.calibration import calibration_curve
    from sklearn.metrics import brier_score_loss

    import sqlcal

    p, y = df["p"].to_numpy(), df["y"].to_numpy()
    netcal_ece = ECE(15)

    def sklearn_ece():
        observed, mean_score = calibration_curve(y, p, n_bins=15)
        edges = np.linspace(0.0, 1.0, 16)
        counts = np.bincount(np.searchsorted(edges[1:-1], p, side="left"), minlength=15)
        counts = counts[counts > 0]
        return float(np.sum(counts * np.abs(observed - mean_score)) / counts.sum())

    return {
        "sqlcal.ece": ("ece", lambda: sqlcal.ece(df, score="p", label="y")),
        "sqlcal.brier": ("brier", lambda: sqlcal.brier(df, score="p", label="y")),
        "sqlcal.report": ("report", lambda: sqlcal.report(df, score="p", label="y")),
        "netcal.ECE": ("ece", lambda: netcal_ece.measure(p, y)),
        "sklearn.ece": ("ece", sklearn_ece),
        "sklearn.brier": ("brier", lambda: brier_score_loss(y, p)),
    }


def check(df: pd.DataFrame, calls: dict) -> None:
    """The compared calls compute the same numbers."""
    import sqlcal

    def ece(convention):
        return float(sqlcal.ece(df, score="p", label="y", convention=convention)["ece"].iloc[0])

    pairs = [(ece("netcal"), float(calls["netcal.ECE"][1]())),
             (ece("sklearn"), calls["sklearn.ece"][1]()),
             (float(calls["sqlcal.brier"][1]()["brier"].iloc[0]), calls["sklearn.brier"][1]())]
    for ours, theirs in pairs:
        assert abs(ours - theirs) <= 1e-12 * max(1.0, abs(theirs)), (ours, theirs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=float, default=5e4)
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    df = model_outputs(int(args.rows))
    calls = tasks(df)
    check(df, calls)
    for _, call in calls.values():  # warm up: imports, first compile
        call()
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(args.rounds):
        for name, (_, call) in calls.items():
            start = time.process_time()
            call()
            times[name].append(time.process_time() - start)
    median = {name: statistics.median(t) for name, t in times.items()}
    fastest = {}
    for name, (quantity, _) in calls.items():
        if not name.startswith("sqlcal."):
            fastest[quantity] = min(fastest.get(quantity, np.inf), median[name])
    fastest["report"] = fastest["ece"]  # the report against one ECE of the fastest peer
    print(f"{len(df):,} rows from a pandas frame, {args.rounds} rounds; CPU ms per call "
          "(median), and the ratio to the fastest in-memory peer of the same quantity")
    for name, (quantity, _) in calls.items():
        print(f"  {name:<15} {1e3 * median[name]:8.2f} ms   x{median[name] / fastest[quantity]:5.2f}"
              f"  ({quantity}; fastest peer {1e3 * fastest[quantity]:.2f} ms)")


if __name__ == "__main__":
    main()
