"""Group keys: the user's columns, under sqlcal's own names inside every query and summary.

A key may take any name the engine accepts, the names of sqlcal's summary and result columns
(``n``, ``p``, ``bin``, ``ece``...) included, and any value: inside the queries and the summary
frames the keys are ``__key0``, ``__key1``, ... (no column sqlcal makes is named so), and
the user's names come back only where results are presented
(:meth:`GroupKeys.present`).

NULL and NaN are two values of a floating key. The engines keep them apart (NaN equals NaN in a
GROUP BY of DuckDB, PostgreSQL and Spark); pandas reads both as NaN. So a floating key travels as
two columns: its value with NaN turned to NULL (``__key0``), and ``__nan0``, true where the value
was NaN. An integer key travels as ``__null0``, true where it is NULL, and its value with NULL
turned to 0: pandas reads an integer column holding a NULL as floats, which merge the integers
above 2^53 that round alike (2^60 and 2^60 + 1). Every frame is then split, merged, sorted and
joined on columns that pandas, a memtable and the engine all read alike, and the groups the
engine keeps apart stay apart.

Presented, a key keeps its name and comes first; NULL shows as None (``<NA>`` in a numeric key)
and NaN as NaN. A column sqlcal adds to a result (the value, ``n``, ``W``, the trust columns)
whose name a key already has takes a trailing underscore, repeated until unique: ``by="n"``
gives the columns ``n`` (the key), then ``ece``, ``n_`` (the count), ``W``...
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import ibis
import ibis.expr.types as ir
import numpy as np
import pandas as pd

#: the internal names of the i-th key's value, NaN flag (floating keys) and NULL flag (integer
#: keys)
VALUE, NAN, NULL = "__key{}", "__nan{}", "__null{}"


@dataclass(frozen=True)
class Key:
    """One group key: the user's ``name``, its value ``column`` in the queries and summaries,
    the ``nan`` column flagging NaN (floating keys), the ``null`` column flagging NULL (integer
    keys), and its ``kind`` (``"float"``, ``"integer"``, ``"other"``, or ``"plain"``: a column
    presented as it is)."""

    name: str
    column: str
    nan: str | None = None
    kind: str = "other"
    null: str | None = None

    @property
    def columns(self) -> tuple[str, ...]:
        """Its internal columns, in the order that sorts NULL after every value."""
        if self.null is not None:
            return (self.null, self.column)
        return (self.column,) if self.nan is None else (self.column, self.nan)


@dataclass(frozen=True)
class GroupKeys:
    """The group keys of a source: each user column, its internal columns, and the conversions
    between the two (:meth:`select` into the engine, :meth:`present` out of it)."""

    keys: tuple[Key, ...] = ()

    @classmethod
    def of(cls, schema: Any, names: Sequence[str]) -> GroupKeys:
        """The keys ``names`` of a table of this Ibis ``schema``, under internal names."""
        out = []
        for i, name in enumerate(names):
            dtype = schema[name]
            kind = "float" if dtype.is_floating() else "integer" if dtype.is_integer() \
                else "other"
            out.append(Key(name, VALUE.format(i), NAN.format(i) if kind == "float" else None,
                           kind, NULL.format(i) if kind == "integer" else None))
        return cls(tuple(out))

    @classmethod
    def plain(cls, columns: Sequence[str]) -> GroupKeys:
        """Keys whose internal columns are the user's (a source served from frames that already
        hold them, such as a stored window), presented as they are."""
        return cls(tuple(Key(c, c, kind="plain") for c in columns))

    @property
    def names(self) -> tuple[str, ...]:
        """The user's key names."""
        return tuple(k.name for k in self.keys)

    @property
    def columns(self) -> tuple[str, ...]:
        """The internal columns every summary is grouped by (a floating key's value, then its
        NaN flag)."""
        return tuple(c for k in self.keys for c in k.columns)

    def column(self, name: str) -> str:
        """The internal value column of the user's key ``name``."""
        return next(k.column for k in self.keys if k.name == name)

    def select(self, table: ir.Table) -> dict[str, ir.Value]:
        """The internal key columns as expressions over the user's ``table``."""
        out = {}
        for key in self.keys:
            col = table[key.name]
            if key.null is not None:
                out[key.null] = col.isnull()
                out[key.column] = col.fill_null(0)
            elif key.nan is None:
                out[key.column] = col
            else:
                nan = col.isnan().fill_null(False)  # isnan(NULL) is NULL (false on Spark)
                out[key.column] = ibis.ifelse(nan, ibis.null(col.type()), col)
                out[key.nan] = nan
        return out

    def own(self, name: str) -> str:
        """The name sqlcal's column ``name`` takes in a result beside these keys
        (:func:`shown_name`)."""
        return shown_name(name, self.names)

    def present(self, frame: pd.DataFrame) -> pd.DataFrame:
        """A frame holding the internal key columns, as the user reads it: the keys first,
        under their names (NULL as None or ``<NA>``, NaN as NaN), then the other columns in
        their order, each renamed by :meth:`own`."""
        internal = set(self.columns)
        columns = {key.name: _shown(key, frame) for key in self.keys}
        columns |= {self.own(c): frame[c] for c in frame.columns if c not in internal}
        return pd.DataFrame(columns, index=frame.index)

    def original(self, shown: str) -> str:
        """The name sqlcal's column had before :meth:`own` renamed it to ``shown``."""
        name = shown
        while name.endswith("_") and self.own(name[:-1]) == shown:
            name = name[:-1]
        return name

    def internal(self, frame: pd.DataFrame, columns: Sequence[str] | None = None
                 ) -> pd.DataFrame:
        """The inverse of :meth:`present`: a presented frame's keys as internal columns, and
        sqlcal's ``columns`` (named as before presenting; default all) from their presented
        names."""
        if columns is None:
            columns = [self.original(c) for c in frame.columns if c not in self.names]
        out = {}
        for key in self.keys:
            shown = frame[key.name]
            if key.null is not None:
                null = shown.isna().to_numpy()
                out[key.null] = null
                out[key.column] = shown.fillna(0).to_numpy(dtype=np.int64) if null.any() \
                    else shown.to_numpy(dtype=np.int64)
                continue
            if key.nan is None:
                out[key.column] = shown
                continue
            values = shown.to_numpy(dtype=float, na_value=np.nan)
            null = shown.isna().to_numpy() if isinstance(shown.dtype, pd.Float64Dtype) \
                else np.zeros(len(shown), bool)
            out[key.nan] = np.isnan(values) & ~null
            out[key.column] = values
        out |= {c: frame[self.own(c)] for c in columns}
        result = pd.DataFrame(out, index=frame.index)
        return result[[*self.columns, *columns]]

    def values(self, key: dict) -> dict:
        """One group's internal key values (as :func:`sqlcal.metrics.groups` yields them) as
        the user's: name -> value, NULL as None and NaN as nan."""
        out = {}
        for k in self.keys:
            value = key.get(k.column)
            if k.null is not None and bool(key.get(k.null)):
                out[k.name] = None
            elif k.nan is not None and bool(key.get(k.nan)):
                out[k.name] = float("nan")
            else:
                out[k.name] = None if _missing(value) else value
        return out

    def id(self, values: dict) -> str:
        """The :func:`group_id` of one group given by the user's key values (name -> value;
        a missing name is NULL): NaN is NULL's stand-in in a key that cannot hold NaN (pandas
        reads a NULL as NaN), and NaN in a floating key."""
        out = {}
        for k in self.keys:
            v = values.get(k.name)
            out[k.name] = None if k.nan is None and _missing(v) else v
        return group_id(out)

    def match(self, table: ir.Table, key: dict) -> ir.BooleanValue:
        """The rows of the user's ``table`` in one group (``key``: its internal values, as
        :func:`sqlcal.metrics.groups` yields them): a NULL value matches NULL only, NaN NaN
        only."""
        return ibis.and_(*(_is(table[name], value) for name, value in self.values(key).items()))


