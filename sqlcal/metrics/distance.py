"""Distance-to-calibration metrics on the level sets: the Lipschitz (smooth) calibration error of
Kakade and Foster, the lower and upper distances to calibration of Błasiok, Gopalan, Hu and
Nakkiran, and the interval calibration error (as surveyed by Gopalan and Hu (2025), Calibration
through the Lens of Indistinguishability).

All three are functions of the empirical law of (score, label) alone, whose sufficient statistic
is the levels summary: per distinct score v_j, the weight W_j and the residual R_j = Σw(y − p).
With continuous scores there is one level per row; the engine then returns the 2^14-cell score
histogram instead, each cell placed at its rows' mean score, which keeps every R_j exact and moves
each row by at most its distance to that mean (the ``quantization_bound`` column, 0 when exact).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
from scipy import sparse
from scipy.optimize import linprog

from sqlcal.inputs.sources import Source
from sqlcal.metrics import level_sets, per_group, result, safe_div
from sqlcal.metrics._registry import Report, metric
from sqlcal.metrics.cells import (
    SMOOTH_CELLS,
    cells_needs,
    cells_summary,
    pair_levels,
    summary_parts,
)
from sqlcal.options import Option, checked, costs_distance
from sqlcal.query import declared, planner
from sqlcal.query.executor import as_source

METHODS = ("auto", "exact", "grid")
#: what the three distances declare alike: the levels, or the score-cell histogram whose mixed
#: cells "auto" then reads the levels of when they are few (a follow-up)
_DISTANCES = dict(
    refining={("method", "auto"): "method='grid' (the histogram, with its quantization_bound) "
              "or method='exact' (the levels)"},
    cost=costs_distance)
_METHOD = Option("choice", "levels: exact, grid cells, or exact when small enough",
                 choices=METHODS, renamed=(("cells", "grid"), ("levels", "exact")))
#: "auto" reads the exact levels when at most this many rows share a score cell with another score
MAX_LEVELS = 50_000
#: exact set-partition search for the upper distance up to this many levels (Bell(8) = 4140)
PARTITION_LEVELS = 8
#: exact intCE (every candidate width) up to this many levels; geometric widths above
INTERVAL_LEVELS = 64
#: the grouping dynamic programmes run on at most this many contiguous buckets
GROUPING_LEVELS = 1024
#: local search from the best contiguous grouping when it has at most this many groups
REGROUP_GROUPS = 200
#: choices of the upper distance's searches (a cut, a merge, a move) whose costs differ by less
#: than this times the total weight are ties, broken in a canonical order: the summary sums
#: differ in their last bits from run to run (parallel sums), and a greedy search must not turn
#: that into another local optimum (it did: 1.5% apart on the same data)
TIE = 1e-10


@metric(**_DISTANCES, needs=lambda src, o: _levels_needs(src, o),
        report={"lipschitz_calibration_error": Report(
            {"lipschitz_calibration_error": "lipschitz_calibration_error"})},
        trust={"quantization_bound": "lipschitz_quantization_bound", "lipschitz": None},
        options={"method": _METHOD})
@checked
def lipschitz_calibration_error(
    data: Any,
    *,
    score: str | None = None,
    label: str | None = None,
    weight: str | None = None,
    by: str | Sequence[str] = (),
    where: Any = None,
    lipschitz: float = 1.0,
    method: str = "auto",
    max_levels: int = MAX_LEVELS,
    **source_options: Any,
) -> pd.DataFrame:
    r"""The smooth (Lipschitz) calibration error smCE of Kakade and Foster.

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
    lipschitz : float, default 1.0
        The Lipschitz constant K of the weight functions. K = 1 is smCE; K = 2 is the earth
        mover's distance EMD(J*, J^p) between the law of (score, label) and that of (score, a
        label drawn from the score) under the metric |v − v'| + |y − y'|.
    method : {"auto", "exact", "grid"}, default "auto"
        ``"exact"``: the level sets (one GROUP BY score, as many rows as distinct scores).
        ``"grid"``: the 16384-cell score histogram, each cell at its rows' mean score.
        ``"auto"``: the cells first; then, if at most ``max_levels`` rows lie in cells holding
        more than one distinct score, the levels inside those cells (exact); else the cells.
    max_levels : int, default 50000
        See ``method``.
    **source_options
        Further options of :func:`sqlcal.source`, such as ``table=``, ``on_invalid=`` and
        ``soft_labels=``.

    Returns
    -------
    pandas.DataFrame
        One row per group: the keys, ``lipschitz_calibration_error``, ``n``, ``W``,
        ``quantization_bound`` (the value is within it of the exact one; 0 when exact),
        ``n_levels`` (level sets or cells used), ``lipschitz`` (the constant K); with
        ``on_invalid="drop"``, ``n_dropped``.

    See Also
    --------
    smooth_ece : relplot's kernel-smoothed error, a different quantity.
    distance_to_calibration : its lower distance is within a factor 2 of smCE.
    ece : the binned error, an upper bound.

    Notes
    -----
    Kakade and Foster (2008), Deterministic calibration and Nash equilibrium; the survey of
    Gopalan and Hu (2025), Calibration through the Lens of Indistinguishability, Def. 3.2. Not
    relplot's smooth ECE
    (:func:`sqlcal.smooth_ece`). With levels :math:`v_1<\dots<v_m`, residuals
    :math:`R_j=\sum_{p_i=v_j}w_i(y_i-p_i)/W` and gaps :math:`\Delta_j=v_{j+1}-v_j`,

    .. math:: \mathrm{smCE}_K=\max_{w\ K\text{-Lipschitz},\ |w|\le1}\Big|\sum_jw(v_j)R_j\Big|
       =\max_{|z_j|\le1,\ |z_{j+1}-z_j|\le K\Delta_j}\sum_jR_jz_j,

    a linear programme solved exactly by dynamic programming: the value function
    :math:`F_{j+1}(z)=R_{j+1}z+\max_{|z'-z|\le K\Delta_j}F_j(z')` is concave piecewise linear,
    kept as its breakpoints left and right of its maximum in two deques with lazy shifts ("slope
    trick"). Each level costs O(1) plus the breakpoints the maximum crosses (pure Python): about
    1 s for 10^5 levels and 12 s for 10^6 (Beta scores, Bernoulli labels, query included), 0.1 s
    on the 16384 cells. On cells, R is exact and each row moves to its
    cell's mean score, so the value moves by at most :math:`K\,\mathbb E|p-\bar p_{\text{cell}}|`,
    bounded by :math:`\sum_c 2(p_{\max}-\bar p_c)(\bar p_c-p_{\min})/(p_{\max}-p_{\min})\cdot
    W_c/W` (the largest mean absolute deviation with that range and mean; at most 2^-15).
    CITL ≤ smCE ≤ ECE, EMD/2 ≤ smCE ≤ EMD (Lemma 3.4), and smCE/2 ≤ lower distance ≤ 2·smCE
    (Theorem 6.7).

    References
    ----------
    .. [1] S. M. Kakade and D. P. Foster, "Deterministic Calibration and Nash Equilibrium", Journal
       of Computer and System Sciences 74(1), 2008.
    .. [2] P. Gopalan and L. Hu, "Calibration through the Lens of Indistinguishability", ACM SIGecom
       Exchanges 23(1), 2025.

    Examples
    --------
    >>> import pandas as pd, sqlcal
    >>> df = pd.DataFrame({"p": [0.4, 0.6], "y": [0, 1]})
    >>> out = sqlcal.lipschitz_calibration_error(df, score="p", label="y")
    >>> round(float(out["lipschitz_calibration_error"].iloc[0]), 12)
    0.04
    """
    src = as_source(data, score, label, weight=weight, by=by, where=where, **source_options)
    out = lipschitz_finish(_reduced(src, method, max_levels), by=src.by, lipschitz=lipschitz)
    return result(src, out, ["lipschitz_calibration_error", "quantization_bound", "n_levels"],
                  {"lipschitz": lipschitz})


@metric(**_DISTANCES, needs=lambda src, o: _levels_needs(src, o),
        report={"distance_to_calibration": Report(
            {"lower_distance": "lower_distance", "lower_tolerance": "lower_tolerance",
             "upper_distance": "upper_distance"})},
        trust={"upper_method": None, "lower_quantization": None, "quantization_bound": None},
        options={"method": _METHOD})
@checked
def distance_to_calibration(
    data: Any,
    *,
    score: str | None = None,
    label: str | None = None,
    weight: str | None = None,
    by: str | Sequence[str] = (),
    where: Any = None,
    grid: int = 128,
    lower_levels: int = 64,
    method: str = "auto",
    max_levels: int = MAX_LEVELS,
    **source_options: Any,
) -> pd.DataFrame:
    r"""The bracket on the distance to calibration: the lower distance and an upper bound on the
    upper distance, which hold the true (unknowable) distance between them.

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
    grid : int, default 128
        The lower-distance LP places calibrated mass on the points k/grid and the levels.
    lower_levels : int, default 64
        The LP runs on at most this many contiguous buckets of levels (at their mean scores);
        its size is about 2·lower_levels·(grid + lower_levels) variables (0.1 s at the
        defaults, 1 s at 128/128).
    method : {"auto", "exact", "grid"}, default "auto"
        Which levels to read, as for :func:`lipschitz_calibration_error`.
    max_levels : int, default 50000
        Rows in shared score cells up to which ``method="auto"`` reads the exact levels, as for
        :func:`lipschitz_calibration_error`.
    **source_options
        Further options of :func:`sqlcal.source`, such as ``table=``, ``on_invalid=`` and
        ``soft_labels=``.

    Returns
    -------
    pandas.DataFrame
        One row per group: the keys,

        - ``lower_distance``: the grid LP value. The lower distance lies in
          [``lower_distance`` − ``lower_tolerance``, ``lower_distance`` +
          ``lower_quantization``];
        - ``n``, ``W``;
        - ``lower_tolerance``: half the largest gap of the LP's grid plus
          ``lower_quantization``;
        - ``lower_quantization``: a bound on :math:`\mathbb E|p-\bar p|`, the distance from
          the scores to the mean score of their LP bucket (0 when the LP runs on exact levels);
        - ``upper_distance``: the smallest valid upper bound on the upper distance, and
          ``upper_method``, the bound that gave it (see Notes);
        - ``abs_citl`` (|E[y − p]|, a lower bound on every distance),
          ``lipschitz_calibration_error`` (smCE on the levels used; max(abs_citl, smCE/2) ≤
          lower distance ≤ 2·smCE, up to
          ``quantization_bound``, Theorem 6.7);
        - ``quantization_bound``: the same bound for the cells used (0 on exact levels), and
          ``n_levels``, the number of levels or cells used;
        - with ``on_invalid="drop"``, ``n_dropped``.

    See Also
    --------
    lipschitz_calibration_error : the smooth error, within a factor 2 of the lower distance.
    interval_calibration_error : an upper bound on the upper distance.
    cutoff_error : the testable error behind the 3·sqrt(cutoff) bound.

    Notes
    -----
    Błasiok, Gopalan, Hu and Nakkiran (2023), A Unifying Theory of Distance from Calibration
    (STOC 2023), as presented in Gopalan and Hu (2025), Calibration through the Lens of
    Indistinguishability, Section 6. The distance to calibration
    :math:`\mathrm{dCE}(p)=\min_{q\text{ calibrated}}\mathbb E|p-q|` depends on the feature space,
    which logged (score, label) rows do not show; over all spaces consistent with the data it ranges
    over :math:`[\underline{\mathrm{dCE}},\overline{\mathrm{dCE}}]`, and by Corollary 6.8 no measure
    computed from the law of (score, label) can tell dCE ≥ η from dCE ≤ 2η²: the bracket can be that
    wide (Theorem 6.9: :math:`\overline{\mathrm{dCE}}\le4\sqrt{\underline{\mathrm{dCE}}}`).

    *Lower distance.* The coupling LP: move the mass at (v_j, y) to points u of a grid
    :math:`U` so that the label mean at every u is u, at least cost
    :math:`\sum|u-v_j|\cdot\text{mass}`. On :math:`U` it overestimates by at most half the
    largest gap of :math:`U`: split the mass at an off-grid u between its neighbours g < u < g'
    with label means g and g', so each unit moves (g' − u) or (u − g), on average
    2(g' − u)(u − g)/(g' − g) ≤ (g' − g)/2 (the cruder bound h is twice this). Bucketing levels
    at their mean scores moves the lower distance by at most :math:`\mathbb E|p-\bar p|`, both
    ways (it is 1-Lipschitz in the scores). Hence the interval above.

    *Upper distance* (Theorem 6.6): the least :math:`\mathbb E|p-\kappa(p)|` over maps κ with
    κ(p) calibrated, i.e. over groupings of the levels, each moved to its group's label mean.
    Bounds, all valid: ``"partitions"``: every grouping, exact (at most 8 levels);
    ``"contiguous"``: the best grouping into runs of consecutive levels (an O(m²) dynamic
    programme on at most 1024 buckets, evaluated on the levels); ``"regrouped"``: a local
    search from that grouping (merge two groups, adjacent or not, or move one level to another
    group or its own, while a step lowers the cost; when it has at most 200 groups);
    ``"ece"`` (κ = recalibration,
    every level alone); ``"mean"`` (κ ≡ E[y]); ``"cutoff"``: 3·sqrt(cutoff error) (Rossellini et al.
    (2025), Can a calibration metric be both testable and actionable?, Lemma A.2: its binned
    predictor E[y | bin] is a function of the score, so it bounds the
    upper distance too; exact levels only). On cells, every bound is a grouping of whole cells
    plus ``quantization_bound``. On at most 1024 levels the contiguous bound is at most
    ``ece``, ``mean`` and the interval calibration error (an interval partition is a contiguous
    grouping, Lemma 6.11), which is at most 3·sqrt(cutoff) (Lemma A.2 bins into intervals), so
    intCE is not tried separately. Optimal groupings need not be
    contiguous (three levels can show it: 10 rows each at p = 0.1, 0.6, 0.7 with 2, 5
    and 0 positives) and no efficient exact search is known, so above
    8 levels the reported value can exceed the upper distance.

    References
    ----------
    .. [1] J. Błasiok, P. Gopalan, L. Hu and P. Nakkiran, "A Unifying Theory of Distance from
       Calibration", STOC, 2023.
    .. [2] P. Gopalan and L. Hu, "Calibration through the Lens of Indistinguishability", ACM SIGecom
       Exchanges 23(1), 2025.
    .. [3] R. Rossellini, J. A. Soloff, R. Foygel Barber, Z. Ren and R. Willett, "Can a Calibration
       Metric Be Both Testable and Actionable?", arXiv:2502.19851, 2025.

    Examples
    --------
    >>> import pandas as pd, sqlcal
    >>> df = pd.DataFrame({"p": [0.4, 0.6], "y": [0, 1]})
    >>> out = sqlcal.distance_to_calibration(df, score="p", label="y")
    >>> out[["lower_distance", "upper_distance", "upper_method"]].round(6)
       lower_distance  upper_distance upper_method
    0            0.08             0.1   partitions
    """
    src = as_source(data, score, label, weight=weight, by=by, where=where, **source_options)
    out = distance_finish(_reduced(src, method, max_levels), by=src.by, grid=grid,
                          lower_levels=lower_levels)
    return result(src, out, _DISTANCE_COLUMNS)


@metric(**_DISTANCES, options={"method": _METHOD, "bins": Option(
            "int", "equal-width bins (default: chosen from the data)", low=1, optional=True)},
        needs=lambda src, o: (
            _levels_needs(src, o) if o["bins"] is None
            else [_equal_width(src, o["bins"])]),
        report={"interval_calibration_error": Report(
            {"interval_calibration_error": "interval_calibration_error"})},
        trust={"method": "interval_calibration_method"})
@checked
def interval_calibration_error(
    data: Any,
    *,
    score: str | None = None,
    label: str | None = None,
    weight: str | None = None,
    by: str | Sequence[str] = (),
    where: Any = None,
    bins: int | None = None,
    method: str = "auto",
    max_levels: int = MAX_LEVELS,
    **source_options: Any,
) -> pd.DataFrame:
    r"""The interval calibration error intCE: the binned calibration error of an interval
    partition of [0, 1] plus its widest interval, minimised over partitions (or for given bins).

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
    bins : int, optional
        Evaluate the fixed partition into ``bins`` equal-width bins (left-closed, p = 1 in the
        last, as :func:`sqlcal.ece`): :math:`\mathrm{intCE}_B=\mathrm{CE}_B+1/\text{bins}`, the
        binned ECE with bin means plus the bin width (one GROUP BY bin). By default, the
        infimum over all partitions.
    method : {"auto", "exact", "grid"}, default "auto"
        Which levels to read, as for :func:`lipschitz_calibration_error`.
    max_levels : int, default 50000
        Rows in shared score cells up to which ``method="auto"`` reads the exact levels, as for
        :func:`lipschitz_calibration_error`.
    **source_options
        Further options of :func:`sqlcal.source`, such as ``table=``, ``on_invalid=`` and
        ``soft_labels=``.

    Returns
    -------
    pandas.DataFrame
        One row per group: the keys, ``interval_calibration_error``, ``n``, ``W``,
        ``binned_error`` (:math:`\mathrm{CE}_B` of the partition found), ``width`` (its widest
        interval), ``method``: ``"fixed bins"``; ``"exact"`` (the infimum); ``"geometric
        widths"`` (within a factor 2 of the infimum, see Notes); ``"bucketed"`` (geometric
        widths over partitions whose cuts fall between buckets of levels or cells: an upper
        bound on the infimum); with ``on_invalid="drop"``, ``n_dropped``.

    See Also
    --------
    distance_to_calibration : the bracket intCE bounds from above.
    ece : the binned error of fixed bins, without the width term.
    lipschitz_calibration_error : another error within a constant of the distance.

    Notes
    -----
    Gopalan and Hu (2025), Calibration through the Lens of Indistinguishability, Def. 6.10:
    :math:`\mathrm{CE}_B=\sum_{I\in B}|\mathbb E[(y-p)\mathbf 1(p\in I)]|`,
    :math:`\mathrm{intCE}=\inf_B\mathrm{CE}_B+\mathrm{width}(B)`. Empty intervals are allowed,
    so a partition costs the widest *span of scores* it groups; with every level alone the
    width tends to 0 and intCE ≤ ECE; the infimum need not be attained. intCE bounds the upper
    distance to calibration (Theorem 6.12) and is at most 4·sqrt(lower distance) (Lemma 6.13).

    For a width cap h the best partition is a dynamic programme over contiguous groupings of
    the levels whose spans are ≤ h, :math:`dp_e=\min_s dp_s+|P_e-P_s|` (P the prefix sums of
    R). Up to 64 levels every span is tried (exact). Above, the caps are the smallest feasible
    one (the widest single level: 0 on exact levels) and that (or else the smallest gap between
    levels) times powers of 2 up to the whole span: the cap just above the optimal width is
    less than twice it, so the value is at most 2·intCE. More than 1024 levels (or cells) are first
    merged into 1024 contiguous buckets of equal score width.

    References
    ----------
    .. [1] P. Gopalan and L. Hu, "Calibration through the Lens of Indistinguishability", ACM SIGecom
       Exchanges 23(1), 2025.

    Examples
    --------
    >>> import pandas as pd, sqlcal
    >>> df = pd.DataFrame({"p": [0.4, 0.6], "y": [0, 1]})
    >>> out = sqlcal.interval_calibration_error(df, score="p", label="y")
    >>> out[["interval_calibration_error", "width", "method"]].round(6)
       interval_calibration_error  width method
    0                         0.2    0.2  exact
    """
    src = as_source(data, score, label, weight=weight, by=by, where=where, **source_options)
    if bins is not None:
        frame = planner.fetch(src, _equal_width(src, bins)).copy()
        return result(src, interval_bins_finish(frame, by=src.by, bins=bins), _INTERVAL_COLUMNS)
    out = interval_finish(_reduced(src, method, max_levels), by=src.by)
    return result(src, out, _INTERVAL_COLUMNS)


# -- the declarations: what each metric reads --------------------------------------------------


def _levels_needs(src: Source, options: dict) -> list:
    """The levels (``method="exact"``) or the 2^14-cell histogram (``"grid"``, and ``"auto"``
    before its follow-up: the levels inside the cells holding several scores)."""
    if options["method"] == "exact":
        return [declared.levels("sums")]
    return cells_needs(src, ("sums",), SMOOTH_CELLS)


# -- the finishes: numpy from the levels (or cells) frame -------------------------------------
# ``frame``: one row per group and level (or cell) with ``p`` (the score, or the cell's mean
# score), ``W``, ``swy``, ``swp``, ``n``, and the lowest and highest score ``lo``, ``hi``;
# :func:`levels_frame` and :func:`cells_frame` make it from the levels or the score cells.


def levels_frame(levels: pd.DataFrame) -> pd.DataFrame:
    """The finishes' frame from the levels summary (exact: each level is one score)."""
    return levels.assign(lo=levels["p"], hi=levels["p"])


