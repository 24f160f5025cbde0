"""Brute-force references computed in numpy on the raw rows, written from the definitions and
independent of sqlcal's code (no shared helpers)."""

from __future__ import annotations

import numpy as np
from scipy import stats


def bin_ids(p, bins, convention="sqlcal"):
    p = np.asarray(p, float)
    if convention == "sqlcal":  # left-closed on k/B, 1 in the last bin
        return np.minimum(np.floor(p * bins).astype(int), bins - 1)
    if convention == "sklearn":  # right-closed on linspace edges (calibration_curve's searchsorted)
        return np.searchsorted(np.linspace(0, 1, bins + 1)[1:-1], p, side="left")
    if convention == "netcal":  # left-closed on linspace edges, last bin closed
        return np.searchsorted(np.linspace(0, 1, bins + 1)[1:-1], p, side="right")
    if convention == "relplot":
        return (p / (1.0 / bins)).astype(int)
    raise ValueError(convention)


def quantile_bin_ids(p, w, bins):
    """Right-closed bins on linear-interpolation quantiles of the frequency-expanded sample
    (integer weights), interpolated as numpy does."""
    p = np.asarray(p, float)
    w = np.asarray(w, float)
    if (w != np.floor(w)).any():  # sampling weights: rescaled to sum to the row count
        w = w * len(w) / w.sum()
    order = np.argsort(p, kind="stable")
    ps, ws = p[order], w[order]
    levels, idx = np.unique(ps, return_index=True)
    lw = np.add.reduceat(ws, idx)
    C = np.cumsum(lw)
    W = C[-1]
    edges = []
    for q in np.linspace(0, 1, bins + 1)[1:-1]:  # the quantile levels numpy users pass
        h = (W - 1) * q
        t0 = np.floor(h)
        lo = levels[np.argmax(C > t0)]
        hi = levels[np.argmax(C > t0 + 1)] if (C > t0 + 1).any() else lo
        frac = h - t0
        edges.append(hi - (hi - lo) * (1 - frac) if frac >= 0.5 else lo + (hi - lo) * frac)
    return np.searchsorted(np.array(edges), p, side="left"), np.array(edges)


def binned_ece(p, y, w, ids, norm="l1"):
    p, y, w = (np.asarray(a, float) for a in (p, y, w))
    W = w.sum()
    total, sq, mx = 0.0, 0.0, 0.0
    for b in np.unique(ids):
        m = ids == b
        Wb = w[m].sum()
        if Wb <= 0:
            continue
        gap = abs((w[m] * y[m]).sum() / Wb - (w[m] * p[m]).sum() / Wb)
        total += Wb * gap
        sq += Wb * gap**2
        mx = max(mx, gap)
    return {"l1": total / W, "l2": np.sqrt(sq / W), "max": mx}[norm]


def brier_parts(p, y, w, ids):
    """Stephenson et al. (2008) terms computed directly from their definitions."""
    p, y, w = (np.asarray(a, float) for a in (p, y, w))
    W = w.sum()
    ybar = (w * y).sum() / W
    rel = res = wbv = wbc = 0.0
    for b in np.unique(ids):
        m = ids == b
        Wb = w[m].sum()
        pb = (w[m] * p[m]).sum() / Wb
        yb = (w[m] * y[m]).sum() / Wb
        rel += Wb * (pb - yb) ** 2
        res += Wb * (yb - ybar) ** 2
        wbv += (w[m] * (p[m] - pb) ** 2).sum()
        wbc += 2 * (w[m] * (y[m] - yb) * (p[m] - pb)).sum()
    return {
        "brier": (w * (y - p) ** 2).sum() / W,
        "reliability": rel / W,
        "resolution": res / W,
        "uncertainty": ybar * (1 - ybar),
        "within_bin_variance": wbv / W,
        "within_bin_covariance": wbc / W,
        "label_variance": (w * y * (1 - y)).sum() / W,
    }


def hosmer_lemeshow(p, y, ids, dof_offset=0):
    p, y = np.asarray(p, float), np.asarray(y, float)
    stat, G = 0.0, 0
    for b in np.unique(ids):
        m = ids == b
        n, o, e = m.sum(), y[m].sum(), p[m].sum()
        stat += (o - e) ** 2 / (e * (1 - e / n))
        G += 1
    return stat, G - dof_offset, stats.chi2.sf(stat, G - dof_offset)


def spiegelhalter(p, y, w=None):
    p, y = np.asarray(p, float), np.asarray(y, float)
    w = np.ones_like(p) if w is None else np.asarray(w, float)
    z = (w * (y - p) * (1 - 2 * p)).sum() / np.sqrt((w * (1 - 2 * p) ** 2 * p * (1 - p)).sum())
    return z, 2 * stats.norm.sf(abs(z))
