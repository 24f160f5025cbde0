"""The SQL sqlcal runs, exported: ``summary_sql`` gives the statements of the summaries a metric
reads, ``from_summaries`` finishes the metric from the frames those statements return, wherever
they ran (a scheduler that runs SQL only, dbt, a warehouse's own jobs, stored daily summaries).

Both come from the declarations the library itself uses (each metric's registration, the
reductions of :mod:`sqlcal.query.reductions`), so the exported SQL is the SQL that runs. A metric
whose summaries are one-shot (read in one pass, with no follow-up that depends on the data) exports
them: the equal-width binned metrics, the totals metrics, the grid form of the cumulative metrics
(``method="grid"``, which reports its certified ``grid_bound``). A form that refines with follow-up
passes (equal-mass bins, the exact cutoff error) exports instead the one-shot exact summary, the
**levels** (one row per group and distinct score, so as large as the number of distinct scores):
every summary of binary-labelled rows is a function of the levels, and :func:`from_summaries`
evaluates the follow-ups from them in pandas (:mod:`sqlcal.query.local`), exactly.
"""

from __future__ import annotations

import inspect
from typing import Any, Sequence

import ibis
import pandas as pd

from sqlcal.errors import InvalidInputError
from sqlcal.inputs.condition import parse_condition
from sqlcal.inputs.groupkeys import NAN, NULL, GroupKeys
from sqlcal.inputs.sources import Source
from sqlcal.metrics._registry import get, registered
from sqlcal.options import check as check_options
from sqlcal.query import declared, executor, reductions
from sqlcal.query.declared import union
from sqlcal.query.executor import source
from sqlcal.query.sql import to_sql


def exportable() -> list[str]:
    """The metrics :func:`summary_sql` exports (some only with a one-shot option)."""
    return sorted(registered())


def summary_sql(metric: str, *, dialect: str = "duckdb", table: str, score: str, label: str,
                weight: str | None = None, by: str | Sequence[str] = (), where: str | None = None,
                schema: dict[str, str] | None = None, **options: Any) -> dict[str, str]:
    """The SQL statements of the summaries a metric reads, one per summary.

    Parameters
    ----------
    metric : str
        A metric function's name (see :func:`exportable`).
    dialect : str, default "duckdb"
        A dialect Ibis compiles to: duckdb, postgres, bigquery, snowflake, trino, databricks
        or spark (Spark SQL), ...
    table : str
        The table to read, optionally ``"schema.table"``.
    score, label, weight, by, where
        As for the metric. ``where`` may name only columns that ``schema`` declares; it is
        read as SQL of ``dialect`` (a string's escapes, a type's name), as the engine would.
    schema : dict, optional
        Types of the table's columns (Ibis type names). Default: ``score``, ``label`` and
        ``weight`` DOUBLE, group keys text.
    **options
        The metric's options (``bins=``, ``strategy=``, ...).

    Returns
    -------
    dict
        Summary name (``"uniform_bins_15"``, ``"totals"``, ``"score_cells_1024"``) -> one SQL
        statement returning that summary per group, with the validation aggregates (``chk_*``)
        that :func:`from_summaries` checks.

    Raises
    ------
    ValueError
        For a metric that is not exported, or options whose form needs follow-up passes (the
        message names the one-shot option to pass instead).

    See Also
    --------
    from_summaries : finishes the metric from these statements' results.
    report : runs the statements and finishes the metrics in one call.

    Examples
    --------
    >>> sql = summary_sql("ece", table="preds", score="p", label="y", by="segment")
    >>> list(sql)
    ['uniform_bins_15']
    >>> "GROUP BY" in sql["uniform_bins_15"]
    True
    """
    return statements({metric: options}, dialect=dialect, table=table, score=score,
                      label=label, weight=weight, by=by, where=where, schema=schema)


def statements(metrics: dict[str, dict], *, dialect: str = "duckdb", table: str, score: str,
               label: str, weight: str | None = None, by: str | Sequence[str] = (),
               where: str | None = None, schema: dict[str, str] | None = None,
               internal_keys: bool = False) -> dict[str, str]:
    """:func:`summary_sql` for several metrics at once (metric -> options): one statement per
    distinct summary, holding every column any of them reads. ``internal_keys`` leaves the
    keys under their internal names (``__key0``...; the dbt package templates them) instead of
    renaming them to the caller's in a last projection."""
    needs, src = [], None
    dialect = {"spark": "databricks", "pyspark": "databricks"}.get(dialect, dialect)
    for metric, options in metrics.items():
        src, chosen = _spec(metric, table=table, score=score, label=label, weight=weight, by=by,
                            where=where, schema=schema, options=options, dialect=dialect)
        needs += _needs(metric, src, chosen)
    checks = lambda t: reductions.check_aggregates(t, weighted=src.weighted,  # noqa: E731
                                                  float_label=src.float_label)
    out = {}
    for s in union(needs):
        with reductions.building_for(dialect):  # as the executor builds it for that engine
            expr = reductions.reduce(s, src.rows, src.by, weighted=src.weighted, checks=checks,
                                    soft=src.allow_soft)
        if not internal_keys:
            expr = _named(expr, src.group_keys)
        header = _LEVELS_HEADER if s.key == LEVELS.key else ""
        out[s.name] = header + to_sql(expr, dialect) + ";"
    return out


