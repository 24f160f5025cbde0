"""A sampling rate is a sampling design: on a log whose negatives were kept at rate r, every
interval and test carries the sampling's variance (the variance weight v = f/π² of
sqlcal.query.reductions.variance_weights), whatever the value of 1/r; the training design the scores are
corrected for is an option of its own; invalid rates are named.

Checked three ways: simulated coverage against a known population (the acceptance), each formula
against brute-force numpy on the raw rows, and frequency weights against duplicated rows."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from scipy import optimize, special, stats

import sqlcal
from sqlcal.options import OptionError

# -- simulated coverage ------------------------------------------------------------------------

#: score levels of the population: logit-normal quantiles, each with probability 1/K
LEVELS = 40


def _population(base: float) -> np.ndarray:
    """K score levels of mean ``base`` (a calibrated model: y ~ Bernoulli(p))."""
    z = stats.norm.ppf((np.arange(LEVELS) + 0.5) / LEVELS)
    mu = optimize.brentq(lambda m: special.expit(m + z).mean() - base, -20, 20)
    return special.expit(mu + z)


def _true_ne(p: np.ndarray) -> float:
    """The population's normalized entropy, exactly: E[ℓ]/H(E[y]) under y ~ Bernoulli(p)."""
    h = -(p * np.log(p) + (1 - p) * np.log1p(-p))
    b = p.mean()
    return h.mean() / -(b * np.log(b) + (1 - b) * np.log1p(-b))


def downsampled_logs(reps: int, rows: int, base: float, rate: float, seed: int
                     ) -> tuple[pd.DataFrame, float]:
    """``reps`` full logs of ``rows`` rows each from the population (key ``rep``), every positive
    kept and each negative with probability ``rate``: the kept rows, one per row, and the
    population's normalized entropy. Drawn per score level (multinomial counts, binomial labels,
    binomial thinning), which is the same law as drawing row by row."""
    rng = np.random.default_rng(seed)
    p = _population(base)
    counts = rng.multinomial(rows, np.full(LEVELS, 1 / LEVELS), size=reps)
    positives = rng.binomial(counts, p)
    kept = rng.binomial(counts - positives, rate)
    rep, level = np.repeat(np.arange(reps), LEVELS), np.tile(p, reps)
    frame = pd.DataFrame({
        "rep": np.concatenate([np.repeat(rep, positives.ravel()), np.repeat(rep, kept.ravel())]),
        "p": np.concatenate([np.repeat(level, positives.ravel()),
                             np.repeat(level, kept.ravel())]),
        "y": np.concatenate([np.ones(positives.sum(), np.int64), np.zeros(kept.sum(), np.int64)]),
    })
    return frame, _true_ne(p)


#: (base rate, full-log rows): about 800 positives at 0.2, 300 at 0.02 per log
SIZES = {0.2: 4000, 0.02: 15000}
#: replicates per case: the Monte Carlo standard error of a 95% coverage is
#: sqrt(0.95 * 0.05 / 500) = 0.0097 (of a 5% rejection rate the same), so the bands
#: [0.92, 0.98] and [0.02, 0.08] are 3.1 standard errors wide on each side
REPLICATES = 500


@pytest.mark.parametrize("base", sorted(SIZES))
@pytest.mark.parametrize("rate", [0.02, 0.1, 0.0999])
def test_intervals_cover_on_downsampled_logs(base, rate):
    """The acceptance: on logs whose negatives were kept at r (whole 1/r and fractional), the
    normalized entropy's interval and the calibration ratio's cover the population's values 95%
    of the time, and Spiegelhalter's test rejects a calibrated model 5% of the time. Before, whole
    1/r was read as frequency weights (coverage 42% at base 0.2, r = 0.02; Spiegelhalter
    rejecting 51%) and fractional 1/r through Kish's size (coverage 100%, 3x too wide)."""
    logs, ne = downsampled_logs(REPLICATES, SIZES[base], base, rate, seed=11)
    src = sqlcal.source(logs, score="p", label="y", by="rep", negative_sampling_rate=rate)
    out = sqlcal.report(src, metrics=["normalized_entropy", "calibration_ratio",
                                      "spiegelhalter"])
    assert len(out) == REPLICATES and (out.weight_kind == "sampling").all()
    coverage_ne = np.mean((out.normalized_entropy_lower <= ne)
                          & (ne <= out.normalized_entropy_upper))
    coverage_ratio = np.mean((out.calibration_ratio_lower <= 1)
                             & (1 <= out.calibration_ratio_upper))
    rejected = np.mean(out.spiegelhalter_p < 0.05)
    assert 0.92 <= coverage_ne <= 0.98, coverage_ne
    assert 0.92 <= coverage_ratio <= 0.98, coverage_ratio
    assert 0.02 <= rejected <= 0.08, rejected
    # the interval is as wide as the estimates' spread (not 3x as wide, not half)
    half = np.mean(out.normalized_entropy_upper - out.normalized_entropy_lower) / 2
    spread = stats.norm.isf(0.025) * out.normalized_entropy.std()
    assert 0.8 < half / spread < 1.25, (half, spread)


