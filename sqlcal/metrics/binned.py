"""Binned calibration metrics: ECE (L1, L2, max), the reliability table, the binned Brier
decomposition, and the Hosmer–Lemeshow test. All read the bins summary (one pass per binning)."""

from __future__ import annotations

import warnings
from typing import Any, Sequence

import numpy as np
import pandas as pd
from scipy import stats

from sqlcal.inputs import grids
from sqlcal.inputs.sources import Source
from sqlcal.metrics import Grouped, resolve_weight_kind, result, variance_parts
from sqlcal.metrics._registry import Report, metric
from sqlcal.metrics.cells import (
    cells_needs,
    equal_mass_bins,
    equal_mass_follow_up,
    summary_parts,
)
from sqlcal.metrics.intervals import (
    MAX_BINS,
    REPLICATES,
    SEED,
    bins_interval,
    ece_statistic,
    interval_parts,
)
from sqlcal.options import OPTIONS, Option, checked, costs_binned, costs_hl
from sqlcal.query import declared, executor, planner
from sqlcal.query.executor import as_source

NORMS = {"l1": "ece", "l2": "rmsce", "max": "mce"}
STRATEGIES = OPTIONS["strategy"].choices
#: equal-mass and log-odds bins refine their edges with follow-up passes (exported: the levels)
_REFINING = {("strategy", s): "strategy='uniform'" for s in STRATEGIES if s != "uniform"}
#: a bin holding more than this share of a group's weight makes the binning uninformative there
CONCENTRATED = 0.5


@metric(
    needs=lambda src, o: bins_needs(src, bins=o["bins"], strategy=o["strategy"],
                                    convention=o["convention"], logit_range=o["logit_range"],
                                    parts=_bootstrap_parts(src, o)),
    follow_up=lambda src, o: bins_follow_up(src, bins=o["bins"], strategy=o["strategy"],
                                            logit_range=o["logit_range"],
                                            parts=_bootstrap_parts(src, o)),
    refining=_REFINING,
    report={"ece": Report({"ece": "ece", "ci_lower": "ece_lower", "ci_upper": "ece_upper"}),
            "rmsce": Report({"rmsce": "rmsce", "ci_lower": "rmsce_lower",
                             "ci_upper": "rmsce_upper"}, {"norm": "l2"}),
            "mce": Report({"mce": "mce", "ci_lower": "mce_lower", "ci_upper": "mce_upper"},
                          {"norm": "max"}),
            "ece_quantile": Report({"ece": "ece_quantile", "ci_lower": "ece_quantile_lower",
                                    "ci_upper": "ece_quantile_upper"},
                                   {"strategy": "quantile"})},
    report_bins=True, trust={"binning": None, "ci_method": None, "confidence": "confidence",
                             "weight_kind": "weight_kind"},
    cost=costs_binned,
    options={"norm": Option("choice", "the norm of the binned calibration error",
                            choices=tuple(NORMS))})
@checked
def ece(
    data: Any,
    *,
    score: str | None = None,
    label: str | None = None,
    weight: str | None = None,
    by: str | Sequence[str] = (),
    where: Any = None,
    bins: int = 15,
    strategy: str = "uniform",
    norm: str = "l1",
    convention: str = "sqlcal",
    logit_range: tuple[float, float] | None = None,
    confidence: float = 0.95,
    bootstrap: int = REPLICATES,
    seed: int = SEED,
    weight_kind: str = "auto",
    **source_options: Any,
) -> pd.DataFrame:
    r"""Binned expected calibration error with norm L1 (ECE), L2 (RMSCE) or max (MCE).

    Parameters
    ----------
    data : Source, ibis Table, path, URL or frame
        What to measure; see :func:`sqlcal.source` (its other options, such as ``table=`` and
        ``on_invalid=``, pass through).
    score, label : str
        Score and label columns (not needed when ``data`` is a :class:`~sqlcal.Source`).
    weight : str, optional
        Weight column (frequency weights).
    by : str or sequence of str, default ()
        Group keys.
    where : optional
        Filter applied in the engine.
    bins : int, default 15
        Number of bins B.
    strategy : {"uniform", "quantile", "uncertainty_calibration", "logit"}, default "uniform"
        Equal-width bins; equal-mass bins on exact quantile edges (right-closed, ties never
        split), found from a fine score histogram and the few score levels near each edge;
        uncertainty-calibration's equal-mass bins (see Notes), found the same way; or bins of
        equal width in log-odds (for low base rates) between the lowest and highest score of
        all groups (a second scan, after the totals) or over ``logit_range``, right-closed on
        the edges :math:`\sigma(a + k(b - a)/B)`, :math:`a, b` the log-odds of the range
        (scores clipped to [1e-9, 1 − 1e-9] for it).
    norm : {"l1", "l2", "max"}, default "l1"
        L1 gives ECE, L2 the root-mean-square calibration error, max the maximum calibration error.
    convention : {"sqlcal", "sklearn", "netcal", "relplot"}, default "sqlcal"
        Equal-width bin edges; see :func:`sqlcal.query.reductions.uniform_bin`.
    logit_range : (float, float), optional
        With ``strategy="logit"``: the scores (lo, hi), 0 < lo < hi < 1, the log-odds bins
        span (scores outside fall in the first or last bin); by default the observed range.
    confidence : float, default 0.95
        Two-sided level of the interval.
    bootstrap : int, default 1000
        Bootstrap replicates of the interval (0: no interval, and no second moments in the
        scan; none either above 1024 bins, whose bins hold too few rows for it).
    seed : int, default 20260101
        Seed of the replicates' draws (with each group's key: the same interval on every run
        and engine).
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
        One row per group: the keys, ``ece`` (or ``rmsce``/``mce``), ``n`` (rows), ``W`` (total
        weight), ``n_bins`` (non-empty bins), ``ci_lower``, ``ci_upper`` (the interval of the
        population's value of the same binned quantity; NaN without ``bootstrap``),
        ``binning`` (the bins asked for: ``"uniform(B, convention)"``, ``"quantile(B)"`` or
        ``"uncertainty_calibration(B)"``), ``ci_method`` (``"bootstrap"``, or None),
        ``confidence``, ``weight_kind``; with ``on_invalid="drop"``, ``n_dropped``.

    See Also
    --------
    reliability : the per-bin table behind it, with intervals.
    debiased_ece : the squared binned error with its finite-sample bias removed.
    smooth_ece : a calibration error with no bins to choose.
    cutoff_error : the worst score interval, with certified bounds.

    Notes
    -----
    With bins :math:`k`, bin weight :math:`W_k`, mean score :math:`\bar p_k` and observed rate
    :math:`\bar y_k` (all weighted),

    .. math:: \mathrm{ECE} = \sum_k \frac{W_k}{W} |\bar y_k - \bar p_k|, \quad
       \mathrm{RMSCE} = \Big(\sum_k \frac{W_k}{W} (\bar y_k - \bar p_k)^2\Big)^{1/2}, \quad
       \mathrm{MCE} = \max_{k: W_k > 0} |\bar y_k - \bar p_k|.

    This is the bin-mean binned calibration error of Guo, Pleiss, Sun & Weinberger (2017), On
    Calibration of Modern Neural Networks (after Naeini, Cooper & Hauskrecht (2015), Obtaining Well
    Calibrated Probabilities Using Bayesian Binning): it estimates the calibration error of the
    binned predictor, not of the scores themselves.

    ``strategy="uncertainty_calibration"`` cuts as uncertainty-calibration (Kumar, Liang & Ma
    (2019), Verified Uncertainty Calibration) does in ``get_equal_bins``: the N sorted scores
    are split into min(B, N) blocks of consecutive ranks as ``np.array_split`` splits them (the
    first N mod B blocks one row longer), each interior edge is the midpoint
    :math:`(s_{(e-1)} + s_{(e)})/2` of the last score of a block and the first of the next, and
    bins are right-closed on the edges (a score equal to an edge joins the lower bin, so tied
    scores are never split; a tie across a block boundary moves rows between blocks). With
    ``norm="l1"`` or ``"l2"`` the value equals its plug-in binned estimator,
    ``lower_bound_scaling_ce(p, y, p=1 or 2, debias=False, num_bins=B,
    binning_scheme=get_equal_bins)`` (``get_ece_em`` for L1), to about 1e-15; its default
    ``get_calibration_error`` debiases instead, and switches to other bins when scores repeat.
    The peer has no weights: whole-number weights count as repeated rows (ranks of the expanded
    sample), and fractional weights are refused.

    The interval covers the population value of the same binned quantity (the same bins; for
    equal-mass bins, the edges this sample gave), e.g.
    :math:`\sum_k |E[w(y - p)1_k]| / E[w]` for the ECE, not the calibration error of the
    scores themselves. It is a bootstrap of the bins' sums whose replicates have the
    covariance of a Poisson bootstrap of the rows (Hanley & MacGibbon (2006); Chamandy et al.
    (2012)), drawn as Gaussian vectors from the six second moments per bin the scan adds
    (Chernozhukov, Chetverikov & Kato (2013)); its ends follow the directional derivative of
    the statistic (Fang & Santos (2019)), so a calibrated model's interval reaches 0 despite
    the plug-in value's upward bias. See :mod:`sqlcal.metrics.intervals` for the method, its
    error and its coverage.

    References
    ----------
    .. [1] C. Guo, G. Pleiss, Y. Sun and K. Q. Weinberger, "On Calibration of Modern Neural
       Networks", ICML (PMLR 70), 2017.
    .. [2] M. P. Naeini, G. F. Cooper and M. Hauskrecht, "Obtaining Well Calibrated Probabilities
       Using Bayesian Binning", AAAI, 2015.
    .. [3] A. Kumar, P. Liang and T. Ma, "Verified Uncertainty Calibration", NeurIPS, 2019.
    .. [4] J. A. Hanley and B. MacGibbon, "Creating non-parametric bootstrap samples using Poisson
       frequencies", Computer Methods and Programs in Biomedicine 83(1), 2006.
    .. [5] N. Chamandy, O. Muralidharan, A. Najmi and S. Naidu, "Estimating Uncertainty for
       Massive Data Streams", Google technical report, 2012.
    .. [6] Z. Fang and A. Santos, "Inference on Directionally Differentiable Functions", Review
       of Economic Studies 86(1), 2019.
    .. [7] Z. Šidák, "Rectangular Confidence Regions for the Means of Multivariate Normal
       Distributions", Journal of the American Statistical Association 62(318), 1967.

    Examples
    --------
    >>> import pandas as pd, sqlcal
    >>> df = pd.DataFrame({"p": [0.1, 0.2, 0.8, 0.9], "y": [0, 1, 1, 1]})
    >>> sqlcal.ece(df, score="p", label="y", bins=2)[["ece", "n", "W", "n_bins", "binning"]]
        ece  n    W  n_bins             binning
    0  0.25  4  4.0       2  uniform(2, sqlcal)
    """
    src = as_source(data, score, label, weight=weight, by=by, where=where, **source_options)
    frame = bins_summary(src, bins=bins, strategy=strategy, convention=convention,
                         logit_range=logit_range,
                         parts=interval_parts(src, weight_kind, _bootstraps(bootstrap, bins)))
    weight_kind = resolve_weight_kind(src, weight_kind)
    concentration(frame, by=src.by, bins=bins)
    values = ece_finish(frame, by=src.by, norm=norm)
    values = _with_interval(values, frame, src.by, "l1" if norm == "l1" else norm, bins,
                            confidence, bootstrap, seed, weight_kind)
    out = result(src, values, [NORMS[norm], "n_bins", "ci_lower", "ci_upper"],
                 {"binning": binning(bins, strategy, convention),
                  "ci_method": (None if not _bootstraps(bootstrap, bins) else
                                "wilson_sidak" if norm == "max" else "bootstrap"),
                  "confidence": confidence, "weight_kind": weight_kind}, present=False)
    out["n_bins"] = out["n_bins"].fillna(0).astype(int)
    return src.present(out)


