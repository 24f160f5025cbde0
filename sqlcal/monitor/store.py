"""The summary store's writer and reader: ``snapshot`` reduces each period of a predictions table
to the summaries of :mod:`sqlcal.monitor.schema` and writes them, versioned, into sqlcal's own
tables; :func:`merged` adds the stored summaries of a window back up, in the store's engine.

Like the query layer, this module builds queries (Ibis expressions, and one UPDATE through sqlglot
that clears the ``current`` flag of older versions): it reads the predictions and writes the store.
"""

from __future__ import annotations

import datetime as dt
import math
import os
from typing import Any, Sequence

import ibis
import ibis.expr.types as ir
import numpy as np
import pandas as pd

from sqlcal import summaries
from sqlcal._version import __version__
from sqlcal import inputs as _inputs
from sqlcal.errors import EngineDataError, InvalidInputError, redact
from sqlcal.monitor import schema
from sqlcal.options import OptionError, checked
from sqlcal.inputs import Source, connect_url, resolve_table, source

#: σ(±4): h(p) = clip(logit p, −4, 4)/4 is flat outside [σ(−4), σ(4)]
_H_LO, _H_HI = 1 / (1 + math.exp(4.0)), 1 / (1 + math.exp(-4.0))
#: the columns a snapshot adds to the rows; a `by` key may not take them
_ADDED = ("period_start", "delay")


class StoreError(ValueError):
    """The store holds tables sqlcal did not write, or written for another layout, or its path
    cannot be a store (a FIFO, a folder, the source's database)."""


