"""Declared summaries evaluated in pandas from the levels, exactly.

The levels summary (one row per group and distinct score ``p`` with ``n``, ``W`` = Σw, ``swy`` =
Σwy, ``swp`` = Σwp, ``sw2`` = Σw², and ``ny`` = the count of rows with y = 1) is the sufficient
statistic of binary-labelled rows: inside a level the score is one number, so every per-row sum of
a summary is a function of the level's own sums (Σwp² = p·Σwp, Σw(y − p)² = Σwy·(1 − p)² +
(W − Σwy)·p², Σw²p(1 − p) = p(1 − p)·Σw², ...), and every key (bin, cell) is a function of ``p``.
So a summary of the rows equals the same summary of the levels, computed here with numpy.

This is how :func:`sqlcal.from_summaries` finishes any metric from the one exported levels
statement (the one-shot exact form of the metrics that refine with follow-up passes), and how a
metric's finish runs without an engine in the tests: levels from raw rows are a plain groupby.

Each kind has one evaluator in :data:`EVALUATORS` (``(summary, levels, by) -> frame``), returning
the columns of the engine's query for a weighted source (the validation ``chk_*`` aside).
Soft labels (y strictly between 0 and 1) are not levels-sufficient: :func:`evaluate` refuses them.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import pandas as pd

from sqlcal.inputs.grids import logit_cell, logit_edges, uniform_edges
from sqlcal.query.declared import LOGLOSS_SQ, SATURATED, Summary, merge

#: the columns a levels frame carries for local evaluation
LEVEL_COLUMNS = ("n", "W", "swy", "swp", "sw2", "ny")

#: summary kind -> evaluator(summary, levels, by) -> frame
EVALUATORS: dict[str, Callable[[Summary, pd.DataFrame, tuple], pd.DataFrame]] = {}


def register(kind: str):
    """Decorator: the local evaluator of a summary kind."""
    def add(function):
        EVALUATORS[kind] = function
        return function
    return add


def evaluate(summary: Summary, levels: pd.DataFrame, by: Sequence[str]) -> pd.DataFrame:
    """The summary ``summary`` of the rows behind ``levels``, computed in pandas.

    Parameters
    ----------
    summary : Summary
        A declared summary (:mod:`sqlcal.query.declared`).
    levels : pandas.DataFrame
        One row per group and distinct score: the group keys, ``p`` and :data:`LEVEL_COLUMNS`.
    by : sequence of str
        The group keys.

    Returns
    -------
    pandas.DataFrame
        The same rows and columns as the engine's query of the summary.

    Examples
    --------
    >>> from sqlcal.query import declared
    >>> levels = pd.DataFrame({"p": [0.25, 0.75], "n": [2, 1], "W": [2.0, 1.0],
    ...                        "swy": [1.0, 1.0], "swp": [0.5, 0.75], "sw2": [2.0, 1.0],
    ...                        "ny": [1, 1]})
    >>> evaluate(declared.uniform(2, "sqlcal", "sums"), levels, ())[["bin", "n", "swy", "swp"]]
       bin  n  swy   swp
    0    0  2  1.0  0.50
    1    1  1  1.0  0.75
    """
    evaluator = EVALUATORS.get(summary.kind)
    if evaluator is None:
        raise ValueError(f"summary kind {summary.kind!r} has no local evaluation from the levels; "
                         f"kinds with one: {sorted(EVALUATORS)}")
    missing = [c for c in ("p", *LEVEL_COLUMNS) if c not in levels]
    if missing:
        raise ValueError(f"the levels frame has no columns {missing}: pass the frame the levels "
                         "statement of sqlcal.summary_sql returned")
    return evaluator(summary, levels, tuple(by))


def level_sums(levels: pd.DataFrame, parts: frozenset) -> pd.DataFrame:
    """Per level, the sums of :func:`sqlcal.query.reductions._sums` for ``parts`` (always ``n``,
    ``W``, ``p_max``; ``sums``: Σwy, Σwp, ``p_min``; ``sw2``; ``moments``; ``residuals``), as the
    engine would sum them over the level's rows."""
    p = levels["p"].to_numpy(float)
    W, swy, sw2 = (levels[c].to_numpy(float) for c in ("W", "swy", "sw2"))
    out = {"n": levels["n"].to_numpy(), "W": W, "p_max": p}
    if "sums" in parts:
        out |= {"swy": swy, "swp": levels["swp"].to_numpy(float), "p_min": p}
    if "sw2" in parts:
        out["sw2"] = sw2
    if "sw2p" in parts:
        out |= {"sw2p": p * sw2, "sw2pp": p * p * sw2}
    if "sw2y" in parts and "sw2y" in levels:
        out["sw2y"] = levels["sw2y"].to_numpy(float)
    if "ny" in parts:
        out["ny"] = levels["ny"].to_numpy()
    if "pp" in parts:
        out["swpp"] = p * levels["swp"].to_numpy(float)
    if "moments" in parts:
        out |= {"swpp": p * levels["swp"].to_numpy(float), "swyp": p * swy}
        if "soft" in parts:
            out["swyy"] = swy  # y² = y for binary labels
    if "spread" in parts and "sw2y" in levels:  # the variance weight's moments of (1, y, p)
        vy = levels["sw2y"].to_numpy(float)
        out |= {"sw2": sw2, "sw2y": vy, "sv_p": p * sw2, "sv_yy": vy, "sv_yp": p * vy,
                "sv_pp": p * p * sw2}
    if "r4" in parts:  # (y − p)⁴ is (1 − p)⁴ on a positive, p⁴ on a negative
        out["sw_r4"] = swy * (1 - p) ** 4 + (W - swy) * p ** 4
        if "spread" in parts and "sw2y" in levels:
            vy = levels["sw2y"].to_numpy(float)
            out["sv_r4"] = vy * (1 - p) ** 4 + (sw2 - vy) * p ** 4
    if "residuals" in parts:
        pq = p * (1 - p)
        # a row's residual y − p is positive only when y = 1 (then 1 − p ≥ 0)
        out |= {"total": swy - levels["swp"].to_numpy(float), "positive": swy * (1 - p),
                "var": pq * W}
        if "sw2" in parts:
            out["var2"] = pq * sw2
    return pd.DataFrame(out, index=levels.index)