def shown_name(column: str, users: Collection[str]) -> str:
    """The name of a column sqlcal adds to a result (``column``) beside the user's columns
    ``users`` (group keys, and features in a segment search): its own, with a trailing
    underscore added while one of ``users`` holds it. The one rule of every result table: the
    user's names are never changed, and no name of sqlcal's ends with an underscore, so two of
    sqlcal's columns never meet.

    >>> shown_name("segment", {"segment"}), shown_name("z", {"z", "z_"}), shown_name("n", ())
    ('segment_', 'z__', 'n')
    """
    while column in users:
        column += "_"
    return column


def key_value(v):
    """A group key's value as JSON: NULL as null, NaN and infinities as the strings ``"NaN"``,
    ``"Infinity"``, ``"-Infinity"`` (JSON has no such numbers, and null is NULL's), numpy
    scalars as Python's, dates and times in ISO 8601."""
    if v is None or v is pd.NA or v is pd.NaT:
        return None
    if hasattr(v, "item") and not hasattr(v, "isoformat"):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return "NaN" if math.isnan(v) else "Infinity" if v > 0 else "-Infinity"
    if isinstance(v, float) and v.is_integer() and abs(v) < 2**53:
        return int(v)  # an integer key that pandas read as a float beside a NULL
    if hasattr(v, "isoformat"):
        return v.isoformat()
    return v


