"""The summaries, declared once: what each is keyed by, what it carries, how two of them merge.

A :class:`Summary` names one reduction of the normalised rows (group keys, ``p``, ``y``, ``w``):
its kind, the parameters that shape it (number of bins, convention, cells) and the optional column
sets (``parts``) a metric asks for. The Ibis reduction of each kind lives in
:mod:`sqlcal.query.reductions`; this module holds no query code, so metric modules can name what
they need without importing Ibis.

**Merge rules.** Every column of a first-stage summary is a sum, a minimum or a maximum over the
rows behind its key, so the summaries of two disjoint sets of rows combine exactly: concatenate,
then group by the keys and add (``n``, ``W``, Σwy, Σwp, the residual and variance sums, the log-loss
sums, the validation counts), take the least (``p_min``, ``chk_*_min``) or the greatest (``p_max``,
``chk_*_max``). The levels summary merges the same way (union of levels, sums added). A column with
no rule (a windowed running-sum extreme, an equal-mass edge) cannot merge: :func:`merge` says so,
and the summary has to be recomputed from mergeable ones (levels or cells).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np
import pandas as pd

#: kinds whose summaries one GROUP BY over the rows can produce together (see the planner)
FUSABLE = ("totals", "uniform", "cells", "logit_cells")
#: kind -> the key column a summary adds after the group keys
KEY_COLUMN = {"totals": None, "uniform": "bin", "cells": "cell", "levels": "p", "logit_grid": "k"}
#: follow-ups that read the rows inside score ranges only; their last param is the ranges
RANGED = {"cells_within": "cell", "levels_within": "p", "extremes_within": "cell"}
KEY_COLUMN.update(RANGED)
#: the recalibration fits' summaries (sqlcal.recalibration.fits): where each label lies, the Newton
#: terms of a logistic fit at given coefficients, the sandwich's middle, the lowest running residual
#: inside score ranges (isotonic's KKT checks), and grouped PAV passes run in the engine
KEY_COLUMN.update({"label_ranges": None, "logistic_terms": None, "logistic_meat": None,
                   "prefix_min": "lo", "pav_count": None, "pav_blocks": "lo"})
#: the checks of a multiclass table as given (sqlcal.multiclass), one row each
KEY_COLUMN.update({"multiclass_quick": None, "multiclass_counts": None,
                   "multiclass_unmatched": None})
#: the terms of a temperature-scaling fit of a multiclass table (sqlcal.recalibration.temperature),
#: one row per group of the table's keys
KEY_COLUMN["temperature_terms"] = None
#: the logistic terms clip |exponents| here (PostgreSQL's exp() raises on overflow, near 709)
EXP_LIMIT = 700.0
#: a σ this close to 0 or 1 on a score holding the other label marks separation (``sep``)
SATURATED = 1e-12
#: smooth ECE's score histogram split at the nodes of relplot's grids (key ``cell``, then one
#: interval column ``b_<h>`` per grid h), and the same over the cells straddling a node only
KEY_COLUMN.update({"smooth_cells": "cell", "smooth_split": "cell"})
#: equal-width bins in log-odds (sqlcal.metrics.binned, strategy="logit"): per group and bin
#: between the edges of :func:`sqlcal.inputs.grids.logit_edges`
KEY_COLUMN["logit_bins"] = "bin"
#: the decision rules' summary (sqlcal.metrics.decision.expected_cost): the score axis cut at the
#: ends of the rules' intervals, one row per group and piece between two cuts
KEY_COLUMN["intervals"] = "interval"
#: the equal-mass search's split of crowded score cells by log-odds (sqlcal.metrics.cells): per
#: group and log-odds cell ``lcell``
KEY_COLUMN["logit_cells_within"] = "lcell"
#: the log-odds histogram of every row, a first-stage summary (fused into the first scan): where
#: the calibration by score decile starts its equal-mass search (scores crowd near 0 in a click log)
KEY_COLUMN["logit_cells"] = "lcell"
#: a paired comparison of two scores of the same rows (sqlcal.compare): per group and pair of
#: equal-width bins, one of each score, ``pair`` = bin(p)·(B + 1) + bin(q)
KEY_COLUMN["paired_bins"] = "pair"
#: the levels of given (group, 2^k cell) pairs only, each group its own cells (a join)
KEY_COLUMN["levels_in_cells"] = "p"
#: the levels of every group inside one score range: a slab of the levels read in score order
#: by the metrics whose levels do not fit in memory at once (sqlcal.metrics.cells.level_slabs)
KEY_COLUMN["levels_slab"] = "p"
#: the same rows per group and log-odds cell ``lcell`` (a finer split of some pieces)
KEY_COLUMN["logit_cells_in_cells"] = "lcell"

#: segment discovery (sqlcal.segments): sums per fold, group and feature-value conjunction,
#: and the terms of a per-segment logit shift per fold, group and membership pattern
KEY_COLUMN.update({"segment_sums": None, "segment_terms": "pattern",
                   "segment_overlaps": None})

_SUMS = frozenset({
    "n", "W", "ny", "swy", "swp", "swpp", "swyp", "swyy", "sw2", "total", "positive", "negative",
    "var", "var2", "sw_sq_resid", "sw_spieg", "sw_spieg_var", "sw2_spieg_var", "sw_logloss",
    "n_infinite_logloss", "chk_p_count", "chk_y_count", "chk_w_count", "chk_y_soft", "chk_w_frac",
    "m_lo", "m_hi", "y_lo", "y_hi", "v_lo", "v_hi", "vy_lo", "vy_hi",
})
_SUMS |= {"sw2y"}  # Σw²y, with which the levels give a logistic fit's sandwich variance
_SUMS |= {"sw2p", "sw2pp", "sw_logloss_sq", "swy_logloss"}  # low base rates' variances
#: the totals parts that give Σwℓ² (with the variance weight: Σvℓ, Σvℓ²): ``logloss_sq``, what
#: the log loss's interval reads, and ``logloss_var``, which adds Σwyℓ (Σvyℓ) for the
#: normalized entropy's; one aggregate less in the default report's first scan
LOGLOSS_SQ = frozenset({"logloss_sq", "logloss_var"})
# the variance weight's sums (sqlcal.query.reductions.variance_weights): the normalized entropy's,
# and a sampling design's label-free part Σv₀ and own part Σ(v − v₀)(y − p)²
_SUMS |= {"sw2_logloss", "sw2_logloss_sq", "sw2y_logloss", "sw2_0", "sw2_design"}
_SUMS |= {"swr", "swd", "swyd", "swrd"}  # smooth_cells: the residual and the offsets' moments
# the intervals' second moments under the variance weight, and Σw(y − p)⁴ (sqlcal.metrics.intervals)
_SUMS |= {"sv_p", "sv_yy", "sv_yp", "sv_pp", "sw_r4", "sv_r4"}
# a paired comparison's sums (sqlcal.query.reductions.paired_bins)
_SUMS |= {f"{a}{m}" for a in ("sw", "sv") for m in (
    "", "y", "p", "q", "yy", "yp", "yq", "pp", "pq", "qq", "d", "dd", "l", "m", "e", "ee")}
_SUMS |= {"n_inf"}
# LS-ECE's interval: per logit cell, Σv·a·b for the row's shares a, b ∈ {1 − f, f} of its two
# nodes, times 1, y and y² (``q`` under the weight, ``qv`` under the variance weight)
_SUMS |= {f"{pre}{m}_{ab}" for pre in ("q", "qv") for m in ("", "y", "yy")
          for ab in ("ll", "lh", "hh")}
#: summary columns that merge over disjoint sets of rows by MIN, and by MAX; every other sum
#: column merges by SUM (:func:`rule` reads these sets)
MERGED_BY_MIN = frozenset({"p_min", "chk_y_min", "chk_w_min", "p_min_pos"})
MERGED_BY_MAX = frozenset({"p_max", "chk_y_max", "chk_w_max", "p_max_neg"})
_MINIMA, _MAXIMA = MERGED_BY_MIN, MERGED_BY_MAX


@dataclass(frozen=True)
class Summary:
    """One summary a metric needs.

    Parameters
    ----------
    kind : {"totals", "uniform", "cells", "levels", "logit_grid"}
        ``totals``: one row per group. ``uniform``: per group and equal-width bin. ``cells``: per
        group and cell of the 2^k score grid. ``levels``: per group and distinct score.
        ``logit_grid``: per group and node of the logit grid.
    params : tuple
        ``uniform``: ``(bins, convention)``; ``cells``: ``(cells,)``; ``logit_grid``:
        ``(step, clip)``; otherwise ``()``.
    parts : frozenset of str
        Optional column sets: ``sums``, ``sw2``, ``moments``, ``soft``, ``residuals``,
        ``spread``, ``r4`` (all kinds); ``logloss``, ``spiegelhalter`` (totals).

    Examples
    --------
    >>> Summary("uniform", (15, "sqlcal"), frozenset({"sums"})).key
    ('uniform', 15, 'sqlcal')
    >>> Summary("cells", (1024,)).key_column
    'cell'
    """

    kind: str
    params: tuple = ()
    parts: frozenset = field(default_factory=frozenset)

    def __post_init__(self):
        if self.kind not in KEY_COLUMN:
            raise ValueError(f"unknown summary kind {self.kind!r}; expected one of "
                             f"{sorted(KEY_COLUMN)}")
        object.__setattr__(self, "parts", frozenset(self.parts))

    @property
    def key(self) -> tuple:
        """The summary's identity without its parts (how a source caches it)."""
        return (self.kind, *self.params)

    @property
    def key_column(self) -> str | None:
        return KEY_COLUMN[self.kind]

    def serves(self, other: "Summary") -> bool:
        """Whether this summary holds every column ``other`` asks for."""
        return self.key == other.key and other.parts <= self.parts

    @property
    def name(self) -> str:
        """A short file-friendly name: ``uniform_bins_15``, ``score_cells_1024``, ``totals``."""
        if self.kind == "uniform":
            bins, convention = self.params
            return f"uniform_bins_{bins}" + ("" if convention == "sqlcal" else f"_{convention}")
        if self.kind == "cells":
            return f"score_cells_{self.params[0]}"
        if self.kind == "logit_grid":
            return "logit_grid"
        if self.kind == "logit_cells":  # logit_cells_32
            return f"logit_cells_{self.params[0]}"
        if self.kind == "logit_bins":  # logit_bins_15 (the range is data-dependent)
            return f"logit_bins_{self.params[0]}"
        if self.kind in RANGED or self.kind in ("logit_cells_within", "levels_in_cells",
                                                 "logit_cells_in_cells"):  # named by
            # their grids, not their (data-dependent) ranges: follow-ups
            return self.kind + "".join(f"_{p}" for p in self.params[:-1])
        if self.kind in ("smooth_cells", "smooth_split"):  # smooth_cells_16384_1000
            cells, grids = self.params
            return f"{self.kind}_{cells}" + "".join(f"_{h}" for h in grids)
        return self.kind


