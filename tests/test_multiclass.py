"""Multiclass predictions, long and wide: top-label and class-wise tables against numpy, weights,
integer labels, the tie rule, and every input multiclass() refuses."""

from __future__ import annotations

import re

import ibis
import numpy as np
import pandas as pd
import pytest

import sqlcal
from sqlcal.inputs.sources import InvalidInputError
from sqlcal.query.layouts import check_use
from tests import oracle

CLASSES = ("a", "b", "c")


def multiclass_data(n=600, classes=CLASSES, seed=0):
    """Wide frame: probabilities in thousandths summing to 1 (to rounding), ties in the top
    probability on purpose, a true class drawn from a sharpened distribution (miscalibrated)."""
    rng = np.random.default_rng(seed)
    k = len(classes)
    logits = rng.normal(0, 1.5, (n, k))
    soft = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    counts = np.floor(soft * 1000).astype(int)
    counts[np.arange(n), soft.argmax(1)] += 1000 - counts.sum(1)
    for i in range(0, n, 20):  # two classes tied at the top: the tie rule decides the label
        first, second = rng.choice(k, 2, replace=False)
        counts[i] = 0
        counts[i, [first, second]] = 400
        counts[i, [j for j in range(k) if j not in (first, second)][0]] = 200
    probs = counts / 1000
    sharp = probs ** 1.3
    truth = np.array([rng.choice(k, p=row / row.sum()) for row in sharp])
    wide = pd.DataFrame(probs, columns=list(classes))
    wide["truth"] = np.array(classes)[truth]
    wide["model"] = rng.choice(["m1", "m2"], n)
    wide["example"] = np.arange(n)
    return wide


def to_long(wide, classes=CLASSES):
    ids = [c for c in wide.columns if c not in classes and c != "truth"]
    long = wide.melt(id_vars=[*ids, "truth"], value_vars=list(classes), var_name="cls",
                     value_name="prob")
    long["label"] = (long.cls == long.truth).astype(int)
    return long.drop(columns="truth")


def numpy_top_label(wide, classes=CLASSES):
    """Top probability and whether the first class reaching it is the true class."""
    p = wide[list(classes)].to_numpy()
    top = p.argmax(1)  # numpy's argmax: the first column on ties
    return p.max(1), (np.array(classes)[top] == wide.truth.to_numpy()).astype(int)


def numpy_ece(score, label, weight=None, bins=10):
    weight = np.ones(len(score)) if weight is None else np.asarray(weight, float)
    return oracle.binned_ece(score, label, weight, oracle.bin_ids(score, bins))


def wide_table(upload, wide, **kw):
    return sqlcal.multiclass(upload(wide), format="wide", probs=list(CLASSES), label="truth",
                             **kw)


def long_table(upload, wide, **kw):
    return sqlcal.multiclass(upload(to_long(wide)), format="long", example="example", cls="cls",
                             prob="prob", label="label", **kw)


# -- numbers against numpy --------------------------------------------------------------------


def test_top_label_long_and_wide_agree_with_numpy(upload):
    wide = multiclass_data()
    score, label = numpy_top_label(wide)
    want = numpy_ece(score, label)
    for table in (wide_table(upload, wide), long_table(upload, wide)):
        got = sqlcal.ece(table, score="score", label="label", bins=10)
        assert got.ece.iloc[0] == pytest.approx(want, abs=1e-12)
        assert got.n.iloc[0] == len(wide)


def test_long_boolean_labels_give_the_numbers_of_0_1_labels(upload):
    wide = multiclass_data(n=200, seed=17)
    long = to_long(wide)
    want = numpy_ece(*numpy_top_label(wide))
    table = sqlcal.multiclass(upload(long.assign(label=long.label == 1)), format="long",
                              example="example", cls="cls", prob="prob", label="label")
    got = sqlcal.ece(table, score="score", label="label", bins=10)
    assert got.ece.iloc[0] == pytest.approx(want, abs=1e-12)


def test_classwise_ece_per_class_agrees_with_numpy(upload):
    wide = multiclass_data(seed=1)
    for table in (wide_table(upload, wide, mode="classwise", keys=["model"]),
                  long_table(upload, wide, mode="classwise", keys=["model"])):
        got = sqlcal.ece(table, score="score", label="label", bins=10, by=["model", "class"])
        assert len(got) == 6
        for _, row in got.iterrows():
            part = wide[wide.model == row.model]
            y = (part.truth == row["class"]).astype(int)
            assert row.ece == pytest.approx(numpy_ece(part[row["class"]], y), abs=1e-12)


