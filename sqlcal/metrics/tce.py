"""TCE, the test-based calibration error (Matsubara, Tax, Mudd and Guy, UAI 2023): the percentage
of predictions that an exact binomial test rejects against the observed rate of their bin.

The engine supplies per-bin counts (k, n) and the predictions' scores; numpy turns each bin's
(k, n) into the exact set of scores the test accepts (:mod:`sqlcal.metrics.binomial`), and the
predictions outside it are counted from the score histogram, reading the score levels only of the
few cells that hold a bin edge or an interval endpoint.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd
from scipy import stats

from sqlcal import options
from sqlcal.inputs.sources import InvalidInputError, Source
from sqlcal.metrics import binomial, groups, key_tuple, level_sets, result
from sqlcal.metrics._registry import Report, metric
from sqlcal.metrics.cells import CELLS, cell_levels, cells_needs, cells_summary, chunks, slab_rows
from sqlcal.metrics.intervals import SEED
from sqlcal.options import BudgetError, Option, checked, costs_tce
from sqlcal.query import declared, executor, planner
from sqlcal.query.executor import as_source

STRATEGIES = ("pavabc", "uniform", "quantile")
#: PAVA-BC reads the levels (one row per distinct score) of a source of at most this many rows;
#: above, the score cells of PAVA_CELLS, and the levels of the few cells where a merge is not
#: decided by the cell's sums (:func:`pavabc_cells_table`)
LEVEL_CAP = 1_000_000
#: score cells of PAVA-BC's grid, shared among the groups (:func:`pava_cells`): the grid fetched
#: holds at most this many rows, whatever the number of rows and (up to PAVA_CELLS /
#: MIN_PAVA_CELLS) of groups
PAVA_CELLS = 2**18
#: the fewest score cells per group of PAVA-BC's grid
MIN_PAVA_CELLS = 2**4
#: the levels PAVA-BC on the cells may hold, in slabs (:func:`sqlcal.metrics.cells.slab_rows`,
#: 2^21 rows at the default budget): past that it stops with a BudgetError naming n_min and
#: n_max. The cells it reads are those near the start of a block, about N/40 rows at the
#: default N/20 and N/5 (2.5·10^6 of 10^8 float32 scores)
HELD_SLABS = 8
#: the interval re-fits the bins of each replicate over at most this many units of a group:
#: its distinct scores (or score cells), runs of them pooled to about equal weight above
UNITS = 2048
#: values of one chunk of the interval's replicate draws (replicates × units): 8 MiB an array
DRAW_CHUNK = 2**20
TESTS = ("binomial", "ttest")
#: what TCE and its bins declare alike. PAVA-BC runs over the score cells of PAVA_CELLS (with
#: groups: the totals first, then the cells of pava_cells(groups) per group), then over the
#: levels up to LEVEL_CAP rows, or those of the few cells where a merge is undecided; uniform and
#: quantile bins over the score cells, then read the levels of the cells holding a bin edge or
#: an acceptance interval's end (follow-ups). Above LEVEL_CAP rows PAVA-BC reads the levels of a
#: few cells only, in rounds: exported, every form is the levels statement.
_TCE = dict(
    needs=lambda src, o: (([declared.totals()] if src.by else
                           cells_needs(src, ("sums",), PAVA_CELLS))
                          if o["strategy"] == "pavabc" else cells_needs(src, ("sums",))),
    refining={**{("strategy", s): "strategy='pavabc' (the levels, read in one pass)"
                 for s in ("uniform", "quantile")},
              ("strategy", "pavabc"): "the levels (PAVA-BC over every distinct score)"},
    cost=costs_tce,
    options={"strategy": Option("choice", "how TCE cuts bins", choices=STRATEGIES),
             "test": Option("choice", "the per-bin test", choices=TESTS)})


@metric(**_TCE, report={"tce": Report({"tce": "tce", "n_bins": "tce_bins", "ci_lower": "tce_lower",
                                        "ci_upper": "tce_upper"})},
        trust={"binning": None, "alpha": None, "test": None, "ci_method": None,
               "confidence": "confidence", "weight_kind": "weight_kind"})
@checked
def tce(
    data: Any,
    *,
    score: str | None = None,
    label: str | None = None,
    weight: str | None = None,
    by: str | Sequence[str] = (),
    where: Any = None,
    strategy: str = "pavabc",
    n_min: int | None = None,
    n_max: int | None = None,
    bins: int = 10,
    alpha: float = 0.05,
    test: str = "binomial",
    tail_rule: str = "code",
    confidence: float = 0.95,
    bootstrap: int = 0,
    seed: int = SEED,
    **source_options: Any,
) -> pd.DataFrame:
    r"""TCE: the percentage of predictions rejected by an exact binomial test against their bin.

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
        Column of non-negative row weights; by default every row weighs 1. Weights
        must be whole numbers (frequency weights: a row of weight 3 is three predictions); there is
        no exact binomial test for fractional counts.
    by : str or sequence of str, default ()
        Group keys: one result row per group.
    where : ibis boolean expression, callable or SQL string, optional
        Filter applied in the engine before anything else.
    strategy : {"pavabc", "uniform", "quantile"}, default "pavabc"
        Bins: pool-adjacent-violators with bin sizes between ``n_min`` and ``n_max`` (the paper's
        default), ``bins`` equal-width bins on numpy ``linspace`` edges (left-closed, the last
        closed, as the reference code), or ``bins`` equal-count bins cut by position as the
        reference does (⌊kN/B⌋, not NTILE).
    n_min, n_max : int, optional
        PAVA-BC bin-size limits in rows (weight). Default ⌊N/20⌋ and ⌊N/5⌋ of each group, the
        paper's setting (5 to 20 bins). At warehouse scale prefer fixed counts: see Notes. A
        group with no more than n_min rows is one bin.
    bins : int, default 10
        Number of bins for "uniform" and "quantile".
    alpha : float, default 0.05
        Significance level; a prediction is rejected when its p-value is ≤ α.
    test : {"binomial", "ttest"}, default "binomial"
        The exact two-sided binomial test (scipy's ``binomtest``, the paper's), or the one-sample
        t-test of the bin's labels against the prediction, with the correct statistic (the
        reference ``tce_ttest`` divides by the variance instead of the standard deviation).
    tail_rule : {"code", "paper"}, default "code"
        PAVA-BC's last ``n_min`` points: merged into the last block when 2·n_min ≤ n_max (the
        reference code, which produced the published numbers; the last bin can then exceed
        n_max), or when that block plus n_min fits in n_max (the paper's Algorithm 2).
    confidence : float, default 0.95
        Two-sided level of the interval.
    bootstrap : int, default 0
        Replicates of the interval's bootstrap, each cutting the bins again (0: no interval;
        1000 is the other intervals' default). Off by default: its coverage is not yet that of
        the other intervals (see Notes).
    seed : int, default 20260101
        Seed of the replicates' draws (the same interval on every run and engine).
    **source_options
        Further options of :func:`sqlcal.source`, such as ``table=``, ``on_invalid=`` and
        ``soft_labels=``.

    Returns
    -------
    pandas.DataFrame
        One row per group: the keys, ``tce`` (percent), ``n``, ``W``, ``n_bins``, ``rejected``
        (weight of rejected predictions), ``ci_lower``, ``ci_upper`` (the interval of the
        expected TCE at this sample size, see Notes; NaN without ``bootstrap``), ``binning``
        (the bins: ``"pavabc(n_min, n_max, tail_rule)"`` with the group's bin-size limits in
        rows, ``"uniform(B)"`` or ``"quantile(B)"``), ``alpha`` and ``test`` (the test's level
        and kind), ``ci_method`` (``"bootstrap"``, or None), ``confidence``, ``weight_kind``
        (always ``"frequency"``: the weights are counts); with ``on_invalid="drop"``,
        ``n_dropped``. :func:`tce_bins` gives the per-bin table.

    See Also
    --------
    tce_bins : the per-bin table behind the percentage.
    ece : the binned error, a gap of rates rather than a share rejected.
    sqlcal.plots.tce_diagram : draws the bins and their tests.

    Notes
    -----
    Matsubara, Tax, Mudd & Guy (2023), TCE: A Test-Based Approach to Measuring Calibration Error
    (UAI 2023):

    .. math:: \mathrm{TCE} = \frac{100}{W}\sum_b \sum_{i \in b} w_i\,1\{\mathrm{pval}(k_b, n_b,
       q_i) \le \alpha\}

    (the paper's Def. 2). The acceptance set of the two-sided exact test is a union of
    intervals, not always one: it is computed exactly, and predictions within
    1e-9 of an endpoint are decided by scipy's p-value itself, so counts equal a per-prediction
    ``binomtest`` loop.

    Ties: sqlcal keeps tied scores in one bin (PAVA-BC runs over distinct scores; a quantile cut
    inside a run of ties puts the whole run in the bin of its first member). The reference code
    sorts with an unstable argsort and can split ties, so the two agree on tie-free data.

    TCE grows with the sample and bin sizes even for a calibrated model: a bin's acceptance
    interval shrinks like 1/√n_b while the spread of its predictions does not (the paper's Table
    12: 7.3% at N = 6,000, 19.1% at 60,000). With bins as fractions of N, a warehouse-sized table
    tends to 100%. Fix the bin sizes in counts (``n_min``/``n_max``) and report them with the value.

    **The interval.** TCE has no population value apart from the sample size: a calibrated
    model's TCE grows with N. What the interval covers is :math:`\theta_N = E[\mathrm{TCE}_N]`,
    the expected TCE of a sample of the same N rows (weight) from the population, with the same
    options (bins, limits, α, test): the number the statistic estimates without bias. Its
    replicates are bootstrap samples of the group's rows (Efron & Tibshirani (1993), ch. 6),
    drawn exactly from the score histogram the metric already read (no further scan: rows of
    one score and one label are alike, so a replicate is one multinomial draw of the (score,
    label) counts), and on each the bins are cut again as TCE cuts them (PAVA-BC, or the
    quantile cut at the replicate's ranks), so the spread of the bins' counts and of their
    re-fit is in it; :func:`sqlcal.metrics.tce.tce_interval` gives the method and its
    approximations. The interval is TCE plus the 2.5% and 97.5% quantiles of the replicates'
    deviations from their mean (the percentile form, centred on TCE). Its coverage at 95%
    (PAVA-BC, the exact binomial test; docs/guide/intervals.md): 88-97% for an over-confident
    model at 10^3 to 10^4 rows (below the band at 10^4), 86% for a 3% base rate on 40 distinct
    scores at 10^4 rows, 98-100% (conservative) for a calibrated model and a continuous 3% base
    rate. Hence it is off by default (``bootstrap=0``), and
    ``ci_method`` says ``"bootstrap"`` when asked for. Weights are counts (sampling weights and
    ``negative_sampling_rate`` are refused above), so ``weight_kind`` is ``"frequency"``.

    References
    ----------
    .. [1] T. Matsubara, N. Tax, R. Mudd and I. Guy, "TCE: A Test-Based Approach to Measuring
       Calibration Error", UAI (PMLR 216), 2023.
    .. [2] B. Efron and R. J. Tibshirani, "An Introduction to the Bootstrap", Chapman & Hall,
       1993.
    .. [3] E. B. Wilson, "Probable Inference, the Law of Succession, and Statistical Inference",
       Journal of the American Statistical Association 22(158), 1927.

    Examples
    --------
    >>> import pandas as pd, sqlcal
    >>> df = pd.DataFrame({"p": [0.1, 0.2, 0.3, 0.4, 0.6, 0.7, 0.8, 0.9] * 2,
    ...                    "y": [1, 0, 1, 0, 1, 0, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1]})
    >>> out = sqlcal.tce(df, score="p", label="y", strategy="uniform", bins=2)
    >>> out[["tce", "n", "W", "n_bins", "rejected", "binning", "alpha", "test"]]
        tce   n     W  n_bins  rejected     binning  alpha      test
    0  25.0  16  16.0       2       4.0  uniform(2)   0.05  binomial
    """
    src = as_source(data, score, label, weight=weight, by=by, where=where, **source_options)
    units: list = []
    table = _bins_table(src, strategy, n_min, n_max, bins, alpha, test, tail_rule, units)
    values = tce_finish(table, by=src.by)
    if bootstrap and len(table):
        interval = tce_interval(table, pd.concat(units, ignore_index=True), by=src.by,
                                alpha=alpha, test=test, confidence=confidence,
                                replicates=bootstrap, seed=seed, strategy=strategy,
                                n_min=n_min, n_max=n_max, bins=bins, tail_rule=tail_rule)
        values = (values.merge(interval.astype({k: values[k].dtype for k in src.by}),
                               on=list(src.by), how="left") if src.by
                  else values.assign(ci_lower=interval["ci_lower"].to_numpy(),
                                     ci_upper=interval["ci_upper"].to_numpy()))
    else:
        values = values.assign(ci_lower=np.nan, ci_upper=np.nan)
    out = result(src, values, ["tce", "n_bins", "rejected", "ci_lower", "ci_upper", "binning"],
                 {"alpha": alpha, "test": test, "ci_method": "bootstrap" if bootstrap else None,
                  "confidence": confidence, "weight_kind": "frequency"}, present=False)
    if out["binning"].isna().any():  # groups left without rows still had these bins asked for
        out["binning"] = out["binning"].fillna(_binning(strategy, n_min, n_max, bins, tail_rule))
    return src.present(out)


@metric(**_TCE)
@checked
def tce_bins(
    data: Any,
    *,
    score: str | None = None,
    label: str | None = None,
    weight: str | None = None,
    by: str | Sequence[str] = (),
    where: Any = None,
    strategy: str = "pavabc",
    n_min: int | None = None,
    n_max: int | None = None,
    bins: int = 10,
    alpha: float = 0.05,
    test: str = "binomial",
    tail_rule: str = "code",
    **source_options: Any,
) -> pd.DataFrame:
    r"""The per-bin table behind :func:`tce` (and its diagram): each bin's test and rejections.

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
    strategy : {"pavabc", "uniform", "quantile"}, default "pavabc"
        Bins, as in :func:`tce`.
    n_min, n_max : int, optional
        PAVA-BC bin-size limits in rows (weight), as in :func:`tce`.
    bins : int, default 10
        Number of bins for "uniform" and "quantile".
    alpha : float, default 0.05
        Significance level; a prediction is rejected when its p-value is ≤ α.
    test : {"binomial", "ttest"}, default "binomial"
        The exact two-sided binomial test or the one-sample t-test, as in :func:`tce`.
    tail_rule : {"code", "paper"}, default "code"
        PAVA-BC's last ``n_min`` points, as in :func:`tce`.
    **source_options
        Further options of :func:`sqlcal.source`, such as ``table=``, ``on_invalid=`` and
        ``soft_labels=``.

    Returns
    -------
    pandas.DataFrame
        One row per group and bin: the keys, ``bin``, ``score_min``, ``score_max``, ``n`` (rows),
        ``W`` (predictions), ``k`` (positives), ``rate`` = k/W, ``mean_score``, ``accepted`` (the
        accepted score intervals, a list of (low, high) pairs), ``rejected`` (predictions the test
        rejects), ``tce_bin`` (percent), ``binning``, ``alpha`` and ``test`` (as in :func:`tce`);
        with ``on_invalid="drop"``, ``n_dropped`` (the group's rows left out).

    See Also
    --------
    tce : the percentage rejected, per group.
    reliability : the binned table of rates with intervals.
    sqlcal.plots.tce_diagram : draws this table.

    Notes
    -----
    A bin b with :math:`k_b` positives among :math:`n_b` predictions accepts the scores
    :math:`\{q : \mathrm{pval}(k_b, n_b, q) > \alpha\}` (Matsubara, Tax, Mudd & Guy (2023), TCE: A
    Test-Based Approach to Measuring Calibration Error); ``tce_bin`` is the percentage of the bin's
    weight outside them.

    References
    ----------
    .. [1] T. Matsubara, N. Tax, R. Mudd and I. Guy, "TCE: A Test-Based Approach to Measuring
       Calibration Error", UAI (PMLR 216), 2023.

    Examples
    --------
    >>> import pandas as pd, sqlcal
    >>> df = pd.DataFrame({"p": [0.1, 0.2, 0.3, 0.4, 0.6, 0.7, 0.8, 0.9] * 2,
    ...                    "y": [1, 0, 1, 0, 1, 0, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1]})
    >>> bins = sqlcal.tce_bins(df, score="p", label="y", strategy="uniform", bins=2)
    >>> bins[["bin", "k", "W", "accepted", "rejected", "tce_bin"]].round(6)
       bin    k    W                accepted  rejected  tce_bin
    0    0  5.0  8.0  [(0.289241, 0.888887)]       4.0     50.0
    1    1  7.0  8.0       [(0.5, 0.993609)]       0.0      0.0
    """
    src = as_source(data, score, label, weight=weight, by=by, where=where, **source_options)
    out = _bins_table(src, strategy, n_min, n_max, bins, alpha, test, tail_rule)
    out["alpha"], out["test"] = alpha, test
    if src.dropped is not None:  # on_invalid="drop": each group's rows left out, on its bins
        out = (out.merge(src.dropped[[*src.by, "n_dropped"]], on=list(src.by), how="left")
               if src.by else out.assign(n_dropped=int(src.dropped["n_dropped"].sum())))
    return src.present(out).assign(**src.facts)  # a stored window's facts, as every result's


def pava_cells(groups: int) -> int:
    """The score cells per group of PAVA-BC's grid for ``groups`` groups: :data:`PAVA_CELLS`
    shared among them, rounded down to a power of two (the cells stay exact binary fractions),
    at least :data:`MIN_PAVA_CELLS`. The bins are exact on any such grid; a coarser one only
    leaves more cells to read the levels of, within the same fetch budget.

    >>> pava_cells(1), pava_cells(10), pava_cells(10**6)
    (262144, 16384, 16)
    """
    share = PAVA_CELLS // max(int(groups), 1)
    return max(MIN_PAVA_CELLS, 1 << max(share.bit_length() - 1, 0))


def _pava_grid(src: Source) -> tuple[pd.DataFrame, int]:
    """PAVA-BC's score cells (its grid shared among the groups, counted from the totals
    summary) and the cells per group."""
    cells = pava_cells(len(planner.fetch(src, declared.totals())) if src.by else 1)
    return cells_summary(src, ("sums",), cells), cells


def _bins_table(src: Source, strategy, n_min, n_max, bins, alpha, test, tail_rule,
                units: list | None = None):
    if strategy == "pavabc":
        grid, cells = _pava_grid(src)
        _require_counts(src)
        _check_tests(grid, src.by, n_min, strategy, bins)
        if int(grid["n"].sum()) > LEVEL_CAP:
            return pavabc_cells_table(grid, by=src.by, n_min=n_min, n_max=n_max,
                                      tail_rule=tail_rule, alpha=alpha, test=test,
                                      cells=cells, levels_in=lambda ranges: _cell_levels(
                                          src, cells, ranges), units=units)
        frame = level_sets(src)
    else:
        frame = cells_summary(src, ("sums",))
        _check_tests(frame, src.by, n_min, strategy, bins)
    _require_counts(src)
    return tce_bins_finish(frame, by=src.by, strategy=strategy, n_min=n_min, n_max=n_max,
                           bins=bins, alpha=alpha, test=test, tail_rule=tail_rule,
                           levels_in=lambda ranges: planner.fetch(
                               src, declared.levels_within(ranges, "sums")), units=units)


# -- the finishes: numpy from the summary frames ----------------------------------------------


def tce_finish(table: pd.DataFrame, *, by: Sequence[str]) -> pd.DataFrame:
    """TCE per group from its bins table (:func:`tce_bins_finish`): the keys, ``n``, ``W``,
    ``tce`` (percent), ``n_bins``, ``rejected``, ``binning``."""
    keys = list(by)
    rows = []
    for key, part in groups(table, keys):
        W = part["W"].sum()
        rejected = part["rejected"].sum()
        rows.append({**key, "n": int(part["n"].sum()), "W": float(W),
                     "tce": 100 * rejected / W if W > 0 else np.nan,
                     "n_bins": int((part["W"] > 0).sum()), "rejected": float(rejected),
                     "binning": part["binning"].iloc[0]})
    return pd.DataFrame(rows, columns=None if rows else [*keys, "n", "W"])


def tce_bins_finish(frame: pd.DataFrame, *, by: Sequence[str], strategy: str = "pavabc",
                    n_min=None, n_max=None, bins: int = 10, alpha: float = 0.05,
                    test: str = "binomial", tail_rule: str = "code", levels_in=None,
                    units: list | None = None) -> pd.DataFrame:
    """The per-bin table of :func:`tce_bins` (without ``alpha``, ``test``), from the levels
    (``strategy="pavabc"``: one row per group and distinct score with ``n``, ``W``, ``swy``,
    ``swp``) or the score cells of :data:`sqlcal.metrics.cells.CELLS` (other strategies, with
    ``p_min``, ``p_max``). ``levels_in(ranges)`` returns the levels of the rows inside score
    ranges ``((group key tuple, lo, hi), ...)`` (:func:`sqlcal.query.declared.levels_within`):
    the cells holding a bin edge or an acceptance interval's end. ``units``, a list: the bins'
    score histogram (keys, ``bin``, ``p_min``, ``p_max``, ``W``, ``swy``, ``level``) is
    appended to it, for :func:`tce_interval`."""
    if strategy == "pavabc":
        return _pavabc_table(frame, by, n_min, n_max, tail_rule, alpha, test, units)
    pieces = _histogram_pieces(frame, by, strategy, bins, levels_in)
    if units is not None:
        units.append(pieces)
    table = _count_rejections(by, pieces, alpha, test, levels_in)
    table["binning"] = _binning(strategy, n_min, n_max, bins, tail_rule)
    return table


def _binning(strategy, n_min, n_max, bins, tail_rule) -> str:
    """The ``binning`` column: the bins as asked for (PAVA-BC's limits in rows; N/20 and N/5,
    the paper's default, stand for the group's own counts when no row count is known)."""
    if strategy != "pavabc":
        return f"{strategy}({bins})"
    lo = "N/20" if n_min is None else n_min
    hi = "N/5" if n_max is None else n_max
    return f"pavabc({lo}, {hi}, {tail_rule})"


# -- bins ------------------------------------------------------------------------------------
# For uniform and quantile bins a "piece" is a whole score cell of the histogram, or one
# distinct score (a level). Columns: keys, bin, p_min, p_max, n, W, swy, swp, level.


def _pavabc_table(levels: pd.DataFrame, by, n_min, n_max, tail_rule, alpha, test,
                  units: list | None = None) -> pd.DataFrame:
    # PAVA-BC is sequential over the distinct scores of a group: the levels summary, one pass;
    # every level's score is then at hand, so rejections are decided level by level in numpy
    rows = []
    for key, part in groups(levels, list(by)):
        order = np.argsort(part["p"].to_numpy(float), kind="stable")
        p = part["p"].to_numpy(float)[order]
        W, Y = part["W"].to_numpy(float)[order], part["swy"].to_numpy(float)[order]
        n_rows, wp = part["n"].to_numpy()[order], part["swp"].to_numpy(float)[order]
        N = int(round(W.sum()))
        lo, hi = _block_limits(N, n_min, n_max)
        starts = pavabc(W, Y, lo, hi, tail_rule)
        ends = np.append(starts[1:], len(p))
        if units is not None:
            units.append(pd.DataFrame({
                **{c: [v] * len(p) for c, v in key.items()},
                "bin": np.repeat(np.arange(len(starts)), ends - starts), "p_min": p,
                "p_max": p, "W": W, "swy": Y, "level": True}))
        for b, (s, e) in enumerate(zip(starts, ends)):
            k, n = float(Y[s:e].sum()), float(W[s:e].sum())
            intervals = _acceptance(k, n, alpha, test)
            rejected = float(W[s:e][_decide(k, n, p[s:e], alpha, test, intervals)].sum())
            rows.append(_bin_row(key, b, p[s], p[e - 1], int(n_rows[s:e].sum()), n, k,
                                 float(wp[s:e].sum()), intervals, rejected)
                        | {"binning": _binning("pavabc", lo, hi, None, tail_rule)})
    return pd.DataFrame(rows)


def _block_limits(N: int, n_min, n_max) -> tuple[int, int]:
    """PAVA-BC's block limits for a group of N rows: n_min (default N/20) and n_max (N/5)."""
    lo = int(N / 20) if n_min is None else _count(n_min, "n_min")
    hi = int(N / 5) if n_max is None else _count(n_max, "n_max")
    if lo > hi:
        raise ValueError(f"n_min ({lo}) must not exceed n_max ({hi})")
    return lo, hi


def _count(value, name: str) -> int:
    if isinstance(value, bool) or not float(value).is_integer() or value < 0:
        raise ValueError(f"{name} must be a whole number of rows, not {value!r}")
    return int(value)


def _bin_row(key, b, score_min, score_max, n_rows, n, k, wp, intervals, rejected) -> dict:
    return {**key, "bin": b, "score_min": score_min, "score_max": score_max, "n": n_rows,
            "W": n, "k": k, "rate": k / n if n > 0 else np.nan,
            "mean_score": wp / n if n > 0 else np.nan, "accepted": intervals,
            "rejected": rejected, "tce_bin": 100 * rejected / n if n > 0 else np.nan}


def pavabc(W: np.ndarray, Y: np.ndarray, n_min: int, n_max: int, tail_rule: str = "code"):
    """Pool adjacent violators with bin-size constraints over atoms (distinct scores in order,
    weight W, label sum Y): the index of the first atom of each block.

    The reference ``_pavabc`` on atoms (Matsubara et al. (2023), Algorithm 2): each atom is
    pushed; the top two blocks merge while their size is ≤ n_min, or ≤ n_max with the lower
    mean ≥ the upper (compared as Y0·W1 ≥ Y1·W0). The minimal suffix of atoms holding n_min is
    held back as a tail block, merged into the last block or appended by ``tail_rule``.
    """
    A = len(W)
    if A == 0:
        return np.array([0])
    tail = A
    if n_min > 0:
        suffix = np.cumsum(W[::-1])
        tail = A - 1 - int(np.searchsorted(suffix, n_min))  # first atom of the tail
        tail = max(tail, 0)
    blocks_start, blocks_w, blocks_y = [], [], []
    for a in range(tail):
        blocks_start.append(a)
        blocks_w.append(W[a])
        blocks_y.append(Y[a])
        while len(blocks_w) >= 2:
            w0, w1, y0, y1 = blocks_w[-2], blocks_w[-1], blocks_y[-2], blocks_y[-1]
            size = w0 + w1
            if not (size <= n_min or (size <= n_max and y0 * w1 >= y1 * w0)):
                break
            blocks_w[-2:] = [size]
            blocks_y[-2:] = [y0 + y1]
            blocks_start.pop()
    if tail < A:
        w_tail = W[tail:].sum()
        last = blocks_w[-1] if blocks_w else None
        # the code tests the tail's own size after appending it; the paper, the last block's
        # (with ties the tail can weigh more than n_min: the paper's bound uses its real size)
        merge = last is not None and ((w_tail + n_min <= n_max) if tail_rule == "code"
                                      else (last + w_tail <= n_max))
        if not merge:
            blocks_start.append(tail)
    return np.array(blocks_start)


# -- PAVA-BC on score cells, reading the levels only where the cells' sums do not decide -------
#
# PAVA-BC (:func:`pavabc`) is a left-to-right stack loop over the atoms (distinct scores). A mixed
# score cell (several distinct scores) is a run of consecutive atoms whose total weight W_c and
# label sum Y_c are known but whose order is not. The loop may push the whole run at once when
# every order of its atoms gives the same stack; with X the top block and V the one below:
#
# (F) X.W + W_c ≤ n_min: each atom's merge with X is forced (their sum stays ≤ n_min), so X
#     absorbs the run whatever its order. After each absorbed atom the loop tests X with V; the
#     test refuses for every prefix q of the run when X.W + V.W + 1 > n_min and either
#     X.W + V.W + 1 > n_max or mean(X ∪ q) > mean(V) for every q. The least such mean puts the
#     run's zero labels first: Σ(y·V.W − V.Y·w) over q is at least −V.Y·(W_c − Y_c) (each atom
#     gives y(V.W − V.Y) − V.Y(w − y) ≥ −V.Y(w − y)), so it suffices that
#     X.Y·V.W − V.Y·X.W − V.Y·(W_c − Y_c) > 0 (all integers: binary labels, whole weights).
#     This is how a pending block above a large one fills up: PAV merges it down only when its
#     mean falls to the one below, and the test says that cannot happen inside this cell.
# (N) X.W + W_c > n_min, W_c ≤ n_min and the run's first atom starts a block of its own for
#     every order: then every later atom is forced into that block (it stays ≤ W_c ≤ n_min) and
#     the (X, run-so-far) test must refuse for every prefix, the same bound with an empty X':
#     X.W + 1 > n_max, or no zero label in the run (W_c = Y_c) and X not all ones.
#
# Anything else (a prefix that may merge down, a block crossing n_min inside the cell, the tail's
# first atom) needs the order: the cell's levels are read and its atoms pushed one by one. A
# speculative pass (an undecided cell pushed as one atom) lists every undecided cell; their
# levels are read in one query, and the pass runs again until none is left: the blocks are then
# exactly those of the loop over the atoms, since every step either is the loop's own step on an
# atom or a run whose outcome was proven not to depend on the order. Most cells are decided by
# (F): once a pending block carries a surplus of positives over the mean below of more than
# V.Y·(zeros in the cell), the cell cannot bring it down; the cells read are those near the
# starts of the blocks, where the surplus is still small (at 10^7 rows, a few per cent of them).


def pavabc_cells_table(grid: pd.DataFrame, *, by: Sequence[str], n_min=None, n_max=None,
                       tail_rule: str = "code", alpha: float = 0.05, test: str = "binomial",
                       levels_in=None, cells: int = PAVA_CELLS,
                       units: list | None = None) -> pd.DataFrame:
    """The PAVA-BC bins table (as :func:`tce_bins_finish`) from the score cells of the grid
    ``cells`` (``grid``: keys, ``cell``, ``n``, ``W``, ``swy``, ``swp``, ``p_min``, ``p_max``),
    reading through ``levels_in(ranges)`` (score ranges (key tuple, lo, hi), as
    :func:`sqlcal.query.declared.levels_within`) the levels of the cells where a merge is not
    decided by the cells' sums. Exact: the bins, and the
    rejections, of :func:`tce_bins_finish` on the levels."""
    by = list(by)
    per_group = {key_tuple(k): p.sort_values("cell", ignore_index=True)
                 for k, p in groups(grid[grid["W"].to_numpy(float) > 0], by)}
    limits = {}
    for key, part in per_group.items():
        N = int(round(float(part["W"].sum())))
        lo, hi = _block_limits(N, n_min, n_max)
        limits[key] = (lo, hi)
    expanded = {key: pd.DataFrame() for key in per_group}
    held, cap = 0, HELD_SLABS * slab_rows()
    while True:
        results, wanted, sizes = {}, [], []
        for key, part in per_group.items():
            pieces = _cell_pieces(part, expanded[key])
            starts, undecided = _pavabc_pieces(pieces, *limits[key], tail_rule)
            results[key] = (pieces, starts)
            wanted += [(key, int(c)) for c in pieces["cell"].to_numpy()[undecided]]
            sizes.append(pieces["n"].to_numpy()[undecided])
        if not wanted:
            break
        # each round expands at least one more cell (an undecided cell is a mixed cell whose
        # levels were not read): so the rounds end, every read exact for its own group
        sizes = np.concatenate(sizes).astype(np.int64)
        held += int(sizes.sum())
        if held > cap:
            raise BudgetError(
                f"tce: PAVA-BC needs the levels of {held:,} rows near the starts of its bins "
                f"(at most {cap:,} fit the memory budget of {options.BUDGET.bytes:,} bytes); "
                "pass n_min= and n_max= in counts (smaller bins settle sooner), or "
                "strategy='quantile', or raise the budget with sqlcal.options.budget(bytes=...)")
        # read in chunks of at most a slab's rows each (a cell holding more alone)
        chunk = chunks(sizes, slab_rows())
        for part in np.unique(chunk):
            ranges = [(key, c / cells, (c + 1) / cells)
                      for (key, c), mine in zip(wanted, chunk == part) if mine]
            found = levels_in(ranges)
            found = found.assign(cell=np.minimum(np.floor(found["p"].to_numpy(float) * cells),
                                                 cells - 1).astype(np.int64))
            for k, lv in groups(found, by):
                key = key_tuple(k)
                expanded[key] = pd.concat([expanded[key], lv], ignore_index=True)
    out = []
    for key, (pieces, starts) in results.items():
        bin_of = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, len(pieces))))
        out.append(pieces.assign(bin=bin_of, **dict(zip(by, key))))
    if not out:
        return pd.DataFrame()
    if units is not None:
        units.append(pd.concat(out, ignore_index=True))
    table = _count_rejections(by, pd.concat(out, ignore_index=True), alpha, test, levels_in,
                              cells)
    labels = {key: _binning("pavabc", *limits[key], None, tail_rule) for key in limits}
    table["binning"] = [labels[key_tuple({c: row[c] for c in by})]
                        for _, row in table[by].iterrows()] if by else labels[()]
    return table


