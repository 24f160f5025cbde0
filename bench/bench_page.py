"""Benchmark: the HTML page of a report and of a monitor run for 100 groups and 60 days, its size
and how long headless Chromium takes to open it (not a timed test: the machine is shared).

Run from the repository root::

    nice -n 5 python bench/bench_page.py                 # 100 groups, 60 days (a few minutes)
    python bench/bench_page.py --groups 10 --days 14      # a smoke run

Data. ``--groups`` groups × ``--days`` days × ``--rows`` predictions a group-day (uniform scores; a
tenth of the groups under-predict), in memory. The report runs the example configuration's
metrics (examples/report.toml) with smooth ECE added and a series per day of ECE and the cutoff
error; the monitor page comes from ``sqlcal.snapshot`` of the same rows into an in-memory store,
the detector and the default windows (the last third of the days of one group shifted, so that
one group alarms).

Measurement. Size: the file's bytes. Opening: Debian's Chromium (``/usr/bin/chromium``) driven
by Playwright, a freshly launched browser for each opening (cold: as a page attached to an
e-mail opens), loading the file from ``file://``; reported are the
median over ``--reps`` (5, the three pages opened in turn in each) of the time to the ``load`` event (the page and its tables readable),
to Plotly ready (inflated and evaluated, from the navigation's start), to the overview chart
drawn, and to a group's diagrams drawn after a click on its row. The yardstick, on the first
line: a page holding nothing but ``plotly.min.js`` in a plain script, timed to its ``load``
event (Plotly evaluated): what any page that inlines Plotly costs on the same machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlcal import outputs  # noqa: E402
from sqlcal.reporting import html, scheduled  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run",
        "--disable-dev-shm-usage"]
DRAWN = "els => els.length > 0 && els.every(e => e.dataset.drawn === 'yes')"


def rows(groups: int, days: int, per_day: int, seed: int = 1) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    n = groups * days * per_day
    g = np.repeat(np.arange(groups), days * per_day)
    day = np.tile(np.repeat(np.arange(days), per_day), groups)
    p = rng.uniform(0.02, 0.98, n)
    truth = np.where(g % 10 == 0, np.minimum(p * 1.15, 1.0), p)
    # one group's calibration shifts for the last third of the days: the detector's alarm
    truth = np.where((g == 1) & (day >= days * 2 // 3), np.minimum(p * 1.3, 1.0), truth)
    start = pd.Timestamp("2026-09-01")
    return pd.DataFrame({
        "group": [f"g{k:03d}" for k in g], "p": p,
        "y": (rng.uniform(size=n) < truth).astype(np.int8),
        "day": (start + pd.to_timedelta(day, "D")).date,
        "t": start + pd.to_timedelta(day, "D") + pd.to_timedelta(rng.integers(0, 86399, n), "s"),
    })


def report_page(df: pd.DataFrame, folder: Path) -> tuple[Path, float]:
    config = scheduled.validate_config({
        "source": {"data": df.drop(columns="t"), "score": "p", "label": "y", "by": "group"},
        "metrics": {"ece": {"bins": 15}, "brier": {}, "log_loss": {},
                    "calibration_in_the_large": {}, "spiegelhalter": {},
                    "hosmer_lemeshow": {"bins": 10}, "cutoff_error": {"confidence": 0.9},
                    "kuiper": {}, "smooth_ece": {}},
        "alerts": [{"metric": "kuiper", "column": "p_value", "below": 0.001}],
        "time": {"key": "day", "metrics": ["ece", "cutoff_error"]},
        "report": {"order_by": "cutoff_error"},
        "output": {"html": str(folder / "report.html")}})
    begin = time.perf_counter()
    run = scheduled.run_report(config, run_id="bench")
    path = folder / "report.html"
    outputs.write_text(path, "html", html.render(run))
    return path, time.perf_counter() - begin


def monitor_page(df: pd.DataFrame, folder: Path) -> tuple[Path, float]:
    import sqlcal
    from sqlcal.monitor import detect
    from sqlcal.monitor.monitor import MonitorRun
    from sqlcal.reporting import monitoring

    store = str(folder / "store.duckdb")
    last = pd.Timestamp(df["t"].max()).normalize() + pd.Timedelta(days=3)
    begin = time.perf_counter()
    sqlcal.snapshot(df.drop(columns="day"), score="p", label="y", by="group", time="t",
                    store=store, as_of=str(last.date()), bins=(), ls_ece_sigma=(),
                    smooth_grids=())
    # labels arrive at once here: a day is final a day after it ends
    found = detect.detect(store, reference_days=14, horizon="1d", settle="1d")
    run = MonitorRun(detection=found, at=None, status="alert" if len(found.alarms) else "ok")
    run.windows = monitoring.windows(store, horizon="1d", settle="1d")
    path = folder / "monitor.html"
    outputs.write_text(path, "html", html.render_monitor(run))
    return path, time.perf_counter() - begin


def plotly_alone(folder: Path) -> Path:
    """The yardstick: a page holding nothing but plotly.min.js, uncompressed, in a script."""
    from importlib.resources import files

    script = files("plotly").joinpath("package_data/plotly.min.js").read_text("utf-8")
    path = folder / "plotly-alone.html"
    path.write_text("<!DOCTYPE html><html><head><meta charset='utf-8'></head><body><script>"
                    + script + "</script></body></html>")
    return path


def open_times(pages: dict[str, Path], reps: int) -> dict:
    """Each page opened ``reps`` times, the pages in turn within a repetition (the machine's
    load drifts: interleaving keeps the comparison fair); the medians."""
    from playwright.sync_api import sync_playwright

    out = {name: {"load": [], "plotly": [], "overview": [], "group": []} for name in pages}
    with sync_playwright() as p:
        for _ in range(reps):
            for name, path in pages.items():
                # a browser of its own for each opening: V8 keeps compiled scripts in memory,
                # which would flatter a second opening of the same script
                browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
                page = browser.new_page(viewport={"width": 1280, "height": 900})
                begin = time.perf_counter()
                page.goto(path.as_uri(), wait_until="load")
                out[name]["load"].append(time.perf_counter() - begin)
                if name == "alone":  # Plotly is evaluated by the load event
                    out[name]["plotly"].append(page.evaluate(
                        "() => window.Plotly ? performance.now() / 1000 : NaN"))
                    browser.close()
                    continue
                # Plotly ready (inflated and evaluated), seconds from the navigation's start
                page.evaluate("async () => { await window.__sqlcalPlotly; }")
                out[name]["plotly"].append(page.evaluate(
                    "() => performance.getEntriesByName('sqlcal:plotly')[0].startTime / 1000"))
                page.wait_for_function(f"() => ({DRAWN})([...document.querySelectorAll("
                                       "'.overview .chart')])", timeout=120_000)
                out[name]["overview"].append(time.perf_counter() - begin)
                click = time.perf_counter()
                page.locator("#groups tbody tr").first.locator("button.open").click()
                page.wait_for_function(f"() => ({DRAWN})([...document.querySelectorAll("
                                       "'section.group:not([hidden]) .chart')])",
                                       timeout=120_000)
                out[name]["group"].append(time.perf_counter() - click)
                browser.close()
    return {name: {k: statistics.median(v) if v else float("nan") for k, v in times.items()}
            for name, times in out.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=100)
    parser.add_argument("--days", type=int, default=60)
    parser.add_argument("--rows", type=int, default=50, help="predictions a group-day")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--only", choices=("report", "monitor"))
    args = parser.parse_args()
    df = rows(args.groups, args.days, args.rows)
    print(f"{args.groups} groups x {args.days} days x {args.rows} rows = {len(df):,} rows; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"{'page':20} {'MB':>6} {'build s':>8} {'load s':>7} {'plotly s':>9} "
          f"{'overview s':>11} {'group s':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        pages, built = {"alone": plotly_alone(Path(tmp))}, {"alone": float("nan")}
        for name, build in (("report", report_page), ("monitor", monitor_page)):
            if args.only and name != args.only:
                continue
            pages[name], built[name] = build(df, Path(tmp))
        times = open_times(pages, args.reps)
        for name, path in pages.items():
            t = times[name]
            shown = "plotly.min.js alone" if name == "alone" else name
            print(f"{shown:20} {path.stat().st_size / 1e6:6.2f} {built[name]:8.1f} "
                  f"{t['load']:7.2f} {t['plotly']:9.2f} {t['overview']:11.2f} "
                  f"{t['group']:8.2f}", flush=True)


if __name__ == "__main__":
    main()
