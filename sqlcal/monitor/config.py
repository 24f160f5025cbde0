"""``monitor.toml``: the configuration ``sqlcal snapshot`` (and ``sqlcal monitor``) read.

This module checks the ``[source]``, ``[labels]`` and ``[snapshot]`` sections completely before
any query, and runs the snapshot they describe. The detector's and the windows' sections
(``[monitor]``, ``[detect]``, ``[windows]``, ``[metrics]``, ``[[alerts]]``) are checked by the
``sqlcal monitor`` command; here they only have to be tables. The JSON Schema of the whole file,
for editors and CI, is ``sqlcal/monitor/config.schema.json``.

Examples
--------
>>> cfg = validate({"source": {"data": "w.duckdb", "table": "preds", "score": "s",
...                            "label": "y", "time": "ts"},
...                 "snapshot": {"store": "summaries.duckdb"}})
>>> cfg["snapshot"]["cells"], cfg["labels"]["delays"]
(16384, [0, 1, 2, 3, 5, 7, 14, 30])
"""

from __future__ import annotations

import json
import os
from importlib.resources import files
from typing import Any

import pandas as pd

from sqlcal.errors import ConfigError, check_schema, read_toml
from sqlcal.monitor import schema

#: the sections this module checks key by key: key -> (types, required, default)
OWN = {
    "source": {
        "data": (str, True, None), "table": (str, False, None), "score": (str, True, None),
        "label": (str, True, None), "weight": (str, False, None), "by": ((list, str), False, []),
        "time": (str, True, None), "where": (str, False, None),
        "on_invalid": (str, False, "raise"),
    },
    "labels": {
        "layout": (str, False, "column"), "label_time": (str, False, None),
        "unknown": (str, False, "negative"), "horizon": (str, False, "30d"),
        "settle": (str, False, "1d"), "delays": (list, False, list(schema.DELAYS)),
        "events": (str, False, None), "key": (str, False, None),
        "event_time": (str, False, None),
    },
    "snapshot": {
        "store": (str, True, None), "prefix": (str, False, schema.PREFIX),
        "grain": (str, False, "day"), "cells": (int, False, 2**14),
        "bins": (list, False, [15]), "ls_ece_sigma": (list, False, [0.1]),
        "smooth_grids": (list, False, [1000]), "levels": (bool, False, False),
        "max_levels": (int, False, 65536),
    },
}
#: the sections ``sqlcal monitor`` checks
OTHERS = ("monitor", "detect", "windows", "metrics", "alerts")


def load(path: str | os.PathLike) -> dict:
    """Read ``monitor.toml`` and check it (:func:`validate`)."""
    return validate(read_toml(path), where=os.fspath(path))

#: keys renamed in 0.x: (section, old key) -> new key. The old key is refused naming the new
#: one before the schema's "unknown keys" (``[detect] horizon`` was the number of daily checks;
#: the labels' maturity age is ``[labels] horizon``)
RENAMED = {("detect", "horizon"): "checks"}


def check_renamed(raw: dict, *, where: str = "config") -> None:
    """A :class:`ConfigError` naming the new key for a key :data:`RENAMED` in 0.x."""
    for (section, old), new in RENAMED.items():
        block = raw.get(section)
        if isinstance(block, dict) and old in block:
            raise ConfigError(f"{where}: [{section}] {old} was renamed {new} ({new} = "
                              f"{block[old]!r})")


