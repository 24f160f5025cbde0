"""Diagrams (matplotlib, the ``plot`` extra): the binned reliability diagram and the
cumulative-difference plot. Each draws from a summary, never from the rows."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd

from sqlcal.inputs.groupkeys import VALUE, GroupKeys, Key, group_id, key_value
from sqlcal.inputs.sources import Source
from sqlcal.metrics import groups
from sqlcal.metrics.binned import reliability
from sqlcal.metrics.cells import cells_summary
from sqlcal.metrics.smooth import smooth_ece, smooth_reliability
from sqlcal.metrics.tce import tce_bins
from sqlcal.options import checked, costs_cells, costs_smooth, declare
from sqlcal.query.executor import as_source

#: below this base rate the reliability diagram's axes are in log-odds (scale="auto")
LOW_BASE_RATE = 0.05


def reliability_diagram(
    data: Any,
    *,
    score: str | None = None,
    label: str | None = None,
    weight: str | None = None,
    by: str | Sequence[str] = (),
    where: Any = None,
    bins: int = 15,
    strategy: str = "uniform",
    group: dict | None = None,
    ax=None,
    scale: str = "auto",
    **options: Any,
):
    r"""The binned reliability diagram: observed rate against mean score per bin, per group.

    Each bin's point carries its confidence interval, and the share of weight per bin is drawn
    underneath.

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
        Group keys: one curve per group.
    where : ibis boolean expression, callable or SQL string, optional
        Filter applied in the engine before anything else.
    bins : int, default 15
        Number of bins.
    strategy : {"uniform", "quantile", "uncertainty_calibration", "logit"}, default "uniform"
        Equal-width, equal-mass or log-odds bins, as in :func:`sqlcal.reliability`.
    group : dict, optional
        Keys → values: draw that group only, from the summary of all of them (cached on a
        :class:`sqlcal.Source`, so a diagram per group costs no further pass).
    ax : matplotlib Axes, optional
        Where to draw; by default a new figure.
    scale : {"auto", "linear", "logit"}, default "auto"
        Both axes in probability, or in log-odds (matplotlib's logit scale: a score of 1e-3
        and one of 1e-2 are as far apart as 0.1 and 0.5 nearly are); ``"auto"`` takes log-odds
        when the drawn rows' base rate is below 5%. Bins whose observed rate is 0 or 1 have no
        log-odds and are left out of that diagram.
    **options
        Further options of :func:`sqlcal.reliability` (``ci``, ``confidence``, ``weight_kind``,
        ``convention``) and of :func:`sqlcal.source`.

    Returns
    -------
    matplotlib.axes.Axes
        The Axes drawn on.

    See Also
    --------
    sqlcal.reliability : the table drawn.
    smooth_reliability_diagram : a kernel curve with no bins.
    tce_diagram : each bin's test of its predictions.
    cumulative_plot : the running residual sum, with no bins.

    Notes
    -----
    The points are the table of :func:`sqlcal.reliability`: per bin, the mean score
    :math:`\bar p_k` and the observed rate :math:`\bar y_k`; the diagram is that of DeGroot &
    Fienberg (1983), The Comparison and Evaluation of Forecasters.

    References
    ----------
    .. [1] M. H. DeGroot and S. E. Fienberg, "The Comparison and Evaluation of Forecasters", Journal
       of the Royal Statistical Society, Series D (The Statistician) 32(1-2), 1983.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")  # no window: draw off screen
    >>> import pandas as pd, sqlcal.plots
    >>> df = pd.DataFrame({"p": [0.1, 0.2, 0.3, 0.4, 0.6, 0.7, 0.8, 0.9],
    ...                    "y": [0, 0, 1, 0, 1, 0, 1, 1]})
    >>> ax = sqlcal.plots.reliability_diagram(df, score="p", label="y", bins=2)
    >>> ax.get_title()
    'Reliability (uniform bins, B = 2)'
    """
    plt = _pyplot()
    table = reliability(data, score=score, label=label, weight=weight, by=by, where=where,
                        bins=bins, strategy=strategy, **options)
    table, keys = _keyed(table, data, by)
    table = _only(table, _shown(table, keys), group)
    if scale not in ("auto", "linear", "logit"):
        raise ValueError(f"scale must be 'auto', 'linear' or 'logit', not {scale!r}")
    base_rate = float((table["observed"] * table["W"]).sum() / table["W"].sum())
    logit = scale == "logit" or (scale == "auto" and base_rate < LOW_BASE_RATE)
    if ax is None:
        _, ax = plt.subplots(figsize=(5.5, 5.5))
    diagonal = np.array([1e-9, 1 - 1e-9]) if logit else np.array([0.0, 1.0])
    ax.plot(diagonal, diagonal, color="0.6", lw=1, ls="--", label="calibrated")
    hist = ax.inset_axes([0.0, 0.0, 1.0, 0.18], sharex=ax)
    for key, part in groups(table, list(keys.columns)):
        name = _name(key.values())
        err = np.vstack([part["observed"] - part["ci_lower"], part["ci_upper"] - part["observed"]])
        line = ax.errorbar(part["mean_score"], part["observed"],
                           yerr=None if np.isnan(err).all() else err, marker="o", ms=4,
                           capsize=2, lw=1.2, label=name)
        share = part["W"] / part["W"].sum()
        if logit:  # each bar spans its bin: widths in probability units mean nothing here
            hist.bar(part["bin_lower"], share, width=part["bin_upper"] - part["bin_lower"],
                     align="edge", alpha=0.35, color=line[0].get_color())
        else:
            hist.bar(part["mean_score"], share, width=0.8 / bins, alpha=0.35,
                     color=line[0].get_color())
    hist.set_ylim(0, max(hist.get_ylim()[1] * 4, 0.01))
    hist.axis("off")
    if logit:
        lo = max(float(table["bin_lower"].min()), 1e-9)
        hi = min(float(table["bin_upper"].max()), 1 - 1e-9)
        lo, hi = lo / 1.5, 1 - (1 - hi) / 1.5  # a margin on each side, in log-odds
        ax.set_xscale("logit")
        ax.set_yscale("logit")
        ax.set(xlim=(lo, hi), ylim=(lo, hi))
    else:
        ax.set(xlim=(0, 1), ylim=(0, 1))
    ax.set(xlabel="mean score in bin" + (" (log-odds axis)" if logit else ""),
           ylabel="observed rate", title=f"Reliability ({strategy} bins, B = {bins})")
    ax.legend(loc="upper left", fontsize="small")
    return ax


declare("smooth_reliability_diagram", cost=costs_smooth)


@checked
def smooth_reliability_diagram(
    data: Any,
    *,
    score: str | None = None,
    label: str | None = None,
    weight: str | None = None,
    by: str | Sequence[str] = (),
    where: Any = None,
    sigma: float | None = None,
    ax=None,
    **source_options: Any,
):
    r"""The smoothed reliability diagram: the kernel estimate of E[y | p], one curve per group.

    The curve is drawn with a band whose width follows the score density, and each group's smooth
    ECE in the legend.

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
        Group keys: one curve per group.
    where : ibis boolean expression, callable or SQL string, optional
        Filter applied in the engine before anything else.
    sigma : float, optional
        Kernel bandwidth in probability units; by default the fixed point σ* of
        :func:`sqlcal.smooth_ece`.
    ax : matplotlib Axes, optional
        Where to draw; by default a new figure.
    **source_options
        Further options of :func:`sqlcal.source`, such as ``table=``, ``on_invalid=`` and
        ``soft_labels=``.

    Returns
    -------
    matplotlib.axes.Axes
        The Axes drawn on.

    See Also
    --------
    sqlcal.smooth_reliability : the curve drawn.
    reliability_diagram : the binned diagram, with intervals.
    cumulative_plot : the running residual sum.

    Notes
    -----
    The curve is :func:`sqlcal.smooth_reliability`,
    :math:`\hat y(t) = \sum_i w_i K_\sigma(t, p_i) y_i / \sum_i w_i K_\sigma(t, p_i)` with a
    Gaussian kernel reflected at 0 and 1, as relplot draws it: Błasiok & Nakkiran (2024), Smooth
    ECE: Principled Reliability Diagrams via Kernel Smoothing.

    References
    ----------
    .. [1] J. Błasiok and P. Nakkiran, "Smooth ECE: Principled Reliability Diagrams via Kernel
       Smoothing", ICLR, 2024.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")  # no window: draw off screen
    >>> import pandas as pd, sqlcal.plots
    >>> df = pd.DataFrame({"p": [0.1, 0.2, 0.3, 0.4, 0.6, 0.7, 0.8, 0.9],
    ...                    "y": [0, 0, 1, 0, 1, 0, 1, 1]})
    >>> ax = sqlcal.plots.smooth_reliability_diagram(df, score="p", label="y")
    >>> [t.get_text() for t in ax.get_legend().get_texts()]
    ['calibrated', 'all (smECE 0.089)']
    """
    plt = _pyplot()
    src = as_source(data, score, label, weight=weight, by=by, where=where, **source_options)
    # sorted like the other diagrams' tables, so a group keeps its colour from run to run
    curve, keys = _keyed(smooth_reliability(src, sigma=sigma), src, ())
    curve = curve.sort_values([*keys.columns, "t"], kind="stable")
    values, _ = _keyed(smooth_ece(src, sigma=sigma), src, ())
    if ax is None:
        _, ax = plt.subplots(figsize=(5.5, 5.5))
    ax.plot([0, 1], [0, 1], color="0.6", lw=1, ls="--", label="calibrated")
    value = {group_id(k): float(v["smooth_ece"].iloc[0])
             for k, v in groups(values, list(keys.columns))}
    for key, part in groups(curve, list(keys.columns)):
        (line,) = ax.plot(part["t"], part["observed"], lw=1.6,
                          label=f"{_name(key.values())} (smECE {value[group_id(key)]:.3f})")
        # the band's half-width grows where scores are dense (relplot draws it the same way)
        half = 0.02 * part["density"] / part["density"].max()
        ax.fill_between(part["t"], part["observed"] - half, part["observed"] + half,
                        color=line.get_color(), alpha=0.25, lw=0)
    ax.set(xlim=(0, 1), ylim=(0, 1), xlabel="score", ylabel="smoothed observed rate",
           title="Smoothed reliability (relplot's kernel)")
    ax.legend(loc="upper left", fontsize="small")
    return ax


def tce_diagram(
    data: Any,
    *,
    score: str | None = None,
    label: str | None = None,
    weight: str | None = None,
    by: str | Sequence[str] = (),
    where: Any = None,
    ax=None,
    **options: Any,
):
    r"""TCE's test-based reliability diagram: each bin's predictions against its observed rate.

    For each bin, its predictions (the diagonal over the bin's score range) against its observed
    rate (a horizontal bar), the scores the test accepts drawn solid and the rejected ones dotted,
    with the count of rejected predictions. One group (pass ``where=`` to pick it).

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
        Group keys; the table must hold one group only.
    where : ibis boolean expression, callable or SQL string, optional
        Filter applied in the engine before anything else.
    ax : matplotlib Axes, optional
        Where to draw; by default a new figure.
    **options
        Further options of :func:`sqlcal.tce_bins` (``strategy``, ``n_min``, ``n_max``, ``bins``,
        ``alpha``, ``test``, ``tail_rule``) and of :func:`sqlcal.source`.

    Returns
    -------
    matplotlib.axes.Axes
        The Axes drawn on.

    See Also
    --------
    sqlcal.tce_bins : the table drawn.
    reliability_diagram : the binned diagram of rates.

    Notes
    -----
    The bins and acceptance sets are those of :func:`sqlcal.tce_bins`: Matsubara, Tax, Mudd & Guy
    (2023), TCE: A Test-Based Approach to Measuring Calibration Error. A bin b with
    :math:`k_b` positives among :math:`n_b` predictions accepts the scores
    :math:`\{q : \mathrm{pval}(k_b, n_b, q) > \alpha\}`; the title's TCE is the percentage of
    the weight outside them.

    References
    ----------
    .. [1] T. Matsubara, N. Tax, R. Mudd and I. Guy, "TCE: A Test-Based Approach to Measuring
       Calibration Error", UAI (PMLR 216), 2023.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")  # no window: draw off screen
    >>> import pandas as pd, sqlcal.plots
    >>> df = pd.DataFrame({"p": [0.1, 0.2, 0.3, 0.4, 0.6, 0.7, 0.8, 0.9] * 2,
    ...                    "y": [1, 0, 1, 0, 1, 0, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1]})
    >>> ax = sqlcal.plots.tce_diagram(df, score="p", label="y", strategy="uniform", bins=2)
    >>> ax.get_title()
    'TCE 25.0%: predictions accepted (green) or rejected (red)'
    """
    plt = _pyplot()
    table = tce_bins(data, score=score, label=label, weight=weight, by=by, where=where, **options)
    table, keys = _keyed(table, data, by)
    if keys.keys and _shown(table, keys).map(key_value).drop_duplicates().shape[0] > 1:
        raise ValueError("tce_diagram draws one group: filter with where=")
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 6))
    ax.plot([0, 1], [0, 1], color="0.8", lw=1, ls="--")
    for _, row in table.iterrows():
        lo, hi = row["score_min"], row["score_max"]
        ax.plot([lo, hi], [row["rate"], row["rate"]], color="C0", lw=2.5, solid_capstyle="butt")
        ax.plot([lo, hi], [lo, hi], color="C3", lw=1, ls=":")  # rejected unless accepted below
        for a, b in row["accepted"]:
            a, b = max(a, lo), min(b, hi)
            if a <= b:
                ax.plot([a, b], [a, b], color="C2", lw=2.5)
        ax.annotate(f"{row['rejected']:.0f}/{row['W']:.0f}", ((lo + hi) / 2, row["rate"]),
                    textcoords="offset points", xytext=(0, 6), ha="center", fontsize=7)
    total = 100 * table["rejected"].sum() / table["W"].sum()
    ax.set(xlim=(0, 1), ylim=(0, 1), xlabel="prediction (bin's score range)",
           ylabel="observed rate of the bin",
           title=f"TCE {total:.1f}%: predictions accepted (green) or rejected (red)")
    return ax


declare("cumulative_plot", cost=costs_cells)


@checked
def cumulative_plot(
    data: Any,
    *,
    score: str | None = None,
    label: str | None = None,
    weight: str | None = None,
    by: str | Sequence[str] = (),
    where: Any = None,
    x: str = "weight",
    cells: int = 1024,
    group: dict | None = None,
    ax=None,
    **source_options: Any,
):
    r"""The cumulative-difference plot: the running residual sum S/W over increasing scores.

    The curve is drawn against the cumulative share of weight (``x = "weight"``) or the score
    (``x = "score"``). A calibrated model's curve wanders within the dotted band ±2σ(t), where
    σ(t)² is the null variance Σwp(1−p)/W² accumulated so far; a steady slope over a range of
    scores is a miscalibration there (up: the model under-predicts; down: it over-predicts), and the
    curve's total rise from its lowest to its highest point is the cutoff calibration error.
    S is drawn at the ends of ``cells`` score cells (one GROUP BY); the shaded band shows how far
    S can move inside each cell.

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
        Group keys: one curve per group.
    where : ibis boolean expression, callable or SQL string, optional
        Filter applied in the engine before anything else.
    x : {"weight", "score"}, default "weight"
        The horizontal axis: the cumulative share of weight, or the score.
    cells : int, default 1024
        Number of score cells at whose ends S is drawn.
    group : dict, optional
        Keys → values: draw that group only, from the summary of all of them.
    ax : matplotlib Axes, optional
        Where to draw; by default a new figure.
    **source_options
        Further options of :func:`sqlcal.source`, such as ``table=``, ``on_invalid=`` and
        ``soft_labels=``.

    Returns
    -------
    matplotlib.axes.Axes
        The Axes drawn on.

    See Also
    --------
    sqlcal.cutoff_error : the curve's range as a number.
    sqlcal.kuiper : the test on the same curve.
    reliability_diagram : the binned diagram.

    Notes
    -----
    Arrieta-Ibarra, Gujral, Tannen, Tygert & Xu (2022), Metrics of calibration for probabilistic
    predictions. Over the distinct scores :math:`u_1 < \dots < u_K`,

    .. math:: S_k = \sum_{j \le k} \sum_{p_i = u_j} w_i (y_i - p_i), \qquad
       \sigma_k^2 = \sum_{j \le k} \sum_{p_i = u_j} w_i p_i (1 - p_i),

    both drawn over W; :func:`sqlcal.cutoff_error` is the range of S/W, :math:`S_0 = 0`
    included.

    References
    ----------
    .. [1] I. Arrieta-Ibarra, P. Gujral, J. Tannen, M. Tygert and C. Xu, "Metrics of Calibration for
       Probabilistic Predictions", Journal of Machine Learning Research 23(351), 2022.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")  # no window: draw off screen
    >>> import pandas as pd, sqlcal.plots
    >>> df = pd.DataFrame({"p": [0.1, 0.2, 0.3, 0.4, 0.6, 0.7, 0.8, 0.9],
    ...                    "y": [0, 0, 1, 0, 1, 0, 1, 1]})
    >>> ax = sqlcal.plots.cumulative_plot(df, score="p", label="y")
    >>> ax.get_xlabel()
    'cumulative share of weight'
    """
    plt = _pyplot()
    src = as_source(data, score, label, weight=weight, by=by, where=where, **source_options)
    frame = cells_summary(src, ("residuals",), cells).sort_values([*src.by, "cell"])
    frame = _only(frame, src.present(frame[list(src.by)]), group)
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4.5))
    for key, part in groups(frame, list(src.by)):
        curve = cumulative_curve(part)
        along = curve["weight_share"] if x == "weight" else curve["score"]
        name = _name(src.group_keys.values(key).values())
        (line,) = ax.plot(along, curve["s"], lw=1.4, label=name)
        ax.fill_between(along, curve["s_low"], curve["s_high"], color=line.get_color(),
                        alpha=0.15, lw=0)
        ax.plot(along, 2 * curve["null_sd"], color=line.get_color(), ls=":", lw=1)
        ax.plot(along, -2 * curve["null_sd"], color=line.get_color(), ls=":", lw=1)
    ax.axhline(0, color="0.6", lw=1)
    ax.set(xlabel="cumulative share of weight" if x == "weight" else "score",
           ylabel="cumulative residual Σw(y − p) / W",
           title="Cumulative differences (up: under-prediction, down: over-prediction)")
    ax.legend(loc="best", fontsize="small")
    return ax


def cumulative_curve(cells: pd.DataFrame) -> pd.DataFrame:
    r"""The points of :func:`cumulative_plot`'s curve, from one group's score-cell summary.

    Parameters
    ----------
    cells : pandas.DataFrame
        One group's cells, sorted by score: ``W`` (weight), ``total`` (residual sum
        :math:`\sum w(y - p)`), ``positive`` and ``negative`` (the sums of its positive and of
        its negative residuals, both ≥ 0), ``var`` (:math:`\sum w p(1 - p)`) and ``p_max`` (the
        cell's highest score).

    Returns
    -------
    pandas.DataFrame
        One row at the origin and one per cell end: ``weight_share`` (cumulative share of the
        weight), ``score`` (the cell's highest score), ``s`` = S/W, ``s_low`` and ``s_high``
        (how far S/W can reach inside the cell), ``null_sd`` (the null standard deviation of S/W
        so far).

    See Also
    --------
    cumulative_plot : draws this curve.
    sqlcal.cutoff_error : the range of the curve, as an error with bounds.

    References
    ----------
    .. [1] I. Arrieta-Ibarra, P. Gujral, J. Tannen, M. Tygert and C. Xu, "Metrics of Calibration for
       Probabilistic Predictions", Journal of Machine Learning Research 23(351), 2022.

    Examples
    --------
    >>> import pandas as pd, sqlcal.plots
    >>> cells = pd.DataFrame({"W": [2.0, 2.0], "total": [0.7, 0.3], "positive": [0.8, 0.3],
    ...                       "negative": [0.1, 0.0], "var": [0.25, 0.25], "p_max": [0.2, 0.9]})
    >>> sqlcal.plots.cumulative_curve(cells).round(6)
       weight_share  score      s  s_low  s_high   null_sd
    0           0.0    0.0  0.000  0.000    0.00  0.000000
    1           0.5    0.2  0.175 -0.025    0.20  0.125000
    2           1.0    0.9  0.250  0.175    0.25  0.176777
    """
    W = cells["W"].sum()
    total = cells["total"].to_numpy(float)
    end = np.cumsum(total)
    start = end - total
    high = start + cells["positive"].to_numpy(float)
    low = start - cells["negative"].to_numpy(float)
    cum_w = np.cumsum(cells["W"].to_numpy(float))
    var = np.cumsum(cells["var"].to_numpy(float))
    first = cells["p_max"].to_numpy(float)[0] if len(cells) else 0.0
    return pd.DataFrame({
        "weight_share": np.concatenate([[0.0], cum_w / W]),
        "score": np.concatenate([[min(first, 0.0)], cells["p_max"].to_numpy(float)]),
        "s": np.concatenate([[0.0], end / W]),
        "s_low": np.concatenate([[0.0], np.minimum(low, end) / W]),
        "s_high": np.concatenate([[0.0], np.maximum(high, end) / W]),
        "null_sd": np.concatenate([[0.0], np.sqrt(var) / W]),
    })


def _only(table: pd.DataFrame, shown: pd.DataFrame, group: dict | None) -> pd.DataFrame:
    """The rows of one group (``group``: key → value; a missing value matches NULL, NaN matches
    NaN), by ``shown``: the rows' keys as presented, under their names."""
    if group is None:
        return table
    keys = list(shown.columns)
    unknown = set(group) - set(keys)
    if unknown:
        raise ValueError(f"group names keys {sorted(unknown)} that are not group keys {keys}")
    want = group_id({k: group.get(k) for k in keys})
    mask = [group_id(dict(zip(keys, row))) == want for row in shown.itertuples(index=False)]
    return table[np.asarray(mask, dtype=bool)]


def _keyed(table: pd.DataFrame, data: Any, by) -> tuple[pd.DataFrame, GroupKeys]:
    """A result as presented, with its keys renamed to internal names (``__key0``, ...) and
    sqlcal's columns to their own, so that a key named like one (``bin``, ``observed``) is
    still a key; and the keys."""
    names = (list(data.key_names) if isinstance(data, Source)
             else [by] if isinstance(by, str) else list(by))
    keys = GroupKeys(tuple(Key(n, VALUE.format(i), kind="plain") for i, n in enumerate(names)))
    renamed = {k.name: k.column for k in keys.keys}
    renamed |= {c: keys.original(c) for c in table.columns if c not in renamed}
    return table.rename(columns=renamed), keys


def _shown(table: pd.DataFrame, keys: GroupKeys) -> pd.DataFrame:
    """The keys of a :func:`_keyed` table under their names."""
    return table[list(keys.columns)].set_axis(list(keys.names), axis=1)


def _name(values) -> str:
    """A group's legend: its key values, NULL and NaN by name."""
    return ", ".join("NULL" if key_value(v) is None else f"{key_value(v)}"
                     for v in values) or "all"


def _pyplot():
    try:
        import matplotlib.pyplot as plt
    except ImportError as e:  # pragma: no cover - depends on the install
        from sqlcal.errors import install_hint

        raise ImportError(f"plots need matplotlib: {install_hint('plot')}") from e
    return plt
