"""The summary store's tables in their engine: the connection, the reads, and the one writer.

:mod:`sqlcal.monitor.store` decides what the store holds (:mod:`sqlcal.monitor.schema`: table
names, columns, versions); this module runs what that takes, and knows no layout: it is handed
table names and columns. Reads are SELECTs run by the executor
(:func:`sqlcal.query.executor.fetch`). Writes go through :func:`writing` only: under the
store's lock, in one transaction where the engine has them, a :class:`Writer` creates tables,
appends rows and clears the ``current`` flag of older versions; nothing else here writes.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from typing import Any, Iterator, Sequence

import ibis
import ibis.expr.types as ir
import pandas as pd
import sqlglot.expressions as exp

from sqlcal.errors import StoreError
from sqlcal.inputs import engines
from sqlcal.inputs import sources as _inputs
from sqlcal.inputs.sources import connect_url
from sqlcal.query import executor

#: the names of a DuckDB store file (those sqlcal.source reads as a DuckDB database)
DB_SUFFIXES = (".duckdb", ".ddb", ".db")
#: stores opened by path or URL, kept open (an in-memory DuckDB store lives as long as this)
CONNECTIONS: dict[str, Any] = {}
#: URL schemes of databases that keep tables (an in-memory engine such as polars:// does not)
DATABASES = frozenset({"postgres", "postgresql", "mysql", "mssql", "snowflake", "bigquery",
                       "trino", "clickhouse", "databricks", "oracle", "exasol", "impala",
                       "risingwave", "athena", "sqlite", "druid"})


# -- the connection ----------------------------------------------------------------------------


def connect(store: Any, *, create: bool = False):
    """The Ibis connection of a store: a backend as is; a database URL through
    ``ibis.connect``; a DuckDB file (``.duckdb``, ``.ddb`` or ``.db``, or ``":memory:"``) opened
    for writing and kept open per path.

    A store is a database: anything else (a Parquet or CSV path, a folder, a URL of an engine
    that keeps no tables) is refused with a :class:`StoreError` before any work, and so is a
    DuckDB path with no file unless ``create`` (a snapshot creates it; a reader finds nothing
    there).
    """
    if hasattr(store, "list_tables"):
        return store
    if not isinstance(store, (str, os.PathLike)):
        raise StoreError(f"store must be a DuckDB file, a database URL or an Ibis connection, "
                         f"not {type(store).__name__}")
    text = os.fspath(store)
    key = _connection_key(text)
    if key in CONNECTIONS:
        return CONNECTIONS[key]
    if "://" in text and not text.startswith("duckdb://"):
        scheme = text.split("://", 1)[0].lower()
        if scheme not in DATABASES:
            raise StoreError(f"store: a {scheme}:// URL names no database sqlcal can keep its "
                             "summary tables in; use a DuckDB file (monitor.duckdb), a database "
                             "URL such as postgres://..., or an Ibis connection")
        con = connect_url(text)
    else:
        path = text[len("duckdb://"):] if text.startswith("duckdb://") else text
        check_store_path(path, create=create)
        try:
            con = ibis.duckdb.connect(path or ":memory:")
        except Exception as e:  # DuckDB lets one process open a file for writing
            if "lock" not in str(e).lower():
                raise
            holder = re.search(r"PID (\d+)", str(e))
            raise StoreError(f"store {path!r} is open for writing in another process"
                             + (f" (PID {holder.group(1)})" if holder else "")
                             + ": DuckDB lets one process write a file at a time; run again "
                             "when it has finished") from None
    CONNECTIONS[key] = con
    return con


def _connection_key(text: str) -> str:
    """A kept connection's key: a URL as written, a DuckDB file by its absolute path (the same
    relative path names another file once the working directory changes: a notebook's, a
    scheduler's)."""
    if "://" in text and not text.startswith("duckdb://"):
        return text
    path = text[len("duckdb://"):] if text.startswith("duckdb://") else text
    return path if path in ("", ":memory:") else os.path.abspath(path)