@checked
def snapshot(data: Any, *, score: str, label: str, weight: str | None = None,
             by: str | Sequence[str] = (), time: str, store: Any, grain: str = "day",
             start: Any = None, end: Any = None, as_of: Any = None,
             label_time: str | None = None, unknown: str = "negative",
             delays: Sequence[float] = schema.DELAYS, horizon: str = "30d", settle: str = "1d",
             prefix: str = schema.PREFIX, cells: int = 2**14, bins: Sequence = (15,),
             ls_ece_sigma: Sequence[float] = (0.1,), smooth_grids: Sequence[int] = (1000,),
             levels: bool = False, max_levels: int = 65536, where: Any = None,
             table: str | None = None, on_invalid: str = "raise", force: bool = False,
             events: Any = None, key: str | None = None,
             _before_manifest=None) -> pd.DataFrame:
    r"""Reduce each period of a predictions table to its summaries, once, into a summary store.

    Each period (a day or an hour of ``time``) of each group becomes a few small rows per summary
    (:mod:`sqlcal.monitor.schema`): the totals, the equal-width bins of each of ``bins``, the
    score cells, LS-ECE's logit grid for each σ, smooth ECE's histogram, and optionally the
    levels. Each splits into a label-free part and label parts keyed by the label's delay bucket,
    so that any window, with the labels known at any age, is a sum of stored rows
    (:func:`sqlcal.monitor.stored.stored`).

    Parameters
    ----------
    data : ibis Table, str, path, tuple, or DataFrame
        The predictions, as for :func:`sqlcal.source`.
    score, label, weight, by, where, table, on_invalid
        As for :func:`sqlcal.source`. Labels must be 0/1 (NULL = not known yet, read as 0 with
        ``unknown="negative"``).
    time : str
        The prediction timestamp; periods are cut on it (UTC, half-open).
    store : str, path or Ibis connection
        Where the summary tables live: a DuckDB file, a connection URL or an Ibis backend.
    grain : {"day", "hour"}, default "day"
    start, end : date-like, optional
        The first and last period to snapshot (inclusive); default: every period in the data.
    as_of : datetime-like, optional
        The label cut-off: with ``label_time``, labels that arrived later count as 0. Recorded in
        the manifest (default: now, UTC).
    label_time : str, optional
        When each label became known; its delay ``label_time − time`` in days picks its delay
        bucket. Without it every label's delay is unknown (``delay = -2``), and only the
        ``"all"`` and ``"mature"`` views of the stored windows exist.
    events : ibis Table, DataFrame, path, or table name, optional
        The events layout: the outcomes live in a separate table with one row per example that
        has one (``key``, the outcome ``label`` 0/1 and its event time ``label_time``), joined to
        the predictions on ``key`` (a name is a table of the predictions' database). An example
        without an event row is a negative so far. The stored label parts are the ones the column
        layout stores for the joined rows: every view, the maturity curve and the detector read
        them unchanged.
    key : str, optional
        With ``events``: the example id column, in both tables (at most one event row per id).
    unknown : {"negative"}, default "negative"
        A row counts as negative until its positive label arrives (clicks, conversions).
    delays : sequence of float, default (0, 1, 2, 3, 5, 7, 14, 30)
        Delay-bucket lower edges in days, increasing from 0.
    horizon, settle : str, default "30d", "1d"
        A period is mature (its labels final) at age >= horizon + settle.
    prefix : str, default "sqlcal_"
        The store tables' prefix.
    cells : int, default 2**14
        The score grid (a power of two, 2^10 … 2^16).
    bins : sequence, default (15,)
        Equal-width binnings stored exactly: ``B`` or ``(B, convention)``.
    ls_ece_sigma : sequence of float, default (0.1,)
        One logit grid per LS-ECE noise scale σ (spacing σ/20, clip 1e-6).
    smooth_grids : sequence of int, default (1000,)
        Smooth ECE's interval grids (1000 serves its default bandwidth search).
    levels : bool, default False
        Also store the levels (one row per distinct score): exact cutoff error, isotonic, CORP.
    max_levels : int, default 65536
        Refuse levels when a group-period holds more distinct scores.
    force : bool, default False
        Re-snapshot periods whose fingerprint did not change.

    Returns
    -------
    pandas.DataFrame
        One row per period considered: ``period_start``, ``n``, ``W``, ``n_groups``,
        ``version`` and ``status`` (``"written"`` or ``"unchanged"``).

    Notes
    -----
    For binary labels every label-dependent sum is :math:`\sum_i w_i y_i f(p_i)`, so the sums
    with the labels known at age :math:`a` are the label-free sums plus the label sums of the
    delay buckets up to :math:`a` (the decomposition behind delayed-feedback calibration of
    Chapelle, KDD 2014). Idempotent: a period whose fingerprint (count, Σw, Σwp, Σwy of its rows)
    is unchanged is not written again; a changed one gets the next version, which readers use
    once its manifest row exists.

    Examples
    --------
    >>> import pandas as pd, sqlcal
    >>> df = pd.DataFrame({"p": [0.2, 0.7, 0.4, 0.9], "y": [0, 1, 1, 1],
    ...                    "t": pd.to_datetime(["2026-11-01 08:00", "2026-11-01 09:00",
    ...                                         "2026-11-02 10:00", "2026-11-02 11:00"])})
    >>> out = sqlcal.snapshot(df, score="p", label="y", time="t", store=":memory:",
    ...                       as_of="2026-11-03")
    >>> out[["period_start", "n", "version", "status"]]
      period_start  n  version   status
    0   2026-11-01  2        1  written
    1   2026-11-02  2        1  written
    """
    by = (by,) if isinstance(by, str) else tuple(by)
    bins = _binnings(bins)
    _check_options(by, grain, unknown, delays, cells, bins, ls_ece_sigma, smooth_grids,
                   max_levels)
    seconds = schema.GRAINS[grain]
    horizon_age = duration_days(horizon, "horizon") + duration_days(settle, "settle")
    as_of = (as_timestamp(as_of) if as_of is not None
             else pd.Timestamp.now("UTC").tz_localize(None).floor("s"))
    base = resolve_table(data, table)
    if events is not None:
        base = _joined_events(base, events, key=key, label=label, label_time=label_time)
    elif key is not None:
        raise OptionError("key= names the example id that joins events= to the predictions; "
                          "pass events= too (or leave key= out for the column layout)")
    for col in (time, label_time):
        if col is not None and col not in base.columns:
            raise InvalidInputError(f"column {col!r} is not in the table; its columns are "
                                    f"{list(base.columns)}")
        if col is not None:
            _check_time(base, col)
    rows = _periods(base, label=label, time=time, label_time=label_time, as_of=as_of,
                    grain=grain, delays=delays, start=start, end=end, seconds=seconds)
    src = source(rows, score=score, label=label, weight=weight, by=(*by, *_ADDED), where=where,
                 on_invalid=on_invalid)
    spec = {"summary_version": schema.SUMMARY_VERSION, "origin": _origin(data, table),
            "where": src.where, "score": score, "label": label,
            "weight": weight, "by": list(by), "time": time, "grain": grain,
            "label_time": label_time, "unknown": unknown, "delays": [float(d) for d in delays],
            "cells": int(cells), "bins": [list(b) for b in bins],
            "logit": [[s / 20, 1e-6] for s in ls_ece_sigma],
            "smooth": [int(h) for h in smooth_grids], "levels": bool(levels)}
    if events is not None:  # the column layout's spec (and hash) stay as they were
        spec |= {"layout": "events", "events": _origin(events, None), "key": key}
    spec_hash = schema.spec_hash(spec)
    con = connect(store)
    _check_store(con, prefix, by, src)

    keys = [*by, "period_start"]
    prints = _fingerprints(src)
    have = current_versions(con, prefix, spec_hash)
    have_print = dict(zip(have["period_start"], have["fingerprint"])) if len(have) else {}
    due = [t for t, f in zip(prints["period_start"], prints["fingerprint"])
           if force or have_print.get(t) != f]
    out = prints.assign(version=0, status="unchanged")
    if not due:
        return _report(out, have)
    todo = src.rows.filter(src.rows.period_start.isin([ibis.literal(t) for t in due]))
    frames = _reduce_all(src, todo, keys, cells=cells, bins=bins, sigmas=ls_ece_sigma,
                         grids=smooth_grids, levels=levels, max_levels=max_levels)
    versions = _next_versions(con, prefix, spec_hash, due)
    by_types = {k: str(src.rows[k].type()) for k in by}
    manifest = prints[prints["period_start"].isin(due)].copy()
    manifest["version"] = manifest["period_start"].map(versions).astype("int64")
    transaction = _begin(con)
    try:
        for kind, frame in frames.items():
            _write(con, prefix, kind, _stored(frame, kind, spec_hash, manifest, by), by_types)
        if _before_manifest is not None:  # tests: a crash between the rows and the manifest
            _before_manifest()
        rows_manifest = pd.DataFrame({
            "spec_hash": spec_hash, "spec": schema.canonical_json(spec),
            "period_start": manifest["period_start"],
            "period_end": manifest["period_start"] + pd.Timedelta(seconds=seconds),
            "as_of": as_of, "version": manifest["version"], "current": True,
            "fingerprint": manifest["fingerprint"],
            "mature": (as_of - manifest["period_start"] - pd.Timedelta(seconds=seconds))
            >= pd.Timedelta(days=horizon_age),
            "rows_scanned": manifest["n"].astype("int64"),
            "n_groups": manifest["n_groups"].astype("int64"),
            "integer_weights": bool(src.integer_weights),
            "written_at": pd.Timestamp.now("UTC").tz_localize(None).floor("s"),
            "sqlcal_version": __version__})
        _write(con, prefix, "manifest", rows_manifest, {})
        _clear_current(con, prefix, spec_hash, manifest)
        _commit(con, transaction)
    except BaseException:
        _rollback(con, transaction)
        raise
    out.loc[out["period_start"].isin(due), "status"] = "written"
    return _report(out, have, versions)


