"""Options are checked at the boundary, from one declared table, before any query runs.

Each reproduction of the hostile-input issue asserts the exact error class and that the message
names the option (and the function); a sweep gives every declared option of every public
function a value of the wrong type and one out of range, through an object that cannot be read
as data and with the query runner disabled, so an error proves the check ran first. Budgets: the
error names the cost and the budget, and a value just inside still runs.
"""

from __future__ import annotations

import math
import time
import tracemalloc

import ibis
import jsonschema
import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sqlcal
from sqlcal import options
from sqlcal.options import BudgetError, OptionError
from sqlcal.query import reductions
from tests.conftest import calibration_data
from tests.oracle import bin_ids, binned_ece, quantile_bin_ids


class Untouchable:
    """Data that cannot be read: a check that lets a bad option through fails on it instead."""


@pytest.fixture
def no_query(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a query ran before the options were checked")

    monkeypatch.setattr(reductions, "execute", refuse)
    monkeypatch.setattr(ibis.expr.types.Table, "to_pyarrow", refuse)
    monkeypatch.setattr(ibis.expr.types.Table, "execute", refuse)


@pytest.fixture(scope="module")
def frame():
    return calibration_data(300, seed=3)


def public_functions():
    return [name for name in sqlcal.__all__ if callable(getattr(sqlcal, name))
            and not isinstance(getattr(sqlcal, name), type) and name not in FORWARDING] + PLOTS


#: functions that pass their options to a metric's own check (tested below)
FORWARDING = ["summary_sql", "from_summaries"]


def test_exported_sql_checks_the_metrics_options():
    with pytest.raises(OptionError, match=r"ece\(\): bins must be a positive integer"):
        sqlcal.summary_sql("ece", table="t", score="p", label="y", bins=0)
    with pytest.raises(TypeError, match="unexpected keyword argument 'n_bins'"):
        sqlcal.from_summaries("ece", {}, n_bins=3)


#: diagrams with options of their own (the others pass theirs to a checked metric)
PLOTS = ["cumulative_plot", "smooth_reliability_diagram"]
import sqlcal.plots  # noqa: E402  (registers the diagrams; matplotlib is imported only to draw)

# -- the reproductions of the issue ------------------------------------------------------------


def test_confidence_out_of_range_names_it(no_query):
    with pytest.raises(OptionError, match=r"reliability\(\): confidence must be .*\(0, 1\)"):
        sqlcal.reliability(Untouchable(), score="p", label="y", confidence=2)


def test_bool_is_not_an_integer(no_query):
    with pytest.raises(OptionError, match=r"ece\(\): bins must be a positive integer, not True"):
        sqlcal.ece(Untouchable(), score="p", label="y", bins=True)


def test_hosmer_lemeshow_bins_are_its_risk_groups(no_query):
    # one word per concept: the test's risk groups are bins, as for every binned metric
    with pytest.raises(OptionError) as err:
        sqlcal.hosmer_lemeshow(Untouchable(), score="p", label="y", bins=0)
    assert str(err.value).startswith("hosmer_lemeshow(): bins must be a positive integer, not 0")
    assert "Hosmer-Lemeshow risk groups" in str(err.value)


@pytest.mark.parametrize("sigma, size", [(1e-9, "TiB"), (1e6, "GiB")])
def test_ls_ece_sigma_is_refused_before_allocating(no_query, sigma, size):
    tracemalloc.start()
    with pytest.raises(BudgetError) as err:
        sqlcal.ls_ece(Untouchable(), score="p", label="y", noise_scale=sigma)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    message = str(err.value)
    assert message.startswith(f"ls_ece(): noise_scale={sigma!r} would take")
    assert size in message and "budget is" in message and "Pass noise_scale" in message
    assert peak < 2**20


def test_quantile_bins_beyond_the_budget_answer_at_once(no_query):
    started = time.perf_counter()
    with pytest.raises(BudgetError) as err:
        sqlcal.ece(Untouchable(), score="p", label="y", bins=10**7, strategy="quantile")
    assert time.perf_counter() - started < 1
    # B·(B − 1) edge values for B = 10^7, against the default 2^24 cells
    assert "99,999,990,000,000 cells" in str(err.value)
    assert "16,777,216 cells" in str(err.value) and "Pass bins <=" in str(err.value)


def test_quantile_bins_on_real_rows_are_refused_without_a_query(no_query):
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"p": rng.random(10**5), "y": rng.integers(0, 2, 10**5)})
    with pytest.raises(BudgetError, match="bins=10000000"):
        sqlcal.ece(df, score="p", label="y", bins=10**7, strategy="quantile")


