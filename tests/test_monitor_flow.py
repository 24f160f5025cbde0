"""The daily monitoring flow, as a platform team runs it: a snapshot once a day with the labels
known by then, then the change detector and the monitor, for months (issue: the detector never
ran after daily snapshots, because a day whose labels stopped arriving before it matured was
never written again, and every detector test snapshotted once at a late date).

Oracles: the stream's own truth (the planted change's day and group), and numpy on the final raw
rows for the mature stored window.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import duckdb
import numpy as np
import pandas as pd
import pytest

import sqlcal
from sqlcal.monitor import store as monitor_store

DAY0 = pd.Timestamp("2026-03-02")
DAYS, CHANGE = 80, 52
#: labels arrive within 4 days; a day is final at age >= horizon + settle = 6 days
HORIZON, SETTLE = "5d", "1d"


def stream(days: int = DAYS, per_day: int = 300, change: int = CHANGE, shift: float = 1.0,
           seed: int = 0) -> pd.DataFrame:
    """Two groups, ``per_day`` rows a day each, Beta(2, 6) scores; group "a"'s log-odds up by
    ``shift`` from day ``change``; each positive's label arrives 0-4 days after its prediction;
    whole-number weights."""
    rng = np.random.default_rng(seed)
    day = np.repeat(np.arange(days), 2 * per_day)
    n = len(day)
    g = np.tile(np.repeat(["a", "b"], per_day), days)
    p = rng.beta(2, 6, n)
    z = np.log(p / (1 - p)) + np.where((g == "a") & (day >= change), shift, 0.0)
    y = (rng.random(n) < 1 / (1 + np.exp(-z))).astype(np.int64)
    t = DAY0 + pd.to_timedelta(day * 86400 + rng.integers(0, 86400, n), unit="s")
    lt = pd.Series(t + pd.to_timedelta(np.round(rng.uniform(0, 4, n) * 86400), unit="s"))
    return pd.DataFrame({"p": p, "y": y, "w": rng.integers(1, 3, n).astype(float), "g": g,
                         "t": pd.Series(t), "lt": lt.where(y == 1)})


def write_config(folder, data: str, store: str, extra: str = "") -> str:
    path = os.path.join(folder, "monitor.toml")
    with open(path, "w") as f:
        f.write(f"""[source]
data = "{data}"
table = "predictions"
score = "p"
label = "y"
weight = "w"
by = ["g"]
time = "t"

[labels]
label_time = "lt"
horizon = "{HORIZON}"
settle = "{SETTLE}"

[snapshot]
store = "{store}"
bins = []
ls_ece_sigma = []
smooth_grids = []
{extra}""")
    return path


def morning(k: int) -> pd.Timestamp:
    """The daily job's time: 06:00 on day k (day k - 2 is then the last closed day)."""
    return DAY0 + pd.Timedelta(days=k, hours=6)


def sqlcal_command(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.dirname(sqlcal.__file__)), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "sqlcal.cli", *args], capture_output=True,
                          text=True, env=env, timeout=300)


