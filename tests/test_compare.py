"""sqlcal.compare (issue 34): paired and unpaired differences against numpy on the raw rows on
every engine, the paired bins' sums against numpy sums (engines agree to 1e-9), the false
positive rate when the two scores are equal in distribution, and the power against a logit
shift of 0.2 on 10^5 rows."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import sqlcal
from sqlcal.metrics.compare import cholesky, paired_finish
from sqlcal.options import OptionError
from tests.intervals_sim import paired_frame

Z95 = 1.959963984540054
REL = dict(rtol=1e-9, atol=1e-12)


def logit(p):
    return np.log(p / (1 - p))


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def shadow(n: int, seed: int, *, shift: float = 0.0, noise: float = 0.3, weights: bool = False,
           groups: int = 0) -> pd.DataFrame:
    """Rows scored by two models: ``a`` and ``b`` are the true rate's logit plus independent
    noise (equal in distribution), ``b`` shifted by ``shift`` in logit."""
    rng = np.random.default_rng(seed)
    t = rng.beta(2, 3, n)
    df = pd.DataFrame({"a": sigmoid(logit(t) + noise * rng.standard_normal(n)),
                       "b": sigmoid(logit(t) + noise * rng.standard_normal(n) + shift),
                       "y": (rng.random(n) < t).astype(np.int64)})
    if weights:
        df["w"] = rng.uniform(0.5, 3.0, n)
    if groups:
        df["g"] = rng.integers(0, groups, n)
    return df


@pytest.mark.parametrize("weighted", [False, True])
def test_paired_delta_differences_match_numpy_on_rows(con, upload, weighted):
    df = shadow(3000, 1, shift=0.3, weights=weighted)
    w = df["w"].to_numpy() if weighted else np.ones(len(df))
    v = w * w if weighted else w
    p, q, y = df["a"].to_numpy(), df["b"].to_numpy(), df["y"].to_numpy(float)
    W = w.sum()
    loss = lambda s: -(y * np.log(s) + (1 - y) * np.log(1 - s))
    rows = {"brier": ((y - p) ** 2, (y - q) ** 2), "log_loss": (loss(p), loss(q)),
            "calibration_in_the_large": (p - y, q - y)}
    out = sqlcal.compare(upload(df), score="a", baseline="b", label="y",
                         weight="w" if weighted else None, metrics=list(rows))
    for metric, (la, lb) in rows.items():
        d = la - lb
        diff = np.sum(w * d) / W
        se = np.sqrt(np.sum(v * (d - diff) ** 2)) / W
        got = out[out["metric"] == metric].iloc[0]
        np.testing.assert_allclose(
            [got["value"], got["baseline_value"], got["difference"], got["ci_lower"],
             got["ci_upper"]],
            [np.sum(w * la) / W, np.sum(w * lb) / W, diff, diff - Z95 * se, diff + Z95 * se],
            **REL)
        assert got["design"] == "paired" and got["ci_method"] == "delta"
        assert got["weight_kind"] == ("sampling" if weighted else "frequency")


def test_paired_bins_engines_agree_with_numpy_sums(con, upload):
    """The paired ECE and RMSCE differences of each engine equal the finish on numpy's sums of
    the raw rows, to 1e-9."""
    df = shadow(4000, 2, shift=0.2, groups=2)
    out = sqlcal.compare(upload(df), score="a", baseline="b", label="y", by="g",
                         metrics=["ece", "rmsce"], bootstrap=300, seed=3)
    frames = []
    for g, part in df.groupby("g"):
        one = np.ones(len(part))
        frames.append(paired_frame(part["a"].to_numpy(), part["b"].to_numpy(),
                                   part["y"].to_numpy(float), one, one).assign(g=g))
    want = paired_finish(pd.concat(frames, ignore_index=True), by=["g"],
                         metrics=["ece", "rmsce"], bins=15, confidence=0.95, replicates=300,
                         seed=3, weight_kind="frequency")
    columns = ["value", "baseline_value", "difference", "ci_lower", "ci_upper", "p_value"]
    got = out.sort_values(["g", "metric"])[columns].to_numpy(float)
    np.testing.assert_allclose(got, want.sort_values(["g", "metric"])[columns].to_numpy(float),
                               **REL)


def test_unpaired_delta_adds_the_variances():
    a, b = shadow(3000, 4), shadow(2000, 5, shift=0.4)
    out = sqlcal.compare(a, score="a", label="y", baseline="b", baseline_data=b,
                         metrics=["brier", "calibration_in_the_large"])
    for metric, row in zip(out["metric"], out.itertuples()):
        terms = []
        for df, col in ((a, "a"), (b, "b")):
            p, y = df[col].to_numpy(), df["y"].to_numpy(float)
            z = (y - p) ** 2 if metric == "brier" else p - y
            terms.append((z.mean(), np.sum((z - z.mean()) ** 2) / len(z) ** 2))
        diff = terms[0][0] - terms[1][0]
        se = np.sqrt(terms[0][1] + terms[1][1])
        np.testing.assert_allclose([row.difference, row.ci_lower, row.ci_upper],
                                   [diff, diff - Z95 * se, diff + Z95 * se], rtol=1e-9)
        assert row.design == "unpaired"


def test_unpaired_two_parts_of_one_table():
    df = pd.concat([shadow(3000, 6).assign(v="A"), shadow(3000, 7, shift=0.5).assign(v="B")])
    df["s"] = np.where(df["v"] == "A", df["a"], df["b"])
    out = sqlcal.compare(df, score="s", label="y", where="v = 'B'", baseline_where="v = 'A'",
                         metrics=["ece", "calibration_in_the_large"])
    assert (out["n"] == 3000).all() and (out["baseline_n"] == 3000).all()
    assert (out["p_value"] < 0.01).all()  # the shift of 0.5 shows on 3,000 rows a side
    assert (out["ci_lower"] <= out["difference"]).all()


def test_baseline_column_validated_and_options_checked():
    df = shadow(500, 8)
    df.loc[3, "b"] = 1.5
    with pytest.raises(sqlcal.InvalidInputError, match="baseline column 'b' has 1 rows"):
        sqlcal.compare(df, score="a", baseline="b", label="y")
    with pytest.raises(ValueError, match="baseline"):
        sqlcal.compare(df, score="a", label="y")
    with pytest.raises(ValueError, match="cannot be compared"):
        sqlcal.compare(df, score="a", baseline="b", label="y", metrics=["kuiper"])
    with pytest.raises(OptionError, match="confidence"):
        sqlcal.compare(df, score="a", baseline="b", label="y", confidence=2.0)


def test_cholesky_reproduces_the_moments():
    rng = np.random.default_rng(9)
    X = np.stack([np.ones(40), (rng.random(40) < 0.5).astype(float), rng.random(40),
                  rng.random(40)], axis=1)
    C = np.stack([X.T @ X, (X * [1, 0, 1, 1]).T @ (X * [1, 0, 1, 1])])  # one singular
    L = cholesky(C)
    np.testing.assert_allclose(L @ np.swapaxes(L, 1, 2), C, rtol=1e-9, atol=1e-9)


def _rejections(n: int, reps: int, shift: float, seed: int, metrics) -> dict:
    """The share of ``reps`` paired comparisons (every sample a group of one summary) whose
    p-value is below 5%, per metric."""
    frames = []
    for r in range(reps):
        df = shadow(n, seed * 10_000 + r, shift=shift)
        one = np.ones(n)
        frames.append(paired_frame(df["a"].to_numpy(), df["b"].to_numpy(),
                                   df["y"].to_numpy(float), one, one).assign(rep=r))
    out = paired_finish(pd.concat(frames, ignore_index=True), by=["rep"], metrics=metrics,
                        bins=15, confidence=0.95, replicates=500, seed=seed,
                        weight_kind="frequency")
    return out.groupby("metric")["p_value"].apply(lambda p: float(np.mean(p < 0.05))).to_dict()


def test_false_positive_rate_when_equal_in_distribution():
    """Two score columns equal in distribution (the same noise law around the true rate): at
    most 6% of 400 paired comparisons of 20,000 rows reject at 5%, for every metric."""
    rates = _rejections(20000, 400, 0.0, 1, ["ece", "rmsce", "brier", "log_loss",
                                              "calibration_in_the_large"])
    for metric, rate in rates.items():
        assert rate <= 0.06, (metric, rate)


def test_power_against_a_logit_shift_on_1e5_rows():
    """A baseline shifted by 0.2 in logit: the paired comparison of 10^5 rows rejects at 5% in
    most runs (40 runs: ECE and CITL every time, in this seed)."""
    rates = _rejections(100_000, 40, 0.2, 2, ["ece", "calibration_in_the_large"])
    assert rates["ece"] >= 0.9, rates
    assert rates["calibration_in_the_large"] >= 0.9, rates


def test_scheduled_report_compares_with_its_baseline(tmp_path):
    import jsonschema

    from sqlcal.reporting import scheduled

    df = shadow(4000, 10, shift=0.3, groups=2)
    path = tmp_path / "shadow.parquet"
    df.to_parquet(path)
    config = scheduled.validate_config({
        "source": {"data": str(path), "score": "a", "label": "y", "by": ["g"]},
        "metrics": {"brier": {}},
        "compare": {"baseline": "b", "metrics": ["brier", "calibration_in_the_large"]}})
    run = scheduled.run_report(config)
    want = sqlcal.compare(df, score="a", baseline="b", label="y", by="g",
                          metrics=["brier", "calibration_in_the_large"])
    pd.testing.assert_frame_equal(run.comparison.reset_index(drop=True), want)
    doc = scheduled.to_document(run)
    jsonschema.validate(doc, scheduled.json_schema())
    assert len(doc["comparison"]) == 4 and {r["design"] for r in doc["comparison"]} == {"paired"}
    with pytest.raises(scheduled.ConfigError, match="compare"):
        scheduled.validate_config({"source": {"data": str(path), "score": "a", "label": "y"},
                                   "metrics": {"brier": {}}, "compare": {"metrics": ["ece"]}})


def test_dropped_rows_are_counted_per_side_and_group():
    """on_invalid="drop": each side reports the invalid rows it left out, per group (counted
    here in pandas), and the comparison equals the one on the clean rows."""
    rng = np.random.default_rng(21)
    n = 3000
    p = rng.uniform(0.05, 0.95, n)
    df = pd.DataFrame({"p": p, "q": np.clip(p + 0.05, 0, 1), "g": rng.integers(0, 3, n),
                       "y": (rng.random(n) < p).astype(float)})
    df.loc[:9, "p"] = np.nan          # the model's score
    df.loc[10:13, "q"] = 1.5          # the baseline's score
    df.loc[14:15, "y"] = np.nan       # both sides' label
    bad_p = df["p"].isna() | df["y"].isna()
    bad_q = (df["q"] > 1) | df["y"].isna()
    options = dict(score="p", label="y", by="g", bootstrap=200, on_invalid="drop")
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        unpaired = sqlcal.compare(df, baseline="q", baseline_data=df, **options)
        paired = sqlcal.compare(df, baseline="q", **options)
    clean = sqlcal.compare(df[~bad_p].drop(columns="q"), baseline="p",
                           baseline_data=df[~bad_q].drop(columns="p").rename(columns={"q": "p"}),
                           **{**options, "on_invalid": "raise"})
    per_group = unpaired.drop_duplicates("g").set_index("g")
    assert per_group["n_dropped"].to_dict() == df[bad_p].groupby("g").size().reindex(
        [0, 1, 2], fill_value=0).to_dict()
    assert per_group["baseline_n_dropped"].to_dict() == df[bad_q].groupby("g").size().reindex(
        [0, 1, 2], fill_value=0).to_dict()
    pd.testing.assert_frame_equal(unpaired.drop(columns=["n_dropped", "baseline_n_dropped"]),
                                  clean)
    both = (bad_p | bad_q)
    want = df[both].groupby("g").size().reindex([0, 1, 2], fill_value=0).to_dict()
    got = paired.drop_duplicates("g").set_index("g")
    assert got["n_dropped"].to_dict() == want == got["baseline_n_dropped"].to_dict()
