"""A per-segment logit-shift fix (:func:`sqlcal.segment_fix`) as a calibration map, and the
readable SQL condition of a segment (:func:`sqlcal.segments`).

A segment is a conjunction of ``feature = value`` predicates; a value may be ``NULL`` (the
feature is NULL) or the feature's *other* bucket (every value not kept as a segment of its
own, NULL included unless NULL was kept). A predicate is ``(feature, key, kept)``: the key of a
value is ``"="`` and the value as a string (:func:`sqlcal.query.reductions.segment_code`), NULL and
the bucket are the keys :data:`~sqlcal.query.reductions.SEGMENT_NULL` and
:data:`~sqlcal.query.reductions.SEGMENT_OTHER`, which no value's key can equal; ``kept`` (the
bucket's complement) holds keys. Conditions are built as sqlglot or Ibis trees from the column names
and typed literals, never by pasting text.

Examples
--------
>>> condition_sql([("country", "=BR", ()), ("device", "=ios", ())],
...               {"country": "string", "device": "string"})
'"country" = \\'BR\\' AND "device" = \\'ios\\''
"""

from __future__ import annotations

from dataclasses import dataclass, field

import ibis
import ibis.expr.types as ir
import numpy as np
import pandas as pd
from sqlglot import exp

from sqlcal.errors import InvalidInputError
from sqlcal.inputs import engines
from sqlcal.inputs.groupkeys import shown_name
from sqlcal.inputs.sources import resolve_table
from sqlcal.query.reductions import (
    SEGMENT_NULL,
    SEGMENT_OTHER,
    SEGMENT_VALUE,
    key_match,
    segment_fixed,
)
from sqlcal.query.sql import to_tree
from sqlcal.recalibration.maps import CalibrationMap


def feature_kinds(rows: ir.Table, features) -> dict:
    """Per feature: ``"string"``, ``"int"`` or ``"bool"`` (the literal type of its values)."""
    schema = rows.schema()
    out = {}
    for f in features:
        t = schema[f]
        out[f] = "bool" if t.is_boolean() else "int" if t.is_integer() else \
            "string" if t.is_string() else None
    return out


def dialect(rows: ir.Table) -> str:
    """The sqlglot dialect of the engine holding ``rows`` (DuckDB for an unbound table)."""
    return engines.dialect_of(rows)


def with_columns(data, columns) -> tuple[ir.Table, list]:
    """The table of ``data`` with each of ``columns`` (group keys, features, split columns)
    copied under an internal name (``sqlcal_c0``, ...; the prefix takes underscores until no
    column of the table starts with it): they ride along as group keys of the summaries, where
    the user's name (``n``, ``segment``, ``sqlcal_fold``, ...) could be a summary's or the
    search's own column. Returns the table and the names."""
    base = resolve_table(data, None)
    missing = [c for c in columns if c not in base.columns]
    if missing:
        raise InvalidInputError(f"group key, feature or split columns {missing} are not in the "
                                f"table; its columns are {list(base.columns)}")
    prefix = "sqlcal_c"
    while any(c.startswith(prefix) for c in base.columns):
        prefix += "_"
    names = [f"{prefix}{i}" for i in range(len(columns))]
    return base.mutate(**{n: base[c] for n, c in zip(names, columns)}), names


def _typed(key: str, kind: str):
    """The literal of a value's key (:func:`sqlcal.query.reductions.segment_code`) in the feature's
    type."""
    value = key[len(SEGMENT_VALUE):]
    if kind == "int":
        return int(value)
    if kind == "bool":
        return value.lower() == "true"
    return value


def _literal(value, kind: str) -> exp.Expression:
    if kind == "bool":
        return exp.Boolean(this=value)
    return exp.Literal.number(value) if kind == "int" else exp.Literal.string(value)


def condition_sql(predicates, kinds: dict, dialect: str = "duckdb") -> str:
    """A segment's condition as SQL of ``dialect``: ``predicates`` are ``(feature, key, kept)``
    (the module's docstring: a value's key, :data:`~sqlcal.query.reductions.SEGMENT_NULL` for NULL,
    :data:`~sqlcal.query.reductions.SEGMENT_OTHER` for the values whose keys are not in
    ``kept``)."""
    parts = []
    for feature, value, kept in predicates:
        col = exp.column(exp.to_identifier(feature, quoted=True))
        if value == SEGMENT_NULL:
            parts.append(exp.Is(this=col, expression=exp.Null()))
        elif value == SEGMENT_OTHER:
            lits = [_literal(_typed(v, kinds[feature]), kinds[feature])
                    for v in kept if v != SEGMENT_NULL]
            out_of = exp.Not(this=exp.In(this=col.copy(), expressions=lits)) if lits else None
            if SEGMENT_NULL in kept:
                cond = exp.Not(this=exp.Is(this=col, expression=exp.Null()))
                parts.append(exp.and_(cond, out_of) if out_of is not None else cond)
            else:
                is_null = exp.Is(this=col, expression=exp.Null())
                parts.append(exp.paren(exp.or_(is_null, out_of)) if out_of is not None
                             else exp.true())
        else:
            parts.append(exp.EQ(this=col, expression=_literal(_typed(value, kinds[feature]),
                                                               kinds[feature])))
    return exp.and_(*parts).sql(dialect=dialect)


