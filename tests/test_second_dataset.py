"""A second dataset (``expected_cost``'s validation rows) is read exactly as the main data: the
same score, weight and group columns and the same options, so its weights count as the main
table's do. Checked against a brute-force weighted cutoff error in numpy and against row
duplication and removal done in pandas; a differently weighted validation Source is an error.

Also a guard: every public function's parameters are scanned for a second dataset, so one added
later is not missed by these tests."""

from __future__ import annotations

import inspect
import warnings

import numpy as np
import pandas as pd
import pytest

import sqlcal
from sqlcal.inputs.sources import InvalidInputError
from sqlcal.metrics.decision import expected_cost

RULE = [(-1, 0.3, 1.0, 0.0), (0.3, 1, 0.0, 0.5)]  # costs spread |1 − 0| + |0 − 0.5| = 1.5
SPREAD = 1.5
DELTA = 0.05


def frame(n: int, seed: int, weights: str = "integer", groups: bool = False) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    p = np.round(rng.beta(2, 3, n), 3)  # ties: several rows per distinct score
    df = pd.DataFrame({"p": p, "y": (rng.random(n) < p ** 1.3).astype(np.int64)})
    df["w"] = (rng.integers(1, 6, n).astype(float) if weights == "integer"
               else rng.exponential(size=n))
    if groups:
        df["g"] = rng.choice(["a", "b"], n)
    return df


def cutoff_upper(df: pd.DataFrame, weighted: bool, delta: float = DELTA) -> float:
    """Brute force on raw rows: the weighted cutoff error (running residual sum over distinct
    scores, from 0) plus sqrt(2 ln(1/δ)/n), n = W for whole weights, W²/Σw² otherwise."""
    w = df["w"].to_numpy(float) if weighted else np.ones(len(df))
    p, y = df["p"].to_numpy(float), df["y"].to_numpy(float)
    u, inverse = np.unique(p, return_inverse=True)
    residual = np.zeros(len(u))
    np.add.at(residual, inverse, w * (y - p))
    S = np.cumsum(residual)
    W = w.sum()
    c = (max(0.0, S.max()) - min(0.0, S.min())) / W
    n = W if np.all(w == np.floor(w)) else W * W / (w * w).sum()
    return min(1.0, c + np.sqrt(2 * np.log(1 / delta) / n))


def sample_epsilon(upper: float, main: pd.DataFrame, weighted: bool,
                   delta: float = DELTA) -> float:
    """The bound on the unlabeled table's own cutoff error (Rossellini et al. Prop. 4.1)."""
    w = main["w"].to_numpy(float) if weighted else np.ones(len(main))
    n = w.sum() if np.all(w == np.floor(w)) else w.sum() ** 2 / (w * w).sum()
    return upper + (20 + np.sqrt(2 * np.log(1 / delta))) / np.sqrt(n)


@pytest.mark.parametrize("weights", ["integer", "fractional"])
def test_validation_data_keeps_its_weights(upload, weights):
    """Issue 20 item 1: validation rows given as data were read without their weights (epsilon
    0.2466 instead of 0.2306 on the issue's data; with fractional weights a bound that does not
    hold)."""
    main, val = frame(3000, 1, weights), frame(1500, 2, weights)
    data, vdata = upload(main), upload(val)
    as_data = expected_cost(data, score="p", weight="w", rules=RULE, validation=vdata,
                            validation_label="y")
    as_source = expected_cost(data, score="p", weight="w", rules=RULE,
                              validation=sqlcal.source(vdata, score="p", label="y", weight="w"))
    upper = cutoff_upper(val, weighted=True)
    eps = sample_epsilon(upper, main, weighted=True)
    for out in (as_data, as_source):
        assert out["epsilon"][0] == pytest.approx(eps, abs=1e-12)
        assert out["error_bound"][0] == pytest.approx(eps * SPREAD, abs=1e-12)
        w = main["w"].to_numpy()
        n = w.sum() if weights == "integer" else w.sum() ** 2 / (w * w).sum()
        hoeffding = 1.0 * np.sqrt(np.log(2 / DELTA) / (2 * n))  # costs range over [0, 1]
        assert out["population_bound"][0] == pytest.approx(upper * SPREAD + hoeffding, abs=1e-12)
    # the unweighted reading of the same rows is a different number: the weights matter here
    assert abs(cutoff_upper(val, weighted=False) - upper) > 1e-4


