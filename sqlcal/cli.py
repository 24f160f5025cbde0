"""The ``sqlcal`` command: ``sqlcal demo`` writes an example table, ``sqlcal report`` measures one."""

from __future__ import annotations

import argparse
import sys
import warnings

import pandas as pd

EXIT_OK, EXIT_ERROR = 0, 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sqlcal", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    demo = commands.add_parser("demo", help="write an example DuckDB table of logged predictions")
    demo.add_argument("path", nargs="?", default="demo.duckdb")
    demo.add_argument("--table", default="predictions")
    demo.add_argument("--rows", type=int, default=200_000)
    demo.add_argument("--seed", type=int, default=0)

    rep = commands.add_parser("report", help="calibration metrics of a table, per group")
    rep.add_argument("data", help="Parquet/CSV path or glob, DuckDB file, or connection URL")
    rep.add_argument("--table", help="table name inside a database file or URL")
    rep.add_argument("--score", required=True, help="score column (probability in [0, 1])")
    rep.add_argument("--label", required=True, help="label column (0/1 or boolean)")
    rep.add_argument("--weight", help="weight column (frequency weights)")
    rep.add_argument("--by", default="", help="comma-separated group keys")
    rep.add_argument("--where", help="SQL condition applied in the engine")
    rep.add_argument("--metrics", help="comma-separated metric names (default: all)")
    rep.add_argument("--bins", type=int, default=15)
    rep.add_argument("--on-invalid", choices=["raise", "drop"], default="raise")
    rep.add_argument("--json", action="store_true", help="print JSON instead of a table")

    sql = commands.add_parser("sql", help="print the SQL of a metric's reduction for a dialect")
    sql.add_argument("metric")
    sql.add_argument("--dialect", default="duckdb",
                     help="duckdb, postgres, bigquery, snowflake, trino, databricks (Spark SQL)")
    sql.add_argument("--table", required=True)
    sql.add_argument("--score", required=True)
    sql.add_argument("--label", required=True)
    sql.add_argument("--weight")
    sql.add_argument("--by", default="", help="comma-separated group keys")

    args = parser.parse_args(argv)
    try:
        if args.command == "sql":
            return _sql(args)
        return _demo(args) if args.command == "demo" else _report(args)
    except (ValueError, TypeError, FileNotFoundError) as e:
        print(f"sqlcal: error: {e}", file=sys.stderr)
        return EXIT_ERROR


def _demo(args) -> int:
    from sqlcal.demo import write_demo

    write_demo(args.path, args.table, rows=args.rows, seed=args.seed)
    print(f"wrote {args.rows} rows to table {args.table!r} in {args.path}")
    print(f"next: sqlcal report {args.path} --table {args.table} --score score --label label "
          "--weight weight --by model,segment")
    return EXIT_OK


def _sql(args) -> int:
    from sqlcal.sqlgen import metric_sql

    dialect = {"spark": "databricks"}.get(args.dialect, args.dialect)
    by = tuple(k.strip() for k in args.by.split(",") if k.strip())
    print(metric_sql(args.metric, dialect, table=args.table, score=args.score, label=args.label,
                     weight=args.weight, by=by))
    return EXIT_OK


def _report(args) -> int:
    import sqlcal
    from sqlcal.report import DEFAULT_METRICS, describe, report, to_json

    by = [k.strip() for k in args.by.split(",") if k.strip()]
    metrics = ([m.strip() for m in args.metrics.split(",")] if args.metrics
               else DEFAULT_METRICS)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UserWarning)
        src = sqlcal.source(args.data, table=args.table, score=args.score, label=args.label,
                            weight=args.weight, by=by, where=args.where,
                            on_invalid=args.on_invalid)
        table = report(src, metrics=metrics, bins=args.bins)
    for w in caught:
        print(f"sqlcal: warning: {w.message}", file=sys.stderr)
    if args.json:
        print(to_json(table, describe(src)))
    else:
        with pd.option_context("display.max_columns", None, "display.width", 200,
                               "display.float_format", "{:.4g}".format):
            print(table.to_string(index=False))
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