def records(frame: pd.DataFrame, names: Sequence[str]) -> list[dict]:
    """Each row's key values (name -> value) of a presented frame, NULL as None or ``<NA>`` and
    NaN as NaN (a row of ``iterrows`` may turn ``<NA>`` into NaN)."""
    columns = [frame[name].tolist() for name in names]
    return [dict(zip(names, values)) for values in zip(*columns)] if names else \
        [{} for _ in range(len(frame))]


def group_id(group: dict) -> str:
    """One group's keys (name -> value) as JSON text, sorted: NULL and NaN told apart
    (:func:`key_value`), so it serves as a dict key (NaN != NaN) and as the results table's
    ``group_keys``."""
    return json.dumps({k: key_value(v) for k, v in group.items()}, sort_keys=True)


def _missing(value: Any) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and np.isnan(value))


def _is(col: ir.Value, value: Any) -> ir.BooleanValue:
    if value is None:  # NULL, not NaN (Ibis's PySpark isnull() is IS NULL OR isnan)
        return col.isnull() & ~col.isnan().fill_null(False) if col.type().is_floating() \
            else col.isnull()
    if isinstance(value, float) and np.isnan(value):
        return col.isnan().fill_null(False)
    return col == value


def _shown(key: Key, frame: pd.DataFrame) -> Any:
    """A key's column as presented: NULL as None (``<NA>`` in a numeric key), NaN as NaN."""
    values = frame[key.column]
    if key.nan is not None:
        v = values.to_numpy(dtype=float, na_value=np.nan)
        nan = frame[key.nan].to_numpy(dtype=bool)
        null = np.isnan(v) & ~nan
        if null.any():  # a masked array: <NA> for NULL beside NaN for NaN
            return pd.arrays.FloatingArray(np.where(nan, np.nan, np.where(null, 0.0, v)), null)
        return np.where(nan, np.nan, v)
    if key.null is not None:
        null = frame[key.null].to_numpy(dtype=bool)
        if null.any():  # a masked array: <NA> for NULL
            return pd.arrays.IntegerArray(values.to_numpy(dtype=np.int64), null)
        return values
    if key.kind == "plain" or not values.isna().any():
        return values
    if values.dtype.kind in "mM":  # NaT is a datetime's NULL
        return values
    return values.astype(object).where(values.notna(), None)
