"""Many groups: the finishes of the default report run over every group at once and equal numpy
brute force on each group's rows; what grows with the number of groups (or with an option) is
checked against the resource budget before any pass after the first, with a message naming the
option, the groups and what fits."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

import sqlcal
from sqlcal import options
from sqlcal.query import planner

GROUPS = 3000


def many_groups(groups: int = GROUPS, per: int = 12, seed: int = 0) -> pd.DataFrame:
    """Scores with ties (two decimals), 0/1 labels, integer group keys (one NULL group)."""
    rng = np.random.default_rng(seed)
    n = groups * per
    g = rng.integers(0, groups, n).astype(float)
    g[g == 7] = np.nan
    p = np.round(rng.beta(2, 3, n), 2)
    y = (rng.random(n) < p).astype(np.int64)
    return pd.DataFrame({"g": g, "p": p, "y": y})


def by_group(df: pd.DataFrame):
    return df.groupby("g", dropna=False, sort=False)


def per_group(df: pd.DataFrame, bins: int, weights: np.ndarray) -> tuple[np.ndarray, list]:
    """Σ weights over each group's equal-width bins (groups × bins), straight from the raw rows,
    and the groups' keys in the rows' order."""
    codes, keys = pd.factorize(df["g"], use_na_sentinel=False)
    b = np.minimum(np.floor(df["p"].to_numpy() * bins), bins - 1).astype(int)
    cell = codes * bins + b
    return np.bincount(cell, weights, len(keys) * bins).reshape(len(keys), bins), list(keys)


def aligned(out: pd.DataFrame, keys: list, column: str) -> np.ndarray:
    """The result's column in the order of ``keys``: each key's one row (the NULL key too)."""
    assert out["g"].notna().sum() + 1 == len(out) == len(keys)
    g = out["g"].astype(float).fillna(-1.0)
    values = pd.Series(out[column].to_numpy(float), index=g.to_numpy())
    assert values.index.is_unique
    return values.loc[[-1.0 if pd.isna(k) else float(k) for k in keys]].to_numpy()


@pytest.mark.filterwarnings("ignore:.*more than half their weight")
def test_binned_finishes_over_many_groups_equal_numpy_per_group(upload):
    df = many_groups()
    t = upload(df)
    # the bootstrap intervals of 3,000 groups still run (and dominate the test's time: 1,000
    # replicates took about a minute a norm); their values are checked in tests/test_intervals.py
    ece = sqlcal.ece(t, score="p", label="y", by="g", bootstrap=100)
    mce = sqlcal.ece(t, score="p", label="y", by="g", norm="max")
    rmsce = sqlcal.ece(t, score="p", label="y", by="g", norm="l2", bootstrap=100)
    hl = sqlcal.hosmer_lemeshow(t, score="p", label="y", by="g", strategy="uniform")
    p, y = df["p"].to_numpy(), df["y"].to_numpy(float)
    # every group's 15 bins at once: the per-group formulas below on each row of these arrays
    n_b, keys = per_group(df, 15, np.ones(len(df)))
    gap, _ = per_group(df, 15, y - p)
    n = n_b.sum(axis=1)
    assert len(keys) == len(ece) == df["g"].nunique(dropna=False)
    held = n_b > 0
    mean_gap = np.abs(gap) / np.where(held, n_b, 1)
    np.testing.assert_allclose(aligned(ece, keys, "ece"), np.abs(gap).sum(axis=1) / n,
                               rtol=0, atol=1e-12)
    np.testing.assert_allclose(aligned(mce, keys, "mce"),
                               np.where(held, mean_gap, -np.inf).max(axis=1), rtol=0, atol=1e-12)
    np.testing.assert_allclose(aligned(rmsce, keys, "rmsce"),
                               np.sqrt((np.where(held, mean_gap, 0) ** 2 * n_b).sum(axis=1) / n),
                               rtol=0, atol=1e-12)
    # Hosmer-Lemeshow on 10 equal-width risk groups: Σ (O − E)² / (E(1 − E/n))
    (n_b, _), (O, _), (E, _) = (per_group(df, 10, w) for w in (np.ones(len(df)), y, p))
    held = n_b > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        var = E * (1 - E / n_b)
        diff2 = (O - E) ** 2
        terms = np.where(var > 0, diff2 / np.where(var > 0, var, 1),
                         np.where(diff2 > 0, np.inf, 0))
    stat = np.where(held, terms, 0).sum(axis=1)
    np.testing.assert_allclose(aligned(hl, keys, "hl_statistic"), stat, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(aligned(hl, keys, "p_value"), stats.chi2.sf(stat, held.sum(axis=1)),
                               rtol=1e-9, atol=1e-12)


def test_cutoff_error_over_many_groups_equals_the_running_sum_per_group(upload):
    df = many_groups(GROUPS, per=8, seed=1)
    out = sqlcal.cutoff_error(upload(df), score="p", label="y", by="g")
    keys, want = [], []
    for key, part in by_group(df):
        p, y = part["p"].to_numpy(), part["y"].to_numpy(float)
        levels, at = np.unique(p, return_inverse=True)
        S = np.concatenate([[0.0], np.cumsum(np.bincount(at, y - p, len(levels)))])
        keys.append(key)
        want.append((S.max() - S.min()) / len(p))
    np.testing.assert_allclose(aligned(out, keys, "cutoff_error"), want, rtol=0, atol=1e-12)


def count_scans(monkeypatch) -> list:
    scans = []
    fetch = planner.fetch

    def counting(src, summary):
        scans.append(summary.kind)
        return fetch(src, summary)

    monkeypatch.setattr(planner, "fetch", counting)
    return scans


def test_a_per_group_cost_over_many_groups_is_refused_after_the_first_scan(upload, monkeypatch):
    df = many_groups(200, per=20, seed=2)
    t = upload(df)
    scans = count_scans(monkeypatch)
    # smooth ECE: 20,481 grid nodes and points a group before its bandwidth is known
    with options.budget(group_cells=20_481 * 100), \
            pytest.raises(options.BudgetError, match=r"200 groups of by=.*at most 100 groups"):
        sqlcal.smooth_ece(t, score="p", label="y", by="g")
    assert len(scans) == 1, scans  # the validating scan only: no further pass was paid
    with options.budget(group_cells=20_481 * 100):  # fewer groups fit
        out = sqlcal.smooth_ece(t, score="p", label="y", by="g", where="g < 50")
    assert len(out) == 49  # 0 to 49 but the NULL group
    # an option's cost: the message names the option and the value that fits these groups
    with options.budget(group_cells=200 * 40), \
            pytest.raises(options.BudgetError, match=r"bins=50 .*bins <= 40"):
        sqlcal.report(t, score="p", label="y", by="g", metrics=["ece"], bins=50)


def test_tce_refuses_more_binomial_tests_than_the_budget_before_computing_them(upload):
    rng = np.random.default_rng(3)
    df = pd.DataFrame({"p": rng.random(3000), "y": rng.integers(0, 2, 3000)})
    t = upload(df)
    with options.budget(tests=1000), pytest.raises(options.BudgetError, match="n_min=0"):
        sqlcal.tce(t, score="p", label="y", n_min=0)
    got = sqlcal.tce(t, score="p", label="y", n_min=300)  # about 10 bins: within it
    assert got["n_bins"].iloc[0] <= 10


def test_cli_demo_refuses_rows_past_the_memory_budget(tmp_path, capsys):
    from sqlcal.cli.commands import main

    path = tmp_path / "big.duckdb"
    assert main(["demo", str(path), "--rows", "2000000000"]) == 2
    err = capsys.readouterr().err
    assert "rows=2,000,000,000" in err and "rows <= " in err and "Traceback" not in err
    assert not path.exists()
