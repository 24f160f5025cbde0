"""The ``sqlcal`` command: ``sqlcal demo`` writes an example table, ``sqlcal report`` measures one."""


from __future__ import annotations

import argparse
import json
import os
import sys
import warnings

import pandas as pd

EXIT_OK, EXIT_ERROR, EXIT_ALERT = 0, 2, 3
EXIT_CODES = """exit codes:
  0  done, every metric within the configured thresholds
  3  done, and at least one alert fired (--config)
  2  error: bad arguments or configuration, unreadable data, engine or write failure
  1  never returned by sqlcal itself (Python's code for a crash)"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sqlcal", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    demo = commands.add_parser("demo", help="write an example DuckDB table of logged predictions")
    demo.add_argument("path", nargs="?", default="demo.duckdb")
    demo.add_argument("--table", default="predictions")
    demo.add_argument("--rows", type=int, default=200_000)
    demo.add_argument("--seed", type=int, default=0)

    rep = commands.add_parser(
        "report", help="calibration metrics of a table, per group",
        description="Measure a table given by DATA and the column options, or run a scheduled "
                    "report described by --config (see examples/report.toml).",
        epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    rep.add_argument("data", nargs="?",
                     help="Parquet/CSV path or glob, DuckDB file, or connection URL")
    rep.add_argument("--table", help="table name inside a database file or URL")
    rep.add_argument("--score", help="score column (probability in [0, 1]); required without "
                                     "--config")
    rep.add_argument("--label", help="label column (0/1 or boolean); required without --config")
    rep.add_argument("--weight", help="weight column (frequency weights)")
    rep.add_argument("--by", default="", help="comma-separated group keys")
    rep.add_argument("--where", help="SQL condition applied in the engine")
    rep.add_argument("--metrics", help="comma-separated metric names (default: all)")
    rep.add_argument("--bins", type=int, default=15)
    rep.add_argument("--on-invalid", choices=["raise", "drop"], default="raise")
    rep.add_argument("--json", action="store_true", help="print JSON instead of a table")
    sched = rep.add_argument_group("scheduled report")
    sched.add_argument("--config", metavar="TOML",
                       help="run the report a TOML file describes (source, metrics, alerts, "
                            "time key, outputs, results table)")
    sched.add_argument("--run-id", help="the run's id in the results table (default: UTC time "
                                        "and config hash); a repeated id adds no rows")
    sched.add_argument("--output-dir", metavar="DIR",
                       help="folder for the config's relative output paths (default: .)")
    sched.add_argument("--json-file", metavar="PATH", help="write the JSON here (overrides "
                                                           "[output] json)")
    sched.add_argument("--html", metavar="PATH", help="write the HTML page here (overrides "
                                                      "[output] html)")
    sched.add_argument("--time", metavar="KEY", help="also measure per value of this column "
                                                      "(overrides [time] key)")
    sched.add_argument("--no-results", action="store_true",
                       help="do not write to the results table")
    sched.add_argument("--quiet", action="store_true", help="no progress lines on stderr")

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
    if args.command == "report":
        if args.config and args.data:
            rep.error("pass either DATA or --config (the config names the data)")
        if not args.config and not (args.data and args.score and args.label):
            rep.error("DATA, --score and --label are required without --config")
        if args.config:
            return _scheduled(args)
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


def _scheduled(args) -> int:
    from sqlcal import scheduled

    try:
        config = scheduled.load_config(args.config)
        _override(config, args)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", UserWarning)
            run = scheduled.run_report(config, run_id=args.run_id,
                                       progress=False if args.quiet else None)
        for w in caught:
            print(f"sqlcal: warning: {w.message}", file=sys.stderr)
        written = _write_outputs(run, config, args)
        if config["results"]:
            con = scheduled.results_connection(run)
            added = scheduled.write_results(con, config["results"]["table"],
                                            scheduled.results_rows(run),
                                            database=config["results"].get("database"))
            written.append(f"{added} rows in table {config['results']['table']}"
                           + ("" if added else f" (run id {run.run_id} was already there)"))
    except Exception as e:  # a scheduler needs one code for every failure, and a readable line
        kind = "" if isinstance(e, (ValueError, TypeError, OSError)) else f"{type(e).__name__}: "
        print(f"sqlcal: error: {kind}{e}", file=sys.stderr)
        return EXIT_ERROR
    if args.json:
        print(json.dumps(scheduled.to_document(run), indent=2))
    else:
        _print_summary(run, written)
    return EXIT_ALERT if run.alerts else EXIT_OK


def _override(config: dict, args) -> None:
    if args.no_results:
        config["results"] = None
    if args.time:
        metrics = config["time"]["metrics"] if config["time"] else list(config["metrics"])
        config["time"] = {"key": args.time, "metrics": metrics}
    if args.json_file:
        config["output"]["json"] = args.json_file
    if args.html:
        config["output"]["html"] = args.html


def _write_outputs(run, config: dict, args) -> list[str]:
    from sqlcal import scheduled
    from sqlcal.html import render

    written = []
    for kind, text in (("json", lambda: json.dumps(scheduled.to_document(run), indent=2)),
                       ("html", lambda: render(run))):
        path = config["output"].get(kind)
        if not path:
            continue
        path = os.path.join(args.output_dir or ".", path)
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        # write then rename: a reader (a web server, the next cron job) never sees half a file
        partial = f"{path}.partial"
        with open(partial, "w", encoding="utf-8") as f:
            f.write(text())
        os.replace(partial, path)
        written.append(path)
    return written


def _print_summary(run, written: list[str]) -> None:
    print(f"run {run.run_id}: {run.status.upper()}, {len(run.table)} groups, "
          f"{len(run.alerts)} alerts")
    for alert in run.alerts:
        print(f"  ALERT {alert['message']}")
    with pd.option_context("display.max_columns", None, "display.width", 200,
                           "display.float_format", "{:.4g}".format):
        print(run.table.to_string(index=False))
    for item in written:
        print(f"wrote {item}")


if __name__ == "__main__":
    sys.exit(main())
