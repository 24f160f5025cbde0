"""The maturity-adjusted view of a stored window (``sqlcal.stored(..., maturity="adjusted")``):
each immature period's known positives divided by the maturity curve of their score bin at the
period's age, so that every metric reads an estimate of the eventual label sums.

With binary eventual labels every label-dependent sum is :math:`\\sum_i w_i y_i f(p_i)`, linear in
y; so is every metric's summary (Brier's :math:`\\sum w(y-p)^2 = \\sum w(y - 2yp + p^2)`, the
reliability table's :math:`\\sum wy` per bin, the cutoff error's running residual...). Replacing
:math:`y_i` of a row of score bin b in a period of age a by :math:`y_i 1[L_i < a] / \\hat F_b(a)`
(L the label's delay, :math:`\\hat F_b` the maturity curve estimated on mature cohorts) gives an
estimate of each sum that is unbiased when the period's delays follow the mature cohorts' curve
(the inverse-probability weighting of delayed feedback; Chapelle, "Modeling delayed feedback in
display advertising", KDD 2014). The stored label parts are per delay bucket and per score cell,
so the division is exact per stored cell (and per distinct score, and per cell of smooth ECE's
histogram); a summary whose stored key does not determine the score bin (the totals' log-loss
sums, equal-width bins that cut a curve bin, the logit grid) is served from the stored levels or
refused (:func:`unadjustable`).

No Ibis here beyond the store's merge queries (:func:`sqlcal.monitor.store.merged`).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd

from sqlcal.errors import InvalidInputError
from sqlcal.monitor import schema
from sqlcal.monitor import store as _store

#: score bins of the maturity curve the adjustment divides by (equal weight per group)
BINS = 8
#: the totals' label columns the stored cells carry (the others are per group only; summary
#: version 3 added the Brier score's Σwy·d4 and the variance weight's, which its intervals read)
_FROM_CELLS = ("n_pos", "swy", "swyp", "sw2y", "sw2yp", "swy_d4", "sw2y_d4")
#: the key column that locates a stored row on the score grid, per stored summary
_CELL_KEYS = {"cells": "cell", "smooth": "cell", "levels": "p"}


def score_bins(cells: pd.DataFrame, keys: Sequence[str], bins: int, K: int,
               pooled_by: Sequence[str] | None = None) -> pd.DataFrame:
    """Each cell's score bin: ``bins`` bins of equal label-free weight per group (``pooled_by``,
    default the keys), edges on cell boundaries (a cell never splits)."""
    group = list(keys if pooled_by is None else pooled_by)
    free = cells[cells["delay"] == schema.DELAY_LABEL_FREE]
    hist = free.groupby([*group, "cell"], sort=True)["W"].sum().reset_index()
    if group:
        before = hist.groupby(group)["W"].cumsum() - hist["W"]
        total = hist.groupby(group)["W"].transform("sum")
    else:
        before, total = hist["W"].cumsum() - hist["W"], hist["W"].sum()
    hist["score_bin"] = np.minimum((before / total * bins).astype(int), bins - 1)
    out = cells.merge(hist[[*group, "cell", "score_bin"]], on=[*group, "cell"], how="left")
    return out.assign(cell_lo=out["cell"] / K, cell_hi=(out["cell"] + 1) / K)


def bin_of(frame: pd.DataFrame, by: Sequence[str], starts: pd.DataFrame,
           cell: np.ndarray) -> np.ndarray:
    """The maturity curve's score bin of each row of ``frame`` at score cell ``cell``: bins are
    cell ranges, ``starts`` their first cells (``by``, ``score_bin``, ``start``); -1 for a group
    the curve does not know."""
    out = np.full(len(frame), -1, dtype=np.int64)
    groups = frame.groupby(list(by), sort=False).indices if by else {(): np.arange(len(frame))}
    for key, idx in groups.items():
        key = key if isinstance(key, tuple) else (key,)
        sel = np.ones(len(starts), bool)
        for k, v in zip(by, key):
            sel &= (starts[k] == v).to_numpy()
        mine = starts[sel].sort_values("start")
        if len(mine):
            out[idx] = mine["score_bin"].to_numpy()[np.maximum(np.searchsorted(
                mine["start"].to_numpy(), cell[idx], side="right") - 1, 0)]
    return out


def unadjustable(kind: str, params: tuple, parts: frozenset, K: int) -> str | None:
    """Why a declared summary cannot be adjusted from the stored cells (None: it can)."""
    if kind == "totals" and "logloss" in parts:
        return ("the log-loss sums (Σwy·ln p) are stored per group, not per score cell, so their "
                "positives cannot be divided by the maturity curve of their score bin")
    if kind == "uniform" and not (params[1] == "sqlcal" and K % params[0] == 0):
        return (f"equal-width bins={params[0]} ({params[1]!r} convention) are not unions of the "
                f"{K} stored score cells the maturity curve's bins are made of, so a bin's "
                f"positives cannot be divided by their curve; bins dividing {K} (e.g. 16) are "
                "adjusted exactly")
    if kind in ("logit_grid", "logit_bins"):
        return ("the logit grid spreads each row's label over two nodes, which do not say its "
                "score bin")
    return None


class Adjustment:
    """The window's periods split by age, the maturity curve, and the adjusted merges.

    Parameters
    ----------
    window : DataFrame
        The manifest rows of the window's periods.
    cohorts : DataFrame
        The manifest rows of every stored period of the spec (the mature ones estimate the
        curve).
    by : sequence of str
        The stored key columns (``key_0``, ...) of the window's keys.
    at : Timestamp
        The time ages are taken at (a period's labels are as old as the earlier of ``at`` and
        the time they are known as of: :func:`sqlcal.monitor.store.label_age`).
    mature_age : float
        horizon + settle, in days.
    names : dict, optional
        ``{stored column: key}``, for messages.
    """

    def __init__(self, store: Any, *, prefix: str, spec_hash: str, spec: dict,
                 window: pd.DataFrame, cohorts: pd.DataFrame, by: Sequence[str],
                 at: pd.Timestamp, mature_age: float, bins: int = BINS,
                 names: dict | None = None):
        self.store, self.prefix, self.spec_hash, self.spec = store, prefix, spec_hash, spec
        self.by, self.K, self.edges = list(by), int(spec["cells"]), list(spec["delays"])
        self.names = names or {}
        age = _store.label_age(window, at).to_numpy()
        lag = np.array([np.inf if a >= mature_age else
                        max([e for e in self.edges[1:] if e <= a], default=0.0) for a in age])
        window = window.assign(lag=lag)
        #: the oldest summary version of the window's periods: the sums later ones added are
        #: left out of every merge (a part of the window would miss them)
        self.oldest = min((schema.stored_version(s) for s in set(window["spec"])),
                          default=schema.SUMMARY_VERSION)
        self.mature = window[window["lag"] == np.inf]
        self.immature = window[(window["lag"] > 0) & (window["lag"] < np.inf)]
        #: periods younger than the first delay edge: nothing known to adjust from
        self.left_out = window[window["lag"] == 0]
        self.curve = self.starts = None
        if len(self.immature):
            old = cohorts[_store.mature(cohorts, at=at, horizon=mature_age, settle=0)]
            if not len(old):
                raise InvalidInputError(
                    f"maturity='adjusted': no mature period in the store at {at} to estimate "
                    "the maturity curve from (age >= horizon + settle)")
            self._estimate(old, bins)

    def _estimate(self, old: pd.DataFrame, bins: int) -> None:
        """F̂_b(a) per group, score bin and lag of the window, from the mature cohorts' cells
        (as :func:`sqlcal.monitor.maturity.maturity`), and each bin's first cell."""
        cells = _store.merged(self.store, "cells", prefix=self.prefix,
                              spec_hash=self.spec_hash, versions=old, by=[*self.by, "delay"],
                              delays=None, params={"cells": self.K})
        binned = score_bins(cells, self.by, bins, self.K)
        free = binned[binned["delay"] == schema.DELAY_LABEL_FREE]
        self.starts = free.groupby([*self.by, "score_bin"])["cell"].min().rename(
            "start").reset_index()
        lab = binned[binned["delay"] >= 0]
        per = lab.groupby([*self.by, "score_bin", "delay"])["swy"].sum().reset_index()
        upper = np.array([self.edges[k + 1] if k + 1 < len(self.edges) else np.inf
                          for k in per["delay"]])
        rows = []
        for lag in sorted(set(self.immature["lag"])):
            known = per.assign(swy=np.where(upper <= lag, per["swy"], 0.0))
            F = known.groupby([*self.by, "score_bin"])["swy"].sum() / \
                per.groupby([*self.by, "score_bin"])["swy"].sum()
            rows.append(F.rename("F_hat").reset_index().assign(lag=lag))
        self.curve = pd.concat(rows, ignore_index=True)

    def _factors(self, frame: pd.DataFrame, cell: np.ndarray) -> np.ndarray:
        """1/F̂ of each label row's group, score bin (from its cell) and lag."""
        b = bin_of(frame, self.by, self.starts, cell)
        index = pd.MultiIndex.from_frame(pd.DataFrame(
            {**{k: frame[k].to_numpy() for k in self.by}, "score_bin": b,
             "lag": frame["lag"].to_numpy()}))
        F = self.curve.set_index([*self.by, "score_bin", "lag"])["F_hat"].reindex(
            index).to_numpy()
        bad = ~(F > 0)
        if bad.any():
            first = frame[bad].iloc[0]
            raise InvalidInputError(
                f"maturity='adjusted': group "
                f"{dict((self.names.get(k, k), first[k]) for k in self.by)} has no "
                f"mature period, or a score bin whose mature cohorts saw no positive label "
                f"within {first['lag']:g} days, so its known positives cannot be scaled up; "
                "use maturity='lag:<a>d' or 'mature'")
        return 1.0 / F

    def merged(self, kind: str, params: dict) -> pd.DataFrame:
        """The stored summary ``kind`` over the window as :func:`sqlcal.monitor.store.merged`
        gives it, with the label columns of the immature periods adjusted."""
        table = schema.TABLES[kind]
        keys = [c for c, _ in table["keys"]]
        label = [c for c, _ in table["label"]]
        parts = []
        if len(self.mature):
            parts.append(self._merge(kind, self.mature, self.by, None, params))
        if len(self.immature):
            if kind not in _CELL_KEYS:
                raise ValueError(f"the stored {kind!r} summary has no score cell to adjust by")
            frame = self._immature(kind, params)
            lab = frame["delay"].to_numpy() >= 0
            key = frame[_CELL_KEYS[kind]].to_numpy()
            cell = (key.astype(np.int64) * (self.K // int(params.get("cells", self.K)))
                    if kind != "levels" else
                    np.minimum(np.floor(key * self.K), self.K - 1).astype(np.int64))
            factor = np.ones(len(frame))
            if lab.any():
                factor[lab] = self._factors(frame[lab], cell[lab])
            for c in label:
                frame[c] = frame[c].astype(float) * factor
            parts.append(frame.drop(columns=["period_start", "delay", "lag"]))
        return _sum(pd.concat(parts, ignore_index=True), [*self.by, *keys])

    def totals(self) -> pd.DataFrame:
        """The window's totals: label-free sums of every period, label sums of the mature ones,
        and the immature periods' ``n_pos``, ``swy``, ``swyp`` from their adjusted cells (the
        other label sums, the log loss's, are left out: :func:`unadjustable`)."""
        parts = []
        if len(self.mature):
            parts.append(self._merge("totals", self.mature, self.by, None, {}))
        if len(self.immature):
            parts.append(self._merge("totals", self.immature, self.by,
                                     [schema.DELAY_LABEL_FREE], {}))
            cells = self.merged_immature_cells()
            parts.append(cells[[*self.by, *(c for c in _FROM_CELLS if c in cells)]])
        frame = _sum(pd.concat(parts, ignore_index=True), self.by)
        dropped = [c for c, _ in schema.TABLES["totals"]["label"] if c not in _FROM_CELLS]
        return frame.drop(columns=dropped, errors="ignore") if len(self.immature) else frame

    def merged_immature_cells(self) -> pd.DataFrame:
        """The immature periods' adjusted label sums per group (their cells summed)."""
        saved, self.mature = self.mature, self.mature.iloc[:0]
        try:
            cells = self.merged("cells", {"cells": self.K})
        finally:
            self.mature = saved
        free = [c for c, _ in schema.TABLES["cells"]["label_free"]]
        return _sum(cells.drop(columns=["cell", *free]), self.by)

    def _immature(self, kind: str, params: dict) -> pd.DataFrame:
        """Per immature period and delay: the stored rows of the buckets known at its lag."""
        delays = [schema.DELAY_LABEL_FREE, *range(len(self.edges) - 1)]
        frame = self._merge(kind, self.immature, [*self.by, "period_start", "delay"], delays,
                            params)
        frame["period_start"] = pd.to_datetime(frame["period_start"]).astype("datetime64[ns]")
        frame = frame.merge(self.immature[["period_start", "lag"]], on="period_start")
        d = frame["delay"].to_numpy()
        upper = np.array([self.edges[k + 1] if 0 <= k < len(self.edges) - 1 else np.inf
                          for k in d])
        keep = (d == schema.DELAY_LABEL_FREE) | (upper <= frame["lag"].to_numpy())
        return frame[keep].reset_index(drop=True)

    def _merge(self, kind, versions, by, delays, params) -> pd.DataFrame:
        frame = _store.merged(self.store, kind, prefix=self.prefix, spec_hash=self.spec_hash,
                              versions=versions, by=by, delays=delays, params=params)
        return frame.drop(columns=schema.added_after(kind, self.oldest), errors="ignore")

    def describe(self) -> str:
        """What the view did, for the source's origin."""
        text = (f"{len(self.immature)} immature periods adjusted by the maturity curve "
                f"({BINS} score bins), an estimate")
        if len(self.left_out):
            text += (f"; {len(self.left_out)} periods younger than {self.edges[1]:g} days "
                     "left out")
        return text


def _sum(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Merge rows with the store's rules (sums; MIN/MAX for p_min/p_max)."""
    rules = {c: "min" if c in schema.MINIMA else "max" if c in schema.MAXIMA else "sum"
             for c in frame.columns if c not in keys}
    if not keys:
        return frame.assign(_all=0).groupby("_all").agg(rules).reset_index(drop=True)
    return frame.groupby(keys, dropna=False, sort=True).agg(rules).reset_index()
