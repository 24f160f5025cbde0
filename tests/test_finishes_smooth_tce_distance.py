"""The finishes of the smooth, TCE and distance families without an engine: summary frames built
from raw numpy rows in the test (levels by a plain groupby, the other summaries evaluated from them
by sqlcal.query.local), finished by the module-level functions, compared with relplot, direct
numerical integration or brute force on the rows."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from sqlcal.metrics import smooth
from sqlcal.query import declared, local
from tests.conftest import calibration_data
from tests.test_local_smooth_tce_distance import levels_of
from tests.test_smooth import classifier_outputs, direct_ls_ece


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
    df = calibration_data(3000, seed=33)
    cells, split = smooth_frames(df, [], 0.05)
    one = smooth.smooth_ece_finish(cells, by=[], sigma=0.05, bootstrap=50, seed=4, split=split)
    # the same histogram in another row order (as another engine returns it): the same draws
    shuffled = cells.sample(frac=1.0, random_state=0)
    two = smooth.smooth_ece_finish(shuffled, by=[], sigma=0.05, bootstrap=50, seed=4)
    assert one.ci_lower.iloc[0] == two.ci_lower.iloc[0]
    assert one.ci_upper.iloc[0] == two.ci_upper.iloc[0]
    assert one.ci_lower.iloc[0] < one.smooth_ece.iloc[0] < one.ci_upper.iloc[0]


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
    got = smooth.ls_ece_finish(grid, by=["g"], sigma=sigma, noise=noise, delta=delta)
    for _, row in got.iterrows():
        part = df[df.g == row.g]
        want = direct_ls_ece(part.p, part.y, part.w, sigma, noise=noise)
        assert abs(row.ls_ece - want) <= row.grid_bound
        assert row.W == pytest.approx(part.w.sum(), rel=1e-12)
