"""Scheduled reports: a TOML file names the data, the metrics with their options and the alert
thresholds; one run measures every group, checks the thresholds and writes JSON, a self-contained
HTML page and, optionally, rows appended to a results table in the warehouse.

``sqlcal report --config report.toml`` is the command; :func:`load_config`, :func:`run_report`,
:func:`write_results` and :func:`metric_series` are the same steps as functions.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import inspect
import json
import math
import os
import re
import sys
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Sequence

import ibis
import numpy as np
import pandas as pd

from sqlcal import outputs
from sqlcal.errors import ConfigError, check_schema, read_toml, redact
from sqlcal.inputs import engines
from sqlcal.inputs.groupkeys import group_id, key_value, records, shown_name
from sqlcal.inputs.sources import Source, connect_url
from sqlcal.monitor import monitor as _monitor
from sqlcal.options import check as check_options
from sqlcal.options import checked
from sqlcal.query.executor import as_source
from sqlcal.reporting.report_table import (
    METRICS,
    describe,
    metric_options,
    statistic_bounds,
    statistics,
    summary_steps,
    to_json,
    trust,
    wide,
)

#: section -> allowed keys (None: any metric name)
SECTIONS: dict[str, tuple[str, ...] | None] = {
    "source": ("data", "table", "score", "label", "weight", "by", "where", "on_invalid",
               "soft_labels", "negative_sampling_rate", "training_negative_rate",
               "score_correction"),
    "metrics": None,
    "alerts": ("metric", "column", "above", "below"),
    "time": ("key", "metrics"),
    # sqlcal.segments on the report's source: the significantly miscalibrated segments
    "segments": ("features", "max_depth", "min_support", "mode", "fdr", "alpha", "top_k",
                 "effect", "bins", "strategy", "sliceline_alpha", "min_expected"),
    # sqlcal.compare of the report's model against a baseline: a second score column of the
    # same rows (baseline), or other rows of the same table (baseline_where, with where)
    "compare": ("baseline", "where", "baseline_where", "metrics", "bins", "confidence",
                "bootstrap", "seed"),
    "report": ("title", "order_by", "diagrams", "bins"),
    "output": ("json", "html"),
    "results": ("table", "url", "database"),
}
#: the results table: one row per (run, group, metric, statistic); ``trust`` is the metric's
#: facts that qualify the value (exact or grid, the grid's bound, the weight kind, the
#: confidence level, the bins), a JSON object as text
#: (:func:`sqlcal.reporting.report_table.trust`): one documented column rather than a row per fact,
#: so that every row stays a number to plot
RESULTS_SCHEMA = ibis.schema({
    "run_id": "string",
    "run_at": "timestamp",
    "config_hash": "string",
    "group_keys": "string",
    "metric": "string",
    "statistic": "string",
    "value": "float64",
    "lower": "float64",
    "upper": "float64",
    "trust": "string",
})
# a metric's interval, reported on its first statistic
_BOUNDS = (("lower_bound", "upper_bound"), ("ci_lower", "ci_upper"))
# the arguments every metric takes from the source, not from its options
_SOURCE_ARGS = {"data", "score", "label", "weight", "by", "where", "source_options"}


@dataclass
class ScheduledRun:
    """The outcome of :func:`run_report`.

    Attributes
    ----------
    config : dict
        The validated configuration.
    run_id, config_hash : str
    run_at : datetime
        UTC, naive (portable across engines).
    source : Source
    table : pandas.DataFrame
        One row per group: the keys, ``n``, ``W``, then each metric's columns under the names of
        :func:`sqlcal.report` (worst group first).
    metrics : pandas.DataFrame
        Tidy: the keys, ``metric``, ``statistic``, ``value``, ``lower``, ``upper``, ``trust``
        (the metric's qualifying facts, a JSON object: :func:`sqlcal.reporting.report_table.trust`).
    alerts : list of dict
        The threshold rules that fired: ``group``, ``metric``, ``column``, ``value``, ``above`` or
        ``below``, ``message``.
    series : pandas.DataFrame or None
        :func:`metric_series` for the configured time key.
    charts : dict
        The data of the HTML page's charts (:func:`sqlcal.reporting.html.report_charts`):
        ``{kind: {group id: data}}``, and ``"series"``; empty when no page is drawn.
    """

    config: dict
    run_id: str
    run_at: dt.datetime
    config_hash: str
    source: Source
    table: pd.DataFrame
    metrics: pd.DataFrame
    alerts: list[dict]
    series: pd.DataFrame | None = None
    #: the source of the series (the time key last among its keys)
    series_source: Source | None = None
    charts: dict = field(default_factory=dict)
    #: sqlcal.segments of the source, with a [segments] section
    segments: pd.DataFrame | None = None
    #: sqlcal.compare of the report's model against its baseline, with a [compare] section
    comparison: pd.DataFrame | None = None

    @property
    def keys(self) -> list[str]:
        return list(self.source.key_names)

    def own(self, name: str) -> str:
        """The name of sqlcal's column ``name`` in the run's tables, beside its keys."""
        return self.source.group_keys.own(name)

    @property
    def status(self) -> str:
        return "alert" if self.alerts else "ok"

    def _repr_html_(self) -> str:
        """The run's page in a notebook: the same charts as the HTML file (drawn from the run's
        source when the run has none yet, as :func:`run_report` draws them)."""
        from sqlcal.reporting.html import fragment, report_charts

        if not self.charts:
            self.charts = report_charts(self, _quiet)
        return fragment(self)

    @property
    def redacted_config(self) -> dict:
        """The configuration as JSON, HTML and logs show it: passwords in URLs masked."""
        return _redacted(self.config)


# -- configuration ----------------------------------------------------------------------------


def load_config(path: str | os.PathLike) -> dict:
    """Read and validate a report configuration (TOML); see :func:`validate_config`."""
    return validate_config(read_toml(path), where=os.fspath(path))


def validate_config(raw: dict, *, where: str = "config") -> dict:
    """Check a configuration before anything touches the warehouse; return it normalised.

    The file is first validated with its JSON Schema (:func:`config_schema`), then each
    metric's and the segments' options against the library's option table. Unknown sections
    and keys, values of the wrong type, unknown metrics, metric options the metric does not
    take, alert columns the metric does not report, and alerts without a threshold are
    :class:`ConfigError` naming the key path.
    """
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: a configuration is a table of sections, not "
                          f"{type(raw).__name__}")
    # from Python, [source] data may be anything sqlcal.source() takes (a frame, an Ibis
    # table): the schema, written for TOML files, sees a placeholder for it
    source = raw.get("source")
    shown = raw
    if isinstance(source, dict) and not isinstance(source.get("data"), (str, int, float, bool,
                                                                        list, dict, type(None))):
        shown = {**raw, "source": {**source, "data": f"<{type(source['data']).__name__}>"}}
    check_schema(shown, config_schema(), where=where)
    unknown = sorted(set(raw) - set(SECTIONS))
    if unknown:
        raise ConfigError(f"{where}: unknown sections {unknown}; expected {sorted(SECTIONS)}")
    for name, allowed in SECTIONS.items():
        blocks = raw.get(name, [] if name == "alerts" else {})
        if name == "metrics" and isinstance(blocks, list):
            continue
        for i, block in enumerate(blocks if name == "alerts" else [blocks]):
            label = f"[[alerts]] #{i + 1}" if name == "alerts" else f"[{name}]"
            if not isinstance(block, dict):
                raise ConfigError(f"{where}: {label} must be a table")
            extra = sorted(set(block) - set(allowed)) if allowed is not None else []
            if extra:
                raise ConfigError(f"{where}: {label} has unknown keys {extra}; "
                                  f"expected some of {list(allowed)}")

    src = dict(raw.get("source", {}))
    # from Python, data may also be anything else sqlcal.source() takes (an Ibis table, a frame)
    if src.get("data") is None or isinstance(src["data"], str) and not src["data"]:
        raise ConfigError(f"{where}: [source] needs data = \"<path or URL>\"")
    for key in ("score", "label"):
        if not isinstance(src.get(key), str) or not src[key]:
            raise ConfigError(f"{where}: [source] needs {key} = \"<column>\"")
    by = src.get("by", [])
    by = [by] if isinstance(by, str) else by
    if not isinstance(by, (list, tuple)) or not all(isinstance(k, str) and k for k in by):
        raise ConfigError(f"{where}: [source] by must be a column name or a list of them, "
                          f"not {by!r}")
    src["by"] = list(by)

    metrics = raw.get("metrics", {"ece": {}, "cutoff_error": {}, "kuiper": {}})
    if isinstance(metrics, list):
        metrics = {name: {} for name in metrics}
    bad = [m for m in metrics if m not in METRICS]
    if bad:
        raise ConfigError(f"{where}: unknown metrics {bad}; choose from {sorted(METRICS)}")
    if not metrics:
        raise ConfigError(f"{where}: [metrics] names no metric")
    for name, options in metrics.items():
        if not isinstance(options, dict):
            raise ConfigError(f"{where}: metrics.{name} must be a table of options, e.g. {{}}")
        takes = set(inspect.signature(METRICS[name][0]).parameters) - _SOURCE_ARGS
        extra = sorted(set(options) - takes)
        if extra:
            raise ConfigError(f"{where}: metrics.{name} has unknown options {extra}; "
                              f"it takes {sorted(takes)}")
        check_metric_options(name, options, f"{where}: metrics.{name}")

    alerts = []
    for i, rule in enumerate(raw.get("alerts", [])):
        label = f"[[alerts]] #{i + 1}"
        metric = rule.get("metric")
        if metric not in metrics:
            raise ConfigError(f"{where}: {label} names metric {metric!r}, which [metrics] does "
                              f"not compute ({list(metrics)})")
        column = _statistic(metric, rule.get("column"), f"{where}: {label}")
        limits = {k: rule[k] for k in ("above", "below") if k in rule}
        if not limits or not all(isinstance(v, (int, float)) for v in limits.values()):
            raise ConfigError(f"{where}: {label} needs a number above= or below=")
        alerts.append({"metric": metric, "column": column, **limits})

    time_cfg = dict(raw["time"]) if "time" in raw else None
    if time_cfg is not None:
        if not isinstance(time_cfg.get("key"), str):
            raise ConfigError(f"{where}: [time] needs key = \"<time column>\"")
        series = time_cfg.get("metrics", list(metrics))
        bad = [m for m in series if m not in metrics]
        if bad:
            raise ConfigError(f"{where}: [time] metrics {bad} are not in [metrics]")
        time_cfg["metrics"] = list(series)

    report = dict(raw.get("report", {}))
    order_by = report.get("order_by", next(iter(metrics)))
    metric, _, column = order_by.partition(".")
    if metric not in metrics:
        raise ConfigError(f"{where}: [report] order_by = {order_by!r} is not a computed metric")
    report["order_by"] = [metric, _statistic(metric, column or None, f"{where}: [report]")]
    report.setdefault("title", "Calibration report")
    report.setdefault("diagrams", True)
    report.setdefault("bins", 15)

    results = dict(raw["results"]) if "results" in raw else None
    if results is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*",
                                                str(results.get("table", ""))):
        raise ConfigError(f"{where}: [results] needs table = \"<name>\" (letters, digits, _)")
    if results is not None:
        check_results_target(results.get("url"), src["data"], where=where)
    output = dict(raw.get("output", {}))
    for kind, path in output.items():
        if not isinstance(path, str) or not path:
            raise ConfigError(f"{where}: [output] {kind} must be a file path such as "
                              f"\"report.{kind}\", not {path!r}")
    segments_cfg = dict(raw["segments"]) if "segments" in raw else None
    if segments_cfg is not None:
        features = segments_cfg.get("features")
        if not (isinstance(features, list) and features
                and all(isinstance(f, str) for f in features)):
            raise ConfigError(f"{where}: [segments] needs features = [\"<column>\", ...]")
        try:
            check_options("segments", segments_cfg)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"{where}: [segments] {e}") from None
    compare_cfg = dict(raw["compare"]) if "compare" in raw else None
    if compare_cfg is not None:
        if not compare_cfg.get("baseline") and not compare_cfg.get("baseline_where"):
            raise ConfigError(f"{where}: [compare] needs baseline = \"<score column>\" (the "
                              "same rows) or baseline_where = \"<condition>\" (other rows)")
        try:
            check_options("compare", {k: v for k, v in compare_cfg.items()
                                      if k not in ("where", "baseline_where")})
        except (TypeError, ValueError) as e:
            raise ConfigError(f"{where}: [compare] {e}") from None
    return {"source": src, "metrics": metrics, "alerts": alerts, "time": time_cfg,
            "report": report, "output": output, "results": results,
            "segments": segments_cfg, "compare": compare_cfg}


def check_outputs(config: dict, *, output_dir: str | os.PathLike | None = None) -> dict:
    """Check the configured outputs before any query; return ``{kind: absolute path}``.

    Each path (relative ones under ``output_dir``, default the current folder) must not be the
    source, a file the source matches, a database or data file, a symlink, a directory, or an
    existing file other than a previous sqlcal output of the same kind
    (:func:`sqlcal.outputs.check`).

    Raises
    ------
    sqlcal.outputs.OutputError
        Naming the output and why it is refused.
    """
    paths = {kind: _output_path(config, kind, output_dir) for kind in outputs.KINDS}
    checked = outputs.check_all(paths, sources=_inputs(config))
    return checked


def write_outputs(run: ScheduledRun, *, output_dir: str | os.PathLike | None = None) -> list[str]:
    """Write the run's JSON and HTML outputs (:func:`check_outputs` again, then each file to a
    temporary file renamed into place); return the paths written, joined to ``output_dir``."""
    from sqlcal.reporting.html import render

    sources = _inputs(run.config)
    texts = {"json": lambda: json.dumps(to_document(run), indent=2), "html": lambda: render(run)}
    written = []
    for kind, path in check_outputs(run.config, output_dir=output_dir).items():
        outputs.write_text(path, kind, texts[kind](), sources=sources)
        written.append(_output_path(run.config, kind, output_dir))  # as the user gave it
    return written


def _output_path(config: dict, kind: str, output_dir) -> str | None:
    path = config["output"].get(kind)
    return os.path.join(os.fspath(output_dir or "."), path) if path else None


def _inputs(config: dict) -> list[str]:
    # every local file the run reads or writes as a database: the source and the results' url
    url = (config.get("results") or {}).get("url")
    return outputs.protected(config["source"]["data"], url)


def config_schema() -> dict:
    """The JSON Schema (draft 2020-12) of ``report.toml`` as parsed, with which
    :func:`validate_config` checks every configuration first: a metric name is one of the
    registered report metrics (:data:`sqlcal.reporting.report_table.METRICS`)."""
    from importlib.resources import files

    text = files("sqlcal.reporting").joinpath("report_config.schema.json").read_text("utf-8")
    schema = json.loads(text)
    schema["$defs"]["metric"]["enum"] = sorted(METRICS)
    return schema


def check_metric_options(name: str, options: dict, where: str) -> None:
    """Check a report metric's options against the declared table (type, range, resource
    budget), as the metric will see them (with the report name's preset: ece_quantile is ece
    with strategy="quantile"); a :class:`ConfigError` prefixed with ``where``."""
    function, preset, _ = METRICS[name]
    try:
        check_options(function.__name__, {**preset, **options})
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{where}: {e}") from None


def config_hash(config: dict) -> str:
    """A digest of what a run measures and how it judges it (source, metrics, alerts, time key);
    outputs, titles and comments do not change it."""
    # a URL's password is not what is measured (and a digest of it would be a clue to it)
    semantic = {k: redact(config.get(k)) for k in ("source", "metrics", "alerts", "time")}
    text = json.dumps(semantic, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _statistic(metric: str, column: str | None, where: str) -> str:
    # an alert may name a metric function's column or its report name (lower_bound/cutoff_lower)
    mapping = METRICS[metric][2]
    if column is None:
        return next(iter(mapping))
    by_report_name = {v: k for k, v in mapping.items()}
    if column in mapping or column in by_report_name:
        return by_report_name.get(column, column)
    if any(column in pair for pair in _BOUNDS):  # an interval some options add (bootstrap=)
        return column
    raise ConfigError(f"{where}: metric {metric!r} reports no column {column!r}; "
                      f"choose from {list(mapping)}")


# -- running ----------------------------------------------------------------------------------


def run_report(
    config: dict,
    *,
    run_id: str | None = None,
    run_at: dt.datetime | None = None,
    diagrams: bool | None = None,
    progress: bool | None = False,
) -> ScheduledRun:
    """Measure every group as the configuration says and check its alert thresholds.

    Parameters
    ----------
    config : dict
        From :func:`load_config` (or :func:`validate_config`).
    run_id : str, optional
        Names the run in the results table; default ``<UTC time>-<config hash>``. Pass the
        scheduler's run id (e.g. Airflow's ``{{ ds }}``) so a retried run is not recorded twice.
    run_at : datetime, optional
        Default now, UTC.
    diagrams : bool, optional
        Gather the data of the HTML page's charts (``run.charts``: the reliability bins, the
        score cells, the smooth curve and TCE's bins when those metrics run; no matplotlib);
        default: when the configuration has an HTML output and ``[report] diagrams`` is true.
        Nothing else shows them, so without an HTML output none is gathered.
    progress : bool or None, default False
        Step i of n, named, on stderr (one line per engine pass and per metric); ``None``: when
        stderr is a terminal or a notebook runs the report (``sqlcal report`` without
        ``--quiet``). On DuckDB the engine's own progress bar shows a long query's progress
        too.

    Returns
    -------
    ScheduledRun
    """
    if diagrams is None:
        diagrams = bool(config["report"]["diagrams"] and config["output"].get("html"))
    for name, value in (("progress", progress), ("diagrams", diagrams)):
        if value not in (True, False, None) or not isinstance(value, (bool, type(None))):
            raise TypeError(f"run_report: {name} must be True, False or None, not {value!r}")
    step = Progress(progress, total=_steps(config, diagrams))
    run_at = run_at or dt.datetime.now(dt.timezone.utc).replace(tzinfo=None, microsecond=0)
    digest = config_hash(config)
    run_id = run_id or f"{run_at:%Y%m%dT%H%M%SZ}-{digest[:8]}"
    with step("open the source"):
        src = _open_source(config)
    if step.enabled and sys.stdout.isatty():
        _engine_progress(src)
    frames, tidy = _measure(src, config["metrics"], step)
    table = _wide(src, frames, config["metrics"])
    alerts = _check_alerts(src, frames, config["alerts"])
    order = _worst_first(table, alerts, src, config["report"]["order_by"])
    table = table.iloc[order].reset_index(drop=True)
    run = ScheduledRun(config=config, run_id=run_id, run_at=run_at, config_hash=digest,
                       source=src, table=table, metrics=tidy, alerts=alerts)
    if config["time"]:
        chosen = {m: config["metrics"][m] for m in config["time"]["metrics"]}
        with step(f"series per {config['time']['key']}"):
            run.series_source = _open_source(config, time=config["time"]["key"])
            run.series = _measure(run.series_source, chosen, _quiet)[1]
    if config.get("segments"):
        with step("miscalibrated segments"):
            run.segments = _segments(config)
    if config.get("compare"):
        with step("comparison with the baseline"):
            run.comparison = _comparison(config)
    if diagrams:
        from sqlcal.reporting.html import report_charts

        run.charts = report_charts(run, step)
    return run


@checked
def metric_series(
    data: Any,
    *,
    score: str | None = None,
    label: str | None = None,
    weight: str | None = None,
    by: str | Sequence[str] = (),
    time: str,
    where: Any = None,
    metrics: Sequence[str] | dict = ("ece",),
    **source_options: Any,
) -> pd.DataFrame:
    """The same metrics per value of a time key (a day, a week, a model version), per group.

    Parameters
    ----------
    data : Source, ibis Table, path, URL or DataFrame
        What to measure; see :func:`sqlcal.source`.
    score : str, optional
        Column of predicted probabilities of the positive class (not needed when ``data`` is a
        :class:`~sqlcal.Source`).
    label : str, optional
        Column of 0/1 outcomes (not needed when ``data`` is a :class:`~sqlcal.Source`).
    weight : str, optional
        Column of non-negative row weights; by default every row weighs 1.
    by : str or sequence of str, default ()
        Group keys: one series per group.
    time : str
        The time column; it becomes the last group key.
    where : ibis boolean expression, callable or SQL string, optional
        Filter applied in the engine before anything else.
    metrics : sequence of str or dict, default ("ece",)
        Names from :data:`sqlcal.reporting.report_table.METRICS`, or ``{name: {option: value}}``.
    **source_options
        Further options of :func:`sqlcal.source`, such as ``table=``, ``on_invalid=`` and
        ``soft_labels=``.

    Returns
    -------
    pandas.DataFrame
        Tidy, sorted by the keys and ``time``: the group keys, the time key, ``n``, ``W``
        (and ``n_dropped`` with ``on_invalid="drop"``), ``metric``, ``statistic``, ``value``,
        ``lower``, ``upper``, ``trust``: one row per group, time value and statistic; ``metric``
        names the metric, ``statistic`` its value column, ``lower`` and ``upper`` its bounds where
        the metric has some (NaN otherwise), ``trust`` the facts that qualify the metric's numbers
        (exact or grid, the grid's bound, the weight kind, the confidence level, the bins) as a
        JSON object (:func:`sqlcal.reporting.report_table.trust`).

    See Also
    --------
    report : the same metrics per group, without a time key.
    detect : a sequential test for a change of calibration over time.
    stored : metrics over a window of stored summaries.

    Notes
    -----
    Each metric is the one of the same name (:func:`sqlcal.ece`, :func:`sqlcal.cutoff_error`,
    ...), computed with the time key as the last group key; its docstring gives the formula
    and the paper.

    Examples
    --------
    >>> import pandas as pd, sqlcal
    >>> df = pd.DataFrame({"p": [.2, .8, .3, .7], "y": [0, 1, 1, 1], "day": [1, 1, 2, 2]})
    >>> out = sqlcal.metric_series(df, score="p", label="y", time="day",
    ...                            metrics=["brier", "cutoff_error"])
    >>> out.drop(columns="trust").round(6)
       day  n    W        metric     statistic  value     lower     upper
    0    1  2  2.0         brier         brier   0.04  0.040000  0.040000
    1    1  2  2.0  cutoff_error  cutoff_error   0.10  0.000000  0.213737
    2    2  2  2.0         brier         brier   0.29  0.012819  0.567181
    3    2  2  2.0  cutoff_error  cutoff_error   0.50  0.213428  0.745665
    >>> print(out["trust"].iloc[1])  # doctest: +NORMALIZE_WHITESPACE
    {"ci_method": "bootstrap", "confidence": 0.9, "exact": true, "grid_bound": 0.0,
     "weight_kind": "frequency"}
    """
    by = (by,) if isinstance(by, str) else tuple(by)
    metrics = dict(metrics) if isinstance(metrics, dict) else {m: {} for m in metrics}
    unknown = [m for m in metrics if m not in METRICS]
    if unknown:
        raise ValueError(f"unknown metrics {unknown}; choose from {sorted(METRICS)}")
    src = as_source(data, score, label, weight=weight, by=(*by, time), where=where,
                    **source_options)
    return _measure(src, metrics, _quiet)[1]


def _quiet(label: str):
    return contextlib.nullcontext()


def _open_source(config: dict, time: str | None = None) -> Source:
    from sqlcal.query.executor import source

    cfg = dict(config["source"])
    data, table = cfg.pop("data"), cfg.pop("table", None)
    if time:
        cfg["by"] = [*cfg["by"], time]
    # a DuckDB file opens read-only (sqlcal.source): results go in later, through a connection
    # of their own (results_connection)
    return source(data, table=table, **cfg)


def _segments(config: dict) -> pd.DataFrame:
    """sqlcal.segments on the configured source with the [segments] options."""
    from sqlcal.audit.discovery import segments

    cfg = dict(config["source"])
    data, table = cfg.pop("data"), cfg.pop("table", None)
    keep = ("score", "label", "weight", "by", "where", "on_invalid")
    return segments((data, table) if table else data, **{k: cfg[k] for k in keep if k in cfg},
                    **config["segments"])


def _comparison(config: dict) -> pd.DataFrame:
    """sqlcal.compare of the report's model against the [compare] baseline: paired on a
    second score column of the same rows, or unpaired against ``baseline_where``'s rows (the
    model's rows: ``where`` of [compare], else of [source])."""
    from sqlcal.metrics.compare import compare

    src = {k: v for k, v in config["source"].items() if v is not None}
    options = dict(config["compare"])
    if options.get("baseline_where"):
        src["where"] = options.pop("where", src.get("where"))
    else:
        options.pop("where", None)
    data = src.pop("data")
    if src.get("table") is None:
        src.pop("table", None)
    return compare(data, **src, **options)


def _duckdb_file(data: Any) -> str | None:
    if not isinstance(data, str):
        return None
    path = data.removeprefix("duckdb://")
    return path if "://" not in path and path.lower().endswith((".duckdb", ".ddb", ".db")) else None


def _measure(src: Source, metrics: dict, step) -> tuple[dict, pd.DataFrame]:
    """Run each metric on ``src`` after the shared summaries; return the metric functions' frames
    and the tidy table."""
    chosen = {name: metric_options(name, options) for name, options in metrics.items()}
    scans = summary_steps(src, chosen)
    if hasattr(step, "total"):
        step.total += len(scans)
    for name, run in scans:
        with step(name):
            run()
    frames, parts = {}, []
    for name, options in metrics.items():
        function, preset, mapping = METRICS[name]
        with step(f"metric: {name}"):
            frames[name] = function(src, **{**preset, **options})
        values = src.group_keys.internal(frames[name])
        bounds = statistic_bounds(mapping, values)
        for column in statistics(mapping, values):
            counts = ["n", "W", *(["n_dropped"] if "n_dropped" in values else [])]
            part = values[[*src.by, *counts]].copy()
            part["metric"], part["statistic"] = name, column
            part["value"] = values[column].astype(float).to_numpy()
            pair = bounds.get(column)
            part["lower"] = values[pair[0]].astype(float).to_numpy() if pair else np.nan
            part["upper"] = values[pair[1]].astype(float).to_numpy() if pair else np.nan
            part["trust"] = trust(name, values)
            parts.append(part)
    tidy = pd.concat(parts, ignore_index=True)
    if src.by:
        tidy = tidy.sort_values(list(src.by), kind="stable", ignore_index=True)
    return frames, src.present(tidy)


def _wide(src: Source, frames: dict, metrics: dict) -> pd.DataFrame:
    return wide(src, {name: frames[name] for name in metrics})


def _check_alerts(src: Source, frames: dict, rules: list[dict]) -> list[dict]:
    fired = []
    for rule in rules:
        values = src.group_keys.internal(frames[rule["metric"]])
        if rule["column"] not in values:
            raise ValueError(f"alert on {rule['metric']}.{rule['column']}: the metric returned no "
                             f"such column with these options (columns {list(values.columns)})")
        groups = records(src.present(values[list(src.by)]), src.key_names)
        for (_, row), key in zip(values.iterrows(), groups):
            value = float(row[rule["column"]])
            if math.isnan(value):
                continue  # undefined (an empty or one-class group) is not a breach
            for side, breach in (("above", value > rule.get("above", math.inf)),
                                 ("below", value < rule.get("below", -math.inf))):
                if breach:
                    group = {k: key[k] for k in src.key_names}
                    where = ", ".join(f"{k}={v}" for k, v in group.items()) or "all rows"
                    fired.append({
                        "group": group, "metric": rule["metric"], "column": rule["column"],
                        "value": value, side: rule[side],
                        "message": f"{where}: {rule['metric']}.{rule['column']} = {value:.4g} "
                                   f"is {side} {rule[side]:g}",
                    })
    return fired


def _worst_first(table: pd.DataFrame, alerts: list[dict], src: Source,
                 order_by: list[str]) -> list[int]:
    """Groups with more alerts first; then by the ``order_by`` statistic, largest first (smallest
    first for a p-value); undefined values last."""
    metric, column = order_by
    counts = {}
    for a in alerts:
        key = group_id(a["group"])
        counts[key] = counts.get(key, 0) + 1
    values = src.group_keys.own(METRICS[metric][2][column])

    def rank(i):
        row = table.iloc[i]
        key = group_id({k: row[k] for k in src.key_names})
        v = float(row[values])
        v = -v if column == "p_value" else v
        return (-counts.get(key, 0), math.isnan(v), -v if not math.isnan(v) else 0.0)

    return sorted(range(len(table)), key=rank)


# -- diagrams ---------------------------------------------------------------------------------


def series_plot(series: pd.DataFrame, *, time: str, by: Sequence[str] = ()):
    """Small multiples of :func:`metric_series`: one panel per statistic, one line per group,
    with the interval as a band where the metric has one. Returns the matplotlib Figure."""
    import matplotlib.pyplot as plt

    panels = list(dict.fromkeys(zip(series["metric"], series["statistic"])))
    lines = len(series[list(by)].drop_duplicates()) if by else 1
    cols = min(len(panels), 2)
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.5 * cols, 3.6 * rows), squeeze=False)
    for ax, (metric, statistic) in zip(axes.flat, panels):
        part = series[(series["metric"] == metric) & (series["statistic"] == statistic)]
        for key, line in (part.groupby(list(by), dropna=False, sort=True) if by
                          else [((), part)]):
            key = key if isinstance(key, tuple) else (key,)
            line = line.sort_values(time)
            drawn = ax.plot(line[time], line["value"], marker="o", ms=3, lw=1.3,
                            label=", ".join(map(str, key)) or "all")
            if line["lower"].notna().any() and lines <= 3:  # more bands hide the lines
                ax.fill_between(line[time], line["lower"], line["upper"], alpha=0.15,
                                color=drawn[0].get_color(), lw=0)
        ax.set_title(metric if statistic == metric else f"{metric}: {statistic}",
                     fontsize="medium")
        ax.set_xlabel(time)
        ax.tick_params(axis="x", labelrotation=30, labelsize="small")
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize="x-small", loc="best")
    fig.tight_layout()
    return fig