def _joined_events(base: ir.Table, events: Any, *, key: str | None, label: str,
                   label_time: str | None) -> ir.Table:
    """The events layout as the column layout: the predictions left-joined on ``key`` to the
    events table's outcome (``label``) and event time (``label_time``)."""
    if key is None or label_time is None:
        raise OptionError("events= needs key= (the example id in both tables) and label_time= "
                          "(the events table's event time column)")
    if isinstance(events, str) and not any(ch in events for ch in "/\\:.") and \
            (found := base._find_backend(use_default=True)) is not None and \
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
    dup = counts.filter(counts.k > 1).count().to_pyarrow().as_py()
    if dup:
        raise InvalidInputError(f"events: {dup:,} values of key {key!r} have more than one "
                                "event row; keep one row per example (its outcome and the time "
                                "it became known)")
    right = ev.select(__sqlcal_event_key=ev[key], **{label: ev[label],
                                                   label_time: ev[label_time]})
    joined = base.left_join(right, base[key] == right["__sqlcal_event_key"])
    return joined.select(*base.columns, label, label_time)


def _report(out: pd.DataFrame, have: pd.DataFrame, written: dict | None = None
            ) -> pd.DataFrame:
    """Each period's status and the version readers now use."""
    version = dict(zip(have["period_start"], have["version"])) if len(have) else {}
    version |= written or {}
    out["version"] = out["period_start"].map(version).fillna(0).astype("int64")
    return out[["period_start", "n", "W", "n_groups", "version", "status"]]


# -- options -----------------------------------------------------------------------------------


def _binnings(bins) -> list[tuple[int, str]]:
    out = []
    for b in bins:
        b = (b, "sqlcal") if isinstance(b, (int, np.integer)) else tuple(b)
        if len(b) != 2 or not isinstance(b[0], (int, np.integer)) or b[0] < 1:
            raise OptionError(f"bins= takes bin counts or (count, convention) pairs, not {b!r}")
        out.append((int(b[0]), str(b[1])))
    return out


