"""LS-ECE against direct numerical integration on the raw rows, the paper's Monte Carlo estimator
and the spec's fixtures; smooth ECE against relplot."""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import stats
from scipy.special import expit, logit

import sqlcal
from tests.conftest import calibration_data


def direct_ls_ece(p, y, w, sigma, noise="gaussian", clip=1e-6, step_fraction=2000):
    """(1/W)∫|Σ w (y − ρ(u)) K(u − z)| du on a fine dense grid (trapezoid), from the raw rows."""
    z = logit(np.clip(np.asarray(p, float), clip, 1 - clip))
    y, w = np.asarray(y, float), np.asarray(w, float)
    du = sigma / step_fraction
    u = np.arange(z.min() - 9 * sigma, z.max() + 9 * sigma, du)
    if noise == "gaussian":
        K = stats.norm.pdf(u[:, None] - z[None, :], scale=sigma)
    else:
        K = (np.abs(u[:, None] - z[None, :]) <= sigma / 2) / sigma
    A = (K * (w * y)[None, :]).sum(1) - expit(u) * (K * w[None, :]).sum(1)
    return np.trapezoid(np.abs(A), u) / w.sum()


def _integration_data() -> pd.DataFrame:
    return calibration_data(300, seed=1, groups=2, weights=True)


@functools.lru_cache
def _direct_per_group(sigma: float, g: str) -> float:
    """The direct integral of a group of the data above: once per process, not once per engine
    (at σ = 0.05 its dense grid is 350,000 points by 150 rows, seconds a group)."""
    part = _integration_data().query("g == @g")
    return direct_ls_ece(part.p, part.y, part.w, sigma)


@pytest.mark.parametrize("sigma", [0.05, 0.3, 1.0])
def test_ls_ece_equals_direct_integration(upload, sigma):
    df = _integration_data()
    # the point values (bootstrap=0: no interval, which these tests do not read; LS-ECE's
    # 1,000 replicates of a fine grid took most of a minute a call on the CI machine)
    got = sqlcal.ls_ece(upload(df), score="p", label="y", weight="w", by="g", noise_scale=sigma,
                        bootstrap=0)
    fine = sqlcal.ls_ece(upload(df), score="p", label="y", weight="w", by="g", noise_scale=sigma,
                         grid_step=sigma / 100, bootstrap=0)
    for (_, row), (_, row_fine) in zip(got.iterrows(), fine.iterrows()):
        want = _direct_per_group(sigma, row.g)
        assert abs(row.ls_ece - want) <= row.grid_bound
        assert abs(row_fine.ls_ece - want) <= 1e-6


def test_ls_ece_uniform_noise_within_its_bound(upload):
    df = calibration_data(200, seed=2)
    got = sqlcal.ls_ece(upload(df), score="p", label="y", noise_scale=0.2, noise="uniform",
                        bootstrap=0).iloc[0]
    want = direct_ls_ece(df.p, df.y, np.ones(len(df)), 0.2, noise="uniform")
    assert abs(got.ls_ece - want) <= got.grid_bound


def test_ls_ece_uniform_noise_is_the_same_for_shuffled_and_rescaled_weights():
    """The box's A is 0 where no row is within reach, and the FFT leaves rounding of either sign
    there: its sign decided a kink's term next to the box's jump, so a shuffle of fractional
    weights or their rescaling moved LS-ECE by about 1e-5 relative. Oracle: invariance (a
    permutation of the rows and a common scale of the weights leave every sum's meaning, and
    the value, as they were), and the direct integral within the grid's bound."""
    rng = np.random.default_rng(4)
    n = 500
    p = rng.beta(2, 5, n)
    df = pd.DataFrame({"p": p, "y": (rng.random(n) < np.clip(1.15 * p, 0, 1)).astype(int),
                       "w": np.round(rng.uniform(0.2, 3.0, n), 3)})
    opts = dict(score="p", label="y", weight="w", noise="uniform", grid_step=0.005,
                bootstrap=0)
    base = sqlcal.ls_ece(df, **opts).iloc[0]
    shuffled = sqlcal.ls_ece(df.sample(frac=1, random_state=3), **opts).iloc[0]
    rescaled = sqlcal.ls_ece(df.assign(w=df.w * 1.0000001), **opts).iloc[0]
    for other in (shuffled, rescaled):
        assert other.ls_ece == pytest.approx(base.ls_ece, rel=1e-9, abs=0)
    want = direct_ls_ece(df.p, df.y, df.w.to_numpy(), 0.1, noise="uniform")
    assert abs(base.ls_ece - want) <= base.grid_bound