def cells_frame(cells: pd.DataFrame) -> pd.DataFrame:
    """The finishes' frame from a score-cell histogram: each cell at its rows' mean score."""
    return cells.assign(p=_mean_score(cells), lo=cells["p_min"], hi=cells["p_max"])


def lipschitz_finish(frame: pd.DataFrame, *, by: Sequence[str], lipschitz: float = 1.0
                     ) -> pd.DataFrame:
    """smCE per group: the keys, ``n``, ``W``, ``lipschitz_calibration_error``,
    ``quantization_bound``, ``n_levels``."""
    def finish(lv: _Levels) -> dict:
        return {"lipschitz_calibration_error": _smce(lv, lipschitz),
                "quantization_bound": lipschitz * lv.quantization, "n_levels": len(lv.p)}

    return _per_group(by, frame, finish, {"lipschitz_calibration_error": np.nan,
                                          "quantization_bound": np.nan, "n_levels": 0})


_DISTANCE_COLUMNS = ["lower_distance", "lower_tolerance", "lower_quantization", "upper_distance",
                     "upper_method", "abs_citl", "lipschitz_calibration_error",
                     "quantization_bound", "n_levels"]


def distance_finish(frame: pd.DataFrame, *, by: Sequence[str], grid: int = 128,
                    lower_levels: int = 64) -> pd.DataFrame:
    """The distance bracket per group: the keys, ``n``, ``W`` and the columns of
    :func:`distance_to_calibration`."""
    def finish(lv: _Levels) -> dict:
        coarse = _coarsen(lv, lower_levels)
        lower, tolerance = _lower_distance(coarse, grid)
        upper, method = _upper_distance(lv)
        return {"lower_distance": lower, "lower_tolerance": tolerance + coarse.quantization,
                "lower_quantization": coarse.quantization,
                "upper_distance": upper, "upper_method": method,
                "abs_citl": abs(lv.R.sum()) / lv.total,
                "lipschitz_calibration_error": _smce(lv, 1.0),
                "quantization_bound": lv.quantization, "n_levels": len(lv.p)}

    empty = dict.fromkeys(_DISTANCE_COLUMNS, np.nan) | {"upper_method": None, "n_levels": 0}
    return _per_group(by, frame, finish, empty)


