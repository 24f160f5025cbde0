"""Scheduled reports: the configuration, the HTML page in a headless browser, the JSON against its
schema, the results table on every engine, the time series."""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from pathlib import Path

import jsonschema
import numpy as np
import pandas as pd
import pytest

import sqlcal
from sqlcal.cli.commands import main
from sqlcal.cli.demo import write_demo
from sqlcal.inputs.groupkeys import group_id
from sqlcal.reporting import scheduled

EXAMPLE = Path(__file__).parent.parent / "examples" / "report.toml"


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The demo database (about 100k logged rows) and the example configuration beside it."""
    folder = tmp_path_factory.mktemp("demo")
    write_demo(str(folder / "demo.duckdb"))
    shutil.copy(EXAMPLE, folder / "report.toml")
    return folder


@pytest.fixture(scope="module")
def rendered(demo):
    """``sqlcal report --config`` on the demo data: exit code, JSON document, HTML path."""
    cwd = os.getcwd()
    os.chdir(demo)
    try:
        code = main(["report", "--config", "report.toml", "--run-id", "html-test",
                     "--output-dir", "out", "--no-results"])
    finally:
        os.chdir(cwd)
    return code, json.loads((demo / "out" / "report.json").read_text()), demo / "out/report.html"


def test_example_config_on_demo_data_alerts_and_validates(rendered):
    code, doc, _ = rendered
    # the demo's v1 ios/android/partner segments are miscalibrated: Kuiper's p-value alerts
    assert code == 3
    assert doc["status"] == "alert" and doc["run"]["id"] == "html-test"
    jsonschema.validate(doc, scheduled.json_schema())
    # both files carry the mark that lets the next run replace them (and nothing else)
    assert doc["generator"] == "sqlcal"
    assert '<meta name="generator" content="sqlcal">' in rendered[2].read_text()[:1000]
    alerted = {(a["group"]["model"], a["group"]["segment"]) for a in doc["alerts"]}
    assert {("v1", "ios"), ("v1", "android"), ("v1", "partner")} <= alerted
    assert ("v1", "web") not in alerted and ("v2", "web") not in alerted
    # worst first: every alerted group before every quiet one
    order = [(g["model"], g["segment"]) for g in doc["groups"]]
    assert [g in alerted for g in order] == sorted((g in alerted for g in order), reverse=True)
    assert order == [(r["model"], r["segment"]) for r in doc["rows"]]
    # one series point per group, day and statistic
    assert {r["time"] for r in doc["series"]["rows"]} == {f"2026-11-{d:02d}" for d in range(1, 15)}
    assert len(doc["series"]["rows"]) == 8 * 14 * 2


def test_json_numbers_are_the_library_numbers(rendered, demo):
    _, doc, _ = rendered
    want = sqlcal.kuiper(str(demo / "demo.duckdb"), table="predictions", score="score",
                         label="label", weight="weight", by=["model", "segment"])
    got = {(m["group"]["model"], m["group"]["segment"]): m["value"] for m in doc["metrics"]
           if m["metric"] == "kuiper" and m["statistic"] == "p_value"}
    for _, row in want.iterrows():
        assert got[(row["model"], row["segment"])] == pytest.approx(row["p_value"], rel=1e-12)


def test_plain_report_json_validates_against_the_same_schema(demo, capsys):
    assert main(["report", str(demo / "demo.duckdb"), "--score", "score", "--label", "label",
                 "--by", "segment", "--metrics", "ece,kuiper", "--json"]) == 0
    jsonschema.validate(json.loads(capsys.readouterr().out), scheduled.json_schema())


def test_html_page_is_self_contained_and_worst_first(rendered):
    # tests/test_page_browser.py loads the page in Chromium; here its source
    _, doc, page = rendered
    html = page.read_text()
    # self-contained: nothing is fetched (no src=, no link to anywhere but the page itself)
    assert not re.search(r'(src|href)="(?!#)', html)
    assert html.count("sqlcal-plotly") == 2  # Plotly once (its class, and the script's lookup)
    for section in ("run", "alerts", "summary"):
        assert f'id="{section}"' in html
    groups = re.findall(r'<section class="group" id="group-\d+" data-group="\d+" '
                        r'data-alerts="(\d+)" hidden>\s*<h2>([^<]*)', html)
    assert [name for _, name in groups] == [
        f"model = {g['model']}, segment = {g['segment']}" for g in doc["groups"]]
    counts = [int(n) for n, _ in groups]
    assert counts == sorted(counts, reverse=True) and counts[0] > 0 and counts[-1] == 0
    # two diagrams a group, and the series per day in the overview and in each group
    assert html.count('data-chart="reliability"') == html.count('data-chart="cumulative"') == 8
    assert html.count('data-chart="series"') == 1
    assert html.count('data-chart="group-series"') == 8


def test_config_errors_name_the_problem_before_any_query(tmp_path, capsys):
    good = {"source": {"data": str(tmp_path / "absent.duckdb"), "table": "t", "score": "p",
                       "label": "y"},
            "metrics": {"ece": {"bins": 10}, "kuiper": {}}}
    cases = [
        ({"sorce": {}}, "unknown sections ['sorce']"),
        ({"source": {**good["source"], "scroe": "p"}}, "[source] has unknown keys ['scroe']"),
        ({"metrics": {"ecee": {}}}, "[metrics] has unknown names ['ecee']"),
        ({"metrics": {"ece": {"bin": 10}}}, "metrics.ece has unknown options ['bin']"),
        ({"alerts": [{"metric": "brier", "above": 1}]}, "names metric 'brier', which [metrics]"),
        ({"alerts": [{"metric": "kuiper", "column": "pvalue", "below": 0.01}]},
         "metric 'kuiper' reports no column 'pvalue'"),
        ({"alerts": [{"metric": "kuiper", "column": "p_value"}]},
         "[[alerts]] #1 needs above = or below = ..."),
        ({"time": {"key": "day", "metrics": ["brier"]}}, "[time] metrics ['brier'] are not in"),
        ({"results": {"table": "x; drop table y"}}, "[results] table = 'x; drop table y' is not"),
    ]
    for change, message in cases:
        with pytest.raises(scheduled.ConfigError) as e:
            scheduled.validate_config({**good, **change})
        assert message in str(e.value)
    # the CLI says the same and exits 2; the (absent) database is never opened
    (tmp_path / "bad.toml").write_text('[source]\ndata = "absent.duckdb"\nscore = "p"\n'
                                       'label = "y"\n[metrics]\nece = { bin = 10 }\n')
    assert main(["report", "--config", str(tmp_path / "bad.toml")]) == 2
    err = capsys.readouterr().err
    assert "metrics.ece has unknown options ['bin']" in err and "absent" not in err
    # a valid config names the alert column by its report name too
    config = scheduled.validate_config({**good, "alerts": [
        {"metric": "kuiper", "column": "kuiper_p", "below": 0.01}]})
    assert config["alerts"][0]["column"] == "p_value"


def test_results_table_twice_with_one_run_id_has_no_duplicates(con, upload, tmp_path):
    df = pd.DataFrame({"p": np.linspace(0.05, 0.95, 40), "y": np.tile([0, 1, 1, 0], 10),
                       "g": np.repeat(["a", "b"], 20)})
    data = upload(df)
    config = scheduled.validate_config({
        "source": {"data": data, "score": "p", "label": "y", "by": "g"},
        "metrics": {"brier": {}, "cutoff_error": {}}})
    run = scheduled.run_report(config, run_id="nightly-1", diagrams=False)
    rows = scheduled.results_rows(run)
    assert len(rows) == 2 * 2  # two groups, two statistics

    name = f"sqlcal_results_{uuid.uuid4().hex[:8]}"
    database = None
    if con.name == "pyspark":  # a database of its own in tmp_path, not Spark's default folder
        database = name
        con.create_database(database, path=str(tmp_path / "warehouse"))
    before = set(con.list_tables(database=database))
    try:
        assert scheduled.write_results(con, name, rows, database=database) == 4
        # a retried run adds nothing
        assert scheduled.write_results(con, name, rows, database=database) == 0
        later = scheduled.results_rows(scheduled.run_report(config, run_id="nightly-2",
                                                            diagrams=False))
        assert scheduled.write_results(con, name, later, database=database) == 4
        stored = con.table(name, database=database).to_pandas()
        assert len(stored) == 8
        assert not stored.duplicated(["run_id", "group_keys", "metric", "statistic"]).any()
        first = stored[stored.run_id == "nightly-1"].sort_values(["group_keys", "metric"])
        assert list(first.group_keys.unique()) == ['{"g": "a"}', '{"g": "b"}']
        brier = first[first.metric == "brier"].value.to_numpy()
        want = [np.mean((df.p[df.g == g] - df.y[df.g == g]) ** 2) for g in ("a", "b")]
        np.testing.assert_allclose(brier, want, rtol=1e-12)
        bounded = first[first.metric == "cutoff_error"]
        assert (bounded.lower <= bounded.value).all() and (bounded.value <= bounded.upper).all()
        # nothing else in the database changed: the source table is intact, the only new
        # persistent table is the results table (Ibis's in-memory uploads are session temporaries)
        new = set(con.list_tables(database=database)) - before - {name}
        assert all(t.startswith("ibis_pandas_memtable_") for t in new), new
        assert data.count().to_pyarrow().as_py() == 40
    finally:
        con.drop_table(name, database=database, force=True)
        if database:
            con.drop_database(database, force=True)


def test_results_table_refuses_a_table_of_another_shape(con, tmp_path):
    name = f"sqlcal_other_{uuid.uuid4().hex[:8]}"
    database = None
    if con.name == "pyspark":
        database = name
        con.create_database(database, path=str(tmp_path / "warehouse"))
    con.create_table(name, schema={"run_id": "string", "x": "int64"}, database=database)
    try:
        rows = pd.DataFrame({"run_id": ["r"], "run_at": [pd.Timestamp("2026-11-01")],
                             "config_hash": ["h"], "group_keys": ["{}"], "metric": ["ece"],
                             "statistic": ["ece"], "value": [0.1], "lower": [np.nan],
                             "upper": [np.nan]})
        with pytest.raises(ValueError, match="not a results table"):
            scheduled.write_results(con, name, rows, database=database)
        assert con.table(name, database=database).count().to_pyarrow().as_py() == 0
    finally:
        con.drop_table(name, database=database, force=True)
        if database:
            con.drop_database(database, force=True)


def test_metric_series_is_the_metric_per_time_key(con, upload):
    rng = np.random.default_rng(3)
    df = pd.DataFrame({"p": rng.random(300), "g": rng.choice(["a", "b"], 300),
                       "day": rng.choice([1, 2, 3], 300)})
    df["y"] = (rng.random(300) < df.p).astype(int)
    series = scheduled.metric_series(upload(df), score="p", label="y", by="g", time="day",
                                     metrics=["brier", "kuiper"])
    assert list(series.columns[:4]) == ["g", "day", "n", "W"]
    brier = series[series.metric == "brier"].sort_values(["g", "day"])
    want = df.assign(se=(df.p - df.y) ** 2).groupby(["g", "day"]).se.mean()
    np.testing.assert_allclose(brier.value, want.to_numpy(), rtol=1e-12)
    assert set(series.statistic) == {"brier", "kuiper", "p_value"}


def test_progress_goes_to_stderr_only(demo, capsys):
    config = scheduled.validate_config({
        "source": {"data": str(demo / "demo.duckdb"), "table": "predictions", "score": "score",
                   "label": "label"},
        "metrics": {"ece": {}, "kuiper": {}}})
    run = scheduled.run_report(config, diagrams=False, progress=True)
    out, err = capsys.readouterr()
    assert out == ""
    # the planner reads both summaries in one fused scan, and says so
    assert "summaries: uniform_bins_15, score_cells_1024 (one scan)" in err
    # step i of n, the step named: opening the source, the planner's scans (n grows by them
    # once the source is open), two metrics
    steps = re.findall(r"^sqlcal: \[(\d+)/(\d+)\] ", err, re.M)
    assert [int(i) for i, _ in steps] == list(range(1, len(steps) + 1))
    assert steps[0] == ("1", "3") and all(n == str(len(steps)) for _, n in steps[1:])
    assert f"sqlcal: [{len(steps)}/{len(steps)}] metric: kuiper" in err
    assert run.status == "ok"
    scheduled.run_report(config, diagrams=False, progress=False)
    assert capsys.readouterr().err == ""
    # by default, where nobody watches (stderr is not a terminal here), nothing
    scheduled.run_report(config, diagrams=False, progress=None)
    assert capsys.readouterr().err == ""


def test_diagrams_only_for_an_html_output(demo, tmp_path):
    # nothing but the HTML page shows the diagrams: without one, none is drawn
    base = {"source": {"data": str(demo / "demo.duckdb"), "table": "predictions",
                       "score": "score", "label": "label", "by": "model"},
            "metrics": {"brier": {}}}
    run = scheduled.run_report(scheduled.validate_config(
        {**base, "output": {"json": str(tmp_path / "r.json")}}))
    assert run.charts == {}
    run = scheduled.run_report(scheduled.validate_config(
        {**base, "output": {"html": str(tmp_path / "r.html")}}))
    assert sorted(run.charts) == ["cumulative", "reliability"]  # no smooth_ece, tce or [time]
    for kind in ("cumulative", "reliability"):
        assert sorted(run.charts[kind]) == [group_id({"model": "v1"}), group_id({"model": "v2"})]
    assert all(len(part["x"]) == 15 for part in run.charts["reliability"].values())


def test_html_escapes_text_from_the_data():
    from sqlcal.reporting.html import render

    df = pd.DataFrame({"p": [0.2, 0.7, 0.4, 0.9], "y": [0, 1, 1, 1],
                       "g": ["<b>x</b>", "<b>x</b>", "a&b", "a&b"]})
    run = scheduled.run_report(scheduled.validate_config({
        "source": {"data": df, "score": "p", "label": "y", "by": "g"},
        "metrics": ["brier"], "report": {"title": "<i>t</i>"}}), diagrams=False)
    page = render(run)
    assert "<b>" not in page and "<i>" not in page
    assert "g = &lt;b&gt;x&lt;/b&gt;" in page and "a&amp;b" in page
