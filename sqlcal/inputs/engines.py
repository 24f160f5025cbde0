"""Engine facts about a table: which backend holds it and the SQL dialect its queries are in.

The one place sqlcal asks Ibis which backend a table expression belongs to (Ibis has no public
call for it), and the one map between Ibis's backend names and sqlglot's dialect names.
"""

from __future__ import annotations

from typing import Any

import ibis.expr.types as ir

#: Ibis backend names whose sqlglot dialect is named otherwise
SQLGLOT_NAMES = {"pyspark": "spark"}


def backend_of(table: ir.Table, *, default: bool = True) -> Any:
    """The Ibis backend holding ``table``: with ``default``, Ibis's default backend (the
    embedded DuckDB) for a table bound to none (a frame's memtable); without it, None there.
    Raises Ibis's error for an unbound ``ibis.table(schema)`` with ``default``."""
    return table._find_backend(use_default=default)


def is_bound(table: ir.Table) -> bool:
    """Whether ``table`` can be queried (an unbound ``ibis.table(schema)`` is for SQL export)."""
    import ibis

    try:
        backend_of(table)
    except ibis.common.exceptions.IbisError:
        return False
    return True


def sqlglot_dialect(name: str) -> str:
    """The sqlglot dialect of an Ibis backend name (``"pyspark"`` reads as ``"spark"``)."""
    return SQLGLOT_NAMES.get(name, name)


def dialect_of(table: ir.Table) -> str:
    """The sqlglot dialect of the engine holding ``table`` (DuckDB's for an unbound table)."""
    try:
        return sqlglot_dialect(backend_of(table).name)
    except Exception:  # an unbound table: the embedded default's dialect
        return "duckdb"
