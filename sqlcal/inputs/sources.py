"""What to measure: a table, its score/label/weight columns, group keys and filters.

``source()`` resolves the data (Ibis table, path or glob, connection URL, in-memory frame), checks
the columns once with one aggregate query in the engine, and returns a :class:`Source` that every
metric accepts. The same query also produces the *totals* summary (per group: n, W, Σwy, Σwp,
Σw(y − p)², ...), so metrics that need only totals cost no further scan.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
import weakref
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Callable, Sequence

import ibis
import ibis.expr.types as ir
import numpy as np
import pandas as pd
from ibis.backends.duckdb import Backend as DuckDBBackend

from sqlcal.errors import InvalidInputError, redact
from sqlcal.inputs import columns, engines
from sqlcal.inputs.condition import parse_condition
from sqlcal.inputs.groupkeys import GroupKeys

#: names of the normalised columns inside every query (a downsampled source adds each row's
#: sampling rate, a training rate read from the table its column: see
#: :data:`sqlcal.inputs.columns.RATE`); group keys take sqlcal's own names there
#: (:mod:`sqlcal.inputs.groupkeys`), so a key may have any name
INTERNAL = ("p", "y", "w", columns.RATE, columns.TRAINING_RATE, columns.BASELINE)

CHECKS = (
    # (column role, problem, result column)
    ("score", "NULL", "score_null"),
    ("score", "NaN", "score_nan"),
    ("score", "outside [0, 1]", "score_range"),
    ("label", "NULL", "label_null"),
    ("label", "NaN", "label_nan"),
    ("label", "outside [0, 1]", "label_range"),
    ("label", "outside {0, 1}", "label_soft"),
    ("weight", "NULL", "weight_null"),
    ("weight", "NaN", "weight_nan"),
    ("weight", "negative", "weight_negative"),
    ("weight", "infinite", "weight_inf"),
    ("weight", f"above {columns.WEIGHT_MAX:g} (their squares would overflow the variance "
               "sums: rescale them)", "weight_huge"),
    ("rate", "NULL", "rate_null"),
    ("rate", "NaN", "rate_nan"),
    ("rate", "outside (0, 1]", "rate_range"),
    ("training rate", "NULL", "training_null"),
    ("training rate", "NaN", "training_nan"),
    ("training rate", "outside (0, 1]", "training_range"),
    ("baseline", "NULL", "baseline_null"),
    ("baseline", "NaN", "baseline_nan"),
    ("baseline", "outside [0, 1]", "baseline_range"),
)
#: the check columns of the rate columns a source reads (see check_exprs)
_RATE_CHECKS = {columns.RATE: "rate", columns.TRAINING_RATE: "training",
                columns.BASELINE: "baseline"}


#: tables sqlcal made to be measured in one way only (multiclass): table op -> check(by, weight),
#: which raises when a metric's keywords would measure the table otherwise
USE_CHECKS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def register_use_check(table: ir.Table, check: Callable[[tuple, str | None], None]) -> None:
    """Have :func:`source` call ``check(by, weight)`` before measuring ``table``."""
    USE_CHECKS[table.op()] = check


@dataclass(eq=False)
class Source:
    """A description of what to measure. Build it with :func:`source`.

    Attributes
    ----------
    rows : ibis Table
        The rows to measure (invalid ones removed when ``on_invalid="drop"``): the group keys'
        internal columns (``by``) and the normalised columns ``p`` (score, DOUBLE), ``y``
        (label, DOUBLE) and ``w`` (weight, DOUBLE, 1.0 when there is no weight column).
    score, label, weight : str or None
        The user's column names, kept for messages.
    by : tuple of str
        The columns of ``rows`` and of every summary frame that hold the group keys:
        ``__key0``, ``__key1``, ... and a floating key's NaN flag ``__nan0`` (see
        :mod:`sqlcal.inputs.groupkeys`).
    group_keys : GroupKeys
        The user's key names and their internal columns; :meth:`present` turns a frame of
        internal columns into the result the user reads.
    on_invalid : {"raise", "drop"}
        What :func:`source` was told to do with invalid rows.
    allow_soft : bool
        Whether labels strictly between 0 and 1 are accepted (``soft_labels=True``).
    float_label : bool
        Whether the label column is floating point (so it could hold soft labels).
    dropped : pandas DataFrame or None
        With ``on_invalid="drop"``: per group (its internal key columns ``by``), ``n_rows``,
        the count of rows failing each check, ``n`` (valid rows) and ``n_dropped``.
    has_soft_labels : bool
        Whether a label strictly between 0 and 1 was found (known after validation).
    integer_weights : bool
        Whether every row weight is a whole number (read as frequency weights when the source
        has no sampling rate; known after validation, or after ``weights_known``).
    weights_known : bool
        Whether ``integer_weights`` was read before validation, by the one ungrouped aggregate
        of :func:`sqlcal.query.executor.learn_weight_kind` (the first scan then leaves out the
        variance weight's sums for whole-number weights, and its whole-number check).
    local_levels : pandas DataFrame or None
        The levels of the rows (per group and distinct score) when the summaries are evaluated
        from them in pandas instead of queried: a source built by :func:`sqlcal.from_summaries`.
    served : callable or None
        ``served(summary) -> frame``: a source whose summaries come from elsewhere than a
        query of its rows (a window merged from a summary store, :func:`sqlcal.stored`); the
        planner fetches through it.
    origin : str
        Where the rows come from, as given to :func:`source` (for the reprs).
    where : str or None
        The filter, as given to :func:`source` (for the reprs).
    sampling_rate : float, str or None
        ``negative_sampling_rate``: the fraction of negatives kept, or the column of per-row
        rates (each negative's weight in ``rows.w`` is multiplied by 1/rate, and ``rows`` has
        the column ``r_``: the rate of a negative, 1 for a positive).
    training_rate : float, str or None
        ``training_negative_rate``: the rate the model's training negatives were kept at (a
        number, or the column of per-row rates); ``rows.p`` holds the corrected scores
        p/(p + (1 − p)/rate).
    score_correction : bool
        Whether ``rows.p`` holds corrected scores (``training_rate`` is set).
    facts : dict
        Columns every result of the source carries, saying where its numbers come from (a
        stored window: ``window``, ``maturity``, ``window_exact``, ``window_bound``).
    validated : bool
        Whether the rows passed the validating scan (set by the executor,
        :mod:`sqlcal.query.executor`, on the first query, or at once with
        ``on_invalid="drop"``).
    cache : dict
        The summaries computed from the rows, by kind and parts: the executor's cache (a
        summary of the same kind with more parts serves a request for fewer).
    walks : dict
        The results of adaptive metrics' walks over cached frames (the cutoff error's and
        Kuiper's extremes: a pure function of the cache), so a report walks once, not per metric.
    forbidden : str or None
        Why the rows must not be queried (a source built from exported summaries), or None.
    memory_plan : tuple or None
        An in-memory source's plan: its shape (which names the statements compiled once for
        every source of the shape), its in-memory table and the columns its queries read.
    arrow : pyarrow Table or None
        An in-memory source's rows as Arrow, made on its first query.
    baseline : str or None
        A paired comparison's baseline score column (:func:`sqlcal.compare`), read as ``q_``
        and validated like the score.

    See Also
    --------
    source : builds and validates a Source; pass it to any metric.
    stored : a Source over a window of stored summaries.
    report : several metrics of one Source at once.

    Examples
    --------
    >>> import pandas as pd, sqlcal
    >>> df = pd.DataFrame({"p": [0.1, 0.2, 0.8, 0.9], "y": [0, 1, 1, 1], "w": [1, 2, 1, 1]})
    >>> src = sqlcal.source(df, score="p", label="y", weight="w")
    >>> src  # doctest: +ELLIPSIS
    <Source: in-memory pandas frame (4 rows); score='p', label='y', weight='w' ...>
    >>> sqlcal.ece(src, bins=2)[["ece", "n", "W", "n_bins", "binning"]]
        ece  n    W  n_bins             binning
    0  0.36  4  5.0       2  uniform(2, sqlcal)
    >>> src.integer_weights, src.has_soft_labels
    (True, False)
    """

    rows: ir.Table
    score: str
    label: str
    weight: str | None
    by: tuple[str, ...]
    on_invalid: str
    allow_soft: bool
    float_label: bool
    dropped: pd.DataFrame | None = None
    has_soft_labels: bool = False
    integer_weights: bool = True
    weights_known: bool = False
    validated: bool = False
    cache: dict = field(default_factory=dict, repr=False)
    #: the results of adaptive metrics' walks over cached frames (a pure function of them),
    #: kept once every read was cached, so each walk runs once more per report, not per metric
    walks: dict = field(default_factory=dict, repr=False)
    forbidden: str | None = field(default=None, repr=False)
    #: the levels of the rows, when the summaries are evaluated from them in pandas
    #: (:mod:`sqlcal.query.local`) instead of queried: a source built by from_summaries
    local_levels: pd.DataFrame | None = field(default=None, repr=False)
    #: a function serving each declared summary instead of a query on the rows: a window of a
    #: summary store (sqlcal.monitor.stored), whose summaries are merged from stored ones
    served: Callable[[Any], pd.DataFrame] | None = field(default=None, repr=False)
    #: an in-memory source's plan: its shape (what, with a summary's key, names a compiled
    #: statement) and its in-memory table; the table's rows as Arrow, made on the first query
    memory_plan: tuple | None = field(default=None, repr=False)
    arrow: Any = field(default=None, repr=False)
    #: where the rows come from and the filter, as given to source() (for the reprs)
    origin: str = ""
    where: str | None = None
    #: negative downsampling: the rate (a number, or the column of per-row rates) whose inverse
    #: multiplies each negative's weight in ``rows.w``, and whether scores were corrected for it
    sampling_rate: float | str | None = None
    score_correction: bool = False
    training_rate: float | str | None = None
    #: a paired comparison's baseline score column (sqlcal.compare), read as ``q_`` and
    #: validated like the score
    baseline: str | None = None
    #: the user's key names and their internal columns in ``by`` (by default ``by`` itself)
    group_keys: GroupKeys | None = None
    #: facts every result of this source states about where its numbers come from, as trust
    #: columns: a stored window's periods, maturity view and distance to a scan of its rows
    facts: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.group_keys is None:
            self.group_keys = GroupKeys.plain(self.by)

    @property
    def key_names(self) -> tuple[str, ...]:
        """The user's group keys (``by`` holds their internal columns)."""
        return self.group_keys.names

    def present(self, frame: pd.DataFrame) -> pd.DataFrame:
        """A frame of internal key columns as the user reads it: keys first under their names,
        sqlcal's columns renamed where a key has their name (:meth:`GroupKeys.present`)."""
        return self.group_keys.present(frame)

    def with_named_keys(self) -> Source:
        """This source (not queried yet) with the keys in ``rows`` under the user's names and
        values (NaN as NaN), for a caller whose own queries name the keys (the summary store,
        segments). A key named like a column of ``rows`` is refused."""
        names = self.group_keys.names
        clash = sorted(n for n in names if n in INTERNAL)
        if clash:
            raise InvalidInputError(f"group keys {clash} are named like the columns sqlcal adds "
                                    f"to the rows ({', '.join(INTERNAL)}); rename them with a "
                                    "view")
        r = self.rows
        keyed = {k.name: (ibis.ifelse(r[k.nan], ibis.literal(float("nan")), r[k.column])
                          if k.nan else ibis.ifelse(r[k.null], ibis.null(r[k.column].type()),
                                                    r[k.column])
                          if k.null else r[k.column]) for k in self.group_keys.keys}
        others = [c for c in r.columns if c not in self.by]
        rows = r.select(**keyed, **{c: r[c] for c in others})
        dropped = self.dropped
        if dropped is not None:
            dropped = self.present(dropped)
        return dataclasses.replace(self, rows=rows, by=names, dropped=dropped,
                                   group_keys=GroupKeys.plain(names), cache={}, walks={},
                                   memory_plan=None, arrow=None)

    @property
    def weighted(self) -> bool:
        return self.weight is not None or self.sampling_rate is not None

    @property
    def rate_columns(self) -> tuple[str, ...]:
        """The normalised rate columns read from the table (to validate): ``r_`` for a column
        of sampling rates, ``t_`` for a column of training rates (and ``q_``, a paired
        comparison's baseline score, in [0, 1])."""
        return ((columns.RATE,) if isinstance(self.sampling_rate, str) else ()) + (
            (columns.TRAINING_RATE,) if isinstance(self.training_rate, str) else ()) + (
            (columns.BASELINE,) if self.baseline is not None else ())

    def weight_text(self) -> str:
        """The row weight in words, for messages: the weight column, times 1/rate on negatives."""
        text = f"weight column {self.weight!r}" if self.weight is not None else "weight 1"
        if self.sampling_rate is None:
            return text
        rate = (f"negative_sampling_rate column {self.sampling_rate!r}"
                if isinstance(self.sampling_rate, str) else
                f"negative_sampling_rate={self.sampling_rate!r}")
        return f"{text} times 1/rate on negatives ({rate}; rates must be in (0, 1])"

    def __repr__(self) -> str:
        kind = self._weight_kind()
        parts = [f"score={self.score!r}", f"label={self.label!r}"]
        if self.weight is not None:
            parts.append(f"weight={self.weight!r} ({kind or 'kind known after the first query'})")
        if self.sampling_rate is not None:
            parts.append(f"negative_sampling_rate={self.sampling_rate!r}")
        if self.training_rate is not None:
            parts.append(f"training_negative_rate={self.training_rate!r} (scores corrected)")
        if self.by:
            parts.append(f"by={self.key_names!r}")
        if self.where:
            # a SQL condition quoted; an expression or a callable by its <description>
            parts.append(f"where={self.where if self.where.startswith('<') else repr(self.where)}")
        state = "validated" if self.validated else "not validated yet"
        if self.dropped is not None:
            state += f", {int(self.dropped['n_dropped'].sum()):,} invalid rows dropped"
        return f"<Source: {self.origin or 'an Ibis table'}; {', '.join(parts)}; {state}>"

    def _repr_html_(self) -> str:
        # Jupyter shows a Source with this: it describes what is known and never runs a query
        import html

        def code(name: str) -> str:
            return f"<code>{html.escape(name)}</code>"

        kind = {"frequency": "frequency weights (whole numbers)",
                "sampling": "sampling weights (fractional)",
                None: "frequency or sampling: known after the first query"}[self._weight_kind()]
        weight = f"{code(self.weight)}, {kind}" if self.weight else "none: every row counts once"
        if self.sampling_rate is not None:  # a design: sampling weights whatever 1/rate is
            weight = (f"{code(self.weight) if self.weight else '1'} times 1/rate on negatives "
                      f"(negative_sampling_rate {html.escape(repr(self.sampling_rate))}): "
                      "sampling weights of the design")
        if self.dropped is not None:
            n_rows = int(self.dropped["n_rows"].sum())
            invalid = f"dropped: {int(self.dropped['n_dropped'].sum()):,} of {n_rows:,} rows"
        else:
            invalid = "an error names them (on_invalid='raise')"
        if self.validated:
            validated = "yes" + ("; soft labels present" if self.has_soft_labels else "")
        else:
            validated = "not yet: the first metric's query checks the rows"
        facts = [
            ("score", code(self.score)),
            ("label", code(self.label) + (", in [0, 1] (soft labels allowed)" if self.allow_soft
                                          else ", 0/1")),
            ("weight", weight),
            ("groups", ", ".join(map(code, self.key_names)) if self.by else "none (one group)"),
            ("where", "none" if not self.where else html.escape(self.where)
             if self.where.startswith("<") else code(self.where)),
            ("invalid rows", invalid),
            ("validated", validated),
            ("cached summaries", str(len(self.cache))),
        ]
        rows = "".join(f"<tr><th style='text-align:left'>{name}</th>"
                       f"<td style='text-align:left'>{value}</td></tr>" for name, value in facts)
        return (f"<div><strong>sqlcal.Source</strong> &middot; "
                f"{html.escape(self.origin or 'an Ibis table')}<table>{rows}</table></div>")

    def _weight_kind(self) -> str | None:
        """How the weights are read, once the first query has seen them (None before): a
        sampling rate is a sampling design, whatever the value of 1/rate."""
        if self.sampling_rate is not None:
            return "sampling"
        if not self.weighted or not self.validated:
            return None
        return "frequency" if self.integer_weights else "sampling"


    def forbid_queries(self, why: str) -> None:
        """From now on any query is an error saying ``why`` (a source built from summaries)."""
        self.forbidden = why


