"""Ibis expressions for the sufficient statistics (DESIGN.md, "The sufficient statistics").

Every function here maps a table expression of normalised rows (group keys, ``p``, ``y``, ``w``) to a
small summary table expression; :func:`execute` brings a summary back as pandas. Nothing else in the
package builds queries, and nothing here computes a metric.
"""

from __future__ import annotations

from typing import Sequence

import ibis
import ibis.expr.types as ir
import numpy as np
import pandas as pd

#: the uniform-bin conventions; see ``uniform_bin``
CONVENTIONS = ("sqlcal", "sklearn", "netcal", "relplot")


def execute(expr: ir.Table) -> pd.DataFrame:
    """Run a summary query and return it as pandas (arrow transfer, no per-row Python)."""
    return expr.to_pyarrow().to_pandas()


def _aggregate(t: ir.Table, by: Sequence[str], **metrics) -> ir.Table:
    return t.group_by(list(by)).aggregate(**metrics) if by else t.aggregate(**metrics)


# -- totals -----------------------------------------------------------------------------------


def totals(
    rows: ir.Table,
    by: Sequence[str],
    *,
    checks: dict[str, ir.BooleanValue],
    valid: ir.BooleanValue,
) -> ir.Table:
    """One row per group: counts of invalid rows, and the totals summary over the valid rows.

    Columns: ``n_rows`` (all rows), one count per check, then over valid rows ``n``, ``W`` = Σw,
    ``sw2`` = Σw², ``swy``, ``swp``, ``swpp`` = Σwp², ``swyy`` = Σwy², ``swyp``, ``sw_sq_resid`` =
    Σw(y−p)², the Spiegelhalter terms ``sw_spieg`` = Σw(y−p)(1−2p), ``sw_spieg_var`` =
    Σw(1−2p)²p(1−p) and ``sw2_spieg_var`` (same with w²), ``sw_logloss`` = Σw·(−y ln p − (1−y)
    ln(1−p)) over finite terms, ``n_infinite_logloss``, the Bernoulli variances ``sw_pq`` =
    Σwp(1−p) and ``sw2_pq`` = Σw²p(1−p), ``p_min``, ``p_max``.
    """
    p, y, w = rows.p, rows.y, rows.w
    r = y - p
    spieg_var = (1 - 2 * p) ** 2 * p * (1 - p)
    # 0·log 0 = 0: the log is taken only where its coefficient is non-zero and its argument
    # positive (Postgres raises on ln(0)); a positive-weight row with y > 0 at p = 0 (or y < 1 at
    # p = 1) has infinite loss and is counted instead.
    log_p = ibis.ifelse(p > 0, p, 1.0).ln()
    log_q = ibis.ifelse(p < 1, 1 - p, 1.0).ln()
    logloss = -(ibis.ifelse(y > 0, y * log_p, 0.0) + ibis.ifelse(y < 1, (1 - y) * log_q, 0.0))
    infinite = valid & (w > 0) & (((p == 0) & (y > 0)) | ((p == 1) & (y < 1)))
    metrics = {"n_rows": rows.count()}
    metrics |= {name: rows.count(where=cond) for name, cond in checks.items()}
    metrics |= dict(
        n=rows.count(where=valid),
        W=w.sum(where=valid),
        sw2=(w * w).sum(where=valid),
        swy=(w * y).sum(where=valid),
        swp=(w * p).sum(where=valid),
        swpp=(w * p * p).sum(where=valid),
        swyy=(w * y * y).sum(where=valid),
        swyp=(w * y * p).sum(where=valid),
        sw_sq_resid=(w * r * r).sum(where=valid),
        sw_spieg=(w * r * (1 - 2 * p)).sum(where=valid),
        sw_spieg_var=(w * spieg_var).sum(where=valid),
        sw2_spieg_var=(w * w * spieg_var).sum(where=valid),
        sw_logloss=(w * logloss).sum(where=valid),
        sw_pq=(w * p * (1 - p)).sum(where=valid),
        sw2_pq=(w * w * p * (1 - p)).sum(where=valid),
        n_infinite_logloss=rows.count(where=infinite),
        p_min=p.min(where=valid),
        p_max=p.max(where=valid),
    )
    return _aggregate(rows, by, **metrics)


# -- bins -------------------------------------------------------------------------------------


def uniform_edges(bins: int, convention: str) -> np.ndarray:
    """The bin edges a convention uses, as numpy computes them (``linspace`` edges are inexact)."""
    if convention in ("sklearn", "netcal"):
        return np.linspace(0.0, 1.0, bins + 1)
    edges = np.arange(bins + 1) / bins
    if convention == "relplot":  # relplot's extra bin holds p = 1 alone
        edges = np.append(edges, 1.0)
    return edges


