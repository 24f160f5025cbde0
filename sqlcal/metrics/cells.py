"""The fine score histogram, and exact equal-mass bins built on it without sorting the rows.

A score cell is ``LEAST(FLOOR(p·2^k), 2^k − 1)``: a contiguous score range, exact in binary floating
point, that never splits tied scores. One GROUP BY gives the histogram (the *cells* summary, shared
by equal-mass bins and the cumulative metrics). An exact quantile then needs only the score levels
of the few cells holding the order statistics behind it; when those cells hold too many rows they
are split 2^k-fold first (a *zoom*, another GROUP BY over their rows only), or, where scores crowd
a few cells (a click log's near 0), split by log-odds (:func:`logit_split`). The calibration by
score decile, a click-log table, starts instead from a log-odds histogram of every row carried in
the first scan (``first="logit"``).
"""

from __future__ import annotations

from typing import Iterator

import numpy as np
import pandas as pd

from sqlcal import options
from sqlcal.inputs.grids import LOGIT_CELL_BOUND
from sqlcal.inputs.sources import Source
from sqlcal.metrics import groups as split_groups
from sqlcal.metrics import key_tuple
from sqlcal.query import declared, planner

#: cells of the score histogram behind smECE: with the offsets' first moments, linear binning
#: of a cell lying within one interval of relplot's grid is exact (see ``sqlcal.metrics.smooth``;
#: the distances read the same histogram)
SMOOTH_CELLS = 2**14

#: cells of the first histogram (2^10); a zoom multiplies the grid by a power of two up to
#: ZOOM, so cell ids stay FLOOR(p·2^k), exact while k <= 50
CELLS = 1024
ZOOM = 1024
#: rows per finer cell a zoom aims at: its factor is the power of two (2 to ZOOM) that leaves
#: about this many rows in each finer cell. The zooms of the equal-mass edges and of the cutoff
#: error's candidates then usually land on one grid, which one scan reads for both (the
#: planner's shared follow-ups)
ZOOM_ROWS = 64
#: fetch the score levels of the wanted cells once they hold at most this many rows
LEVEL_ROWS = 1_000_000
#: the budget's bytes charged to one row of a slab (:func:`level_slabs`): twice what a level
#: adds to the process at its peak, so that a slab takes half the budget and the other half is
#: left to what the process holds beside it (the engine's buffers for the table: about 0.8 GB
#: at 10^8 rows). Measured on DuckDB at 10^7 continuous scores in 10 groups (slabs of 1 to 4
#: million levels), the resident memory grows by about 230 bytes a level of a slab: the
#: engine's hash table and its result (most of it), the pandas frame, the finish's arrays
LEVEL_ROW_BYTES = 512
#: split the wanted cells by log-odds (:func:`logit_split`) instead of zooming 2^k-fold when they
#: hold more than this share of the rows: scores crowding a few cells, where 2^k zooms repeat
CONCENTRATED = 0.25
#: the first log-odds split's cells are at least 1/LOGIT_FIRST units of log-odds wide: a few
#: thousand pieces over all groups, so that its pass over every crowded row costs about a scan
#: (a hash table of half a million pieces cost DuckDB 5x that at 10^8 rows); the log-odds
#: histogram of the first scan (``first="logit"``) has cells 1/LOGIT_FIRST wide too (at 10^7
#: rows and 100 groups, 1/16 and 1/64 cost as much in all: fewer pieces leave more rows to the
#: finer split)
LOGIT_FIRST = 32
#: the finest log-odds split (cells of 2^-30 units of log-odds)
_LOGIT_SCALE_MAX = 2**30
#: the 2^k cells that select the levels of the split pieces: at most this many a piece on average
_PIECE_CELLS = 8
#: the equal-mass strategies: edges at numpy's linear-interpolation quantiles (sqlcal's own, also
#: scikit-learn's, netcal's and pandas' qcut), or uncertainty-calibration's rank blocks with edges
#: at the midpoints between the last score of one block and the first of the next (its
#: ``get_equal_bins``)
EQUAL_MASS_STRATEGIES = ("quantile", "uncertainty_calibration")


def summary_parts(src: Source, *names: str) -> frozenset:
    """The set of optional summary columns, with Σwy² added for soft labels' moments."""
    parts = frozenset(names)
    return parts | {"soft"} if src.allow_soft and "moments" in parts else parts


def cells_summary(src: Source, parts=(), cells: int | None = None) -> pd.DataFrame:
    """The fine score histogram (:func:`sqlcal.query.reductions.cells`), one pass, cached on the
    source."""
    return planner.fetch(src, *cells_needs(src, parts, cells))


def cells_needs(src: Source, parts=(), cells: int | None = None) -> list:
    """The declared summary :func:`cells_summary` reads."""
    return [declared.cells(cells or CELLS, *summary_parts(src, *parts))]


def logit_needs(src: Source, parts=()) -> list:
    """The first-stage log-odds histogram (:func:`sqlcal.query.declared.logit_cells`, cells
    1/:data:`LOGIT_FIRST` units wide) where ``first="logit"`` equal-mass bins start."""
    return [declared.logit_cells(LOGIT_FIRST, *summary_parts(src, *parts))]


def first_needs(src: Source, parts=(), first: str = "cells") -> list:
    """The first-stage histogram equal-mass bins start from: score cells or log-odds cells."""
    return logit_needs(src, parts) if first == "logit" else cells_needs(src, parts)


def pair_levels(src: Source, cells: int, pairs: pd.DataFrame) -> pd.DataFrame:
    """The levels summary (n, W, swy, swp per distinct score, and its ``cell``) of the given
    (group, cell) pairs only (``pairs``: the keys and ``cell``), cached on the source: how a
    cell summary is made exact where it has to be. Declared by the cells' score ranges."""
    by = list(src.by)
    pairs = pairs[[*by, "cell"]].drop_duplicates()
    frame = planner.fetch(src, declared.levels_within(cell_ranges(pairs, by, cells)))
    frame = frame.assign(cell=cell_of(frame["p"].to_numpy(float), cells))
    return frame.sort_values([*by, "p"], ignore_index=True, kind="stable")


