"""``where=`` text as one boolean expression over the measured table's columns, nothing else.

A condition from a caller, the CLI's ``--where`` or a TOML config is parsed by sqlglot in the
engine's dialect and translated, node by node, into an Ibis expression over the table: columns,
literals, comparisons, ``AND``/``OR``/``NOT``, arithmetic, ``IN (list)``, ``BETWEEN``, ``IS [NOT]
NULL``, ``LIKE``, ``CAST`` and a few scalar functions (:data:`FUNCTIONS`). Anything else (a second
statement, a subquery, a table function, a parameter, a qualified or unknown column) is refused
with a message naming it. The condition never reaches the engine as text: the engine receives the
SQL Ibis compiles from the translated expression, with every identifier quoted.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Callable

import ibis
import ibis.expr.types as ir
import sqlglot
from sqlglot import exp

from sqlcal.errors import InvalidInputError

#: the longest condition accepted, in characters (a filter, not a program)
MAX_LENGTH = 10_000

_COMPARISONS: dict[type, Callable[[Any, Any], Any]] = {
    exp.EQ: lambda a, b: a == b,
    exp.NEQ: lambda a, b: a != b,
    exp.GT: lambda a, b: a > b,
    exp.GTE: lambda a, b: a >= b,
    exp.LT: lambda a, b: a < b,
    exp.LTE: lambda a, b: a <= b,
}
_ARITHMETIC: dict[type, Callable[[Any, Any], Any]] = {
    exp.Add: lambda a, b: a + b,
    exp.Sub: lambda a, b: a - b,
    exp.Mul: lambda a, b: a * b,
    exp.Div: lambda a, b: a / b,
    exp.Mod: lambda a, b: a % b,
}
#: scalar functions a condition may call (sqlglot node -> Ibis method of its argument)
FUNCTIONS: dict[type, str] = {
    exp.Lower: "lower",
    exp.Upper: "upper",
    exp.Abs: "abs",
    exp.Length: "length",
    exp.Trim: "strip",
    exp.Floor: "floor",
    exp.Ceil: "ceil",
}
_FUNCTION_NAMES = ", ".join(sorted([*(f.__name__.upper() for f in FUNCTIONS), "COALESCE"]))
#: SQL type names a CAST may name -> Ibis types
_TYPES = {
    "BOOLEAN": "boolean",
    "TINYINT": "int8", "SMALLINT": "int16", "INT": "int32", "BIGINT": "int64",
    "FLOAT": "float32", "DOUBLE": "float64", "DECIMAL": "float64",
    "VARCHAR": "string", "TEXT": "string", "CHAR": "string", "NVARCHAR": "string",
    "DATE": "date",
    "TIMESTAMP": "timestamp", "TIMESTAMPNTZ": "timestamp", "DATETIME": "timestamp",
}


class ConditionError(InvalidInputError):
    """``where=`` text that is not one boolean expression over the table's columns."""


def parse_condition(text: str, table: ir.Table, *, dialect: str | None = None) -> ir.BooleanValue:
    """Translate a SQL condition into an Ibis boolean expression over ``table``'s columns.

    Parameters
    ----------
    text : str
        One SQL boolean expression, e.g. ``"model = 'v2' AND day >= DATE '2026-11-01'"``.
    table : ibis Table
        The table the condition filters; its columns are the only names it may use.
    dialect : str, optional
        The sqlglot dialect the text is written in; default the table's engine (DuckDB when the
        table has none).

    Returns
    -------
    ibis BooleanValue

    Raises
    ------
    ConditionError
        For several statements, a statement that is not an expression, a subquery, a table
        function, a function not in :data:`FUNCTIONS`, a parameter, a qualified column, a column
        not in ``table``, or an expression that is not true/false.

    Examples
    --------
    >>> import ibis
    >>> t = ibis.memtable({"model": ["v1", "v2"], "p": [0.2, 0.7]})
    >>> parse_condition("model = 'v2' AND p > 0.5", t).type()
    Boolean(nullable=True)
    >>> parse_condition("1 = 1; DROP TABLE t", t)
    Traceback (most recent call last):
    ...
    sqlcal.condition.ConditionError: where='1 = 1; DROP TABLE t' holds 2 statements; it must be one condition over the table's columns
    """
    if not isinstance(text, str):
        raise ConditionError(f"where= must be a SQL condition string, an Ibis expression or a "
                             f"callable, not {type(text).__name__}")
    shown = text if len(text) <= 200 else text[:200] + "..."
    if not text.strip():
        raise ConditionError("where= is empty; pass a condition such as \"model = 'v2'\", or None")
    if len(text) > MAX_LENGTH:
        raise ConditionError(f"where= is {len(text):,} characters long; at most {MAX_LENGTH:,} "
                             "are accepted")
    dialect = dialect or _dialect(table)
    try:
        trees = [tree for tree in sqlglot.parse(text, read=dialect) if tree is not None]
    except (sqlglot.errors.ParseError, sqlglot.errors.TokenError) as e:
        raise ConditionError(f"where={shown!r} is not a SQL condition: "
                             f"{str(e).splitlines()[0]}") from None
    if len(trees) != 1:
        raise ConditionError(f"where={shown!r} holds {len(trees)} statements; it must be one "
                             "condition over the table's columns")
    value = _Translator(table, shown).visit(trees[0])
    if not isinstance(value, ir.Value) or not value.type().is_boolean():
        kind = value.type() if isinstance(value, ir.Value) else type(value).__name__
        raise ConditionError(f"where={shown!r} is a {kind} value, not a condition (true/false)")
    return value