def close(store: Any) -> None:
    """Close the connection :func:`connect` keeps open for a store path or URL (a DuckDB file
    is then free for another process to write)."""
    con = CONNECTIONS.pop(_connection_key(os.fspath(store)), None) \
        if isinstance(store, (str, os.PathLike)) else None
    if con is not None:
        _handles(con).clear()
        con.disconnect()


def check_store_path(path: str, *, source: Any = None, create: bool = True) -> None:
    """Refuse a DuckDB store path that cannot hold a store, before it is opened: a store is a
    database. One that exists must be a regular file holding a DuckDB database (a FIFO would
    block, a folder or a data file fail late, or be mistaken for a store); a new one is named
    like one (``.duckdb``, ``.ddb``, ``.db``: a ``.parquet`` path would become a DuckDB file
    that no Parquet reader opens), and only a writer (``create``) makes one; and it is never the
    predictions' own database (``source``, or one this process reads through a read-only
    connection). A :class:`StoreError`; URLs and ``":memory:"`` pass."""
    if "://" in path or path in ("", ":memory:"):
        return
    shown = f"store {path!r}"
    if os.path.lexists(path):
        if not os.path.isfile(path):  # follows a symlink to the database it names
            raise StoreError(f"{shown} is not a regular file (a directory, a FIFO or a "
                             "device): a store is a database, a DuckDB file or a database URL")
        with open(path, "rb") as f:
            head = f.read(12)
        if head[8:12] != b"DUCK":
            raise StoreError(f"{shown} exists and is not a DuckDB database: a store is a "
                             "database, and sqlcal never writes over a file: name a new "
                             "DuckDB file or a database URL")
    elif not path.lower().endswith(DB_SUFFIXES):
        raise StoreError(f"{shown} is not a DuckDB database path ({', '.join(DB_SUFFIXES)}): "
                         "a store is a database (a DuckDB file, a database URL such as "
                         "postgres://..., or an Ibis connection); summaries are never written "
                         "into a data file")
    elif not create:
        raise StoreError(f"no store at {path!r} (no such file): snapshot into it first")
    if os.path.abspath(path) in _inputs.connections:
        raise StoreError(f"{shown} is open read-only in this process as a source of "
                         "predictions; the store must be another database")
    if isinstance(source, str):
        source = source.removeprefix("duckdb://")
        if "://" not in source and os.path.exists(source) and os.path.exists(path) \
                and os.path.samefile(path, source):
            raise StoreError(f"{shown} is the source's database; sqlcal only reads the "
                             "predictions: name another database for the store")


def engine(con) -> str:
    """The Ibis backend name of a store's connection (``"duckdb"``, ``"postgres"``, ...)."""
    return getattr(con, "name", "")


# -- reading -----------------------------------------------------------------------------------


def tables(con) -> set[str]:
    """The store's tables (the handles of those dropped behind sqlcal's back are forgotten)."""
    names = set(con.list_tables())
    for gone in set(_handles(con)) - names:
        _handles(con).pop(gone)
    return names


def columns(con, name: str) -> list[str]:
    """A store table's columns, in order."""
    return list(_table(con, name).columns)


def read(con, name: str) -> pd.DataFrame:
    """A whole store table (the manifest: one row per written version of a period)."""
    return executor.fetch(_table(con, name))


def latest(con, name: str, column: str, by: Sequence[str], *, where: dict | None = None
           ) -> pd.DataFrame:
    """The greatest ``column`` per ``by`` of a store table, on the rows whose columns equal
    ``where``'s values."""
    t = _table(con, name)
    if where:
        t = t.filter(*[t[c] == v for c, v in where.items()])
    return executor.fetch(t.group_by(list(by)).aggregate(**{column: t[column].max()}))


