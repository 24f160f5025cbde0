"""The sqlcal command: calibration metrics of logged predictions, computed in the engine.

Start with 'sqlcal demo' (an example table) and 'sqlcal report' (metrics per group)."""


from __future__ import annotations

import argparse
import json
import os
import re
import sys
import warnings

import pandas as pd

from sqlcal._version import __version__
from sqlcal.errors import install_hint, redact
from sqlcal.export.sqlgen import DIALECTS
from sqlcal.export.sqlgen import metrics as sql_metrics
from sqlcal.reporting.report_table import DEFAULT_METRICS, METRICS, takes_bins

EXIT_OK, EXIT_ERROR, EXIT_ALERT = 0, 2, 3
# the exit codes each command's help lists: 3 only under the commands that return it
_EXIT_DONE = "  0  done"
_EXIT_REST = """  2  error: bad arguments or configuration, unreadable data, engine or write
     failure; one line 'sqlcal: error: ...' on stderr, and nothing written
  1  never returned by sqlcal itself (Python's code for a crash: a bug, with its traceback)"""
EXIT_CODES = f"""exit codes:
  0  done, every metric within the configured thresholds
  3  done, and at least one alert fired (--config)
{_EXIT_REST}
A closed pipe (sqlcal report ... | head) ends the printing quietly and keeps the code the run
would have had: the files and the results table are written before anything is printed."""
_MONITOR_EXIT_CODES = f"""exit codes:
  0  done, no group alarmed and no window alert fired
  3  done, and a group's detector alarmed or a window alert fired
{_EXIT_REST}"""
_PLAIN_EXIT_CODES = f"""exit codes:
{_EXIT_DONE}
{_EXIT_REST}"""
_SEGMENTS_EXIT_CODES = f"""exit codes:
  0  done (with --fix: the fix printed was accepted on its holdout, or there was nothing to fit)
  3  done, but the fix --fix printed was rejected on its holdout: the reason on stderr
{_EXIT_REST}"""
#: the widest line of the default terminal table (wider tables wrap, the keys repeated)
TERMINAL_WIDTH = 110
# optional drivers -> the extra that installs them
_EXTRAS = {"psycopg": "postgres", "psycopg2": "postgres", "pyspark": "spark",
           "matplotlib": "plot"}


class _Formatter(argparse.HelpFormatter):
    """argparse's help, with the listings kept as written: a paragraph with an indented line
    (the exit codes) is printed line for line, every other paragraph is wrapped."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        import textwrap

        out = []
        for paragraph in text.split("\n\n"):
            lines = paragraph.splitlines()
            if any(line.startswith(" ") for line in lines):
                out.append("\n".join(indent + line for line in lines))
            else:
                out.append(textwrap.fill(" ".join(line.strip() for line in lines), width,
                                         initial_indent=indent, subsequent_indent=indent,
                                         break_on_hyphens=False))
        return "\n\n".join(out)


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (``sqlcal: error: ...``), exit code 2."""

    def error(self, message: str):
        self.exit(EXIT_ERROR, redact(f"sqlcal: error: {self.prog}: {message} (see {self.prog} "
                                     "--help)\n"))


def main(argv: list[str] | None = None) -> int:
    """Run the command; return its exit code (see ``sqlcal report --help``)."""
    parser, commands = _parser()
    args = parser.parse_args(argv)
    if args.command == "report":
        _check_report_flags(args, commands["report"])
    if args.command == "segments":
        _check_segments_flags(args, commands["segments"])
    try:
        if args.command == "sql":
            return _sql(args)
        if args.command == "dbt":
            return _dbt(args)
        if args.command == "demo":
            return _demo(args)
        if args.command == "snapshot":
            return _snapshot(args)
        if args.command == "maturity":
            return _maturity(args)
        if args.command == "monitor":
            return _monitor(args)
        if args.command == "segments":
            return _segments(args)
        if args.command == "compare":
            return _compare(args)
        return _report(args)
    except Exception as e:
        message = _bad_input(e, args)
        if message is None:
            raise  # a bug: exit 1 with the traceback
        print(redact(f"sqlcal: error: {message}"), file=sys.stderr)
        return EXIT_ERROR


