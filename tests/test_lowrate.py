"""Low base rates: normalized entropy and the calibration ratio against brute-force numpy, the
ratio's interval coverage on simulated summaries, log-odds bins (engine == local), the
concentration flag, and negative downsampling (weights and the score correction)."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from scipy import optimize, stats

import sqlcal
from sqlcal.metrics.lowrate import calibration_ratio_finish
from sqlcal.options import OptionError
from sqlcal.query import declared, local, planner

TOL = dict(rtol=1e-12, atol=1e-12)


def click_log(n: int, seed: int, *, rate: float = 4e-3, groups: int = 0, weights: bool = False,
              bias: float = 1.0) -> pd.DataFrame:
    """Log-normal scores around ``rate``; outcomes at score/bias."""
    rng = np.random.default_rng(seed)
    p = np.clip(np.exp(rng.normal(np.log(rate), 0.9, n)), 1e-6, 0.5)
    y = (rng.random(n) < p / bias).astype(np.int64)
    df = pd.DataFrame({"p": p, "y": y})
    if groups:
        df["g"] = rng.integers(0, groups, n)  # integer keys: Spark reads them through Arrow
    if weights:
        df["w"] = rng.choice([0.0, 0.5, 1.0, 2.5], n, p=[0.1, 0.3, 0.4, 0.2])
    return df


def _ne_oracle(p, y, w):
    loss = -(y * np.log(p) + (1 - y) * np.log(1 - p))
    b = np.sum(w * y) / np.sum(w)
    return np.sum(w * loss) / np.sum(w) / (-(b * np.log(b) + (1 - b) * np.log(1 - b)))


def _ratio_bounds_oracle(p, y, w, confidence, sampling):
    # every ρ whose test of π = p/ρ accepts: (O − E/ρ)² ≤ z²·V(ρ), found by root-finding
    z = stats.norm.isf((1 - confidence) / 2)
    m = w * w if sampling else w
    E, O = np.sum(w * p), np.sum(w * y)

    def f(rho):
        return (O - E / rho) ** 2 - z * z * (np.sum(m * p) / rho - np.sum(m * p * p) / rho ** 2)

    rho = E / O
    return optimize.brentq(f, rho * 1e-3, rho), optimize.brentq(f, rho, rho * 1e3)


def test_normalized_entropy_and_ratio_match_brute_force(upload):
    df = click_log(4000, seed=1, rate=3e-2, groups=3, weights=True)
    df.loc[(df.g == 2), "y"] = 0  # a group with no positives
    src = sqlcal.source(upload(df), score="p", label="y", weight="w", by="g")
    sqlcal.report(src, metrics=["normalized_entropy", "calibration_ratio"])  # one fused scan
    ne, cr = sqlcal.normalized_entropy(src), sqlcal.calibration_ratio(src)  # from its cache
    assert list(ne.g) == list(cr.g) == [0, 1, 2]
    for i, g in enumerate([0, 1]):
        part = df[(df.g == g) & (df.w > 0)]
        p, y, w = part.p.to_numpy(), part.y.to_numpy(), part.w.to_numpy()
        np.testing.assert_allclose(ne.normalized_entropy[i], _ne_oracle(p, y, w), **TOL)
        np.testing.assert_allclose(ne.relative_information_gain[i], 1 - _ne_oracle(p, y, w),
                                   **TOL)
        np.testing.assert_allclose(cr.calibration_ratio[i], np.sum(w * p) / np.sum(w * y), **TOL)
        assert cr.n[i] == len(part) and cr.n_positive[i] == y.sum()
        np.testing.assert_allclose([cr.ci_lower[i], cr.ci_upper[i]],
                                   _ratio_bounds_oracle(p, y, w, 0.95, sampling=True),
                                   rtol=1e-9)
    assert ne.weight_kind[0] == cr.weight_kind[0] == "sampling"
    assert np.isnan(ne.normalized_entropy[2]) and ne.reason[2] == "no positives"
    assert np.isnan(cr.calibration_ratio[2]) and cr.reason[2] == "no positives"
    assert cr.ci_upper[2] == np.inf and 0 < cr.ci_lower[2] < np.inf
    assert pd.isna(ne.reason[0]) and pd.isna(cr.reason[0])


def test_normalized_entropy_interval_is_the_delta_method():
    # the delta method by numerical differentiation of NE(mean ℓ, mean y), on raw rows
    df = click_log(20000, seed=2, rate=3e-2)
    p, y = df.p.to_numpy(), df.y.to_numpy()
    got = sqlcal.normalized_entropy(df, score="p", label="y", confidence=0.9)
    loss = -(y * np.log(p) + (1 - y) * np.log(1 - p))
    m = np.array([loss.mean(), y.mean()])

    def ne(v):
        return v[0] / -(v[1] * np.log(v[1]) + (1 - v[1]) * np.log(1 - v[1]))

    h = 1e-7
    grad = np.array([(ne(m + h * e) - ne(m - h * e)) / (2 * h) for e in np.eye(2)])
    cov = np.cov(np.vstack([loss, y]), bias=True) / len(y)
    half = stats.norm.isf(0.05) * np.sqrt(grad @ cov @ grad)
    np.testing.assert_allclose([got.ci_lower[0], got.ci_upper[0]],
                               [ne(m) - half, ne(m) + half], rtol=1e-6)


def test_ratio_deciles_match_numpy_quantiles():
    df = click_log(5000, seed=3, groups=2)
    got = sqlcal.calibration_ratio(df, score="p", label="y", by="g", deciles=10)
    for g, part in df.groupby("g"):
        edges = np.quantile(part.p, np.linspace(0, 1, 11))
        ids = np.searchsorted(edges[1:-1], part.p, side="left")  # right-closed
        mine = got[got.g == g].reset_index(drop=True)
        assert list(mine.bin) == sorted(set(ids))
        for _, row in mine.iterrows():
            rows = part[ids == row.bin]
            assert row.n == len(rows) and row.n_positive == rows.y.sum()
            np.testing.assert_allclose(row.expected_positives, rows.p.sum(), **TOL)
            if rows.y.sum():
                np.testing.assert_allclose(row.calibration_ratio, rows.p.sum() / rows.y.sum(),
                                           **TOL)
            else:
                assert row.reason == "no positives"
        np.testing.assert_allclose(mine.bin_upper[:-1], edges[1:-1][mine.bin[:-1]], **TOL)
    assert (got.binning == "quantile(10)").all()


def test_deciles_start_from_the_log_odds_histogram_in_the_first_scan(upload):
    """The per-decile table reads a log-odds histogram of every row in its first scan (no score
    cells, so no split of crowded ones); edges and bin counts stay numpy's."""
    df = click_log(4000, seed=31, rate=1e-3, groups=2)
    src = sqlcal.source(upload(df), score="p", label="y", by="g")
    got = sqlcal.calibration_ratio(src, deciles=10)
    assert planner.lookup(src, declared.logit_cells(32, "sums")) is not None
    assert planner.lookup(src, declared.cells(1024)) is None
    for g, part in df.groupby("g"):
        edges = np.quantile(part.p, np.linspace(0, 1, 11))[1:-1]
        ids = np.searchsorted(edges, part.p, side="left")
        mine = got[got.g == g]
        np.testing.assert_array_equal(mine.bin_upper.to_numpy()[:-1], edges)
        np.testing.assert_array_equal(mine.n.to_numpy(), np.bincount(ids))
        np.testing.assert_array_equal(mine.n_positive.to_numpy(), np.bincount(ids, part.y))


