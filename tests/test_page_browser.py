"""The HTML pages of a scheduled report and of a monitor run, loaded from ``file://`` in headless
Chromium (Debian's ``chromium``, driven by Playwright; ``.ci/run`` installs both): no console
error and no request beyond the file, every chart drawn, a group opened from the table shows its
diagrams, a legend click hides a group's line, hostile group names show as text.

Without Chromium or Playwright the tests skip with the reason; with ``SQLCAL_STRICT_ENGINES=1``
(CI) they fail instead. Each page's screenshots go to ``SQLCAL_SCREENSHOTS`` (default
``.ci/artifacts``; ``SQLCAL_SCREENSHOTS=docs/img`` redraws the documentation's).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sqlcal import outputs
from sqlcal.cli.commands import main
from sqlcal.cli.demo import write_demo
from sqlcal.reporting import html, scheduled
from tests.conftest import engine_missing

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run",
        "--disable-dev-shm-usage"]
SHOTS = ROOT / os.environ.get("SQLCAL_SCREENSHOTS", ".ci/artifacts")
HOSTILE = ["<script>alert(1)</script>", '"><img src=x onerror=alert(1)>', "plain"]
DRAWN = ("els => els.every(e => e.dataset.drawn === 'yes' || e.dataset.drawn === 'failed')")

pytestmark = pytest.mark.xdist_group("chromium")


@pytest.fixture(scope="module")
def browser():
    if not os.path.exists(CHROMIUM):
        engine_missing(f"no {CHROMIUM}: apt-get install -y chromium (.ci/run does)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as e:
        engine_missing(f"Playwright is not installed ({e}): pip install '.[test]'")
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def report_page(tmp_path_factory):
    """``sqlcal report --config examples/report.toml`` on the demo data, with smooth ECE and
    TCE added so that every diagram of a group is drawn."""
    folder = tmp_path_factory.mktemp("report")
    write_demo(str(folder / "demo.duckdb"))
    config = (ROOT / "examples/report.toml").read_text().replace(
        "kuiper = {}\n", "kuiper = {}\nsmooth_ece = {}\ntce = {}\n")
    (folder / "report.toml").write_text(config)
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        code = main(["report", "--config", "report.toml", "--run-id", "page-test",
                     "--output-dir", "out", "--no-results", "--quiet"])
    finally:
        os.chdir(cwd)
    assert code == 3  # the demo's v1 segments alert
    return folder / "out" / "report.html"


@pytest.fixture(scope="module")
def monitor_page(tmp_path_factory):
    """``sqlcal monitor`` on the demo stream, checked after v2/android's change (an alarm)."""
    folder = tmp_path_factory.mktemp("monitor")
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        shutil.copy(ROOT / "examples/monitor.toml", "monitor.toml")
        assert main(["demo", "stream.duckdb", "--stream"]) == 0
        assert main(["snapshot", "--config", "monitor.toml", "--as-of", "2026-12-15",
                     "--quiet"]) == 0
        code = main(["monitor", "--config", "monitor.toml", "--at", "2026-12-15", "--html",
                     "monitor.html", "--quiet"])
    finally:
        os.chdir(cwd)
    assert code == 3
    return folder / "monitor.html"


@pytest.fixture(scope="module")
def hostile_page(tmp_path_factory):
    """A report whose groups are named like markup, with a series over days and a comparison
    with a baseline score column."""
    folder = tmp_path_factory.mktemp("hostile")
    rng = np.random.default_rng(5)
    n = 6000
    df = pd.DataFrame({"g": rng.choice(HOSTILE, n), "p": rng.uniform(0.05, 0.95, n),
                       "day": rng.integers(1, 6, n)})
    df["y"] = (rng.uniform(size=n) < df["p"]).astype(int)
    df["base"] = np.clip(df["p"] + rng.normal(0, 0.05, n), 0.01, 0.99)  # a baseline model
    config = scheduled.validate_config({
        "source": {"data": df, "score": "p", "label": "y", "by": "g"},
        "metrics": {"ece": {}, "cutoff_error": {}},
        "compare": {"baseline": "base", "metrics": ["ece", "brier"]},
        "time": {"key": "day", "metrics": ["ece"]},
        "report": {"title": "<script>alert(2)</script> title"},
        "alerts": [{"metric": "ece", "above": 0.0}],
        "output": {"html": str(folder / "hostile.html")}})
    run = scheduled.run_report(config, run_id="x</script><script>alert(3)</script>")
    path = folder / "hostile.html"
    outputs.write_text(path, "html", html.render(run))
    return path


