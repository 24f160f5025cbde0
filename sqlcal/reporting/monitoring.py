"""What ``sqlcal monitor`` runs besides the detector: the report's metrics on windows merged from
the summary store (last 7 days, last 28, month over month), threshold alerts on them, and the
results-table rows of a check date.

It sits above the store (:mod:`sqlcal.monitor`) and the report's metric table
(:mod:`sqlcal.reporting.report_table`), next to :mod:`sqlcal.reporting.scheduled`, whose results
table it appends to.

Examples
--------
>>> window_ranges({"last_7d": {"days": 7}}, pd.Timestamp("2026-11-22"))["last_7d"]
(Timestamp('2026-11-16 00:00:00'), Timestamp('2026-11-22 00:00:00'))
"""

from __future__ import annotations

import json
import os
from typing import Any, Sequence

import ibis
import numpy as np
import pandas as pd
from scipy import stats

from sqlcal.inputs.sources import connect_url
from sqlcal.monitor import schema
from sqlcal.monitor import store as _store
from sqlcal.monitor.config import ConfigError
from sqlcal.monitor.stored import stored
from sqlcal.reporting.report_table import (
    METRICS,
    metric_options,
    statistic_bounds,
    statistics,
    trust,
)
from sqlcal.reporting.scheduled import (
    RESULTS_SCHEMA,
    ResultsError,
    check_metric_options,
    named_database,
    read_back,
    write_results,
)

#: the windows when ``[windows]`` names none
WINDOWS = {"last_7d": {"days": 7}, "last_28d": {"days": 28},
           "month": {"calendar": "month", "compare": "previous"}}
#: the metrics when ``[metrics]`` names none
DEFAULT_METRICS = {"ece": {"bins": 16}, "brier": {}, "calibration_in_the_large": {}}


def check_windows(block: dict | None, *, where: str = "config") -> tuple[dict, str]:
    """``[windows]``: the named windows and the maturity view; a :class:`ConfigError` naming the
    window and key of the first problem."""
    block = dict(block or {})
    maturity = block.pop("maturity", "mature")
    if not isinstance(maturity, str):
        raise ConfigError(f"{where}: [windows] maturity must be a string, not {maturity!r}")
    out = {}
    for name, spec in (block or WINDOWS).items():
        if not isinstance(spec, dict):
            raise ConfigError(f"{where}: [windows] {name} must be a table like {{ days = 7 }}")
        extra = sorted(set(spec) - {"days", "calendar", "compare"})
        if extra:
            raise ConfigError(f"{where}: [windows] {name} has unknown keys {extra}")
        if "days" in spec:
            if not (isinstance(spec["days"], int) and not isinstance(spec["days"], bool)
                    and spec["days"] >= 1) or "calendar" in spec:
                raise ConfigError(f"{where}: [windows] {name} days must be a whole number >= 1 "
                                  "(and no calendar)")
        elif spec.get("calendar") != "month":
            raise ConfigError(f"{where}: [windows] {name} needs days = N or calendar = \"month\"")
        if spec.get("compare", "previous") != "previous":
            raise ConfigError(f"{where}: [windows] {name} compare must be \"previous\"")
        out[name] = dict(spec)
    return out, maturity


def check_monitor(block: dict | None, *, store: Any = None, where: str = "config") -> str | None:
    """``[monitor]``: ``results_table``, the table in the store each check appends its rows to
    (none: no rows). The store must then be a database that outlives the process (a DuckDB
    file or a URL: :func:`sqlcal.reporting.scheduled.named_database`). Returns the table name."""
    block = dict(block or {})
    extra = sorted(set(block) - {"results_table"})
    if extra:
        raise ConfigError(f"{where}: [monitor] has unknown keys {extra}; expected results_table")
    name = block.get("results_table")
    if name is not None and not (isinstance(name, str) and name.isidentifier()):
        raise ConfigError(f"{where}: [monitor] results_table must be a table name, not {name!r}")
    if name is not None and store is not None and named_database(store) is None:
        shown = repr(store) if isinstance(store, str) and "://" not in store else "it"
        raise ConfigError(f"{where}: [monitor] results_table: the store {shown} is not a "
                          "database, so the rows would be lost; set [snapshot] store to a "
                          "DuckDB file or a database URL")
    return name