def _keyed(levels: pd.DataFrame, by: tuple, key: str | None, values, parts: frozenset
           ) -> pd.DataFrame:
    """The level sums grouped by the keys and ``key`` (= ``values`` per level), merged by their
    rules (sums add, ``p_min`` least, ``p_max`` greatest)."""
    frame = pd.concat([levels[list(by)].reset_index(drop=True),
                       level_sums(levels, parts).reset_index(drop=True)], axis=1)
    keys = list(by)
    if key is not None:
        frame.insert(len(by), key, np.asarray(values, dtype=np.int64))
        keys.append(key)
    out = merge([frame], keys)
    return out.sort_values(keys, ignore_index=True, kind="stable") if keys else out


def uniform_bin(p: np.ndarray, bins: int, convention: str) -> np.ndarray:
    """:func:`sqlcal.query.reductions.uniform_bin` in numpy, with the same double arithmetic."""
    if convention == "sqlcal":
        return np.minimum(np.floor(p * bins), bins - 1).astype(np.int64)
    if convention == "relplot":
        return np.floor(p / (1.0 / bins)).astype(np.int64)
    interior = uniform_edges(bins, convention)[1:-1]
    side = "left" if convention == "sklearn" else "right"  # sklearn right-closed: p <= e
    return np.searchsorted(interior, p, side=side).astype(np.int64)


def score_cell(p: np.ndarray, cells: int) -> np.ndarray:
    """:func:`sqlcal.query.reductions.score_cell` in numpy."""
    return np.minimum(np.floor(p * cells), cells - 1).astype(np.int64)


@register("intervals")
def _intervals(summary: Summary, levels: pd.DataFrame, by: tuple) -> pd.DataFrame:
    # the number of cuts below p: the piece of :func:`sqlcal.query.reductions.score_interval`
    ids = np.searchsorted(np.asarray(summary.params[0], float), levels["p"].to_numpy(float),
                          side="left")
    return _keyed(levels, by, "interval", ids, summary.parts)


@register("logit_bins")
def _logit_bins(summary: Summary, levels: pd.DataFrame, by: tuple) -> pd.DataFrame:
    # :func:`sqlcal.query.reductions.score_interval` on the interior edges: cuts below p
    ids = np.searchsorted(logit_edges(*summary.params)[1:-1], levels["p"].to_numpy(float),
                          side="left")
    return _keyed(levels, by, "bin", ids, summary.parts)