def _parser() -> tuple[argparse.ArgumentParser, dict]:
    parser = _Parser(prog="sqlcal", description=__doc__,
                     formatter_class=_Formatter)
    parser.add_argument("--version", action="version", version=f"sqlcal {__version__}",
                        help="print the version and exit")
    commands = parser.add_subparsers(dest="command", required=True, metavar="command",
                                     help="one of the commands below ('sqlcal command --help' "
                                          "for its options)")

    demo = commands.add_parser(
        "demo", help="write an example DuckDB table of logged predictions",
        description="Write an example DuckDB database of logged click predictions. PATH must not "
                    "exist, or be a database a previous 'sqlcal demo' wrote holding nothing "
                    "else; anything else there is refused (exit 2) and left as it is.",
        epilog=_PLAIN_EXIT_CODES, formatter_class=_Formatter)
    demo.add_argument("path", nargs="?", default="demo.duckdb",
                      help="the DuckDB file to write (default demo.duckdb)")
    demo.add_argument("--table", default="predictions",
                      help="the table's name (default predictions)")
    demo.add_argument("--rows", type=_positive, default=200_000,
                      help="events to draw (default 200000); they are logged pre-aggregated, one "
                           "row per distinct (model, segment, day, score, label) with weight = "
                           "the number of events, so the table has fewer rows and its total "
                           "weight is N")
    demo.add_argument("--seed", type=int, default=0,
                      help="random seed (default 0): the same seed writes the same table")
    demo.add_argument("--examples", action="store_true",
                      help="also write, beside PATH, the small Parquet files the "
                           "documentation's examples read (preds.parquet, clicks.parquet, "
                           "animals.parquet, ...); only where no file is or over an earlier "
                           "one of them")
    demo.add_argument("--stream", action="store_true",
                      help="write the monitoring example instead: six weeks of single click "
                           "predictions with their click times (label_at) and a calibration "
                           "break on 2026-11-29, for sqlcal snapshot and sqlcal monitor "
                           "(examples/monitor.toml)")

    rep = commands.add_parser(
        "report", help="calibration metrics of a table, per group",
        description="Measure a table given by DATA and the column options, or run a scheduled "
                    "report described by --config (see examples/report.toml). --html, "
                    "--json-file and --time also work without --config: the report is then "
                    "built from DATA and the column options (no alerts, no results table) and "
                    "--run-id, --output-dir and --quiet apply to it. Outputs never overwrite "
                    "data: a path that is the source, a database or data file, a symlink, a "
                    "directory, or an existing file other than a previous sqlcal output of the "
                    "same kind is refused before any query.",
        epilog=EXIT_CODES, formatter_class=_Formatter)
    rep.add_argument("data", nargs="?",
                     help="Parquet/CSV path or glob, DuckDB file, or connection URL")
    rep.add_argument("--table", help="table name inside a database file or URL")
    rep.add_argument("--score", help="score column (probability in [0, 1]); required without "
                                     "--config")
    rep.add_argument("--label", help="label column (0/1 or boolean); required without --config")
    rep.add_argument("--weight", help="weight column (frequency weights)")
    rep.add_argument("--by", help="comma-separated group keys")
    rep.add_argument("--where", help="a condition over the table's columns, e.g. "
                                     "\"day >= DATE '2026-11-07' AND segment <> 'web'\"")
    rep.add_argument("--metrics", metavar="NAMES",
                     help="comma-separated metric names (default: "
                          f"{','.join(DEFAULT_METRICS)}); choose from: {', '.join(METRICS)}")
    rep.add_argument("--bins", type=int,
                     help="bins of the ECE family and the Brier decomposition (default 15)")
    rep.add_argument("--negative-sampling-rate", metavar="RATE_OR_COLUMN", type=_rate,
                     help="the table kept its negatives at this rate in (0, 1] (or per row, in "
                     "this column, read on negatives): each weighs 1/rate, and every interval "
                     "carries the sampling's variance")
    rep.add_argument("--training-negative-rate", metavar="RATE_OR_COLUMN", type=_rate,
                     help="the model was trained on negatives kept at this rate (or per row, "
                     "in this column): judge every score as p/(p + (1 - p)/rate)")
    rep.add_argument("--score-correction", action="store_true",
                     help="--training-negative-rate equal to a numeric "
                     "--negative-sampling-rate")
    rep.add_argument("--on-invalid", choices=["raise", "drop"],
                     help="rows with a NULL or out-of-range score, label or weight: raise "
                          "(default) an error naming the column and count, or drop them")
    rep.add_argument("--json", action="store_true", help="print JSON instead of a table")
    multi = rep.add_argument_group(
        "multiclass tables", "measure multiclass predictions through sqlcal.multiclass: "
        "--multiclass top_label (one row per example; --by predicted_class for one row per "
        "predicted class) or classwise (one row per class); --label is the true class (wide) "
        "or the 0/1 true-class indicator (long); no --score")
    multi.add_argument("--multiclass", choices=["top_label", "classwise"],
                       help="the view of the multiclass table to measure")
    multi.add_argument("--format", choices=["wide", "long"],
                       help="wide (default): a column per class; long: a row per class")
    multi.add_argument("--probs", metavar="COLUMNS",
                       help="wide: comma-separated probability columns, one per class")
    multi.add_argument("--logits", metavar="COLUMNS",
                       help="wide: comma-separated logit columns (softmax in the engine)")
    multi.add_argument("--example", help="long: the example id column")
    multi.add_argument("--class-column", help="long: the class column")
    multi.add_argument("--prob", help="long: the class's probability column")
    multi.add_argument("--logit", help="long: the class's logit column")
    sched = rep.add_argument_group("scheduled report")
    sched.add_argument("--config", metavar="TOML",
                       help="run the report a TOML file describes (source, metrics, alerts, "
                            "time key, outputs, results table)")
    sched.add_argument("--run-id", help="the run's id in the JSON and the results table "
                                        "(default: UTC time and config hash); a repeated id "
                                        "adds no rows")
    sched.add_argument("--output-dir", metavar="DIR",
                       help="folder for relative output paths (default: .)")
    sched.add_argument("--json-file", metavar="PATH", help="write the JSON here (overrides "
                                                           "[output] json)")
    sched.add_argument("--html", metavar="PATH",
                       help="write the HTML page here (overrides [output] html): one "
                            "self-contained, interactive file")
    sched.add_argument("--time", metavar="KEY", help="also measure per value of this column "
                                                      "(overrides [time] key)")
    sched.add_argument("--no-results", action="store_true",
                       help="do not write to the results table (--config only)")
    sched.add_argument("--quiet", action="store_true",
                       help="no progress on stderr (shown on a terminal: step i of n, named)")

    cmp_ = commands.add_parser(
        "compare", help="is a model better calibrated than a baseline? differences per group",
        description="The difference of calibration metrics between the model (--score) and a "
                    "baseline, per group, with its interval and the p-value of no difference. "
                    "Paired: --baseline names a second score column of the same rows (shadow "
                    "scoring; one scan). Unpaired: --baseline-data names the baseline's table "
                    "(same label, weight and group columns; --baseline its score column, "
                    "default --score), or --where and --baseline-where pick two parts of one "
                    "table.",
        epilog=EXIT_CODES, formatter_class=_Formatter)
    cmp_.add_argument("data", help="Parquet/CSV path or glob, DuckDB file, or connection URL")
    cmp_.add_argument("--table", help="table name inside a database file or URL")
    cmp_.add_argument("--score", required=True, help="the model's score column")
    cmp_.add_argument("--label", required=True, help="label column (0/1 or boolean)")
    cmp_.add_argument("--baseline", help="the baseline's score column")
    cmp_.add_argument("--baseline-data", metavar="DATA",
                      help="the baseline's rows, when it scored other rows (unpaired)")
    cmp_.add_argument("--baseline-where", metavar="CONDITION",
                      help="the baseline's rows of the same table (unpaired)")
    cmp_.add_argument("--weight", help="weight column")
    cmp_.add_argument("--by", help="comma-separated group keys")
    cmp_.add_argument("--where", help="a condition over the table's columns (the model's rows)")
    cmp_.add_argument("--metrics", metavar="NAMES",
                      help="comma-separated, from: ece, rmsce, brier, log_loss, "
                           "calibration_in_the_large (default: all)")
    cmp_.add_argument("--bins", type=int, default=15, help="equal-width bins (default 15)")
    cmp_.add_argument("--confidence", type=float, default=0.95,
                      help="two-sided level of the intervals (default 0.95)")
    cmp_.add_argument("--bootstrap", type=int, default=1000,
                      help="replicates of the binned errors' bootstrap (default 1000)")
    cmp_.add_argument("--seed", type=int, default=20260101,
                      help="seed of the replicates (default 20260101)")
    cmp_.add_argument("--negative-sampling-rate", metavar="RATE_OR_COLUMN", type=_rate,
                      help="the table kept its negatives at this rate (see report)")
    cmp_.add_argument("--on-invalid", choices=["raise", "drop"],
                      help="rows with a NULL or out-of-range value: raise (default) or drop")
    cmp_.add_argument("--json", action="store_true", help="print JSON records")

    snap = commands.add_parser(
        "snapshot", help="store each period's summaries once (monitoring over time)",
        description="Reduce each period of the predictions table that [source] in the TOML "
                    "names to its summaries, into the summary store of [snapshot]. Without "
                    "--period/--since/--until: every period up to the last closed one, each "
                    "written only when its fingerprint (rows, sum of weights, of scores, of "
                    "labels) changed since its stored version: new periods, late rows, labels "
                    "that arrived since.",
        epilog=_PLAIN_EXIT_CODES, formatter_class=_Formatter)
    snap.add_argument("--config", metavar="TOML", required=True,
                      help="monitor.toml ([source], [labels], [snapshot])")
    snap.add_argument("--period", metavar="DATE", help="snapshot this one period")
    snap.add_argument("--since", metavar="DATE", help="first period of a backfill")
    snap.add_argument("--until", metavar="DATE", help="last period of a backfill")
    snap.add_argument("--verify", action="store_true",
                      help="re-check the fingerprints of every period in the range (the "
                           "default does: kept for scripts that say so)")
    snap.add_argument("--force", action="store_true",
                      help="write a new version even where the fingerprint is unchanged")
    snap.add_argument("--as-of", metavar="TIME", dest="as_of",
                      help="the time the run is taken at (default: now, UTC): labels that "
                           "arrived later count as not arrived yet, and the periods due end "
                           "at the last one closed by then")
    snap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    snap.add_argument("--quiet", action="store_true", help="print nothing on success")

    mat = commands.add_parser(
        "maturity", help="label maturity curves per group, from the summary store",
        description="The share of each group's eventual positives known a days after the "
                    "prediction (a a delay edge of [labels]), per score bin and pooled, from "
                    "the mature periods of the store of [snapshot] (needs [labels] label_time), "
                    "with Clopper-Pearson intervals.",
        epilog=_PLAIN_EXIT_CODES, formatter_class=_Formatter)
    mat.add_argument("--config", metavar="TOML", required=True,
                     help="monitor.toml ([labels], [snapshot])")
    mat.add_argument("--bins", type=_positive, default=8,
                     help="score bins of equal weight per group (default 8)")
    mat.add_argument("--at", metavar="DATE",
                     help="age the periods at this time (default: the latest as_of stored)")
    mat.add_argument("--json", action="store_true", help="print JSON instead of a table")

    mon = commands.add_parser(
        "monitor", help="run the calibration change detector on the summary store",
        description="Run the anytime-valid change detector of [detect] on the mature daily "
                    "summaries of the store of [snapshot], per group: one line per alarm, exit "
                    "code 3 when a group alarms. P(any false alarm within [detect] checks daily "
                    "checks) <= alpha per group.",
        epilog=_MONITOR_EXIT_CODES, formatter_class=_Formatter)
    mon.add_argument("--config", metavar="TOML", required=True,
                     help="monitor.toml ([snapshot], [labels], [detect])")
    mon.add_argument("--at", metavar="DATE", help="the check time (default: the latest as_of)")
    mon.add_argument("--json-file", metavar="PATH", help="write the JSON document here")
    mon.add_argument("--html", metavar="PATH", help="write the offline HTML page here")
    mon.add_argument("--json", action="store_true", help="print the JSON document")
    mon.add_argument("--quiet", action="store_true",
                     help="print nothing but alarms (and no progress on stderr)")
    mon.add_argument("--no-results", action="store_true",
                     help="do not append to the results table of [monitor]")
    mon.add_argument("--no-windows", action="store_true",
                     help="only the detector: no window metrics, alerts or results rows")

    sql = commands.add_parser(
        "sql", help="print the SQL of a metric's reduction for a dialect",
        description="Print the statements that reduce a table to the summaries METRIC reads, "
                    "in a SQL dialect: run them anywhere, then finish the metric with "
                    "sqlcal.from_summaries.",
        formatter_class=_Formatter,
        epilog="metrics: " + ", ".join(sql_metrics()) + "\n\n" + _PLAIN_EXIT_CODES)
    sql.add_argument("metric", choices=sql_metrics(), metavar="METRIC",
                     help="one of the metrics listed below")
    sql.add_argument("--dialect", default="duckdb", choices=[*DIALECTS, "spark"],
                     help="default duckdb; databricks and spark are Spark SQL")
    sql.add_argument("--table", required=True, help="the table the statements read")
    sql.add_argument("--score", required=True,
                     help="score column (probability in [0, 1])")
    sql.add_argument("--label", required=True, help="label column (0/1)")
    sql.add_argument("--weight", help="weight column (frequency weights)")
    sql.add_argument("--by", default="", help="comma-separated group keys")

    dbt = commands.add_parser(
        "dbt", help="write the dbt package sqlcal (sql/dbt/) to a folder",
        description="Write the dbt package sqlcal into FOLDER: a new or empty folder, or one a "
                    "previous 'sqlcal dbt' wrote (it holds .sqlcal-manifest.json, the list of "
                    "the files sqlcal wrote there). A folder holding anything else (your dbt "
                    "project), a symlink, or a file sqlcal did not write at one of the package's "
                    "paths is refused (exit 2) and left as it is; files an earlier sqlcal wrote "
                    "and no longer makes are removed, nothing else.",
        epilog=_PLAIN_EXIT_CODES, formatter_class=_Formatter)
    dbt.add_argument("folder", help="where to write it (packages.yml: - local: FOLDER)")
    seg = commands.add_parser(
        "segments", help="find the significantly miscalibrated segments (and fix them in SQL)",
        description="Search conjunctions of feature = value for miscalibration (sqlcal.segments: "
                    "fold A searches, fold B certifies with Benjamini-Hochberg); with --fix, fit "
                    "per-segment logit shifts judged on a holdout and print their SQL.",
        epilog=_SEGMENTS_EXIT_CODES, formatter_class=_Formatter)
    seg.add_argument("data", help="Parquet/CSV path or glob, DuckDB file, or connection URL")
    seg.add_argument("--table", help="table name inside a database file or URL")
    seg.add_argument("--score", required=True, help="score column (probability in [0, 1])")
    seg.add_argument("--label", required=True, help="label column (0/1 or boolean)")
    seg.add_argument("--weight", help="weight column (frequency weights)")
    seg.add_argument("--by", default="", help="comma-separated group keys")
    seg.add_argument("--where", help="a condition over the table's columns")
    seg.add_argument("--features", required=True, help="comma-separated categorical columns")
    seg.add_argument("--max-depth", type=_positive, default=3,
                     help="most features in one segment's condition (default 3)")
    seg.add_argument("--min-support", type=float, help="least weight of a segment (default "
                                                         "max(1000, 1e-3 of the group's weight))")
    seg.add_argument("--mode", choices=["split", "full"], default="split",
                     help="split (default): fold A searches, fold B tests the top segments; "
                          "full: test every eligible segment on all rows")
    seg.add_argument("--fdr", choices=["bh", "by", "bonferroni", "none"],
                     help="multiple-testing correction of the q-values (default bh, "
                          "Benjamini-Hochberg, for the segments; bonferroni, no calibrated "
                          "segment fitted with probability 1 - alpha, for the --fix fits; by "
                          "for any dependence)")
    seg.add_argument("--alpha", type=float, default=0.05,
                     help="level at which a segment is significant (default 0.05)")
    seg.add_argument("--top-k", type=_positive, default=100,
                     help="segments screened on fold A and tested on fold B (default 100)")
    seg.add_argument("--effect", choices=["residual", "ece", "sliceline"], default="residual",
                     help="search the net residual, the binned error (finds segments whose "
                          "errors cancel), or SliceLine's score of the squared error")
    seg.add_argument("--sliceline-alpha", type=float,
                     help="SliceLine's weight of the error against the size (default 0.5; "
                          "only with --effect sliceline)")
    seg.add_argument("--strategy", choices=["lattice", "cube"], default="lattice",
                     help="cube: two base-table scans whatever the depth (few or skewed "
                          "features)")
    seg.add_argument("--fix", action="store_true",
                     help="fit per-segment shifts (20%% holdout) and print the corrected score's "
                          "SQL")
    seg.add_argument("--json", metavar="PATH", help="write the segments (and the fix) as JSON")
    return parser, {"demo": demo, "report": rep, "sql": sql, "snapshot": snap, "segments": seg}