def merged(con, name: str, *, manifest: str, spec_hash: str, periods: Sequence,
           delays: Sequence[int] | None, params: dict, keys: Sequence[str],
           rules: dict[str, str]) -> pd.DataFrame:
    """The rows of store table ``name`` of one spec, the given periods (their current version:
    the greatest one with a row in the ``manifest`` table, selected by a semi-join in the
    engine, so a window of any number of periods is one flat IN list and no in-memory table is
    registered), the ``delays`` admitted (None: all) and the ``params`` variant, merged per
    ``keys`` by ``rules`` (column -> ``"sum"``, ``"min"`` or ``"max"``)."""
    t = _table(con, name)
    when = [ibis.literal(pd.Timestamp(p).to_pydatetime()) for p in sorted(set(periods))]
    if not when:
        when = [ibis.literal(None, type="timestamp")]
    m = _table(con, manifest)
    current = m.filter(m.spec_hash == spec_hash, m.period_start.isin(when)).group_by(
        "period_start").aggregate(version=m.version.max())
    cond = [t.spec_hash == spec_hash, t.period_start.isin(when)]
    if delays is not None:
        cond.append(t.delay.isin([int(d) for d in delays]))
    for column, value in params.items():
        cond.append(t[column] == value)
    t = t.filter(*cond).semi_join(current, ["period_start", "version"])
    aggs = {c: getattr(t[c], rule)() for c, rule in rules.items()}
    keys = list(keys)
    return executor.fetch(t.group_by(keys).aggregate(**aggs) if keys else t.aggregate(**aggs))


def _table(con, name: str) -> ir.Table:
    """The Ibis table of a store table, its schema read once per connection (each read is a
    catalog query; a daily check made some 20 of them). Forgotten when sqlcal creates the table
    or the store is closed; a table dropped behind sqlcal's back fails its next query."""
    known = _handles(con)
    if name not in known:
        known[name] = con.table(name)
    return known[name]


def _handles(con) -> dict:
    """The store tables read on ``con``, kept on the connection (they live and go with it)."""
    known = getattr(con, "_sqlcal_store_tables", None)
    if known is None:
        known = {}
        con._sqlcal_store_tables = known
    return known


# -- the one writer ----------------------------------------------------------------------------


class Writer:
    """What a snapshot run writes, inside :func:`writing`: the store's only writes."""

    def __init__(self, con, tables: set[str]):
        self.con, self.tables = con, tables

    def append(self, name: str, frame: pd.DataFrame, cols: Sequence[tuple],
               unique: Sequence[str] = ()) -> None:
        """Append ``frame``'s ``cols`` (``(name, type)``) to table ``name``, created on the
        first write (``unique``: columns the engine keeps unique, where it keeps constraints),
        dropping the in-memory table the insert registers."""
        if not len(frame):
            return
        if name not in self.tables:
            _create(self.con, name, cols, unique)
            _handles(self.con).pop(name, None)
            self.tables.add(name)
        rows = ibis.memtable(frame[[c for c, _ in cols]], schema=ibis.schema(list(cols)))
        try:
            self.con.insert(name, rows)
        finally:
            _forget(self.con, rows)

    def add_columns(self, name: str, cols: Sequence[tuple]) -> None:
        """Add the columns ``cols`` (``(name, type)``, in order, NULL in the rows already
        there) to table ``name``, in the run's transaction: an older summary version's table
        takes a later one's sums. A column already there (a concurrent run added it first, under
        the store's lock) is left as it is."""
        if not cols or name not in self.tables:
            return
        _handles(self.con).pop(name, None)  # read the table's columns as they are now
        have = set(columns(self.con, name))
        defs = ibis.schema([c for c in cols if c[0] not in have]).to_sqlglot_column_defs(
            self.con.dialect)
        table = exp.Table(this=exp.to_identifier(name, quoted=True))
        for column in defs:
            alter = exp.Alter(this=table, kind="TABLE", actions=[column])
            self.con.raw_sql(alter.sql(dialect=self.con.dialect))
        _handles(self.con).pop(name, None)

    def clear_current(self, name: str, spec_hash: str, periods: Sequence) -> None:
        """Clear ``current`` on the manifest rows of the periods about to be written (one
        UPDATE, where the engine has one, before the new manifest rows; readers pick the
        greatest version either way)."""
        if not periods or engine(self.con) not in ("duckdb", "postgres"):
            return
        when = [exp.cast(exp.Literal.string(pd.Timestamp(t).isoformat(sep=" ")), "timestamp")
                for t in periods]

        def col(c):
            return exp.column(c, quoted=True)
        cond = exp.and_(col("spec_hash").eq(exp.Literal.string(spec_hash)),
                        col("period_start").isin(*when), col("current"))
        update = exp.update(exp.Table(this=exp.to_identifier(name, quoted=True)),
                            {col("current"): exp.false()}, where=cond)
        self.con.raw_sql(update.sql(dialect=self.con.name))