def _check_options(by, grain, unknown, delays, cells, bins, sigmas, grids, max_levels) -> None:
    clash = sorted(set(by) & set(_ADDED))
    if clash:
        raise OptionError(f"by= may not name {clash}: the store adds those columns")
    if grain not in schema.GRAINS:
        raise OptionError(f"grain must be one of {sorted(schema.GRAINS)}, not {grain!r}")
    if unknown != "negative":
        raise OptionError(f"unknown must be 'negative', not {unknown!r} (the 'missing' "
                          "semantics of resolved-only labels are not stored yet)")
    d = [float(x) for x in delays]
    if not d or d[0] != 0 or any(b <= a for a, b in zip(d, d[1:])):
        raise OptionError(f"delays must increase from 0, not {list(delays)!r}")
    if not (isinstance(cells, (int, np.integer)) and 2**10 <= cells <= 2**16
            and cells & (cells - 1) == 0):
        raise OptionError(f"cells must be a power of two in [2^10, 2^16], not {cells!r}")
    for b, convention in bins:
        if convention not in summaries.CONVENTIONS:
            raise OptionError(f"bins convention must be one of {summaries.CONVENTIONS}, "
                              f"not {convention!r}")
    if any(not (0 < float(s) <= 10) for s in sigmas):
        raise OptionError(f"ls_ece_sigma values must lie in (0, 10], not {list(sigmas)!r}")
    if any(not (isinstance(h, (int, np.integer)) and h >= 1) for h in grids):
        raise OptionError(f"smooth_grids must be positive integers, not {list(grids)!r}")
    if not (isinstance(max_levels, (int, np.integer)) and max_levels >= 1):
        raise OptionError(f"max_levels must be a positive integer, not {max_levels!r}")


def duration_days(text: str, option: str) -> float:
    """A duration option in days: ``"30d"`` → 30, ``"12h"`` → 0.5 (an OptionError names
    ``option`` otherwise)."""
    if isinstance(text, (int, float)):
        return float(text)
    unit = {"d": 1.0, "h": 1 / 24}.get(str(text)[-1:])
    try:
        return float(str(text)[:-1]) * unit
    except (TypeError, ValueError):
        raise OptionError(f"{option} must look like '30d' or '12h', not {text!r}") from None


def as_timestamp(value: Any) -> pd.Timestamp:
    """A date-like value as a naive UTC timestamp (the store's timestamps are naive UTC)."""
    ts = pd.Timestamp(value)
    return ts.tz_convert("UTC").tz_localize(None) if ts.tzinfo is not None else ts


def _origin(data: Any, table: str | None) -> str:
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


# -- the rows: periods, delays, labels as of ---------------------------------------------------


def _periods(base: ir.Table, *, label, time, label_time, as_of, grain, delays, start, end,
             seconds) -> ir.Table:
    """The table with ``period_start``, ``delay`` and the label as known at ``as_of``."""
    when = base[time].cast("timestamp")
    period = when.truncate("D" if grain == "day" else "h")
    lab = base[label]
    zero = ibis.literal(False) if lab.type().is_boolean() else ibis.literal(0).cast(lab.type())
    lab = ibis.ifelse(lab.isnull(), zero, lab)  # unknown = "negative": not arrived yet
    if label_time is not None:
        arrived = base[label_time].cast("timestamp")
        lab = ibis.ifelse(arrived.notnull() & (arrived > ibis.literal(as_of.to_pydatetime())),
                          zero, lab)
        days = (arrived.epoch_seconds() - when.epoch_seconds()).cast("float64") / 86400.0
        bucket = ibis.cases(*[(days >= float(e), k) for k, e in reversed(list(enumerate(delays)))
                              if k > 0], else_=0)
        delay = ibis.ifelse(arrived.isnull(), schema.DELAY_UNKNOWN, bucket).cast("int64")
    else:
        delay = ibis.literal(schema.DELAY_UNKNOWN, type="int64")
    t = base.mutate(**{label: lab}, period_start=period, delay=delay)
    if start is not None:
        t = t.filter(base[time] >= ibis.literal(as_timestamp(start).to_pydatetime()))
    if end is not None:
        last = as_timestamp(end) + pd.Timedelta(seconds=seconds)
        t = t.filter(base[time] < ibis.literal(last.to_pydatetime()))
    return t


def _check_time(base: ir.Table, col: str) -> None:
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
        count = int(summaries.execute(bad.as_table()).iloc[0, 0])
    except EngineDataError as e:  # an engine without TRY_CAST (PostgreSQL) casts, and says
        raise InvalidInputError(f"time column {col!r} holds text that is not a timestamp: "
                                f"{e}") from e
    if count:
        raise InvalidInputError(f"time column {col!r} has {count} rows that are not timestamps "
                                "('2026-11-01 08:00:00'); clean them or filter them out with "
                                "where=")