def _cell_pieces(part: pd.DataFrame, levels: pd.DataFrame) -> pd.DataFrame:
    """A group's pieces in score order: each cell whose levels were read as its levels, every
    other cell whole (``level``: the piece is one distinct score)."""
    keep = part if not len(levels) else part[~part["cell"].isin(levels["cell"])]
    whole = pd.DataFrame({"cell": keep["cell"].to_numpy(np.int64),
                          "p_min": keep["p_min"], "p_max": keep["p_max"], "n": keep["n"],
                          "W": keep["W"], "swy": keep["swy"], "swp": keep["swp"],
                          "level": (keep["p_min"] == keep["p_max"]).to_numpy()})
    if len(levels):
        lv = levels[levels["W"].to_numpy(float) > 0]
        whole = pd.concat([whole, pd.DataFrame({
            "cell": lv["cell"].to_numpy(np.int64), "p_min": lv["p"], "p_max": lv["p"],
            "n": lv["n"], "W": lv["W"], "swy": lv["swy"], "swp": lv["swp"], "level": True})],
            ignore_index=True)
    return whole.sort_values(["p_min"], ignore_index=True, kind="stable")


def _pavabc_pieces(pieces: pd.DataFrame, n_min: int, n_max: int, tail_rule: str):
    """:func:`pavabc` over pieces (atoms, and mixed cells pushed whole where rules (F) and (N)
    above allow): the first piece of each block, and the mixed cells that were not decided
    (pushed as one atom, speculatively; the blocks are exact when there are none)."""
    W = [int(round(w)) for w in pieces["W"].to_numpy(float)]
    Y = [int(round(y)) for y in pieces["swy"].to_numpy(float)]
    atom = pieces["level"].to_numpy()
    A = len(W)
    undecided = []
    tail = A
    if n_min > 0 and A:
        suffix = np.cumsum(np.asarray(W[::-1], dtype=object))
        tail = max(A - 1 - int(np.searchsorted(suffix.astype(float), n_min)), 0)
        if not atom[tail]:
            undecided.append(tail)  # the tail's first atom lies inside this cell
    starts, bw, by_ = [], [], []

    def merge_loop():
        while len(bw) >= 2:
            w0, w1, y0, y1 = bw[-2], bw[-1], by_[-2], by_[-1]
            size = w0 + w1
            if not (size <= n_min or (size <= n_max and y0 * w1 >= y1 * w0)):
                break
            bw[-2:] = [size]
            by_[-2:] = [y0 + y1]
            starts.pop()

    for a in range(tail):
        w, y = W[a], Y[a]
        if not atom[a] and not _decided(bw, by_, w, y, n_min, n_max):
            undecided.append(a)
        if not atom[a] and bw and bw[-1] + w <= n_min and a not in undecided[-1:]:
            bw[-1] += w  # (F): the run is absorbed by the top block
            by_[-1] += y
            continue
        starts.append(a)
        bw.append(w)
        by_.append(y)
        if atom[a] or a in undecided[-1:]:
            merge_loop()
    if tail < A:
        w_tail = sum(W[tail:])
        last = bw[-1] if bw else None
        merge = last is not None and ((w_tail + n_min <= n_max) if tail_rule == "code"
                                      else (last + w_tail <= n_max))
        if not merge:
            starts.append(tail)
    if not starts:
        starts = [0]
    return np.array(starts), np.array(sorted(set(undecided)), dtype=np.int64)