def test_classwise_brier_per_class_agrees_with_numpy(upload):
    wide = multiclass_data(seed=1)
    table = long_table(upload, wide, mode="classwise", keys=["model"])
    got = sqlcal.brier(table, score="score", label="label", by=["model", "class"])
    assert len(got) == 6
    for _, row in got.iterrows():
        part = wide[wide.model == row.model]
        y = (part.truth == row["class"]).astype(float)
        assert row.brier == pytest.approx(np.mean((y - part[row["class"]]) ** 2), abs=1e-12)


def test_top_label_keys_group_the_examples(upload):
    wide = multiclass_data(seed=2)
    table = long_table(upload, wide, keys=["model"])
    got = sqlcal.cutoff_error(table, score="score", label="label", by="model").set_index("model")
    for model, part in wide.groupby("model"):
        score, label = numpy_top_label(part)
        alone = sqlcal.cutoff_error(pd.DataFrame({"p": score, "y": label}), score="p", label="y")
        assert got.cutoff_error[model] == pytest.approx(alone.cutoff_error.iloc[0], abs=1e-12)


def test_ties_go_to_the_first_column_or_the_smallest_class(upload):
    # the top probability 0.4 is shared by "a" and "b"; the true class is "b"
    wide = pd.DataFrame({"a": [0.4, 0.1], "b": [0.4, 0.2], "c": [0.2, 0.7],
                         "truth": ["b", "c"], "example": [0, 1]})
    for table in (wide_table(upload, wide), long_table(upload, wide)):
        got = table.execute().sort_values("score", ignore_index=True)
        assert got.score.tolist() == [0.4, 0.7]
        assert got.label.tolist() == [0, 1]  # "a" is predicted: first column, smallest class
    reordered = sqlcal.multiclass(upload(wide), format="wide", probs=["b", "a", "c"],
                                  label="truth").execute().sort_values("score")
    assert reordered.label.tolist() == [1, 1]  # now "b" comes first


# -- weights ----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["top_label", "classwise"])
def test_integer_weights_equal_duplicated_examples(upload, mode):
    wide = multiclass_data(n=300, seed=3)
    wide["w"] = np.random.default_rng(3).integers(0, 4, len(wide))  # zeros included
    repeated = wide.loc[np.repeat(wide.index, wide.w)].drop(columns="w")
    repeated["example"] = np.arange(len(repeated))  # a repeated example is a new example
    by = ["class"] if mode == "classwise" else []
    for make in (wide_table, long_table):
        weighted = sqlcal.ece(make(upload, wide, mode=mode, weight="w"), score="score",
                              label="label", weight="weight", by=by, bins=10)
        plain = sqlcal.ece(make(upload, repeated, mode=mode), score="score", label="label",
                           by=by, bins=10)
        np.testing.assert_allclose(weighted.ece, plain.ece, rtol=0, atol=1e-12)
        np.testing.assert_allclose(weighted.W, plain.n)


@pytest.mark.parametrize("mode", ["top_label", "classwise"])
def test_zero_weights_equal_removed_examples(upload, mode):
    wide = multiclass_data(n=300, seed=4)
    rng = np.random.default_rng(4)
    wide["w"] = np.where(rng.random(len(wide)) < 0.3, 0.0, rng.exponential(size=len(wide)))
    kept = wide[wide.w > 0]
    by = ["class"] if mode == "classwise" else []
    for make in (wide_table, long_table):
        full = sqlcal.ece(make(upload, wide, mode=mode, weight="w"), score="score",
                          label="label", weight="weight", by=by, bins=10)
        part = sqlcal.ece(make(upload, kept, mode=mode, weight="w"), score="score",
                          label="label", weight="weight", by=by, bins=10)
        np.testing.assert_allclose(full.ece, part.ece, rtol=0, atol=1e-12)
    # and against numpy on the raw probabilities
    if mode == "top_label":
        score, label = numpy_top_label(kept)
        assert full.ece.iloc[0] == pytest.approx(numpy_ece(score, label, kept.w), abs=1e-12)
    else:
        for _, row in full.iterrows():
            y = (kept.truth == row["class"]).astype(int)
            assert row.ece == pytest.approx(numpy_ece(kept[row["class"]], y, kept.w), abs=1e-12)


def test_long_weight_must_be_one_per_example(upload):
    wide = multiclass_data(n=50, seed=5)
    long = to_long(wide)
    long["w"] = 1.0
    long.loc[long.example.isin([3, 4]) & (long.cls == "a"), "w"] = 2.0
    with pytest.raises(InvalidInputError, match=r"weight column 'w' differs between the rows "
                                                r"of 2 examples"):
        sqlcal.multiclass(upload(long), format="long", example="example", cls="cls",
                          prob="prob", label="label", weight="w")