@register("levels")
def _levels(summary: Summary, levels: pd.DataFrame, by: tuple) -> pd.DataFrame:
    frame = pd.concat([levels[[*by, "p"]].reset_index(drop=True),
                       level_sums(levels, summary.parts).reset_index(drop=True)], axis=1)
    frame = frame.drop(columns=["p_max", "p_min"], errors="ignore")
    return frame.sort_values([*by, "p"], ignore_index=True, kind="stable")


@register("uniform")
def _uniform(summary: Summary, levels: pd.DataFrame, by: tuple) -> pd.DataFrame:
    bins, convention = summary.params
    ids = uniform_bin(levels["p"].to_numpy(float), bins, convention)
    return _keyed(levels, by, "bin", ids, summary.parts)


@register("cells")
def _cells(summary: Summary, levels: pd.DataFrame, by: tuple) -> pd.DataFrame:
    ids = score_cell(levels["p"].to_numpy(float), summary.params[0])
    return _keyed(levels, by, "cell", ids, summary.parts)


@register("totals")
def _totals(summary: Summary, levels: pd.DataFrame, by: tuple) -> pd.DataFrame:
    parts = summary.parts | {"sums"}
    frame = pd.concat([levels[list(by)].reset_index(drop=True),
                       level_sums(levels, parts).reset_index(drop=True)], axis=1)
    p = levels["p"].to_numpy(float)
    W, swy, sw2 = (levels[c].to_numpy(float) for c in ("W", "swy", "sw2"))
    neg = W - swy  # the weight of the rows with y = 0
    frame["sw_sq_resid"] = swy * (1 - p) ** 2 + neg * p * p
    if "spiegelhalter" in parts:
        q = 1 - 2 * p
        spieg_var = q * q * p * (1 - p)
        frame["sw_spieg"] = (swy - levels["swp"].to_numpy(float)) * q
        frame["sw_spieg_var"] = spieg_var * W
        frame["sw2_spieg_var"] = spieg_var * sw2
    if "logloss" in parts:
        # the engine's rule: a row whose outcome got probability 0 is counted, not summed
        with np.errstate(divide="ignore"):
            ones = np.where(p > 0, -swy * np.log(np.where(p > 0, p, 1.0)), 0.0)
            zeros = np.where(p < 1, -neg * np.log(np.where(p < 1, 1 - p, 1.0)), 0.0)
        ny = levels["ny"].to_numpy(float)
        n = levels["n"].to_numpy(float)
        frame["sw_logloss"] = ones + zeros
        if parts & LOGLOSS_SQ:  # a level's finite terms are −ln p (y = 1), −ln(1 − p)
            with np.errstate(divide="ignore"):
                lp = np.where(p > 0, -np.log(np.where(p > 0, p, 1.0)), 0.0)
                lq = np.where(p < 1, -np.log(np.where(p < 1, 1 - p, 1.0)), 0.0)
            frame["sw_logloss_sq"] = swy * lp * lp + neg * lq * lq
            if "logloss_var" in parts:
                frame["swy_logloss"] = swy * lp
            if "sw2" in parts and "sw2y" in levels:  # the same under the variance weight
                vy = levels["sw2y"].to_numpy(float)
                vn = sw2 - vy
                frame["sw2_logloss"] = vy * lp + vn * lq
                frame["sw2_logloss_sq"] = vy * lp * lp + vn * lq * lq
                if "logloss_var" in parts:
                    frame["sw2y_logloss"] = vy * lp
        frame["n_infinite_logloss"] = (np.where(p == 0, ny, 0) + np.where(p == 1, n - ny, 0)
                                       ).astype(np.int64)
    keys = list(by)
    out = merge([frame], keys)
    return out.sort_values(keys, ignore_index=True, kind="stable") if keys else out


