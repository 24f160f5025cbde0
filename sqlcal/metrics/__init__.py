"""Metric families: pure functions of summaries (numpy/pandas), one module per family.

This module holds the helpers every family shares: splitting a summary by group, and laying out the
result table (group keys first, then the value, ``n``, ``W``, the rest; every group present, with
NULL values for an empty one).
"""

from __future__ import annotations

from typing import Callable, Iterator, Sequence

import numpy as np
import pandas as pd

from sqlcal.query import declared, planner
from sqlcal.inputs import Source

_ALL = "__all__"

WEIGHT_KINDS = ("auto", "frequency", "sampling")


def groups(frame: pd.DataFrame, by: Sequence[str]) -> Iterator[tuple[dict, pd.DataFrame]]:
    """Yield (keys as a dict, that group's rows) for every group of a summary frame."""
    if not by:
        yield {}, frame
        return
    by = list(by)
    # one sort by group, then a slice per group: the groupby's own iteration takes each group's
    # rows column by column, which for Arrow-backed key columns cost milliseconds a group
    codes = frame.groupby(by, dropna=False, sort=False).ngroup().to_numpy()
    order = np.argsort(codes, kind="stable")
    ordered = frame.take(order)
    starts = np.flatnonzero(np.diff(codes[order], prepend=-1))
    ends = [*starts[1:].tolist(), len(frame)]
    keys = zip(*(ordered[c].iloc[starts].tolist() for c in by))
    for key, a, b in zip(keys, starts.tolist(), ends):
        yield dict(zip(by, key)), ordered.iloc[a:b]


def key_tuple(keys: dict) -> tuple:
    """A group's key values as a dict key: NaN != NaN, so a NULL key would miss itself; use None."""
    return tuple(None if pd.isna(v) else v for v in keys.values())


def per_group(
    frame: pd.DataFrame, by: Sequence[str], finish: Callable[[pd.DataFrame], dict]
) -> pd.DataFrame:
    """Apply ``finish`` (one group's summary rows -> dict of values) to every group. Adds ``n``
    and ``W`` (the group's rows and weight) unless ``finish`` returns them."""
    rows = [{**key, "n": int(part["n"].sum()), "W": float(part["W"].sum()), **finish(part)}
            for key, part in groups(frame, by)]
    return pd.DataFrame(rows, columns=None if rows else [*by, "n", "W"])


def result(src: Source, values: pd.DataFrame, columns: Sequence[str],
           trust: dict | None = None) -> pd.DataFrame:
    """The result table: keys, ``columns[0]``, ``n``, ``W``, the other columns, the ``trust``
    columns, ``n_dropped``.

    ``values`` holds the keys, ``n``, ``W`` and ``columns`` of every group with valid rows; with
    ``on_invalid="drop"``, groups that lost all their rows are added with NaN values. ``trust``
    maps column names to facts that hold for every group (the weight kind, the bins, the
    confidence level): what a reader needs to trust the numbers travels in the table itself,
    so it survives concatenation, :func:`sqlcal.report`, JSON and the results table.
    """
    by = list(src.by)
    values = values.reset_index(drop=True)
    order = [*by, columns[0], "n", "W", *columns[1:]]
    if src.on_invalid == "drop":
        base = src.dropped[[*by, "n_dropped"]].reset_index(drop=True)
        if by:
            out = base.merge(values[[*by, "n", "W", *columns]], on=by, how="left", sort=False)
        else:
            out = pd.concat([base, values[["n", "W", *columns]]], axis=1)
        out["n"] = out["n"].fillna(0).astype(int)
        out["W"] = out["W"].fillna(0.0)
        order.append("n_dropped")
    else:
        out = values.sort_values(by, ignore_index=True) if by else values
    # built in one piece from the columns (selecting, then inserting, costs more than the
    # arithmetic of a small table)
    columns = {name: out[name] for name in order}
    columns["n"] = columns["n"].astype(int)
    dropped = columns.pop("n_dropped", None)
    columns |= {name: [value] * len(out) for name, value in {**(trust or {}),
                                                               **src.facts}.items()}
    if dropped is not None:
        columns["n_dropped"] = dropped
    return pd.DataFrame(columns, index=out.index)


def safe_div(num, den):
    """num / den with NaN where den is 0 (an empty group), never inf or an exception."""
    num = np.asarray(num, dtype=float)
    den = np.asarray(den, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def statistic(num, den):
    """A test statistic num / den: ±inf where the null variance den is 0 but num is not (scores
    of 0 or 1 contradicted by the label: certain miscalibration), NaN only for 0 / 0."""
    num = np.asarray(num, dtype=float)
    den = np.asarray(den, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0),
                        np.where(num != 0, np.sign(num) * np.inf, np.nan))


def check_weight_kind(weight_kind: str) -> None:
    if weight_kind not in WEIGHT_KINDS:
        raise ValueError(f"weight_kind must be one of {WEIGHT_KINDS}, not {weight_kind!r}")


def resolve_weight_kind(src: Source, weight_kind: str) -> str:
    """``"auto"``: frequency weights when every weight is a whole number, sampling otherwise (so a
    rescaled sampling weight cannot change a p-value). Unweighted sources are frequency-weighted.
    A source with a negative sampling rate has sampling weights, whatever the value of 1/rate
    (its variances carry the design: :func:`sqlcal.summaries.variance_weights`); reading them
    as frequencies is refused."""
    from sqlcal.options import OptionError

    check_weight_kind(weight_kind)
    if src.sampling_rate is not None:
        if weight_kind == "frequency":
            raise OptionError(
                "weight_kind='frequency' reads each row weight as that many observed rows, but "
                "with negative_sampling_rate a kept negative stands for 1/rate rows it did not "
                "observe (a sampling design): leave weight_kind='auto' (or 'sampling')")
        return "sampling"
    if weight_kind != "auto":
        return weight_kind
    return "frequency" if not src.weighted or src.integer_weights else "sampling"


def variance_parts(src: Source, weight_kind: str) -> tuple:
    """Summary parts a variance needs: the sums of the variance weight (``"sw2"``: Σv, see
    :func:`sqlcal.summaries.variance_weights`) unless the weights are known to be
    frequencies (v = w: the Σw-sums serve)."""
    if src.sampling_rate is not None:
        resolve_weight_kind(src, weight_kind)  # refuses "frequency" before any scan
    return ("sw2",) if src.weighted and weight_kind != "frequency" else ()


def level_sets(src: Source) -> pd.DataFrame:
    """The levels summary of a source: one row per group and distinct score ``p``, sorted by
    group and score, with ``n`` (rows), ``W`` = Σw, ``swy`` = Σwy, ``swp`` = Σwp.

    One GROUP BY score, cached on the source (every level-set metric of a report shares it). It
    is the sufficient statistic of the empirical law of (score, label): isotonic regression,
    Platt scaling, the Lipschitz calibration error, the distances to calibration and the
    decision losses are all functions of it alone.
    """
    frame = planner.fetch(src, declared.levels("sums"))
    return frame.sort_values([*src.by, "p"], ignore_index=True, kind="stable")
