"""The summary store's writer and reader: ``snapshot`` reduces each period of a predictions table
to the summaries of :mod:`sqlcal.monitor.schema` and writes them, versioned, into sqlcal's own
tables; :func:`merged` adds the stored summaries of a window back up, in the store's engine.

It decides what the store holds and when (the spec, the periods due, their versions, the
manifest-last protocol); the queries that read the predictions (:mod:`sqlcal.query.periods`) and
the store's tables, and the store's one writer (:mod:`sqlcal.query.store_tables`), are the query
layer's: this module builds and runs none.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
import pandas as pd

from sqlcal._version import __version__
from sqlcal.errors import InvalidInputError, StoreError
from sqlcal.inputs.grids import CONVENTIONS
from sqlcal.inputs.sources import Source, resolve_table
from sqlcal.monitor import schema
from sqlcal.options import OptionError, checked
from sqlcal.query import periods as _periods
from sqlcal.query import store_tables
from sqlcal.query.declared import factors, store_sums
from sqlcal.query.executor import source
from sqlcal.query.store_tables import CONNECTIONS as _CONNECTIONS  # noqa: F401 (tests close them)
from sqlcal.query.store_tables import check_store_path, close, connect  # noqa: F401 (API)

#: the columns a snapshot adds to the rows; a `by` key may not take them
_ADDED = ("period_start", "delay")


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
             events: Any = None, key: str | None = None) -> pd.DataFrame:
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
        ``unknown="negative"``). A key may take any name (it is stored in a column
        ``key_<name>``). Rows with a NULL ``time`` belong to no period: refused with
        ``on_invalid="raise"``, counted and left out with ``"drop"``.
    time : str
        The prediction timestamp; periods are cut on it (UTC, half-open).
    store : str, path or Ibis connection
        Where the summary tables live: a DuckDB file (``.duckdb``, ``.ddb`` or ``.db``), a
        database URL or an Ibis backend; anything else (a Parquet or CSV path, a folder) is
        refused before any work.
    grain : {"day", "hour"}, default "day"
    start, end : date-like, optional
        The first and last period to snapshot (inclusive), each named by its start (a time
        inside a period is refused); default: every period in the data.
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
        One logit grid per LS-ECE noise scale σ (spacing σ/20, clip 1e-6), with the split
        moments of LS-ECE's interval.
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
        ``version`` and ``status`` (``"written"``, ``"unchanged"``, or ``"written by another
        run"`` that committed the same rows first); and with ``on_invalid="drop"``, a row
        ``period_start`` NaT, status ``"left out: NULL time"`` counting the rows without a time.

    See Also
    --------
    stored : reads a window of the summaries written here.
    detect : the change detector on the stored summaries.
    report : the metrics of one scan, without a store.

    Notes
    -----
    For binary labels every label-dependent sum is :math:`\sum_i w_i y_i f(p_i)`, so the sums
    with the labels known at age :math:`a` are the label-free sums plus the label sums of the
    delay buckets up to :math:`a` (the decomposition behind delayed-feedback calibration of
    Chapelle, KDD 2014). Idempotent: a period whose fingerprint is unchanged is not written
    again, and the run records (``sqlcal_checks``) that its stored version holds the labels as
    of ``as_of``, until the period is mature, so that a period whose labels stopped arriving
    early matures without a rewrite; a changed one gets the next version, which readers use once
    its manifest row exists. The fingerprint digests, per group, delay bucket and label, the row
    count and whole-number sums of w, w·p, w·p² and w·sin(2^20·p): it changes whenever a stored
    sum would. A run's rows, manifest and checks are one transaction on DuckDB and PostgreSQL
    (on PostgreSQL under an advisory lock: a concurrent run waits, then writes only what is
    still due).

    References
    ----------
    .. [1] O. Chapelle, "Modeling Delayed Feedback in Display Advertising", KDD, 2014.

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
    start = None if start is None else period_bound(start, grain, "start")
    end = None if end is None else period_bound(end, grain, "end")
    as_of = (as_timestamp(as_of) if as_of is not None
             else pd.Timestamp.now("UTC").tz_localize(None).floor("s"))
    con = connect(store, create=True)  # a store that is not a database is refused first
    base = resolve_table(data, table)
    if events is not None:
        base = _periods.joined_events(base, events, key=key, label=label, label_time=label_time)
    elif key is not None:
        raise OptionError("key= names the example id that joins events= to the predictions; "
                          "pass events= too (or leave key= out for the column layout)")
    try:
        for col in (time, label_time):
            if col is not None and col not in base.columns:
                raise InvalidInputError(f"column {col!r} is not in the table; its columns are "
                                        f"{list(base.columns)}")
            if col is not None:
                _periods.check_time(base, col)
        spec = {"summary_version": schema.SUMMARY_VERSION, "origin": _periods.origin(data, table),
                "score": score, "label": label,
                "weight": weight, "by": list(by), "time": time, "grain": grain,
                "label_time": label_time, "unknown": unknown, "delays": [float(d) for d in delays],
                "cells": int(cells), "bins": [list(b) for b in bins],
                "logit": [[s / 20, 1e-6] for s in ls_ece_sigma],
                "smooth": [int(h) for h in smooth_grids], "levels": bool(levels)}
        stored_keys = list(schema.key_columns(spec).values())
        _check_names(base, by, score=score, label=label, weight=weight, stored_keys=stored_keys)
        rows = _periods.periods(base, keys=schema.key_columns({"by": list(by)}), label=label,
                                time=time, label_time=label_time, as_of=as_of, grain=grain,
                                delays=delays, start=start, end=end, seconds=seconds,
                                unknown_delay=schema.DELAY_UNKNOWN)
        src = source(rows, score=score, label=label, weight=weight,
                     by=(*stored_keys, *_ADDED), where=where,
                     on_invalid=on_invalid).with_named_keys()  # the store's queries name them
        spec["where"] = src.where
        if events is not None:  # the column layout's spec (and hash) stay as they were
            spec |= {"layout": "events", "events": _periods.origin(events, None), "key": key}
        spec_hash = schema.spec_hash(spec)
        key_types = {k: str(src.rows[k].type()) for k in stored_keys}
        upgrade = _check_store(con, prefix, key_types)
        stored = current_versions(con, prefix)  # every spec's
        _check_layout(stored, prefix)

        keys = [*stored_keys, "period_start"]
        prints, untimed = _fingerprints(src)
        if untimed["n"] and on_invalid == "raise":
            raise InvalidInputError(
                f"time column {time!r} has {untimed['n']:,} rows with NULL: they belong to no "
                "period; fix them, or pass on_invalid='drop' to leave them out (they are counted "
                "in the result)")
        have = stored[stored["spec_hash"] == spec_hash].reset_index(drop=True)
        due = _due(prints, have, force)
        frames = {}
        if due:
            frames = _reduce_all(src, _periods.due(src.rows, due), keys, cells=cells,
                                 bins=bins, sigmas=ls_ece_sigma, grids=smooth_grids,
                                 levels=levels, max_levels=max_levels)
        with store_tables.writing(con, prefix) as writer:
            tables = writer.tables
            for name, cols in upgrade.items():  # an older version's tables: the new sums
                writer.add_columns(name, cols)
            if store_tables.engine(con) != "duckdb":  # what another run wrote since the reading
                have = current_versions(con, prefix, spec_hash)  # above, under the store's lock
            written = _due(prints[prints["period_start"].isin(due)], have, force)
            versions = _next_versions(con, prefix, spec_hash, written, have, tables)
            manifest = prints[prints["period_start"].isin(written)].copy()
            manifest["version"] = manifest["period_start"].map(versions).astype("int64")
            for kind, frame in frames.items():
                frame = frame[pd.to_datetime(frame["period_start"]).isin(written)]
                _write(writer, prefix, kind, _stored(frame, kind, spec_hash, manifest, by),
                       key_types)
            if schema.table_name("manifest", prefix) in tables:
                writer.clear_current(schema.table_name("manifest", prefix), spec_hash, written)
            end_of = pd.to_datetime(manifest["period_start"]) + pd.Timedelta(seconds=seconds)
            _write(writer, prefix, "manifest", pd.DataFrame(columns=[c for c, _ in schema.MANIFEST])
                   if not written else pd.DataFrame({
                "spec_hash": spec_hash, "spec": schema.canonical_json(spec),
                "period_start": manifest["period_start"], "period_end": end_of,
                "as_of": as_of, "version": manifest["version"], "current": True,
                "fingerprint": manifest["fingerprint"],
                "mature": end_of + pd.Timedelta(days=horizon_age) <= as_of,
                "rows_scanned": manifest["n"].astype("int64"),
                "n_groups": manifest["n_groups"].astype("int64"),
                "integer_weights": bool(src.integer_weights),
                "written_at": pd.Timestamp.now("UTC").tz_localize(None).floor("s"),
                "sqlcal_version": __version__}), key_types)
            confirmed = _confirmations(prints, have, written, as_of, horizon_age, seconds)
            _write(writer, prefix, "checks", confirmed.assign(spec_hash=spec_hash), key_types)
        out = prints.assign(version=0, status="unchanged")
        out.loc[out["period_start"].isin(written), "status"] = "written"
        by_another = out["period_start"].isin(set(due) - set(written))
        out.loc[by_another, "status"] = "written by another run"
        out = _report(out, have, versions)
        if untimed["n"]:
            out = pd.concat([out, pd.DataFrame([{
                "period_start": pd.NaT, "n": untimed["n"], "W": untimed["W"], "n_groups": 0,
                "version": 0, "status": "left out: NULL time"}])], ignore_index=True)
        return out
    finally:  # the frames Ibis registered to read in-memory data stay until exit else
        store_tables.forget_frames(base)


def _due(prints: pd.DataFrame, have: pd.DataFrame, force: bool) -> list:
    """The periods whose fingerprint differs from their stored version's (all with force)."""
    stored = dict(zip(have["period_start"], have["fingerprint"])) if len(have) else {}
    return [t for t, f in zip(prints["period_start"], prints["fingerprint"])
            if force or stored.get(t) != f]


