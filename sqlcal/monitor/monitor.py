"""``sqlcal monitor``: the change detector of ``[detect]`` on the summary store of ``[snapshot]``,
with its alarms, a JSON document and an offline HTML page (the detector's path against its
threshold, per group).

Examples
--------
>>> check_detect({"alpha": 0.01})["checks"]
365
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from sqlcal._version import __version__
from sqlcal.errors import InvalidInputError
from sqlcal.monitor import detect as _detect
from sqlcal.monitor import maturity as _maturity
from sqlcal.monitor.config import ConfigError, check_renamed
from sqlcal.options import OptionError

#: ``[detect]`` keys: type, default
DETECT = {
    "kind": (str, "binned"), "bins": (int, 8), "bet_windows": (list, list(_detect.WINDOWS)),
    "tolerance": (dict, {"absolute": 0.0, "relative": 0.10}), "alpha": (float, 0.05),
    "checks": (int, 365), "lag": (str, "mature"), "reference": (str, None),
    "reference_days": (int, 28), "null": (str, "calibrated"),
}


@dataclass
class MonitorRun:
    """What :func:`run` returns: the detection, the check date and the exit status."""

    detection: _detect.Detection
    at: Any
    status: str
    windows: pd.DataFrame | None = None
    alerts: list | None = None
    maturity: pd.DataFrame | None = None

    @property
    def alarms(self) -> pd.DataFrame:
        return self.detection.alarms


def check_detect(block: dict | None, *, where: str = "config") -> dict:
    """``[detect]`` with defaults filled in; a :class:`ConfigError` naming the key."""
    block = dict(block or {})
    check_renamed({"detect": block}, where=where)
    extra = sorted(set(block) - set(DETECT))
    if extra:
        raise ConfigError(f"{where}: [detect] has unknown keys {extra}; expected some of "
                          f"{list(DETECT)}")
    out = {}
    for key, (kind, default) in DETECT.items():
        value = block.get(key, default)
        ok = value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)
                               if kind is float else isinstance(value, kind)
                               and not isinstance(value, bool))
        if not ok:
            raise ConfigError(f"{where}: [detect] {key} = {value!r} has the wrong type")
        out[key] = value
    for key, allowed in (("kind", ("binned", "citl")), ("null", ("calibrated", "reference"))):
        if out[key] not in allowed:
            raise ConfigError(f"{where}: [detect] {key} must be one of {list(allowed)}, not "
                              f"{out[key]!r} (the others are not built yet)")
    if not (out["lag"] == "mature" or (out["lag"].startswith("lag:")
                                         and out["lag"].endswith("d"))):
        raise ConfigError(f"{where}: [detect] lag must be \"mature\" or \"lag:<a>d\" (an "
                          f"early stream besides the mature one), not {out['lag']!r}")
    tol = out["tolerance"]
    if set(tol) - {"absolute", "relative"}:
        raise ConfigError(f"{where}: [detect] tolerance takes absolute and relative, not "
                          f"{sorted(tol)}")
    values = (tol.get("absolute", 0.0), tol.get("relative", 0.0))
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and np.isfinite(v)
               and v >= 0 for v in values):
        raise ConfigError(f"{where}: [detect] tolerance absolute and relative must be finite "
                          f"numbers >= 0, not {tol!r}")
    out["tolerance"] = tuple(float(v) for v in values)
    if out["reference"] is not None:
        parts = out["reference"].split("..")
        if len(parts) != 2:
            raise ConfigError(f"{where}: [detect] reference must look like "
                              f"'2026-08-01..2026-08-31', not {out['reference']!r}")
        out["reference"] = tuple(parts)
    if out["kind"] == "citl":
        out["bins"] = 1
    return out


def run(config: dict, *, at: Any = None) -> MonitorRun:
    """Run the detector a checked ``monitor.toml`` describes (:func:`sqlcal.monitor.config.load`).
    """
    d = check_detect(config.get("detect"))
    snap, labels = config["snapshot"], config["labels"]
    found = _detect.detect(snap["store"], prefix=snap["prefix"], bins=d["bins"],
                           tolerance=d["tolerance"], alpha=float(d["alpha"]),
                           checks=d["checks"], windows=tuple(d["bet_windows"]),
                           reference=d["reference"], reference_days=d["reference_days"],
                           horizon=labels["horizon"], settle=labels["settle"], at=at,
                           lag=None if d["lag"] == "mature" else d["lag"], null=d["null"])
    try:  # the maturity curve, when the snapshot stored the labels' arrival times
        curve = _maturity.maturity(snap["store"], prefix=snap["prefix"], bins=1,
                                   horizon=labels["horizon"], settle=labels["settle"], at=at)
        curve = curve[curve["score_bin"] == -1].drop(columns=["score_bin"])
    except (OptionError, InvalidInputError):
        curve = None
    return MonitorRun(detection=found, at=at, status="alert" if len(found.alarms) else "ok",
                      maturity=curve)


def lines(result: MonitorRun) -> list[str]:
    """One line per alarm, as ``sqlcal monitor`` prints them."""
    out = []
    for a in result.alerts or []:
        keys = ", ".join(f"{k}={v}" for k, v in a.items() if k not in (
            "window", "metric", "column", "value", "rule", "threshold"))
        out.append(f"ALERT {keys or 'all rows'}: {a['window']} {a['metric']}.{a['column']} = "
                   f"{a['value']:.4g} is {a['rule']} {a['threshold']}")
    for row in result.alarms.to_dict("records"):
        keys = ", ".join(f"{k}={row[k]}" for k in result.alarms.columns[
            :list(result.alarms.columns).index("alarm_day")])
        if row["stream"] != "mature":
            out.append(f"ALARM {keys or 'all rows'} ({row['stream']} stream): calibration at "
                       f"that lag, or the label delay, changed on about "
                       f"{row['change_day']:%Y-%m-%d} (seen {row['alarm_day']:%Y-%m-%d}, log M "
                       f"{row['log_M_at_alarm']:.2f})")
            continue
        out.append(f"ALARM {keys or 'all rows'}: calibration changed on about "
                   f"{row['change_day']:%Y-%m-%d} (seen {row['alarm_day']:%Y-%m-%d}, log M "
                   f"{row['log_M_at_alarm']:.2f} >= {result.detection.threshold:.2f}); change in "
                   f"log score: intercept {row['intercept']:+.5f}, slope {row['slope']:+.5f}, "
                   f"shape {row['shape']:+.5f}")
    return out


def to_document(result: MonitorRun) -> dict:
    """The JSON document (``generator: sqlcal``, ``schema_version: 2``)."""
    def records(frame):
        frame = frame.copy()
        for c in frame.columns:
            if pd.api.types.is_datetime64_any_dtype(frame[c]):
                frame[c] = frame[c].dt.strftime("%Y-%m-%d")
        return json.loads(frame.to_json(orient="records", double_precision=15))
    info = {k: v for k, v in result.detection.info.items() if k != "reliability"}
    info["reference"] = [str(pd.Timestamp(x).date()) for x in info["reference"]]
    return {"generator": "sqlcal", "sqlcal_version": __version__, "schema_version": 2,
            "kind": "monitor", "status": result.status,
            "threshold": result.detection.threshold, "detector": info,
            "guarantee": f"P(any false alarm within {info['checks']} daily checks) <= "
                         f"{info['alpha']} per group, if the labels of a day are independent "
                         "given their scores",
            "alarms": records(result.alarms), "alerts": list(result.alerts or []),
            "windows": records(result.windows) if result.windows is not None else [],
            "maturity": records(result.maturity) if result.maturity is not None else [],
            "path": records(result.detection.path)}


def to_html(result: MonitorRun) -> str:
    """An offline page: per group, the detector log M_t against its threshold (an SVG line on
    the log scale of M), and the alarms table."""
    path, c = result.detection.path, result.detection.threshold
    path = path[path["stream"] == "mature"]
    keys = [k for k in path.columns if k not in ("stream", "day", "n", "W", "log_e", "log_M",
                                                 "threshold", "alarm")]
    parts = []
    groups = path.groupby(keys, sort=True) if keys else [((), path)]
    for key, part in groups:
        key = key if isinstance(key, tuple) else (key,)
        title = ", ".join(f"{k}={v}" for k, v in zip(keys, key)) or "all rows"
        parts.append(f"<h2>{html.escape(title)}</h2>" + _svg(part["log_M"].to_numpy(), c,
                                                              part["day"]))
        if result.maturity is not None:
            curve = result.maturity
            for k, v in zip(keys, key):
                curve = curve[curve[k] == v] if k in curve else curve
            if len(curve):
                parts.append("<p>Maturity: share of the eventual positives known a days after "
                             "the prediction (mature days), with its interval.</p>"
                             + _maturity_svg(curve))
        diagrams = result.detection.info.get("reliability", {}).get(key)
        if diagrams:
            parts.append("<p>Reliability before the change (grey) and since (blue): observed "
                         "rate against mean score, 16 equal-width bins.</p>"
                         + _reliability_svg(diagrams["pre"], diagrams["post"]))
        if result.windows is not None and len(result.windows):
            mine = result.windows
            for k, v in zip(keys, key):
                mine = mine[mine[k] == v]
            parts.append(mine.drop(columns=keys).to_html(
                index=False, float_format=lambda x: f"{x:.5g}", escape=True))
    alarms = result.alarms.to_html(index=False, float_format=lambda x: f"{x:.5g}") \
        if len(result.alarms) else "<p>No alarm.</p>"
    if result.alerts:
        alarms += pd.DataFrame(result.alerts).to_html(index=False, escape=True)
    return ("<!doctype html><html><head><meta charset=\"utf-8\">"
            '<meta name="generator" content="sqlcal"><title>sqlcal monitor</title>'
            "<style>body{font-family:sans-serif;max-width:60em;margin:auto}"
            "table{border-collapse:collapse}td,th{padding:2px 6px;border:1px solid #ccc}"
            "</style></head><body><h1>Calibration change detector</h1>"
            f"<p>Status: <b>{result.status}</b>. Threshold log c = ln(checks/alpha) = {c:.2f}; "
            f"{html.escape(to_document(result)['guarantee'])}.</p><h2>Alarms</h2>{alarms}"
            + "".join(parts) + "</body></html>")


def _svg(log_M: np.ndarray, c: float, days: pd.Series, width: int = 640, height: int = 200
         ) -> str:
    """log M_t (natural log of the detector, so a log scale of M) and the threshold line."""
    y = np.maximum(np.nan_to_num(log_M, neginf=0.0), -2.0)
    top, bottom = max(c * 1.15, float(y.max())), -2.0
    def sx(i):
        return 40 + (width - 50) * i / max(len(y) - 1, 1)
    def sy(v):
        return 10 + (height - 30) * (top - v) / (top - bottom)
    line = " ".join(f"{sx(i):.1f},{sy(v):.1f}" for i, v in enumerate(y))
    first, last = pd.Timestamp(days.iloc[0]), pd.Timestamp(days.iloc[-1])
    return (f'<svg width="{width}" height="{height}" role="img" '
            f'aria-label="detector log M per day">'
            f'<line x1="40" x2="{width - 10}" y1="{sy(c):.1f}" y2="{sy(c):.1f}" stroke="red" '
            f'stroke-dasharray="4"/><text x="42" y="{sy(c) - 3:.1f}" font-size="11" fill="red">'
            f'threshold ln c = {c:.2f}</text>'
            f'<line x1="40" x2="{width - 10}" y1="{sy(0):.1f}" y2="{sy(0):.1f}" stroke="#999"/>'
            f'<polyline fill="none" stroke="#1f77b4" points="{line}"/>'
            f'<text x="40" y="{height - 4}" font-size="11">{first:%Y-%m-%d}</text>'
            f'<text x="{width - 80}" y="{height - 4}" font-size="11">{last:%Y-%m-%d}</text>'
            f'<text x="2" y="12" font-size="11">log M</text></svg>')


def _reliability_svg(pre: pd.DataFrame, post: pd.DataFrame, size: int = 260) -> str:
    def sx(v):
        return 30 + (size - 40) * v
    def sy(v):
        return size - 25 - (size - 40) * v
    top = max(float(pd.concat([pre, post])[["mean_score", "observed"]].max().max()), 0.05)
    scale = 1 / top
    lines = []
    for frame, colour in ((pre, "#999"), (post, "#1f77b4")):
        pts = " ".join(f"{sx(x * scale):.1f},{sy(y * scale):.1f}"
                       for x, y in zip(frame["mean_score"], frame["observed"]))
        lines.append(f'<polyline fill="none" stroke="{colour}" points="{pts}"/>')
    return (f'<svg width="{size}" height="{size}" role="img" aria-label="reliability diagram">'
            f'<line x1="{sx(0)}" y1="{sy(0)}" x2="{sx(1)}" y2="{sy(1)}" stroke="#ccc"/>'
            + "".join(lines)
            + f'<text x="{sx(0)}" y="{size - 8}" font-size="11">mean score (0 .. {top:.2f})</text>'
            f'<text x="2" y="12" font-size="11">observed</text></svg>')


def _maturity_svg(curve: pd.DataFrame, width: int = 320, height: int = 180) -> str:
    delays = np.concatenate([[0.0], curve["delay"].to_numpy(float)])
    top = float(delays.max()) or 1.0
    def sx(a):
        return 30 + (width - 40) * a / top
    def sy(f):
        return height - 25 - (height - 40) * f
    def line(values, colour, dash=""):
        values = np.concatenate([[0.0], np.nan_to_num(values.to_numpy(float))])
        pts = " ".join(f"{sx(a):.1f},{sy(f):.1f}" for a, f in zip(delays, values))
        return f'<polyline fill="none" stroke="{colour}" {dash} points="{pts}"/>'
    return (f'<svg width="{width}" height="{height}" role="img" aria-label="maturity curve">'
            + line(curve["F_hat"], "#1f77b4")
            + line(curve["F_lower"], "#9ecae1", 'stroke-dasharray="3"')
            + line(curve["F_upper"], "#9ecae1", 'stroke-dasharray="3"')
            + f'<line x1="{sx(0)}" x2="{sx(top)}" y1="{sy(1)}" y2="{sy(1)}" stroke="#ccc"/>'
            f'<text x="{sx(0)}" y="{height - 8}" font-size="11">delay (days, 0 .. {top:g})'
            f'</text><text x="2" y="12" font-size="11">F(a)</text></svg>')