def served_rows(name: str) -> ir.Table:
    """The rows of a source served from elsewhere (a window of the summary store): their
    normalised columns ``p``, ``y``, ``w`` on a table bound to no engine, never queried."""
    return ibis.table({"p": "float64", "y": "float64", "w": "float64"}, name=name)


def describe(
    data: Any,
    *,
    score: str,
    label: str,
    weight: str | None = None,
    by: str | Sequence[str] = (),
    where: Any = None,
    table: str | None = None,
    on_invalid: str = "raise",
    soft_labels: bool = False,
    negative_sampling_rate: float | str | None = None,
    training_negative_rate: float | str | None = None,
    score_correction: bool = False,
    baseline: str | None = None,
) -> Source:
    """:func:`sqlcal.source` without its one query: the rows to measure, their columns
    and options checked, as a :class:`Source` not validated yet (the executor validates it
    on its first scan, or counts the invalid rows at once with ``on_invalid="drop"``)."""
    if on_invalid not in ("raise", "drop"):
        raise ValueError(f"on_invalid must be 'raise' or 'drop', not {on_invalid!r}")
    training = _check_sampling(negative_sampling_rate, training_negative_rate, score_correction,
                               soft_labels)
    by = (by,) if isinstance(by, str) else tuple(by)
    base = resolve_table(data, table)
    use_check = USE_CHECKS.get(base.op())
    if use_check is not None:
        use_check(by, weight)
    origin = _origin(data, table, base)
    memtable = base.op() if _is_frame(data) else None
    if where is not None:
        base = _apply_where(base, where)
    _check_columns(base, score, label, weight, by)
    if baseline is not None:
        _check_columns(base, baseline, label, None, ())
    rate = negative_sampling_rate
    for option, value in (("negative_sampling_rate", rate), ("training_negative_rate", training)):
        if isinstance(value, str):
            _check_rate_column(base, option, value)

    def rate_value(value: Any) -> ir.FloatingValue:
        return base[value].cast("float64") if isinstance(value, str) else columns.number(value)

    keys = GroupKeys.of(base.schema(), by)
    rows = base.select(
        **keys.select(base),
        p=base[score].cast("float64"),
        y=_label_expr(base[label]),
        # a double like the weights it stands for: a bare 1.0 is NUMERIC on PostgreSQL, and the
        # sums over it (the store's fingerprint among them) came back as decimals
        w=base[weight].cast("float64") if weight else columns.number(1.0),
        **({columns.RATE: rate_value(rate)} if rate is not None else {}),
        **({columns.TRAINING_RATE: rate_value(training)} if training is not None else {}),
        **({columns.BASELINE: base[baseline].cast("float64")} if baseline is not None else {}),
    )
    rows = _designed(rows, rate is not None, training)
    if weight:
        # a row of weight 0 is an absent row, in every metric and every count (n included); a
        # NULL or NaN weight stays, for validation to name. Written NOT (w = 0 AND w NOT NULL)
        # (NaN = 0 is false in every engine): DuckDB drops the filter when the column's
        # statistics show no zero, where w <> 0 OR w IS NULL OR ISNAN(w) was tested on every row
        rows = rows.filter(~((rows.w == 0) & rows.w.notnull()))
    label_type = base[label].type()
    src = Source(rows=rows, score=score, label=label, weight=weight, by=keys.columns,
                 group_keys=keys, on_invalid=on_invalid, allow_soft=soft_labels,
                 float_label=not (label_type.is_boolean() or label_type.is_integer()),
                 origin=origin, where=_where_text(where), memory_plan=_plan(memtable, where, (
                     score, label, weight, by, on_invalid, soft_labels, negative_sampling_rate,
                     training, baseline)),
                 sampling_rate=rate, score_correction=training is not None,
                 training_rate=training, baseline=baseline)
    return src

