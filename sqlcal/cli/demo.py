"""Realistic example tables of logged predictions, for the README and the tests: two weeks,
pre-aggregated, for reports (:func:`demo_frame`), or six weeks of single predictions with their
click times and a calibration break, for the daily monitoring loop (:func:`stream_frame`)."""

from __future__ import annotations

import os
import re
import stat

import duckdb
import numpy as np
import pandas as pd
import sqlglot

from sqlcal import options

#: the comment on each table :func:`write_demo` writes: a later demo may replace that database
DEMO_COMMENT = "sqlcal demo: example predictions, replaced by the next sqlcal demo"

# (model, segment) -> (slope, shift) of the true log-odds against the model's log-odds:
# slope < 1 means over-confident, shift > 0 means the model under-predicts.
MISCALIBRATION = {
    ("v1", "web"): (1.0, 0.0),
    ("v1", "ios"): (0.7, 0.0),
    ("v1", "android"): (1.0, 0.4),
    ("v1", "partner"): (1.3, -0.5),
    ("v2", "web"): (1.0, 0.0),
    ("v2", "ios"): (0.95, 0.0),
    ("v2", "android"): (1.0, 0.1),
    ("v2", "partner"): (1.1, -0.2),
}


#: the memory one event of :func:`demo_frame` takes while the frame is drawn and aggregated
#: (measured with tracemalloc at 10^6 rows: 179 bytes at the peak)
DEMO_ROW_BYTES = 200


def demo_frame(rows: int = 200_000, days: int = 14, seed: int = 0) -> pd.DataFrame:
    """Logged click predictions: two model versions, four segments, ``days`` days.

    ``rows`` events are drawn, then pre-aggregated as warehouses often store them: one row per
    (model, segment, day, score, label) with ``weight`` = the number of identical events, so the
    weight is a true frequency weight. Columns: ``model``, ``segment``, ``day`` (DATE), ``score``
    (the model's probability, rounded to 0.001 as a served model logs it), ``label`` (0/1 outcome),
    ``weight``. The partner segment drifts: its shift grows by 0.05 a day.
    """
    needed = DEMO_ROW_BYTES * rows
    if needed > options.BUDGET.bytes:  # checked before any array is drawn
        raise options.BudgetError(
            f"demo: rows={rows:,} would take about {needed / 2**30:.3g} GiB to draw "
            f"({DEMO_ROW_BYTES} bytes an event); the budget is "
            f"{options.BUDGET.bytes / 2**30:.3g} GiB (sqlcal.options.BUDGET.bytes). Pass rows <= "
            f"{options.BUDGET.bytes // DEMO_ROW_BYTES:,}, or raise the budget with "
            "sqlcal.options.budget(bytes=...)")
    rng = np.random.default_rng(seed)
    keys = list(MISCALIBRATION)
    which = rng.integers(0, len(keys), rows)
    day = rng.integers(0, days, rows)
    score = np.round(1 / (1 + np.exp(-rng.normal(-1.2, 1.3, rows))), 3)
    logit = np.log(np.clip(score, 1e-4, 1) / np.clip(1 - score, 1e-4, 1))
    slope = np.array([MISCALIBRATION[k][0] for k in keys])[which]
    shift = np.array([MISCALIBRATION[k][1] for k in keys])[which]
    partner = np.array([k[1] == "partner" for k in keys])[which]
    shift = shift + np.where(partner, 0.05 * day, 0.0)
    true_p = 1 / (1 + np.exp(-(slope * logit + shift)))
    events = pd.DataFrame({
        "model": np.array([k[0] for k in keys])[which],
        "segment": np.array([k[1] for k in keys])[which],
        "day": (np.datetime64("2026-11-01") + day.astype("timedelta64[D]")).astype("datetime64[D]"),
        "score": score,
        "label": (rng.random(rows) < true_p).astype(np.int8),
    })
    keys = ["model", "segment", "day", "score", "label"]
    logged = events.groupby(keys, as_index=False).size().rename(columns={"size": "weight"})
    logged["weight"] = logged["weight"].astype(np.float64)
    return logged.sample(frac=1, random_state=seed, ignore_index=True)


