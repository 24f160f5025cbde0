"""``where=`` text as one boolean expression over the measured table's columns, nothing else.

A condition from a caller, the CLI's ``--where`` or a TOML config is parsed by sqlglot in the
dialect of the engine that will run it, and translated, node by node, into an Ibis expression
over the table: columns, literals, comparisons, ``AND``/``OR``/``NOT``, arithmetic, ``IN
(list)``, ``BETWEEN``, ``IS [NOT] NULL``, ``LIKE``, ``CAST`` and a few scalar functions
(:data:`FUNCTIONS`). The translation is an allow-list: each node type it takes has an exact
translation, and every argument of the node is read (a flag such as ``BETWEEN SYMMETRIC``, a
``TRY_CAST``'s or ``LIKE ... ESCAPE``, an integer division, a type whose meaning differs between
engines). Anything else, and a condition nested deeper than :data:`MAX_DEPTH` or wider than
:data:`MAX_WIDTH`, is refused with a message naming it. The condition never reaches the engine
as text: the engine receives the SQL Ibis compiles from the translated expression, with every
identifier quoted.
"""

from __future__ import annotations

import datetime as dt
from functools import cache
from typing import Any, Callable

import ibis
import ibis.expr.datatypes as idt
import ibis.expr.types as ir
import sqlglot
from sqlglot import exp
from sqlglot.tokens import TokenType

from sqlcal.errors import InvalidInputError
from sqlcal.inputs import engines

#: the longest condition accepted, in characters (a filter, not a program)
MAX_LENGTH = 10_000
#: the deepest nesting accepted (parentheses, NOT, operators, function calls): sqlglot's parser
#: and Ibis's compiler recurse on it; a chain of AND or OR is one level, however long
MAX_DEPTH = 20
#: the most terms of one AND or OR chain, or values of one IN list
MAX_WIDTH = 1_000

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
#: scalar functions a condition may call (sqlglot node -> Ibis method of its argument). Not
#: TRIM: Ibis's strip removes every white-space character, SQL's TRIM only spaces
FUNCTIONS: dict[type, str] = {
    exp.Lower: "lower",
    exp.Upper: "upper",
    exp.Abs: "abs",
    exp.Length: "length",
    exp.Floor: "floor",
    exp.Ceil: "ceil",
}
_FUNCTION_NAMES = ", ".join(sorted([*(f.__name__.upper() for f in FUNCTIONS), "COALESCE"]))
#: the arguments each node type's translation reads; a node with any other argument set (a
#: dialect's flag, a clause) is refused by that argument's name
_READS: dict[type, frozenset] = {
    **{t: frozenset({"this", "expression"}) for t in (*_COMPARISONS, *_ARITHMETIC, exp.And,
                                                      exp.Or)},
    # Div: `typed` (an integer division, where the dialect has one) and `safe` (NULL for a
    # division by zero) describe the engine's own "/", which Ibis emits (checked in _div)
    exp.Div: frozenset({"this", "expression", "typed", "safe"}),
    **{t: frozenset({"this"}) for t in (*FUNCTIONS, exp.Not, exp.Neg, exp.Paren, exp.Boolean)},
    exp.Column: frozenset({"this"}),
    exp.Identifier: frozenset({"this", "quoted"}),
    exp.Literal: frozenset({"this", "is_string"}),
    exp.Null: frozenset(),
    exp.Is: frozenset({"this", "expression", "negate"}),
    exp.In: frozenset({"this", "expressions"}),
    exp.Between: frozenset({"this", "low", "high"}),
    exp.Like: frozenset({"this", "expression", "negate"}),
    exp.ILike: frozenset({"this", "expression", "negate"}),
    exp.Cast: frozenset({"this", "to"}),
    # a dialect whose own CAST returns NULL on failure (Spark) parses it as a TryCast without
    # `safe`; TRY_CAST and SAFE_CAST set `safe`, which is refused
    exp.TryCast: frozenset({"this", "to"}),
    exp.Coalesce: frozenset({"this", "expressions"}),
}
#: why a node with a refused argument is refused, by argument
_WHY = {
    "symmetric": "BETWEEN SYMMETRIC is not translated exactly; write (x BETWEEN a AND b OR x "
                 "BETWEEN b AND a)",
    "safe": "TRY_CAST (SAFE_CAST) is not translated exactly: it gives NULL where a CAST fails",
    "query": "IN takes a list of values, not a subquery",
    "unnest": "IN takes a list of values, not UNNEST",
    **dict.fromkeys(("table", "db", "catalog"),
                    "columns are named alone, not qualified by a table"),
}
_T = exp.DataType.Type
#: the types a CAST may name: their Ibis type is emitted back as the same type of the dialect
#: (checked), so the cast means what it means in the engine
_CASTABLE = {_T.BOOLEAN, _T.TINYINT, _T.SMALLINT, _T.INT, _T.BIGINT, _T.FLOAT, _T.DOUBLE,
             _T.DECIMAL, _T.TEXT, _T.VARCHAR, _T.NVARCHAR, _T.DATE, _T.TIMESTAMP,
             _T.TIMESTAMPNTZ, _T.TIMESTAMPTZ}


