"""The summaries of the smooth, TCE and distance families, evaluated in pandas from the levels
(sqlcal.query.local), equal the engine's queries of the same rows (1e-9 relative): random rows
with ties, weights (whole and fractional), NULL-free groups, scores at 0 and 1."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import sqlcal
from sqlcal.query import declared, local, planner


def rows(n: int, seed: int, *, weights: str | None, groups: int = 3) -> pd.DataFrame:
    """Scores crowded near 0 and 1 (cells straddling grid nodes), half of them tied on a few
    values, labels drawn from the scores, three groups."""
    rng = np.random.default_rng(seed)
    p = np.where(rng.random(n) < 0.5, rng.beta(0.3, 0.3, n), rng.choice(
        [0.0, 1 / 3, 0.5, 0.999, 1.0, 1000.5 / 16384], n))
    y = (rng.random(n) < np.clip(p * 0.9 + 0.05, 0, 1)).astype(np.int64)
    df = pd.DataFrame({"p": p, "y": y, "g": rng.choice([f"g{i}" for i in range(groups)], n)})
    if weights == "whole":
        df["w"] = rng.integers(0, 4, n).astype(float)
    elif weights == "fractional":
        df["w"] = rng.exponential(size=n)
    return df


def levels_of(df: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """The levels summary of raw rows: a plain groupby on the keys and the score (rows of zero
    weight left out, as a source leaves them)."""
    if "w" in df:
        df = df[df["w"] > 0]
    w = df["w"] if "w" in df else pd.Series(1.0, index=df.index)
    frame = df.assign(W=w, swy=w * df["y"], swp=w * df["p"], sw2=w * w, ny=df["y"], n=1)
    return (frame.groupby([*by, "p"], sort=True)[["n", "W", "swy", "swp", "sw2", "ny"]].sum()
            .reset_index())


def compare(got: pd.DataFrame, want: pd.DataFrame, keys: list[str]) -> None:
    got = got.sort_values(keys, ignore_index=True)
    want = want.sort_values(keys, ignore_index=True)
    # the engine's frame of an unweighted source has Σw² = n filled in besides
    assert set(got.columns) <= set(want.columns) <= set(got.columns) | {"sw2"}
    for c in keys:
        assert got[c].tolist() == want[c].tolist(), c
    for c in got.columns.difference(keys):
        a, b = got[c].to_numpy(float), want[c].to_numpy(float)
        # sums that cancel (residuals) compare to the size of their terms
        scale = np.abs(want["W"].to_numpy(float)).max() if "W" in want else 1.0
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12 * scale, err_msg=c)


SUMMARIES = [
    declared.smooth_cells(2**14, [1000]),
    declared.smooth_cells(2**14, [1000, 2048, 5120, 16666]),  # 16666 > 2^14: cells hold nodes
    declared.smooth_split(2**14, [1463, 3413]),
    declared.smooth_split(2**14, [16666]),
    declared.logit_grid(0.005, 1e-6),
    declared.logit_grid(0.5, 0.01),
]


@pytest.mark.parametrize("weights", [None, "whole", "fractional"])
def test_engine_summaries_equal_their_local_evaluation_from_the_levels(con, upload, weights):
    df = rows(3000, seed=5, weights=weights)
    t = upload(df)
    src = sqlcal.source(t, score="p", label="y", by="g", weight="w" if weights else None)
    levels = levels_of(df, ["g"])
    for summary in SUMMARIES:
        engine = src.present(planner.fetch(src, summary))  # the key under its name
        keys = ["g", summary.key_column, *[c for c in engine if c.startswith("b_")]]
        compare(local.evaluate(summary, levels, ["g"]), engine, keys)


def test_straddling_split_keeps_only_cells_holding_a_node():
    # against brute force: cell c holds a node i/h strictly inside when c·h < i·2^14 < (c+1)·h
    cells = np.arange(0, 2**14, 37)
    df = pd.DataFrame({"p": (cells + 0.5) / 2**14, "y": cells % 2})
    levels = levels_of(df, [])
    for h in (1000, 1463, 5120):
        got = set(local.evaluate(declared.smooth_split(2**14, [h]), levels, ())["cell"])
        want = {int(c) for c in cells
                if (c * h) // 2**14 < ((c + 1) * h - 1) // 2**14}
        assert got == want and want, h