def check_metrics(block: dict | None, *, where: str = "config") -> dict:
    """``[metrics]``: report metric names with their options (the report's metric table)."""
    block = dict(block or DEFAULT_METRICS)
    unknown = sorted(set(block) - set(METRICS))
    if unknown:
        raise ConfigError(f"{where}: [metrics] has unknown metrics {unknown}; expected some of "
                          f"{sorted(METRICS)}")
    for name, options in block.items():
        if not isinstance(options, dict):
            raise ConfigError(f"{where}: [metrics] {name} must be a table of options")
        check_metric_options(name, options, f"{where}: [metrics] {name}")
    return block


def window_ranges(windows: dict, end: pd.Timestamp) -> dict:
    """Each window's (first, last) day, ending on ``end``; a month window is the calendar month
    of ``end`` up to it, and with ``compare`` the previous calendar month too
    (``"<name>:previous"``)."""
    out = {}
    for name, spec in windows.items():
        if "days" in spec:
            out[name] = (end - pd.Timedelta(days=spec["days"] - 1), end)
        else:
            first = end.to_period("M").start_time
            out[name] = (first, end)
            if spec.get("compare"):
                previous = (first - pd.Timedelta(days=1)).to_period("M")
                out[f"{name}:previous"] = (previous.start_time, previous.end_time.normalize())
    return out


def windows(store: Any, *, windows: dict | None = None, metrics: dict | None = None,
            at: Any = None, by: str | Sequence[str] | None = None, maturity: str = "mature",
            horizon: str = "30d", settle: str = "1d", prefix: str = schema.PREFIX,
            confidence: float = 0.95) -> pd.DataFrame:
    r"""The report's metrics on windows merged from the summary store.

    Parameters
    ----------
    store : str, path or Ibis connection
        A summary store written by :func:`sqlcal.snapshot`.
    windows : dict, optional
        ``{name: {"days": N}}`` (the N days ending on the last day) or ``{name: {"calendar":
        "month", "compare": "previous"}}``; default last 7 days, last 28, month over month.
    metrics : dict, optional
        Report metric names and options (``{"ece": {"bins": 16}, "brier": {}}``).
    at : datetime-like, optional
        The check time; the windows end on the last day the maturity view admits by then.
    by, maturity, horizon, settle, prefix
        As for :func:`sqlcal.stored`.
    confidence : float, default 0.95
        Level of the interval of a comparison's change.

    Returns
    -------
    pandas.DataFrame
        Keys, ``window``, ``start``, ``end``, ``n``, ``W``, ``metric``, ``statistic``,
        ``value``, ``lower``, ``upper``, ``trust``. A compared window adds ``<name>:previous``
        and ``<name>:change`` rows: current minus previous, with a fixed-sample interval
        (normal, from the two windows' intervals) where both have one; it is a per-comparison
        interval, not an anytime-valid one (the detector gives those).

    Examples
    --------
    >>> import pandas as pd, sqlcal
    >>> df = pd.DataFrame({"p": [0.2, 0.7, 0.4, 0.9], "y": [0, 1, 1, 1],
    ...                    "t": pd.to_datetime(["2026-11-01 08:00", "2026-11-01 09:00",
    ...                                         "2026-11-02 10:00", "2026-11-02 11:00"])})
    >>> _ = sqlcal.snapshot(df, score="p", label="y", time="t", store=":memory:",
    ...                     as_of="2026-11-03", prefix="win_")
    >>> w = windows(":memory:", prefix="win_", windows={"last_2d": {"days": 2}},
    ...             metrics={"brier": {}}, maturity="all")
    >>> w[["window", "metric", "value", "n"]].values.tolist()
    [['last_2d', 'brier', 0.125, 4]]
    """
    windows = WINDOWS if windows is None else windows
    metrics = DEFAULT_METRICS if metrics is None else metrics
    end = last_day(store, prefix=prefix, at=at, maturity=maturity, horizon=horizon,
                   settle=settle)
    parts = []
    for name, (first, last) in window_ranges(windows, end).items():
        try:
            src = stored(store, by=by, start=first, end=last, maturity=maturity, prefix=prefix,
                         at=at, horizon=horizon, settle=settle)
        except ValueError as e:
            if "holds no" in str(e):  # an empty window (a month before the first snapshot)
                continue
            raise
        for metric, options in metrics.items():
            function = METRICS[metric][0]
            values = function(src, **metric_options(metric, options))
            tidy = _tidy(values, src.key_names, metric)
            if metric == "calibration_in_the_large":
                tidy = _citl_interval(tidy, src, confidence)
            parts.append(tidy.assign(window=name, start=first, end=last))
    if not parts:
        return pd.DataFrame(columns=["window", "start", "end", "n", "W", "metric", "statistic",
                                     "value", "lower", "upper", "trust"])
    out = pd.concat(parts, ignore_index=True)
    keys = [c for c in out.columns if c not in ("window", "start", "end", "n", "W", "metric",
                                                "statistic", "value", "lower", "upper",
                                                "trust")]
    out = pd.concat([out, _changes(out, keys, confidence)], ignore_index=True)
    return out[[*keys, "window", "start", "end", "n", "W", "metric", "statistic", "value",
                "lower", "upper", "trust"]]


