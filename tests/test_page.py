"""The HTML page's pieces without a browser: the JSON encoder for a <script> element, the
numbers as read, the intervals found by column name, the escaping of the data's text
(tests/test_page_browser.py loads whole pages in Chromium)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from sqlcal import outputs
from sqlcal.reporting import html, scheduled


def test_safe_json_cannot_end_its_script_element():
    value = {"</script><script>alert(1)</script>": "<!-- \u2028\u2029 & '\"", "x": [1.5, None]}
    text = str(html.safe_json(value))
    assert "<" not in text and ">" not in text and "&" not in text
    assert "\u2028" not in text and "\u2029" not in text
    assert json.loads(text) == value
    assert json.loads(str(html.safe_json({"v": float("nan"), "w": np.float64("inf")}))) == {
        "v": None, "w": None}


def test_numbers_for_reading():
    shown = [html.readable(v) for v in (24804.0, 1234.5, 0.5, 3, 1e-7, -2.5e-12, float("nan"),
                                         np.int64(1200000), np.float32(0.25))]
    assert shown == ["24,804", "1,234.5", "0.5", "3", "1.0×10⁻⁷", "-2.5×10⁻¹²", "–",
                     "1,200,000", "0.25"]


def test_intervals_are_found_by_their_names():
    columns = ["model", "n", "W", "ece", "ece_lower", "ece_upper", "cutoff_error",
               "cutoff_lower", "cutoff_upper", "brier", "citl", "ci_lower", "ci_upper",
               "kuiper", "lower_bound", "upper_bound", "lonely_lower"]
    pairs = html._interval_pairs(columns, ["model"])
    assert pairs == {"ece": ("ece_lower", "ece_upper"),
                     "cutoff_error": ("cutoff_lower", "cutoff_upper"),
                     "citl": ("ci_lower", "ci_upper"), "kuiper": ("lower_bound", "upper_bound")}


def test_report_page_escapes_every_text_from_the_data(tmp_path):
    rng = np.random.default_rng(3)
    df = pd.DataFrame({"p": rng.uniform(0.05, 0.95, 400), "y": rng.integers(0, 2, 400),
                       "g": ["</script><b>x</b>", "a&b\u2028", "'\"><img src=x>", "ok"] * 100})
    config = scheduled.validate_config({
        "source": {"data": df, "score": "p", "label": "y", "by": "g"},
        "metrics": {"ece": {}, "cutoff_error": {}}, "report": {"title": "<i>t</i>"},
        "output": {"html": str(tmp_path / "r.html")}})
    page = html.render(scheduled.run_report(config))
    assert outputs.HTML_MARKER in page[:4096]
    assert "<b>" not in page and "<i>" not in page and "<img" not in page
    assert page.count("</script>") == page.count("<script")  # no element ended early
    assert "g = &lt;/script&gt;&lt;b&gt;x&lt;/b&gt;" in page and "a&amp;b" in page


def test_a_password_never_reaches_the_page(tmp_path):
    df = pd.DataFrame({"p": [0.2, 0.7] * 20, "y": [0, 1] * 20})
    config = scheduled.validate_config({
        "source": {"data": df, "score": "p", "label": "y"}, "metrics": {"brier": {}},
        "results": {"table": "r", "url": "postgres://bob:hunter2@db:5432/x"}})
    run = scheduled.run_report(config, diagrams=True)
    page = html.render(run)
    assert "hunter2" not in page