def test_validation_label_defaults_to_the_label_and_groups_follow_by(upload):
    main, val = frame(800, 3, groups=True), frame(600, 4, groups=True)
    out = expected_cost(upload(main), score="p", label="y", weight="w", by="g", rules=RULE,
                        validation=upload(val))
    for g, row in out.set_index("g").iterrows():
        upper = cutoff_upper(val[val.g == g], weighted=True)
        want = sample_epsilon(upper, main[main.g == g], weighted=True)
        assert row["epsilon"] == pytest.approx(want, abs=1e-12)


def test_validation_weights_equal_duplicated_rows_and_zero_weights_removed_rows(con, upload):
    main = frame(400, 5)
    val = frame(300, 6)
    val.loc[val.index[::7], "w"] = 0.0  # some validation rows weigh nothing
    columns = ["expected_cost", "error_bound", "cost_lower", "cost_upper", "epsilon",
               "population_bound", "coverage"]
    data = upload(main)

    def run(v):
        return expected_cost(data, score="p", weight="w", rules=RULE, validation=upload(v),
                             validation_label="y")[columns].to_numpy(float)

    weighted = run(val)
    removed = run(val[val.w > 0].reset_index(drop=True))
    duplicated = val.loc[val.index.repeat(val["w"].astype(int))].assign(w=1.0)
    np.testing.assert_allclose(weighted, removed, rtol=0, atol=1e-12)
    np.testing.assert_allclose(weighted, run(duplicated.reset_index(drop=True)), rtol=0,
                               atol=1e-12)


@pytest.mark.parametrize("main_weight, val_weight", [("w", None), (None, "w"), ("w", "w2")])
def test_a_differently_weighted_validation_source_is_an_error(main_weight, val_weight):
    main, val = frame(50, 7), frame(50, 8)
    val["w2"] = val["w"]
    src = sqlcal.source(val, score="p", label="y", weight=val_weight)
    with pytest.raises(ValueError, match="validation source") as err:
        expected_cost(main, score="p", weight=main_weight, rules=RULE, validation=src)
    message = str(err.value)
    for name in (main_weight, val_weight):  # both weightings are named
        assert (f"weighted by {name!r}" if name else "unweighted") in message
    assert (f"weight={main_weight!r}" if main_weight else "no weight=") in message


def test_validation_options_follow_the_main_table(upload):
    main, val = frame(300, 9), frame(300, 10)
    bad = val.copy()
    bad.loc[bad.index[:3], "p"] = 1.5  # three invalid validation rows
    # on_invalid="raise" (the default): the validation rows are checked like the main ones
    with pytest.raises(InvalidInputError, match="score column 'p' has 3 rows"):
        expected_cost(upload(main), score="p", weight="w", rules=RULE, validation=upload(bad),
                      validation_label="y")
    # on_invalid="drop": dropped there too, which equals removing them
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dropped = expected_cost(upload(main), score="p", weight="w", rules=RULE,
                                validation=upload(bad), validation_label="y",
                                on_invalid="drop")
    upper = cutoff_upper(bad.iloc[3:], weighted=True)
    assert dropped["epsilon"][0] == pytest.approx(sample_epsilon(upper, main, True), abs=1e-12)
    # soft labels: accepted in the validation rows when the main table accepts them
    soft = val.assign(y=val["y"] * 0.5 + 0.25)
    out = expected_cost(upload(main.assign(y=main["y"] * 1.0)), score="p", label="y",
                        weight="w", rules=RULE, validation=upload(soft), soft_labels=True)
    upper = cutoff_upper(soft, weighted=True)
    assert out["epsilon"][0] == pytest.approx(sample_epsilon(upper, main, True), abs=1e-12)