@metric(
    needs=lambda src, o: bins_needs(src, bins=o["bins"], strategy=o["strategy"],
                                    convention=o["convention"], logit_range=o["logit_range"],
                                    parts=_interval_parts(src, o["weight_kind"])),
    follow_up=lambda src, o: bins_follow_up(src, bins=o["bins"], strategy=o["strategy"],
                                            logit_range=o["logit_range"],
                                            parts=_interval_parts(src, o["weight_kind"])),
    refining=_REFINING, cost=costs_binned)
@checked
def reliability(
    data: Any,
    *,
    score: str | None = None,
    label: str | None = None,
    weight: str | None = None,
    by: str | Sequence[str] = (),
    where: Any = None,
    bins: int = 15,
    strategy: str = "uniform",
    convention: str = "sqlcal",
    ci: str | None = "wilson",
    confidence: float = 0.95,
    weight_kind: str = "auto",
    logit_range: tuple[float, float] | None = None,
    **source_options: Any,
) -> pd.DataFrame:
    r"""The reliability table: per group and non-empty bin, mean score, observed rate and its CI.

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
    bins : int, default 15
        Number of bins B.
    strategy : {"uniform", "quantile", "uncertainty_calibration", "logit"}, default "uniform"
        Equal-width bins, equal-mass bins on exact quantile edges (ties never split),
        uncertainty-calibration's equal-mass bins, or equal width in log-odds (see :func:`ece`).
    convention : {"sqlcal", "sklearn", "netcal", "relplot"}, default "sqlcal"
        Equal-width bin edges, as in :func:`ece`.
    logit_range : (float, float), optional
        The score range of ``strategy="logit"``, as in :func:`ece`.
    ci : {"wilson", "clopper-pearson", None}, default "wilson"
        Binomial confidence interval for each bin's observed rate: Wilson's score interval, or the
        exact (conservative) Clopper–Pearson interval. ``None`` skips it (needed for soft labels).
    confidence : float, default 0.95
        Two-sided confidence level.
    weight_kind : {"auto", "frequency", "sampling"}, default "auto"
        ``"auto"`` reads whole-number weights as frequencies and any others (or any weights of
        a source with ``negative_sampling_rate``) as sampling weights. How weights enter the
        interval: as counts of identical rows (n = W), or as sampling weights, with the
        effective size of the bin's linearized variance (see Notes).
    **source_options
        Further options of :func:`sqlcal.source`, such as ``table=``, ``on_invalid=`` and
        ``soft_labels=``.

    Returns
    -------
    pandas.DataFrame
        One row per group and non-empty bin: the keys, ``bin``, ``bin_lower`` and ``bin_upper``
        (the bin's edges; for equal-mass bins the first bin starts at its lowest score and the
        last ends at its highest), ``n``, ``W``, ``mean_score``, ``observed``, ``gap`` (observed −
        mean score), ``ci_lower``, ``ci_upper``, ``score_min``, ``score_max``, ``binning`` (as in
        :func:`ece`), ``ci_method`` (``ci``: the interval's name, or None), ``confidence`` (the
        intervals' two-sided level), ``weight_kind`` (``"frequency"`` or ``"sampling"``: how the
        weights entered the intervals, ``"auto"`` resolved), ``concentrated`` (True for every bin
        of a group with more than half its weight in one bin, when 3 or more bins were asked for:
        the diagram says little there, a warning says so too; try ``strategy="logit"``); with
        ``on_invalid="drop"``, ``n_dropped`` (the group's rows left out).

    See Also
    --------
    ece : the weighted mean gap of this table, as one number.
    smooth_reliability : a kernel curve with no bins to choose.
    sqlcal.plots.reliability_diagram : draws this table.
    brier_decomposition : the Brier score from the same bins.

    Notes
    -----
    A bin's mean score is :math:`\bar p_k = \sum_{i\in k} w_i p_i / W_k` and its observed rate
    :math:`\bar y_k = \sum_{i\in k} w_i y_i / W_k`; plotted against each other they make the
    reliability diagram of DeGroot & Fienberg (1983), The Comparison and Evaluation of Forecasters.
    The intervals are Wilson's (1927), Probable Inference, the Law of Succession, and Statistical
    Inference, and Clopper & Pearson's (1934), The Use of Confidence or Fiducial Limits Illustrated
    in the Case of the Binomial, at :math:`k = n_\mathrm{eff}\,\bar y_k` successes in
    :math:`n_\mathrm{eff}` trials. Frequency weights count rows: :math:`n_\mathrm{eff} = W_k`.
    Sampling weights (and a downsampled log) take the effective size of the design
    (Korn & Graubard (1998), Confidence intervals for proportions with small expected number
    of positive counts estimated from survey data):
    :math:`n_\mathrm{eff} = \bar y_k(1 - \bar y_k)\,W_k^2 / \sum_{i\in k} v_i (y_i - \bar y_k)^2`,
    the binomial variance over the bin's linearized variance with the variance weight
    :math:`v_i` (:func:`sqlcal.query.reductions.variance_weights`: :math:`w_i^2`, or
    :math:`f_i/\pi_i^2` under a sampling rate); Kish's :math:`W_k^2/\sum v_i` where every
    label of the bin is equal.

    References
    ----------
    .. [1] M. H. DeGroot and S. E. Fienberg, "The Comparison and Evaluation of Forecasters", Journal
       of the Royal Statistical Society, Series D (The Statistician) 32(1-2), 1983.
    .. [2] E. B. Wilson, "Probable Inference, the Law of Succession, and Statistical Inference",
       Journal of the American Statistical Association 22(158), 1927.
    .. [3] C. J. Clopper and E. S. Pearson, "The Use of Confidence or Fiducial Limits Illustrated in
       the Case of the Binomial", Biometrika 26(4), 1934.
    .. [4] E. L. Korn and B. I. Graubard, "Confidence Intervals for Proportions with Small Expected
       Number of Positive Counts Estimated from Survey Data", Survey Methodology 24(2), 1998.

    Examples
    --------
    >>> import pandas as pd, sqlcal
    >>> df = pd.DataFrame({"p": [0.1, 0.2, 0.8, 0.9], "y": [0, 1, 1, 1]})
    >>> out = sqlcal.reliability(df, score="p", label="y", bins=2, ci=None)
    >>> out[["bin", "mean_score", "observed"]]
       bin  mean_score  observed
    0    0        0.15       0.5
    1    1        0.85       1.0
    """
    src = as_source(data, score, label, weight=weight, by=by, where=where, **source_options)
    return src.present(reliability_table(
        src, bins=bins, strategy=strategy, convention=convention, ci=ci, confidence=confidence,
        weight_kind=weight_kind, logit_range=logit_range))


