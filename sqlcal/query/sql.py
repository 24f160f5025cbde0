"""SQL text of an Ibis expression in a dialect, compiled in one place with one stated fallback.

Ibis compiles most dialects without their backend; where it cannot (PySpark's compiler reads
the settings of a running session, and there may be none; ``"spark"`` is sqlglot's name, not
Ibis's), the expression is compiled for DuckDB and transpiled to the dialect by sqlglot. The
exported statements (``summary_sql``, ``sql/``, the dbt package), the calibration maps' SQL and
the segment fixes' SQL are all written through :func:`to_sql` or :func:`to_tree`.
"""

from __future__ import annotations

import ibis
import ibis.expr.types as ir
import sqlglot
from sqlglot import exp

from sqlcal.inputs import engines


def to_sql(expr: ir.Expr, dialect: str = "duckdb") -> str:
    """The statement of ``expr`` in ``dialect`` (an Ibis dialect or backend name): Ibis's
    text as it compiles it (stripped), or, where Ibis cannot compile for the dialect without its
    backend, DuckDB's statement transpiled by sqlglot to the dialect's sqlglot dialect
    (:func:`sqlcal.inputs.engines.sqlglot_dialect`).

    Examples
    --------
    >>> t = ibis.table({"p": "float64"}, name="preds")
    >>> print(to_sql(t.select(q=t.p * 2), "spark"))
    SELECT `t0`.`p` * 2 AS `q` FROM `preds` AS `t0`
    """
    try:
        return ibis.to_sql(expr, dialect=dialect).strip()
    except Exception:  # a dialect Ibis cannot compile (PySpark without a session, "spark")
        tree = sqlglot.parse_one(ibis.to_sql(expr, dialect="duckdb"), read="duckdb")
        return tree.sql(dialect=engines.sqlglot_dialect(dialect))


def to_tree(expr: ir.Expr, dialect: str = "duckdb") -> exp.Expression:
    """The statement of ``expr`` (:func:`to_sql`) as a sqlglot tree, for a caller that edits it
    before it writes it with ``tree.sql(dialect=engines.sqlglot_dialect(dialect))``."""
    return sqlglot.parse_one(to_sql(expr, dialect), read=engines.sqlglot_dialect(dialect))