def validate(raw: dict, *, where: str = "config") -> dict:
    """The configuration with defaults filled in; a :class:`ConfigError` naming the section and
    key of the first problem.

    The whole file is first validated with its JSON Schema (:func:`json_schema`, every section);
    then the keys of ``[source]``, ``[labels]`` and ``[snapshot]`` are checked here, and the
    store's path: a DuckDB file there must be absent or a regular file (not a FIFO, a folder),
    and never the source, which sqlcal only reads."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: a configuration is a table of sections")
    check_renamed(raw, where=where)
    check_schema(raw, json_schema(), where=where)
    unknown = sorted(set(raw) - set(OWN) - set(OTHERS))
    if unknown:
        raise ConfigError(f"{where}: unknown sections {unknown}; expected some of "
                          f"{sorted([*OWN, *OTHERS])}")
    out: dict[str, Any] = {}
    for section, keys in OWN.items():
        block = raw.get(section, {})
        if not isinstance(block, dict):
            raise ConfigError(f"{where}: [{section}] must be a table")
        extra = sorted(set(block) - set(keys))
        if extra:
            raise ConfigError(f"{where}: [{section}] has unknown keys {extra}; expected some "
                              f"of {list(keys)}")
        checked = {}
        for key, (types, required, default) in keys.items():
            if key not in block:
                if required:
                    raise ConfigError(f"{where}: [{section}] needs {key} = ...")
                checked[key] = default
                continue
            value = block[key]
            if not isinstance(value, types) or (types is int and isinstance(value, bool)):
                raise ConfigError(f"{where}: [{section}] {key} = {value!r} has the wrong type")
            checked[key] = value
        out[section] = checked
    src, labels, snap = out["source"], out["labels"], out["snapshot"]
    src["by"] = [src["by"]] if isinstance(src["by"], str) else list(src["by"])
    choices = {("source", "on_invalid"): ("raise", "drop"),
               ("labels", "layout"): ("column", "events"),
               ("labels", "unknown"): ("negative",), ("snapshot", "grain"): tuple(schema.GRAINS)}
    for (section, key), allowed in choices.items():
        if out[section][key] not in allowed:
            raise ConfigError(f"{where}: [{section}] {key} must be one of {list(allowed)}, not "
                              f"{out[section][key]!r}")
    events = {k: labels[k] for k in ("events", "key", "event_time")}
    if labels["layout"] == "events":
        missing = [k for k, v in events.items() if v is None]
        if missing:
            raise ConfigError(f"{where}: [labels] layout = \"events\" needs "
                              f"{', '.join(f'{k} = ...' for k in missing)} (the events table, "
                              "the example id in both tables, the event time column)")
        if labels["label_time"] is not None:
            raise ConfigError(f"{where}: [labels] label_time is the column layout's; with "
                              "layout = \"events\" the events table's time is event_time")
    else:
        given = [k for k, v in events.items() if v is not None]
        if given:
            raise ConfigError(f"{where}: [labels] {given} belong to layout = \"events\" "
                              f"(layout is {labels['layout']!r})")
    for key in ("horizon", "settle"):
        text = labels[key]
        if not (len(text) >= 2 and text[-1] in "dh" and _number(text[:-1])
                and 0 <= float(text[:-1]) < float("inf")):
            raise ConfigError(f"{where}: [labels] {key} must be a duration >= 0 like '30d' or "
                              f"'12h', not {text!r}")
    for section in OTHERS:
        if section in raw and not isinstance(raw[section], (dict, list)):
            raise ConfigError(f"{where}: [{section}] must be a table")
        if section in raw:
            out[section] = raw[section]
    _check_store(snap["store"], src["data"], where)
    return out


def _check_store(store: str, data: str, where: str) -> None:
    # a DuckDB path is opened for writing: refuse, before any query, what would hang (a FIFO),
    # fail late (a folder, a text file) or write into the predictions the snapshot reads
    from sqlcal.monitor.store import StoreError, check_store_path

    try:
        check_store_path(store.removeprefix("duckdb://"), source=data)
    except StoreError as e:
        raise ConfigError(f"{where}: [snapshot] {e}") from None


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def run_snapshot(config: dict, *, period: Any = None, since: Any = None, until: Any = None,
                 force: bool = False, now: Any = None) -> pd.DataFrame:
    """The snapshot a checked configuration describes.

    ``period`` snapshots one period; ``since``/``until`` a range (a backfill); each names a
    period by its start. Without them: every period up to the last closed one
    (``now − settle``), each written only when its fingerprint changed (new periods, late rows,
    labels that arrived since the last run). ``now`` (default: the current time, UTC) is also
    the labels' cut-off, ``as_of``.
    """
    from sqlcal.monitor.store import as_timestamp, duration_days, period_bound, snapshot

    src, labels, snap = config["source"], config["labels"], config["snapshot"]
    events = labels["layout"] == "events"
    grain = snap["grain"]
    now = pd.Timestamp.now("UTC").tz_localize(None).floor("s") if now is None else \
        as_timestamp(now)
    if period is not None:
        since = until = period_bound(period, grain, "--period")
    else:
        since = None if since is None else period_bound(since, grain, "--since")
        until = None if until is None else period_bound(until, grain, "--until")
    if since is None and until is None:
        settle = pd.Timedelta(days=duration_days(labels["settle"], "settle"))
        closed = (now - settle).floor("D" if grain == "day" else "h")
        until = closed - pd.Timedelta(seconds=schema.GRAINS[grain])
    return snapshot(
        src["data"], table=src["table"], score=src["score"], label=src["label"],
        weight=src["weight"], by=src["by"], time=src["time"], where=src["where"],
        on_invalid=src["on_invalid"], store=snap["store"], prefix=snap["prefix"],
        grain=snap["grain"], start=since, end=until,
        label_time=labels["event_time"] if events else labels["label_time"],
        events=labels["events"], key=labels["key"],
        unknown=labels["unknown"], delays=labels["delays"], horizon=labels["horizon"],
        settle=labels["settle"], cells=snap["cells"], bins=snap["bins"],
        ls_ece_sigma=snap["ls_ece_sigma"], smooth_grids=snap["smooth_grids"],
        levels=snap["levels"], max_levels=snap["max_levels"], force=force, as_of=now)


def json_schema() -> dict:
    """The JSON Schema of ``monitor.toml`` (as parsed)."""
    return json.loads(files("sqlcal.monitor").joinpath("config.schema.json").read_text("utf-8"))
