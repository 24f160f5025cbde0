"""Temperature scaling of multiclass predictions: the fitted T against scipy on the same weighted
likelihood, wide and long, probabilities and logits, weights as repeated examples, groups, the
exported SQL run in each engine against numpy's softmax(log p / T), and the inputs refused."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import optimize, special

import sqlcal
from sqlcal.inputs.sources import InvalidInputError
from sqlcal.options import OptionError

CLASSES = ("a", "b", "c", "d")


def predictions(n=400, seed=0, temperature=1.8):
    """Wide frame: logits, their softmax as probabilities, a true class drawn from
    softmax(logits / temperature) (so the model is overconfident), a group and a weight."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(0, 2.0, (n, len(CLASSES)))
    truth = np.array([rng.choice(len(CLASSES), p=row)
                      for row in special.softmax(logits / temperature, axis=1)])
    frame = pd.DataFrame(special.softmax(logits, axis=1), columns=list(CLASSES))
    for k, c in enumerate(CLASSES):
        frame[f"z_{c}"] = logits[:, k]
    frame["truth"] = np.array(CLASSES)[truth]
    frame["model"] = rng.choice(["m1", "m2"], n)
    frame["w"] = rng.integers(0, 4, n).astype(float)
    frame["example"] = np.arange(n)
    return frame


def scipy_temperature(z, truth, w):
    """argmin over T of Σ w·(−log softmax(z / T)_y), by scipy's bounded scalar search."""
    y = np.searchsorted(CLASSES, truth)

    def nll(t):
        return -(w * special.log_softmax(z / t, axis=1)[np.arange(len(y)), y]).sum()

    return optimize.minimize_scalar(nll, bounds=(0.05, 20), method="bounded",
                                    options={"xatol": 1e-11}).x


def to_long(frame, column="p"):
    long = frame.melt(id_vars=["example", "model", "w", "truth"], value_vars=list(CLASSES),
                      var_name="cls", value_name=column)
    logits = frame.melt(id_vars=["example"], value_vars=[f"z_{c}" for c in CLASSES],
                        var_name="cls", value_name="z")
    long["z"] = logits.z.to_numpy()  # melt keeps the column order: the same (class, example)
    long["label"] = (long.cls == long.truth).astype(int)
    return long.drop(columns="truth")


def test_temperature_equals_scipy_in_the_engine(con, upload):
    if con.name == "pyspark":
        pytest.skip("a fit is about 8 aggregate scans, several seconds each on local Spark: the "
                    "fit's queries run on DuckDB and PostgreSQL here, and the exported map on "
                    "Spark in test_exported_sql_gives_numpys_softmax")
    frame = predictions()
    want = {model: scipy_temperature(np.log(part[list(CLASSES)].to_numpy()), part.truth,
                                     part.w.to_numpy())
            for model, part in frame.groupby("model")}
    fit = sqlcal.temperature_scaling(upload(frame), probs=list(CLASSES), label="truth",
                                     weight="w", by="model")
    for model, t in want.items():
        assert fit.temperature[model] == pytest.approx(t, rel=1e-6)
    assert (fit.table.scans <= 12).all()
    assert (fit.table.nll_after < fit.table.nll_before).all()


def test_long_layout_and_logits_give_the_same_temperature():
    frame = predictions(seed=6)
    want = {model: scipy_temperature(frame.loc[frame.model == model,
                                               [f"z_{c}" for c in CLASSES]].to_numpy(),
                                     frame.truth[frame.model == model],
                                     frame.w[frame.model == model].to_numpy())
            for model in ("m1", "m2")}
    long = to_long(frame)
    fits = [
        sqlcal.temperature_scaling(frame, logits=[f"z_{c}" for c in CLASSES], label="truth",
                                   weight="w", by="model", classes=list(CLASSES)),
        sqlcal.temperature_scaling(long, format="long", example="example", cls="cls", prob="p",
                                   label="label", weight="w", by="model"),
        sqlcal.temperature_scaling(long, format="long", example="example", cls="cls", logit="z",
                                   label="label", weight="w", by="model"),
    ]
    for fit in fits:
        for model, t in want.items():  # probabilities are the logits' softmax to 1e-16
            assert fit.temperature[model] == pytest.approx(t, rel=1e-6)
    np.testing.assert_allclose(fits[0].table.temperature, fits[2].table.temperature,
                               rtol=1e-12)


def test_integer_weights_equal_repeated_examples():
    frame = predictions(n=200, seed=1)
    repeated = frame.loc[np.repeat(frame.index, frame.w.astype(int))]
    repeated = repeated.assign(example=np.arange(len(repeated)))
    weighted = sqlcal.temperature_scaling(frame, probs=list(CLASSES), label="truth", weight="w")
    plain = sqlcal.temperature_scaling(repeated, probs=list(CLASSES), label="truth")
    assert weighted.temperature == pytest.approx(plain.temperature, rel=1e-12)
    assert weighted.table.W.iloc[0] == plain.table.n.iloc[0]