#: the monitoring stream: its first day, its length, and the break the detector should find
STREAM_START, STREAM_DAYS = np.datetime64("2026-11-01"), 42
#: (model, segment), first day of the break (index), added log-odds: an app release on day 28
#: makes v2 under-predict on android (the model's scores unchanged, the clicks up)
STREAM_BREAK = (("v2", "android"), 28, 0.6)

def stream_frame(rows: int = 200_000, days: int = STREAM_DAYS, seed: int = 0) -> pd.DataFrame:
    """Single logged click predictions for the monitoring loop: two model versions, four
    segments, ``days`` days from :data:`STREAM_START`, one row per prediction.

    Columns: ``model``, ``segment``, ``predicted_at`` (TIMESTAMP), ``score`` (rounded to 0.001,
    as a served model logs it), ``label`` (1 = clicked), ``label_at`` (the click's time, within
    two days of the prediction; NULL without a click). Every group is calibrated within the
    detector's default tolerance until :data:`STREAM_BREAK`: from its day on, v2 on android
    clicks more than its scores say (its log-odds up by 0.6).
    """
    rng = np.random.default_rng(seed + 1)
    keys = list(MISCALIBRATION)
    which = rng.integers(0, len(keys), rows)
    day = rng.integers(0, days, rows)
    score = np.round(1 / (1 + np.exp(-rng.normal(-1.2, 1.3, rows))), 3)
    logit = np.log(np.clip(score, 1e-4, 1) / np.clip(1 - score, 1e-4, 1))
    (model, segment), first, shift = STREAM_BREAK
    broken = np.array([k == (model, segment) for k in keys])[which] & (day >= first)
    clicked = rng.random(rows) < 1 / (1 + np.exp(-(logit + np.where(broken, shift, 0.0))))
    seconds = rng.integers(0, 86400, rows)
    predicted = STREAM_START + (day * 86400 + seconds).astype("timedelta64[s]")
    # clicks arrive within minutes to hours, a few the next day (exponential, mean 3 hours)
    delay = np.minimum(rng.exponential(3 * 3600, rows), 2 * 86400 - 1).astype("timedelta64[s]")
    frame = pd.DataFrame({
        "model": np.array([k[0] for k in keys])[which],
        "segment": np.array([k[1] for k in keys])[which],
        "predicted_at": predicted.astype("datetime64[us]"),
        "score": score,
        "label": clicked.astype(np.int8),
        "label_at": pd.Series((predicted + delay).astype("datetime64[us]")).where(clicked),
    })
    return frame.sort_values("predicted_at", ignore_index=True)


def write_demo(path: str = "demo.duckdb", table: str = "predictions", *, stream: bool = False,
               **kwargs) -> str:
    """Write :func:`demo_frame` (with ``stream``, :func:`stream_frame`) as a table of a new
    DuckDB database; returns the path.

    The database is created only where no file is, or over a database that holds nothing but
    tables a previous ``write_demo`` wrote (each carries the comment :data:`DEMO_COMMENT`): a
    database with any other object (a table of yours, a results table, a view, a macro, a
    sequence, a type, an index, a schema), any other file, a symlink, a FIFO or a folder is
    refused with :class:`sqlcal.outputs.OutputError` before anything is written. The database is
    built in sqlcal's temporary folder beside ``path`` and renamed into place
    (:func:`sqlcal.outputs.replacing`), so an interrupted run leaves the old file or none.

    Parameters
    ----------
    path : str, default "demo.duckdb"
    table : str, default "predictions"
        Letters, digits and ``_``.
    **kwargs
        Passed to :func:`demo_frame` (``rows`` events, ``days``, ``seed``).
    """
    import pyarrow as pa

    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", table):
        raise ValueError(f"demo table name {table!r}: use letters, digits and _")
    path = os.fspath(path)
    check_demo_path(path)
    if stream:
        arrow = pa.Table.from_pandas(stream_frame(**kwargs), preserve_index=False)
    else:
        arrow = pa.Table.from_pandas(demo_frame(**kwargs), preserve_index=False)
        arrow = arrow.set_column(arrow.schema.get_field_index("day"), "day",
                                 arrow["day"].cast(pa.date32()))
    _release(path)
    from sqlcal.outputs import replacing

    # built beside path in sqlcal's locked temporary folder, renamed into place; a kill leaves
    # the folder, which the next write into this folder removes
    with replacing(path) as built:
        con = duckdb.connect(built)
        try:
            con.from_arrow(arrow).create(table)
            # the statement is built by sqlglot, the name quoted and the comment a literal
            name = sqlglot.exp.Table(this=sqlglot.exp.to_identifier(table, quoted=True))
            con.execute(sqlglot.exp.Comment(this=name, kind="TABLE",
                                            expression=sqlglot.exp.Literal.string(DEMO_COMMENT))
                        .sql("duckdb"))
        finally:
            con.close()
        check_demo_path(path)  # nothing else appeared there meanwhile
    return path