def test_ls_ece_soft_labels(upload):
    df = calibration_data(150, seed=3)
    df["y"] = np.random.default_rng(3).random(len(df))
    got = sqlcal.ls_ece(upload(df), score="p", label="y", noise_scale=0.3, soft_labels=True,
                        bootstrap=0).iloc[0]
    want = direct_ls_ece(df.p, df.y, np.ones(len(df)), 0.3)
    assert abs(got.ls_ece - want) <= got.grid_bound


def test_ls_ece_matches_the_papers_monte_carlo_estimator(upload):
    # the paper's estimator: t = z_I + σε, Nadaraya–Watson m̂(t), mean |m̂(t) − ρ(t)|
    rng = np.random.default_rng(4)
    z = rng.normal(2, 1.5, 3000)
    y = (rng.random(3000) < expit(0.8 * z + 0.1)).astype(float)
    sigma, runs = 0.3, []
    for seed in range(10):
        r = np.random.default_rng(seed)
        t = z[r.integers(0, len(z), 4000)] + sigma * r.standard_normal(4000)
        K = np.exp(-0.5 * ((t[:, None] - z[None, :]) / sigma) ** 2)
        runs.append(np.mean(np.abs(K @ y / K.sum(1) - expit(t))))
    got = sqlcal.ls_ece(upload(pd.DataFrame({"p": expit(z), "y": y.astype(int)})), score="p",
                        label="y", noise_scale=sigma, bootstrap=0).ls_ece.iloc[0]
    assert abs(got - np.mean(runs)) <= 3 * np.std(runs, ddof=1) / np.sqrt(len(runs))


# spec seed003 §6, T1 (two atoms at ±a, opposite labels) and T4 (one atom at 1/2)
T1 = [  # a, (σ = 0.05, 0.1, 0.5)
    (0.0, (0.009969, 0.019914, 0.095943)),
    (1e-3, (0.001993, 0.015926, 0.095145)),
    (0.1, (0.452074, 0.312266, 0.018456)),
    (1.0, (0.269055, 0.269394, 0.254574)),
]


@pytest.mark.parametrize("a, values", T1)
def test_two_atom_fixture(upload, a, values):
    df = pd.DataFrame({"p": [expit(a), expit(-a)], "y": [1, 0]})
    for sigma, want in zip((0.05, 0.1, 0.5), values):
        got = sqlcal.ls_ece(upload(df), score="p", label="y", noise_scale=sigma,
                            bootstrap=0).iloc[0]
        assert abs(got.ls_ece - want) <= got.grid_bound + 1e-6


def test_binned_ece_jumps_where_ls_ece_moves_continuously(upload):
    # T1 at a → 0: the scores straddle 1/2, a 10-bin edge. Binned ECE jumps from 0 to about 1/2;
    # LS-ECE moves by at most sqrt(2/π)·a/σ (its Lipschitz bound, spec §2.8)
    sigma = 0.1
    base = sqlcal.ls_ece(upload(pd.DataFrame({"p": [0.5, 0.5], "y": [1, 0]})), score="p",
                         label="y", noise_scale=sigma, bootstrap=0).ls_ece.iloc[0]
    for a in (1e-6, 1e-4, 1e-3):
        df = pd.DataFrame({"p": [expit(a), expit(-a)], "y": [1, 0]})
        t = upload(df)
        assert sqlcal.ece(t, score="p", label="y", bins=10).ece.iloc[0] > 0.49
        moved = abs(sqlcal.ls_ece(t, score="p", label="y", noise_scale=sigma,
                                  bootstrap=0).ls_ece.iloc[0] - base)
        assert moved <= np.sqrt(2 / np.pi) * a / sigma + 1e-6
    assert sqlcal.ece(upload(pd.DataFrame({"p": [0.5, 0.5], "y": [1, 0]})), score="p",
                      label="y", bins=10).ece.iloc[0] == 0