def last_day(store: Any, *, prefix: str = schema.PREFIX, at: Any = None,
             maturity: str = "mature", horizon: str = "30d", settle: str = "1d"
             ) -> pd.Timestamp:
    """The last stored day a window ending at ``at`` can use under the maturity view."""
    versions = _store.current_versions(store, prefix)
    if not len(versions):
        raise ValueError(f"no snapshots in the store (prefix {prefix!r})")
    at = _store.check_time(versions, at)
    if maturity == "mature":
        versions = versions[_store.mature(versions, at=at, horizon=horizon, settle=settle)]
    else:
        versions = versions[versions["period_start"] < at]
    if not len(versions):
        raise ValueError(f"no {maturity!r} day in the store at {at}")
    return pd.Timestamp(versions["period_start"].max()).normalize()


def _tidy(values: pd.DataFrame, by: Sequence[str], metric: str) -> pd.DataFrame:
    mapping = METRICS[metric][2]
    bounds = statistic_bounds(mapping, values)
    parts = []
    for column in statistics(mapping, values):
        part = values[[*by, "n", "W"]].copy()
        part["metric"], part["statistic"] = metric, column
        part["value"] = values[column].astype(float).to_numpy()
        pair = bounds.get(column)
        part["lower"] = values[pair[0]].astype(float).to_numpy() if pair else np.nan
        part["upper"] = values[pair[1]].astype(float).to_numpy() if pair else np.nan
        part["trust"] = trust(metric, values)
        parts.append(part)
    return pd.concat(parts, ignore_index=True)


def _citl_interval(tidy: pd.DataFrame, src, confidence: float) -> pd.DataFrame:
    """A normal interval for calibration-in-the-large, mean(p) − mean(y): the mean residual's
    variance is (Σw(y − p)²/W − citl²)/W with frequency weights, Σw(y − p)²/W being the Brier
    score of the same stored totals."""
    brier = METRICS["brier"][0](src)
    by = list(src.key_names)
    rows = tidy["statistic"] == "citl"
    merged = tidy[rows].merge(brier[[*by, "brier"]], on=by, how="left") if by else \
        tidy[rows].assign(brier=float(brier["brier"].iloc[0]))
    se = np.sqrt(np.maximum(merged["brier"] - merged["value"] ** 2, 0) / merged["W"])
    z = stats.norm.isf((1 - confidence) / 2)
    tidy = tidy.copy()
    tidy.loc[rows, "lower"] = (merged["value"] - z * se).to_numpy()
    tidy.loc[rows, "upper"] = (merged["value"] + z * se).to_numpy()
    tidy.loc[rows, "trust"] = json.dumps({"confidence": confidence,
                                          "interval": "normal, frequency weights"},
                                         sort_keys=True)
    return tidy