# -- results table ----------------------------------------------------------------------------


def named_database(data: Any) -> str | None:
    """The database ``data`` names, as a results table's target, or None when it names none
    that outlives the process (a Parquet or CSV file, a glob, a folder, ``":memory:"``, a frame,
    an Ibis table of sqlcal's own in-memory DuckDB): ``"url"``, ``"duckdb"`` (a DuckDB file,
    existing or to be created) or ``"backend"`` (an Ibis backend or table of the caller's).

    Examples
    --------
    >>> named_database("warehouse.duckdb"), named_database("preds.parquet")
    ('duckdb', None)
    >>> named_database("postgres://host/db"), named_database("duckdb://:memory:")
    ('url', None)
    """
    if isinstance(data, os.PathLike):
        data = os.fspath(data)
    if isinstance(data, str):
        scheme, sep, rest = data.partition("://")
        if sep and scheme != "duckdb":
            # file readers hold their rows in an in-memory DuckDB, not in a database
            return None if scheme.lower() in _FILE_SCHEMES else "url"
        path = rest if sep else data
        if path in ("", ":memory:") or any(ch in path for ch in "*?["):
            return None
        if path.lower().endswith((".duckdb", ".ddb", ".db")):
            return "duckdb"
        return "duckdb" if outputs.data_kind(path) == "a DuckDB database" else None
    if hasattr(data, "list_tables"):  # a backend the caller connected
        return None if _in_memory(data) else "backend"
    if isinstance(data, ibis.expr.types.Table):
        try:
            backend = engines.backend_of(data, default=False)
        except Exception:  # memtables only: sqlcal's own in-memory DuckDB
            return None
        return None if _in_memory(backend) else "backend"
    return None


