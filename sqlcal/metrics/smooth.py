"""Smooth calibration metrics: the logit-smoothed ECE (LS-ECE) and relplot's smooth ECE (smECE).

The engine does the O(N) part as one GROUP BY: a fine histogram (a linear-binned logit grid for
LS-ECE; the 16384-cell score histogram split at the nodes of relplot's grid for smECE). numpy
does the smoothing.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd
from scipy import signal, special, stats

from sqlcal.inputs.sources import Source
from sqlcal.metrics import groups, key_tuple, per_group, resolve_weight_kind, result
from sqlcal.metrics._registry import Report, metric
from sqlcal.metrics.cells import SMOOTH_CELLS
from sqlcal.metrics.intervals import (
    REPLICATES,
    SEED,
    WEIGHT_FLOOR,
    available,
    cholesky,
    draw_stream,
    held,
    interval_parts,
    selection_threshold,
)
from sqlcal.options import Option, checked, costs_ls_ece, costs_smooth
from sqlcal.query import declared, executor, planner
from sqlcal.query.executor import as_source

NOISES = ("gaussian", "uniform")
#: the automatic bandwidth's search can read finer grids (σ < 0.01), each a follow-up over the
#: straddling cells: one exported statement holds the histogram of a fixed bandwidth
_REFINING = {("sigma", None): "sigma=<a bandwidth> (one histogram split at its grid)"}


@metric(
    needs=lambda src, o: [declared.logit_grid(
        _logit_step(o["noise_scale"], o["noise"], o["grid_step"]), o["clip"],
        *_ls_ece_parts(src, o))],
    report={"ls_ece": Report({"ls_ece": "ls_ece", "ci_lower": "ls_ece_lower",
                              "ci_upper": "ls_ece_upper"})},
    trust={"grid_bound": "ls_ece_grid_bound", "noise": None, "grid_step": None,
           "ci_method": None, "confidence": "confidence", "weight_kind": "weight_kind"},
    cost=costs_ls_ece,
    options={"noise": Option("choice", "the noise added to the logits", choices=NOISES),
             "noise_scale": Option("float", "scale of the noise added to the logits", low=0,
                                   open_low=True),
             "grid_step": Option("float", "logit grid step (default noise_scale/20, "
                                 "noise_scale/200 for uniform noise)", low=0, open_low=True,
                                 optional=True)})
@checked
def ls_ece(
    data: Any,
    *,
    score: str | None = None,
    label: str | None = None,
    weight: str | None = None,
    by: str | Sequence[str] = (),
    where: Any = None,
    noise_scale: float = 0.1,
    noise: str = "gaussian",
    clip: float = 1e-6,
    grid_step: float | None = None,
    confidence: float = 0.95,
    bootstrap: int = REPLICATES,
    seed: int = SEED,
    weight_kind: str = "auto",
    **source_options: Any,
) -> pd.DataFrame:
    r"""The logit-smoothed ECE: the ECE of the predictor after noise is added to its logit.

    Parameters
    ----------
    data : Source, ibis Table, path, URL or DataFrame
        What to measure; see :func:`sqlcal.source`.
    score : str, optional
        Column of predicted probabilities of the positive class (not needed when ``data`` is a
        :class:`~sqlcal.Source`).
    label : str, optional
        Column of 0/1 outcomes, or of soft labels in [0, 1] with ``soft_labels=True`` (not needed
        when ``data`` is a :class:`~sqlcal.Source`).
    weight : str, optional
        Column of non-negative row weights; by default every row weighs 1.
    by : str or sequence of str, default ()
        Group keys: one result row per group.
    where : ibis boolean expression, callable or SQL string, optional
        Filter applied in the engine before anything else.
    noise_scale : float, default 0.1
        The noise scale σ in logit units (the paper sweeps 1/m for m = 1 … 100 and sets no
        default).
    noise : {"gaussian", "uniform"}, default "gaussian"
        ξ ~ N(0, σ²) (the paper's main text) or σ·U[−½, ½] (its appendix).
    clip : float, default 1e-6
        Scores are clipped to [clip, 1 − clip] before the logit (|z| ≤ 13.8): scores of exactly 0
        or 1 have no logit. A confidently wrong prediction still contributes about 1.
    grid_step : float, optional
        The logit grid's spacing δ; default min(σ, 1)/20 (Gaussian) or min(σ, 1)/200 (uniform).
    confidence : float, default 0.95
        Two-sided level of the interval.
    bootstrap : int, default 1000
        Replicates of the interval's bootstrap (0: no interval, and no second moments in the
        scan).
    seed : int, default 20260101
        Seed of the replicates' draws (the same interval on every run and engine).
    weight_kind : {"auto", "frequency", "sampling"}, default "auto"
        How weights enter the interval: a row of weight w is w rows (frequency), or one row
        drawn with probability ∝ 1/w (sampling, and any ``negative_sampling_rate``); ``"auto"``
        reads whole-number weights as frequencies.
    **source_options
        Further options of :func:`sqlcal.source`, such as ``table=``, ``on_invalid=`` and
        ``soft_labels=``.

    Returns
    -------
    pandas.DataFrame
        One row per group: the keys, ``ls_ece``, ``n``, ``W``, ``ci_lower``, ``ci_upper`` (the
        interval of the population's LS-ECE at the same σ, see Notes; NaN without
        ``bootstrap``), ``grid_bound`` (the grid's error bound, see Notes), ``noise_scale``,
        ``noise``, ``clip``, ``grid_step`` (the logit grid spacing δ used), ``ci_method``
        (``"bootstrap"``, or None), ``confidence``, ``weight_kind``; with
        ``on_invalid="drop"``, ``n_dropped``.

    See Also
    --------
    smooth_ece : kernel smoothing of the scores instead of noise on the logits.
    ece : the binned error it smooths.
    tce : a test-based error on adaptive bins.

    Notes
    -----
    Chidambaram, Lee, McSwiggen & Rezchikov (2024), How Flawed Is ECE? An Analysis via Logit
    Smoothing. With logits :math:`z_i` and noise density :math:`K_\sigma`, the estimand is the
    exact integral (no Monte Carlo, no division)

    .. math:: \mathrm{LS\text{-}ECE}_\sigma = \frac1W \int \Big|\sum_i w_i (y_i - \rho(u))
       K_\sigma(u - z_i)\Big|\,du, \qquad \rho = \text{sigmoid}.

    The engine linear-bins the logits onto the grid kδ (with the masses' spread within each
    cell); numpy convolves with the kernel, cancels linear binning's second-order term
    ½δ²f(1−f)K'' with the spread, and integrates |A| by the trapezoid rule, exactly across sign
    changes. Gaussian noise: the error is at most about :math:`0.0243(\delta/\sigma)^3 +
    0.051(\delta/\sigma)^4` to leading order (3.4e-6 at δ = σ/20, 2.4e-8 at σ/100;
    plus :math:`0.012\delta^2` for sampling the sigmoid on the grid (``grid_bound``; the default
    keeps δ ≤ 0.05 logit units). Uniform noise: linear binning moves each row's kernel by at most
    :math:`\delta/\sigma` in total variation (first order, hence the finer default grid). LS-ECE is
    not 0 for a calibrated model (about 0.2σ for an atom at ½: (1/4)·sqrt(2/π)·σ = 0.1995σ) and
    tends to ½ as σ → ∞; values are comparable only at the same σ.

    **The interval** covers the population's LS-ECE at the same σ, noise and clip,
    :math:`\int |E[w(y - \rho(u))K_\sigma(u - z)]|\,du / E[w]`: the value the estimate tends
    to as the rows grow with σ fixed, not the ECE of the scores themselves (LS-ECE reaches that
    only as σ → 0, Chidambaram et al.'s Theorem 5.4). That value is not 0 for a calibrated model:
    it carries the smoothing's own bias (0.1995σ for an atom, O(σ²) for a smooth score
    density), so a calibrated model's interval reaches down to that bias, and to 0 only where
    the bias is within the noise. The plug-in value is biased upward where A(u) is near 0 (as
    the binned ECE is at a calibrated bin); the ends follow the directional derivative of
    :math:`\int|A|` (Fang & Santos 2019), with the replicates of a Poisson bootstrap of the
    rows drawn, as Gaussian vectors with the same covariance, from the second moments of each
    row's split between its two logit nodes that the grid's scan adds (Hanley & MacGibbon 2006;
    Chernozhukov, Chetverikov & Kato 2013). The grid's error ``grid_bound`` widens both ends.
    See :func:`sqlcal.metrics.smooth.ls_ece_interval` for the method and its approximations,
    and the guide's Intervals page for its measured coverage.

    References
    ----------
    .. [1] M. Chidambaram, H. Lee, C. McSwiggen and S. Rezchikov, "How Flawed Is ECE? An Analysis
       via Logit Smoothing", ICML (PMLR 235), 2024.
    .. [2] Z. Fang and A. Santos, "Inference on Directionally Differentiable Functions", Review
       of Economic Studies 86(1), 2019.
    .. [3] J. A. Hanley and B. MacGibbon, "Creating non-parametric bootstrap samples using Poisson
       frequencies", Computer Methods and Programs in Biomedicine 83(1), 2006.
    .. [4] V. Chernozhukov, D. Chetverikov and K. Kato, "Gaussian approximations and multiplier
       bootstrap for maxima of sums of high-dimensional random vectors", Annals of Statistics
       41(6), 2013.
    .. [5] D. W. K. Andrews and G. Soares, "Inference for Parameters Defined by Moment
       Inequalities Using Generalized Moment Selection", Econometrica 78(1), 2010.

    Examples
    --------
    >>> import pandas as pd, sqlcal
    >>> df = pd.DataFrame({"p": [0.1, 0.2, 0.3, 0.4, 0.6, 0.7, 0.8, 0.9],
    ...                    "y": [0, 0, 1, 0, 1, 0, 1, 1]})
    >>> out = sqlcal.ls_ece(df, score="p", label="y")
    >>> out[["ls_ece", "ci_lower", "ci_upper", "noise_scale", "grid_step"]].round(6)
         ls_ece  ci_lower  ci_upper  noise_scale  grid_step
    0  0.342332       0.0  0.491216          0.1      0.005
    """
    src = as_source(data, score, label, weight=weight, by=by, where=where, **source_options)
    step = _logit_step(noise_scale, noise, grid_step)
    parts = _ls_ece_parts(src, {"bootstrap": bootstrap, "weight_kind": weight_kind})
    grid = planner.fetch(src, declared.logit_grid(step, clip, *parts))
    weight_kind = resolve_weight_kind(src, weight_kind)
    out = ls_ece_finish(grid, by=src.by, noise_scale=noise_scale, noise=noise, step=step,
                        confidence=confidence, bootstrap=bootstrap, seed=seed,
                        weight_kind=weight_kind)
    return result(src, out, ["ls_ece", "ci_lower", "ci_upper", "grid_bound", "noise_scale"],
                  {"noise": noise, "clip": clip, "grid_step": step,
                   "ci_method": "bootstrap" if bootstrap else None, "confidence": confidence,
                   "weight_kind": weight_kind})


@metric(needs=lambda src, o: _cells_needs(src, o), refining=_REFINING,
        report={"smooth_ece": Report({"smooth_ece": "smooth_ece"})},
        trust={"bootstrap": None, "confidence": None},  # with bootstrap= only
        cost=costs_smooth)
@checked
def smooth_ece(
    data: Any,
    *,
    score: str | None = None,
    label: str | None = None,
    weight: str | None = None,
    by: str | Sequence[str] = (),
    where: Any = None,
    sigma: float | None = None,
    bootstrap: int = 0,
    confidence: float = 0.95,
    seed: int = 0,
    **source_options: Any,
) -> pd.DataFrame:
    r"""The smooth ECE (smECE), with relplot's reflected Gaussian kernel and fixed-point bandwidth.

    Parameters
    ----------
    data : Source, ibis Table, path, URL or DataFrame
        What to measure; see :func:`sqlcal.source`.
    score : str, optional
        Column of predicted probabilities of the positive class (not needed when ``data`` is a
        :class:`~sqlcal.Source`).
    label : str, optional
        Column of 0/1 outcomes (not needed when ``data`` is a :class:`~sqlcal.Source`).
    weight : str, optional
        Column of non-negative row weights; by default every row weighs 1.
    by : str or sequence of str, default ()
        Group keys: one result row per group.
    where : ibis boolean expression, callable or SQL string, optional
        Filter applied in the engine before anything else.
    sigma : float, optional
        A bandwidth in probability units; by default relplot's fixed point σ* = smECE_σ*
        (bisection on [0, 1], ten halvings, the upper end kept).
    bootstrap : int, default 0
        Replicates of a Poisson bootstrap for a percentile interval (0 skips it). The replicates
        resample the score histogram, not the table: no extra scan (see Notes).
    confidence : float, default 0.95
        Level of the bootstrap interval.
    seed : int, default 0
        Seed of the bootstrap.
    **source_options
        Further options of :func:`sqlcal.source`, such as ``table=``, ``on_invalid=`` and
        ``soft_labels=``.

    Returns
    -------
    pandas.DataFrame
        One row per group: the keys, ``smooth_ece``, ``n``, ``W``, ``sigma`` (the bandwidth
        used), and with ``bootstrap``, ``ci_lower``, ``ci_upper``, ``bootstrap`` (the replicates)
        and ``confidence`` (the interval's level); with ``on_invalid="drop"``, ``n_dropped``.

    See Also
    --------
    smooth_reliability : the smoothed curve whose gap this is.
    ls_ece : smoothing by noise on the logit instead.
    ece : the binned error.
    lipschitz_calibration_error : the Lipschitz smooth error smCE, a different quantity.

    Notes
    -----
    Błasiok & Nakkiran (2024), Smooth ECE: Principled Reliability Diagrams via Kernel Smoothing
    (ICLR 2024). With a kernel :math:`K_\sigma` (a Gaussian reflected at 0 and 1),

    .. math:: \mathrm{smECE}_\sigma = \int_0^1 \Big|\frac1W \sum_i w_i K_\sigma(t, p_i)
       (y_i - p_i)\Big|\,dt,

    that is :math:`\int |\hat r_\sigma(t)|\,\hat\delta_\sigma(t)\,dt` with the smoothed residual
    :math:`\hat r_\sigma` and the smoothed score density :math:`\hat\delta_\sigma`; the default
    bandwidth is the fixed point :math:`\sigma^* = \mathrm{smECE}_{\sigma^*}`.

    relplot rounds the residuals f − y and the counts linearly onto a grid of nodes i/h on
    [0, 1] (h = max(2000, round(20/σ)) // 2), convolves with a Gaussian reflected at 0 and 1,
    and reports Σ|r̂|·dens / Σdens. Linear binning is linear in a row's score between two
    nodes, so the engine returns, per score cell of width 2^-14 and per grid interval (a cell
    holding a node is split at it), Σw, Σwy, Σw(y − p) and each times the offset from the
    cell's start, from which every node receives exactly what its rows would give it. The
    automatic bandwidth reads the grid of σ = 1 (the same for every σ ≥ 0.01); a search that
    reaches σ < 0.01 splits the cells holding a node of each finer grid it reads by one more
    query over those cells' rows. The rest is relplot's algorithm, so values and the bandwidth
    agree with ``relplot.smECE`` and ``relplot.smECE_sigma`` to rounding (tested to 1e-9
    relative, on scores crowded within 1e-3 of 0 and 1). Weights: a row of weight w counts w
    times; non-integer weights are first rescaled to sum to the row count, since relplot's
    density floor (1e-4 per grid node) is in counts.

    The bootstrap draws, for every (cell, label), a Poisson(m) count of rows (m the cell's
    weight of that label) and places them at that cell and label's mean score. For whole-number
    weights this is exactly the Poisson bootstrap of the rows up to that placement, which leaves
    the linear binning unchanged except in the cells holding a node (a shift below 2^-14 there).
    Soft labels have no bootstrap.

    References
    ----------
    .. [1] J. Błasiok and P. Nakkiran, "Smooth ECE: Principled Reliability Diagrams via Kernel
       Smoothing", ICLR, 2024.

    Examples
    --------
    >>> import pandas as pd, sqlcal
    >>> df = pd.DataFrame({"p": [0.1, 0.2, 0.3, 0.4, 0.6, 0.7, 0.8, 0.9],
    ...                    "y": [0, 0, 1, 0, 1, 0, 1, 1]})
    >>> sqlcal.smooth_ece(df, score="p", label="y").round(6)
       smooth_ece  n    W     sigma
    0    0.088521  8  8.0  0.088867
    >>> sqlcal.smooth_ece(df, score="p", label="y", sigma=0.1).round(6)
       smooth_ece  n    W  sigma
    0    0.072016  8  8.0    0.1
    """
    src = as_source(data, score, label, weight=weight, by=by, where=where, **source_options)
    if bootstrap:
        executor.require_binary_labels(src, "the smooth ECE bootstrap")
    cells = planner.fetch(src, *_cells_needs(src, {"sigma": sigma}))
    values = smooth_ece_finish(cells, by=src.by, sigma=sigma, bootstrap=bootstrap,
                               confidence=confidence, seed=seed,
                               integer_weights=_integer_weights(src), split=_splitter(src))
    columns = ["smooth_ece", "sigma"] + (["ci_lower", "ci_upper"] if bootstrap else [])
    return result(src, values, columns,
                  {"bootstrap": bootstrap, "confidence": confidence} if bootstrap else None)


@metric(needs=lambda src, o: _cells_needs(src, o), refining=_REFINING, cost=costs_smooth)
@checked
def smooth_reliability(
    data: Any,
    *,
    score: str | None = None,
    label: str | None = None,
    weight: str | None = None,
    by: str | Sequence[str] = (),
    where: Any = None,
    sigma: float | None = None,
    points: int = 200,
    **source_options: Any,
) -> pd.DataFrame:
    r"""The smoothed reliability curve: E[y | p = t] and the score density on a grid of t in [0, 1].

    Parameters
    ----------
    data : Source, ibis Table, path, URL or DataFrame
        What to measure; see :func:`sqlcal.source`.
    score : str, optional
        Column of predicted probabilities of the positive class (not needed when ``data`` is a
        :class:`~sqlcal.Source`).
    label : str, optional
        Column of 0/1 outcomes (not needed when ``data`` is a :class:`~sqlcal.Source`).
    weight : str, optional
        Column of non-negative row weights; by default every row weighs 1.
    by : str or sequence of str, default ()
        Group keys: one result row per group.
    where : ibis boolean expression, callable or SQL string, optional
        Filter applied in the engine before anything else.
    sigma : float, optional
        Kernel bandwidth in probability units; by default :func:`smooth_ece`'s fixed point.
    points : int, default 200
        Number of evaluation points t, evenly spaced on [0, 1] (both ends included).
    **source_options
        Further options of :func:`sqlcal.source`, such as ``table=``, ``on_invalid=`` and
        ``soft_labels=``.

    Returns
    -------
    pandas.DataFrame
        One row per group and evaluation point, sorted by the keys and t: the keys, ``t``,
        ``observed`` (the Nadaraya–Watson estimate of E[y | p = t] with :func:`smooth_ece`'s kernel
        and bandwidth, as relplot's diagram draws it), ``density`` (of the scores, integrating to
        1 on [0, 1]), ``sigma`` (the bandwidth used); with ``on_invalid="drop"``, ``n_dropped``
        (the group's rows left out).

    See Also
    --------
    smooth_ece : the smoothed curve's gap as one number.
    reliability : the binned table.
    sqlcal.plots.smooth_reliability_diagram : draws this curve.

    Notes
    -----
    .. math:: \hat y(t) = \frac{\sum_i w_i K_\sigma(t, p_i)\, y_i}{\sum_i w_i K_\sigma(t, p_i)},

    with the reflected Gaussian kernel of Błasiok & Nakkiran (2024), Smooth ECE: Principled
    Reliability Diagrams via Kernel Smoothing; the estimator is Nadaraya's (1964), On Estimating
    Regression, and Watson's (1964), Smooth Regression Analysis.

    References
    ----------
    .. [1] J. Błasiok and P. Nakkiran, "Smooth ECE: Principled Reliability Diagrams via Kernel
       Smoothing", ICLR, 2024.
    .. [2] E. A. Nadaraya, "On Estimating Regression", Theory of Probability and Its Applications
       9(1), 1964.
    .. [3] G. S. Watson, "Smooth Regression Analysis", Sankhyā, Series A 26(4), 1964.

    Examples
    --------
    >>> import pandas as pd, sqlcal
    >>> df = pd.DataFrame({"p": [0.1, 0.2, 0.3, 0.4, 0.6, 0.7, 0.8, 0.9],
    ...                    "y": [0, 0, 1, 0, 1, 0, 1, 1]})
    >>> sqlcal.smooth_reliability(df, score="p", label="y", points=5).round(6)
          t  observed   density     sigma
    0  0.00  0.005462  0.761394  0.088867
    1  0.25  0.390088  1.357909  0.088867
    2  0.50  0.499991  0.761394  0.088867
    3  0.75  0.609902  1.357909  0.088867
    4  1.00  0.994520  0.761394  0.088867
    """
    src = as_source(data, score, label, weight=weight, by=by, where=where, **source_options)
    cells = planner.fetch(src, *_cells_needs(src, {"sigma": sigma}))
    out = smooth_reliability_finish(cells, by=src.by, sigma=sigma, points=points,
                                    integer_weights=_integer_weights(src), split=_splitter(src))
    if src.dropped is not None:  # on_invalid="drop": each group's rows left out, on its rows
        out = (out.merge(src.dropped[[*src.by, "n_dropped"]], on=list(src.by), how="left")
               if src.by else out.assign(n_dropped=int(src.dropped["n_dropped"].sum())))
    return src.present(out).assign(**src.facts)  # a stored window's facts, as every result's


# -- the declarations: what each metric reads --------------------------------------------------


def _logit_step(sigma: float, noise: str, delta: float | None) -> float:
    # the grid must also resolve the sigmoid (scale 1), not only the kernel: δ ≤ 0.05 for σ ≥ 1
    return delta or (min(sigma, 1.0) / 20 if noise == "gaussian" else min(sigma, 1.0) / 200)


def _ls_ece_parts(src: Source, options: dict) -> tuple:
    """The logit grid's parts of LS-ECE's interval: the moments (and under the variance
    weight, ``spread``; with soft labels, ``soft``) when it draws one."""
    on, have = bool(options.get("bootstrap")), held(src)
    if on and have is not None and "logit_moments" not in have:
        # a stored window holding a period an older summary version wrote, whose logit grid
        # keeps the point value's sums only: NaN, with the periods to snapshot again
        available(src, ("logit_moments",))
        on = False
    parts = interval_parts(src, options.get("weight_kind", "auto"), on)
    return (*parts, *(("soft",) if parts and src.allow_soft else ()))


def _cells_needs(src: Source, options: dict) -> list:
    """smECE's first histogram: the cells split at the grid of ``sigma`` (automatic: of σ = 1,
    which every bandwidth search reads first and which serves every σ ≥ 0.01)."""
    return [declared.smooth_cells(SMOOTH_CELLS, [_intervals(options["sigma"] or 1.0)])]


def _splitter(src: Source):
    """The follow-up of a bandwidth search that reads finer grids: the cells straddling their
    nodes, split by one more query over those cells' rows only."""
    return lambda grids: planner.fetch(src, declared.smooth_split(SMOOTH_CELLS, grids))


def _integer_weights(src: Source) -> bool:
    return not src.weighted or bool(src.integer_weights)


# -- the finishes: numpy from the summary frames ----------------------------------------------


def ls_ece_finish(grid: pd.DataFrame, *, by: Sequence[str], noise_scale: float, noise: str,
                  step: float, confidence: float = 0.95, bootstrap: int = 0, seed: int = SEED,
                  weight_kind: str = "frequency") -> pd.DataFrame:
    """LS-ECE per group from the logit-grid histogram (:func:`sqlcal.query.declared.logit_grid`
    of step ``step``): the keys, ``n``, ``W``, ``ls_ece``, ``grid_bound``, ``noise_scale``, and
    with ``bootstrap`` replicates ``ci_lower``, ``ci_upper`` (:func:`ls_ece_interval`; NaN where
    the grid lacks the interval's moments)."""
    sigma, delta = noise_scale, step  # the paper's σ and the grid's δ
    kernel, curvature = _kernel(sigma, delta, noise)
    r = delta / sigma
    # binning and kernel terms, plus the sigmoid sampled every δ: (δ²/8)·max|ρ''| = 0.012δ²
    bound = (0.0243 * r**3 + 0.051 * r**4 if noise == "gaussian" else r) + 0.012 * delta**2

    def finish(part: pd.DataFrame) -> dict:
        u, mass, label_mass, var, label_var = _logit_masses(part, len(kernel) // 2)
        W = part["W"].sum()
        if W <= 0:
            return {"ls_ece": np.nan, "ci_lower": np.nan, "ci_upper": np.nan}
        N = signal.fftconvolve(mass, kernel, mode="same")
        N1 = signal.fftconvolve(label_mass, kernel, mode="same")
        if curvature is not None:  # cancel linear binning's ½δ²f(1−f)K'' per row
            N -= 0.5 * delta**2 * signal.fftconvolve(var, curvature, mode="same")
            N1 -= 0.5 * delta**2 * signal.fftconvolve(label_var, curvature, mode="same")
        rho = special.expit(u * delta)
        A = N1 - rho * N
        value = float(_integral_of_abs(A, delta, float(np.abs(N).max(initial=0.0))) / W)
        out = {"ls_ece": value, "ci_lower": np.nan, "ci_upper": np.nan}
        if bootstrap:
            size = float(W if weight_kind == "frequency" else part["n"].sum())
            lo, hi = ls_ece_interval(part, int(u[0]), A, rho, kernel, delta, value, float(W),
                                     size, confidence=confidence, replicates=bootstrap,
                                     seed=seed, weight_kind=weight_kind)
            # the estimate's own grid error, on both ends
            out["ci_lower"], out["ci_upper"] = max(lo - bound, 0.0), hi + bound
        return out

    out = per_group(grid, list(by), finish)
    out["grid_bound"], out["noise_scale"] = bound, sigma
    return out


#: LS-ECE's draws come in blocks of this many logit cells, each block its own random stream
#: (seeded by the seed and the block's place on the grid): a group's replicates depend on its
#: own sums only, whatever cells the other groups occupy
_BLOCK = 256


def ls_ece_interval(part: pd.DataFrame, first: int, A: np.ndarray, rho: np.ndarray,
                    kernel: np.ndarray, delta: float, value: float, W: float, size: float, *,
                    confidence: float, replicates: int, seed: int, weight_kind: str
                    ) -> tuple[float, float]:
    r"""One group's interval of LS-ECE: (lower, upper), NaN without the grid's moments.

    ``part``: the group's logit-grid rows with the moments of
    :func:`sqlcal.query.reductions.logit_grid_moments`; ``first``: the logit node of ``A[0]``;
    ``A``: :math:`A(u_j) = N_1(u_j) - \rho(u_j)N(u_j)` on the nodes, ``rho`` the sigmoid
    there; ``value``: the estimate; ``W`` its weight; ``size``: its rows (frequency: W).

    Under Poisson(1) resampling of the rows, the node masses (M_k, M_k+1, Y_k, Y_k+1) that the
    rows of logit cell k make vary with covariance :math:`\sum v\,x x^\top`,
    :math:`x = (1, y) \otimes (1 - f, f)`, independently from cell to cell (v the variance
    weight). The replicates draw exactly that covariance as Gaussian vectors (the multiplier
    bootstrap, as :func:`sqlcal.metrics.intervals.bins_interval`), and carry them through the
    same convolution: :math:`A^* - \hat A = K * \Delta Y - \rho\,(K * \Delta M)`, linear in
    the draws. A(u) sums the rows within a few σ of u, so its deviation is close to normal
    however few rows a cell holds; the curvature term's deviation (δ²/8 of the kernel's second
    derivative, relative size (δ/σ)²/8) is left out.

    The ends follow Fang & Santos (2019) as the binned ECE's: the upper end from the
    linearization :math:`\delta\sum \mathrm{sign}(\hat A)\,\Delta A / W - \hat\theta\,
    \Delta W / W`, the lower end from the change of :math:`\delta\sum|A_c + \Delta A|/(W +
    \Delta W)` at the centre :math:`A_c`, which sets to 0 the nodes whose :math:`|\hat A(u)|`
    is within :math:`\kappa_n` of its standard error (from the replicates;
    :func:`sqlcal.metrics.intervals.selection_threshold`).
    """
    alpha = 1 - confidence
    C = _grid_moments(part, weight_kind)
    if C is None:
        return np.nan, np.nan
    cells = part["k"].to_numpy(np.int64)
    order = np.argsort(cells, kind="stable")
    cells, C = cells[order], C[order]
    L = cholesky(C)
    nodes = len(A)
    at = cells - first  # each cell's lower node
    blocks = np.unique(np.floor_divide(cells, _BLOCK))
    streams = {b: np.random.default_rng([*draw_stream(seed), int(b) + 2**40]) for b in blocks}
    chunk = max(1, min(replicates, 2**21 // max(nodes, 1)))
    dA = np.empty((replicates, nodes))
    dW = np.empty(replicates)
    taken = {b: np.flatnonzero(np.floor_divide(cells, _BLOCK) == b) for b in blocks}
    for a in range(0, replicates, chunk):
        r = min(chunk, replicates - a)
        z = np.empty((r, len(cells), 4))
        for b in blocks:  # each block's draws in replicate order, a chunk at a time
            draws = streams[b].standard_normal((r, _BLOCK, 4))
            z[:, taken[b]] = draws[:, cells[taken[b]] - b * _BLOCK]
        e = np.matmul(L, z[..., None])[..., 0]  # (r, cells, 4): each cell's deviation
        dM, dY = np.zeros((r, nodes)), np.zeros((r, nodes))
        dM[:, at] += e[..., 0]
        dM[:, at + 1] += e[..., 1]
        dY[:, at] += e[..., 2]
        dY[:, at + 1] += e[..., 3]
        dA[a:a + r] = (signal.fftconvolve(dY, kernel[None], mode="same", axes=-1)
                       - rho * signal.fftconvolve(dM, kernel[None], mode="same", axes=-1))
        dW[a:a + r] = dM.sum(axis=-1)
    se = dA.std(axis=0)
    kappa = selection_threshold(np.array([size]), False)[0]
    centre = np.where(np.abs(A) <= kappa * se, 0.0, A)
    replicate_W = np.maximum(W + dW, WEIGHT_FLOOR * W)
    down = (delta * np.abs(centre + dA).sum(axis=-1) / replicate_W
            - delta * np.abs(centre).sum() / W)
    up = delta * (np.sign(A) * dA).sum(axis=-1) / W - value * dW / W
    lower = value - np.quantile(down, 1 - alpha / 2)
    upper = value - np.quantile(up, alpha / 2)
    return max(min(lower, value), 0.0), max(upper, value)


def _grid_moments(part: pd.DataFrame, weight_kind: str) -> np.ndarray | None:
    """Per logit cell, the 4×4 covariance of its node masses (M_k, M_k+1, Y_k, Y_k+1) under a
    Poisson bootstrap of its rows (None when the grid lacks the sums)."""
    prefix = "q" if weight_kind == "frequency" else "qv"
    names = [f"{prefix}{m}_{ab}" for m in ("", "y") for ab in ("ll", "lh", "hh")]
    if any(n not in part for n in names):
        return None
    ll, lh, hh, yll, ylh, yhh = (part[n].to_numpy(float) for n in names)
    soft = [f"{prefix}yy_{ab}" for ab in ("ll", "lh", "hh")]
    yyll, yylh, yyhh = ((part[n].to_numpy(float) for n in soft) if all(n in part for n in soft)
                        else (yll, ylh, yhh))  # binary labels: y² = y
    C = np.empty((len(part), 4, 4))
    rows = ((ll, lh, yll, ylh), (lh, hh, ylh, yhh), (yll, ylh, yyll, yylh),
            (ylh, yhh, yylh, yyhh))
    for i, row in enumerate(rows):
        for j, col in enumerate(row):
            C[:, i, j] = col
    return C


def smooth_ece_finish(cells: pd.DataFrame, *, by: Sequence[str], sigma: float | None = None,
                      bootstrap: int = 0, confidence: float = 0.95, seed: int = 0,
                      integer_weights: bool = True, split=None) -> pd.DataFrame:
    """smECE per group from its score histogram (:func:`sqlcal.query.declared.smooth_cells`,
    split at the grids of its ``b_<h>`` columns): the keys, ``n``, ``W``, ``smooth_ece``,
    ``sigma`` and with ``bootstrap``, ``ci_lower``, ``ci_upper``.

    ``split(grids)`` returns :func:`sqlcal.query.declared.smooth_split` for grids a bandwidth
    search reads beyond those of ``cells`` (None: such a search is an error).
    ``integer_weights``: whether every weight is a whole number (relplot's density floor is in
    counts; other weights are rescaled to sum to the row count)."""
    hists, widths = exact_histograms(cells, by=by, sigma=sigma,
                                     integer_weights=integer_weights, split=split)
    rng = np.random.default_rng(seed)

    def finish(key: tuple) -> dict:
        hist = hists[key]
        if hist.total <= 0:
            return {"smooth_ece": np.nan, "sigma": np.nan, "ci_lower": np.nan,
                    "ci_upper": np.nan}
        width = widths[key]
        out = {"smooth_ece": hist.smooth_ece(width), "sigma": width}
        if bootstrap:
            draws = []
            for _ in range(bootstrap):
                replicate = hist.resample(rng)
                # an empty resample (possible for tiny groups) has no smooth ECE: leave it out
                draws.append(replicate.smooth_ece(sigma or None) if replicate.total > 0
                             else np.nan)
            alpha = (1 - confidence) / 2
            out["ci_lower"], out["ci_upper"] = np.nanquantile(draws, [alpha, 1 - alpha])
        return out

    rows = [{**hist.keys, "n": hist.n, "W": hist.W, **finish(key)} for key, hist in hists.items()]
    return pd.DataFrame(rows, columns=None if rows else [*by, "n", "W"])


def smooth_reliability_finish(cells: pd.DataFrame, *, by: Sequence[str],
                              sigma: float | None = None, points: int = 200,
                              integer_weights: bool = True, split=None) -> pd.DataFrame:
    """The smoothed reliability curve per group from smECE's histogram (as
    :func:`smooth_ece_finish`): the keys, ``t``, ``observed``, ``density``, ``sigma``, sorted by
    the keys and t."""
    hists, widths = exact_histograms(cells, by=by, sigma=sigma,
                                     integer_weights=integer_weights, split=split)
    frames = []
    for key, hist in hists.items():
        if hist.total <= 0:
            continue
        width = widths[key]
        t = np.linspace(0, 1, points)
        observed, density = hist.smooth(width, t, what="label")
        frames.append(pd.DataFrame({**hist.keys, "t": t, "observed": observed,
                                    "density": density / density.mean(), "sigma": width}))
    # sorted by the keys: the summary's group order is the engine's, which varies with the data
    return pd.concat(frames, ignore_index=True).sort_values([*by, "t"], kind="stable",
                                                            ignore_index=True)


# -- relplot's smECE on a score histogram -----------------------------------------------------


def exact_histograms(cells: pd.DataFrame, *, by: Sequence[str], sigma: float | None,
                     integer_weights: bool = True, split=None) -> tuple[dict, dict]:
    """Each group's score histogram, split at the nodes of every grid its smooth ECE reads, and
    its bandwidth (``sigma`` or the fixed point): {key: histogram}, {key: bandwidth}.

    The grid depends on the bandwidth, and the automatic bandwidth on the data, so the grids are
    found by running the search. ``cells`` holds the cells split at the nodes of its grids (its
    ``b_<h>`` columns); a search that reads another grid has the cells straddling its nodes
    split by ``split(grids)`` (a query over their rows only), and runs again, until it reads no
    grid it lacks."""
    by = list(by)
    have = {int(c[2:]) for c in cells if c.startswith("b_")}
    # groups in key order: a seeded bootstrap draws each group's replicates in turn, whatever
    # order the engine returned the groups in
    cells = cells.sort_values([*by, "cell"], kind="stable") if by else cells
    hists = {key_tuple(keys): _histogram(part, keys, sorted(have), integer_weights)
             for keys, part in groups(cells, by)}
    while True:
        widths, wanted = {}, set()
        for key, hist in hists.items():
            if hist.total > 0:
                hist.read.clear()
                widths[key] = sigma or _fixed_point(hist)
                wanted |= hist.read | {_intervals(widths[key])}
        missing = sorted(wanted - have)
        if not missing:
            return hists, widths
        if split is None:
            raise ValueError(f"the smooth ECE reads relplot's grids {missing}, which the score "
                             f"histogram was not split at (it has {sorted(have)})")
        pieces = split(missing)
        parts = {key_tuple(keys): part for keys, part in groups(pieces, by)}
        for key, hist in hists.items():
            hist.split(parts.get(key, pieces.iloc[:0]), missing)
        have |= set(missing)


def _intervals(sigma: float) -> int:
    """The intervals of relplot's grid at bandwidth σ: nodes i/h, i = 0 … h."""
    return max(2000, round(20 / sigma)) // 2


def _straddles(cell: np.ndarray, h: int) -> np.ndarray:
    """Whether score cell c holds a node i/h strictly inside: c·h < i·2^14 < (c + 1)·h, that is
    (c·h mod 2^14) > 2^14 − h."""
    return cell * h % SMOOTH_CELLS > SMOOTH_CELLS - h


def _histogram(part: pd.DataFrame, keys: dict, grids: list, integer_weights: bool
               ) -> "_ScoreHistogram":
    # relplot's density floor (1e-4 per node) is in counts: non-integer weights are rescaled to
    # sum to the row count, whole-number weights are counts already
    W = part["W"].sum()
    scale = 1.0 if integer_weights or W <= 0 else part["n"].sum() / W
    # cells in order: a seeded bootstrap draws the same replicates whatever order the engine
    # returned the rows in
    whole = part.groupby("cell", sort=True)[list(_COLUMNS)].sum().reset_index()
    hist = _ScoreHistogram(whole["cell"].to_numpy(np.int64), _quantities(whole, scale), scale)
    hist.split(part, grids)
    hist.keys, hist.n, hist.W = keys, int(part["n"].sum()), float(W)
    return hist


#: the summed columns of :func:`sqlcal.query.declared.smooth_cells`
_COLUMNS = ("W", "swd", "swy", "swyd", "swr", "swrd")


def _quantities(part: pd.DataFrame, scale: float) -> dict:
    """Per summary row, Σv and Σv·d (d = p − the cell's start) of the three quantities relplot
    smooths: the weight (v = w), the residual (v = w(p − y)) and the label (v = wy)."""
    W, swd, swy, swyd, swr, swrd = (part[c].to_numpy(float) * scale for c in _COLUMNS)
    return {"weight": (W, swd), "residual": (-swr, -swrd), "label": (swy, swyd)}


class _ScoreHistogram:
    """One group's score histogram: per score cell, Σv and Σv·d of the weight, the residual
    p − y and the label (:func:`_quantities`); and for each grid h it was split for, the same
    sums of the rows of the cells straddling a node, by interval (``pieces[h]``)."""

    def __init__(self, cell: np.ndarray, sums: dict, scale: float = 1.0):
        self.cell, self.sums, self.scale = cell, sums, scale
        self.total = float(sums["weight"][0].sum())
        self.pieces: dict[int, tuple] = {}
        self.read: set[int] = set()  # the grids smooth() has read since last cleared
        self.keys, self.n, self.W = {}, 0, self.total

    def split(self, part: pd.DataFrame, grids) -> None:
        """Take the rows of the cells straddling a node of each grid h in ``grids``, by interval
        (``part``: this group's rows of :func:`sqlcal.query.declared.smooth_cells` with
        ``b_<h>``)."""
        for h in grids:
            # a query for several grids holds the cells straddling any of them: keep h's own
            own = part[_straddles(part["cell"].to_numpy(np.int64), h)]
            own = own.groupby(["cell", f"b_{h}"], sort=False)[list(_COLUMNS)].sum().reset_index()
            self.pieces[h] = (own["cell"].to_numpy(np.int64), own[f"b_{h}"].to_numpy(np.int64),
                              _quantities(own, self.scale))

    def resample(self, rng) -> "_ScoreHistogram":
        # Poisson bootstrap by (cell, label); each resampled row sits at its cell-label mean
        lo = self.cell / SMOOTH_CELLS
        (weight, weight_d), (pos, pos_d) = self.sums["weight"], self.sums["label"]
        neg, neg_d = weight - pos, weight_d - pos_d
        with np.errstate(invalid="ignore", divide="ignore"):
            d_pos = np.where(pos > 0, pos_d / pos, 0.0)
            d_neg = np.where(neg > 0, neg_d / neg, 0.0)
        k_pos = rng.poisson(np.maximum(pos, 0)).astype(float)
        k_neg = rng.poisson(np.maximum(neg, 0)).astype(float)
        # residual p − y: positives contribute p − 1, negatives p
        r_pos, r_neg = (lo - 1) + d_pos, lo + d_neg
        return _ScoreHistogram(self.cell, {
            "weight": (k_pos + k_neg, k_pos * d_pos + k_neg * d_neg),
            "residual": (k_pos * r_pos + k_neg * r_neg,
                         k_pos * r_pos * d_pos + k_neg * r_neg * d_neg),
            "label": (k_pos, k_pos * d_pos)})

    def grid(self, nodes: int, what: str) -> np.ndarray:
        """relplot's ``smooth_round_to_grid`` onto ``nodes`` points i/h of [0, 1] (h = nodes − 1)
        of the weight, the residual p − y or the label (``what``).

        A row at p in [i/h, (i+1)/h] gives v·(1 − f) to node i and v·f to node i + 1, with
        f = p·h − i: linear in p, so the rows of a cell [c, c + 2^-14) lying within one
        interval give exactly Σv·f = Σv·(c·h − i) + h·Σv·d to node i + 1 and the rest to node
        i (c·h − i is exact, and d = p − c carries no cancellation). A cell holding a node
        strictly inside is read from its pieces on either side of the node (:meth:`split`);
        without them (a bootstrap replicate), by the interval of its mean.
        """
        h = nodes - 1
        self.read.add(h)
        cell, (mass, mass_d) = self.cell, self.sums[what]
        straddles = _straddles(cell, h)
        # a cell within one interval: the interval of its midpoint (no rounding at its ends)
        at = (cell + 0.5) / SMOOTH_CELLS
        pieces = self.pieces.get(h)
        if pieces is not None:
            keep = ~straddles
            piece_cell, piece_left, piece_sums = pieces
            left = np.concatenate([np.floor(at[keep] * h).astype(np.int64), piece_left])
            cell = np.concatenate([cell[keep], piece_cell])
            mass = np.concatenate([mass[keep], piece_sums[what][0]])
            mass_d = np.concatenate([mass_d[keep], piece_sums[what][1]])
        else:
            if straddles.any():
                weight, weight_d = self.sums["weight"]
                with np.errstate(invalid="ignore", divide="ignore"):
                    mean = cell / SMOOTH_CELLS + np.where(weight > 0, weight_d / weight, 0.0)
                at = np.where(straddles, mean, at)
            left = np.floor(at * h).astype(np.int64)
        # p = 1 is the end of the last interval, as in relplot
        left = np.clip(left, 0, h - 1)
        upper = mass * (cell * h / SMOOTH_CELLS - left) + h * mass_d
        return (np.bincount(left, mass - upper, minlength=nodes)
                + np.bincount(left + 1, upper, minlength=nodes))

    def smooth(self, sigma: float, t: np.ndarray, what: str = "residual"):
        """relplot's ReflectedGaussianKernel.smooth of the residual p − y (or, with ``what =
        "label"``, of y: the Nadaraya–Watson estimate of E[y | p]) and of the counts."""
        nodes = _intervals(sigma) + 1
        kernel = np.exp(-((np.linspace(0, 1, nodes) - 0.5) ** 2) / (2 * sigma**2))
        kernel /= np.sqrt(2 * np.pi) * sigma
        # the curve divides by the density, where it vanishes too: there the FFT's rounding
        # (relative to the largest node) would show, so it is convolved directly as relplot
        # does, up to grids of 10^4 nodes (σ ≥ 1/1024, 0.2 s); smooth ECE sums |r̂|·dens and
        # takes the FFT
        direct = what == "label" and nodes <= 10_241

        def convolve(values):
            ext = np.concatenate([np.flip(values)[:-1], values, np.flip(values)[1:]])
            full = (np.convolve(ext, kernel, "valid") if direct
                    else signal.fftconvolve(ext, kernel, mode="valid"))
            smoothed = full[nodes // 2: nodes // 2 + nodes]
            return _interpolate(t, smoothed)

        values = convolve(self.grid(nodes, what))
        density = convolve(self.grid(nodes, "weight")) + 1e-4
        return values / density, density

    def smooth_ece(self, sigma: float | None) -> float:
        sigma = sigma or _fixed_point(self)
        points = max(round(10 / sigma), 200)
        residual, density = self.smooth(sigma, np.linspace(0, 1, points))
        return float(np.sum(np.abs(residual) * density) / np.sum(density))


def _fixed_point(hist: _ScoreHistogram, eps: float = 0.001) -> float:
    """relplot's ``search_param``: the bandwidth α with α ≈ smECE_α, from above."""
    def smaller(alpha):
        return alpha < eps or alpha < hist.smooth_ece(alpha)

    if smaller(1.0):
        return 1.0
    start, end = 1.0, 0.0
    for _ in range(10):
        mid = (start + end) / 2
        if smaller(mid):
            end = mid
        else:
            start = mid
    return start


def _interpolate(t: np.ndarray, y: np.ndarray) -> np.ndarray:
    # relplot's linear interpolation of i/(len(y) − 1) -> y[i]
    step = len(y) - 1
    idx = np.clip((t * step).astype(int), 0, len(y) - 2)
    frac = (t - idx / step) * step
    return y[idx] * (1 - frac) + y[idx + 1] * frac


# -- LS-ECE helpers ---------------------------------------------------------------------------


def _kernel(sigma: float, delta: float, noise: str):
    """The noise density on the grid (renormalised so that δ·Σκ = 1) and its second derivative
    (Gaussian only; the box has none)."""
    if noise == "gaussian":
        half = int(np.ceil(8 * sigma / delta))  # mass beyond 8σ is 2Φ(−8) ≈ 1e-15
        u = np.arange(-half, half + 1) * delta
        kernel = stats.norm.pdf(u, scale=sigma)
        norm = delta * kernel.sum()
        return kernel / norm, kernel * (u**2 / sigma**4 - 1 / sigma**2) / norm
    # the box σ·U[−½, ½] sampled on the grid, end nodes by the fraction of their cell covered
    half = int(np.ceil(sigma / (2 * delta))) + 1
    u = np.arange(-half, half + 1) * delta
    covered = np.clip(sigma / 2 - (np.abs(u) - delta / 2), 0, delta) / delta
    kernel = covered / sigma
    return kernel / (delta * kernel.sum()), None


def _integral_of_abs(A: np.ndarray, delta: float, scale: float = 0.0) -> float:
    """∫|A| for a smooth A sampled every δ and vanishing at both ends.

    The plain sum δΣ|A_k| is spectrally accurate for a smooth integrand; |A| has a kink at each
    sign change, where the sum errs by −sδ²B₂(θ) (Euler–Maclaurin/Poisson summation; s the
    slope of |A|, θ the kink's position within its cell, B₂(θ) = θ² − θ + 1/6). That term is
    added back, from the linear interpolant of A across the cell.

    ``scale``: the largest of the convolutions A is made of; a node where |A| is at most 1e-12
    times it is 0. Where A is 0 (no row within reach of the uniform noise's box) the FFT leaves
    rounding of either sign, and next to the box's jump that sign would decide a kink's term of
    order δ·|A| (a shuffle of the rows moved LS-ECE by 1e-5 relative).
    """
    A = np.where(np.abs(A) <= 1e-12 * scale, 0.0, A)
    sign = np.where(A < 0, -1.0, 1.0)  # an exact zero counts as positive: a kink on a node
    a, b = A[:-1], A[1:]
    cross = sign[:-1] * sign[1:] < 0
    theta = a[cross] / (a[cross] - b[cross])
    slope = np.abs(b[cross] - a[cross]) / delta
    kinks = (slope * delta**2 * (theta**2 - theta + 1 / 6)).sum()
    return float(delta * np.abs(A).sum() + kinks)


def _logit_masses(part: pd.DataFrame, pad: int):
    """Dense node arrays with ``pad`` empty nodes each side: node index, then the masses of all
    rows, of their labels, and the two spreads."""
    k = part["k"].to_numpy(np.int64)
    lo = int(k.min()) - pad
    size = int(k.max()) + 2 + pad - lo
    out = [np.arange(lo, lo + size)]
    for name in ("m", "y", "v", "vy"):
        dense = np.zeros(size)
        np.add.at(dense, k - lo, part[f"{name}_lo"].to_numpy(float))
        np.add.at(dense, k + 1 - lo, part[f"{name}_hi"].to_numpy(float))
        out.append(dense)
    return tuple(out)
