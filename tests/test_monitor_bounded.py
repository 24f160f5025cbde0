"""Bounded forms of a stored window without levels (spec monitoring §B.2, §E.1 rule 3): binned
ECE at edges snapped to the stored cells with its certified bound, and the grid cutoff error's
bracket around the exact one.

Oracles: numpy on the raw rows (quantile edges by ``np.quantile`` of the rows repeated w times,
right-closed; equal-width bins ``floor(p·B)``; the exact cutoff error by sort, tie merge and
cumulative sum), and sqlcal's own exact-mode metrics on the raw rows (tested against brute
force elsewhere).
"""

from __future__ import annotations

import ibis
import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sqlcal
from sqlcal.monitor.stored import bounded_ece, snapped_bins_finish
from sqlcal.options import OptionError

DAY0 = pd.Timestamp("2026-10-01")
LEAN = dict(score="p", label="y", weight="w", by="g", time="t", as_of="2026-12-01",
            ls_ece_sigma=(), smooth_grids=(), bins=())


def exact_ece(p, y, w, bins, strategy):
    """ECE at the exact edges, from the raw rows."""
    if strategy == "quantile":
        edges = np.quantile(np.repeat(p, w.astype(int)), np.linspace(0, 1, bins + 1))[1:-1]
        b = np.searchsorted(edges, p, side="left")  # right-closed: p == edge joins the lower
    else:
        b = np.minimum(np.floor(p * bins), bins - 1).astype(int)
    return np.abs(np.bincount(b, w * (y - p), bins)).sum() / w.sum()


def cells_of(p, y, w, K):
    """The occupied cells' sums, as a snapshot stores them (numpy, from the raw rows)."""
    c = np.minimum(np.floor(p * K), K - 1).astype(int)
    ids = np.unique(c)
    at = np.searchsorted(ids, c)
    sums = [np.bincount(at, x, len(ids)) for x in (np.ones_like(p), w, w * y, w * p, w * y * p)]
    return ids, sums[0].astype(int), *sums[1:]


def exact_cutoff(p, y, w):
    """max(0, max S) − min(0, min S) over W, S the running residual over the merged ties."""
    levels, at = np.unique(p, return_inverse=True)
    s = np.cumsum(np.bincount(at, w * (y - p), len(levels)))
    return (max(0.0, s.max()) - min(0.0, s.min())) / w.sum()


@st.composite
def rows(draw):
    """n rows: scores on a grid of 20, 200 or 10^6 steps (heavy ties .. nearly continuous, 0 and
    1 included), labels and whole weights 1-3 drawn from a seeded generator."""
    n = draw(st.integers(1, 120))
    grid = draw(st.sampled_from([20, 200, 10**6]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    p = rng.integers(0, grid + 1, n) / grid
    return p, rng.integers(0, 2, n).astype(float), rng.integers(1, 4, n).astype(float)


@settings(max_examples=150, deadline=None, database=None)
@given(rows(), st.integers(1, 12), st.sampled_from([16, 64, 1024]),
       st.sampled_from(["quantile", "uniform"]))
def test_the_snapped_ece_bound_holds_against_the_exact_edges(data, bins, K, strategy):
    p, y, w = data
    got = snapped_bins_finish(*cells_of(p, y, w, K), bins=bins, cells=K, strategy=strategy)
    exact = exact_ece(p, y, w, bins, strategy)
    assert got["ece_lower"] - 1e-12 <= exact <= got["ece_upper"] + 1e-12
    assert got["n"] == len(p) and got["W"] == w.sum()
    if got["exact"]:
        assert got["ece"] == pytest.approx(exact, rel=1e-12, abs=1e-15)


def test_the_bound_is_not_vacuous():
    """On continuous scores (20 000 rows, 2^14 cells) the bracket is narrow: under 5% of the
    ECE (measured 3.5%)."""
    rng = np.random.default_rng(3)
    p = rng.beta(2, 6, 20000)
    y = (rng.random(20000) < np.clip(1.2 * p, 0, 1)).astype(float)
    w = rng.integers(1, 4, 20000).astype(float)
    got = snapped_bins_finish(*cells_of(p, y, w, 2**14), bins=10, cells=2**14,
                              strategy="quantile")
    exact = exact_ece(p, y, w, 10, "quantile")
    assert 0 < got["bound"] < 0.05 * exact
    assert got["edge_cells"] >= 9


def test_a_stored_window_without_levels_gives_bounded_forms():
    """DuckDB only: the bounded forms read the merged cells, which equal a rescan on every
    engine (tests/test_monitor_store.py); a Spark run of this test took 110 s."""
    rng = np.random.default_rng(7)
    n = 1500
    p = np.where(rng.random(n) < 0.3, np.round(rng.beta(2, 6, n), 2), rng.beta(2, 6, n))
    df = pd.DataFrame({"p": p, "y": (rng.random(n) < np.clip(1.2 * p, 0, 1)).astype(np.int64),
                       "w": rng.integers(1, 4, n).astype(float),
                       "g": rng.choice(["a", "b"], n),
                       "t": DAY0 + pd.to_timedelta(rng.integers(0, 3 * 86400, n), unit="s")})
    store = ibis.duckdb.connect()
    sqlcal.snapshot(df, store=store, **LEAN)
    src = sqlcal.stored(store, maturity="all", start=DAY0 + pd.Timedelta(days=1))
    raw = df[df.t >= DAY0 + pd.Timedelta(days=1)]
    quantile = bounded_ece(src, bins=10).set_index("g")
    uniform = bounded_ece(src, bins=15, strategy="uniform").set_index("g")
    grid = sqlcal.cutoff_error(src, method="grid", cells=2**14).set_index("g")
    # sqlcal's exact-mode ECE on the raw rows (its edges are numpy's, tested elsewhere)
    want = sqlcal.ece(raw, score="p", label="y", weight="w", by="g", bins=10,
                      strategy="quantile").set_index("g")
    for g, part in raw.groupby("g"):
        pp, yy, ww = (part[c].to_numpy(float) for c in ("p", "y", "w"))
        assert quantile.loc[g, "W"] == ww.sum() and quantile.loc[g, "n"] == len(part)
        assert quantile.loc[g, "ece_lower"] <= want.loc[g, "ece"] <= quantile.loc[g, "ece_upper"]
        assert want.loc[g, "ece"] == pytest.approx(exact_ece(pp, yy, ww, 10, "quantile"),
                                                   rel=1e-12)
        assert (uniform.loc[g, "ece_lower"] <= exact_ece(pp, yy, ww, 15, "uniform")
                <= uniform.loc[g, "ece_upper"])
        cutoff = exact_cutoff(pp, yy, ww)
        assert grid.loc[g, "cutoff_error"] - 1e-12 <= cutoff
        assert cutoff <= grid.loc[g, "cutoff_error"] + grid.loc[g, "grid_bound"] + 1e-12
    assert not quantile["exact"].any() and (quantile["bound"] > 0).all()
    # the exact forms still name the snapshot option, and the bounded one
    with pytest.raises(OptionError, match=r"levels=True.*bounded_ece"):
        sqlcal.ece(src, strategy="quantile")
    with pytest.raises(OptionError, match=r"levels=True"):
        sqlcal.cutoff_error(src)
    with pytest.raises(OptionError, match=r"strategy must be one of"):
        bounded_ece(src, strategy="logit")
    with pytest.raises(OptionError, match=r"pass sqlcal\.stored"):
        bounded_ece(sqlcal.source(raw, score="p", label="y"))