def check_results_target(url: Any, data: Any, *, where: str = "config") -> None:
    """Refuse a results table with no database to live in: ``[results] url`` must name one
    (:func:`named_database`), else the source must be one; a DuckDB file there must be absent (it is
    created) or a DuckDB database. A :class:`ConfigError` naming ``[results]``, before any
    query."""
    if url is not None and (not isinstance(url, (str, os.PathLike)) or not os.fspath(url)):
        raise ConfigError(f"{where}: [results] url must be a DuckDB file or a database URL, "
                          f"not {url!r}")
    target = url if url is not None else data
    kind = named_database(target)
    if kind is None:
        hint = ('name a database: a DuckDB file ("results.duckdb", created if absent) or a '
                'database URL ("postgres://...")')
        if url is not None:
            shown = repr(os.fspath(url)) if "://" not in os.fspath(url) else "a file reader's URL"
            raise ConfigError(f"{where}: [results] url = {shown} is not a database, and rows "
                              f"written there would be lost; {hint}")
        shown = repr(data) if isinstance(data, str) and "://" not in data else (
            f"a {type(data).__name__}" if not isinstance(data, str) else "a file reader's URL")
        raise ConfigError(f"{where}: [results] table: the source {shown} is not a database, so "
                          f"the results table has nowhere to live; add [results] url: {hint}")
    if kind == "duckdb":
        path = os.fspath(target).removeprefix("duckdb://")
        if os.path.lexists(path):
            if outputs.data_kind(path) != "a DuckDB database" or not os.path.isfile(path):
                raise ConfigError(f"{where}: [results] the DuckDB file {path!r} exists and is not "
                                  "a DuckDB database; sqlcal never writes over it: choose "
                                  "another url")
        elif not os.path.isdir(os.path.dirname(os.path.abspath(path))):
            raise ConfigError(f"{where}: [results] url {path!r}: its folder does not exist")


