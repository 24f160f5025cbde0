"""A scheduled report as one self-contained HTML page: tables and diagrams inline (PNG as data
URIs), no script, no external asset, so it opens offline and survives being mailed or archived.

Sections: the run, the alerts, a summary table of the groups worst first, the metrics over time
(when the configuration has a time key), then one section per group, worst first.
"""

from __future__ import annotations

import base64
import io
import json
import math
from html import escape
from typing import TYPE_CHECKING, Any

import pandas as pd

from sqlcal._version import __version__
from sqlcal.inputs.groupkeys import group_id, key_value, records, shown_name
from sqlcal.outputs import HTML_MARKER

if TYPE_CHECKING:  # annotations only: sqlcal.reporting.scheduled renders its runs with this module
    from sqlcal.reporting.scheduled import ScheduledRun

_CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
h1 { margin-bottom: .2em; } h2 { border-bottom: 1px solid #ddd; padding-bottom: .2em; }
table { border-collapse: collapse; margin: .6em 0; font-variant-numeric: tabular-nums; }
th, td { border: 1px solid #ddd; padding: .25em .6em; text-align: right; }
th { background: #f4f4f4; } td.key, th.key { text-align: left; }
.status-ok { color: #17692b; } .status-alert { color: #b3261e; }
tr.alert td, td.alert { background: #fde7e4; }
figure { display: inline-block; margin: .5em 1em .5em 0; vertical-align: top; }
figure img { max-width: 100%; border: 1px solid #eee; }
.wide { overflow-x: auto; } .meta td, .meta th { text-align: left; }
.note { color: #666; font-size: 90%; }
"""


def render(run: ScheduledRun) -> str:
    """The page for a :class:`~sqlcal.reporting.scheduled.ScheduledRun` (diagrams drawn if it has them)."""
    keys = run.keys
    alerted = _alert_counts(run)
    title = run.config["report"]["title"]
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        HTML_MARKER,  # the mark by which sqlcal knows the file is its own output
        f"<title>{escape(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        _run_section(run),
        _alerts_section(run),
        _summary_section(run, alerted),
    ]
    if run.series is not None:
        parts.append(_series_section(run))
    if run.segments is not None:
        parts.append(_segments_section(run))
    for i, group in enumerate(records(run.table, keys)):
        parts.append(_group_section(run, i, group, alerted))
    parts.append(
        '<p class="note">Groups are ordered worst first: by the number of alerts they fire, then '
        f"by {escape('.'.join(run.config['report']['order_by']))} (largest first; smallest first "
        "for a p-value). Exit codes of <code>sqlcal report --config</code>: 0 within thresholds, "
        "3 an alert fired, 2 an error.</p>")
    parts.append("</body></html>")
    return "\n".join(parts)


def png(fig, dpi: int = 96) -> bytes:
    """A matplotlib Figure as PNG bytes; the figure is closed."""
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return buffer.getvalue()


def _run_section(run: ScheduledRun) -> str:
    cfg = run.redacted_config["source"]
    described = cfg["data"] + (f" table {cfg['table']}" if cfg.get("table") else "")
    rows = [
        ("status", f'<strong class="status-{run.status}">{run.status.upper()}</strong> '
                   f"({len(run.alerts)} alert{'s' if len(run.alerts) != 1 else ''})"),
        ("run id", escape(run.run_id)),
        ("run at", escape(run.run_at.isoformat() + "Z")),
        ("config hash", f"<code>{escape(run.config_hash)}</code>"),
        ("source", escape(described)),
        ("columns", escape(f"score={cfg['score']}, label={cfg['label']}, "
                           f"weight={cfg.get('weight')}, by={cfg['by']}")),
        ("filter", escape(str(cfg.get("where") or "none"))),
        ("sqlcal", escape(__version__)),
    ]
    body = "".join(f'<tr><th>{k}</th><td>{v}</td></tr>' for k, v in rows)
    return f'<section id="run"><table class="meta">{body}</table></section>'


def _alerts_section(run: ScheduledRun) -> str:
    if not run.alerts:
        return ('<section id="alerts"><h2>Alerts</h2>'
                '<p class="status-ok">No threshold crossed.</p></section>')
    head = ("<tr><th class=key>group</th><th class=key>metric</th><th class=key>column</th>"
            "<th>value</th><th>threshold</th></tr>")
    rows = []
    for a in run.alerts:
        side = "above" if "above" in a else "below"
        rows.append(
            f'<tr class="alert"><td class=key>{escape(_group_name(a["group"]))}</td>'
            f"<td class=key>{escape(a['metric'])}</td><td class=key>{escape(a['column'])}</td>"
            f"<td>{_number(a['value'])}</td><td>{side} {_number(a[side])}</td></tr>")
    return (f'<section id="alerts"><h2>Alerts ({len(run.alerts)})</h2>'
            f"<table>{head}{''.join(rows)}</table></section>")


def _summary_section(run: ScheduledRun, alerted: dict) -> str:
    keys = run.keys
    table = run.table
    head = "".join(f"<th class=key>{escape(c)}</th>" if c in keys else f"<th>{escape(c)}</th>"
                   for c in ["alerts", *table.columns])
    rows = []
    for i, ((_, row), group) in enumerate(zip(table.iterrows(), records(table, keys))):
        count = alerted.get(group_id(group), {}).get("count", 0)
        cells = [f'<td><a href="#group-{i}">{count}</a></td>']
        for c in table.columns:
            cls = "key" if c in keys else ""
            shown = _key_cell(group[c]) if c in keys else _cell(row[c])
            cells.append(f'<td class="{cls}">{escape(shown)}</td>')
        rows.append(f'<tr class="{"alert" if count else ""}">{"".join(cells)}</tr>')
    return (f'<section id="summary"><h2>Groups, worst first</h2><div class="wide"><table>'
            f"<tr>{head}</tr>{''.join(rows)}</table></div></section>")


def _segments_section(run: ScheduledRun) -> str:
    """The significant miscalibrated segments (sqlcal.segments), and what was searched."""
    frame = run.segments
    keys = run.keys
    # sqlcal's columns beside keys and features of the same names (sqlcal.segments)
    users = {*keys, *run.config["segments"]["features"]}
    name = {c: shown_name(c, users) for c in ("significant", "segment", "n", "citl", "harm", "z",
                                               "q_value", "logit_shift", "explained_by",
                                               "family_size", "tested", "statements",
                                               "branches")}
    shown = frame[frame[name["significant"]].fillna(False).astype(bool)]
    columns = [*keys, *(name[c] for c in ("segment", "n", "citl", "harm", "z", "q_value",
                                          "logit_shift", "explained_by"))]
    head = "".join(f"<th>{escape(c)}</th>" for c in columns)
    rows = "".join("<tr>" + "".join(f"<td>{escape(_cell(r[c]))}</td>" for c in columns)
                   + "</tr>" for _, r in shown.iterrows())
    first = frame.iloc[0] if len(frame) else None
    searched = ("" if first is None else
                f'<p class="note">{int(first[name["family_size"]])} eligible segments, '
                f'{int(first[name["tested"]])} tested, {int(first[name["statements"]])} engine '
                f'statements ({int(first[name["branches"]])} GROUP BYs).</p>')
    body = (f'<div class="wide"><table><tr>{head}</tr>{rows}</table></div>' if len(shown) else
            '<p class="note">No significantly miscalibrated segment.</p>')
    return f'<section id="segments"><h2>Miscalibrated segments</h2>{body}{searched}</section>'


def _series_section(run: ScheduledRun) -> str:
    time = run.config["time"]["key"]
    image = run.figures.get("series")
    figure = (_figure(image, f"metrics per {time}", "series") if image else
              '<p class="note">Chart not drawn (diagrams off).</p>')
    return f'<section id="series"><h2>Over {escape(time)}</h2>{figure}</section>'


def _group_section(run: ScheduledRun, i: int, group: dict, alerted: dict) -> str:
    name = _group_name(group)
    fired = alerted.get(group_id(group), {"count": 0, "cells": set()})
    metrics = run.metrics
    for k, v in group.items():
        metrics = metrics[_equal(metrics[k], v)]
    # the group's rows, sqlcal's columns under their own names (a key may have taken one)
    metrics = metrics.drop(columns=list(group)).rename(columns={run.own(c): c for c in (
        "n", "metric", "statistic", "value", "lower", "upper")})
    head = ("<tr><th class=key>metric</th><th class=key>statistic</th><th>value</th>"
            "<th>lower</th><th>upper</th></tr>")
    rows = []
    for _, r in metrics.iterrows():
        bad = (r["metric"], r["statistic"]) in fired["cells"] or \
              (r["metric"], "bounds") in fired["cells"]
        rows.append(f'<tr class="{"alert" if bad else ""}"><td class=key>{escape(r["metric"])}'
                    f'</td><td class=key>{escape(r["statistic"])}</td><td>{_number(r["value"])}'
                    f'</td><td>{_number(r["lower"])}</td><td>{_number(r["upper"])}</td></tr>')
    images = run.figures.get(group_id(group), {})
    figures = "".join(_figure(images[kind], f"{label}: {name}", kind)
                      for kind, label in (("reliability", "Reliability diagram"),
                                          ("cumulative", "Cumulative residuals"))
                      if kind in images)
    n = int(metrics["n"].iloc[0]) if len(metrics) else 0
    return (f'<section class="group" id="group-{i}" data-alerts="{fired["count"]}">'
            f"<h2>{escape(name)}</h2><p>{n} rows; {fired['count']} alert"
            f"{'s' if fired['count'] != 1 else ''}</p><table>{head}{''.join(rows)}</table>"
            f"{figures}</section>")


def _figure(image: bytes, caption: str, kind: str) -> str:
    data = base64.b64encode(image).decode("ascii")
    return (f'<figure class="{kind}"><img alt="{escape(caption)}" '
            f'src="data:image/png;base64,{data}"><figcaption>{escape(caption)}</figcaption>'
            "</figure>")


def _alert_counts(run: ScheduledRun) -> dict:
    out: dict = {}
    bounds = {"lower_bound", "upper_bound", "ci_lower", "ci_upper"}
    for a in run.alerts:
        entry = out.setdefault(group_id(a["group"]), {"count": 0, "cells": set()})
        entry["count"] += 1
        entry["cells"].add((a["metric"], "bounds" if a["column"] in bounds else a["column"]))
    return out


def _equal(column: pd.Series, value: Any) -> pd.Series:
    """The rows of a key column holding ``value`` (NULL matches NULL only, NaN NaN only)."""
    want = json.dumps(key_value(value))
    return column.map(lambda v: json.dumps(key_value(v)) == want).astype(bool)


def _group_name(group: dict) -> str:
    return ", ".join(f"{k} = {_key_cell(v)}" for k, v in group.items()) or "all rows"


def _key_cell(v) -> str:
    """A key's value as shown: NULL and NaN by name."""
    shown = key_value(v)
    return "NULL" if shown is None else str(shown)


def _number(v) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "&ndash;"
    return f"{v:.4g}"


def _cell(v) -> str:
    if isinstance(v, float):
        return "–" if not math.isfinite(v) else f"{v:.4g}"
    return str(v)