def hostile_monitor(folder: Path) -> Path:
    """A monitor page whose groups are named like markup (one of them alarms)."""
    import sqlcal
    from sqlcal.monitor import detect
    from sqlcal.monitor.monitor import MonitorRun
    from sqlcal.reporting import monitoring

    rng = np.random.default_rng(8)
    n = 9000
    df = pd.DataFrame({"g": rng.choice(HOSTILE, n), "p": rng.uniform(0.05, 0.95, n),
                       "t": pd.Timestamp("2026-09-01") + pd.to_timedelta(
                           rng.integers(0, 30 * 86400, n), "s")})
    late = (df["g"] == HOSTILE[0]) & (df["t"] >= "2026-09-20")
    df["y"] = (rng.uniform(size=n) < np.where(late, np.minimum(df["p"] * 1.6, 1), df["p"]))
    df["y"] = df["y"].astype(int)
    store = str(folder / "store.duckdb")
    sqlcal.snapshot(df, score="p", label="y", by="g", time="t", store=store,
                    as_of="2026-10-05", bins=(), ls_ece_sigma=(), smooth_grids=())
    found = detect.detect(store, reference_days=14, horizon="1d", settle="1d")
    run = MonitorRun(detection=found, at=None, status="alert" if len(found.alarms) else "ok")
    run.windows = monitoring.windows(store, horizon="1d", settle="1d")
    path = folder / "hostile-monitor.html"
    outputs.write_text(path, "html", html.render_monitor(run))
    return path


@pytest.fixture(scope="module")
def hostile_monitor_page(tmp_path_factory):
    return hostile_monitor(tmp_path_factory.mktemp("hostile_monitor"))


def _load(browser, path: Path):
    """Open ``path`` at 1280 px; return the page and what it logged, requested and alerted."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    seen = {"console": [], "requests": [], "dialogs": []}
    page.on("console", lambda m: seen["console"].append((m.type, m.text)))
    page.on("pageerror", lambda e: seen["console"].append(("pageerror", str(e))))
    page.on("request", lambda r: seen["requests"].append(r.url))

    def dialog(d):
        seen["dialogs"].append(d.message)
        d.dismiss()

    page.on("dialog", dialog)
    page.goto(path.as_uri())
    page.wait_for_function(f"() => ({DRAWN})([...document.querySelectorAll('.overview .chart')])",
                           timeout=120_000)
    return page, seen


def _open(page, row: int) -> list:
    """Click the table's ``row``-th group; return its charts as (kind, drawn, SVG paths)."""
    button = page.locator("#groups tbody tr").nth(row).locator("button.open")
    group = button.get_attribute("data-group")
    button.click()
    page.wait_for_function(
        f"() => ({DRAWN})([...document.querySelectorAll('#group-{group} .chart')])",
        timeout=120_000)
    assert page.locator(f"#group-{group}").is_visible()
    return page.eval_on_selector_all(
        f"#group-{group} .chart", "els => els.map(e => [e.dataset.chart, e.dataset.drawn, "
        "e.querySelectorAll('.main-svg path').length])"), group


def _clean(seen):
    errors = [m for m in seen["console"] if m[0] in ("error", "pageerror")]
    assert errors == []
    assert seen["requests"] and all(u.startswith("file://") for u in seen["requests"])
    assert len(set(seen["requests"])) == 1  # the page itself, nothing else
    assert seen["dialogs"] == []


def _shoot(page, name: str, selector: str | None = None):
    SHOTS.mkdir(parents=True, exist_ok=True)
    target = page.locator(selector) if selector else page
    target.screenshot(path=str(SHOTS / name), **({} if selector else {"full_page": False}))


def _keep(path: Path) -> None:
    """CI keeps the page beside its screenshots (not the documentation: a few MB each)."""
    if "docs" not in SHOTS.parts:
        shutil.copy(path, SHOTS / path.name)