def _in_memory(backend: Any) -> bool:
    """Whether an Ibis backend is an in-memory DuckDB (its rows die with the process)."""
    if getattr(backend, "name", None) != "duckdb":
        return False
    (path,) = backend.con.execute("SELECT path FROM duckdb_databases() "
                                  "WHERE database_name = current_database()").fetchone()
    return path is None or path in ("", ":memory:")


#: URL schemes Ibis reads files through (into an in-memory DuckDB)
_FILE_SCHEMES = ("file", "parquet", "csv", "delta", "json")


def results_rows(run: ScheduledRun) -> pd.DataFrame:
    """The run's tidy metrics as rows of the results table (:data:`RESULTS_SCHEMA`)."""
    keys, tidy, own = run.keys, run.metrics, run.own
    frame = pd.DataFrame({
        "run_id": run.run_id,
        "run_at": pd.Timestamp(run.run_at),
        "config_hash": run.config_hash,
        "group_keys": [group_id(group) for group in records(tidy, keys)],
        "metric": tidy[own("metric")].to_numpy(),
        "statistic": tidy[own("statistic")].to_numpy(),
        "value": tidy[own("value")].to_numpy(float),
        "lower": tidy[own("lower")].to_numpy(float),
        "upper": tidy[own("upper")].to_numpy(float),
        "trust": tidy[own("trust")].to_numpy(object),
    }, index=range(len(tidy)))
    return frame