def totals(*parts: str) -> Summary:
    """The totals summary with the given parts (``sums`` always)."""
    return Summary("totals", (), frozenset({"sums", *parts}))


def uniform(bins: int, convention: str = "sqlcal", *parts: str) -> Summary:
    """The equal-width bins summary."""
    return Summary("uniform", (int(bins), convention), frozenset(parts))


def cells(cells: int, *parts: str) -> Summary:
    """The score-cell histogram on a 2^k grid."""
    return Summary("cells", (int(cells),), frozenset(parts))


def levels(*parts: str) -> Summary:
    """The levels summary: per group and distinct score (``sums`` always)."""
    return Summary("levels", (), frozenset({"sums", *parts}))


def logit_grid(step: float, clip: float, *parts: str) -> Summary:
    """LS-ECE's linear-binned histogram on the logit grid of spacing ``step``, scores clipped
    to [clip, 1 − clip] (key ``k``, the node below each row's logit); ``parts``: ``"moments"``
    (the second moments of the row's split between its two nodes, for the interval; under the
    variance weight with ``"spread"``, and of y² with ``"soft"``).

    Examples
    --------
    >>> logit_grid(0.005, 1e-6).key
    ('logit_grid', 0.005, 1e-06)
    """
    return Summary("logit_grid", (float(step), float(clip)), frozenset(parts))