def _confirmations(prints: pd.DataFrame, have: pd.DataFrame, written: list, as_of, age: float,
                   seconds: int) -> pd.DataFrame:
    """The checks rows of a run: each period found unchanged whose stored version's labels were
    known as of an earlier time and not yet mature, now known as of ``as_of``."""
    cols = [c for c, _ in schema.CHECKS]
    if not len(have):
        return pd.DataFrame(columns=cols)
    both = prints.merge(have[["period_start", "version", "fingerprint", "known_as_of"]],
                        on=["period_start", "fingerprint"], how="inner")
    both = both[~both["period_start"].isin(written)]
    final = both["period_start"] + pd.Timedelta(seconds=seconds) + pd.Timedelta(days=age)
    both = both[(both["known_as_of"] < as_of) & (both["known_as_of"] < final)]
    final = final.loc[both.index]
    return pd.DataFrame({
        "period_start": both["period_start"], "version": both["version"].astype("int64"),
        "as_of": as_of, "fingerprint": both["fingerprint"], "mature": final <= as_of,
        "checked_at": pd.Timestamp.now("UTC").tz_localize(None).floor("s")})


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
    if len(set(by)) != len(by) or not all(isinstance(k, str) for k in by):
        raise OptionError(f"by must name distinct columns, not {list(by)!r}")
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
        if convention not in CONVENTIONS:
            raise OptionError(f"bins convention must be one of {CONVENTIONS}, "
                              f"not {convention!r}")
    if any(not (0 < float(s) <= 10) for s in sigmas):
        raise OptionError(f"ls_ece_sigma values must lie in (0, 10], not {list(sigmas)!r}")
    if any(not (isinstance(h, (int, np.integer)) and h >= 1) for h in grids):
        raise OptionError(f"smooth_grids must be positive integers, not {list(grids)!r}")
    if not (isinstance(max_levels, (int, np.integer)) and max_levels >= 1):
        raise OptionError(f"max_levels must be a positive integer, not {max_levels!r}")