def in_ranges(levels: pd.DataFrame, by: Sequence[str], ranges: tuple) -> np.ndarray:
    """Which levels lie inside score ranges ``((group key values, lo, hi), ...)``, by the rule
    of :func:`sqlcal.query.reductions.within_ranges` (lo <= p < hi; p = 1 too when hi = 1)."""
    p = levels["p"].to_numpy(float)
    inside = np.zeros(len(p), dtype=bool)
    per_group: dict[tuple, list] = {}
    for key, lo, hi in ranges:
        per_group.setdefault(tuple(key), []).append((lo, hi))
    if by:
        positions = {tuple(None if pd.isna(v) else v
                           for v in (k if isinstance(k, tuple) else (k,))):
                     rows for k, rows in levels.groupby(list(by), dropna=False,
                                                         sort=False).indices.items()}
    else:
        positions = {(): np.arange(len(p))}
    for key, spans in per_group.items():
        rows = positions.get(key)
        if rows is None:
            continue
        spans = sorted(spans)
        los, his = (np.array([s[i] for s in spans]) for i in (0, 1))
        at = np.searchsorted(los, p[rows], side="right") - 1
        hi = his[np.maximum(at, 0)]
        inside[rows] = (at >= 0) & ((p[rows] < hi) | ((hi == 1.0) & (p[rows] <= 1.0)))
    return inside


@register("cells_within")
def _cells_within(summary: Summary, levels: pd.DataFrame, by: tuple) -> pd.DataFrame:
    grid, ranges = summary.params
    return _cells(Summary("cells", (grid,), summary.parts),
                  levels[in_ranges(levels, by, ranges)], by)


@register("logit_cells_within")
def _logit_cells_within(summary: Summary, levels: pd.DataFrame, by: tuple) -> pd.DataFrame:
    scale, _, ranges = summary.params
    return _logit_keyed(levels[in_ranges(levels, by, ranges)], by, scale, summary.parts)


@register("logit_cells")
def _logit_cells(summary: Summary, levels: pd.DataFrame, by: tuple) -> pd.DataFrame:
    return _logit_keyed(levels, by, summary.params[0], summary.parts)


@register("logit_cells_in_cells")
def _logit_cells_in_cells(summary: Summary, levels: pd.DataFrame, by: tuple) -> pd.DataFrame:
    scale, grid, pairs = summary.params
    return _logit_keyed(_in_cells(levels, by, grid, pairs), by, scale, summary.parts)


@register("levels_in_cells")
def _levels_in_cells(summary: Summary, levels: pd.DataFrame, by: tuple) -> pd.DataFrame:
    grid, pairs = summary.params
    return _levels(Summary("levels", (), summary.parts), _in_cells(levels, by, grid, pairs), by)


def _in_cells(levels: pd.DataFrame, by: tuple, grid: int, pairs: tuple) -> pd.DataFrame:
    """The levels in the ``(group key values, cell)`` pairs of the 2^k grid ``grid``."""
    cells: dict[tuple, set] = {}
    for key, c in pairs:
        cells.setdefault(tuple(key), set()).add(c)
    kept = [part[np.isin(score_cell(part["p"].to_numpy(float), grid), list(cells[key]))]
            for key, part in _by_group(levels, by).items() if key in cells]
    return pd.concat(kept) if kept else levels.iloc[:0]


def _logit_keyed(levels: pd.DataFrame, by: tuple, scale: int, parts: frozenset) -> pd.DataFrame:
    """The level sums per group and log-odds cell ``lcell``
    (:func:`sqlcal.inputs.grids.logit_cell`)."""
    frame = pd.concat([levels[list(by)].reset_index(drop=True),
                       pd.DataFrame({"lcell": logit_cell(levels["p"].to_numpy(float), scale)}),
                       level_sums(levels, parts).reset_index(drop=True)], axis=1)
    keys = [*by, "lcell"]
    return merge([frame], keys).sort_values(keys, ignore_index=True, kind="stable")


@register("levels_within")
def _levels_within(summary: Summary, levels: pd.DataFrame, by: tuple) -> pd.DataFrame:
    (ranges,) = summary.params
    return _levels(Summary("levels", (), summary.parts), levels[in_ranges(levels, by, ranges)],
                   by)


@register("levels_slab")
def _levels_slab(summary: Summary, levels: pd.DataFrame, by: tuple) -> pd.DataFrame:
    lo, hi = summary.params
    p = levels["p"].to_numpy(float)
    inside = (p >= lo) & ((p <= hi) if hi == 1.0 else (p < hi))
    return _levels(Summary("levels", (), summary.parts), levels[inside], by)


