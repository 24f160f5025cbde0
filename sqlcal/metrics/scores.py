"""Metrics read off the totals summary alone: Brier score, log loss, calibration-in-the-large and
the observed/expected ratio, and Spiegelhalter's Z test. They cost no scan beyond validation."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd
from scipy import stats

from sqlcal.inputs.sources import Source
from sqlcal.metrics import resolve_weight_kind, result, safe_div, statistic, variance_parts
from sqlcal.metrics._registry import Report, metric
from sqlcal.metrics.intervals import (
    available,
    brier_interval,
    citl_interval,
    interval_parts,
    log_loss_interval,
)
from sqlcal.options import checked
from sqlcal.query import declared, executor, planner
from sqlcal.query.executor import as_source

#: the facts that qualify an interval: its method (fixed per metric: kept out of the wide report,
#: in the trust column of the tidy tables), its level and how the weights entered it
_TRUST = {"ci_method": None, "confidence": "confidence", "weight_kind": "weight_kind"}


@metric(needs=lambda src, o: totals_needs(interval=_interval(src, o, "r4")),
        report={"brier": Report({"brier": "brier", "ci_lower": "brier_lower",
                                 "ci_upper": "brier_upper"})},
        trust=_TRUST)
@checked
def brier(
    data: Any,
    *,
    score: str | None = None,
    label: str | None = None,
    weight: str | None = None,
    by: str | Sequence[str] = (),
    where: Any = None,
    confidence: float = 0.95,
    weight_kind: str = "auto",
    **source_options: Any,
) -> pd.DataFrame:
    r"""The Brier score, :math:`\sum_i w_i (y_i - p_i)^2 / \sum_i w_i`.

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
    confidence : float, default 0.95
        Two-sided level of the interval.
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
        One row per group: the keys, ``brier``, ``n``, ``W``, ``ci_lower``, ``ci_upper`` (the
        interval of the population's Brier score), ``ci_method`` (``"delta"``),
        ``confidence``, ``weight_kind``; with ``on_invalid="drop"``, ``n_dropped``.

    See Also
    --------
    brier_decomposition : the same score split into reliability, resolution and uncertainty.
    decompose : the split with isotonic recalibration instead of bins.
    log_loss : the logarithmic scoring rule instead of the quadratic one.

    Notes
    -----
    .. math:: \mathrm{BS} = \frac{1}{W} \sum_i w_i (y_i - p_i)^2, \qquad W = \sum_i w_i.

    Binary-outcome Brier score of Brier (1950), Verification of Forecasts Expressed in Terms of
    Probability, in scikit-learn's scale (``brier_score_loss``, in [0, 1]). With soft labels it is
    the squared error to the label, which exceeds the expected Bernoulli Brier score by the mean of
    y(1 − y).

    The interval is the delta method's (van der Vaart (1998), Asymptotic Statistics, ch. 3):
    :math:`\mathrm{BS} \pm z\sqrt{\sum_i v_i (r_i^2 - \mathrm{BS})^2}/W`, :math:`r = y - p`,
    with the variance weight :math:`v_i` (:func:`sqlcal.query.reductions.variance_weights`:
    :math:`w_i` for frequency weights, :math:`w_i^2` for sampling weights, :math:`f_i/\pi_i^2`
    on a downsampled log); see :mod:`sqlcal.metrics.intervals`.

    References
    ----------
    .. [1] G. W. Brier, "Verification of Forecasts Expressed in Terms of Probability", Monthly
       Weather Review 78(1), 1950.
    .. [2] A. W. van der Vaart, "Asymptotic Statistics", Cambridge University Press, 1998.

    Examples
    --------
    >>> import pandas as pd, sqlcal
    >>> df = pd.DataFrame({"p": [0.1, 0.2, 0.8, 0.9], "y": [0, 1, 1, 1]})
    >>> round(float(sqlcal.brier(df, score="p", label="y")["brier"].iloc[0]), 12)
    0.175
    """
    src = as_source(data, score, label, weight=weight, by=by, where=where, **source_options)
    frame = totals_summary(src, interval=_interval(src, {"weight_kind": weight_kind}, "r4"))
    weight_kind = resolve_weight_kind(src, weight_kind)
    t = brier_finish(frame)
    t["ci_lower"], t["ci_upper"] = brier_interval(frame, confidence=confidence,
                                                  weight_kind=weight_kind)
    return result(src, t, ["brier", "ci_lower", "ci_upper"], _trust(confidence, weight_kind))


@metric(needs=lambda src, o: totals_needs(logloss=True, interval=_log_loss_parts(src, o)),
        report={"log_loss": Report({"log_loss": "log_loss", "ci_lower": "log_loss_lower",
                                    "ci_upper": "log_loss_upper"})},
        trust=_TRUST)
@checked
def log_loss(
    data: Any,
    *,
    score: str | None = None,
    label: str | None = None,
    weight: str | None = None,
    by: str | Sequence[str] = (),
    where: Any = None,
    confidence: float = 0.95,
    weight_kind: str = "auto",
    **source_options: Any,
) -> pd.DataFrame:
    r"""The log loss (cross-entropy), :math:`-\sum_i w_i [y_i \ln p_i + (1-y_i)\ln(1-p_i)] / W`.

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
    **source_options
        Further options of :func:`sqlcal.source`, such as ``table=``, ``on_invalid=`` and
        ``soft_labels=``.

    confidence : float, default 0.95
        Two-sided level of the interval.
    weight_kind : {"auto", "frequency", "sampling"}, default "auto"
        How weights enter the interval, as in :func:`brier`.

    Returns
    -------
    pandas.DataFrame
        One row per group: the keys, ``log_loss``, ``n``, ``W``, ``n_infinite`` (rows of positive
        weight with p = 0 and y > 0, or p = 1 and y < 1), ``ci_lower``, ``ci_upper`` (NaN when
        the log loss is infinite), ``ci_method`` (``"delta"``), ``confidence``,
        ``weight_kind``; with ``on_invalid="drop"``, ``n_dropped``.

    See Also
    --------
    normalized_entropy : the log loss over the entropy of the base rate.
    brier : the quadratic scoring rule.
    decompose : the log score split into miscalibration and discrimination.

    Notes
    -----
    Scores are not clipped: :math:`0 \ln 0 = 0`, and a row with infinite loss makes the group's
    log loss ``inf``, with the count of such rows beside it. (scikit-learn's ``log_loss`` clips
    scores to [ε, 1 − ε] with the float64 machine ε, so it reports about 36 instead.) The
    logarithmic scoring rule is from Good (1952), Rational Decisions. The interval is the delta
    method's, :math:`\mathrm{LL} \pm z\sqrt{\sum_i v_i(\ell_i - \mathrm{LL})^2}/W` (van der
    Vaart (1998), Asymptotic Statistics, ch. 3; v the variance weight as in :func:`brier`).

    References
    ----------
    .. [1] I. J. Good, "Rational Decisions", Journal of the Royal Statistical Society, Series B
       14(1), 1952.
    .. [2] A. W. van der Vaart, "Asymptotic Statistics", Cambridge University Press, 1998.

    Examples
    --------
    >>> import pandas as pd, sqlcal
    >>> df = pd.DataFrame({"p": [0.1, 0.2, 0.8, 0.9], "y": [0, 1, 1, 1]})
    >>> sqlcal.log_loss(df, score="p", label="y")[["log_loss", "n", "W", "n_infinite"]].round(6)
       log_loss  n    W  n_infinite
    0  0.510826  4  4.0           0
    """
    src = as_source(data, score, label, weight=weight, by=by, where=where, **source_options)
    frame = totals_summary(src, logloss=True,
                           interval=_log_loss_parts(src, {"weight_kind": weight_kind}))
    weight_kind = resolve_weight_kind(src, weight_kind)
    t = log_loss_finish(frame)
    t["ci_lower"], t["ci_upper"] = log_loss_interval(frame, confidence=confidence,
                                                     weight_kind=weight_kind)
    return result(src, t, ["log_loss", "n_infinite", "ci_lower", "ci_upper"],
                  _trust(confidence, weight_kind))


@metric(needs=lambda src, o: totals_needs(interval=_interval(src, o)),
        report={"calibration_in_the_large": Report({
            "citl": "citl", "ci_lower": "citl_lower", "ci_upper": "citl_upper",
            "oe_ratio": "oe_ratio", "oe_ratio_lower": "oe_ratio_lower",
            "oe_ratio_upper": "oe_ratio_upper"})},
        trust=_TRUST)
@checked
def calibration_in_the_large(
    data: Any,
    *,
    score: str | None = None,
    label: str | None = None,
    weight: str | None = None,
    by: str | Sequence[str] = (),
    where: Any = None,
    confidence: float = 0.95,
    weight_kind: str = "auto",
    **source_options: Any,
) -> pd.DataFrame:
    r"""Calibration-in-the-large (mean score − observed rate) and the observed/expected ratio.

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
    **source_options
        Further options of :func:`sqlcal.source`, such as ``table=``, ``on_invalid=`` and
        ``soft_labels=``.

    confidence : float, default 0.95
        Two-sided level of the intervals.
    weight_kind : {"auto", "frequency", "sampling"}, default "auto"
        How weights enter the intervals, as in :func:`brier`.

    Returns
    -------
    pandas.DataFrame
        One row per group: the keys, ``citl`` = :math:`(\sum wp - \sum wy)/W` (positive when the
        model over-predicts), ``n``, ``W``, ``mean_score``, ``observed``, ``oe_ratio`` =
        :math:`\sum wy / \sum wp`, ``ci_lower``, ``ci_upper`` (of ``citl``), ``oe_ratio_lower``,
        ``oe_ratio_upper`` (of ``oe_ratio``), ``ci_method`` (``"delta"``), ``confidence``,
        ``weight_kind``; with ``on_invalid="drop"``, ``n_dropped``.

    See Also
    --------
    calibration_ratio : the observed/expected ratio's inverse, with an interval.
    calibration_slope : the next level of the hierarchy: slope and intercept.
    ece : calibration within score ranges, not only on average.

    Notes
    -----
    .. math:: \mathrm{CITL} = \frac{\sum_i w_i p_i - \sum_i w_i y_i}{\sum_i w_i}, \qquad
       O/E = \frac{\sum_i w_i y_i}{\sum_i w_i p_i}.

    The first level of the calibration hierarchy of Van Calster et al. (2016), A calibration
    hierarchy for risk models was defined: from utopia to empirical data (mean calibration).
    The intervals are the delta method's (van der Vaart (1998), Asymptotic Statistics, ch. 3):
    :math:`\sum_i v_i (p_i - y_i - \mathrm{CITL})^2/W^2` for CITL, and for the ratio
    :math:`\rho = O/E` on the log scale, :math:`\rho\exp(\pm z\,\mathrm{se})` with
    :math:`\mathrm{se}^2 = \sum_i v_i(y_i - \rho p_i)^2/(\rho\sum_i w_i p_i)^2` (v the variance
    weight, as in :func:`brier`).

    References
    ----------
    .. [1] B. Van Calster et al., "A Calibration Hierarchy for Risk Models Was Defined: from Utopia
       to Empirical Data", Journal of Clinical Epidemiology 74, 2016.
    .. [2] A. W. van der Vaart, "Asymptotic Statistics", Cambridge University Press, 1998.

    Examples
    --------
    >>> import pandas as pd, sqlcal
    >>> df = pd.DataFrame({"p": [0.1, 0.2, 0.8, 0.9], "y": [0, 1, 1, 1]})
    >>> out = sqlcal.calibration_in_the_large(df, score="p", label="y")
    >>> out[["citl", "n", "W", "mean_score", "observed", "oe_ratio"]].round(6)
       citl  n    W  mean_score  observed  oe_ratio
    0 -0.25  4  4.0         0.5      0.75       1.5
    """
    src = as_source(data, score, label, weight=weight, by=by, where=where, **source_options)
    frame = totals_summary(src, interval=_interval(src, {"weight_kind": weight_kind}))
    weight_kind = resolve_weight_kind(src, weight_kind)
    t = calibration_in_the_large_finish(frame)
    t["ci_lower"], t["ci_upper"], t["oe_ratio_lower"], t["oe_ratio_upper"] = citl_interval(
        frame, confidence=confidence, weight_kind=weight_kind)
    return result(src, t, ["citl", "mean_score", "observed", "oe_ratio", "ci_lower", "ci_upper",
                           "oe_ratio_lower", "oe_ratio_upper"], _trust(confidence, weight_kind))


@metric(needs=lambda src, o: totals_needs(
            spiegelhalter=True, parts=variance_parts(src, o["weight_kind"])),
        report={"spiegelhalter": Report({"z": "spiegelhalter_z", "p_value": "spiegelhalter_p"})},
        trust={"weight_kind": "weight_kind"})
@checked
def spiegelhalter(
    data: Any,
    *,
    score: str | None = None,
    label: str | None = None,
    weight: str | None = None,
    by: str | Sequence[str] = (),
    where: Any = None,
    weight_kind: str = "auto",
    **source_options: Any,
) -> pd.DataFrame:
    r"""Spiegelhalter's Z test of calibration, with a two-sided p-value.

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
    weight_kind : {"auto", "frequency", "sampling"}, default "auto"
        ``"auto"`` reads whole-number weights as frequencies and any others (or any weights of
        a source with ``negative_sampling_rate``) as sampling weights.
        Null variance :math:`\sum w(1-2p)^2p(1-p)` (a row of weight w is w Bernoulli trials) or
        :math:`\sum w^2(1-2p)^2p(1-p)` (each row one trial scaled by its sampling weight), and
        under a sampling rate the design's null variance (see Notes).
    **source_options
        Further options of :func:`sqlcal.source`, such as ``table=``, ``on_invalid=`` and
        ``soft_labels=``.

    Returns
    -------
    pandas.DataFrame
        One row per group: the keys, ``z``, ``n``, ``W``, ``p_value`` (two-sided),
        ``weight_kind`` (``"frequency"`` or ``"sampling"``: the null variance used, ``"auto"``
        resolved); with ``on_invalid="drop"``, ``n_dropped``.

    See Also
    --------
    hosmer_lemeshow : a test on risk groups.
    kuiper : a test on cumulative differences, which sees miscalibration by score.
    brier : the score whose excess the test weighs.

    Notes
    -----
    Spiegelhalter (1986), Probabilistic prediction in patient management and clinical trials
    (Statistics in Medicine 5:421):
    :math:`Z = \sum w(y-p)(1-2p) / \sqrt{\sum w(1-2p)^2p(1-p)}`, asymptotically standard normal
    when the scores are the true probabilities. Z > 0 means the Brier score is worse than
    calibration explains. The p-value is :math:`2\Phi(-|Z|)`: MAPIE's one-sided 1 − Φ(Z) gives an
    under-confident model p = 1. When every score is 0, 1/2 or 1 the null
    variance is 0: Z is ±inf (p = 0) if the numerator is not 0 (a score of 0 or 1 contradicted by
    its label), NULL otherwise.

    On a downsampled log (``negative_sampling_rate``) the kept rows estimate the full log's sum
    :math:`T = \sum w(y-p)(1-2p)`, and its variance under calibration is the population's plus
    the sampling's. Of a row of the full log with score p, kept with probability 1 if positive
    and r if negative, the variance of its term :math:`I(y-p)(1-2p)/\pi` (I the indicator of
    being kept) under calibration is
    :math:`(1-2p)^2\,[p(1-p)^2 + (1-p)p^2/r] = (1-2p)^2\,[p(1-p) + (1/r - 1)(1-p)p^2]`: the
    Bernoulli variance of the full log, plus the sampling's on the negatives. The first part is
    the null model's, estimated from the kept rows by Horvitz-Thompson weighting
    :math:`\sum w(1-2p)^2p(1-p)`; the second is the sampling's own, estimated from the kept
    negatives themselves, :math:`\sum_{y=0} w(1/r - 1)\,p^2(1-2p)^2`, which needs no rate for
    a positive (a rate column may hold NULL there). In the variance weight's terms
    (:func:`sqlcal.query.reductions.variance_weights`: :math:`v = f/\pi^2`, :math:`v_0 = f/\pi`):
    :math:`\sum v_0(1-2p)^2p(1-p) + \sum (v - v_0)(y-p)^2(1-2p)^2`, the linearization of
    Särndal, Swensson & Wretman (1992), Model Assisted Survey Sampling, ch. 5, with the
    population's part under the null.

    References
    ----------
    .. [1] D. J. Spiegelhalter, "Probabilistic Prediction in Patient Management and Clinical
       Trials", Statistics in Medicine 5(5), 1986.
    .. [2] C.-E. Särndal, B. Swensson and J. Wretman, "Model Assisted Survey Sampling", Springer,
       1992.

    Examples
    --------
    >>> import pandas as pd, sqlcal
    >>> df = pd.DataFrame({"p": [0.1, 0.2, 0.8, 0.9], "y": [0, 1, 1, 1]})
    >>> sqlcal.spiegelhalter(df, score="p", label="y").round(6)
              z  n    W   p_value weight_kind
    0  0.416667  4  4.0  0.676922   frequency
    """
    src = as_source(data, score, label, weight=weight, by=by, where=where, **source_options)
    t = planner.fetch(src, *totals_needs(spiegelhalter=True,
                                         parts=variance_parts(src, weight_kind))).copy()
    executor.require_binary_labels(src, "Spiegelhalter's test")
    weight_kind = resolve_weight_kind(src, weight_kind)
    t = spiegelhalter_finish(t, weight_kind=weight_kind)
    return result(src, t, ["z", "p_value"], {"weight_kind": weight_kind})


# -- finishes: the metrics as functions of the totals summary (no engine) --------------------


def brier_finish(totals: pd.DataFrame) -> pd.DataFrame:
    """The totals with ``brier`` = Σw(y − p)² / W (NaN for a group of no weight).

    ``totals`` is the totals summary, one row per group: ``W`` and ``sw_sq_resid``.
    """
    return totals.assign(brier=safe_div(totals["sw_sq_resid"], totals["W"]))


def log_loss_finish(totals: pd.DataFrame) -> pd.DataFrame:
    """The totals with ``log_loss`` = Σw·(−y ln p − (1 − y) ln(1 − p)) / W and ``n_infinite``.

    ``totals`` carries the log-loss part: ``W``, ``sw_logloss`` (the finite terms) and
    ``n_infinite_logloss`` (rows of positive weight whose term is infinite); a group with such a
    row has log loss ``inf``.
    """
    n_infinite = totals["n_infinite_logloss"].astype(int)
    value = safe_div(totals["sw_logloss"], totals["W"])
    return totals.assign(n_infinite=n_infinite,
                         log_loss=np.where(n_infinite > 0, np.inf, value))


def calibration_in_the_large_finish(totals: pd.DataFrame) -> pd.DataFrame:
    """The totals with ``mean_score`` = Σwp/W, ``observed`` = Σwy/W, ``citl`` (their difference)
    and ``oe_ratio`` = Σwy/Σwp (±inf when Σwp = 0 < Σwy)."""
    mean_score = safe_div(totals["swp"], totals["W"])
    observed = safe_div(totals["swy"], totals["W"])
    return totals.assign(mean_score=mean_score, observed=observed, citl=mean_score - observed,
                         oe_ratio=statistic(totals["swy"], totals["swp"]))


def spiegelhalter_finish(totals: pd.DataFrame, *, weight_kind: str) -> pd.DataFrame:
    """The totals with Spiegelhalter's ``z`` and its two-sided ``p_value``.

    ``totals`` carries the Spiegelhalter part: ``sw_spieg`` = Σw(y − p)(1 − 2p) and the null
    variances ``sw_spieg_var`` = Σw(1 − 2p)²p(1 − p) (read for ``weight_kind="frequency"``)
    and ``sw2_spieg_var`` (under the variance weight, for ``"sampling"``: Σw²(1 − 2p)²p(1 − p),
    or a design's; a summary without the ``"sw2"`` part leaves it out: unweighted, w = 1 makes
    it equal the first, and frequency weights read the first).
    """
    if weight_kind not in ("frequency", "sampling"):
        raise ValueError(f"weight_kind must be 'frequency' or 'sampling' here, not "
                         f"{weight_kind!r}")
    var = totals["sw_spieg_var"]
    if weight_kind == "sampling" and "sw2_spieg_var" in totals:
        var = totals["sw2_spieg_var"]
    z = statistic(totals["sw_spieg"], np.sqrt(var.to_numpy(float)))
    return totals.assign(z=z, p_value=2 * stats.norm.sf(np.abs(z)))


def totals_summary(src: Source, *, logloss: bool = False, spiegelhalter: bool = False,
                   interval: tuple = ()) -> pd.DataFrame:
    """The totals summary of ``src`` (one row per group), computed once and cached on it; the
    log and Spiegelhalter terms, and the parts an ``interval`` reads, only when asked for."""
    return planner.fetch(src, *totals_needs(logloss=logloss, spiegelhalter=spiegelhalter,
                                            interval=interval)).copy()


def totals_needs(*, logloss: bool = False, spiegelhalter: bool = False, parts=(),
                 interval: tuple = ()) -> list:
    """The declared totals summary, with the log-loss and Spiegelhalter sums when asked for,
    further ``parts`` (``"sw2"``: Spiegelhalter's null variance under the variance weight) and
    the parts of an interval (:func:`sqlcal.metrics.intervals.interval_parts`)."""
    return [declared.totals(*(name for name, on in (("logloss", logloss),
                                                     ("spiegelhalter", spiegelhalter)) if on),
                            *parts, *interval)]


def _trust(confidence: float, weight_kind: str) -> dict:
    return {"ci_method": "delta", "confidence": confidence, "weight_kind": weight_kind}


def _interval(src: Source, o: dict, *extra: str) -> tuple:
    """The totals parts of a delta-method interval under the metric's options ``o`` (those
    the source can give: :func:`sqlcal.metrics.intervals.available`)."""
    return (*interval_parts(src, o.get("weight_kind", "auto"), True), *available(src, extra))


def _log_loss_parts(src: Source, o: dict) -> tuple:
    """The log loss's interval reads Σwℓ², and under the variance weight Σv, Σvℓ, Σvℓ²."""
    return available(src, ("logloss_sq", *variance_parts(src, o.get("weight_kind", "auto"))))