def cell_levels(src: Source, cells: int, pairs: list, sizes=None) -> pd.DataFrame:
    """The levels (n, W, swy, swp per distinct score, and its ``cell``) of whole cells of the
    2^k grid ``cells``, each group its own: ``pairs`` of (group key tuple, cell), read by a
    join on the group and the cell (no group reads another's rows), not cached. With the
    rows of each cell (``sizes``), in queries of at most a slab's rows each
    (:func:`slab_rows`), so neither the engine's hash table nor a frame outgrows the memory
    budget; the frames are concatenated (the caller holds what it asked for)."""
    by = list(src.by)
    if not pairs:
        return pd.DataFrame(columns=[*by, "p", "n", "W", "swy", "swp", "cell"])
    chunk = (np.zeros(len(pairs), dtype=np.int64) if sizes is None
             else chunks(np.asarray(sizes, dtype=np.int64), slab_rows()))
    frames = [planner.scan(src, declared.levels_in_cells(
        cells, [pair for pair, mine in zip(pairs, chunk == part) if mine]))
        for part in np.unique(chunk)]
    frame = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    return frame.assign(cell=cell_of(frame["p"].to_numpy(float), cells))


def chunks(sizes: np.ndarray, most: int) -> np.ndarray:
    """Consecutive chunks of items of ``sizes``, each summing to at most ``most`` (an item
    larger alone): the chunk number of each item.

    >>> chunks(np.array([3, 3, 3, 9, 1]), 6).tolist()
    [0, 0, 1, 2, 3]
    """
    out = np.empty(len(sizes), dtype=np.int64)
    chunk, held = 0, 0
    for i, size in enumerate(sizes.tolist()):
        if held and held + size > most:
            chunk, held = chunk + 1, 0
        out[i] = chunk
        held += size
    return out


def cell_of(p: np.ndarray, cells: int) -> np.ndarray:
    """The cell of each score on the 2^k grid, as the engine computes it (p·2^k is exact)."""
    return np.minimum(np.floor(np.asarray(p, float) * cells), cells - 1).astype(np.int64)


def cell_ranges(frame: pd.DataFrame, by, cells: int) -> list:
    """The score ranges ``(group key values, lo, hi)`` of the cells listed in ``frame`` (the
    keys and ``cell`` at the 2^k grid ``cells``): cell c is [c/2^k, (c + 1)/2^k), exact."""
    keys = frame[list(by)].astype(object).where(frame[list(by)].notna(), None).to_numpy()
    ids = frame["cell"].to_numpy(np.int64)
    return [(tuple(k), c / cells, (c + 1) / cells) for k, c in zip(keys, ids.tolist())]


def equal_mass_bins(src: Source, bins: int, parts: frozenset,
                    strategy: str = "quantile", first: str = "cells") -> pd.DataFrame:
    """One row per group and non-empty equal-mass bin: the summed columns, ``p_min``, ``p_max``,
    and the group's interior edges ``e1 … e{B−1}``.

    ``strategy="quantile"``: edges are numpy's linear-interpolation quantiles at
    ``np.linspace(0, 1, B + 1)`` of the sample with each row repeated w times (``np.quantile`` to
    the last bit for unit or whole-number weights; other weights are first rescaled to sum to the
    row count).

    ``strategy="uncertainty_calibration"``: the sorted sample (each row repeated w times; whole
    weights only) is split into min(B, N) blocks of consecutive ranks as ``np.array_split`` does
    (the first N mod B blocks one longer), and edge i is (s[e_i − 1] + s[e_i]) / 2 with e_i the
    first rank of block i + 1: the edges of uncertainty-calibration's ``get_equal_bins``, to the
    last bit. With fewer rows than bins the missing edges repeat the highest score.

    Bins are right-closed on the edges, so rows equal to an edge join the lower bin together.
    Every cell that holds no order statistic behind an edge lies wholly on one side of every
    edge, so only the wanted cells need their levels: read by :func:`equal_mass_walk`'s
    follow-ups (shared with other equal-mass metrics of a report), finished by
    :func:`equal_mass_finish`.

    ``first="logit"`` starts the search from a histogram of every row's log-odds
    (:func:`logit_needs`) instead of the 2^k score cells, read in the first scan: where scores
    crowd near 0 or 1 (a click log), the uniform cells would hold nearly every row in a few
    cells, and the log-odds split of those (:func:`logit_split`) would read every row again.
    The edges and bins are the same.
    """
    if strategy not in EQUAL_MASS_STRATEGIES:
        raise ValueError(f"strategy must be one of {EQUAL_MASS_STRATEGIES} for equal-mass bins, "
                         f"not {strategy!r}")
    planner.fetch(src, *first_needs(src, parts, first))  # the first scan: are weights whole?
    if strategy == "uncertainty_calibration" and src.weighted and not src.integer_weights:
        raise ValueError(
            f"strategy='uncertainty_calibration' cuts equal-mass bins by row rank, and weight "
            f"column {src.weight!r} holds fractional weights, for which uncertainty-calibration "
            "has no definition (whole-number weights count as repeated rows); pass "
            "strategy='quantile' (weighted quantile edges) or drop weight=")
    pieces, scale, levels = equal_mass_walk(src, bins, parts, strategy,
                                            lambda summary: planner.fetch(src, summary), first)
    return equal_mass_finish(pieces, levels, by=src.by, bins=bins, scale=scale,
                             integer_weights=src.integer_weights, strategy=strategy)


def equal_mass_follow_up(src: Source, bins: int, parts, strategy: str,
                         first: str = "cells") -> list:
    """The next follow-up :func:`equal_mass_bins` reads that ``src`` does not hold ([] when
    none): a pure function of the frames cached so far, for the planner to share."""
    if strategy == "uncertainty_calibration" and src.weighted and not src.integer_weights:
        return []  # refused by the metric itself
    parts = summary_parts(src, "sums", *parts)
    return planner.follow_up(src, lambda read: equal_mass_walk(src, bins, parts, strategy, read,
                                                               first))