def test_calibration_limits_and_symmetry(upload):
    df = calibration_data(400, seed=5)
    t = upload(df)
    mirrored = upload(df.assign(p=1 - df.p, y=1 - df.y))
    for sigma in (0.1, 1.0):
        a = sqlcal.ls_ece(t, score="p", label="y", noise_scale=sigma, bootstrap=0).ls_ece.iloc[0]
        b = sqlcal.ls_ece(mirrored, score="p", label="y", noise_scale=sigma,
                          bootstrap=0).ls_ece.iloc[0]
        assert a == pytest.approx(b, abs=1e-9)
    # (no interval: at σ = 200 the grid is mostly the kernel's reach, and 1,000 replicates of
    # it are over the memory budget)
    assert sqlcal.ls_ece(t, score="p", label="y", noise_scale=200.0,
                         bootstrap=0).ls_ece.iloc[0] == pytest.approx(0.5, abs=0.02)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10**6), scale=st.floats(0.01, 0.5))
def test_lipschitz_in_the_logits(upload, seed, scale):
    rng = np.random.default_rng(seed)
    df = calibration_data(60, seed=seed % 1000)
    shift = rng.normal(0, scale, len(df))
    moved = df.assign(p=expit(logit(df.p) + shift))
    sigma = 0.2
    a = sqlcal.ls_ece(upload(df), score="p", label="y", noise_scale=sigma, bootstrap=0).iloc[0]
    b = sqlcal.ls_ece(upload(moved), score="p", label="y", noise_scale=sigma, bootstrap=0).iloc[0]
    bound = np.sqrt(2 / np.pi) * np.abs(shift).mean() / sigma
    assert abs(a.ls_ece - b.ls_ece) <= bound + a.grid_bound + b.grid_bound


@pytest.mark.parametrize("n, ties", [(500, False), (5000, True), (50000, False)])
def test_smooth_ece_matches_relplot(upload, n, ties):
    import relplot

    df = calibration_data(n, seed=6, ties=ties)
    want, width = relplot.smECE(df.p.to_numpy(), df.y.to_numpy(), return_width=True)
    got = sqlcal.smooth_ece(upload(df), score="p", label="y").iloc[0]
    assert got.smooth_ece == pytest.approx(want, rel=1e-9)
    assert got.sigma == width
    fixed = sqlcal.smooth_ece(upload(df), score="p", label="y", sigma=0.05).smooth_ece.iloc[0]
    assert fixed == pytest.approx(relplot.smECE_sigma(df.p.to_numpy(), df.y.to_numpy(), 0.05),
                                  rel=1e-9)


def classifier_outputs(n: int, seed: int, *, groups: int = 0, weights: bool = False):
    """Scores shaped like a confident classifier's: sigmoids of logits of magnitude about 10
    (three quarters of the rows within 1e-3 of 0 or 1), nearly all distinct, plus a tenth of
    the rows tied on a few values: scores drawn from the rest, nodes of relplot's grids
    (i/1000, i/2560), score-cell edges (c/2^14) and both ends."""
    rng = np.random.default_rng(seed)
    z = rng.choice([-1.0, 1.0], n) * rng.gamma(6.0, 1.6, n) + rng.normal(0, 0.5, n)
    p = expit(z)
    special_values = [0.0, 1.0, 0.001, 0.999, 0.5, 3 / 2560, 2557 / 2560, 17 / 2**14,
                      (2**14 - 17) / 2**14, 1 / 2**14, 1 - 1 / 2**14]
    tied = rng.random(n) < 0.1
    p[tied] = rng.choice(np.concatenate([rng.choice(p, 100), special_values]), tied.sum())
    # slightly over-confident, the tied rows calibrated
    y = (rng.random(n) < np.where(tied, p, expit(0.85 * z + 0.3))).astype(np.int64)
    df = pd.DataFrame({"p": p, "y": y})
    if groups:
        df["g"] = rng.choice([f"g{i}" for i in range(groups)], n)
    if weights:
        df["w"] = rng.integers(1, 5, n).astype(float)
    return df