def _hide_first_group(page, chart: str) -> None:
    """Click the first group's legend entry in an overview chart: its line leaves the plot."""
    selector = f'.overview .chart[data-chart="{chart}"]'
    before = page.eval_on_selector(selector, "el => el.querySelectorAll('.scatterlayer .trace')"
                                             ".length")
    page.locator(f"{selector} .legend .traces").first.click()
    page.wait_for_function(f"""() => document.querySelector('{selector}')
        .querySelectorAll('.scatterlayer .trace').length < {before}""", timeout=30_000)
    hidden = page.eval_on_selector(selector, "el => el.data.filter(t => t.visible === "
                                             "'legendonly').map(t => t.legendgroup)")
    assert hidden and set(hidden) == {"g0"}
    page.locator(f"{selector} .legend .traces").first.click()  # and back
    page.wait_for_function(f"""() => document.querySelector('{selector}')
        .querySelectorAll('.scatterlayer .trace').length == {before}""", timeout=30_000)


def test_report_page_in_chromium(browser, report_page):
    text = report_page.read_text()
    assert outputs.HTML_MARKER in text[:4096]
    assert len(text.encode()) < 5e6
    page, seen = _load(browser, report_page)
    # the overview: status, alerts, the groups' table worst first, fitting 1280 px
    assert page.inner_text("#status") == "ALERT"
    assert page.locator("#alerts li").count() >= 3
    widths = page.eval_on_selector("#summary .scroll", "s => [s.scrollWidth, s.clientWidth]")
    assert widths[0] <= widths[1]
    weights = page.eval_on_selector_all("#groups tbody tr td:nth-child(5)",
                                        "tds => tds.map(td => td.innerText)")
    assert all("e+" not in w and "," in w for w in weights)  # 24,804, not 2.48e+04
    assert "[" in page.inner_text("#groups tbody tr:first-child")  # an interval beside a value
    _shoot(page, "page-report.png")
    charts, group = _open(page, 0)
    kinds = [k for k, _, _ in charts]
    assert kinds == ["reliability", "smooth", "cumulative", "tce", "group-series"]
    assert all(drawn == "yes" and paths > 3 for _, drawn, paths in charts)
    page.locator(f"#group-{group}").scroll_into_view_if_needed()
    _shoot(page, "page-report-group.png", f"#group-{group}")
    # sorting by a column reorders the rows
    page.locator("#groups thead th", has_text="brier").click()
    values = page.eval_on_selector_all("#groups tbody tr", "trs => trs.map(tr => Number("
                                       "tr.cells[6].dataset.sort))")
    assert values == sorted(values, reverse=True)
    _hide_first_group(page, "series")
    page.emulate_media(media="print")
    assert page.locator("#open-all").is_hidden()
    pdf = page.pdf(format="A4")  # it prints: the overview, then the open group on its own page
    assert pdf[:5] == b"%PDF-" and len(pdf) > 50_000
    _clean(seen)
    page.close()
    _keep(report_page)


def test_monitor_page_in_chromium(browser, monitor_page):
    assert len(monitor_page.read_bytes()) < 5e6
    page, seen = _load(browser, monitor_page)
    assert page.inner_text("#status") == "ALERT"
    first = page.inner_text("#groups tbody tr:first-child")
    assert "v2" in first and "android" in first and "ALARM" in first  # the alarmed group first
    _shoot(page, "page-monitor.png")
    charts, group = _open(page, 0)
    assert [k for k, _, _ in charts] == ["evidence", "daily", "prepost", "maturity"]
    assert all(drawn == "yes" and paths > 3 for _, drawn, paths in charts)
    # the estimated change day is drawn on the evidence chart
    assert "estimated change 2026-11-" in page.inner_text(
        f'#group-{group} .chart[data-chart="evidence"]')
    _shoot(page, "page-monitor-group.png", f"#group-{group}")
    _hide_first_group(page, "evidence-all")
    _clean(seen)
    page.close()
    _keep(monitor_page)


