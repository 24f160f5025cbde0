"""The levels in score slabs: the metrics of every distinct score under a memory budget.

A tiny ``bytes`` budget (:func:`sqlcal.options.budget`) makes small tables take the path of a
10^8-row one: the levels are read one score range at a time, each query returning at most the
budget's rows. Checked here: no query of the metric returns more rows than that, and the values
equal brute force on the raw rows (scores with ties, weights, a NULL group key), with the
oracles of tests/test_decision.py.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import sqlcal
from sqlcal import options
from sqlcal.metrics.cells import LEVEL_ROW_BYTES, cells_summary, level_slabs, slab_ranges
from sqlcal.query import reductions
from sqlcal.query.executor import as_source
from tests.test_decision import brute_force_risks, levels_np, pairwise_cdl

LP_ATOL = 1e-7  # HiGHS tolerances of the pairwise LP oracle
SLAB = 40  # rows of one slab under the test's budget


def tied_rows(n: int = 600, seed: int = 0) -> pd.DataFrame:
    """Scores on a grid of 2 decimals (ties) plus a few continuous ones, 0/1 labels, whole
    weights, three groups one of which has a NULL key."""
    rng = np.random.default_rng(seed)
    p = np.round(rng.beta(2, 3, n), 2)
    p[: n // 10] = rng.random(n // 10)  # some distinct scores too
    y = (rng.random(n) < np.clip(p + 0.2 * np.sin(5 * p), 0, 1)).astype(np.int64)
    g = rng.choice(np.array(["a", "b", None], dtype=object), n)
    return pd.DataFrame({"g": g, "p": p, "y": y, "w": rng.integers(0, 4, n).astype(float)})


@pytest.fixture
def small_budget():
    with options.budget(bytes=SLAB * LEVEL_ROW_BYTES):
        yield


@pytest.fixture
def fetched(monkeypatch):
    """The rows of every levels query run (a frame keyed by the score ``p``)."""
    sizes: list[int] = []
    original = reductions.execute

    def counted(expr):
        out = original(expr)
        if "p" in out.columns and "cell" not in out.columns:
            sizes.append(len(out))
        return out

    monkeypatch.setattr(reductions, "execute", counted)
    return sizes


def bounded(sizes: list[int]) -> bool:
    """Whether the levels were read in slabs: several queries, none above the budget's rows."""
    return len(sizes) > 1 and max(sizes) <= SLAB


def per_group(df: pd.DataFrame):
    for key, part in df.groupby("g", dropna=False):
        yield (None if pd.isna(key) else key), part


def row_of(out: pd.DataFrame, key) -> pd.DataFrame:
    return out[out["g"].isna()] if key is None else out[out["g"] == key]


def test_slabs_cover_the_scores_and_hold_the_levels(con, upload, small_budget):
    df = tied_rows()
    src = as_source(upload(df), "p", "y", weight="w", by="g")
    slabs = level_slabs(src)
    pieces = list(slabs)
    assert len(pieces) > 5
    ranges = slab_ranges(src, cells_summary(src, ("sums",)), SLAB)
    assert ranges[0][0] == 0.0 and ranges[-1][1] == 1.0
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    held = df[df["w"] > 0]  # a row of weight 0 is no row
    for (lo, hi), piece in zip(ranges, pieces):
        inside = held[(held["p"] >= lo) & ((held["p"] < hi) | (hi == 1.0))]
        # a slab holds at most the budget's rows, unless it is a single score
        assert len(inside) <= SLAB or inside["p"].nunique() == 1
        assert ((piece["p"] >= lo) & ((piece["p"] < hi) | (hi == 1.0))).all()
    # the key travels under its internal column (src.by) inside the slabs
    whole = pd.concat(pieces).rename(columns={src.by[0]: "g"}).sort_values(["g", "p"],
                                                                          ignore_index=True)
    # the slabs together are the levels of the rows: checked against a groupby of the rows
    want = (held.assign(wy=held.w * held.y).groupby(["g", "p"], dropna=False, as_index=False)
            .agg(n=("p", "size"), W=("w", "sum"), swy=("wy", "sum"))
            .sort_values(["g", "p"], ignore_index=True))
    assert len(whole) == len(want)
    np.testing.assert_array_equal(whole["p"].to_numpy(float), want["p"].to_numpy(float))
    np.testing.assert_allclose(whole["W"].to_numpy(float), want["W"].to_numpy(float))
    np.testing.assert_allclose(whole["swy"].to_numpy(float), want["swy"].to_numpy(float))
    assert list(slabs) and len(list(slabs)) == len(pieces)  # iterable again