def logit_bins(bins: int, lo: float, hi: float, *parts: str) -> Summary:
    """Bins of equal width in log-odds between scores ``lo`` and ``hi``
    (:func:`sqlcal.inputs.grids.logit_edges`): per group and ``bin`` = the number of interior edges
    below the score (right-closed; scores below ``lo`` in the first bin, above ``hi`` in the
    last), with the sums of :func:`sqlcal.query.reductions._sums` for ``parts``.

    Examples
    --------
    >>> s = logit_bins(10, 1e-4, 0.05, "sums")
    >>> s.key, s.key_column, s.name
    (('logit_bins', 10, 0.0001, 0.05), 'bin', 'logit_bins_10')
    """
    return Summary("logit_bins", (int(bins), float(lo), float(hi)), frozenset(parts))


def smooth_cells(cells: int, grids: Iterable[int]) -> Summary:
    """Smooth ECE's score histogram: per group, score cell of the 2^k grid of ``cells`` and
    interval ``b_<h>`` = FLOOR(p·h) of each of relplot's grids h in ``grids`` (the cells split at
    the nodes i/h), with Σw, Σwy, Σw(y − p) and each times the offset d = p − cell/2^k.

    Examples
    --------
    >>> s = smooth_cells(2**14, [1000])
    >>> s.key, s.name
    (('smooth_cells', 16384, (1000,)), 'smooth_cells_16384_1000')
    """
    return Summary("smooth_cells", (int(cells), tuple(sorted({int(h) for h in grids}))))


def smooth_split(cells: int, grids: Iterable[int]) -> Summary:
    """:func:`smooth_cells` over the rows of the cells holding a node of some grid in ``grids``
    strictly inside (cell c holds a node i/h when (c·h mod 2^k) > 2^k − h; every cell does when
    h ≥ 2^k): the follow-up that splits them for grids a bandwidth search reaches later.

    Examples
    --------
    >>> smooth_split(2**14, [5120, 2048]).params
    (16384, (2048, 5120))
    """
    return Summary("smooth_split", (int(cells), tuple(sorted({int(h) for h in grids}))))


def intervals(cuts, *parts: str) -> Summary:
    """The score axis cut at ``cuts``: per group and piece ``interval`` = the number of cuts
    below the score (piece k holds the scores in (cuts[k − 1], cuts[k]], a score equal to a cut
    in the piece it closes), with the sums of :func:`sqlcal.query.reductions._sums` for ``parts``.
    Every interval (l, r] whose ends are cuts is a run of pieces, so one GROUP BY serves any
    number of interval decision rules. ``cuts``: doubles, kept sorted and distinct.

    Examples
    --------
    >>> intervals([0.5, 0.25, 0.5], "sums").params
    ((0.25, 0.5),)
    >>> intervals([0.25]).key_column
    'interval'
    """
    return Summary("intervals", (tuple(sorted({float(c) for c in cuts})),), frozenset(parts))


def paired_bins(bins: int, convention: str = "sqlcal") -> Summary:
    """The paired comparison's summary of a source with a baseline score ``q``: per group and
    pair of equal-width bins (``pair`` = bin(p)·(B + 1) + bin(q)), the sums of
    :func:`sqlcal.query.reductions.paired_bins`.

    Examples
    --------
    >>> s = paired_bins(15)
    >>> s.key, s.key_column
    (('paired_bins', 15, 'sqlcal'), 'pair')
    """
    return Summary("paired_bins", (int(bins), convention))


def label_ranges() -> Summary:
    """Per group, where each label lies: ``pos_mass`` = Σwy, ``neg_mass`` = Σw(1 − y) and the
    least and greatest score carrying each (``pos_min``, ``pos_max``, ``neg_min``, ``neg_max``),
    besides ``n``, ``p_min`` and ``p_max``.

    Examples
    --------
    >>> label_ranges().key
    ('label_ranges',)
    """
    return Summary("label_ranges")


def _scalar(v):
    """A key value as a plain Python scalar (hashable, and an exact literal)."""
    return v.item() if isinstance(v, np.generic) else v


def _coefficients(rows) -> tuple:
    return tuple((tuple(_scalar(v) for v in key), *(float(c) for c in values))
                 for key, *values in rows)


def logistic_terms(feature: str, clip: float, offset: bool, groups) -> Summary:
    """The Newton terms of a logistic fit σ(a + b·x) at given coefficients, per group: the
    score ``r`` = Σw(t − μ), ``rx``, the information ``h`` = Σwμ(1 − μ), ``hx``, ``hxx``, the
    log-likelihood ``ll`` and ``sep`` (the target mass on the wrong side of a saturated μ), with
    targets t = y·hi + (1 − y)·lo.

    Parameters
    ----------
    feature : {"logit", "score"}
        x = logit(p) with p clipped to [clip, 1 − clip], or x = p.
    clip : float
        The clip of the logit feature.
    offset : bool
        Whether b is fixed at 1 (then only ``r`` and ``h`` are read).
    groups : iterable of (key tuple, a, b, hi, lo)
        The coefficients and targets of each group to evaluate (other groups are left out).

    Examples
    --------
    >>> s = logistic_terms("logit", 1e-12, False, [((), 0.0, 1.0, 1.0, 0.0)])
    >>> s.params
    ('logit', 1e-12, False, (((), 0.0, 1.0, 1.0, 0.0),))
    """
    return Summary("logistic_terms", (feature, float(clip), bool(offset), _coefficients(groups)))