def test_fused_first_scan_carries_log_odds_histograms(con, upload):
    """Score cells, two log-odds histograms and the totals in one scan, each split out equal to
    numpy on the raw rows (and to the local evaluation from the levels)."""
    if con.name == "pyspark":
        pytest.skip("Spark reads the log-odds histogram in the test above (this one cost CI "
                    "about 30 s more on Spark)")
    df = click_log(3000, seed=32, groups=3, weights=True)
    src = sqlcal.source(upload(df), score="p", label="y", weight="w", by="g")
    needs = [declared.cells(1024, "sums"), declared.logit_cells(32, "sums", "moments"),
             declared.logit_cells(8, "sums"), declared.totals()]
    assert len(planner.prefetch(src, needs)) == 1
    df = df[df.w > 0]  # a row of weight 0 is an absent row
    levels = df.assign(wy=df.w * df.y, wp=df.w * df.p, w2=df.w ** 2).groupby(["g", "p"]).agg(
        n=("y", "size"), W=("w", "sum"), swy=("wy", "sum"), swp=("wp", "sum"),
        sw2=("w2", "sum"), ny=("y", "sum")).reset_index()
    for scale in (32, 8):
        summary = declared.logit_cells(scale, "sums")
        engine = src.present(planner.lookup(src, summary)).sort_values(["g", "lcell"],
                                                                       ignore_index=True)
        cell = np.floor(np.log(df.p / (1 - df.p)) * scale).astype(int)
        want = df.assign(lcell=cell, wy=df.w * df.y, wpp=df.w * df.p ** 2).groupby(
            ["g", "lcell"]).agg(n=("y", "size"), W=("w", "sum"), swy=("wy", "sum"),
                                swpp=("wpp", "sum"), p_min=("p", "min"), p_max=("p", "max"))
        want = want.reset_index()
        np.testing.assert_array_equal(engine[["g", "lcell", "n"]].to_numpy(),
                                      want[["g", "lcell", "n"]].to_numpy())
        columns = ["W", "swy", "p_min", "p_max"] + (["swpp"] if scale == 32 else [])
        for c in columns:
            np.testing.assert_allclose(engine[c].to_numpy(float), want[c].to_numpy(float), **TOL)
        mine = local.evaluate(summary, levels, ["g"])
        for c in ("lcell", "n", "W", "swy", "p_min", "p_max"):
            np.testing.assert_allclose(mine[c].to_numpy(float), want[c].to_numpy(float), **TOL)