@functools.lru_cache(maxsize=None)
def relplot_smooth_ece(n: int, seed: int, sigma: float | None, groups: int,
                       weights: bool = False) -> dict:
    """relplot's smooth ECE (and bandwidth) per group of ``classifier_outputs``, each row
    repeated w times when weighted (relplot takes no weights). Cached: every engine compares
    against the same numbers."""
    import relplot

    df = classifier_outputs(n, seed, groups=groups, weights=weights)
    if weights:
        df = df.loc[df.index.repeat(df.w.astype(int))]
    out = {}
    for g, part in df.groupby("g") if groups else [(None, df)]:
        p, y = part.p.to_numpy(), part.y.to_numpy()
        out[g] = (relplot.smECE(p, y, return_width=True) if sigma is None
                  else (relplot.smECE_sigma(p, y, sigma), sigma))
    return out


def engine_size(con, duckdb: int, others: int) -> int:
    return duckdb if con.name == "duckdb" else others


@pytest.mark.parametrize("sigma", [None, 1 / 256, 0.01, 0.1])
def test_smooth_ece_equals_relplot_on_classifier_outputs(con, upload, sigma):
    # most mass within 1e-3 of 0 and 1: the score cells there straddle the nodes of relplot's
    # grid (the automatic bandwidth lands below 0.01, on finer grids than σ = 1's)
    n = engine_size(con, 120_000, 20_000)
    df = classifier_outputs(n, seed=11, groups=3)
    assert df.p.nunique() > 0.8 * n
    assert ((df.p < 1e-3) | (df.p > 1 - 1e-3)).mean() > 0.6
    got = sqlcal.smooth_ece(upload(df), score="p", label="y", by="g", sigma=sigma)
    want = relplot_smooth_ece(n, 11, sigma, 3)
    assert sorted(got.g) == sorted(want)
    for _, row in got.iterrows():
        value, width = want[row.g]
        assert row.smooth_ece == pytest.approx(value, rel=1e-9, abs=0)
        assert row.sigma == pytest.approx(width, rel=1e-9, abs=0)
        if sigma is None:
            assert width < 0.01  # the search read grids finer than σ = 1's


@pytest.mark.parametrize("sigma", [None, 1 / 256])
def test_smooth_ece_weighted_equals_relplot_on_repeated_rows(con, upload, sigma):
    n = engine_size(con, 40_000, 10_000)
    df = classifier_outputs(n, seed=12, groups=2, weights=True)
    got = sqlcal.smooth_ece(upload(df), score="p", label="y", weight="w", by="g", sigma=sigma)
    want = relplot_smooth_ece(n, 12, sigma, 2, weights=True)
    for _, row in got.iterrows():
        value, width = want[row.g]
        assert row.smooth_ece == pytest.approx(value, rel=1e-9, abs=0)
        assert row.sigma == pytest.approx(width, rel=1e-9, abs=0)


def test_smooth_ece_with_several_nodes_in_a_cell(con, upload):
    # σ = 6e-4: relplot's grid has 16666 intervals, finer than the 2^14 score cells
    n = engine_size(con, 30_000, 10_000)
    df = classifier_outputs(n, seed=13)
    got = sqlcal.smooth_ece(upload(df), score="p", label="y", sigma=6e-4).smooth_ece.iloc[0]
    value, _ = relplot_smooth_ece(n, 13, 6e-4, 0)[None]
    assert got == pytest.approx(value, rel=1e-9, abs=0)


def test_smooth_ece_weights_equal_duplication_and_groups(upload):
    df = calibration_data(3000, seed=7, groups=2)
    df["w"] = np.random.default_rng(7).integers(1, 4, len(df)).astype(float)
    weighted = sqlcal.smooth_ece(upload(df), score="p", label="y", weight="w", by="g")
    expanded = df.loc[df.index.repeat(df.w.astype(int))]
    plain = sqlcal.smooth_ece(upload(expanded), score="p", label="y", by="g")
    np.testing.assert_allclose(weighted.smooth_ece, plain.smooth_ece, rtol=1e-9)