# -- each formula against brute-force numpy on the raw rows ------------------------------------


def _designed_log(seed: int, n: int = 6000) -> pd.DataFrame:
    """A kept log in three groups: negatives kept at rates varying by row (0.05, 0.1, 0.0999,
    0.5), positives with a rate of NULL or 1 (ignored), frequency weights 1-3, scores mildly
    over-confident."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n)
    p = special.expit(-2.5 + 1.2 * x)
    y = (rng.random(n) < special.expit(-2.5 + 1.0 * x)).astype(np.int64)
    rate = rng.choice([0.05, 0.1, 0.0999, 0.5], n)
    keep = (y == 1) | (rng.random(n) < rate)
    frame = pd.DataFrame({"p": p, "y": y, "rate": rate, "f": rng.integers(1, 4, n).astype(float),
                          "g": rng.integers(0, 3, n)})[keep].reset_index(drop=True)
    positive = frame.index[frame.y == 1]
    frame.loc[positive[::2], "rate"] = np.nan  # NULL: every positive kept
    frame.loc[positive[1::2], "rate"] = 1.0
    return frame


def _design(part: pd.DataFrame):
    """p, y, the weight w = f/π, the variance weight v = f/π² and its label-free part v0 = w."""
    p, y, f = (part[c].to_numpy(float) for c in ("p", "y", "f"))
    pi = np.where(y == 1, 1.0, part["rate"].to_numpy(float))
    return p, y, f / pi, f / pi ** 2, f / pi


def test_every_interval_and_test_is_its_formula_on_the_raw_rows(upload):
    frame = _designed_log(21)
    src = sqlcal.source(upload(frame), score="p", label="y", weight="f", by="g",
                        negative_sampling_rate="rate")
    z95 = stats.norm.isf(0.025)
    ne, ratio = sqlcal.normalized_entropy(src), sqlcal.calibration_ratio(src)
    spieg = sqlcal.spiegelhalter(src)
    hl = sqlcal.hosmer_lemeshow(src, strategy="uniform", bins=8)
    rel = sqlcal.reliability(src, bins=6)
    slope = sqlcal.calibration_slope(src)
    for frame_ in (ne, ratio, spieg, hl, slope):
        assert list(frame_.g) == [0, 1, 2] and (frame_.weight_kind == "sampling").all()
    for i, (_, part) in enumerate(frame.groupby("g")):
        p, y, w, v, v0 = _design(part)
        W, q = w.sum(), 1 - 2 * p
        # normalized entropy: NE ± z·sqrt(Σ v u²)/W, u the linearized value of a row
        loss = -(y * np.log(p) + (1 - y) * np.log1p(-p))
        ll, b = np.sum(w * loss) / W, np.sum(w * y) / W
        H = -(b * np.log(b) + (1 - b) * np.log1p(-b))
        u = (loss - ll) / H - ll * np.log((1 - b) / b) / H ** 2 * (y - b)
        half = z95 * np.sqrt(np.sum(v * u * u)) / W
        np.testing.assert_allclose(ne.normalized_entropy[i], ll / H, rtol=1e-11)
        np.testing.assert_allclose([ne.ci_lower[i], ne.ci_upper[i]],
                                   [ll / H - half, ll / H + half], rtol=1e-9)
        # Spiegelhalter: the null model's variance for the population, the design's own by rows
        var = np.sum(v0 * q * q * p * (1 - p)) + np.sum((v - v0) * (y - p) ** 2 * q * q)
        np.testing.assert_allclose(spieg.z[i], np.sum(w * (y - p) * q) / np.sqrt(var),
                                   rtol=1e-9)
        # the calibration ratio: every ρ whose test of π = p/ρ accepts, found by root-finding
        E, O = np.sum(w * p), np.sum(w * y)

        def test(rho):
            pi = p / rho
            V = np.sum(v0 * pi * (1 - pi)) + np.sum((v - v0) * (y - pi) ** 2)
            return (O - E / rho) ** 2 - z95 ** 2 * V

        lo, hi = optimize.brentq(test, E / O / 10, E / O), optimize.brentq(test, E / O, E / O * 10)
        np.testing.assert_allclose([ratio.ci_lower[i], ratio.ci_upper[i]], [lo, hi], rtol=1e-9)
        # Hosmer-Lemeshow on 8 equal-width bins
        bin_ = np.minimum(np.floor(p * 8), 7)
        stat = 0.0
        for k in np.unique(bin_):
            m = bin_ == k
            pbar = np.sum(w[m] * p[m]) / w[m].sum()
            var_k = (np.sum(v0[m]) * pbar * (1 - pbar)
                     + np.sum((v[m] - v0[m]) * (y[m] - p[m]) ** 2))
            stat += (np.sum(w[m] * (y[m] - p[m]))) ** 2 / var_k
        np.testing.assert_allclose(hl.hl_statistic[i], stat, rtol=1e-9)
        # reliability: Wilson at the bin's effective size ȳ(1 − ȳ)W²/Σv(y − ȳ)²
        mine = rel[rel.g == part.g.iloc[0]]
        bin_ = np.minimum(np.floor(p * 6), 5)
        for _, row in mine.iterrows():
            m = bin_ == row.bin
            ybar = np.sum(w[m] * y[m]) / w[m].sum()
            if 0 < ybar < 1:
                size = ybar * (1 - ybar) * w[m].sum() ** 2 / np.sum(v[m] * (y[m] - ybar) ** 2)
            else:  # every label alike: Kish's size under the variance weight
                size = w[m].sum() ** 2 / v[m].sum()
            centre = (ybar + z95 ** 2 / (2 * size)) / (1 + z95 ** 2 / size)
            width = z95 / (1 + z95 ** 2 / size) * np.sqrt(ybar * (1 - ybar) / size
                                                           + z95 ** 2 / (4 * size ** 2))
            np.testing.assert_allclose([row.ci_lower, row.ci_upper],
                                       [centre - width, centre + width], rtol=1e-9)
        # the calibration slope: design-based sandwich (w-weighted bread, v-weighted meat)
        x = np.log(p / (1 - p))
        X = np.column_stack([np.ones_like(x), x])

        def loss_of(theta):
            eta = X @ theta
            return -np.sum(w * (y * eta - np.logaddexp(0, eta)))

        theta = optimize.minimize(loss_of, np.zeros(2), method="BFGS",
                                  options={"gtol": 1e-10}).x
        mu = special.expit(X @ theta)
        bread = np.linalg.inv((X * (w * mu * (1 - mu))[:, None]).T @ X)
        meat = (X * (v * (y - mu) ** 2)[:, None]).T @ X
        np.testing.assert_allclose(slope.slope[i], theta[1], rtol=1e-6)
        np.testing.assert_allclose(slope.slope_se[i], np.sqrt((bread @ meat @ bread)[1, 1]),
                                   rtol=1e-5)


def test_sampling_weights_take_the_linearized_interval():
    """Without a rate, sampling weights have v = w²: the normalized entropy's interval is the
    linearized Σw²u²/W² (it was the rows' covariance over Kish's size W²/Σw², which assumes
    weights unrelated to the loss: 3x too wide when they are 1/r on the negatives)."""
    frame = _designed_log(23, n=4000)
    w = np.where(frame.y == 1, 1.0, 1 / frame.rate) * np.where(frame.index % 3 == 0, 1.5, 1.0)
    frame = frame.assign(w=w)
    got = sqlcal.normalized_entropy(frame, score="p", label="y", weight="w")
    assert got.weight_kind[0] == "sampling"
    p, y = frame.p.to_numpy(), frame.y.to_numpy()
    W = w.sum()
    loss = -(y * np.log(p) + (1 - y) * np.log1p(-p))
    ll, b = np.sum(w * loss) / W, np.sum(w * y) / W
    H = -(b * np.log(b) + (1 - b) * np.log1p(-b))
    u = (loss - ll) / H - ll * np.log((1 - b) / b) / H ** 2 * (y - b)
    half = stats.norm.isf(0.025) * np.sqrt(np.sum(w * w * u * u)) / W
    np.testing.assert_allclose([got.ci_lower[0], got.ci_upper[0]],
                               [ll / H - half, ll / H + half], rtol=1e-9)


def test_frequency_weights_with_a_rate_equal_duplicated_rows(upload):
    """v = f/π²: a kept row of weight f is f kept rows, each a sample of 1/r negatives; every
    interval and test equals the one of the duplicated rows (whole 1/r and fractional)."""
    frame = _designed_log(22, n=3000)
    duplicated = frame.loc[frame.index.repeat(frame.f.astype(int))].drop(columns="f")
    a = sqlcal.source(upload(frame), score="p", label="y", weight="f", by="g",
                      negative_sampling_rate="rate")
    b = sqlcal.source(upload(duplicated), score="p", label="y", by="g",
                      negative_sampling_rate="rate")
    # (equal-width risk groups: equal-mass edges of fractional weights are placed on positions
    # rescaled to the row count, a binning convention of sampling weights)
    names = ["normalized_entropy", "calibration_ratio", "spiegelhalter", "calibration_slope"]
    ra, rb = sqlcal.report(a, metrics=names), sqlcal.report(b, metrics=names)
    ha = sqlcal.hosmer_lemeshow(a, strategy="uniform")
    hb = sqlcal.hosmer_lemeshow(b, strategy="uniform")
    np.testing.assert_allclose(ha.hl_statistic, hb.hl_statistic, rtol=1e-9)
    numbers = [c for c in ra.columns if c not in ("g", "n") and ra[c].dtype.kind == "f"]
    assert {"normalized_entropy_lower", "calibration_ratio_upper", "spiegelhalter_z",
            "calibration_slope_se"} <= set(numbers)
    for column in numbers:
        np.testing.assert_allclose(ra[column], rb[column], rtol=1e-9, err_msg=column)
    for metric in (sqlcal.reliability, sqlcal.kuiper, sqlcal.cutoff_error):
        x, y = metric(a), metric(b)
        for column in [c for c in x.columns if x[c].dtype.kind == "f"]:
            np.testing.assert_allclose(x[column], y[column], rtol=1e-9, err_msg=column)


def test_a_rate_is_a_design_whatever_one_over_rate_is():
    logs, _ = downsampled_logs(1, 20000, 0.05, 0.1, seed=5)
    src = sqlcal.source(logs, score="p", label="y", negative_sampling_rate=0.1)
    # (Jupyter's view of a source with a rate and no weight column raised a TypeError)
    assert "sampling weights of the design" in src._repr_html_()
    assert sqlcal.spiegelhalter(src).weight_kind[0] == "sampling"
    with pytest.raises(OptionError, match="negative_sampling_rate"):
        sqlcal.spiegelhalter(src, weight_kind="frequency")
    with pytest.raises(OptionError, match="negative_sampling_rate"):
        sqlcal.normalized_entropy(src, weight_kind="frequency")
    with pytest.raises(sqlcal.InvalidInputError, match="TCE's exact binomial tests"):
        sqlcal.tce(src)


# -- the training design: corrected scores --------------------------------------------------


def _trained_on_downsampled(seed: int, n: int, rate: float):
    """A full log of a model trained on data whose negatives were kept at ``rate``: its score
    is the posterior of that data, odds times 1/rate (calibrated once corrected)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n)
    pi = special.expit(-5.0 + 1.2 * x)  # base rate about 1.4%
    y = (rng.random(n) < pi).astype(np.int64)
    return pd.DataFrame({"p": pi / (pi + (1 - pi) * rate), "y": y})