def _coverage(tables: int, seed: int, *, weighted: bool = False, rate: float | None = None
              ) -> float:
    # vectorised: each row of the summary frame is one simulated table of 2,500 rows with 20-50
    # expected positives, a true ratio ρ in [0.6, 1.6] and (weighted) sampling weights, or
    # (rate) negatives kept with probability rate and weighted 1/rate
    rng = np.random.default_rng(seed)
    n = 2500
    expected = rng.uniform(20, 50, tables)
    rho = rng.uniform(0.6, 1.6, tables)
    raw = np.exp(rng.normal(0, 1, (tables, n)))
    p = raw / raw.sum(axis=1, keepdims=True) * (expected * rho)[:, None]  # Σp = ρ·E[O]
    w = rng.lognormal(0, 0.6, (tables, n)) if weighted else np.ones((tables, n))
    w = w / w.mean(axis=1, keepdims=True)
    pi = p / rho[:, None]
    y = (rng.random((tables, n)) < pi).astype(float)
    target = (w * p).sum(1) / (w * pi).sum(1)  # = ρ
    v = v0 = w * w  # the variance weight and its label-free part (sampling weights)
    if rate is not None:  # a kept negative weighs 1/rate, a dropped one 0
        w = np.where(y == 1, 1.0, (rng.random((tables, n)) < rate) / rate)
        v, v0 = np.where(y == 1, w, w / rate), w  # f/π² and f/π
    frame = pd.DataFrame({"n": n, "W": w.sum(1), "swy": (w * y).sum(1), "swp": (w * p).sum(1),
                          "swpp": (w * p * p).sum(1), "sw2p": (v0 * p).sum(1),
                          "sw2pp": ((2 * v0 - v) * p * p).sum(1)})
    out = calibration_ratio_finish(frame, confidence=0.95,
                                   weight_kind="sampling" if weighted or rate else "frequency")
    return float(np.mean((out.ci_lower <= target) & (target <= out.ci_upper)))


@pytest.mark.parametrize("case", [{}, {"weighted": True}, {"rate": 0.1}])
def test_ratio_interval_covers_with_tens_of_positives(case):
    coverage = _coverage(1000, seed=7 + len(str(case)), **case)
    assert 0.93 <= coverage <= 0.98, coverage