def _check_segments_flags(args, seg: argparse.ArgumentParser) -> None:
    # a flag of one effect given with another would be ignored: refuse it
    if args.sliceline_alpha is not None and args.effect != "sliceline":
        seg.error("--sliceline-alpha applies only with --effect sliceline")
    if args.sliceline_alpha is None:
        args.sliceline_alpha = 0.5


def _rate(text: str) -> float | str:
    """A negative sampling rate: a number, or else the name of the column of per-row rates."""
    try:
        return float(text)
    except ValueError:
        return text


def _sampling(args) -> dict:
    """The source options of --negative-sampling-rate, --training-negative-rate and
    --score-correction, when given."""
    out = {}
    if getattr(args, "negative_sampling_rate", None) is not None:
        out["negative_sampling_rate"] = args.negative_sampling_rate
    if getattr(args, "training_negative_rate", None) is not None:
        out["training_negative_rate"] = args.training_negative_rate
    if getattr(args, "score_correction", False):
        out["score_correction"] = True
    return out


def _positive(text: str) -> int:
    value = int(text)  # argparse turns the ValueError into "invalid _positive value"
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, not {value}")
    return value


_positive.__name__ = "positive integer"  # argparse's "invalid positive integer value: 'x'"


def _check_report_flags(args, rep: argparse.ArgumentParser) -> None:
    # flags are checked before anything is read: none is silently ignored
    if args.config and args.data:
        rep.error("pass either DATA or --config (the config names the data)")
    multiclass_flags = [f for f in ("format", "probs", "logits", "example", "class_column",
                                    "prob", "logit") if getattr(args, f, None) is not None]
    if args.multiclass:
        if args.config or args.score or args.html or args.json_file or args.time:
            rep.error("--multiclass measures DATA directly: no --score (the view gives it), "
                      "--config, --html, --json-file or --time")
        if not (args.data and args.label):
            rep.error("--multiclass needs DATA and --label")
    elif multiclass_flags:
        rep.error(f"--{multiclass_flags[0].replace('_', '-')} applies only with --multiclass")
    if not args.config and not (args.data and (args.score or args.multiclass) and args.label):
        rep.error("DATA, --score and --label are required without --config")
    if args.config:
        for flag in ("table", "score", "label", "weight", "by", "where", "metrics", "bins",
                     "on_invalid"):
            if getattr(args, flag) is not None:
                rep.error(f"--{flag.replace('_', '-')} does not apply with --config (the "
                          "config file names the data, columns and metrics)")
        return
    args.by = args.by or ""
    if args.bins is not None and not any(takes_bins(m) for m in _metric_names(args)):
        rep.error("--bins applies to the ECE family and the Brier decomposition; none of the "
                  "metrics measured takes it")
    args.bins = 15 if args.bins is None else args.bins
    args.on_invalid = args.on_invalid or "raise"
    if args.metrics is not None:
        unknown = [m for m in _keys(args.metrics) if m not in METRICS]
        if unknown or not _keys(args.metrics):
            rep.error(f"--metrics: unknown metrics {unknown}; choose from {', '.join(METRICS)}")
    if args.no_results:
        rep.error("--no-results needs --config (a report without one writes no results table)")
    runs = args.html or args.json_file or args.time
    for flag, value in (("--run-id", args.run_id), ("--output-dir", args.output_dir),
                        ("--quiet", args.quiet)):
        if value and not runs:
            rep.error(f"{flag} applies only with --config, --html, --json-file or --time")
    _check_bins(args, rep)


