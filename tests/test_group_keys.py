"""Group keys are the user's: any name the engine accepts (the names of sqlcal's own result and
summary columns included), any value (NULL and NaN are two groups, never merged), and every
public function that takes a grouped source returns one result per group, equal to the same call
on that group's rows alone.

The oracle is the metric itself on the group's rows without ``by`` (filtered in pyarrow, NULL by
``is_null`` and NaN by ``is_nan``), so a function that merges, splits or scrambles groups
disagrees with it.
"""

from __future__ import annotations

import inspect
import math
import warnings

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sqlcal

SCORE, LABEL = "prediction", "outcome"

#: names a key may take: sqlcal's result and summary columns, its internal names, the segment
#: values, unicode, mixed case, spaces and quotes
KEY_NAMES = [
    "ece", "brier", "n", "W", "exact", "weight_kind", "binning", "n_bins", "p_value", "z",
    "bin", "cell", "k", "s", "p", "y", "w", "u", "f", "v", "swy", "sw2", "chk_p_count",
    "n_dropped", "lo", "hi", "value", "t", "score", "tce", "rejected", "sigma", "n_", "ece_",
    "__key0", "__nan0", "__key1", "__null__", "__other__", "segment", "period_start", "rule",
    "clé", "ключ", "键", "Mixed Case", "with space", 'dq"uote', "sq'uote",
]
TEXT_VALUES = ["a", "b", "__null__", "__other__", "NULL", "", "é", "it's", None]
DOUBLE_VALUES = [0.5, -1.0, float("nan"), None, float("inf")]
INT_VALUES = [0, 1, -7, None]
KINDS = {"text": (pa.string(), TEXT_VALUES), "double": (pa.float64(), DOUBLE_VALUES),
         "int": (pa.int64(), INT_VALUES)}