def logistic_meat(feature: str, clip: float, offset: bool, groups) -> Summary:
    """The middle of the sandwich covariance of a logistic fit, per group: ``m00`` =
    Σw²(y − μ)², ``m01`` = Σw²(y − μ)²x, ``m11`` = Σw²(y − μ)²x²; ``groups``: (key tuple, a, b).
    A function of the levels when they carry Σw²y per score (part ``"sw2y"``, as the exported
    levels do).

    Examples
    --------
    >>> logistic_meat("logit", 1e-12, True, [(("a",), 0.5, 1.0)]).params[3]
    ((('a',), 0.5, 1.0),)
    """
    return Summary("logistic_meat", (feature, float(clip), bool(offset), _coefficients(groups)))


def prefix_min(cells: int, ranges) -> Summary:
    """Per group and score range, the lowest running sum of w(y − v) over the range's scores in
    increasing order (ties one unit), from the range's start: ``s_min``. Each range is a cell
    ``[lo, hi)`` of the 2^k grid of ``cells`` (the last one holds p = 1), given as
    ``(key tuple, lo, hi, v)``. Isotonic regression's KKT check inside a pooled cell.

    Examples
    --------
    >>> prefix_min(4, [((), 0.25, 0.5, 0.3)]).params
    (4, (((), 0.25, 0.5, 0.3),))
    """
    return Summary("prefix_min", (int(cells), _coefficients(ranges)))


def pav_count(passes: int, integer: bool) -> Summary:
    """The number of blocks per group (``blocks``) after ``passes`` grouped PAV passes on the
    levels (``integer``: labels summed as integers, exact for unweighted 0/1 labels).

    Examples
    --------
    >>> pav_count(2, True).key
    ('pav_count', 2, True)
    """
    return Summary("pav_count", (int(passes), bool(integer)))


def pav_blocks(passes: int, integer: bool) -> Summary:
    """The blocks per group (``lo``, ``hi``, ``n``, ``W``, ``Y`` = Σwy) after ``passes``
    grouped PAV passes on the levels: each pass merges every maximal run of adjacent blocks
    whose means do not increase.

    Examples
    --------
    >>> pav_blocks(0, False).key_column
    'lo'
    """
    return Summary("pav_blocks", (int(passes), bool(integer)))


def multiclass_check(kind: str, layout: tuple, sum_tolerance: float) -> Summary:
    """A check of a multiclass table (``kind``: ``multiclass_quick``, ``multiclass_counts`` or
    ``multiclass_unmatched``), read from the table as given, not from normalised rows.
    ``layout``: ``("wide", keys, probs, label, weight, values)`` or ``("long", keys, example,
    cls, prob, label, weight)``, with tuples for the lists.

    Examples
    --------
    >>> s = multiclass_check("multiclass_quick", ("wide", (), ("a", "b"), "y", None,
    ...                                           ("a", "b")), 1e-6)
    >>> s.key_column is None, s.params[1]
    (True, 1e-06)
    """
    return Summary(kind, (layout, float(sum_tolerance)))


def temperature_terms(layout: tuple, logits: bool, clip: float | None, groups) -> Summary:
    """The terms of a temperature-scaling fit at given inverse temperatures β = 1/T, per group
    of the layout's keys, read from a multiclass table as given: ``n``, ``W``, ``nll`` =
    Σw(log Σₖ e^{β zₖ} − β z_y), its derivative ``g`` = Σw(E_q z − z_y) and second derivative
    ``h`` = Σw Var_q z in β (q = softmax(β z)), ``g0`` (g at β = 0), ``gap`` = Σw(max z − z_y)
    (g as β → ∞), and ``zeros`` (wide: ``zeros<i>`` per column) counting probabilities of 0.
    z is the logit (``logits``) or log max(p, clip) (log p without a clip). ``groups``: (key
    tuple, β); other groups are left out; none listed: every group at β = 1. ``layout`` as
    for :func:`multiclass_check`.

    Examples
    --------
    >>> s = temperature_terms(("wide", (), ("a", "b"), "y", None, ("a", "b")), False, None,
    ...                       [((), 1.0)])
    >>> s.key_column is None, s.params[3]
    (True, (((), 1.0),))
    """
    return Summary("temperature_terms", (layout, bool(logits),
                                         None if clip is None else float(clip),
                                         _coefficients(groups)))


def score_ranges(ranges: Iterable[tuple]) -> tuple:
    """Score ranges ``(group key values, lo, hi)`` in one canonical form: key values as plain
    Python values (None for NULL), groups sorted, each group's ranges sorted with overlapping
    or adjacent ones merged. A range holds lo <= p < hi, and p = 1 too when hi = 1 (the last
    cell of a 2^k grid holds p = 1); lo and hi are exact doubles (cell c of 2^k cells is
    [c/2^k, (c + 1)/2^k)).

    Examples
    --------
    >>> score_ranges([((1,), 0.5, 0.75), ((1,), 0.25, 0.5), ((None,), 0.0, 1.0)])
    (((1,), 0.25, 0.75), ((None,), 0.0, 1.0))
    """
    per_group: dict[tuple, list] = {}
    for key, lo, hi in ranges:
        key = tuple(None if _is_null(v) else (v.item() if hasattr(v, "item") else v)
                    for v in key)
        per_group.setdefault(key, []).append((float(lo), float(hi)))
    out = []
    for key in sorted(per_group, key=_null_last):
        merged: list[list[float]] = []
        for lo, hi in sorted(per_group[key]):
            if merged and lo <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        out += [(key, lo, hi) for lo, hi in merged]
    return tuple(out)


def cells_within(cells: int, ranges: Iterable[tuple], *parts: str) -> Summary:
    """A finer score histogram (2^k ``cells``) of the rows inside ``ranges`` only: a zoom. The
    ranges end on the grid (each cell wholly inside or outside them)."""
    return Summary("cells_within", (int(cells), _on_grid(cells, ranges)), frozenset(parts))


