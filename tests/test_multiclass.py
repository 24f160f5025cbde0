"""Multiclass predictions, long and wide: top-label and class-wise tables against numpy."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import sqlcal
from tests import oracle


def multiclass_data(n=600, classes=("a", "b", "c"), seed=0):
    rng = np.random.default_rng(seed)
    logits = rng.normal(0, 1.5, (n, len(classes)))
    probs = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    probs = np.round(probs, 3)  # ties in the top probability happen
    truth = np.array([rng.choice(len(classes), p=row / row.sum()) for row in probs ** 1.3])
    wide = pd.DataFrame(probs, columns=list(classes))
    wide["truth"] = np.array(classes)[truth]
    wide["model"] = rng.choice(["m1", "m2"], n)
    wide["example"] = np.arange(n)
    long = wide.melt(id_vars=["example", "model", "truth"], value_vars=list(classes),
                     var_name="cls", value_name="prob")
    long["label"] = (long.cls == long.truth).astype(int)
    return wide, long.drop(columns="truth")


def numpy_top_label(wide, classes):
    p = wide[list(classes)].to_numpy()
    top = p.argmax(1)  # first column on ties
    return p.max(1), (np.array(classes)[top] == wide.truth).astype(int)


def test_top_label_long_and_wide_agree_with_numpy(upload):
    classes = ("a", "b", "c")
    wide, long = multiclass_data()
    score, label = numpy_top_label(wide, classes)
    want = oracle.binned_ece(score, label, np.ones(len(score)), oracle.bin_ids(score, 10))
    from_wide = sqlcal.multiclass(upload(wide), format="wide", probs=list(classes), label="truth")
    from_long = sqlcal.multiclass(upload(long), format="long", example="example", cls="cls",
                                  prob="prob", label="label")
    for table in (from_wide, from_long):
        got = sqlcal.ece(table, score="score", label="label", bins=10)
        assert got.ece.iloc[0] == pytest.approx(want, abs=1e-12)
        assert got.n.iloc[0] == len(wide)


def test_classwise_gives_one_row_per_class(upload):
    classes = ("a", "b", "c")
    wide, long = multiclass_data(seed=1)
    for table in (sqlcal.multiclass(upload(wide), format="wide", mode="classwise",
                                    probs=list(classes), label="truth", keys=["model"]),
                  sqlcal.multiclass(upload(long), format="long", mode="classwise",
                                    example="example", cls="cls", prob="prob", label="label",
                                    keys=["model"])):
        got = sqlcal.brier(table, score="score", label="label", by=["model", "class"])
        assert len(got) == 6
        for _, row in got.iterrows():
            part = wide[wide.model == row.model]
            y = (part.truth == row["class"]).astype(float)
            assert row.brier == pytest.approx(np.mean((y - part[row["class"]]) ** 2), abs=1e-12)


def test_top_label_keys_group_the_examples(upload):
    classes = ("a", "b", "c")
    wide, long = multiclass_data(seed=2)
    table = sqlcal.multiclass(upload(long), format="long", example="example", cls="cls",
                              prob="prob", label="label", keys=["model"])
    got = sqlcal.cutoff_error(table, score="score", label="label", by="model").set_index("model")
    for model, part in wide.groupby("model"):
        score, label = numpy_top_label(part, classes)
        alone = sqlcal.cutoff_error(pd.DataFrame({"p": score, "y": label}), score="p", label="y")
        assert got.cutoff_error[model] == pytest.approx(alone.cutoff_error.iloc[0], abs=1e-12)