def test_logit_strategy_matches_brute_force(upload):
    df = click_log(5000, seed=5)
    src = sqlcal.source(upload(df), score="p", label="y")
    got = sqlcal.reliability(src, bins=8, strategy="logit")
    lo, hi = df.p.min(), df.p.max()
    z = np.log(lo / (1 - lo)) + np.arange(9) / 8 * (np.log(hi / (1 - hi)) - np.log(lo / (1 - lo)))
    edges = 1 / (1 + np.exp(-z))
    ids = np.searchsorted(edges[1:-1], df.p, side="left")
    want = df.assign(bin=ids).groupby("bin").agg(n=("y", "size"), p=("p", "mean"), y=("y", "mean"))
    assert list(got.bin) == list(want.index) and list(got.n) == list(want.n)
    np.testing.assert_allclose(got.mean_score, want.p, **TOL)
    np.testing.assert_allclose(got.observed, want.y, **TOL)
    np.testing.assert_allclose(got.bin_upper[:-1], edges[1:-1][got.bin[:-1]], rtol=1e-12)
    ece = sqlcal.ece(src, bins=8, strategy="logit")
    np.testing.assert_allclose(ece.ece[0], np.sum(np.abs(got.gap) * got.n) / len(df), **TOL)
    assert ece.binning[0] == "logit(8)" and not got.concentrated.any()
    # the engine's logit_bins summary (cached by the calls above) equals its local evaluation
    summary = declared.logit_bins(8, lo, hi, "sums")
    engine = planner.fetch(src, summary).sort_values("bin", ignore_index=True)
    levels = df.groupby("p", as_index=False).agg(n=("y", "size"), swy=("y", "sum"))
    levels = levels.assign(W=levels.n.astype(float), swp=levels.p * levels.n,
                           sw2=levels.n.astype(float), ny=levels.swy)
    want = local.evaluate(summary, levels, ())
    assert list(engine.bin) == list(want.bin) and list(engine.n) == list(want.n)
    for c in ("W", "swy", "swp", "p_min", "p_max"):
        np.testing.assert_allclose(engine[c].to_numpy(float), want[c].to_numpy(float), **TOL)


def test_concentrated_bins_are_flagged_and_warned():
    df = click_log(20000, seed=6)  # base rate 0.4%: equal-width bins put nearly all in bin 0
    with pytest.warns(UserWarning, match="more than half their weight in one of 15 bins"):
        got = sqlcal.reliability(df, score="p", label="y")
    assert got.concentrated.all()
    with pytest.warns(UserWarning, match="strategy='logit'"):
        sqlcal.ece(df, score="p", label="y")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        assert not sqlcal.reliability(df, score="p", label="y", strategy="logit").concentrated.any()


def _blocks(seed: int):
    rng = np.random.default_rng(seed)
    df = click_log(800, seed=seed, rate=3e-2, groups=2)
    df["rate"] = np.where(rng.random(len(df)) < 0.5, 0.1, 0.25)
    pos, neg = df[df.y == 1], df[df.y == 0]
    kept = pd.concat([pos, neg], ignore_index=True)
    full = pd.concat([pos, neg.loc[neg.index.repeat(np.rint(1 / neg.rate).astype(int))]],
                     ignore_index=True)
    return full, kept


def test_downsampled_negatives_equal_their_blocks_in_the_engine(upload):
    # the rate column's weighting in each engine: one fused scan per table
    full, kept = _blocks(8)
    names = ["ece", "log_loss", "normalized_entropy", "calibration_ratio"]
    a = sqlcal.report(upload(full), score="p", label="y", by="g", metrics=names)
    b = sqlcal.report(upload(kept), score="p", label="y", by="g", metrics=names,
                      negative_sampling_rate="rate")
    for column in ["W", *names]:
        np.testing.assert_allclose(b[column], a[column], err_msg=column, **TOL)
    # the intervals differ: a kept negative is a sample of 1/rate negatives, not 1/rate
    # observed ones, and the sampling adds its variance (tests/test_sampling.py checks how much)
    assert (b.normalized_entropy_upper > a.normalized_entropy_upper).all()
    assert (b.normalized_entropy_lower < a.normalized_entropy_lower).all()


