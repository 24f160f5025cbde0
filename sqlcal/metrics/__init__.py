"""Metric families: pure functions of summaries (numpy/pandas), one module per family.

This module holds the helpers every family shares: splitting a summary by group, and laying out the
result table (group keys first, then the value, ``n``, ``W``, the rest; every group present, with
NULL values for an empty one). Summary frames hold the keys under internal names
(:mod:`sqlcal.inputs.groupkeys`); :func:`result` gives them back their names.
"""

from __future__ import annotations

from typing import Callable, Iterable, Iterator, NamedTuple, Sequence

import numpy as np
import pandas as pd

from sqlcal.inputs.sources import Source
from sqlcal.options import OPTIONS
from sqlcal.query import declared, planner

WEIGHT_KINDS = OPTIONS["weight_kind"].choices


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


def as_slabs(levels) -> Iterable[pd.DataFrame]:
    """Levels given whole (a frame) or in slabs of increasing score (an iterable of frames, each
    sorted by group and score, as :func:`sqlcal.metrics.cells.level_slabs` yields them), as an
    iterable of slabs."""
    return [levels] if isinstance(levels, pd.DataFrame) else levels


class GroupIndex:
    """The groups met in a sequence of summary frames (slabs), numbered 0, 1, ... in the order
    first met, with their key values: per-group arrays of a streaming finish grow with it."""

    def __init__(self, by: Sequence[str]):
        self.by = list(by)
        self.keys: list[dict] = []
        self._index: dict[tuple, int] = {}

    def __len__(self) -> int:
        return len(self.keys)

    def codes(self, frame: pd.DataFrame) -> np.ndarray:
        """The group number of every row of ``frame``."""
        if not self.by:
            if not self.keys:
                self.keys.append({})
                self._index[()] = 0
            return np.zeros(len(frame), dtype=np.int64)
        local = frame.groupby(self.by, dropna=False, sort=False).ngroup().to_numpy()
        # the first row of each local code (codes number the groups 0.. in order met)
        first = np.empty(int(local.max()) + 1 if len(local) else 0, dtype=np.int64)
        first[local[::-1]] = np.arange(len(local) - 1, -1, -1)
        mapping = np.empty(len(first), dtype=np.int64)
        for code, row in enumerate(first.tolist()):
            key = {c: frame[c].iloc[row] for c in self.by}
            at = self._index.setdefault(key_tuple(key), len(self.keys))
            if at == len(self.keys):
                self.keys.append(key)
            mapping[code] = at
        return mapping[local]

    def frame(self) -> pd.DataFrame:
        """The key columns, one row per group in number order."""
        return pd.DataFrame(self.keys, columns=self.by)

    def levels(self, frame: pd.DataFrame, ordered: bool = False) -> "LevelArrays":
        """A levels frame (``p``, ``n``, ``W``, ``swy``) as arrays with each row's group
        number; ``ordered``: sorted by group number, then score (one lexsort of the arrays, not
        of the frame and its key columns)."""
        g = self.codes(frame)
        p = frame["p"].to_numpy(float)
        n, W, Y = (frame[c].to_numpy(float) for c in ("n", "W", "swy"))
        if ordered:
            order = np.lexsort((p, g))
            g, p, n, W, Y = g[order], p[order], n[order], W[order], Y[order]
        return LevelArrays(g, p, n, W, Y)


class LevelArrays(NamedTuple):
    """The columns of a levels frame as arrays: group number ``g``, score ``p``, rows ``n``,
    weight ``W``, label sum ``Y``."""

    g: np.ndarray
    p: np.ndarray
    n: np.ndarray
    W: np.ndarray
    Y: np.ndarray

    def live(self) -> "LevelArrays":
        """The levels of positive weight (a level whose rows all weigh 0 is no level)."""
        keep = self.W > 0
        return LevelArrays(*(a[keep] for a in self))