#: (name, call(data, **keywords), kind of result): "one" row per group, "rows" (several per
#: group, compared in order), "map" (a fitted map: its table)
_metric = lambda f, **o: (lambda data, **kw: f(data, score=SCORE, label=LABEL, **o, **kw))  # noqa
METRICS = [
    ("brier", _metric(sqlcal.brier), "one"),
    ("brier_decomposition", _metric(sqlcal.brier_decomposition, bins=4), "one"),
    ("calibration_slope", _metric(sqlcal.calibration_slope), "one"),
    ("calibration_decision_loss", _metric(sqlcal.calibration_decision_loss), "one"),
    ("calibration_in_the_large", _metric(sqlcal.calibration_in_the_large), "one"),
    ("calibration_ratio", _metric(sqlcal.calibration_ratio), "one"),
    ("cutoff_error", _metric(sqlcal.cutoff_error), "one"),
    ("cutoff_error_grid", _metric(sqlcal.cutoff_error, method="grid", cells=64), "one"),
    ("decision_loss", _metric(sqlcal.decision_loss, threshold=0.5), "one"),
    ("decision_risk_gap", _metric(sqlcal.decision_risk_gap), "one"),
    ("debiased_ece", _metric(sqlcal.debiased_ece, bins=4), "one"),
    ("decompose", _metric(sqlcal.decompose), "one"),
    ("distance_to_calibration", _metric(sqlcal.distance_to_calibration), "one"),
    ("ece", _metric(sqlcal.ece, bins=4), "one"),
    ("ece_quantile", _metric(sqlcal.ece, bins=3, strategy="quantile"), "one"),
    ("expected_cost", _metric(sqlcal.expected_cost, rules=[(0.0, 0.5, 1.0, 0.0)],
                              epsilon=0.1), "one"),
    ("hosmer_lemeshow", _metric(sqlcal.hosmer_lemeshow, bins=3), "one"),
    ("interval_calibration_error", _metric(sqlcal.interval_calibration_error), "one"),
    ("ks", _metric(sqlcal.ks), "one"),
    ("kuiper", _metric(sqlcal.kuiper), "one"),
    ("lipschitz_calibration_error", _metric(sqlcal.lipschitz_calibration_error), "one"),
    ("log_loss", _metric(sqlcal.log_loss), "one"),
    ("normalized_entropy", _metric(sqlcal.normalized_entropy), "one"),
    ("ls_ece", _metric(sqlcal.ls_ece), "one"),
    ("smooth_ece", _metric(sqlcal.smooth_ece), "one"),
    ("spiegelhalter", _metric(sqlcal.spiegelhalter), "one"),
    ("tce", _metric(sqlcal.tce, n_min=2, n_max=6), "one"),
    ("reliability", _metric(sqlcal.reliability, bins=4), "rows"),
    ("smooth_reliability", _metric(sqlcal.smooth_reliability, points=5), "rows"),
    ("tce_bins", _metric(sqlcal.tce_bins, n_min=2, n_max=6), "rows"),
    ("isotonic", _metric(sqlcal.isotonic), "map"),
    ("platt", _metric(sqlcal.platt), "map"),
    ("report", _metric(sqlcal.report, metrics=["ece", "brier", "cutoff_error", "spiegelhalter",
                                              "tce", "log_loss"]), "one"),
    ("metric_series", _metric(sqlcal.metric_series, time="day",
                              metrics=["ece", "brier"]), "rows"),
    ("classwise", lambda data, **kw: sqlcal.classwise(sqlcal.ece, data, score=SCORE,
                                                      label=LABEL, **kw), "one"),
]
#: public functions taking data and by= that the table above does not run, with the reason
#: (each has its own test of its groups)
ELSEWHERE = {
    "source": "builds the grouped source itself",
    "stored": "a window of a store: test_debiased_ece_honours_a_stored_windows_groups",
    "snapshot": "writes the store; the store's keys are tested with the monitor",
    "detect": "reads the store; the store's keys are tested with the monitor",
    "summary_sql": "SQL text: test_exported_summaries_keep_null_and_nan_apart",
    "from_summaries": "test_exported_summaries_keep_null_and_nan_apart",
    "class_summary": "takes a result table (classwise runs it above)",
    "temperature_scaling": "a multiclass fit: test_multiclass_keys_named_like_its_columns",
    "segments": "per segment within a group: the segments' own tests",
    "multicalibration": "per segment within a group: the segments' own tests",
    "segment_fix": "per segment within a group: the segments' own tests",
    "multiclass": "makes a table (keys=): test_multiclass_keys_named_like_its_columns",
}


def test_the_table_runs_every_public_function_that_takes_groups():
    taking = {name for name in sqlcal.__all__ if callable(getattr(sqlcal, name))
              and not isinstance(getattr(sqlcal, name), type)
              and {"by", "keys"} & set(inspect.signature(getattr(sqlcal, name)).parameters)}
    run = {name.removesuffix("_grid").removesuffix("_quantile") for name, *_ in METRICS}
    assert taking - run - set(ELSEWHERE) == set()


# -- data with drawn keys ---------------------------------------------------------------------