def test_misspelled_keyword_is_the_metrics_error(no_query):
    with pytest.raises(TypeError) as err:
        sqlcal.brier(Untouchable(), score="p", label="y", n_bins=5)
    message = str(err.value)
    assert message.startswith("brier() got an unexpected keyword argument 'n_bins'")
    assert "source()" not in message
    assert "table, on_invalid, soft_labels" in message  # the keywords brier does take


def test_misspelled_keyword_suggests_the_option(no_query):
    with pytest.raises(TypeError, match=r"ece\(\) got an unexpected keyword argument 'bin'.*"
                                        r"did you mean 'bins'"):
        sqlcal.ece(Untouchable(), score="p", label="y", bin=5)


def test_source_keywords_still_reach_the_source(frame):
    out = sqlcal.brier(frame, score="p", label="y", on_invalid="drop")
    expected = float(np.mean((frame["p"] - frame["y"]) ** 2))
    assert out["brier"].iloc[0] == pytest.approx(expected, rel=1e-12)
    assert out["n_dropped"].iloc[0] == 0


def test_report_takes_one_metric_name(frame):
    out = sqlcal.report(frame, score="p", label="y", metrics="ece")
    ids = bin_ids(frame["p"], 15)
    expected = binned_ece(frame["p"], frame["y"], np.ones(len(frame)), ids)
    # the metric's columns, then its interval's level and weight kind (issue 34)
    assert list(out.columns) == ["n", "W", "ece", "ece_lower", "ece_upper", "confidence",
                                 "weight_kind"]
    assert out["ece"].iloc[0] == pytest.approx(expected, rel=1e-12)


def test_report_unknown_metric_lists_the_valid_ones(no_query):
    with pytest.raises(OptionError) as err:
        sqlcal.report(Untouchable(), score="p", label="y", metrics=["ece", "eec"])
    message = str(err.value)
    assert message.startswith("report(): metrics has unknown metric 'eec'")
    assert "ece_quantile" in message and "hosmer_lemeshow" in message


def test_weights_beyond_bigint_are_measured(con, upload):
    # every weight equal: the weighted metrics are the unweighted ones, and integer-valued
    df = calibration_data(200, seed=5).assign(w=1e19)
    table = upload(df)
    ids = bin_ids(df["p"], 15)
    expected = binned_ece(df["p"], df["y"], np.ones(len(df)), ids)
    out = sqlcal.ece(table, score="p", label="y", weight="w")
    assert out["ece"].iloc[0] == pytest.approx(expected, rel=1e-9)
    assert out["W"].iloc[0] == pytest.approx(200 * 1e19, rel=1e-12)
    brier = sqlcal.brier(table, score="p", label="y", weight="w")["brier"].iloc[0]
    assert brier == pytest.approx(float(np.mean((df["p"] - df["y"]) ** 2)), rel=1e-9)


def test_huge_negative_weight_is_named(upload, con):
    df = calibration_data(50, seed=6).assign(w=1.0)
    df.loc[3, "w"] = -1e19
    with pytest.raises(sqlcal.InvalidInputError, match=r"weight column 'w' has 1 rows negative"):
        sqlcal.ece(upload(df), score="p", label="y", weight="w")


# -- the sweep: every declared option of every public function --------------------------------


def wrong_types(o: options.Option) -> list:
    values = {
        "int": [True, 2.5, "3"], "count": [True, 2.5, "3"], "float": [True, "0.5", math.nan],
        "bool": [1, "yes"], "choice": [3, "no-such-choice"], "column": [3, ["p"]],
        "text": [3], "columns": [3, [1]], "floats": ["x", [], True],
        "metrics": [3, "no_such_metric"], "any": [],
    }[o.kind]
    return values if o.optional else [*values, None] if o.kind != "any" else values


def out_of_range(o: options.Option) -> list:
    values = []
    step = 1 if o.kind in ("int", "count") else 0.5
    if o.low is not None:
        values.append(o.low if o.open_low else o.low - step)
    if o.high is not None:
        values.append(o.high if o.open_high else o.high + step)
    if o.power_of_two:
        values.append(3)
    if o.kind == "floats":
        values = [[v] for v in values]
    return values


SWEEP = [(f, name, value) for f in public_functions()
         for name, o in options.declared([f])[f].items()
         for value in [*wrong_types(o), *out_of_range(o)]]


@pytest.mark.parametrize("function, name, value", SWEEP,
                         ids=[f"{f}-{n}-{v!r}" for f, n, v in SWEEP])
