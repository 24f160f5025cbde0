"""Benchmark: coverage of the intervals and size of the tests on downsampled logs.

Run from the repository root::

    nice -n 10 python bench/bench_sampling.py                     # 2,000 logs a case, minutes
    python bench/bench_sampling.py --replicates 200 --scale 0.5   # a smoke run

Data. For each case, ``--replicates`` full logs drawn from a known population: 40 score levels
(logit-normal quantiles, each with probability 1/40) of mean score equal to the base rate, and a
calibrated model (y ~ Bernoulli(p)). Every positive is kept and each negative with probability r:
a whole 1/r (0.02, 0.1), a fractional one (0.0999), or a column of per-row rates (0.05 or 0.2 at
random, the positives' NULL); and once with the kept rows stored as counts (identical rows
aggregated into a frequency weight, with the rate). The population's normalized entropy is known
exactly (E[ℓ]/H(E[y])) and its calibration ratio is 1.

Measured (all logs of a case in one ``sqlcal.report`` grouped by log):

    NE cover       share of logs whose normalized-entropy interval (95%) holds the population's
    NE width       the interval's mean half-width over 1.96 times the estimates' standard
                   deviation across logs (1: as wide as the spread it should describe)
    CR cover       the same for the calibration ratio's interval and 1
    Spieg. reject  share of logs where Spiegelhalter's test rejects at 5% (a calibrated model)
    HL reject      the same for Hosmer-Lemeshow on 10 risk deciles (its design variance comes
                   from each decile's kept negatives: too few, and it rejects too often)
    Kuiper reject  the same for Kuiper's test
    as frequency   the same NE cover and rejection with the kept negatives' 1/r given as
                   frequency weights (``weight_kind="frequency"``, no rate): how each kept
                   negative passing for 1/r observed rows reads (the reading of whole 1/r before)

The Monte Carlo standard error of a share near 0.95 (or 0.05) is sqrt(0.95 * 0.05 / R).

Measured with ``nice -n 10 python bench/bench_sampling.py --replicates 1000`` (s.e. 0.0069):
NE cover 0.925-0.962 and CR cover 0.936-0.960 in all 15 cases, Spiegelhalter rejecting
0.038-0.063 and Kuiper 0.018-0.046; Hosmer-Lemeshow 0.042-0.091 except 0.129 at base rate 0.2,
r = 0.02 (about 6 kept negatives a risk decile). Read as frequency weights, the same logs gave
NE cover 0.425 and Spiegelhalter rejecting 0.519 (base rate 0.2, r = 0.02).
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import optimize, special, stats

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import sqlcal  # noqa: E402

LEVELS = 40
#: base rate -> rows of a full log (about 800 positives at 0.2, 300 at 0.02, 150 at 0.005)
SIZES = {0.2: 4000, 0.02: 15000, 0.005: 30000}
RATES = (0.02, 0.1, 0.0999, "column", "counts")


def population(base: float) -> np.ndarray:
    z = stats.norm.ppf((np.arange(LEVELS) + 0.5) / LEVELS)
    mu = optimize.brentq(lambda m: special.expit(m + z).mean() - base, -20, 20)
    return special.expit(mu + z)


def true_ne(p: np.ndarray) -> float:
    h = -(p * np.log(p) + (1 - p) * np.log1p(-p))
    b = p.mean()
    return h.mean() / -(b * np.log(b) + (1 - b) * np.log1p(-b))


def logs(reps: int, rows: int, base: float, rate, seed: int) -> pd.DataFrame:
    """The kept rows of ``reps`` full logs (key ``rep``), with their rate column ``r``."""
    rng = np.random.default_rng(seed)
    p = population(base)
    counts = rng.multinomial(rows, np.full(LEVELS, 1 / LEVELS), size=reps)
    positives = rng.binomial(counts, p)
    negatives = counts - positives
    rep, level = np.repeat(np.arange(reps), LEVELS), np.tile(p, reps)
    if rate == "column":  # each negative kept at 0.05 or 0.2, its rate recorded
        low = rng.binomial(negatives, 0.5)
        parts = [(rng.binomial(low, 0.05), 0.05), (rng.binomial(negatives - low, 0.2), 0.2)]
    else:
        r = 0.1 if rate == "counts" else rate
        parts = [(rng.binomial(negatives, r), r)]
    frames = [pd.DataFrame({"rep": np.repeat(rep, positives.ravel()),
                            "p": np.repeat(level, positives.ravel()), "y": 1, "r": np.nan})]
    for kept, r in parts:
        frames.append(pd.DataFrame({"rep": np.repeat(rep, kept.ravel()),
                                    "p": np.repeat(level, kept.ravel()), "y": 0, "r": r}))
    return pd.concat(frames, ignore_index=True)


def measure(base: float, rate, reps: int, scale: float, seed: int) -> dict:
    rows = int(SIZES[base] * scale)
    kept = logs(reps, rows, base, rate, seed)
    ne = true_ne(population(base))
    names = ["normalized_entropy", "calibration_ratio", "spiegelhalter", "hosmer_lemeshow",
             "kuiper"]
    start = time.process_time()
    if rate == "counts":  # identical kept rows stored once, with their count
        counted = kept.groupby(["rep", "p", "y"], as_index=False).size()
        src = sqlcal.source(counted, score="p", label="y", weight="size", by="rep",
                            negative_sampling_rate=0.1)
    else:
        src = sqlcal.source(kept, score="p", label="y", by="rep",
                            negative_sampling_rate="r" if rate == "column" else rate)
    out = sqlcal.report(src, metrics=names)
    cpu = time.process_time() - start
    spread = stats.norm.isf(0.025) * out.normalized_entropy.std()
    row = {"base rate": base, "r": rate, "logs": reps, "kept rows/log": len(kept) / reps,
           "NE cover": np.mean((out.normalized_entropy_lower <= ne)
                               & (ne <= out.normalized_entropy_upper)),
           "NE width": np.mean(out.normalized_entropy_upper - out.normalized_entropy_lower)
           / 2 / spread,
           "CR cover": np.mean((out.calibration_ratio_lower <= 1)
                               & (1 <= out.calibration_ratio_upper)),
           "Spieg. reject": np.mean(out.spiegelhalter_p < 0.05),
           "HL reject": np.mean(out.hl_p < 0.05),
           "Kuiper reject": np.mean(out.kuiper_p < 0.05), "CPU s": cpu}
    if rate in (0.02, 0.1):  # the kept negatives' 1/r read as observed rows
        freq = kept.assign(w=np.where(kept.y == 1, 1.0, 1 / rate))
        naive = sqlcal.source(freq, score="p", label="y", weight="w", by="rep")
        a = sqlcal.normalized_entropy(naive, weight_kind="frequency")
        b = sqlcal.spiegelhalter(naive, weight_kind="frequency")
        row["as frequency: NE cover"] = np.mean((a.ci_lower <= ne) & (ne <= a.ci_upper))
        row["as frequency: Spieg. reject"] = np.mean(b.p_value < 0.05)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--replicates", type=int, default=2000, help="logs per case")
    parser.add_argument("--scale", type=float, default=1.0, help="rows of a full log, times")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    warnings.simplefilter("ignore", UserWarning)
    rows = [measure(base, rate, args.replicates, args.scale, args.seed + i)
            for i, (base, rate) in enumerate((b, r) for b in SIZES for r in RATES)]
    table = pd.DataFrame(rows)
    se = np.sqrt(0.95 * 0.05 / args.replicates)
    print(f"bench_sampling: {args.replicates} logs a case, rows x{args.scale:g}; "
          f"Monte Carlo s.e. of a share near 0.95 or 0.05: {se:.4f}\n")
    print(markdown(table))


def markdown(table: pd.DataFrame) -> str:
    """A markdown table (numbers to 3 decimals, the row counts whole, missing cells blank)."""
    def cell(name: str, value) -> str:
        if isinstance(value, float) and np.isnan(value):
            return ""
        if name in ("base rate", "r"):
            return "0.1, as counts" if value == "counts" else f"{value:g}" if isinstance(
                value, float) else str(value)
        if name in ("logs", "kept rows/log"):
            return f"{value:,.0f}"
        return f"{value:.3f}" if isinstance(value, float) else str(value)

    lines = ["| " + " | ".join(table.columns) + " |",
             "|" + "---|" * len(table.columns)]
    lines += ["| " + " | ".join(cell(c, v) for c, v in row.items()) + " |"
              for _, row in table.iterrows()]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
