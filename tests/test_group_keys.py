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
import json
import math
import os
import warnings

import ibis
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import sqlcal

SCORE, LABEL = "prediction", "outcome"

#: names a key may take: sqlcal's result and summary columns, its internal names, the segment
#: values, unicode, mixed case, spaces and quotes
KEY_NAMES = [
    "ece", "brier", "n", "W", "exact", "weight_kind", "binning", "n_bins", "p_value", "z",
    "bin", "cell", "k", "s", "p", "y", "w", "u", "f", "v", "swy", "sw2", "chk_p_count",
    "n_dropped", "lo", "hi", "value", "t", "score", "tce", "rejected", "sigma", "n_", "ece_",
    "__key0", "__nan0", "__key1", "__nan1", "__null0", "__null1", "sqlcal_c0", "__null__",
    "__other__", "segment", "period_start", "rule",
    "clé", "ключ", "键", "Mixed Case", "with space", 'dq"uote', "sq'uote",
]
TEXT_VALUES = ["a", "b", "__null__", "__other__", "NULL", "", "é", "ключ", "键", "it's", None]
DOUBLE_VALUES = [0.5, -1.0, float("nan"), None, float("inf")]
INT_VALUES = [0, 1, -7, None, 2**60, 2**60 + 1]
KINDS = {"text": (pa.string(), TEXT_VALUES), "double": (pa.float64(), DOUBLE_VALUES),
         "int": (pa.int64(), INT_VALUES)}

def _metric(function, **options):
    """call(data, **keywords): the function with its required options (score and label
    unless ``data`` is a Source)."""
    def call(data, **keywords):
        columns = {} if isinstance(data, sqlcal.Source) else {"score": SCORE, "label": LABEL}
        return function(data, **columns, **options, **keywords)
    return call


#: (name, call(data, **keywords), kind of result): "one" row per group, "rows" (several per
#: group, compared in order), "map" (a fitted map: its table)
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
    ("compare", lambda data, **kw: sqlcal.compare(
        data.append_column("baseline", pc.add(pc.multiply(data[SCORE], 0.8), 0.1)),
        score=SCORE, label=LABEL, baseline="baseline", bins=4, **kw), "rows"),
]
#: the functions of METRICS that cannot take a grouped Source, with the reason
NO_SOURCE = {"metric_series": "adds its time key to the source's keys: it takes data",
             "classwise": "groups a multiclass table by its class: it takes the table",
             "compare": "pairs two score columns of the rows: it takes data"}
