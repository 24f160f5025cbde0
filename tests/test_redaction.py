"""Passwords in connection URLs stay out of a scheduled run's page and document: the page
(sqlcal.reporting.html, below sqlcal.reporting.scheduled) reads the run's redacted_config."""

import datetime as dt
import json
import types

import pandas as pd

from sqlcal.reporting import html, scheduled


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


def test_a_password_holding_at_signs_and_slashes_is_hidden_whole():
    # the userinfo ends at the last "@": a pattern stopping at the first one showed the rest
    password = "Kx9Qv@Wm3Zt:Hq7Rb/Jn5Ly%40Ps2Fd"
    run = _run(f"postgres://bob:{password}@db:5432/x",
               results_url=f"postgres://eve:{password}@h/y?sslmode=require")
    assert run.redacted_config["source"]["data"] == "postgres://bob:***@db:5432/x"
    assert run.redacted_config["results"]["url"] == "postgres://eve:***@h/y?sslmode=require"
    shown = html._run_section(run) + json.dumps(run.redacted_config)
    assert not [piece for piece in ("Kx9Qv", "Wm3Zt", "Hq7Rb", "Jn5Ly", "Ps2Fd") if piece in shown]


def test_the_config_hash_does_not_depend_on_the_password():
    one, other = _run("postgres://bob:hunter22@db/x"), _run("postgres://bob:rotated99@db/x")
    assert scheduled.config_hash(one.config) == scheduled.config_hash(other.config)
    elsewhere = _run("postgres://bob@db/y")
    assert scheduled.config_hash(one.config) != scheduled.config_hash(elsewhere.config)