@register("extremes_within")
def _extremes_within(summary: Summary, levels: pd.DataFrame, by: tuple) -> pd.DataFrame:
    grid, ranges = summary.params
    lv = levels[in_ranges(levels, by, ranges)]
    keys = [*by, "cell"]
    frame = lv[list(by)].reset_index(drop=True).assign(
        cell=score_cell(lv["p"].to_numpy(float), grid), p=lv["p"].to_numpy(float),
        r=(lv["swy"].to_numpy(float) - lv["swp"].to_numpy(float)))
    frame = frame.sort_values([*keys, "p"], ignore_index=True, kind="stable")
    frame["S"] = frame.groupby(keys, dropna=False, sort=False)["r"].cumsum()
    grouped = frame.groupby(keys, dropna=False, sort=True)["S"]
    at_max, at_min = grouped.idxmax(), grouped.idxmin()
    out = pd.DataFrame({"s_max": grouped.max(), "s_min": grouped.min()}).reset_index()
    out["p_at_max"] = frame["p"].to_numpy()[at_max.to_numpy()]
    out["p_at_min"] = frame["p"].to_numpy()[at_min.to_numpy()]
    return out


# -- the recalibration fits' summaries (sqlcal.recalibration.fits) -------------------------------


def _by_group(levels: pd.DataFrame, by: tuple) -> dict:
    """Key tuple (plain scalars, None for NULL, as the declared params hold them) -> the
    group's levels, sorted by score."""
    levels = levels.sort_values([*by, "p"], kind="stable")
    if not by:
        return {(): levels}
    out = {}
    for key, part in levels.groupby(list(by), dropna=False, sort=False):
        key = key if isinstance(key, tuple) else (key,)
        out[tuple(None if pd.isna(v) else (v.item() if isinstance(v, np.generic) else v)
                  for v in key)] = part
    return out


def _rows(by: tuple, rows: list, columns: list) -> pd.DataFrame:
    """A frame of (key tuple, values...) rows with the keys spread into the ``by`` columns."""
    return pd.DataFrame([{**dict(zip(by, key)), **dict(zip(columns, values))}
                         for key, *values in rows], columns=[*by, *columns])


def _negative_mass(W: np.ndarray, swy: np.ndarray) -> np.ndarray:
    """Σw(1 − y) per level, 0 where it is only the rounding of W − Σwy (every label 1)."""
    neg = W - swy
    return np.where(neg > 1e-12 * np.abs(W), neg, 0.0)


@register("label_ranges")
def _label_ranges(summary: Summary, levels: pd.DataFrame, by: tuple) -> pd.DataFrame:
    rows = []
    for key, part in _by_group(levels, by).items():
        p, W, swy = (part[c].to_numpy(float) for c in ("p", "W", "swy"))
        neg = _negative_mass(W, swy)
        pos_p, neg_p = p[swy > 0], p[neg > 0]
        ends = [(s.min(), s.max()) if len(s) else (np.nan, np.nan) for s in (pos_p, neg_p)]
        rows.append((key, int(part["n"].sum()), p.min(), p.max(), swy.sum(), neg.sum(),
                     *ends[0], *ends[1]))
    return _rows(by, rows, ["n", "p_min", "p_max", "pos_mass", "neg_mass", "pos_min", "pos_max",
                            "neg_min", "neg_max"])


def logistic_feature(p: np.ndarray, feature: str, clip: float) -> np.ndarray:
    """:func:`sqlcal.query.reductions.logistic_feature` in numpy: the logit of the clipped
    score, or p."""
    if feature == "score":
        return p
    q = np.clip(p, clip, 1 - clip)
    return np.log(q / (1 - q))


def logistic_sums(x: np.ndarray, W: np.ndarray, Yt: np.ndarray, a: float, b: float) -> tuple:
    """The Newton terms of σ(a + b·x) over points x of weight W and target mass Yt: ``r``,
    ``rx``, ``h``, ``hx``, ``hxx``, ``ll``, ``sep`` (as
    :func:`sqlcal.query.reductions.logistic_terms` sums them over rows)."""
    from scipy import special

    eta = a + b * x
    mu = special.expit(eta)
    r = Yt - W * mu
    h = W * mu * (1 - mu)
    ll = float(np.sum(Yt * special.log_expit(eta) + (W - Yt) * special.log_expit(-eta)))
    sep = float(np.sum(np.where(mu < SATURATED, Yt, 0.0)
                       + np.where(mu > 1 - SATURATED, W - Yt, 0.0)))
    return (float(r.sum()), float((r * x).sum()), float(h.sum()), float((h * x).sum()),
            float((h * x * x).sum()), ll, sep)


