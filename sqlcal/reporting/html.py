"""The page of a scheduled report and of a monitor run: one self-contained, interactive HTML file.

The page opens offline (from ``file://``, attached to an e-mail): its styles, its script and
Plotly's script are inlined, Plotly's once per page and gzip-compressed (the browser inflates it
with ``DecompressionStream``), so a page for 100 groups stays a few MB. It is built from Jinja2
templates (``sqlcal/reporting/templates``, escaping on); the charts' data travel as one JSON
document in a ``<script type="application/json">`` element, encoded by :func:`safe_json`, and
the page's script draws them with Plotly when a group is opened.

Sections: the run and its status, the alerts, an overview chart, the groups worst first in a
sortable table (each row opens the group), then one section per group with its tables and
diagrams. Every diagram is drawn from a result table the run already holds (a reliability
table, a score-cell summary, the metric series, the detector's path); a diagram whose table the
run did not produce is left out, not estimated.
"""

from __future__ import annotations

import base64
import functools
import gzip
import itertools
import json
import math
from importlib.resources import files
from typing import TYPE_CHECKING, Any, Sequence

import jinja2
import numpy as np
import pandas as pd
from markupsafe import Markup

from sqlcal._version import __version__
from sqlcal.inputs.groupkeys import group_id, key_value, records, shown_name
from sqlcal.outputs import HTML_MARKER
from sqlcal.reporting.report_table import METRICS

if TYPE_CHECKING:  # annotations only: sqlcal.reporting.scheduled renders its runs with this module
    from sqlcal.monitor.monitor import MonitorRun
    from sqlcal.reporting.scheduled import ScheduledRun

#: points kept per drawn curve (a curve of more is thinned evenly: the page's charts are a few
#: hundred pixels wide)
CURVE_POINTS = 121
#: significant digits of a number in the charts' data (what hover shows)
DIGITS = 4
# the counts beside every group's values
_COUNTS = ("n", "W", "n_dropped")
# the detector path's own columns (the rest are the group keys)
_PATH_COLUMNS = ("stream", "day", "n", "W", "mean_score", "observed", "observed_sd", "log_e",
                 "log_M", "threshold", "alarm")
# statistics that qualify a value rather than measure calibration
_FACT_STATISTICS = ("dof", "n_bins")


def render(run: ScheduledRun) -> str:
    """The page of a :class:`~sqlcal.reporting.scheduled.ScheduledRun` (its charts when it has
    them: ``run.charts``)."""
    return _page(_report_model(run), standalone=True)


def render_monitor(run: MonitorRun) -> str:
    """The page of a ``sqlcal monitor`` run (:class:`sqlcal.monitor.monitor.MonitorRun`)."""
    return _page(_monitor_model(run), standalone=True)


def fragment(run: Any) -> str:
    """The same page as a fragment for a notebook's output (``_repr_html_``): Plotly's script
    is sent with the first fragment of the session only."""
    # a monitor run holds a detection (this module sits below sqlcal.reporting.scheduled)
    model = _monitor_model(run) if hasattr(run, "detection") else _report_model(run)
    return _page(model, standalone=False)