def _check_bins(args, rep: argparse.ArgumentParser) -> None:
    # the declared table of options checks --bins' type, range and budget, as report() would
    from sqlcal import options

    try:
        options.check("report", {"bins": args.bins, "metrics": _metric_names(args)})
    except ValueError as e:
        rep.error(f"--bins: {e}")


def _demo(args) -> int:
    import ibis

    from sqlcal.cli.demo import write_demo
    from sqlcal.cli.example_data import EXAMPLES, check_example_path, write_examples

    folder = os.path.dirname(os.path.abspath(args.path))
    if args.examples:  # every path is checked before anything is written
        for name in EXAMPLES:
            check_example_path(os.path.join(folder, name))
    write_demo(args.path, args.table, rows=args.rows, seed=args.seed, stream=args.stream)
    con = ibis.duckdb.connect(args.path, read_only=True)
    try:
        t = con.table(args.table)  # quoted by Ibis
        weight = t.count() if args.stream else t.weight.sum()
        counts = t.aggregate(rows=t.count(), weight=weight).to_pyarrow().to_pylist()[0]
        rows, weight = counts["rows"], counts["weight"]
    finally:
        con.disconnect()
    if args.stream:
        _out(f"wrote {rows} rows to table {args.table!r} in {args.path}: one row per click "
             "prediction, 2026-11-01 .. 2026-12-12, with its click time (label_at)")
    else:
        _out(f"wrote {rows} rows to table {args.table!r} in {args.path}: one row per distinct "
             f"model, segment, day, score and label, weighted by its number of events (total "
             f"weight {weight:.0f})")
    if args.examples:
        for path in write_examples(folder, seed=args.seed):
            _out(f"wrote {os.path.relpath(path)}")
    if args.stream:
        _out("next: sqlcal snapshot --config examples/monitor.toml (its [source] data names "
             "this file)")
    else:
        _out(f"next: sqlcal report {args.path} --table {args.table} --score score --label "
             "label --weight weight --by model,segment")
    return EXIT_OK