def _check_names(base, by, *, score, label, weight, stored_keys) -> None:
    """The score, label and weight columns may not take a name the snapshot gives its own
    columns (the keys are read under theirs before)."""
    own = {*_ADDED, *stored_keys}
    for option, col in (("score", score), ("label", label), ("weight", weight)):
        if col in own:
            raise OptionError(f"{option}: the column {col!r} has a name the snapshot gives its "
                              f"own columns ({sorted(own)}); rename it with a view")
    missing = [k for k in by if k not in base.columns]
    if missing:
        raise InvalidInputError(f"by: {missing} are not columns of the table; its columns are "
                                f"{list(base.columns)}")



def duration_days(text: str, option: str) -> float:
    """A duration option in days: ``"30d"`` → 30, ``"12h"`` → 0.5; an OptionError names
    ``option`` for anything else, a negative or a non-finite duration included.

    Examples
    --------
    >>> duration_days("12h", "settle")
    0.5
    """
    if isinstance(text, bool):
        days = None
    elif isinstance(text, (int, float)):
        days = float(text)
    else:
        unit = {"d": 1.0, "h": 1 / 24}.get(str(text)[-1:])
        try:
            days = float(str(text)[:-1]) * unit
        except (TypeError, ValueError):
            days = None
    if days is None or not math.isfinite(days) or days < 0:
        raise OptionError(f"{option} must be a duration >= 0 like '30d' or '12h', not {text!r}")
    return days