def _decided(bw: list, by_: list, w: int, y: int, n_min: int, n_max: int) -> bool:
    """Whether a run of atoms of total weight w and label sum y (order unknown) leaves the stack
    (weights ``bw``, label sums ``by_``) the same for every order: rule (F) or (N) above."""
    zeros = w - y
    if not bw:
        return w <= n_min  # every atom forced into one block, nothing below
    xw, xy = bw[-1], by_[-1]
    if xw + w <= n_min:  # (F)
        if len(bw) < 2:
            return True
        vw, vy = bw[-2], by_[-2]
        if vw + xw + 1 <= n_min:
            return False
        if vw + xw + 1 > n_max:
            return True
        least = xy * vw - vy * xw - (vy * zeros if zeros else -(vw - vy) if vw > vy else 0)
        return least > 0
    if w > n_min:
        return False
    # (N): the first atom starts its own block whatever it is
    return xw + 1 > n_min and (xw + 1 > n_max or (zeros == 0 and xw > xy))


def _histogram_pieces(cells: pd.DataFrame, by, strategy: str, bins: int, levels_in
                      ) -> pd.DataFrame:
    by = list(by)
    per_group = {key_tuple(k): p.sort_values("cell", ignore_index=True)
                 for k, p in groups(cells, by)}
    wanted = {key: _cut_cells(part, strategy, bins) for key, part in per_group.items()}
    levels = _levels(levels_in, by, wanted)
    out = []
    for key, part in per_group.items():
        own = wanted[key]
        whole = part[~part["cell"].isin(own)].assign(level=False)
        lv = levels.get(key)
        if own and lv is not None:
            lv = lv[lv["cell"].isin(own)]
            singles = lv.assign(p_min=lv["p"], p_max=lv["p"], level=True).drop(columns="p")
            whole = pd.concat([whole, singles], ignore_index=True)
        pieces = whole.sort_values(
            ["p_min", "p_max"], ignore_index=True)
        pieces["bin"] = _assign(pieces, strategy, bins)
        out.append(pieces.assign(**dict(zip(by, key))))
    return pd.concat(out, ignore_index=True)