def logit_cells(scale: int, *parts: str) -> Summary:
    """The log-odds histogram of every row: per group and log-odds cell ``lcell`` =
    FLOOR(ln(p/(1 − p))·``scale``) (:func:`sqlcal.inputs.grids.logit_cell`), with the sums of
    :func:`sqlcal.query.reductions._sums` for ``parts``. A first-stage summary: one GROUP BY with
    the totals, bins and score cells; ``scale`` a power of two, so a finer histogram sums up to a
    coarser one (lcell // 2^j).

    >>> logit_cells(32, "sums").name
    'logit_cells_32'
    """
    scale = int(scale)
    if scale < 1 or scale & (scale - 1):
        raise ValueError(f"the log-odds histogram's scale must be a power of two, not {scale}")
    return Summary("logit_cells", (scale,), frozenset(parts))


def logit_cells_within(scale: int, cells: int, ranges: Iterable[tuple], *parts: str) -> Summary:
    """The rows inside ``ranges`` (ending on the grid of 2^k ``cells``) per group and log-odds
    cell ``lcell`` = FLOOR(ln(p/(1 − p))·``scale``) (:func:`sqlcal.inputs.grids.logit_cell`): score
    cells split where scores crowd.

    >>> logit_cells_within(64, 1024, [((), 0.0, 1 / 1024)]).name
    'logit_cells_within_64_1024'
    """
    return Summary("logit_cells_within", (int(scale), int(cells), _on_grid(cells, ranges)),
                   frozenset(parts))


def levels_in_cells(cells: int, pairs: Iterable[tuple], *parts: str) -> Summary:
    """The levels summary of the rows in the given ``(group key values, cell)`` pairs of the
    2^k grid ``cells`` only, each group reading its own cells (``sums`` always).

    >>> levels_in_cells(1024, [((1,), 3), ((0,), 5), ((1,), 3)]).params
    (1024, (((0,), 5), ((1,), 3)))
    """
    pairs = sorted({(tuple(k), int(c)) for k, c in pairs}, key=lambda kc: (_null_last(kc[0]),
                                                                          kc[1]))
    return Summary("levels_in_cells", (int(cells), tuple(pairs)), frozenset({"sums", *parts}))


def logit_cells_in_cells(scale: int, cells: int, pairs: Iterable[tuple], *parts: str
                         ) -> Summary:
    """The rows of the given ``(group key values, cell)`` pairs of the 2^k grid ``cells`` per
    group and log-odds cell ``lcell`` = FLOOR(ln(p/(1 − p))·``scale``): a finer split of a
    few pieces, each group reading its own cells (see :func:`levels_in_cells`)."""
    return Summary("logit_cells_in_cells",
                   (int(scale), *levels_in_cells(cells, pairs).params), frozenset(parts))


def levels_within(ranges: Iterable[tuple], *parts: str) -> Summary:
    """The levels summary of the rows inside ``ranges`` only (``sums`` always)."""
    return Summary("levels_within", (score_ranges(ranges),), frozenset({"sums", *parts}))


def levels_slab(lo: float, hi: float, *parts: str) -> Summary:
    """The levels summary of every group's rows with lo <= p < hi (p <= 1 too when hi = 1):
    one slab of the levels in score order (``sums`` always). ``lo`` and ``hi`` are exact
    binary fractions (ends of 2^k cells).

    >>> levels_slab(0.25, 0.5).key
    ('levels_slab', 0.25, 0.5)
    """
    return Summary("levels_slab", (float(lo), float(hi)), frozenset({"sums", *parts}))


def extremes_within(cells: int, ranges: Iterable[tuple]) -> Summary:
    """Per group and cell (of 2^k ``cells``) inside ``ranges``: the extremes of the running
    residual sum from the cell's start, ties one unit (a window over those rows only)."""
    return Summary("extremes_within", (int(cells), _on_grid(cells, ranges)))


def _on_grid(cells: int, ranges: Iterable[tuple]) -> tuple:
    ranges = score_ranges(ranges)
    off = [(lo, hi) for _, lo, hi in ranges
           if not (float(lo * cells).is_integer() and float(hi * cells).is_integer())]
    if off:
        raise ValueError(f"score ranges {off[:3]} do not end on the grid of {cells} cells")
    return ranges


def _is_null(v) -> bool:
    return v is None or (isinstance(v, float) and v != v) or v is pd.NaT or v is pd.NA


def _null_last(key: tuple) -> tuple:
    return tuple((v is None, "" if v is None else type(v).__name__, v) for v in key)


def union(needs: Iterable[Summary]) -> list[Summary]:
    """One summary per key, with the union of the parts asked for, in first-asked order."""
    merged: dict[tuple, Summary] = {}
    for s in needs:
        have = merged.get(s.key)
        merged[s.key] = s if have is None else Summary(s.kind, s.params, have.parts | s.parts)
    return list(merged.values())


def rule(column: str) -> str | None:
    """How a summary column merges over disjoint sets of rows: ``"sum"``, ``"min"``, ``"max"``,
    or None (it cannot: recompute it from a mergeable summary).

    Examples
    --------
    >>> rule("swy"), rule("p_min"), rule("spieg_var"), rule("cutoff")
    ('sum', 'min', 'sum', None)
    """
    if column in _SUMS:
        return "sum"
    if column in _MINIMA:
        return "min"
    if column in _MAXIMA:
        return "max"
    # the summary store's sums (sql/store_*.sql returns them per day): their declared rule
    return next((s.merge for s in STORE_SUMS if s.name == column), None)


