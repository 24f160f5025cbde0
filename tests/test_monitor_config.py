"""monitor.toml: every key the checks accept is in the JSON Schema, and an unknown key or a
wrong type is refused, by the checks and by the schema, with a message naming it."""

from __future__ import annotations

import jsonschema
import pytest

from sqlcal.errors import ConfigError
from sqlcal.monitor import config as monitor_config
from sqlcal.monitor.monitor import DETECT, check_detect
from sqlcal.reporting import monitoring
from sqlcal.reporting.report_table import METRICS

BASE = {"source": {"data": "w.duckdb", "table": "preds", "score": "p", "label": "y",
                   "time": "t"}, "snapshot": {"store": "s.duckdb"}}


def schema_errors(config: dict) -> list[str]:
    validator = jsonschema.Draft202012Validator(monitor_config.json_schema())
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
            for e in validator.iter_errors(config)]


def test_every_accepted_key_is_in_the_schema():
    props = monitor_config.json_schema()["properties"]
    for section, keys in monitor_config.OWN.items():
        assert set(props[section]["properties"]) == set(keys), section
    assert set(props["detect"]["properties"]) == set(DETECT)
    assert set(props["detect"]["properties"]["tolerance"]["properties"]) == {"absolute",
                                                                            "relative"}
    window = props["windows"]["additionalProperties"]["properties"]
    assert set(window) == {"days", "calendar", "compare"}
    assert set(props["windows"]["properties"]) == {"maturity"}
    assert set(props["monitor"]["properties"]) == {"results_table"}
    assert set(props["metrics"]["propertyNames"]["enum"]) == set(METRICS)
    assert set(props["alerts"]["items"]["properties"]) == {"window", "metric", "column", "above",
                                                           "below"}
    assert set(props) == {*monitor_config.OWN, *monitor_config.OTHERS}
    # the spec's example configuration (with the checks' own choices) is valid
    full = {**BASE, "labels": {"layout": "column", "label_time": "lt", "horizon": "30d",
                               "settle": "1d", "delays": [0, 1, 2, 3, 5, 7, 14, 30]},
            "windows": {"last_7d": {"days": 7}, "month": {"calendar": "month",
                                                          "compare": "previous"},
                        "maturity": "adjusted"},
            "metrics": {"ece": {"bins": 15}, "brier": {}},
            "alerts": [{"window": "last_7d", "metric": "ece", "above": 0.02}],
            "detect": {"kind": "binned", "bins": 8, "bet_windows": [3, 7, 28],
                       "tolerance": {"absolute": 0.0, "relative": 0.1}, "alpha": 0.05,
                       "checks": 365, "lag": "lag:1d", "reference": "2026-08-01..2026-08-31",
                       "reference_days": 28, "null": "calibrated"},
            "monitor": {"results_table": "calibration_results"}}
    assert schema_errors(full) == []
    check_detect(full["detect"])
    monitoring.check_windows(full["windows"])
    monitor_config.validate(full)


@pytest.mark.parametrize("section, block, named", [
    ("detect", {"alpah": 0.05}, "alpah"),
    ("detect", {"checks": "365"}, "checks"),
    ("detect", {"tolerance": {"relativ": 0.1}}, "relativ"),
    ("windows", {"last_7d": {"dayz": 7}}, "dayz"),
    ("windows", {"last_7d": {"days": "7"}}, "days"),
    ("windows", {"maturity": 3}, "maturity"),
])
def test_an_unknown_key_or_a_wrong_type_is_refused_naming_it(section, block, named):
    check = {"detect": check_detect, "windows": monitoring.check_windows}[section]
    with pytest.raises(ConfigError, match=rf"\[{section}\].*{named}"):
        check(block)
    errors = schema_errors({**BASE, section: block})
    assert errors and any(named in e for e in errors), errors


def test_the_events_layout_keys_are_checked_together():
    events = {"layout": "events", "events": "conversions", "key": "id", "event_time": "at"}
    cfg = monitor_config.validate({**BASE, "labels": events})
    assert cfg["labels"]["event_time"] == "at"
    assert schema_errors({**BASE, "labels": events}) == []
    for labels, named in [({"layout": "events", "events": "c", "key": "id"}, "event_time"),
                          ({**events, "label_time": "lt"}, "label_time"),
                          ({"events": "c"}, "events"),
                          ({"layout": "event"}, "layout")]:
        with pytest.raises(ConfigError, match=rf"\[labels\].*{named}"):
            monitor_config.validate({**BASE, "labels": labels})
        assert schema_errors({**BASE, "labels": labels}), labels