def _cut_cells(part: pd.DataFrame, strategy: str, bins: int) -> set:
    """Cells with scores on both sides of a bin boundary: their levels are needed."""
    if strategy == "uniform":
        inner = np.linspace(0, 1, bins + 1)[1:-1]
        lo, hi = part["p_min"].to_numpy(), part["p_max"].to_numpy()
        cut = np.zeros(len(part), bool)
        for e in inner:  # left-closed: a cell is cut when some score < e ≤ another
            cut |= (lo < e) & (e <= hi)
        return set(part.loc[cut, "cell"])
    W = part["W"].to_numpy(float)
    after = np.cumsum(W)
    before = after - W
    N = after[-1] if len(after) else 0
    cuts = np.floor(np.arange(1, bins) * N / bins)  # first rank of bin k, ⌊kN/B⌋
    cut = np.zeros(len(part), bool)
    for c in cuts:
        cut |= (before < c) & (c < after)
    return set(part.loc[cut, "cell"])


def _assign(pieces: pd.DataFrame, strategy: str, bins: int) -> np.ndarray:
    if strategy == "uniform":  # np.digitize on linspace edges, right=False; 1 in the last bin
        inner = np.linspace(0, 1, bins + 1)[1:-1]
        return np.searchsorted(inner, pieces["p_min"].to_numpy(float), side="right")
    # positional: a piece (a whole cell, or a run of tied scores) goes where its first row goes
    W = pieces["W"].to_numpy(float)
    first = np.cumsum(W) - W
    N = W.sum()
    return np.floor(((first + 1) * bins - 1) / max(N, 1)).astype(int).clip(0, bins - 1)