def _plan(table: Any, where: Any, options: tuple) -> tuple | None:
    """The plan of a source whose rows are an in-memory table (None for any other): its shape,
    which names its compiled statements (schema, the columns and options of :func:`source`, the
    filter's text), the table, and the columns its queries read (None: all, when a filter may
    name any). A filter given as an expression or a callable has no text to key on: such a
    source compiles its queries each time."""
    import ibis.expr.operations as ops

    if not isinstance(table, ops.InMemoryTable) or not (where is None or isinstance(where, str)):
        return None
    schema = tuple((name, str(dtype)) for name, dtype in table.schema.items())
    score, label, weight, by = options[:4]
    # the sampling and training rates, and a paired comparison's baseline score
    rates = [r for r in options[6:9] if isinstance(r, str)]
    columns = None if where is not None else tuple(dict.fromkeys(
        [*by, score, label, *([weight] if weight else []), *rates]))
    return (schema, where, *options), table, columns


# -- resolving the data -----------------------------------------------------------------------

_FILE_READERS = {
    ".parquet": "read_parquet",
    ".pq": "read_parquet",
    ".csv": "read_csv",
    ".tsv": "read_csv",
    ".gz": "read_csv",
}
_DB_SUFFIXES = (".duckdb", ".ddb", ".db")
#: the connections, one per database URL or DuckDB file (keyed by its absolute path; "" is the
#: embedded DuckDB), reused by every source; a DuckDB file is held only while a query runs
#: (:class:`DuckDBFile`)
connections: dict[str, Any] = {}