def equal_mass_walk(src: Source, bins: int, parts: frozenset, strategy: str, read,
                    first: str = "cells"):
    """The reads behind equal-mass bins, each chosen from the frames before it: the score-cell
    histogram; while the cells holding the order statistics behind the edges hold more than
    :data:`LEVEL_ROWS` rows, a finer histogram of those cells (a zoom); then the levels inside
    them. Returns the histogram (zoomed cells at ``scale``, the others renumbered to it), the
    scale, and the levels (None when no cell is wanted).

    Where the wanted cells hold more than :data:`CONCENTRATED` of the rows (scores crowding a
    few cells, as a click log's near 0), the zoom splits them by log-odds instead
    (:func:`logit_split`): the histogram returned then numbers its pieces by rank (``scale`` is
    None) and the levels are placed in them by score. ``first="logit"``: the search starts from
    the log-odds histogram of every row (:func:`logit_needs`) and refines it the same way."""
    by = list(src.by)
    rule = (bins, src.integer_weights, strategy)
    if first == "logit":
        split = logit_split(src, None, None, rule, parts, read)
        if split is not None:
            return split
        # pieces overlap (an engine's logarithm decreasing somewhere): the 2^k zoom instead
    scale = CELLS
    histogram = read(cells_needs(src, parts)[0])
    order, keys, starts = _group_order(histogram, by)
    columns = {c: histogram[c].to_numpy()[order] for c in ("cell", "n", "W", "p_min", "p_max")}
    found = _edge_cells(columns, starts, rule)
    rows = _cells_rows(columns, np.concatenate(found) if found else np.zeros(0, np.int64))
    if rows <= LEVEL_ROWS:  # the common case: the levels of the wanted cells, read at once
        ranges = _cell_ranges_of(keys, [columns["cell"][w] for w in found], scale)
        levels = read(declared.levels_within(ranges, *parts)) if ranges else None
        return histogram, scale, levels
    ordered = histogram.take(order).reset_index(drop=True)
    pieces = {key: ordered.iloc[a:b].reset_index(drop=True)
              for key, a, b in zip(keys, starts[:-1].tolist(), starts[1:].tolist())}
    wanted = {key: (w - a).tolist() for key, w, a in zip(keys, found, starts.tolist())}
    if (first != "logit" and rows > LEVEL_ROWS
            and rows > CONCENTRATED * float(histogram["n"].sum())):
        split = logit_split(src, pieces, wanted, rule, parts, read)
        if split is not None:
            return split
    while rows > LEVEL_ROWS and scale * 2 <= 2**50:
        cells = sum(len(w) for w in wanted.values())
        zoom = zoom_factor(rows / cells, scale)
        sub = read(declared.cells_within(scale * zoom, _wanted_ranges(pieces, wanted, by, scale),
                                         *parts))
        sub_parts = {key_tuple(k): p for k, p in split_groups(sub, by)}
        for key, part in pieces.items():
            ids = part.loc[wanted[key], "cell"]
            finer = sub_parts.get(key, sub.iloc[:0])
            finer = finer[(finer["cell"] // zoom).isin(ids)]
            coarse = part.drop(index=wanted[key])
            coarse = coarse.assign(cell=coarse["cell"] * zoom)  # the same range, finer ids
            pieces[key] = pd.concat([coarse, finer]).sort_values("cell", ignore_index=True)
        scale *= zoom
        wanted = {key: _edge_pieces(part, *rule) for key, part in pieces.items()}
        rows = _rows_to_fetch(pieces, wanted)
    ranges = _wanted_ranges(pieces, wanted, by, scale)
    levels = read(declared.levels_within(ranges, *parts)) if ranges else None
    frame = pd.concat(list(pieces.values()), ignore_index=True) if pieces else histogram.iloc[:0]
    return frame, scale, levels


def logit_split(src: Source, pieces: dict, wanted: dict, rule: tuple, parts: frozenset, read):
    """The equal-mass search where scores crowd: the wanted score cells split by log-odds.

    A first read (:func:`sqlcal.query.declared.logit_cells_within`) groups the rows of one run
    of cells (from the lowest to the highest cell any group wants, the same for every group) by
    log-odds cell ``FLOOR(ln(p/(1 − p))·s)``, s a power of two of at most
    :data:`LOGIT_FIRST` (a small hash table, so about a scan's cost). While the pieces holding
    the order statistics hold more than :data:`LEVEL_ROWS` rows, a finer split of those pieces
    only follows (:func:`sqlcal.query.declared.logit_cells_in_cells`: each group joined to its
    own 2^k cells around them), s chosen so that they keep about LEVEL_ROWS/2 rows. The
    log-odds cell never decreases with p, so each piece is the score range [p_min, p_max] of
    its rows, exact however the engine rounds the logarithm, and a finer cell lies inside one
    coarser cell (s doubles). The levels are then read inside the wanted pieces
    (:func:`sqlcal.query.declared.levels_in_cells`). Returns what :func:`equal_mass_walk`
    returns, with the pieces numbered by rank per group and ``scale`` None; None when pieces
    overlap (an engine whose logarithm decreases somewhere), for the 2^k zoom instead.

    ``pieces`` None: the search starts from the log-odds histogram of every row that the first
    scan carried (:func:`logit_needs`, ``first="logit"``) instead of splitting score cells."""
    by = list(src.by)
    if pieces is None:
        histogram = read(logit_needs(src, parts)[0])
        out = _groups_in_order(histogram.assign(lscale=LOGIT_FIRST), by)
        if out is None:
            return None
        return _logit_refine(out, by, rule, parts, read, LOGIT_FIRST, histogram)
    ids = [c for key, part in pieces.items() for c in part.loc[wanted[key], "cell"].tolist()]
    lo, hi = min(ids), max(ids) + 1
    scale = min(_logit_scale(pieces, wanted, rule), LOGIT_FIRST)
    sub = read(declared.logit_cells_within(scale, CELLS, [(key, lo / CELLS, hi / CELLS)
                                                          for key in pieces], *parts))
    sub_parts = {key_tuple(k): p for k, p in split_groups(sub, by)}
    out = {}
    for key, part in pieces.items():
        coarse = part[(part["cell"] < lo) | (part["cell"] >= hi)].drop(columns="cell")
        finer = sub_parts.get(key, sub.iloc[:0]).assign(lscale=scale)
        out[key] = _in_order(pd.concat([coarse.assign(lcell=0, lscale=0), finer]))
        if out[key] is None:
            return None
    return _logit_refine(out, by, rule, parts, read, scale, sub)


def _logit_refine(out: dict, by: list, rule: tuple, parts: frozenset, read, scale: int,
                  empty: pd.DataFrame):
    """The rest of :func:`logit_split` from its pieces ``out`` (per group, numbered by rank,
    with ``lcell`` and ``lscale``, 0 for a score cell left whole) at log-odds scale ``scale``:
    the finer splits of the wanted pieces, then their levels (``empty``: a frame of the
    pieces' columns, the result when there are no groups)."""
    wanted = {key: _edge_pieces(part, *rule) for key, part in out.items()}
    rows = _rows_to_fetch(out, wanted)
    for _ in range(6):
        if rows <= LEVEL_ROWS or scale >= _LOGIT_SCALE_MAX:
            break
        scale = max(min(_logit_scale(out, wanted, rule), _LOGIT_SCALE_MAX), 2 * scale)
        grid, pairs = _piece_cells(out, wanted)
        sub = read(declared.logit_cells_in_cells(scale, grid, pairs, *parts))
        sub_parts = {key_tuple(k): p for k, p in split_groups(sub, by)}
        for key, part in out.items():
            own = part.loc[wanted[key]]
            own = own[(own["p_min"] < own["p_max"]) & (own["lscale"] > 0)]  # mixed, split
            if not len(own):
                continue
            fine = sub_parts.get(key, sub.iloc[:0])
            inside = np.zeros(len(fine), dtype=bool)
            replaced = np.zeros(len(part), dtype=bool)
            for parent_scale, parents in own.groupby("lscale")["lcell"]:
                inside |= (fine["lcell"] // (scale // int(parent_scale))).isin(parents).to_numpy()
                replaced |= ((part["lscale"] == parent_scale)
                             & part["lcell"].isin(parents)).to_numpy()
            frame = pd.concat([part[~replaced], fine[inside].assign(lscale=scale)])
            out[key] = _in_order(frame.drop(columns="cell"))
            if out[key] is None:
                return None
        wanted = {key: _edge_pieces(part, *rule) for key, part in out.items()}
        rows = _rows_to_fetch(out, wanted)
    grid, pairs = _piece_cells(out, wanted)
    levels = read(declared.levels_in_cells(grid, pairs, *parts)) if pairs else None
    frames = [part.drop(columns=["lcell", "lscale"]) for part in out.values()]
    frame = pd.concat(frames, ignore_index=True) if frames else empty.iloc[:0]
    return frame, None, levels


def _groups_in_order(frame: pd.DataFrame, by: list) -> dict | None:
    """:func:`_in_order` of every group of ``frame`` (one sort for all): group key -> its
    pieces; None when two pieces of a group overlap."""
    code = (frame.groupby(by, dropna=False, sort=False).ngroup().to_numpy() if by
            else np.zeros(len(frame), dtype=np.int64))
    p_min, p_max = frame["p_min"].to_numpy(float), frame["p_max"].to_numpy(float)
    order = np.lexsort((p_min, code))
    code, p_min, p_max = code[order], p_min[order], p_max[order]
    if ((code[1:] == code[:-1]) & (p_max[:-1] >= p_min[1:])).any():
        return None
    starts = np.flatnonzero(np.diff(code, prepend=-1))
    ends = np.append(starts[1:], len(code))
    rank = np.arange(len(code)) - np.repeat(starts, ends - starts)
    frame = frame.take(order).assign(cell=rank)
    keys = (list(zip(*(frame[c].iloc[starts].tolist() for c in by))) if by
            else [()] * len(starts))
    return {key_tuple(dict(zip(by, key))): frame.iloc[a:b].reset_index(drop=True)
            for key, a, b in zip(keys, starts.tolist(), ends.tolist())}


def _in_order(frame: pd.DataFrame) -> pd.DataFrame | None:
    """Pieces sorted by score and numbered by rank (``cell``), or None when two overlap."""
    frame = frame.sort_values("p_min", ignore_index=True)
    p_min, p_max = frame["p_min"].to_numpy(float), frame["p_max"].to_numpy(float)
    if (p_max[:-1] >= p_min[1:]).any():
        return None
    return frame.assign(cell=np.arange(len(frame)))


def equal_mass_finish(cells: pd.DataFrame, levels: pd.DataFrame | None, *, by, bins: int,
                      scale: int | None = CELLS, integer_weights: bool = True,
                      strategy: str = "quantile") -> pd.DataFrame:
    """Equal-mass bins from the score-cell histogram (``cells`` at the 2^k grid ``scale``, or
    pieces numbered by rank when ``scale`` is None: see :func:`logit_split`) and
    the levels (``p`` and the sums per group and distinct score) of at least the cells holding
    the order statistics behind the edges: one row per group and non-empty bin with the summed
    columns, ``p_min``, ``p_max`` and the edges ``e1 … e{B−1}`` (see :func:`equal_mass_bins`)."""
    by = list(by)
    rule = (bins, integer_weights, strategy)
    # groups numbered in order of first appearance in ``cells``; the cells sorted by (group,
    # cell) and the levels by (group, score) once, then each group is a slice of plain arrays
    # (a pandas frame per group cost a second per 10^6 levels at 100 groups)
    cells = cells.reset_index(drop=True)
    code = (cells.groupby(by, dropna=False, sort=False).ngroup().to_numpy() if by
            else np.zeros(len(cells), dtype=np.int64))
    order = np.lexsort((cells["cell"].to_numpy(), code))
    cells, code = cells.take(order).reset_index(drop=True), code[order]
    groups = int(code.max()) + 1 if len(code) else 0
    starts = np.searchsorted(code, np.arange(groups + 1))
    cell_id = cells["cell"].to_numpy(np.int64)
    cell_W = cells["W"].to_numpy(float)
    cell_n = cells["n"].to_numpy(float)
    cell_lo = cells["p_min"].to_numpy(float)
    if levels is not None and len(levels):
        levels = levels.reset_index(drop=True)
        if by:
            ids = cells.loc[starts[:-1], by].assign(_group=np.arange(groups))
            lv_code = levels[by].merge(ids, on=by, how="left")["_group"]
            lv_code = lv_code.fillna(-1).to_numpy(np.int64)
        else:
            lv_code = np.zeros(len(levels), dtype=np.int64)
        lv_p = levels["p"].to_numpy(float)
        # by score, then stably by group (two sorts of plain arrays; the frame is not reordered)
        lv_order = np.argsort(lv_p)
        lv_order = lv_order[np.argsort(lv_code[lv_order], kind="stable")]
        lv_code, lv_p = lv_code[lv_order], lv_p[lv_order]
        lv_starts = np.searchsorted(lv_code, np.arange(groups + 1))
        lv_W = levels["W"].to_numpy(float)[lv_order]
        lv_cell = cell_of(lv_p, scale) if scale is not None else None
    else:
        levels, lv_starts = None, np.zeros(groups + 1, dtype=np.int64)
    kept_cells, cell_bins, kept_levels, level_bins, edge_rows = [], [], [], [], []
    for g in range(groups):
        a, b = starts[g], starts[g + 1]
        W = cell_W[a:b]
        unit, positions = _positions_of(W, cell_n[a:b].sum(), *rule)
        wanted = _edge_rows(W, unit, positions)
        keep = np.ones(b - a, dtype=bool)
        if len(wanted):
            keep[wanted] = False
            la, lb = lv_starts[g], lv_starts[g + 1]
            p = lv_p[la:lb]
            if scale is None:  # pieces numbered by rank: a level lies in the last one below it
                at = np.searchsorted(cell_lo[a:b], p, side="right") - 1
                at = np.maximum(at, 0)
            else:  # the group's cell holding each level (-1: none)
                at = np.searchsorted(cell_id[a:b], lv_cell[la:lb])
                at = np.where(cell_id[a:b][np.minimum(at, b - a - 1)] == lv_cell[la:lb],
                              at, -1)
            inside = np.flatnonzero((at >= 0) & ~keep[np.maximum(at, 0)])
            edges = _edges_of(W, unit, positions, at[inside], lv_W[la:lb][inside], p[inside],
                              strategy, bins)
            kept_levels.append(la + inside)
            level_bins.append(np.searchsorted(edges, p[inside]))
        else:  # no weight: no quantiles, one bin
            edges = np.full(bins - 1, np.inf)
        rows = np.flatnonzero(keep)
        kept_cells.append(a + rows)
        cell_bins.append(np.searchsorted(edges, cell_lo[a:b][rows]))
        edge_rows.append(np.asarray(edges, float))
    # every group's bins summed in one groupby (one per group cost a tenth of a second per ten
    # groups). Within a group and bin, its kept cells come first, then its levels in score
    # order: the order of a group by group concatenation, so the sums are those of one
    rest = cells.take(np.concatenate(kept_cells)).assign(
        bin=np.concatenate(cell_bins), _group=np.repeat(np.arange(groups),
                                                        [len(k) for k in kept_cells]))
    if kept_levels:  # the levels summed per group and bin first: runs of the sorted levels
        chosen = np.concatenate(kept_levels)
        group, at_bin = lv_code[chosen], np.concatenate(level_bins)
        runs = np.flatnonzero(np.diff(group, prepend=-1) | np.diff(at_bin, prepend=-1))
        ends = np.append(runs[1:], len(chosen)) - 1
        rows = lv_order[chosen]
        picked = pd.DataFrame({c: np.add.reduceat(levels[c].to_numpy()[rows], runs)
                               for c in levels if _is_sum(c)})
        picked = picked.assign(p_min=lv_p[chosen][runs], p_max=lv_p[chosen][ends],
                               bin=at_bin[runs], _group=group[runs])
        rest = pd.concat([rest, picked], ignore_index=True)
    sums = [c for c in rest if _is_sum(c)]
    agg = rest.groupby(["_group", "bin"]).agg({**dict.fromkeys(sums, "sum"), "p_min": "min",
                                               "p_max": "max"}).reset_index()
    at = agg.pop("_group").to_numpy()
    key_rows = cells.loc[starts[:-1], by]
    key_columns = {c: pd.Series(key_rows[c].tolist()).iloc[at].reset_index(drop=True)
                   for c in by}
    edges = np.stack(edge_rows)[at] if edge_rows else np.zeros((0, bins - 1))
    edge_columns = pd.DataFrame(edges, columns=[f"e{i}" for i in range(1, edges.shape[1] + 1)])
    return pd.concat([agg.assign(**key_columns), edge_columns], axis=1)


def _is_sum(column: str) -> bool:
    """Whether a summary column is a sum (added over rows), not a key or an extreme."""
    return column.startswith("sw") or column in ("n", "W", "total", "positive", "negative",
                                                 "var", "var2", "ny")


def zoom_factor(rows_per_cell: float, scale: int) -> int:
    """The factor of a zoom into cells holding ``rows_per_cell`` rows each on average, at the
    grid ``scale``: a power of two from 2 to :data:`ZOOM` leaving about :data:`ZOOM_ROWS` rows
    a finer cell (finer would return nearly a row per cell), and the grid at most 2^50."""
    want = 2 ** np.ceil(np.log2(max(rows_per_cell / ZOOM_ROWS, 2)))
    return int(min(want, ZOOM, 2**50 // scale))


def _logit_scale(pieces: dict, wanted: dict, rule: tuple) -> int:
    """The log-odds split's s: a power of two leaving about LEVEL_ROWS/2 rows in the pieces
    holding the order statistics, reading the rows of a wanted cell as spread evenly in log-odds
    over [logit p_min, logit p_max] and each edge as wanting two pieces."""
    bound = float(LOGIT_CELL_BOUND)
    need = 0.0
    for key, part in pieces.items():
        rows = np.asarray(wanted[key], dtype=np.int64)
        if not len(rows):
            continue
        unit, positions = _positions(part, *rule)
        C = np.cumsum(part["W"].to_numpy(float)) * unit
        edges = np.bincount(np.searchsorted(C, np.floor(positions), side="right"),
                            minlength=len(C))[rows]
        with np.errstate(divide="ignore", invalid="ignore"):
            z = [np.clip(np.log(v / (1 - v)), -bound, bound)
                 for v in (part[c].to_numpy(float)[rows] for c in ("p_min", "p_max"))]
        span = z[1] - z[0]
        mixed = span > 0
        need += float((2 * np.maximum(edges, 1) * part["n"].to_numpy()[rows])[mixed]
                      @ (1 / span[mixed]))
    want = need / (LEVEL_ROWS / 2)
    return int(min(max(2 ** np.ceil(np.log2(max(want, 1.0))), 1), _LOGIT_SCALE_MAX))


def _piece_cells(pieces: dict, wanted: dict) -> tuple:
    """The (group, cell) pairs of a 2^k grid covering the wanted pieces ([p_min, p_max] each):
    the finest grid (k <= 50) on which they take at most :data:`_PIECE_CELLS` cells a piece on
    average, so that the levels read from the few rows of neighbouring pieces they also hold
    (placed by score and left out) stay a small share. Returns ``(2^k, pairs)``."""
    rows = [(key, part.loc[wanted[key], "p_min"].to_numpy(float),
             part.loc[wanted[key], "p_max"].to_numpy(float))
            for key, part in pieces.items() if wanted[key]]
    if not rows:
        return CELLS, []
    lo = np.concatenate([r[1] for r in rows])
    hi = np.concatenate([r[2] for r in rows])
    for k in range(50, 9, -1):
        if np.sum(np.floor(hi * 2.0**k) - np.floor(lo * 2.0**k) + 1) <= _PIECE_CELLS * len(lo):
            break
    grid = 2**k
    pairs = []
    for key, p_lo, p_hi in rows:
        a = np.floor(p_lo * grid).astype(np.int64)
        b = np.minimum(np.floor(p_hi * grid).astype(np.int64), grid - 1)
        pairs += [(key, c) for x, y in zip(a.tolist(), b.tolist()) for c in range(x, y + 1)]
    return grid, pairs


def _wanted_ranges(pieces: dict, wanted: dict, by, scale: int) -> list:
    """The score ranges (:func:`cell_ranges`) of the wanted cells of every group's pieces."""
    return _cell_ranges_of(list(pieces), [part["cell"].to_numpy(np.int64)[wanted[key]]
                                          for key, part in pieces.items()], scale)


def _cell_ranges_of(keys: list, cells: list, scale: int) -> list:
    """The score ranges ``(group key, lo, hi)`` of each group's cells (``keys[g]`` and the
    sorted ids ``cells[g]`` on the 2^k grid ``scale``): a run of consecutive cells as one range,
    as :func:`sqlcal.query.declared.score_ranges` merges them (the ranges of thousands of
    groups were a tenth of a second of Python a stage)."""
    out = []
    for key, ids in zip(keys, cells):
        if not len(ids):
            continue
        breaks = np.flatnonzero(np.diff(ids) != 1) + 1
        first, last = ids[np.r_[0, breaks]], ids[np.r_[breaks - 1, len(ids) - 1]]
        out += [(key, a / scale, (b + 1) / scale) for a, b in zip(first.tolist(), last.tolist())]
    return out


def _group_order(frame: pd.DataFrame, by: list) -> tuple[np.ndarray, list, np.ndarray]:
    """The order of a summary's rows by group (in order of first appearance) then cell, the
    groups' keys (:func:`sqlcal.metrics.key_tuple`) and their offsets (G + 1): group g is
    ``order[starts[g]:starts[g + 1]]``. One sort for every group, where a frame per group cost
    a millisecond a group."""
    code = (frame.groupby(by, dropna=False, sort=False).ngroup().to_numpy() if by
            else np.zeros(len(frame), dtype=np.int64))
    order = np.lexsort((frame["cell"].to_numpy(np.int64), code))
    starts = np.flatnonzero(np.diff(code[order], prepend=-1))
    keys = (list(zip(*(frame[c].take(order[starts]).tolist() for c in by))) if by
            else [()] * len(starts))
    return (order, [key_tuple(dict(zip(by, key))) for key in keys],
            np.append(starts, len(order)))


def _edge_cells(columns: dict, starts: np.ndarray, rule: tuple) -> list:
    """Per group, the rows of its cells holding the order statistics behind its edges:
    :func:`_edge_pieces` of each group's slice ``starts[g]:starts[g + 1]`` of the histogram's
    ``columns`` (``W`` and ``n`` as arrays sorted by group and cell; ``rule``: bins,
    integer_weights, strategy), as rows of the arrays."""
    W, n = columns["W"].astype(float), columns["n"]
    found = []
    for a, b in zip(starts[:-1].tolist(), starts[1:].tolist()):
        unit, positions = _positions_of(W[a:b], n[a:b].sum(), *rule)
        found.append(a + _edge_rows(W[a:b], unit, positions))
    return found


def _cells_rows(columns: dict, rows: np.ndarray) -> int:
    """The rows of the histogram in its cells ``rows`` (of the arrays ``columns``) that hold
    more than one score (a cell holding a single score is one level whatever its rows)."""
    mixed = columns["p_min"][rows] < columns["p_max"][rows]
    return int(columns["n"][rows][mixed].sum())


def _rows_to_fetch(pieces: dict, wanted: dict) -> int:
    # a cell holding a single score is one level whatever its row count
    total = 0
    for k, part in pieces.items():
        rows = np.asarray(wanted[k], dtype=np.int64)
        mixed = part["p_min"].to_numpy()[rows] < part["p_max"].to_numpy()[rows]
        total += int(part["n"].to_numpy()[rows][mixed].sum())
    return total


def _positions(part: pd.DataFrame, bins: int, integer_weights: bool, strategy: str = "quantile"):
    """Cumulative weight per cell in position units, and the positions h behind the edges
    (:func:`_positions_of` of a group's cells)."""
    return _positions_of(part["W"].to_numpy(float), part["n"].sum(), bins, integer_weights,
                         strategy)


def _positions_of(W_cells: np.ndarray, rows: float, bins: int, integer_weights: bool,
                  strategy: str = "quantile"):
    """The unit of positions and the positions h behind the edges of a group of ``rows`` rows
    whose cells weigh ``W_cells``: each edge is found from the order statistics at ranks ⌊h⌋
    and ⌊h⌋ + 1 (from 0).

    Whole-number weights are frequencies: positions count rows of the expanded sample and
    h = (W − 1)·q, numpy's linear rule on it. Other weights are rescaled to sum to the row count
    first, so that rescaling them changes nothing (and equal weights give numpy's rule on the rows).
    q comes from ``np.linspace`` as in scikit-learn, netcal and pandas' qcut, so edges match theirs
    to the last bit. For uncertainty-calibration's blocks (N = W rows, B' = min(B, N) blocks,
    ``np.array_split`` sizes), h = e_i − 1/2 with e_i = i·⌊N/B'⌋ + min(i, N mod B'): the last
    rank of block i and the first of block i + 1."""
    W = W_cells.sum()
    if strategy == "uncertainty_calibration":
        N = int(round(W))
        blocks = min(bins, N)
        if blocks < 2:  # one block: with B > 1, one edge at the highest score (padded later)
            return 1.0, np.array([N - 0.5] if bins > 1 and N else [])
        i = np.arange(1, blocks)
        return 1.0, i * (N // blocks) + np.minimum(i, N % blocks) - 0.5
    unit = 1.0 if integer_weights or W <= 0 else rows / W
    total = W * unit
    return unit, (total - 1) * np.linspace(0.0, 1.0, bins + 1)[1:-1]


def _edge_pieces(part: pd.DataFrame, bins: int, integer_weights: bool = True,
                 strategy: str = "quantile") -> list:
    """Row indices of the cells holding the order statistics at positions ⌊h⌋ and ⌊h⌋+1 of
    every edge (and any zero-weight cells between them)."""
    unit, positions = _positions(part, bins, integer_weights, strategy)
    return _edge_rows(part["W"].to_numpy(float), unit, positions).tolist()


def _edge_rows(W_cells: np.ndarray, unit: float, positions: np.ndarray) -> np.ndarray:
    """:func:`_edge_pieces` of a group's cell weights (in cell order), sorted row indices."""
    C = np.cumsum(W_cells) * unit
    if not len(C) or C[-1] <= 0 or not len(positions):
        return np.zeros(0, dtype=np.int64)
    t0 = np.floor(positions)
    a = np.searchsorted(C, t0, side="right")
    b = np.minimum(np.searchsorted(C, t0 + 1, side="right"), len(C) - 1)
    out = np.zeros(len(C) + 1, dtype=np.int64)  # the union of the runs a..b
    np.add.at(out, a, 1)
    np.add.at(out, b + 1, -1)
    return np.flatnonzero(np.cumsum(out)[:-1] > 0)


def _edges_of(W_cells: np.ndarray, unit: float, positions: np.ndarray, level_cell: np.ndarray,
              level_W: np.ndarray, value: np.ndarray, strategy: str, bins: int) -> np.ndarray:
    """The B − 1 interior edges of a group from the levels of its wanted cells, in score order:
    ``level_cell`` the row of each level's cell among the group's cells (in cell order), its
    weight and score."""
    before = (np.cumsum(W_cells) - W_cells)[level_cell]
    # the weight before each level inside its cell, summed in score order cell by cell (as a
    # grouped cumulative sum adds)
    within = np.empty(len(level_W))
    runs = np.flatnonzero(np.diff(level_cell, prepend=-1)) if len(level_W) else []
    for s, e in zip(runs, [*runs[1:], len(level_W)]):
        within[s:e] = np.cumsum(level_W[s:e])
    C = (before + within) * unit
    edges = []
    last = len(C) - 1
    for h in positions:
        t0 = np.floor(h)
        lo = value[min(np.searchsorted(C, t0, side="right"), last)]
        hi = value[min(np.searchsorted(C, t0 + 1, side="right"), last)]
        frac = h - t0
        if strategy == "uncertainty_calibration":
            edges.append((lo + hi) / 2.0)  # get_equal_bins' midpoint, rounded as it rounds it
        else:  # numpy's _lerp, so edges equal np.quantile to the last bit
            edges.append(hi - (hi - lo) * (1 - frac) if frac >= 0.5 else lo + (hi - lo) * frac)
    if len(edges) < bins - 1:  # fewer rows than bins: the missing edges close the last bin
        edges += [value[-1]] * (bins - 1 - len(edges))
    return np.array(edges)


# -- the levels in score slabs: bounded memory for the metrics of every distinct score --------


def level_slabs(src: Source, rows: int | None = None) -> "LevelSlabs":
    """The levels summary of ``src`` (as :func:`sqlcal.metrics.level_sets`: per group and
    distinct score ``p``, ``n``, ``W``, ``swy``, ``swp``), in slabs of increasing score: an
    iterable, read again each time it is iterated.

    A source of at most ``rows`` rows (default: what the budget's ``bytes`` holds at
    :data:`LEVEL_ROW_BYTES` a level, :func:`slab_rows`) gives its levels in one piece (cached,
    shared with every metric that reads them). A larger one is read one score range at a time:
    each slab holds every group's levels with lo <= p < hi, in no particular order
    (:meth:`sqlcal.metrics.GroupIndex.levels` sorts its arrays), the ranges following each
    other from 0 to 1, each holding at most ``rows`` rows (a single score
    holding more is a slab of its own). A slab is one query, not cached, so neither the
    engine's hash table nor the frame fetched grows with the table: the metric folds each slab
    into its running state and drops it. The ranges come from the score-cell histogram
    (:func:`slab_ranges`).
    """
    return LevelSlabs(src, slab_rows() if rows is None else int(rows))


def slab_rows() -> int:
    """The most rows of one slab of :func:`level_slabs`: the budget's ``bytes``
    (:data:`sqlcal.options.BUDGET`) at :data:`LEVEL_ROW_BYTES` a level."""
    return max(int(options.BUDGET.bytes // LEVEL_ROW_BYTES), 1)


class LevelSlabs:
    """The slabs of :func:`level_slabs` (iterable more than once: each pass reads them again)."""

    def __init__(self, src: Source, rows: int):
        self.src, self.rows = src, rows
        self.ranges: list[tuple[float, float]] | None = None

    def read_first(self) -> "LevelSlabs":
        """Run the first read (the score-cell histogram, or the levels when they are in memory
        or few): it validates the source, so its labels and weights are known."""
        self._whole()
        return self

    def totals(self) -> pd.DataFrame | None:
        """Per group ``n``, ``W``, ``swy`` of the rows, from the score-cell histogram, when the
        levels come in slabs (so a finish needs no pass of its own for them); else None."""
        if self._whole():
            return None
        by = list(self.src.by)
        cells = cells_summary(self.src, ("sums",))
        if not by:
            return pd.DataFrame({c: [cells[c].sum()] for c in ("n", "W", "swy")})
        return cells.groupby(by, dropna=False, sort=False, as_index=False)[
            ["n", "W", "swy"]].sum()

    def _whole(self) -> bool:
        """Whether the levels come in one piece (in memory already, or few)."""
        src = self.src
        if (src.local_levels is not None or src.served is not None
                or planner.lookup(src, declared.levels("sums")) is not None):
            return True
        histogram = cells_summary(src, ("sums",))  # the first scan validates the source
        if float(histogram["n"].sum()) <= self.rows:
            return True
        if self.ranges is None:
            self.ranges = slab_ranges(src, histogram, self.rows)
        return False

    def __iter__(self) -> Iterator[pd.DataFrame]:
        from sqlcal.metrics import level_sets

        src = self.src
        if self._whole():
            yield level_sets(src)
            return
        for lo, hi in self.ranges:
            yield planner.scan(src, declared.levels_slab(lo, hi))


def slab_ranges(src: Source, histogram: pd.DataFrame, rows: int) -> list[tuple[float, float]]:
    """Consecutive score ranges [lo, hi) covering [0, 1] (the last one closed), each holding at
    most ``rows`` rows of all groups together: runs of cells of the histogram (:data:`CELLS`
    per group), a cell holding more split by finer histograms of its rows (a zoom,
    :func:`sqlcal.query.declared.cells_within`) until its pieces fit or hold one score each.
    Every end is an exact binary fraction."""
    counts = np.bincount(histogram["cell"].to_numpy(np.int64),
                         weights=histogram["n"].to_numpy(float), minlength=CELLS)
    # pieces (lo, hi, rows) as exact fractions of their grid's cells
    pieces = [(c / CELLS, (c + 1) / CELLS, float(counts[c]), False) for c in range(CELLS)]
    grid = CELLS
    keys = _group_keys(histogram, list(src.by))
    while any(n > rows and not single for _, _, n, single in pieces) and grid * ZOOM <= 2**50:
        big = [(lo, hi) for lo, hi, n, single in pieces if n > rows and not single]
        finer = grid * ZOOM
        sub = planner.fetch(src, declared.cells_within(
            finer, [(key, lo, hi) for key in keys for lo, hi in big], "sums"))
        cell = sub["cell"].to_numpy(np.int64)
        ids, at = np.unique(cell, return_inverse=True)
        n = np.bincount(at, weights=sub["n"].to_numpy(float))
        p_min = np.full(len(ids), np.inf)
        p_max = np.full(len(ids), -np.inf)
        np.minimum.at(p_min, at, sub["p_min"].to_numpy(float))
        np.maximum.at(p_max, at, sub["p_max"].to_numpy(float))
        out = []
        for lo, hi, count, single in pieces:
            if count <= rows or single:
                out.append((lo, hi, count, single))
                continue
            a, b = np.searchsorted(ids, [int(lo * finer), int(hi * finer)])
            out += [(c / finer, (c + 1) / finer, float(m), bool(x == y))
                    for c, m, x, y in zip(ids[a:b].tolist(), n[a:b], p_min[a:b], p_max[a:b])]
        pieces, grid = out, finer
    slabs: list[list[float]] = []
    held = 0.0
    for lo, hi, count, _ in pieces:
        if not count:
            continue
        if slabs and held + count <= rows:
            slabs[-1][1] = hi
            held += count
        else:
            slabs.append([lo, hi])
            held = count
    if not slabs:
        return [(0.0, 1.0)]
    # the ranges cover [0, 1]: empty stretches join the slab after them (the last, the one before)
    for i in range(len(slabs) - 1):
        slabs[i + 1][0] = slabs[i][1]
    slabs[0][0], slabs[-1][1] = 0.0, 1.0
    return [(lo, hi) for lo, hi in slabs]


def _group_keys(frame: pd.DataFrame, by: list) -> list[tuple]:
    """The distinct group key tuples of a summary frame (None for NULL)."""
    if not by:
        return [()]
    keys = frame[by].drop_duplicates()
    return [key_tuple(dict(zip(by, row))) for row in keys.itertuples(index=False)]
