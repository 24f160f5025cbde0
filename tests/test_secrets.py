"""No output, error, log line, JSON, HTML, results row or store table shows a password: every
command runs on a PostgreSQL role whose password holds ``@``, ``:``, ``/`` and ``%40``, and every
output is searched for the password, its encodings and each of its pieces."""

from __future__ import annotations

import json
import logging
import os
import traceback
import urllib.parse
import warnings

import numpy as np
import pandas as pd
import pytest

import sqlcal
from sqlcal import errors
from sqlcal.cli.commands import main
from sqlcal.errors import redact
from tests.conftest import POSTGRES_URL, engine_missing

#: the role's password: each piece between the special characters is searched for on its own
PASSWORD = "Kx9Qv@Wm3Zt:Hq7Rb/Jn5Ly%40Ps2Fd"
PIECES = ("Kx9Qv", "Wm3Zt", "Hq7Rb", "Jn5Ly", "Ps2Fd")
# one role and schema per test process: xdist runs this module's tests on two workers, whose
# module fixtures would otherwise create the same role at once
ROLE = SCHEMA = f"sqlcal_secret_probe_{os.getpid()}"


def leaks(text: str) -> list[str]:
    """The forms of the password (or pieces of it) found in ``text``."""
    forms = {PASSWORD, urllib.parse.quote(PASSWORD, safe=""), urllib.parse.quote_plus(PASSWORD),
             urllib.parse.quote(PASSWORD), urllib.parse.unquote(PASSWORD), *PIECES}
    return sorted(f for f in forms if f in text)


# -- the one redaction, on its own ------------------------------------------------------------


@pytest.fixture
def fresh(monkeypatch):
    """redact() without the passwords it met before (each case must be hidden by its pattern)."""
    monkeypatch.setattr(errors, "_SEEN", set())


@pytest.mark.parametrize("text, shown", [
    # a URL: the userinfo ends at the last "@" before the host, raw or percent-encoded
    ("postgres://bob:Kx9Qv@Wm3Zt:Hq7Rb/Jn5Ly%40Ps2Fd@db:5432/x",
     "postgres://bob:***@db:5432/x"),
    ("postgresql://bob:Kx9Qv%40Wm3Zt%3AHq7Rb%2FJn5Ly%2540Ps2Fd@db/x?sslmode=require",
     "postgresql://bob:***@db/x?sslmode=require"),
    ("postgres://bob:Kx9Qv@Wm3Zt@db/x?application_name=me@host",
     "postgres://bob:***@db/x?application_name=me@host"),
    ("mysql://bob:Kx9Qv?Wm3Zt@db/x", "mysql://bob:***@db/x"),
    # in a sentence, in a repr, in JSON
    ("table 't' is not in postgres://bob:Kx9Qv@Wm3Zt@db/x; its tables are ['a']",
     "table 't' is not in postgres://bob:***@db/x; its tables are ['a']"),
    ("{'data': 'postgres://bob:Kx9Qv,Wm3Zt@db/x', 'n': 1}",
     "{'data': 'postgres://bob:***@db/x', 'n': 1}"),
    ('{"url": "trino://bob:Kx9Qv/Wm3Zt@h:8080/c"}', '{"url": "trino://bob:***@h:8080/c"}'),
    # a password as a key: a URL's query string, a libpq key=value string, a JDBC property
    ("postgres://bob@db/x?sslmode=require&password=Kx9Qv%40Wm3Zt&application_name=a",
     "postgres://bob@db/x?sslmode=require&password=***&application_name=a"),
    ("host=db port=5432 password=Kx9Qv@Wm3Zt:Hq7Rb/Jn5Ly dbname=x",
     "host=db port=5432 password=*** dbname=x"),
    ("host=db password = 'Kx9Qv Wm3Zt\\'Hq7Rb' dbname=x", "host=db password = *** dbname=x"),
    ("jdbc:postgresql://db/x;user=bob;PASSWORD=Kx9Qv@Wm3Zt;ssl=true",
     "jdbc:postgresql://db/x;user=bob;PASSWORD=***;ssl=true"),
    # nothing secret: left as it is
    ("postgres://bob@db:5432/x", "postgres://bob@db:5432/x"),
    ("mailto bob@example.com, https://example.com/a@b",
     "mailto bob@example.com, https://example.com/a@b"),
    ("demo.duckdb", "demo.duckdb"),
])
def test_redact_hides_every_form_of_a_password(fresh, text, shown):
    assert redact(text) == shown
    assert not leaks(redact(text)), text