def reliability_table(src: Source, *, bins: int = 15, strategy: str = "uniform",
                      convention: str = "sqlcal", ci: str | None = "wilson",
                      confidence: float = 0.95, weight_kind: str = "auto",
                      logit_range: tuple[float, float] | None = None) -> pd.DataFrame:
    """:func:`reliability` of a source, with its internal key columns (``src.by``)."""
    frame = bins_summary(src, bins=bins, strategy=strategy, convention=convention,
                         parts=_interval_parts(src, weight_kind), logit_range=logit_range)
    flags = concentration(frame, by=src.by, bins=bins)
    weight_kind = resolve_weight_kind(src, weight_kind)
    if ci is not None:
        executor.require_binary_labels(src, "a binomial confidence interval (ci=None skips it)")
    out = reliability_finish(frame, by=src.by, bins=bins, strategy=strategy,
                             convention=convention, ci=ci, confidence=confidence,
                             weight_kind=weight_kind)
    out = (out.merge(flags, on=list(src.by), how="left") if src.by
           else out.assign(concentrated=bool(flags["concentrated"].iloc[0])))
    if src.dropped is not None:  # on_invalid="drop": each group's rows left out, on its bins
        out = (out.merge(src.dropped[[*src.by, "n_dropped"]], on=list(src.by), how="left")
               if src.by else out.assign(n_dropped=int(src.dropped["n_dropped"].sum())))
    return out.assign(**src.facts)  # a stored window's facts, as every result's


def reliability_finish(frame: pd.DataFrame, *, by=(), bins: int = 15, strategy: str = "uniform",
                       convention: str = "sqlcal", ci: str | None = "wilson",
                       confidence: float = 0.95, weight_kind: str = "frequency"
                       ) -> pd.DataFrame:
    """The reliability table from the bins summary (per group and bin ``n``, ``W``, ``swy``,
    ``swp``, ``p_min``, ``p_max``, for sampling weights ``sw2`` = Σv and ``sw2y`` = Σvy of the
    variance weight v, and the edges ``e1…`` of equal-mass bins); ``weight_kind`` resolved.
    See :func:`reliability`."""
    frame = frame.sort_values([*by, "bin"], ignore_index=True)
    lower, upper = _bin_edges(frame, bins, strategy, convention)
    out = frame[[*by, "bin"]].copy()
    out["bin_lower"], out["bin_upper"] = lower, upper
    out["n"], out["W"] = frame["n"], frame["W"]
    with np.errstate(divide="ignore", invalid="ignore"):
        out["mean_score"] = np.where(frame["W"] > 0, frame["swp"] / frame["W"], np.nan)
        out["observed"] = np.where(frame["W"] > 0, frame["swy"] / frame["W"], np.nan)
    out["gap"] = out["observed"] - out["mean_score"]
    n_eff = frame["W"].to_numpy(float)
    if weight_kind != "frequency":  # unweighted: v = 1, n_eff = W either way
        V = frame["sw2"].to_numpy(float)
        # summaries without Σvy (stored ones) allow Kish's W²/Σv only
        Vy = frame["sw2y"].to_numpy(float) if "sw2y" in frame else np.full(len(V), np.nan)
        n_eff = _effective_size(n_eff, out["observed"].to_numpy(float), V, Vy)
    k = n_eff * out["observed"].to_numpy(float)
    if ci is None:
        out["ci_lower"] = out["ci_upper"] = np.nan
    else:
        method = wilson_interval if ci == "wilson" else clopper_pearson_interval
        out["ci_lower"], out["ci_upper"] = method(k, n_eff, confidence)
    out["score_min"], out["score_max"] = frame["p_min"], frame["p_max"]
    out["binning"] = binning(bins, strategy, convention)
    out["ci_method"], out["confidence"], out["weight_kind"] = ci, confidence, weight_kind
    return out


@metric(
    needs=lambda src, o: bins_needs(src, bins=o["bins"], strategy=o["strategy"],
                                    convention=o["convention"], logit_range=o["logit_range"],
                                    parts={"moments", *_bootstrap_parts(src, o)}),
    follow_up=lambda src, o: bins_follow_up(src, bins=o["bins"], strategy=o["strategy"],
                                            logit_range=o["logit_range"],
                                            parts={"moments", *_bootstrap_parts(src, o)}),
    refining=_REFINING,
    report={"brier_decomposition": Report({
        "reliability": "brier_reliability", "reliability_lower": "brier_reliability_lower",
        "reliability_upper": "brier_reliability_upper", "resolution": "brier_resolution",
        "resolution_lower": "brier_resolution_lower",
        "resolution_upper": "brier_resolution_upper", "uncertainty": "brier_uncertainty",
        "uncertainty_lower": "brier_uncertainty_lower",
        "uncertainty_upper": "brier_uncertainty_upper"})},
    report_bins=True, trust={"binning": None, "ci_method": None, "confidence": "confidence",
                             "weight_kind": "weight_kind"}, cost=costs_binned)