def test_smooth_ece_bootstrap_interval(upload):
    import relplot

    df = calibration_data(4000, seed=8)
    got = sqlcal.smooth_ece(upload(df), score="p", label="y", bootstrap=200, seed=1).iloc[0]
    assert got.ci_lower < got.smooth_ece < got.ci_upper
    # against a Poisson bootstrap of the raw rows through relplot itself
    rng = np.random.default_rng(2)
    draws = []
    for _ in range(200):
        k = rng.poisson(1, len(df))
        draws.append(relplot.smECE(np.repeat(df.p.to_numpy(), k), np.repeat(df.y.to_numpy(), k)))
    lo, hi = np.quantile(draws, [0.025, 0.975])
    width = hi - lo
    assert got.ci_lower == pytest.approx(lo, abs=0.25 * width)
    assert got.ci_upper == pytest.approx(hi, abs=0.25 * width)


def test_smooth_reliability_curve(upload):
    df = calibration_data(5000, seed=9)
    curve = sqlcal.smooth_reliability(upload(df), score="p", label="y", points=101)
    assert len(curve) == 101
    # the Nadaraya–Watson estimate with relplot's kernel, computed on the raw rows
    from relplot.kernels import ReflectedGaussianKernel

    sigma = curve.sigma.iloc[0]
    want, _ = ReflectedGaussianKernel(sigma).smooth(df.p.to_numpy(), df.y.to_numpy(float),
                                                     curve.t.to_numpy())
    np.testing.assert_allclose(curve.observed, want, rtol=1e-9, atol=1e-12)
    # the density integrates to 1 and the curve is a rate
    assert np.trapezoid(curve.density, curve.t) == pytest.approx(1, abs=0.02)
    dense = curve[curve.density > 0.5]
    assert ((dense.observed > -0.05) & (dense.observed < 1.05)).all()


@pytest.mark.parametrize("sigma", [None, 1 / 256])
def test_smooth_reliability_equals_relplot_on_classifier_outputs(con, upload, sigma):
    # where the scores are sparse the curve divides a vanishing sum by a vanishing density
    from relplot.kernels import ReflectedGaussianKernel

    n = engine_size(con, 40_000, 10_000)
    df = classifier_outputs(n, seed=14, groups=2)
    curve = sqlcal.smooth_reliability(upload(df), score="p", label="y", by="g", sigma=sigma,
                                      points=301)
    for g, part in df.groupby("g"):
        mine = curve[curve.g == g]
        width = relplot_smooth_ece(n, 14, sigma, 2)[g][1] if sigma is None else sigma
        assert mine.sigma.iloc[0] == width
        want, _ = ReflectedGaussianKernel(width).smooth(part.p.to_numpy(), part.y.to_numpy(float),
                                                        mine.t.to_numpy())
        np.testing.assert_allclose(mine.observed, want, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("sigma", [10.0, 100.0, 1000.0])
def test_ls_ece_large_sigma_tends_to_one_half(upload, sigma):
    # one atom at 1/2 with both labels: LS-ECE = E|ρ(σZ) − ½| exactly (review finding: the grid
    # must also resolve the sigmoid, not only the kernel)
    from scipy import integrate

    exact = 2 * integrate.quad(lambda x: (expit(sigma * x) - 0.5) * stats.norm.pdf(x), 0, 40,
                               epsabs=1e-14)[0]
    got = sqlcal.ls_ece(upload(pd.DataFrame({"p": [0.5, 0.5], "y": [0, 1]})), score="p",
                        label="y", noise_scale=sigma, bootstrap=0).iloc[0]  # (point value)
    assert abs(got.ls_ece - exact) <= got.grid_bound


def test_smooth_ece_bootstrap_of_a_tiny_group(upload):
    got = sqlcal.smooth_ece(upload(pd.DataFrame({"p": [0.3], "y": [1]})), score="p", label="y",
                            bootstrap=50).iloc[0]
    assert got.ci_lower > 0 and got.ci_lower <= got.smooth_ece <= got.ci_upper