def test_a_password_met_once_is_hidden_in_any_later_text(fresh):
    redact(f"postgres://bob:{urllib.parse.quote(PASSWORD, safe='')}@db/x")
    message = (f"the engine said: auth failed for {PASSWORD!r} "
               f"({urllib.parse.quote_plus(PASSWORD)}, {urllib.parse.quote(PASSWORD)})")
    assert not leaks(redact(message)), redact(message)
    assert redact("a short one: postgres://u:abc@h/x, and abc again") == (
        "a short one: postgres://u:***@h/x, and abc again")  # 3 characters: not remembered


def test_redact_keeps_the_shape_of_a_configuration(fresh):
    config = {"source": {"data": f"postgres://bob:{PASSWORD}@db/x", "by": ["g"]},
              "snapshot": {"store": [f"postgres://eve:{PASSWORD}@h/y"]}, "bins": 15}
    shown = redact(config)
    assert shown == {"source": {"data": "postgres://bob:***@db/x", "by": ["g"]},
                     "snapshot": {"store": ["postgres://eve:***@h/y"]}, "bins": 15}
    assert config["source"]["data"].endswith(f"{PASSWORD}@db/x")  # the input is not changed


# -- every command on a role with that password -----------------------------------------------


@pytest.fixture(scope="module")
def role():
    """A PostgreSQL role with the password, a schema of its own holding a demo table; the URL."""
    psycopg = pytest.importorskip("psycopg")
    try:
        admin = psycopg.connect(POSTGRES_URL.replace("postgres://", "postgresql://", 1),
                                autocommit=True)
    except Exception as e:
        engine_missing(f"PostgreSQL is not reachable at {POSTGRES_URL}: {type(e).__name__}")
    admin.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
    admin.execute(f"DROP ROLE IF EXISTS {ROLE}")
    admin.execute(f"CREATE ROLE {ROLE} LOGIN PASSWORD '{PASSWORD}'")
    admin.execute(f"CREATE SCHEMA {SCHEMA} AUTHORIZATION {ROLE}")
    admin.execute(f"ALTER ROLE {ROLE} SET search_path = {SCHEMA}")
    parts = urllib.parse.urlsplit(POSTGRES_URL)
    url = (f"postgres://{ROLE}:{urllib.parse.quote(PASSWORD, safe='')}@{parts.hostname}:"
           f"{parts.port or 5432}{parts.path}")
    rng = np.random.default_rng(7)
    n = 3000
    p = rng.beta(2, 3, n)
    frame = pd.DataFrame({
        "model": rng.choice(["v1", "v2"], n), "region": rng.choice(["eu", "us", "apac"], n),
        "day": pd.Timestamp("2026-11-01") + pd.to_timedelta(rng.integers(0, 10, n), unit="D"),
        "score": p, "label": (rng.random(n) < p).astype("int64"),
        "weight": rng.integers(1, 4, n).astype("float64")})
    con = psycopg.connect(url.replace("postgres://", "postgresql://", 1), autocommit=True)
    con.execute("CREATE TABLE predictions (model text, region text, day timestamp, "
                "score double precision, label bigint, weight double precision)")
    with con.cursor().copy("COPY predictions FROM STDIN") as copy:
        for row in frame.itertuples(index=False):
            copy.write_row(row)
    con.close()
    yield url
    from sqlcal.inputs import sources
    from sqlcal.monitor import store

    for cache in (sources.connections, store._CONNECTIONS):  # the role's sessions, then the role
        for key in [k for k in cache if ROLE in k]:
            cache.pop(key).disconnect()
    admin.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
    admin.execute(f"DROP ROLE IF EXISTS {ROLE}")
    admin.close()