@register("logistic_terms")
def _logistic_terms(summary: Summary, levels: pd.DataFrame, by: tuple) -> pd.DataFrame:
    feature, clip, offset, groups = summary.params
    parts = _by_group(levels, by)
    rows = []
    for key, a, b, hi, lo in groups:
        part = parts.get(tuple(key))
        if part is None:
            continue
        W, swy = part["W"].to_numpy(float), part["swy"].to_numpy(float)
        x = logistic_feature(part["p"].to_numpy(float), feature, clip)
        rows.append((key, *logistic_sums(x, W, swy * hi + (W - swy) * lo, a,
                                         1.0 if offset else b)))
    return _rows(by, rows, ["r", "rx", "h", "hx", "hxx", "ll", "sep"])


@register("logistic_meat")
def _logistic_meat(summary: Summary, levels: pd.DataFrame, by: tuple) -> pd.DataFrame:
    # binary labels: Σw²(y − μ)² at a score = (1 − 2μ)·Σw²y + μ²·Σw²
    if "sw2y" not in levels:
        raise ValueError("the sandwich variance of a logistic fit needs Σw²y per score: pass "
                         "levels with the column sw2y (the levels statement of "
                         "sqlcal.summary_sql has it)")
    from scipy import special

    feature, clip, offset, groups = summary.params
    parts = _by_group(levels, by)
    rows = []
    for key, a, b in groups:
        part = parts.get(tuple(key))
        if part is None:
            continue
        x = logistic_feature(part["p"].to_numpy(float), feature, clip)
        mu = special.expit(a + (1.0 if offset else b) * x)
        e2 = ((1 - 2 * mu) * part["sw2y"].to_numpy(float)
              + mu * mu * part["sw2"].to_numpy(float))
        rows.append((key, float(e2.sum()), float((e2 * x).sum()), float((e2 * x * x).sum())))
    return _rows(by, rows, ["m00", "m01", "m11"])


@register("prefix_min")
def _prefix_min(summary: Summary, levels: pd.DataFrame, by: tuple) -> pd.DataFrame:
    cells, ranges = summary.params
    parts = _by_group(levels, by)
    rows = []
    for key, lo, hi, v in ranges:
        part = parts.get(tuple(key))
        if part is None:
            continue
        inside = score_cell(part["p"].to_numpy(float), cells) == int(lo * cells)
        if not inside.any():
            continue
        W, swy = (part[c].to_numpy(float)[inside] for c in ("W", "swy"))
        rows.append((key, lo, float(np.cumsum(swy - v * W).min())))
    return _rows(by, rows, ["lo", "s_min"])


def pav_pass(blocks: pd.DataFrame) -> pd.DataFrame:
    """One grouped PAV pass on one group's blocks (sorted ``lo``, ``hi``, ``n``, ``W``, ``Y``):
    every maximal run of adjacent blocks with mean_prev >= mean_next merges, as
    :func:`sqlcal.query.reductions.pav_pass` does in the engine."""
    W, Y = blocks["W"].to_numpy(float), blocks["Y"].to_numpy(float)
    start = np.ones(len(W), dtype=bool)
    start[1:] = ~(Y[:-1] * W[1:] >= Y[1:] * W[:-1])
    first = np.flatnonzero(start)
    out = {"lo": blocks["lo"].to_numpy(float)[first],
           "hi": blocks["hi"].to_numpy(float)[np.append(first[1:], len(W)) - 1]}
    out |= {c: np.add.reduceat(blocks[c].to_numpy(), first) for c in ("n", "W", "Y")}
    return pd.DataFrame(out)


def _pav(summary: Summary, levels: pd.DataFrame, by: tuple) -> list:
    passes, _integer = summary.params
    found = []
    for key, part in _by_group(levels, by).items():
        part = part[part["W"].to_numpy(float) > 0]
        if not len(part):
            continue
        blocks = pd.DataFrame({"lo": part["p"].to_numpy(float), "hi": part["p"].to_numpy(float),
                               "n": part["n"].to_numpy(), "W": part["W"].to_numpy(float),
                               "Y": part["swy"].to_numpy(float)})
        for _pass in range(passes):
            blocks = pav_pass(blocks)
        for k, v in zip(by, key):
            blocks.insert(len(blocks.columns) - 5, k, [v] * len(blocks))
        found.append((key, blocks))
    return found


