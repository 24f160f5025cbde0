"""The finishes of the smooth, TCE and distance families without an engine: summary frames built
from raw numpy rows in the test (levels by a plain groupby, the other summaries evaluated from them
by sqlcal.query.local), finished by the module-level functions, compared with relplot, direct
numerical integration or brute force on the rows."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from sqlcal.metrics import distance, smooth, tce
from sqlcal.query import declared, local
from tests.conftest import calibration_data
from tests.test_distance import intce_brute, lower_lp, smce_primal, upper_brute
from tests.test_local_smooth_tce_distance import levels_of
from tests.test_smooth import classifier_outputs, direct_ls_ece
from tests.test_tce import binomtest_loop, positional_ids


def smooth_frames(df: pd.DataFrame, by: list[str], sigma: float | None):
    """smECE's first histogram of raw rows, and its split follow-up, both from the levels."""
    levels = levels_of(df, by)
    cells = local.evaluate(declared.smooth_cells(2**14, [smooth._intervals(sigma or 1.0)]),
                           levels, by)
    return cells, lambda grids: local.evaluate(declared.smooth_split(2**14, grids), levels, by)


@pytest.mark.parametrize("sigma", [None, 1 / 256, 0.1])
def test_smooth_ece_finish_equals_relplot(sigma):
    import relplot

    df = classifier_outputs(20_000, 31, groups=2)
    cells, split = smooth_frames(df, ["g"], sigma)
    got = smooth.smooth_ece_finish(cells, by=["g"], sigma=sigma, split=split)
    for _, row in got.iterrows():
        part = df[df.g == row.g]
        p, y = part.p.to_numpy(), part.y.to_numpy()
        want, width = (relplot.smECE(p, y, return_width=True) if sigma is None
                       else (relplot.smECE_sigma(p, y, sigma), sigma))
        assert row.smooth_ece == pytest.approx(want, rel=1e-9)
        assert row.sigma == width
        assert (row.n, row.W) == (len(part), len(part))


def test_smooth_ece_finish_without_the_split_says_which_grids_it_lacks():
    # confident scores: the automatic bandwidth lands below 0.01, on grids finer than σ = 1's
    df = classifier_outputs(20_000, 31)
    cells, _ = smooth_frames(df, [], None)
    with pytest.raises(ValueError, match=r"grids \[.*\], which the score histogram was not split"):
        smooth.smooth_ece_finish(cells, by=[], sigma=None)


def test_smooth_ece_finish_weights_count_as_repeated_rows():
    import relplot

    df = classifier_outputs(5000, 32, weights=True)
    cells, split = smooth_frames(df, [], None)
    got = smooth.smooth_ece_finish(cells, by=[], split=split).iloc[0]
    rows = df.loc[df.index.repeat(df.w.astype(int))]
    want, width = relplot.smECE(rows.p.to_numpy(), rows.y.to_numpy(), return_width=True)
    assert got.smooth_ece == pytest.approx(want, rel=1e-9)
    assert got.sigma == width


def test_smooth_ece_finish_bootstrap_is_seeded_and_brackets_the_value():
    df = calibration_data(3000, seed=33, groups=3)
    cells, split = smooth_frames(df, ["g"], 0.05)
    one = smooth.smooth_ece_finish(cells, by=["g"], sigma=0.05, bootstrap=50, seed=4,
                                   split=split).sort_values("g", ignore_index=True)
    # the same histogram in another row and group order (as another engine returns it): the
    # same draws
    shuffled = cells.sample(frac=1.0, random_state=0)
    two = smooth.smooth_ece_finish(shuffled, by=["g"], sigma=0.05, bootstrap=50, seed=4)
    two = two.sort_values("g", ignore_index=True)
    assert one.ci_lower.tolist() == two.ci_lower.tolist()
    assert one.ci_upper.tolist() == two.ci_upper.tolist()
    assert (one.ci_lower < one.smooth_ece).all() and (one.smooth_ece < one.ci_upper).all()


def test_smooth_reliability_finish_is_nadaraya_watson_with_relplots_kernel():
    from relplot.kernels import ReflectedGaussianKernel

    df = calibration_data(2000, seed=34, groups=2)
    cells, split = smooth_frames(df, ["g"], 0.05)
    got = smooth.smooth_reliability_finish(cells, by=["g"], sigma=0.05, points=50, split=split)
    t = np.linspace(0, 1, 50)
    for g, curve in got.groupby("g"):
        part = df[df.g == g]
        want, _ = ReflectedGaussianKernel(0.05).smooth(part.p.to_numpy(),
                                                       part.y.to_numpy(float), t)
        np.testing.assert_allclose(curve.observed.to_numpy(), want, rtol=1e-9, atol=1e-12)
        assert curve.density.mean() == pytest.approx(1.0)


@pytest.mark.parametrize("sigma, noise", [(0.05, "gaussian"), (0.5, "gaussian"),
                                          (0.2, "uniform")])
def test_ls_ece_finish_equals_direct_integration(sigma, noise):
    df = calibration_data(300, seed=35, groups=2, weights=True)
    delta = smooth._logit_step(sigma, noise, None)
    grid = local.evaluate(declared.logit_grid(delta, 1e-6), levels_of(df, ["g"]), ["g"])
    got = smooth.ls_ece_finish(grid, by=["g"], noise_scale=sigma, noise=noise, step=delta)
    for _, row in got.iterrows():
        part = df[df.g == row.g]
        want = direct_ls_ece(part.p, part.y, part.w, sigma, noise=noise)
        assert abs(row.ls_ece - want) <= row.grid_bound
        assert row.W == pytest.approx(part.w.sum(), rel=1e-12)


# -- TCE ---------------------------------------------------------------------------------------