_INTERVAL_COLUMNS = ["interval_calibration_error", "binned_error", "width", "method"]


def interval_finish(frame: pd.DataFrame, *, by: Sequence[str]) -> pd.DataFrame:
    """intCE per group, the infimum over partitions: the keys, ``n``, ``W``,
    ``interval_calibration_error``, ``binned_error``, ``width``, ``method``."""
    def finish(lv: _Levels) -> dict:
        value, ce, width, method = _interval_error(lv)
        return {"interval_calibration_error": value, "binned_error": ce, "width": width,
                "method": method}

    empty = dict.fromkeys(_INTERVAL_COLUMNS, np.nan) | {"method": None}
    return _per_group(by, frame, finish, empty)


def interval_bins_finish(bins_frame: pd.DataFrame, *, by: Sequence[str], bins: int
                         ) -> pd.DataFrame:
    """intCE of the fixed partition into ``bins`` equal-width bins, from their summary (``W``,
    ``swy``, ``swp`` per group and bin)."""
    def fixed(part: pd.DataFrame) -> dict:
        ce = float(safe_div(np.abs(part["swy"] - part["swp"]).sum(), part["W"].sum()))
        return {"interval_calibration_error": ce + 1 / bins, "binned_error": ce,
                "width": 1 / bins, "method": "fixed bins"}

    return per_group(bins_frame, list(by), fixed)


