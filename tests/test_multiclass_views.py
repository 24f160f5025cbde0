"""Multiclass views: top-label per predicted class, logits as input, class averages and the
worst class, the debiased squared ECE; against brute-force numpy and uncertainty-calibration."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import special

import sqlcal
from sqlcal.options import OptionError
from tests import oracle

CLASSES = ("a", "b", "c")


def predictions(n=500, seed=0):
    """Wide frame of continuous probabilities (softmax of logits), an overconfident true class,
    the logits themselves, a model key, integer weights and example ids."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(0, 1.5, (n, len(CLASSES)))
    truth = np.array([rng.choice(len(CLASSES), p=row)
                      for row in special.softmax(logits / 1.6, axis=1)])
    frame = pd.DataFrame(special.softmax(logits, axis=1), columns=list(CLASSES))
    for k, c in enumerate(CLASSES):
        frame[f"z_{c}"] = logits[:, k]
    frame["truth"] = np.array(CLASSES)[truth]
    frame["w"] = rng.integers(0, 4, n).astype(float)
    frame["example"] = np.arange(n)
    return frame


def to_long(frame, value="prob"):
    cols = list(CLASSES) if value == "prob" else [f"z_{c}" for c in CLASSES]
    long = frame.melt(id_vars=["example", "truth", "w"], value_vars=cols, var_name="cls",
                      value_name=value)
    long["cls"] = long.cls.str.replace("z_", "")
    long["label"] = (long.cls == long.truth).astype(int)
    return long.drop(columns="truth")


def numpy_ece(p, y, w, bins=10):
    return oracle.binned_ece(p, y, w, oracle.bin_ids(p, bins))


def numpy_debiased(p, y, w, ids):
    """Σ_b W_b/W [(ȳ_b − p̄_b)² − ȳ_b(1 − ȳ_b)/(W_b − 1)], bins of W_b < 2 adding 0."""
    total = 0.0
    for b in np.unique(ids):
        m = ids == b
        wb = w[m].sum()
        if wb < 2:
            continue
        yb, pb = (w[m] * y[m]).sum() / wb, (w[m] * p[m]).sum() / wb
        total += wb * ((yb - pb) ** 2 - yb * (1 - yb) / (wb - 1))
    return total / w.sum()


def test_top_label_per_predicted_class_equals_numpy(upload):
    frame = predictions(n=300)
    p = frame[list(CLASSES)].to_numpy()
    predicted = np.array(CLASSES)[p.argmax(1)]
    correct = (predicted == frame.truth.to_numpy()).astype(int)
    w = frame.w.to_numpy()
    wide = sqlcal.multiclass(upload(frame), format="wide", probs=list(CLASSES), label="truth",
                             weight="w")
    # the long layout's top row (a window per example) in DuckDB; the engines run it in
    # test_multiclass.py
    long = sqlcal.multiclass(to_long(frame), format="long", example="example",
                             cls="cls", prob="prob", label="label", weight="w")
    for table in (wide, long):
        got = sqlcal.ece(table, score="score", label="label", weight="weight",
                         by="predicted_class", bins=10).set_index("predicted_class")
        assert sorted(got.index) == list(CLASSES)
        for c in CLASSES:
            m = predicted == c
            assert got.ece[c] == pytest.approx(numpy_ece(p.max(1)[m], correct[m], w[m]),
                                               abs=1e-12)
        brier = sqlcal.brier(table, score="score", label="label", weight="weight",
                             by="predicted_class").set_index("predicted_class")
        for c in CLASSES:
            m = predicted == c
            want = (w[m] * (p.max(1)[m] - correct[m]) ** 2).sum() / w[m].sum()
            assert brier.brier[c] == pytest.approx(want, abs=1e-12)


def test_logits_give_the_numbers_of_their_softmax(upload):
    frame = predictions(n=300, seed=1)
    cases = [  # wide logits, top-label; long logits, classwise
        ("top_label", [], dict(format="wide", logits=[f"z_{c}" for c in CLASSES],
                               classes=list(CLASSES), label="truth"), frame),
        ("classwise", ["class"], dict(format="long", example="example", cls="cls", logit="z",
                                      label="label"), to_long(frame, "z")),
    ]
    for i, (mode, by, options, data) in enumerate(cases):
        from_probs = sqlcal.multiclass(frame, format="wide", mode=mode, probs=list(CLASSES),
                                       label="truth")
        want = sqlcal.ece(from_probs, score="score", label="label", by=by, bins=10)
        # the wide softmax in each engine; the long one (windows) in DuckDB here, in each
        # engine through the temperature map's SQL (test_multiclass_temperature.py)
        data = upload(data) if i == 0 else data
        got = sqlcal.ece(sqlcal.multiclass(data, mode=mode, **options), score="score",
                         label="label", by=by, bins=10)
        if by:
            got, want = got.sort_values("class"), want.sort_values("class")
            assert got["class"].tolist() == list(CLASSES)
        np.testing.assert_allclose(got.ece, want.ece, rtol=0, atol=1e-12)


