"""The score grids, as numpy computes them: the equal-width bin edges of each convention.

Pure numbers, no query: the Ibis reductions (:mod:`sqlcal.query.reductions`) and the metric finishes
(:mod:`sqlcal.metrics`) read the same edges from here.
"""

from __future__ import annotations

import numpy as np

#: the equal-width bin conventions (the choices of the ``convention`` option); see
#: :func:`sqlcal.query.reductions.uniform_bin`
from sqlcal.options import CONVENTIONS  # noqa: E402,F401


def uniform_edges(bins: int, convention: str) -> np.ndarray:
    """The bin edges a convention uses, as numpy computes them (``linspace`` edges are inexact).

    Examples
    --------
    >>> uniform_edges(4, "sqlcal").tolist()
    [0.0, 0.25, 0.5, 0.75, 1.0]
    >>> uniform_edges(2, "relplot").tolist()  # relplot's extra bin holds p = 1 alone
    [0.0, 0.5, 1.0, 1.0]
    """
    if convention in ("sklearn", "netcal"):
        return np.linspace(0.0, 1.0, bins + 1)
    edges = np.arange(bins + 1) / bins
    if convention == "relplot":
        edges = np.append(edges, 1.0)
    return edges


#: scores are clipped to [LOGIT_CLIP, 1 − LOGIT_CLIP] where a log-odds range is taken from them
#: (a score of 0 or 1 has infinite log-odds)
LOGIT_CLIP = 1e-9


def logit_range(lo: float, hi: float) -> tuple[float, float]:
    """The score range ``(lo, hi)`` that log-odds bins span, clipped to
    [:data:`LOGIT_CLIP`, 1 − :data:`LOGIT_CLIP`] (finite log-odds), as plain floats.

    Examples
    --------
    >>> logit_range(0.0, 0.5)
    (1e-09, 0.5)
    """
    lo = min(max(float(lo), LOGIT_CLIP), 1 - LOGIT_CLIP)
    hi = min(max(float(hi), LOGIT_CLIP), 1 - LOGIT_CLIP)
    return lo, max(lo, hi)


def logit_edges(bins: int, lo: float, hi: float) -> np.ndarray:
    """The edges of ``bins`` bins of equal width in log-odds from score ``lo`` to ``hi``:
    σ(logit(lo) + k·(logit(hi) − logit(lo))/B) for k = 0 … B, as numpy computes them (the
    engine compares scores with these doubles, so a score's bin is the same everywhere).
    When lo = hi every edge is lo: one bin holds every score.

    Examples
    --------
    >>> logit_edges(2, 0.1, 0.9).round(12).tolist()
    [0.1, 0.5, 0.9]
    """
    lo, hi = logit_range(lo, hi)
    a, b = np.log(lo) - np.log1p(-lo), np.log(hi) - np.log1p(-hi)
    z = a + (b - a) * np.arange(bins + 1) / bins
    edges = 1.0 / (1.0 + np.exp(-z))
    edges[0], edges[-1] = lo, hi
    return edges


#: log-odds cells end at ±this many units of log-odds (p within about 1.6e-28 of 0 or 1 shares
#: the first or last cell)
LOGIT_CELL_BOUND = 64


def logit_cell(p, scale: int) -> np.ndarray:
    """The log-odds cell of each score, ``FLOOR(ln(p/(1 − p))·scale)`` clipped to
    ±:data:`LOGIT_CELL_BOUND`·scale (p <= 0 in the first cell, p >= 1 in the last), as
    :func:`sqlcal.query.reductions.logit_cell` computes it in the engine.

    A division and a logarithm rounded as IEEE arithmetic rounds them never decrease as p grows,
    so every cell holds a contiguous range of scores, whose exact ends are the least and the
    greatest score of its rows (however an engine rounds the logarithm).

    Examples
    --------
    >>> logit_cell([0.0, 0.001, 0.5, 0.999, 1.0], 4).tolist()
    [-256, -28, 0, 27, 255]
    """
    p = np.asarray(p, float)
    lo, hi = -LOGIT_CELL_BOUND * scale, LOGIT_CELL_BOUND * scale - 1
    inner = (p > 0) & (p < 1)
    q = np.where(inner, p, 0.5)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.floor(np.log(q / (1 - q)) * scale)
    z = np.clip(z, lo, hi)
    return np.where(p <= 0, lo, np.where(p >= 1, hi, z)).astype(np.int64)