def test_downsampled_negatives_equal_their_blocks():
    full, kept = _blocks(8)
    a_src = sqlcal.source(full, score="p", label="y", by="g")
    b_src = sqlcal.source(kept, score="p", label="y", by="g", negative_sampling_rate="rate")
    for metric, column in [(sqlcal.ece, "ece"), (sqlcal.log_loss, "log_loss"),
                           (sqlcal.normalized_entropy, "normalized_entropy"),
                           (sqlcal.calibration_ratio, "calibration_ratio"),
                           (sqlcal.cutoff_error, "cutoff_error")]:
        a, b = metric(a_src), metric(b_src)
        np.testing.assert_allclose(b[column], a[column], err_msg=column, **TOL)
        np.testing.assert_allclose(b.W, a.W, **TOL)
    a, b = sqlcal.reliability(a_src), sqlcal.reliability(b_src)
    for column in ("W", "mean_score", "observed"):
        np.testing.assert_allclose(b[column], a[column], err_msg=column, **TOL)
    # the intervals carry the sampling: never narrower than the full table's
    assert (b.ci_upper - b.ci_lower >= a.ci_upper - a.ci_lower - 1e-12).all()
    assert (a.weight_kind == "frequency").all() and (b.weight_kind == "sampling").all()


def test_fixed_rate_and_weights_multiply():
    full, kept = _blocks(9)
    kept = kept[kept.rate == 0.1].assign(w=2.0)
    full = full[full.rate == 0.1].assign(w=2.0)
    a = sqlcal.log_loss(full, score="p", label="y", weight="w")
    b = sqlcal.log_loss(kept, score="p", label="y", weight="w", negative_sampling_rate=0.1)
    np.testing.assert_allclose(b.log_loss, a.log_loss, **TOL)
    np.testing.assert_allclose(b.W, a.W, **TOL)


def test_score_correction_is_its_formula(upload):
    df = click_log(2000, seed=10, rate=5e-2)
    df["rate"] = np.where(np.arange(len(df)) % 2, 0.05, 0.5)
    got = sqlcal.calibration_in_the_large(upload(df), score="p", label="y",
                                          negative_sampling_rate="rate",
                                          training_negative_rate="rate")
    r = df.rate.to_numpy()
    q = df.p / (df.p + (1 - df.p) / r)
    w = np.where(df.y == 0, 1 / r, 1.0)
    np.testing.assert_allclose(got.mean_score[0], np.sum(w * q) / np.sum(w), **TOL)


def test_model_trained_on_downsampled_data_is_calibrated_after_correction():
    rng = np.random.default_rng(14)
    n, r = 400_000, 0.05
    x = rng.normal(size=n)
    pi = 1 / (1 + np.exp(-(-6.0 + 1.2 * x)))  # base rate about 0.5%
    y = (rng.random(n) < pi).astype(np.int64)
    # the Bayes posterior of the downsampled training data: odds times 1/r
    p = pi / (pi + (1 - pi) * r)
    keep = (y == 1) | (rng.random(n) < r)
    log = pd.DataFrame({"p": p[keep], "y": y[keep]})
    raw = sqlcal.calibration_ratio(log, score="p", label="y", negative_sampling_rate=r)
    fixed = sqlcal.calibration_ratio(log, score="p", label="y", negative_sampling_rate=r,
                                     score_correction=True)
    assert raw.ci_lower[0] > 5  # judged without the correction: far too high
    assert fixed.ci_lower[0] < 1 < fixed.ci_upper[0]
    ece = sqlcal.ece(log, score="p", label="y", negative_sampling_rate=r, score_correction=True,
                     strategy="logit", bins=10)
    assert ece.ece[0] < 1e-3


