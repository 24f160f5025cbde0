"""The score grids, as numpy computes them: the equal-width bin edges of each convention.

Pure numbers, no query: the Ibis reductions (:mod:`sqlcal.summaries`) and the metric finishes
(:mod:`sqlcal.metrics`) read the same edges from here.
"""

from __future__ import annotations

import numpy as np

#: the equal-width bin conventions; see :func:`sqlcal.summaries.uniform_bin`
CONVENTIONS = ("sqlcal", "sklearn", "netcal", "relplot")


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