def default_backend():
    """The embedded DuckDB connection that reads files and in-memory frames."""
    if "" not in connections:
        connections[""] = ibis.duckdb.connect()
    return connections[""]


#: in-memory frames below this many rows are read by one thread (see frame_connection)
SMALL_FRAME = 1_000_000
_small_frames = threading.local()


def frame_connection(rows: int):
    """The raw DuckDB connection that reads an in-memory frame of ``rows`` rows: the embedded
    one, or below :data:`SMALL_FRAME` rows one of the calling thread's own (a DuckDB connection
    serves one thread at a time), limited to a single DuckDB thread (on a small frame a second
    thread costs more CPU in coordination than it saves: 12 against 17 CPU ms for an ECE of
    5*10^4 rows)."""
    if rows >= SMALL_FRAME:
        return default_backend().con
    con = getattr(_small_frames, "con", None)
    if con is None:
        import duckdb

        con = _small_frames.con = duckdb.connect(config={"threads": 1})
    return con


def _connect(url: str):
    # one connection per DuckDB file or database URL, reused by every source of this process
    path = url[len("duckdb://"):] if url.startswith("duckdb://") else None
    if path is None and "://" not in url:
        path = url
    key = os.path.abspath(path) if path not in (None, "", ":memory:") else url
    if key not in connections:
        if path not in (None, "", ":memory:"):
            connections[key] = DuckDBFile().connect(key)
        else:
            connections[key] = connect_url(url, read_only=True)
            if url.split("://")[0] in ("postgres", "postgresql"):
                tune_postgres(connections[key], skip=url)
    return connections[key]