def _changes(out: pd.DataFrame, keys: list, confidence: float) -> pd.DataFrame:
    """``<name>:change`` rows: current − previous, with √(h₁² + h₂²) half-widths (each window's
    interval read as normal at its level, rescaled to ``confidence``) where both have one."""
    rows = []
    previous = out[out["window"].str.endswith(":previous")]
    for name in previous["window"].str[:-len(":previous")].unique():
        now, before = out[out["window"] == name], previous[previous["window"]
                                                           == f"{name}:previous"]
        both = now.merge(before, on=[*keys, "metric", "statistic"], suffixes=("", "_before"))
        if not len(both):
            continue
        z = stats.norm.isf((1 - confidence) / 2)
        conf = both["trust"].map(lambda t: json.loads(t).get("confidence", 0.95))
        zc = stats.norm.isf((1 - conf.astype(float)) / 2)
        h = np.hypot((both["upper"] - both["lower"]) / 2 / zc,
                     (both["upper_before"] - both["lower_before"]) / 2 / zc) * z
        change = both[[*keys, "metric", "statistic"]].copy()
        change["window"] = f"{name}:change"
        change["start"], change["end"] = both["start_before"], both["end"]
        change["n"], change["W"] = both["n"] + both["n_before"], both["W"] + both["W_before"]
        change["value"] = both["value"] - both["value_before"]
        change["lower"], change["upper"] = change["value"] - h, change["value"] + h
        change["trust"] = json.dumps({"interval": "per comparison, fixed-sample, normal",
                                      "confidence": confidence}, sort_keys=True)
        rows.append(change)
    return pd.concat(rows, ignore_index=True) if rows else out.iloc[:0]


def alerts(table: pd.DataFrame, rules: list[dict], keys: Sequence[str]) -> list[dict]:
    """The ``[[alerts]]`` rules that fire on the windows' table: ``window``, ``metric``,
    ``column`` (a statistic, or ``lower``/``upper``), ``above`` or ``below``."""
    fired = []
    for rule in rules:
        rows = table[(table["window"] == rule["window"]) & (table["metric"] == rule["metric"])]
        column = rule.get("column", rule["metric"])
        if column in ("lower", "upper", "lower_bound", "upper_bound"):
            field = "lower" if column.startswith("lower") else "upper"
            rows = rows[rows["statistic"] == next(iter(METRICS[rule["metric"]][2]))]
        else:
            field = "value"
            rows = rows[rows["statistic"] == column]
        for row in rows.to_dict("records"):
            value = row[field]
            if ("above" in rule and value > rule["above"]) or \
                    ("below" in rule and value < rule["below"]):
                fired.append({**{k: row[k] for k in keys}, "window": rule["window"],
                              "metric": rule["metric"], "column": column, "value": value,
                              "rule": "above" if "above" in rule else "below",
                              "threshold": rule.get("above", rule.get("below"))})
    return fired


