"""The daily monitoring flow, as a platform team runs it: a snapshot once a day with the labels
known by then, then the change detector and the monitor, for a month (the detector once never
ran after daily snapshots, because a day whose labels stopped arriving before it matured was
never written again, and every detector test snapshotted once at a late date).

Oracles: the stream's own truth (the planted change's day and group), and numpy on the final raw
rows for the mature stored window. The monitoring guide's daily commands and examples, on the
demo stream, run as written in tests/test_doc_examples.py.
"""

from __future__ import annotations

import contextlib
import io
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
DAYS, CHANGE = 30, 18
#: labels arrive within 4 days; a day is final at age >= horizon + settle = 6 days
HORIZON, SETTLE = "5d", "1d"
#: the detector's reference: the first mature days, which only choose its bets
REFERENCE = 7


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
    """A month of daily snapshots, each with the labels known at 06:00 of its day: the first
    week from an empty store (days whose labels stopped arriving before they matured become
    mature by the next run's check, not by a rewrite), then, after the job was down a week,
    one catch-up run and the days around the change. (Every day's run costs about as much as
    the detector's whole month, so the quiet middle is skipped: no day's maturity there depends
    on a check.)"""
    start_cpu = time.process_time()
    df = stream()
    data, store = str(tmp_path / "w.duckdb"), str(tmp_path / "s.duckdb")
    with duckdb.connect(data) as con:
        con.register("df", df)
        con.execute("CREATE TABLE predictions AS SELECT * FROM df")
    toml = write_config(tmp_path, data, store, f"[detect]\nreference_days = {REFERENCE}\n")
    options = dict(table="predictions", score="p", label="y", weight="w", by="g", time="t",
                   label_time="lt", horizon=HORIZON, settle=SETTLE, store=store, bins=(),
                   ls_ece_sigma=(), smooth_grids=())
    change_day = DAY0 + pd.Timedelta(days=CHANGE)
    # the first week daily; down for a week; back two days before the change's day matures
    runs = [*range(2, 10), *range(CHANGE + 5, CHANGE + 13)]
    first_check = alarm_check = None
    for previous, k in zip([1, *runs], runs):
        at = morning(k)  # the labels known at 06:00 of day k; the last closed day is k - 2
        out = sqlcal.snapshot(data, as_of=at, end=DAY0 + pd.Timedelta(days=k - 2), **options)
        # every day up to the last closed one is stored, once, and rewritten only while its
        # labels change (at most the 5 days of the last 4 days' arrivals) and the new ones
        assert out["period_start"].max() == DAY0 + pd.Timedelta(days=min(k - 2, DAYS - 1))
        assert (out["status"] == "written").sum() <= 5 + k - previous
        try:
            found = sqlcal.detect(store, horizon=HORIZON, settle=SETTLE, at=at,
                                  reference_days=REFERENCE)
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
    # quiet on the days before the change matured, alarming within a week after, and checked
    assert alarm_check is not None and CHANGE + 7 <= alarm_check < runs[-1], alarm_check

    # the mature window equals the final raw rows of those days (numpy)
    last = morning(DAYS + 7)
    out = sqlcal.snapshot(data, as_of=last, **options)
    assert len(out) == DAYS
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
    # the commands as users run them: the daily snapshot finds nothing to write, the monitor
    # is quiet before the change and alarms after it, the last in a process of its own (the
    # store released by this one)
    from sqlcal.cli.commands import main

    with contextlib.redirect_stdout(io.StringIO()) as printed:
        assert main(["snapshot", "--config", toml, "--as-of", str(last)]) == 0
        assert main(["monitor", "--config", toml, "--at", str(morning(CHANGE + 6))]) == 0
    assert f"0 of {DAYS} periods written" in printed.getvalue()
    assert "0 alarms" in printed.getvalue()
    monitor_store.close(store)
    loud = sqlcal_command("monitor", "--config", toml, "--at", str(last))
    assert loud.returncode == 3, loud.stderr
    assert loud.stdout.count("ALARM") == 1 and "ALARM g=a" in loud.stdout
    cpu = time.process_time() - start_cpu
    print(f"daily loop of {len(runs) + 1} runs: {cpu:.1f} CPU s in this process, alarm on "
          f"day {alarm_check}")