# -- the levels: exact, or cells at their mean scores ------------------------------------------


class _Levels(NamedTuple):
    """One group's levels sorted by score: position ``p`` (the score, or a cell's mean score),
    weight ``W``, label sum ``Y``, residual ``R`` = Σw(y − p), the lowest and highest score
    ``lo``, ``hi``, and ``spread``, a bound on Σw|p_row − p| over the level's rows."""

    p: np.ndarray
    W: np.ndarray
    Y: np.ndarray
    R: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    spread: np.ndarray

    @property
    def total(self) -> float:
        return float(self.W.sum())

    @property
    def quantization(self) -> float:
        return float(self.spread.sum()) / self.total


def _reduced(src: Source, method: str, max_levels: int) -> pd.DataFrame:
    """One row per group and level (or cell) with ``p``, ``W``, ``swy``, ``swp``, ``n``,
    ``lo``, ``hi`` (see :class:`_Levels`)."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, not {method!r}")
    by = list(src.by)
    if method == "exact":
        return levels_frame(level_sets(src))
    cells = cells_frame(cells_summary(src, ("sums",), SMOOTH_CELLS))
    mixed = cells["p_min"] < cells["p_max"]
    if method == "grid" or not mixed.any() or cells.loc[mixed, "n"].sum() > max_levels:
        return cells
    inside = levels_frame(pair_levels(src, SMOOTH_CELLS, cells.loc[mixed, [*by, "cell"]]))
    frame = pd.concat([cells[~mixed], inside], ignore_index=True)
    return frame.sort_values([*by, "p"], ignore_index=True, kind="stable")


def _mean_score(frame: pd.DataFrame) -> np.ndarray:
    W = frame["W"].to_numpy(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = np.where(W > 0, frame["swp"].to_numpy(float) / np.where(W > 0, W, 1.0),
                        frame["p_min"].to_numpy(float))
    # a float sum can land a hair outside the cell's range
    return np.clip(mean, frame["p_min"].to_numpy(float), frame["p_max"].to_numpy(float))


def _levels(part: pd.DataFrame) -> _Levels | None:
    """A group's levels with positive weight, or None when it has no weight."""
    part = part[part["W"].to_numpy(float) > 0].sort_values("p", kind="stable")
    if not len(part):
        return None
    p = part["p"].to_numpy(float)
    W = part["W"].to_numpy(float)
    Y = part["swy"].to_numpy(float)
    lo, hi = part["lo"].to_numpy(float), part["hi"].to_numpy(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        # the largest mean absolute deviation of a law on [lo, hi] with mean p
        spread = np.where(hi > lo, 2 * W * (hi - p) * (p - lo) / np.where(hi > lo, hi - lo, 1),
                          0.0)
    return _Levels(p, W, Y, Y - part["swp"].to_numpy(float), lo, hi, np.maximum(spread, 0.0))


def _per_group(by: Sequence[str], frame: pd.DataFrame, finish, empty: dict) -> pd.DataFrame:
    """:func:`sqlcal.metrics.per_group` on each group's levels (``empty`` for a group without
    weight, and the columns of a source without rows)."""
    out = per_group(frame, list(by),
                    lambda part: empty if (lv := _levels(part)) is None else finish(lv))
    return out if len(out) else pd.DataFrame(columns=[*by, "n", "W", *empty])


def _coarsen(lv: _Levels, buckets: int) -> _Levels:
    """At most ``buckets`` contiguous buckets of equal score width, at their mean scores; each
    bucket's spread adds its levels' distances to that mean to their own spreads."""
    if len(lv.p) <= buckets:
        return lv
    starts = np.flatnonzero(np.r_[True, np.diff(_bucket_ids(lv, buckets)) > 0])
    W = np.add.reduceat(lv.W, starts)
    p = np.add.reduceat(lv.W * lv.p, starts) / W
    p = np.clip(p, np.minimum.reduceat(lv.p, starts), np.maximum.reduceat(lv.p, starts))
    within = np.abs(lv.p - np.repeat(p, np.diff(np.r_[starts, len(lv.p)])))
    spread = np.add.reduceat(lv.spread + lv.W * within, starts)
    return _Levels(p, W, np.add.reduceat(lv.Y, starts), np.add.reduceat(lv.R, starts),
                   np.minimum.reduceat(lv.lo, starts), np.maximum.reduceat(lv.hi, starts),
                   spread)


def _bucket_ids(lv: _Levels, buckets: int) -> np.ndarray:
    """Each level's bucket among ``buckets`` of equal score width (non-decreasing)."""
    if len(lv.p) <= buckets:
        return np.arange(len(lv.p))
    span = lv.p[-1] - lv.p[0]
    return np.minimum(((lv.p - lv.p[0]) / span * buckets).astype(np.int64), buckets - 1)


# -- the Lipschitz calibration error: an exact dynamic programme -------------------------------


def _smce(lv: _Levels, lipschitz: float) -> float:
    return _lipschitz_dp(lv.R / lv.total, lipschitz * np.diff(lv.p))


def _lipschitz_dp(R: np.ndarray, gaps: np.ndarray) -> float:
    """max Σ R_j z_j over |z_j| ≤ 1, |z_{j+1} − z_j| ≤ gaps_j, exactly.

    F_j (the best value of the first j terms with z_j = z) is concave piecewise linear on
    [−1, 1]. Its breakpoints left of the maximum sit in ``left`` and those right of it in
    ``right`` (ascending, each with its slope decrease), ``c`` is the slope between them and
    ``top`` the maximum. The window maximum over |z' − z| ≤ gap shifts ``left`` by −gap and
    ``right`` by +gap (lazy offsets) and drops what leaves [−1, 1]; adding R·z walks the maximum
    across the breakpoints until the slope changes sign, splitting the last one.
    """
    left, right = deque(), deque()
    off_left = off_right = 0.0
    top = c = 0.0
    gaps = [0.0, *np.asarray(gaps, float).tolist()]  # Python floats: numpy scalars are slow here
    for r, d in zip(np.asarray(R, float).tolist(), gaps):
        if d > 0:
            off_left -= d
            off_right += d
            if c > 0:  # the maximum was at z = 1: it becomes a plateau [1 − d, 1]
                left.append((1.0 - d - off_left, c))
            elif c < 0:
                right.appendleft((-1.0 + d - off_right, -c))
            c = 0.0
            while left and left[0][0] + off_left <= -1.0:
                left.popleft()
            while right and right[-1][0] + off_right >= 1.0:
                right.pop()
        x = left[-1][0] + off_left if left else -1.0
        value = top + r * x
        c += r
        if c > 0:
            while True:
                y = right[0][0] + off_right if right else 1.0
                value += c * (y - x)
                x = y
                if not right:
                    break
                pos, w = right.popleft()
                if c - w >= 0:
                    left.append((pos + off_right - off_left, w))
                    c -= w
                    if c == 0:
                        break
                else:
                    left.append((pos + off_right - off_left, c))
                    right.appendleft((pos, w - c))
                    c = 0.0
                    break
        elif c < 0:
            while left:
                pos, w = left.pop()
                if c + w <= 0:
                    right.appendleft((pos + off_left - off_right, w))
                    c += w
                    y = left[-1][0] + off_left if left else -1.0
                    value += c * (y - x)
                    x = y
                    if c == 0:
                        break
                else:
                    left.append((pos, c + w))
                    right.appendleft((pos + off_left - off_right, -c))
                    c = 0.0
                    break
        top = value
    return float(top)


# -- the lower distance: the coupling LP on a grid ---------------------------------------------


def _lower_distance(lv: _Levels, grid: int) -> tuple[float, float]:
    """The coupling LP of the lower distance (Błasiok et al. 2023) on U = {k/grid} ∪ levels, and
    half U's widest gap."""
    v = lv.p
    U = np.union1d(np.arange(grid + 1) / grid, v)
    if len(v) == 1:  # one level: everything moves to its label mean
        return abs(lv.R[0]) / lv.total, 0.0
    b = lv.Y / lv.total
    a = lv.W / lv.total - b
    m, k = len(v), len(U)
    n = m * k
    cost = np.abs(U[:, None] - v[None, :]).ravel()
    level = np.tile(np.arange(m), k)
    point = np.repeat(np.arange(k), m)
    cols = np.arange(n)
    A = sparse.csr_matrix(
        (np.concatenate([np.ones(2 * n), -U[point], 1 - U[point]]),
         (np.concatenate([level, m + level, 2 * m + point, 2 * m + point]),
          np.concatenate([cols, n + cols, cols, n + cols]))),
        shape=(2 * m + k, 2 * n))
    rhs = np.concatenate([np.maximum(a, 0.0), np.maximum(b, 0.0), np.zeros(k)])
    out = linprog(np.concatenate([cost, cost]), A_eq=A, b_eq=rhs, bounds=(0, None),
                  method="highs")
    if out.status != 0:
        raise RuntimeError(f"the lower-distance LP failed: {out.message}")
    return max(float(out.fun), 0.0), float(np.diff(U).max()) / 2


# -- the upper distance: groupings of the levels -----------------------------------------------


def _upper_distance(lv: _Levels) -> tuple[float, str]:
    W = lv.total
    bounds = {"ece": np.abs(lv.R).sum() / W + lv.quantization,
              "mean": _grouping_cost(lv, np.zeros(len(lv.p), np.int64)) / W}
    coarse = _coarsen(lv, GROUPING_LEVELS)
    cuts = _best_contiguous(coarse)
    # the grouping found on the buckets, evaluated on the levels themselves
    ids = np.unique(_bucket_ids(lv, GROUPING_LEVELS), return_inverse=True)[1]
    group = np.searchsorted(cuts, np.arange(len(coarse.p)), side="right") - 1
    bounds["contiguous"] = _grouping_cost(lv, group[ids]) / W
    if len(cuts) <= REGROUP_GROUPS:
        group = _regrouped(coarse, group)
        bounds["regrouped"] = _grouping_cost(lv, group[ids]) / W
    if lv.quantization == 0:
        P = np.r_[0.0, np.cumsum(lv.R)] / W
        bounds["cutoff"] = 3 * np.sqrt(max(P.max() - P.min(), 0.0))
    if len(lv.p) <= PARTITION_LEVELS:
        bounds["partitions"] = _best_partition(lv) / W
    # prefer the exact search on ties, then the contiguous grouping
    order = ["partitions", "contiguous", "regrouped", "ece", "mean", "cutoff"]
    lowest = min(bounds.values())
    # bounds within the tie tolerance are equal: the first in ``order`` is reported
    method = next(m for m in order if m in bounds and bounds[m] <= lowest + TIE)
    return float(bounds[method]), method


def _grouping_cost(lv: _Levels, group: np.ndarray) -> float:
    """Σ over levels of W_j·|p_j − (label mean of its group)| plus the levels' spreads: the
    distance from the scores to the calibrated predictor that maps each group to its mean."""
    W = np.bincount(group, lv.W)
    Y = np.bincount(group, lv.Y)
    mean = Y[group] / W[group]
    return float((lv.W * np.abs(lv.p - mean)).sum() + lv.spread.sum())


def _best_contiguous(lv: _Levels) -> np.ndarray:
    """Start indices of the contiguous grouping with the least Σ W_j|p_j − ȳ_G| (O(m²))."""
    m = len(lv.p)
    N = np.r_[0.0, np.cumsum(lv.W)]
    PV = np.r_[0.0, np.cumsum(lv.W * lv.p)]
    Y = np.r_[0.0, np.cumsum(lv.Y)]
    dp = np.r_[0.0, np.full(m, np.inf)]
    back = np.zeros(m + 1, np.int64)
    for e in range(1, m + 1):
        s = np.arange(e)
        mean = (Y[e] - Y[s]) / (N[e] - N[s])
        k = np.clip(np.searchsorted(lv.p, mean), s, e)
        cost = (mean * (N[k] - N[s]) - (PV[k] - PV[s])
                + (PV[e] - PV[k]) - mean * (N[e] - N[k]))
        total = dp[:e] + cost
        back[e] = _first_within(total, TIE * N[-1])
        dp[e] = total[back[e]]
    starts, e = [], m
    while e > 0:
        e = back[e]
        starts.append(e)
    return np.array(starts[::-1], np.int64)


def _regrouped(lv: _Levels, group: np.ndarray, rounds: int = 200) -> np.ndarray:
    """Local search from ``group``: merge any two groups (adjacent or not), or move one level to
    another group or to a group of its own, whichever lowers the cost most, while one does."""
    group = np.unique(group, return_inverse=True)[1]
    W1, Y1, p1 = lv.W, lv.Y, lv.p
    m = len(p1)
    alone_cost = np.abs(Y1 - W1 * p1)
    for _ in range(rounds):
        g = group.max() + 1
        about = _about(lv, group, g)
        ids = np.arange(g)[:, None]
        W, Y = np.bincount(group, W1, g), np.bincount(group, Y1, g)
        cost = about(np.arange(g), Y / W)
        # merges: every pair about its merged mean
        merge = about(ids, (Y[:, None] + Y[None, :]) / (W[:, None] + W[None, :]))
        merge = merge + merge.T - cost[:, None] - cost[None, :]
        np.fill_diagonal(merge, np.inf)
        # moves: level j leaves its group a and joins group b, or a group of its own
        a = group
        others = W[a] - W1 > 0
        rest = np.where(others, Y[a] - Y1, 0.0) / np.where(others, W[a] - W1, 1.0)
        leave = np.where(others, about(a, rest) - W1 * np.abs(p1 - rest), 0.0) - cost[a]
        joined = (Y[:, None] + Y1[None, :]) / (W[:, None] + W1[None, :])
        move = leave[None, :] + about(ids, joined) + W1 * np.abs(p1 - joined) - cost[:, None]
        move[a, np.arange(m)] = np.inf
        solo = np.where(others, leave + alone_cost, np.inf)
        tol = TIE * lv.total
        options = [merge.min(), move.min(), solo.min()]
        lowest = min(options)
        if not lowest < -tol:
            break
        # the first choice (merges, then moves, then solos, each in index order) within the
        # tolerance of the best: a canonical order, so last-bit noise in the sums cannot pick
        # another of two equal choices
        best = next(i for i, v in enumerate(options) if v <= lowest + tol)
        group = group.copy()
        if best == 0:
            i, k = np.unravel_index(_first_within(merge, tol, lowest), merge.shape)
            group[group == k] = i
        elif best == 1:
            k, j = np.unravel_index(_first_within(move, tol, lowest), move.shape)
            group[j] = k
        else:
            group[_first_within(solo, tol, lowest)] = g
        group = np.unique(group, return_inverse=True)[1]
    return group


def _first_within(values: np.ndarray, tol: float, lowest: float | None = None) -> int:
    """The first flat index whose value is within ``tol`` of the least (or of ``lowest``)."""
    values = np.asarray(values).ravel()
    lowest = values.min() if lowest is None else lowest
    return int(np.flatnonzero(values <= lowest + tol)[0])


def _about(lv: _Levels, group: np.ndarray, g: int):
    """A function (b, t) ↦ Σ_{j in group b} W_j·|p_j − t| (arrays broadcast), from each group's
    cumulative weight and weighted score along the sorted levels."""
    m = len(lv.p)
    onehot = np.zeros((g, m))
    onehot[group, np.arange(m)] = 1.0
    cw = np.concatenate([np.zeros((g, 1)), np.cumsum(onehot * lv.W, axis=1)], axis=1)
    cwp = np.concatenate([np.zeros((g, 1)), np.cumsum(onehot * (lv.W * lv.p), axis=1)], axis=1)

    def about(b, t):
        i = np.searchsorted(lv.p, t)
        below, below_p = cw[b, i], cwp[b, i]
        return (t * below - below_p) + (cwp[b, m] - below_p) - t * (cw[b, m] - below)

    return about


def _best_partition(lv: _Levels) -> float:
    """The least grouping cost over every set partition of at most 8 levels (Bell(8) = 4140)."""
    m = len(lv.p)
    labels = np.array(list(_restricted_growth(m)), np.int64)  # (partitions, m)
    onehot = labels[:, :, None] == np.arange(m)[None, None, :]
    W = onehot.astype(float).transpose(0, 2, 1) @ lv.W
    Y = onehot.astype(float).transpose(0, 2, 1) @ lv.Y
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = np.take_along_axis(Y / W, labels, axis=1)
    cost = (lv.W * np.abs(lv.p - mean)).sum(axis=1) + lv.spread.sum()
    return float(cost.min())


def _restricted_growth(m: int):
    """Every set partition of m items as labels a_0 = 0, a_i ≤ 1 + max(a_0 … a_{i−1})."""
    def grow(prefix, top):
        if len(prefix) == m:
            yield tuple(prefix)
            return
        for a in range(top + 2):
            yield from grow(prefix + [a], max(top, a))
    yield from grow([0], 0)


# -- the interval calibration error ------------------------------------------------------------


def _interval_error(lv: _Levels) -> tuple[float, float, float, str]:
    bucketed = lv.quantization > 0 or len(lv.p) > GROUPING_LEVELS
    lv = _coarsen(lv, GROUPING_LEVELS)
    every_width = len(lv.p) <= INTERVAL_LEVELS
    method = "bucketed" if bucketed else "exact" if every_width else "geometric widths"
    lo, hi = lv.lo, lv.hi
    P = np.r_[0.0, np.cumsum(lv.R)] / lv.total
    least = float((hi - lo).max())  # no cap below the widest single level can hold it
    total = float(hi[-1] - lo[0])
    if every_width:
        spans = (hi[None, :] - lo[:, None])[np.triu_indices(len(lo))]
        caps = np.unique(spans[spans >= least])
    else:
        # the optimal width h* lies in [base·2^(k−1), base·2^k) for some k (or is least, or
        # the cap total covers it): that cap is less than 2h* and allows every grouping h* does
        base = least if least > 0 else float(np.diff(lv.p).min())
        steps = base * 2.0 ** np.arange(0, int(np.ceil(np.log2(total / base))) + 2)
        caps = np.unique(np.r_[least, steps[steps < total], total])
    dp = _capped_groupings(P, lo, hi, caps)
    value = caps + dp
    best = int(np.argmin(value))
    return float(value[best]), float(dp[best]), float(caps[best]), method


def _capped_groupings(P: np.ndarray, lo: np.ndarray, hi: np.ndarray, caps: np.ndarray
                      ) -> np.ndarray:
    """For every cap h: the least Σ_G |Σ_{j∈G} R_j| over contiguous groupings of spans ≤ h."""
    m = len(lo)
    dp = np.full((len(caps), m + 1), np.inf)
    dp[:, 0] = 0.0
    for e in range(1, m + 1):
        s = np.arange(e)
        allowed = (hi[e - 1] - lo[s])[None, :] <= caps[:, None]
        total = np.where(allowed, dp[:, :e] + np.abs(P[e] - P[s])[None, :], np.inf)
        dp[:, e] = total.min(axis=1)
    return dp[:, m]


def _equal_width(src: Source, bins: int) -> declared.Summary:
    """The equal-width bins (sqlcal's edge convention) the binned interval error reads."""
    return declared.uniform(bins, "sqlcal", *summary_parts(src, "sums"))
