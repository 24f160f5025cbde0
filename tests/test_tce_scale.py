"""TCE's PAVA-BC bins above the level cap: computed on score cells, reading the levels of the few
cells where a merge is not decided by the cells' sums, equal to the reference algorithm on the
raw rows, and fetching far fewer rows than the source holds."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

import sqlcal
from sqlcal.metrics import tce as tce_module
from sqlcal.query import planner
from tests.test_tce import reference_pavabc


def _rows(n: int = 12_000, seed: int = 4) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    p = rng.random(n) * rng.random(n)  # continuous: one distinct score per row
    y = (rng.random(n) < p ** 0.9).astype(np.int64)
    return pd.DataFrame({"p": p, "y": y, "g": rng.choice(["a", "b"], n)})


def _pvalues(k: int, n: int, q: np.ndarray) -> np.ndarray:
    """scipy's two-sided binomtest p-value by its definition: the probability of the outcomes
    no likelier than k (up to the relative 1e-7 it allows), capped at 1."""
    pmf = stats.binom.pmf(np.arange(n + 1)[None, :], n, q[:, None])
    at_k = pmf[:, k:k + 1]
    return np.minimum(1.0, np.where(pmf <= at_k * (1 + 1e-7), pmf, 0.0).sum(axis=1))


def _reference(df: pd.DataFrame, alpha: float = 0.05) -> pd.DataFrame:
    """Per group and bin, from the rows: the reference PAVA-BC (N/20, N/5, the code's tail) on
    the labels sorted by score, and scipy's binomtest of every prediction against its bin."""
    rows = []
    for g, part in df.groupby("g"):
        part = part.sort_values("p")
        y, p = part["y"].to_numpy(), part["p"].to_numpy()
        sizes, sums = reference_pavabc(y, len(y) // 20, len(y) // 5)
        start = 0
        for b, (size, k) in enumerate(zip(sizes, sums)):
            q = p[start:start + size]
            rejected = float((_pvalues(int(k), size, q) <= alpha).sum())
            rows.append({"g": g, "bin": b, "score_min": q[0], "score_max": q[-1], "n": size,
                         "k": float(k), "rejected": float(rejected)})
            start += size
    return pd.DataFrame(rows)


def test_pavabc_above_the_level_cap_equals_the_reference_and_reads_few_rows(con, upload,
                                                                           monkeypatch):
    if con.name == "pyspark":
        pytest.skip("about 7 queries of a few seconds each on Spark (over this file's CI time); "
                    "the engine reads here are the cells and levels_within summaries, which "
                    "tests/test_tce.py runs on Spark (uniform and quantile bins)")
    n = 12_000  # fewer rows make blocks of a few cells, where most cells must be read
    df = _rows(n)
    t = upload(df)
    # a cap of half the rows and a coarse grid (about 6 rows per cell and group), so the cells
    # are mixed and the bins must be found on them
    monkeypatch.setattr(tce_module, "LEVEL_CAP", n // 2)
    monkeypatch.setattr(tce_module, "PAVA_CELLS", 2**11)  # shared by the 2 groups: 2^10 each
    fetched = []

    def counted(read):
        def counting(src, summary):
            frame = read(src, summary)
            fetched.append((summary.kind, len(frame)))
            return frame
        return counting

    # cached reads, and the levels of single cells read once each (not cached)
    monkeypatch.setattr(planner, "fetch", counted(planner.fetch))
    monkeypatch.setattr(planner, "scan", counted(planner.scan))
    src = sqlcal.source(t, score="p", label="y", by="g")
    got = sqlcal.tce_bins(src)
    want = _reference(df)
    cols = ["g", "bin", "n", "k", "rejected"]
    pd.testing.assert_frame_equal(got[cols].reset_index(drop=True), want[cols],
                                  check_dtype=False)
    np.testing.assert_array_equal(got["score_min"], want["score_min"])
    np.testing.assert_array_equal(got["score_max"], want["score_max"])
    kinds = {kind for kind, _ in fetched}
    assert "levels" not in kinds, fetched  # the whole levels summary is never read
    # at most the cap in all (cells and levels), here half the rows
    assert 0 < sum(rows for kind, rows in fetched if kind == "levels_in_cells"), fetched
    assert sum(rows for _, rows in fetched) <= n // 2, fetched
    total = sqlcal.tce(src)  # the same bins
    np.testing.assert_allclose(total["tce"], [100 * r.rejected.sum() / r.n.sum()
                                              for _, r in want.groupby("g")], rtol=1e-12)


def test_pavabc_reads_its_cells_in_slabs_of_the_memory_budget(upload, monkeypatch):
    """Under a small memory budget the cells near the bins' starts are read in several queries,
    each within a slab's rows, and the bins still equal the reference."""
    from sqlcal.metrics.cells import LEVEL_ROW_BYTES

    n = 12_000
    df = _rows(n)
    t = upload(df)
    monkeypatch.setattr(tce_module, "LEVEL_CAP", n // 2)
    monkeypatch.setattr(tce_module, "PAVA_CELLS", 2**11)
    monkeypatch.setattr(tce_module, "HELD_SLABS", 10**6)  # no budget error here
    sizes = []
    scan = planner.scan

    def counting(src, summary):
        frame = scan(src, summary)
        if summary.kind == "levels_in_cells":
            sizes.append(len(frame))
        return frame

    monkeypatch.setattr(planner, "scan", counting)
    with sqlcal.options.budget(bytes=100 * LEVEL_ROW_BYTES):  # slabs of 100 rows
        got = sqlcal.tce_bins(t, score="p", label="y", by="g")
    want = _reference(df)
    cols = ["g", "bin", "n", "k", "rejected"]
    pd.testing.assert_frame_equal(got[cols].reset_index(drop=True), want[cols],
                                  check_dtype=False)
    assert len(sizes) > 3 and max(sizes) <= 100, sizes


def test_pavabc_past_its_memory_budget_says_which_options_to_pass(upload, monkeypatch):
    from sqlcal.metrics.cells import LEVEL_ROW_BYTES

    df = _rows(12_000)
    monkeypatch.setattr(tce_module, "LEVEL_CAP", 6_000)
    monkeypatch.setattr(tce_module, "PAVA_CELLS", 2**11)
    with sqlcal.options.budget(bytes=10 * LEVEL_ROW_BYTES), \
            pytest.raises(sqlcal.options.BudgetError, match="n_min= and n_max="):
        sqlcal.tce(upload(df), score="p", label="y", by="g")