def _sql(args) -> int:
    from sqlcal.export.sqlgen import metric_sql

    dialect = {"spark": "databricks"}.get(args.dialect, args.dialect)
    by = tuple(k.strip() for k in args.by.split(",") if k.strip())
    _out(metric_sql(args.metric, dialect, table=args.table, score=args.score, label=args.label,
                    weight=args.weight, by=by))
    return EXIT_OK


def _segments(args) -> int:
    import json

    import sqlcal
    from sqlcal.inputs.groupkeys import shown_name
    from sqlcal.outputs import JSON_MARKER, check, protected, write_text

    if args.json:  # refused before the search, not after it
        check(args.json, "json", sources=protected(args.data))
    data = (args.data, args.table) if args.table else args.data
    options = dict(score=args.score, label=args.label, weight=args.weight,
                   by=_keys(args.by), where=args.where, features=_keys(args.features),
                   max_depth=args.max_depth, min_support=args.min_support,
                   alpha=args.alpha, top_k=args.top_k, strategy=args.strategy)
    found = sqlcal.segments(data, mode=args.mode, effect=args.effect,
                            sliceline_alpha=args.sliceline_alpha, fdr=args.fdr or "bh",
                            **options)
    # sqlcal's columns beside group keys and features of the same names
    users = {*options["by"], *options["features"]}
    doc = {JSON_MARKER[0]: JSON_MARKER[1], "segments": json.loads(found.to_json(
        orient="records"))}
    lines = [found.drop(columns=[shown_name("searched", users)]).to_string(index=False)]
    rejected = []
    if args.fix:
        fix = sqlcal.segment_fix(data, fdr=args.fdr or "bonferroni", **options)
        doc["fix"] = {"sql": fix.sql(args.score), "table": json.loads(fix.table.to_json(
            orient="records")), "summary": json.loads(fix.summary.to_json(orient="records"))}
        lines += [fix.summary.to_string(index=False), fix.sql(args.score)]
        summary = fix.summary
        # a fit the holdout judged and turned down (a group with nothing to fit is not)
        turned = summary[(summary[shown_name("n_segments", users)] > 0)
                         & ~summary[shown_name("accepted", users)].astype(bool)]
        for _, row in turned.iterrows():
            group = ", ".join(f"{k} = {row[k]}" for k in options["by"])
            rejected.append(f"the fix{' of ' + group if group else ''} is rejected on its "
                            f"holdout: {row[shown_name('reason', users)]}; its SQL is printed "
                            "for inspection, not to deploy")
    if args.json:  # written before anything is printed (a closed pipe loses no file)
        write_text(args.json, "json", json.dumps(doc, indent=2), sources=protected(args.data))
        lines.append(f"wrote {args.json}")
    for line in lines:
        _out(line)
    for message in rejected:  # where the user looks: stderr, and the exit status
        print(f"sqlcal: warning: {message}", file=sys.stderr)
    return EXIT_ALERT if rejected else EXIT_OK