def uniform_bin(p: ir.FloatingValue, bins: int, convention: str) -> ir.IntegerValue:
    """The equal-width bin id of a score under a named convention.

    - ``sqlcal``: ``LEAST(FLOOR(p·B), B−1)``, left-closed, p = 1 in the last bin.
    - ``sklearn``: right-closed on numpy ``linspace`` edges, 0 in the first bin, 1 in the last
      (scikit-learn ``calibration_curve``, uncertainty-calibration).
    - ``netcal``: left-closed on ``linspace`` edges, the last bin closed (netcal, the TCE
      reference, MCGrad). ``linspace`` puts 0.3, 0.6 and 0.7 just above the decimals, so these
      scores fall in the lower bin; the edges go in as the literals numpy computes.
    - ``relplot``: ``FLOOR(p / (1/B))`` as relplot's ``binnedECE``; p = 1 gets bin B of its own.
    """
    if convention == "sqlcal":
        return ibis.least((p * bins).floor().cast("int64"), bins - 1)
    if convention == "relplot":
        return (p / ibis.literal(1.0 / bins)).floor().cast("int64")
    if convention in ("sklearn", "netcal"):
        edges = uniform_edges(bins, convention)[1:-1]
        below = (lambda e: p <= e) if convention == "sklearn" else (lambda e: p < e)
        return _case_bin(below, [ibis.literal(float(e)) for e in edges])
    raise ValueError(f"convention must be one of {CONVENTIONS}, not {convention!r}")


def _case_bin(below, edges: Sequence[ir.Value]) -> ir.IntegerValue:
    # A flat CASE (not a sum of comparisons) keeps the expression shallow for large B.
    if not edges:
        return ibis.literal(0, type="int64")
    return ibis.cases(*[(below(e), k) for k, e in enumerate(edges)], else_=len(edges)).cast(
        "int64"
    )


def _bin_sums(t: ir.Table, by: Sequence[str], **extra) -> ir.Table:
    w, p, y = t.w, t.p, t.y
    return t.group_by([*by, "bin"]).aggregate(
        n=t.count(),
        W=w.sum(),
        sw2=(w * w).sum(),
        swy=(w * y).sum(),
        swp=(w * p).sum(),
        swpp=(w * p * p).sum(),
        swyy=(w * y * y).sum(),
        swyp=(w * y * p).sum(),
        p_min=p.min(),
        p_max=p.max(),
        **extra,
    )


def uniform_bins(rows: ir.Table, by: Sequence[str], bins: int, convention: str) -> ir.Table:
    """The bins summary for equal-width bins: one row per group and non-empty bin.

    Columns: keys, ``bin``, ``n``, ``W``, ``sw2``, ``swy``, ``swp``, ``swpp``, ``swyy``, ``swyp``,
    ``p_min``, ``p_max``.
    """
    return _bin_sums(rows.mutate(bin=uniform_bin(rows.p, bins, convention)), by)


def quantile_edges(
    rows: ir.Table, by: Sequence[str], bins: int, *, weighted: bool, approx: bool = False
) -> ir.Table:
    """Interior equal-mass edges ``e1 … e{B−1}`` per group, computed in the engine in one query.

    Unweighted: the exact list quantile (linear interpolation, numpy's default), or the engine's
    approximate one when ``approx``. Weighted: the same linear-interpolation quantile of the
    frequency-expanded sample (so integer weights equal row duplication), from the levels summary
    and a running weight partitioned by group.
    """
    levels = [k / bins for k in range(1, bins)]
    names = [f"e{k}" for k in range(1, bins)]
    if not weighted:
        q = rows.p.approx_quantile(levels) if approx else rows.p.quantile(levels)
        listed = _aggregate(rows, by, edges=q)
        return listed.select(*by, *[listed.edges[k].name(n) for k, n in enumerate(names)])
    if approx:
        raise ValueError("approximate quantiles are only offered without weights")
    lv = rows.group_by([*by, "p"]).aggregate(lw=rows.w.sum())
    # Levels are distinct scores, so a ROWS frame cannot split ties here.
    lv = lv.mutate(
        C=lv.lw.sum().over(ibis.cumulative_window(group_by=list(by), order_by=lv.p)),
        Wt=lv.lw.sum().over(ibis.window(group_by=list(by))),
    )
    cols = {}
    for name, q in zip(names, levels):
        h = (lv.Wt - 1) * q
        lo = lv.p.min(where=lv.C > h.floor())
        hi = lv.p.min(where=lv.C > h.floor() + 1)
        frac = (h - h.floor()).max()
        cols[name] = lo + frac * (hi.coalesce(lo) - lo)
    return _aggregate(lv, by, **cols)


def quantile_bins(
    rows: ir.Table, by: Sequence[str], bins: int, *, weighted: bool, approx: bool = False
) -> ir.Table:
    """The bins summary for equal-mass bins, right-closed on the quantile edges.

    A row goes to bin #{k : p > e_k}: rows equal to an edge join the lower bin together, so ties are
    never split (duplicate edges leave empty bins). The edges ``e1 … e{B−1}`` are carried as columns.
    """
    edges = quantile_edges(rows, by, bins, weighted=weighted, approx=approx)
    names = [f"e{k}" for k in range(1, bins)]
    if by:
        joined = rows.join(edges, [rows[k].identical_to(edges[k]) for k in by])
        joined = joined.select(*by, "p", "y", "w", *names)
    else:
        joined = rows.cross_join(edges)
    binned = joined.mutate(bin=_case_bin(lambda e: joined.p <= e, [joined[n] for n in names]))
    return _bin_sums(binned, by, **{n: binned[n].max() for n in names})