def test_every_option_is_checked_before_any_query(no_query, function, name, value):
    with pytest.raises(OptionError) as err:
        options.check(function, {name: value})
    assert f"{function}():" in str(err.value) and name in str(err.value)
    f = getattr(sqlcal.plots if function in PLOTS else sqlcal, function)
    if hasattr(f, "__wrapped__"):  # decorated: the function itself refuses before any work
        required = {"metric_series": {"time": "t"}}.get(function, {})
        label = {"label": "y"} if "label" in options.keywords(function) else {}
        with pytest.raises(OptionError) as err:
            f(Untouchable(), **{**label, **required, name: value})
        assert name in str(err.value)


def test_every_keyword_of_every_public_function_is_declared():
    undeclared = [(f, k) for f, table in options.declared(public_functions()).items()
                  for k, o in table.items() if o.description == "not declared yet"]
    assert undeclared == []


def test_public_metrics_are_checked():
    unchecked = [f for f in public_functions()
                 if not hasattr(getattr(sqlcal.plots if f in PLOTS else sqlcal, f), "__wrapped__")]
    # scheduled.py (metric_series), source.py and multiclass.py are edited by others this round;
    # source() and multiclass() check their own options, metric_series' metrics reach checked
    # metrics (and every option of theirs is declared: the sweep checks the table for them)
    assert set(unchecked) <= {"metric_series", "source", "multiclass"}


@pytest.mark.parametrize("function", public_functions())
def test_defaults_pass_their_own_check(function):
    spec_defaults = {k: v for k, v in options._spec(function).defaults.items()}
    assert options.check(function, spec_defaults) == spec_defaults


@pytest.mark.parametrize("function", public_functions())
def test_json_schema_accepts_the_defaults(function):
    schema = options.json_schema(function)
    jsonschema.Draft202012Validator.check_schema(schema)
    defaults = {k: list(v) if isinstance(v, tuple) else v
                for k, v in options._spec(function).defaults.items()
                if options.option(function, k).kind != "any"}
    jsonschema.validate(defaults, schema)


def test_json_schema_refuses_what_check_refuses():
    schema = options.json_schema("ece")
    for bad in ({"bins": 0}, {"bins": 2.5}, {"norm": "l3"}, {"n_bins": 5}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)


def test_unknown_function_is_named():
    with pytest.raises(TypeError, match="no public function 'eece'"):
        options.check("eece", {})


def test_report_metric_names_check_their_function():
    with pytest.raises(OptionError, match=r"ece_quantile\(\): bins must be a positive"):
        options.check("ece_quantile", {"bins": 0})
    with pytest.raises(OptionError, match=r"rmsce\(\): bins must be a positive"):
        options.check("metric_series", {"metrics": {"rmsce": {"bins": -1}}})


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.integers(-10**9, 10**9), st.floats(allow_nan=True, allow_infinity=True),
                 st.booleans(), st.text(max_size=3), st.none()))
def test_bins_accepts_exactly_positive_integers(value):
    valid = type(value) is int and 1 <= value <= 2**24
    try:
        options.check("ece", {"bins": value})
        accepted = True
    except OptionError as e:
        assert "bins" in str(e)
        accepted = False
    assert accepted == valid


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-3, 3),
                 st.booleans(), st.text(max_size=3)))
def test_confidence_accepts_exactly_levels_in_the_open_unit_interval(value):
    valid = (type(value) in (int, float) and math.isfinite(value) and 0 < value < 1)
    try:
        options.check("reliability", {"confidence": value})
        accepted = True
    except OptionError as e:
        assert "confidence" in str(e)
        accepted = False
    assert accepted == valid


# -- budgets -----------------------------------------------------------------------------------


def test_budget_names_cost_and_limit_and_a_value_inside_runs(frame):
    w = np.ones(len(frame))
    ids, _ = quantile_bin_ids(frame["p"], w, 8)
    with options.budget(cells=56):  # B·(B − 1) = 56 for B = 8
        out = sqlcal.ece(frame, score="p", label="y", bins=8, strategy="quantile")
        assert out["ece"].iloc[0] == pytest.approx(binned_ece(frame["p"], frame["y"], w, ids),
                                                   rel=1e-12)
        with pytest.raises(BudgetError) as err:
            sqlcal.ece(frame, score="p", label="y", bins=9, strategy="quantile")
    assert "72 cells" in str(err.value) and "56 cells" in str(err.value)
    assert "Pass bins <= 8" in str(err.value)
    assert options.BUDGET == options.Budget()  # the block's budget ends with it