def period_bound(value: Any, grain: str, option: str) -> pd.Timestamp:
    """The start of the period ``value`` names; an OptionError naming ``option`` when it is not
    on the grain's boundary (``"2026-11-03 00:00:01"`` is not the start of a day: cutting there
    would snapshot parts of two days).

    Examples
    --------
    >>> period_bound("2026-11-03", "day", "start")
    Timestamp('2026-11-03 00:00:00')
    """
    try:
        ts = as_timestamp(value)
    except (TypeError, ValueError):
        raise OptionError(f"{option} must be a date, not {value!r}") from None
    unit = "D" if grain == "day" else "h"
    if pd.isna(ts) or ts.floor(unit) != ts:
        hint = "" if pd.isna(ts) else f", such as {str(ts.floor(unit))!r}"
        raise OptionError(f"{option} = {value!r} is not the start of a {grain}: name the "
                          f"period by its start{hint}")
    return ts


def as_timestamp(value: Any) -> pd.Timestamp:
    """A date-like value as a naive UTC timestamp (the store's timestamps are naive UTC)."""
    ts = pd.Timestamp(value)
    return ts.tz_convert("UTC").tz_localize(None) if ts.tzinfo is not None else ts


# -- the periods' fingerprints --------------------------------------------------------------


def _fingerprints(src: Source) -> tuple[pd.DataFrame, dict]:
    """Per period: the rows, Σw, the groups and a fingerprint that changes whenever a stored sum
    would (one aggregate, cheap next to the summaries); and the rows with a NULL time (``n``,
    ``W``), which belong to no period.

    The fingerprint digests, per group, delay bucket (of a positive; -1 for a negative, as the
    store keeps them) and label, the row count and the sums of w, w·p, w·p² and w·sin(2^20·p):
    a correction that keeps a period's totals (labels swapped between two rows, a row moved
    between groups, two scores moved in opposite directions) changes one of them, and the high
    frequency term catches a change of a score by about 1e-9. Each row's terms are rounded to
    multiples of 2^-20 before they are summed: sums of whole numbers below 2^53 are exact in
    any order, so the fingerprint of unchanged rows is the same on every run and engine (a
    float sum's last bits depend on the engine's order of addition)."""
    keys = [*src.by[:-2], "period_start"]
    frame = _periods.fingerprint_sums(src, keys, schema.DELAY_LABEL_FREE)
    frame["period_start"] = pd.to_datetime(frame["period_start"]).astype("datetime64[ns]")
    untimed = frame["period_start"].isna()
    null_time = {"n": int(frame.loc[untimed, "fp_n"].sum()),
                 "W": float(frame.loc[untimed, "fp_W"].sum())}
    frame = frame[~untimed]
    group_keys = [k for k in keys if k != "period_start"]
    frame = frame.sort_values("period_start", kind="stable", ignore_index=True)
    # one 64-bit hash per (group, delay, label) row (pandas' fixed key: the same on every run),
    # combined per period by XOR: the rows of a period are distinct, so any change shows
    lines = frame[["fp_delay", "fp_y", "fp_n", "fp_w", "fp_wp", "fp_wpp", "fp_wsin"]].assign(
        **{f"k{i}": frame[k].astype(str) for i, k in enumerate(group_keys)})
    hashes = pd.util.hash_pandas_object(lines, index=False).to_numpy()
    starts = np.flatnonzero(np.r_[True, frame["period_start"].to_numpy()[1:]
                                  != frame["period_start"].to_numpy()[:-1]]) if len(frame) \
        else np.array([], dtype=np.int64)
    out = frame.groupby("period_start", sort=True).agg(n=("fp_n", "sum"), W=("fp_W", "sum"))
    out["n_groups"] = (frame.drop_duplicates(["period_start", *group_keys])
                       .groupby("period_start").size() if group_keys else 1)
    digest = np.bitwise_xor.reduceat(hashes, starts) if len(frame) else []
    out["fingerprint"] = [f"{int(n)}:{int(h):016x}" for n, h in zip(out["n"], digest)]
    out = out.reset_index()
    out["n"] = out["n"].astype("int64")
    return out[["period_start", "n", "W", "n_groups", "fingerprint"]], null_time


