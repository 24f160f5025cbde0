"""The detector's reference null (``null="reference"``: as calibrated as the reference window)
and the change-kind split (:func:`sqlcal.monitor.detect.split_change`).

Oracles: simulated streams with known truth (the reference ratios' coverage, false alarms at
the edge of the null, alarms of a model that is stably off); the detector recomputed from the
raw rows' per-day, per-bin sums; hand-derived splits of noise-free calibration curves.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

import sqlcal
from sqlcal.monitor import detect
from sqlcal.options import OptionError

LEVELS = stats.beta(2, 8).ppf((np.arange(16) + 0.5) / 16)
BIN_OF_LEVEL = np.arange(16) // 2
P_MAX = np.array([LEVELS[BIN_OF_LEVEL == b].max() for b in range(8)])


def logit(p):
    return np.log(p / (1 - p))


def expit(z):
    return 1 / (1 + np.exp(-z))


def sums(rng, streams, days, q_of_day, n=2000):
    """Per-day, per-bin (W, swy, swp, swpp) with n // 16 rows per score level a day."""
    counts = np.full((days, 16), n // 16)
    q = np.stack([q_of_day(t)(LEVELS) for t in range(days)])
    k = rng.binomial(np.broadcast_to(counts, (streams, days, 16)), np.clip(q, 0, 1))
    out = []
    for level in (counts, k, counts * LEVELS, counts * LEVELS ** 2):
        level = np.broadcast_to(level, (streams, days, 16))
        out.append(np.stack([level[..., BIN_OF_LEVEL == b].sum(-1) for b in range(8)], -1)
                   .astype(float))
    return out


def reference_run(W, swy, swp, swpp, first=28, alpha=0.05):
    r, u = detect.reference_ratios(W[..., :first, :].sum(-2), swy[..., :first, :].sum(-2),
                                   swp[..., :first, :].sum(-2), P_MAX, alpha=alpha / 2)
    return detect.detector(W, swy, swp, swpp, alpha=alpha / 2, first=first,
                           share=r[..., None, :], share_error=u[..., None, :])


def test_reference_ratio_bounds_cover_the_true_ratio():
    """All B bins' intervals hold the true ratio at once in >= 1 - alpha of repetitions, from
    base rates of 0.1% (Hoeffding's range-1 bound alone would be 10x wider there) to 60%."""
    rng = np.random.default_rng(0)
    n, p = np.array([5000.0, 5000, 800, 300]), np.array([0.001, 0.02, 0.2, 0.5])
    r = np.array([1.5, 0.8, 1.3, 1.2])
    Y = rng.binomial(n.astype(int), r * p, size=(100_000, 4)).astype(float)
    ratio, bound = detect.reference_ratios(np.broadcast_to(n, Y.shape), Y,
                                           np.broadcast_to(n * p, Y.shape), np.full(4, 0.6),
                                           alpha=0.05)
    miss = np.mean((np.abs(ratio - r) > bound).any(axis=1))
    assert miss <= 0.05
    hoeffding = np.sqrt(n * np.log(2 * 4 / 0.05) / 2) / (n * p)
    assert np.median(bound[:, 0]) < 0.2 * hoeffding[0]


def test_reference_null_stays_quiet_on_a_stably_miscalibrated_model():
    """q = 1.3 p throughout (30% beyond the tolerance): null='calibrated' alarms in every year;
    at the edge of the reference null (q = 1.1 · 1.3 p after the reference days) at most 5% of
    200 years alarm, and the one-sided 99% Clopper-Pearson bound of the share is <= 0.07."""
    rng = np.random.default_rng(1)
    stable = sums(rng, 100, 365, lambda t: (lambda p: 1.3 * p))
    assert (detect.detector(*stable)["alarm_day"] >= 0).all()
    assert (reference_run(*stable)["alarm_day"] < 0).all()
    edge = sums(rng, 200, 365, lambda t: (lambda p: 1.3 * p) if t < 28 else (lambda p: 1.43 * p))
    alarmed = int((reference_run(*edge)["alarm_day"] >= 0).sum())
    assert alarmed / 200 <= 0.05
    assert stats.beta.ppf(0.99, alarmed + 1, 200 - alarmed) <= 0.07


def test_reference_null_sees_a_change_from_the_reference():
    """From q = 1.3 p, the log-odds up by 0.6 on day 100: alarmed after the change in >= 90%
    of 200 streams, never before."""
    rng = np.random.default_rng(2)
    s = sums(rng, 200, 130, lambda t: (lambda p: 1.3 * p) if t < 100
             else (lambda p: expit(logit(1.3 * p) + 0.6)))
    alarm = reference_run(*s)["alarm_day"]
    assert not ((alarm >= 0) & (alarm < 100)).any()
    assert np.mean(alarm >= 100) >= 0.9


def _stream(seed=11, days=50, per_day=1200, change=35):
    rng = np.random.default_rng(seed)
    n = days * per_day
    day = rng.integers(0, days, n)
    p = rng.beta(2, 8, n)
    q = np.clip(1.3 * p, 0, 0.999)
    q = np.where(day >= change, expit(logit(q) + 0.7), q)
    t = pd.Timestamp("2026-06-01") + pd.to_timedelta(day * 86400 + rng.integers(0, 86400, n), "s")
    return pd.DataFrame({"p": p, "y": (rng.random(n) < q).astype(int),
                         "w": rng.integers(1, 3, n).astype(float), "t": t, "day": day})


def test_detect_with_the_reference_null_from_the_store(tmp_path):
    df = _stream()
    store = str(tmp_path / "store.duckdb")
    sqlcal.snapshot(df.drop(columns="day"), score="p", label="y", weight="w", time="t",
                    store=store, as_of="2026-09-30", bins=(), ls_ece_sigma=(), smooth_grids=())
    calibrated = detect.detect(store)
    assert calibrated.alarms["alarm_day"].iloc[0] < pd.Timestamp("2026-07-06")  # before day 35
    found = detect.detect(store, null="reference")
    assert found.info["null"] == "reference"
    # the oracle: per-day, per-bin sums of the raw rows, ratios from the reference days' rows
    K = 2 ** 14
    cell = np.minimum(np.floor(df["p"].to_numpy() * K), K - 1).astype(int)
    ref = df["day"].to_numpy() < 28
    edges = detect.bet_edges(pd.Series(df["w"].to_numpy()[ref]).groupby(cell[ref]).sum(), 8, K)
    b = np.searchsorted(edges, cell, side="right") - 1
    w, y, p = (df[c].to_numpy(float) for c in ("w", "y", "p"))
    s = np.zeros((4, 50, 8))
    for i, x in enumerate((w, w * y, w * p, w * p * p)):
        np.add.at(s[i], (df["day"].to_numpy(), b), x)
    r, u = detect.reference_ratios(*(np.bincount(b[ref], x[ref], 8) for x in (w, w * y, w * p)),
                                   edges[1:] / K, alpha=0.025)
    want = detect.detector(*s, alpha=0.025, first=28, share=r, share_error=u)
    np.testing.assert_allclose(found.path["log_M"], want["log_M"], rtol=1e-12, atol=1e-12)
    assert found.threshold == pytest.approx(np.log(365 / 0.025))
    alarm = found.alarms.iloc[0]
    assert pd.Timestamp("2026-07-06") <= alarm["alarm_day"] <= pd.Timestamp("2026-07-20")
    with pytest.raises(OptionError, match="null"):
        detect.detect(store, null="stable")
    with pytest.raises(OptionError, match="null='reference' with lag"):
        detect.detect(store, null="reference", lag="lag:1d")


# -- the change-kind split ------------------------------------------------------------------------


def _cells(q_of_p, n=10**6):
    p = np.linspace(0.02, 0.6, 32)
    return pd.DataFrame({"cell": np.arange(32), "W": float(n), "swp": n * p, "swy": n * q_of_p(p)})


@pytest.mark.parametrize("kind, curve", [
    ("intercept", lambda p: expit(logit(p) + 0.4)),
    ("slope", lambda p: expit(0.7 * logit(p) - 0.2)),  # a tilt about the scores' middle
    ("shape", lambda p: p + 0.04 * np.exp(-((p - 0.3) / 0.03) ** 2)),
])
def test_split_change_names_noise_free_changes(kind, curve):
    pre = _cells(lambda p: p)
    post = _cells(curve)
    d = detect.split_change(pre, post)
    assert d["kind"] == kind
    assert sum(d[f"share_{k}"] for k in detect.KINDS) == pytest.approx(1.0, rel=1e-12)
    if kind == "intercept":  # a pure shift: the line is flat at 0.4 up to the 1/2 smoothing
        assert d["share_intercept"] > 0.999 and d["shift"] == pytest.approx(0.4, abs=1e-3)
    if kind == "slope":  # δ = -0.3 z - 0.2 exactly on the log-odds: the line fits it
        assert d["share_shape"] < 1e-3 and d["tilt"] == pytest.approx(-0.3, abs=2e-3)


def test_split_change_calls_a_bump_shape_more_often_than_the_nested_terms():
    """A bump over part of the scores (spec's shape change), windows fixed at 28 days before and
    14 days after the change, 2 000 rows a day: the robust split names it shape more often than
    the nested log-score terms do (bench_detector.py measures both at the alarms)."""
    rng = np.random.default_rng(4)
    levels = stats.beta(2, 8).ppf((np.arange(64) + 0.5) / 64)
    bump = levels + 0.08 * np.exp(-((levels - 0.3) / 0.08) ** 2)
    robust = nested = 0
    for _ in range(40):
        W_pre, W_post = np.full(64, 28 * 2000 / 64), np.full(64, 14 * 2000 / 64)
        Y_pre = rng.binomial(W_pre.astype(int), levels).astype(float)
        Y_post = rng.binomial(W_post.astype(int), bump).astype(float)
        frames = [pd.DataFrame({"cell": np.arange(64), "W": W, "swy": Y, "swp": W * levels})
                  for W, Y in ((W_pre, Y_pre), (W_post, Y_post))]
        robust += detect.split_change(*frames)["kind"] == "shape"
        terms = [detect.split_mcb(W, Y, levels) for W, Y in ((W_pre, Y_pre), (W_post, Y_post))]
        d = {k: terms[1][k] - terms[0][k] for k in detect.KINDS}
        nested += max(detect.KINDS, key=d.get) == "shape"
    assert robust > nested