def test_the_daily_loop_matures_days_runs_the_detector_and_alarms_after_the_change(tmp_path):
    start_cpu = time.process_time()
    df = stream()
    data, store = str(tmp_path / "w.duckdb"), str(tmp_path / "s.duckdb")
    with duckdb.connect(data) as con:
        con.register("df", df)
        con.execute("CREATE TABLE predictions AS SELECT * FROM df")
    toml = write_config(tmp_path, data, store)
    options = dict(table="predictions", score="p", label="y", weight="w", by="g", time="t",
                   label_time="lt", horizon=HORIZON, settle=SETTLE, store=store, bins=(),
                   ls_ece_sigma=(), smooth_grids=())
    change_day = DAY0 + pd.Timedelta(days=CHANGE)
    first_check = alarm_check = None
    for k in range(2, DAYS + 8):
        at = morning(k)  # the labels known at 06:00 of day k; the last closed day is k - 2
        out = sqlcal.snapshot(data, as_of=at, end=DAY0 + pd.Timedelta(days=k - 2), **options)
        # every day up to the last closed one is stored, once, and rewritten only while its
        # labels change (at most the days of the last 4 days' arrivals)
        assert out["period_start"].max() == DAY0 + pd.Timedelta(days=min(k - 2, DAYS - 1))
        assert (out["status"] == "written").sum() <= 6
        try:
            found = sqlcal.detect(store, maturity_horizon=HORIZON, settle=SETTLE, at=at)
        except sqlcal.InvalidInputError as e:
            # only before any day is final: day d is final at the start of day d + 7
            assert "no mature day" in str(e) and k < 7, (k, e)
            continue
        if first_check is None:
            first_check = k
        mature_days = found.path["day"].nunique()
        assert mature_days == min(k - 6, DAYS), (k, mature_days)  # days 0 .. k - 7, all
        if not len(found.alarms):
            continue
        # quiet before the change; then group "a" only, the change found near its day
        assert found.path["day"].max() >= change_day, (k, found.alarms)
        assert found.alarms["g"].tolist() == ["a"]
        alarm = found.alarms.iloc[0]
        assert abs((alarm["change_day"] - change_day).days) <= 3
        if alarm_check is None:
            alarm_check = k
            monday = found.alarms.copy()
        else:  # a later check keeps the alarm where it was first raised
            pd.testing.assert_frame_equal(found.alarms[["g", "alarm_day", "change_day"]],
                                          monday[["g", "alarm_day", "change_day"]])
    assert first_check == 7
    assert alarm_check is not None and alarm_check <= CHANGE + 7 + 14, alarm_check

    # the mature window equals the final raw rows of those days (numpy)
    last = morning(DAYS + 7)
    src = sqlcal.stored(store, maturity="mature", horizon=HORIZON, settle=SETTLE, at=last)
    final = df[df["lt"].isna() | (df["lt"] <= last)]
    assert final["y"].sum() == df["y"].sum()  # every label has arrived by then
    brier = sqlcal.brier(src).set_index("g")
    for g, part in df.groupby("g"):
        assert brier.loc[g, "n"] == len(part) and brier.loc[g, "W"] == part["w"].sum()
        want = np.sum(part["w"] * (part["y"] - part["p"]) ** 2) / part["w"].sum()
        assert brier.loc[g, "brier"] == pytest.approx(want, rel=1e-12)
        ece = sqlcal.ece(src, bins=16).set_index("g").loc[g, "ece"]
        b = np.minimum(np.floor(part["p"] * 16), 15)
        resid = (part["w"] * (part["y"] - part["p"])).groupby(b).sum()
        assert ece == pytest.approx(np.abs(resid).sum() / part["w"].sum(), rel=1e-12)
    # the commands as users run them, in processes of their own (the store released by this
    # one): the daily snapshot, then the monitor before the change and after it
    monitor_store.close(store)
    again = sqlcal_command("snapshot", "--config", toml, "--as-of", str(last))
    assert again.returncode == 0, again.stderr
    assert f"0 of {DAYS} periods written" in again.stdout
    quiet = sqlcal_command("monitor", "--config", toml, "--at", str(morning(CHANGE + 7)))
    assert quiet.returncode == 0, quiet.stderr
    assert "0 alarms" in quiet.stdout
    loud = sqlcal_command("monitor", "--config", toml, "--at", str(last))
    assert loud.returncode == 3, loud.stderr
    assert loud.stdout.count("ALARM") == 1 and "ALARM g=a" in loud.stdout
    cpu = time.process_time() - start_cpu
    print(f"daily loop of {DAYS + 6} runs: {cpu:.1f} CPU s in this process")


def _page_blocks(page: str) -> list[tuple[str, str]]:
    """The fenced blocks of a documentation page up to its first second-level heading (the
    monitoring guide's daily commands), in order: (language, text)."""
    import re
    from pathlib import Path

    text = (Path(sqlcal.__file__).parents[1] / page).read_text()
    first = text.index("\n## ")
    return re.findall(r"```(\w*)\n(.*?)```", text[:first], flags=re.S)


def test_the_documented_daily_commands_run_as_written(tmp_path):
    """The monitoring guide's daily commands on the demo, parsed out of the page and run as
    written, each in a process of its own, in a fresh folder holding examples/monitor.toml: each
    succeeds (monitor: exit 3, the demo's planted break), and every output line the page shows
    is printed. (tests/test_doc_examples.py runs the page's Python examples.)"""
    import shutil
    from pathlib import Path

    blocks = _page_blocks("docs/guide/monitoring.md")
    commands = [line for lang, text in blocks if lang == "bash"
                for line in text.splitlines() if line.startswith("sqlcal ")]
    shown = [line for lang, text in blocks if lang == "text"
             for line in text.splitlines() if line.strip() not in ("", "...")]
    assert [c.split()[1] for c in commands] == ["demo", "snapshot", "monitor"]
    (tmp_path / "examples").mkdir()
    shutil.copy(Path(sqlcal.__file__).parents[1] / "examples" / "monitor.toml",
                tmp_path / "examples")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.dirname(sqlcal.__file__)), os.environ.get("PYTHONPATH", "")]))
    printed = []
    for command in commands:
        done = subprocess.run(command, shell=True, cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=600)
        want = 3 if command.split()[1] == "monitor" else 0
        assert done.returncode == want, (command, done.stdout, done.stderr)
        printed += done.stdout.splitlines()
    missing = [line for line in shown if line not in printed]
    assert not missing, missing
    store = str(tmp_path / "monitor.duckdb")
    found = sqlcal.detect(store, maturity_horizon="2d", reference_days=14)
    assert found.alarms[["model", "segment"]].values.tolist() == [["v2", "android"]]
    monitor_store.close(store)