# -- the reductions ----------------------------------------------------------------------------


def _reduce_all(src: Source, rows, keys: list[str], *, cells, bins, sigmas, grids,
                levels, max_levels) -> dict[str, pd.DataFrame]:
    """Every stored summary of ``rows`` (:func:`sqlcal.query.periods.reduce_periods`: one scan
    per kind, the first carrying the source's validation, each grouped by the keys, the
    summary's key columns and ``delay`` read as -1 for a negative row, so that a group holds
    negatives only, or positives of one delay bucket) as the stored rows: the label-free part
    is the sum over all of a key's groups (pandas, a few thousand rows); the label part is the
    label columns of the positive groups."""
    scans = _periods.reduce_periods(src, rows, keys, free_delay=schema.DELAY_LABEL_FREE,
                                    cells=cells, bins=bins, sigmas=sigmas, grids=grids,
                                    levels=levels)
    fused = scans["fused"]
    out = {"totals": _split(fused, keys, [], "totals"),
           "cells": _split(fused, keys, ["cell"], "cells").assign(cells=int(cells))}
    frames = [_split(fused.rename(columns={f"bin_{i}": "bin"}), keys, ["bin"], "bins").assign(
        bins=b, convention=c) for i, (b, c) in enumerate(bins)]
    out["bins"] = pd.concat(frames, ignore_index=True) if frames else None
    frames = []
    # a group of positives (y = 1) holds Σw·y·f = Σw·f: the label sums of the logit grid's
    # split moments are their label-free twins there (0 in the negatives' group)
    twins = {s.name: _label_free_twin(s) for s in store_sums("logit", label=True)}
    for sigma, grid in zip(sigmas, scans["logit"]):
        step, clip = sigma / 20, 1e-6
        negatives = grid["delay"] == schema.DELAY_LABEL_FREE
        grid = grid.assign(n_pos=np.where(negatives, 0, grid["n"]),
                           **{name: np.where(negatives, 0.0, grid[twin])
                              for name, twin in twins.items()})
        frames.append(_split(grid, keys, ["k"], "logit").assign(step=step, clip=clip))
    out["logit"] = pd.concat(frames, ignore_index=True) if frames else None
    frames = []
    for h, hist in zip(grids, scans["smooth"]):
        # negatives: swr = −Σwp, swrd = −Σwpd exactly; positives: Σwp = Σw − Σw(1 − p)
        neg = hist["delay"] == schema.DELAY_LABEL_FREE
        hist = hist.assign(swp=np.where(neg, -hist["swr"], hist["swy"] - hist["swr"]),
                           swpd=np.where(neg, -hist["swrd"], hist["swyd"] - hist["swrd"]),
                           n_pos=np.where(neg, 0, hist["n"]))
        frames.append(_split(hist.rename(columns={f"b_{h}": "interval"}), keys,
                             ["cell", "interval"], "smooth").assign(cells=int(cells), grid=int(h)))
    out["smooth"] = pd.concat(frames, ignore_index=True) if frames else None
    if levels:
        found = _split(scans["levels"], keys, ["p"], "levels")
        free = found[found["delay"] == schema.DELAY_LABEL_FREE]
        counts = free.groupby(keys, dropna=False).size()
        if len(counts) and counts.max() > max_levels:
            raise OptionError(
                f"levels: a group-period holds {int(counts.max()):,} distinct scores, more than "
                f"max_levels={max_levels:,}; round the scores, raise max_levels, or rely on the "
                "score cells (levels=False)")
        out["levels"] = found
    return {k: v for k, v in out.items() if v is not None}