def write_results(con, name: str, rows: pd.DataFrame, *, database: str | None = None) -> int:
    """Append rows to a results table in one INSERT that adds nothing when their run id is
    already there; create the table if absent. Returns the number of rows inserted.

    The statement is ``INSERT INTO name SELECT * FROM new WHERE run_id NOT IN (SELECT run_id FROM
    name)``. It is one statement, so DuckDB and PostgreSQL apply all the run's rows or none
    (atomic; on Spark, as atomic as the table format's commit: one job, ACID with Delta or
    Iceberg), and a re-run with the same run id finds its rows and adds none (idempotent). Two
    runs with the same id at the same moment could both insert under PostgreSQL's default
    isolation; schedulers do not start one task instance twice at once. Nothing but ``name`` is
    written (Ibis holds ``new`` in a temporary table or view of the session).
    """
    ids = rows["run_id"].unique()
    if len(ids) != 1:
        raise ValueError(f"results rows must hold one run id, not {list(ids)}")
    if name not in con.list_tables(database=database):
        con.create_table(name, schema=RESULTS_SCHEMA, database=database)
    target = con.table(name, database=database)
    # a results table written before the trust column existed still takes the other columns
    earlier = {k: v for k, v in RESULTS_SCHEMA.items() if k != "trust"}
    if _kinds(target.schema()) not in (_kinds(RESULTS_SCHEMA), _kinds(earlier)):
        have = {k: str(v) for k, v in target.schema().items()}
        raise ValueError(f"table {name!r} exists with columns {have}, not a results table's "
                         f"{ {k: str(v) for k, v in RESULTS_SCHEMA.items()} }; choose another name")
    schema = RESULTS_SCHEMA if "trust" in target.schema() else ibis.schema(earlier)
    if "trust" not in schema:
        warnings.warn(f"results table {name!r} has no trust column: the facts that qualify the "
                      f"values (exact, grid bounds, weight kind, confidence) are not stored; add "
                      f"it with ALTER TABLE {name} ADD COLUMN trust VARCHAR (TEXT on "
                      f"PostgreSQL, STRING on Spark)", stacklevel=2)
    before = _count(target, ids[0])
    if before:
        return 0
    new = ibis.memtable(rows[list(schema)], schema=schema)
    con.insert(name, new.filter(~new.run_id.isin(target.run_id)), database=database)
    return _count(target, ids[0]) - before


