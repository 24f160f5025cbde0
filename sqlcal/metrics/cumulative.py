"""Cumulative-residual metrics: the cutoff calibration error with its confidence bounds, and the
Kolmogorov–Smirnov and Kuiper tests. All read one summary: the extremes of the running residual sum
S_k = Σ_{j≤k} Σ_{p_i = u_j} w_i (y_i − p_i) over the distinct scores u_1 < … < u_K, with S_0 = 0.

Sign convention: S rises where more positives occur than the scores predict (under-prediction)
and falls where fewer occur (over-prediction).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd
from scipy import stats

from sqlcal.inputs.sources import Source
from sqlcal.metrics import Grouped, resolve_weight_kind, result, safe_div, statistic, variance_parts
from sqlcal.metrics._registry import Report, metric
from sqlcal.metrics.cells import CELLS, cell_ranges, cells_needs, zoom_factor
from sqlcal.metrics.intervals import REPLICATES, SEED, interval_parts, walk_interval
from sqlcal.options import Option, checked, costs_cells, costs_cutoff
from sqlcal.query import declared, executor, planner
from sqlcal.query.executor import as_source

#: E[range of standard Brownian motion on [0, 1]] = 2·sqrt(2/π): the calibrated model's expected
#: cutoff error in units of sigma (Gao, Parameswaran & Peng, §2.4)
NOISE_FLOOR_FACTOR = 2 * np.sqrt(2 / np.pi)
#: how the extremes are computed: the exact segmented scan, or the score grid and its bound
METHODS = ("exact", "grid")
#: the exact extremes zoom into the candidate cells (a GROUP BY over their rows) while those
#: hold more rows than this, so the window that resolves them sorts fewer rows. At 10^7 rows
#: (10 groups, DuckDB) the candidates hold 10^6 rows, a zoom leaves 1.3·10^5: the cutoff error
#: costs the same CPU (1.50-1.61 s against 1.59-1.66 s) and 30 MB less memory; the window
#: grows faster than the rows, so larger tables gain more
WINDOW_ROWS = 500_000
#: what the three extremes of the running residual declare alike: the score-cell histogram,
#: then (exact) the follow-ups into the cells holding an extreme; exported in the grid form
_EXTREMES = dict(
    needs=lambda src, o: _extremes_needs(src, o["cells"], o["weight_kind"]),
    follow_up=lambda src, o: extremes_follow_up(src, _exact(o["method"]), o["cells"],
                                                o["weight_kind"]),
    refining={("method", "exact"): "method='grid' (the grid form, with its certified grid_bound)"},
    one_shot={"method": "grid"}, cost=costs_cells,
    options={"method": Option("choice", "the exact extremes (a second pass) or the score grid's "
                              "lower bound and its grid_bound", choices=METHODS,
                              renamed=(("cells", "grid"), ("levels", "exact")))})


@metric(**{**_EXTREMES, "cost": costs_cutoff,
           "needs": lambda src, o: _cutoff_needs(src, o["cells"], o["weight_kind"],
                                                 o["bootstrap"])},
        report={"cutoff_error": Report({"cutoff_error": "cutoff_error",
                                        "lower_bound": "cutoff_lower",
                                        "upper_bound": "cutoff_upper",
                                        "ci_lower": "cutoff_error_lower",
                                        "ci_upper": "cutoff_error_upper"})},
        trust={"exact": "exact", "grid_bound": "cutoff_grid_bound",
               "confidence": "cutoff_confidence", "ci_method": None,
               "weight_kind": "weight_kind"})
@checked
def cutoff_error(
    data: Any,
    *,
    score: str | None = None,
    label: str | None = None,
    weight: str | None = None,
    by: str | Sequence[str] = (),
    where: Any = None,
    method: str = "exact",
    cells: int | None = None,
    confidence: float = 0.9,
    epsilon: float | None = None,
    bootstrap: int = REPLICATES,
    seed: int = SEED,
    weight_kind: str = "auto",
    **source_options: Any,
) -> pd.DataFrame:
    r"""The cutoff calibration error: the largest weighted residual mass over any score interval.

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
    method : {"exact", "grid"}, default "exact"
        ``"exact"``: the exact segmented scan (a window per score cell and group). ``"grid"``
        quantises scores to ``cells`` grid cells and needs only a GROUP BY; the value is then a
        lower bound, and ``grid_bound`` says how much higher the exact value can be.
    cells : int, optional
        Number of score cells, a power of two (default 1024). Exact mode gives the same answer
        for any value; more cells make the first pass larger and the second smaller. In grid mode
        more cells tighten ``grid_bound``.
    confidence : float, default 0.9
        Confidence level of [``lower_bound``, ``upper_bound``] (each bound alone fails with
        probability δ = (1 − confidence)/2) and of [``ci_lower``, ``ci_upper``].
    epsilon : float, optional
        A tolerance to certify: adds ``certified_within`` (upper bound ≤ ε: calibrated within ε
        with confidence 1 − δ) and ``certified_beyond`` (lower bound > ε: not calibrated within ε).
    bootstrap : int, default 1000
        Replicates of the interval [``ci_lower``, ``ci_upper``] (0: no interval, and no second
        moments in the scan).
    seed : int, default 20260101
        Seed of the replicates' draws (the same interval on every run and engine).
    weight_kind : {"auto", "frequency", "sampling"}, default "auto"
        ``"auto"`` reads whole-number weights as frequencies and any others as sampling weights.
        Frequency weights count rows, so the bounds use n = W. Sampling weights use Kish's
        effective size W²/Σw², a heuristic: the bounds are not proven for them; the interval
        carries their variance through the variance weight (w², or w/r under
        ``negative_sampling_rate``).
    **source_options
        Further options of :func:`sqlcal.source`, such as ``table=``, ``on_invalid=`` and
        ``soft_labels=``.

    Returns
    -------
    pandas.DataFrame
        One row per group: the keys, ``cutoff_error``, ``n``, ``W``, ``lower_bound``,
        ``upper_bound``, ``noise_floor`` (expected value for a perfectly calibrated model with these
        scores), ``excursion_above`` = max(0, max S)/W, ``excursion_below`` = −min(0, min S)/W,
        ``interval_lower`` (exclusive; −inf when the worst interval starts at the lowest score),
        ``interval_upper`` (inclusive), ``interval_gap`` (signed residual mass there over W: > 0
        under-prediction, < 0 over-prediction), ``grid_bound`` (0 when exact), ``ci_lower``,
        ``ci_upper`` (the interval of the population's cutoff error at ``confidence``: a
        bootstrap of the running sum, see Notes; NaN without ``bootstrap``), and with
        ``epsilon``, ``certified_within`` and ``certified_beyond``; then ``exact`` (False for
        the grid's lower bound, ``method="grid"``), ``confidence`` (the level of
        [``lower_bound``, ``upper_bound``], each bound alone holding with 1 − δ, and of
        [``ci_lower``, ``ci_upper``]), ``ci_method`` (``"bootstrap"``, or None),
        ``weight_kind`` (``"frequency"`` or ``"sampling"``: the n of the bounds, ``"auto"``
        resolved); with ``on_invalid="drop"``, ``n_dropped``.

    See Also
    --------
    kuiper : the same running-sum range, scaled into a test with a p-value.
    ece : the binned error, which depends on the bins chosen.
    sqlcal.plots.cumulative_plot : draws the running sum whose range this is.
    expected_cost : bounds the cost of interval decision rules with this error.

    Notes
    -----
    The cutoff calibration error of Rossellini, Soloff, Barber, Ren & Willett (2025), Can a
    calibration metric be both testable and actionable? (Def. 2.1 and Prop. 4.1), which is the
    empirical measure :math:`c_{emp}` of Gao, Parameswaran & Peng (2017), On the interpretability of
    conditional probability estimates in the agnostic setting, and Tygert's Kuiper range over W:

    .. math:: \widehat\Delta = \sup_I \Big|\sum_i w_i (y_i - p_i) 1\{p_i \in I\}\Big| / W
       = \big(\max(0, \max_k S_k) - \min(0, \min_k S_k)\big) / W .

    Ties are one unit: an interval holds all rows of a score or none.

    Bounds, for a fixed model evaluated on held-out i.i.d. rows, each holding with probability
    at least 1 − δ:

    - upper: :math:`\widehat\Delta + \sqrt{2\ln(1/\delta)/n}`, one-sided Hoeffding at the
      population's worst interval (residuals lie in [−1, 1]); this corrects the factor 2 in Claim 4
      of Gao et al. (2017), whose Hoeffding slack assumes residuals of range 1;
    - lower: :math:`\widehat\Delta - (20 + \sqrt{2\ln(1/\delta)})/\sqrt n` (Rossellini et al.
      Prop. 4.1). It is vacuous (0) below about n = 504/ε² rows; the constant is a worst case.

    Both are clipped to [0, 1]. Each holds with probability 1 − δ, so [lower, upper] is a 1 − 2δ
    interval (pass δ/2 for a 1 − δ one). They do not hold for a model fitted or recalibrated on
    the same rows, nor under drift; for simultaneous statements over G groups use δ/G.

    The bounds are certified (finite-sample, worst case) and wide: the lower one is 0 below
    about 504/ε² rows. [``ci_lower``, ``ci_upper``] is an asymptotic interval of the population
    value :math:`\Delta = \sup_I |E[w(y - p)1\{p \in I\}]|/E[w]` from the score cells the
    metric already reads (a Gaussian multiplier draw of each cell's residual sum and weight,
    with the covariance of a Poisson bootstrap of its rows; no extra scan): its lower end
    follows the directional derivative of the range at the walk's estimated extreme sets
    (Fang & Santos 2019), so a calibrated model's interval reaches 0 despite the plug-in
    value's upward bias; its upper end, the linearization at the estimate's own extremes.
    Inside a cell the walk is drawn as a Brownian bridge (a cell of one score has no
    interior). See :func:`sqlcal.metrics.intervals.walk_interval` for the method and its
    coverage.

    Double-precision running sums: the error of S is at most about n·2⁻⁵³ times Σw|y − p| (worst
    case), so the cutoff error's error is below n·1.1e-16; it stays under a calibrated model's
    noise floor (about 0.8/√n) up to about 3·10¹⁰ rows per group.

    References
    ----------
    .. [1] R. Rossellini, J. A. Soloff, R. Foygel Barber, Z. Ren and R. Willett, "Can a Calibration
       Metric Be Both Testable and Actionable?", arXiv:2502.19851, 2025.
    .. [2] Y. Gao, A. Parameswaran and J. Peng, "On the Interpretability of Conditional Probability
       Estimates in the Agnostic Setting", AISTATS (PMLR 54), 2017.
    .. [3] I. Arrieta-Ibarra, P. Gujral, J. Tannen, M. Tygert and C. Xu, "Metrics of Calibration for
       Probabilistic Predictions", Journal of Machine Learning Research 23(351), 2022.
    .. [4] Z. Fang and A. Santos, "Inference on Directionally Differentiable Functions", Review
       of Economic Studies 86(1), 2019.
    .. [5] V. Chernozhukov, D. Chetverikov and K. Kato, "Gaussian Approximations and Multiplier
       Bootstrap for Maxima of Sums of High-Dimensional Random Vectors", Annals of Statistics
       41(6), 2013.
    .. [6] N. Chamandy, O. Muralidharan, A. Najmi and S. Naidu, "Estimating Uncertainty for
       Massive Data Streams", Google technical report, 2012.
    .. [7] D. W. K. Andrews and G. Soares, "Inference for Parameters Defined by Moment
       Inequalities Using Generalized Moment Selection", Econometrica 78(1), 2010.

    Examples
    --------
    >>> import pandas as pd, sqlcal
    >>> df = pd.DataFrame({"p": [0.2, 0.2, 0.8, 0.8], "y": [1, 0, 0, 0]})
    >>> round(float(sqlcal.cutoff_error(df, score="p", label="y").cutoff_error.iloc[0]), 12)
    0.4
    >>> df = pd.DataFrame({"p": [0.1, 0.2, 0.3, 0.4, 0.6, 0.7, 0.8, 0.9],
    ...                    "y": [0, 0, 1, 0, 1, 0, 1, 1]})
    >>> sqlcal.cutoff_error(df, score="p", label="y").round(6).iloc[0]
    cutoff_error          0.0875
    n                          8
    W                        8.0
    lower_bound              0.0
    upper_bound         0.952909
    noise_floor         0.236017
    excursion_above         0.05
    excursion_below       0.0375
    interval_lower           0.2
    interval_upper           0.3
    interval_gap          0.0875
    grid_bound               0.0
    ci_lower                 0.0
    ci_upper            0.226187
    exact                   True
    confidence               0.9
    ci_method          bootstrap
    weight_kind        frequency
    Name: 0, dtype: object
    """
    exact = _exact(method)
    delta = (1 - confidence) / 2  # each one-sided bound's failure probability
    src = as_source(data, score, label, weight=weight, by=by, where=where, **source_options)
    # the histogram with the interval's sums first: the extremes' first read is served by it
    histogram = planner.fetch(src, _cutoff_needs(src, cells, weight_kind, bootstrap)[0])
    t = _extremes(src, exact, cells, weight_kind)
    weight_kind = resolve_weight_kind(src, weight_kind)
    t = cutoff_finish(t, delta=delta, epsilon=epsilon, weight_kind=weight_kind,
                      weighted=src.weighted)
    on = bootstrap > 0
    t["ci_lower"], t["ci_upper"] = np.nan, np.nan
    if on:
        ci = walk_interval(histogram, t, by=src.by, grid=_checked_cells(cells),
                           confidence=confidence, replicates=bootstrap, seed=seed,
                           weight_kind=weight_kind)
        t["ci_lower"], t["ci_upper"] = ci["ci_lower"].to_numpy(), ci["ci_upper"].to_numpy()
    columns = ["cutoff_error", "lower_bound", "upper_bound", "noise_floor", "excursion_above",
               "excursion_below", "interval_lower", "interval_upper", "interval_gap",
               "grid_bound", "ci_lower", "ci_upper"]
    if epsilon is not None:
        columns += ["certified_within", "certified_beyond"]
    return result(src, t, columns, {"exact": exact, "confidence": confidence,
                                    "ci_method": "bootstrap" if on else None,
                                    "weight_kind": weight_kind})


@metric(**_EXTREMES, report={"kuiper": Report({"kuiper": "kuiper", "p_value": "kuiper_p"})},
        trust={"exact": "exact", "grid_bound": "kuiper_grid_bound", "weight_kind": "weight_kind"})
@checked
def kuiper(
    data: Any,
    *,
    score: str | None = None,
    label: str | None = None,
    weight: str | None = None,
    by: str | Sequence[str] = (),
    where: Any = None,
    method: str = "exact",
    cells: int | None = None,
    weight_kind: str = "auto",
    **source_options: Any,
) -> pd.DataFrame:
    r"""Kuiper's test of calibration on cumulative differences.

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
    method : {"exact", "grid"}, default "exact"
        As for :func:`cutoff_error`: ``"grid"`` reads the score cells only and reports
        ``grid_bound``.
    cells : int, optional
        Number of score cells, a power of two (default 1024), as in :func:`cutoff_error`.
    weight_kind : {"auto", "frequency", "sampling"}, default "auto"
        ``"auto"`` reads whole-number weights as frequencies and any others as sampling weights.
        Null variance of S: :math:`\sum w p(1-p)` (a row of weight w is w Bernoulli trials) or
        :math:`\sum w^2 p(1-p)` (Tygert's weighted normalisation, as MCGrad's ``ecce_sigma``).
    **source_options
        Further options of :func:`sqlcal.source`, such as ``table=``, ``on_invalid=`` and
        ``soft_labels=``.

    Returns
    -------
    pandas.DataFrame
        One row per group: the keys, ``kuiper`` (the statistic), ``n``, ``W``, ``p_value``,
        ``null_sd`` (the null standard deviation of S_K over W), ``grid_bound`` (in statistic
        units; 0 when exact), ``exact`` (False with ``method="grid"``), ``weight_kind``
        (``"frequency"`` or ``"sampling"``: the null variance used, ``"auto"`` resolved); with
        ``on_invalid="drop"``, ``n_dropped``.

    See Also
    --------
    ks : the test on the running sum's largest absolute value.
    cutoff_error : the same range over W, as an error with bounds.
    spiegelhalter : a test of the Brier score against calibration.
    sqlcal.plots.cumulative_plot : draws the running sum.

    Notes
    -----
    Arrieta-Ibarra, Gujral, Tannen, Tygert & Xu (2022), Metrics of calibration for probabilistic
    predictions (JMLR 23):
    :math:`V = (\max_{0\le k\le K} S_k - \min_{0\le k\le K} S_k) / \sqrt{\sum w p(1-p)}`, the range
    including the origin S₀ = 0. Under perfect calibration, given the scores, V converges to the
    range of standard Brownian motion on [0, 1], whose survival function is
    :math:`8\sum_{k\ge1}(-1)^{k-1} k\,\bar\Phi(kv)` (Feller 1951; integrated from its density).
    The p-value is that tail, in [0, 1]. Ties are one unit (scores are grouped, never jittered).

    References
    ----------
    .. [1] I. Arrieta-Ibarra, P. Gujral, J. Tannen, M. Tygert and C. Xu, "Metrics of Calibration for
       Probabilistic Predictions", Journal of Machine Learning Research 23(351), 2022.
    .. [2] W. Feller, "The Asymptotic Distribution of the Range of Sums of Independent Random
       Variables", Annals of Mathematical Statistics 22(3), 1951.

    Examples
    --------
    >>> import pandas as pd, sqlcal
    >>> df = pd.DataFrame({"p": [0.1, 0.2, 0.3, 0.4, 0.6, 0.7, 0.8, 0.9],
    ...                    "y": [0, 0, 1, 0, 1, 0, 1, 1]})
    >>> sqlcal.kuiper(df, score="p", label="y").round(6)
         kuiper  n    W   p_value   null_sd  grid_bound  exact weight_kind
    0  0.591608  8  8.0  0.999982  0.147902         0.0   True   frequency
    """
    return _brownian_test(data, "kuiper", score, label, weight, by, where, method, cells,
                          weight_kind, source_options)


@metric(**_EXTREMES, report={"ks": Report({"ks": "ks", "p_value": "ks_p"})},
        trust={"exact": "exact", "grid_bound": "ks_grid_bound", "weight_kind": "weight_kind"})
@checked
def ks(
    data: Any,
    *,
    score: str | None = None,
    label: str | None = None,
    weight: str | None = None,
    by: str | Sequence[str] = (),
    where: Any = None,
    method: str = "exact",
    cells: int | None = None,
    weight_kind: str = "auto",
    **source_options: Any,
) -> pd.DataFrame:
    r"""Kolmogorov–Smirnov test of calibration on cumulative differences.

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
    method : {"exact", "grid"}, default "exact"
        As for :func:`cutoff_error`: ``"grid"`` reads the score cells only and reports
        ``grid_bound``.
    cells : int, optional
        Number of score cells, a power of two (default 1024), as in :func:`cutoff_error`.
    weight_kind : {"auto", "frequency", "sampling"}, default "auto"
        ``"auto"`` reads whole-number weights as frequencies and any others as sampling weights.
        Null variance of S: :math:`\sum w p(1-p)` (a row of weight w is w Bernoulli trials) or
        :math:`\sum w^2 p(1-p)` (Tygert's weighted normalisation, as MCGrad's ``ecce_sigma``).
    **source_options
        Further options of :func:`sqlcal.source`, such as ``table=``, ``on_invalid=`` and
        ``soft_labels=``.

    Returns
    -------
    pandas.DataFrame
        One row per group: the keys, ``ks`` (the statistic), ``n``, ``W``, ``p_value``, ``null_sd``
        (the null standard deviation of S_K over W), ``grid_bound`` (in statistic units; 0 when
        exact), ``exact`` (False with ``method="grid"``), ``weight_kind`` (``"frequency"`` or
        ``"sampling"``: the null variance used, ``"auto"`` resolved); with
        ``on_invalid="drop"``, ``n_dropped``.

    See Also
    --------
    kuiper : the test on the range of the running sum, origin included.
    cutoff_error : the same running sum as an error with bounds, not a test.
    sqlcal.plots.cumulative_plot : draws the running sum.

    Notes
    -----
    :math:`D = \max_k |S_k| / \sqrt{\sum w p(1-p)}`; under perfect calibration it converges to
    :math:`\sup_{t\le1}|B_t|` of standard Brownian motion, whose survival function is
    :math:`4\sum_{k\ge0}(-1)^k\bar\Phi((2k+1)x)` (reflection principle). Computed with the
    normal tail directly, so large statistics give tiny p-values (down to the smallest double,
    then 0), never negative ones (MAPIE's 1 − CDF can go below 0). The test on cumulative
    differences is from Arrieta-Ibarra, Gujral, Tannen, Tygert & Xu (2022), Metrics of calibration
    for probabilistic predictions.

    References
    ----------
    .. [1] I. Arrieta-Ibarra, P. Gujral, J. Tannen, M. Tygert and C. Xu, "Metrics of Calibration for
       Probabilistic Predictions", Journal of Machine Learning Research 23(351), 2022.

    Examples
    --------
    >>> import pandas as pd, sqlcal
    >>> df = pd.DataFrame({"p": [0.1, 0.2, 0.3, 0.4, 0.6, 0.7, 0.8, 0.9],
    ...                    "y": [0, 0, 1, 0, 1, 0, 1, 1]})
    >>> sqlcal.ks(df, score="p", label="y").round(6)
             ks  n    W   p_value   null_sd  grid_bound  exact weight_kind
    0  0.338062  8  8.0  0.999974  0.147902         0.0   True   frequency
    """
    return _brownian_test(data, "ks", score, label, weight, by, where, method, cells,
                          weight_kind, source_options)


# -- the Brownian-motion distributions --------------------------------------------------------


def kuiper_sf(v) -> np.ndarray:
    """P(range of standard Brownian motion on [0, 1] ≥ v): 8 Σ_{k≥1} (−1)^{k−1} k Φ̄(kv)."""
    return _alternating_tail(v, lambda k, x: 8 * (-1.0) ** (k - 1) * k * stats.norm.sf(k * x), 1)


def ks_sf(x) -> np.ndarray:
    """P(sup_{t≤1} |B_t| ≥ x) for standard Brownian motion: 4 Σ_{k≥0} (−1)^k Φ̄((2k+1)x)."""
    return _alternating_tail(x, lambda k, z: 4 * (-1.0) ** k * stats.norm.sf((2 * k + 1) * z), 0)


def _alternating_tail(x, term, first: int) -> np.ndarray:
    x = np.atleast_1d(np.asarray(x, float))
    out = np.full(x.shape, np.nan)
    # Below 0.1 both tails equal 1 to double precision (the CDFs are below e^-100).
    out[x < 0.1] = 1.0
    for i in np.flatnonzero(x >= 0.1):
        k = np.arange(first, first + int(np.ceil(40 / x[i])) + 2)  # Φ̄(40) < 1e-300
        out[i] = np.clip(term(k, x[i]).sum(), 0.0, 1.0)
    return out


# -- shared pieces ----------------------------------------------------------------------------


def _exact(method: str) -> bool:
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, not {method!r}")
    return method == "exact"


def _brownian_test(data, name, score, label, weight, by, where, method, cells, weight_kind,
                   source_options) -> pd.DataFrame:
    exact = _exact(method)
    src = as_source(data, score, label, weight=weight, by=by, where=where, **source_options)
    t = _extremes(src, exact, cells, weight_kind)
    weight_kind = resolve_weight_kind(src, weight_kind)
    executor.require_binary_labels(src, f"the {name} test")
    t = brownian_finish(t, name, weight_kind=weight_kind)
    return result(src, t, [name, "p_value", "null_sd", "grid_bound"],
                  {"exact": exact, "weight_kind": weight_kind})


# -- finishes: plain functions of the extremes table ------------------------------------------


def cutoff_finish(t: pd.DataFrame, *, delta: float = 0.05, epsilon: float | None = None,
                  weight_kind: str = "frequency", weighted: bool = False) -> pd.DataFrame:
    """The cutoff error, its bounds, noise floor and worst interval from the extremes table of
    :func:`extremes_finish` (one row per group; ``weight_kind`` resolved, ``weighted``: whether
    the rows carry a weight column)."""
    t = t.copy()
    W = t["W"].to_numpy(float)
    hi, lo = np.maximum(t["s_max"], 0.0), np.minimum(t["s_min"], 0.0)
    t["cutoff_error"] = safe_div(hi - lo, W)
    t["excursion_above"] = safe_div(hi, W)
    t["excursion_below"] = safe_div(-lo, W)
    n = _effective_n(weighted, t, weight_kind)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_term = np.sqrt(2 * np.log(1 / delta))
        upper = t["cutoff_error"] + t["grid_bound"] + np.sqrt(2 * np.log(1 / delta) / n)
        lower = t["cutoff_error"] - (20 + log_term) / np.sqrt(n)
    t["upper_bound"] = np.clip(upper, 0, 1)
    t["lower_bound"] = np.clip(lower, 0, 1)
    t["noise_floor"] = NOISE_FLOOR_FACTOR * _sigma(t, weight_kind)
    _worst_interval(t)
    if epsilon is not None:
        t["certified_within"] = t["upper_bound"] <= epsilon
        t["certified_beyond"] = t["lower_bound"] > epsilon
    return t


def brownian_finish(t: pd.DataFrame, name: str, *, weight_kind: str = "frequency"
                    ) -> pd.DataFrame:
    """The Kuiper (``name="kuiper"``) or Kolmogorov-Smirnov (``"ks"``) statistic, its p-value,
    sigma and grid bound in statistic units, from the extremes table of :func:`extremes_finish`."""
    t = t.copy()
    hi, lo = np.maximum(t["s_max"], 0.0), np.minimum(t["s_min"], 0.0)
    spread = hi - lo if name == "kuiper" else np.maximum(hi, -lo)
    sigma = _sigma(t, weight_kind)
    scale = sigma * t["W"].to_numpy(float)
    t[name] = statistic(spread, scale)
    sf = kuiper_sf if name == "kuiper" else ks_sf
    value = t[name].to_numpy(float)
    t["p_value"] = np.where(np.isnan(value), np.nan,
                            np.where(np.isinf(value), 0.0, sf(np.nan_to_num(value, posinf=0))))
    t["null_sd"] = sigma
    t["grid_bound"] = safe_div(t["grid_bound"] * t["W"], scale)
    return t


def _extremes(src: Source, exact: bool, cells: int | None, weight_kind: str) -> pd.DataFrame:
    """Per group: n, W, Σw², the Bernoulli variances, and the max and min of S over the distinct
    scores (``s_max``, ``s_min``, without S₀) with a score reaching each, and ``grid_bound``.

    The fine score histogram gives S at every cell end, and bounds S inside a cell by its start
    plus its positive (minus its negative) residual mass. Only cells whose bound beats the best
    cell end can hold the extreme. While those hold many rows, a 1024-fold finer histogram of
    them narrows the candidates (one GROUP BY over their rows); the exact segmented scan (a
    window partitioned by group and cell) then runs on the remaining candidate cells alone.
    Grid mode (``method="grid"``) stops after the first pass and reports how far the extremes can
    still move. The reads are :func:`extremes_walk`'s; the arithmetic :func:`extremes_finish`'s.
    """
    cells = _checked_cells(cells)
    walked = src.walks.get(("extremes", exact, cells, weight_kind))
    frame, scale, inside = walked or extremes_walk(src, exact, cells, weight_kind,
                                                   lambda summary: planner.fetch(src, summary))
    return extremes_finish(frame, inside, by=src.by)


def extremes_follow_up(src: Source, exact: bool, cells: int | None, weight_kind: str) -> list:
    """The next follow-up :func:`_extremes` reads that ``src`` does not hold ([] when none)."""
    cells = _checked_cells(cells)
    key = ("extremes", exact, cells, weight_kind)
    if key in src.walks:
        return []

    def walk(read):
        out = extremes_walk(src, exact, cells, weight_kind, read)
        # reached once every read is cached: the metrics (the cutoff error and Kuiper's test
        # share it) finish from it instead of walking the frames again (at 10^7 rows the
        # walk took a tenth of the report's CPU outside its queries, run four times)
        src.walks[key] = out
        return out

    return planner.follow_up(src, walk)


def extremes_walk(src: Source, exact: bool, cells: int, weight_kind: str, read):
    """The reads behind the extremes, each chosen from the frames before it: the score-cell
    histogram with residual sums; in exact mode, while the candidate cells hold more than
    :data:`WINDOW_ROWS` rows (and each zoom at least halves them), a finer histogram of the
    candidates (:func:`sqlcal.metrics.cells.zoom_factor`); then the running-sum extremes inside
    the remaining candidates. Returns
    the histogram (zoomed cells at ``scale``, the others renumbered to it), the scale, and the
    window's extremes (None when nothing is left to resolve)."""
    by = list(src.by)
    needs = _extremes_needs(src, cells, weight_kind)[0]
    frame = read(needs).sort_values([*by, "cell"], ignore_index=True)
    scale, inside = cells, None
    if not exact:
        return frame, scale, inside
    chosen = candidates(frame, by)
    rows = frame.loc[chosen, "n"].sum()
    while rows > WINDOW_ROWS and scale < 2**50:
        zoom = zoom_factor(rows / chosen.sum(), scale)
        fine = read(declared.cells_within(scale * zoom, cell_ranges(frame[chosen], by, scale),
                                          *needs.parts))
        coarse = frame[~chosen].assign(cell=frame.loc[~chosen, "cell"] * zoom)
        frame = pd.concat([coarse, fine[frame.columns.intersection(fine.columns)]],
                          ignore_index=True).sort_values([*by, "cell"], ignore_index=True)
        scale *= zoom
        chosen = candidates(frame, by)
        before, rows = rows, frame.loc[chosen, "n"].sum()
        if rows > before / 2:  # ties or dense scores: finer cells no longer split them
            break
    if chosen.any():
        inside = read(declared.extremes_within(scale, cell_ranges(frame[chosen], by, scale)))
    return frame, scale, inside


def candidates(cells: pd.DataFrame, by) -> np.ndarray:
    """Which cells (sorted by group and cell, with ``total``, ``positive``, ``negative``) can
    hold an extreme of S beyond the best cell end: S inside a cell lies between its start minus
    its negative and its start plus its positive residual mass."""
    up, down = _reach(cells, list(by))[:2]
    return (up | down).to_numpy()


def extremes_finish(cells: pd.DataFrame, inside: pd.DataFrame | None, *, by) -> pd.DataFrame:
    """Per group, the extremes of S from the score-cell histogram (``cells``: per group and cell
    ``n``, ``W``, ``total``, ``positive``, ``negative``, ``var``, ``p_max``, sorted or not) and
    the running-sum extremes inside the candidate cells (``inside``: per group and cell
    ``s_max``, ``s_min``, ``p_at_max``, ``p_at_min`` from the cell's start; None in grid mode,
    when ``grid_bound`` says how far the extremes can still move)."""
    by = list(by)
    c = cells.sort_values([*by, "cell"], ignore_index=True)
    up, down, offset, end_max, end_min = _reach(c, by)
    reach_up, reach_down = offset + c["positive"], offset - c["negative"]
    c["exact_max"], c["exact_min"] = c["s_end"], c["s_end"]
    c["p_at_max"], c["p_at_min"] = c["p_max"], c["p_max"]
    if inside is not None and (up | down).any():
        c = c.merge(inside.rename(columns={"s_max": "in_max", "s_min": "in_min",
                                           "p_at_max": "in_p_max", "p_at_min": "in_p_min"}),
                    on=[*by, "cell"], how="left")
        higher = up & (offset + c["in_max"] > c["s_end"])
        lower = down & (offset + c["in_min"] < c["s_end"])
        c.loc[higher, "exact_max"] = (offset + c["in_max"])[higher]
        c.loc[higher, "p_at_max"] = c.loc[higher, "in_p_max"]
        c.loc[lower, "exact_min"] = (offset + c["in_min"])[lower]
        c.loc[lower, "p_at_min"] = c.loc[lower, "in_p_min"]
        up[:], down[:] = False, False
    c["slack_up"] = np.where(up, reach_up - end_max, 0.0)
    c["slack_down"] = np.where(down, end_min - reach_down, 0.0)
    # every group at once: sums by group number, and each group's first row at its extreme
    g = Grouped(c, by)
    top = _first_extreme(g.codes, c["exact_max"].to_numpy(float), largest=True)
    bottom = _first_extreme(g.codes, c["exact_min"].to_numpy(float), largest=False)
    t = g.table(g.sum(c["n"]), g.sum(c["W"]), sw2=g.sum(c.get("sw2", c["W"])),
                sw_pq=g.sum(c["var"]), sw2_pq=g.sum(c.get("var2", c["var"])),
                s_max=c["exact_max"].to_numpy(float)[top],
                s_min=c["exact_min"].to_numpy(float)[bottom],
                p_at_max=c["p_at_max"].to_numpy()[top], p_at_min=c["p_at_min"].to_numpy()[bottom],
                grid_slack=g.max(c["slack_up"]) + g.max(c["slack_down"]))
    t["grid_bound"] = safe_div(t["grid_slack"], t["W"])
    return t


def _first_extreme(codes: np.ndarray, values: np.ndarray, largest: bool) -> np.ndarray:
    """Per group number, the first row holding the group's largest (smallest) value, as
    ``idxmax`` (``idxmin``) would pick it; NaN values are skipped as pandas does."""
    key = np.where(np.isnan(values), np.inf, -values if largest else values)
    order = np.lexsort((key, codes))  # stable: ties keep the rows' order
    first = np.r_[True, codes[order][1:] != codes[order][:-1]]
    out = np.empty(codes.max() + 1 if len(codes) else 0, dtype=np.int64)
    out[codes[order][first]] = order[first]
    return out


def _reach(c: pd.DataFrame, by: list):
    """On ``c`` (sorted by group and cell), S at each cell end (``c["s_end"]``, added), and per
    cell: whether its bound beats the group's best end upwards or downwards (S₀ = 0 counts),
    its start, and the group's best ends."""
    g = c.groupby(by, dropna=False, sort=False) if by else None
    c["s_end"] = g["total"].cumsum() if by else c["total"].cumsum()
    best = (lambda v, how: v.groupby([c[k] for k in by], dropna=False).transform(how)) if by \
        else (lambda v, how: pd.Series(getattr(v, how)(), index=v.index))
    offset = c["s_end"] - c["total"]
    end_max = np.maximum(best(c["s_end"], "max"), 0.0)  # S₀ = 0 is a candidate too
    end_min = np.minimum(best(c["s_end"], "min"), 0.0)
    up = offset + c["positive"] > end_max
    down = offset - c["negative"] < end_min
    return up, down, offset, end_max, end_min


def _checked_cells(cells: int | None) -> int:
    cells = cells or CELLS
    if cells < 1 or cells & (cells - 1):
        raise ValueError(f"cells must be a power of two, not {cells!r}")
    return cells


def _effective_n(weighted: bool, t: pd.DataFrame, weight_kind: str) -> np.ndarray:
    W = t["W"].to_numpy(float)
    if weight_kind == "frequency" or not weighted:
        return W
    return safe_div(W**2, t["sw2"])


def _sigma(t: pd.DataFrame, weight_kind: str) -> np.ndarray:
    var = t["sw_pq"] if weight_kind == "frequency" else t["sw2_pq"]
    return safe_div(np.sqrt(var.to_numpy(float)), t["W"])


def _worst_interval(t: pd.DataFrame) -> None:
    # The origin S₀ = 0 sits before every score: where the extreme is the origin, the interval
    # starts below the lowest score (−inf, exclusive).
    at_max = np.where(t["s_max"] > 0, t["p_at_max"], -np.inf)
    at_min = np.where(t["s_min"] < 0, t["p_at_min"], -np.inf)
    rising = at_min < at_max  # the minimum comes first: S rises, under-prediction
    t["interval_lower"] = np.where(rising, at_min, at_max)
    t["interval_upper"] = np.where(rising, at_max, at_min)
    t["interval_gap"] = np.where(rising, 1.0, -1.0) * t["cutoff_error"]
    # below 1e-12 the value is rounding noise (a constant predictor at the mean rate): no interval
    empty = ~(t["cutoff_error"] > 1e-12)
    t.loc[empty, ["interval_lower", "interval_upper", "interval_gap"]] = np.nan


def _cutoff_needs(src: Source, cells: int | None, weight_kind: str, bootstrap: int) -> list:
    """The histogram :func:`_extremes` starts from, with the interval's sums when it is
    drawn: Σwy, Σwp, each cell's least score, and the second moments of
    :func:`sqlcal.metrics.intervals.walk_interval`."""
    extra = ("sums", *interval_parts(src, weight_kind, True)) if (bootstrap or 0) > 0 else ()
    return cells_needs(src, ("residuals", *variance_parts(src, weight_kind), *extra), cells)


def _extremes_needs(src: Source, cells: int | None, weight_kind: str) -> list:
    """The score-cell histogram with residual sums that :func:`_extremes` starts from."""
    return cells_needs(src, ("residuals", *variance_parts(src, weight_kind)), cells)