def tce_frames(df: pd.DataFrame, by: list[str], strategy: str):
    """TCE's first summary of raw rows (the levels, or the 2^10 score cells) and its follow-up
    (the levels inside score ranges), from the levels."""
    levels = levels_of(df, by)
    first = levels if strategy == "pavabc" else local.evaluate(declared.cells(1024, "sums"),
                                                              levels, by)
    return first, lambda ranges: local.evaluate(declared.levels_within(ranges, "sums"), levels,
                                                by)


@pytest.mark.parametrize("strategy", ["uniform", "quantile", "pavabc"])
@pytest.mark.parametrize("ties", [False, True])
def test_tce_finish_rejections_equal_a_binomtest_loop(strategy, ties):
    df = calibration_data(2500, seed=36, ties=ties)
    frame, levels_in = tce_frames(df, [], strategy)
    got = tce.tce_bins_finish(frame, by=[], strategy=strategy, levels_in=levels_in)
    p = df.p.to_numpy()
    if strategy == "uniform":
        ids = np.digitize(p, np.linspace(0, 1, 11)[1:-1])
    elif strategy == "quantile":
        ids = positional_ids(p, 10)
    else:  # the bins found: every score from a bin's lowest up to the next bin's
        ids = np.searchsorted(got.score_min.to_numpy()[1:], p, side="right")
    want = binomtest_loop(df, ids)
    assert dict(zip(got.bin, got.rejected.astype(int))) == want
    total = tce.tce_finish(got, by=[]).iloc[0]
    assert total.tce == pytest.approx(100 * sum(want.values()) / len(df), abs=1e-12)
    assert total.n_bins == len(want)


def test_tce_finish_whole_weights_are_repeated_predictions_in_groups():
    df = calibration_data(1500, seed=37, groups=2)
    df["w"] = np.random.default_rng(37).integers(1, 4, len(df)).astype(float)
    frame, levels_in = tce_frames(df, ["g"], "uniform")
    got = tce.tce_finish(tce.tce_bins_finish(frame, by=["g"], strategy="uniform", bins=5,
                                             levels_in=levels_in), by=["g"])
    for _, row in got.iterrows():
        rows = df[df.g == row.g]
        rows = rows.loc[rows.index.repeat(rows.w.astype(int))].reset_index(drop=True)
        ids = np.digitize(rows.p.to_numpy(), np.linspace(0, 1, 6)[1:-1])
        rejected = sum(binomtest_loop(rows, ids).values())
        assert row.tce == pytest.approx(100 * rejected / len(rows), abs=1e-12)
        assert row.W == len(rows)


# -- distances ---------------------------------------------------------------------------------


def few_levels(seed: int, m: int, weights: bool = False) -> pd.DataFrame:
    """m distinct scores, a few rows each, labels drawn from the scores."""
    rng = np.random.default_rng(seed)
    p = rng.choice(np.round(rng.random(m), 3), 5 * m)
    df = pd.DataFrame({"p": p, "y": (rng.random(len(p)) < p ** 1.5).astype(np.int64)})
    if weights:
        df["w"] = rng.uniform(0.2, 2.0, len(df))
    return df


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_distance_finishes_on_the_levels_equal_brute_force(seed):
    df = few_levels(seed, 7, weights=seed == 2)
    w = df["w"].to_numpy() if "w" in df else None
    frame = distance.levels_frame(levels_of(df, []))
    smce = distance.lipschitz_finish(frame, by=[], lipschitz=1.0).iloc[0]
    assert smce.lipschitz_calibration_error == pytest.approx(smce_primal(df.p, df.y, w),
                                                             abs=1e-10)
    assert smce.quantization_bound == 0
    bracket = distance.distance_finish(frame, by=[], grid=64).iloc[0]
    assert bracket.lower_distance == pytest.approx(lower_lp(df.p, df.y, w, grid=64), abs=1e-9)
    assert bracket.upper_method == "partitions" or len(np.unique(df.p)) > 8
    assert bracket.upper_distance == pytest.approx(upper_brute(df.p, df.y, w), abs=1e-10)
    intce = distance.interval_finish(frame, by=[]).iloc[0]
    assert intce.interval_calibration_error == pytest.approx(intce_brute(df.p, df.y, w),
                                                             abs=1e-10)
    assert intce.method == "exact"


def test_distance_finishes_on_cells_stay_within_their_bound():
    # cells at their mean scores: R exact, each row moved by at most the quantization bound
    df = calibration_data(400, seed=38)
    levels = levels_of(df, [])
    exact = distance.lipschitz_finish(distance.levels_frame(levels), by=[]).iloc[0]
    cells = local.evaluate(declared.cells(16, "sums"), levels, [])
    coarse = distance.lipschitz_finish(distance.cells_frame(cells), by=[]).iloc[0]
    assert coarse.n_levels <= 16 < exact.n_levels
    assert 0 < coarse.quantization_bound
    assert abs(coarse.lipschitz_calibration_error - exact.lipschitz_calibration_error) <= \
        coarse.quantization_bound + 1e-12


def test_interval_bins_finish_is_binned_ece_plus_the_width():
    df = calibration_data(800, seed=39, groups=2)
    bins = local.evaluate(declared.uniform(8, "sqlcal", "sums"), levels_of(df, ["g"]), ["g"])
    got = distance.interval_bins_finish(bins, by=["g"], bins=8)
    for _, row in got.iterrows():
        part = df[df.g == row.g]
        ids = np.minimum(np.floor(part.p * 8), 7)
        resid = (part.y - part.p).groupby(ids).sum().abs().sum() / len(part)
        assert row.binned_error == pytest.approx(resid, rel=1e-12)
        assert row.interval_calibration_error == pytest.approx(resid + 1 / 8, rel=1e-12)
