"""Fitted recalibration maps and their export: a map applied in numpy, as an Ibis expression over
any table, as SQL for a dialect, or through a mapping table written to the warehouse.

The fits that make these maps (isotonic regression, Platt scaling) are in
:mod:`sqlcal.recalibration.fits`; this module only holds what a fitted map is and how it leaves
Python. A map is data (:attr:`CalibrationMap.table`: group keys, then its parameters), so applying
it in the warehouse is a CASE expression per group, or a join to that table.

Examples
--------
>>> import pandas as pd
>>> m = IsotonicMap(by=(), table=pd.DataFrame({"lo": [0.1, 0.4], "hi": [0.2, 0.6],
...                                            "value": [0.0, 1.0], "n": [2, 2],
...                                            "W": [2.0, 2.0]}))
>>> m.transform([0.1, 0.3, 0.9]).round(6).tolist()
[0.0, 0.5, 1.0]
"""

from __future__ import annotations

import dataclasses
import html
from dataclasses import dataclass, field

import ibis
import ibis.expr.types as ir
import numpy as np
import pandas as pd

from sqlcal.inputs import engines
from sqlcal.inputs.groupkeys import GroupKeys
from sqlcal.metrics import groups
from sqlcal.query.reductions import number, piecewise
from sqlcal.query.sql import to_tree

#: logit features clip scores to [CLIP, 1 − CLIP]: 0 and 1 have no logit
CLIP = 1e-12
#: |exponents| are clipped here: PostgreSQL's exp() raises on overflow (above about 709), where
#: numpy and DuckDB give inf; σ is then 0 or 1 to within 1e-304 either way
EXP_LIMIT = 700.0
#: maps with more rows than this (isotonic pieces or Platt groups, all groups together) are
#: applied as a join to their mapping table, not inlined as a CASE: a large CASE exceeds Spark's
#: 64 KB generated-method limit (then runs interpreted) and PostgreSQL evaluates it again for
#: every aggregate that reads the mapped column
INLINE_ROWS = 64
#: an isotonic mapping table finds a score's block by an equi-join on (keys, bucket): equal-width
#: buckets over the blocks' boundaries, at most this many per map
MAX_BUCKETS = 1 << 14
#: buckets are doubled (up to MAX_BUCKETS) until no bucket overlaps more blocks than this
BUCKET_BLOCKS = 8


def _null_keys(frame: pd.DataFrame, by) -> pd.DataFrame:
    """NULL group keys as None, not NaN: Spark would store a NaN in a string column as 'NaN'."""
    frame = frame.copy()
    for k in by:
        if frame[k].isna().any() and not pd.api.types.is_float_dtype(frame[k].dtype):
            frame[k] = frame[k].astype(object).where(frame[k].notna(), None)
    return frame


def _sigmoid(eta: ir.FloatingValue) -> ir.FloatingValue:
    return 1 / (1 + ibis.greatest(ibis.least(-eta, EXP_LIMIT), -EXP_LIMIT).exp())


def _missing_score(p: ir.FloatingValue, value: ir.FloatingValue) -> ir.FloatingValue:
    """NULL for a NULL or NaN score (engines sort NaN above every number, so without the guard
    it would take the last block's value), as numpy's transform gives NaN."""
    return ibis.ifelse(p.isnull() | p.isnan(), ibis.null("float64"), value)


# -- fitted maps ------------------------------------------------------------------------------