# -- integer class labels ---------------------------------------------------------------------


def test_integer_labels_give_the_numbers_of_string_labels(upload):
    wide = multiclass_data(n=400, seed=6)
    by_name = {c: i for i, c in enumerate(CLASSES)}
    numbered = wide.assign(truth=wide.truth.map(by_name).astype("int64"))
    digits = numbered.rename(columns={c: str(i) for c, i in by_name.items()})
    want_top = sqlcal.ece(wide_table(upload, wide), score="score", label="label", bins=10)
    want_cls = sqlcal.ece(wide_table(upload, wide, mode="classwise"), score="score",
                          label="label", by="class", bins=10).sort_values("class")
    ways = [  # columns named by the label's digits; a list in column order; a mapping
        dict(data=digits, probs=["0", "1", "2"]),
        dict(data=numbered, probs=list(CLASSES), classes=[0, 1, 2]),
        dict(data=numbered, probs=list(CLASSES), classes={2: "c", 0: "a", 1: "b"}),
    ]
    for way in ways:
        data = upload(way.pop("data"))
        top = sqlcal.multiclass(data, format="wide", label="truth", **way)
        got = sqlcal.ece(top, score="score", label="label", bins=10)
        assert got.ece.iloc[0] == pytest.approx(want_top.ece.iloc[0], abs=1e-12)
        per_class = sqlcal.multiclass(data, format="wide", mode="classwise", label="truth", **way)
        got = sqlcal.ece(per_class, score="score", label="label", by="class", bins=10)
        got = got.sort_values("class")
        assert got["class"].tolist() == [0, 1, 2]
        np.testing.assert_allclose(got.ece, want_cls.ece, rtol=0, atol=1e-12)


def test_integer_labels_that_name_no_column_are_refused(upload):
    wide = multiclass_data(n=100, seed=7)
    numbered = wide.assign(truth=wide.truth.map({"a": 0, "b": 1, "c": 2}).astype("int64"))
    numbered.loc[:5, "truth"] = 3  # six examples of a class with no column
    data = upload(numbered)
    with pytest.raises(InvalidInputError, match=r"label column 'truth' has 6 examples whose "
                                                r"true class matches no probability column: 3 "
                                                r"\(6 examples\)"):
        sqlcal.multiclass(data, format="wide", probs=list(CLASSES), label="truth",
                          classes=[0, 1, 2])
    with pytest.raises(InvalidInputError, match=r"label column 'truth' holds int64 class "
                                                r"labels.*pass classes="):
        sqlcal.multiclass(data, format="wide", probs=list(CLASSES), label="truth")


@pytest.mark.parametrize("classes, problem", [
    ([0, 1], r"classes= lists 2 values for the 3 columns"),
    ({0: "a", 1: "b", 2: "z"}, r"no value for \['c'\]; \['z'\] are not in probs"),
    ([0, 0, 1], r"the same label value to several columns"),
    (["a", "b", "c"], r"classes= value 'a' cannot be compared with label column 'truth'"),
])
def test_class_lists_that_cannot_be_meant_are_refused(classes, problem):
    wide = pd.DataFrame({"a": [0.5], "b": [0.3], "c": [0.2], "truth": [0]})
    with pytest.raises(ValueError, match=problem):
        sqlcal.multiclass(wide, format="wide", probs=list(CLASSES), label="truth",
                          classes=classes)


# -- inputs multiclass() cannot mean ----------------------------------------------------------


def test_true_classes_matching_no_column_are_refused(upload):
    wide = multiclass_data(n=200, seed=8)
    wide.loc[:11, "truth"] = "A"  # 12 examples labelled in another case
    with pytest.raises(InvalidInputError, match=r"label column 'truth' has 12 examples whose "
                                                r"true class matches no probability column: "
                                                r"'A' \(12 examples\)"):
        wide_table(upload, wide)
    data = upload(multiclass_data(n=200, seed=8))
    data = data.mutate(truth=ibis.ifelse(data.example < 3, ibis.null("string"), data.truth))
    with pytest.raises(InvalidInputError, match=r"label column 'truth' is NULL in 3 examples"):
        sqlcal.multiclass(data, format="wide", probs=list(CLASSES), label="truth")


