"""Maturity-adjusted windows (spec monitoring §C.4, E.4.3): ``sqlcal.stored(...,
maturity="adjusted")`` serves every metric the estimate of the eventual label sums, each immature
period's known positives divided by the maturity curve of their score bin at the period's age.

Oracle: brute-force numpy on the raw rows with simulated delays: the curve estimated from the
mature rows, each row's adjusted label y·1[delay < lag]/F̂_b(lag), and the metric's formula
(linear in the label) on those rows.
"""

from __future__ import annotations

import ibis
import numpy as np
import pandas as pd
import pytest

import sqlcal
from sqlcal.monitor import schema
from sqlcal.options import OptionError

DAY0 = pd.Timestamp("2026-10-01")
AS_OF = DAY0 + pd.Timedelta(days=20)
K, BINS, MATURE_AGE = 2**14, 8, 9.0
KW = dict(score="p", label="y", weight="w", by="g", time="t", label_time="lt", as_of=AS_OF,
          ls_ece_sigma=(), smooth_grids=(), horizon="8d", settle="1d")
VIEW = dict(maturity="adjusted", horizon="8d", settle="1d")


def stream(days: int = 20, per_day: int = 200, seed: int = 21) -> pd.DataFrame:
    """Two groups, integer weights, scores rounded to 4 decimals (so the levels are few),
    miscalibrated labels, delays exponential with a mean growing with the score."""
    rng = np.random.default_rng(seed)
    n = days * per_day
    p = np.round(rng.beta(2, 5, n), 4)
    y = (rng.random(n) < np.clip(1.1 * p, 0, 1)).astype(np.int64)
    t = DAY0 + pd.to_timedelta(np.repeat(np.arange(days), per_day) * 86400
                               + rng.integers(0, 86400, n), unit="s")
    delay = rng.exponential(0.5 + 5 * p, n)
    lt = pd.Series(t + pd.to_timedelta(np.round(delay * 86400), unit="s")).where(y == 1, pd.NaT)
    return pd.DataFrame({"p": p, "y": y, "w": rng.integers(1, 4, n).astype(float),
                         "g": rng.choice(["a", "b"], n), "t": pd.Series(t), "lt": lt})


def adjusted_rows(df: pd.DataFrame, first: pd.Timestamp, last: pd.Timestamp) -> pd.DataFrame:
    """The window's raw rows with ``y_hat``, the adjusted label (brute force)."""
    edges = list(schema.DELAYS)
    day = df.t.dt.floor("D")
    age = (AS_OF - (day + pd.Timedelta(days=1))).dt.total_seconds() / 86400
    known = (df.y == 1) & (df["lt"] <= AS_OF)
    delay = (df["lt"] - df.t).dt.total_seconds() / 86400
    cell = np.minimum(np.floor(df.p * K), K - 1).astype(int)
    old = age >= MATURE_AGE
    out = []
    for g, rows in df.groupby("g"):
        cohort = rows[old[rows.index]]
        W = cohort.w.groupby(cell[cohort.index]).sum().sort_index()
        before = W.cumsum() - W
        bin_start = pd.Series(np.minimum((before / W.sum() * BINS).astype(int), BINS - 1),
                              index=W.index)
        starts = bin_start.groupby(bin_start).apply(lambda s: s.index.min())
        c = cell[rows.index].to_numpy()
        b = starts.index.to_numpy()[np.maximum(np.searchsorted(starts.to_numpy(), c,
                                                               "right") - 1, 0)]
        pos = cohort[known[cohort.index]]
        pos_bin = bin_start.reindex(cell[pos.index]).to_numpy()
        a = age[rows.index].to_numpy()
        lag = np.array([np.inf if x >= MATURE_AGE else max([e for e in edges[1:] if e <= x],
                                                           default=0.0) for x in a])
        pos_delay, pos_w = delay[pos.index].to_numpy(), pos.w.to_numpy()
        F = {(k, e): pos_w[(pos_bin == k) & (pos_delay < e)].sum() / pos_w[pos_bin == k].sum()
             for k in range(BINS) for e in edges[1:]}
        y_hat = np.where(known[rows.index], 1.0, 0.0)
        d = delay[rows.index].to_numpy()
        for i in np.flatnonzero(np.isfinite(lag) & (lag > 0)):
            y_hat[i] = float(y_hat[i] == 1 and d[i] < lag[i]) / F[b[i], lag[i]]
        part = rows.assign(y_hat=y_hat, lag=lag)
        out.append(part[(part.lag > 0) & (part.t >= first)
                        & (part.t < last + pd.Timedelta(days=1))])
    return pd.concat(out)


def brute(rows: pd.DataFrame, bins: int = 16) -> pd.DataFrame:
    """Per group: Brier, calibration-in-the-large, log loss and ECE(bins) of the eventual
    labels, each linear in the label, with y replaced by y_hat."""
    out = {}
    for g, r in rows.groupby("g"):
        w, p, y = r.w.to_numpy(), r.p.to_numpy(), r.y_hat.to_numpy()
        W = w.sum()
        b = np.minimum(np.floor(p * bins), bins - 1)
        resid = pd.Series(w * (y - p)).groupby(b).sum()
        out[g] = {"n": len(r), "W": W, "brier": (w * (y - 2 * y * p + p * p)).sum() / W,
                  "citl": (w * p).sum() / W - (w * y).sum() / W,
                  "log_loss": -(w * (y * np.log(p) + (1 - y) * np.log1p(-p))).sum() / W,
                  "ece": resid.abs().sum() / W}
    return pd.DataFrame(out).T