def _label_free_twin(label_sum) -> str:
    """The label-free stored sum of the same table whose term is ``label_sum``'s without y."""
    term = [f for f in factors(label_sum.of) if f != "y"]
    table = label_sum.tables[0]
    return next(s.name for s in store_sums(table, label=False)
                if factors(s.of) == term and table in s.tables)


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


# -- writing -----------------------------------------------------------------------------------


def _check_store(con, prefix: str, key_types: dict) -> dict[str, list]:
    """Refuse to write over tables sqlcal did not write: a summary table without the manifest,
    tables whose columns differ from the schema. Returns the columns to add to the tables an
    older summary version wrote (:func:`sqlcal.monitor.schema.columns`: a version's sums come
    after the older ones, so those tables are this version's without them): ``{table: [(name,
    type), ...]}``, which the run's writer adds before it appends."""
    if store_tables.engine(con) == "postgres":
        long = [k for k in key_types if len(k.encode()) > 63]
        if long:  # PostgreSQL cuts an identifier at 63 bytes: two keys could share a column
            raise OptionError(f"by: the store keeps each key in a column key_<key>, and for "
                              f"{[k[4:] for k in long]} that name is longer than the 63 bytes "
                              "PostgreSQL keeps; rename the key with a view")
    names = store_tables.tables(con)
    manifest = schema.table_name("manifest", prefix)
    ours = {schema.table_name(k, prefix) for k in (*schema.TABLES, "checks")}
    if manifest not in names:
        found = sorted(names & ours)
        if found:
            raise StoreError(f"the store holds {found} but no manifest {manifest!r}: sqlcal did "
                             "not write them; choose another prefix=")
        return {}
    want = [c for c, _ in schema.MANIFEST]
    found = store_tables.columns(con, manifest)
    if found != want:
        raise StoreError(f"table {manifest!r} is not a sqlcal manifest (its columns are "
                         f"{found}); choose another prefix=")
    upgrade = {}
    for kind in (*schema.TABLES, "checks"):
        name = schema.table_name(kind, prefix)
        if name in names:
            cols = store_tables.columns(con, name)
            expected = schema.columns(kind, key_types)
            if cols == [c for c, _ in expected]:
                continue
            older = next((names for names in (
                [c for c, _ in schema.columns(kind, key_types, version=v)]
                for v in _extended()) if cols == names), None)
            if older is None:
                raise StoreError(f"table {name!r} has columns {cols}, not the "
                                 f"{[c for c, _ in expected]} this snapshot writes (other by "
                                 "keys?); choose another prefix=")
            upgrade[name] = expected[len(older):]
    return upgrade


def _extended() -> list[int]:
    """The older summary versions this one extends (:data:`sqlcal.monitor.schema.EXTENDS`):
    their tables are this version's without the sums added since, newest first."""
    base = schema.EXTENDS.get(schema.SUMMARY_VERSION, schema.SUMMARY_VERSION)
    return sorted((v for v in {base, *schema.EXTENDS} if v < schema.SUMMARY_VERSION
                   and schema.EXTENDS.get(v, v) == base), reverse=True)


def _check_layout(stored: pd.DataFrame, prefix: str) -> None:
    """Refuse to add to a store of an older layout (``stored``: every spec's current
    versions); a version this one extends (:data:`sqlcal.monitor.schema.EXTENDS`: the same
    tables, fewer sums) is continued."""
    layouts = {schema.stored_version(text) for text in set(stored["spec"])}
    continued = {schema.SUMMARY_VERSION, *_extended()}
    if layouts - continued:
        raise StoreError(
            f"prefix {prefix!r} holds summaries of layout {sorted(layouts)} (an older sqlcal); "
            f"this one writes layout {schema.SUMMARY_VERSION}. They stay readable "
            "(sqlcal.stored, sqlcal monitor); snapshot into a new prefix= and backfill it "
            "(sqlcal snapshot --since/--until), or drop the old tables")