#: public functions taking data and by= that the table above does not run, with the reason
#: (each has its own test of its groups)
ELSEWHERE = {
    "source": "builds the grouped source itself",
    "stored": "a window of a store: test_debiased_ece_honours_a_grouped_source_and_a_stored_...",
    "snapshot": "writes the store, whose key columns are the store's own (its tests)",
    "detect": "reads the store, whose key columns are the store's own (its tests)",
    "summary_sql": "SQL text: test_exported_summaries_keep_null_and_nan_apart",
    "from_summaries": "test_exported_summaries_keep_null_and_nan_apart",
    "class_summary": "takes a result table (classwise runs it above)",
    "temperature_scaling": "a multiclass fit: test_multiclass_keys_named_like_its_columns",
    "segments": "per segment within a group, keys named by segments itself (its tests)",
    "multicalibration": "per segment within a group, keys named by segments itself (its tests)",
    "segment_fix": "per segment within a group, keys named by segments itself (its tests)",
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


def _adversarial() -> tuple:
    """Keys named like a result column and an internal one, NULL beside NaN in a DOUBLE key,
    NULL beside "__null__" in a text key."""
    rows = {"n": [], "ece": [], SCORE: [], LABEL: [], "day": [], "class": []}
    tuples = [(1.0, "a"), (None, "a"), (float("nan"), "a"), (None, "__null__"), (None, None)]
    rng = np.random.default_rng(5)
    for n, ece in tuples:
        size = 8
        rows["n"] += [n] * size
        rows["ece"] += [ece] * size
        rows[SCORE] += list(np.round(rng.uniform(0.05, 0.95, size), 1))
        rows[LABEL] += [0, 1] + list(rng.integers(0, 2, size - 2))
        rows["day"] += [pd.Timestamp("2026-11-01")] * size
        rows["class"] += ["c1", "c2"] * (size // 2)
    table = pa.table({"n": pa.array(rows["n"], pa.float64(), from_pandas=False),
                      **{k: rows[k] for k in ("ece", SCORE, LABEL, "day", "class")}})
    return table, ["n", "ece"], tuples


#: each metric: the adversarial example, then drawn ones (each call costs up to a second of
#: engine work for the slowest metrics: about 50 s for all)
_SETTINGS = settings(max_examples=2, deadline=None,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.mark.parametrize("name,call,kind", METRICS, ids=[m[0] for m in METRICS])
def test_one_result_per_key_tuple_equal_to_its_rows_alone(name, call, kind):
    @_SETTINGS
    @example(drawn=_adversarial())
    @given(drawn=keyed_tables())
    def run(drawn):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            check_groups(call, kind, *drawn)

    run()


@pytest.mark.parametrize("name,call,kind", [m for m in METRICS if m[0] not in NO_SOURCE],
                         ids=[m[0] for m in METRICS if m[0] not in NO_SOURCE])
def test_a_grouped_source_keeps_its_groups_in_every_function(name, call, kind):
    """A Source built with by= passed to any function: the same groups as by= in the call."""
    table, names, _ = _adversarial()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        grouped = sqlcal.source(table, score=SCORE, label=LABEL, by=names)
        got, want = _frame(call(grouped), kind), _frame(call(table, by=names), kind)
    assert list(got.columns) == list(want.columns)
    assert len(got) == len(want) and len(got) >= 5
    for key in names:  # NULL and NaN where they were
        assert _shown(got[key]) == _shown(want[key])
    _same(got.drop(columns=names), want.drop(columns=names), name)


def _shown(column) -> list:
    """A key column's values as text: NULL as "NULL", NaN as "NaN"."""
    return ["NULL" if v is None or v is pd.NA else repr(v) for v in column.astype(object)]


# -- NULL and NaN: two groups, on every engine, against numpy ---------------------------------


def _null_nan_rows(n: int = 3000, seed: int = 11) -> dict:
    """A DOUBLE key of NULL, NaN and 1.0, each group calibrated differently."""
    rng = np.random.default_rng(seed)
    kind = rng.integers(0, 3, n)  # 0: 1.0, 1: NULL, 2: NaN
    p = np.round(rng.uniform(0.02, 0.98, n), 3)
    shift = np.array([0.0, 0.08, -0.06])[kind]
    y = (rng.uniform(size=n) < np.clip(p + shift, 0, 1)).astype(np.int64)
    key = [1.0 if k == 0 else None if k == 1 else float("nan") for k in kind]
    return {"g": key, "p": p, "y": y, "kind": kind}


def _ece(p, y, bins=15) -> float:
    """Equal-width ECE, brute force: bin min(floor(p·B), B − 1)."""
    b = np.minimum(np.floor(p * bins), bins - 1).astype(int)
    return sum(abs(y[b == i].mean() - p[b == i].mean()) * (b == i).sum()
               for i in np.unique(b)) / len(p)


#: the property against numpy: more examples than the table-driven test (two cheap metrics)
_NUMPY_SETTINGS = settings(max_examples=15, deadline=None,
                           suppress_health_check=[HealthCheck.too_slow,
                                                  HealthCheck.data_too_large])


@_NUMPY_SETTINGS
@example(drawn=_adversarial())
@given(drawn=keyed_tables())
def test_grouped_ece_and_brier_equal_numpy_on_each_key_tuple(drawn):
    """Drawn key names (sqlcal's result, summary and internal column names among them) and
    values (NULL, NaN, 2^60 and 2^60 + 1, "", unicode): ece and brier by the keys on DuckDB give
    one row per distinct key tuple, its count, ECE and Brier score those of brute-force numpy on
    the raw rows of that tuple (grouped in Python, NULL and NaN apart)."""
    table, names, _ = drawn
    columns = table.to_pydict()
    p, y = np.array(columns[SCORE], float), np.array(columns[LABEL], float)
    groups: dict = {}
    for i, group in enumerate(zip(*(columns[name] for name in names))):
        groups.setdefault(_tuple_id(group), (group, []))[1].append(i)
    ece = sqlcal.ece(table, score=SCORE, label=LABEL, by=names, bins=4)
    brier = sqlcal.brier(table, score=SCORE, label=LABEL, by=names)
    for out in (ece, brier):
        assert list(out.columns[:len(names)]) == names and len(out) == len(groups), out
    for group, rows in groups.values():
        for out, column, want in ((ece, "ece", _ece(p[rows], y[rows], bins=4)),
                                  (brier, "brier", np.mean((p[rows] - y[rows]) ** 2))):
            mask = np.ones(len(out), bool)
            for name, value in zip(names, group):
                mask &= np.array([_is_value(v, value) for v in out[name].tolist()], bool)
            assert mask.sum() == 1, f"{column} of {group}: {mask.sum()} rows in {out}"
            assert out[_own("n", names)][mask].item() == len(rows)
            np.testing.assert_allclose(out[_own(column, names)][mask].item(), want, rtol=1e-9,
                                       atol=1e-15, err_msg=f"{column} of {group}")


def _upload_keys(con, rows: dict, name: str):
    """The rows in the engine with NULL and NaN as themselves (a pandas frame cannot hold both
    in a float column)."""
    if con.name == "pyspark":
        from pyspark.sql.types import DoubleType, LongType, StructField, StructType

        spark_schema = StructType([StructField("g", DoubleType()), StructField("p", DoubleType()),
                                   StructField("y", LongType())])
        data = [(g, float(p), int(y)) for g, p, y in zip(rows["g"], rows["p"], rows["y"])]
        con._session.createDataFrame(data, spark_schema).createOrReplaceTempView(name)
        return con.table(name)
    table = pa.table({"g": pa.array(rows["g"], pa.float64(), from_pandas=False),
                      "p": rows["p"], "y": rows["y"]})
    return con.create_table(name, table, temp=con.name == "postgres")


@pytest.mark.cluster
def test_null_and_nan_keys_are_two_groups_on_every_engine(con):
    rows = _null_nan_rows()
    t = _upload_keys(con, rows, f"keys_null_nan_{con.name}")
    # the engine holds both: NULL is not NaN
    kinds = t.aggregate(null=t.g.isnull().sum(), n=t.count()).execute()
    assert int(kinds["n"].iloc[0]) == 3000
    got = sqlcal.ece(t, score="p", label="y", by="g")
    assert len(got) == 3
    p, y, kind = rows["p"], rows["y"], rows["kind"]
    # sorted: the value, then NULL, then NaN; NULL shows as <NA>, NaN as NaN
    assert got["g"].iloc[0] == 1.0 and got["g"].iloc[1] is pd.NA
    assert got["g"].iloc[2] is not pd.NA and np.isnan(got["g"].iloc[2])
    for row, k in enumerate((0, 1, 2)):
        want = _ece(p[kind == k], y[kind == k])
        assert got["n"].iloc[row] == (kind == k).sum()
        np.testing.assert_allclose(got["ece"].iloc[row], want, rtol=1e-9)
    # report agrees with the single calls; the reliability table has each bin once per group
    report = sqlcal.report(t, score="p", label="y", by="g", metrics=["ece", "brier"])
    np.testing.assert_allclose(report["ece"], got["ece"], rtol=1e-12)
    brier = [np.mean((p[kind == k] - y[kind == k]) ** 2) for k in (0, 1, 2)]
    np.testing.assert_allclose(report["brier"], brier, rtol=1e-9)
    table = sqlcal.reliability(t, score="p", label="y", by="g", ci=None)
    assert len(table) == 45 and table.groupby(["g", "bin"], dropna=False).size().max() == 1


def test_keys_named_like_result_columns_keep_their_values_on_their_groups():
    """The issue's case: a key named ``brier`` (or ``weight_kind``, ``exact``) put Brier values
    on the wrong groups."""
    rng = np.random.default_rng(3)
    n = 600
    p = rng.uniform(0.05, 0.95, n)
    y = (rng.uniform(size=n) < p).astype(int)
    for key in ("brier", "weight_kind", "exact", "n", "W", "p"):
        values = rng.choice([0.25, 0.5, 0.75, 1.0], n)  # key values near Brier values
        frame = pd.DataFrame({key: values, "score": p, "label": y})
        got = sqlcal.brier(frame, score="score", label="label", by=key)
        value = "brier_" if key == "brier" else "brier"
        for _, row in got.iterrows():
            mask = values == row[key]
            np.testing.assert_allclose(row[value], np.mean((p[mask] - y[mask]) ** 2), rtol=1e-12)
            assert row["n_" if key == "n" else "n"] == mask.sum()
        report = sqlcal.report(frame, score="score", label="label", by=key,
                               metrics=["brier", "spiegelhalter", "cutoff_error"])
        np.testing.assert_allclose(report[value], got[value], rtol=1e-12)
    # the rule: the key first under its name, sqlcal's column with a trailing underscore
    frame = pd.DataFrame({"n": values, "score": p, "label": y})
    assert list(sqlcal.ece(frame, score="score", label="label", by="n").columns) == [
        "n", "ece", "n_", "W", "n_bins", "ci_lower", "ci_upper", "binning", "ci_method",
        "confidence", "weight_kind"]


def _debiased(p, y, bins=15) -> float:
    """Kumar et al.'s debiased squared ECE, brute force over equal-width bins."""
    b = np.minimum(np.floor(p * bins), bins - 1).astype(int)
    total = 0.0
    for i in np.unique(b):
        yb, pb, wb = y[b == i].mean(), p[b == i].mean(), (b == i).sum()
        if wb >= 2:
            total += wb * ((yb - pb) ** 2 - yb * (1 - yb) / (wb - 1))
    return total / len(p)


def test_debiased_ece_honours_a_grouped_source_and_a_stored_windows_groups():
    """debiased_ece read the caller's by=, not the source's: one merged row (0.0074) where the
    three models were 0.0088, 0.0029 and 0.0106."""
    rng = np.random.default_rng(7)
    n = 6000
    model = rng.choice(["m1", "m2", "m3"], n)
    p = np.round(rng.uniform(0.02, 0.98, n), 3)
    shift = pd.Series(model).map({"m1": 0.05, "m2": 0.0, "m3": -0.07}).to_numpy()
    y = (rng.uniform(size=n) < np.clip(p + shift, 0, 1)).astype(int)
    day = pd.Timestamp("2026-11-01") + pd.to_timedelta(rng.integers(0, 5, n), unit="D")
    frame = pd.DataFrame({"model": model, "p": p, "y": y, "t": day})
    want = {m: _debiased(p[model == m], y[model == m]) for m in ("m1", "m2", "m3")}
    grouped = sqlcal.source(frame, score="p", label="y", by="model")
    stored_at = f"keys_store_{id(frame)}"
    sqlcal.snapshot(frame, score="p", label="y", by="model", time="t", store=":memory:",
                    as_of="2026-12-31", prefix=stored_at)
    window = sqlcal.stored(":memory:", prefix=stored_at, maturity="all")
    for src in (grouped, window):
        got = sqlcal.debiased_ece(src)
        assert got["model"].tolist() == ["m1", "m2", "m3"]
        np.testing.assert_allclose(got["ece_sq_debiased"], [want[m] for m in got["model"]],
                                   rtol=1e-9)


def test_exported_summaries_keep_null_and_nan_apart():
    """summary_sql with a floating key named like a summary column, run by a client that reads
    NULL and NaN alike, finished by from_summaries: the groups of the direct call."""
    import duckdb

    rows = _null_nan_rows(900)
    table = pa.table({"n": pa.array(rows["g"], pa.float64(), from_pandas=False),
                      "p": rows["p"], "y": rows["y"]})
    sql = sqlcal.summary_sql("ece", table="preds", score="p", label="y", by="n",
                             schema={"n": "float64", "p": "float64", "y": "int64"})
    db = duckdb.connect()
    db.register("preds", table)
    frames = {name: db.sql(text).df() for name, text in sql.items()}
    got = sqlcal.from_summaries("ece", frames, score="p", label="y", by="n")
    want = sqlcal.ece(table, score="p", label="y", by="n")
    assert len(got) == 3
    assert _shown(got["n"]) == _shown(want["n"])
    np.testing.assert_allclose(got["ece"], want["ece"], rtol=1e-12)
    np.testing.assert_allclose(got["n_"], want["n_"])


def test_the_scheduled_report_keeps_null_and_nan_keys_apart_in_json_html_and_results(tmp_path):
    """``sqlcal report --config`` on a DuckDB file with a DOUBLE key named like a tidy column
    (``value``: NULL, NaN, 1.0) beside a text key: one JSON group, one HTML section and one set
    of results rows per key tuple, each with the numbers of its own rows."""
    import duckdb
    import jsonschema

    from sqlcal.cli.commands import main
    from sqlcal.reporting import scheduled

    rows = _null_nan_rows(1500)
    rows["day"] = pd.Timestamp("2026-11-01") + pd.to_timedelta(
        np.arange(1500) % 3, unit="D")
    path = tmp_path / "preds.duckdb"
    db = duckdb.connect(str(path))
    db.register("arrow", pa.table({
        "value": pa.array(rows["g"], pa.float64(), from_pandas=False), "seg": ["s"] * 1500,
        "p": rows["p"], "y": rows["y"], "day": rows["day"]}))
    db.execute("CREATE TABLE preds AS SELECT * FROM arrow")
    db.close()
    (tmp_path / "report.toml").write_text(
        '[source]\ndata = "preds.duckdb"\ntable = "preds"\nscore = "p"\nlabel = "y"\n'
        'by = ["value", "seg"]\n[metrics]\nbrier = {}\nece = {}\n'
        '[[alerts]]\nmetric = "brier"\ncolumn = "brier"\nabove = 0.0\n'
        '[time]\nkey = "day"\nmetrics = ["brier"]\n[report]\ndiagrams = true\n'
        '[output]\njson = "out.json"\nhtml = "out.html"\n[results]\ntable = "results"\n')
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert main(["report", "--config", "report.toml", "--run-id", "keys"]) == 3
    finally:
        os.chdir(cwd)
    p, y, kind = rows["p"], rows["y"], rows["kind"]
    brier = {json_key: np.mean((p[kind == k] - y[kind == k]) ** 2)
             for json_key, k in ((1, 0), (None, 1), ("NaN", 2))}
    doc = json.loads((tmp_path / "out.json").read_text())
    jsonschema.validate(doc, scheduled.json_schema())
    assert sorted(map(json.dumps, doc["groups"])) == sorted(
        json.dumps({"value": v, "seg": "s"}) for v in brier)
    for record in doc["metrics"]:
        if record["metric"] == "brier":
            np.testing.assert_allclose(record["value"], brier[record["group"]["value"]],
                                       rtol=1e-12)
    assert len(doc["alerts"]) == 3  # one per group, each on its own value
    for alert in doc["alerts"]:
        np.testing.assert_allclose(alert["value"], brier[alert["group"]["value"]], rtol=1e-12)
    html = (tmp_path / "out.html").read_text()
    assert html.count('<section class="group"') == 3
    assert html.count('data-alerts="1"') == 3
    results = duckdb.connect(str(path), read_only=True).sql(
        "SELECT group_keys, value FROM results WHERE metric = 'brier'").df()
    assert len(results) == 3
    for _, row in results.iterrows():
        np.testing.assert_allclose(row["value"], brier[json.loads(row["group_keys"])["value"]],
                                   rtol=1e-12)


def test_multiclass_keys_named_like_its_columns():
    """temperature_scaling grouped by a key named like a column of its fit's terms (``g``, the
    gradient; ``n``), with NULL beside NaN: each group's temperature is the one fitted on its
    rows alone, and the map applied in the engine equals numpy's. multiclass() carries such
    keys into a table every metric groups by."""
    rng = np.random.default_rng(4)
    n = 900
    z = rng.normal(size=(n, 3)) * np.array([2.0, 1.0, 3.0])[np.arange(n) % 3][:, None]
    probs = np.exp(z) / np.exp(z).sum(1, keepdims=True)
    truth = np.array(["a", "b", "c"])[[rng.choice(3, p=q) for q in probs]]
    g = [1.0 if i % 3 == 0 else None if i % 3 == 1 else float("nan") for i in range(n)]
    table = pa.table({"g": pa.array(g, pa.float64(), from_pandas=False),
                      "n": ["x" if i % 2 else "y" for i in range(n)], "a": probs[:, 0],
                      "b": probs[:, 1], "c": probs[:, 2], "truth": truth})
    options = dict(format="wide", probs=["a", "b", "c"], label="truth")
    fitted = sqlcal.temperature_scaling(table, by=["g", "n"], **options)
    assert len(fitted.table) == 6 and list(fitted.table.columns[:3]) == ["g", "n", "temperature"]
    for value, i in ((1.0, 0), (None, 1), (float("nan"), 2)):
        for name in ("x", "y"):
            rows = [j for j in range(n) if j % 3 == i and (j % 2 == 1) == (name == "x")]
            alone = sqlcal.temperature_scaling(table.take(rows).drop_columns(["g", "n"]),
                                               **options)
            got = fitted.table[[_is_value(v, value) and k == name for v, k in
                                zip(fitted.table["g"].astype(object), fitted.table["n"])]]
            np.testing.assert_allclose(got["temperature"], alone.temperature, rtol=1e-9)
            want = fitted.transform(probs[rows], {"g": value, "n": name})
            applied = fitted.apply(ibis.memtable(table.take(rows))).execute()
            np.testing.assert_allclose(applied[["calibrated_a", "calibrated_b",
                                                "calibrated_c"]].to_numpy(), want, rtol=1e-9)
    long = sqlcal.multiclass(table, keys=["g", "n"], mode="top_label", **options)
    got = sqlcal.ece(long, score="score", label="label", by=["g", "n"])
    assert len(got) == 6


@_SETTINGS
@example(drawn=_adversarial())
@given(drawn=keyed_tables())
def test_report_agrees_with_the_single_calls(drawn):
    """Each report column equals its metric's own call, group for group, whatever the keys are
    named (a key named like a report column moves that column to its underscored name)."""
    from sqlcal.reporting.report_table import METRICS as REPORTED

    table, names, _ = drawn
    chosen = ["ece", "brier", "log_loss", "spiegelhalter", "cutoff_error", "tce"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = sqlcal.report(table, score=SCORE, label=LABEL, by=names, metrics=chosen)
        for name in chosen:
            function, options, columns = REPORTED[name]
            alone = function(table, score=SCORE, label=LABEL, by=names, **options)
            for key in names:
                assert _shown(report[key]) == _shown(alone[key])
            for column, target in columns.items():
                np.testing.assert_allclose(report[_own(target, names)].to_numpy(float),
                                           alone[_own(column, names)].to_numpy(float),
                                           rtol=1e-12, err_msg=f"{name}.{column}")


@pytest.mark.parametrize("name,call,kind", [m for m in METRICS if m[0] not in NO_SOURCE],
                         ids=[m[0] for m in METRICS if m[0] not in NO_SOURCE])
def test_a_stored_window_keeps_its_groups_in_every_function(name, call, kind, stored_window):
    """Every function given a grouped window of the summary store: one result per group, that of
    the rows' own grouped source (or the documented refusal naming the snapshot option)."""
    from sqlcal.options import OptionError

    frame, window = stored_window
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            got = _frame(call(window), kind)
        except OptionError as e:  # a summary the store does not hold: the option to store it
            assert "snapshot" in str(e) or "levels" in str(e), e
            pytest.skip(f"{name} on a stored window: {e}")
        want = _frame(call(sqlcal.source(frame, score="p", label="y", by="model")), kind)
    assert got["model"].tolist() == want["model"].tolist() and len(got) >= 3
    # the intervals too (LS-ECE's from the logit grid's split moments of summary version 4):
    # the store keeps what they read
    _same(got.drop(columns=["model"]), want.drop(columns=["model"]), name)


@pytest.fixture(scope="module")
def stored_window():
    rng = np.random.default_rng(9)
    n = 3000
    model = rng.choice(["m1", "m2", "m3"], n)
    p = np.round(rng.uniform(0.02, 0.98, n), 2)
    shift = pd.Series(model).map({"m1": 0.05, "m2": 0.0, "m3": -0.07}).to_numpy()
    y = (rng.uniform(size=n) < np.clip(p + shift, 0, 1)).astype(int)
    day = pd.Timestamp("2026-11-01") + pd.to_timedelta(rng.integers(0, 4, n), unit="D")
    frame = pd.DataFrame({"model": model, "p": p, "y": y, "t": day})
    prefix = f"keys_window_{rng.integers(1 << 30)}_"
    sqlcal.snapshot(frame, score="p", label="y", by="model", time="t", store=":memory:",
                    as_of="2026-12-31", prefix=prefix, levels=True, bins=(4, 15))
    return frame, sqlcal.stored(":memory:", prefix=prefix, maturity="all")


def test_normalized_entropy_of_a_stored_window_equals_numpy_with_or_without_levels(
        stored_window):
    """A window with levels gives each group's NE of brute-force numpy (it raised KeyError
    'sw_logloss_sq'); so does one without, from the totals of summary version 3 (Σwℓ², Σwyℓ
    and their variance-weight forms)."""
    frame, window = stored_window
    sqlcal.snapshot(frame, score="p", label="y", by="model", time="t", store=":memory:",
                    as_of="2026-12-31", prefix="keys_no_levels_")
    bare = sqlcal.stored(":memory:", prefix="keys_no_levels_", maturity="all")
    for source in (window, bare):
        got = sqlcal.normalized_entropy(source)
        assert len(got) == 3
        for row in got.itertuples():
            part = frame[frame["model"] == row.model]
            p, y = part["p"].to_numpy(), part["y"].to_numpy()
            b = y.mean()
            ll = -np.mean(y * np.log(p) + (1 - y) * np.log(1 - p))
            np.testing.assert_allclose(row.normalized_entropy,
                                       ll / -(b * np.log(b) + (1 - b) * np.log(1 - b)),
                                       rtol=1e-9)


def test_integer_keys_above_two_to_the_53_stay_apart_beside_a_null():
    """pandas reads an integer column holding a NULL as floats: 2^60 and 2^60 + 1 became one
    group of ece (n = 4) beside the NULL group."""
    rng = np.random.default_rng(12)
    keys = [2**60, 2**60 + 1, None, -3]
    k = rng.integers(0, 4, 800)
    p = np.round(rng.uniform(0.05, 0.95, 800), 2)
    y = (rng.uniform(size=800) < p).astype(int)
    table = pa.table({"k": pa.array([keys[i] for i in k], pa.int64()), "p": p, "y": y})
    got = sqlcal.ece(table, score="p", label="y", by="k")
    assert got["k"].tolist()[:3] == [-3, 2**60, 2**60 + 1] and got["k"].iloc[3] is pd.NA
    for row, i in enumerate((3, 0, 1, 2)):
        assert got["n"].iloc[row] == (k == i).sum()
        np.testing.assert_allclose(got["ece"].iloc[row], _ece(p[k == i], y[k == i]), rtol=1e-9)
    m = sqlcal.isotonic(table, score="p", label="y", by="k")  # and a map applied in the engine
    for inline in (True, False):  # Arrow: pandas would round the keys again
        mapped = m.apply(ibis.memtable(table), "p", inline=inline).to_pyarrow()
        for value in keys:
            part = _rows_of(mapped, ["k"], (value,))
            assert part.num_rows == sum(1 for i in k if keys[i] == value)
            np.testing.assert_allclose(part["calibrated"].to_numpy(),
                                       m.transform(part["p"].to_numpy(), {"k": value}),
                                       rtol=1e-12)