def _dbt(args) -> int:
    from sqlcal.export.dbtgen import write

    written, removed = write(args.folder)
    for path in written:
        _out(f"wrote {path}")
    for path in removed:
        _out(f"removed {path} (an earlier sqlcal wrote it; no longer generated)")
    return EXIT_OK


def _maturity(args) -> int:
    from sqlcal.monitor import config as monitor_config
    from sqlcal.monitor.maturity import maturity

    config = monitor_config.load(args.config)
    labels, snap = config["labels"], config["snapshot"]
    curve = maturity(snap["store"], prefix=snap["prefix"], bins=args.bins, at=args.at,
                     horizon=labels["horizon"], settle=labels["settle"])
    if args.json:
        _out(curve.to_json(orient="records", indent=2))
    else:
        with pd.option_context("display.max_rows", None, "display.width", 200,
                               "display.float_format", "{:.4g}".format):
            _out(curve.to_string(index=False))
    return EXIT_OK


def _snapshot(args) -> int:
    from sqlcal.monitor import config as monitor_config

    if args.period and (args.since or args.until):
        raise monitor_config.ConfigError("--period and --since/--until exclude each other")
    config = monitor_config.load(args.config)
    out = monitor_config.run_snapshot(config, period=args.period, since=args.since,
                                      until=args.until, force=args.force, now=args.as_of)
    if args.json:
        _out(out.assign(period_start=out["period_start"].astype(str)).to_json(
            orient="records", indent=2))
    elif not args.quiet:
        periods = out[out["period_start"].notna()]
        written = int((periods["status"] == "written").sum())
        _out(f"{written} of {len(periods)} periods written to "
             f"{redact(config['snapshot']['store'])} "
             f"(prefix {config['snapshot']['prefix']!r}); the others were unchanged")
        untimed = out[out["period_start"].isna()]
        if len(untimed):
            _out(f"{int(untimed['n'].sum()):,} rows with a NULL {config['source']['time']!r} "
                 "left out (they belong to no period)")
        if len(out):
            _out(out.to_string(index=False))
    return EXIT_OK


def _monitor(args) -> int:
    from sqlcal import outputs
    from sqlcal.monitor import config as monitor_config
    from sqlcal.monitor import monitor
    from sqlcal.reporting import monitoring, scheduled

    config = monitor_config.load(args.config)
    where = args.config
    monitor.check_detect(config.get("detect"), where=where)
    windows, maturity = monitoring.check_windows(config.get("windows"), where=where)
    metrics = monitoring.check_metrics(config.get("metrics"), where=where)
    rules = monitoring.check_alerts(config.get("alerts"), windows, metrics, where=where)
    table_name = monitoring.check_monitor(config.get("monitor"), store=config["snapshot"]["store"],
                                          where=where)
    outputs.check_all({"json": args.json_file, "html": args.html})
    step = scheduled.Progress(False if args.quiet or args.json else None,
                              total=1 + (not args.no_windows) + bool(args.html))
    with step("change detector on the stored days"):
        run = monitor.run(config, at=args.at)
    snap, labels = config["snapshot"], config["labels"]
    if not args.no_windows:
        with step(f"windows {', '.join(windows)}"):
            run.windows = monitoring.windows(
                snap["store"], windows=windows, metrics=metrics, at=args.at, maturity=maturity,
                horizon=labels["horizon"], settle=labels["settle"], prefix=snap["prefix"])
        run.alerts = monitoring.alerts(run.windows, rules, list(config["source"]["by"]))
    check_date = str(pd.Timestamp(args.at).date()) if args.at else \
        str(pd.Timestamp.now(tz="UTC").date())
    if table_name and not args.no_results and run.windows is not None:
        rows = monitoring.results_rows(run.windows, run.detection.path,
                                       list(config["source"]["by"]), run_id=check_date,
                                       config_hash=scheduled.config_hash(config))
        written = monitoring.store_results(snap["store"], table_name, rows)
        if not args.quiet:
            _out(f"wrote {written} rows in table {table_name} (check {check_date})")
    if args.json_file:
        outputs.write_text(args.json_file, "json", json.dumps(monitor.to_document(run), indent=2))
    if args.html:
        from sqlcal.reporting.html import render_monitor

        with step("the page"):
            page = render_monitor(run)
        outputs.write_text(args.html, "html", page)
    if args.json:
        _out(json.dumps(monitor.to_document(run), indent=2))
    else:
        for line in monitor.lines(run):
            _out(line)
        if not args.quiet:
            path = run.detection.path
            _out(f"{path['day'].nunique()} mature days checked, "
                 f"{len(path) // max(path['day'].nunique(), 1)} groups, "
                 f"{len(run.alarms)} alarms (threshold log c = {run.detection.threshold:.2f}), "
                 f"{len(run.alerts or [])} window alerts")
    return EXIT_ALERT if len(run.alarms) or run.alerts else EXIT_OK


def _report(args) -> int:
    if args.config:
        from sqlcal.reporting import scheduled

        return _scheduled(args, scheduled.load_config(args.config))
    if args.html or args.json_file or args.time:
        return _scheduled(args, _adhoc_config(args))
    return _plain(args)


