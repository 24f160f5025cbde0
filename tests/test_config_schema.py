"""Every configuration (report.toml, monitor.toml) is validated with its JSON Schema before use:
a malformed key is exit 2 with one line naming the key path, never a traceback, and nothing is
read or written.

The table runs through the command's main() in one subprocess, and one case per command through
a real ``python -m sqlcal.cli`` process (the exit code and stderr a scheduler sees); the schema is also checked against what the Python checks accept."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from sqlcal.errors import ConfigError
from sqlcal.reporting import scheduled
from sqlcal.reporting.report_table import METRICS

ROOT = Path(__file__).resolve().parents[1]
REPORT = ('[source]\ndata = "d.duckdb"\ntable = "predictions"\nscore = "score"\n'
          'label = "label"\n[metrics]\nbrier = {}\nece = { bins = 5 }\n')
MONITOR = ('[source]\ndata = "d.duckdb"\ntable = "predictions"\nscore = "score"\n'
           'label = "label"\nweight = "weight"\ntime = "day"\n[snapshot]\nstore = "s.duckdb"\n')

#: name -> (command, config text, what the one line must name)
MALFORMED = {
    "order_by = 5": ("report", REPORT + "[report]\norder_by = 5\n", ["[report] order_by"]),
    "title = 5": ("report", REPORT + "[report]\ntitle = 5\n", ["[report] title"]),
    "[time] metrics = 5": ("report", REPORT + '[time]\nkey = "day"\nmetrics = 5\n',
                           ["[time] metrics"]),
    "data = 5": ("report", REPORT.replace('"d.duckdb"', "5"), ["[source] data"]),
    "by = [1]": ("report", REPORT.replace("[metrics]", "by = [1]\n[metrics]"), ["[source] by"]),
    "alert above a string": ("report", REPORT + '[[alerts]]\nmetric = "ece"\nabove = "x"\n',
                             ["[[alerts]] #1 above"]),
    "results url = 5": ("report", REPORT + '[results]\ntable = "r"\nurl = 5\n',
                        ["[results] url"]),
    "unknown report key": ("report", REPORT + "[report]\ntitel = \"x\"\n", ["[report]", "titel"]),
    "metric option of the wrong type": ("report", REPORT.replace("bins = 5", 'bins = "5"'),
                                        ["ece", "bins"]),
    "segments max_depth a string": (
        "report", REPORT + '[segments]\nfeatures = ["segment"]\nmax_depth = "3"\n',
        ["[segments]", "max_depth", "'3'"]),
    "monitor: unknown metric option": ("monitor", MONITOR + "[metrics]\nece = { foo = 1 }\n",
                                       ["[metrics] ece", "foo"]),
    "monitor: tolerance = 1e308": ("monitor", MONITOR + "[detect]\ntolerance = 1e308\n",
                                   ["[detect] tolerance"]),
    "monitor: tolerance absolute 1e308": (
        "monitor", MONITOR + "[detect]\ntolerance = { absolute = 1e308 }\n",
        ["[detect] tolerance.absolute"]),
    "monitor: alert above 1e308 as a string": (
        "monitor", MONITOR + '[[alerts]]\nwindow = "last_7d"\nmetric = "ece"\nabove = "1"\n',
        ["[[alerts]] #1 above"]),
    "snapshot: prefix with a quote": ("snapshot", MONITOR + "prefix = \"x'y\"\n",
                                      ["[snapshot] prefix"]),
    "snapshot: store is the source": ("snapshot", MONITOR.replace('"s.duckdb"', '"d.duckdb"'),
                                      ["[snapshot] store", "d.duckdb"]),
    "snapshot: store is a FIFO": ("snapshot", MONITOR.replace('"s.duckdb"', '"fifo.duckdb"'),
                                  ["[snapshot] store", "fifo.duckdb"]),
    "snapshot: store = 5": ("snapshot", MONITOR.replace('"s.duckdb"', "5"),
                            ["[snapshot] store"]),
    "snapshot: cells = 3": ("snapshot", MONITOR + "cells = 3\n", ["[snapshot] cells"]),
    "maturity: horizon = 30": ("maturity", MONITOR + "[labels]\nhorizon = 30\n",
                               ["[labels] horizon"]),
}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    from sqlcal.cli.demo import write_demo

    root = tmp_path_factory.mktemp("configs")
    write_demo(str(root / "d.duckdb"), rows=500)
    os.mkfifo(root / "fifo.duckdb")
    for i, (command, text, _) in enumerate(MALFORMED.values()):
        (root / f"c{i}.toml").write_text(text)
    return root


#: one process runs every case through the command's main(), each with its own stdout and stderr
#: (a process start per case cost a minute of the suite); the exit codes a scheduler sees are
#: checked on real ``python -m sqlcal.cli`` processes by test_the_process_exit_code_is_main_s
_DRIVER = """
import contextlib, io, json, sys, traceback
from sqlcal.cli.commands import main
out = {}
for i, command in enumerate(json.loads(sys.argv[1])):
    o, e = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
        try:
            rc = main([command, "--config", f"c{i}.toml"])
        except SystemExit as stop:
            rc = stop.code
        except BaseException:
            traceback.print_exc()
            rc = 1
    out[i] = [rc, o.getvalue(), e.getvalue()]
