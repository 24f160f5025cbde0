"""``sqlcal monitor``: the change detector of ``[detect]`` on the summary store of ``[snapshot]``,
with its alarms and a JSON document (its page: :func:`sqlcal.reporting.html.render_monitor`).

Examples
--------
>>> check_detect({"alpha": 0.01})["checks"]
365
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable

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

    def _repr_html_(self) -> str | None:
        """The run's page in a notebook, with the charts of ``sqlcal monitor --html``."""
        return PAGE(self) if PAGE is not None else None


#: draws a run's page (set by sqlcal.reporting.scheduled: the page is a layer above this one)
PAGE: Callable[[MonitorRun], str] | None = None


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