def test_validation_label_errors():
    main, val = frame(40, 11), frame(40, 12)
    with pytest.raises(TypeError, match="validation_label= is required"):
        expected_cost(main[["p"]], score="p", rules=RULE, validation=val[["p", "y"]])
    src = sqlcal.source(val, score="p", label="y", weight="w")
    with pytest.raises(TypeError, match="validation_label= applies to validation data"):
        expected_cost(main, score="p", weight="w", rules=RULE, validation=src,
                      validation_label="y")
    with pytest.raises(TypeError, match="pass validation= too"):
        expected_cost(main, score="p", weight="w", rules=RULE, epsilon=0.1,
                      validation_label="y")


# words a parameter holding a second dataset is named with (any parameter but the first one
# with "data" in its name, too); a new one belongs in SECOND_DATASETS, with a test above, once
# its rows are read like the main data's (weights included)
_SECOND_DATASET_WORDS = {"validation", "holdout", "reference", "calibration", "baseline", "train",
                         "training", "mapping", "other", "background", "window", "new", "val"}
SECOND_DATASETS = {("expected_cost", "validation"), ("compare", "baseline_data")}
#: arguments whose names match the words above but that hold no rows
NOT_DATASETS = {
    ("classwise", "data"): "the main data (the metric's name comes first)",
    ("detect", "reference"): "a window of stored days (first, last), not rows",
    ("detect", "reference_days"): "a number of days",
    ("segment_fix", "holdout"): "the share of the rows held out, not a dataset",
    ("source", "training_negative_rate"): "a rate, or the column of the main data holding it",
    ("compare", "baseline"): "the baseline's score column (of the main data when paired)",
    ("compare", "baseline_where"): "a condition over the main data's columns",
    ("source", "baseline"): "a second score column of the main data (a paired comparison)",
}


def test_compare_reads_the_baseline_data_like_the_main_data():
    """sqlcal.compare's baseline_data: the same label, weight, group and source options as the
    main data, its weights included (each side's value is the metric of its own rows)."""
    main, other = frame(3000, 21, "fractional", groups=True), frame(2000, 22, "fractional",
                                                                     groups=True)
    out = sqlcal.compare(main, score="p", label="y", weight="w", by="g", baseline_data=other,
                         metrics=["brier", "ece"])
    for metric in ("brier", "ece"):
        rows = out[out["metric"] == metric].sort_values("g")
        mine = getattr(sqlcal, metric)(main, score="p", label="y", weight="w", by="g")
        theirs = getattr(sqlcal, metric)(other, score="p", label="y", weight="w", by="g")
        np.testing.assert_allclose(rows["value"], mine.sort_values("g")[metric], rtol=1e-12)
        np.testing.assert_allclose(rows["baseline_value"], theirs.sort_values("g")[metric],
                                   rtol=1e-12)
        np.testing.assert_allclose(rows["baseline_W"], theirs.sort_values("g")["W"], rtol=1e-12)
        assert (rows["weight_kind"] == "sampling").all()


def test_every_second_dataset_argument_is_known():
    found = set()
    for name in sqlcal.__all__:
        obj = getattr(sqlcal, name)
        if not callable(obj) or inspect.isclass(obj):
            continue
        try:
            params = list(inspect.signature(obj).parameters)
        except (TypeError, ValueError):
            continue
        for param in params[1:]:
            words = set(param.lower().split("_"))
            if words & _SECOND_DATASET_WORDS and not words & {"label", "score", "weight"} \
                    or "data" in words:
                found.add((name, param))
    found -= set(NOT_DATASETS)
    assert found == SECOND_DATASETS, (
        "a public function takes a second dataset that tests/test_second_dataset.py does not "
        "check: read it with the main data's columns and options (weights included), document "
        f"that, and add it to SECOND_DATASETS: {sorted(found - SECOND_DATASETS)}")