@contextlib.contextmanager
def writing(con, lock: str) -> Iterator[Writer]:
    """A run's rows, manifest and checks in one transaction where the engine has them, under
    the store's lock (``lock``: a name, the tables' prefix). On PostgreSQL a transaction-level
    advisory lock: a second run waits for the first to commit, then reads its manifest (the
    caller reads it again inside) and writes only what is still due, and the manifest's unique
    version refuses a duplicate in any case. DuckDB lets one process open a file for writing (a
    second one is refused when it connects), and in one process the connection runs one
    transaction. Other engines (Spark) rely on the manifest-last protocol: rows without a
    manifest row are never read."""
    kind = engine(con)
    if kind == "postgres":
        with con.con.transaction():
            with con.con.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(%s)", (_lock_id(lock),))
            yield Writer(con, tables(con))
        return
    if kind != "duckdb":
        yield Writer(con, tables(con))
        return
    con.con.begin()
    try:
        yield Writer(con, tables(con))
    except BaseException:
        con.con.rollback()
        raise
    con.con.commit()


def _lock_id(name: str) -> int:
    """The advisory lock of a prefix's tables: a signed 64-bit number from its name."""
    digest = hashlib.sha256(f"sqlcal store {name}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _create(con, name: str, cols: Sequence[tuple], unique: Sequence[str] = ()) -> None:
    if not unique or engine(con) not in ("duckdb", "postgres"):
        con.create_table(name, schema=ibis.schema(list(cols)))
        return
    defs = ibis.schema(list(cols)).to_sqlglot_column_defs(con.dialect)
    key = exp.UniqueColumnConstraint(this=exp.Schema(
        expressions=[exp.to_identifier(c, quoted=True) for c in unique]))
    create = exp.Create(kind="TABLE", this=exp.Schema(
        this=exp.Table(this=exp.to_identifier(name, quoted=True)), expressions=[*defs, key]))
    con.raw_sql(create.sql(dialect=con.dialect))


def forget_frames(table: ir.Table) -> None:
    """Drop what the default engine registered for the in-memory frames ``table`` reads (a
    snapshot of a pandas frame registers one; a long-lived process would keep them all)."""
    import ibis.expr.operations as ops

    frames = table.op().find(ops.InMemoryTable)
    if not frames:
        return
    con = engines.backend_of(table)
    known = getattr(con, "_memtables", None)
    for op in frames:
        if known is not None and op in known:
            _forget(con, op.to_expr())


def _forget(con, table: ir.Table) -> None:
    """Drop the in-memory table Ibis registered on ``con`` for ``table``: Ibis keeps it until
    the process exits, so a long-lived process would pile them up (with their data)."""
    op = table.op()
    kind = engine(con)
    try:
        if kind == "duckdb":
            con.con.unregister(op.name)
        elif kind == "pyspark":
            con._session.catalog.dropTempView(op.name)
        else:
            drop = exp.Drop(kind="TABLE", exists=True,
                            this=exp.Table(this=exp.to_identifier(op.name, quoted=True)))
            con.raw_sql(drop.sql(dialect=con.dialect))
    finally:
        registered = getattr(con, "_memtables", None)
        if registered is not None:
            registered.discard(op)