def test_invalid_rates_are_named_or_dropped():
    df = click_log(300, seed=12)
    df["rate"] = 0.5
    df.loc[df.index[df.y == 0][:3], "rate"] = np.nan
    df.loc[df.index[df.y == 0][3:5], "rate"] = 1.5
    with pytest.raises(sqlcal.InvalidInputError, match=(
            "negative_sampling_rate column 'rate' has 3 negative rows that are NULL; "
            "negative_sampling_rate column 'rate' has 2 negative rows outside")):
        sqlcal.log_loss(df, score="p", label="y", negative_sampling_rate="rate")
    with pytest.warns(UserWarning, match="3 negative rows that are NULL"):
        got = sqlcal.log_loss(df, score="p", label="y", negative_sampling_rate="rate",
                              on_invalid="drop")
    assert got.n_dropped[0] == 5 and got.n[0] == 295


@pytest.mark.parametrize("options, name", [
    ({"negative_sampling_rate": 0.0}, "negative_sampling_rate"),
    ({"negative_sampling_rate": 1.5}, "negative_sampling_rate"),
    ({"negative_sampling_rate": True}, "negative_sampling_rate"),
    ({"score_correction": True}, "score_correction"),
    ({"negative_sampling_rate": 0.5, "soft_labels": True}, "negative_sampling_rate"),
    ({"strategy": "logit", "logit_range": (0.2, 0.1)}, "logit_range"),
    ({"deciles": 0}, "deciles"),
])
def test_options_are_checked_at_the_boundary(options, name):
    df = click_log(100, seed=13)
    metric = sqlcal.calibration_ratio if "deciles" in options else sqlcal.ece
    with pytest.raises(OptionError, match=name):
        metric(df, score="p", label="y", **options)


def test_missing_rate_column_is_named():
    with pytest.raises(sqlcal.InvalidInputError, match="negative_sampling_rate column 'nope'"):
        sqlcal.ece(click_log(50, seed=14), score="p", label="y", negative_sampling_rate="nope")


def test_cli_and_scheduled_report(tmp_path, capsys):
    import json

    from sqlcal.cli.commands import main
    from sqlcal.reporting import scheduled

    df = click_log(20000, seed=15, groups=2)
    keep = (df.y == 1) | (np.arange(len(df)) % 10 == 0)
    path = str(tmp_path / "clicks.parquet")
    df[keep].to_parquet(path)
    assert main(["report", path, "--score", "p", "--label", "y", "--by", "g", "--metrics",
                 "normalized_entropy,calibration_ratio", "--negative-sampling-rate", "0.1",
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["source"]["negative_sampling_rate"] == 0.1
    want = sqlcal.calibration_ratio(df[keep], score="p", label="y", by="g",
                                    negative_sampling_rate=0.1)
    got = [row["calibration_ratio"] for row in doc["rows"]]
    np.testing.assert_allclose(got, want.calibration_ratio, **TOL)
    assert {"normalized_entropy", "normalized_entropy_lower", "calibration_ratio_upper"} <= set(
        doc["columns"])
    config = scheduled.validate_config({
        "source": {"data": path, "score": "p", "label": "y", "by": "g",
                   "negative_sampling_rate": 0.1},
        "metrics": {"normalized_entropy": {}, "calibration_ratio": {"confidence": 0.9}},
        "alerts": [{"metric": "calibration_ratio", "above": 0.0},
                   {"metric": "normalized_entropy", "above": 5.0}]})
    run = scheduled.run_report(config, progress=False)
    assert [a["metric"] for a in run.alerts] == ["calibration_ratio"] * 2


def test_reliability_diagram_takes_log_odds_axes_at_low_base_rates():
    import matplotlib

    matplotlib.use("Agg")
    import sqlcal.plots

    df = click_log(5000, seed=16)
    with pytest.warns(UserWarning, match="more than half"):
        ax = sqlcal.plots.reliability_diagram(df, score="p", label="y")
    assert ax.get_xscale() == ax.get_yscale() == "logit"
    ax = sqlcal.plots.reliability_diagram(df, score="p", label="y", strategy="logit",
                                          scale="linear")
    assert ax.get_xscale() == "linear"