@dataclass
class CalibrationMap:
    """A fitted recalibration map, one piece per group: apply it in numpy, as an Ibis expression,
    as SQL, or through a mapping table in the warehouse.

    ``table`` is the map as data: group keys first, then the map's parameters (a parameter
    named like a key takes a trailing underscore, as in every result). Rows of a group the map
    was not fitted on map to NULL (NaN in numpy); so do NULL scores. A NULL key matches NULL
    only, a NaN key NaN only. ``keys`` relates the names in ``by`` to the columns of the fit's
    frames (:mod:`sqlcal.inputs.groupkeys`; by default the same).
    """

    by: tuple
    table: pd.DataFrame
    kind: str = ""
    info: dict = field(default_factory=dict)
    keys: GroupKeys | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.keys is None:
            self.keys = GroupKeys.plain(self.by)

    def named(self, keys: GroupKeys) -> CalibrationMap:
        """This map, fitted on frames of internal key columns, under the user's key names."""
        return dataclasses.replace(self, by=keys.names, table=keys.present(self.table),
                                   keys=keys)

    @property
    def _frame(self) -> pd.DataFrame:
        """The table with its keys as internal columns and its parameters under their own
        names (the table itself when the keys are plain)."""
        if all(k.kind == "plain" for k in self.keys.keys):
            return self.table
        cached = self.__dict__.get("_internal")
        if cached is None or cached[0] is not self.table:
            cached = self.__dict__["_internal"] = (self.table, self.keys.internal(self.table))
        return cached[1]

    # subclasses: _piece_numpy(part, p) and _piece_expr(part, p)

    def transform(self, scores, keys: dict | None = None) -> np.ndarray:
        """Calibrated scores for an array of scores of one group (``keys``: its key values)."""
        p = np.asarray(scores, dtype=float)
        part = self._part(keys or {})
        if part is None or not len(part):
            return np.full(p.shape, np.nan)
        out = self._piece_numpy(part, p)
        return np.where(np.isnan(p), np.nan, out)

    def transform_frame(self, frame: pd.DataFrame, score: str) -> np.ndarray:
        """Calibrated scores for every row of a pandas frame holding the score and group keys."""
        out = np.full(len(frame), np.nan)
        if not self.by:
            return self.transform(frame[score].to_numpy(float))
        scores = frame[score].to_numpy(float)
        for key, rows in frame.groupby(list(self.by), sort=False, dropna=False).indices.items():
            key = key if isinstance(key, tuple) else (key,)
            out[rows] = self.transform(scores[rows], dict(zip(self.by, key)))
        return out

    def expr(self, table: ir.Table, score: str) -> ir.FloatingValue:
        """The calibrated score as an Ibis expression over ``table`` (a CASE per group: a
        balanced tree of comparisons for isotonic maps, so a row costs O(log pieces))."""
        p = table[score].cast("float64")
        if not self.by:
            value = self._piece_expr(self._frame, p)
        else:
            branches = []
            for key, part in groups(self._frame, list(self.keys.columns)):
                branches.append((self.keys.match(table, key), self._piece_expr(part, p)))
            value = ibis.cases(*branches, else_=ibis.null("float64"))
        return _missing_score(p, value)

    def apply(self, table: ir.Table, score: str, *, name: str = "calibrated",
              mapping: ir.Table | None = None, inline: bool | None = None) -> ir.Table:
        """``table`` with the calibrated score added as column ``name``.

        Small maps (at most :data:`INLINE_ROWS` rows in :attr:`table`) are inlined as a CASE
        expression; larger ones, or any map given ``mapping`` (the table written by
        :meth:`write`) or ``inline=False``, are applied as a join to the mapping table (uploaded
        with the query when ``mapping`` is not given): an equi-join on the group keys and, for
        isotonic maps, a score bucket, so the query text stays small and each row is compared
        with a few blocks. Both forms give the same values, bit for bit.

        Parameters
        ----------
        table : ibis.Table
            The rows: the score column and the map's group keys.
        score : str
            The score column.
        name : str
            The new column.
        mapping : ibis.Table, optional
            The map's table in the same engine (:meth:`write`).
        inline : bool, optional
            Force the CASE expression (``True``) or the join (``False``).

        Returns
        -------
        ibis.Table
            ``table``'s columns and ``name``.

        Examples
        --------
        >>> import ibis, pandas as pd
        >>> m = IsotonicMap(by=(), table=pd.DataFrame({"lo": [0.1, 0.4], "hi": [0.2, 0.6],
        ...                                            "value": [0.0, 1.0], "n": [2, 2],
        ...                                            "W": [2.0, 2.0]}))
        >>> t = ibis.memtable({"p": [0.1, 0.3, 0.9]})
        >>> m.apply(t, "p", inline=False).order_by("p").execute().calibrated.round(6).tolist()
        [0.0, 0.5, 1.0]
        """
        if mapping is None and (inline or (inline is None and len(self.table) <= INLINE_ROWS)):
            return table.mutate(**{name: self.expr(table, score)})
        if mapping is None:
            mapping = ibis.memtable(self.mapping_frame())
        return self._apply_join(table, score, name, mapping)

    def to_sql(self, table: str, score: str, *, dialect: str = "duckdb",
               name: str = "calibrated", columns: dict | None = None) -> str:
        """``SELECT *, <calibrated score> AS name FROM table`` in a SQL dialect, with the map
        inlined (for a scheduled job or a view in the warehouse). ``columns`` (name → Ibis type)
        types the score and group keys; by default the score is a double and the keys take the
        type they had when the map was fitted."""
        from sqlglot import exp

        schema = columns or {score: "float64", **{k: self._key_type(k) for k in self.by}}
        unbound = ibis.table(schema, name=table)
        query = self.apply(unbound, score, name=name, inline=True)
        read = engines.sqlglot_dialect(dialect)
        tree = to_tree(query, dialect)
        source = tree.args.get("from_") or tree.args["from"]  # renamed in sqlglot 28
        alias = source.this.alias_or_name
        mapped = [e for e in tree.expressions if e.alias_or_name == name]
        star = exp.Column(this=exp.Star(), table=exp.to_identifier(alias, quoted=True))
        tree.set("expressions", [star, *mapped])
        return tree.sql(dialect=read)

    def write(self, con, name: str, *, database: str | None = None, path: str | None = None,
              overwrite: bool = False) -> ir.Table:
        """Write the mapping table to the warehouse (a small table: a few rows per piece) and
        return it, for :meth:`apply` ``(table, score, mapping=...)``.

        Parameters
        ----------
        con : ibis backend
            The engine holding the rows the map will be applied to.
        name : str
            The table's name.
        database : str, optional
            The database (or ``"catalog.database"``) to write it in; the connection's current
            one by default.
        path : str, optional
            Spark only: the folder the table's Parquet files are written to (an external
            table). On a cluster whose executors run on other hosts it must be storage they
            all see (HDFS, S3, a shared mount): by default Spark writes under its
            ``spark.sql.warehouse.dir``, a folder in the driver's working directory unless
            configured.
        overwrite : bool
            Replace an existing table of that name.

        Returns
        -------
        ibis.Table
            The mapping table.

        Examples
        --------
        >>> import ibis, pandas as pd
        >>> m = IsotonicMap(by=(), table=pd.DataFrame({"lo": [0.1, 0.4], "hi": [0.2, 0.6],
        ...                                            "value": [0.0, 1.0], "n": [2, 2],
        ...                                            "W": [2.0, 2.0]}))
        >>> con = ibis.duckdb.connect()
        >>> mapping = m.write(con, "iso_map")
        >>> t = con.create_table("preds", pd.DataFrame({"p": [0.1, 0.3, 0.9]}))
        >>> m.apply(t, "p", mapping=mapping).order_by("p").execute().calibrated.round(6).tolist()
        [0.0, 0.5, 1.0]
        """
        frame = self.mapping_frame()
        if path is None:
            return con.create_table(name, frame, database=database, overwrite=overwrite)
        if getattr(con, "name", None) != "pyspark":
            from sqlcal.options import OptionError

            raise OptionError(f"path= places a Spark table's files; on {con.name} the engine "
                              "stores its tables itself: pass database= (or nothing)")
        session = con._session
        target = f"{database}.{name}" if database else name
        session.createDataFrame(frame).write.saveAsTable(
            target, format="parquet", mode="overwrite" if overwrite else "error",
            path=str(path))
        return con.table(name, database=database)

    def mapping_frame(self) -> pd.DataFrame:
        """The mapping table: the keys' internal columns (a floating key's value and NaN flag)
        and the parameters under their own names."""
        return _null_keys(self._frame.reset_index(drop=True), self.keys.columns)

    def _part(self, keys: dict) -> pd.DataFrame | None:
        if not self.by:
            return self._frame
        want = self.keys.id(keys)
        for key, part in groups(self._frame, list(self.keys.columns)):
            if self.keys.id(self.keys.values(key)) == want:
                return part
        return None

    def _key_type(self, key: str) -> str:
        dtype = self.table[key].dtype
        if pd.api.types.is_bool_dtype(dtype):
            return "boolean"
        if pd.api.types.is_integer_dtype(dtype):
            return "int64"
        if pd.api.types.is_float_dtype(dtype):
            return "float64"
        if pd.api.types.is_datetime64_any_dtype(dtype):
            return "timestamp"
        return "string"

    def _join_keys(self, table: ir.Table, mapping: ir.Table) -> list:
        """Each key equal, NULL equal to NULL, NaN to NaN, as equalities an engine can hash (an
        OR of IS NULLs would make every engine compare every row with every mapping row). The
        mapping table holds the keys' internal columns (:meth:`mapping_frame`); one written
        under the keys' own names is read too."""
        out = []
        for key in self.keys.keys:
            col = table[key.name]
            internal = key.column in mapping.columns
            m = mapping[key.column if internal else key.name]
            if key.null is not None and internal:  # the mapping's value is 0 for NULL
                out += [col.fill_null(0) == m, col.isnull() == mapping[key.null]]
                continue
            if key.nan is not None and internal:  # the mapping's value is NULL for NaN
                nan = col.isnan().fill_null(False)
                out.append(nan == mapping[key.nan])
                col = ibis.ifelse(nan, ibis.null(col.type()), col)
            fill = _null_stand_in(col.type())
            if fill is None:  # a type without a stand-in: the portable, unhashable form
                out.append((col == m) | (col.isnull() & m.isnull()))
            else:
                out += [col.fill_null(fill) == m.fill_null(fill), col.isnull() == m.isnull()]
        return out

    def __repr__(self) -> str:
        groups_n = len(self.table.drop_duplicates(list(self.by))) if self.by else 1
        return (f"<{type(self).__name__}: {self.kind}, {groups_n} group(s), "
                f"{len(self.table)} row(s) in the map>")

    def _repr_html_(self) -> str:
        head = html.escape(repr(self))
        return f"<p>{head}</p>" + self.table.head(20).to_html(index=False)


