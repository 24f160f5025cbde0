"""A snapshot's queries on the predictions: the rows cut into periods with the labels as known
at a time, the events layout joined in, each period's fingerprint sums, and the stored
summaries of the periods due (:func:`reduce_periods`), each run by the executor.

:mod:`sqlcal.monitor.store` decides which periods to write and writes them; the sums it stores
are declared once (:data:`sqlcal.query.declared.STORE_SUMS`) and rendered here by
:func:`sqlcal.query.reductions.store_scan` and :func:`~sqlcal.query.reductions.store_levels`,
as the ``sql/`` folder and the dbt package render them by
:func:`~sqlcal.query.reductions.store_rows`.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

import ibis
import ibis.expr.types as ir
import pandas as pd

from sqlcal.errors import EngineDataError, InvalidInputError, redact
from sqlcal.inputs import engines
from sqlcal.inputs.sources import Source, resolve_table
from sqlcal.options import OptionError
from sqlcal.query import executor, reductions

#: the fingerprint's high-frequency term is sin(2^20·p): a score moved by 1e-9 moves it by 1e-3
HIGH_FREQUENCY = float(2**20)


def origin(data: Any, table: str | None) -> str:
    """What the spec hash names as the rows' origin (stable as rows are added)."""
    if isinstance(data, tuple) and len(data) == 2:
        data, table = data
    if isinstance(data, (str, os.PathLike)):  # a URL's password hidden: not stored, not hashed
        return redact(os.fspath(data)) + (f" table {table}" if table else "")
    if isinstance(data, ir.Table):
        try:
            return f"table {data.get_name()}"
        except Exception:
            return "an Ibis expression"
    if hasattr(data, "list_tables"):
        return f"{getattr(data, 'name', 'ibis')} table {table}"
    return "an in-memory frame"


def joined_events(base: ir.Table, events: Any, *, key: str | None, label: str,
                  label_time: str | None) -> ir.Table:
    """The events layout as the column layout: the predictions left-joined on ``key`` to the
    events table's outcome (``label``) and event time (``label_time``)."""
    if key is None or label_time is None:
        raise OptionError("events= needs key= (the example id in both tables) and label_time= "
                          "(the events table's event time column)")
    if isinstance(events, str) and not any(ch in events for ch in "/\\:.") and \
            (found := engines.backend_of(base)) is not None and \
            events in found.list_tables():
        ev = found.table(events)  # a table of the predictions' database
    else:
        ev = resolve_table(events, None)
    for col in (key, label, label_time):
        if col not in ev.columns:
            raise InvalidInputError(f"column {col!r} is not in the events table; its columns are "
                                    f"{list(ev.columns)}")
    if key not in base.columns:
        raise InvalidInputError(f"key column {key!r} is not in the predictions; their columns "
                                f"are {list(base.columns)}")
    clash = [c for c in (label, label_time) if c in base.columns]
    if clash:
        raise OptionError(f"label/label_time: {clash} are columns of the predictions as well as "
                          "of events=; in the events layout the outcome and its time come from "
                          "the events table only (drop or rename them)")
    counts = ev.group_by(ev[key]).aggregate(k=ev.count())
    dup = int(executor.fetch(counts.filter(counts.k > 1).count().as_table()).iloc[0, 0])
    if dup:
        raise InvalidInputError(f"events: {dup:,} values of key {key!r} have more than one "
                                "event row; keep one row per example (its outcome and the time "
                                "it became known)")
    right = ev.select(__sqlcal_event_key=ev[key], **{label: ev[label],
                                                   label_time: ev[label_time]})
    joined = base.left_join(right, base[key] == right["__sqlcal_event_key"])
    return joined.select(*base.columns, label, label_time)


def check_time(base: ir.Table, col: str) -> None:
    """A time column is a timestamp or a date, or text the engine reads as one (every non-NULL
    row; the engine would otherwise fail mid-query on the first that is not)."""
    kind = base[col].type()
    if kind.is_timestamp() or kind.is_date():
        return
    if not kind.is_string():
        raise InvalidInputError(f"time column {col!r} is {kind}, not a timestamp or a date; "
                                "cast it, or name another column")
    value = base[col]
    bad = base.filter(value.notnull() & value.try_cast("timestamp").isnull()).count()
    try:
        count = int(executor.fetch(bad.as_table()).iloc[0, 0])
    except EngineDataError as e:  # an engine without TRY_CAST (PostgreSQL) casts, and says
        raise InvalidInputError(f"time column {col!r} holds text that is not a timestamp: "
                                f"{e}") from e
    if count:
        raise InvalidInputError(f"time column {col!r} has {count} rows that are not timestamps "
                                "('2026-11-01 08:00:00'); clean them or filter them out with "
                                "where=")


