"""Metric families: pure functions of summaries (numpy/pandas), one module per family.

This module holds the two helpers every family shares: applying a per-group finish to a summary
frame, and laying out the result table (group keys first, then the value, ``n``, ``W``, the rest;
every group present, with NULL values for an empty one).
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import pandas as pd

from sqlcal.source import Source

_ALL = "__all__"

WEIGHT_KINDS = ("frequency", "sampling")


def per_group(
    frame: pd.DataFrame, by: Sequence[str], finish: Callable[[pd.DataFrame], dict]
) -> pd.DataFrame:
    """Apply ``finish`` (a summary's rows for one group -> dict of values) to every group."""
    keys = list(by) or [_ALL]
    if not by:
        frame = frame.assign(**{_ALL: 0})
    rows = []
    for key, part in frame.groupby(keys, dropna=False, sort=False):
        key = key if isinstance(key, tuple) else (key,)
        rows.append({**dict(zip(keys, key)), **finish(part)})
    out = pd.DataFrame(rows, columns=None if rows else keys)
    return out.drop(columns=[_ALL]) if not by else out


def result(src: Source, values: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    """The result table: keys, ``columns[0]``, ``n``, ``W``, the other columns, ``n_dropped``.

    ``values`` holds the keys and ``columns``; groups missing from it (no valid rows) get NaN.
    """
    by = list(src.by)
    base = src.totals[[*by, "n", "W"]].copy()
    base["W"] = base["W"].fillna(0.0)
    if by:
        out = base.merge(values[[*by, *columns]], on=by, how="left", sort=False)
    else:
        out = pd.concat([base.reset_index(drop=True), values[list(columns)].reset_index(drop=True)],
                        axis=1)
    order = [*by, columns[0], "n", "W", *columns[1:]]
    if src.on_invalid == "drop":
        out["n_dropped"] = (src.totals["n_rows"] - src.totals["n"]).to_numpy()
        order.append("n_dropped")
    return out[order]


def safe_div(num, den):
    """num / den with NaN where den is 0 (an empty group), never inf or an exception."""
    num = np.asarray(num, dtype=float)
    den = np.asarray(den, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def check_weight_kind(weight_kind: str) -> None:
    if weight_kind not in WEIGHT_KINDS:
        raise ValueError(f"weight_kind must be one of {WEIGHT_KINDS}, not {weight_kind!r}")