def _plain(args) -> int:
    import sqlcal
    from sqlcal.reporting.report_table import describe, report, to_json

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UserWarning)
        if args.multiclass:
            src = _multiclass_source(args)
        else:
            src = sqlcal.source(args.data, table=args.table, score=args.score,
                                label=args.label, weight=args.weight, by=_keys(args.by),
                                where=args.where, on_invalid=args.on_invalid,
                                **_sampling(args))
        table = report(src, metrics=_metric_names(args), bins=args.bins)
    _warn(caught)
    if args.json:
        _out(to_json(table, describe(src)))
    else:
        _out(terminal_table(table))
    return EXIT_OK


def _compare(args) -> int:
    import sqlcal
    from sqlcal.metrics.compare import METRICS as COMPARED

    names = [m.strip() for m in args.metrics.split(",") if m.strip()] if args.metrics \
        else list(COMPARED)
    options = {k: v for k, v in (("on_invalid", args.on_invalid),
                                 ("negative_sampling_rate", args.negative_sampling_rate))
               if v is not None}
    if args.table:
        options["table"] = args.table
    table = sqlcal.compare(args.data, score=args.score, label=args.label, baseline=args.baseline,
                           baseline_data=args.baseline_data, baseline_where=args.baseline_where,
                           weight=args.weight, by=_keys(args.by) if args.by else (),
                           where=args.where, metrics=names, bins=args.bins,
                           confidence=args.confidence, bootstrap=args.bootstrap, seed=args.seed,
                           **options)
    if args.json:
        _out(table.to_json(orient="records", indent=2))
    else:
        _out(terminal_table(table))
    return EXIT_OK


def _multiclass_source(args):
    """The source of a multiclass view (``report --multiclass``): the table sqlcal.multiclass
    makes, measured by class (classwise) and with its weight column when given; --by keys
    other than class and predicted_class are carried through as keys."""
    import sqlcal

    by = _keys(args.by)
    keys = [k for k in by if k not in ("class", "predicted_class")]
    columns = {"probs": _keys(args.probs) if args.probs else None,
               "logits": _keys(args.logits) if args.logits else None,
               "example": args.example, "cls": args.class_column, "prob": args.prob,
               "logit": args.logit}
    table = sqlcal.multiclass(args.data, table=args.table, format=args.format or "wide",
                              mode=args.multiclass, label=args.label, weight=args.weight,
                              keys=keys, on_invalid=args.on_invalid,
                              **{k: v for k, v in columns.items() if v is not None})
    if args.multiclass == "classwise" and "class" not in by:
        by = [*by, "class"]
    # --where reads the view's columns: the keys, class or predicted_class, score, label
    return sqlcal.source(table, score="score", label="label",
                         weight="weight" if args.weight else None, by=by, where=args.where)


def _adhoc_config(args) -> dict:
    """The configuration the flags describe, for --html/--json-file/--time without --config."""
    from sqlcal.reporting import scheduled

    source = {"data": args.data, "table": args.table, "score": args.score, "label": args.label,
              "weight": args.weight, "by": _keys(args.by), "where": args.where,
              "on_invalid": args.on_invalid, **_sampling(args)}
    metrics = {name: {"bins": args.bins} if takes_bins(name) else {}
               for name in _metric_names(args)}
    raw = {"source": {k: v for k, v in source.items() if v is not None}, "metrics": metrics,
           "report": {"bins": args.bins}}
    return scheduled.validate_config(raw, where="the command line")


def _scheduled(args, config: dict) -> int:
    from sqlcal.reporting import scheduled

    _override(config, args)
    # every output path is checked before any query
    scheduled.check_outputs(config, output_dir=args.output_dir)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UserWarning)
        run = scheduled.run_report(config, run_id=args.run_id,
                                   progress=False if args.quiet else None)
    _warn(caught)
    written = scheduled.write_outputs(run, output_dir=args.output_dir)
    if config["results"]:
        added = scheduled.store_results(run)
        written.append(f"{added} rows in table {config['results']['table']}"
                       + ("" if added else f" (run id {run.run_id} was already there)"))
    code = EXIT_ALERT if run.alerts else EXIT_OK
    if args.json:
        _out(json.dumps(scheduled.to_document(run), indent=2))
    else:
        _print_summary(run, written)
    return code


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


def _print_summary(run, written: list[str]) -> None:
    lines = [f"run {run.run_id}: {run.status.upper()}, {len(run.table)} groups, "
             f"{len(run.alerts)} alerts"]
    lines += [f"  ALERT {alert['message']}" for alert in run.alerts]
    lines.append(terminal_table(run.table))
    lines += [f"wrote {item}" for item in written]
    _out("\n".join(lines))


def terminal_table(table: pd.DataFrame, width: int = TERMINAL_WIDTH) -> str:
    """A report table as a terminal shows it: the group keys, ``n``, ``W`` and each metric's
    headline column (its value, or its p-value for a test), numbers formatted for reading, in
    blocks of at most ``width`` characters that each repeat the keys; a last line says how many
    columns ``--json`` adds (intervals, bounds, the trust columns)."""
    keys = list(table.columns[:list(table.columns).index("n")]) if "n" in table else []
    shown = [c for c in table.columns if c not in keys
             and (c in ("n", "W", "n_dropped") or c in _HEADLINES)]
    shown.sort(key=_is_p_value)  # values first, then the tests' p-values: a block each
    cells = {c: [str(v) for v in table[c]] for c in keys}
    cells.update({c: [_number(c, v) for v in table[c]] for c in shown})
    widths = {c: max([len(c), *map(len, cells[c])]) for c in cells}
    start = sum(widths[k] + 2 for k in keys)  # a line's length so far, its separator included
    blocks, block, used = [], [], start
    for c in shown:
        if block and used + widths[c] > width:
            blocks.append(block)
            block, used = [], start
        block.append(c)
        used += widths[c] + 2
    blocks.append(block)
    lines = []
    for i, block in enumerate(blocks):
        columns = keys + block
        if i:
            lines.append("")
        lines.append("  ".join(c.ljust(widths[c]) if c in keys else c.rjust(widths[c])
                               for c in columns).rstrip())
        for row in range(len(table)):
            lines.append("  ".join(cells[c][row].ljust(widths[c]) if c in keys
                                   else cells[c][row].rjust(widths[c]) for c in columns).rstrip())
    hidden = len(table.columns) - len(keys) - len(shown)
    if hidden:
        lines.append(f"({len(keys) + len(shown)} of {len(table.columns)} columns; --json prints "
                     f"all of them: intervals, bounds, test statistics, trust)")
    return "\n".join(lines)