@pytest.mark.parametrize("kind", ["NULL", "NaN", "above 1", "negative"])
def test_invalid_top_probabilities_raise_or_are_dropped(upload, kind):
    wide = multiclass_data(n=200, seed=9)
    wide.loc[:9, list(CLASSES)] = [0.7, 0.2, 0.1]  # "a" is the top class of these 10
    bad = {"NaN": np.nan, "above 1": 1.25, "negative": -0.1, "NULL": 0.7}[kind]
    data = upload(wide.assign(a=np.where(wide.index < 10, bad, wide.a)))
    if kind == "NULL":
        data = data.mutate(a=ibis.ifelse(data.example < 10, ibis.null("float64"), data.a))
    options = dict(format="wide", probs=list(CLASSES), label="truth")
    with pytest.raises(InvalidInputError, match=r"probability column 'a' is NULL, NaN or outside "
                                                r"\[0, 1\] in 10 examples.*on_invalid='drop'"):
        sqlcal.multiclass(data, **options)
    with pytest.warns(UserWarning, match=r"dropped 10 of 200 examples: probability column 'a'"):
        table = sqlcal.multiclass(data, on_invalid="drop", **options)
    got = sqlcal.ece(table, score="score", label="label", bins=10)
    score, label = numpy_top_label(wide.iloc[10:])
    assert got.n.iloc[0] == 190
    assert got.ece.iloc[0] == pytest.approx(numpy_ece(score, label), abs=1e-12)


def test_long_invalid_rows_drop_their_whole_example(upload):
    wide = multiclass_data(n=200, seed=10)
    long = to_long(wide)
    long.loc[(long.example < 4) & (long.cls == "b"), "label"] = 7  # not 0/1
    data = upload(long)
    options = dict(format="long", example="example", cls="cls", prob="prob", label="label")
    with pytest.raises(InvalidInputError, match=r"label column 'label' is NULL or not 0/1 in 4 "
                                                r"examples"):
        sqlcal.multiclass(data, **options)
    with pytest.warns(UserWarning, match=r"dropped 4 of 200 examples"):
        table = sqlcal.multiclass(data, on_invalid="drop", **options)
    got = sqlcal.ece(table, score="score", label="label", bins=10)
    score, label = numpy_top_label(wide.iloc[4:])
    assert got.ece.iloc[0] == pytest.approx(numpy_ece(score, label), abs=1e-12)


@pytest.mark.parametrize("change, problem", [
    ("none", r"^5 examples \(by 'example'\) have no row with label 'label' = 1"),
    ("several", r"^4 examples \(by 'example'\) have several rows with label 'label' = 1"),
])
def test_long_examples_need_one_true_class_row(upload, change, problem):
    wide = multiclass_data(n=100, seed=11)
    long = to_long(wide)
    if change == "none":
        long.loc[long.example < 5, "label"] = 0
    else:
        long.loc[long.example.between(10, 13), "label"] = 1
    for on_invalid in ("raise", "drop"):  # a layout problem is never dropped
        with pytest.raises(InvalidInputError, match=problem):
            sqlcal.multiclass(upload(long), format="long", example="example", cls="cls",
                              prob="prob", label="label", on_invalid=on_invalid)


def test_long_rows_of_zero_probability_may_be_left_out(upload):
    # sparse storage: an example lists only the classes it gives some probability to
    wide = multiclass_data(n=200, seed=16)
    wide.loc[:19, list(CLASSES)] = [0.75, 0.25, 0.0]
    long = to_long(wide)
    sparse = long[(long.prob > 0) | (long.label == 1)]
    assert len(sparse) < len(long)
    for mode, by in (("top_label", []), ("classwise", ["class"])):
        tables = [sqlcal.multiclass(upload(frame), format="long", mode=mode, example="example",
                                    cls="cls", prob="prob", label="label")
                  for frame in (long, sparse)]
        dense, thin = (sqlcal.brier(t, score="score", label="label", by=by) for t in tables)
        if mode == "top_label":
            score, label = numpy_top_label(wide)
            assert thin.brier.iloc[0] == pytest.approx(np.mean((score - label) ** 2), abs=1e-12)
        else:  # a left-out row of probability 0 and label 0 adds 0 to the squared error
            np.testing.assert_allclose(thin.brier * thin.n, dense.brier * dense.n, rtol=1e-12)


