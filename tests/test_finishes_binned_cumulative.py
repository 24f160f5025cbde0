"""The binned and cumulative finishes without an engine: summary frames aggregated from raw numpy
rows here, the finish called, compared with brute force on the rows (ECE by explicit loops,
equal-mass edges by np.quantile on the weight-expanded sample, the cutoff error as the maximum
over all O(n²) score intervals)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from sqlcal.metrics import binned, cells, cumulative


def _rows(n=300, seed=0, groups=("a", "b"), weights=True):
    rng = np.random.default_rng(seed)
    p = np.round(rng.beta(2, 3, n), 2)  # ties
    p[:3] = [0.0, 1.0, 0.5]
    y = (rng.random(n) < p).astype(float)
    w = rng.integers(1, 4, n).astype(float) if weights else np.ones(n)
    g = rng.choice(list(groups), n)
    return pd.DataFrame({"g": g, "p": p, "y": y, "w": w})


def _aggregate(rows: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """The sums a summary row carries, straight from the rows."""
    r = rows["w"] * (rows["y"] - rows["p"])
    t = rows.assign(W=rows["w"], swy=rows["w"] * rows["y"], swp=rows["w"] * rows["p"],
                    sw2=rows["w"] ** 2, total=r, positive=r.clip(lower=0),
                    negative=(-r).clip(lower=0), var=rows["w"] * rows["p"] * (1 - rows["p"]),
                    swpp=rows["w"] * rows["p"] ** 2, swyp=rows["w"] * rows["y"] * rows["p"],
                    swyy=rows["w"] * rows["y"] ** 2, p_min=rows["p"], p_max=rows["p"])
    t["var2"] = t["w"] * t["var"]
    sums = ["W", "swy", "swp", "sw2", "total", "positive", "negative", "var", "var2", "swpp",
            "swyp", "swyy"]
    out = t.groupby(keys).agg(n=("p", "size"), **{c: (c, "sum") for c in sums},
                              p_min=("p_min", "min"), p_max=("p_max", "max"))
    return out.reset_index()


def _cells(rows, grid):
    cell = np.minimum(np.floor(rows["p"] * grid), grid - 1).astype(int)
    return _aggregate(rows.assign(cell=cell), ["g", "cell"])


def _levels(rows):
    return _aggregate(rows, ["g", "p"]).drop(columns=["p_min", "p_max"])


@pytest.mark.parametrize("norm", ["l1", "l2", "max"])
def test_ece_finish_equals_explicit_loops(norm):
    rows = _rows()
    bins = rows.assign(bin=np.minimum(np.floor(rows["p"] * 10), 9).astype(int))
    got = binned.ece_finish(_aggregate(bins, ["g", "bin"]), by=["g"], norm=norm)
    for _, row in got.iterrows():
        part = bins[bins["g"] == row["g"]]
        W, total, worst = part["w"].sum(), 0.0, 0.0
        for b in range(10):
            inside = part[part["bin"] == b]
            if not len(inside):
                continue
            gap = abs(np.average(inside["y"], weights=inside["w"])
                      - np.average(inside["p"], weights=inside["w"]))
            total += inside["w"].sum() / W * (gap if norm == "l1" else gap**2)
            worst = max(worst, gap)
        want = {"l1": total, "l2": np.sqrt(total), "max": worst}[norm]
        assert row[binned.NORMS[norm]] == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("bins", [10, 15])
def test_equal_mass_finish_edges_are_numpys_quantiles(bins):
    rows = _rows(seed=3)
    histogram = _cells(rows, cells.CELLS)
    frame = cells.equal_mass_finish(histogram, _levels(rows), by=["g"], bins=bins,
                                    scale=cells.CELLS)
    for g, part in frame.groupby("g"):
        raw = rows[rows["g"] == g]
        sample = np.repeat(raw["p"].to_numpy(), raw["w"].to_numpy().astype(int))
        want = np.quantile(sample, np.linspace(0, 1, bins + 1))[1:-1]
        edges = part[[f"e{i}" for i in range(1, bins)]].iloc[0].to_numpy(float)
        np.testing.assert_array_equal(edges, want)
        # the bins: right-closed on the edges, sums by explicit loop
        ids = np.searchsorted(want, raw["p"].to_numpy(), side="left")
        for b, inside in raw.groupby(ids):
            got = part[part["bin"] == b].iloc[0]
            assert got["W"] == pytest.approx(inside["w"].sum(), rel=1e-12)
            assert got["swy"] == pytest.approx((inside["w"] * inside["y"]).sum(), rel=1e-12)


def test_equal_mass_finish_reads_only_the_wanted_cells_levels():
    """Levels of the wanted cells alone (what the follow-up fetches) give the same bins."""
    rows = _rows(seed=4, n=500)
    histogram = _cells(rows, cells.CELLS)
    full = cells.equal_mass_finish(histogram, _levels(rows), by=["g"], bins=10)
    wanted = []
    for g, part in histogram.groupby("g"):
        part = part.sort_values("cell", ignore_index=True)
        wanted += part.loc[cells._edge_pieces(part, 10), "cell"].map(lambda c: (g, c)).tolist()
    lv = _levels(rows)
    cell = np.minimum(np.floor(lv["p"] * cells.CELLS), cells.CELLS - 1).astype(int)
    few = lv[[(g, c) in set(wanted) for g, c in zip(lv["g"], cell)]]
    assert len(few) < len(lv)
    part = cells.equal_mass_finish(histogram, few, by=["g"], bins=10)
    pd.testing.assert_frame_equal(part, full)


def test_hosmer_lemeshow_finish_on_deciles_equals_loops():
    from scipy import stats

    rows = _rows(seed=5, n=400, groups=("a",), weights=False)
    frame = cells.equal_mass_finish(_cells(rows, cells.CELLS), _levels(rows), by=["g"], bins=10)
    got = binned.hosmer_lemeshow_finish(frame, by=["g"]).iloc[0]
    edges = np.quantile(rows["p"], np.linspace(0, 1, 11))[1:-1]
    ids = np.searchsorted(edges, rows["p"], side="left")
    stat = 0.0
    for _, inside in rows.groupby(ids):
        O, E, n = inside["y"].sum(), inside["p"].sum(), len(inside)
        stat += (O - E) ** 2 / (n * (E / n) * (1 - E / n))
    assert got["hl_statistic"] == pytest.approx(stat, rel=1e-10)
    assert got["p_value"] == pytest.approx(stats.chi2.sf(stat, got["n_bins"]), rel=1e-10)


def test_brier_finish_equals_the_rows():
    rows = _rows(seed=6)
    bins = rows.assign(bin=np.minimum(np.floor(rows["p"] * 5), 4).astype(int))
    got = binned.brier_finish(_aggregate(bins, ["g", "bin"]), by=["g"])
    for _, row in got.iterrows():
        part = rows[rows["g"] == row["g"]]
        want = np.average((part["y"] - part["p"]) ** 2, weights=part["w"])
        assert row["brier"] == pytest.approx(want, rel=1e-12)
        parts = (row["reliability"] - row["resolution"] + row["uncertainty"]
                 + row["within_bin_variance"] - row["within_bin_covariance"]
                 - row["label_variance"])
        assert parts == pytest.approx(want, rel=1e-10)


def _brute_cutoff(part: pd.DataFrame) -> float:
    """max over score intervals [u_i, u_j] of |Σ w(y − p)| / W, ties one unit: O(K²)."""
    lv = part.assign(r=part["w"] * (part["y"] - part["p"])).groupby("p")["r"].sum()
    r = lv.to_numpy()
    best = 0.0
    for i in range(len(r)):
        s = 0.0
        for j in range(i, len(r)):
            s += r[j]
            best = max(best, abs(s))
    return best / part["w"].sum()


@pytest.mark.parametrize("grid", [4, 64, 1024])
def test_cutoff_finish_equals_the_maximum_over_all_intervals(grid):
    rows = _rows(seed=7, n=200)
    rows["p"] = np.round(rows["p"] + np.random.default_rng(8).random(len(rows)) * 1e-3, 4)
    histogram = _cells(rows, grid)
    chosen = cumulative.candidates(histogram.sort_values(["g", "cell"], ignore_index=True), ["g"])
    ordered = histogram.sort_values(["g", "cell"], ignore_index=True)
    # the window's extremes inside the candidate cells, by explicit loops over their levels
    inside = []
    for (g, c) in ordered.loc[chosen, ["g", "cell"]].itertuples(index=False):
        raw = rows[(rows["g"] == g)
                   & (np.minimum(np.floor(rows["p"] * grid), grid - 1) == c)]
        lv = raw.assign(r=raw["w"] * (raw["y"] - raw["p"])).groupby("p")["r"].sum()
        S = lv.cumsum()
        inside.append({"g": g, "cell": c, "s_max": S.max(), "s_min": S.min(),
                       "p_at_max": S.idxmax(), "p_at_min": S.idxmin()})
    t = cumulative.extremes_finish(histogram, pd.DataFrame(inside), by=["g"])
    out = cumulative.cutoff_finish(t, weighted=True)
    for _, row in out.iterrows():
        want = _brute_cutoff(rows[rows["g"] == row["g"]])
        assert row["cutoff_error"] == pytest.approx(want, rel=1e-12)
        assert row["grid_bound"] == 0


def test_cutoff_finish_grid_form_bounds_the_exact_value():
    rows = _rows(seed=9, n=300)
    t = cumulative.extremes_finish(_cells(rows, 8), None, by=["g"])
    out = cumulative.cutoff_finish(t, weighted=True)
    for _, row in out.iterrows():
        want = _brute_cutoff(rows[rows["g"] == row["g"]])
        assert row["cutoff_error"] <= want + 1e-12
        assert want <= row["cutoff_error"] + row["grid_bound"] + 1e-12


def test_kuiper_finish_statistic_from_the_extremes():
    rows = _rows(seed=10, n=200, groups=("a",), weights=False)
    lv = rows.assign(r=rows["y"] - rows["p"]).groupby("p")["r"].sum().cumsum()
    inside = pd.DataFrame({"g": ["a"], "cell": [0], "s_max": [lv.max()], "s_min": [lv.min()],
                           "p_at_max": [lv.idxmax()], "p_at_min": [lv.idxmin()]})
    t = cumulative.extremes_finish(_cells(rows, 1), inside, by=["g"])  # one cell: all of S
    got = cumulative.brownian_finish(t, "kuiper").iloc[0]
    sigma = np.sqrt((rows["p"] * (1 - rows["p"])).sum())
    want = (max(lv.max(), 0) - min(lv.min(), 0)) / sigma
    assert got["kuiper"] == pytest.approx(want, rel=1e-12)