def test_cells_budget_on_the_cumulative_metrics(frame):
    # (bootstrap=0: the interval's replicate walks, 256 cells each, are a cost of their own)
    with options.budget(cells=1024):
        exact = sqlcal.cutoff_error(frame, score="p", label="y", cells=1024, bootstrap=0)
        with pytest.raises(BudgetError, match=r"cells=2048 would take 2,048 cells .*"
                                              r"budget is 1,024 cells.*Pass cells <= 1024"):
            sqlcal.cutoff_error(frame, score="p", label="y", cells=2048, bootstrap=0)
    with options.budget(bytes=2**20), pytest.raises(BudgetError, match=r"bootstrap=1000 would "
                                                                      r"take 11\.7 MiB"):
        sqlcal.cutoff_error(frame, score="p", label="y", cells=1024)
    # brute force: the largest |Σ w(y − p)| over intervals of distinct scores, as max − min of
    # the running sum over the sorted levels (with S₀ = 0)
    p, y = frame["p"].to_numpy(), frame["y"].to_numpy()
    levels, inverse = np.unique(p, return_inverse=True)
    r = np.bincount(inverse, weights=y - p)
    S = np.concatenate([[0.0], np.cumsum(r)])
    assert exact["cutoff_error"].iloc[0] == pytest.approx((S.max() - S.min()) / len(p),
                                                          rel=1e-9)


def test_ls_ece_grid_estimate_bounds_what_is_allocated(frame, monkeypatch):
    from sqlcal.metrics import smooth

    seen = []
    original = smooth._logit_masses

    def record(part, pad):
        out = original(part, pad)
        seen.append(len(out[0]) + 2 * pad + 1)  # the dense nodes and the kernel
        return out

    monkeypatch.setattr(smooth, "_logit_masses", record)
    sigma = 0.01  # δ = 5e-4; logit(1 − 1e-6) spans 2·13.8155 = 27.631: 55,262 cells + kernel
    estimate = [c for c in options.costs("ls_ece", {"noise_scale": sigma})
                if c.resource == "cells"]
    assert 55_262 < estimate[0].amount < 57_000
    tracemalloc.start()
    value = sqlcal.ls_ece(frame, score="p", label="y", noise_scale=sigma)["ls_ece"].iloc[0]
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert max(seen) <= estimate[0].amount
    # the convolutions' memory, and the interval's replicates (1,000 by default) beside them
    bytes_estimate = sum(c.amount for c in options.costs(
        "ls_ece", {"noise_scale": sigma, "bootstrap": 1000}) if c.resource == "bytes")
    assert peak <= bytes_estimate
    with options.budget(cells=math.ceil(estimate[0].amount), bytes=math.ceil(bytes_estimate)):
        again = sqlcal.ls_ece(frame, score="p", label="y", noise_scale=sigma)["ls_ece"].iloc[0]
        assert again == value
        with pytest.raises(BudgetError, match=r"ls_ece\(\): noise_scale=0.009 would take"):
            sqlcal.ls_ece(frame, score="p", label="y", noise_scale=0.009)


def test_smooth_ece_bandwidth_and_bootstrap_budgets(frame, no_query):
    with pytest.raises(BudgetError, match=r"smooth_ece\(\): sigma=1e-09 would take .*TiB"):
        sqlcal.smooth_ece(Untouchable(), score="p", label="y", sigma=1e-9)
    with pytest.raises(BudgetError, match=r"bootstrap=1000000 would take 1,000,000 replicates"
                                          r".*budget is 2,000 replicates"):
        sqlcal.smooth_ece(Untouchable(), score="p", label="y", bootstrap=10**6)


def test_case_branches_of_peer_conventions_are_budgeted(no_query):
    with pytest.raises(BudgetError, match=r"bins=100000 would take 99,999 query terms"):
        sqlcal.ece(Untouchable(), score="p", label="y", bins=100_000, convention="sklearn")


ALL_OPTIONS = [(f, name) for f in public_functions() for name in options.declared([f])[f]]
ANY_VALUE = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(-2**70, 2**70).map(lambda i: i * 10**300),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=5),
    st.lists(st.one_of(st.floats(), st.text(max_size=2)), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.just(np.int64(7)), st.just(np.float32(0.5)), st.just(np.bool_(True)))


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(ALL_OPTIONS), ANY_VALUE)
def test_any_value_is_accepted_or_refused_by_name(function_option, value):
    # never another exception (an overflow in a cost formula, a comparison of str and int)
    function, name = function_option
    try:
        options.check(function, {name: value})
    except OptionError as e:
        assert name in str(e) and f"{function}():" in str(e)