def _kinds(schema) -> dict:
    # engines report their own precision and nullability (timestamp(6), !string): compare kinds
    return {name: type(kind).__name__ for name, kind in schema.items()}


def _count(target, run_id: str) -> int:
    return int(target.filter(target.run_id == run_id).count().to_pyarrow().as_py())


def store_results(run: ScheduledRun) -> int:
    """Append the run's rows to ``[results] table`` (:func:`write_results`); return how many.

    When the table lives in a DuckDB file (the source's, or ``[results] url = "duckdb://..."``),
    the read-only connection sqlcal measured through is closed first and the rows go in through
    a read-write connection opened for this one INSERT and closed right after: the source is
    never open for writing while it is measured. Sources built earlier on that file in this
    process must be rebuilt (their connection is closed).
    """
    cfg = run.config["results"]
    check_results_target(cfg.get("url"), run.config["source"]["data"])
    rows = results_rows(run)
    con = results_connection(run)
    try:
        added = write_results(con, cfg["table"], rows, database=cfg.get("database"))
    finally:
        if con is not _source_backend(run):
            con.disconnect()
    reader, opened = _results_reader(run)
    try:
        stored = read_back(reader, cfg["table"], run.run_id, database=cfg.get("database"))
    finally:
        if opened:
            reader.disconnect()
    if stored != len(rows):
        raise ResultsError(f"the results table {cfg['table']!r} holds {stored} rows of run "
                           f"{run.run_id!r} after the insert, not the run's {len(rows)}: nothing "
                           "is reported as written")
    return added