def _headlines() -> set[str]:
    """Each report metric's headline column: its p-value when it is a test, else its value
    (both ends of a bracket)."""
    out = set()
    for name, (_, _, columns) in METRICS.items():
        tests = [c for k, c in columns.items() if k == "p_value"]
        out.update(tests or [next(iter(columns.values()))])
        if name == "distance_to_calibration":
            out.add(columns["upper_distance"])
    return out


_HEADLINES = _headlines()


def _number(column: str, value) -> str:
    """A number as a reader takes it in: counts with thousands separators, other numbers to
    four decimals (aligned), those below 0.001 (tiny p-values) as 2.3e-65."""
    if value is None or isinstance(value, (bool, str)):
        return str(value)
    value = float(value)
    if value != value:
        return "NaN"
    if column in ("n", "W", "n_dropped") and (value == round(value) or abs(value) >= 1000):
        return f"{value:,.0f}"
    if _is_p_value(column):
        return f"{value:.4f}" if value >= 1e-4 or value == 0 else f"{value:.1e}"
    if abs(value) >= 1e4 and abs(value) != float("inf"):
        return f"{value:,.0f}"
    return f"{value:.4f}" if abs(value) >= 1e-3 or value == 0 else f"{value:.1e}"


def _is_p_value(column: str) -> bool:
    return column.endswith("_p") or column == "p_value"


def _keys(text: str) -> list[str]:
    return [k.strip() for k in text.split(",") if k.strip()]


def _metric_names(args) -> list[str]:
    return _keys(args.metrics) if args.metrics else list(DEFAULT_METRICS)


def _warn(caught) -> None:
    for w in caught:
        print(redact(f"sqlcal: warning: {w.message}"), file=sys.stderr)


def _out(text: str) -> None:
    """Print to stdout, passwords hidden; when the reader has gone (``| head``), stop printing
    quietly."""
    try:
        print(redact(text), flush=True)
    except BrokenPipeError:
        # the rest of the output, and Python's flush at exit, go nowhere instead of raising
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):
            pass


# -- errors ---------------------------------------------------------------------------------


def _bad_input(e: BaseException, args) -> str | None:
    """One line naming the problem when ``e`` comes from bad input (arguments, configuration,
    data, engine, a missing optional driver, a failed write); None for anything else (a bug)."""
    extra = _missing_extra(e)
    if extra:
        return extra
    if isinstance(e, (ValueError, OSError)):  # ConfigError, OutputError, InvalidInputError, ...
        if isinstance(e, OSError) and e.filename and e.strerror:
            return f"{e.strerror}: {e.filename!r}"
        return _one_line(str(e))
    module = type(e).__module__ or ""
    if type(e).__name__ == "TableNotFound" and module.startswith("ibis."):
        where = f" in {args.data}" if getattr(args, "data", None) else ""
        return f"table {_one_line(str(e))!r} not found{where}: name an existing one with --table"
    if module.startswith("ibis."):
        return _one_line(f"{type(e).__name__}: {e}")
    if _is_engine_error(e):
        return _one_line(str(e))
    return None


def _is_engine_error(e: BaseException) -> bool:
    # errors the engine raises for the data or the query it was given, not for its own bugs
    kinds = []
    duckdb = sys.modules.get("duckdb")
    if duckdb is not None:
        kinds += [getattr(duckdb, name, None) for name in (
            "IOException", "CatalogException", "BinderException", "InvalidInputException",
            "ParserException", "ConversionException", "OutOfRangeException",
            "PermissionException", "OutOfMemoryException", "HTTPException")]
    for name in ("psycopg", "psycopg2"):
        driver = sys.modules.get(name)
        if driver is not None:
            kinds += [getattr(driver, kind, None) for kind in (
                "OperationalError", "ProgrammingError", "DataError")]
    spark = sys.modules.get("pyspark.errors")
    if spark is not None:
        kinds += [getattr(spark, "AnalysisException", None)]
    return isinstance(e, tuple(k for k in kinds if isinstance(k, type)))


def _missing_extra(e: BaseException) -> str | None:
    """The line for an ImportError of an optional driver (naming the extra), else None."""
    chain, seen = [], e
    while seen is not None and seen not in chain:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    imports = [x for x in chain if isinstance(x, ImportError)]
    if not imports:
        return None
    for x in imports:
        root = (x.name or "").split(".")[0]
        if root in _EXTRAS:
            return (f"{root} is not installed, and this data needs it: "
                    f"{install_hint(_EXTRAS[root])}")
    for x in imports:
        found = re.search(r"Failed to import the (\w+) backend", str(x))
        if found:
            backend = found.group(1)
            extra = {"postgres": "postgres", "pyspark": "spark"}.get(backend)
            hint = (install_hint(extra) if extra
                    else f"pip install 'ibis-framework[{backend}]'")
            return f"the {backend} backend's driver is not installed: {hint}"
    return None


def _one_line(text: str) -> str:
    # engines add the query and a caret on later lines: keep the words, one line
    lines = [line.strip() for line in str(text).splitlines()]
    kept = [line for line in lines if line and not line.startswith("LINE ")
            and set(line) - set("^ ")]
    line = " ".join(kept) or type(text).__name__
    return line if len(line) <= 600 else line[:597] + "..."


if __name__ == "__main__":
    sys.exit(main())