def test_hostile_group_names_show_as_text(browser, hostile_page):
    text = hostile_page.read_text()
    # no markup from the data in the page's source: only the page's own script elements
    assert "<script>alert" not in text and "<img" not in text
    page, seen = _load(browser, hostile_page)
    names = page.eval_on_selector_all("#groups tbody button.open",
                                      "bs => bs.map(b => b.textContent)")
    assert sorted(names) == sorted(HOSTILE)
    assert page.title() == "<script>alert(2)</script> title"
    legend = page.eval_on_selector('.overview .chart[data-chart="series"] .legend',
                                   "g => g.textContent")
    for name in HOSTILE:
        assert f"g = {name}" in legend
    for row in range(3):
        charts, group = _open(page, row)
        assert all(drawn == "yes" for _, drawn, _ in charts)
        # the comparison with the baseline: one row per metric, each difference with its interval
        versus = page.locator(f'#group-{group} table[data-table="comparison"] tbody tr')
        assert versus.count() == 2
        assert all("[" in versus.nth(i).inner_text() for i in range(2))
    assert page.locator("img").count() == 0
    _clean(seen)
    page.close()


def test_hostile_group_names_on_the_monitor_page(browser, hostile_monitor_page):
    text = hostile_monitor_page.read_text()
    assert "<script>alert" not in text and "<img" not in text
    page, seen = _load(browser, hostile_monitor_page)
    names = page.eval_on_selector_all("#groups tbody button.open",
                                      "bs => bs.map(b => b.textContent)")
    assert sorted(names) == sorted(HOSTILE)
    legend = page.eval_on_selector('.overview .chart[data-chart="evidence-all"] .legend',
                                   "g => g.textContent")
    assert all(f"g = {name}" in legend for name in HOSTILE)
    assert page.inner_text("#groups tbody tr:first-child td:first-child") == HOSTILE[0]
    for row in range(3):
        charts, _ = _open(page, row)
        assert all(drawn == "yes" for _, drawn, _ in charts)
    assert page.locator("img").count() == 0
    _clean(seen)
    page.close()


def test_notebook_outputs_draw_with_one_copy_of_plotly(browser, hostile_page, tmp_path,
                                                       monkeypatch):
    """Two runs displayed in one notebook (``_repr_html_``): Plotly goes out with the first
    output only, and both draw."""
    rng = np.random.default_rng(2)
    df = pd.DataFrame({"p": rng.uniform(0.05, 0.95, 2000), "g": rng.choice(["a", "b"], 2000)})
    df["y"] = (rng.uniform(size=2000) < df["p"]).astype(int)
    config = scheduled.validate_config({
        "source": {"data": df, "score": "p", "label": "y", "by": "g"},
        "metrics": {"ece": {}, "smooth_ece": {}}})
    monkeypatch.setattr(html, "_sent", False)  # a new session
    runs = [scheduled.run_report(config, run_id=f"r{i}") for i in range(2)]
    outs = [run._repr_html_() for run in runs]
    assert "sqlcal-plotly\">" in outs[0] and "sqlcal-plotly\">" not in outs[1]
    assert all(outputs.HTML_MARKER not in o and "<html" not in o for o in outs)
    notebook = tmp_path / "notebook.html"
    notebook.write_text("<!DOCTYPE html><html><body>" + "".join(
        f'<div class="output">{o}</div>' for o in outs) + "</body></html>")
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(notebook.as_uri())
    for k in range(2):
        output = page.locator(".output").nth(k)
        output.locator("#groups tbody tr").first.locator("button.open").click()
    page.wait_for_function(f"() => ({DRAWN})([...document.querySelectorAll("
                           "'section.group:not([hidden]) .chart')])", timeout=120_000)
    drawn = page.eval_on_selector_all("section.group:not([hidden]) .chart",
                                      "els => els.map(e => e.dataset.drawn)")
    assert drawn == ["yes"] * 6 and errors == []  # reliability, smooth, cumulative, twice
    page.close()


def test_result_tables_stay_plain_frames():
    # the runs draw in notebooks; the metrics' results are pandas' own DataFrames, unchanged
    import sqlcal

    frame = sqlcal.ece(pd.DataFrame({"p": [0.2, 0.7], "y": [0, 1]}), score="p", label="y")
    assert type(frame) is pd.DataFrame
