"""TCE's PAVA-BC with many groups above the level cap: the score grid is shared among the groups
(fewer cells per group as there are more groups), so the rows fetched stay within the cap; the
bins equal the reference algorithm on each group's raw rows."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import sqlcal
from sqlcal.metrics import tce as tce_module
from sqlcal.query import planner
from tests.test_tce_scale import _reference


def test_pava_cells_share_the_grid_among_the_groups():
    assert [tce_module.pava_cells(g) for g in (1, 2, 3, 10, 2**14, 10**9)] == [
        2**18, 2**17, 2**16, 2**14, 2**4, 2**4]


def test_pavabc_with_many_groups_fetches_at_most_the_cap(con, upload, monkeypatch):
    if con.name == "pyspark":
        pytest.skip("CI time on Spark: the summaries read here (totals, cells, levels_within) "
                    "run on Spark in tests/test_tce.py")
    groups, per_group = 4, 6000
    n = groups * per_group
    rng = np.random.default_rng(11)
    p = rng.random(n) * rng.random(n)  # continuous: one distinct score per row
    df = pd.DataFrame({"p": p, "y": (rng.random(n) < p ** 0.9).astype(np.int64),
                       "g": np.repeat([f"g{i:02d}" for i in range(groups)], per_group)})
    t = upload(df)
    cap = n // 2
    monkeypatch.setattr(tce_module, "LEVEL_CAP", cap)
    # 2^12 cells: one grid per group would hold about 3,400 rows per group (13,600 > the cap,
    # before a level is read); shared, 2^10 cells per group (about 6 rows a cell, as in
    # tests/test_tce_scale.py)
    monkeypatch.setattr(tce_module, "PAVA_CELLS", 2**12)
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
    got = sqlcal.tce_bins(t, score="p", label="y", by="g")
    want = _reference(df)
    cols = ["g", "bin", "n", "k", "rejected"]
    pd.testing.assert_frame_equal(got[cols].reset_index(drop=True), want[cols],
                                  check_dtype=False)
    np.testing.assert_array_equal(got["score_min"], want["score_min"])
    np.testing.assert_array_equal(got["score_max"], want["score_max"])
    kinds = [kind for kind, _ in fetched]
    assert "levels" not in kinds and "levels_in_cells" in kinds, fetched
    assert max(rows for kind, rows in fetched if kind == "cells") <= groups * 2**10, fetched
    assert sum(rows for _, rows in fetched) <= cap, fetched