def _fingerprints(src: Source) -> pd.DataFrame:
    """Per period: the rows, Σw, Σwp and Σwy (labels as known at as_of), and the groups: one
    aggregate over four columns, cheap next to the summaries."""
    r = src.rows
    per_group = r.group_by(["period_start", *src.by[:-2]]).aggregate(
        n=r.count(), W=r.w.sum(), swp=(r.w * r.p).sum(), swy=(r.w * r.y).sum())
    frame = summaries.execute(per_group)
    out = frame.groupby("period_start", sort=True).agg(
        n=("n", "sum"), W=("W", "sum"), swp=("swp", "sum"), swy=("swy", "sum"),
        n_groups=("n", "size")).reset_index()
    out["period_start"] = pd.to_datetime(out["period_start"]).astype("datetime64[ns]")
    out["fingerprint"] = [f"{int(n)}:{W:.12g}:{p:.12g}:{y:.12g}" for n, W, p, y in
                          zip(out["n"], out["W"], out["swp"], out["swy"])]
    return out[["period_start", "n", "W", "n_groups", "fingerprint"]]


# -- the reductions ----------------------------------------------------------------------------


def _reduce_all(src: Source, rows: ir.Table, keys: list[str], *, cells, bins, sigmas, grids,
                levels, max_levels) -> dict[str, pd.DataFrame]:
    """Every stored summary of ``rows``, one scan per kind (the first carries the source's
    validation). Each scan groups by the keys, the summary's key columns and ``delay`` read as -1
    for a negative row: a group then holds negatives only, or positives of one delay bucket.
    The label-free part is the sum over all of a key's groups (pandas, a few thousand rows); the
    label part is the label columns of the positive groups."""
    rows = rows.mutate(delay=ibis.ifelse(rows.y == 1, rows.delay,
                                         schema.DELAY_LABEL_FREE).cast("int64"))
    lead = [*keys, "delay"]
    fused = src.run(lambda checks: _fused(rows, lead, cells, bins, checks=checks))
    out = {"totals": _split(fused, keys, [], "totals"),
           "cells": _split(fused, keys, ["cell"], "cells").assign(cells=int(cells))}
    frames = [_split(fused.rename(columns={f"bin_{i}": "bin"}), keys, ["bin"], "bins").assign(
        bins=b, convention=c) for i, (b, c) in enumerate(bins)]
    out["bins"] = pd.concat(frames, ignore_index=True) if frames else None
    frames = []
    for sigma in sigmas:
        step, clip = sigma / 20, 1e-6
        grid = summaries.execute(summaries.logit_grid(rows, lead, step, clip, weighted=True))
        grid = grid.assign(n_pos=np.where(grid["delay"] == schema.DELAY_LABEL_FREE, 0,
                                          grid["n"]))
        frames.append(_split(grid, keys, ["k"], "logit").assign(step=step, clip=clip))
    out["logit"] = pd.concat(frames, ignore_index=True) if frames else None
    frames = []
    for h in grids:
        hist = summaries.execute(summaries.smooth_cells(rows, lead, cells, [h], weighted=True))
        # negatives: swr = −Σwp, swrd = −Σwpd exactly; positives: Σwp = Σw − Σw(1 − p)
        neg = hist["delay"] == schema.DELAY_LABEL_FREE
        hist = hist.assign(swp=np.where(neg, -hist["swr"], hist["swy"] - hist["swr"]),
                           swpd=np.where(neg, -hist["swrd"], hist["swyd"] - hist["swrd"]),
                           n_pos=np.where(neg, 0, hist["n"]))
        frames.append(_split(hist.rename(columns={f"b_{h}": "interval"}), keys,
                             ["cell", "interval"], "smooth").assign(cells=int(cells), grid=int(h)))
    out["smooth"] = pd.concat(frames, ignore_index=True) if frames else None
    if levels:
        found = _split(summaries.execute(_levels(rows, lead)), keys, ["p"], "levels")
        free = found[found["delay"] == schema.DELAY_LABEL_FREE]
        counts = free.groupby(keys, dropna=False).size()
        if len(counts) and counts.max() > max_levels:
            raise OptionError(
                f"levels: a group-period holds {int(counts.max()):,} distinct scores, more than "
                f"max_levels={max_levels:,}; round the scores, raise max_levels, or rely on the "
                "score cells (levels=False)")
        out["levels"] = found
    return {k: v for k, v in out.items() if v is not None}