def _levels(levels_in, by, wanted: dict, grid: int = CELLS) -> dict:
    """The levels inside the wanted cells ({group key tuple: cells}, or {group key tuple:
    {cell: its rows}} to read them in slabs of the memory budget), by group, each with its
    ``cell``: cell c is the score range [c/grid, (c + 1)/grid), exact in doubles."""
    if not any(wanted.values()):
        return {}
    if levels_in is None:
        raise ValueError("these bins need the levels of the cells holding their edges: pass "
                         "levels_in")
    ranges = [(key, c / grid, (c + 1) / grid) for key, cells in wanted.items()
              for c in sorted(cells)]
    if isinstance(next(iter(wanted.values())), dict):  # cell -> its rows: read in slabs
        sizes = np.array([wanted[key][c] for key, cells in wanted.items()
                          for c in sorted(cells)], dtype=np.int64)
        chunk = chunks(sizes, slab_rows())
        frame = pd.concat([levels_in([r for r, mine in zip(ranges, chunk == part) if mine])
                           for part in np.unique(chunk)], ignore_index=True)
    else:
        frame = levels_in(ranges)
    frame = frame.assign(cell=np.minimum(np.floor(frame["p"].to_numpy(float) * grid),
                                         grid - 1).astype(np.int64))
    return {key_tuple(k): p for k, p in groups(frame, list(by))}