def test_integer_labels_equal_string_labels():
    frame = predictions(n=200, seed=2)
    numbered = frame.assign(truth=np.searchsorted(CLASSES, frame.truth))
    by_name = sqlcal.temperature_scaling(frame, probs=list(CLASSES), label="truth")
    by_number = sqlcal.temperature_scaling(numbered, probs=list(CLASSES), label="truth",
                                           classes={i: c for i, c in enumerate(CLASSES)})
    assert by_number.temperature == by_name.temperature


def test_exported_sql_gives_numpys_softmax(con, upload):
    frame = predictions(n=60, seed=3)
    frame.loc[:4, list(CLASSES)] = [0.7, 0.3, 0.0, 0.0]  # zeros stay zero under any T
    frame.loc[5, list(CLASSES)] = [1.0, 0.0, 0.0, 0.0]
    wide = upload(frame)
    # the map is fitted in DuckDB (where=: the rows of zeros left out) and run in each engine
    fit = sqlcal.temperature_scaling(frame, probs=list(CLASSES), label="truth", by="model",
                                     where="example > 5")
    sql = fit.sql(wide.get_name().split(".")[-1], dialect=con.name)
    got = con.sql(sql).execute().sort_values("example")
    calibrated = got[[f"calibrated_{c}" for c in CLASSES]].to_numpy()
    p = frame[list(CLASSES)].to_numpy()
    t = frame.model.map(fit.temperature).to_numpy()[:, None]
    with np.errstate(divide="ignore"):
        want = special.softmax(np.log(p) / t, axis=1)
    np.testing.assert_allclose(calibrated, want, rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(calibrated.sum(1), 1, rtol=0, atol=1e-12)
    # the long layout's SQL: a softmax over the example's rows (not on Spark, where a second
    # upload and query would cost CI half a minute: the same windows run on DuckDB and Postgres)
    if con.name == "pyspark":
        return
    long = upload(to_long(frame))
    fit = sqlcal.temperature_scaling(to_long(frame), format="long", example="example",
                                     cls="cls", logit="z", label="label")
    got = con.sql(fit.sql(long.get_name().split(".")[-1], dialect=con.name)).execute()
    got = got.pivot(index="example", columns="cls", values="calibrated").sort_index()
    logits = frame[[f"z_{c}" for c in CLASSES]].to_numpy()
    want = special.softmax(logits / fit.temperature, axis=1)
    np.testing.assert_allclose(got[list(CLASSES)].to_numpy(), want, rtol=1e-12)


def test_apply_and_transform_agree():
    frame = predictions(n=100, seed=4)
    fit = sqlcal.temperature_scaling(frame, probs=list(CLASSES), label="truth", clip=1e-9)
    import ibis

    got = fit.apply(ibis.memtable(frame)).execute().sort_values("example")
    want = fit.transform(frame[list(CLASSES)].to_numpy())
    np.testing.assert_allclose(got[[f"calibrated_{c}" for c in CLASSES]].to_numpy(), want,
                               rtol=1e-12)


@pytest.mark.parametrize("change, error, problem", [
    ("zero", InvalidInputError, r"probabilities of 0 \(3 in column 'c'\).*pass clip="),
    ("sum", InvalidInputError, r"summing to other than 1 by more than sum_tolerance=1e-06"),
    ("clip_logits", OptionError, r"clip="),
    ("scans", InvalidInputError, r"did not converge in max_scans=2"),
    ("perfect", InvalidInputError, r"true class holds the top score in every example"),
    ("both", OptionError, r"needs one of probs=.* or logits=.*not both"),
])
def test_inputs_that_cannot_be_meant_are_refused(change, error, problem):
    frame = predictions(n=60, seed=5)
    options = dict(probs=list(CLASSES), label="truth")
    if change == "zero":
        frame.loc[:2, list(CLASSES)] = [0.5, 0.25, 0.0, 0.25]
    elif change == "sum":
        frame.loc[:2, "a"] += 0.01
    elif change == "clip_logits":
        options = dict(logits=[f"z_{c}" for c in CLASSES], classes=list(CLASSES),
                       label="truth", clip=1e-9)
    elif change == "scans":
        options["max_scans"] = 2
    elif change == "perfect":
        frame["truth"] = np.array(CLASSES)[frame[list(CLASSES)].to_numpy().argmax(1)]
    else:
        options["logits"] = list(CLASSES)
    with pytest.raises(error, match=problem):
        sqlcal.temperature_scaling(frame, **options)