def _corrected_oracle(p, y, w, r_train):
    """The calibration ratio and normalized entropy of the corrected scores, in numpy."""
    q = p / (p + (1 - p) / r_train)
    loss = -(y * np.log(q) + (1 - y) * np.log1p(-q))
    b = np.sum(w * y) / np.sum(w)
    return (np.sum(w * q) / np.sum(w * y),
            np.sum(w * loss) / np.sum(w) / -(b * np.log(b) + (1 - b) * np.log1p(-b)))


def test_every_row_is_corrected_when_positives_have_no_rate(upload):
    """The log keeps every positive (rate NULL or 1 in its column) and 5% of the negatives; the
    model was trained on negatives kept at 5%. Before, score_correction=True corrected only
    the rows with a rate below 1: ratio 1.263 and NE 0.479 where 1.003 and 0.867 are right."""
    full = _trained_on_downsampled(31, 400_000, 0.05)
    rng = np.random.default_rng(32)
    keep = (full.y == 1) | (rng.random(len(full)) < 0.05)
    log = full[keep].assign(rate=np.where(full.y[keep] == 1,
                                          np.where(rng.random(keep.sum()) < 0.5, np.nan, 1.0),
                                          0.05)).reset_index(drop=True)
    t = upload(log)
    ratio = sqlcal.calibration_ratio(t, score="p", label="y", negative_sampling_rate="rate",
                                     training_negative_rate=0.05)
    ne = sqlcal.normalized_entropy(t, score="p", label="y", negative_sampling_rate="rate",
                                   training_negative_rate=0.05)
    p, y = log.p.to_numpy(), log.y.to_numpy()
    want_ratio, want_ne = _corrected_oracle(p, y, np.where(y == 1, 1.0, 1 / 0.05), 0.05)
    np.testing.assert_allclose([ratio.calibration_ratio[0], ne.normalized_entropy[0]],
                               [want_ratio, want_ne], rtol=1e-10)
    assert ratio.ci_lower[0] < 1 < ratio.ci_upper[0]  # calibrated once every row is corrected
    # the old shorthand cannot read a training rate from the log's rate column: refused
    with pytest.raises(OptionError, match="training_negative_rate"):
        sqlcal.calibration_ratio(t, score="p", label="y", negative_sampling_rate="rate",
                                 score_correction=True)
    # with a number it is training_negative_rate= that number
    kept = sqlcal.calibration_ratio(t, score="p", label="y", negative_sampling_rate=0.05,
                                    score_correction=True)
    np.testing.assert_allclose(kept.calibration_ratio[0], want_ratio, rtol=1e-10)