def _check_tests(summary: pd.DataFrame, by, n_min, strategy: str, bins: int) -> None:
    """Refuse, before any further pass, more exact binomial tests than the budget's ``tests``:
    one per bin, at most B a group for uniform and quantile bins, and for PAVA-BC at most
    ⌊N/(n_min + 1)⌋ + 1 (every block but the tail holds more than n_min rows)."""
    sizes = (summary.groupby(list(by), dropna=False)["W"].sum().to_numpy(float) if by
             else np.array([float(summary["W"].sum())]))
    if strategy == "pavabc":
        n_low = np.floor(sizes / 20) if n_min is None else np.full(len(sizes), float(n_min))
        count = float(np.minimum(np.floor(sizes / (n_low + 1)) + 1, np.maximum(sizes, 1)).sum())
        option = f"n_min={n_min!r}"
    else:
        count, option = float(bins) * len(sizes), f"bins={bins}"
    budget = options.BUDGET.tests
    if count > budget:
        raise BudgetError(
            f"tce(): {option} over {len(sizes):,} group(s) makes up to {count:,.0f} bins, each "
            f"an exact binomial test (about 13 ms); the budget is {budget:,} tests "
            "(sqlcal.options.BUDGET.tests). Pass a larger n_min= (bins hold more than n_min "
            "rows), fewer groups or bins=, or raise the budget with "
            "sqlcal.options.budget(tests=...)")


def _cell_levels(src: Source, cells: int, ranges) -> pd.DataFrame:
    """The levels of whole cells of the 2^k grid ``cells``, given as score ranges (key tuple,
    lo, hi): :func:`sqlcal.metrics.cells.cell_levels`."""
    return cell_levels(src, cells, [(key, int(round(lo * cells))) for key, lo, _ in ranges])


def _require_counts(src: Source) -> None:
    executor.require_binary_labels(src, "TCE")
    if src.sampling_rate is not None:  # whole 1/rate weights are not counts of observed rows
        raise InvalidInputError(
            f"TCE's exact binomial tests need observed counts, and negative_sampling_rate="
            f"{src.sampling_rate!r} makes each kept negative a sample of 1/rate negatives it did "
            "not observe: measure TCE on the full log, or use a metric whose interval carries "
            "the sampling (normalized_entropy, calibration_ratio, spiegelhalter, reliability)")
    if src.weighted and not src.integer_weights:
        raise InvalidInputError(
            f"TCE needs whole-number weights (counts of identical predictions): weight column "
            f"{src.weight!r} has fractional values, and there is no exact binomial test for them")


# -- the interval ----------------------------------------------------------------------------


def tce_interval(table: pd.DataFrame, units: pd.DataFrame, *, by: Sequence[str], alpha: float,
                 test: str, confidence: float, replicates: int, seed: int,
                 strategy: str = "pavabc", n_min=None, n_max=None, bins: int = 10,
                 tail_rule: str = "code") -> pd.DataFrame:
    r"""Per group, ``ci_lower`` and ``ci_upper`` of TCE (percent): a bootstrap of the group's
    rows that re-fits the bins in every replicate.

    ``table``: the bins table (:func:`tce_bins_finish`); ``units``: the group's score histogram
    (keys, ``bin``, ``p_min``, ``p_max``, ``W``, ``swy``, ``level``: distinct scores, or score
    cells whose rows spread over [p_min, p_max]); the other options as :func:`tce` was given.

    Each replicate draws N rows with replacement from the group's N (Efron & Tibshirani (1993),
    ch. 6), without drawing a row at a time: rows of one score and one label are alike, so the
    replicate's counts of each (score, label) pair are one multinomial draw of N over those
    pairs, exact on distinct scores. Above :data:`UNITS` distinct scores (or cells), consecutive
    ones are pooled into :data:`UNITS` units of about equal weight (never across a fixed
    equal-width bin edge), each a run of scores in order. On the replicate the bins are cut
    again, as TCE cuts them: PAVA-BC over the units with the same limits (the group's N is
    the replicate's), the quantile cut at the replicate's ranks, the equal-width bins as they
    are; so the spread of the bins' counts and of their re-fit is in the replicates, which a
    bootstrap within fixed bins leaves out. Each replicate bin's test accepts the scores
    :math:`[a^*, b^*]`: for the binomial test Wilson's score interval at the bin's
    :math:`(k^*, n^*)`, within :math:`0.56/n^*` of the exact set's ends (measured from
    n = 100 to 20,000; its islands left out), for the t-test its own interval, exact; a unit
    holding an end has its replicate rows inside drawn binomially with the exact share of its
    scores inside (a cell's rows spread evenly over its range).

    With :math:`T^*` the replicates' TCE and :math:`D^* = T^* - \bar T^*`, the interval is
    :math:`[T + q_{\alpha/2}(D^*), T + q_{1-\alpha/2}(D^*)]` clipped to [0, 100] (the
    percentile interval, Efron & Tibshirani (1993), ch. 13, moved to centre on T). It is
    centred on T because T estimates its own expectation at this sample size without bias,
    while :math:`\bar T^*` does not: the bootstrap's world (each score's rows labelled as in
    the sample) is less calibrated than the population, and its TCE is higher. The
    deviations are not reflected (the basic interval's :math:`T - q(D^*)`): in the
    simulations that form covered less (see :func:`tce`).
    """
    by = list(by)
    a2 = (1 - confidence) / 2
    per_group = {key_tuple(k): p for k, p in groups(units, by)}
    rows = []
    for keys, part in groups(table, by):
        N = int(round(float(part["W"].sum())))
        lo = hi = np.nan
        value = 100 * float(part["rejected"].sum()) / N if N > 0 else np.nan
        if N > 0:
            low, high = _block_limits(N, n_min, n_max)
            draws = refit_draws(per_group[key_tuple(keys)], N, strategy=strategy, n_min=low,
                                n_max=high, bins=bins, tail_rule=tail_rule, alpha=alpha,
                                test=test, replicates=replicates,
                                rng=np.random.default_rng([int(seed), 1]))
            spread = draws - draws.mean()
            lo = float(np.clip(value + np.quantile(spread, a2), 0, 100))
            hi = float(np.clip(value + np.quantile(spread, 1 - a2), 0, 100))
        rows.append({**keys, "ci_lower": lo, "ci_upper": hi})
    return pd.DataFrame(rows, columns=[*by, "ci_lower", "ci_upper"])


