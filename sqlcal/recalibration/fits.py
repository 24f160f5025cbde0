"""Recalibration maps fitted in the warehouse and applied where the rows live: isotonic regression
(pool adjacent violators), Platt scaling (plain, with Platt's smoothed targets, and the cutoff
paper's modified Platt), and the calibration slope and intercept. (The CORP decomposition, which
rests on the isotonic fit, is in :mod:`sqlcal.recalibration.corp`.)

Everything here is a function of the levels summary (per group and distinct score: W = Σw and
Y = Σwy). When a source has more rows than :data:`LEVEL_CAP`, the levels are not fetched: PAV
merges runs of blocks in the engine until few are left, and the logistic fits take their Newton
steps as aggregate queries. Every query is a declared summary (:mod:`sqlcal.query.declared`)
fetched through the planner: the adaptive passes (Newton steps, isotonic's KKT checks, grouped PAV
passes) are summaries whose parameters carry the current coefficients or score ranges, and with
the levels in hand they are evaluated from them in pandas (:mod:`sqlcal.query.local`), so a fit
runs without an engine. The fitted maps and their export (Ibis expression, SQL, mapping table)
are in :mod:`sqlcal.recalibration.maps`.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from scipy import optimize

from sqlcal.inputs.sources import Source
from sqlcal.metrics import groups, key_tuple, level_sets, resolve_weight_kind, result, safe_div
from sqlcal.metrics._registry import Report, metric
from sqlcal.metrics.cells import cell_levels, cells_summary, chunks, slab_rows
from sqlcal.metrics.scores import totals_summary
from sqlcal.options import OPTIONS, checked, costs_cells, declare
from sqlcal.query import declared, executor, local, planner
from sqlcal.query.executor import as_source
from sqlcal.recalibration.maps import CLIP, EXP_LIMIT, CalibrationMap, IsotonicMap, PlattMap  # noqa: F401

#: a source with at most this many rows has its levels summary fetched; above it, PAV merges
#: blocks in the engine first and the logistic fits iterate with aggregate queries
LEVEL_CAP = 1_000_000
#: grouped-PAV passes in the engine before the rest is finished in numpy (exact at any point)
MAX_PASSES = 30
#: score cells of the grid fit (``method="grid"``): blocks are unions of cells of width 2^-16
GRID_CELLS = 2**16
METHODS = OPTIONS["method"].choices
FEATURES = OPTIONS["feature"].choices
INTERPOLATIONS = OPTIONS["interpolation"].choices
SEPARATED = "the score separates its labels (no maximum-likelihood fit exists)"


declare("isotonic", cost=costs_cells)


@checked
def isotonic(
    data: Any,
    *,
    score: str | None = None,
    label: str | None = None,
    weight: str | None = None,
    by: str | Sequence[str] = (),
    where: Any = None,
    interpolation: str = "linear",
    method: str = "auto",
    cells: int = GRID_CELLS,
    **source_options: Any,
) -> IsotonicMap:
    r"""Fit isotonic regression (pool adjacent violators) of the label on the score, per group.

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
    interpolation : {"linear", "step"}, default "linear"
        How scores between two fitted blocks are mapped: linearly between the blocks' values
        (scikit-learn's ``IsotonicRegression``), or to the lower block's value. Fitted scores
        themselves map to their block's value either way; scores outside the fitted range are
        clipped to the first or last value.
    method : {"auto", "exact", "grid", "engine"}, default "auto"
        How the rows are reduced before PAV. ``"exact"``: one row per distinct score (the
        levels).
        ``"grid"``: one row per group and score cell of width 1/``cells`` (one GROUP BY, a few
        scans' cost at any size); exact when every cell holds a single distinct score (scores
        with at most 4 decimals, say), else the exact isotonic fit of the score rounded to its
        cell, and ``info["exact"]`` is False. ``"engine"``: grouped PAV passes in the engine on
        the levels, then numpy (exact; slower than fetching the levels on DuckDB, see Notes).
        ``"auto"`` (exact): the grid when it is exact; else the levels up to
        :data:`LEVEL_CAP` rows; above, the grid refined to the exact fit (Notes).
    cells : int, default 2**16
        Cells of the grid (a power of two).
    **source_options
        Further options of :func:`sqlcal.source`, such as ``table=``, ``on_invalid=`` and
        ``soft_labels=``.

    Returns
    -------
    IsotonicMap
        ``.table``: one row per group and block, the keys, ``lo``, ``hi`` (the block's score
        range), ``value`` (its observed rate Σwy/Σw), ``n``, ``W``. ``.info``: ``method``,
        ``exact``, ``mixed_cells`` (grid cells holding more than one distinct score), ``passes``
        (engine PAV passes), and with ``on_invalid="drop"`` ``dropped`` (per group, the rows
        left out: ``n_dropped`` and the count failing each check). Apply with
        ``.transform``, ``.expr``, ``.apply``, ``.to_sql``; store with ``.write``.

    See Also
    --------
    platt : a two-parameter logistic map instead of a step function.
    decompose : the CORP score decomposition, built on this fit.
    cutoff_error : the error the fitted map brings to 0 in-sample.

    Notes
    -----
    Isotonic regression of the label on the score,

    .. math:: \hat f = \arg\min_{f \text{ non-decreasing}} \sum_i w_i (y_i - f(p_i))^2,

    is solved by pool adjacent violators (Ayer, Brunk, Ewing, Reid & Silverman (1955), An
    Empirical Distribution Function for Sampling with Incomplete Information); as a recalibration
    map it is Zadrozny & Elkan's (2002), Transforming Classifier Scores into Accurate Multiclass
    Probability Estimates.

    Tied scores are pooled first (the levels summary), so the fit is a function of the score:
    scikit-learn's ``IsotonicRegression`` does the same, and it is what makes the in-sample
    cutoff error of the fitted map exactly 0 (Lemma D.1 of Rossellini et al. (2025), Can a
    calibration metric be both testable and actionable?; Claim 6 of Gao, Parameswaran & Peng
    (2017), On the interpretability of conditional probability estimates in the agnostic
    setting).

    PAV itself runs in numpy on the reduced rows (scipy's ``isotonic_regression``, O(blocks)).
    The refinement makes the grid fit exact without reading every level: isotonic regression
    is characterised (KKT) by blocks of increasing values v in which every prefix of levels
    carries Σw(y − v) ≥ 0. The grid fit satisfies this at cell boundaries; inside a mixed cell
    it can fail only if the prefix sum at the cell's start is below v·Σw(1 − y) of the cell.
    Those cells get one windowed scan (RANGE frame by group and cell, the cell's v joined as a
    small table) for their lowest prefix; the cells that fail are replaced by their levels and
    PAV runs again, until every check passes (``info["refined_cells"]``). At 10⁷ continuous
    scores in 10 groups this expands about 5,000 of 480,000 mixed cells, in one or two rounds.
    With continuous scores the levels are as many as the rows, and their GROUP BY costs more
    than scikit-learn's fetch-and-sort; the grid costs one GROUP BY into at most ``cells`` rows
    per group. Pooling cells changes the fit in the cells where the exact fit is not constant,
    and in the blocks those cells join (cells are 1.5e-5 wide at the default): measured at 10⁷
    rows, see the performance page of the documentation (docs/performance.md).
    In-sample, the grid fit keeps the defining property of isotonic calibration: the cutoff
    error of the mapped scores is exactly 0, as the proof of Lemma D.1 applies to any pooling.

    ``method="engine"`` runs grouped PAV passes in SQL: each pass merges every maximal run of
    adjacent blocks whose means do not increase (exact: such blocks share a level set of the
    solution), comparing cross-multiplied integer sums when the rows are
    unweighted with 0/1 labels (exact), or double sums otherwise (exact up to rounding: two
    block means within an ulp may merge); passes stop at :data:`MAX_PASSES` or when at most
    ``LEVEL_CAP`` blocks are left. Each pass count is a declared summary (the blocks left after
    k passes); the engine keeps the blocks every few passes as a temporary table, which the
    later counts read, so k passes cost about k window passes in all.

    References
    ----------
    .. [1] M. Ayer, H. D. Brunk, G. M. Ewing, W. T. Reid and E. Silverman, "An Empirical
       Distribution Function for Sampling with Incomplete Information", Annals of Mathematical
       Statistics 26(4), 1955.
    .. [2] B. Zadrozny and C. Elkan, "Transforming Classifier Scores into Accurate Multiclass
       Probability Estimates", KDD, 2002.

    Examples
    --------
    >>> import pandas as pd, sqlcal
    >>> df = pd.DataFrame({"p": [0.1, 0.2, 0.3, 0.4], "y": [0, 1, 0, 1]})
    >>> m = sqlcal.isotonic(df, score="p", label="y")
    >>> m.table[["lo", "hi", "value"]]
        lo   hi  value
    0  0.1  0.1    0.0
    1  0.2  0.3    0.5
    2  0.4  0.4    1.0
    >>> m.transform([0.1, 0.35, 0.9]).round(3).tolist()
    [0.0, 0.75, 1.0]
    """
    src = as_source(data, score, label, weight=weight, by=by, where=where, **source_options)
    blocks, info = isotonic_blocks(src, method, cells)
    if src.dropped is not None:  # the rows left out are part of what the map was fitted on
        info["dropped"] = src.present(src.dropped)
    fitted = IsotonicMap(by=tuple(src.by), table=blocks, kind="isotonic regression", info=info,
                         interpolation=interpolation)
    return fitted.named(src.group_keys)


def isotonic_blocks(src: Source, method: str = "auto", cells: int = GRID_CELLS
                    ) -> tuple[pd.DataFrame, dict]:
    """The isotonic fit of every group as blocks (keys, lo, hi, value, n, W, Y), strictly
    increasing in value within a group, and how it was computed (``method``, ``exact``,
    ``passes``, ``mixed_cells``)."""
    by = list(src.by)
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, not {method!r}")
    if method in ("auto", "grid"):
        if cells < 2 or cells & (cells - 1):
            raise ValueError(f"cells must be a power of two, not {cells!r}")
        grid = cells_summary(src, ("sums",), cells=cells)  # the first scan validates the source
        blocks = pd.DataFrame({**{k: grid[k] for k in by}, "lo": grid["p_min"],
                               "hi": grid["p_max"], "n": grid["n"], "W": grid["W"],
                               "Y": grid["swy"]})
        # a cell holding one distinct score is a level: then the grid fit is the exact fit
        mixed = int((grid["p_min"] < grid["p_max"]).sum())
        info = {"method": "grid", "exact": mixed == 0, "passes": 0, "mixed_cells": mixed,
                "cells": cells}
        if method == "auto" and mixed and int(grid["n"].sum()) <= LEVEL_CAP:
            method = "exact"
        elif method == "auto" and mixed:
            blocks, info["refined_cells"], info["exact"] = _refine(src, grid, cells)
            info["method"] = "grid, refined"
    if method == "exact":
        lv = level_sets(src)
        blocks = pd.DataFrame({**{k: lv[k] for k in by}, "lo": lv["p"], "hi": lv["p"],
                               "n": lv["n"], "W": lv["W"], "Y": lv["swy"]})
        info = {"method": "exact", "exact": True, "passes": 0, "mixed_cells": 0}
    elif method == "engine":
        totals_summary(src)  # validates the source
        blocks, passes = _reduce_in_engine(src)
        info = {"method": "engine", "exact": True, "passes": passes, "mixed_cells": 0}
    parts = [fit for key, part in groups(blocks, by) if len(fit := _pav(key, part))]
    out = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(
        columns=[*by, "lo", "hi", "value", "n", "W", "Y"])
    return out.sort_values([*by, "lo"], ignore_index=True, kind="stable"), info


def _pav(key: dict, part: pd.DataFrame, items: bool = False):
    """PAV over a group's rows (levels, cells, blocks: lo, hi, n, W, Y) → its blocks; with
    ``items``, also the rows used (sorted, weight > 0) and each one's block index."""
    part = part.sort_values("lo", kind="stable")
    part = part[part["W"].to_numpy(float) > 0]  # rows of weight 0 carry nothing
    W, Y = part["W"].to_numpy(float), part["Y"].to_numpy(float)
    if len(W) == 0:
        return (pd.DataFrame(), part, np.zeros(0, int)) if items else pd.DataFrame()
    fit = optimize.isotonic_regression(Y / W, weights=W, increasing=True)
    starts = np.asarray(fit.blocks[:-1])
    sums = {c: np.add.reduceat(part[c].to_numpy(float), starts) for c in ("n", "W", "Y")}
    lo = part["lo"].to_numpy(float)[starts]
    hi = part["hi"].to_numpy(float)[np.append(starts[1:], len(W)) - 1]
    value = sums["Y"] / sums["W"]
    # adjacent blocks with equal rates are one level set: merge them (canonical blocks)
    new = np.append(True, value[1:] != value[:-1])
    ids = np.cumsum(new) - 1
    first = np.flatnonzero(new)
    merged = {c: np.bincount(ids, weights=sums[c]) for c in ("n", "W", "Y")}
    last = np.append(first[1:], len(value)) - 1
    out = pd.DataFrame({"lo": lo[first], "hi": hi[last], "value": merged["Y"] / merged["W"],
                        "n": merged["n"].round().astype(np.int64), "W": merged["W"],
                        "Y": merged["Y"]})
    for k, v in reversed(key.items()):
        out.insert(0, k, v)
    if not items:
        return out
    member = np.repeat(ids, np.diff(np.append(starts, len(W))))  # block of each row
    return out, part, member


def _refine(src: Source, grid: pd.DataFrame, cells: int, rounds: int = 8):
    """Make the grid fit exact where it is not: the KKT conditions of isotonic regression ask,
    in every block of value v, that each prefix of levels carry Σw(y − v) ≥ 0. Between cells
    the grid fit satisfies them; inside a mixed cell, one windowed scan of its rows (RANGE frame
    partitioned by group and cell, as the cutoff error's) finds the lowest prefix. Cells that
    fail are replaced by their levels and PAV runs again, until every check passes.

    Returns the rows for the final PAV (cells and levels), the number of cells expanded to
    levels, and whether every check passed (False only after ``rounds`` rounds)."""
    by = list(src.by)
    items = pd.DataFrame({**{k: grid[k] for k in by}, "cell": grid["cell"].astype(int),
                          "lo": grid["p_min"], "hi": grid["p_max"], "n": grid["n"],
                          "W": grid["W"], "Y": grid["swy"],
                          "mixed": (grid["p_min"] < grid["p_max"]).to_numpy()})
    parts = {key_tuple(k): part for k, part in groups(items, by)}
    expanded = 0
    for round_ in range(rounds):
        risky = []
        for k, part in parts.items():
            _, used, member = _pav(dict(zip(by, k)), part, items=True)
            if not len(used):
                continue
            blocks_value = _block_values(used, member)
            v = blocks_value[member]
            resid = used["Y"].to_numpy(float) - v * used["W"].to_numpy(float)
            # Σw(y − v) over the block's earlier rows: the prefix sum before each row
            total = np.cumsum(resid)
            first = np.r_[0, np.flatnonzero(np.diff(member)) + 1]
            before = total - resid - np.repeat(np.r_[0.0, total][first],
                                               np.diff(np.r_[first, len(member)]))
            # only a cell whose negative mass (≤ v·Σw(1 − y)) can outweigh `before` can fail
            at_risk = used["mixed"].to_numpy() & (
                before - v * (used["W"].to_numpy(float) - used["Y"].to_numpy(float)) < 0)
            if at_risk.any():
                risky.append(pd.DataFrame({**{c: [val] * int(at_risk.sum())
                                              for c, val in zip(by, k)},
                                           "cell": used["cell"].to_numpy()[at_risk],
                                           "v": v[at_risk], "before": before[at_risk],
                                           "n": used["n"].to_numpy()[at_risk]}))
        if not risky:
            return pd.concat(parts.values(), ignore_index=True), expanded, True
        centres = pd.concat(risky, ignore_index=True)
        # the windowed scan holds the rows of its cells: in chunks of at most a slab's rows
        # (at 10^8 float32 scores a third of the cells were at risk: one window over their
        # rows took 3.9 GB)
        chunk = chunks(centres["n"].to_numpy(np.int64), slab_rows())
        scan = pd.concat([planner.fetch(src, declared.prefix_min(
            cells, _cell_ranges(centres[chunk == part], by, cells)))
            for part in np.unique(chunk)], ignore_index=True)
        scan = scan.assign(cell=np.round(scan["lo"].to_numpy(float) * cells).astype(int)).drop(
            columns="lo")
        judged = centres.merge(scan, on=[*by, "cell"], how="left") if by else centres.merge(
            scan, on="cell", how="left")
        failing = judged[judged["before"] + judged["s_min"].fillna(0.0) < 0]
        if not len(failing):
            return pd.concat(parts.values(), ignore_index=True), expanded, True
        wanted = {key_tuple(k): part["cell"].astype(int).tolist()
                  for k, part in groups(failing, by)}
        pairs = ([key_tuple(dict(zip(by, row))) for row in failing[by].itertuples(index=False)]
                 if by else [()] * len(failing))
        found = {key_tuple(k): part for k, part in groups(cell_levels(
            src, cells, list(zip(pairs, failing["cell"].astype(int).tolist())),
            failing["n"].to_numpy(np.int64)), by)}
        for k, ids in wanted.items():
            part, lv = parts[k], found.get(k)
            ids = set(ids)
            parts[k] = pd.concat([part[~part["cell"].isin(ids)], pd.DataFrame({
                **{c: lv[c] for c in by}, "cell": lv["cell"].astype(int), "lo": lv["p"],
                "hi": lv["p"], "n": lv["n"], "W": lv["W"], "Y": lv["swy"], "mixed": False})],
                ignore_index=True)
            expanded += len(ids)
    return pd.concat(parts.values(), ignore_index=True), expanded, False


def _block_values(used: pd.DataFrame, member: np.ndarray) -> np.ndarray:
    """Each block's value Σwy/Σw from the rows PAV used and their block index."""
    return (np.bincount(member, weights=used["Y"].to_numpy(float))
            / np.bincount(member, weights=used["W"].to_numpy(float)))


def _cell_ranges(centres: pd.DataFrame, by: list, cells: int) -> list:
    """The wanted cells (keys, ``cell``, ``v``) as the score ranges a declared summary reads:
    (key tuple, lo, hi, v), cell c being [c/cells, (c + 1)/cells) (exact doubles)."""
    keys = [key_tuple(dict(zip(by, row))) for row in centres[by].itertuples(index=False)] \
        if by else [()] * len(centres)
    return [(k, c / cells, (c + 1) / cells, float(v))
            for k, c, v in zip(keys, centres["cell"].astype(int), centres["v"])]


def _reduce_in_engine(src: Source) -> tuple[pd.DataFrame, int]:
    """Grouped PAV passes in the engine on the levels: each pass count is one declared summary
    (the blocks left after k passes), until few blocks are left; then the blocks themselves."""
    # unweighted 0/1 labels: integer sums, so the merge test is exact cross-multiplication
    integer = not src.weighted and not src.has_soft_labels

    def count(passes: int) -> int:
        return int(planner.fetch(src, declared.pav_count(passes, integer))["blocks"].sum())

    current, passes = count(0), 0
    while current > LEVEL_CAP and passes < MAX_PASSES:
        passes += 1
        new_count = count(passes)
        if new_count == current:
            break  # no adjacent pair violates: these are the solution's blocks already
        current = new_count
    return planner.fetch(src, declared.pav_blocks(passes, integer)), passes


# -- logistic fits ----------------------------------------------------------------------------


@checked
def platt(
    data: Any,
    *,
    score: str | None = None,
    label: str | None = None,
    weight: str | None = None,
    by: str | Sequence[str] = (),
    where: Any = None,
    feature: str = "logit",
    smoothed_targets: bool = True,
    modified: bool = False,
    epsilon: float | None = None,
    **source_options: Any,
) -> PlattMap:
    r"""Fit Platt scaling per group: a logistic regression of the label on the score's logit.

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
    feature : {"logit", "score"}, default "logit"
        The covariate: logit(p) (scores clipped to [1e-12, 1 − 1e-12]), or p itself (as the
        cutoff paper's notebooks, statsmodels-style recipes and some peers do).
    smoothed_targets : bool, default True
        Platt's (1999) targets: positives (N₊+1)/(N₊+2), negatives 1/(N₋+2), with weighted
        counts per group (cutoff paper, footnote 6): whole-number weights count rows; other
        (sampling) weights count Kish's effective number of observations, so their scale does not
        matter. ``False`` fits the labels themselves (the maximum-likelihood logistic
        regression).
    modified : bool, default False
        The cutoff paper's modified Platt scaling (App. D.2): keep the fit only where its in-sample
        cutoff error is at most ``epsilon``, otherwise map every score of the group to its
        observed rate. The cutoff error is computed exactly on the mapped scores (ties of the
        mapped values, e.g. from saturation, are one unit).
    epsilon : float, optional
        ε_n for ``modified`` (the ``epsilon`` of :func:`sqlcal.cutoff_error`); default
        :math:`(20 + \sqrt{2\ln 20})/\sqrt{n}` (the paper's suggestion: the 95% upper confidence
        bound of the cutoff error of a calibrated model), with n the group's rows, or its total
        weight when the weights are whole numbers.
    **source_options
        Further options of :func:`sqlcal.source`, such as ``table=``, ``on_invalid=`` and
        ``soft_labels=``.

    Returns
    -------
    PlattMap
        ``.table``: per group, the keys, ``a``, ``b`` (σ(a + b·x)), ``n``, ``W``,
        ``iterations``, and with ``modified`` ``cutoff_error`` (of the plain fit, in-sample),
        ``epsilon``, ``constant`` (the fallback rate, NaN where the fit was kept). With
        ``on_invalid="drop"``, ``.info["dropped"]``: per group, the rows left out
        (``n_dropped`` and the count failing each check).

    See Also
    --------
    isotonic : a monotone step map, with no parametric form.
    calibration_slope : the same logistic fit, read as slope and intercept.
    temperature_scaling : the one-parameter map for multiclass logits.

    Notes
    -----
    Platt (1999), Probabilistic Outputs for Support Vector Machines and Comparisons to
    Regularized Likelihood Methods: :math:`\hat p = \sigma(a + b\,x)` with
    :math:`x = \operatorname{logit}(p)` (or p), a and b maximising

    .. math:: \sum_i w_i \big[t_i \ln \sigma(a + b x_i) + (1 - t_i) \ln(1 - \sigma(a + b x_i))\big]

    for the targets :math:`t_i` (the smoothed targets, or the labels). The cutoff paper is
    Rossellini et al. (2025), Can a calibration metric be both testable and actionable?

    The fit is the exact weighted maximum-likelihood solution on the levels summary (Newton's
    method, i.e. IRLS, to a step below 1e-12): the likelihood depends on the rows only through
    W and Σwy per distinct score. Large sources take each Newton step as one aggregate query,
    started from a fit on the 1024-cell score histogram. Platt scaling is monotone but carries
    no guarantee of calibration: on the paper's Fig. 4 example its cutoff error stays 0.243 with
    infinite data; the modified version guards against that.

    A group whose fit does not exist gets NaN coefficients and maps to NULL, with a warning: a
    single distinct score (no slope to fit), or, without smoothed targets, labels the score
    separates. Modified Platt maps such a group to its rate.

    References
    ----------
    .. [1] J. C. Platt, "Probabilistic Outputs for Support Vector Machines and Comparisons to
       Regularized Likelihood Methods", Advances in Large Margin Classifiers, MIT Press, 1999.
    .. [2] R. Rossellini, J. A. Soloff, R. Foygel Barber, Z. Ren and R. Willett, "Can a Calibration
       Metric Be Both Testable and Actionable?", arXiv:2502.19851, 2025.

    Examples
    --------
    >>> import pandas as pd, sqlcal
    >>> df = pd.DataFrame({"p": [0.1, 0.2, 0.3, 0.4, 0.6, 0.7, 0.8, 0.9],
    ...                    "y": [0, 0, 1, 0, 1, 1, 1, 1]})
    >>> m = sqlcal.platt(df, score="p", label="y")
    >>> m.table.round(6)
              a         b  n    W  iterations  constant
    0  0.598782  0.875512  8  8.0           6       NaN
    >>> m.transform([0.25, 0.5, 0.75]).round(6).tolist()
    [0.410218, 0.645378, 0.826444]
    """
    src = as_source(data, score, label, weight=weight, by=by, where=where, **source_options)
    fits = _logistic(src, feature, offset=False, smoothed=smoothed_targets)
    table = fits[[*src.by, "a", "b", "n", "W", "iterations"]].copy()
    table["constant"] = np.nan
    fitted = PlattMap(by=tuple(src.by), table=table, kind="Platt scaling", feature=feature,
                      info={"smoothed_targets": smoothed_targets})
    if src.dropped is not None:  # the rows left out are part of what the map was fitted on
        fitted.info["dropped"] = src.present(src.dropped)
    if modified:
        _modify(src, fitted, epsilon)
        fitted.kind = "modified Platt scaling"
    return fitted.named(src.group_keys)


# every form refines (Newton steps chosen from the previous ones): exported as the levels, from
# which sqlcal.from_summaries fits it exactly
@metric(needs=lambda src, o: [declared.totals()],
        refining={(None, None): "none: its Newton steps read the rows again, and the levels "
                                "finish it exactly"},
        report={"calibration_slope": Report(
            {"slope": "calibration_slope", "slope_se": "calibration_slope_se",
             "intercept": "calibration_intercept", "intercept_se": "calibration_intercept_se"})},
        trust={"weight_kind": "weight_kind"})
@checked
def calibration_slope(
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
    r"""The calibration slope and calibration intercept (logistic recalibration), with standard
    errors.

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
        Frequency weights give the model-based standard errors of the row-duplicated data;
        sampling weights give sandwich (robust) standard errors, whose middle
        :math:`\sum v\,(y - \mu)^2 x x^\top` takes the variance weight v
        (:func:`sqlcal.query.reductions.variance_weights`: :math:`w^2`, or :math:`f/\pi^2` under a
        sampling rate: the design-based standard errors of Binder (1983), On the variances
        of asymptotically normal estimators from complex surveys).
    **source_options
        Further options of :func:`sqlcal.source`, such as ``table=``, ``on_invalid=`` and
        ``soft_labels=``.

    Returns
    -------
    pandas.DataFrame
        One row per group: the keys, ``slope``, ``n``, ``W``, ``slope_se``, ``intercept``,
        ``intercept_se``, ``joint_intercept`` (the intercept fitted together with the slope),
        ``weight_kind`` (``"frequency"``: model-based standard errors, or ``"sampling"``:
        sandwich ones; ``"auto"`` resolved); with ``on_invalid="drop"``, ``n_dropped``.

    See Also
    --------
    calibration_in_the_large : mean calibration alone, the level below the slope.
    platt : the same logistic fit, as a recalibration map to apply.
    spiegelhalter : a test of calibration rather than an estimate.

    Notes
    -----
    Cox (1958), Two Further Applications of a Model for Binary Regression; Van Calster et al.
    (2016), A calibration hierarchy for risk models was defined: from utopia to empirical data,
    and (2019), Calibration: the Achilles heel of predictive analytics. The slope b is from
    :math:`\operatorname{logit} P(y=1) = a + b\,\operatorname{logit}(p)`; 1 means the scores
    are neither over- nor under-confident, below 1 over-confident. The calibration intercept a'
    is from the model with the slope fixed at 1 (logit(p) as an offset): 0 means the mean score
    matches the observed rate on the logit scale, positive means under-prediction. Scores are
    clipped to [1e-12, 1 − 1e-12] before the logit. Both are exact maximum-likelihood fits on
    the levels summary. Where the fit does not exist (one distinct score, labels all equal or
    separated by the score) the values are NaN, with a warning.

    References
    ----------
    .. [1] D. R. Cox, "Two Further Applications of a Model for Binary Regression", Biometrika
       45(3-4), 1958.
    .. [2] B. Van Calster et al., "A Calibration Hierarchy for Risk Models Was Defined: from Utopia
       to Empirical Data", Journal of Clinical Epidemiology 74, 2016.
    .. [3] B. Van Calster et al., "Calibration: the Achilles Heel of Predictive Analytics", BMC
       Medicine 17, 2019.

    Examples
    --------
    >>> import pandas as pd, sqlcal
    >>> df = pd.DataFrame({"p": [0.1, 0.2, 0.3, 0.4, 0.6, 0.7, 0.8, 0.9],
    ...                    "y": [0, 0, 1, 0, 1, 1, 1, 1]})
    >>> sqlcal.calibration_slope(df, score="p", label="y").round(6).iloc[0]
    slope               2.414576
    n                          8
    W                        8.0
    slope_se            1.764436
    intercept           0.724482
    intercept_se        0.863595
    joint_intercept     1.446795
    weight_kind        frequency
    Name: 0, dtype: object
    """
    src = as_source(data, score, label, weight=weight, by=by, where=where, **source_options)
    # the first scan validates: soft labels and fractional weights are known only after it
    # (before, "auto" read any weights as frequencies and soft labels passed unseen)
    totals_summary(src)
    executor.require_binary_labels(src, "the calibration slope")
    weight_kind = resolve_weight_kind(src, weight_kind)
    sandwich = src.weighted and weight_kind == "sampling"
    joint = _logistic(src, "logit", offset=False, smoothed=False, sandwich=sandwich)
    fixed = _logistic(src, "logit", offset=True, smoothed=False, sandwich=sandwich)
    out = joint.rename(columns={"b": "slope", "b_se": "slope_se", "a": "joint_intercept"})
    out["intercept"] = fixed["a"].to_numpy()
    out["intercept_se"] = fixed["a_se"].to_numpy()
    return result(src, out, ["slope", "slope_se", "intercept", "intercept_se",
                             "joint_intercept"], {"weight_kind": weight_kind})


def _logistic(src: Source, feature: str, *, offset: bool, smoothed: bool,
              sandwich: bool = False) -> pd.DataFrame:
    """Per group: the maximum-likelihood a, b of σ(a + b·x) (b = 1 fixed with ``offset``) and
    their standard errors, by Newton's method on the levels (or in the engine)."""
    by = list(src.by)
    totals = totals_summary(src)
    keys = [key_tuple(k) for k, _ in groups(totals, by)]
    sampling = smoothed and src.weighted and resolve_weight_kind(src, "auto") == "sampling"
    if sampling:
        # sampling weights: Platt's counts are observations, so take Kish's effective number
        # (W²/Σv, v the variance weight: W²/Σw², or a sampling rate's design) in the label
        # proportions; rescaling the weights then changes nothing
        totals = planner.fetch(src, declared.totals("sw2"))
    targets = {}
    for key, t in groups(totals, by):
        pos, W = float(t["swy"].sum()), float(t["W"].sum())
        if sampling and "sw2" in t:
            scale = W / float(t["sw2"].sum()) if W > 0 else 1.0  # n_eff / W
            pos, W = pos * scale, W * scale
        targets[key_tuple(key)] = (((pos + 1) / (pos + 2), 1 / (W - pos + 2)) if smoothed
                                   else (1.0, 0.0))
    if int(totals["n"].sum()) <= LEVEL_CAP:
        # the levels in hand: every later summary (Newton terms, label ranges) is evaluated
        # from them in pandas, with no query
        levels = level_sets(src)

        def read(summary: declared.Summary) -> pd.DataFrame:
            return local.EVALUATORS[summary.kind](summary, levels, tuple(by))
        start = {}
    else:
        def read(summary: declared.Summary) -> pd.DataFrame:
            return planner.fetch(src, summary)
        start = _histogram_start(src, feature, targets, offset)
    stats = _stats(read, feature, targets, offset, by)
    # labels the score separates have no maximum-likelihood fit (Albert and Anderson 1984):
    # found exactly from where each label lies, not from a diverging Newton run
    separated = set() if smoothed else _separated(read(declared.label_ranges()), by, offset)
    fits = _newton(stats, {k: start.get(k) if np.all(np.isfinite(start.get(k, 0))) else None
                           for k in keys if k not in separated}, offset)
    for k in separated:
        where = f"group {k!r}" if k else "the rows"
        warnings.warn(f"no logistic fit for {where}: {SEPARATED}; its coefficients are NaN",
                      RuntimeWarning, stacklevel=3)
        fits[k] = (np.full(1 if offset else 2, np.nan), 0, np.full((1, 1) if offset else (2, 2),
                                                                 np.nan))
    if sandwich:
        meat = _meat(src, feature, {k: f[0] for k, f in fits.items()
                                    if np.all(np.isfinite(f[0]))}, offset)
    rows = []
    for key, t in groups(totals, by):
        k = key_tuple(key)
        theta, its, cov = fits[k]
        if sandwich:
            cov = cov @ meat[k] @ cov if k in meat else np.full(cov.shape, np.nan)
        rows.append({**key, "n": int(t["n"].sum()), "W": float(t["W"].sum()),
                     "iterations": its, "a": theta[0], "b": 1.0 if offset else theta[1],
                     "a_se": float(np.sqrt(cov[0, 0])),
                     "b_se": np.nan if offset else float(np.sqrt(cov[1, 1]))})
    out = pd.DataFrame(rows)
    return out.sort_values(by, ignore_index=True, kind="stable") if by else out


def _separated(frame: pd.DataFrame, by: list, offset: bool) -> set:
    """Groups whose labels the score separates, from the ``label_ranges`` summary: every
    positive at or above every negative, or below (with the slope fixed, only all-positive or
    all-negative groups)."""
    out = set()
    for key, part in groups(frame, by):
        v = part.iloc[0]
        if float(v.pos_mass) + float(v.neg_mass) == 0:
            continue  # no weight: NaN quietly
        one_sided = float(v.pos_mass) == 0 or float(v.neg_mass) == 0
        single = v.pos_min == v.pos_max == v.neg_min == v.neg_max  # no slope: Newton says so
        split = not offset and not single and (v.neg_max <= v.pos_min or v.pos_max <= v.neg_min)
        if one_sided or split:
            out.add(key_tuple(key))
    return out


def _stats(read, feature: str, targets: dict, offset: bool, by: list):
    """Newton terms of every group at its coefficients: one declared ``logistic_terms``
    summary per step, read by ``read`` (from the levels in hand, or one aggregate query)."""
    def stats(thetas: dict) -> dict:
        if not thetas:
            return {}
        summary = declared.logistic_terms(feature, CLIP, offset, [
            (k, t[0], 1.0 if offset else t[1], *targets[k]) for k, t in thetas.items()])
        out = {}
        for key, part in groups(read(summary), by):
            v = part.iloc[0]
            out[key_tuple(key)] = _terms(*(float(v[c]) for c in (
                "r", "rx", "h", "hx", "hxx", "ll", "sep")), offset)
        return out
    return stats


def _terms(r, rx, h, hx, hxx, loglik, separated, offset):
    if offset:
        return np.array([r]), np.array([[h]]), loglik, separated
    return np.array([r, rx]), np.array([[h, hx], [hx, hxx]]), loglik, separated


def _newton(stats, start: dict, offset: bool, max_iter: int = 100) -> dict:
    """Newton's method for every group at once (one ``stats`` call per step, which is one query
    in the engine), halving a group's step until its likelihood does not drop.

    A group whose maximum-likelihood fit does not exist gets NaN coefficients: no weight, a
    single distinct covariate (singular information), or labels the score separates (the fit
    runs off to infinity until σ saturates; the rows on the wrong side of a saturated σ show it).
    """
    theta = {k: (np.array([0.0] if offset else [0.0, 1.0]) if s is None else np.asarray(s, float))
             for k, s in start.items()}
    current = stats(theta)
    done: dict = {}
    scale = {k: 1.0 for k in theta}
    nan = np.full(1 if offset else 2, np.nan)

    def fail(k, it, why):
        hess = current[k][1]
        if np.any(hess):  # a group without weight is NaN quietly, as in every metric
            where = f"group {k!r}" if k else "the rows"
            warnings.warn(f"no logistic fit for {where}: {why}; its coefficients are NaN",
                          RuntimeWarning, stacklevel=5)
        done[k] = (nan, it, np.full(hess.shape, np.nan))

    for it in range(1, max_iter + 1):
        active = [k for k in theta if k not in done]
        if not active:
            break
        steps, cand = {}, {}
        for k in active:
            grad, hess = current[k][:2]
            try:
                steps[k] = np.linalg.solve(hess, grad)
            except np.linalg.LinAlgError:
                steps[k] = np.full(len(grad), np.nan)
            cand[k] = theta[k] + scale[k] * steps[k]
            if (scale[k] == 1.0 and not current[k][3] and np.all(np.isfinite(steps[k]))
                    and np.max(np.abs(steps[k])) <= 1e-12 * max(1.0, np.max(np.abs(cand[k])))):
                # the full step is below the tolerance already: it is the last one, taken
                # without the query that would only confirm it (one pass over the rows less)
                done[k] = (cand[k], it, _inverse(hess))
        if not any(k not in done for k in active):
            break
        trial = stats({k: v for k, v in cand.items() if k not in done and np.all(np.isfinite(v))})
        for k in active:
            if k in done:
                continue
            ll = current[k][2]
            if k not in trial:
                fail(k, it, SEPARATED if current[k][3] else
                     "its information matrix is singular (fewer than two distinct scores)")
                continue
            if trial[k][2] < ll - 1e-12 * abs(ll):
                if scale[k] > 1e-8:
                    scale[k] /= 2  # retry this group with half the step
                else:
                    fail(k, it, "the likelihood stopped increasing before convergence")
                continue
            moved = np.max(np.abs(scale[k] * steps[k]))
            theta[k], current[k], scale[k] = cand[k], trial[k], 1.0
            if moved <= 1e-12 * max(1.0, np.max(np.abs(theta[k]))):
                if current[k][3]:
                    fail(k, it, SEPARATED)
                else:
                    done[k] = (theta[k], it, _inverse(current[k][1]))
    for k in theta:
        if k not in done:
            fail(k, max_iter, f"no convergence in {max_iter} Newton steps")
    return done


def _inverse(hess):
    try:
        return np.linalg.inv(hess)
    except np.linalg.LinAlgError:
        return np.full(hess.shape, np.nan)


def _histogram_start(src: Source, feature: str, targets: dict, offset: bool) -> dict:
    """Starting values for the engine's Newton steps: the fit on the 1024-cell histogram with
    each cell at its mean score (a few steps on the rows then finish it exactly)."""
    by = list(src.by)
    cells = cells_summary(src, ("sums",))
    cells = cells[cells["W"].to_numpy(float) > 0]
    # the cells as levels at their mean scores: the same Newton terms, evaluated in pandas
    means = cells.assign(p=cells["swp"].to_numpy(float) / cells["W"].to_numpy(float))
    fits = _newton(_stats(lambda summary: local.EVALUATORS[summary.kind](summary, means,
                                                                         tuple(by)),
                          feature, targets, offset, by),
                   {key_tuple(k): None for k, _ in groups(means, by)}, offset)
    return {k: f[0] for k, f in fits.items()}


def _meat(src: Source, feature: str, thetas: dict, offset: bool) -> dict:
    """Σ w²(y − μ)² x xᵀ per group (the sandwich's middle, for sampling weights): one query."""
    by = list(src.by)
    if not thetas:
        return {}
    frame = planner.fetch(src, declared.logistic_meat(feature, CLIP, offset, [
        (k, t[0], 1.0 if offset else t[1]) for k, t in thetas.items()]))
    out = {}
    for key, part in groups(frame, by):
        v = part.iloc[0]
        out[key_tuple(key)] = (np.array([[v.m00]]) if offset else
                               np.array([[v.m00, v.m01], [v.m01, v.m11]]))
    return out


def _modify(src: Source, fitted: PlattMap, epsilon: float | None) -> None:
    """Modified Platt (cutoff paper App. D.2): keep a group's fit only if the in-sample cutoff
    error of the mapped scores is at most epsilon, else its observed rate. A group without
    a fit (a single distinct score, say) can only be its rate."""
    from sqlcal.metrics.cumulative import cutoff_error

    by = list(src.by)
    table = fitted.table
    totals = totals_summary(src)
    rate = table[by].merge(totals[[*by, "swy", "W"]], on=by, how="left") if by else totals
    rate = safe_div(rate["swy"], rate["W"])
    no_fit = ~(np.isfinite(table["a"]) & np.isfinite(table["b"])).to_numpy()
    table["constant"] = np.where(no_fit, rate, np.nan)  # so every mapped score is valid
    if int(totals["n"].sum()) <= LEVEL_CAP:
        errors = mapped_cutoff_error(fitted, level_sets(src), by)
    else:  # the map applied in the engine, and the cutoff error of the mapped scores there
        mapped = fitted.apply(src.rows, "p", name="mapped")
        cols = {"score": "mapped", "label": "y", "by": by}
        if src.weighted:
            cols["weight"] = "w"
        errors = cutoff_error(mapped, soft_labels=src.allow_soft, **cols)
    # the sample size: rows, or the total of frequency (whole-number) weights (not of a
    # sampling rate's: a kept negative is one observed row)
    frequency = resolve_weight_kind(src, "auto") == "frequency"
    n = table["W" if src.weighted and frequency else "n"].to_numpy(float)
    eps = (20 + np.sqrt(2 * np.log(20))) / np.sqrt(n) if epsilon is None else np.full(
        len(n), float(epsilon))
    merged = table[by].merge(errors[[*by, "cutoff_error"]], on=by, how="left") if by else errors
    table["cutoff_error"] = np.where(no_fit, np.nan, merged["cutoff_error"].to_numpy(float))
    table["epsilon"] = eps
    fall = no_fit | ~(table["cutoff_error"].to_numpy(float) <= eps)
    table["constant"] = np.where(fall, rate, np.nan)


def mapped_cutoff_error(fitted: CalibrationMap, levels: pd.DataFrame, by) -> pd.DataFrame:
    """The in-sample cutoff error of the mapped scores, per group, from the levels summary: a
    map is constant on each level, so the mapped scores' levels are the levels merged where
    they map to one value (ties one unit), and the cutoff error is (max(0, max S) − min(0,
    min S))/W with S the running sum of Σw(y − f) over them in increasing order.

    Parameters
    ----------
    fitted : CalibrationMap
        The map, applied in numpy (:meth:`~sqlcal.recalibration.maps.CalibrationMap.transform`).
    levels : pandas.DataFrame
        The levels summary: the keys, ``p``, ``W`` and ``swy``.
    by : sequence of str
        The group keys.

    Returns
    -------
    pandas.DataFrame
        The keys and ``cutoff_error`` of every group.

    Examples
    --------
    >>> import pandas as pd
    >>> m = PlattMap(by=(), table=pd.DataFrame({"a": [0.0], "b": [0.0], "constant": [0.5]}))
    >>> levels = pd.DataFrame({"p": [0.2, 0.8], "W": [2.0, 2.0], "swy": [0.0, 2.0]})
    >>> mapped_cutoff_error(m, levels, ()).to_dict("records")  # one mapped level: S = 0
    [{'cutoff_error': 0.0}]
    >>> m = PlattMap(by=(), table=pd.DataFrame({"a": [-10.0], "b": [20.0]}), feature="score")
    >>> got = mapped_cutoff_error(m, levels, ())["cutoff_error"][0]
    >>> # f(0.2) = σ(−6), f(0.8) = σ(6): S = (−2σ(−6), 0), so the error is 2σ(−6)/4
    >>> bool(abs(got - 2 / (1 + np.exp(6)) / 4) < 1e-15)
    True
    """
    by = list(by)
    rows = []
    for key, part in groups(levels, by):
        f = fitted.transform(part["p"].to_numpy(float), key)
        W, swy = part["W"].to_numpy(float), part["swy"].to_numpy(float)
        residual = pd.Series(swy - f * W).groupby(f, sort=True).sum().to_numpy()
        S = np.cumsum(residual)
        top, bottom = max(0.0, S.max(initial=0.0)), min(0.0, S.min(initial=0.0))
        rows.append({**key, "cutoff_error": float(safe_div(top - bottom, W.sum()))})
    return pd.DataFrame(rows, columns=[*by, "cutoff_error"])