def merge(frames: Sequence[pd.DataFrame], keys: Sequence[str]) -> pd.DataFrame:
    """The summary of the union of disjoint row sets, from their summaries.

    Parameters
    ----------
    frames : sequence of pandas.DataFrame
        Summaries of one kind (same keys and columns), each over its own rows.
    keys : sequence of str
        The key columns: the group keys, then the summary's key column (``bin``, ``cell``,
        ``p``, ``k``) if it has one.

    Returns
    -------
    pandas.DataFrame
        One row per distinct key (NULL keys kept, sorted), every other column merged by
        :func:`rule`.

    Raises
    ------
    ValueError
        When a column has no merge rule.

    Examples
    --------
    >>> a = pd.DataFrame({"bin": [0, 1], "n": [2, 1], "swy": [1.0, 1.0], "p_max": [.4, .9]})
    >>> b = pd.DataFrame({"bin": [1], "n": [3], "swy": [2.0], "p_max": [.8]})
    >>> merge([a, b], ["bin"])
       bin  n  swy  p_max
    0    0  2  1.0    0.4
    1    1  4  3.0    0.9
    """
    keys = list(keys)
    frame = pd.concat([f for f in frames if len(f)] or list(frames[:1]), ignore_index=True)
    rules = {c: rule(c) for c in frame.columns if c not in keys}
    lost = sorted(c for c, r in rules.items() if r is None)
    if lost:
        raise ValueError(f"summary columns {lost} have no merge rule: recompute them from a "
                         "mergeable summary (levels or cells)")
    if not keys:
        row = {c: _reduce(frame[c], r) for c, r in rules.items()}
        return pd.DataFrame([row], columns=list(rules))
    out = frame.groupby(keys, dropna=False, sort=True).agg(rules).reset_index()
    return out[[*keys, *rules]]


def _reduce(values: pd.Series, how: str):
    if how == "sum":
        return values.sum()
    return values.min() if how == "min" else values.max()


def coarser_cells(cell: np.ndarray, fine: int, coarse: int) -> np.ndarray:
    """The cell of a coarser 2^k grid holding each cell of a finer one: exact, since both grids
    cut [0, 1] at multiples of powers of two (and p = 1 sits in the last cell of both)."""
    if fine % coarse:
        raise ValueError(f"a grid of {coarse} cells is not coarser than one of {fine}")
    return np.asarray(cell) // (fine // coarse)


def segment_sums(by, features, folds, bins, tuples, kept=None, candidates=None,
                 cube: str | None = None, cover: Sequence[int] = (),
                 extremes: bool = False) -> Summary:
    """Per fold, group and segment (a conjunction of feature = value), the sums of
    :func:`sqlcal.query.reductions.segment_sums`: one UNION ALL branch per column tuple in
    ``tuples`` (indices into ``features``). ``folds``: ``(holdout, a_share, split columns)``;
    ``bins``: 0, or a number of equal-width score bins added as key ``bin``; ``kept``: None (level
    1: every value) or per feature the values kept (the rest pooled as ``"__other__"``);
    ``candidates``: None or ``(tuple index, values)`` pairs, the only segments returned; ``cube``:
    None, or from level 2 on a token naming one search's reduced cube (the sums per recoded feature
    tuple, a temporary table built by one base-table scan and reused by every level of that
    search), which the branches aggregate instead of the base table; ``cover``: empty (one
    base-table branch per column tuple), or each feature's number of distinct raw values: the
    level then reads the table once per covering GROUP BY
    (:func:`sqlcal.query.reductions.segment_plan`); ``extremes``: also ``p_min_pos`` (the least
    score of a row with y = 1) and ``p_max_neg`` (the largest of a row with y = 0), from which a
    segment's largest squared error (y − p)² follows (``effect="sliceline"``).

    Examples
    --------
    >>> s = segment_sums((), ("a", "b"), (0.0, 0.5, ()), 0, ((0,), (1,)))
    >>> s.kind, s.key_column, s.name
    ('segment_sums', None, 'segment_sums')
    """
    tup = lambda xs: tuple(tuple(x) for x in xs)  # noqa: E731
    return Summary("segment_sums", (
        tuple(by), tuple(features), (float(folds[0]), float(folds[1]), tuple(folds[2])),
        int(bins), tup(tuples), None if kept is None else tup(kept),
        None if candidates is None else tuple((int(i), tuple(v)) for i, v in candidates),
        None if cube is None else str(cube), tuple(int(c) for c in cover), bool(extremes)))


def segment_overlaps(by, folds, bins, fold, nodes, within, cube: str | None = None) -> Summary:
    """On fold ``fold``, per score bin when ``bins``, the residual, information and variance
    sums of each of ``nodes`` (``(group key, predicates)``), read from the rows inside one of
    ``within`` (the same form), or from a search's reduced cube (its token ``cube``); see
    :func:`sqlcal.query.reductions.segment_overlaps`.

    Examples
    --------
    >>> s = segment_overlaps((), (0.0, 0.5, ()), 0, 1, [((), (("a", "=x", ()),))],
    ...                      [((), (("a", "=x", ()),))])
    >>> s.kind, s.key_column
    ('segment_overlaps', None)
    """
    def listed(items):
        return tuple((tuple(k), tuple((f, v, tuple(kept)) for f, v, kept in preds))
                     for k, preds in items)

    return Summary("segment_overlaps", (
        tuple(by), (float(folds[0]), float(folds[1]), tuple(folds[2])), int(bins), int(fold),
        listed(nodes), listed(within), None if cube is None else str(cube)))