def test_class_average_and_worst_class_equal_numpy_and_weights_repeat():
    frame = predictions(n=400, seed=2)
    repeated = frame.loc[np.repeat(frame.index, frame.w.astype(int))]
    repeated = repeated.assign(example=np.arange(len(repeated)))
    per_class = sqlcal.multiclass(frame, format="wide", mode="classwise",
                                  probs=list(CLASSES), label="truth", weight="w")
    got = sqlcal.classwise(sqlcal.ece, per_class, weight="weight", metric_options={"bins": 10})
    values = [numpy_ece(frame[c].to_numpy(), (frame.truth == c).to_numpy().astype(int),
                        frame.w.to_numpy()) for c in CLASSES]
    assert got.ece_average.iloc[0] == pytest.approx(np.mean(values), abs=1e-12)
    assert got.ece_max.iloc[0] == pytest.approx(max(values), abs=1e-12)
    assert got.worst_class.iloc[0] == CLASSES[int(np.argmax(values))]
    plain = sqlcal.multiclass(repeated, format="wide", mode="classwise",
                              probs=list(CLASSES), label="truth")
    for metric in (sqlcal.ece, sqlcal.debiased_ece):
        a = sqlcal.classwise(metric, per_class, weight="weight", metric_options={"bins": 10})
        b = sqlcal.classwise(metric, plain, metric_options={"bins": 10})
        value = "ece" if metric is sqlcal.ece else "ece_sq_debiased"
        assert a[f"{value}_average"].iloc[0] == pytest.approx(b[f"{value}_average"].iloc[0],
                                                              abs=1e-12)
        assert a.worst_class.iloc[0] == b.worst_class.iloc[0]
    top_w = sqlcal.multiclass(frame, format="wide", probs=list(CLASSES), label="truth",
                              weight="w")
    top = sqlcal.multiclass(repeated, format="wide", probs=list(CLASSES), label="truth")
    a = sqlcal.debiased_ece(top_w, score="score", label="label", weight="weight", bins=10)
    b = sqlcal.debiased_ece(top, score="score", label="label", bins=10)
    assert a.ece_sq_debiased.iloc[0] == pytest.approx(b.ece_sq_debiased.iloc[0], abs=1e-12)


def test_debiased_ece_equals_numpy_and_uncertainty_calibration():
    calibration = pytest.importorskip("calibration", reason="uncertainty-calibration is not "
                                      "installed (pip install uncertainty-calibration)")
    frame = predictions(n=600, seed=3)
    p = frame[list(CLASSES)].to_numpy()
    y = np.searchsorted(CLASSES, frame.truth)
    top = sqlcal.multiclass(frame, format="wide", probs=list(CLASSES), label="truth")
    # brute force on raw rows, equal-width bins, weights 1
    conf, correct = p.max(1), (p.argmax(1) == y).astype(int)
    got = sqlcal.debiased_ece(top, score="score", label="label", bins=10)
    want = numpy_debiased(conf, correct, np.ones(len(y)), oracle.bin_ids(conf, 10))
    assert got.ece_sq_debiased.iloc[0] == pytest.approx(want, abs=1e-12)
    # uncertainty-calibration: equal-mass bins, its debiased L2 error (top-label, marginal)
    got = sqlcal.debiased_ece(top, score="score", label="label", bins=15,
                              strategy="uncertainty_calibration")
    want = calibration.get_calibration_error(p, y, p=2, debias=True, mode="top-label")
    assert got.rmsce_debiased.iloc[0] == pytest.approx(want, abs=1e-12)
    per_class = sqlcal.multiclass(frame, format="wide", mode="classwise", probs=list(CLASSES),
                                  label="truth")
    got = sqlcal.classwise(sqlcal.debiased_ece, per_class, value="rmsce_debiased", power=2,
                           metric_options={"bins": 15, "strategy": "uncertainty_calibration"})
    want = calibration.get_calibration_error(p, y, p=2, debias=True, mode="marginal")
    assert got.rmsce_debiased_average.iloc[0] == pytest.approx(want, abs=1e-12)
    # and its plug-in L2 error is sqlcal's RMSCE averaged with power 2
    got = sqlcal.classwise(sqlcal.ece, per_class, power=2, metric_options={
        "bins": 15, "strategy": "uncertainty_calibration", "norm": "l2"})
    want = calibration.get_calibration_error(p, y, p=2, debias=False, mode="marginal")
    assert got.rmsce_average.iloc[0] == pytest.approx(want, abs=1e-12)


