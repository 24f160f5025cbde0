"""Passwords in connection URLs stay out of a scheduled run's page and document: the page
(sqlcal.html, below sqlcal.scheduled) reads the run's redacted_config."""

import datetime as dt
import types

import pandas as pd

from sqlcal import html, scheduled


def _run(data, results_url=None):
    config = {"source": {"data": data, "table": "preds", "score": "p", "label": "y",
                         "weight": None, "by": [], "where": None},
              "report": {"title": "t", "order_by": ["ece"]}, "results": {"url": results_url}}
    return scheduled.ScheduledRun(
        config=config, run_id="r1", run_at=dt.datetime(2026, 11, 25), config_hash="h",
        source=types.SimpleNamespace(by=()), table=pd.DataFrame(), metrics=pd.DataFrame(),
        alerts=[])


def test_the_page_and_the_redacted_config_mask_passwords():
    run = _run("postgres://bob:hunter2@db:5432/x", results_url="postgres://eve:s3cret@h/y")
    shown = run.redacted_config
    assert shown["source"]["data"] == "postgres://bob:***@db:5432/x"
    assert shown["results"]["url"] == "postgres://eve:***@h/y"
    assert run.config["source"]["data"] == "postgres://bob:hunter2@db:5432/x"  # untouched
    section = html._run_section(run)
    assert "postgres://bob:***@db:5432/x table preds" in section
    assert "hunter2" not in section


def test_a_table_from_python_is_named_by_its_type():
    run = _run(pd.DataFrame({"p": [0.5], "y": [1]}))
    assert run.redacted_config["source"]["data"] == "<DataFrame>"
    assert "&lt;DataFrame&gt; table preds" in html._run_section(run)
