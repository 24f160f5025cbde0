"""The HTML page's pieces without a browser: the JSON encoder for a <script> element, the
numbers as read, the intervals found by column name, the escaping of the data's text
(tests/test_page_browser.py loads whole pages in Chromium)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

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


def test_the_detector_path_carries_each_days_rates(tmp_path):
    """The monitor page's per-day chart reads the path's mean score, observed rate and null
    standard deviation: equal to numpy on the raw rows of each group and day."""
    import sqlcal

    rng = np.random.default_rng(4)
    n = 6000
    df = pd.DataFrame({"g": rng.choice(["a", "b"], n), "p": rng.uniform(0.05, 0.95, n),
                       "w": rng.integers(1, 4, n).astype(float),
                       "t": pd.Timestamp("2026-09-01") + pd.to_timedelta(
                           rng.integers(0, 20 * 86400, n), "s")})
    df["y"] = (rng.uniform(size=n) < df["p"]).astype(int)
    store = str(tmp_path / "store.duckdb")
    sqlcal.snapshot(df, score="p", label="y", weight="w", by="g", time="t", store=store,
                    as_of="2026-10-05", bins=(), ls_ece_sigma=(), smooth_grids=())
    path = sqlcal.detect(store, horizon="1d", settle="1d", reference_days=7).path
    df["day"] = df["t"].dt.normalize()
    for (g, day), rows in df.groupby(["g", "day"]):
        got = path[(path["g"] == g) & (path["day"] == day)].iloc[0]
        W = rows["w"].sum()
        assert got["mean_score"] == pytest.approx((rows["w"] * rows["p"]).sum() / W, rel=1e-9)
        assert got["observed"] == pytest.approx((rows["w"] * rows["y"]).sum() / W, rel=1e-9)
        sd = np.sqrt((rows["w"] * rows["p"] * (1 - rows["p"])).sum()) / W
        assert got["observed_sd"] == pytest.approx(sd, rel=1e-6)


def test_a_report_without_keys_opens_its_one_group(tmp_path):
    rng = np.random.default_rng(6)
    df = pd.DataFrame({"p": rng.uniform(0.05, 0.95, 300), "y": rng.integers(0, 2, 300)})
    config = scheduled.validate_config({
        "source": {"data": df, "score": "p", "label": "y"}, "metrics": {"ece": {}},
        "output": {"html": str(tmp_path / "r.html")}})
    page = html.render(scheduled.run_report(config))
    assert 'data-col="0" tabindex="0" aria-sort="none">group</th>' in page
    assert 'class="open" data-group="0" title="open all rows">all rows</button>' in page


def test_the_comparison_with_the_baseline_is_on_each_groups_page(tmp_path):
    # model "a" pushed 0.6 in log-odds from the true rate, the baseline "b" calibrated: the
    # model is worse in every group (Brier's difference Σ((y − a)² − (y − b)²)/n > 0)
    rng = np.random.default_rng(8)
    n = 6000
    t = rng.beta(2, 3, n)
    logit = np.log(t / (1 - t))
    df = pd.DataFrame({"a": 1 / (1 + np.exp(-(logit + 0.6))), "b": t,
                       "y": (rng.random(n) < t).astype(int), "metric": rng.integers(0, 2, n)})
    config = scheduled.validate_config({
        "source": {"data": df, "score": "a", "label": "y", "by": "metric"},
        "metrics": {"brier": {}}, "compare": {"baseline": "b", "metrics": ["brier"]},
        "output": {"html": str(tmp_path / "r.html")}})
    run = scheduled.run_report(config)
    page = html.render(run)
    assert page.count('data-table="comparison"') == 2  # one table per group
    for k in (0, 1):
        rows = df[df["metric"] == k]
        want = (((rows["y"] - rows["a"]) ** 2).mean() - ((rows["y"] - rows["b"]) ** 2).mean())
        # the key is named "metric": the comparison's own column is "metric_" beside it
        got = run.comparison[run.comparison["metric"] == k].iloc[0]
        assert got["metric_"] == "brier" and got["difference"] == pytest.approx(want, rel=1e-9)
        shown = html.readable(got["difference"])
        interval = f'[{html.readable(got["ci_lower"])}, {html.readable(got["ci_upper"])}]'
        assert f'{shown} <span class="ci">{interval}</span>' in page
    # significantly worse in both groups: both rows marked
    assert page.count('<tr class="alert"><td>brier</td>') == 2