def condition_expr(table: ir.Table, predicates, kinds: dict) -> ir.BooleanValue:
    """:func:`condition_sql` as an Ibis expression over ``table`` (the typed columns)."""
    out = []
    for feature, value, kept in predicates:
        col = table[feature]
        if value == SEGMENT_NULL:
            out.append(col.isnull())
        elif value == SEGMENT_OTHER:
            lits = [_typed(v, kinds[feature]) for v in kept if v != SEGMENT_NULL]
            out_of = ~col.isin(lits) if lits else ibis.literal(True)
            out.append(col.notnull() & out_of if SEGMENT_NULL in kept
                       else col.isnull() | out_of)
        else:
            out.append(col == _typed(value, kinds[feature]))
    return ibis.and_(*out)


def _missing_score(p: ir.FloatingValue, value: ir.FloatingValue) -> ir.FloatingValue:
    """NULL for a NULL or NaN score, as every calibration map gives."""
    return ibis.ifelse(p.isnull() | p.isnan(), ibis.null("float64"), value)


@dataclass(repr=False)
class SegmentFix(CalibrationMap):
    """A per-segment logit shift: p' = σ(logit p̃ + Σ_k θ_k·1[x ∈ S_k]), p̃ = p clipped to
    [clip, 1 − clip] (with a ``slope`` column, a per-segment Platt map: θ_k + γ_k·logit p̃ in
    S_k); a row in no fitted segment keeps its score unchanged, a NULL score stays NULL. Made by
    :func:`sqlcal.segment_fix`.

    ``table`` (the mapping table) has one row per fitted segment: group keys, ``segment``,
    one column per feature, ``theta``, ``theta_se`` and the holdout checks; ``summary`` one row
    per group with the holdout judgement (``accepted``).

    Examples
    --------
    >>> import pandas as pd
    >>> fix = SegmentFix(by=(), table=pd.DataFrame({"segment": ["\\"c\\" = 'a'"],
    ...                                             "theta": [0.5]}),
    ...                  kind="shift", predicates=[(("c", "=a", ()),)], kinds={"c": "string"})
    >>> print(fix.sql("p"))  # doctest: +ELLIPSIS
    CASE WHEN ...
    """

    predicates: list = field(default_factory=list)
    kinds: dict = field(default_factory=dict)
    clip: float = 1e-6
    summary: pd.DataFrame | None = None

    def _name(self, column: str) -> str:
        """Where the tables hold sqlcal's ``column`` beside the group keys and features
        (:func:`shown_name`)."""
        return shown_name(column, {*self.by, *self.kinds})

    def _conditions(self, table: ir.Table) -> list:
        """Each fitted segment's condition over ``table`` (its group's key included)."""
        keys = self.table[list(self.by)].itertuples(index=False) if self.by else \
            [()] * len(self.table)
        out = []
        for key, preds in zip(keys, self.predicates):
            cond = condition_expr(table, preds, self.kinds)
            if self.by:
                key = tuple(None if pd.isna(v) else (v.item() if hasattr(v, "item") else v)
                            for v in key)
                cond = key_match(table, key, self.by) & cond
            out.append(cond)
        return out

    def _thetas(self) -> list:
        """Each fitted segment's θ as :func:`sqlcal.query.reductions.segment_fixed` reads it: a
        shift, or (kind="platt") an (intercept, slope) pair."""
        slope = self._name("slope")
        slopes = self.table[slope] if slope in self.table else [None] * len(self.table)
        return [float(theta) if slope is None or pd.isna(slope) else (float(theta), float(slope))
                for theta, slope in zip(self.table[self._name("theta")], slopes)]

    def expr(self, table: ir.Table, score: str) -> ir.FloatingValue:
        """The corrected score as an Ibis expression over ``table``: the rule the fix was
        judged by (:func:`sqlcal.query.reductions.segment_fixed`), so a fitted segment's score is
        within [clip, 1 − clip] and every other row keeps its own."""
        p = table[score].cast("float64")
        return _missing_score(p, segment_fixed(p, self._conditions(table), self._thetas(),
                                               self.clip))

    def apply(self, table: ir.Table, score: str, *, name: str = "calibrated",
              mapping: ir.Table | None = None, inline: bool | None = None) -> ir.Table:
        """``table`` with the corrected score as column ``name`` (always inlined: one CASE
        per fitted segment)."""
        return table.mutate(**{name: self.expr(table, score)})

    def sql(self, score: str, *, dialect: str = "duckdb") -> str:
        """The corrected score as one SQL expression of ``dialect`` over the score column and
        the feature (and group key) columns."""
        schema = {score: "float64",
                  **{f: {"int": "int64", "bool": "boolean"}.get(k, "string")
                     for f, k in self.kinds.items()},
                  **{k: self._key_type(k) for k in self.by}}
        unbound = ibis.table(schema, name="t")
        query = unbound.select(sqlcal_fixed=self.expr(unbound, score))
        read = engines.sqlglot_dialect(dialect)
        tree = to_tree(query, dialect)
        value = tree.expressions[0].unalias()
        for col in value.find_all(exp.Column):
            col.set("table", None)
        return value.sql(dialect=read)

    def transform_frame(self, frame: pd.DataFrame, score: str) -> np.ndarray:
        """The corrected scores of a pandas frame's rows (through DuckDB)."""
        con = ibis.duckdb.connect()
        t = con.create_table("rows", frame.reset_index(drop=True).assign(sqlcal_i=np.arange(
            len(frame))))
        out = self.apply(t, score, name="sqlcal_fixed").order_by("sqlcal_i").execute()
        return out["sqlcal_fixed"].to_numpy(float)

    def mapping_frame(self) -> pd.DataFrame:
        return self.table.reset_index(drop=True)