@pytest.mark.parametrize("call, problem", [
    (lambda t: sqlcal.classwise(sqlcal.ece, t, by="class"), r"by= lists 'class'"),
    (lambda t: sqlcal.classwise(sqlcal.ece, t, power=0.5), r"power"),
    (lambda t: sqlcal.classwise("ece", t), r"metric must be a sqlcal metric"),
    (lambda t: sqlcal.classwise(sqlcal.ece, t, value="nope"), r"value='nope' is not a column"),
])
def test_classwise_options_that_cannot_be_meant_are_refused(call, problem):
    per_class = sqlcal.multiclass(predictions(n=40, seed=4), format="wide", mode="classwise",
                                  probs=list(CLASSES), label="truth")
    with pytest.raises(OptionError, match=problem):
        call(per_class)


@pytest.mark.parametrize("options, problem", [
    (dict(probs=list(CLASSES), logits=["z_a", "z_b", "z_c"]), r"not both"),
    (dict(), r"needs one of probs=.*not neither"),
    (dict(probs=list(CLASSES), prob="a"), r"belong to the long format"),
])
def test_probs_and_logits_options_are_refused_by_name(options, problem):
    with pytest.raises(OptionError, match=problem):
        sqlcal.multiclass(predictions(n=20, seed=5), format="wide", label="truth", **options)


def test_cli_report_measures_multiclass_views(tmp_path, capsys):
    import json

    from sqlcal.cli import commands

    frame = predictions(n=300, seed=6)
    path = tmp_path / "preds.parquet"
    frame.to_parquet(path)
    p = frame[list(CLASSES)].to_numpy()
    predicted = np.array(CLASSES)[p.argmax(1)]
    correct = (predicted == frame.truth.to_numpy()).astype(int)
    w = frame.w.to_numpy()
    code = commands.main(["report", str(path), "--multiclass", "top_label", "--probs", "a,b,c",
                     "--label", "truth", "--weight", "w", "--by", "predicted_class",
                     "--metrics", "ece", "--bins", "10", "--json"])
    assert code == 0
    rows = {r["predicted_class"]: r["ece"] for r in json.loads(capsys.readouterr().out)["rows"]}
    for c in CLASSES:
        m = predicted == c
        assert rows[c] == pytest.approx(numpy_ece(p.max(1)[m], correct[m], w[m]), abs=1e-12)
    code = commands.main(["report", str(path), "--multiclass", "classwise", "--logits",
                     "z_a,z_b,z_c", "--label", "truth", "--metrics", "ece", "--bins", "10",
                     "--json"])
    assert code == 2  # the logit columns are not named by the labels: the error says so
    assert "pass classes=" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        commands.main(["report", str(path), "--probs", "a,b,c", "--label", "truth", "--score", "a"])
    assert "--probs applies only with --multiclass" in capsys.readouterr().err


def test_classwise_power_mean_holds_for_any_power():
    """classwise(power=200) returned an average of 0 (0.3^200 underflows)."""
    from scipy.special import logsumexp

    rng = np.random.default_rng(41)
    n, k = 3000, 4
    logits = rng.normal(size=(n, k)) * 1.5
    probs = special.softmax(logits, axis=1)
    truth = np.array([rng.choice(k, p=row) for row in special.softmax(logits * 0.7, axis=1)])
    names = [f"c{i}" for i in range(k)]
    wide = pd.DataFrame(probs, columns=names).assign(truth=[names[i] for i in truth])
    per_class = sqlcal.multiclass(wide, format="wide", mode="classwise", probs=names,
                                  label="truth")
    values = sqlcal.ece(per_class, score="score", label="label", by="class",
                        bins=10).sort_values("class").ece.to_numpy()
    for power in (1, 2, 200, 1e6):
        got = sqlcal.classwise(sqlcal.ece, per_class, power=power, metric_options={"bins": 10})
        want = np.exp((logsumexp(power * np.log(values)) - np.log(k)) / power)
        np.testing.assert_allclose(got.ece_average[0], want, rtol=1e-12)
    assert got.ece_average[0] <= got.ece_max[0] and got.ece_average[0] > 0.99 * values.max()