def periods(base: ir.Table, *, keys: dict[str, str], label: str, time: str,
            label_time: str | None, as_of: pd.Timestamp, grain: str, delays: Sequence[float],
            start: pd.Timestamp | None, end: pd.Timestamp | None, seconds: int,
            unknown_delay: int) -> ir.Table:
    """The table with the keys under their stored names (``keys``: ``{key: stored column}``),
    ``period_start`` (NULL for a NULL time: counted, never stored), ``delay`` (the label's
    delay bucket of ``delays``, ``unknown_delay`` when its arrival is not known) and the label
    as known at ``as_of``. The user's columns named like those are left out (a key is read
    before)."""
    if start is not None:  # on the raw time column (partition pruning); NULL times stay to be
        base = base.filter(base[time].isnull()  # counted
                           | (base[time] >= ibis.literal(start.to_pydatetime())))
    if end is not None:
        last = end + pd.Timedelta(seconds=seconds)
        base = base.filter(base[time].isnull() | (base[time] < ibis.literal(last.to_pydatetime())))
    when = base[time].cast("timestamp")
    period = when.truncate("D" if grain == "day" else "h")
    lab = base[label]
    zero = ibis.literal(False) if lab.type().is_boolean() else ibis.literal(0).cast(lab.type())
    lab = ibis.ifelse(lab.isnull(), zero, lab)  # unknown = "negative": not arrived yet
    if label_time is not None:
        arrived = base[label_time].cast("timestamp")
        lab = ibis.ifelse(arrived.notnull() & (arrived > ibis.literal(as_of.to_pydatetime())),
                          zero, lab)
        # whole seconds between prediction and label against each edge in seconds: one
        # subtraction per row (the engine repeats an expression in every WHEN otherwise)
        late = arrived.epoch_seconds() - when.epoch_seconds()
        bucket = ibis.cases(*[(late >= float(e) * 86400.0, k)
                              for k, e in reversed(list(enumerate(delays))) if k > 0], else_=0)
        delay = ibis.ifelse(arrived.isnull(), unknown_delay, bucket).cast("int64")
    else:
        delay = ibis.literal(unknown_delay, type="int64")
    stored = {col: base[k] for k, col in keys.items()}
    added = {**stored, "period_start": period, "delay": delay}
    kept = [c for c in base.columns if c not in added and c != label]
    return base.select(*kept, **{label: lab}, **added)


def due(rows: ir.Table, starts: Sequence) -> ir.Table:
    """The rows of the periods starting at ``starts``."""
    return rows.filter(rows.period_start.isin([ibis.literal(t) for t in starts]))


def fingerprint_sums(src: Source, keys: Sequence[str], free_delay: int) -> pd.DataFrame:
    """Per ``keys`` (the groups and the period), delay bucket of a positive (``free_delay`` for
    a negative, as the store keeps them) and label: the row count ``fp_n``, Σw ``fp_W`` and the
    sums of w, w·p, w·p² and w·sin(2^20·p) with each row's term rounded to a whole number of
    2^-20 (sums of whole numbers below 2^53 are exact in any order, so the same on every run and
    engine)."""
    r = src.rows
    y = r.y == 1
    scale = float(2**20)

    def whole(x):  # a row's term as a whole number of 2^-20
        return (x * scale).round().cast("float64")
    g = r.mutate(fp_delay=ibis.ifelse(y, r.delay, free_delay), fp_y=ibis.ifelse(y, 1, 0))
    per_group = g.group_by([*keys, "fp_delay", "fp_y"]).aggregate(
        fp_n=g.count(), fp_w=whole(g.w).sum(), fp_wp=whole(g.w * g.p).sum(),
        fp_wpp=whole(g.w * g.p * g.p).sum(),
        fp_wsin=whole(g.w * (g.p * HIGH_FREQUENCY).sin()).sum(), fp_W=g.w.sum())
    return executor.fetch(per_group)


def reduce_periods(src: Source, rows: ir.Table, keys: list[str], *, free_delay: int,
                   cells: int, bins: Sequence[tuple], sigmas: Sequence[float],
                   grids: Sequence[int], levels: bool) -> dict[str, Any]:
    """The scans behind every stored summary of ``rows``, each grouped by ``keys``, ``delay``
    read as ``free_delay`` for a negative row (a group then holds negatives only, or positives
    of one delay bucket) and the summary's key columns: ``"fused"`` (the totals' sums per cell
    and bin, the first scan, carrying the source's validation), ``"logit"`` (one frame per σ:
    step σ/20, clip 1e-6), ``"smooth"`` (one per grid) and ``"levels"``."""
    rows = rows.mutate(delay=ibis.ifelse(rows.y == 1, rows.delay, free_delay).cast("int64"))
    lead = [*keys, "delay"]
    out: dict[str, Any] = {"fused": executor.run(
        src, lambda checks: reductions.store_scan(rows, lead, cells, bins, checks=checks))}
    # the split moments LS-ECE's interval reads: their label parts are the label-free sums of
    # the positives' groups (the store's reader takes them there: sqlcal.monitor.store)
    logit = reductions.store_sums_of("logit", label=False)
    out["logit"] = [executor.fetch(reductions.logit_grid(rows, lead, s / 20, 1e-6,
                                                         weighted=True, stored=logit))
                    for s in sigmas]
    out["smooth"] = [executor.fetch(reductions.smooth_cells(rows, lead, cells, [h],
                                                            weighted=True)) for h in grids]
    if levels:
        out["levels"] = executor.fetch(reductions.store_levels(rows, lead))
    return out