def segment_terms(by, features, folds, segments, step: float, clip: float) -> Summary:
    """Per fold, group and membership ``pattern`` over ``segments`` (``(group key, predicates,
    theta)``, predicates ``(feature, value, kept)``, theta a number, an (intercept, slope)
    pair, or an isotonic map's blocks (lo, hi, value, slope): a decision list): the histogram of a
    per-segment logit-shift fit (``step`` > 0: also per logit cell) or its exact terms at the given
    thetas (``step`` = 0); see :func:`sqlcal.query.reductions.segment_terms`.

    Examples
    --------
    >>> s = segment_terms((), ("a",), (0.2, 0.5, ()), [((), (("a", "x", ()),), 0.1)], 0, 1e-6)
    >>> s.key_column
    'pattern'
    """
    def exact(theta):  # a number, an (intercept, slope) pair, or blocks (four tuples)
        if isinstance(theta, (tuple, list)):
            return tuple(exact(x) for x in theta)
        return float(theta)

    segs = tuple((tuple(k), tuple((f, v, tuple(kept)) for f, v, kept in preds), exact(theta))
                 for k, preds, theta in segments)
    return Summary("segment_terms", (tuple(by), tuple(features),
                                     (float(folds[0]), float(folds[1]), tuple(folds[2])),
                                     segs, float(step), float(clip)))


# -- the summary store's sums ------------------------------------------------------------------


@dataclass(frozen=True)
class StoredSum:
    """One column of the summary store's per-period sums (:mod:`sqlcal.monitor.schema`),
    declared once: the snapshot's query, the store's SQL in ``sql/`` and the dbt package's
    store macros are each rendered from :data:`STORE_SUMS` (by
    :func:`sqlcal.query.reductions.store_sums`), and the store's tables list these columns.

    Parameters
    ----------
    name : str
        The stored column.
    of : tuple
        The row's term, a product of named factors multiplied left to right (a nested tuple is
        a product taken first): ``w`` the weight, ``y`` the label, ``p`` the score, ``pq`` =
        p(1 − p), ``q2`` = (1 − 2p)², ``lnp`` = ln p (0 at p = 0), ``lnq`` = ln(1 − p) (0 at
        p = 1), ``h`` = clip(logit p, −4, 4)/4, ``d4`` = (1 − p)⁴ − p⁴ = (1 − 2p)(1 − 2p +
        2p²) (what a positive label adds to (y − p)⁴), ``p4`` = p⁴ as the square of p² (0
        below 2^-1022, :func:`sqlcal.query.reductions.square`); in the logit table, ``lo`` =
        1 − f and ``hi`` = f, the row's shares of its cell's lower and upper node (f its
        position in its logit cell, :func:`sqlcal.query.reductions.logit_grid`). Empty: the
        sum counts rows.
    where : tuple of (factor, value)
        A count's condition: the rows whose factors equal the values.
    merge : {"sum", "min", "max"}
        How the column of two disjoint sets of rows combines (its merge rule); ``min`` and
        ``max`` take one factor.
    tables : tuple of str
        The store tables that carry it (``totals``, ``bins``, ``cells``, ``levels``,
        ``logit``: the logit table's point-value masses are listed in
        :data:`sqlcal.monitor.schema.TABLES`, the sums after version 2 here).
    since : tuple of (table, version)
        The tables that gained it after summary version 2, and the version that added it there
        (:data:`sqlcal.monitor.schema.SUMMARY_VERSION`); the others have carried it since 2. A
        table's columns list a version's additions after the older ones, so a store table of
        an older version takes the new columns by ``ALTER TABLE ... ADD COLUMN``.

    Examples
    --------
    >>> s = StoredSum("swyp", ("w", "y", "p"))
    >>> s.label, s.type, s.added("totals")
    (True, 'float64', 2)
    """

    name: str
    of: tuple = ()
    where: tuple = ()
    merge: str = "sum"
    tables: tuple = ("totals",)
    since: tuple = ()

    def added(self, table: str) -> int:
        """The summary version that added the sum to ``table``."""
        return dict(self.since).get(table, 2)

    @property
    def label(self) -> bool:
        """Whether the sum is Σw·y·f(p) (stored per delay bucket of the positives) rather than
        label-free (over every row, labels read as 0)."""
        return "y" in factors(self.of) or any(f == "y" for f, _ in self.where)

    @property
    def type(self) -> str:
        return "int64" if not self.of else "float64"


def factors(of: tuple) -> list[str]:
    """The named factors of a stored sum's term, nested products flattened."""
    return [g for f in of for g in (factors(f) if isinstance(f, tuple) else [f])]


_ALL = ("totals", "bins", "cells", "levels")
_BINNED = ("totals", "bins", "cells")


def _in_3(*tables: str) -> tuple:
    """``since`` of a sum summary version 3 added to ``tables``."""
    return tuple((t, 3) for t in tables)


def _in_4(*tables: str) -> tuple:
    """``since`` of a sum summary version 4 added to ``tables``."""
    return tuple((t, 4) for t in tables)


_LOGIT = ("logit",)


