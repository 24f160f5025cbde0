"""A results table lives in a database the user names, and "wrote N rows" is said only after the
N rows of the run are read back from it through a new connection.

A source that is a file (Parquet, CSV, a glob, a folder) or an in-memory frame has no database
to hold the table: without ``[results] url`` the configuration is refused before any query, and
so is a ``url`` that names a file that is not a database. The counts are checked against the
target read by duckdb itself, in a connection of the test's own."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pandas as pd
import pytest

from sqlcal.errors import ConfigError
from sqlcal.reporting import monitoring, scheduled
from tests.test_hostile_cli import assert_one_line, cli, no_query, snapshot, ws  # noqa: F401

CONFIG = ('[source]\ndata = "{data}"\nscore = "score"\nlabel = "label"\nby = "model"\n'
          '[metrics]\nbrier = {{}}\nece = {{ bins = 5 }}\n[results]\ntable = "calibration_results"\n')


@pytest.mark.parametrize("data", ["d.parquet", "d.csv", "parts", "parts/*.parquet"])
def test_a_file_source_without_a_results_database_is_refused_before_any_query(
        ws, capsys, no_query, data):
    Path("r.toml").write_text(CONFIG.format(data=data))
    before = snapshot(ws)
    code, out, err = cli(capsys, "report", "--config", "r.toml")
    assert code == 2 and "wrote" not in out
    assert_one_line(err, "r.toml", "[results]", "url")
    assert snapshot(ws) == before


@pytest.mark.parametrize("url", ["x.parquet", "x.csv", ":memory:", "duckdb://:memory:",
                                 "duckdb://", "notes.txt", "empty", "d.parquet"])
def test_a_results_url_that_is_not_a_database_is_refused(ws, capsys, no_query, url):
    Path("r.toml").write_text(CONFIG.format(data="d.duckdb").replace(
        'label = "label"\n', 'label = "label"\ntable = "predictions"\n') + f'url = "{url}"\n')
    before = snapshot(ws)
    code, out, err = cli(capsys, "report", "--config", "r.toml")
    assert code == 2 and "wrote" not in out
    assert_one_line(err, "r.toml", "[results] url")
    assert snapshot(ws) == before


def test_rows_are_reported_only_as_read_back_from_the_named_database(ws, capsys):
    Path("r.toml").write_text(CONFIG.format(data="d.parquet") + 'url = "results.duckdb"\n'
                              '[output]\njson = "r.json"\n')
    code, out, err = cli(capsys, "report", "--config", "r.toml", "--run-id", "n1")
    assert code == 0, err
    doc = json.loads(Path("r.json").read_text())
    con = duckdb.connect("results.duckdb", read_only=True)
    try:
        stored = con.execute("SELECT count(*) FROM calibration_results WHERE run_id = 'n1'"
                             ).fetchone()[0]
    finally:
        con.close()
    # one row per group, metric and statistic, as the run's JSON lists them
    assert stored == len(doc["metrics"]) > 0
    assert f"wrote {stored} rows in table calibration_results" in out


def test_rows_lost_by_the_target_are_an_error_not_wrote(ws, capsys, monkeypatch):
    """An insert that reports rows the target does not hold is caught by the read-back."""
    Path("r.toml").write_text(CONFIG.format(data="d.duckdb").replace(
        'label = "label"\n', 'label = "label"\ntable = "predictions"\n')
        + 'url = "results.duckdb"\n')
    monkeypatch.setattr(scheduled, "write_results", lambda con, name, rows, **kw: len(rows))
    code, out, err = cli(capsys, "report", "--config", "r.toml", "--run-id", "n1")
    assert code == 2 and "wrote" not in out
    assert_one_line(err, "calibration_results", "n1", "0 rows")


def test_python_frame_source_needs_a_results_url(tmp_path):
    frame = pd.DataFrame({"score": [0.2, 0.7], "label": [0, 1]})
    raw = {"source": {"data": frame, "score": "score", "label": "label"},
           "metrics": {"brier": {}}, "results": {"table": "r"}}
    with pytest.raises(ConfigError, match=r"\[results\].*url"):
        scheduled.validate_config(raw)
    raw["results"]["url"] = str(tmp_path / "r.duckdb")
    config = scheduled.validate_config(raw)
    run = scheduled.run_report(config, run_id="py", progress=False)
    added = scheduled.store_results(run)
    con = duckdb.connect(str(tmp_path / "r.duckdb"), read_only=True)
    try:
        stored = con.execute("SELECT count(*) FROM r WHERE run_id = 'py'").fetchone()[0]
    finally:
        con.close()
    assert added == stored == len(scheduled.results_rows(run)) > 0


def test_monitor_results_need_a_database_store():
    with pytest.raises(ConfigError, match=r"\[monitor\] results_table.*store"):
        monitoring.check_monitor({"results_table": "checks"}, store=":memory:")
    with pytest.raises(ConfigError, match=r"\[monitor\] results_table.*store"):
        monitoring.check_monitor({"results_table": "checks"}, store="s.parquet")
    assert monitoring.check_monitor({"results_table": "checks"}, store="s.duckdb") == "checks"
    assert monitoring.check_monitor({}, store=":memory:") is None


def _check_rows(n: int) -> pd.DataFrame:
    return pd.DataFrame({"run_id": "2026-11-20", "run_at": pd.Timestamp("2026-11-20 06:00"),
                         "config_hash": "0" * 16,
                         "group_keys": [json.dumps({"window": f"w{i}"}) for i in range(n)],
                         "metric": "brier", "statistic": "brier", "value": 0.1, "lower": None,
                         "upper": None, "trust": "{}"})[list(scheduled.RESULTS_SCHEMA)]


def test_monitor_results_are_read_back_from_the_store(tmp_path, monkeypatch):
    store = str(tmp_path / "store.duckdb")
    duckdb.connect(store).close()  # a store is a database the snapshots made; here an empty one
    assert monitoring.store_results(store, "checks", _check_rows(3)) == 3
    assert monitoring.store_results(store, "checks", _check_rows(3)) == 0  # the same check date
    monkeypatch.setattr(monitoring, "write_results", lambda con, name, rows: len(rows))
    with pytest.raises(scheduled.ResultsError, match="0 rows of check"):
        monitoring.store_results(store, "lost", _check_rows(2))
    from sqlcal.monitor import store as _store

    _store._CONNECTIONS.pop(store).disconnect()
    con = duckdb.connect(store, read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM checks").fetchone()[0] == 3
    finally:
        con.close()


def test_postgres_source_rows_are_read_back_from_postgres(tmp_path, capsys, monkeypatch):
    """A PostgreSQL source with [results] and no url: the rows go in the source's database and
    "wrote N" is the count a separate connection of the test's reads there."""
    import uuid

    import ibis

    from sqlcal.cli.demo import demo_frame
    from tests.conftest import POSTGRES_URL, engine_missing

    try:
        con = ibis.connect(POSTGRES_URL)
    except Exception as e:  # no server, no driver
        engine_missing(f"PostgreSQL is not reachable: {e}")
    name = f"io_preds_{uuid.uuid4().hex[:8]}"
    results = f"io_results_{uuid.uuid4().hex[:8]}"
    con.create_table(name, demo_frame(2000))
    monkeypatch.chdir(tmp_path)
    Path("r.toml").write_text(
        f'[source]\ndata = "{POSTGRES_URL}"\ntable = "{name}"\nscore = "score"\n'
        f'label = "label"\nweight = "weight"\nby = "model"\n[metrics]\nbrier = {{}}\n'
        f'[results]\ntable = "{results}"\n')
    try:
        code, out, err = cli(capsys, "report", "--config", "r.toml", "--run-id", "pg1")
        assert code == 0, err
        reader = ibis.connect(POSTGRES_URL)
        try:
            t = reader.table(results)
            stored = int(t.filter(t.run_id == "pg1").count().to_pyarrow().as_py())
        finally:
            reader.disconnect()
        assert stored > 0 and f"wrote {stored} rows in table {results}" in out
    finally:
        con.drop_table(name, force=True)
        con.drop_table(results, force=True)
        con.disconnect()