class ConditionError(InvalidInputError):
    """``where=`` text that is not one boolean expression over the table's columns, or that
    sqlcal does not translate exactly."""


def parse_condition(text: str, table: ir.Table, *, dialect: str | None = None) -> ir.BooleanValue:
    """Translate a SQL condition into an Ibis boolean expression over ``table``'s columns.

    Parameters
    ----------
    text : str
        One SQL boolean expression, e.g. ``"model = 'v2' AND day >= DATE '2026-11-01'"``.
    table : ibis Table
        The table the condition filters; its columns are the only names it may use.
    dialect : str, optional
        The sqlglot dialect the text is written in, that of the engine that runs it; default the
        table's engine (DuckDB when the table has none).

    Returns
    -------
    ibis BooleanValue

    Raises
    ------
    ConditionError
        For several statements, a statement that is not an expression, a subquery, a table
        function, a function not in :data:`FUNCTIONS`, a parameter, a qualified column, a column
        not in ``table``, an expression that is not true/false, a construct sqlcal does not
        translate exactly (``BETWEEN SYMMETRIC``, ``TRY_CAST``, ``LIKE ... ESCAPE``, an integer
        division, a ``CAST`` to a type the engine reads otherwise), or a condition nested deeper
        than :data:`MAX_DEPTH` or wider than :data:`MAX_WIDTH`.

    Examples
    --------
    >>> import ibis
    >>> t = ibis.memtable({"model": ["v1", "v2"], "p": [0.2, 0.7]})
    >>> parse_condition("model = 'v2' AND p > 0.5", t).type()
    Boolean(nullable=True)
    >>> parse_condition("1 = 1; DROP TABLE t", t)  # doctest: +NORMALIZE_WHITESPACE
    Traceback (most recent call last):
    ...
    sqlcal.inputs.condition.ConditionError: where='1 = 1; DROP TABLE t' holds 2 statements; it
    must be one condition over the table's columns
    >>> parse_condition("p BETWEEN SYMMETRIC 0.7 AND 0.2", t)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    sqlcal.inputs.condition.ConditionError: ... BETWEEN SYMMETRIC is not translated exactly; ...
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
        _check_nesting(text, dialect, shown)  # before the parser recurses on it
        trees = [tree for tree in sqlglot.parse(text, read=dialect) if tree is not None]
    except (sqlglot.errors.ParseError, sqlglot.errors.TokenError) as e:
        raise ConditionError(f"where={shown!r} is not a SQL condition: "
                             f"{str(e).splitlines()[0]}") from None
    except RecursionError:  # a shape the token count did not foresee, on a deep stack
        raise _too_deep(shown) from None
    if len(trees) != 1:
        raise ConditionError(f"where={shown!r} holds {len(trees)} statements; it must be one "
                             "condition over the table's columns")
    _check_shape(trees[0], shown)
    value = _Translator(table, shown, dialect).visit(trees[0])
    if not isinstance(value, ir.Value) or not value.type().is_boolean():
        kind = value.type() if isinstance(value, ir.Value) else type(value).__name__
        raise ConditionError(f"where={shown!r} is a {kind} value, not a condition (true/false)")
    return value


def _dialect(table: ir.Table) -> str:
    return engines.dialect_of(table)


def _too_deep(shown: str) -> ConditionError:
    return ConditionError(f"where={shown!r} is nested too deeply: at most {MAX_DEPTH} levels "
                          "(parentheses, NOT, operators, function calls) are accepted")


def _check_nesting(text: str, dialect: str, shown: str) -> None:
    """Refuse parentheses nested deeper than :data:`MAX_DEPTH`, counted on the tokens (the
    tokenizer loops; sqlglot's parser recurses about twenty frames per parenthesis)."""
    depth = 0
    for token in sqlglot.Dialect.get_or_raise(dialect).tokenize(text):
        if token.token_type == TokenType.L_PAREN:
            depth += 1
            if depth > MAX_DEPTH:
                raise _too_deep(shown)
        elif token.token_type == TokenType.R_PAREN:
            depth -= 1


def _check_shape(tree: exp.Expression, shown: str) -> None:
    """Refuse a parsed condition deeper than :data:`MAX_DEPTH` (a chain of AND or OR, which is
    translated into a balanced tree, counts once) or with a chain or an IN list wider than
    :data:`MAX_WIDTH`; walked with a stack, not recursion."""
    stack = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise _too_deep(shown)
        if isinstance(node, (exp.And, exp.Or)):
            terms = list(node.flatten())
            if len(terms) > MAX_WIDTH:
                raise ConditionError(f"where={shown!r} joins {len(terms):,} terms with "
                                     f"{node.key.upper()}; at most {MAX_WIDTH:,} are accepted "
                                     "(a long list of values reads better as IN (...))")
            stack += [(term, depth + 1) for term in terms]
            continue
        if isinstance(node, exp.In) and len(node.expressions) > MAX_WIDTH:
            raise ConditionError(f"where={shown!r} lists {len(node.expressions):,} values in IN; "
                                 f"at most {MAX_WIDTH:,} are accepted")
        step = 0 if isinstance(node, exp.Paren) else 1
        stack += [(child, depth + step) for child in node.iter_expressions()]


class _Translator:
    """sqlglot node -> Ibis value; a whitelist: every node type not handled here is refused,
    and so is a handled node with an argument its translation does not read (:data:`_READS`)."""

    def __init__(self, table: ir.Table, text: str, dialect: str):
        self.table = table
        self.text = text
        self.dialect = dialect
        self.columns = list(table.columns)

    def refuse(self, node: exp.Expression, why: str) -> ConditionError:
        return ConditionError(f"where={self.text!r}: {why} ({node.sql(self.dialect)[:80]!r}); a "
                              "condition may use the table's columns, literals, comparisons, "
                              "AND/OR/NOT, arithmetic, IN (list), BETWEEN, IS NULL, LIKE, CAST "
                              f"and the functions {_FUNCTION_NAMES}")

    def visit(self, node: exp.Expression) -> Any:
        reads = _READS.get(type(node))
        if reads is not None:
            extra = [k for k, v in node.args.items() if k not in reads and v not in (None, False)
                     and v != []]
            if extra:
                raise self.refuse(node, _WHY.get(extra[0], f"{type(node).__name__.upper()} "
                                                           f"with {extra[0]} is not translated "
                                                           "exactly"))
        method = getattr(self, f"_{type(node).__name__.lower()}", None)
        if reads is not None and method is not None:
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
        if isinstance(node, exp.Escape):
            raise self.refuse(node, "LIKE ... ESCAPE is not translated exactly")
        if isinstance(node, exp.Func):
            raise self.refuse(node, "this function is not allowed")
        raise self.refuse(node, f"{type(node).__name__} is not allowed")

    # -- leaves ----------------------------------------------------------------------------

    def _column(self, node: exp.Column) -> ir.Value:
        ident = node.this
        if not isinstance(ident, exp.Identifier):  # e.g. a star
            raise self.refuse(node, "only named columns are allowed")
        self.visit(ident)  # its arguments checked
        name = ident.this
        if name in self.columns:
            return self.table[name]
        if not ident.quoted:  # unquoted names are case-insensitive in SQL
            matches = [c for c in self.columns if c.lower() == name.lower()]
            if len(matches) == 1:
                return self.table[matches[0]]
        raise ConditionError(f"where={self.text!r} names column {name!r}, which is not in the "
                             f"table; its columns are {self.columns}")

    def _identifier(self, node: exp.Identifier) -> None:
        return None

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
        return _balanced([self._bool(term) for term in node.flatten()], lambda a, b: a & b)

    def _or(self, node: exp.Or) -> ir.BooleanValue:
        return _balanced([self._bool(term) for term in node.flatten()], lambda a, b: a | b)

    def _not(self, node: exp.Not) -> ir.BooleanValue:
        return ~self._bool(node.this)

    def _is(self, node: exp.Is) -> ir.BooleanValue:
        value, target = self._value(node.this), node.expression
        if isinstance(target, exp.Null):
            out = value.isnull()
        elif isinstance(target, exp.Boolean):
            out = value.notnull() & (value == bool(target.this))
        else:
            raise self.refuse(node, "IS takes NULL, TRUE or FALSE")
        return ~out if node.args.get("negate") else out  # IS NOT (PostgreSQL's parse)

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
                                 f"{node.this.sql(self.dialect)!r} and "
                                 f"{node.expression.sql(self.dialect)!r} "
                                 f"({type(e).__name__}: {str(e).splitlines()[0][:120]})") from None

    def _div(self, node: exp.Div) -> ir.Value:
        # Ibis divides in floating point on every engine; where the dialect's "/" of two
        # integers (or decimals) is an integer (or decimal) division, the two differ
        if node.args.get("typed"):
            kinds = [self._value(side).type() for side in (node.this, node.expression)]
            if not any(kind.is_floating() for kind in kinds):
                raise self.refuse(node, f"'/' of {kinds[0]} and {kinds[1]} is an integer or "
                                        f"decimal division in {self.dialect}, which is not "
                                        "translated exactly; CAST one side to a floating type")
        return self._typed(node, _ARITHMETIC[exp.Div])

    def _neg(self, node: exp.Neg) -> Any:
        value = self.visit(node.this)
        return -value

    def _in(self, node: exp.In) -> ir.BooleanValue:
        value = self._value(node.this)
        options = [self.visit(e) for e in node.expressions]
        if not options:
            raise self.refuse(node, "IN needs at least one value")
        try:
            return value.isin(options)
        except Exception as e:
            raise ConditionError(f"where={self.text!r}: cannot test "
                                 f"{node.this.sql(self.dialect)!r} IN a list of these values "
                                 f"({str(e).splitlines()[0][:120]})") from None

    def _between(self, node: exp.Between) -> ir.BooleanValue:
        value = self._value(node.this)
        low, high = self.visit(node.args["low"]), self.visit(node.args["high"])
        try:
            return value.between(low, high)
        except Exception as e:
            raise ConditionError(f"where={self.text!r}: cannot compare "
                                 f"{node.this.sql(self.dialect)!r} with its BETWEEN bounds "
                                 f"({str(e).splitlines()[0][:120]})") from None

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
        out = getattr(value, method)(pattern.this)
        return ~out if node.args.get("negate") else out

    def _cast(self, node: exp.Cast) -> ir.Value:
        kind = self._cast_type(node)
        inner = self.visit(node.this)
        if isinstance(inner, ir.Value):
            return inner.cast(kind)
        if isinstance(inner, str) and (kind.is_date() or kind.is_timestamp()):
            # read here, so that a bad date is an error before the query: the engine then
            # casts the same text
            if not _readable_time(inner, kind):
                raise self.refuse(node, f"cannot read this literal as {node.to.sql(self.dialect)}")
        return ibis.literal(inner).cast(kind)

    def _trycast(self, node: exp.TryCast) -> ir.Value:
        return self._cast(node)  # the dialect's own CAST (flags refused in visit)

    def _cast_type(self, node: exp.Cast) -> idt.DataType:
        to = node.to
        shown = to.sql(self.dialect)
        if to.this not in _CASTABLE:
            raise self.refuse(node, f"CAST to {shown} is not allowed; a CAST may name a "
                                    "boolean, integer, floating, decimal, text, date or "
                                    "timestamp type")
        if to.is_type(_T.TEXT, _T.VARCHAR, _T.NVARCHAR) and to.expressions:
            raise self.refuse(node, f"CAST to {shown}: a text type of bounded length is not "
                                    "translated exactly; CAST to text without a length")
        from ibis.backends.sql.datatypes import SqlglotType

        try:
            kind = SqlglotType.to_ibis(to)
        except Exception:
            kind = None
        # Ibis casts to its type as the dialect spells it: the same type, or refused
        emitted = _emitted(kind, self.dialect) if kind is not None else None
        if emitted != shown:
            raise self.refuse(node, f"CAST to {shown} is not translated exactly in "
                                    f"{self.dialect} (it would cast to {emitted})")
        return kind

    def _coalesce(self, node: exp.Coalesce) -> ir.Value:
        values = [self._value(node.this), *(self.visit(e) for e in node.expressions)]
        return ibis.coalesce(*values)

    def _function(self, node: exp.Func) -> ir.Value:
        value = self._value(node.this)
        try:
            return getattr(value, FUNCTIONS[type(node)])()
        except AttributeError:
            raise ConditionError(f"where={self.text!r}: {type(node).__name__.upper()} does not "
                                 f"apply to {node.this.sql(self.dialect)!r} of type "
                                 f"{value.type()}") from None


