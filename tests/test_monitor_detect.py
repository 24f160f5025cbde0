"""The e-detector (spec monitoring §D, §E.3, §E.5).

Oracles: a brute-force computation on raw simulated rows (per-row log factors, bets computed
from the rows of the previous days, the CUSUM as max_j Σ_{s=j}^t log e_s in O(T²)); and simulated
streams with known truth (the null's false-alarm share over a year, planted changes' delays).

The simulations draw the per-day, per-bet-bin sufficient sums directly: scores on 16 fixed levels
(2 per bet bin, the Beta(2, 8) quantiles), a fixed count per level (the detector conditions on
scores) and binomial positives per level, so 1 000 years of daily checks take about a second.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from sqlcal.monitor import detect

LEVELS = stats.beta(2, 8).ppf((np.arange(16) + 0.5) / 16)
BIN_OF_LEVEL = np.arange(16) // 2
TOL = (0.0, 0.10)


def logit(p):
    return np.log(p / (1 - p))


def expit(z):
    return 1 / (1 + np.exp(-z))


def simulate(rng, streams: int, days: int, q_before, q_after=None, change: int | None = None,
             n: int = 2000, counts_after=None, share=None, per_level=False):
    """Per-day, per-bin sums (W, swy, swp, swpp), each (streams, days, 8). ``q_*`` map the levels'
    scores to the true positive rate; ``counts_after`` replaces the per-level counts from
    ``change`` on (a shift of the score distribution); ``share(day)`` thins the positives (the
    share known at a lag)."""
    counts = np.full((days, 16), n // 16)
    q = np.broadcast_to(q_before(LEVELS), (days, 16)).copy()
    if change is not None:
        if q_after is not None:
            q[change:] = q_after(LEVELS)
        if counts_after is not None:
            counts[change:] = counts_after
    k = rng.binomial(np.broadcast_to(counts, (streams, days, 16)), q)
    if share is not None:
        k = rng.binomial(k, np.asarray([share(t) for t in range(days)])[None, :, None])
    out = []
    for level_sums in (counts, k, counts * LEVELS, counts * LEVELS ** 2):
        level_sums = np.broadcast_to(level_sums, (streams, days, 16))
        out.append(np.stack([level_sums[..., BIN_OF_LEVEL == b].sum(-1) for b in range(8)], -1)
                   .astype(float))
    return (out, counts, k) if per_level else out


def false_alarm_share(alarm_day):
    alarmed = int((alarm_day >= 0).sum())
    upper = stats.beta.ppf(0.99, alarmed + 1, len(alarm_day) - alarmed)  # one-sided 99% CP
    return alarmed / len(alarm_day), upper


# -- the recursion against brute force on raw rows --------------------------------------------


def _brute_force(days, rows, edges, window, tol, kappa=0.5, cap=1.0):
    """log e_t from each row's factor and log M_t = max_j Σ_{s=j}^t log e_s."""
    a_tol, r_tol = tol
    T = len(days)
    log_e = np.zeros(T)
    for t in range(T):
        p, y, w = rows[t]
        b = np.searchsorted(edges, p, side="right") - 1
        lam = np.zeros(len(edges) - 1)
        if t >= window:
            for j in range(len(edges) - 1):
                num = den = spread = 0.0
                for s in range(t - window, t):
                    ps, ys, ws = rows[s]
                    sel = (np.searchsorted(edges, ps, side="right") - 1) == j
                    eps = a_tol + r_tol * ps[sel]
                    num += np.sum(ws[sel] * (ys[sel] - ps[sel]))
                    den += np.sum(ws[sel] * eps)
                    spread += np.sum(ws[sel] * (ps[sel] * (1 - ps[sel]) + eps + 4 * eps ** 2))
                W = sum(np.sum(rows[s][2][(np.searchsorted(edges, rows[s][0], side="right") - 1)
                                          == j]) for s in range(t - window, t))
                if W > 0:
                    excess = np.sign(num) * max(abs(num) - den, 0.0) / W
                    lam[j] = np.clip(kappa * np.sign(excess)
                                     * np.log1p(abs(excess) / (spread / W)), -cap, cap)
        eps = a_tol + r_tol * p
        lr = lam[b]
        factor = (lr * (y - p) - abs(lr) * eps
                  - (np.exp(abs(lr)) - 1 - abs(lr)) * (p * (1 - p) + eps + 4 * eps ** 2))
        log_e[t] = np.sum(w * factor)
    log_M = np.array([max(log_e[j:t + 1].sum() for j in range(t + 1)) for t in range(T)])
    return log_e, log_M