def _split(frame: pd.DataFrame, keys: list[str], key_columns: list[str], kind: str
           ) -> pd.DataFrame:
    """A scan grouped by (keys, delay, key columns) as the stored rows: the label-free columns
    summed over the delays (delay = -1), the label columns of each positive delay group."""
    table = schema.TABLES[kind]
    free_cols = [c for c, _ in table["label_free"]]
    label_cols = [c for c, _ in table["label"]]
    rules = {c: "min" if c in schema.MINIMA else "max" if c in schema.MAXIMA else "sum"
             for c in free_cols}
    free = frame.groupby([*keys, *key_columns], dropna=False, sort=True).agg(rules).reset_index()
    free = free.assign(delay=schema.DELAY_LABEL_FREE, **{c: 0 for c in label_cols})
    labels = frame[frame["delay"] != schema.DELAY_LABEL_FREE]
    labels = labels.groupby([*keys, "delay", *key_columns], dropna=False, sort=True)[
        label_cols].sum().reset_index()
    labels = labels.assign(**{c: (np.nan if c in schema.MINIMA | schema.MAXIMA else 0)
                              for c in free_cols})
    return pd.concat([free, labels], ignore_index=True)


def _fused(rows: ir.Table, keys: list[str], cells: int, bins, *, checks=None) -> ir.Table:
    """One GROUP BY by the keys, the finest cell and each binning's bin: the totals, the cells
    and the bins are each a sum of its rows over the other key columns."""
    cols = {"cell": summaries.score_cell(rows.p, cells)}
    cols |= {f"bin_{i}": summaries.uniform_bin(rows.p, b, c) for i, (b, c) in enumerate(bins)}
    # each row's logarithms once, in a projection: the aggregates read them (five per row when
    # each aggregate took its own)
    p = rows.p
    t = rows.mutate(**cols, lnp=ibis.ifelse(p > 0, p, 1.0).ln(),
                    lnq=ibis.ifelse(p < 1, 1 - p, 1.0).ln(), h=_h(p), pq=p * (1 - p),
                    q2=(1 - 2 * p) * (1 - 2 * p))
    sums = _free_sums(t) | _label_sums(t)
    return t.group_by([*keys, *cols]).aggregate(**sums, **(checks(t) if checks else {}))


def _free_sums(t: ir.Table) -> dict:
    p, w, pq = t.p, t.w, t.pq
    return {
        "n": t.count(), "W": w.sum(), "sw2": (w * w).sum(), "swp": (w * p).sum(),
        "swpp": (w * p * p).sum(), "sw2_pq": (w * w * pq).sum(),
        "spieg_var": (w * (t.q2 * pq)).sum(), "sw2_spieg_var": (w * w * (t.q2 * pq)).sum(),
        "sw_lnq": (w * t.lnq).sum(),  # ln 1 = 0 at p = 1
        "n_p1": t.count(where=p == 1), "swp_h": (w * t.h * p).sum(),
        "p_min": p.min(), "p_max": p.max(),
    }


def _label_sums(t: ir.Table) -> dict:
    """Σw·y·f(p): labels are 0 or 1 (validated by the same scan)."""
    p, w, y = t.p, t.w, t.y
    wy = w * y
    return {
        "n_pos": t.count(where=y == 1), "swy": wy.sum(), "swyp": (wy * p).sum(),
        "swy_lnp": (wy * t.lnp).sum(),  # ln 1 = 0 at p = 0
        "swy_lnq": (wy * t.lnq).sum(),
        "n_pos_p0": t.count(where=(p == 0) & (y == 1)),
        "n_pos_p1": t.count(where=(p == 1) & (y == 1)),
        "swy_h": (wy * t.h).sum(),
    }


def _h(p: ir.FloatingValue) -> ir.FloatingValue:
    pc = ibis.greatest(ibis.least(p, _H_HI), _H_LO)
    return (pc / (1 - pc)).ln() / 4.0


def _levels(rows: ir.Table, keys: list[str]) -> ir.Table:
    p, w, y = rows.p, rows.w, rows.y
    sums = {"n": rows.count(), "W": w.sum(), "sw2": (w * w).sum(), "swp": (w * p).sum(),
            "swpp": (w * p * p).sum(), "sw2_pq": (w * w * p * (1 - p)).sum(),
            "n_pos": rows.count(where=y == 1), "swy": (w * y).sum(), "swyp": (w * y * p).sum(),
            "sw2y": (w * w * y).sum()}
    return rows.group_by([*keys, "p"]).aggregate(**sums)


# -- writing -----------------------------------------------------------------------------------


def connect(store: Any):
    """The Ibis connection of a store: a backend as is; a URL through ``ibis.connect``; a path
    (or ``":memory:"``) as a DuckDB database, opened for writing and kept open per path."""
    if hasattr(store, "list_tables"):
        return store
    store = os.fspath(store)
    if store in _CONNECTIONS:
        return _CONNECTIONS[store]
    if "://" in store and not store.startswith("duckdb://"):
        con = connect_url(store)
    else:
        path = store[len("duckdb://"):] if store.startswith("duckdb://") else store
        check_store_path(path)
        con = ibis.duckdb.connect(path or ":memory:")
    _CONNECTIONS[store] = con
    return con