def refit_draws(units: pd.DataFrame, N: int, *, strategy: str, n_min: int, n_max: int,
                bins: int, tail_rule: str, alpha: float, test: str, replicates: int,
                rng: np.random.Generator) -> np.ndarray:
    """One group's TCE (percent) in each replicate of :func:`tce_interval`'s bootstrap."""
    unit = units.sort_values(["p_min", "p_max"], kind="stable")
    lo, hi = unit["p_min"].to_numpy(float), unit["p_max"].to_numpy(float)
    point = unit["level"].to_numpy(bool) | (hi <= lo)
    pos = unit["swy"].to_numpy(float)
    neg = unit["W"].to_numpy(float) - pos
    fixed = unit["bin"].to_numpy(np.int64)
    # pooled units: runs of scores of about equal weight, never across a fixed bin
    before = np.cumsum(pos + neg) - (pos + neg)
    run = np.floor(before * UNITS / max(N, 1)).astype(np.int64)
    key = fixed * (UNITS + 1) + run if strategy == "uniform" else run
    _, sid = np.unique(key, return_inverse=True)
    S = int(sid.max()) + 1
    first = np.searchsorted(sid, np.arange(S), "left")
    last = np.searchsorted(sid, np.arange(S), "right")
    P, Q = np.bincount(sid, pos, S), np.bincount(sid, neg, S)
    s_lo, s_hi = np.minimum.reduceat(lo, first), np.maximum.reduceat(hi, first)
    s_bin = fixed[first]
    cum = {"pos": np.concatenate([[0.0], np.cumsum(pos)]),
           "neg": np.concatenate([[0.0], np.cumsum(neg)])}
    mass = {"pos": pos, "neg": neg}

    def share(s, a, b, side, total):
        # the share of unit s's rows of one label with a score in [a, b] (exact on scores)
        c, m = cum[side], mass[side]

        def below(x, strict):
            i = np.searchsorted(lo, x, side="left" if strict else "right") - 1
            j = np.maximum(i, 0)
            with np.errstate(divide="ignore", invalid="ignore"):
                frac = np.where(point[j], 1.0, np.clip((x - lo[j]) / (hi[j] - lo[j]), 0, 1))
            return np.clip(np.where(i >= 0, c[j] + m[j] * frac, 0.0), c[first[s]], c[last[s]])

        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(total[s] > 0, np.clip((below(b, False) - below(a, True))
                                                  / total[s], 0, 1), 0.0)

    probs = np.concatenate([P, Q]) / max(N, 1)
    out = np.empty(replicates)
    chunk = max(1, min(replicates, DRAW_CHUNK // max(S, 1)))
    for c0 in range(0, replicates, chunk):
        r = min(chunk, replicates - c0)
        draw = rng.multinomial(N, probs, size=r)
        Yr, Nr = draw[:, :S], draw[:, S:]
        Wr = Yr + Nr
        if strategy == "pavabc":
            starts = _pavabc_replicates(Wr, Yr, n_min, n_max, tail_rule)
        else:
            if strategy == "quantile":  # positional, as _assign: ⌊((first + 1)B − 1)/N⌋
                ahead = np.cumsum(Wr, axis=1) - Wr
                bin_of = np.clip(np.floor(((ahead + 1) * bins - 1) / max(N, 1)), 0, bins - 1)
            else:
                bin_of = np.broadcast_to(s_bin, (r, S))
            starts = np.ones((r, S), bool)
            starts[:, 1:] = bin_of[:, 1:] != bin_of[:, :-1]
        rep, begin = np.nonzero(starts)
        end = np.append(begin[1:], S)
        end[np.append(rep[1:] != rep[:-1], True)] = S
        PW = np.concatenate([np.zeros((r, 1), np.int64), np.cumsum(Wr, axis=1)], axis=1)
        PY = np.concatenate([np.zeros((r, 1), np.int64), np.cumsum(Yr, axis=1)], axis=1)
        n, k = PW[rep, end] - PW[rep, begin], PY[rep, end] - PY[rep, begin]
        live = n > 0
        rep, begin, end, n, k = rep[live], begin[live], end[live], n[live], k[live]
        a, b = _replicate_sets(k, n, alpha, test)
        # units wholly inside [a, b], then the (at most two) holding an end, thinned
        i0 = np.clip(np.searchsorted(s_lo, a, "left"), begin, end)
        i1 = np.clip(np.searchsorted(s_hi, b, "right"), begin, end)
        inside = np.where(i1 > i0, PW[rep, np.maximum(i1, i0)] - PW[rep, i0], 0).astype(float)
        at_a = np.searchsorted(s_lo, a, "left") - 1
        at_b = np.searchsorted(s_hi, b, "right")
        for s, other in ((at_a, None), (at_b, at_a)):
            ok = (s >= begin) & (s < end) & ~((s >= i0) & (s < i1))
            if other is not None:
                ok &= s != other
            s = np.clip(s, 0, S - 1)
            inside += rng.binomial(np.where(ok, Yr[rep, s], 0),
                                   np.where(ok, share(s, a, b, "pos", P), 0.0))
            inside += rng.binomial(np.where(ok, Nr[rep, s], 0),
                                   np.where(ok, share(s, a, b, "neg", Q), 0.0))
        out[c0:c0 + r] = np.bincount(rep, n - inside, r)
    return 100 * out / max(N, 1)


def _pavabc_replicates(Wr: np.ndarray, Yr: np.ndarray, n_min: int, n_max: int,
                       tail_rule: str) -> np.ndarray:
    """:func:`pavabc` run on every replicate at once (rows of ``Wr``, ``Yr``: the units' weight
    and label sum; a unit of weight 0 is absent): whether each unit starts a block. The loop
    walks the units once, the replicates' stacks side by side (each a row of a flat array):
    every pair of adjacent blocks weighs more than n_min, so a stack holds at most
    2N/(n_min + 1) + 1 blocks."""
    r, U = Wr.shape
    N = int(Wr[0].sum()) if r else 0
    if n_min > 0:
        suffix = np.cumsum(Wr[:, ::-1], axis=1)
        first = np.argmax(Wr > 0, axis=1)  # the tail starts at a unit that holds rows
        tail = np.maximum(U - 1 - (suffix < n_min).sum(axis=1), first)
    else:
        tail = np.full(r, U)
    D = int(min(U, 2 * N // (n_min + 1) + 3)) + 2
    sw, sy, ss = (np.zeros(r * D, np.int64) for _ in range(3))
    base = np.arange(r) * D
    top = base - 1  # each replicate's top block, as a flat index
    pushed = ((Wr > 0) & (np.arange(U)[None, :] < tail[:, None])).T.copy()
    WT, YT = Wr.T.copy(), Yr.T.copy()
    for u in range(U):
        i = np.flatnonzero(pushed[u])
        if not len(i):
            continue
        t = top[i] + 1
        sw[t], sy[t], ss[t] = WT[u, i], YT[u, i], u
        top[i] = t
        while True:  # the top two merge while small, or in order and within n_max
            deep = t > base[i]
            i, t = i[deep], t[deep]
            w0, w1, y0, y1 = sw[t - 1], sw[t], sy[t - 1], sy[t]
            size = w0 + w1
            merge = (size <= n_min) | ((size <= n_max) & (y0 * w1 >= y1 * w0))
            if not merge.any():
                break
            i, t = i[merge], t[merge] - 1
            sw[t], sy[t] = size[merge], y0[merge] + y1[merge]
            top[i] = t
    depth = top - base + 1
    starts = np.zeros((r, U), bool)
    starts[np.repeat(np.arange(r), depth),
           ss.reshape(r, D)[np.arange(D)[None, :] < depth[:, None]]] = True
    if n_min > 0:  # the tail block: merged into the last, or a block of its own
        w_tail = np.take_along_axis(suffix, np.clip(U - 1 - tail, 0, U - 1)[:, None], 1)[:, 0]
        last = sw[np.maximum(top, base)]
        merge = (depth > 0) & ((w_tail + n_min <= n_max) if tail_rule == "code"
                               else (last + w_tail <= n_max))
        alone = np.flatnonzero((tail < U) & ~merge)
        starts[alone, tail[alone]] = True
    return starts


def _replicate_sets(k: np.ndarray, n: np.ndarray, alpha: float, test: str):
    """The replicate bins' accepted scores [a, b] (see :func:`tce_interval`): Wilson's score
    interval for the binomial test, the t-test's own interval (n ≤ 1: everything accepted)."""
    k, n = np.asarray(k, float), np.asarray(n, float)
    rate = k / np.maximum(n, 1)
    if test != "binomial":
        s = np.sqrt(n / np.maximum(n - 1, 1) * rate * (1 - rate))
        half = stats.t.isf(alpha / 2, np.maximum(n - 1, 1)) * s / np.sqrt(np.maximum(n, 1))
        return (np.where(n <= 1, 0.0, np.maximum(rate - half, 0.0)),
                np.where(n <= 1, 1.0, np.minimum(rate + half, 1.0)))
    z2 = stats.norm.isf(alpha / 2) ** 2
    centre = (rate + z2 / (2 * n)) / (1 + z2 / n)
    half = np.sqrt(z2 * rate * (1 - rate) / n + z2 * z2 / (4 * n * n)) / (1 + z2 / n)
    return np.clip(centre - half, 0.0, 1.0), np.clip(centre + half, 0.0, 1.0)


# -- the tests and the counting ---------------------------------------------------------------


def _count_rejections(by, pieces: pd.DataFrame, alpha: float, test: str, levels_in,
                      grid: int = CELLS):
    by = list(by)
    rows, endpoint_cells = [], {}
    plans = []
    for key, part in groups(pieces, [*by, "bin"]):
        k, n = float(part["swy"].sum()), float(part["W"].sum())
        intervals = _acceptance(k, n, alpha, test)
        inside, outside = _classify(part, intervals)
        unsure = ~inside & ~outside & ~part["level"].to_numpy()
        group = key_tuple({c: key[c] for c in by})
        if unsure.any():
            endpoint_cells.setdefault(group, {}).update(zip(
                part.loc[unsure, "cell"].astype(int).tolist(), part.loc[unsure, "n"].tolist()))
        plans.append((key, part, k, n, intervals, inside, unsure))
    levels = _levels(levels_in, by, endpoint_cells, grid)
    for key, part, k, n, intervals, inside, unsure in plans:
        accepted_w = float(part.loc[inside & ~part["level"].to_numpy(), "W"].sum())
        # single scores: decided one by one (exactly, near an endpoint)
        singles = part[part["level"].to_numpy()]
        if len(singles):
            rej = _decide(k, n, singles["p_min"].to_numpy(float), alpha, test, intervals)
            accepted_w += float(singles.loc[~rej, "W"].sum())
        if unsure.any():  # cells holding an endpoint: their levels
            group = key_tuple({c: key[c] for c in by})
            lv = levels[group]
            lv = lv[lv["cell"].isin(part.loc[unsure, "cell"])]
            rej = _decide(k, n, lv["p"].to_numpy(float), alpha, test, intervals)
            accepted_w += float(lv.loc[~rej, "W"].sum())
        group = {c: key[c] for c in by}
        rows.append(_bin_row(group, key["bin"], float(part["p_min"].min()),
                             float(part["p_max"].max()), int(part["n"].sum()), n, k,
                             float(part["swp"].sum()), intervals, n - accepted_w))
    table = pd.DataFrame(rows)
    return table.sort_values([*by, "bin"], ignore_index=True) if len(table) else table


def _classify(part: pd.DataFrame, intervals) -> tuple[np.ndarray, np.ndarray]:
    """Whole cells surely inside an accepted interval, or surely outside all (beyond the guard)."""
    lo, hi = part["p_min"].to_numpy(float), part["p_max"].to_numpy(float)
    inside = np.zeros(len(part), bool)
    touching = np.zeros(len(part), bool)
    for a, b in intervals:
        margin_a, margin_b = binomial.guard(a), binomial.guard(b)
        inside |= (lo > a + margin_a) & (hi < b - margin_b)
        touching |= (hi >= a - margin_a) & (lo <= b + margin_b)
    return inside, ~touching


def _acceptance(k: float, n: float, alpha: float, test: str):
    if n <= 0:
        return [(0.0, 1.0)]
    if test == "binomial":
        return binomial.acceptance_set(int(round(k)), int(round(n)), alpha)
    if n <= 1:  # no variance estimate: nothing is rejected (documented)
        return [(0.0, 1.0)]
    rate = k / n
    s = np.sqrt(n / (n - 1) * rate * (1 - rate))
    if s == 0:  # all labels equal: only the observed rate itself is not rejected
        return [(rate, rate)]
    half = stats.t.isf(alpha / 2, n - 1) * s / np.sqrt(n)
    return [(max(rate - half, 0.0), min(rate + half, 1.0))]


def _decide(k, n, q, alpha, test, intervals) -> np.ndarray:
    if test == "binomial":
        return binomial.decide(int(round(k)), int(round(n)), q, alpha, intervals)
    rejected = ~binomial.accepted(q, intervals)
    close = binomial.near_endpoint(q, intervals)
    if close.any() and n > 1:
        rejected[close] = _ttest_pvalue(k, n, q[close]) <= alpha
    return rejected


def _ttest_pvalue(k, n, q):
    """``scipy.stats.ttest_1samp`` of the bin's n labels (k ones) against q."""
    rate = k / n
    s = np.sqrt(n / (n - 1) * rate * (1 - rate))
    with np.errstate(divide="ignore", invalid="ignore"):
        t = (rate - q) / (s / np.sqrt(n))
    p = 2 * stats.t.sf(np.abs(t), n - 1)
    return np.where(s > 0, p, np.where(q == rate, 1.0, 0.0))