@checked
def brier_decomposition(
    data: Any,
    *,
    score: str | None = None,
    label: str | None = None,
    weight: str | None = None,
    by: str | Sequence[str] = (),
    where: Any = None,
    bins: int = 15,
    strategy: str = "uniform",
    convention: str = "sqlcal",
    logit_range: tuple[float, float] | None = None,
    confidence: float = 0.95,
    bootstrap: int = REPLICATES,
    seed: int = SEED,
    weight_kind: str = "auto",
    **source_options: Any,
) -> pd.DataFrame:
    r"""Brier score split into reliability, resolution and uncertainty, exactly, on bins.

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
    bins : int, default 15
        Number of bins B.
    strategy : {"uniform", "quantile", "uncertainty_calibration", "logit"}, default "uniform"
        Equal-width bins, equal-mass bins on exact quantile edges (ties never split),
        uncertainty-calibration's equal-mass bins, or equal width in log-odds (see :func:`ece`).
    convention : {"sqlcal", "sklearn", "netcal", "relplot"}, default "sqlcal"
        Equal-width bin edges, as in :func:`ece`.
    logit_range : (float, float), optional
        The score range of ``strategy="logit"``, as in :func:`ece`.
    confidence, bootstrap, seed, weight_kind
        The intervals of the reliability, resolution and uncertainty, as in :func:`ece`.
    **source_options
        Further options of :func:`sqlcal.source`, such as ``table=``, ``on_invalid=`` and
        ``soft_labels=``.

    Returns
    -------
    pandas.DataFrame
        One row per group: the keys, ``brier``, ``n``, ``W``, ``reliability``, ``resolution``,
        ``uncertainty``, ``within_bin_variance``, ``within_bin_covariance``, ``label_variance``,
        ``reliability_lower``, ``reliability_upper``, ``resolution_lower``,
        ``resolution_upper``, ``uncertainty_lower``, ``uncertainty_upper`` (intervals of the
        population's values on the same bins: the reliability's as the RMSCE's, squared, the
        other two from the bootstrap's linearization; see :mod:`sqlcal.metrics.intervals`),
        ``binning`` (as in :func:`ece`), ``ci_method``, ``confidence``, ``weight_kind``; with
        ``on_invalid="drop"``, ``n_dropped``.

    See Also
    --------
    brier : the Brier score alone.
    decompose : the CORP decomposition, with no bins to choose.
    reliability : the per-bin table the terms are summed from.

    Notes
    -----
    Murphy's decomposition holds only when scores are constant within a bin. Stephenson, Coelho and
    Jolliffe (2008, Weather and Forecasting 23:752) add the two within-bin terms that make it exact:

    .. math:: \mathrm{BS} = \mathrm{REL} - \mathrm{RES} + \mathrm{UNC} + \mathrm{WBV} - \mathrm{WBC}
       - \mathrm{LV},

    with :math:`\mathrm{REL} = \sum_k W_k(\bar p_k - \bar y_k)^2/W`,
    :math:`\mathrm{RES} = \sum_k W_k(\bar y_k - \bar y)^2/W`,
    :math:`\mathrm{UNC} = \bar y(1-\bar y)`,
    :math:`\mathrm{WBV} = \sum_k\sum_{i\in k} w_i(p_i - \bar p_k)^2/W`,
    :math:`\mathrm{WBC} = 2\sum_k\sum_{i\in k} w_i(y_i-\bar y_k)(p_i-\bar p_k)/W`. The last term
    :math:`\mathrm{LV} = \sum_i w_i y_i(1-y_i)/W` is 0 for labels in {0, 1}; it keeps the identity
    exact for soft labels. Murphy (1973), A New Vector Partition of the Probability Score.

    References
    ----------
    .. [1] A. H. Murphy, "A New Vector Partition of the Probability Score", Journal of Applied
       Meteorology 12(4), 1973.
    .. [2] D. B. Stephenson, C. A. S. Coelho and I. T. Jolliffe, "Two Extra Components in the Brier
       Score Decomposition", Weather and Forecasting 23(4), 2008.

    Examples
    --------
    >>> import pandas as pd, sqlcal
    >>> df = pd.DataFrame({"p": [0.1, 0.2, 0.8, 0.9], "y": [0, 1, 1, 1]})
    >>> out = sqlcal.brier_decomposition(df, score="p", label="y", bins=2)
    >>> out[["brier", "n", "W", "reliability", "resolution", "uncertainty",
    ...      "within_bin_variance", "within_bin_covariance", "label_variance"]].round(6).iloc[0]
    brier                    0.1750
    n                        4.0000
    W                        4.0000
    reliability              0.0725
    resolution               0.0625
    uncertainty              0.1875
    within_bin_variance      0.0025
    within_bin_covariance    0.0250
    label_variance           0.0000
    Name: 0, dtype: float64
    >>> out["binning"].iloc[0]
    'uniform(2, sqlcal)'
    """
    src = as_source(data, score, label, weight=weight, by=by, where=where, **source_options)
    frame = bins_summary(src, bins=bins, strategy=strategy, convention=convention,
                         parts={"moments", *interval_parts(src, weight_kind,
                                                           _bootstraps(bootstrap, bins))},
                         logit_range=logit_range)
    weight_kind = resolve_weight_kind(src, weight_kind)
    concentration(frame, by=src.by, bins=bins)
    values = brier_finish(frame, by=src.by)
    bounds = []
    for name in ("reliability", "resolution", "uncertainty"):
        part = _with_interval(values[list(src.by)].copy(), frame, src.by, name, bins,
                              confidence, bootstrap, seed, weight_kind)
        values[f"{name}_lower"] = part["ci_lower"].to_numpy()
        values[f"{name}_upper"] = part["ci_upper"].to_numpy()
        bounds += [f"{name}_lower", f"{name}_upper"]
    return result(src, values, ["brier", *_DECOMPOSITION, *bounds],
                  {"binning": binning(bins, strategy, convention),
                   "ci_method": "bootstrap" if _bootstraps(bootstrap, bins) else None,
                   "confidence": confidence, "weight_kind": weight_kind})


_DECOMPOSITION = (
    "reliability",
    "resolution",
    "uncertainty",
    "within_bin_variance",
    "within_bin_covariance",
    "label_variance",
)


@metric(
    needs=lambda src, o: bins_needs(src, bins=o["bins"], strategy=o["strategy"],
                                    convention="sqlcal", logit_range=o["logit_range"],
                                    parts=variance_parts(src, o["weight_kind"])),
    follow_up=lambda src, o: bins_follow_up(src, bins=o["bins"], strategy=o["strategy"],
                                            logit_range=o["logit_range"],
                                            parts=variance_parts(src, o["weight_kind"])),
    refining=_REFINING, one_shot={"strategy": "uniform"},
    report={"hosmer_lemeshow": Report({"hl_statistic": "hl_statistic", "dof": "hl_dof",
                                       "p_value": "hl_p"})},
    trust={"binning": None, "dof_rule": None, "weight_kind": "weight_kind"}, cost=costs_hl,
    options={"bins": Option("int", "number of Hosmer-Lemeshow risk groups", low=1),
             "strategy": Option("choice", "how risk groups are cut: equal mass, equal width, or "
                                "equal width in log-odds",
                                choices=("quantile", "uniform", "logit"))})