@st.composite
def keyed_tables(draw):
    """A pyarrow table of scores and labels under 1-2 drawn keys (names and values), and its
    distinct key tuples (NULL as None, NaN as nan)."""
    n_keys = draw(st.integers(1, 2))
    names = draw(st.lists(st.sampled_from(KEY_NAMES), min_size=n_keys, max_size=n_keys,
                          unique_by=str.lower))
    kinds = [draw(st.sampled_from(sorted(KINDS))) for _ in names]
    tuples = draw(st.lists(st.tuples(*(st.sampled_from(KINDS[k][1]) for k in kinds)),
                           min_size=1, max_size=3, unique_by=_tuple_id))
    rows = {name: [] for name in names} | {SCORE: [], LABEL: [], "day": [], "class": []}
    for group in tuples:
        size = draw(st.integers(6, 10))
        scores = draw(st.lists(st.sampled_from([0.1, 0.2, 0.35, 0.5, 0.6, 0.8, 0.9]),
                               min_size=size, max_size=size))
        labels = [0, 1] + draw(st.lists(st.integers(0, 1), min_size=size - 2,
                                        max_size=size - 2))
        for name, value in zip(names, group):
            rows[name] += [value] * size
        rows[SCORE] += scores
        rows[LABEL] += labels
        rows["day"] += [pd.Timestamp("2026-11-01")] * size
        rows["class"] += ["c1", "c2"] * (size // 2) + ["c1"] * (size % 2)
    types = {name: KINDS[k][0] for name, k in zip(names, kinds)}
    table = pa.table({name: pa.array(values, type=types.get(name), from_pandas=False)
                      for name, values in rows.items()})
    return table, names, tuples


def _tuple_id(group: tuple) -> tuple:
    # NULL and NaN are distinct values; NaN equals NaN
    return tuple("<NULL>" if v is None else "<NaN>" if isinstance(v, float) and math.isnan(v)
                 else (type(v).__name__, v) for v in group)


def _rows_of(table: pa.Table, names, group) -> pa.Table:
    mask = None
    for name, value in zip(names, group):
        column = table[name]
        if value is None:
            this = pc.is_null(column)
        elif isinstance(value, float) and math.isnan(value):
            this = pc.fill_null(pc.is_nan(column), False)
        else:
            this = pc.fill_null(pc.equal(column, value), False)
        mask = this if mask is None else pc.and_(mask, this)
    return table.filter(mask)


def _is_value(got, want) -> bool:
    """A presented key value is the drawn one: NULL as None/NA, NaN as NaN."""
    if want is None:
        return got is None or got is pd.NA
    if got is None or got is pd.NA:
        return False
    if isinstance(want, float) and math.isnan(want):
        return isinstance(got, float) and math.isnan(got)
    return got == want and not (isinstance(got, float) and math.isnan(got))


def _own(name: str, keys) -> str:
    """The rule for sqlcal's columns beside keys: a trailing underscore until no key has it."""
    while name in keys:
        name += "_"
    return name


def _frame(out, kind) -> pd.DataFrame:
    return out.table if kind == "map" else out


def _same(got: pd.DataFrame, want: pd.DataFrame, what: str):
    assert len(got) == len(want), f"{what}: {len(got)} rows, alone {len(want)}"
    for column in want.columns:
        a, b = got[column].tolist(), want[column].tolist()
        for x, y in zip(a, b):
            if isinstance(y, (float, np.floating)) and not isinstance(y, bool):
                if math.isnan(y):
                    assert x is not None and math.isnan(x), (what, column, a, b)
                else:
                    assert math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12), (what, column, a, b)
            else:
                assert x == y or (pd.isna(x) and pd.isna(y)), (what, column, a, b)


def check_groups(call, kind, table, names, tuples):
    grouped = _frame(call(table, by=list(names)), kind)
    assert list(grouped.columns[: len(names)]) == list(names)
    found = []
    for group in tuples:
        mask = np.ones(len(grouped), bool)
        for name, value in zip(names, group):
            mask &= np.array([_is_value(v, value) for v in grouped[name].tolist()], bool)
        part = grouped[mask].reset_index(drop=True)
        alone = _frame(call(_rows_of(table, names, group)), kind)
        if kind == "one":
            assert len(part) == 1, f"group {group}: {len(part)} rows of {grouped}"
        got = part[[_own(c, names) for c in alone.columns]].set_axis(alone.columns, axis=1)
        _same(got, alone, f"group {group}")
        found.append(mask)
    assert np.logical_or.reduce(found).all(), f"rows of no group in {grouped}"


_SETTINGS = settings(max_examples=6, deadline=None,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.mark.parametrize("name,call,kind", METRICS, ids=[m[0] for m in METRICS])
def test_one_result_per_key_tuple_equal_to_its_rows_alone(name, call, kind):
    @_SETTINGS
    @given(drawn=keyed_tables())
    def run(drawn):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            check_groups(call, kind, *drawn)

    run()