@pytest.fixture(scope="module")
def store():
    df = stream()
    con = ibis.duckdb.connect()
    sqlcal.snapshot(df, store=con, levels=True, **KW)
    sqlcal.snapshot(df, store=con, prefix="lean_", **{**KW, "smooth_grids": (1000,)})
    return con, df


def test_every_metric_of_an_adjusted_window_equals_brute_force(store):
    con, df = store
    first, last = DAY0 + pd.Timedelta(days=6), DAY0 + pd.Timedelta(days=19)
    src = sqlcal.stored(con, start=first, end=last, **VIEW)
    rows = adjusted_rows(df, first, last)
    want = brute(rows)
    assert 0 < (rows.lag < np.inf).sum() < len(rows)  # mature and immature periods both
    got = {"brier": sqlcal.brier(src), "citl": sqlcal.calibration_in_the_large(src),
           "log_loss": sqlcal.log_loss(src), "ece": sqlcal.ece(src, bins=16)}
    for name, frame in got.items():
        frame = frame.set_index("g")
        for g in ("a", "b"):
            assert frame.loc[g, "n"] == want.loc[g, "n"], name
            assert frame.loc[g, "W"] == pytest.approx(want.loc[g, "W"], rel=1e-12), name
            assert frame.loc[g, name] == pytest.approx(want.loc[g, name], rel=1e-10), name
    # ECE at 15 bins (not unions of cells) and the log loss come from the adjusted levels
    ece15 = sqlcal.ece(src, bins=15).set_index("g")["ece"]
    for g in ("a", "b"):
        assert ece15[g] == pytest.approx(brute(rows, bins=15).loc[g, "ece"], rel=1e-10)
    # the adjusted estimate is not the naive one: labels still arriving lower the naive rate
    naive = sqlcal.calibration_in_the_large(sqlcal.stored(con, start=first, end=last,
                                                          maturity="all")).set_index("g")
    assert (naive["observed"] < got["citl"].set_index("g")["observed"] - 0.01).all()


def test_without_levels_the_cells_serve_the_window_and_the_rest_is_refused(store):
    con, df = store
    lean = dict(prefix="lean_")
    first, last = DAY0 + pd.Timedelta(days=10), DAY0 + pd.Timedelta(days=19)
    src = sqlcal.stored(con, **lean, start=first, end=last, **VIEW)
    want = brute(adjusted_rows(df, first, last))
    for name, frame in (("brier", sqlcal.brier(src)), ("ece", sqlcal.ece(src, bins=16))):
        np.testing.assert_allclose(frame.set_index("g")[name], want[name].astype(float),
                                   rtol=1e-10, err_msg=name)
    with_levels = sqlcal.stored(con, start=first, end=last, **VIEW)
    for metric in (lambda s: sqlcal.cutoff_error(s, method="grid"),
                   lambda s: sqlcal.reliability(s, bins=8),
                   lambda s: sqlcal.smooth_ece(s, sigma=0.05)):  # histogram vs levels
        a, b = metric(src), metric(with_levels)
        num = [c for c in a.columns if a[c].dtype.kind == "f"]
        np.testing.assert_allclose(a[num].to_numpy(float), b[num].to_numpy(float),
                                   rtol=1e-9, atol=1e-12)
    for metric, named in ((sqlcal.log_loss, "log-loss sums"),
                          (lambda s: sqlcal.ece(s, bins=15), "bins=15"),
                          (sqlcal.ls_ece, "logit grid")):
        with pytest.raises(OptionError, match=rf"maturity='adjusted': .*{named}.*levels=True"):
            metric(sqlcal.stored(con, **lean, start=first, end=last, **VIEW))
    from sqlcal.monitor.stored import daily
    with pytest.raises(OptionError, match="maturity='adjusted' estimates a window"):
        daily(con, "totals", prefix="lean_", maturity="adjusted")


def test_the_adjusted_ratio_agrees_with_the_maturity_module_and_mature_windows_are_unchanged(
        store):
    from sqlcal.monitor.maturity import adjusted

    con, df = store
    first, last = DAY0 + pd.Timedelta(days=10), DAY0 + pd.Timedelta(days=19)
    citl = sqlcal.calibration_in_the_large(sqlcal.stored(con, start=first, end=last, **VIEW))
    ratio = adjusted(con, start=first, end=last, bins=BINS, horizon="8d", settle="1d")
    np.testing.assert_allclose(citl["oe_ratio"], ratio["oe_adjusted"], rtol=1e-12)
    old = dict(start=DAY0, end=DAY0 + pd.Timedelta(days=9), horizon="8d", settle="1d")
    for metric in (sqlcal.log_loss, lambda s: sqlcal.ece(s, bins=15)):
        adjusted_view = metric(sqlcal.stored(con, maturity="adjusted", **old))
        assert set(adjusted_view["maturity"]) == {"adjusted"}
        assert adjusted_view["window_exact"].all()  # no immature period: nothing estimated
        pd.testing.assert_frame_equal(
            adjusted_view.drop(columns="maturity"),
            metric(sqlcal.stored(con, maturity="mature", **old)).drop(columns="maturity"),
            rtol=1e-12)