def check_store_path(path: str, *, source: Any = None) -> None:
    """Refuse a DuckDB store path that cannot hold a store, before it is opened: one that exists
    and is not a regular file holding a DuckDB database (a FIFO would block, a folder or a text
    file fail late), the predictions' own database (``source``, or one this process reads
    through a read-only connection). A :class:`StoreError`; URLs and ``":memory:"`` pass."""
    if "://" in path or path in ("", ":memory:"):
        return
    if os.path.lexists(path):
        if not os.path.isfile(path):  # follows a symlink to the database it names
            raise StoreError(f"store {path!r} is not a regular file (a directory, a FIFO or a "
                             "device); name a DuckDB file or a database URL")
        with open(path, "rb") as f:
            head = f.read(12)
        if head[8:12] != b"DUCK":
            raise StoreError(f"store {path!r} exists and is not a DuckDB database; sqlcal never "
                             "writes over it: name a new file or a DuckDB database")
    if os.path.abspath(path) in _inputs.connections:
        raise StoreError(f"store {path!r} is open read-only in this process as a source of "
                         "predictions; the store must be another database")
    if isinstance(source, str):
        source = source.removeprefix("duckdb://")
        if "://" not in source and os.path.exists(source) and os.path.exists(path) \
                and os.path.samefile(path, source):
            raise StoreError(f"store {path!r} is the source's database; sqlcal only reads the "
                             "predictions: name another database for the store")


#: stores opened by path or URL, kept open (an in-memory DuckDB store lives as long as this)
_CONNECTIONS: dict[str, Any] = {}


def _check_store(con, prefix: str, by: Sequence[str], src: Source) -> None:
    """Refuse to write over tables sqlcal did not write: a summary table without the manifest,
    or tables whose columns differ from the schema (another layout, or user data)."""
    names = set(con.list_tables())
    manifest = schema.table_name("manifest", prefix)
    ours = {schema.table_name(k, prefix) for k in schema.TABLES}
    if manifest not in names:
        found = sorted(names & ours)
        if found:
            raise StoreError(f"the store holds {found} but no manifest {manifest!r}: sqlcal did "
                             "not write them; choose another prefix=")
        return
    want = [c for c, _ in schema.MANIFEST]
    if list(con.table(manifest).columns) != want:
        raise StoreError(f"table {manifest!r} is not a sqlcal manifest (its columns are "
                         f"{list(con.table(manifest).columns)}); choose another prefix=")
    by_types = {k: str(src.rows[k].type()) for k in by}
    for kind in schema.TABLES:
        name = schema.table_name(kind, prefix)
        if name in names:
            cols = list(con.table(name).columns)
            expected = [c for c, _ in schema.columns(kind, by_types)]
            if cols != expected:
                raise StoreError(f"table {name!r} has columns {cols}, not the {expected} this "
                                 f"snapshot writes (another by=?); choose another prefix=")


def _stored(frame: pd.DataFrame, kind: str, spec_hash: str, manifest: pd.DataFrame,
            by: Sequence[str]) -> pd.DataFrame:
    """A summary frame with the leading columns of the schema, in its column order."""
    frame = frame.copy()
    frame["period_start"] = pd.to_datetime(frame["period_start"]).astype("datetime64[ns]")
    frame["spec_hash"] = spec_hash
    frame["version"] = frame["period_start"].map(
        dict(zip(manifest["period_start"], manifest["version"]))).astype("int64")
    if by:  # one JSON text per group, joined on (a per-row loop took seconds a day)
        groups = frame[list(by)].drop_duplicates()
        groups["group_keys"] = [schema.group_keys(dict(zip(by, row)))
                                for row in groups.itertuples(index=False)]
        frame = frame.merge(groups, on=list(by), how="left")
    else:
        frame["group_keys"] = "{}"
    table = schema.TABLES[kind]
    for name, dtype in (*table["label_free"], *table["label"]):
        if name not in frame:
            frame[name] = np.nan if name in schema.MINIMA | schema.MAXIMA else 0
        if name in schema.MINIMA | schema.MAXIMA:
            continue
        frame[name] = frame[name].fillna(0).astype(dtype)
    return frame


def _write(con, prefix: str, kind: str, frame: pd.DataFrame, by_types: dict) -> None:
    name = schema.table_name(kind, prefix)
    cols = schema.columns(kind, by_types)
    if name not in con.list_tables():
        con.create_table(name, schema=ibis.schema(cols))
    frame = frame[[c for c, _ in cols]]
    con.insert(name, ibis.memtable(frame, schema=ibis.schema(cols)))