def test_no_command_shows_the_password(role, tmp_path, monkeypatch, capsys, caplog):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(errors, "_SEEN", set())  # the patterns must hide it on their own
    caplog.set_level(logging.DEBUG)
    url = role
    wrong = url.replace(PIECES[0], "Zz0Zz")  # a wrong password, of the same shape
    query_form = url.replace(f":{urllib.parse.quote(PASSWORD, safe='')}@", "@") + (
        f"?password={urllib.parse.quote(PASSWORD, safe='')}")
    columns = 'score = "score"\nlabel = "label"\nweight = "weight"\nby = ["model"]\n'
    (tmp_path / "report.toml").write_text(
        f'[source]\ndata = "{url}"\ntable = "predictions"\n{columns}'
        '[metrics]\nece = {}\nbrier = {}\n[output]\njson = "r.json"\nhtml = "r.html"\n'
        '[results]\ntable = "calibration_results"\n')
    (tmp_path / "missing.toml").write_text(
        f'[source]\ndata = "{url}"\ntable = "nope"\n{columns}[metrics]\nece = {{}}\n')
    (tmp_path / "monitor.toml").write_text(
        f'[source]\ndata = "{url}"\ntable = "predictions"\n{columns}time = "day"\n'
        f'[labels]\nhorizon = "0d"\nsettle = "0d"\n[snapshot]\nstore = "{url}"\n'
        '[monitor]\nresults_table = "monitor_results"\n')
    plain = ["--table", "predictions", "--score", "score", "--label", "label"]
    runs = {
        "report --config": (["report", "--config", "report.toml"], 0),
        "report": (["report", url, *plain, "--by", "model"], 0),
        "report --json": (["report", url, *plain, "--json"], 0),
        "report --html": (["report", url, *plain, "--html", "adhoc.html", "--json-file",
                           "adhoc.json"], 0),
        "report, password in the query": (["report", query_form, *plain], 0),
        "snapshot": (["snapshot", "--config", "monitor.toml"], 0),
        "snapshot --json": (["snapshot", "--config", "monitor.toml", "--json"], 0),
        "monitor": (["monitor", "--config", "monitor.toml"], 0),
        "monitor --json": (["monitor", "--config", "monitor.toml", "--json", "--no-results"], 0),
        "maturity": (["maturity", "--config", "monitor.toml"], 2),  # no label_time: an error
        "segments": (["segments", url, *plain, "--features", "model,region", "--fix",
                      "--json", "seg.json"], 0),
        "sql": (["sql", "ece", "--dialect", "postgres", "--table", "predictions", "--score",
                 "score", "--label", "label"], 0),
        "a missing table": (["report", url, "--table", "nope", "--score", "s", "--label", "y"],
                            2),
        "a missing table, query form": (["report", query_form, "--table", "nope", "--score",
                                         "s", "--label", "y"], 2),
        "a missing table, --config": (["report", "--config", "missing.toml"], 2),
        "a wrong column": (["report", url, *plain[:2], "--score", "nope", "--label", "label"], 2),
        "a wrong condition": (["report", url, *plain, "--where", "nope > 1"], 2),
        "a wrong password": (["report", wrong, *plain], 2),
        "a bad flag value": (["report", url, *plain, "--bins", url], 2),
    }
    seen = {}
    for name, (argv, expected) in runs.items():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                code = main(argv)
            except SystemExit as e:  # argparse
                code = e.code
            except Exception:  # a traceback is an output too
                code, _ = 1, print(traceback.format_exc())
        out, err = capsys.readouterr()
        assert code == expected, (name, out, err)
        seen[f"{name}: stdout"], seen[f"{name}: stderr"] = out, err
        seen[f"{name}: warnings"] = "\n".join(str(w.message) for w in caught)
    for path in tmp_path.iterdir():
        if path.suffix in (".json", ".html"):
            seen[path.name] = path.read_text()
    assert {"r.json", "r.html", "adhoc.json", "adhoc.html", "seg.json"} <= set(seen)
    seen["log records"] = "\n".join(r.getMessage() for r in caplog.records)
    # the database: the store's manifest (its spec's origin), the results rows, every table
    import psycopg

    con = psycopg.connect(POSTGRES_URL.replace("postgres://", "postgresql://", 1))
    tables = [t for (t,) in con.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
        (SCHEMA,)).fetchall()]
    assert {"sqlcal_snapshots", "calibration_results", "monitor_results"} <= set(tables)
    for t in tables:
        seen[f"table {t}"] = repr(con.execute(f'SELECT * FROM {SCHEMA}."{t}"').fetchall())
    con.close()
    assert json.loads(seen["r.json"])["source"]["data"] == url.replace(
        urllib.parse.quote(PASSWORD, safe=""), "***")
    found = {name: leaks(text) for name, text in seen.items() if leaks(text)}
    assert not found, found
    assert "cannot connect to" in seen["a wrong password: stderr"]
    assert f"is not in postgres://{ROLE}:***@" in seen["a missing table: stderr"]


def test_python_reprs_and_errors_show_no_password(role, monkeypatch):
    monkeypatch.setattr(errors, "_SEEN", set())
    url = role
    wrong = url.replace(PIECES[0], "Zz0Zz")
    src = sqlcal.source(url, table="predictions", score="score", label="label")
    shown = [repr(src), src._repr_html_()]
    for call in (lambda: sqlcal.source(url, table="nope", score="score", label="label"),
                 lambda: sqlcal.source(wrong, table="predictions", score="score", label="label"),
                 lambda: sqlcal.ece(url, table="predictions", score="nope", label="label")):
        with pytest.raises(ValueError) as caught:
            call()
        shown.append("".join(traceback.format_exception(caught.value)))
    assert not [text for text in shown if leaks(text)], shown