@register("pav_blocks")
def _pav_blocks(summary: Summary, levels: pd.DataFrame, by: tuple) -> pd.DataFrame:
    found = [blocks for _key, blocks in _pav(summary, levels, by)]
    columns = [*by, "lo", "hi", "n", "W", "Y"]
    return pd.concat(found, ignore_index=True)[columns] if found else pd.DataFrame(
        columns=columns)


@register("pav_count")
def _pav_count(summary: Summary, levels: pd.DataFrame, by: tuple) -> pd.DataFrame:
    return _rows(by, [(key, len(blocks)) for key, blocks in _pav(summary, levels, by)],
                 ["blocks"])


# -- the smooth metrics' histograms (sqlcal.metrics.smooth) -----------------------------------


def _keyed_sums(levels: pd.DataFrame, by: tuple, keys: dict, sums: dict) -> pd.DataFrame:
    """Per-level ``sums`` (with ``n``, ``p_min``, ``p_max``) grouped by the group keys and the
    per-level ``keys`` columns, merged by their rules, sorted by the keys."""
    p = levels["p"].to_numpy(float)
    frame = pd.concat([levels[list(by)].reset_index(drop=True), pd.DataFrame(
        {**{k: np.asarray(v, np.int64) for k, v in keys.items()},
         "n": levels["n"].to_numpy(), "p_min": p, "p_max": p, **sums})], axis=1)
    names = [*by, *keys]
    return merge([frame], names).sort_values(names, ignore_index=True, kind="stable")


@register("smooth_cells")
@register("smooth_split")
def _smooth_cells(summary: Summary, levels: pd.DataFrame, by: tuple) -> pd.DataFrame:
    # the offset d = p − cell/2^k is exact in doubles (Sterbenz: p and cell/2^k are within a
    # factor 2), so each level's sums times d are its row sums times d
    grid, grids = summary.params
    p = levels["p"].to_numpy(float)
    cell = score_cell(p, grid)
    if summary.kind == "smooth_split" and max(grids) < grid:
        keep = np.zeros(len(p), bool)
        for h in grids:
            keep |= cell * h % grid > grid - h
        levels, p, cell = levels[keep], p[keep], cell[keep]
    W, swy = levels["W"].to_numpy(float), levels["swy"].to_numpy(float)
    # Σw(y − p): a one gives 1 − p, a zero −p (W − Σwy is only rounding when every label is 1;
    # it is negative beyond rounding for maturity-adjusted label sums, and kept)
    zeros = np.where(np.abs(W - swy) > 1e-12 * np.abs(W), W - swy, 0.0)
    swr = swy * (1 - p) - zeros * p
    d = p - cell / grid
    keys = {"cell": cell, **{f"b_{h}": np.floor(p * h) for h in grids}}
    return _keyed_sums(levels, by, keys, {"W": W, "swy": swy, "swr": swr, "swd": W * d,
                                          "swyd": swy * d, "swrd": swr * d})


@register("logit_grid")
def _logit_grid(summary: Summary, levels: pd.DataFrame, by: tuple) -> pd.DataFrame:
    step, clip = summary.params
    p = levels["p"].to_numpy(float)
    clipped = np.maximum(np.minimum(p, 1 - clip), clip)
    x = (np.log(clipped) - np.log(1 - clipped)) / step
    k = np.floor(x)
    h = x - k
    g = 1 - h
    W, swy = levels["W"].to_numpy(float), levels["swy"].to_numpy(float)
    sums = {"W": W}
    for name, mass in (("m", W), ("y", swy), ("v", W * (g * h)), ("vy", swy * (g * h))):
        sums |= {f"{name}_lo": mass * g, f"{name}_hi": mass * h}
    if "moments" in summary.parts:  # a level's rows share one f: its Σv and Σvy times g², gh, h²
        weights = [("q", W, swy)]
        if "spread" in summary.parts and "sw2" in levels and "sw2y" in levels:
            weights.append(("qv", levels["sw2"].to_numpy(float), levels["sw2y"].to_numpy(float)))
        for prefix, V, Vy in weights:
            labels = (("", V), ("y", Vy)) + ((("yy", Vy),) if "soft" in summary.parts else ())
            for name, mass in labels:  # binary labels: y² = y
                for ab, share in (("ll", g * g), ("lh", g * h), ("hh", h * h)):
                    sums[f"{prefix}{name}_{ab}"] = mass * share
    return _keyed_sums(levels, by, {"k": k}, sums)