def _rows_stream(seed=3, T=40):
    rng = np.random.default_rng(seed)
    rows = []
    for t in range(T):
        n = int(rng.integers(150, 400))
        p = rng.beta(2, 8, n)
        p[:3] = [0.0, 1.0, 0.5]          # the ends of the score range
        shift = 0.0 if t < 25 else 0.8
        y = (rng.random(n) < expit(logit(np.clip(p, 1e-9, 1 - 1e-9)) + shift)).astype(float)
        rows.append((p, y, rng.integers(1, 4, n).astype(float)))
    return rows


@pytest.mark.parametrize("tol", [(0.0, 0.10), (0.01, 0.05)])
def test_summary_detector_equals_brute_force_on_rows(tol):
    rows = _rows_stream()
    edges = np.array([0.0, 0.1, 0.17, 0.25, 0.4, 1.0 + 1e-12])
    B = len(edges) - 1
    sums = np.zeros((4, len(rows), B))
    for t, (p, y, w) in enumerate(rows):
        b = np.searchsorted(edges, p, side="right") - 1
        for i, x in enumerate((w, w * y, w * p, w * p * p)):
            np.add.at(sums[i, t], b, x)
    for window in (3, 7):
        out = detect.detector(*sums, tolerance=tol, windows=(window,))
        want_e, want_M = _brute_force(range(len(rows)), rows, edges, window, tol)
        np.testing.assert_allclose(out["log_e"][0], want_e, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(out["log_M"], want_M, rtol=1e-12, atol=1e-12)
        assert out["alarm_day"] >= 25   # the planted change is found, after it happened
    # an average of detectors: log of the mean of the windows' M_t
    both = detect.detector(*sums, tolerance=tol, windows=(3, 7))
    M = [np.exp(_brute_force(range(len(rows)), rows, edges, m, tol)[1]) for m in (3, 7)]
    np.testing.assert_allclose(both["log_M"], np.log((M[0] + M[1]) / 2), rtol=1e-12)


def test_weights_equal_duplicated_rows():
    rows = _rows_stream(seed=5, T=20)
    dup = [(np.repeat(p, w.astype(int)), np.repeat(y, w.astype(int)),
            np.ones(int(w.sum()))) for p, y, w in rows]
    edges = np.array([0.0, 0.15, 0.3, 1.0 + 1e-12])
    a = _brute_force(range(20), rows, edges, 3, TOL)
    b = _brute_force(range(20), dup, edges, 3, TOL)
    np.testing.assert_allclose(a[1], b[1], rtol=1e-12, atol=1e-12)


def test_cusum_change_day_is_the_argmax_start():
    rng = np.random.default_rng(0)
    x = rng.normal(0, 1, 200)
    log_M, start = detect.cusum(x)
    for t in range(200):
        sums = [x[j:t + 1].sum() for j in range(t + 1)]
        assert log_M[t] == pytest.approx(max(sums), abs=1e-12)
        assert sums[start[t]] == pytest.approx(max(sums), abs=1e-12)


# -- the null: P(any false alarm in 365 checks) <= alpha -----------------------------------------


@pytest.mark.parametrize("name,q", [("calibrated", lambda p: p),
                                    ("tolerance edge", lambda p: 1.1 * p)])
def test_null_false_alarm_share_over_a_year(name, q):
    W, swy, swp, swpp = simulate(np.random.default_rng(11), 1000, 365, q)
    out = detect.detector(W, swy, swp, swpp, tolerance=TOL)
    share, upper = false_alarm_share(out["alarm_day"])
    print(f"{name}: {share:.3f} of 1000 years alarmed (99% upper {upper:.3f}); year max log M "
          f"median {np.median(out['log_M'].max(-1)):.2f}, max {out['log_M'].max():.2f}, "
          f"threshold {out['threshold']:.2f}")
    assert share <= 0.05 and upper <= 0.07


def test_a_bet_that_peeks_at_its_own_day_fails_the_null_test():
    """The same bets shifted one day earlier (so day t's bet uses day t): the null test must catch
    it, or the test above could not fail."""
    W, swy, swp, swpp = simulate(np.random.default_rng(12), 300, 365, lambda p: 1.1 * p)
    s = detect.day_statistics(W, swy, swp, swpp, tolerance=TOL)
    lam = detect.bets(s, 3)
    peek = np.concatenate([lam[:, 1:], np.zeros_like(lam[:, :1])], axis=1)
    log_M, _ = detect.cusum(detect.log_e(s, peek))
    share, _ = false_alarm_share(np.where((log_M >= detect.threshold()).any(-1), 1, -1))
    assert share > 0.5


def test_a_shift_of_the_score_distribution_alone_never_alarms():
    after = stats.beta(4, 6).pdf(LEVELS)
    after = np.round(2000 * after / after.sum()).astype(int)
    W, swy, swp, swpp = simulate(np.random.default_rng(13), 300, 230, lambda p: p,
                                 change=200, counts_after=after)
    out = detect.detector(W, swy, swp, swpp, tolerance=TOL)
    share, upper = false_alarm_share(out["alarm_day"])
    assert share <= 0.05 and upper <= 0.07


# -- power: planted changes on day 200 -------------------------------------------------------------

CHANGES = {
    # name: (true rate after the change, days, required share detected within them)
    "intercept": (lambda p: expit(logit(p) + 0.3), 10, 0.95),
    "slope": (lambda p: expit(0.7 * logit(p) - 0.45), 21, 0.90),
    "shape": (lambda p: p + 0.08 * np.exp(-((p - 0.3) / 0.08) ** 2), 28, 0.90),
}


@pytest.mark.parametrize("name", list(CHANGES))
def test_planted_change_is_detected_within_the_stated_delay(name):
    q_after, within, share = CHANGES[name]
    W, swy, swp, swpp = simulate(np.random.default_rng(21), 300, 230, lambda p: p, q_after,
                                 change=200)
    out = detect.detector(W, swy, swp, swpp, tolerance=TOL)
    alarm = out["alarm_day"]
    early = np.mean((alarm >= 0) & (alarm < 200))
    delay = np.where(alarm >= 200, alarm - 200, 10 ** 6)
    print(f"{name}: detected within {within} days in {np.mean(delay < within):.3f}; median "
          f"delay {np.median(delay)}; before the change {early:.3f}")
    assert early <= 0.01
    assert np.mean(delay < within) >= share
    if name == "intercept":
        change = out["change_day"][alarm >= 200]
        assert np.mean(np.abs(change - 200) <= 3) >= 0.90


@pytest.mark.parametrize("name", ["intercept", "slope"])
def test_the_change_split_names_the_planted_kind(name):
    """Spec §E.5 on detected streams: post − pre log-score terms from the per-level sums (the
    levels play the stored cells), pre = 28 days before the estimated change day; each term of
    each window >= 0 (nested fits)."""
    (W, swy, swp, swpp), counts, k = simulate(np.random.default_rng(41), 200, 230, lambda p: p,
                                              CHANGES[name][0], change=200, per_level=True)
    out = detect.detector(W, swy, swp, swpp, tolerance=TOL)
    hits = []
    for s in np.flatnonzero(out["alarm_day"] >= 200):
        change, alarm = int(out["change_day"][s]), int(out["alarm_day"][s])
        terms = [detect.split_mcb(counts[lo:hi].sum(0), k[s, lo:hi].sum(0), LEVELS)
                 for lo, hi in ((change - 28, change), (change, alarm + 1))]
        for t in terms:
            assert min(t["intercept"], t["slope"], t["shape"]) >= -1e-12
        d = {t: terms[1][t] - terms[0][t] for t in ("mcb", "intercept", "slope", "shape")}
        hits.append(d["intercept"] >= 0.8 * d["mcb"] if name == "intercept"
                    else max(("intercept", "slope", "shape"), key=d.get) == "slope")
    print(f"{name}: {np.mean(hits):.3f} of {len(hits)} detected streams")
    assert np.mean(hits) >= (0.90 if name == "intercept" else 0.80)


# -- late labels: the mature stream and the early stream (lag 1 day) -----------------------------


MEAN_DELAY, HORIZON = 3.0, 14


def _share_known(a):
    """F(a): the share of the eventual positives (within the horizon) known at age a days."""
    return (1 - np.exp(-a / MEAN_DELAY)) / (1 - np.exp(-HORIZON / MEAN_DELAY))


@pytest.mark.parametrize("planted", ["intercept", "delay curve"])
def test_late_labels_mature_and_early_streams(planted):
    rng = np.random.default_rng(31)
    F = _share_known(1.0)
    q_after = CHANGES["intercept"][0] if planted == "intercept" else None
    # 20 000 rows a day: at 2 000 the lag-1 stream, which sees 28% of the positives, found the
    # intercept change within 14 days in 3% of streams (README)
    full = simulate(rng, 300, 230, lambda p: p, q_after, change=200, n=20000)
    # the positives known at age 1 day: a binomial thinning of the eventual ones
    thin = F if planted == "intercept" else (lambda t: F if t < 200 else F / 2)
    known = rng.binomial(full[1].astype(int),
                         np.asarray([thin if np.isscalar(thin) else thin(t)
                                     for t in range(230)])[None, :, None]).astype(float)
    # F̂ (pooled over bins: the delays do not depend on the score here) and its error bound from
    # days 0..99 (mature long before the days tested), Hoeffding at level 0.01; the early stream
    # runs on days 100.. and the two streams split alpha
    first = slice(0, 100)
    F_hat = known[:, first].sum((1, 2)) / full[1][:, first].sum((1, 2))
    u = np.sqrt(np.log(2 / 0.01) / (2 * full[1][:, first].sum((1, 2))))
    later = slice(100, 230)
    early = detect.detector(*(x[:, later] for x in (full[0], known, full[2], full[3])),
                            tolerance=TOL, alpha=0.025, share=F_hat[:, None, None],
                            share_error=u[:, None, None])
    mature = detect.detector(*full, tolerance=TOL, alpha=0.025)
    # calendar days at which the alarm is seen: mature labels at age horizon + 1, early at 1 + 1
    seen_mature = np.where(mature["alarm_day"] >= 0, mature["alarm_day"] + HORIZON + 1, 10 ** 6)
    seen_early = np.where(early["alarm_day"] >= 0, early["alarm_day"] + 100 + 2, 10 ** 6)
    print(f"{planted}: mature within 28 d {np.mean(seen_mature - 200 <= 28):.3f}, early within "
          f"14 d {np.mean(seen_early - 200 <= 14):.3f}, 30 d {np.mean(seen_early - 200 <= 30):.3f}, "
          f"median {np.median(seen_early - 200)}, any early {np.mean(seen_early < 10**6):.3f}")
    assert np.mean(seen_early < 200) <= 0.01 and np.mean(seen_mature < 200) <= 0.01
    if planted == "intercept":
        assert np.mean(seen_mature - 200 <= 28) >= 0.90
        assert np.mean(seen_early - 200 <= 14) >= 0.80
    else:
        assert np.mean(mature["alarm_day"] >= 0) <= 0.05
        assert np.mean(seen_early < 10 ** 6) >= 0.90


# -- sqlcal.detect on a summary store -------------------------------------------------------------

DAY0 = np.datetime64("2026-06-01")


def _predictions(seed=7, days=60, per_day=1500, change=40):
    import pandas as pd
    rng = np.random.default_rng(seed)
    n = days * per_day * 2
    day = rng.integers(0, days, n)
    g = rng.choice(["a", "b"], n)
    p = rng.beta(2, 8, n)
    shift = np.where((g == "a") & (day >= change), 0.6, 0.0)
    y = (rng.random(n) < expit(logit(p) + shift)).astype(int)
    t = pd.Timestamp("2026-06-01") + pd.to_timedelta(day * 86400 + rng.integers(0, 86400, n), "s")
    return pd.DataFrame({"p": p, "y": y, "w": rng.integers(1, 3, n).astype(float), "g": g,
                         "t": t, "day": day})


@pytest.fixture(scope="module")
def stored_stream(tmp_path_factory):
    import sqlcal
    df = _predictions()
    path = str(tmp_path_factory.mktemp("detect") / "store.duckdb")
    sqlcal.snapshot(df.drop(columns="day"), score="p", label="y", weight="w", by="g", time="t",
                    store=path, as_of="2026-09-30", bins=(), ls_ece_sigma=(), smooth_grids=())
    return df, path


@pytest.mark.parametrize("bins", [1, 8])
def test_detect_from_the_store_equals_the_detector_on_raw_rows(stored_stream, bins):
    df, path = stored_stream
    found = detect.detect(path, bins=bins)
    K = 2 ** 14
    for g, part in df.groupby("g"):
        cell = np.minimum(np.floor(part["p"].to_numpy() * K), K - 1).astype(int)
        ref = part["day"].to_numpy() < 28
        import pandas as pd
        edges = detect.bet_edges(pd.Series(part["w"].to_numpy()[ref]).groupby(cell[ref]).sum(),
                                 bins, K)
        b = np.searchsorted(edges, cell, side="right") - 1
        sums = np.zeros((4, 60, bins))
        w, y, p = (part[c].to_numpy() for c in ("w", "y", "p"))
        for i, x in enumerate((w, w * y, w * p, w * p * p)):
            np.add.at(sums[i], (part["day"].to_numpy(), b), x)
        want = detect.detector(*sums, first=28)
        got = found.path[found.path.g == g]
        np.testing.assert_allclose(got["log_M"], want["log_M"], rtol=1e-12, atol=1e-12)
        assert got["n"].sum() == len(part) and got["W"].sum() == pytest.approx(w.sum(), rel=1e-15)
    assert found.alarms["g"].tolist() == ["a"]
    alarm = found.alarms.iloc[0]
    change = (alarm["change_day"] - np.datetime64("2026-06-01", "ns")) / np.timedelta64(1, "D")
    assert abs(change - 40) <= 3 and alarm["alarm_day"] >= np.datetime64("2026-07-10", "ns")
    # an intercept change: the intercept term carries >= 80% of the miscalibration's change
    assert alarm["intercept"] >= 0.8 * alarm["mcb"] > 0
    assert alarm["a_post"] - alarm["a_pre"] == pytest.approx(0.6, abs=0.15)


def test_decomposition_terms_against_direct_fits():
    """The nested fits against scipy's optimiser on the same cells; each term >= 0."""
    from scipy.optimize import minimize
    rng = np.random.default_rng(3)
    p = np.sort(rng.beta(2, 8, 400))
    W = rng.integers(5, 50, 400).astype(float)
    Y = rng.binomial(W.astype(int), expit(0.8 * logit(p) + 0.2 + 0.5 * np.sin(6 * p))).astype(float)
    z = logit(p)

    def nll(theta):
        q = expit(theta[0] + theta[1] * z)
        return -np.sum(Y * np.log(q) + (W - Y) * np.log1p(-q)) / W.sum()
    ab = minimize(nll, [0.0, 1.0], method="Nelder-Mead", options={"xatol": 1e-10, "fatol": 1e-14})
    a = minimize(lambda x: nll([x[0], 1.0]), [0.0], method="Nelder-Mead",
                 options={"xatol": 1e-10, "fatol": 1e-14})
    base = nll([0.0, 1.0])
    d = detect.split_mcb(W, Y, p)
    assert d["intercept"] == pytest.approx(base - a.fun, abs=1e-9)
    assert d["slope"] == pytest.approx(a.fun - ab.fun, abs=1e-9)
    assert min(d["intercept"], d["slope"], d["shape"]) >= 0
    # the isotonic fit from scikit-learn (weighted least squares = every proper score's optimum)
    from sklearn.isotonic import IsotonicRegression
    iso = np.clip(IsotonicRegression().fit(p, Y / W, sample_weight=W).predict(p), 1e-15,
                  1 - 1e-15)
    ls_iso = -np.sum(Y * np.log(iso) + (W - Y) * np.log1p(-iso)) / W.sum()
    assert d["mcb"] == pytest.approx(base - ls_iso, abs=1e-9)
    assert d["mcb"] == pytest.approx(d["intercept"] + d["slope"] + d["shape"], abs=1e-12)


def test_detect_options_are_checked(stored_stream):
    from sqlcal.options import OptionError
    _, path = stored_stream
    for kwargs, name in (({"alpha": 2}, "alpha"), ({"checks": 0}, "checks"),
                         ({"bins": 0}, "bins"), ({"windows": ()}, "windows"),
                         ({"by": "nope"}, "by")):
        with pytest.raises(OptionError, match=name):
            detect.detect(path, **kwargs)


def test_monitor_command_alarms_with_exit_code_3(stored_stream, tmp_path, capsys):
    import json

    from sqlcal.cli.commands import main
    _, path = stored_stream
    toml = tmp_path / "monitor.toml"
    toml.write_text(f'[source]\ndata = "unused.duckdb"\nscore = "p"\nlabel = "y"\ntime = "t"\n'
                    f'weight = "w"\nby = ["g"]\n[snapshot]\nstore = "{path}"\n'
                    f'[detect]\nalpha = 0.05\nchecks = 365\n')
    code = main(["monitor", "--config", str(toml), "--json-file", str(tmp_path / "m.json"),
                 "--html", str(tmp_path / "m.html")])
    out = capsys.readouterr().out
    assert code == 3
    assert out.count("ALARM") == 1 and "ALARM g=a" in out
    doc = json.loads((tmp_path / "m.json").read_text())
    assert doc["generator"] == "sqlcal" and [a["g"] for a in doc["alarms"]] == ["a"]
    assert doc["threshold"] == pytest.approx(np.log(365 / 0.05), rel=1e-15)
    page = (tmp_path / "m.html").read_text()
    assert '<meta name="generator" content="sqlcal">' in page
    # each group's detector path, and the alarmed group's pre/post reliability diagram
    assert page.count('data-chart="evidence"') == 2
    assert page.count('data-chart="prepost"') == 1
    # a bad [detect] key is refused before any query, naming the key
    toml.write_text(toml.read_text() + "alfa = 0.1\n")
    assert main(["monitor", "--config", str(toml)]) == 2
    assert "alfa" in capsys.readouterr().err


def test_monitor_windows_alerts_and_results_rows(stored_stream, tmp_path, capsys):
    import json

    from sqlcal.cli.commands import main
    from sqlcal.monitor import store as monitor_store
    df, path = stored_stream
    toml = tmp_path / "monitor.toml"
    toml.write_text(
        f'[source]\ndata = "unused.duckdb"\nscore = "p"\nlabel = "y"\ntime = "t"\n'
        f'weight = "w"\nby = ["g"]\n[snapshot]\nstore = "{path}"\n'
        '[monitor]\nresults_table = "monitor_results"\n'
        '[windows]\nlast_7d = { days = 7 }\nmonth = { calendar = "month", compare = "previous" }\n'
        '[metrics]\nbrier = {}\ncalibration_in_the_large = {}\n'
        '[[alerts]]\nwindow = "last_7d"\nmetric = "calibration_in_the_large"\ncolumn = "citl"\n'
        'below = -0.02\n')
    args = ["monitor", "--config", str(toml), "--at", "2026-09-30", "--json-file",
            str(tmp_path / "w.json")]
    assert main(args) == 3
    out = capsys.readouterr().out
    assert "ALERT g=a: last_7d calibration_in_the_large.citl" in out and "ALERT g=b" not in out
    doc = json.loads((tmp_path / "w.json").read_text())
    table = {(r["g"], r["window"], r["metric"], r["statistic"]): r for r in doc["windows"]}

    def brier(g, first, last):  # numpy on the raw rows of days first..last (0-based)
        rows = df[(df.g == g) & (df.day >= first) & (df.day <= last)]
        return np.sum(rows.w * (rows.y - rows.p) ** 2) / rows.w.sum()
    for g in ("a", "b"):  # the last final day is day 59 (2026-07-30)
        assert table[(g, "last_7d", "brier", "brier")]["value"] == pytest.approx(
            brier(g, 53, 59), rel=1e-12)
        july, june = brier(g, 30, 59), brier(g, 0, 29)
        assert table[(g, "month", "brier", "brier")]["value"] == pytest.approx(july, rel=1e-12)
        assert table[(g, "month:previous", "brier", "brier")]["value"] == pytest.approx(
            june, rel=1e-12)
        assert table[(g, "month:change", "brier", "brier")]["value"] == pytest.approx(
            july - june, rel=1e-9)
        change = table[(g, "month:change", "calibration_in_the_large", "citl")]

        def mean_and_var(first, last):  # the mean residual and its variance, frequency weights
            rows = df[(df.g == g) & (df.day >= first) & (df.day <= last)]
            r, W = rows.y - rows.p, rows.w.sum()
            m = np.sum(rows.w * r) / W
            return m, (np.sum(rows.w * r ** 2) / W - m ** 2) / W
        (m1, v1), (m0, v0) = mean_and_var(30, 59), mean_and_var(0, 29)
        assert change["value"] == pytest.approx(-(m1 - m0), rel=1e-9)
        half = 1.959963984540054 * np.sqrt(v1 + v0)
        assert change["upper"] - change["value"] == pytest.approx(half, rel=1e-9)
    # the results table: one set of rows per check date; a re-run adds none
    con = monitor_store.connect(path)  # the store's open connection
    rows = con.table("monitor_results").to_pandas()
    assert set(rows.run_id) == {"2026-09-30"}
    assert len(rows) == len(doc["windows"]) + 2  # + the detector's log M per group
    assert main(args + ["--quiet"]) == 3
    assert con.table("monitor_results").count().execute() == len(rows)


def test_detect_on_each_engine_equals_the_detector_on_raw_rows(con, upload):
    """Rows and store in the engine under test (PostgreSQL; an in-memory DuckDB store for
    DuckDB): 40 small days, one group with an intercept change on day 25; the path equals the
    detector on the raw rows' sums."""
    import uuid

    import pandas as pd

    import sqlcal
    if con.name == "pyspark":
        pytest.skip("Spark's snapshot reductions are tested in test_monitor_store (its store is "
                    "DuckDB there as here); the detector reads only the store; each Spark query "
                    "costs seconds (measured 66 s for this test)")
    df = _predictions(seed=11, days=40, per_day=300, change=25)
    store = con if con.name == "postgres" else ibis_duckdb()
    upload = upload if con.name == "postgres" else (lambda frame: frame)
    prefix = f"sqlcal_{uuid.uuid4().hex[:8]}_"
    try:
        sqlcal.snapshot(upload(df.drop(columns="day")), score="p", label="y", weight="w", by="g",
                        time="t", store=store, prefix=prefix, as_of="2026-09-30", bins=(),
                        ls_ece_sigma=(), smooth_grids=())
        found = detect.detect(store, prefix=prefix, bins=4, reference_days=14)
        K = 2 ** 14
        for g, part in df.groupby("g"):
            cell = np.minimum(np.floor(part["p"].to_numpy() * K), K - 1).astype(int)
            ref = part["day"].to_numpy() < 14
            edges = detect.bet_edges(pd.Series(part["w"].to_numpy()[ref]).groupby(cell[ref])
                                     .sum(), 4, K)
            b = np.searchsorted(edges, cell, side="right") - 1
            sums = np.zeros((4, 40, 4))
            w, y, p = (part[c].to_numpy() for c in ("w", "y", "p"))
            for i, x in enumerate((w, w * y, w * p, w * p * p)):
                np.add.at(sums[i], (part["day"].to_numpy(), b), x)
            want = detect.detector(*sums, first=14)
            got = found.path[found.path.g == g]
            np.testing.assert_allclose(got["log_M"], want["log_M"], rtol=1e-12, atol=1e-12)
    finally:
        for name in store.list_tables():
            if name.startswith(prefix):
                store.drop_table(name)


def ibis_duckdb():
    import ibis
    return ibis.duckdb.connect()


def test_monitor_page_shows_the_maturity_curve(tmp_path, capsys):
    import json

    import pandas as pd

    import sqlcal
    from sqlcal.cli.commands import main
    rng = np.random.default_rng(5)
    df = _predictions(seed=5, days=35, per_day=200, change=100)  # no change
    delay = rng.exponential(2.0, len(df))
    df["lt"] = (df["t"] + pd.to_timedelta(np.round(delay * 86400), "s")).where(df["y"] == 1)
    path = str(tmp_path / "store.duckdb")
    sqlcal.snapshot(df.drop(columns="day"), score="p", label="y", weight="w", time="t",
                    label_time="lt", store=path, as_of="2026-09-30", bins=(), ls_ece_sigma=(),
                    smooth_grids=())
    toml = tmp_path / "monitor.toml"
    toml.write_text(f'[source]\ndata = "unused.duckdb"\nscore = "p"\nlabel = "y"\ntime = "t"\n'
                    f'weight = "w"\n[snapshot]\nstore = "{path}"\n')
    code = main(["monitor", "--config", str(toml), "--no-windows", "--html",
                 str(tmp_path / "m.html"), "--json-file", str(tmp_path / "m.json")])
    assert code == 0, capsys.readouterr()
    assert (tmp_path / "m.html").read_text().count('data-chart="maturity"') == 1
    curve = json.loads((tmp_path / "m.json").read_text())["maturity"]
    positive = df["y"] == 1
    for row in curve:  # the weighted share of positives known within `delay` days
        known = positive & (delay < row["delay"])
        assert row["F_hat"] == pytest.approx(df.w[known].sum() / df.w[positive].sum(),
                                             rel=1e-12)


def test_early_stream_from_the_store_equals_the_detector_on_raw_rows(tmp_path):
    """lag:1d: each day once 2 days old, its positives known within 1 day, against F_b·p with
    F_b for day t from the final days s <= t - 7 (horizon 7 + settle 1 - lag 1; final: s <= 52
    at as_of = day 61); the oracle recomputes every sum and F_b from the raw rows."""
    import pandas as pd

    import sqlcal
    rng = np.random.default_rng(8)
    df = _predictions(seed=8, days=60, per_day=1500, change=45)
    delay = np.minimum(rng.exponential(1.5, len(df)), 6.5)
    df["lt"] = (df["t"] + pd.to_timedelta(np.round(delay * 86400), "s")).where(df["y"] == 1)
    path = str(tmp_path / "store.duckdb")
    as_of = pd.Timestamp("2026-06-01") + pd.Timedelta(days=61)
    sqlcal.snapshot(df.drop(columns="day"), score="p", label="y", weight="w", by="g", time="t",
                    label_time="lt", store=path, as_of=as_of, bins=(), ls_ece_sigma=(),
                    smooth_grids=())
    found = detect.detect(path, lag="lag:1d", horizon="7d", reference_days=20)
    K, B = 2 ** 14, 8
    early_days = 59  # day t is in once t + 1 + 1 (settle) days have passed by as_of (day 61)
    for g, part in df.groupby("g"):
        cell = np.minimum(np.floor(part["p"].to_numpy() * K), K - 1).astype(int)
        ref = part["day"].to_numpy() < 20
        edges = detect.bet_edges(pd.Series(part["w"].to_numpy()[ref]).groupby(cell[ref]).sum(),
                                 B, K)
        b = np.searchsorted(edges, cell, side="right") - 1
        w, y, p = (part[c].to_numpy() for c in ("w", "y", "p"))
        soon = (y == 1) & (delay[part.index] < 1)
        day = part["day"].to_numpy()
        share, error = np.zeros((2, early_days, B))
        error[:] = 1.0
        for t in range(early_days):
            use = day <= min(t - 7, 52)
            positives = np.bincount(b[use], (w * y)[use], B)
            count = np.bincount(b[use], y[use], B)
            with np.errstate(divide="ignore", invalid="ignore"):
                share[t] = np.where(positives > 0, np.bincount(b[use], (w * soon)[use], B)
                                    / positives, 0.0)
                error[t] = np.where(count > 0, np.sqrt(np.log(2 * B * 365 / (0.05 / 4))
                                                       / (2 * count)), 1.0)
        keep = day < early_days
        sums = np.zeros((4, early_days, B))
        for i, x in enumerate((w, w * soon, w * p, w * p * p)):
            np.add.at(sums[i], (day[keep], b[keep]), x[keep])
        want = detect.detector(*sums, first=20, alpha=0.05 / 4, share=share, share_error=error)
        got = found.path[(found.path.g == g) & (found.path.stream == "lag:1d")]
        np.testing.assert_allclose(got["log_M"], want["log_M"], rtol=1e-12, atol=1e-12)
    early = found.alarms[found.alarms.stream == "lag:1d"]
    assert early["g"].tolist() == ["a"]
    change = (early["change_day"].iloc[0] - pd.Timestamp("2026-06-01")).days
    assert abs(change - 45) <= 3
    mature = found.path[found.path.stream == "mature"]
    assert mature["threshold"].iloc[0] == pytest.approx(np.log(365 / 0.025), rel=1e-15)


def test_detect_refuses_weights_that_are_not_whole_numbers(tmp_path):
    import sqlcal
    df = _predictions(seed=2, days=5, per_day=50)
    df["w"] = df["w"] * 0.75   # sampling-style weights: the guarantee needs a likelihood per row
    path = str(tmp_path / "store.duckdb")
    sqlcal.snapshot(df.drop(columns="day"), score="p", label="y", weight="w", time="t",
                    store=path, as_of="2026-09-30", bins=(), ls_ece_sigma=(), smooth_grids=())
    from sqlcal.options import OptionError
    with pytest.raises(OptionError, match="frequency weights"):
        detect.detect(path)