def from_summaries(metric: str, frames: dict[str, pd.DataFrame], *, score: str = "score",
                   label: str = "label", weight: str | None = None,
                   by: str | Sequence[str] = (), **options: Any) -> pd.DataFrame:
    """Finish a metric from the summaries :func:`summary_sql`'s statements returned.

    Parameters
    ----------
    metric : str
        As given to :func:`summary_sql`.
    frames : dict
        Summary name -> the frame its statement returned (any engine, any client).
    score, label : str
        Only for messages.
    weight : str, optional
        The weight column the statements were made with (None: unweighted).
    by : str or sequence of str
        The group keys the statements were made with.
    **options
        The metric's options, as given to :func:`summary_sql`.

    Returns
    -------
    pandas.DataFrame
        The metric's result table, equal to the direct call on the same rows.

    See Also
    --------
    summary_sql : the statements whose results this finishes.
    report : several metrics in one call, when sqlcal can run the queries itself.
    stored : a source over summaries kept in a summary store.

    Examples
    --------
    >>> import duckdb, pandas as pd
    >>> preds = pd.DataFrame({"p": [0.1, 0.2, 0.8, 0.9], "y": [0, 1, 1, 1]})
    >>> sql = summary_sql("ece", table="preds", score="p", label="y", bins=2)
    >>> frames = {name: duckdb.sql(text).df() for name, text in sql.items()}
    >>> from_summaries("ece", frames, score="p", label="y", bins=2)[["ece", "n", "W", "binning"]]
        ece  n    W             binning
    0  0.25  4  4.0  uniform(2, sqlcal)
    """
    table = "summaries"
    by = (by,) if isinstance(by, str) else tuple(by)
    # a floating key's statements carry its NaN flag, an integer key's its NULL flag: the key
    # read as such (by default a key is text)
    types = {k: "float64" if any(NAN.format(i) in f for f in frames.values()) else "int64"
             for i, k in enumerate(by) if any(flag.format(i) in f for f in frames.values()
                                              for flag in (NAN, NULL))}
    src, chosen = _spec(metric, table=table, score=score, label=label, weight=weight, by=by,
                        where=None, schema=types or None, options=options)
    frames = {name: _internal(frame, src.group_keys) for name, frame in frames.items()}
    needs = _needs(metric, src, chosen)
    missing = [s.name for s in needs if s.name not in frames]
    if LEVELS.name in frames and (missing or needs == [LEVELS]):  # any metric, from the levels
        return _from_levels(metric, src, chosen, frames[LEVELS.name])
    if missing:
        raise ValueError(f"{metric} needs the summaries {missing}; got {sorted(frames)}")
    for i, s in enumerate(needs):
        frame = frames[s.name].copy()
        expected = [*src.by, *([s.key_column] if s.key_column else []), "n"]
        absent = [c for c in expected if c not in frame]
        if absent:
            raise ValueError(f"summary {s.name!r} has no columns {absent}: pass the frame its "
                             "statement returned, with the same by= and weight=")
        frame = _as_numbers(frame, [*src.by, *([s.key_column] if s.key_column else [])])
        checks = [c for c in frame if c.startswith("chk_")]
        if checks and not src.validated:
            executor.validate(src, frame)
        frame = frame.drop(columns=checks)
        executor.store(src, s.key, s.parts, frame)
    if not src.validated:
        raise ValueError("the summaries carry no validation columns (chk_*): pass the frames "
                         "summary_sql's statements returned")
    src.forbid_queries(f"{metric} with these options needs more than its exported summaries")
    return get(metric).function(src, **chosen)


def _spec(metric, *, table, score, label, weight, by, where, schema, options, dialect="duckdb"
          ) -> tuple[Source, dict]:
    if metric not in registered():
        raise ValueError(f"summary_sql exports {exportable()}, not {metric!r}")
    function = get(metric).function
    defaults = {k: p.default for k, p in inspect.signature(function).parameters.items()
                if p.default is not inspect.Parameter.empty}
    options = check_options(metric, options)  # the metric's own declared checks and budget
    foreign = sorted(set(options) - set(defaults))
    if foreign:
        raise TypeError(f"{metric}: {foreign} are options of the source, which an exported "
                        "statement does not take (it measures every row of the table; invalid "
                        "rows are counted in its chk_* columns)")
    chosen = {**{k: defaults[k] for k in defaults if k not in
                 ("score", "label", "weight", "by", "where")}, **options}
    by = (by,) if isinstance(by, str) else tuple(by)
    for name, value in (("table", table), ("score", score), ("label", label)):
        if not isinstance(value, str) or not value:
            raise TypeError(f"summary_sql: {name}= must be a name (str), not {value!r}")
    types = {**{k: "string" for k in by}, score: "float64", label: "float64",
             **({weight: "float64"} if weight else {}), **(schema or {})}
    *prefix, name = table.split(".")  # [catalog.][schema.]table
    if len(prefix) > 2:
        raise ValueError(f"table {table!r}: expected table, schema.table or catalog.schema.table")
    t = ibis.table(types, name=name, database=prefix[-1] if prefix else None,
                   catalog=prefix[0] if len(prefix) == 2 else None)
    if isinstance(where, str):  # written in the dialect of the engine that runs the statement
        where = parse_condition(where, t, dialect=dialect)
    src = source(t, score=score, label=label, weight=weight, by=by, where=where)
    return src, {k: v for k, v in chosen.items() if k in defaults}