@dataclass(repr=False)
class IsotonicMap(CalibrationMap):
    """Isotonic regression per group: blocks ``[lo, hi]`` of scores mapped to ``value`` (the
    block's observed rate), linear between blocks (scikit-learn's ``IsotonicRegression``) or a
    step, clipped outside the fitted range."""

    interpolation: str = "linear"

    def _slopes(self, part: pd.DataFrame) -> np.ndarray:
        lo, hi, v = (part[c].to_numpy(float) for c in ("lo", "hi", "value"))
        slope = np.zeros(len(v))
        if self.interpolation == "linear" and len(v) > 1:
            slope[:-1] = (v[1:] - v[:-1]) / (lo[1:] - hi[:-1])
        return slope

    def _piece_numpy(self, part, p):
        lo, hi, v = (part[c].to_numpy(float) for c in ("lo", "hi", "value"))
        slope = self._slopes(part)
        k = np.clip(np.searchsorted(lo, p, side="right") - 1, 0, len(v) - 1)
        # the same operations, in the same order, as the SQL expression below
        between = v[k] + (p - hi[k]) * slope[k]
        return np.where((p <= hi[k]) | (slope[k] == 0), v[k], between)

    def _piece_expr(self, part, p):
        lo, hi, v = (part[c].to_numpy(float) for c in ("lo", "hi", "value"))
        return piecewise(p, lo, hi, v, self._slopes(part))

    def _grid(self) -> tuple[float, float, float, int]:
        """The buckets: (a, b, scale, count); a score's bucket is
        ``floor((clip(p, a, b) − a) · scale)`` clipped to ``[0, count − 1]``, equal-width over
        the blocks' finite boundaries ``[a, b]`` (all groups), doubled until no bucket overlaps
        more than :data:`BUCKET_BLOCKS` blocks of a group (or :data:`MAX_BUCKETS`)."""
        bounds, sizes = [], []
        for _, part in groups(self._frame, list(self.keys.columns)):
            bounds.append(part["lo"].to_numpy(float)[1:])
            sizes.append(len(part))
        inner = np.concatenate(bounds) if bounds else np.empty(0)
        if not len(inner) or inner.min() == inner.max():
            a = float(inner[0]) if len(inner) else 0.0
            return a, a, 0.0, 1
        a, b = float(inner.min()), float(inner.max())
        count = 1 << int(np.ceil(np.log2(max(2, 2 * max(sizes)))))
        count = min(count, MAX_BUCKETS)
        while count < MAX_BUCKETS:
            scale = count / (b - a)
            worst = max((np.bincount(_bucket_numpy(x, a, b, scale, count), minlength=count).max()
                         for x in bounds if len(x)), default=0)
            if worst < BUCKET_BLOCKS:
                break
            count *= 2
        return a, b, count / (b - a), count

    def mapping_frame(self) -> pd.DataFrame:
        """The mapping table: per block, keys, ``lo``, ``hi``, ``value``, ``slope`` to the next
        block, the score range ``[start, stop)`` the block serves (±inf: unbounded; a NaN
        would read back as NaN or NULL depending on how a frame reaches Spark), and one
        row per score ``bucket`` the range overlaps (widened by a bucket each side, so a bucket
        the engine rounds differently still finds the block)."""
        a, b, scale, count = self._grid()
        parts = []
        for _, part in groups(self._frame, list(self.keys.columns)):
            if not len(part):
                continue
            part = part.copy()
            part["slope"] = self._slopes(part)
            lo = part["lo"].to_numpy(float)
            part["start"] = np.append(-np.inf, lo[1:])
            part["stop"] = np.append(lo[1:], np.inf)
            first = np.append(0, np.maximum(_bucket_numpy(lo[1:], a, b, scale, count) - 1, 0))
            last = np.append(np.minimum(_bucket_numpy(lo[1:], a, b, scale, count) + 1,
                                        count - 1), count - 1)
            reps = last - first + 1
            part = part.loc[part.index.repeat(reps)].reset_index(drop=True)
            part["bucket"] = np.concatenate([np.arange(f, l + 1) for f, l in zip(first, last)])
            parts.append(part)
        columns = [*self.keys.columns, "bucket", "start", "stop", "lo", "hi", "value", "slope",
                   "n", "W"]
        if not parts:
            return pd.DataFrame(columns=columns)
        frame = pd.concat(parts, ignore_index=True)[columns]
        frame["bucket"] = frame["bucket"].astype("int64")
        return _null_keys(frame, self.keys.columns)

    def _apply_join(self, table, score, name, mapping):
        p = table[score].cast("float64")
        m = mapping
        if "bucket" in m.columns:
            # no OR in the condition: an engine hashes the equalities only when every other
            # conjunct is a plain comparison (DuckDB: a hash join instead of a nested loop,
            # 0.1 s against 27 s on 10^6 rows). An unbounded end is ±inf, and +inf (or NaN) is
            # compared as the largest double, so it finds the last block.
            a, b, scale, count = self._grid()
            top = ibis.least(p, number(np.finfo(float).max))
            cond = [_bucket_expr(p, a, b, scale, count) == m.bucket, *self._join_keys(table, m),
                    p >= m.start, top < m.stop]
        else:  # a table written before buckets: the range join alone
            cond = [*self._join_keys(table, m), m.start.isnull() | (p >= m.start),
                    m.stop.isnull() | (p < m.stop)]
        joined = table.left_join(m, cond)
        value = ibis.ifelse((p <= m.hi) | (m.slope == 0), m.value, m.value + (p - m.hi) * m.slope)
        return joined.select(*table.columns, **{name: _missing_score(p, value.cast("float64"))})