def _balanced(values: list, join: Callable[[Any, Any], Any]) -> Any:
    """``values`` joined pairwise, level by level: a tree of depth log2(n), where a chain of n
    terms would nest n deep in Ibis's expression and its compiler's recursion."""
    while len(values) > 1:
        values = [join(values[i], values[i + 1]) if i + 1 < len(values) else values[i]
                  for i in range(0, len(values), 2)]
    return values[0]


@cache
def _emitted(kind: idt.DataType, dialect: str) -> str | None:
    """The type Ibis's compiler for ``dialect`` writes in a CAST to ``kind`` (None when Ibis
    has no compiler of that name)."""
    import ibis.backends.sql.compilers as compilers

    provider = getattr(compilers, {"spark": "pyspark"}.get(dialect, dialect), None)
    if provider is None or not hasattr(provider, "compiler"):
        return None
    try:
        return provider.compiler.type_mapper.from_ibis(kind).sql(dialect)
    except Exception:
        return None


def _readable_time(text: str, kind: idt.DataType) -> bool:
    """Whether ``text`` is an ISO date (or timestamp without a time zone offset, which engines
    read differently)."""
    try:
        if kind.is_date():
            dt.date.fromisoformat(text)
            return True
        return dt.datetime.fromisoformat(text).tzinfo is None
    except (TypeError, ValueError):
        return False