@pytest.mark.parametrize("layout", ["wide", "long"])
def test_probabilities_must_sum_to_one(upload, layout):
    wide = multiclass_data(n=100, seed=12)
    wide.loc[:6, list(CLASSES)] = [0.5, 0.3, 0.1]
    wide.loc[7, list(CLASSES)] = [0.5, 0.3, 0.05]
    wide.loc[8, list(CLASSES)] = [0.5, 0.3, 0.2 + 5e-7]  # within the default tolerance, 1e-6
    make = wide_table if layout == "wide" else long_table
    with pytest.raises(InvalidInputError, match=r"^8 examples have probabilities .* summing to "
                                                r"other than 1 by more than sum_tolerance=1e-06") as e:
        make(upload, wide)
    worst = float(re.search(r"the worst sums to ([-+.\de]+)", str(e.value)).group(1))
    assert worst == pytest.approx(0.5 + 0.3 + 0.05, abs=1e-12)
    table = make(upload, wide, sum_tolerance=0.2)  # the caller's own tolerance
    score, label = numpy_top_label(wide)
    got = sqlcal.ece(table, score="score", label="label", bins=10)
    assert got.ece.iloc[0] == pytest.approx(numpy_ece(score, label), abs=1e-12)


def test_example_ids_repeated_across_models_need_keys(upload):
    wide = multiclass_data(n=150, seed=13).drop(columns="model")
    other = multiclass_data(n=150, seed=14).drop(columns="model")
    both = pd.concat([wide.assign(model="m1"), other.assign(model="m2")], ignore_index=True)
    data = upload(to_long(both))
    options = dict(format="long", example="example", cls="cls", prob="prob", label="label")
    with pytest.raises(InvalidInputError, match=r"^150 examples \(by 'example'\) have more than "
                                                r"one row for the same class.*pass keys="):
        sqlcal.multiclass(data, **options)
    table = sqlcal.multiclass(data, keys=["model"], **options)
    got = sqlcal.ece(table, score="score", label="label", by="model", bins=10)
    got = got.set_index("model")
    for model, part in (("m1", wide), ("m2", other)):
        assert got.ece[model] == pytest.approx(numpy_ece(*numpy_top_label(part)), abs=1e-12)


def test_classwise_and_weighted_tables_say_how_to_measure_them():
    wide = multiclass_data(n=60, seed=15).assign(w=2.0)
    per_class = sqlcal.multiclass(wide, format="wide", mode="classwise", probs=list(CLASSES),
                                  label="truth")
    with pytest.raises(InvalidInputError, match=r"pass by='class'.*table.drop\('class'\)"):
        check_use(per_class, (), None)
    check_use(per_class, ("class",), None)
    check_use(per_class.drop("class"), (), None)  # pooling on purpose
    weighted = sqlcal.multiclass(wide, format="wide", probs=list(CLASSES), label="truth",
                                 weight="w")
    with pytest.raises(InvalidInputError, match=r"pass weight='weight'.*table.drop\('weight'\)"):
        check_use(weighted, (), None)
    check_use(weighted, (), "weight")
    check_use(weighted.drop("weight"), (), None)


@pytest.mark.parametrize("options, error, problem", [
    (dict(mode="pairwise"), ValueError, r"mode must be one of"),
    (dict(sum_tolerance=-1e-6), ValueError, r"sum_tolerance must be a non-negative finite number"),
    (dict(on_invalid="skip"), ValueError, r"on_invalid must be one of 'raise', 'drop'"),
    (dict(keys=["score"]), InvalidInputError, r"keys \['score'\] clash with the columns"),
    (dict(weight="v"), InvalidInputError, r"weight column 'v' is not in the table"),
    (dict(probs=["a", "b", "a"]), ValueError, r"probs= names a column more than once"),
])
def test_options_that_cannot_be_meant_are_refused(options, error, problem):
    wide = pd.DataFrame({"a": [0.5], "b": [0.5], "truth": ["a"], "score": [1.0]})
    with pytest.raises(error, match=problem):
        sqlcal.multiclass(wide, **{"format": "wide", "probs": ["a", "b"], "label": "truth",
                                   **options})


def test_metrics_refuse_classwise_and_weighted_tables_measured_otherwise():
    wide = multiclass_data(n=60, seed=15).assign(w=2.0)
    per_class = sqlcal.multiclass(wide, format="wide", mode="classwise", probs=list(CLASSES),
                                  label="truth")
    with pytest.raises(InvalidInputError, match="pass by='class'"):
        sqlcal.ece(per_class, score="score", label="label")
    weighted = sqlcal.multiclass(wide, format="wide", probs=list(CLASSES), label="truth",
                                 weight="w")
    with pytest.raises(InvalidInputError, match="pass weight='weight'"):
        sqlcal.ece(weighted, score="score", label="label")
    # measured as made, both give one result per class / the weighted numbers
    assert len(sqlcal.ece(per_class, score="score", label="label", by="class")) == len(CLASSES)
    got = sqlcal.ece(weighted, score="score", label="label", weight="weight")
    assert got.W.iloc[0] == 120.0