def _bucket_numpy(x: np.ndarray, a: float, b: float, scale: float, count: int) -> np.ndarray:
    """The bucket of scores ``x``: the same operations, in the same order, as the SQL."""
    cell = np.floor((np.clip(x, a, b) - a) * scale)
    return np.clip(cell, 0, count - 1).astype(np.int64)


def _bucket_expr(p, a, b, scale, count):
    """The bucket of score ``p`` in the engine (NaN clips to ``b``; NULL matches no block or the
    last, and maps to NULL either way)."""
    clipped = ibis.least(ibis.greatest(p, number(a)), number(b))
    cell = ((clipped - number(a)) * number(scale)).floor()
    return ibis.greatest(ibis.least(cell, count - 1), 0)


def _null_stand_in(dtype):
    """A value of the key's type standing for NULL in a hashable join key (the IS NULL equality
    beside it tells a NULL from the value itself)."""
    if dtype.is_string():
        return ""
    if dtype.is_boolean():
        return False
    if dtype.is_integer() or dtype.is_floating():
        return 0
    if dtype.is_date():
        return ibis.date(1970, 1, 1)
    if dtype.is_timestamp():
        return ibis.timestamp(1970, 1, 1, 0, 0, 0).cast(dtype)
    return None


@dataclass(repr=False)
class PlattMap(CalibrationMap):
    """A logistic map per group: σ(a + b·x), x = logit(clip(p)) or the score itself; a group
    with a ``constant`` (modified Platt's fallback) maps every score to it."""

    feature: str = "logit"

    def _x_numpy(self, p):
        if self.feature == "score":
            return p
        q = np.clip(p, CLIP, 1 - CLIP)
        return np.log(q / (1 - q))

    def _x_expr(self, p):
        if self.feature == "score":
            return p
        q = ibis.greatest(ibis.least(p, 1 - CLIP), CLIP)
        return (q / (1 - q)).ln()

    def _piece_numpy(self, part, p):
        row = part.iloc[0]
        if not pd.isna(row.get("constant", np.nan)):
            return np.full(p.shape, float(row["constant"]))
        eta = row["a"] + row["b"] * self._x_numpy(p)
        return 1 / (1 + np.exp(np.clip(-eta, -EXP_LIMIT, EXP_LIMIT)))

    def _piece_expr(self, part, p):
        row = part.iloc[0]
        if not pd.isna(row.get("constant", np.nan)):
            return number(row["constant"])
        if not (np.isfinite(row["a"]) and np.isfinite(row["b"])):
            return ibis.null("float64")  # a group without a fit (see platt's Notes)
        return _sigmoid(number(row["a"]) + number(row["b"]) * self._x_expr(p))

    def _apply_join(self, table, score, name, mapping):
        p = table[score].cast("float64")
        m = mapping
        joined = table.left_join(m, self._join_keys(table, m)) if self.by else table.cross_join(m)
        fitted = _sigmoid(m.a + m.b * self._x_expr(p))
        # no mapping row (a group the map does not know) or no fit: NULL, as the CASE gives
        # (the clipped exponent would turn a NULL or NaN coefficient into σ = 1e-304)
        fit = ibis.and_(*(c.notnull() & ~c.isnan() & ~c.isinf() for c in (m.a, m.b)))
        constant = m.constant.notnull() & ~m.constant.isnan()  # NaN: Spark may keep pandas' NaN
        value = ibis.ifelse(constant, m.constant, ibis.ifelse(fit, fitted, ibis.null("float64")))
        return joined.select(*table.columns, **{name: _missing_score(p, value.cast("float64"))})