#: the one-shot exact summary: per group and distinct score, the sums every summary of binary
#: labelled rows is a function of (Σw² and Σw²y for sampling variances, the count of positive
#: rows for infinite log-loss terms)
LEVELS = declared.levels("sw2", "ny", "sw2y")
_LEVELS_HEADER = ("-- levels: one row per group and distinct score (as many rows as the table has "
                  "distinct scores per group);\n-- the one-shot exact summary of a metric that "
                  "refines with follow-up passes: sqlcal.from_summaries finishes it\n")


def refines(metric: str, chosen: dict) -> str | None:
    """The one-shot option replacing ``metric``'s form under ``chosen`` options, when that form
    refines with follow-up passes over the rows (None when it is one-shot)."""
    return get(metric).refines(chosen)


def _needs(metric: str, src: Source, chosen: dict) -> list:
    """What ``metric`` exports: its first-stage summaries, or the levels for a refining form."""
    return [LEVELS] if refines(metric, chosen) else get(metric).needs(src, chosen)


def _from_levels(metric: str, src: Source, chosen: dict, levels: pd.DataFrame) -> pd.DataFrame:
    """Finish ``metric`` with every summary evaluated in pandas from the levels."""
    keys = [*src.by, "p"]
    absent = [c for c in [*keys, "n", "swy", "swp"] if c not in levels]
    if absent:
        raise ValueError(f"the levels frame has no columns {absent}: pass the frame the levels "
                         "statement of summary_sql returned, with the same by= and weight=")
    frame = _as_numbers(levels.copy(), keys)
    checks = [c for c in frame if c.startswith("chk_")]
    if not checks:
        raise ValueError("the levels carry no validation columns (chk_*): pass the frame "
                         "summary_sql's levels statement returned")
    executor.validate(src, frame)
    if src.has_soft_labels:
        raise InvalidInputError(
            f"the levels are sufficient statistics only for labels in {{0, 1}}, and label column "
            f"{src.label!r} holds values strictly between 0 and 1: run the metric where the rows "
            "are, or export a one-shot form")
    frame = frame.drop(columns=checks)
    if "W" not in frame:  # unweighted: W = Σw² = n, and Σwy counts the rows with y = 1
        frame = frame.assign(W=frame["n"].astype(float), sw2=frame["n"].astype(float),
                             ny=frame["swy"], sw2y=frame["swy"])
    missing = [c for c in ("sw2", "ny") if c not in frame]
    if missing:
        raise ValueError(f"the levels frame has no columns {missing}: pass the frame the levels "
                         "statement of summary_sql returned")
    src.local_levels = frame.sort_values(keys, ignore_index=True, kind="stable")
    src.forbid_queries(f"{metric} finishes from the levels")
    return get(metric).function(src, **chosen)


def _named(expr, keys: GroupKeys):
    """A summary statement's result with the keys under the user's names, and a column of
    sqlcal's that a key has the name of renamed as in a result (:mod:`sqlcal.inputs.groupkeys`); a
    key's NaN or NULL flag keeps its name."""
    names = {key.column: key.name for key in keys.keys}
    renamed = {names.get(c, keys.own(c)): c for c in expr.columns}
    renamed = {new: old for new, old in renamed.items() if new != old}
    return expr.rename(renamed) if renamed else expr


def _internal(frame: pd.DataFrame, keys: GroupKeys) -> pd.DataFrame:
    """A frame a statement of :func:`statements` returned, with sqlcal's internal names."""
    names = {key.name: key.column for key in keys.keys}
    return frame.rename(columns={c: names.get(c, keys.original(c)) for c in frame.columns})


def _as_numbers(frame: pd.DataFrame, keys: list) -> pd.DataFrame:
    """Engines and clients return exact sums as decimals (DuckDB's HUGEINT, PostgreSQL's
    NUMERIC): every column but the keys read as doubles, like the library's own queries."""
    for c in frame.columns.difference(keys):
        if frame[c].dtype == object:
            frame[c] = frame[c].astype(float)
    return frame
