"""Metrics for low base rates (click, conversion and fraud logs): normalized entropy and the
calibration ratio Σwp/Σwy with intervals that hold with tens of positives. Both read the totals
summary (one scan, shared with the log loss); the calibration ratio by predicted-score decile reads
the exact equal-mass bins of :mod:`sqlcal.metrics.cells`."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd
from scipy import stats

from sqlcal.inputs.sources import Source
from sqlcal.metrics import resolve_weight_kind, result, variance_parts
from sqlcal.metrics._registry import Report, metric
from sqlcal.metrics.cells import equal_mass_bins, equal_mass_follow_up, logit_needs, summary_parts
from sqlcal.options import checked
from sqlcal.query import declared, executor, planner
from sqlcal.query.executor import as_source


@metric(needs=lambda src, o: _ne_needs(src, o["weight_kind"]),
        report={"normalized_entropy": Report(
            {"normalized_entropy": "normalized_entropy", "ci_lower": "normalized_entropy_lower",
             "ci_upper": "normalized_entropy_upper"})},
        trust={"weight_kind": "weight_kind", "confidence": None,
               "reason": "normalized_entropy_reason"})
@checked
def normalized_entropy(
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
    r"""Normalized entropy: the log loss divided by the entropy of the base rate.

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
        ``"auto"`` reads whole-number weights as frequencies and any others (or any weights of
        a source with ``negative_sampling_rate``) as sampling weights. How weights enter the
        interval: a row of weight w is w observed rows (frequency), or the variance weight v
        of the sampling design (see Notes).
    **source_options
        Further options of :func:`sqlcal.source`, such as ``negative_sampling_rate=``,
        ``on_invalid=`` and ``table=``.

    Returns
    -------
    pandas.DataFrame
        One row per group: the keys, ``normalized_entropy``, ``n``, ``W``,
        ``relative_information_gain`` (1 − NE), ``log_loss``, ``base_rate`` (Σwy/W),
        ``ci_lower``, ``ci_upper`` (of NE), ``n_infinite`` (rows of infinite loss), ``reason``
        (why NE is undefined: ``"no positives"``, ``"no negatives"``, ``"infinite log loss"``;
        None when it is not), ``confidence``, ``weight_kind``; with ``on_invalid="drop"``,
        ``n_dropped``.

    See Also
    --------
    log_loss : the log loss alone.
    calibration_ratio : expected over observed positives, with an interval.
    brier : the quadratic scoring rule.

    Notes
    -----
    With :math:`\ell_i = -y_i\ln p_i - (1-y_i)\ln(1-p_i)`, :math:`\mathrm{LL} = \sum w\ell / W`
    and base rate :math:`b = \sum wy / W`,

    .. math:: \mathrm{NE} = \frac{\mathrm{LL}}{H(b)}, \qquad H(b) = -b\ln b - (1-b)\ln(1-b),

    He et al. (2014), Practical Lessons from Predicting Clicks on Ads at Facebook (ADKDD). NE < 1
    means the scores carry information beyond the base rate; the relative information gain is
    1 − NE. The interval is the delta method on the pair of means (LL, b), linearized as the
    ratio estimators they are (Särndal, Swensson & Wretman (1992), Model Assisted Survey
    Sampling, ch. 5.5-5.7): with gradient :math:`g = (1/H,\ -\mathrm{LL}\,H'(b)/H^2)`,
    :math:`H'(b) = \ln((1-b)/b)` and each row's linearized value
    :math:`u_i = g_1(\ell_i - \mathrm{LL}) + g_2(y_i - b)`,

    .. math:: \widehat{\mathrm{Var}}(\mathrm{NE}) = \sum_i v_i u_i^2 / W^2,

    with :math:`v_i` the variance weight (:func:`sqlcal.query.reductions.variance_weights`):
    :math:`w_i` for frequency weights (the rows' covariance of (ℓ, y) over n = W),
    :math:`w_i^2` for sampling weights, and on a downsampled log :math:`f_i/\pi_i^2`, so the
    interval carries both the population's variance and the sampling's, whatever 1/r is.
    :math:`\mathrm{NE} \pm z\sqrt{\widehat{\mathrm{Var}}}`. It treats the rows (before any
    sampling) as independent draws and the base rate as estimated from them; it needs enough
    positives for the normal approximation (hundreds, not tens).

    References
    ----------
    .. [1] X. He et al., "Practical Lessons from Predicting Clicks on Ads at Facebook", ADKDD, 2014.
    .. [2] C.-E. Särndal, B. Swensson and J. Wretman, "Model Assisted Survey Sampling", Springer,
       1992.

    Examples
    --------
    >>> import pandas as pd, sqlcal
    >>> df = pd.DataFrame({"p": [0.1, 0.2, 0.8, 0.9], "y": [0, 1, 1, 1]})
    >>> out = sqlcal.normalized_entropy(df, score="p", label="y")
    >>> out[["normalized_entropy", "log_loss", "base_rate"]].round(6)
       normalized_entropy  log_loss  base_rate
    0            0.908401  0.510826       0.75
    """
    src = as_source(data, score, label, weight=weight, by=by, where=where, **source_options)
    frame = planner.fetch(src, *_ne_needs(src, weight_kind)).copy()
    weight_kind = resolve_weight_kind(src, weight_kind)
    executor.require_binary_labels(src, "normalized entropy's interval")
    t = normalized_entropy_finish(frame, confidence=confidence, weight_kind=weight_kind)
    return result(src, t, ["normalized_entropy", "relative_information_gain", "log_loss",
                           "base_rate", "ci_lower", "ci_upper", "n_infinite", "reason"],
                  {"confidence": confidence, "weight_kind": weight_kind})


# the per-decile table refines its edges with follow-up passes (every whole number of bins)
@metric(needs=lambda src, o: _ratio_needs(src, o),
        follow_up=lambda src, o: _ratio_follow_up(src, o),
        refining={("deciles", k): "deciles=None" for k in range(1, 1025)},
        report={"calibration_ratio": Report(
            {"calibration_ratio": "calibration_ratio", "ci_lower": "calibration_ratio_lower",
             "ci_upper": "calibration_ratio_upper"})},
        trust={"weight_kind": "weight_kind", "confidence": None, "method": None,
               "reason": "calibration_ratio_reason"})
@checked
def calibration_ratio(
    data: Any,
    *,
    score: str | None = None,
    label: str | None = None,
    weight: str | None = None,
    by: str | Sequence[str] = (),
    where: Any = None,
    confidence: float = 0.95,
    deciles: int | None = None,
    weight_kind: str = "auto",
    **source_options: Any,
) -> pd.DataFrame:
    r"""The calibration ratio Σwp/Σwy (expected over observed positives), with an interval.

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
    deciles : int, optional
        When given, the ratio per equal-mass bin of the score (``deciles=10``: the calibration
        by predicted-score decile), on the exact quantile edges of ``strategy="quantile"``
        (:func:`sqlcal.ece`): one row per group and bin.
    weight_kind : {"auto", "frequency", "sampling"}, default "auto"
        ``"auto"`` reads whole-number weights as frequencies and any others (or any weights of
        a source with ``negative_sampling_rate``) as sampling weights. A row of weight w is w
        Bernoulli trials (frequency), or one trial counted w times (sampling): the variance
        below uses Σwp, Σwp² or the variance weight's sums.
    **source_options
        Further options of :func:`sqlcal.source`, such as ``negative_sampling_rate=``,
        ``on_invalid=`` and ``table=``.

    Returns
    -------
    pandas.DataFrame
        One row per group (and, with ``deciles``, per bin: ``bin``, ``bin_lower``,
        ``bin_upper`` first): the keys, ``calibration_ratio``, ``n``, ``W``, ``expected_positives``
        (Σwp), ``observed_positives`` (Σwy), ``n_positive`` (rows with y = 1), ``ci_lower``,
        ``ci_upper``, ``reason`` (why the ratio is undefined: ``"no positives"``, ``"no
        weight"``; None when it is not), ``method`` (``"score"``), ``confidence``,
        ``weight_kind``; with ``deciles``, ``binning``; with ``on_invalid="drop"``,
        ``n_dropped``.

    See Also
    --------
    calibration_in_the_large : mean score minus observed rate, and its inverse ratio.
    normalized_entropy : how much the scores tell beyond the base rate.
    reliability : the ratio's pieces per score bin.

    Notes
    -----
    Convention: ads report expected over observed, :math:`\mathrm{CR} = \sum wp / \sum wy`
    (above 1: the model over-predicts), as TFMA's and MCGrad's calibration; clinical papers
    report its inverse, :func:`sqlcal.calibration_in_the_large`'s ``oe_ratio`` =
    :math:`\sum wy / \sum wp` = 1/CR, on the same sums.

    The interval is a score (Wilson-type) interval that conditions on the scores and inverts a
    test of :math:`H_\rho`: the outcomes are Bernoulli with :math:`\pi_i = p_i/\rho` (the scores
    right up to the factor ρ), so :math:`O = \sum wy` has mean :math:`E/\rho` (E = Σwp) and
    variance :math:`V(\rho) = A/\rho - B/\rho^2` with :math:`A = \sum wp, B = \sum wp^2`
    (frequency weights) or :math:`A = \sum w^2p, B = \sum w^2p^2` (sampling weights). The
    interval is every ρ with :math:`(O - E/\rho)^2 \le z^2 V(\rho)`, the roots of a quadratic
    in 1/ρ: it uses the variance under each hypothesis rather than the observed count's, which
    is what keeps it honest with tens of positives (the Wald interval on log CR is not), and it
    is the Poisson score interval when all p are small. Under a sampling design the variance
    is the population's under :math:`H_\rho` plus the sampling's:
    :math:`V(\rho) = \sum v_0 \pi(1-\pi) + \sum (v - v_0)(y - \pi)^2` with the variance
    weight v and its label-free part :math:`v_0` (:func:`sqlcal.query.reductions.variance_weights`;
    Särndal, Swensson & Wretman (1992), Model Assisted Survey Sampling, ch. 5); on a source
    with ``negative_sampling_rate`` only the kept negatives have :math:`v \ne v_0`, each
    (weight w = f/r) adding its Horvitz-Thompson variance :math:`w(1/r - 1)\pi^2`, so
    :math:`V = A/\rho - B/\rho^2` still, with :math:`A = \sum v_0 p` and
    :math:`B = \sum (2v_0 - v)p^2`. A group with no positives has no
    ratio (NaN, ``reason="no positives"``) but a finite ``ci_lower`` and ``ci_upper = inf``.
    Coverage of 95% intervals on 2,000 simulated tables with 20-50 expected positives is on
    the validation page of the documentation (docs/validation.md). Wilson (1927), Probable
    Inference, the Law of Succession, and Statistical Inference, for the score-interval
    construction.

    References
    ----------
    .. [1] X. He et al., "Practical Lessons from Predicting Clicks on Ads at Facebook", ADKDD, 2014.
    .. [2] E. B. Wilson, "Probable Inference, the Law of Succession, and Statistical Inference",
       Journal of the American Statistical Association 22(158), 1927.
    .. [3] C.-E. Särndal, B. Swensson and J. Wretman, "Model Assisted Survey Sampling", Springer,
       1992.

    Examples
    --------
    >>> import pandas as pd, sqlcal
    >>> df = pd.DataFrame({"p": [0.1, 0.2, 0.8, 0.9], "y": [0, 1, 1, 1]})
    >>> out = sqlcal.calibration_ratio(df, score="p", label="y")
    >>> out[["calibration_ratio", "expected_positives", "observed_positives"]].round(6)
       calibration_ratio  expected_positives  observed_positives
    0           0.666667                 2.0                 3.0
    """
    src = as_source(data, score, label, weight=weight, by=by, where=where, **source_options)
    parts = _ratio_parts(src, weight_kind, deciles)
    if deciles is None:
        frame = planner.fetch(src, declared.totals(*parts)).copy()
    else:
        frame = equal_mass_bins(src, deciles, summary_parts(src, "sums", *parts), "quantile",
                                first="logit")
    weight_kind = resolve_weight_kind(src, weight_kind)
    executor.require_binary_labels(src, "the calibration ratio's interval")
    t = calibration_ratio_finish(frame, confidence=confidence, weight_kind=weight_kind)
    columns = ["calibration_ratio", "expected_positives", "observed_positives", "n_positive",
               "ci_lower", "ci_upper", "reason"]
    trust = {"method": "score", "confidence": confidence, "weight_kind": weight_kind}
    if deciles is None:
        return result(src, t, columns, trust)
    return _per_bin(src, t, columns, trust, deciles)


# -- finishes: plain functions of the totals (or bins) summary --------------------------------


def normalized_entropy_finish(totals: pd.DataFrame, *, confidence: float = 0.95,
                              weight_kind: str = "frequency") -> pd.DataFrame:
    """The totals with ``normalized_entropy``, ``relative_information_gain``, ``log_loss``,
    ``base_rate``, ``ci_lower``, ``ci_upper``, ``n_infinite`` and ``reason``.

    ``totals`` carries ``W``, ``swy``, ``sw_logloss`` = Σwℓ (finite terms),
    ``n_infinite_logloss``, ``sw_logloss_sq`` = Σwℓ², ``swy_logloss`` = Σwyℓ and, for
    ``weight_kind="sampling"``, the same under the variance weight v: ``sw2`` = Σv, ``sw2y``
    = Σvy, ``sw2_logloss`` = Σvℓ, ``sw2_logloss_sq`` = Σvℓ², ``sw2y_logloss`` = Σvyℓ (an
    unweighted summary leaves them out: v = w = 1). See :func:`normalized_entropy`.

    Examples
    --------
    >>> t = pd.DataFrame({"n": [4], "W": [4.0], "swy": [2.0], "sw_logloss": [2.0],
    ...                   "n_infinite_logloss": [0], "sw_logloss_sq": [1.5],
    ...                   "swy_logloss": [1.0]})
    >>> float(normalized_entropy_finish(t)["normalized_entropy"].iloc[0].round(6))
    0.721348
    """
    W = totals["W"].to_numpy(float)
    b = _div(totals["swy"].to_numpy(float), W)
    n_inf = totals["n_infinite_logloss"].to_numpy(float).astype(int)
    ll = np.where(n_inf > 0, np.inf, _div(totals["sw_logloss"].to_numpy(float), W))
    with np.errstate(divide="ignore", invalid="ignore"):
        H = -(np.where(b > 0, b * np.log(np.where(b > 0, b, 1)), 0.0)
              + np.where(b < 1, (1 - b) * np.log(np.where(b < 1, 1 - b, 1)), 0.0))
        ok = (W > 0) & (b > 0) & (b < 1)
        ne = np.where(ok, ll / np.where(ok, H, 1.0), np.nan)
        # the linearized variance Σv·u²/W², u = g1(ℓ − LL) + g2(y − b), from the variance
        # weight's sums (v = w for frequency weights; binary labels: Σvy² = Σvy)
        linearized = weight_kind != "frequency" and "sw2_logloss" in totals
        names = (("sw2", "sw2_logloss", "sw2_logloss_sq", "sw2y", "sw2y_logloss") if linearized
                 else ("W", "sw_logloss", "sw_logloss_sq", "swy", "swy_logloss"))
        V, Vl, Vll, Vy, Vyl = (totals[c].to_numpy(float) for c in names)
        s_ll = Vll - 2 * ll * Vl + ll * ll * V
        s_ly = Vyl - b * Vl - ll * Vy + ll * b * V
        s_yy = Vy * (1 - 2 * b) + b * b * V
        dH = np.log(np.where(ok, (1 - b) / np.where(ok, b, 1.0), 1.0))
        g1, g2 = 1 / H, -ll * dH / H ** 2
        var = (g1 * g1 * s_ll + 2 * g1 * g2 * s_ly + g2 * g2 * s_yy) / (W * W)
        if weight_kind != "frequency" and not linearized and "sw2" in totals:
            # summaries without the variance weight's log-loss sums (stored ones): the rows'
            # covariance over Kish's effective size W²/Σw², as they allow
            var = var * totals["sw2"].to_numpy(float) / W
        half = stats.norm.isf((1 - confidence) / 2) * np.sqrt(np.maximum(var, 0.0))
    finite = ok & np.isfinite(ne)
    reason = _reason([(W <= 0, "no weight"), (n_inf > 0, "infinite log loss"),
                      (b <= 0, "no positives"), (b >= 1, "no negatives")])
    return totals.assign(normalized_entropy=ne, relative_information_gain=1 - ne, log_loss=ll,
                         base_rate=b, ci_lower=np.where(finite, ne - half, np.nan),
                         ci_upper=np.where(finite, ne + half, np.nan), n_infinite=n_inf,
                         reason=reason)


def calibration_ratio_finish(totals: pd.DataFrame, *, confidence: float = 0.95,
                             weight_kind: str = "frequency") -> pd.DataFrame:
    """The totals (or bins) with ``calibration_ratio`` = Σwp/Σwy, ``expected_positives``,
    ``observed_positives``, ``n_positive``, the score interval ``ci_lower``, ``ci_upper`` and
    ``reason``.

    ``totals`` carries ``W``, ``swy``, ``swp``, ``swpp`` = Σwp², ``ny`` (rows with y = 1;
    an unweighted summary leaves it out, Σwy counts them) and, for ``weight_kind="sampling"``,
    the null variance's terms under the variance weight ``sw2p`` = Σv₀p and ``sw2pp`` =
    Σ(2v₀ − v)p² (Σw²p and Σw²p² for sampling weights; an unweighted summary leaves them
    out: they equal Σwp, Σwp²). One row per table: the finish is vectorised over rows. See
    :func:`calibration_ratio`.

    Examples
    --------
    >>> t = pd.DataFrame({"n": [1000], "W": [1000.0], "swy": [25.0], "swp": [20.0],
    ...                   "swpp": [0.5]})
    >>> calibration_ratio_finish(t)[["calibration_ratio", "ci_lower", "ci_upper"]].round(4)
       calibration_ratio  ci_lower  ci_upper
    0                0.8    0.5467    1.1762
    """
    W = totals["W"].to_numpy(float)
    E, O = totals["swp"].to_numpy(float), totals["swy"].to_numpy(float)
    if weight_kind == "frequency" or "sw2p" not in totals:
        A, B = E, totals["swpp"].to_numpy(float)
    else:
        A, B = totals["sw2p"].to_numpy(float), totals["sw2pp"].to_numpy(float)
    z2 = stats.norm.isf((1 - confidence) / 2) ** 2
    # (O − Eθ)² = z²(Aθ − Bθ²), θ = 1/ρ: (E² + z²B)θ² − (2OE + z²A)θ + O² = 0; the roots in the
    # forms that do not cancel: ρ_hi = 1/θ_lo = (q + √d)/(2O²), ρ_lo = 1/θ_hi = 2a/(q + √d)
    a, q = E * E + z2 * B, 2 * O * E + z2 * A
    d = np.maximum(q * q - 4 * a * O * O, 0.0)
    root = q + np.sqrt(d)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(O > 0, E / np.where(O > 0, O, 1.0), np.nan)
        lower = np.where(root > 0, 2 * a / np.where(root > 0, root, 1.0), np.nan)
        upper = np.where(O > 0, root / (2 * np.where(O > 0, O * O, 1.0)), np.inf)
    lower = np.where(W > 0, np.minimum(lower, np.where(O > 0, ratio, np.inf)), np.nan)
    upper = np.where(W > 0, np.maximum(upper, np.where(O > 0, ratio, 0.0)), np.nan)
    positives = totals["ny"] if "ny" in totals else totals["swy"]
    reason = _reason([(W <= 0, "no weight"), (O <= 0, "no positives")])
    return totals.assign(calibration_ratio=ratio, expected_positives=E, observed_positives=O,
                         n_positive=np.rint(positives.to_numpy(float)).astype(np.int64),
                         ci_lower=lower, ci_upper=upper, reason=reason)


def _reason(cases: list) -> np.ndarray:
    """Per row, the text of the first true condition, None where none is."""
    out = np.full(len(cases[0][0]), None, dtype=object)
    for condition, text in reversed(cases):
        out[np.asarray(condition, bool)] = text
    return out


def _div(num, den):
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def _per_bin(src: Source, t: pd.DataFrame, columns: list, trust: dict, deciles: int
             ) -> pd.DataFrame:
    """The per-bin table of ``calibration_ratio(deciles=k)``: keys, bin and its edges, the
    ratio, n, W, the other columns, the trust columns, ``n_dropped``."""
    by = list(src.by)
    t = t.sort_values([*by, "bin"], ignore_index=True)
    b = t["bin"].to_numpy()
    inner = t[[f"e{k}" for k in range(1, deciles)]].to_numpy(float)
    full = np.column_stack([t["p_min"].to_numpy(float), inner, t["p_max"].to_numpy(float)])
    rows = np.arange(len(t))
    t["bin_lower"] = np.where(b == 0, t["p_min"], full[rows, b])
    t["bin_upper"] = np.where(b == deciles - 1, t["p_max"], full[rows, np.minimum(b + 1,
                                                                                 deciles)])
    out = t[[*by, "bin", "bin_lower", "bin_upper", columns[0], "n", "W", *columns[1:]]].copy()
    out["n"] = out["n"].astype(int)
    out["binning"] = f"quantile({deciles})"
    for name, value in trust.items():
        out[name] = value
    if src.dropped is not None:
        out = (out.merge(src.dropped[[*by, "n_dropped"]], on=by, how="left") if by
               else out.assign(n_dropped=int(src.dropped["n_dropped"].sum())))
    return src.present(out)


def _ne_needs(src: Source, weight_kind: str) -> list:
    sampling = variance_parts(src, weight_kind)
    return [declared.totals("logloss", "logloss_var", *sampling, *(("sw2y",) if sampling else ()))]


def _ratio_parts(src: Source, weight_kind: str, deciles: int | None = None) -> tuple:
    """Σwp² always (the frequency variance: with the moments in the totals, which sum Σwyp for
    the Brier score anyway; alone in the per-decile table's histograms, where Σwyp would be an
    aggregate more), the count of positive rows, and the variance weight's terms for sampling
    weights."""
    sampling = ("sw2p",) if variance_parts(src, weight_kind) else ()
    return ("moments" if deciles is None else "pp", "ny", *sampling)


def _ratio_needs(src: Source, o: dict) -> list:
    parts = _ratio_parts(src, o["weight_kind"], o.get("deciles"))
    if o.get("deciles") is None:
        return [declared.totals(*parts)]
    return logit_needs(src, summary_parts(src, "sums", *parts))


def _ratio_follow_up(src: Source, o: dict) -> list:
    if o.get("deciles") is None:
        return []
    return equal_mass_follow_up(src, o["deciles"],
                                _ratio_parts(src, o["weight_kind"], o["deciles"]), "quantile",
                                first="logit")
