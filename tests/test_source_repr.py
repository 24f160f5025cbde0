"""A Source describes itself (``repr``, and ``_repr_html_`` for Jupyter) from what it knows,
without running a query."""

from __future__ import annotations

import html
from html.parser import HTMLParser

import ibis
import numpy as np
import pandas as pd
import pytest

import sqlcal
from sqlcal.errors import redact
from sqlcal.query import reductions
from tests.conftest import calibration_data


@pytest.fixture
def no_queries(monkeypatch):
    """no_queries(): any query from then on fails the test."""
    def refuse(*args, **kwargs):
        raise AssertionError("a repr ran a query")

    def forbid():
        import ibis.backends.duckdb as duckdb_backend

        for name in ("execute", "to_pyarrow", "to_pyarrow_batches", "raw_sql", "to_pandas"):
            if hasattr(duckdb_backend.Backend, name):
                monkeypatch.setattr(duckdb_backend.Backend, name, refuse)
        monkeypatch.setattr(reductions, "execute", refuse)
        # in interactive mode, turning an expression into text would run it
        monkeypatch.setattr(ibis.options, "interactive", True)

    return forbid


def cells(page: str) -> dict[str, str]:
    """The (header → text) rows of the HTML table, parsed: the markup must be well formed."""
    class Rows(HTMLParser):
        def __init__(self):
            super().__init__()
            self.rows, self.tag, self.open = {}, None, []

        def handle_starttag(self, tag, attrs):
            self.open.append(tag)
            if tag in ("th", "td"):
                self.tag, self.text = tag, ""

        def handle_endtag(self, tag):
            assert self.open.pop() == tag, f"</{tag}> closes another element"
            if tag == "th":
                self.key = self.text
            elif tag == "td":
                self.rows[self.key] = self.text

        def handle_data(self, data):
            if self.tag:
                self.text += data

    parser = Rows()
    parser.feed(page)
    parser.close()
    assert not parser.open
    return parser.rows


def test_repr_before_and_after_the_first_query():
    df = calibration_data(300, seed=1, groups=2, weights=True)
    df["w"] = np.round(df["w"] * 3)  # whole numbers: frequency weights
    src = sqlcal.source(df, score="p", label="y", weight="w", by="g", where="p > 0.1")
    text = repr(src)
    assert text.startswith("<Source: in-memory pandas frame (300 rows); score='p', label='y'")
    assert "weight='w' (kind known after the first query)" in text
    assert "by=('g',)" in text and "where='p > 0.1'" in text
    assert text.endswith("; not validated yet>")
    rows = cells(src._repr_html_())
    assert rows == {
        "score": "p", "label": "y, 0/1",
        "weight": "w, frequency or sampling: known after the first query",
        "groups": "g", "where": "p > 0.1",
        "invalid rows": "an error names them (on_invalid='raise')",
        "validated": "not yet: the first metric's query checks the rows",
        "cached summaries": "0",
    }
    sqlcal.ece(src)
    assert repr(src).endswith("weight='w' (frequency), by=('g',), where='p > 0.1'; validated>")
    rows = cells(src._repr_html_())
    assert rows["weight"] == "w, frequency weights (whole numbers)"
    assert (rows["validated"], rows["cached summaries"]) == ("yes", "1")


def test_repr_runs_no_query(no_queries):
    con = ibis.duckdb.connect()
    t = con.create_table("preds", calibration_data(200, seed=2))
    src = sqlcal.source(t, score="p", label="y", where=t.p < 0.9)
    no_queries()
    assert repr(src) == ("<Source: duckdb table 'preds'; score='p', label='y', "
                         "where=<an Ibis expression>; not validated yet>")
    page = src._repr_html_()
    assert "&lt;an Ibis expression&gt;" in page
    assert cells(page)["where"] == "<an Ibis expression>"
    assert "duckdb table &#x27;preds&#x27;" in page
    with pytest.raises(AssertionError, match="ran a query"):
        sqlcal.ece(src)


def test_repr_of_dropped_rows_and_sampling_weights():
    df = calibration_data(100, seed=3, weights=True)
    df.loc[:4, "p"] = 1.5
    with pytest.warns(UserWarning, match="dropped invalid rows"):
        src = sqlcal.source(df, score="p", label="y", weight="w", on_invalid="drop",
                            soft_labels=True)
    assert repr(src).endswith("weight='w' (sampling); validated, 5 invalid rows dropped>")
    rows = cells(src._repr_html_())
    assert rows["invalid rows"] == "dropped: 5 of 100 rows"
    assert rows["weight"] == "w, sampling weights (fractional)"
    assert rows["label"] == "y, in [0, 1] (soft labels allowed)"
    assert rows["groups"] == "none (one group)"


def test_markup_and_names_are_escaped():
    df = pd.DataFrame({"<p>": [0.2, 0.7], "y & z": [0, 1]})
    src = sqlcal.source(df, score="<p>", label="y & z", where="\"<p>\" < 0.9")
    page = src._repr_html_()
    assert "<code>&lt;p&gt;</code>" in page and "y &amp; z" in page
    rows = cells(page)
    assert (rows["score"], rows["where"]) == ("<p>", '"<p>" < 0.9')
    assert html.unescape(page).count("<p>") == 2  # only as escaped text, never as a tag


def test_origin_names_files_and_hides_passwords(tmp_path):
    path = tmp_path / "preds.duckdb"
    con = ibis.duckdb.connect(str(path))
    con.create_table("preds", calibration_data(50, seed=4))
    con.disconnect()
    src = sqlcal.source(str(path), table="preds", score="p", label="y")
    assert repr(src).startswith(f"<Source: {path} table 'preds';")
    assert (redact("postgres://bob:s3cret@db:5432/x?sslmode=require")
            == "postgres://bob:***@db:5432/x?sslmode=require")
    assert redact("duckdb:///preds.duckdb") == "duckdb:///preds.duckdb"


def test_origin_of_other_frames():
    pl = pytest.importorskip("polars")
    df = pl.from_pandas(calibration_data(40, seed=5))
    assert repr(sqlcal.source(df, score="p", label="y")).startswith(
        "<Source: in-memory polars frame (40 rows);")
    lazy = sqlcal.source(df.lazy(), score="p", label="y")  # its size is unknown until read
    assert repr(lazy).startswith("<Source: in-memory polars frame;")