def _stored(frame: pd.DataFrame, kind: str, spec_hash: str, manifest: pd.DataFrame,
            by: Sequence[str]) -> pd.DataFrame:
    """A summary frame with the leading columns of the schema, in its column order: the keys'
    stored columns ``key_0``, ... and their JSON ``group_keys`` under the keys' names."""
    frame = frame.copy()
    frame["period_start"] = pd.to_datetime(frame["period_start"]).astype("datetime64[ns]")
    frame["spec_hash"] = spec_hash
    frame["version"] = frame["period_start"].map(
        dict(zip(manifest["period_start"], manifest["version"]))).astype("int64")
    stored = list(schema.key_columns({"by": list(by)}).values())
    if by:  # one JSON text per group, joined on (a per-row loop took seconds a day)
        groups = frame[stored].drop_duplicates()
        groups["group_keys"] = [schema.group_keys(dict(zip(by, row)))
                                for row in groups.itertuples(index=False)]
        frame = frame.merge(groups, on=stored, how="left")
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


def _write(writer: store_tables.Writer, prefix: str, kind: str, frame: pd.DataFrame,
           key_types: dict) -> None:
    """Append ``frame`` to the store table ``kind`` through the run's writer (the table created
    on the first write; the manifest with its unique version)."""
    writer.append(schema.table_name(kind, prefix), frame, schema.columns(kind, key_types),
                  unique=_UNIQUE.get(kind, ()))


#: the store tables' unique columns, where the engine keeps constraints: a version of a period
#: is published once, however many runs write at the same time
_UNIQUE = {"manifest": ("spec_hash", "period_start", "version")}


def _next_versions(con, prefix: str, spec_hash: str, periods: list, have: pd.DataFrame,
                   tables: set) -> dict:
    """One more than any version of each period: in the manifest (``have``, its greatest
    versions) or in the totals table, which every version writes first (a snapshot that died
    before its manifest row leaves rows no reader sees; the next one goes above)."""
    if not periods:
        return {}
    top = dict.fromkeys(periods, 0)
    if len(have):
        for when, v in zip(have["period_start"], have["version"]):
            if when in top:
                top[when] = int(v)
    name = schema.table_name("totals", prefix)
    if name in tables:
        frame = store_tables.latest(con, name, "version", ["period_start"],
                                    where={"spec_hash": spec_hash})
        for when, v in zip(pd.to_datetime(frame["period_start"]), frame["version"]):
            if when in top:
                top[when] = max(top[when], int(v))
    return {t: v + 1 for t, v in top.items()}


# -- reading -----------------------------------------------------------------------------------


def manifest(store: Any, prefix: str = schema.PREFIX, tables: set | None = None
             ) -> pd.DataFrame:
    """The store's manifest (empty with the schema's columns when there is none)."""
    con = connect(store)
    name = schema.table_name("manifest", prefix)
    if name not in (store_tables.tables(con) if tables is None else tables):
        return pd.DataFrame(columns=[c for c, _ in schema.MANIFEST])
    frame = store_tables.read(con, name)
    for col in ("period_start", "period_end", "as_of", "written_at"):
        frame[col] = pd.to_datetime(frame[col]).astype("datetime64[ns]")
    return frame