def check_alerts(rules: Any, windows: dict, metrics: dict, *, where: str = "config") -> list:
    """``[[alerts]]``: each rule names a configured window and metric and one threshold."""
    rules = list(rules or [])
    for i, rule in enumerate(rules):
        if not isinstance(rule, dict):
            raise ConfigError(f"{where}: [[alerts]] #{i + 1} must be a table")
        extra = sorted(set(rule) - {"window", "metric", "column", "above", "below"})
        if extra:
            raise ConfigError(f"{where}: [[alerts]] #{i + 1} has unknown keys {extra}")
        known = set(windows) | {f"{w}:change" for w, s in windows.items() if s.get("compare")}
        if rule.get("window") not in known:
            raise ConfigError(f"{where}: [[alerts]] #{i + 1} window must be one of "
                              f"{sorted(known)}, not {rule.get('window')!r}")
        if rule.get("metric") not in metrics:
            raise ConfigError(f"{where}: [[alerts]] #{i + 1} metric must be one of "
                              f"{sorted(metrics)} ([metrics]), not {rule.get('metric')!r}")
        threshold = rule.get("above", rule.get("below"))
        if ("above" in rule) == ("below" in rule) or isinstance(threshold, bool) or \
                not isinstance(threshold, (int, float)) or not np.isfinite(threshold):
            raise ConfigError(f"{where}: [[alerts]] #{i + 1} needs one finite number, above or "
                              f"below, not {threshold!r} (a NaN threshold would never fire)")
    return rules


def results_rows(table: pd.DataFrame, path: pd.DataFrame, keys: Sequence[str], *, run_id: str,
                 config_hash: str) -> pd.DataFrame:
    """The results table's rows of a check (:data:`sqlcal.reporting.scheduled.RESULTS_SCHEMA`): one
    per group, window, metric and statistic (the window in ``group_keys``), and the detector's
    ``log_M`` on the check's last day per group (window ``"detector"``)."""
    path = path[path["stream"] == "mature"]
    last = path[path["day"] == path["day"].max()]
    detector = last[[*keys, "log_M", "threshold"]].assign(
        window="detector", metric="detector", statistic="log_M", lower=np.nan,
        upper=last["threshold"], trust=json.dumps({"anytime_valid": True}))
    detector = detector.rename(columns={"log_M": "value"})
    both = pd.concat([table, detector], ignore_index=True)
    return pd.DataFrame({
        "run_id": run_id, "run_at": pd.Timestamp.now(tz="UTC").tz_localize(None),
        "config_hash": config_hash,
        "group_keys": [schema.group_keys({**{k: row[k] for k in keys}, "window": row["window"]})
                       for _, row in both.iterrows()],
        "metric": both["metric"].to_numpy(), "statistic": both["statistic"].to_numpy(),
        "value": both["value"].to_numpy(float), "lower": both["lower"].to_numpy(float),
        "upper": both["upper"].to_numpy(float), "trust": both["trust"].to_numpy(object),
    }, index=range(len(both)))[list(RESULTS_SCHEMA)]


def store_results(store: Any, name: str, rows: pd.DataFrame) -> int:
    """Append a check's rows to the results table ``name`` in the store (one INSERT that adds
    nothing when the check date is already there,
    :func:`sqlcal.reporting.scheduled.write_results`), then read them back through a new connection
    to the store; returns the rows added.

    Raises
    ------
    ConfigError
        When the store is not a database (:func:`check_monitor`).
    sqlcal.reporting.scheduled.ResultsError
        When the store does not hold, read back, every row of the check.
    """
    check_monitor({"results_table": name}, store=store)
    added = write_results(_store.connect(store), name, rows)
    run_id = rows["run_id"].iloc[0]
    if hasattr(store, "list_tables"):
        stored = read_back(store, name, run_id)
    else:
        path = os.fspath(store)
        reader = (connect_url(path, read_only=True) if named_database(path) == "url"
                  else ibis.duckdb.connect(path.removeprefix("duckdb://")))
        try:
            stored = read_back(reader, name, run_id)
        finally:
            reader.disconnect()
    if stored != len(rows):
        raise ResultsError(f"the results table {name!r} holds {stored} rows of check "
                           f"{run_id!r} after the insert, not the check's {len(rows)}: nothing "
                           "is reported as written")
    return added