class ResultsError(ValueError):
    """The results table does not hold, read back, the rows a run wrote."""


def read_back(con, name: str, run_id: str, *, database: str | None = None) -> int:
    """How many rows of ``run_id`` the results table ``name`` holds, through ``con`` (0 when
    there is no such table)."""
    if name not in con.list_tables(database=database):
        return 0
    return _count(con.table(name, database=database), run_id)


def _results_reader(run: ScheduledRun) -> tuple[Any, bool]:
    """A new connection to the results table's database, to read back what the run wrote (a
    DuckDB file read-only, a URL connected anew), and whether it was opened here; the caller's
    own backend when the source is one."""
    url = run.config["results"].get("url")
    target = url if url else run.config["source"]["data"]
    kind = named_database(target)
    if kind == "duckdb":
        return ibis.duckdb.connect(os.fspath(target).removeprefix("duckdb://"),
                                   read_only=True), True
    if kind == "url":
        return connect_url(os.fspath(target), read_only=True), True
    return _source_backend(run), False


def results_connection(run: ScheduledRun):
    """The connection the results table goes to: ``[results] url``, else the source's database,
    through a connection of its own when the source is a URL (sqlcal's measuring session is
    read-only), through the source's when it is an Ibis table from Python.

    For a DuckDB file it is a new read-write connection (the cached read-only one to that file
    is closed first; DuckDB allows one configuration per file and process): disconnect it after
    the insert, as :func:`store_results` does.
    """
    url = run.config["results"].get("url")
    path = _duckdb_file(url) if url else _duckdb_file(run.config["source"]["data"])
    if path:
        from sqlcal.inputs.sources import connections

        held = connections.pop(os.path.abspath(path), None)
        if held is not None:
            held.disconnect()
        if not url and not os.path.exists(path):
            raise FileNotFoundError(f"no database file at {path!r}")
        return ibis.duckdb.connect(path)
    if url:
        return connect_url(url)
    data = run.config["source"]["data"]
    if isinstance(data, str) and "://" in data:
        # the session sqlcal measured through is read-only: the rows go in through a session of
        # their own, closed after the insert
        return connect_url(data)
    return _source_backend(run)


def _source_backend(run: ScheduledRun):
    try:
        return engines.backend_of(run.source.rows, default=False)
    except ibis.common.exceptions.IbisError:  # a frame's memtable: no backend of its own
        return None


# -- JSON -------------------------------------------------------------------------------------