# -- cumulative residuals ---------------------------------------------------------------------


def score_cell(p: ir.FloatingValue, cells: int) -> ir.IntegerValue:
    """The grid cell of a score, ``LEAST(FLOOR(p·2^k), 2^k − 1)``: exact for a power of two, and
    equal scores always share a cell."""
    return ibis.least((p * cells).floor().cast("int64"), cells - 1)


def cumulative(rows: ir.Table, by: Sequence[str], cells: int = 4096) -> ir.Table:
    """Extremes of the running residual sum S over distinct scores, exactly, per group.

    The segmented scan of DESIGN.md: rows are split into score cells (ties share a cell); a
    RANGE-frame window partitioned by (group, cell) gives each row the running sum of its cell up
    to and including its score (tied rows are peers and see the same sum), so ties are one unit and
    no window spans a whole group; a window over the small cell table then adds each cell's offset.

    Columns: keys, ``s_max`` and ``s_min`` (max and min of S over the distinct scores, without the
    origin S₀ = 0), ``p_at_max`` and ``p_at_min`` (a score where each is reached), ``W``.
    """
    return _extremes(cumulative_cells(rows, by, cells), by)


def cumulative_cells(rows: ir.Table, by: Sequence[str], cells: int) -> ir.Table:
    """Per group and non-empty score cell: S at the cell's end (``s_end``), the exact max and min
    of S inside it (``s_max``, ``s_min``, with the scores reaching them), the cell's weight ``W``
    and Bernoulli variance ``var`` = Σwp(1−p), their running totals ``W_end`` and ``var_end``, and
    the cell's lowest and highest score. Small: at most ``cells`` rows per group."""
    t = rows.mutate(cell=score_cell(rows.p, cells), r=rows.w * (rows.y - rows.p))
    within = ibis.range_window(preceding=None, following=0, group_by=[*by, "cell"], order_by=t.p)
    t = t.mutate(S=t.r.sum().over(within))
    per_cell = t.group_by([*by, "cell"]).aggregate(
        total=t.r.sum(), s_max=t.S.max(), s_min=t.S.min(),
        p_at_max=t.p.argmax(t.S), p_at_min=t.p.argmin(t.S),
        W=t.w.sum(), var=(t.w * t.p * (1 - t.p)).sum(), p_first=t.p.min(), p_last=t.p.max(),
    )
    # Cells are distinct within a group, so this ROWS frame cannot split ties.
    upto = ibis.cumulative_window(group_by=list(by), order_by=per_cell.cell)
    c = per_cell.mutate(s_end=per_cell.total.sum().over(upto), W_end=per_cell.W.sum().over(upto),
                        var_end=per_cell.var.sum().over(upto))
    offset = c.s_end - c.total
    return c.mutate(s_max=offset + c.s_max, s_min=offset + c.s_min).drop("total")


def cumulative_grid(rows: ir.Table, by: Sequence[str], cells: int = 65536) -> ir.Table:
    """The same extremes with scores quantised to grid cells: one GROUP BY, no window on rows.

    S is observed only at cell ends, so the range it gives is a lower bound of the exact one; the
    exact range exceeds it by at most twice the largest one-signed residual mass inside a cell
    (column ``cell_mass``: max over cells of max(Σw(y−p)⁺, Σw(p−y)⁺)).
    """
    t = rows.mutate(cell=score_cell(rows.p, cells), r=rows.w * (rows.y - rows.p))
    per_cell = t.group_by([*by, "cell"]).aggregate(
        total=t.r.sum(),
        positive=ibis.greatest(t.r, 0.0).sum(),
        negative=ibis.greatest(-t.r, 0.0).sum(),
        p_last=t.p.max(),
        W=t.w.sum(),
    )
    upto = ibis.cumulative_window(group_by=list(by), order_by=per_cell.cell)
    c = per_cell.mutate(s_end=per_cell.total.sum().over(upto))
    c = c.mutate(s_max=c.s_end, s_min=c.s_end, p_at_max=c.p_last, p_at_min=c.p_last)
    return _extremes(c, by, cell_mass=ibis.greatest(c.positive, c.negative).max())


def _extremes(c: ir.Table, by: Sequence[str], **extra) -> ir.Table:
    return _aggregate(
        c, by,
        s_max=c.s_max.max(), s_min=c.s_min.min(),
        p_at_max=c.p_at_max.argmax(c.s_max), p_at_min=c.p_at_min.argmin(c.s_min),
        W=c.W.sum(), **extra,
    )