def _next_versions(con, prefix: str, spec_hash: str, periods: list) -> dict:
    """One more than any version of each period in the manifest or the totals table (a snapshot
    that died before its manifest row leaves rows no reader sees; the next one goes above)."""
    top = {t: 0 for t in periods}
    for kind in ("manifest", "totals"):
        name = schema.table_name(kind, prefix)
        if name not in con.list_tables():
            continue
        t = con.table(name)
        frame = summaries.execute(t.filter(t.spec_hash == spec_hash).group_by(
            "period_start").aggregate(v=t.version.max()))
        for when, v in zip(pd.to_datetime(frame["period_start"]), frame["v"]):
            if when in top:
                top[when] = max(top[when], int(v))
    return {t: v + 1 for t, v in top.items()}


def _begin(con):
    """A transaction on DuckDB (its connection is ours); other engines rely on the manifest-last
    protocol: rows without a manifest row are never read."""
    if getattr(con, "name", "") == "duckdb":
        con.con.begin()
        return True
    return False


def _commit(con, transaction) -> None:
    if transaction:
        con.con.commit()


def _rollback(con, transaction) -> None:
    if transaction:
        con.con.rollback()


def _clear_current(con, prefix: str, spec_hash: str, manifest: pd.DataFrame) -> None:
    """Clear ``current`` on the older versions of the periods just written (an UPDATE, where
    the engine has one; readers pick the greatest version either way)."""
    if getattr(con, "name", "") not in ("duckdb", "postgres"):
        return
    import sqlglot.expressions as exp

    name = schema.table_name("manifest", prefix)
    for when, v in zip(manifest["period_start"], manifest["version"]):
        cond = exp.and_(
            exp.column("spec_hash").eq(exp.Literal.string(spec_hash)),
            exp.column("period_start").eq(exp.cast(exp.Literal.string(
                pd.Timestamp(when).isoformat(sep=" ")), "timestamp")),
            exp.column("version").neq(exp.Literal.number(int(v))))
        update = exp.update(exp.to_table(name, quoted=True), {"current": exp.false()},
                            where=cond)
        con.raw_sql(update.sql(dialect=con.name))


# -- reading -----------------------------------------------------------------------------------


def manifest(store: Any, prefix: str = schema.PREFIX) -> pd.DataFrame:
    """The store's manifest (empty with the schema's columns when there is none)."""
    con = connect(store)
    name = schema.table_name("manifest", prefix)
    if name not in con.list_tables():
        return pd.DataFrame(columns=[c for c, _ in schema.MANIFEST])
    frame = summaries.execute(con.table(name))
    for col in ("period_start", "period_end", "as_of", "written_at"):
        frame[col] = pd.to_datetime(frame[col]).astype("datetime64[ns]")
    return frame


def current_versions(store: Any, prefix: str = schema.PREFIX, spec_hash: str | None = None
                     ) -> pd.DataFrame:
    """Per (spec_hash, period_start): the manifest row of the greatest version, the one readers
    use."""
    frame = manifest(store, prefix)
    if spec_hash is not None:
        frame = frame[frame["spec_hash"] == spec_hash]
    if not len(frame):
        return frame
    frame = frame.sort_values(["spec_hash", "period_start", "version"])
    return frame.groupby(["spec_hash", "period_start"], sort=True).tail(1).reset_index(drop=True)


def merged(store: Any, kind: str, *, prefix: str, spec_hash: str, versions: pd.DataFrame,
           by: Sequence[str], delays: Sequence[int] | None, params: dict | None = None
           ) -> pd.DataFrame:
    """The stored summary ``kind`` summed over the (period, version) pairs of ``versions`` and
    the ``delays`` admitted (None: all), in the store's engine: one row per group (``by``, a
    subset of the stored keys) and key column."""
    con = connect(store)
    t = con.table(schema.table_name(kind, prefix))
    table = schema.TABLES[kind]
    pairs = [(t.period_start == ibis.literal(pd.Timestamp(p).to_pydatetime()))
             & (t.version == int(v)) for p, v in zip(versions["period_start"],
                                                     versions["version"])]
    cond = [t.spec_hash == spec_hash, ibis.or_(*pairs) if pairs else ibis.literal(False)]
    if delays is not None:
        cond.append(t.delay.isin([int(d) for d in delays]))
    for name, value in (params or {}).items():
        cond.append(t[name] == value)
    t = t.filter(*cond)
    keys = [*by, *(c for c, _ in table["keys"])]
    aggs = {}
    for name, _ in (*table["label_free"], *table["label"]):
        col = t[name]
        aggs[name] = (col.min() if name in schema.MINIMA else col.max()
                      if name in schema.MAXIMA else col.sum())
    expr = t.group_by(keys).aggregate(**aggs) if keys else t.aggregate(**aggs)
    frame = summaries.execute(expr)
    return frame.sort_values(keys, ignore_index=True) if keys else frame