def runs(g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The starts and ends of the runs of equal values of ``g`` (sorted by group)."""
    if not len(g):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    return starts, np.r_[starts[1:], len(g)]


def grown(array: np.ndarray, size: int, fill=0.0) -> np.ndarray:
    """``array`` extended with ``fill`` to ``size`` entries along its first axis."""
    if len(array) >= size:
        return array
    pad = np.full((size - len(array), *array.shape[1:]), fill, dtype=array.dtype)
    return np.concatenate([array, pad])


class Grouped:
    """A summary frame's rows numbered by group, for finishes vectorised over every group at
    once (numpy per group count, not a Python loop per group): ``codes`` (each row's group
    number), ``keys`` (the key columns, one row per group in number order) and ``sum``."""

    def __init__(self, frame: pd.DataFrame, by: Sequence[str]):
        by = list(by)
        if by:
            self.codes = frame.groupby(by, dropna=False, sort=False).ngroup().to_numpy()
            first = np.unique(self.codes, return_index=True)[1]
            self.keys = frame[by].iloc[first].reset_index(drop=True)
        else:
            self.codes = np.zeros(len(frame), dtype=np.int64)
            self.keys = pd.DataFrame(index=range(1 if len(frame) else 0))
        self.size = len(self.keys)

    def sum(self, values, where=None) -> np.ndarray:
        """Per group, the sum of ``values`` (over the rows ``where`` is true)."""
        values = np.asarray(values, dtype=float)
        if where is None:
            return np.bincount(self.codes, weights=values, minlength=self.size)
        return np.bincount(self.codes[where], weights=values[where], minlength=self.size)

    def count(self, where) -> np.ndarray:
        """Per group, the rows where ``where`` is true."""
        return np.bincount(self.codes[where], minlength=self.size)

    def max(self, values, where=None, empty=np.nan) -> np.ndarray:
        """Per group, the largest of ``values`` (``empty`` for a group without rows)."""
        values = np.asarray(values, dtype=float)
        codes = self.codes if where is None else self.codes[where]
        values = values if where is None else values[where]
        out = np.full(self.size, -np.inf)
        np.maximum.at(out, codes, values)
        return np.where(np.isneginf(out) & (np.bincount(codes, minlength=self.size) == 0),
                        empty, out)

    def table(self, n, W, **columns) -> pd.DataFrame:
        """The finish's table: the keys, ``n``, ``W`` and ``columns``, one row per group (the
        layout of :func:`per_group`)."""
        out = self.keys.copy()
        out["n"] = np.asarray(n).round().astype(np.int64)
        out["W"] = np.asarray(W, dtype=float)
        for name, values in columns.items():
            out[name] = values
        return out


def key_tuple(keys: dict) -> tuple:
    """A group's internal key values as a dict key: NaN != NaN, so a NULL key would miss itself;
    use None (a floating key's NaN flag, among the values, tells NULL from NaN)."""
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
           trust: dict | None = None, *, present: bool = True) -> pd.DataFrame:
    """The result table: keys, ``columns[0]``, ``n``, ``W``, the other columns, the ``trust``
    columns, ``n_dropped``; the keys under the user's names, and a column of sqlcal's whose
    name a key has renamed (:meth:`sqlcal.inputs.sources.Source.present`).

    ``values`` holds the internal keys, ``n``, ``W`` and ``columns`` of every group with valid
    rows; with
    ``on_invalid="drop"``, groups that lost all their rows are added with NaN values. ``trust``
    maps column names to facts that hold for every group (the weight kind, the bins, the
    confidence level): what a reader needs to trust the numbers travels in the table itself,
    so it survives concatenation, :func:`sqlcal.report`, JSON and the results table.
    ``present=False`` keeps the internal key columns, for a metric that adds to the table
    before presenting it (``src.present``).
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
    frame = pd.DataFrame(columns, index=out.index)
    return src.present(frame) if present else frame


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
    (its variances carry the design: :func:`sqlcal.query.reductions.variance_weights`); reading them
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
    :func:`sqlcal.query.reductions.variance_weights`) unless the weights are known to be
    frequencies (v = w: the Σw-sums serve): ``weight_kind="frequency"``, or ``"auto"`` with
    whole-number weights (known after validation, or before it from
    :func:`sqlcal.query.executor.learn_weight_kind`)."""
    if src.sampling_rate is not None:  # a sampling design: whole 1/r weights are not frequencies
        resolve_weight_kind(src, weight_kind)  # refuses "frequency" before any scan
        return ("sw2",)
    if not src.weighted or weight_kind == "frequency":
        return ()
    known = src.validated or src.weights_known
    return () if weight_kind == "auto" and known and src.integer_weights else ("sw2",)


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