print(json.dumps(out))
"""


def _run(folder: Path, i: int, command: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sqlcal.cli", command, "--config", f"c{i}.toml"],
                          capture_output=True, text=True, timeout=120, cwd=folder,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.fixture(scope="module")
def runs(folder):
    """Every malformed config through the command's main(), in one process."""
    cases = list(MALFORMED.values())
    done = subprocess.run([sys.executable, "-c", _DRIVER, json.dumps([c[0] for c in cases])],
                          capture_output=True, text=True, timeout=300, cwd=folder,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    return {name: subprocess.CompletedProcess([], *out[str(i)])
            for i, name in enumerate(MALFORMED)}


def test_the_process_exit_code_is_main_s(folder, runs):
    """A scheduler sees main()'s code and line: one real process per command."""
    seen = set()
    for i, (name, (command, _, _)) in enumerate(MALFORMED.items()):
        if command in seen:
            continue
        seen.add(command)
        run = _run(folder, i, command)
        assert (run.returncode, run.stdout, run.stderr) == (
            runs[name].returncode, runs[name].stdout, runs[name].stderr)


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_config_is_exit_2_with_one_line_naming_the_key(folder, runs, case):
    run = runs[case]
    named = MALFORMED[case][2]
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr and run.stdout == ""
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sqlcal: error: "), run.stderr
    for name in named:
        assert name in lines[0], (name, lines[0])
    assert not (folder / "s.duckdb").exists()


def test_report_schema_names_every_section_key_and_metric():
    props = scheduled.config_schema()["properties"]
    keys = {k: set(v.get("properties") or v.get("items", {}).get("properties", {}))
            for k, v in props.items()}
    assert keys == {k: set(v or ()) for k, v in scheduled.SECTIONS.items()}
    schema = scheduled.config_schema()
    names = schema["$defs"]["metric"]["enum"]
    assert sorted(names) == sorted(METRICS)
    for where in (props["metrics"]["oneOf"][0]["propertyNames"],
                  props["metrics"]["oneOf"][1]["items"],
                  props["alerts"]["items"]["properties"]["metric"],
                  props["time"]["properties"]["metrics"]["items"]):
        assert where == {"$ref": "#/$defs/metric"}
    for bad in ({"metrics": ["ece", "nope"]}, {"metrics": {"nope": {}}},
                {"alerts": [{"metric": "nope", "column": "x", "below": 1}]}):
        with pytest.raises(jsonschema.ValidationError, match="nope"):
            jsonschema.validate({"source": {"data": "x.parquet", "score": "p", "label": "y"},
                                 **bad}, schema)
    # the example configuration is valid
    from sqlcal.errors import read_toml

    jsonschema.validate(read_toml(ROOT / "examples" / "report.toml"), scheduled.config_schema())


def test_python_configs_take_any_data_the_source_takes():
    import pandas as pd

    frame = pd.DataFrame({"score": [0.2, 0.7], "label": [0, 1]})
    config = scheduled.validate_config({"source": {"data": frame, "score": "score",
                                                   "label": "label"}})
    assert config["source"]["data"] is frame
    with pytest.raises(ConfigError, match=r"\[source\] score"):
        scheduled.validate_config({"source": {"data": frame, "score": 5, "label": "label"}})