@checked
def hosmer_lemeshow(
    data: Any,
    *,
    score: str | None = None,
    label: str | None = None,
    weight: str | None = None,
    by: str | Sequence[str] = (),
    where: Any = None,
    bins: int = 10,
    dof: str = "out_of_sample",
    strategy: str = "quantile",
    weight_kind: str = "auto",
    logit_range: tuple[float, float] | None = None,
    **source_options: Any,
) -> pd.DataFrame:
    r"""The Hosmer–Lemeshow goodness-of-fit test on exact risk deciles.

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
    bins : int, default 10
        Number of risk groups G, the test's bins (equal-mass bins on exact quantile edges;
        ties never split, so fewer can be non-empty).
    dof : {"out_of_sample", "in_sample"}, default "out_of_sample"
        Degrees of freedom of the chi-squared reference: G for predictions evaluated on data the
        model was not fitted on (the usual case for logged predictions), G − 2 for the classical
        in-sample test of a fitted logistic model (Hosmer and Lemeshow 1980). G counts non-empty
        groups.
    strategy : {"quantile", "uniform", "logit"}, default "quantile"
        Risk groups by quantiles (deciles of risk), equal-width score bins, or bins of equal
        width in log-odds (see :func:`ece`).
    logit_range : (float, float), optional
        The score range of ``strategy="logit"``, as in :func:`ece`.
    weight_kind : {"auto", "frequency", "sampling"}, default "auto"
        ``"auto"`` reads whole-number weights as frequencies and any others (or any weights of
        a source with ``negative_sampling_rate``) as sampling weights.
        Group variance :math:`W_g \bar\pi_g(1-\bar\pi_g)` (frequency weights) or
        :math:`\sum_{i\in g} v_{0,i}\, \bar\pi_g(1-\bar\pi_g) + \sum_{i\in g} (v_i - v_{0,i})
        (y_i - p_i)^2` (sampling weights: :math:`v = v_0 = w^2`; under a sampling rate the
        variance weight and its label-free part, :func:`sqlcal.query.reductions.variance_weights`).
    **source_options
        Further options of :func:`sqlcal.source`, such as ``table=``, ``on_invalid=`` and
        ``soft_labels=``.

    Returns
    -------
    pandas.DataFrame
        One row per group: the keys, ``hl_statistic``, ``n``, ``W``, ``dof``, ``p_value``,
        ``n_bins`` (non-empty risk groups), ``binning`` (the risk groups asked for, as in
        :func:`ece`), ``dof_rule`` (the ``dof`` option), ``weight_kind`` (``"frequency"`` or
        ``"sampling"``: the group variance used, ``"auto"`` resolved); with
        ``on_invalid="drop"``, ``n_dropped``.

    See Also
    --------
    spiegelhalter : a test with no grouping to choose.
    reliability : the observed and expected rates per bin.
    kuiper : a test on cumulative differences, with no bins.

    Notes
    -----
    :math:`C = \sum_g (O_g - E_g)^2 / (W_g \bar\pi_g (1 - \bar\pi_g))` with :math:`O_g = \sum w y`,
    :math:`E_g = \sum w p`, :math:`\bar\pi_g = E_g / W_g`, compared with
    :math:`\chi^2_\mathrm{dof}`. A group whose scores are all 0 or all 1 has no variance: it adds 0
    when :math:`O_g = E_g` and makes C infinite (p-value 0) otherwise. The test is from Hosmer &
    Lemeshow (1980), A goodness-of-fit test for the multiple logistic regression model. On a
    downsampled log the group variance is the null model's for the population plus the sampling's
    own,
    :math:`\sum_{y=0} w(1/r - 1)p^2` (Särndal, Swensson & Wretman (1992), Model Assisted
    Survey Sampling, ch. 5; Archer & Lemeshow (2006), Goodness-of-fit test for a logistic
    regression model fitted using survey sample data, for the design-based test). That part is
    estimated from each risk group's kept negatives: with a few per group the test rejects too
    often (measured on calibrated models: 13% at about 6 kept negatives a group, 5% at 30).

    References
    ----------
    .. [1] D. W. Hosmer and S. Lemeshow, "A Goodness-of-Fit Test for the Multiple Logistic
       Regression Model", Communications in Statistics - Theory and Methods 9(10), 1980.
    .. [2] K. J. Archer and S. Lemeshow, "Goodness-of-Fit Test for a Logistic Regression Model
       Fitted Using Survey Sample Data", The Stata Journal 6(1), 2006.
    .. [3] C.-E. Särndal, B. Swensson and J. Wretman, "Model Assisted Survey Sampling", Springer,
       1992.

    Examples
    --------
    >>> import pandas as pd, sqlcal
    >>> df = pd.DataFrame({"p": [0.1, 0.2, 0.3, 0.4, 0.6, 0.7, 0.8, 0.9],
    ...                    "y": [0, 0, 1, 0, 1, 0, 1, 1]})
    >>> out = sqlcal.hosmer_lemeshow(df, score="p", label="y", bins=4)
    >>> out[["hl_statistic", "dof", "p_value", "n_bins", "weight_kind"]].round(6)
       hl_statistic  dof   p_value  n_bins weight_kind
    0      1.101487    4  0.894036       4   frequency
    """
    src = as_source(data, score, label, weight=weight, by=by, where=where, **source_options)
    frame = bins_summary(src, bins=bins, strategy=strategy, convention="sqlcal",
                         parts=variance_parts(src, weight_kind), logit_range=logit_range)
    concentration(frame, by=src.by, bins=bins)
    weight_kind = resolve_weight_kind(src, weight_kind)
    executor.require_binary_labels(src, "the Hosmer-Lemeshow test")
    return result(src, hosmer_lemeshow_finish(frame, by=src.by, dof=dof, weight_kind=weight_kind),
                  ["hl_statistic", "dof", "p_value", "n_bins"],
                  {"binning": binning(bins, strategy, "sqlcal"), "dof_rule": dof,
                   "weight_kind": weight_kind})


# -- finishes: plain functions of the bins summary -------------------------------------------