def test_cdl_in_slabs_equals_the_pairwise_lp(con, upload, small_budget, fetched):
    df = tied_rows(400, 1)
    out = sqlcal.calibration_decision_loss(upload(df), score="p", label="y", weight="w", by="g")
    assert bounded(fetched)  # no query returned the levels whole
    assert len(out) == 3
    for key, part in per_group(df):
        v, mass, ybar = levels_np(part)
        row = row_of(out, key).iloc[0]
        assert row["calibration_decision_loss"] == pytest.approx(pairwise_cdl(v, mass, ybar),
                                                                abs=LP_ATOL)
        assert row["ece"] == pytest.approx(float((mass * np.abs(ybar - v)).sum()), rel=1e-12)
        assert row["n_levels"] == len(v)


def test_decision_loss_in_slabs_summed_row_by_row(con, upload, small_budget, fetched):
    df = tied_rows(600, 2)
    thresholds = [0.1, 0.3, 0.5, 0.8]
    out = sqlcal.decision_loss(upload(df), score="p", label="y", weight="w", by="g",
                               threshold=thresholds)
    assert bounded(fetched)
    for key, part in per_group(df):
        w, y, p = (part[c].to_numpy(float) for c in ("w", "y", "p"))
        ybar = np.array([(w * y)[p == x].sum() / max(w[p == x].sum(), 1e-300) for x in p])
        for t in thresholds:
            def payoff(act):  # acting: 1 − t on a negative, 1 on a positive; else 1 and t
                return np.where(act, np.where(y == 1, 1.0, 1 - t), np.where(y == 1, t, 1.0))
            trusted = (w * payoff(p >= t)).sum() / w.sum()
            best = (w * payoff(ybar >= t)).sum() / w.sum()
            row = row_of(out, key)
            row = row[row["threshold"] == t].iloc[0]
            assert row["payoff"] == pytest.approx(trusted, rel=1e-12)
            assert row["recalibrated_payoff"] == pytest.approx(best, rel=1e-12)
            assert row["decision_loss"] == pytest.approx(best - trusted, abs=1e-12)


@pytest.mark.parametrize("tau", [0.0, 0.3, 0.5, 0.77])
def test_risk_gap_in_slabs_equals_every_threshold_rule(con, upload, small_budget, fetched, tau):
    df = tied_rows(500, 3)
    out = sqlcal.decision_risk_gap(upload(df), score="p", label="y", weight="w", by="g",
                                   threshold=tau)
    assert bounded(fetched)
    for key, part in per_group(df):
        risk, bayes, best = brute_force_risks(part, tau)
        row = row_of(out, key).iloc[0]
        assert row["risk"] == pytest.approx(risk, abs=1e-12)
        assert row["bayes_risk"] == pytest.approx(bayes, abs=1e-12)
        assert row["monotone_risk"] == pytest.approx(best, abs=1e-12)
        p, y, w = (part[c].to_numpy(float) for c in "pyw")
        rule, at = row["best_rule"], row["best_threshold"]
        act = {"never": np.zeros(len(p)), "always": np.ones(len(p))}.get(rule)
        if act is None:
            act = p >= at if rule == "increasing" else p <= at
        assert (w * (tau * (1 - y) * act + (1 - tau) * y * (1 - act))).sum() / w.sum() == \
            pytest.approx(best, abs=1e-12)


def test_slabs_and_whole_levels_give_the_same_numbers(upload):
    """The same metrics with and without the budget (the whole levels: the path of a small
    table), to the last bits the summation order allows."""
    df = tied_rows(800, 4)
    t = upload(df)
    kw = dict(score="p", label="y", weight="w", by="g")
    calls = [lambda: sqlcal.calibration_decision_loss(t, **kw),
             lambda: sqlcal.decision_loss(t, **kw, threshold=[0.2, 0.6]),
             lambda: sqlcal.decision_risk_gap(t, **kw, threshold=[0.2, 0.6])]
    for call in calls:
        whole = call()
        with options.budget(bytes=SLAB * LEVEL_ROW_BYTES):
            sliced = call()
        pd.testing.assert_frame_equal(whole, sliced, rtol=1e-12, atol=1e-15)