def safe_json(value: Any) -> Markup:
    """JSON that is safe inside an HTML ``<script>`` element: ``<``, ``>`` and ``&`` as ``\\u``
    escapes (no ``</script>`` or ``<!--`` can end or change the element), every non-ASCII
    character escaped too (U+2028 and U+2029 included); NaN and infinities as null.

    >>> str(safe_json({"g": "</script><b>\\u2028"}))
    '{"g":"\\\\u003c/script\\\\u003e\\\\u003cb\\\\u003e\\\\u2028"}'
    """
    text = json.dumps(_plain(value), ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    return Markup(text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026"))


def readable(v: Any) -> str:
    """A number as a reader reads it: thousands grouped (24,804, not 2.48e+04), four
    significant digits, a tiny one as a power of ten (2.3×10⁻⁶⁵); NULL and NaN as a dash.

    >>> [readable(v) for v in (24804.0, 0.0626418, 17.07425, 2.31e-135, 0, None, 1.5e7, True)]
    ['24,804', '0.06264', '17.07', '2.3×10⁻¹³⁵', '0', '–', '15,000,000', 'yes']
    """
    if v is None or v is pd.NA or v is pd.NaT:
        return "–"
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, (int, np.integer)):
        return f"{int(v):,}"
    if not isinstance(v, (float, np.floating)):
        return str(v)
    v = float(v)
    if not math.isfinite(v):
        return "–" if math.isnan(v) else ("∞" if v > 0 else "−∞")
    if v == 0:
        return "0"
    size = abs(v)
    if size >= 1000:
        return f"{v:,.0f}" if size >= 1e4 or v.is_integer() else f"{v:,.1f}"
    if size >= 1e-4:
        return f"{v:.4g}"
    mantissa, exponent = f"{v:.1e}".split("e")
    return f"{mantissa}×10{str(int(exponent)).translate(_SUPERSCRIPT)}"


_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


@functools.lru_cache(maxsize=1)
def plotly_bundle() -> str:
    """Plotly's script (the ``plotly`` package's ``plotly.min.js``), gzip-compressed, base64."""
    script = files("plotly").joinpath("package_data/plotly.min.js").read_bytes()
    return base64.b64encode(gzip.compress(script, compresslevel=9, mtime=0)).decode("ascii")


# -- the page ---------------------------------------------------------------------------------

_ENV = jinja2.Environment(loader=jinja2.PackageLoader("sqlcal.reporting", "templates"),
                          autoescape=True,
                          trim_blocks=True, lstrip_blocks=True)
_ENV.filters["breakable"] = lambda name: Markup("_<wbr>").join(str(name).split("_"))
_sent = False  # Plotly's script went out with a notebook fragment of this session
_pages = itertools.count()


def _page(model: dict, *, standalone: bool) -> str:
    global _sent
    template = _ENV.get_template("page.html.j2")
    static = files("sqlcal.reporting").joinpath("templates")
    send = standalone or not _sent
    text = template.render(
        page=model, data=safe_json(model.pop("data")), standalone=standalone,
        uid=f"sqlcal-{next(_pages)}", marker=Markup(HTML_MARKER),
        css=Markup(static.joinpath("page.css").read_text("utf-8")),
        script=Markup(static.joinpath("page.js").read_text("utf-8")),
        plotly=plotly_bundle() if send else "", version=__version__)
    if not standalone:
        _sent = True
    return text


def _report_model(run: ScheduledRun) -> dict:
    keys = run.keys
    table = run.table
    groups = records(table, keys)
    index = {group_id(g): i for i, g in enumerate(groups)}
    alerted = _alert_counts(run.alerts)
    # the overview's columns: each metric's statistics but its counts (a test's degrees of
    # freedom, TCE's number of bins: in the group's table), so that it fits the screen
    values = [run.own(target) for name in run.config["metrics"]
              for stat, target in METRICS[name][2].items() if stat not in _FACT_STATISTICS]
    shown_counts = [run.own(c) for c in _COUNTS if run.own(c) in table]
    columns, rows = _table(table, keys, [*shown_counts, *values],
                           [alerted.get(group_id(g), {}).get("count", 0) for g in groups],
                           [_name(g) for g in groups])
    charts = getattr(run, "charts", None) or {}
    data_groups = [{"name": _name(g)} for g in groups]
    for kind, per_group in charts.items():
        if kind == "series":
            continue
        for gid, part in per_group.items():
            if gid in index:
                data_groups[index[gid]][kind] = part
    series = charts.get("series")
    out_groups = []
    for i, group in enumerate(groups):
        gid = group_id(group)
        fired = alerted.get(gid, {"count": 0, "cells": set()})
        mine = _rows_of(run.metrics, group)
        mine = mine.drop(columns=list(group)).rename(
            columns={run.own(c): c for c in ("n", "metric", "statistic", "value", "lower",
                                             "upper", "trust")})
        metric_rows = [{"alert": (r["metric"], r["statistic"]) in fired["cells"]
                        or (r["metric"], "bounds") in fired["cells"],
                        "cells": [r["metric"], r["statistic"], _with_interval(
                            r["value"], r["lower"], r["upper"]), _facts(r["trust"])]}
                       for r in mine.to_dict("records")]
        n = table[run.own("n")].iloc[i] if run.own("n") in table else None
        tables = [{"caption": "Metrics", "id": "metrics",
                   "columns": ["metric", "statistic", "value [interval]", "facts"],
                   "rows": metric_rows}]
        segs = _segment_rows(run, group) if run.segments is not None else None
        if segs:
            tables.append(segs)
        versus = _comparison_rows(run, group) if run.comparison is not None else None
        if versus:
            tables.append(versus)
        have = data_groups[i]
        chart_list = [c for c in (
            ("reliability", "Reliability diagram: observed rate per bin with its interval, and "
                            "the weight per bin"),
            ("smooth", "Smooth reliability curve (the kernel estimate of smooth ECE)"),
            ("cumulative", "Cumulative residuals Σw(y − p)/W with ±2σ band under calibration"),
            ("tce", "TCE: each bin's predictions accepted (green) or rejected (red) by the test"),
        ) if c[0] in have]
        if series is not None and any(i in (line["g"] for line in panel["lines"])
                                      for panel in series["panels"]):
            chart_list.append(("group-series", f"Metrics per {series['time']}, with their "
                                               "intervals; ✕ where a threshold is crossed"))
        out_groups.append({"index": i, "name": _name(group), "alerts": fired["count"],
                           "summary": f"{readable(n)} rows; {fired['count']} alert"
                                      f"{'s' if fired['count'] != 1 else ''}",
                           "tables": tables, "charts": chart_list})
    overview = []
    if series is not None:
        overview = [("series", f"Metrics per {series['time']}, one line per group (the 12 "
                               "worst shown; click a legend entry to show or hide a group)")]
    order = ".".join(run.config["report"]["order_by"])
    global_segments = _segment_rows(run, None) if run.segments is not None and not keys else None
    return {
        "kind": "report", "title": run.config["report"]["title"], "status": run.status,
        "facts": _run_facts(run),
        "alerts": [{"group": _name(a["group"]), "text": f"{a['metric']}.{a['column']} = "
                    f"{readable(a['value'])} is {'above' if 'above' in a else 'below'} "
                    f"{readable(a.get('above', a.get('below')))}"} for a in run.alerts],
        "overview": overview, "columns": columns, "rows": rows, "groups": out_groups,
        "segments": global_segments,
        "note": f"Groups are ordered worst first: by the number of alerts they fire, then by "
                f"{order} (largest first; smallest first for a p-value). Click a column's "
                "heading to sort by it, a group to open its diagrams. Exit codes of sqlcal "
                "report --config: 0 within thresholds, 3 an alert fired, 2 an error.",
        "data": {"kind": "report", "groups": data_groups, "series": series},
    }


def _run_facts(run: ScheduledRun) -> list[tuple[str, str]]:
    """The run's facts as the page shows them, from its redacted configuration (a password in
    a URL is masked)."""
    cfg = run.redacted_config["source"]
    described = cfg["data"] + (f" table {cfg['table']}" if cfg.get("table") else "")
    return [("status", f"{run.status.upper()} ({len(run.alerts)} alert"
                       f"{'s' if len(run.alerts) != 1 else ''})"),
            ("run id", run.run_id), ("run at", run.run_at.isoformat() + "Z"),
            ("config hash", run.config_hash), ("source", described),
            ("columns", f"score={cfg['score']}, label={cfg['label']}, "
                        f"weight={cfg.get('weight')}, by={cfg['by']}"),
            ("filter", str(cfg.get("where") or "none")), ("sqlcal", __version__)]


def _run_section(run: ScheduledRun) -> str:
    """The page's table of the run's facts (:func:`_run_facts`), escaped."""
    return _ENV.get_template("facts.html.j2").render(page={"facts": _run_facts(run)})


def _monitor_model(run: MonitorRun) -> dict:
    detection = run.detection
    path = detection.path
    mature = path[path["stream"] == "mature"]
    keys = [k for k in mature.columns if k not in _PATH_COLUMNS]
    c = float(detection.threshold)
    parts = mature.groupby(keys, sort=True, dropna=False) if keys else [((), mature)]
    alarms = detection.alarms
    found = []
    for key, part in parts:
        key = key if isinstance(key, tuple) else (key,)
        group = dict(zip(keys, key))
        mine = _rows_of(alarms, group) if len(alarms) else alarms
        mine = mine[mine["stream"] == "mature"] if len(mine) else mine
        alarm = mine.iloc[0] if len(mine) else None
        found.append((group, part.sort_values("day"), alarm))
    # worst first: alarmed groups, then the highest evidence
    found.sort(key=lambda g: (g[2] is None, -float(np.nan_to_num(g[1]["log_M"].max(),
                                                                   neginf=-1e300))))
    windows = run.windows if run.windows is not None and len(run.windows) else None
    first_window = None
    if windows is not None:
        first_window = next(w for w in windows["window"].unique() if ":" not in w)
    alerted = {}
    for a in run.alerts or []:
        gid = group_id({k: a[k] for k in keys})
        alerted[gid] = alerted.get(gid, 0) + 1
    table_rows, data_groups, out_groups = [], [], []
    for i, (group, part, alarm) in enumerate(found):
        gid = group_id(group)
        name = _name(group)
        # the page's columns beside keys of the same names (shown_name)
        own = functools.partial(shown_name, users=keys)
        row = {**group, own("status"): "ALARM" if alarm is not None else "ok",
               own("window alerts"): alerted.get(gid, 0),
               own("change day"): _day(alarm["change_day"]) if alarm is not None else None,
               own("alarm day"): _day(alarm["alarm_day"]) if alarm is not None else None,
               own("max log M"): float(part["log_M"].max()), own("last log M"):
               float(part["log_M"].iloc[-1]), own("rows"): int(part["n"].sum())}
        bounds = {}
        if windows is not None:
            now = _rows_of(windows[windows["window"] == first_window], group)
            for r in now.to_dict("records"):
                label = own(f"{first_window} {r['statistic']}")
                row[label] = r["value"]
                bounds[label] = (r["lower"], r["upper"])
        table_rows.append((row, bounds))
        g = {"name": name, "evidence": {
            "day": [_day(d) for d in part["day"]], "log_M": _floats(part["log_M"]),
            "log_e": _floats(part["log_e"]), "n": part["n"].astype(int).tolist()}}
        if "observed" in part:  # the day's mean score and observed rate (the detector's sums)
            g["daily"] = {"p": _floats(part["mean_score"]), "y": _floats(part["observed"]),
                          "sd": _floats(part["observed_sd"])}
        if alarm is not None:
            g["alarm"] = {"alarm_day": _day(alarm["alarm_day"]),
                          "change_day": _day(alarm["change_day"]),
                          "log_M": float(alarm["log_M_at_alarm"])}
        diagrams = detection.info.get("reliability", {}).get(tuple(group.values()))
        if diagrams:
            g["prepost"] = {side: {"x": _floats(f["mean_score"]), "y": _floats(f["observed"]),
                                   "W": _floats(f["W"])} for side, f in diagrams.items()}
            if alarm is not None:
                g["prepost"]["windows"] = {
                    "pre": f"{_day(alarm['pre_start'])} .. {_day(alarm['pre_end'])}",
                    "post": f"{_day(alarm['post_start'])} .. {_day(alarm['post_end'])}"}
        if run.maturity is not None and len(run.maturity):
            curve = _rows_of(run.maturity, {k: v for k, v in group.items()
                                            if k in run.maturity})
            if len(curve):
                g["maturity"] = {"delay": _floats(curve["delay"]),
                                 "F": _floats(curve["F_hat"]), "lo": _floats(curve["F_lower"]),
                                 "hi": _floats(curve["F_upper"])}
        data_groups.append(g)
        tables = []
        if alarm is not None:
            facts = {k: alarm[k] for k in ("alarm_day", "change_day", "log_M_at_alarm", "mcb",
                                           "intercept", "slope", "shape", "kind") if k in alarm}
            tables.append({"caption": "The alarm and the change in log score", "id": "alarm",
                           "columns": list(facts),
                           "rows": [{"alert": True, "cells": [
                               _day(v) if "day" in k else _cell(v) for k, v in facts.items()]}]})
        if windows is not None:
            mine = _rows_of(windows, group)
            tables.append({"caption": "Windows merged from the summary store", "id": "windows",
                           "columns": ["window", "start", "end", "n", "metric", "statistic",
                                       "value [interval]"],
                           "rows": [{"alert": False, "cells": [
                               r["window"], _day(r["start"]), _day(r["end"]), readable(r["n"]),
                               r["metric"], r["statistic"],
                               _with_interval(r["value"], r["lower"], r["upper"])]}
                               for r in mine.to_dict("records")]})
        chart_list = [("evidence", "Detector evidence log M per day against its threshold "
                                   "(change day and alarm marked)")]
        if "daily" in g:
            chart_list.append(("daily", "Per day: observed rate (±2σ were the day calibrated) "
                                        "against the mean score; the alarm and the change day "
                                        "marked"))
        if "prepost" in g:
            chart_list.append(("prepost", "Reliability before the change and since, with the "
                                          "weight per bin"))
        if "maturity" in g:
            chart_list.append(("maturity", "Label maturity: share of the eventual positives "
                                           "known a days after the prediction"))
        out_groups.append({"index": i, "name": name, "alerts": int(alarm is not None)
                           + alerted.get(gid, 0),
                           "summary": f"{readable(int(part['n'].sum()))} rows over "
                                      f"{len(part)} days; "
                                      + ("alarm" if alarm is not None else "no alarm"),
                           "tables": tables, "charts": chart_list})
    frame = pd.DataFrame([r for r, _ in table_rows])
    intervals = {label: b for _, bs in table_rows for label, b in bs.items()}
    columns, rows = _table(frame, keys, [c for c in frame.columns if c not in keys],
                           [g["alerts"] for g in out_groups], [g["name"] for g in out_groups],
                           intervals=[b for _, b in table_rows] if intervals else None)
    doc_alarms = len(run.alarms)
    guarantee = (f"P(any false alarm within {detection.info['checks']} daily checks) ≤ "
                 f"{detection.info['alpha']} per group, if the labels of a day are independent "
                 "given their scores")
    return {
        "kind": "monitor", "title": "Calibration monitor", "status": run.status,
        "facts": [("status", f"{run.status.upper()} ({doc_alarms} alarm"
                             f"{'s' if doc_alarms != 1 else ''}, {len(run.alerts or [])} window "
                             "alerts)"),
                  ("checked at", str(run.at or "now")),
                  ("threshold", f"log c = ln(checks/alpha) = {c:.2f}"),
                  ("guarantee", guarantee), ("sqlcal", __version__)],
        "alerts": [{"group": _name({k: a[k] for k in keys}),
                    "text": f"{a['window']} {a['metric']}.{a['column']} = "
                            f"{readable(a['value'])} is {a['rule']} {readable(a['threshold'])}"}
                   for a in run.alerts or []]
        + [{"group": g["name"], "text": f"detector alarm: changed on about "
                                        f"{g['alarm']['change_day']}, seen "
                                        f"{g['alarm']['alarm_day']}"}
           for g in data_groups if "alarm" in g],
        "overview": [("evidence-all", "Detector evidence log M per day, one line per group (the "
                                      "12 worst shown; click a legend entry to show or hide a "
                                      "group)")],
        "columns": columns, "rows": rows, "groups": out_groups, "segments": None,
        "note": "Groups are ordered worst first: alarmed groups, then by their largest "
                "evidence. Click a column's heading to sort by it, a group to open its "
                "diagrams. Exit codes of sqlcal monitor: 0 no alarm, 3 an alarm or a window "
                "alert, 2 an error.",
        "data": {"kind": "monitor", "threshold": c, "groups": data_groups},
    }


# -- the charts' data -------------------------------------------------------------------------


def report_charts(run: ScheduledRun, step) -> dict:
    """The charts of a scheduled run's page, from its source's summaries (cached by the
    metrics: the reliability bins and the score cells of every group come in one pass each):
    ``{kind: {group id: data}}`` for ``reliability`` and ``cumulative`` always, ``smooth`` with
    smooth_ece among the metrics and ``tce`` with tce, and ``series`` (all groups) with a time
    key."""
    from sqlcal.metrics.binned import reliability
    from sqlcal.metrics.cells import cells_summary
    from sqlcal.metrics.smooth import smooth_reliability
    from sqlcal.metrics.tce import tce_bins
    from sqlcal.plots import cumulative_curve

    src, metrics = run.source, run.config["metrics"]
    out: dict = {}
    from sqlcal.metrics.scores import totals_summary
    from sqlcal.plots import LOW_BASE_RATE

    # a low base rate (clicks, conversions) puts nearly every row in the first equal-width
    # bin: bins of equal width in log-odds then, drawn on log axes (the totals are cached)
    totals = totals_summary(src)
    low = float(totals["swy"].sum() / totals["W"].sum()) < LOW_BASE_RATE
    with step("page: reliability bins"):
        table = src.group_keys.internal(reliability(
            src, bins=run.config["report"]["bins"], **({"strategy": "logit"} if low else {})))
        out["reliability"] = {gid: {"log": low,
            "x": _floats(p["mean_score"]), "y": _floats(p["observed"]),
            "lo": _floats(p["ci_lower"]), "hi": _floats(p["ci_upper"]), "W": _floats(p["W"]),
            "bin_lower": _floats(p["bin_lower"]), "bin_upper": _floats(p["bin_upper"])}
            for gid, p in _split(src, table)}
    with step("page: cumulative residuals"):
        cells = cells_summary(src, ("residuals",), 1024).sort_values([*src.by, "cell"])
        out["cumulative"] = {}
        for gid, p in _split(src, cells):
            curve = _thin(cumulative_curve(p))
            out["cumulative"][gid] = {k: _floats(curve[c]) for k, c in (
                ("x", "weight_share"), ("score", "score"), ("s", "s"), ("lo", "s_low"),
                ("hi", "s_high"), ("sd", "null_sd"))}
    if "smooth_ece" in metrics:
        with step("page: smooth reliability"):
            sigma = metrics["smooth_ece"].get("sigma")
            curve = src.group_keys.internal(smooth_reliability(src, sigma=sigma))
            out["smooth"] = {gid: {"t": _floats(p["t"]), "y": _floats(p["observed"]),
                                   "density": _floats(p["density"])}
                             for gid, p in ((gid, _thin(p)) for gid, p in
                                            _split(src, curve.sort_values([*src.by, "t"])))}
    if "tce" in metrics:
        with step("page: TCE bins"):
            bins = src.group_keys.internal(tce_bins(src, **{
                k: v for k, v in metrics["tce"].items() if k != "confidence"}))
            out["tce"] = {gid: {
                "lo": _floats(p["score_min"]), "hi": _floats(p["score_max"]),
                "rate": _floats(p["rate"]), "W": _floats(p["W"]),
                "rejected": _floats(p["rejected"]),
                "accepted": [[[_float(a), _float(b)] for a, b in acc] for acc in p["accepted"]]}
                for gid, p in _split(src, bins)}
    if run.series is not None and len(run.series):
        out["series"] = series_data(run)
    return out


def series_data(run: ScheduledRun) -> dict:
    """The metric series as the page draws it: a panel per (metric, statistic), a line per
    group (its index in the run's table), and the thresholds of the alert rules on it."""
    keys, time = run.keys, run.config["time"]["key"]
    index = {group_id(g): i for i, g in enumerate(records(run.table, keys))}
    series = run.series
    own = run.series_source.group_keys.own if run.series_source is not None else run.own
    # one time axis for every line: a line's values are aligned on it (null where the group
    # has no row that day)
    times = sorted(series[time].dropna().unique().tolist())
    at = {t: i for i, t in enumerate(times)}
    panels = []
    for (metric, statistic), part in series.groupby([own("metric"), own("statistic")],
                                                    sort=False):
        rules = [{"side": side, "value": float(r[side])} for r in run.config["alerts"]
                 if r["metric"] == metric and r.get("column", statistic) in (
                     statistic, METRICS[metric][2].get(statistic)) for side in ("above", "below")
                 if side in r]
        lines = []
        groups = part.groupby(keys, sort=False, dropna=False) if keys else [((), part)]
        for key, line in groups:
            key = key if isinstance(key, tuple) else (key,)
            gid = group_id(dict(zip(keys, key)))
            if gid not in index:
                continue
            where = [at[t] for t in line[time] if t in at]
            line = line[line[time].isin(at)]
            drawn = {"g": index[gid]}
            for name, column in (("v", "value"), ("lo", "lower"), ("hi", "upper")):
                values = np.full(len(times), np.nan)
                values[where] = line[own(column)].to_numpy(float)
                if name == "v" or np.isfinite(values).any():
                    drawn[name] = _floats(values)
            lines.append(drawn)
        lines.sort(key=lambda x: x["g"])
        panels.append({"label": metric if statistic == metric else f"{metric}: {statistic}",
                       "rules": rules, "lines": lines})
    return {"time": time, "times": [str(key_value(t)) for t in times], "panels": panels}


# -- helpers ----------------------------------------------------------------------------------


def _table(frame: pd.DataFrame, keys: Sequence[str], values: Sequence[str],
           alerts: Sequence[int], names: Sequence[str], intervals=None) -> tuple[list, list]:
    """The overview table: a column per key, then alerts, then each value with its interval
    beside it (a ``<stem>_lower``/``<stem>_upper``, ``lower_<x>``/``upper_<x>`` or
    ``ci_lower``/``ci_upper`` pair of columns, shown after the value they bound)."""
    pairs = _interval_pairs(list(frame.columns), keys)
    bound = {c for pair in pairs.values() for c in pair}
    shown = [c for c in values if c in frame and c not in bound]
    # without keys the one group is "all rows", named in a column of its own (it opens it)
    columns = [{"name": k, "key": True} for k in keys or ["group"]] + \
        [{"name": "alerts", "key": False}] + \
        [{"name": c + (" [interval]" if c in pairs else ""), "key": False} for c in shown]
    rows = []
    for i, row in enumerate(frame.to_dict("records")):
        cells = [{"text": _key_cell(row[k]), "sort": _key_cell(row[k])} for k in keys] or \
            [{"text": names[i], "sort": names[i]}]
        cells.append({"text": str(alerts[i]), "sort": alerts[i]})
        for c in shown:
            lo, hi = (row[pairs[c][0]], row[pairs[c][1]]) if c in pairs else \
                intervals[i].get(c, (None, None)) if intervals else (None, None)
            cells.append({**_with_interval(row[c], lo, hi), "sort": _sortable(row[c])})
        rows.append({"index": i, "name": names[i], "alerts": alerts[i], "cells": cells})
    return columns, rows


def _interval_pairs(columns: list[str], keys: Sequence[str]) -> dict[str, tuple[str, str]]:
    """value column -> (lower, upper) column, found by name: ``x_lower``/``x_upper`` bound
    ``x`` (or, when there is no ``x``, the value column just before them: ``cutoff_error``
    before ``cutoff_lower``), ``lower_bound``/``upper_bound`` and ``ci_lower``/``ci_upper``
    the value column before them."""
    out = {}
    taken: set[str] = set()
    for j, lower in enumerate(columns):
        if lower.endswith("_lower"):
            stem, upper = lower[:-6], lower[:-6] + "_upper"
        elif lower.startswith("lower_"):
            stem, upper = None, "upper_" + lower[6:]
        else:
            continue
        if upper not in columns:
            continue
        if stem and stem in columns and stem not in taken:
            value = stem
        else:
            before = [c for c in columns[:j] if c not in keys and c not in _COUNTS
                      and c not in taken and not c.endswith(("_lower", "_upper"))
                      and not c.startswith(("lower_", "upper_"))]
            if not before:
                continue
            value = before[-1]
        out[value] = (lower, upper)
        taken |= {lower, upper}
    return out


def _with_interval(value, lower, upper) -> dict:
    shown = {"text": readable(value)}
    if _finite(lower) or _finite(upper):
        shown["interval"] = f"[{readable(lower)}, {readable(upper)}]"
    return shown


def _segment_rows(run: ScheduledRun, group: dict | None) -> dict | None:
    """A group's significantly miscalibrated segments (:func:`sqlcal.segments` in the run): the
    segment's condition, its size, its excess (calibration in the large inside it) and its
    test; None when there are none."""
    frame = run.segments
    users = {*run.keys, *run.config["segments"]["features"]}
    name = {c: shown_name(c, users) for c in ("significant", "segment", "n", "citl", "harm",
                                               "z", "q_value", "logit_shift", "explained_by")}
    rows = frame[frame[name["significant"]].fillna(False).astype(bool)]
    if group:
        rows = _rows_of(rows, group)
    if not len(rows):
        return None
    columns = [c for c in ("segment", "n", "citl", "harm", "z", "q_value", "logit_shift",
                           "explained_by") if name[c] in rows]
    return {"caption": "Miscalibrated segments (citl: the excess mean(p) − mean(y) inside the "
                       "segment)", "id": "segments", "columns": columns,
            "rows": [{"alert": True, "cells": [
                {"text": r[name[c]], "code": True} if c == "segment" else _cell(r[name[c]])
                for c in columns]} for r in rows.to_dict("records")]}


def _comparison_rows(run: ScheduledRun, group: dict) -> dict | None:
    """A group's comparison with the baseline (:func:`sqlcal.compare` in the run): per metric
    the model's value, the baseline's, their difference with its interval, the p-value and the
    design; a row is marked when the model is significantly worse (difference > 0 at the
    comparison's confidence). None when the group has no row."""
    frame = run.comparison
    users = set(run.keys)
    name = {c: shown_name(c, users) for c in ("metric", "value", "baseline_value", "difference",
                                               "ci_lower", "ci_upper", "p_value", "design",
                                               "confidence")}
    rows = _rows_of(frame, group) if group else frame
    if not len(rows):
        return None
    out = []
    for r in rows.to_dict("records"):
        alpha = 1 - float(r[name["confidence"]])
        worse = (_finite(r[name["p_value"]]) and r[name["p_value"]] < alpha
                 and _finite(r[name["difference"]]) and r[name["difference"]] > 0)
        out.append({"alert": bool(worse), "cells": [
            r[name["metric"]], _cell(r[name["value"]]), _cell(r[name["baseline_value"]]),
            _with_interval(r[name["difference"]], r[name["ci_lower"]], r[name["ci_upper"]]),
            _cell(r[name["p_value"]]), r[name["design"]]]})
    return {"caption": "Against the baseline (difference = model − baseline: negative is "
                       "better; marked: significantly worse)", "id": "comparison",
            "columns": ["metric", "model", "baseline", "difference [interval]", "p-value",
                        "design"], "rows": out}


def _split(src, frame: pd.DataFrame):
    """(group id, the group's rows) of a frame with internal key columns, in frame order."""
    if not src.by:
        yield group_id({}), frame
        return
    ids = [group_id(r) for r in records(src.present(frame[list(src.by)]), src.key_names)]
    for gid, rows in pd.Series(range(len(frame))).groupby(ids, sort=False):
        yield gid, frame.iloc[rows.to_numpy()]


def _rows_of(frame: pd.DataFrame, group: dict) -> pd.DataFrame:
    """The rows of a presented frame holding one group (NULL matches NULL only, NaN NaN)."""
    if not group:
        return frame
    want = group_id(group)
    mask = [group_id(r) == want for r in records(frame, list(group))]
    return frame[np.asarray(mask, dtype=bool)]


def _thin(frame: pd.DataFrame) -> pd.DataFrame:
    if len(frame) <= CURVE_POINTS:
        return frame
    keep = np.unique(np.linspace(0, len(frame) - 1, CURVE_POINTS).round().astype(int))
    return frame.iloc[keep]


def _alert_counts(alerts: list[dict]) -> dict:
    out: dict = {}
    bounds = {"lower_bound", "upper_bound", "ci_lower", "ci_upper"}
    for a in alerts:
        entry = out.setdefault(group_id(a["group"]), {"count": 0, "cells": set()})
        entry["count"] += 1
        entry["cells"].add((a["metric"], "bounds" if a["column"] in bounds else a["column"]))
    return out


def _facts(trust: str) -> str:
    try:
        facts = json.loads(trust)
    except (TypeError, ValueError):
        return ""
    return ", ".join(f"{k}: {readable(v) if isinstance(v, float) else v}"
                     for k, v in facts.items())


def _name(group: dict) -> str:
    return ", ".join(f"{k} = {_key_cell(v)}" for k, v in group.items()) or "all rows"


def _key_cell(v) -> str:
    shown = key_value(v)
    return "NULL" if shown is None else str(shown)


def _cell(v) -> dict:
    return {"text": readable(v) if not isinstance(v, str) else v}


def _day(v) -> str | None:
    if v is None or v is pd.NaT or (isinstance(v, float) and math.isnan(v)):
        return None
    return str(pd.Timestamp(v).date())


def _sortable(v):
    return float(v) if _finite(v) else None


def _finite(v) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(
        v, (bool, np.bool_)) and math.isfinite(float(v))


def _float(v) -> float | None:
    return float(f"{float(v):.{DIGITS}g}") if _finite(v) else None


def _floats(values) -> list:
    return [_float(v) for v in np.asarray(values, dtype=float)]


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, (np.bool_,)):
        return bool(value)
    return value