def check_demo_path(path: str) -> None:
    """Refuse a demo database path that holds anything but a previous demo (see
    :func:`write_demo`); raises :class:`sqlcal.outputs.OutputError`."""
    from sqlcal.outputs import OutputError, data_kind

    shown = f"demo database {path!r}"
    if os.path.islink(path):
        raise OutputError(f"{shown} is a symlink; pass a new path")
    if os.path.isdir(path):
        raise OutputError(f"{shown} is a directory; pass a file path such as "
                          f"{os.path.join(path, 'demo.duckdb')!r}")
    if not os.path.lexists(path):
        return
    if not stat.S_ISREG(os.lstat(path).st_mode):
        raise OutputError(f"{shown} is not a regular file (a FIFO, a socket or a device); pass "
                          "a new path")
    if data_kind(path) != "a DuckDB database":
        raise OutputError(f"{shown} exists and is not a DuckDB database a previous sqlcal demo "
                          "wrote; sqlcal demo writes only a new file: pass a new path")
    if os.path.exists(path + ".wal"):
        raise OutputError(f"{shown} has a write-ahead log ({path}.wal): it is open elsewhere or "
                          "was not closed cleanly; pass a new path")
    con = duckdb.connect(path, read_only=True)
    try:
        objects = _objects(con)
    finally:
        con.close()
    other = [f"{kind} {name}" for kind, name, comment in objects
             if kind != "table" or comment != DEMO_COMMENT]
    if other:
        raise OutputError(f"{shown} holds objects a previous sqlcal demo did not write "
                          f"({', '.join(other)}); sqlcal demo never replaces them: pass a new "
                          "path")


#: the catalog of a DuckDB database: (kind, function, name column, its filter); a demo database
#: holds tables only, and any other object (a macro, a sequence, a type...) is the user's
_CATALOG = (
    ("table", "duckdb_tables", "table_name", "NOT internal AND NOT temporary"),
    ("view", "duckdb_views", "view_name", "NOT internal AND NOT temporary"),
    ("sequence", "duckdb_sequences", "sequence_name", "NOT temporary"),
    ("macro", "duckdb_functions", "function_name", "NOT internal"),
    ("type", "duckdb_types", "type_name", "NOT internal"),
    ("index", "duckdb_indexes", "index_name", "TRUE"),
    ("schema", "duckdb_schemas", "schema_name", "NOT internal"),
)


def _objects(con) -> list[tuple[str, str, str | None]]:
    """Every object the user can create in the database of ``con``: (kind, name, comment)."""
    found = []
    for kind, function, name, keep in _CATALOG:
        found += [(kind, n, c) for n, c in con.execute(
            f"SELECT {name}, comment FROM {function}() "
            f"WHERE database_name = current_database() AND {keep} ORDER BY 1").fetchall()]
    return found


def _release(path: str) -> None:
    # a connection sqlcal.source cached to the old file would keep reading it after the rename
    from sqlcal.inputs.sources import connections

    held = connections.pop(os.path.abspath(path), None)
    if held is not None:
        held.disconnect()