def test_a_model_trained_on_downsampled_negatives_scored_on_a_full_log():
    """Before, only negative_sampling_rate could bring the correction, and it also reweighted
    negatives that were never sampled (ratio 9.46 where 1.00 is right)."""
    full = _trained_on_downsampled(33, 200_000, 0.1)
    got = sqlcal.calibration_ratio(full, score="p", label="y", training_negative_rate=0.1)
    want, _ = _corrected_oracle(full.p.to_numpy(), full.y.to_numpy(), np.ones(len(full)), 0.1)
    np.testing.assert_allclose(got.calibration_ratio[0], want, rtol=1e-10)
    assert got.ci_lower[0] < 1 < got.ci_upper[0] and got.weight_kind[0] == "frequency"
    # a column of training rates, read on every row
    per_row = full.assign(t=0.1)
    by_column = sqlcal.calibration_ratio(per_row, score="p", label="y",
                                         training_negative_rate="t")
    np.testing.assert_allclose(by_column.calibration_ratio, got.calibration_ratio, rtol=1e-12)


def test_invalid_rates_are_errors_naming_the_column_and_the_count(con):
    # NaN survives only in SQL (a pandas upload turns it into NULL)
    rows = [(0.2, 0, "0.1"), (0.3, 0, "NULL"), (0.4, 0, "NULL"), (0.5, 0, "0.0"),
            (0.6, 0, "-0.5"), (0.7, 0, "1.5"), (0.8, 0, "'NaN'"), (0.25, 0, "0.5"),
            (0.9, 1, "NULL"), (0.35, 1, "1.0"), (0.45, 1, "7.0"), (0.55, 1, "'NaN'")]
    values = ", ".join(f"({p}::DOUBLE, {y}, CAST({r} AS DOUBLE))" for p, y, r in rows)
    t = con.sql(f"SELECT * FROM (VALUES {values}) AS v(p, y, rate)")
    with pytest.raises(sqlcal.InvalidInputError) as err:
        sqlcal.log_loss(t, score="p", label="y", negative_sampling_rate="rate")
    message = str(err.value)
    for part in ("negative_sampling_rate column 'rate' has 2 negative rows that are NULL",
                 "negative_sampling_rate column 'rate' has 1 negative rows that are NaN",
                 "negative_sampling_rate column 'rate' has 3 negative rows outside (0, 1]"):
        assert part in message, message
    assert "row weight" not in message  # the rates are named, not the weight they made
    # a positive's rate is not read (every positive is kept), whatever it holds
    with pytest.warns(UserWarning, match="negative_sampling_rate column 'rate' has 2"):
        src = sqlcal.source(t, score="p", label="y", negative_sampling_rate="rate",
                            on_invalid="drop")
    assert int(src.dropped["n_dropped"].sum()) == 6
    got = sqlcal.calibration_in_the_large(src)
    p = np.array([0.2, 0.25, 0.9, 0.35, 0.45, 0.55])
    w = np.array([10.0, 2.0, 1, 1, 1, 1])
    np.testing.assert_allclose(got.mean_score[0], np.sum(w * p) / w.sum(), rtol=1e-12)
    # a training rate is read on every row, positives included
    with pytest.raises(sqlcal.InvalidInputError) as err:
        sqlcal.log_loss(t, score="p", label="y", training_negative_rate="rate")
    message = str(err.value)
    for part in ("training_negative_rate column 'rate' has 3 rows that are NULL",
                 "training_negative_rate column 'rate' has 2 rows that are NaN",
                 "training_negative_rate column 'rate' has 4 rows outside (0, 1]"):
        assert part in message, message