# -- temperature scaling of multiclass predictions ---------------------------------------------


@dataclass(repr=False)
class TemperatureMap:
    """Temperature scaling of multiclass predictions (:func:`sqlcal.temperature_scaling`): the
    calibrated probability of class k is softmax(z / T)ₖ, with z the logits or the log
    probabilities (log max(p, clip) when fitted with a clip), one T per group.

    ``table`` holds the group keys, ``temperature``, and the fit's ``n``, ``W``, ``nll_before``
    (the weighted mean negative log-likelihood at T = 1), ``nll_after`` (at the fitted T) and
    ``scans`` (Newton scans of the rows). ``layout`` is the multiclass layout the map reads
    (wide: one column per class; long: one row per example and class); rows of a group the map
    was not fitted on map to NULL.
    """

    by: tuple
    table: pd.DataFrame
    layout: tuple
    logits: bool
    clip: float | None
    types: dict = field(default_factory=dict)
    kind: str = "temperature scaling"
    #: the keys: the names in ``by`` and the internal columns of the fit (sqlcal.inputs.groupkeys)
    keys: GroupKeys | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.keys is None:
            self.keys = GroupKeys.plain(self.by)

    _frame = CalibrationMap._frame

    @property
    def temperature(self):
        """The fitted temperature: a float, or a Series indexed by the group keys."""
        column = self.keys.own("temperature")
        if not self.by:
            return float(self.table[column].iloc[0])
        return self.table.set_index(list(self.by))[column].rename("temperature")

    @property
    def columns(self) -> tuple:
        """The columns the map reads: wide, one per class; long, the class's column."""
        return self.layout[2] if self.layout[0] == "wide" else (self.layout[4],)

    def transform(self, values, keys: dict | None = None) -> np.ndarray:
        """Calibrated probabilities of an array of shape (examples, classes) holding the
        columns of a wide map, for one group (``keys``: its key values)."""
        v = np.asarray(values, dtype=float)
        row = CalibrationMap._part(self, keys or {})
        if row is None or not len(row):
            return np.full(v.shape, np.nan)
        beta = 1 / float(row.temperature.iloc[0])
        if self.logits:
            z = v
        else:
            with np.errstate(divide="ignore"):
                z = np.log(np.maximum(v, self.clip) if self.clip is not None else v)
        z = beta * (z - z.max(axis=1, keepdims=True))
        e = np.exp(np.maximum(z, -EXP_LIMIT))
        if not self.logits and self.clip is None:
            e = np.where(v > 0, e, 0.0)
        return e / e.sum(axis=1, keepdims=True)

    def _beta(self, table: ir.Table) -> ir.FloatingValue:
        if not self.by:
            return number(1 / float(self._frame.temperature.iloc[0]))
        branches = [(self.keys.match(table, key), number(1 / float(part.temperature.iloc[0])))
                    for key, part in groups(self._frame, list(self.keys.columns))]
        return ibis.cases(*branches, else_=ibis.null("float64"))

    def expressions(self, table: ir.Table) -> list:
        """The calibrated probabilities as Ibis expressions over ``table``, one per class
        column (wide); long: ``table`` with column ``sqlcal_q_`` holding the row's class's
        (a window over the example's rows)."""
        beta = self._beta(table)
        from sqlcal.query import reductions

        if self.layout[0] == "wide":
            p = [table[c].cast("float64") for c in self.layout[2]]
            z = [reductions.multiclass_log_scores(pk, self.logits, self.clip) for pk in p]
            zero = [pk <= 0 for pk in p] if not self.logits and self.clip is None else None
            return reductions.softmax_wide(z, beta, zero=zero)
        p = table[self.layout[4]].cast("float64")
        z = reductions.multiclass_log_scores(p, self.logits, self.clip)
        zero = p <= 0 if not self.logits and self.clip is None else None
        example = [*self.layout[1], self.layout[2]]
        return reductions.softmax_long(table, z, example, beta, "sqlcal_q_", zero=zero)

    def names(self, prefix: str = "calibrated_", name: str = "calibrated") -> list:
        """The columns :meth:`apply` adds: ``prefix`` + each class column (wide), or ``name``."""
        if self.layout[0] == "wide":
            return [f"{prefix}{c}" for c in self.layout[2]]
        return [name]

    def apply(self, table: ir.Table, *, prefix: str = "calibrated_",
              name: str = "calibrated") -> ir.Table:
        """``table`` with the calibrated probabilities added: wide, a column ``prefix`` + each
        class column; long, a column ``name`` (the softmax over the example's rows).

        Examples
        --------
        >>> import ibis, pandas as pd
        >>> m = TemperatureMap(by=(), table=pd.DataFrame({"temperature": [2.0]}),
        ...                    layout=("wide", (), ("a", "b"), "y", None, ("a", "b")),
        ...                    logits=True, clip=None)
        >>> t = ibis.memtable(pd.DataFrame({"a": [2.0], "b": [0.0]}))
        >>> m.apply(t).execute().round(6).values.tolist()
        [[2.0, 0.0, 0.731059, 0.268941]]
        """
        if self.layout[0] == "long":
            out = self.expressions(table)
            return out.select(*table.columns, **{name: out.sqlcal_q_})
        return table.mutate(**dict(zip(self.names(prefix, name), self.expressions(table))))

    def sql(self, table: str = "predictions", *, dialect: str = "duckdb",
            prefix: str = "calibrated_", name: str = "calibrated",
            columns: dict | None = None) -> str:
        """``SELECT *, <calibrated probabilities> FROM table`` in a SQL dialect (duckdb,
        postgres, pyspark, snowflake, bigquery, …), the temperatures inlined. ``columns`` (name
        → Ibis type) types the columns read; by default they take the types they had when the
        map was fitted. Long layout: a softmax over each example's rows needs a subquery, so
        the query lists its columns (those of ``columns``, by default the ones the map reads)
        instead of ``*``."""
        from sqlglot import exp

        schema = columns or dict(self.types)
        unbound = ibis.table(schema, name=table)
        query = self.apply(unbound, prefix=prefix, name=name)
        added = self.names(prefix, name)
        read = engines.sqlglot_dialect(dialect)
        tree = to_tree(query, dialect)
        if self.layout[0] == "long":  # a window over a subquery: the columns are listed
            return tree.sql(dialect=read)
        source = tree.args.get("from_") or tree.args["from"]
        alias = source.this.alias_or_name
        mapped = [e for e in tree.expressions if e.alias_or_name in added]
        star = exp.Column(this=exp.Star(), table=exp.to_identifier(alias, quoted=True))
        tree.set("expressions", [star, *mapped])
        return tree.sql(dialect=read)

    def __repr__(self) -> str:
        if not self.by:
            return f"<TemperatureMap: T = {self.temperature:.6g}>"
        return f"<TemperatureMap: {len(self.table)} group(s), by {list(self.by)}>"

    def _repr_html_(self) -> str:
        return f"<p>{html.escape(repr(self))}</p>" + self.table.head(20).to_html(index=False)
