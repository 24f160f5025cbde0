"""The README's main job end to end: ``sqlcal demo`` then ``sqlcal report``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

import sqlcal
from sqlcal.cli.commands import main
from sqlcal.cli.demo import demo_frame


def test_demo_then_report(tmp_path, capsys):
    db = str(tmp_path / "demo.duckdb")
    assert main(["demo", db, "--rows", "20000"]) == 0
    assert main(["report", db, "--table", "predictions", "--score", "score", "--label", "label",
                 "--weight", "weight", "--by", "model,segment"]) == 0
    printed = capsys.readouterr().out
    assert "ece" in printed and "hl_p" in printed and "partner" in printed

    assert main(["report", db, "--score", "score", "--label", "label", "--weight", "weight",
                 "--by", "model", "--metrics", "ece,brier,spiegelhalter", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema_version"] == 1
    # each metric's interval after it, then its level (issue 34)
    assert doc["columns"] == ["model", "n", "W", "ece", "ece_lower", "ece_upper", "brier",
                              "brier_lower", "brier_upper", "spiegelhalter_z",
                              "spiegelhalter_p", "confidence", "weight_kind"]
    # the weight kind travels with the test's numbers: the demo's weights count identical events
    import duckdb

    with duckdb.connect(db, read_only=True) as c:
        weights = c.sql("SELECT weight FROM predictions").fetchnumpy()["weight"]
    kind = "frequency" if np.all(weights == np.round(weights)) else "sampling"
    assert kind == "frequency" and [r["weight_kind"] for r in doc["rows"]] == [kind] * 2
    # the JSON numbers are the library's numbers
    want = sqlcal.ece(db, table="predictions", score="score", label="label", weight="weight",
                      by="model")
    np.testing.assert_allclose([r["ece"] for r in doc["rows"]], want.ece, rtol=1e-12)


def test_report_errors_are_one_line(tmp_path, capsys):
    db = str(tmp_path / "demo.duckdb")
    main(["demo", db, "--rows", "1000"])
    assert main(["report", db, "--score", "nope", "--label", "label"]) == 2
    assert "score column 'nope' is not in the table" in capsys.readouterr().err
    # a misspelled metric is a flag error (argparse's SystemExit 2), found before any query
    with pytest.raises(SystemExit) as e:
        main(["report", db, "--score", "score", "--label", "label", "--metrics", "ece,x"])
    assert e.value.code == 2
    assert "--metrics: unknown metrics ['x']" in capsys.readouterr().err


def test_demo_weights_are_frequencies():
    # pre-aggregated events: expanding the weights gives back one row per event
    df = demo_frame(rows=5000)
    assert df.weight.sum() == 5000 and (df.weight >= 1).all()
    assert not df.duplicated(["model", "segment", "day", "score", "label"]).any()


def test_report_shares_one_pass_per_summary(monkeypatch):
    import ibis

    from sqlcal.query import reductions

    calls = []
    real = reductions.execute
    monkeypatch.setattr(reductions, "execute", lambda e: calls.append(ibis.to_sql(e)) or real(e))
    # an engine table (a small pandas frame runs cached statements outside summaries.execute)
    t = ibis.duckdb.connect().create_table("preds", demo_frame(rows=5000))
    sqlcal.report(t, score="score", label="label", weight="weight", by="segment")
    # eleven metrics, one full scan: the planner fuses the equal-width bins, the fine score
    # histogram (equal-mass bins, Hosmer-Lemeshow, cutoff error, Kuiper) and the totals (Brier,
    # log loss, Spiegelhalter, calibration-in-the-large) into one GROUP BY, validation riding
    # along; the follow-ups read only the rows inside a few score ranges (score comparisons or
    # one IN list of cell ids), the equal-mass levels of quantile ECE and Hosmer-Lemeshow shared
    # Before it, the weights are learned whole or not by ungrouped aggregates of the weight
    # column alone (executor.learn_weight_kind: whole weights need no variance sums)
    follow_up = re.compile(r'[")] IN \(|>= CAST')
    full = [sql for sql in calls if not follow_up.search(sql)]
    grouped = [sql for sql in full if "GROUP BY" in sql]
    assert len(grouped) == 1, full
    for sql in set(full) - set(grouped):
        assert re.search(r'"w"', sql) and not re.search(r'"(p|y)"\s*[,)]?\s*(AS|FROM)?', sql
                                                         .split("FROM", 1)[0]), sql
    assert len(full) <= 3 and len(calls) <= 6


def test_config_exit_codes_and_results_once_per_run_id(tmp_path, capsys):
    db = tmp_path / "demo.duckdb"
    main(["demo", str(db), "--rows", "20000"])
    capsys.readouterr()

    def config(name, body):
        path = tmp_path / name
        path.write_text(f'[source]\ndata = "{db}"\ntable = "predictions"\nscore = "score"\n'
                        f'label = "label"\nweight = "weight"\nby = "model"\n{body}')
        return str(path)

    quiet = config("ok.toml", '[metrics]\nece = {}\nbrier = {}\n'
                              '[[alerts]]\nmetric = "ece"\nabove = 0.5\n'
                              '[results]\ntable = "calibration_results"\n')
    for _ in range(2):  # a retried run with the same id adds no rows
        assert main(["report", "--config", quiet, "--run-id", "2026-11-22"]) == 0
    printed = capsys.readouterr().out
    assert "run 2026-11-22: OK, 2 groups, 0 alerts" in printed
    assert "wrote 4 rows in table calibration_results" in printed
    assert "wrote 0 rows in table calibration_results (run id 2026-11-22 was already there)" \
        in printed
    loud = config("alert.toml", '[metrics]\nece = {}\n[[alerts]]\nmetric = "ece"\nabove = 0\n')
    assert main(["report", "--config", loud, "--json", "--quiet"]) == 3
    doc = json.loads(capsys.readouterr().out)  # stdout holds the JSON and nothing else
    assert doc["status"] == "alert" and len(doc["alerts"]) == 2
    broken = config("broken.toml", '[metrics]\nece = {}\n')
    Path(broken).write_text(Path(broken).read_text().replace('score = "score"', 'score = "nope"'))
    assert main(["report", "--config", broken]) == 2
    assert "score column 'nope' is not in the table" in capsys.readouterr().err
    for argv in (["report"], ["report", str(db), "--config", quiet]):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["report", "--help"])
    assert "3  done, and at least one alert fired" in capsys.readouterr().out