def connect_url(url: str, *, read_only: bool = False):
    """``ibis.connect(url)``; a failure is an :class:`InvalidInputError` that names the URL and
    the engine's reason with every password hidden (:func:`sqlcal.errors.redact`), not an
    exception chained to one that quotes the URL whole.

    With ``read_only=True`` (a source's session) a PostgreSQL session refuses writes
    (:func:`read_only_postgres`). Spark has no read-only session or transaction: what it
    receives is what Ibis compiles from sqlcal's expressions, SELECTs only.
    """
    from urllib.parse import parse_qsl, urlparse

    try:
        parsed = urlparse(url)
        if read_only and parsed.scheme in ("postgres", "postgresql"):
            return read_only_postgres()()._from_url(parsed, **dict(parse_qsl(parsed.query)))
        return ibis.connect(url)
    except ImportError:  # a missing driver: the CLI names the extra to install
        raise
    except Exception as e:
        reason = redact(f"{type(e).__name__}: {str(e).strip()}")
    raise InvalidInputError(f"cannot connect to {redact(url)}: {reason}")


class DuckDBFile(DuckDBBackend):
    """A DuckDB database file that sqlcal reads, held only while a query runs.

    An in-memory DuckDB attaches the file read-only (``ATTACH ... (READ_ONLY)``) when a query, a
    schema or a table listing starts, and detaches it when that ends. Between two queries the
    process holds neither the file nor its lock: another process may write to the file or
    replace it (an ETL job's ``os.replace``), and the next query reads the file as it is then.
    Attaching costs about 1.4 ms, where opening the file as a database of its own costs 27 ms.
    """

    _ALIAS = "sqlcal_input"

    def do_connect(self, path: str) -> None:
        super().do_connect(":memory:")
        self._file, self._users, self._lock = path, 0, threading.RLock()

    @contextlib.contextmanager
    def attached(self):
        """The file attached (and the default catalog) for the block; re-entrant."""
        from sqlglot import exp

        with self._lock:  # one query at a time on a DuckDB connection
            if self._users == 0:
                if not os.path.exists(self._file):  # ATTACH would create it
                    raise FileNotFoundError(f"no database file at {self._file!r}")
                self.con.execute(f"ATTACH {exp.convert(self._file).sql('duckdb')} AS "
                                 f"{self._ALIAS} (READ_ONLY)")
                self.con.execute(f"USE {self._ALIAS}")
            self._users += 1
            try:
                yield
            finally:
                self._users -= 1
                if self._users == 0:
                    self.con.execute("USE memory")
                    self.con.execute(f"DETACH {self._ALIAS}")

    def execute(self, *args, **kwargs):
        with self.attached():
            return super().execute(*args, **kwargs)

    def to_pyarrow(self, *args, **kwargs):
        with self.attached():
            return super().to_pyarrow(*args, **kwargs)

    def to_pyarrow_batches(self, expr, /, **kwargs):
        # a reader streams after the call returns: read the result while the file is attached
        import pyarrow as pa

        table = self.to_pyarrow(expr, **{k: v for k, v in kwargs.items() if k != "chunk_size"})
        return pa.RecordBatchReader.from_batches(table.schema, table.to_batches())

    def get_schema(self, *args, **kwargs):
        with self.attached():
            return super().get_schema(*args, **kwargs)

    def list_tables(self, *args, **kwargs):
        with self.attached():
            return super().list_tables(*args, **kwargs)


@cache
def read_only_postgres() -> type:
    """The Ibis PostgreSQL backend whose sessions refuse writes.

    The session starts with ``SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY``: every
    transaction of it, the measuring queries' (``BEGIN``, ``DECLARE CURSOR``) and the catalog
    reads', is read-only, and PostgreSQL refuses any write in it, whatever a query holds. The
    one write is Ibis's: a small in-memory table joined in a follow-up pass becomes a
    temporary table of the session (private to it, dropped with it), created and dropped in a
    ``READ WRITE`` transaction of its own. (A class made on first use: the module of the
    PostgreSQL backend needs its driver.)
    """
    from ibis.backends.postgres import Backend

    class ReadOnlyPostgres(Backend):
        def _post_connect(self) -> None:
            super()._post_connect()
            with self.con.cursor() as cursor:  # autocommit: for the session
                cursor.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")

        @contextlib.contextmanager
        def _temporary(self):
            con = self.con
            con.read_only = False  # BEGIN READ WRITE
            try:
                with con.transaction():
                    yield
            finally:
                con.read_only = None

        def _register_in_memory_table(self, op) -> None:
            with self._temporary():
                super()._register_in_memory_table(op)

        def _make_memtable_finalizer(self, name: str):
            drop = super()._make_memtable_finalizer(name)

            def finalizer() -> None:
                with self._temporary():
                    drop()

            return finalizer

    return ReadOnlyPostgres