@pytest.mark.parametrize("options, name", [
    ({"training_negative_rate": 0.0}, "training_negative_rate"),
    ({"training_negative_rate": 2}, "training_negative_rate"),
    ({"training_negative_rate": True}, "training_negative_rate"),
    ({"training_negative_rate": 0.1, "score_correction": True, "negative_sampling_rate": 0.1},
     "not both"),
    ({"score_correction": True}, "training_negative_rate= alone"),
])
def test_rate_options_are_checked_at_the_boundary(options, name):
    df = pd.DataFrame({"p": [0.1, 0.6], "y": [0, 1]})
    with pytest.raises(OptionError, match=name):
        sqlcal.brier(df, score="p", label="y", **options)
    with pytest.raises(sqlcal.InvalidInputError, match="training_negative_rate column 'nope'"):
        sqlcal.brier(df, score="p", label="y", training_negative_rate="nope")


def test_cli_takes_the_training_rate(tmp_path, capsys):
    from sqlcal.cli.commands import main

    full = _trained_on_downsampled(34, 50_000, 0.1)
    rng = np.random.default_rng(35)
    log = full[(full.y == 1) | (rng.random(len(full)) < 0.2)].assign(rate=0.2)
    log.loc[log.y == 1, "rate"] = np.nan
    path = str(tmp_path / "log.parquet")
    log.to_parquet(path)
    assert main(["report", path, "--score", "p", "--label", "y", "--metrics",
                 "calibration_ratio", "--negative-sampling-rate", "rate",
                 "--training-negative-rate", "0.1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["source"]["training_negative_rate"] == 0.1
    assert doc["source"]["negative_sampling_rate"] == "rate"
    p, y = log.p.to_numpy(), log.y.to_numpy()
    want, _ = _corrected_oracle(p, y, np.where(y == 1, 1.0, 5.0), 0.1)
    np.testing.assert_allclose(doc["rows"][0]["calibration_ratio"], want, rtol=1e-10)
    assert main(["report", path, "--score", "p", "--label", "y", "--metrics",
                 "calibration_ratio", "--negative-sampling-rate", "rate",
                 "--score-correction"]) == 2
    err = capsys.readouterr().err
    assert "training_negative_rate" in err and "Traceback" not in err