def to_document(run: ScheduledRun) -> dict:
    """The run as the JSON document of ``sqlcal/reporting/report.schema.json``: ``generator``
    ("sqlcal", the mark of sqlcal's own output files), the plain report's fields
    (``schema_version``, ``source``, ``columns``, ``rows``) and the run, the tidy metrics, the
    alerts and the series."""
    doc = json.loads(to_json(run.table, {**describe(run.source), **_where_from(run.config)}))
    # the marker by which sqlcal knows a file is its own output, which it may replace
    doc = {outputs.JSON_MARKER[0]: outputs.JSON_MARKER[1], **doc}
    keys = run.keys

    doc["status"] = run.status
    doc["run"] = {"id": run.run_id, "at": run.run_at.isoformat() + "Z",
                  "config_hash": run.config_hash,
                  "config": json.loads(json.dumps(_redacted(run.config), default=str))}
    doc["groups"] = [{k: key_value(v) for k, v in group.items()}
                     for group in records(run.table, keys)]
    doc["metrics"] = _tidy_records(run.metrics, keys, run.own)
    doc["alerts"] = [{**a, "group": {k: key_value(v) for k, v in a["group"].items()}}
                     for a in run.alerts]
    if run.series is not None:
        key = run.config["time"]["key"]
        series_own = run.series_source.group_keys.own if run.series_source else run.own
        doc["series"] = {"time": key, "rows": _tidy_records(run.series, keys, series_own,
                                                            key)}
    if run.comparison is not None:
        doc["comparison"] = [{k: (key_value(v) if k in keys else _jsonable(v))
                              for k, v in r.items()}
                             for r in run.comparison.to_dict("records")]
    if run.segments is not None:
        # sqlcal.segments' own column, beside keys and features of the same names
        searched = shown_name("searched", {*keys, *run.config["segments"]["features"]})
        doc["segments"] = [{**{k: _jsonable(v) for k, v in r.items() if k != searched},
                            searched: json.loads(r[searched])}
                           for r in run.segments.to_dict("records")]
    return doc


def _tidy_records(frame: pd.DataFrame, keys: list[str], own, time: str | None = None
                  ) -> list[dict]:
    """The records of a tidy table (keys, then sqlcal's columns named by ``own``)."""
    fields = ("n", "W", "metric", "statistic", "value", "lower", "upper")
    return [{"group": {k: key_value(v) for k, v in group.items()},
             **({"time": key_value(r[time])} if time else {}),
             **{k: _jsonable(r[own(k)]) for k in fields}, "trust": json.loads(r[own("trust")])}
            for group, (_, r) in zip(records(frame, keys), frame.iterrows())]


def json_schema() -> dict:
    """The JSON Schema (draft 2020-12) of :func:`to_document` and of ``sqlcal report --json``."""
    from importlib.resources import files

    return json.loads(files("sqlcal.reporting").joinpath("report.schema.json").read_text("utf-8"))


def _where_from(config: dict) -> dict:
    cfg = _redacted(config)["source"]
    return {"data": cfg["data"], "table": cfg.get("table"), "where": cfg.get("where")}


def _redacted(config: dict) -> dict:
    # passwords stay out of JSON, HTML and logs: every string of the configuration is redacted
    out = json.loads(json.dumps(config, default=str))
    if not isinstance(config["source"]["data"], str):  # from Python: an Ibis table, a frame
        out["source"]["data"] = f"<{type(config['source']['data']).__name__}>"
    return redact(out)


def _jsonable(v):
    if isinstance(v, (float, np.floating)):
        return float(v) if math.isfinite(v) else None
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.bool_):
        return bool(v)
    if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)) or v is pd.NaT:
        return None
    if hasattr(v, "isoformat"):
        return v.isoformat()
    return v


def _python(v):
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, pd.Timestamp):
        return v.to_pydatetime()
    return v


# -- progress ---------------------------------------------------------------------------------


class Progress:
    """``with step("metric: ece"):``: on stderr, ``sqlcal: [3/9] metric: ece`` as the step
    starts (overwritten in place on a terminal) and the step with its time as it ends.

    ``enabled``: True, False, or None for "where someone watches": stderr is a terminal, or the
    run is in a notebook's kernel. ``total`` is the steps known so far; a step that finds more
    (the planner's scans) adds them."""

    def __init__(self, enabled: bool | None, *, total: int = 0):
        self.enabled = interactive() if enabled is None else enabled
        self.total, self.done = total, 0
        self.live = self.enabled and sys.stderr.isatty()

    @contextlib.contextmanager
    def __call__(self, label: str):
        self.done += 1
        self.total = max(self.total, self.done)
        head = f"sqlcal: [{self.done}/{self.total}] {label}"
        if self.live:
            print(f"{head} ...", end="\r", file=sys.stderr, flush=True)
        begin = time.monotonic()
        yield
        if self.enabled:
            clear = "\x1b[K" if self.live else ""
            print(f"{head} {time.monotonic() - begin:.2f} s{clear}", file=sys.stderr, flush=True)


def _engine_progress(src: Source) -> None:
    """DuckDB's own progress bar for a long query (it draws on the terminal, which is why only
    a run whose output is a terminal asks for it)."""
    try:
        backend = engines.backend_of(src.rows)
        if backend.name == "duckdb":
            backend.raw_sql("SET enable_progress_bar = true")
    except Exception:  # an engine without the setting, or a read-only attachment refusing it
        pass


def interactive() -> bool:
    """Whether progress has a watcher: stderr is a terminal, or a notebook's kernel runs us."""
    if sys.stderr.isatty():
        return True
    shell = sys.modules.get("IPython")
    try:
        return bool(shell) and type(shell.get_ipython()).__name__ == "ZMQInteractiveShell"
    except Exception:  # an IPython without a running shell
        return False


def _steps(config: dict, diagrams: bool | None) -> int:
    """The steps a run will show, before the planner says how many scans it needs: opening the
    source, a step per metric, the series, the segments and the page's charts."""
    if diagrams is None:
        diagrams = bool(config["report"]["diagrams"] and config["output"].get("html"))
    page = 2 + ("smooth_ece" in config["metrics"]) + ("tce" in config["metrics"])
    return (1 + len(config["metrics"]) + bool(config["time"]) + bool(config.get("segments"))
            + (page if diagrams else 0))


def _monitor_page(run) -> str:
    from sqlcal.reporting.html import fragment

    return fragment(run)


_monitor.PAGE = _monitor_page  # a monitor run shows its page in a notebook