#: session settings for a PostgreSQL connection sqlcal opens from a URL: sorts and hashes over
#: the levels (one row per distinct score) stay in memory instead of spilling at the default
#: 4 MB, and the large generated expressions of some queries are not JIT-compiled (compiling
#: them costs more than it saves, and a backend compiling one ignores cancel)
POSTGRES_SETTINGS = {"work_mem": "256MB", "jit": "off"}


def tune_postgres(con, *, skip: str = "") -> None:
    """Apply :data:`POSTGRES_SETTINGS` to a PostgreSQL connection's session (a setting named in
    ``skip``, e.g. the URL's ``options``, is left as the caller set it)."""
    for name, value in POSTGRES_SETTINGS.items():
        if name not in skip:
            con.raw_sql(f"SET {name} = '{value}'").close()


def resolve_table(data: Any, table: str | None) -> ir.Table:
    """The Ibis table ``data`` names: a table, a backend with ``table``, a path, URL or frame."""
    if isinstance(data, tuple) and len(data) == 2:
        data, table = data
    if isinstance(data, ir.Table):
        _no_table(table, "an Ibis table")
        return data
    if isinstance(data, os.PathLike):
        data = os.fspath(data)
    if isinstance(data, str):
        return _table_from_string(data, table)
    if hasattr(data, "list_tables") and hasattr(data, "table"):  # an Ibis backend
        return _named_table(data, table, repr(data))
    if _is_frame(data):
        _no_table(table, f"a {type(data).__name__}")
        return ibis.memtable(data, schema=_frame_schema(data))
    raise TypeError(
        f"cannot read data of type {type(data).__name__}: pass an Ibis table, a path or glob to "
        "Parquet/CSV, a database URL with table=, or a pandas/polars/pyarrow frame"
    )


#: Ibis schemas of pandas frames of plain numpy columns, by column names and dtypes
_FRAME_SCHEMAS: dict[tuple, Any] = {}


def _frame_schema(data: Any) -> Any:
    """The Ibis schema of a pandas frame whose columns are named by strings and hold numpy
    numbers or booleans, inferred once per names and dtypes (Ibis infers it from the frame on
    every memtable: most of a small call's setup); None for any other frame (Ibis infers)."""
    if type(data).__module__.split(".")[0] != "pandas":
        return None
    dtypes = data.dtypes
    key = tuple(dtypes.items())
    if not all(isinstance(name, str) and isinstance(dtype, np.dtype) and dtype.kind in "biuf"
               for name, dtype in key):
        return None
    if key not in _FRAME_SCHEMAS:
        if len(_FRAME_SCHEMAS) >= 256:
            _FRAME_SCHEMAS.clear()
        _FRAME_SCHEMAS[key] = ibis.memtable(data).schema()
    return _FRAME_SCHEMAS[key]


def _table_from_string(data: str, table: str | None) -> ir.Table:
    lower = data.lower()
    if "://" in data or lower.endswith(_DB_SUFFIXES):
        if "://" not in data and not os.path.exists(data):
            raise FileNotFoundError(f"no database file at {data!r}")
        return _named_table(_connect(data), table, redact(data))
    suffix = next((s for s in _FILE_READERS if lower.endswith(s)), None)
    if suffix is None and os.path.isdir(data):
        # a folder of Parquet files, hive-partitioned (day=2026-11-01/…) or not: the partition
        # keys become columns, usable in by= and where= (and pruned by the engine)
        _no_table(table, f"the folder {data!r}")
        return default_backend().read_parquet(os.path.join(data, "**", "*.parquet"),
                                              hive_partitioning=True)
    if suffix is None:
        raise ValueError(
            f"cannot tell how to read {data!r}: expected a .parquet/.csv path or glob, a "
            ".duckdb file, or a connection URL such as 'duckdb:///preds.duckdb'"
        )
    if not any(ch in data for ch in "*?[") and not os.path.exists(data):
        raise FileNotFoundError(f"no file at {data!r}")
    kind = "Parquet" if _FILE_READERS[suffix] == "read_parquet" else "CSV"
    _no_table(table, f"{data!r}, a {kind} path")
    return getattr(default_backend(), _FILE_READERS[suffix])(data)


def _no_table(table: str | None, what: str) -> None:
    # table= names a table of a database; given with anything else it would be ignored
    if table is not None:
        raise InvalidInputError(f"table={table!r} names a table in a database file or URL, and "
                                f"the data is {what}: leave table= out")


def _named_table(con, table: str | None, where: str) -> ir.Table:
    if table is None:
        names = con.list_tables()
        if len(names) != 1:
            raise ValueError(f"{where} holds tables {names}: name one with table=")
        table = names[0]
    if not isinstance(table, str) or not table:
        raise InvalidInputError(f"table= must be a table name, not {table!r}")
    # the name is looked up among the tables the connection lists (Ibis quotes it either way),
    # so a name that is not a table is an error that lists the ones there are
    schema, _, name = table.rpartition(".")  # "schema.table"
    try:
        names = con.list_tables(database=schema) if schema else con.list_tables()
    except Exception:  # no such schema, or the engine cannot list it: let the lookup say
        names = None
    if names is not None and name not in names:
        shown = names if len(names) <= 20 else [*names[:20], "..."]
        raise InvalidInputError(f"table {table!r} is not in {where}; its tables are {shown}")
    return con.table(name, database=schema) if schema else con.table(name)