def _dialect(table: ir.Table) -> str:
    try:
        backend = table._find_backend(use_default=True)
        return str(backend.compiler.dialect.__name__ if isinstance(backend.compiler.dialect, type)
                   else backend.compiler.dialect).lower()
    except Exception:  # an unbound table: the embedded default's dialect
        return "duckdb"


class _Translator:
    """sqlglot node -> Ibis value; a whitelist: every node type not handled here is refused."""

    def __init__(self, table: ir.Table, text: str):
        self.table = table
        self.text = text
        self.columns = list(table.columns)

    def refuse(self, node: exp.Expression, why: str) -> ConditionError:
        return ConditionError(f"where={self.text!r}: {why} ({node.sql()[:80]!r}); a condition may "
                              "use the table's columns, literals, comparisons, AND/OR/NOT, "
                              "arithmetic, IN (list), BETWEEN, IS NULL, LIKE, CAST and the "
                              f"functions {_FUNCTION_NAMES}")

    def visit(self, node: exp.Expression) -> Any:
        method = getattr(self, f"_{type(node).__name__.lower()}", None)
        if method is not None:
            return method(node)
        if type(node) in _COMPARISONS:
            return self._typed(node, _COMPARISONS[type(node)])
        if type(node) in _ARITHMETIC:
            return self._typed(node, _ARITHMETIC[type(node)])
        if type(node) in FUNCTIONS:
            return self._function(node)
        if isinstance(node, (exp.Query, exp.Subquery, exp.Exists)):
            raise self.refuse(node, "subqueries are not allowed")
        if isinstance(node, (exp.Placeholder, exp.Parameter)):
            raise self.refuse(node, "parameters are not allowed")
        if isinstance(node, exp.Func):
            raise self.refuse(node, "this function is not allowed")
        raise self.refuse(node, f"{type(node).__name__} is not allowed")

    # -- leaves ----------------------------------------------------------------------------

    def _column(self, node: exp.Column) -> ir.Value:
        if node.table or node.args.get("db") or node.args.get("catalog"):
            raise self.refuse(node, "columns are named alone, not qualified by a table")
        ident = node.this
        if not isinstance(ident, exp.Identifier):  # e.g. a star
            raise self.refuse(node, "only named columns are allowed")
        name = ident.this
        if name in self.columns:
            return self.table[name]
        if not ident.quoted:  # unquoted names are case-insensitive in SQL
            matches = [c for c in self.columns if c.lower() == name.lower()]
            if len(matches) == 1:
                return self.table[matches[0]]
        raise ConditionError(f"where={self.text!r} names column {name!r}, which is not in the "
                             f"table; its columns are {self.columns}")

    def _literal(self, node: exp.Literal) -> Any:
        if node.is_string:
            return node.this
        return int(node.this) if node.this.isdigit() else float(node.this)

    def _boolean(self, node: exp.Boolean) -> bool:
        return bool(node.this)

    def _null(self, node: exp.Null) -> ir.Value:
        return ibis.null()

    def _paren(self, node: exp.Paren) -> Any:
        return self.visit(node.this)

    # -- boolean logic ---------------------------------------------------------------------

    def _and(self, node: exp.And) -> ir.BooleanValue:
        return self._bool(node.this) & self._bool(node.expression)

    def _or(self, node: exp.Or) -> ir.BooleanValue:
        return self._bool(node.this) | self._bool(node.expression)

    def _not(self, node: exp.Not) -> ir.BooleanValue:
        return ~self._bool(node.this)

    def _is(self, node: exp.Is) -> ir.BooleanValue:
        value, target = self._value(node.this), node.expression
        if isinstance(target, exp.Null):
            return value.isnull()
        if isinstance(target, exp.Boolean):
            return value.notnull() & (value == bool(target.this))
        raise self.refuse(node, "IS takes NULL, TRUE or FALSE")

    def _bool(self, node: exp.Expression) -> ir.BooleanValue:
        value = self.visit(node)
        if isinstance(value, bool):
            return ibis.literal(value)
        if not isinstance(value, ir.Value) or not value.type().is_boolean():
            raise self.refuse(node, "AND, OR and NOT take conditions")
        return value

    # -- comparisons and arithmetic --------------------------------------------------------

    def _value(self, node: exp.Expression) -> ir.Value:
        value = self.visit(node)
        return value if isinstance(value, ir.Value) else ibis.literal(value)

    def _typed(self, node: exp.Expression, op: Callable[[Any, Any], Any]) -> ir.Value:
        left, right = self.visit(node.this), self.visit(node.expression)
        if not isinstance(left, ir.Value) and not isinstance(right, ir.Value):
            left = ibis.literal(left)
        try:
            return op(left, right)
        except Exception as e:  # Ibis refuses the types: say which
            raise ConditionError(f"where={self.text!r}: cannot apply {node.key.upper()} to "
                                 f"{node.this.sql()!r} and {node.expression.sql()!r} "
                                 f"({type(e).__name__}: {str(e).splitlines()[0][:120]})") from None

    def _neg(self, node: exp.Neg) -> Any:
        value = self.visit(node.this)
        return -value

    def _in(self, node: exp.In) -> ir.BooleanValue:
        if node.args.get("query") is not None or node.args.get("unnest") is not None:
            raise self.refuse(node, "IN takes a list of values, not a subquery")
        value = self._value(node.this)
        options = [self.visit(e) for e in node.expressions]
        if not options:
            raise self.refuse(node, "IN needs at least one value")
        try:
            return value.isin(options)
        except Exception as e:
            raise ConditionError(f"where={self.text!r}: cannot test {node.this.sql()!r} IN a "
                                 f"list of these values ({str(e).splitlines()[0][:120]})") from None

    def _between(self, node: exp.Between) -> ir.BooleanValue:
        value = self._value(node.this)
        low, high = self.visit(node.args["low"]), self.visit(node.args["high"])
        try:
            return value.between(low, high)
        except Exception as e:
            raise ConditionError(f"where={self.text!r}: cannot compare {node.this.sql()!r} with "
                                 f"its BETWEEN bounds ({str(e).splitlines()[0][:120]})") from None

    def _like(self, node: exp.Like) -> ir.BooleanValue:
        return self._pattern(node, "like")

    def _ilike(self, node: exp.ILike) -> ir.BooleanValue:
        return self._pattern(node, "ilike")

    def _pattern(self, node: exp.Expression, method: str) -> ir.BooleanValue:
        value, pattern = self._value(node.this), node.expression
        if not (isinstance(pattern, exp.Literal) and pattern.is_string):
            raise self.refuse(node, "LIKE takes a quoted pattern")
        if not value.type().is_string():
            raise self.refuse(node, "LIKE applies to text columns")
        return getattr(value, method)(pattern.this)

    def _cast(self, node: exp.Cast) -> ir.Value:
        target = node.to.this.name if hasattr(node.to.this, "name") else str(node.to.this)
        kind = _TYPES.get(target.upper())
        if kind is None:
            raise self.refuse(node, f"CAST to {target} is not allowed; allowed: {sorted(_TYPES)}")
        inner = self.visit(node.this)
        if not isinstance(inner, ir.Value):
            inner = _typed_literal(inner, kind)
            if inner is None:
                raise self.refuse(node, f"cannot read this literal as {target}")
            return inner
        return inner.cast(kind)

    def _trycast(self, node: exp.TryCast) -> ir.Value:
        return self._cast(node)

    def _coalesce(self, node: exp.Coalesce) -> ir.Value:
        values = [self._value(node.this), *(self.visit(e) for e in node.expressions)]
        return ibis.coalesce(*values)

    def _function(self, node: exp.Func) -> ir.Value:
        extra = [k for k, v in node.args.items() if k != "this" and v]
        if extra:
            raise self.refuse(node, "this form of the function is not allowed")
        value = self._value(node.this)
        try:
            return getattr(value, FUNCTIONS[type(node)])()
        except AttributeError:
            raise ConditionError(f"where={self.text!r}: {type(node).__name__.upper()} does not "
                                 f"apply to {node.this.sql()!r} of type {value.type()}") from None


def _typed_literal(value: Any, kind: str) -> ir.Value | None:
    """A literal of an SQL type, checked in Python (``DATE '2026-11-01'``)."""
    try:
        if kind == "date":
            return ibis.literal(dt.date.fromisoformat(str(value)), type="date")
        if kind == "timestamp":
            return ibis.literal(dt.datetime.fromisoformat(str(value)), type="timestamp")
        if kind == "string":
            return ibis.literal(str(value), type="string")
        if kind == "boolean" and isinstance(value, bool):
            return ibis.literal(value)
        if kind.startswith("int"):
            return ibis.literal(int(value), type=kind)
        if kind.startswith("float"):
            return ibis.literal(float(value), type=kind)
    except (TypeError, ValueError, OverflowError):
        return None
    return None