#: the store's sums, label-free then label within each version, in the order of the store
#: tables' columns (:func:`store_sums`): adding a stored sum is one line here, with the summary
#: version that adds it (``since``; a snapshot adds the column to an older store's tables)
STORE_SUMS = (
    StoredSum("n", tables=_ALL),
    StoredSum("W", ("w",), tables=_ALL),
    StoredSum("sw2", ("w", "w"), tables=_ALL),
    StoredSum("swp", ("w", "p"), tables=_ALL),
    StoredSum("swpp", ("w", "p", "p"), tables=_ALL),
    StoredSum("sw2_pq", ("w", "w", "pq"), tables=_ALL),
    StoredSum("spieg_var", ("w", ("q2", "pq"))),
    StoredSum("sw2_spieg_var", ("w", "w", ("q2", "pq"))),
    StoredSum("sw_lnq", ("w", "lnq")),
    StoredSum("sw_lnq2", ("w", "lnq", "lnq")),
    # Σw²p, Σw²p²: the variance weight's moments under sampling weights (v = w²), per bin since 3
    StoredSum("sw2p", ("w", "w", "p"), tables=_BINNED, since=_in_3("bins", "cells")),
    StoredSum("sw2pp", ("w", "w", "p", "p"), tables=_BINNED, since=_in_3("bins", "cells")),
    StoredSum("n_p1", where=(("p", 1),)),
    StoredSum("swp_h", ("w", "h", "p")),
    StoredSum("p_min", ("p",), merge="min", tables=_BINNED),
    StoredSum("p_max", ("p",), merge="max", tables=_BINNED),
    StoredSum("n_pos", where=(("y", 1),), tables=_ALL),
    StoredSum("swy", ("w", "y"), tables=_ALL),
    StoredSum("swyp", ("w", "y", "p"), tables=_ALL),
    StoredSum("swy_lnp", ("w", "y", "lnp")),
    StoredSum("swy_lnq", ("w", "y", "lnq")),
    StoredSum("swy_lnp2", ("w", "y", "lnp", "lnp")),
    StoredSum("swy_lnq2", ("w", "y", "lnq", "lnq")),
    StoredSum("n_pos_p0", where=(("p", 0), ("y", 1))),
    StoredSum("n_pos_p1", where=(("p", 1), ("y", 1))),
    StoredSum("swy_h", ("w", "y", "h")),
    # Σw²y: a logistic fit's sandwich (levels); the variance weight's Σvy (3: every table)
    StoredSum("sw2y", ("w", "w", "y"), tables=_ALL, since=_in_3(*_BINNED)),
    # 3: what the intervals read (sqlcal.metrics.intervals). The Brier score's delta method reads
    # Σw(y − p)⁴ = Σwp⁴ + Σwy·d4 (and under sampling weights the same with w²; p⁴ the square of
    # p² as the scans take it, 0 below 2^-1022: sqlcal.query.reductions.square); the log loss's
    # under sampling weights Σw²ℓ and Σw²ℓ² (as the Σw-sums); the bootstrap of the bins and
    # CITL's delta method the variance weight's Σvyp. The cells carry the label parts an adjusted
    # window's totals read from them.
    StoredSum("swp4", ("w", "p4"), since=_in_3("totals")),
    StoredSum("sw2p4", ("w", "w", "p4"), since=_in_3("totals")),
    StoredSum("sw2_lnq", ("w", "w", "lnq"), since=_in_3("totals")),
    StoredSum("sw2_lnq2", ("w", "w", "lnq", "lnq"), since=_in_3("totals")),
    StoredSum("sw2yp", ("w", "w", "y", "p"), tables=_BINNED, since=_in_3(*_BINNED)),
    StoredSum("swy_d4", ("w", "y", "d4"), tables=("totals", "cells"),
              since=_in_3("totals", "cells")),
    StoredSum("sw2y_d4", ("w", "w", "y", "d4"), tables=("totals", "cells"),
              since=_in_3("totals", "cells")),
    StoredSum("sw2y_lnp", ("w", "w", "y", "lnp"), since=_in_3("totals")),
    StoredSum("sw2y_lnq", ("w", "w", "y", "lnq"), since=_in_3("totals")),
    StoredSum("sw2y_lnp2", ("w", "w", "y", "lnp", "lnp"), since=_in_3("totals")),
    StoredSum("sw2y_lnq2", ("w", "w", "y", "lnq", "lnq"), since=_in_3("totals")),
    # 4: LS-ECE's interval (sqlcal.metrics.smooth.ls_ece_interval) draws each logit cell's node
    # masses with the covariance Σv·a·b of a Poisson bootstrap of its rows, a, b ∈ {lo, hi} the
    # row's shares of the cell's two nodes, times 1 and y: q_* under the weight (v = w:
    # frequency weights, or none), q2_* under its square (v = w²: sampling weights). The logit
    # table's only: the other tables are unchanged
    StoredSum("q_ll", ("w", "lo", "lo"), tables=_LOGIT, since=_in_4(*_LOGIT)),
    StoredSum("q_lh", ("w", "lo", "hi"), tables=_LOGIT, since=_in_4(*_LOGIT)),
    StoredSum("q_hh", ("w", "hi", "hi"), tables=_LOGIT, since=_in_4(*_LOGIT)),
    StoredSum("q2_ll", ("w", "w", "lo", "lo"), tables=_LOGIT, since=_in_4(*_LOGIT)),
    StoredSum("q2_lh", ("w", "w", "lo", "hi"), tables=_LOGIT, since=_in_4(*_LOGIT)),
    StoredSum("q2_hh", ("w", "w", "hi", "hi"), tables=_LOGIT, since=_in_4(*_LOGIT)),
    StoredSum("qy_ll", ("w", "y", "lo", "lo"), tables=_LOGIT, since=_in_4(*_LOGIT)),
    StoredSum("qy_lh", ("w", "y", "lo", "hi"), tables=_LOGIT, since=_in_4(*_LOGIT)),
    StoredSum("qy_hh", ("w", "y", "hi", "hi"), tables=_LOGIT, since=_in_4(*_LOGIT)),
    StoredSum("q2y_ll", ("w", "w", "y", "lo", "lo"), tables=_LOGIT, since=_in_4(*_LOGIT)),
    StoredSum("q2y_lh", ("w", "w", "y", "lo", "hi"), tables=_LOGIT, since=_in_4(*_LOGIT)),
    StoredSum("q2y_hh", ("w", "w", "y", "hi", "hi"), tables=_LOGIT, since=_in_4(*_LOGIT)),
)


def store_sums(table: str, *, label: bool | None = None, version: int | None = None
               ) -> tuple[StoredSum, ...]:
    """The sums a store table carries (``label``: only its label or label-free part;
    ``version``: only those a summary version up to it stored), in the order of its columns:
    each version's label-free sums, then its label sums, versions in order.

    Examples
    --------
    >>> [s.name for s in store_sums("cells", label=True, version=2)]
    ['n_pos', 'swy', 'swyp']
    >>> [s.name for s in store_sums("bins")][-4:]
    ['sw2p', 'sw2pp', 'sw2y', 'sw2yp']
    """
    sums = [s for s in STORE_SUMS if table in s.tables and (label is None or s.label == label)
            and (version is None or s.added(table) <= version)]
    return tuple(sorted(sums, key=lambda s: (s.added(table), s.label)))