@dataclass(repr=False)
class SegmentIsotonicFix(SegmentFix):
    """Per-segment isotonic maps as a decision list: a row goes to the first fitted segment
    holding it (segments in order of harm, per group) and gets that segment's isotonic map of
    its score (:func:`sqlcal.isotonic` fitted on the segment's entry); a row in no segment keeps
    its score, a NULL or NaN score stays NULL. Made by ``sqlcal.segment_fix(kind="isotonic")``.

    ``table`` has one row per segment (group keys, ``segment``, feature values, ``blocks``, the
    holdout checks); ``blocks`` (the mapping table) one row per segment and block: ``segment``,
    group keys, ``entry`` (its place in the list), ``lo``, ``hi``, ``value``, ``slope`` (to the
    next block), ``n``, ``W``.

    Examples
    --------
    >>> import pandas as pd
    >>> blocks = pd.DataFrame({"segment": ["s"] * 2, "entry": [1, 1], "lo": [0.1, 0.5],
    ...                        "hi": [0.3, 0.9], "value": [0.2, 0.6], "slope": [2.0, 0.0]})
    >>> fix = SegmentIsotonicFix(by=(), table=pd.DataFrame({"segment": ["s"]}),
    ...                          kind="segment isotonic", predicates=[(("c", "=a", ()),)],
    ...                          kinds={"c": "string"}, blocks=blocks)
    >>> fix.transform_frame(pd.DataFrame({"c": ["a", "a", "b"], "p": [0.4, 0.95, 0.4]}),
    ...                     "p").round(6).tolist()
    [0.4, 0.6, 0.4]
    """

    blocks: pd.DataFrame | None = None

    def expr(self, table: ir.Table, score: str) -> ir.FloatingValue:
        """The corrected score as an Ibis expression over ``table``: the rule the fix was
        judged by (:func:`sqlcal.query.reductions.segment_fixed`): the first fitted segment's
        isotonic map, clipped to [clip, 1 − clip]; every other row keeps its score."""
        p = table[score].cast("float64")
        maps = []
        for i in range(len(self.table)):
            part = self.blocks[self.blocks[self._name("entry")] == i + 1] \
                if self.blocks is not None and len(self.blocks) else ()
            # an entry without blocks (no fitting rows) keeps its rows' scores
            maps.append(tuple(tuple(part[self._name(c)].astype(float))
                              for c in ("lo", "hi", "value", "slope")) if len(part) else 0.0)
        return _missing_score(p, segment_fixed(p, self._conditions(table), maps, self.clip))

    def mapping_frame(self) -> pd.DataFrame:
        return (self.blocks if self.blocks is not None else pd.DataFrame()).reset_index(
            drop=True)