def _origin(data: Any, table: str | None, base: ir.Table) -> str:
    """Where the rows come from, in words, for the reprs (a URL's password left out)."""
    if isinstance(data, tuple) and len(data) == 2:
        data, table = data
    if isinstance(data, os.PathLike):
        data = os.fspath(data)
    named = f" table {table!r}" if table else ""
    if isinstance(data, str):
        return redact(data) + named
    if _is_frame(data):
        size = f" ({data.shape[0]:,} rows)" if hasattr(data, "shape") else ""  # not lazy frames
        return f"in-memory {type(data).__module__.split('.')[0]} frame{size}"
    if not isinstance(data, ir.Table):  # an Ibis backend
        return f"{getattr(data, 'name', 'an Ibis')} connection{named}"
    import ibis.expr.operations as ops

    tables = base.op().find(ops.PhysicalTable)
    try:
        backend = engines.backend_of(base).name
    except Exception:  # e.g. an unbound table: the first query will say what is wrong
        backend = "Ibis"
    if len(tables) != 1:
        return f"{backend} query"
    if isinstance(tables[0], ops.InMemoryTable):
        return f"{backend} in-memory table"
    if isinstance(tables[0], ops.SQLQueryResult):
        return f"{backend} SQL query"
    return f"{backend} table {tables[0].name!r}"


def _where_text(where: Any) -> str | None:
    if where is None:
        return None
    if isinstance(where, str):
        return where
    return "<a Python callable>" if callable(where) else "<an Ibis expression>"


def _is_frame(data: Any) -> bool:
    module = type(data).__module__.split(".")[0]
    return module in ("pandas", "polars", "pyarrow")


def apply_where(base: ir.Table, where: Any) -> ir.Table:
    """``base`` filtered by ``where``: a SQL condition (parsed by :mod:`sqlcal.inputs.condition`,
    never pasted), an Ibis boolean expression or a callable (as ``source(where=...)`` reads it)."""
    return _apply_where(base, where)


def _apply_where(base: ir.Table, where: Any) -> ir.Table:
    if isinstance(where, str):
        # parsed into an Ibis expression over the table's columns: the text never reaches the
        # engine (see sqlcal.inputs.condition)
        return base.filter(parse_condition(where, base))
    if isinstance(where, ir.BooleanValue) or callable(where):
        return base.filter(where)
    raise InvalidInputError(f"where= must be a SQL condition string, an Ibis boolean expression "
                            f"or a callable, not {type(where).__name__}")


# -- validation -------------------------------------------------------------------------------


def _check_columns(base: ir.Table, score, label, weight, by) -> None:
    schema = base.schema()
    roles = [("score", score), ("label", label), *([("weight", weight)] if weight else [])]
    roles += [("group key", k) for k in by]
    for role, col in roles:
        if col not in schema:
            raise InvalidInputError(
                f"{role} column {col!r} is not in the table; its columns are {list(schema.names)}"
            )
    for role, col in roles[: 3 if weight else 2]:
        dtype = schema[col]
        ok = dtype.is_numeric() or (role == "label" and dtype.is_boolean())
        if not ok:
            raise InvalidInputError(
                f"{role} column {col!r} has type {dtype}; expected a number"
                + (" or boolean" if role == "label" else "")
            )
    twice = sorted({k for k in by if by.count(k) > 1})
    if twice:
        raise InvalidInputError(f"by= lists the group keys {twice} more than once")


def _check_sampling(rate: Any, training: Any, correction: Any, soft_labels: bool) -> Any:
    """Refuse a sampling or training rate outside (0, 1] (or not a number or a column name), a
    score correction without a number to take its rate from, and soft labels with a
    negative sampling rate (a soft label is not a negative); return the training rate
    (``score_correction=True`` reads the log's own rate)."""
    from sqlcal.options import OptionError

    for name, value in (("negative_sampling_rate", rate), ("training_negative_rate", training)):
        if value is not None and not isinstance(value, str):
            ok = (isinstance(value, (int, float, np.integer, np.floating))
                  and not isinstance(value, (bool, np.bool_)) and 0 < float(value) <= 1)
            if not ok:
                raise OptionError(f"source(): {name} must be a number in (0, 1] (the fraction "
                                  f"of negatives kept) or a column name, not {value!r}")
    if not isinstance(correction, (bool, np.bool_)):
        raise OptionError(f"source(): score_correction must be True or False, not "
                          f"{correction!r}")
    if correction and training is not None:
        raise OptionError("source(): pass training_negative_rate= or score_correction=True, "
                          "not both (score_correction=True is training_negative_rate= the log's "
                          "negative_sampling_rate)")
    if correction and rate is None:
        raise OptionError("source(): score_correction=True corrects scores for the rate the "
                          "negatives were downsampled at: pass negative_sampling_rate= too, or "
                          "training_negative_rate= alone for a model trained on downsampled "
                          "negatives and scored on a full log")
    if correction and isinstance(rate, str):
        raise OptionError(
            f"source(): score_correction=True cannot take the training rate from "
            f"negative_sampling_rate column {rate!r}: that column describes the log's "
            "negatives, and a positive's entry there (NULL or 1: every positive kept) is not "
            "the rate the model was trained at. Pass training_negative_rate= a number, or a "
            "column holding every row's training rate")
    if rate is not None and soft_labels:
        raise OptionError("source(): negative_sampling_rate weights negatives (y = 0), and soft "
                          "labels have no negatives to weight: pass one or the other")
    return float(rate) if correction else (
        training if training is None or isinstance(training, str) else float(training))