def current_versions(store: Any, prefix: str = schema.PREFIX, spec_hash: str | None = None
                     ) -> pd.DataFrame:
    """Per (spec_hash, period_start): the manifest row of the greatest version, the one readers
    use, with ``known_as_of``: the latest of its ``as_of`` and of the runs that found the period
    unchanged (:data:`sqlcal.monitor.schema.CHECKS`), the time its labels are known as of."""
    con = connect(store)
    tables = store_tables.tables(con)
    frame = manifest(con, prefix, tables)
    if spec_hash is not None:
        frame = frame[frame["spec_hash"] == spec_hash]
    if not len(frame):
        return frame.assign(known_as_of=frame["as_of"])
    frame = frame.sort_values(["spec_hash", "period_start", "version"])
    frame = frame.groupby(["spec_hash", "period_start"], sort=True).tail(1).reset_index(drop=True)
    name = schema.table_name("checks", prefix)
    frame["known_as_of"] = frame["as_of"]
    if name in tables:
        confirmed = store_tables.latest(
            con, name, "as_of", ["spec_hash", "period_start", "version"],
            where=None if spec_hash is None else {"spec_hash": spec_hash}).rename(
            columns={"as_of": "confirmed"})
        confirmed["period_start"] = pd.to_datetime(confirmed["period_start"]).astype(
            "datetime64[ns]")
        confirmed["confirmed"] = pd.to_datetime(confirmed["confirmed"]).astype("datetime64[ns]")
        frame = frame.merge(confirmed, on=["spec_hash", "period_start", "version"], how="left")
        later = frame["confirmed"].notna() & (frame["confirmed"] > frame["known_as_of"])
        frame.loc[later, "known_as_of"] = frame.loc[later, "confirmed"]
        frame = frame.drop(columns=["confirmed"])
    return frame


def check_time(versions: pd.DataFrame, at: Any = None) -> pd.Timestamp:
    """The time a check ages periods at: ``at``, or the latest time the store's labels are
    known as of."""
    return versions["known_as_of"].max() if at is None else as_timestamp(at)


def mature(versions: pd.DataFrame, *, at: Any = None, horizon: Any = "30d", settle: Any = "1d",
           option: str = "horizon") -> pd.Series:
    """Which of the current versions hold their period's final labels at ``at``: the period is
    horizon + settle old by then, and its labels are known as of that age (``known_as_of``, its
    snapshot or a later run that found it unchanged). The one rule every reader of the mature
    view applies (stored windows, the maturity curve, the detector, the monitor's windows)."""
    age = duration_days(horizon, option) + duration_days(settle, "settle")
    final = versions["period_end"] + pd.Timedelta(days=age)
    return (final <= versions["known_as_of"]) & (final <= check_time(versions, at))


def label_age(versions: pd.DataFrame, at: Any = None) -> pd.Series:
    """Each period's age in days at ``at`` as its stored labels know it: from its end to the
    earlier of ``at`` and the time its labels are known as of."""
    known = versions["known_as_of"].clip(upper=check_time(versions, at))
    return (known - versions["period_end"]).dt.total_seconds() / 86400


def merged(store: Any, kind: str, *, prefix: str, spec_hash: str, versions: pd.DataFrame,
           by: Sequence[str], delays: Sequence[int] | None, params: dict | None = None
           ) -> pd.DataFrame:
    """The stored summary ``kind`` summed over the current versions of the periods of
    ``versions`` and the ``delays`` admitted (None: all), in the store's engine: one row per
    ``by`` (stored columns: ``key_0``, ..., ``period_start``, ``delay``) and key column.

    The current version of each period is the greatest one with a manifest row, selected by a
    join to the manifest in the engine (a window of any number of periods is one flat IN list,
    and no in-memory table is registered).

    The sums a later summary version added (:func:`sqlcal.monitor.schema.added_after`) are left
    out when a period of ``versions`` was written by an older one (its rows hold none of them,
    or NULL in a table a later snapshot upgraded: a sum over the window would miss that
    period's part), so a reader finds them absent, never partial."""
    table = schema.TABLES[kind]
    keys = [*by, *(c for c, _ in table["keys"])]
    oldest = min((schema.stored_version(s) for s in set(versions["spec"])),
                 default=schema.SUMMARY_VERSION)
    absent = schema.added_after(kind, oldest)
    rules = {name: "min" if name in schema.MINIMA else "max" if name in schema.MAXIMA else "sum"
             for name, _ in (*table["label_free"], *table["label"]) if name not in absent}
    frame = store_tables.merged(
        connect(store), schema.table_name(kind, prefix),
        manifest=schema.table_name("manifest", prefix), spec_hash=spec_hash,
        periods=versions["period_start"], delays=delays, params=params or {}, keys=keys,
        rules=rules)
    return frame.sort_values(keys, ignore_index=True) if keys else frame