@checked
def debiased_ece(
    data: Any,
    *,
    score: str | None = None,
    label: str | None = None,
    weight: str | None = None,
    by: str | Sequence[str] = (),
    where: Any = None,
    bins: int = 15,
    strategy: str = "uniform",
    convention: str = "sqlcal",
    confidence: float = 0.95,
    bootstrap: int = REPLICATES,
    seed: int = SEED,
    weight_kind: str = "auto",
    **source_options: Any,
) -> pd.DataFrame:
    r"""The debiased squared binned calibration error (Kumar, Liang & Ma 2019, Verified
    Uncertainty Calibration), and its square root.

    Parameters
    ----------
    data, score, label, weight, by, where
        As for :func:`sqlcal.ece`; the labels are 0/1.
    bins : int, default 15
        Number of bins B.
    strategy : {"uniform", "quantile", "uncertainty_calibration", "logit"}, default "uniform"
        How bins are cut, as for :func:`sqlcal.ece` (``"uncertainty_calibration"`` cuts as
        that library does).
    convention : str, default "sqlcal"
        Equal-width bin edges, as for :func:`sqlcal.ece`.
    confidence, bootstrap, seed, weight_kind
        The interval of the population's squared binned error, as for :func:`sqlcal.ece`.
    **source_options
        Further options of :func:`sqlcal.source`, such as ``table=`` and ``on_invalid=``.

    Returns
    -------
    pandas.DataFrame
        One row per group: the keys, ``ece_sq_debiased`` (may be negative: it is unbiased),
        ``n``, ``W``, ``rmsce_debiased`` = :math:`\sqrt{\max(0, \cdot)}`, ``n_bins``,
        ``ci_lower``, ``ci_upper`` (of the population's :math:`\sum_b \pi_b \mu_b^2`, the
        quantity the estimate is unbiased for: the Brier reliability's bootstrap interval,
        :mod:`sqlcal.metrics.intervals`), ``rmsce_lower``, ``rmsce_upper`` (their square
        roots), ``ci_method``, ``confidence``, ``weight_kind``.

    See Also
    --------
    ece : the plug-in binned error, biased upward on small bins.
    reliability : the per-bin table it is computed from.
    smooth_ece : a calibration error with no bins to choose.

    Notes
    -----
    With :math:`W_b`, :math:`\bar p_b` and :math:`\bar y_b` the weight, mean score and label
    rate of bin b and :math:`W = \sum_b W_b`,

    .. math:: \widehat{CE}^2 = \sum_b \frac{W_b}{W} \Big[(\bar y_b - \bar p_b)^2
              - \frac{\bar y_b (1 - \bar y_b)}{W_b - 1}\Big],

    a bin with :math:`W_b < 2` adding 0 (uncertainty-calibration's ``unbiased_square_ce``;
    weights count as repeated examples). One scan: the reliability table's bins.

    References
    ----------
    .. [1] A. Kumar, P. Liang and T. Ma, "Verified Uncertainty Calibration", NeurIPS, 2019.

    Examples
    --------
    >>> import pandas as pd
    >>> frame = pd.DataFrame({"p": [0.1, 0.2, 0.8, 0.9], "y": [0, 1, 1, 1]})
    >>> debiased_ece(frame, score="p", label="y", bins=2)[["ece_sq_debiased", "n"]].round(6)
       ece_sq_debiased  n
    0          -0.0525  4
    """
    src = as_source(data, score, label, weight=weight, by=by, where=where, **source_options)
    on = _bootstraps(bootstrap, bins)
    # the bins with the interval's moments first: the reliability table reads them from the
    # source's cache (one scan)
    frame = bins_summary(src, bins=bins, strategy=strategy, convention=convention,
                         parts=interval_parts(src, weight_kind, on))
    table = reliability_table(src, bins=bins, strategy=strategy, convention=convention, ci=None)
    out = debiased_finish(table, by=src.by)
    weight_kind = resolve_weight_kind(src, weight_kind)
    bounds = _with_interval(out[list(src.by)].copy(), frame, src.by, "reliability", bins,
                            confidence, bootstrap, seed, weight_kind)
    out["ci_lower"], out["ci_upper"] = bounds["ci_lower"].to_numpy(), bounds["ci_upper"].to_numpy()
    out["rmsce_lower"], out["rmsce_upper"] = np.sqrt(out["ci_lower"]), np.sqrt(out["ci_upper"])
    out["ci_method"] = "bootstrap" if on else None
    out["confidence"], out["weight_kind"] = confidence, weight_kind
    return src.present(out).assign(**src.facts)


def debiased_finish(table: pd.DataFrame, *, by: Sequence[str] = ()) -> pd.DataFrame:
    """:func:`debiased_ece` from a reliability table (per group and bin ``n``, ``W``,
    ``mean_score``, ``observed``)."""

    def finish(part: pd.DataFrame) -> dict:
        dropped = part["n_dropped"] if "n_dropped" in part else None
        part = part[part.W > 0]
        W = part.W.sum()
        y, p, w = part.observed.to_numpy(float), part.mean_score.to_numpy(float), part.W
        bias = np.where(w >= 2, y * (1 - y) / np.maximum(w - 1, 1), 0.0)
        terms = np.where(w >= 2, (y - p) ** 2 - bias, 0.0)
        value = float((w * terms).sum() / W) if W > 0 else np.nan
        # keys, the value, n, W: the order of every result table (sqlcal.metrics.result)
        return {"ece_sq_debiased": value, "n": int(part.n.sum()), "W": float(W),
                "rmsce_debiased": float(np.sqrt(max(value, 0.0))),
                "n_bins": int((part.n > 0).sum()),
                # on_invalid="drop": the group's dropped rows (on each of its bins' rows)
                **({"n_dropped": int(dropped.max())} if "n_dropped" in table else {})}

    by = list(by)
    if not by:
        return pd.DataFrame([finish(table)])
    rows = [{**dict(zip(by, key if isinstance(key, tuple) else (key,))), **finish(part)}
            for key, part in table.groupby(by, sort=True, dropna=False)]
    return pd.DataFrame(rows)



def ece_finish(bins: pd.DataFrame, *, by=(), norm: str = "l1") -> pd.DataFrame:
    """Per group: the binned calibration error of ``norm`` (column ``ece``, ``rmsce`` or
    ``mce``), ``n``, ``W`` and ``n_bins``, from the bins summary (per group and bin ``n``,
    ``W``, ``swy`` = Σwy, ``swp`` = Σwp). See :func:`ece`. Every group at once (numpy sums by
    group number, no loop over the groups).

    Examples
    --------
    >>> bins = pd.DataFrame({"bin": [0, 1], "n": [2, 2], "W": [2.0, 2.0], "swy": [1.0, 2.0],
    ...                      "swp": [0.3, 1.7]})
    >>> ece_finish(bins)
       n    W   ece  n_bins
    0  4  4.0  0.25       2
    """
    name = NORMS[norm]
    g = Grouped(bins, by)
    W = bins["W"].to_numpy(float)
    live = W > 0
    Wg = g.sum(W, live)
    diff = np.abs(bins["swy"].to_numpy(float) - bins["swp"].to_numpy(float))
    with np.errstate(divide="ignore", invalid="ignore"):
        gap = np.where(live, diff / np.where(live, W, 1.0), 0.0)
        if norm == "l1":
            value = g.sum(diff, live) / Wg
        elif norm == "l2":
            value = np.sqrt(g.sum(W * gap**2, live) / Wg)
        else:
            value = g.max(gap, live)
    value = np.where(Wg > 0, value, np.nan)
    return g.table(g.sum(bins["n"]), g.sum(W), **{
        name: value, "n_bins": g.count(live & (bins["n"].to_numpy() > 0))})


def brier_finish(bins: pd.DataFrame, *, by=()) -> pd.DataFrame:
    """Per group: the Brier score and its exact decomposition from the bins summary with
    moments (``swpp`` = Σwp², ``swyp`` = Σwyp, ``swyy`` = Σwy²). See
    :func:`brier_decomposition`. Every group at once."""
    g = Grouped(bins, by)
    Wk = bins["W"].to_numpy(float)
    live = Wk > 0
    col = {c: bins[c].to_numpy(float) for c in ("swy", "swp", "swpp", "swyp", "swyy")}
    W = g.sum(Wk, live)
    with np.errstate(divide="ignore", invalid="ignore"):
        safe = np.where(live, Wk, 1.0)
        ybar, pbar = col["swy"] / safe, col["swp"] / safe
        y_all = g.sum(col["swy"], live) / W
        values = {
            "brier": g.sum(col["swyy"] - 2 * col["swyp"] + col["swpp"], live) / W,
            "reliability": g.sum(Wk * (pbar - ybar) ** 2, live) / W,
            "resolution": g.sum(Wk * (ybar - y_all[g.codes]) ** 2, live) / W,
            "uncertainty": y_all * (1 - y_all),
            "within_bin_variance": g.sum(col["swpp"] - col["swp"] * pbar, live) / W,
            "within_bin_covariance": 2 * g.sum(col["swyp"] - col["swy"] * pbar, live) / W,
            "label_variance": g.sum(col["swy"] - col["swyy"], live) / W,
        }
    return g.table(g.sum(bins["n"]), g.sum(Wk),
                   **{k: np.where(W > 0, v, np.nan) for k, v in values.items()})