def _check_rate_column(base: ir.Table, option: str, rate: str) -> None:
    if rate not in base.schema():
        raise InvalidInputError(f"{option} column {rate!r} is not in the table; its "
                                f"columns are {list(base.schema().names)}")
    if not base.schema()[rate].is_numeric():
        raise InvalidInputError(f"{option} column {rate!r} has type "
                                f"{base.schema()[rate]}; expected a number")


def _designed(rows: ir.Table, downsampled: bool, training: Any) -> ir.Table:
    """The rows under their sampling designs. ``downsampled``: the table kept its negatives at
    the rate in column ``r_``: each kept negative's weight times 1/r, and ``r_`` becomes the
    rate of a negative and 1 for a positive (every positive is kept, whatever its rate column
    says), from which the variance weight follows (:func:`sqlcal.inputs.columns.variance_weights`);
    an invalid rate leaves the weight as it is, for validation to name. ``training``: the
    scores p/(p + (1 − p)/r) of a model trained on negatives kept at the rate in column ``t_``
    (scores outside [0, 1] and invalid rates left as they are, for validation to name); ``t_``
    stays only when the rate is a column of the table (validation reads it)."""
    RATE, TRAINING = columns.RATE, columns.TRAINING_RATE
    changes = {}
    if downsampled:
        r = ibis.ifelse(rows.y == 0, rows[RATE], 1.0)
        good = (r > 0) & (r <= 1)
        # w·(1/r), not w/r: 1/r is exact for the usual rates (1/0.1 = 10), w/r is not (3/0.1 is
        # not 30)
        changes |= {"w": ibis.ifelse(good, rows.w * (1.0 / r), rows.w), RATE: r}
    if training is not None:
        p, t = rows.p, rows[TRAINING]
        changes["p"] = ibis.ifelse((p >= 0) & (p <= 1) & (t > 0) & (t <= 1),
                                   p / (p + (1 - p) / t), p)
    rows = rows.mutate(**changes) if changes else rows
    if training is not None and not isinstance(training, str):
        rows = rows.drop(TRAINING)
    return rows


def _label_expr(col: ir.Value) -> ir.NumericValue:
    if col.type().is_boolean():
        # CASE keeps NULL as NULL; a plain cast of boolean to a number fails on Postgres.
        return ibis.cases((col, 1), (~col, 0))
    if col.type().is_integer():
        return col  # summed exactly as integers; a cast per row would cost a fifth of a scan
    return col.cast("float64")


def check_exprs(rows: ir.Table, has_weight: bool, rates: Sequence[str] = ()
                ) -> dict[str, ir.BooleanValue]:
    """Per validation problem (``score_null``, ``label_range``...), the rows that have it;
    ``rates``: the rate columns read from the table (``rate_null``, ``training_range``...)."""
    p, y, w = rows.p, rows.y, rows.w
    y_nan = y.isnan() if y.type().is_floating() else ibis.literal(False)
    checks = {
        "score_null": _null(p),
        "score_nan": p.isnan(),
        "score_range": ~p.isnan() & ((p < 0) | (p > 1)),
        "label_null": _null(y),
        "label_nan": y_nan,
        "label_range": ~y_nan & ((y < 0) | (y > 1)),
        "label_soft": (y > 0) & (y < 1),
    }
    if has_weight:
        checks |= {
            "weight_null": _null(w),
            "weight_nan": w.isnan(),
            "weight_negative": w < 0,
            # above the largest finite double: portable where ISINF is not (Spark)
            "weight_inf": w > np.finfo(np.float64).max,
            "weight_huge": (w > columns.WEIGHT_MAX) & (w <= np.finfo(np.float64).max),
        }
    for column in rates:
        r, name = rows[column], _RATE_CHECKS[column]
        low = (r < 0) if column == columns.BASELINE else (r <= 0)  # a score may be 0
        checks |= {f"{name}_null": _null(r), f"{name}_nan": r.isnan(),
                   f"{name}_range": ~r.isnan() & (low | (r > 1))}
    return checks


def _null(col: ir.Value) -> ir.BooleanValue:
    """NULL only, not NaN: Ibis's PySpark ``isnull()`` is ``IS NULL OR isnan``, so a NaN would
    be counted twice (as NULL and as NaN); ``isnan`` of NULL is NULL in DuckDB and PostgreSQL
    and false in Spark, hence the fill."""
    if not col.type().is_floating():
        return col.isnull()
    return col.isnull() & ~col.isnan().fill_null(False)


def valid_expr(rows: ir.Table, has_weight: bool, soft_labels: bool,
               rates: Sequence[str] = ()) -> ir.BooleanValue:
    """True for a normalised row that passes validation (score and label in [0, 1], weight in
    [0, :data:`sqlcal.inputs.columns.WEIGHT_MAX`], the ``rates`` columns in (0, 1])."""
    p, y, w = rows.p, rows.y, rows.w
    # NaN compares greater than every number in DuckDB and Postgres, so the range tests reject it;
    # NULL makes the whole conjunction NULL, which a filter drops.
    valid = (p >= 0) & (p <= 1) & (y >= 0) & (y <= 1) & ~p.isnan()
    if y.type().is_floating():
        valid &= ~y.isnan()
    if not soft_labels:
        valid &= (y == 0) | (y == 1)
    if has_weight:
        valid &= (w >= 0) & ~w.isnan() & (w <= columns.WEIGHT_MAX)
    for column in rates:  # NaN compares greater than every number: r <= 1 rejects it
        low = (rows[column] >= 0) if column == columns.BASELINE else (rows[column] > 0)
        valid &= low & (rows[column] <= 1) & ~rows[column].isnan()
    return valid


