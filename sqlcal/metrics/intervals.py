r"""Intervals on the headline metrics, from the summaries they already read (no extra scan).

Two methods, each named in the result's ``ci_method`` column:

- ``"delta"``: a Wald interval from the delta method, for the metrics that are smooth functions
  of the totals' means (the Brier score, the log loss, calibration-in-the-large, the
  observed/expected ratio). Each needs one more sum of squares per group (van der Vaart (1998),
  Asymptotic Statistics, ch. 3; the linearization of a ratio of weighted sums as in Särndal,
  Swensson & Wretman (1992), Model Assisted Survey Sampling, ch. 5.5-5.7).
- ``"bootstrap"``: for the binned errors (ECE, RMSCE, MCE on any bins, the Brier reliability),
  which are not differentiable where a bin is calibrated. Its replicates are those of a Poisson
  bootstrap of the bins' sums (Hanley & MacGibbon (2006), Creating non-parametric bootstrap
  samples using Poisson frequencies; Chamandy, Muralidharan, Najmi & Naidu (2012), Estimating
  uncertainty for massive data streams): under Poisson(1) resampling of the rows the sums
  :math:`(W_k, Y_k, P_k) = \sum_{i\in k} w_i(1, y_i, p_i)` of bin k vary with covariance
  :math:`\sum_{i\in k} v_i (1, y_i, p_i)^\top(1, y_i, p_i)` (v the variance weight, below), and
  the bins independently. The summary carries those second moments (six sums per bin), and the
  replicates are drawn in numpy as Gaussian vectors with exactly that covariance: the Poisson
  bootstrap's first two moments, exactly, with the Gaussian limit of each bin's sum in place of
  its exact law (the multiplier bootstrap of Chernozhukov, Chetverikov & Kato (2013), Gaussian
  approximations and multiplier bootstrap for maxima of sums of high-dimensional random
  vectors). The error is that of the normal approximation inside each bin, of order
  :math:`1/\sqrt{n_k}` (Berry-Esseen): a bin needs tens of rows of each label. The draws come from
  a fixed seed (``seed=``, default :data:`SEED`; every group reads the same draws), so an
  interval is the same on every run and every engine (the sums agree to about 1e-15).

The cutoff error's interval (:func:`walk_interval`) draws the same way the score cells'
weight and residual sums the metric already reads, rebuilds the running residual sum from them,
and takes the directional derivative of its range (the lower end) and its linearization at the
estimate's extremes (the upper end).

**Weights.** A row weight enters a variance through the variance weight v
(:func:`sqlcal.query.reductions.variance_weights`): v = w for frequency weights (a row of weight
3 is three rows), :math:`v = w^2` for sampling weights, :math:`v = f/\pi^2` on a negatively
downsampled log, which adds the sampling's variance to the population's.

**What a binned interval covers** is the population value of the same binned quantity: with the
same bins (for equal-mass bins, the edges found on this sample), :math:`\sum_k |E[w(y - p)1_k]|
/ E[w]` for the ECE. The plug-in value is biased upward where a bin is calibrated (a mean
residual of 0 is estimated by an absolute value > 0), and its bootstrap is not centred: a
percentile interval of a calibrated model would not reach 0. The interval therefore follows
Fang & Santos (2019), Inference on directionally differentiable functions (Review of Economic
Studies 86:377): the law of :math:`\hat\theta - \theta` is the directional derivative of the
statistic at the truth applied to the bootstrap's deviation, and at a calibrated bin that
derivative is :math:`|h|`, not :math:`\mathrm{sign}(\cdot)\,h`. A bin whose mean residual is
within :math:`\kappa_n` standard errors of 0 (:func:`selection_threshold`; Andrews & Soares
(2010), Inference for parameters defined by moment inequalities using generalized moment
selection) is taken as calibrated: the lower end is :math:`\hat\theta - q_{1-\alpha/2}(D^*)`, D*
the statistic's change from the estimate with those bins' residuals set to 0; the upper end is
:math:`\hat\theta - q_{\alpha/2}(U^*)`, U* its linearization at the estimate. Both are exact
where no bin is near 0, and conservative where one is truly calibrated (the statistics are
convex in the residuals). In the simulations of ``tests/test_intervals.py`` and
``bench/intervals.py`` (calibrated, over-confident and low-base-rate populations, with no,
sampling and frequency weights) the ECE's 95% interval held the population value 94-97% of the
time, a calibrated model's 0 included; the RMSCE's 92.5-98%.

The maximum calibration error (MCE) is set by one bin, often one of a few rows, where neither
a normal approximation nor a bootstrap holds; its interval is a simultaneous band instead
(:func:`sqlcal.metrics.binned.mce_band`): Wilson's interval of each bin's observed rate at the
Šidák level :math:`(1-\alpha)^{1/K}` over the K non-empty bins. When every bin's gap lies in its
interval (probability at least 1 − α), the MCE lies between the largest least and the largest
greatest gap: conservative, and honest where a bin is small.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import pandas as pd
from scipy import stats

from sqlcal import options

#: the default seed of the bootstrap's draws (documented; ``seed=`` changes it)
SEED = 20260101
#: the default number of bootstrap replicates
REPLICATES = 1000
#: a bin's replicate weight is kept at least this share of its weight (the Gaussian draw of a
#: bin of a few rows can go negative; such a bin's interval is rough anyway)
WEIGHT_FLOOR = 0.25
#: central-difference step of the linearization, in units of a replicate's deviation
_STEP = 1e-3
#: the second moments' columns, frequency weights (or none) and under the variance weight
_FREQUENCY = ("W", "swy", "swp", "swyy", "swyp", "swpp")
_SAMPLING = ("sw2", "sw2y", "sv_p", "sv_yy", "sv_yp", "sv_pp")


def z_value(confidence: float) -> float:
    """The two-sided normal quantile of ``confidence``."""
    return float(stats.norm.isf((1 - confidence) / 2))


def second_moments(frame: pd.DataFrame, weight_kind: str) -> np.ndarray | None:
    """Per row of a summary, the 3×3 matrix :math:`\\sum v\\,(1, y, p)^\\top(1, y, p)` (None when
    the summary lacks its columns: one stored or exported without them)."""
    names = _FREQUENCY if weight_kind == "frequency" else _SAMPLING
    cols = {}
    for name in names:
        if name in frame:
            cols[name] = frame[name].to_numpy(float)
        elif name == "swyy" and "swy" in frame:  # binary labels: y² = y
            cols[name] = frame["swy"].to_numpy(float)
        else:
            return None
    v1, vy, vp, vyy, vyp, vpp = (cols[n] for n in names)
    out = np.empty((len(frame), 3, 3))
    out[:, 0, 0], out[:, 1, 1], out[:, 2, 2] = v1, vyy, vpp
    out[:, 0, 1] = out[:, 1, 0] = vy
    out[:, 0, 2] = out[:, 2, 0] = vp
    out[:, 1, 2] = out[:, 2, 1] = vyp
    return out


def wald(value, var, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    """value ± z·√var (NaN where the value or the variance is not finite)."""
    value = np.asarray(value, float)
    with np.errstate(invalid="ignore"):
        half = z_value(confidence) * np.sqrt(np.maximum(np.asarray(var, float), 0.0))
    ok = np.isfinite(value) & np.isfinite(half)
    return np.where(ok, value - half, np.nan), np.where(ok, value + half, np.nan)


# -- the delta method on the totals ------------------------------------------------------------


def delta_variance(metric: str, totals: pd.DataFrame, weight_kind: str):
    """(value, variance) of ``metric`` ("brier", "log_loss", "citl") per row of the totals, by
    the delta method (see :func:`brier_interval`, :func:`log_loss_interval`,
    :func:`citl_interval`); NaN where the summary lacks the sums."""
    W = totals["W"].to_numpy(float)
    nan = np.full(len(W), np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        if metric == "log_loss":
            names = (("sw2", "sw2_logloss", "sw2_logloss_sq") if weight_kind != "frequency"
                     else ("W", "sw_logloss", "sw_logloss_sq"))
            ll = totals["sw_logloss"].to_numpy(float) / W
            ll = np.where(totals["n_infinite_logloss"].to_numpy(float) > 0, np.inf, ll)
            if any(n not in totals for n in names):
                return ll, nan
            V, L1, L2 = (totals[n].to_numpy(float) for n in names)
            return ll, (L2 - 2 * ll * L1 + ll * ll * V) / (W * W)
        m = second_moments(totals, weight_kind)
        if metric == "brier":
            bs = totals["sw_sq_resid"].to_numpy(float) / W
            sampling = weight_kind != "frequency" and "sv_r4" in totals
            r4 = totals.get("sv_r4" if sampling else "sw_r4")
            if m is None or r4 is None:
                return bs, nan
            vrr = m[:, 1, 1] - 2 * m[:, 1, 2] + m[:, 2, 2]
            return bs, (r4.to_numpy(float) - 2 * bs * vrr + bs * bs * m[:, 0, 0]) / (W * W)
        c = (totals["swp"].to_numpy(float) - totals["swy"].to_numpy(float)) / W
        if m is None:
            return c, nan
        v1, vy, vp, vyy, vyp, vpp = (m[:, 0, 0], m[:, 0, 1], m[:, 0, 2], m[:, 1, 1],
                                     m[:, 1, 2], m[:, 2, 2])
        return c, ((vyy - 2 * vyp + vpp) - 2 * c * (vp - vy) + c * c * v1) / (W * W)


def brier_interval(totals: pd.DataFrame, *, confidence: float, weight_kind: str):
    r"""The Brier score's delta-method interval: with :math:`r = y - p`,
    :math:`\widehat{\mathrm{Var}} = \sum v (r^2 - \mathrm{BS})^2 / W^2`, from :math:`\sum v r^4`,
    :math:`\sum v r^2` and :math:`\sum v` (van der Vaart (1998), Asymptotic Statistics, ch. 3).
    Returns (lower, upper), NaN where the summary lacks ``sw_r4``."""
    W = totals["W"].to_numpy(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        bs = totals["sw_sq_resid"].to_numpy(float) / W
        m = second_moments(totals, weight_kind)
        sampling = weight_kind != "frequency" and "sv_r4" in totals
        r4 = totals.get("sv_r4" if sampling else "sw_r4")
        if m is None or r4 is None:
            return np.full(len(W), np.nan), np.full(len(W), np.nan)
        v1 = m[:, 0, 0]
        vrr = m[:, 1, 1] - 2 * m[:, 1, 2] + m[:, 2, 2]
        var = (r4.to_numpy(float) - 2 * bs * vrr + bs * bs * v1) / (W * W)
    return _clip(*wald(bs, var, confidence), 0.0, 1.0)


def log_loss_interval(totals: pd.DataFrame, *, confidence: float, weight_kind: str):
    r"""The log loss's delta-method interval: :math:`\widehat{\mathrm{Var}} = \sum v(\ell -
    \mathrm{LL})^2/W^2` from :math:`\sum v\ell^2`, :math:`\sum v\ell`, :math:`\sum v` (the
    normalized entropy's sums). NaN for an infinite log loss or a summary without them."""
    W = totals["W"].to_numpy(float)
    names = (("sw2", "sw2_logloss", "sw2_logloss_sq") if weight_kind != "frequency"
             else ("W", "sw_logloss", "sw_logloss_sq"))
    if any(n not in totals for n in names):
        return np.full(len(W), np.nan), np.full(len(W), np.nan)
    V, L1, L2 = (totals[n].to_numpy(float) for n in names)
    with np.errstate(divide="ignore", invalid="ignore"):
        ll = totals["sw_logloss"].to_numpy(float) / W
        var = (L2 - 2 * ll * L1 + ll * ll * V) / (W * W)
    ll = np.where(totals["n_infinite_logloss"].to_numpy(float) > 0, np.nan, ll)
    return _clip(*wald(ll, var, confidence), 0.0, np.inf)


def citl_interval(totals: pd.DataFrame, *, confidence: float, weight_kind: str):
    r"""Calibration-in-the-large :math:`\bar p - \bar y` and the observed/expected ratio
    :math:`\sum wy/\sum wp`, each with its delta-method interval: :math:`\sum v(p - y -
    \mathrm{CITL})^2 / W^2`, and on the log scale :math:`\sum v (y - \rho p)^2 / (\rho\sum wp)^2`
    (the ratio's interval is :math:`\rho\,e^{\pm z\,\mathrm{se}}`: it stays positive).
    Returns (citl lower, citl upper, ratio lower, ratio upper)."""
    W = totals["W"].to_numpy(float)
    m = second_moments(totals, weight_kind)
    if m is None:
        nan = np.full(len(W), np.nan)
        return nan, nan, nan, nan
    v1, vy, vp, vyy, vyp, vpp = (m[:, 0, 0], m[:, 0, 1], m[:, 0, 2], m[:, 1, 1], m[:, 1, 2],
                                 m[:, 2, 2])
    P, Y = totals["swp"].to_numpy(float), totals["swy"].to_numpy(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        c = (P - Y) / W
        var_c = ((vyy - 2 * vyp + vpp) - 2 * c * (vp - vy) + c * c * v1) / (W * W)
        rho = Y / P
        var_log = (vyy - 2 * rho * vyp + rho * rho * vpp) / (rho * P) ** 2
        lo, hi = wald(np.log(rho), var_log, confidence)
    ok = (Y > 0) & (P > 0)
    return (*wald(c, var_c, confidence), np.where(ok, np.exp(lo), np.nan),
            np.where(ok, np.exp(hi), np.nan))


def _clip(lo, hi, low: float, high: float):
    return np.clip(lo, low, high), np.clip(hi, low, high)


# -- the bootstrap of the bins -------------------------------------------------------------------


def ece_statistic(norm: str) -> Callable[[np.ndarray], np.ndarray]:
    """The binned calibration error of ``norm`` ("l1", "l2", or "reliability": the Brier
    score's reliability, RMSCE squared; or the Brier decomposition's "resolution" and
    "uncertainty") as a function of bin sums ``S`` (..., bins, 3) =
    (W_k, Y_k, P_k), vectorised over the leading axes (replicates, groups); a bin of no weight
    counts for nothing."""
    def stat(S: np.ndarray) -> np.ndarray:
        Wk, R = S[..., 0], S[..., 1] - S[..., 2]
        W = Wk.sum(axis=-1)
        with np.errstate(divide="ignore", invalid="ignore"):
            if norm in ("resolution", "uncertainty"):
                ybar = S[..., 1].sum(axis=-1) / W
                if norm == "uncertainty":
                    return ybar * (1 - ybar)
                rate = np.where(Wk > 0, S[..., 1] / np.where(Wk > 0, Wk, 1.0), 0.0)
                return (Wk * (rate - ybar[..., None]) ** 2).sum(axis=-1) / W
            # in R's own memory: the replicates' sums are B × groups × bins (one pass less each)
            if norm == "l1":
                return np.abs(R, out=R).sum(axis=-1) / W
            live = Wk > 0
            R *= R
            R /= np.where(live, Wk, 1.0)
            np.copyto(R, 0.0, where=~live)  # a bin of no weight counts for nothing
            square = R.sum(axis=-1) / W
            return np.sqrt(square) if norm == "l2" else square
    if norm not in ("l1", "l2", "reliability", "resolution", "uncertainty"):
        raise ValueError(f"no bootstrap statistic for norm {norm!r}")
    stat.smooth = norm != "l1"  # the squared forms: see selection_threshold
    # the Brier score's resolution and uncertainty are smooth where they matter (no kink at a
    # calibrated bin): both ends from the linearization
    stat.select = norm in ("l1", "l2", "reliability")
    return stat


#: doubles of replicate deviations held at once (groups are finished in chunks of this size)
_CHUNK = 2**22


def bins_interval(bins: pd.DataFrame, *, by: Sequence[str], statistic: Callable,
                  confidence: float, replicates: int, seed: int, weight_kind: str,
                  n_bins: int, side: int = 0, deviations: bool = False):
    """Per group: ``ci_lower`` and ``ci_upper`` of a binned statistic (see the module's notes).

    Parameters
    ----------
    bins : pandas.DataFrame
        The bins summary: per group and ``bin`` the sums ``n``, ``W``, ``swy``, ``swp`` and the
        second moments (``swyp``, ``swpp``, and ``swyy`` for soft labels; under the variance
        weight ``sw2``, ``sw2y``, ``sv_p``, ``sv_yy``, ``sv_yp``, ``sv_pp``).
    by : sequence of str
        The group keys.
    statistic : callable
        The statistic of bin sums (:func:`ece_statistic`).
    confidence, replicates, seed, weight_kind
        The level, the number of replicates B, the seed and the resolved weight kind.
    n_bins : int
        The number of bins asked for (bin ids are below ``n_bins + 1``).
    side : int, default 0
        The stream of draws (:func:`draw_stream`): two independent samples of a comparison take
        sides 0 and 1.
    deviations : bool, default False
        Also return, per group, the estimate and the replicates' ``(down, up)`` deviations
        (B each), from which :mod:`sqlcal.metrics.compare` forms a difference's interval.

    Returns
    -------
    pandas.DataFrame
        The group keys, ``ci_lower``, ``ci_upper`` (NaN for a group of no weight, or a summary
        without the second moments); with ``deviations``, also a dict group key -> (estimate,
        down, up).

    Notes
    -----
    Fang & Santos (2019) for the directional derivative; Hanley & MacGibbon (2006) and Chamandy
    et al. (2012) for the Poisson bootstrap whose covariance the draws match; Chernozhukov,
    Chetverikov & Kato (2013) for the Gaussian multiplier form; Efron & Tibshirani (1993), An
    Introduction to the Bootstrap, ch. 13, for the basic (reverse-percentile) interval both
    ends take.
    """
    by = list(by)
    frame = bins[bins["W"].to_numpy(float) > 0]
    moments = second_moments(frame, weight_kind)
    if by:
        codes, keys = _codes(frame, by)
    else:
        codes, keys = np.zeros(len(frame), int), [()]
    G, K = len(keys), n_bins + 1
    S = np.zeros((G, K, 3))
    C = np.zeros((G, K, 3, 3))
    size = np.zeros(G)
    ids = frame["bin"].to_numpy(int)
    S[codes, ids] = np.stack([frame["W"].to_numpy(float), frame["swy"].to_numpy(float),
                              frame["swp"].to_numpy(float)], axis=-1)
    np.add.at(size, codes, frame["W" if weight_kind == "frequency" else "n"].to_numpy(float))
    lower, upper = np.full(G, np.nan), np.full(G, np.nan)
    found = {}
    if moments is not None and G:
        C[codes, ids] = moments
        L = cholesky3(C.reshape(-1, 3, 3)).reshape(G, K, 3, 3)
        z = np.random.default_rng(draw_stream(seed, side)).standard_normal((replicates, K, 3))
        chunk = max(1, _CHUNK // (replicates * K * 3))
        for a in range(0, G, chunk):
            b = min(G, a + chunk)
            theta, down, up = _deviations(S[a:b], C[a:b], L[a:b], z, statistic, size[a:b])
            alpha = 1 - confidence
            with np.errstate(invalid="ignore"):
                lo = theta - np.quantile(down, 1 - alpha / 2, axis=0)
                hi = theta - np.quantile(up, alpha / 2, axis=0)
            ok = np.isfinite(theta)
            lower[a:b] = np.where(ok, np.maximum(np.minimum(lo, theta), 0.0), np.nan)
            upper[a:b] = np.where(ok, np.maximum(hi, theta), np.nan)
            if deviations:
                for g in range(a, b):
                    found[keys[g]] = (theta[g - a], down[:, g - a], up[:, g - a])
    out = pd.DataFrame({**{c: [k[i] for k in keys] for i, c in enumerate(by)},
                        "ci_lower": lower, "ci_upper": upper}, columns=[*by, "ci_lower",
                                                                       "ci_upper"])
    return (out, found) if deviations else out


def _codes(frame: pd.DataFrame, by: list) -> tuple[np.ndarray, list]:
    """Each row's group number and the groups' keys, in sorted order (NULL keys kept)."""
    codes = frame.groupby(by, sort=True, dropna=False).ngroup().to_numpy()
    first = np.unique(codes, return_index=True)[1]
    keys = list(zip(*(frame[c].iloc[first].tolist() for c in by)))
    return codes, keys


def _deviations(S, C, L, z, statistic, size):
    """The estimate θ̂ of each group (G), and the replicates' deviations (B × G) of
    :func:`deviations_of` for the draws ``z`` (B × bins × 3) through the factors ``L``."""
    return deviations_of(S, C, lower_times(L, z), statistic, size)


def lower_times(L: np.ndarray, z: np.ndarray) -> np.ndarray:
    """L·z for lower-triangular 3×3 factors ``L`` (G × bins × 3 × 3) and draws ``z`` (B × bins ×
    3): B × G × bins × 3, written out term by term (six products; ``np.einsum`` took half of a
    3,000-group ECE interval's time on its generic loop)."""
    z = (z[:, None, :, 0], z[:, None, :, 1], z[:, None, :, 2])
    out = np.empty((z[0].shape[0], *L.shape[:2], 3))
    for i in range(3):  # row i: L[i, 0]·z0 + L[i, 1]·z1 + ..., summed in place left to right
        np.multiply(L[None, ..., i, 0], z[0], out=out[..., i])
        for j in range(1, i + 1):
            out[..., i] += L[None, ..., i, j] * z[j]
    return out


def deviations_of(S, C, dS, statistic, size):
    """The estimate θ̂ of each group (G) from its bin sums ``S`` (G × bins × 3) with second
    moments ``C`` (G × bins × 3 × 3), and for the replicates' changes ``dS`` of the sums
    (B × G × bins × 3) the deviations (B × G): ``down``, the statistic's change at the
    selected centre (the lower end), ``up``, its linearization at the estimate (the upper
    end); ``size``: the groups' rows (frequency weights: W)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        theta = statistic(S)
        step = _STEP * dS
        plus = S + step
        minus = np.subtract(S, step, out=step)  # S − step, in the step's own memory
        up = (_floored(statistic, plus, S) - _floored(statistic, minus, S)) / (2 * _STEP)
        del plus, minus, step
        # a bin whose mean residual is within κ standard errors of 0 is centred at 0
        Wk, R = S[..., 0], S[..., 1] - S[..., 2]
        live = Wk > 0
        m = np.where(live, R / np.where(live, Wk, 1.0), 0.0)
        var_r = ((C[..., 1, 1] - 2 * C[..., 1, 2] + C[..., 2, 2])
                 - 2 * m * (C[..., 0, 1] - C[..., 0, 2]) + m * m * C[..., 0, 0])
        smooth = getattr(statistic, "smooth", True)
        if smooth:  # a small bin's own spread understates its mean's: see small_bins
            var_r = np.maximum(var_r, C[..., 0, 2] - C[..., 2, 2])
        se = np.sqrt(np.maximum(var_r, 0.0)) / np.where(live, Wk, 1.0)
        kappa = selection_threshold(size, smooth)
        if smooth:
            kappa = np.maximum(kappa, stats.norm.isf(SELECTION_ERROR / 2
                                                      / np.maximum(live.sum(axis=-1), 1)))
        near = live & (np.abs(m) <= kappa[:, None] * se)
        centre = S.copy()
        centre[..., 1] = np.where(near, centre[..., 2], centre[..., 1])
        down = _floored(statistic, centre + dS, S) - statistic(centre)
    if not getattr(statistic, "select", True):
        down = up
    return theta, down, up


#: the squared forms' small-bin rule: the chance that some truly calibrated bin of a group is
#: taken as miscalibrated is held below this (a Bonferroni bound over the group's bins)
SELECTION_ERROR = 0.05


def selection_threshold(size: np.ndarray, smooth: bool) -> np.ndarray:
    r"""κ_n, n the rows (frequency weights: W, the rows they stand for): a bin whose mean
    residual is within κ_n standard errors of 0 is taken as calibrated. Both choices satisfy
    κ_n → ∞ and κ_n/√n → 0, as Fang & Santos (2019) require:

    - the L1 forms (ECE): √(2 ln ln n), the law of the iterated logarithm's rate;
    - the squared forms (RMSCE, reliability), ``smooth``: √(ln n), the BIC-like choice of
      Andrews & Soares (2010). Their derivative vanishes at a calibrated bin, so a calibrated
      bin taken as miscalibrated loses its whole contribution to the lower end (√(2 ln ln n)
      covered a calibrated model's RMSCE 70-73% of the time, in the simulations of
      ``bench/intervals.py``), where the L1 form loses only the sign.

    The squared forms' small-bin rule (:func:`deviations_of`): at 10³ rows their 15 bins hold
    a few rows each where scores are sparse, and their interval covered a calibrated model's
    RMSCE 82-86% of the time (a low base rate's 82-88%), every miss at the lower end: a truly
    calibrated bin taken as miscalibrated. Two causes, two remedies. A bin of a few rows
    estimates its mean residual's spread from those rows (one row: 0, so a single positive at
    p = 0.2 looked 0.8 off with no error); the selection reads the larger of that and the
    spread calibration implies, :math:`\sum v\,p(1 - p)` (Hosmer & Lemeshow's null variance).
    And with K bins, √(ln n) standard errors (2.6 at 10³ rows) are crossed by one calibrated
    bin in about 12% of samples; κ is at least the Bonferroni level
    :math:`z_{1 - \gamma/(2K)}`, γ = :data:`SELECTION_ERROR` (binding below about 10⁴ rows).
    Coverage at 10³ rows became 96-99% (``bench/bench_intervals.py coverage``).
    """
    size = np.maximum(size, 16.0)
    if smooth:
        return np.sqrt(np.log(size))
    return np.sqrt(2 * np.log(np.log(size)))


def _floored(statistic: Callable, replicate: np.ndarray, S: np.ndarray) -> np.ndarray:
    """The statistic of replicate sums, each bin's weight kept above :data:`WEIGHT_FLOOR` of
    its own. ``replicate`` is a temporary of the caller's, floored in place (a copy of the
    replicates' B × groups × bins × 3 sums cost a tenth of the interval's time)."""
    np.maximum(replicate[..., 0], WEIGHT_FLOOR * S[..., 0], out=replicate[..., 0])
    return statistic(replicate)


def cholesky3(c: np.ndarray) -> np.ndarray:
    """Lower-triangular L with L·Lᵀ = c for a stack of 3×3 positive semi-definite matrices:
    the Cholesky factor, with a pivot that is 0 up to rounding (a bin whose labels are all
    equal, so y is a multiple of the weight) set to 0. Continuous in c away from such pivots,
    so sums that differ in their last bits (two engines) give replicates that do too."""
    L = np.zeros_like(c)
    tol = 1e-10
    a11 = np.maximum(c[:, 0, 0], 0.0)
    L[:, 0, 0] = l11 = np.sqrt(a11)
    with np.errstate(divide="ignore", invalid="ignore"):
        inv = np.where(l11 > 0, 1 / np.where(l11 > 0, l11, 1.0), 0.0)
        L[:, 1, 0] = l21 = c[:, 1, 0] * inv
        L[:, 2, 0] = l31 = c[:, 2, 0] * inv
        a22 = c[:, 1, 1] - l21 * l21
        a22 = np.where(a22 > tol * np.maximum(c[:, 1, 1], 1e-300), a22, 0.0)
        L[:, 1, 1] = l22 = np.sqrt(a22)
        inv2 = np.where(l22 > 0, 1 / np.where(l22 > 0, l22, 1.0), 0.0)
        L[:, 2, 1] = l32 = (c[:, 2, 1] - l31 * l21) * inv2
        a33 = c[:, 2, 2] - l31 * l31 - l32 * l32
        L[:, 2, 2] = np.sqrt(np.where(a33 > tol * np.maximum(c[:, 2, 2], 1e-300), a33, 0.0))
    return L


def cholesky(c: np.ndarray) -> np.ndarray:
    """:func:`cholesky3` for a stack of d×d positive semi-definite matrices (any d): the lower
    factor, column by column, a pivot that is 0 up to rounding set to 0 (its column then 0)."""
    d = c.shape[-1]
    L = np.zeros_like(c)
    tol = 1e-10
    with np.errstate(divide="ignore", invalid="ignore"):
        for j in range(d):
            pivot = c[:, j, j] - (L[:, j, :j] ** 2).sum(axis=-1)
            pivot = np.where(pivot > tol * np.maximum(c[:, j, j], 1e-300), pivot, 0.0)
            L[:, j, j] = root = np.sqrt(pivot)
            inv = np.where(root > 0, 1 / np.where(root > 0, root, 1.0), 0.0)
            for i in range(j + 1, d):
                L[:, i, j] = (c[:, i, j] - (L[:, i, :j] * L[:, j, :j]).sum(axis=-1)) * inv
    return L


def draw_stream(seed: int, side: int = 0) -> list:
    """The random stream of the draws: the seed, and the side of a comparison (0 for a metric's
    own interval). Every group reads the same draws, bin by bin, so a group's interval depends
    on its own sums only (not on its key's type on an engine, nor on the other groups)."""
    return [int(seed), int(side)]


def held(src) -> frozenset | None:
    """The interval parts ``src`` can give (:func:`interval_parts`, and the totals' ``"r4"``
    and ``"logloss_var"``): None for a scan (one more aggregate gives any) or the levels of
    ``from_summaries`` (binary labels: every moment is a function of a level's Σw, Σwy, Σv, Σvy
    and its score); for a stored window (:mod:`sqlcal.monitor.stored`), the parts its
    periods' stored sums give (summary version 4 stores them all; a window holding a period
    that version 3 wrote lacks the logit grid's split moments, one that version 2 wrote gives
    the frequency weights' moments only)."""
    served = getattr(src, "served", None)
    if served is None:
        return None
    return frozenset(getattr(served, "interval_parts", ("moments",)))


def available(src, parts: Sequence[str]) -> tuple:
    """The ``parts`` ``src`` can give (:func:`held`); for the others a warning says why the
    intervals that read them are NaN (never made up)."""
    have = held(src)
    if have is None:
        return tuple(parts)
    missing = [p for p in parts if p not in have]
    if missing:
        import warnings

        gap = getattr(getattr(src, "served", None), "interval_gap", None)
        why = (gap(missing) if callable(gap) else gap) or "this source does not hold their sums"
        warnings.warn(f"intervals NaN ({', '.join(_PART_SUMS.get(p, p) for p in missing)} "
                      f"missing): {why}", stacklevel=3)
    return tuple(p for p in parts if p in have)


#: what each interval part adds, for the warning of :func:`available`
_PART_SUMS = {"r4": "Σw(y − p)⁴", "spread": "the variance weight's moments",
              "logloss_sq": "Σwℓ²", "logloss_var": "Σwℓ², Σwyℓ", "sw2": "Σv",
              "moments": "Σwp², Σwyp",
              "logit_moments": "the logit grid's split moments"}


#: the most bins a binned interval is drawn for: beyond, the bins hold too few rows for the
#: normal approximation (and the replicates' memory grows with bins × replicates)
MAX_BINS = 1024


def interval_parts(src, weight_kind: str, on: bool) -> tuple:
    """The summary parts an interval reads: the second moments (``"moments"``), and under the
    variance weight theirs (``"spread"``), unless the weights are frequencies."""
    if not on:
        return ()
    from sqlcal.metrics import variance_parts

    return available(src, ("moments", *(("spread",) if variance_parts(src, weight_kind)
                                        else ())))


# -- the bootstrap of the running residual sum (the cutoff error) --------------------------------


def walk_interval(cells: pd.DataFrame, extremes: pd.DataFrame, *, by: Sequence[str],
                  grid: int, confidence: float, replicates: int, seed: int,
                  weight_kind: str) -> pd.DataFrame:
    r"""Per group: ``ci_lower`` and ``ci_upper`` of the population's cutoff calibration error
    :math:`\Delta = \sup_t S(t) - \inf_t S(t)`, :math:`S(t) = E[w(y - p)1\{p \le t\}]/E[w]`
    (:math:`S(-\infty) = 0` included), from the score-cell histogram the metric already reads.

    Parameters
    ----------
    cells : pandas.DataFrame
        The score-cell histogram on the 2^k grid ``grid``: per group and ``cell`` the sums
        ``n``, ``W``, ``swy``, ``swp``, ``p_min``, ``p_max`` and the second moments of
        :func:`second_moments` (``swyp``, ``swpp``; under the variance weight ``sw2``, ``sw2y``,
        ``sv_p``, ``sv_yy``, ``sv_yp``, ``sv_pp``).
    extremes : pandas.DataFrame
        Per group (the keys), ``W``, ``s_max`` and ``s_min`` (the extremes of the running sum
        over the distinct scores, without :math:`S_0`), ``p_at_max``, ``p_at_min`` (a score
        reaching each) and ``grid_bound`` (0 when the extremes are exact).
    by : sequence of str
        The group keys.
    grid : int
        The number of cells of the grid (the draws are indexed by cell).
    confidence, replicates, seed, weight_kind
        The level, the number of replicates B, the seed and the resolved weight kind.

    Returns
    -------
    pandas.DataFrame
        The group keys, ``ci_lower``, ``ci_upper`` (NaN for a group of no weight, or a histogram
        without the second moments).

    Notes
    -----
    The walk's increments over the cells are drawn as in :func:`bins_interval`: each cell's
    (W_c, R_c = Σw(y − p)) as a Gaussian vector with the covariance of a Poisson bootstrap of
    its rows (:math:`\sum v (1, r)^\top (1, r)`), the cells independently (Hanley & MacGibbon
    2006; Chamandy et al. 2012; the multiplier form of Chernozhukov, Chetverikov & Kato 2013),
    linearized through the ratio: :math:`h^*(t) = (R^*_{\le t} - \hat S(t) W^*)/W`. The range
    is not differentiable where its maximum or minimum is not unique (at a calibrated model
    S ≡ 0 is maximal everywhere), and the plug-in value is biased upward; its directional
    derivative (Fang & Santos 2019) is :math:`\sup_{t \in A^+} h(t) - \inf_{t \in A^-} h(t)`,
    :math:`A^\pm` the sets where S is maximal, minimal. The lower end is
    :math:`\hat\Delta - q_{1-\alpha/2}(D^*)`, D* that derivative with :math:`A^\pm` estimated
    as the cells whose running sum at an end is within :math:`\kappa_n` standard errors (of
    the walk between them and the extreme) of the extreme, the origin included
    (:func:`walk_threshold`; Andrews & Soares 2010); the upper end is
    :math:`\hat\Delta - q_{\alpha/2}(U^*)`, U* the linearization :math:`h^*(\hat t_{max}) -
    h^*(\hat t_{min})` at the estimate's own extremes, then ``grid_bound`` added (grid mode's
    value is a lower bound). A calibrated model's interval reaches 0 (D* is then the range of
    the whole process, the Brownian range the noise floor states).

    The cells' resolution: the extremes are exact (the metric zooms into the candidate cells),
    the draws are per cell. Inside a cell of several distinct scores the process is drawn as a
    Brownian bridge between its ends with the cell's variance (its maximum has the law
    :math:`P(M \ge m) = e^{-2(m - a)(m - b)/V}`), so D* takes the supremum over the whole cell:
    an over-statement where the cell's scores are few (conservative for the lower end), exact
    for a cell of one score (its walk has no interior). The linearization U* interpolates the
    cell of each extreme by the score's position (a Brownian bridge at that fraction).
    """
    by = list(by)
    frame = _coarser(cells[cells["W"].to_numpy(float) > 0], by, grid, weight_kind)
    grid = min(grid, WALK_CELLS)
    moments = second_moments(frame, weight_kind)
    ext = extremes.reset_index(drop=True)
    G = len(ext)
    lower, upper = np.full(G, np.nan), np.full(G, np.nan)
    if moments is None or not G or not len(frame):
        return _walk_out(ext, by, lower, upper)
    frame = frame.assign(_m00=moments[:, 0, 0], _m01=moments[:, 0, 1] - moments[:, 0, 2],
                         _m11=moments[:, 1, 1] - 2 * moments[:, 1, 2] + moments[:, 2, 2])
    rng = np.random.default_rng(draw_stream(seed, 2))
    z = rng.standard_normal((replicates, grid, 2))
    e = -2 * np.log1p(-rng.random((replicates, grid, 2)))  # −2 ln U, U uniform on (0, 1]
    zx = rng.standard_normal((replicates, 2))
    draws = _by_cell(z, e)
    alpha = 1 - confidence
    columns, spans = _group_slices(frame, by, ("cell", "n", "W", "swy", "swp", "sw2", "p_min",
                                              "p_max", "_m00", "_m01", "_m11"))
    extreme = {c: ext[c].to_numpy() for c in ("s_max", "s_min", "p_at_max", "p_at_min",
                                              "grid_bound")}
    keys = zip(*(ext[c].tolist() for c in by)) if by else [()] * G
    for g, key in enumerate(keys):
        span = spans.get(_norm_key(key))
        if span is None:
            continue
        part = {c: v[span[0]:span[1]] for c, v in columns.items()}
        if part["W"].sum() > 0:
            lower[g], upper[g] = _walk_group(part, {c: v[g] for c, v in extreme.items()},
                                             draws, zx, alpha, grid, weight_kind)
    return _walk_out(ext, by, lower, upper)


#: the cells :func:`walk_interval` draws the walk on (a finer histogram is merged to this many
#: cells: the process inside a cell is drawn as a Brownian bridge, so the draws need not be
#: finer, and their cost is replicates × cells per group)
WALK_CELLS = options.WALK_CELLS


def _coarser(frame: pd.DataFrame, by: list, grid: int, weight_kind: str) -> pd.DataFrame:
    """The histogram on :data:`WALK_CELLS` cells: adjacent cells merged (sums add, the least
    and greatest scores kept)."""
    if grid <= WALK_CELLS:
        return frame
    frame = frame.assign(cell=frame["cell"].to_numpy(np.int64) // (grid // WALK_CELLS))
    sums = [c for c in frame.columns if c not in (*by, "cell", "p_min", "p_max")
            and pd.api.types.is_numeric_dtype(frame[c])]
    grouped = frame.groupby([*by, "cell"], sort=False, dropna=False)
    out = grouped[sums].sum()
    out["p_min"] = grouped["p_min"].min()
    out["p_max"] = grouped["p_max"].max()
    return out.reset_index()


def walk_threshold(size) -> np.ndarray:
    """κ_n of :func:`walk_interval`'s estimated extreme sets (n the rows; frequency weights:
    W): √(ln n), the BIC-like rate of Andrews & Soares (2010) (κ_n → ∞, κ_n/√n → 0, as Fang &
    Santos (2019) require). Seen from its maximum, Brownian motion is a 3-dimensional Bessel
    process, so at a calibrated model the walk at distance s (in variance) lies
    :math:`\\sqrt{s}\\,\\chi_3` below its maximum: a κ of 2 would leave out a quarter of the
    points that are truly maximal, and the lower end would miss (see the module's notes)."""
    return np.sqrt(np.log(np.maximum(np.asarray(size, float), 16.0)))


def _by_cell(z: np.ndarray, e: np.ndarray) -> dict:
    """The walk's draws laid out by cell: ``z0``, ``z1`` (the normals of each cell's (W_c, R_c))
    and ``e0``, ``e1`` (the bridges' exponentials at the maximum, the minimum), each a
    contiguous cells × B array, so that a group's cells are whole rows (a copy of rows, not a
    strided gather from the B × cells × 2 draws, for each of hundreds of groups). With them
    the groups' working memory, reused group after group (fresh arrays of megabytes cost as
    much in page faults as the arithmetic on them): the walk ``H`` (cells + 1 × B) and
    ``scratch`` (4 × cells × B)."""
    out = {f"{name}{j}": np.ascontiguousarray(draws[..., j].T)
           for name, draws in (("z", z), ("e", e)) for j in (0, 1)}
    cells, B = out["z0"].shape
    out["H"], out["scratch"] = np.empty((cells + 1, B)), np.empty((4, cells, B))
    return out


def _walk_group(part: dict, ext: dict, draws: dict, zx, alpha: float, grid: int,
                weight_kind: str) -> tuple[float, float]:
    """One group's (lower, upper) of :func:`walk_interval`; ``part`` its cells' columns (numpy
    arrays in cell order), ``ext`` its extremes, ``draws`` the cells' normal draws and their
    bridges' exponential draws (−2 ln U) of :func:`_by_cell`, ``zx`` the extremes' own
    normals.

    The replicate walks are held as cells × B (one row a cell), with a row of zeros first (the
    origin), so the walk at the start of cell c is row c and at its end row c + 1: where a
    group holds every cell, or every cell is near an extreme, the rows are taken as they are
    (views), not gathered."""
    ids = part["cell"]
    W = float(part["W"].sum())
    R = part["swy"] - part["swp"]
    a, b, d = part["_m00"], part["_m01"], part["_m11"]
    # the cell's (W_c, R_c) as L·z, L the Cholesky factor of its 2×2 covariance
    l11 = np.sqrt(np.maximum(a, 0.0))
    l21 = np.where(l11 > 0, b / np.where(l11 > 0, l11, 1.0), 0.0)
    # a cell whose residuals are all equal (one row) has a pivot that is 0 up to rounding:
    # its square root would turn the sums' last bits into 1e-8 (see cholesky3)
    pivot = d - l21 * l21
    l22 = np.sqrt(np.where(pivot > 1e-10 * np.maximum(d, 1e-300), pivot, 0.0))
    n = len(ids)
    every = n == grid  # the cells are sorted and distinct: all of them
    scratch = draws["scratch"][:, :n]
    z0, z1 = (draws[f"z{j}"] if every else _rows(draws[f"z{j}"], ids, scratch[j])
              for j in (0, 1))
    B = z0.shape[1]
    s_end = np.cumsum(R) / W
    s_start = s_end - R / W
    H = draws["H"][:n + 1]  # H[c + 1]: h at the end of cell c; H[0]: the origin
    H[0] = 0.0
    h_end = H[1:]
    np.multiply(l21[:, None], z0, out=h_end)
    h_end += np.multiply(l22[:, None], z1, out=scratch[2])
    np.cumsum(h_end, axis=0, out=h_end)
    # each replicate's W* deviation, summed over the cells in order (a matrix product would
    # sum in another order, and the intervals would move in their last bits)
    dW = np.multiply(l11[:, None], z0, out=scratch[2]).sum(axis=0)
    h_end -= np.multiply(s_end[:, None], dW, out=scratch[2])
    h_end /= W
    V = np.maximum(d, 0.0) / (W * W)  # the cell's own variance of h
    v_end = np.cumsum(V)
    v_start = v_end - V
    p_min, p_max = part["p_min"], part["p_max"]
    several = p_max > p_min  # more than one distinct score: the walk has an interior
    s_max, s_min = float(ext["s_max"]), float(ext["s_min"])
    hi, lo = max(s_max, 0.0) / W, min(s_min, 0.0) / W
    theta = hi - lo
    # the rows the walk represents: W of frequency weights; under sampling weights Kish's
    # W²/Σv, which a kept row of frequency f and its f duplicates give alike (v = f/π²)
    if weight_kind == "frequency":
        size = float(W)
    elif "sw2" in part and float(part["sw2"].sum()) > 0:
        size = float(W * W / part["sw2"].sum())
    else:
        size = float(part["n"].sum())
    kappa = float(walk_threshold(size))
    D, U = np.zeros(B), np.zeros(B)
    for value, at, sign, k in ((hi, ext["p_at_max"], 1.0, 0), (lo, ext["p_at_min"], -1.0, 1)):
        if sign * value > 0:  # the extreme is reached inside the cells, at score `at`
            star = min(int(np.searchsorted(ids, _cell(at, grid))), len(ids) - 1)
            vs, ve = v_start[star], v_end[star]
        else:  # the origin S₀ = 0
            star, vs, ve = -1, 0.0, 0.0
        # the estimated extreme set: cells whose running sum at an end is within κ standard
        # errors (of the walk between it and the extreme) of the extreme, the origin too
        dist = np.maximum(np.maximum(v_start - ve, vs - v_end), 0.0)
        ends = np.where(several, sign * np.maximum(sign * s_start, sign * s_end), s_end)
        near = sign * ends >= sign * value - kappa * np.sqrt(dist)
        if star >= 0:
            near[star] = True
        extreme = _cell_extreme(H, np.flatnonzero(near), ids, V, several,
                                draws[f"e{k}"], every, sign, scratch[2:])
        if star < 0 or 0.0 >= sign * value - kappa * np.sqrt(vs):
            extreme = np.maximum(extreme, 0.0)
        D += extreme
        own = np.zeros(B)
        if star >= 0:  # the linearization at the estimate's extreme, inside its cell
            f = 1.0
            if several[star]:
                f = float(np.clip((float(at) - p_min[star]) / (p_max[star] - p_min[star]),
                                  0.0, 1.0))
            start = H[star]
            own = start + f * (H[star + 1] - start) + np.sqrt(f * (1 - f) * V[star]) * zx[:, k]
        U += sign * _separate(own, star, s_end, v_end, H, value, kappa, sign)
    low = theta - np.quantile(D, 1 - alpha / 2)
    high = theta - np.quantile(U, alpha / 2) + float(ext["grid_bound"])
    return (float(np.clip(min(low, theta), 0.0, 1.0)),
            float(np.clip(max(high, theta), 0.0, 1.0)))


def _cell_extreme(H: np.ndarray, cols: np.ndarray, ids: np.ndarray, V: np.ndarray,
                  several: np.ndarray, e: np.ndarray, every: bool, sign: float,
                  scratch: np.ndarray) -> np.ndarray:
    """Per replicate, the greatest (``sign`` 1; the least, -1, as ``sign`` times it) of the
    walk over the cells ``cols`` (of the group's cells ``ids``; ``every``: they are all the
    grid's), each taken whole: a cell of several scores as a Brownian bridge between its ends
    H[c] and H[c + 1] with variance V[c], whose supremum is
    :math:`(h_0 + h_1 + \\sqrt{(h_1 - h_0)^2 + V E})/2`, E = −2 ln U of ``e`` (the row of its
    grid cell), and a cell of one score at its end (its walk steps once). −∞ for no cells.
    ``scratch``: two arrays of at least len(cols) × B, overwritten.

    References
    ----------
    Borodin & Salminen (2002), Handbook of Brownian Motion: Facts and Formulae, part II, 1.1.8
    (the maximum of a Brownian bridge).
    """
    if not len(cols):
        return np.full(H.shape[1], -np.inf)
    whole = len(cols) == len(ids)
    h0 = H[:-1] if whole else H[cols]
    h1 = H[1:] if whole else H[cols + 1]
    bridge, reach = scratch[0, :len(cols)], scratch[1, :len(cols)]
    np.subtract(h1, h0, out=bridge)
    bridge *= bridge
    if every and whole:
        np.multiply(V[:, None], e, out=reach)
    else:
        np.multiply(V[cols][:, None], _rows(e, ids[cols], reach), out=reach)
    bridge += reach
    np.sqrt(bridge, out=bridge)
    np.add(h0, h1, out=reach)
    if sign > 0:
        reach += bridge
    else:
        reach -= bridge
    # twice the reach (a cell of one score: twice its end), halved once per replicate after
    # the extreme is taken: halving is exact, so this is the extreme of the halves
    one = ~several[cols]
    if one.any():
        reach[one] = 2 * h1[one]
    return (reach.max(axis=0) if sign > 0 else -reach.min(axis=0)) / 2


def _rows(a: np.ndarray, ids: np.ndarray, out: np.ndarray) -> np.ndarray:
    """The rows ``ids`` of ``a``, written into ``out`` (ids are in range: numpy's checked take
    into ``out`` copies twice, its clipped one once)."""
    return np.take(a, ids, axis=0, out=out, mode="clip")


def _separate(h_star: np.ndarray, star: int, s_end: np.ndarray, v_end: np.ndarray,
              H: np.ndarray, value: float, kappa: float, sign: int) -> np.ndarray:
    """The linearization's value at the extremes: h* at the estimate's own extreme, and at
    every other peak of the walk (``sign`` 1; trough, -1) within κ standard errors of it and
    apart from it and from each other by a dip of κ standard errors (a walk as low at its
    end as at its origin, as a model calibrated in the large but over-confident): the
    largest (smallest) of h* there. Its neighbours are no peaks of their own, so they do not
    widen the law (the supremum over a neighbourhood would, and the upper end would miss).
    ``H`` the replicate walks by position (cells + 1 × B: the origin, then each cell's end)."""
    values = sign * np.r_[0.0, s_end]  # position 0: the origin, then each cell's end
    var = np.r_[0.0, v_end]
    at = star + 1
    close = values >= sign * value - kappa * np.sqrt(np.abs(var - var[at]))
    left = np.r_[-np.inf, values[:-1]]
    right = np.r_[values[1:], -np.inf]
    peaks = np.flatnonzero(close & (values >= left) & (values >= right))
    accepted = [at]
    for c in peaks[np.argsort(-values[peaks], kind="stable")][:64]:
        if len(accepted) >= 8:
            break
        apart = True
        for a in accepted:
            lo, hi = min(a, c), max(a, c)
            dip = values[lo:hi + 1].min()
            if min(values[a], values[c]) - dip < kappa * np.sqrt(abs(var[hi] - var[lo])):
                apart = False
                break
        if apart and c != at:
            accepted.append(int(c))
    out = h_star
    for c in accepted[1:]:
        out = np.maximum(out, H[c]) if sign > 0 else np.minimum(out, H[c])
    return out


def _cell(p, grid: int) -> int:
    return int(min(np.floor(float(p) * grid), grid - 1))


def _norm_key(key: tuple) -> tuple:
    return tuple(None if pd.isna(k) else k for k in key)


def _group_slices(frame: pd.DataFrame, by: list, names: Sequence[str]) -> tuple[dict, dict]:
    """The columns ``names`` of ``frame`` (those it holds) as numpy arrays sorted by group, then
    ``cell``, and each group's key (:func:`_norm_key`) -> its (start, end) in them: one sort
    for every group (a groupby iterated per group cost a millisecond a group)."""
    code = (frame.groupby(by, sort=False, dropna=False).ngroup().to_numpy() if by
            else np.zeros(len(frame), dtype=np.int64))
    order = np.lexsort((frame["cell"].to_numpy(np.int64), code))
    code = code[order]
    starts = np.flatnonzero(np.diff(code, prepend=-1))
    ends = [*starts[1:].tolist(), len(code)]
    first = order[starts]
    keys = zip(*(frame[c].take(first).tolist() for c in by)) if by else [()] * len(starts)
    columns = {c: frame[c].to_numpy(np.int64 if c == "cell" else float)[order]
               for c in names if c in frame}
    return columns, {_norm_key(k): (a, b) for k, a, b in zip(keys, starts.tolist(), ends)}


def _walk_out(ext: pd.DataFrame, by: list, lower, upper) -> pd.DataFrame:
    out = ext[by].copy() if by else pd.DataFrame(index=range(len(ext)))
    out["ci_lower"], out["ci_upper"] = lower, upper
    return out.reset_index(drop=True)