def hosmer_lemeshow_finish(bins: pd.DataFrame, *, by=(), dof: str = "out_of_sample",
                           weight_kind: str = "frequency") -> pd.DataFrame:
    """Per group: the Hosmer-Lemeshow statistic, ``dof``, ``p_value`` and ``n_bins`` from the
    bins summary of the risk groups (for sampling weights ``sw2`` = Σv, and under a sampling
    rate ``sw2_0`` = Σv₀ and ``sw2_design`` = Σ(v − v₀)(y − p)²); ``weight_kind`` resolved.
    See :func:`hosmer_lemeshow`. Every group at once."""
    g = Grouped(bins, by)
    Wg = bins["W"].to_numpy(float)
    live = Wg > 0
    O, E = bins["swy"].to_numpy(float), bins["swp"].to_numpy(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        pi = E / np.where(live, Wg, 1.0)
        if weight_kind == "frequency":
            var = Wg * pi * (1 - pi)
        else:  # the variance weight's label-free part, plus a design's own
            size = bins["sw2_0" if "sw2_0" in bins else "sw2"].to_numpy(float)
            design = bins["sw2_design"].to_numpy(float) if "sw2_design" in bins else 0.0
            var = size * pi * (1 - pi) + design
        diff2 = (O - E) ** 2
        terms = np.where(var > 0, diff2 / np.where(var > 0, var, 1.0),
                         np.where(diff2 > 0, np.inf, 0.0))
    n_bins = g.count(live)
    stat = np.where(n_bins > 0, g.sum(terms, live), np.nan)
    df = n_bins - (2 if dof == "in_sample" else 0)
    ok = (df > 0) & (n_bins > 0)
    p = np.full(g.size, np.nan)
    p[ok] = stats.chi2.sf(stat[ok], df[ok])
    return g.table(g.sum(bins["n"]), g.sum(Wg), hl_statistic=stat, dof=df, p_value=p,
                   n_bins=n_bins)


# -- the shared bins summary, and intervals ---------------------------------------------------


def _bootstrap_parts(src: Source, o: dict) -> tuple:
    """The bins parts of the ECE family's interval under the options ``o``."""
    return interval_parts(src, o.get("weight_kind", "auto"), _bootstraps(o.get("bootstrap"),
                                                                         o.get("bins")))


def _bootstraps(bootstrap, bins) -> bool:
    """Whether the ECE family draws its interval: replicates asked for, at most
    :data:`sqlcal.metrics.intervals.MAX_BINS` bins."""
    return (bootstrap or 0) > 0 and (bins or 15) <= MAX_BINS


def _with_interval(values: pd.DataFrame, frame: pd.DataFrame, by, norm: str, bins: int,
                   confidence: float, bootstrap: int, seed: int, weight_kind: str
                   ) -> pd.DataFrame:
    """``values`` (one row per group) with the bootstrap's ``ci_lower`` and ``ci_upper``."""
    if not _bootstraps(bootstrap, bins):
        return values.assign(ci_lower=np.nan, ci_upper=np.nan)
    if norm == "max":
        interval = mce_band(frame, by=by, confidence=confidence, weight_kind=weight_kind)
    else:
        interval = bins_interval(frame, by=by, statistic=ece_statistic(norm),
                                 confidence=confidence, replicates=bootstrap, seed=seed,
                                 weight_kind=weight_kind, n_bins=bins)
    if not by:
        return values.assign(ci_lower=interval["ci_lower"].to_numpy(),
                             ci_upper=interval["ci_upper"].to_numpy())
    # the interval's keys come back from numpy: an all-NULL string key as float NaN
    interval = interval.astype({k: values[k].dtype for k in by})
    return values.merge(interval, on=list(by), how="left")


def mce_band(frame: pd.DataFrame, *, by, confidence: float, weight_kind: str) -> pd.DataFrame:
    r"""Per group, an interval of the maximum calibration error: ``ci_lower``, ``ci_upper``.

    Each non-empty bin k gets Wilson's interval :math:`[l_k, u_k]` of its observed rate at the
    Šidák level :math:`(1 - lpha)^{1/K}` (K bins; Šidák (1967), Rectangular confidence regions
    for the means of multivariate normal distributions), on the bin's effective size as in
    :func:`reliability` (Korn & Graubard (1998) for sampling weights). With
    :math:`ar p_k` the bin's mean score, the gaps lie in
    :math:`[l_k - ar p_k, u_k - ar p_k]` together with probability at least 1 − α, and then

    .. math:: \max_k d(0, [l_k - ar p_k, u_k - ar p_k]) \le \mathrm{MCE}
       \le \max_k \max(|l_k - ar p_k|, |u_k - ar p_k|).

    The mean score is taken as fixed (its spread inside a bin is far below the label's).
    """
    by = list(by)
    live = frame[frame["W"].to_numpy(float) > 0].sort_values([*by, "bin"], ignore_index=True)
    W = live["W"].to_numpy(float)
    ybar = live["swy"].to_numpy(float) / W
    pbar = live["swp"].to_numpy(float) / W
    n_eff = W
    if weight_kind != "frequency" and "sw2" in live:
        Vy = live["sw2y"].to_numpy(float) if "sw2y" in live else np.full(len(W), np.nan)
        n_eff = _effective_size(W, ybar, live["sw2"].to_numpy(float), Vy)
    counts = (live.groupby(by, sort=False, dropna=False)["bin"].transform("size").to_numpy()
              if by else np.full(len(live), len(live)))
    out = []
    level = confidence ** (1 / np.maximum(counts, 1))
    lo, hi = np.empty(len(live)), np.empty(len(live))
    for lvl in np.unique(level):
        at = level == lvl
        lo[at], hi[at] = wilson_interval(n_eff[at] * ybar[at], n_eff[at], float(lvl))
    a, b = lo - pbar, hi - pbar
    least = np.where((a <= 0) & (b >= 0), 0.0, np.minimum(np.abs(a), np.abs(b)))
    most = np.maximum(np.abs(a), np.abs(b))
    live = live.assign(ci_lower=least, ci_upper=most)
    if not by:
        return pd.DataFrame({"ci_lower": [live["ci_lower"].max() if len(live) else np.nan],
                             "ci_upper": [live["ci_upper"].max() if len(live) else np.nan]})
    out = live.groupby(by, sort=True, dropna=False)[["ci_lower", "ci_upper"]].max()
    return out.reset_index()


def _interval_parts(src: Source, weight_kind: str) -> tuple:
    """The parts the reliability intervals read: for sampling weights Σv and Σvy per bin."""
    sampling = variance_parts(src, weight_kind)
    return (*sampling, *(("sw2y",) if sampling else ()))


def _effective_size(W: np.ndarray, ybar: np.ndarray, V: np.ndarray, Vy: np.ndarray
                    ) -> np.ndarray:
    """A bin's effective number of trials under the variance weight v: ȳ(1 − ȳ)W²/Σv(y − ȳ)²
    (binary labels: Σv(y − ȳ)² = Σvy(1 − 2ȳ) + ȳ²Σv), or W²/Σv where every label is equal
    (or Σvy is unknown: NaN)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        spread = Vy * (1 - 2 * ybar) + ybar * ybar * V
        kish = np.where(V > 0, W * W / np.where(V > 0, V, 1.0), np.nan)
        mixed = (ybar > 0) & (ybar < 1) & (spread > 0)
        return np.where(mixed, ybar * (1 - ybar) * W * W / np.where(mixed, spread, 1.0), kish)


def bins_summary(
    src: Source, *, bins: int, strategy: str, convention: str, parts=(), logit_range=None
) -> pd.DataFrame:
    """The bins summary for ``src``: one row per group and non-empty bin with n, W, Σwy, Σwp,
    min and max score, and the optional ``parts`` of :func:`sqlcal.query.reductions._sums` ("sw2",
    "moments"). Cached on the source, so a report scans once per binning."""
    if not isinstance(bins, (int, np.integer)) or bins < 1:
        raise ValueError(f"bins must be a positive integer, not {bins!r}")
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, not {strategy!r}")
    if convention not in grids.CONVENTIONS:
        raise ValueError(f"convention must be one of {grids.CONVENTIONS}, not {convention!r}")
    logit_range = checked_logit_range(logit_range)
    parts = summary_parts(src, "sums", *parts)
    if strategy == "uniform":
        frame = planner.fetch(src, declared.uniform(bins, convention, *parts))
    elif strategy == "logit":
        frame = logit_walk(src, bins, parts, logit_range, lambda s: planner.fetch(src, s))
    else:
        frame = equal_mass_bins(src, bins, parts, strategy)
    return frame.copy()


def logit_walk(src: Source, bins: int, parts: frozenset, logit_range, read) -> pd.DataFrame:
    """The reads behind log-odds bins: the totals (for the observed score range, over every
    group) unless ``logit_range`` is given, then the bins; returned with the interior edges
    ``e1 … e{B−1}`` (the columns equal-mass bins carry), as the engine compared them."""
    if logit_range is None:
        totals = read(declared.totals())
        lo = float(np.nanmin(totals["p_min"].to_numpy(float)))
        hi = float(np.nanmax(totals["p_max"].to_numpy(float)))
    else:
        lo, hi = logit_range
    lo, hi = grids.logit_range(lo, hi)
    frame = read(declared.logit_bins(bins, lo, hi, *parts))
    edges = grids.logit_edges(bins, lo, hi)[1:-1]
    columns = pd.DataFrame(np.tile(edges, (len(frame), 1)), index=frame.index,
                           columns=[f"e{k}" for k in range(1, bins)])
    return pd.concat([frame.drop(columns=list(columns.columns), errors="ignore"), columns],
                     axis=1)


def checked_logit_range(value):
    """``logit_range`` as two floats 0 < lo < hi < 1, or None; an OptionError otherwise."""
    if value is None:
        return None
    from sqlcal.options import OptionError

    try:
        lo, hi = (float(v) for v in value)
    except (TypeError, ValueError):
        lo = hi = np.nan
    if not 0 < lo < hi < 1:
        raise OptionError(f"logit_range must be two scores (lo, hi) with 0 < lo < hi < 1, "
                          f"not {value!r}")
    return lo, hi


def concentration(frame: pd.DataFrame, *, by=(), bins: int) -> pd.DataFrame:
    """Per group, ``concentrated``: whether one bin holds more than half the group's weight
    (when 3 or more bins were asked for), from a bins summary; warns naming the groups."""
    by = list(by)
    W = frame.groupby(by, dropna=False, sort=True)["W"] if by else frame["W"]
    share = (W.max() / W.sum()) if by else pd.Series([frame["W"].max() / frame["W"].sum()])
    flags = (share > CONCENTRATED) & (bins >= 3)
    out = (share.rename("concentrated").reset_index() if by
           else pd.DataFrame({"concentrated": flags}))
    if by:
        out["concentrated"] = flags.to_numpy()
    if flags.any():
        shown = ", ".join(f"{s:.1%}" for s in share[flags].to_numpy()[:5])
        warnings.warn(f"{int(flags.sum())} group(s) have more than half their weight in one of "
                      f"{bins} bins ({shown}): the binned numbers say little there; for low "
                      "base rates try strategy='logit'", stacklevel=4)
    return out


def binning(bins: int, strategy: str, convention: str) -> str:
    """The bins a binned result was computed on, as its ``binning`` column states them:
    ``"uniform(B, convention)"`` (equal-width, with the edge convention), ``"quantile(B)"`` or
    ``"uncertainty_calibration(B)"`` (equal mass)."""
    return f"uniform({bins}, {convention})" if strategy == "uniform" else f"{strategy}({bins})"


def _bin_edges(frame: pd.DataFrame, bins: int, strategy: str, convention: str):
    b = frame["bin"].to_numpy()
    if strategy == "uniform":
        edges = grids.uniform_edges(bins, convention)
        return edges[b], edges[np.minimum(b + 1, len(edges) - 1)]
    if bins == 1:
        return frame["p_min"].to_numpy(float), frame["p_max"].to_numpy(float)
    inner = frame[[f"e{k}" for k in range(1, bins)]].to_numpy(float)
    full = np.column_stack([frame["p_min"].to_numpy(float), inner, frame["p_max"].to_numpy(float)])
    rows = np.arange(len(frame))
    lower = np.where(b == 0, frame["p_min"], full[rows, b])
    upper = np.where(b == bins - 1, frame["p_max"], full[rows, b + 1])
    return lower, upper


def wilson_interval(k, n, confidence: float):
    """Wilson's score interval for a binomial proportion k/n (non-integer k, n allowed)."""
    k, n = np.asarray(k, float), np.asarray(n, float)
    z = stats.norm.isf((1 - confidence) / 2)
    with np.errstate(divide="ignore", invalid="ignore"):
        phat = k / n
        denom = 1 + z**2 / n
        center = (phat + z**2 / (2 * n)) / denom
        half = z / denom * np.sqrt(phat * (1 - phat) / n + z**2 / (4 * n**2))
    ok = n > 0
    # the interval contains k/n exactly; rounding can leave 1e-17 between them (at k = 0 or n),
    # which a diagram's error bar would read as a negative length
    return (np.where(ok, np.clip(center - half, 0, np.fmin(phat, 1)), np.nan),
            np.where(ok, np.clip(center + half, np.fmax(phat, 0), 1), np.nan))


def clopper_pearson_interval(k, n, confidence: float):
    """The exact Clopper–Pearson interval, from beta quantiles."""
    k, n = np.asarray(k, float), np.asarray(n, float)
    alpha = 1 - confidence
    with np.errstate(divide="ignore", invalid="ignore"):
        lo = np.where(k > 0, stats.beta.ppf(alpha / 2, k, n - k + 1), 0.0)
        hi = np.where(k < n, stats.beta.ppf(1 - alpha / 2, k + 1, n - k), 1.0)
    ok = n > 0
    return np.where(ok, lo, np.nan), np.where(ok, hi, np.nan)


def bins_needs(src: Source, *, bins: int, strategy: str, convention: str, parts=(),
               logit_range=None) -> list:
    """The first-stage summary :func:`bins_summary` reads: the equal-width bins, for
    equal-mass bins the score-cell histogram their edges are found from, for log-odds bins
    the totals (their observed range) or, given ``logit_range``, the bins."""
    parts = summary_parts(src, "sums", *parts)
    if strategy == "uniform":
        return [declared.uniform(bins, convention, *parts)]
    if strategy == "logit":
        return planner.follow_up(src, lambda read: logit_walk(
            src, bins, parts, checked_logit_range(logit_range), read))
    return cells_needs(src, parts)


def bins_follow_up(src: Source, *, bins: int, strategy: str, parts=(), logit_range=None
                   ) -> list:
    """The next follow-up :func:`bins_summary` reads that ``src`` does not hold yet, from the
    frames cached so far ([] for equal-width bins, or once every read is cached)."""
    if strategy == "uniform":
        return []
    if strategy == "logit":
        return bins_needs(src, bins=bins, strategy=strategy, convention="sqlcal", parts=parts,
                          logit_range=logit_range)
    return equal_mass_follow_up(src, bins, summary_parts(src, "sums", *parts), strategy)
