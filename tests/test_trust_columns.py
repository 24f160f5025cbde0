"""What a reader needs to trust a number travels with it (issue 14 item 7): the weight kind, exact
or grid with the grid's bound, the confidence level, the bins and the method are columns of every
result, not ``DataFrame.attrs`` (lost on the first concat), and they survive ``pd.concat``,
``sqlcal.report``, the scheduled run's JSON document and the results table."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import ibis
import jsonschema
import numpy as np
import pandas as pd
import pytest

import sqlcal
from sqlcal.reporting import report_table, scheduled

PACKAGE = Path(sqlcal.__file__).parent


def _data(n=400, seed=3, whole=True, groups=False):
    rng = np.random.default_rng(seed)
    p = rng.beta(2, 3, n)
    y = (rng.random(n) < np.clip(1.2 * p - 0.05, 0, 1)).astype(np.int64)
    w = rng.integers(1, 4, n).astype(float) if whole else rng.exponential(size=n) + 0.01
    df = pd.DataFrame({"p": p, "y": y, "w": w})
    if groups:
        df["g"] = np.where(np.arange(n) % 2 == 0, "a", "b")
    return df


def _kind(w) -> str:
    """The weight kind read from the raw weights: whole numbers count rows, others sample."""
    w = np.asarray(w, float)
    return "frequency" if np.all(w == np.round(w)) else "sampling"


# -- every public metric: its trust columns and their values ---------------------------------

WEIGHT_KIND_METRICS = ["reliability", "hosmer_lemeshow", "cutoff_error", "kuiper", "ks",
                       "spiegelhalter", "calibration_slope"]


@pytest.mark.parametrize("whole", [True, False], ids=["whole-weights", "fractional-weights"])
@pytest.mark.parametrize("name", WEIGHT_KIND_METRICS)
def test_weight_kind_is_a_column_resolved_from_the_weights(name, whole):
    df = _data(whole=whole, groups=True)
    out = getattr(sqlcal, name)(df, score="p", label="y", weight="w", by="g")
    assert "weight_kind" in out and not out.attrs
    assert out["weight_kind"].tolist() == [_kind(df.w)] * len(out)
    # asked for, it is what was asked for
    forced = getattr(sqlcal, name)(df, score="p", label="y", weight="w", by="g",
                                   weight_kind="sampling")
    assert set(forced["weight_kind"]) == {"sampling"}
    # unweighted rows are each one row
    plain = getattr(sqlcal, name)(df, score="p", label="y")
    assert set(plain["weight_kind"]) == {"frequency"}


def _cases():
    """(function, options, {column: expected value}) for every public metric with facts."""
    return [
        ("ece", {"bins": 7}, {"binning": "uniform(7, sqlcal)"}),
        ("ece", {"bins": 7, "convention": "sklearn"}, {"binning": "uniform(7, sklearn)"}),
        ("ece", {"bins": 5, "strategy": "quantile"}, {"binning": "quantile(5)"}),
        ("reliability", {"bins": 4, "ci": "clopper-pearson", "confidence": 0.8},
         {"binning": "uniform(4, sqlcal)", "ci_method": "clopper-pearson", "confidence": 0.8}),
        ("brier_decomposition", {"bins": 6, "strategy": "quantile"}, {"binning": "quantile(6)"}),
        ("hosmer_lemeshow", {"bins": 8, "dof": "in_sample"},
         {"binning": "quantile(8)", "dof_rule": "in_sample"}),
        ("cutoff_error", {"confidence": 0.98}, {"exact": True, "confidence": 0.98}),
        ("kuiper", {}, {"exact": True}),
        ("ks", {}, {"exact": True}),
        ("tce", {"strategy": "uniform", "bins": 4, "alpha": 0.1, "test": "ttest"},
         {"binning": "uniform(4)", "alpha": 0.1, "test": "ttest"}),
        ("tce", {"n_min": 20, "n_max": 80}, {"binning": "pavabc(20, 80, code)",
                                            "alpha": 0.05, "test": "binomial"}),
        ("tce_bins", {"strategy": "quantile", "bins": 3}, {"binning": "quantile(3)"}),
        ("lipschitz_calibration_error", {"lipschitz": 2.0}, {"lipschitz": 2.0}),
        ("ls_ece", {"noise_scale": 0.2, "noise": "uniform", "clip": 1e-4},
         {"noise": "uniform", "clip": 1e-4, "grid_step": 0.2 / 200}),
        ("ls_ece", {"noise_scale": 0.1, "grid_step": 0.004}, {"noise": "gaussian", "grid_step": 0.004}),
        ("smooth_ece", {"bootstrap": 5, "confidence": 0.9}, {"bootstrap": 5, "confidence": 0.9}),
        ("calibration_decision_loss", {}, {"binning": "levels", "method": "hull"}),
        ("calibration_decision_loss", {"bins": 5}, {"binning": "uniform(5, sqlcal)"}),
        ("decision_loss", {"threshold": [0.3, 0.6], "bins": 4},
         {"binning": "uniform(4, sqlcal)"}),
        ("decompose", {"scoring": "log_loss", "method": "exact"},
         {"scoring": "log_loss", "exact": True, "method": "exact"}),
    ]


@pytest.mark.parametrize("name,options,facts", _cases(),
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(_cases())])
def test_each_metric_states_its_facts_on_every_row(name, options, facts):
    df = _data(groups=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # degenerate-level warnings of the decision metrics
        out = getattr(sqlcal, name)(df, score="p", label="y", by="g", **options)
    assert not out.attrs
    for column, value in facts.items():
        assert column in out, (name, column)
        got = out[column].tolist()
        if isinstance(value, float):
            np.testing.assert_allclose(np.asarray(got, float), value, rtol=1e-15, err_msg=column)
        else:
            assert got == [value] * len(out), (name, column)


def test_pavabc_binning_names_each_groups_own_limits():
    # the default limits are N/20 and N/5 of each group's rows: stated as the group's counts
    df = _data(n=410, groups=True)
    out = sqlcal.tce(df, score="p", label="y", by="g")
    n = df.groupby("g").size()
    want = [f"pavabc({int(k / 20)}, {int(k / 5)}, code)" for k in n]
    assert out["binning"].tolist() == want


def test_expected_cost_carries_its_rules_and_confidence():
    df = _data()
    actions = {"ignore": (1.0, 0.0), "refer": (0.3, 0.3), "treat": (0.0, 1.0)}
    rule = [(-1.0, 0.5, 1.0, 0.0), (0.5, 1.0, 0.0, 0.6)]
    val = _data(seed=9)
    out = sqlcal.expected_cost(df, score="p", label="y", rules=rule, actions=actions,
                               validation=val, confidence=0.8)
    mine = out[out["rule"] == "rule"].iloc[0]
    assert mine["intervals"] == rule and mine["actions"] is None
    best = out[out["rule"] == "best"].iloc[0]
    assert best["actions"] == ["ignore", "refer", "treat"]
    # the best rule's pieces: the cost lines a·f + b(1 − f) cross at f = 0.3 (ignore = refer)
    # and f = 0.7 (refer = treat), read exactly
    edges = [(lo, hi) for lo, hi, _, _ in best["intervals"]]
    assert edges[0][0] < 0 and edges[-1][1] == 1.0
    np.testing.assert_allclose([hi for _, hi in edges[:2]], [0.3, 0.7], rtol=0, atol=1e-15)
    assert [(a, b) for _, _, a, b in best["intervals"]] == list(actions.values())
    np.testing.assert_allclose(out["confidence"], 1 - 2 * 0.1, rtol=1e-15)
    # with epsilon the bounds carry the confidence of that epsilon, not one of their own
    given = sqlcal.expected_cost(df, score="p", rules=rule, epsilon=0.05)
    assert given["confidence"].isna().all()


# -- grid mode: exact is False and grid_bound bounds the distance to the exact value ----------


@pytest.mark.parametrize("name", ["cutoff_error", "kuiper", "ks"])
def test_grid_mode_says_so_and_bounds_its_error(upload, name):
    df = _data(n=3000, seed=5, groups=True)
    data = upload(df)
    exact = getattr(sqlcal, name)(data, score="p", label="y", weight="w", by="g")
    bounded = 0
    for cells in (4, 16, 64):
        grid = getattr(sqlcal, name)(data, score="p", label="y", weight="w", by="g",
                                     method="grid", cells=cells)
        assert grid["exact"].tolist() == [False, False] and exact["exact"].tolist() == [True] * 2
        assert (exact["grid_bound"] == 0).all()
        gap = (exact[name] - grid[name]).to_numpy(float)
        # the grid value is a lower bound, at most grid_bound below the exact value
        assert np.all(gap >= -1e-12) and np.all(gap <= grid["grid_bound"].to_numpy() + 1e-12)
        bounded += int((grid["grid_bound"] > 0).sum())
    assert bounded  # the coarse grids did leave something to bound


def test_decompose_exact_flag_is_honest():
    # on the score grid the isotonic fit is exact only when no cell mixes blocks: whenever the
    # column says exact, the decomposition equals the one on the levels
    for seed in range(4):
        df = _data(n=600, seed=seed, groups=True)
        levels = sqlcal.decompose(df, score="p", label="y", by="g", method="exact")
        grid = sqlcal.decompose(df, score="p", label="y", by="g", method="grid")
        assert set(grid["method"]) == {"grid"} and set(levels["exact"]) == {True}
        same = np.isclose(grid["miscalibration"], levels["miscalibration"], rtol=0, atol=1e-12)
        assert np.all(same[grid["exact"].to_numpy(bool)])


# -- they survive concatenation ---------------------------------------------------------------


def test_trust_survives_concat():
    whole, frac = _data(whole=True), _data(whole=False, seed=4)
    a = sqlcal.cutoff_error(whole, score="p", label="y", weight="w")
    b = sqlcal.cutoff_error(frac, score="p", label="y", weight="w", method="grid", cells=8,
                            confidence=0.95)
    both = pd.concat([a, b], ignore_index=True)
    assert both["weight_kind"].tolist() == [_kind(whole.w), _kind(frac.w)]
    assert both["exact"].tolist() == [True, False]
    np.testing.assert_allclose(both["confidence"], [0.9, 0.95], rtol=1e-15)
    assert both["grid_bound"].iloc[1] == b["grid_bound"].iloc[0]


# -- report, JSON document, results table ----------------------------------------------------


def test_report_keeps_the_trust_columns():
    df = _data(whole=False, groups=True)
    out = sqlcal.report(df, score="p", label="y", weight="w", by="g")
    for column in ("weight_kind", "exact", "cutoff_grid_bound", "cutoff_confidence",
                   "kuiper_grid_bound"):
        assert column in out, column
    assert out["weight_kind"].tolist() == [_kind(df.w)] * 2
    assert out["exact"].tolist() == [True, True]
    np.testing.assert_allclose(out["cutoff_confidence"], 0.9, rtol=1e-15)
    assert (out[["cutoff_grid_bound", "kuiper_grid_bound"]] == 0).all().all()
    # the metric columns come first, then the facts; no per-metric copy while they agree
    assert list(out.columns).index("kuiper_p") < list(out.columns).index("weight_kind")
    assert not [c for c in out if c.endswith("_weight_kind") or c.endswith("_exact")]


def _run(df):
    config = scheduled.validate_config({
        "source": {"data": df, "score": "p", "label": "y", "weight": "w", "by": "g"},
        "metrics": {"spiegelhalter": {}, "kuiper": {"weight_kind": "sampling"},
                    "cutoff_error": {"method": "grid", "cells": 8}, "ece": {"bins": 5}}})
    return scheduled.run_report(config, run_id="trust-1", diagrams=False)


def test_disagreeing_metrics_get_their_own_column_and_the_json_keeps_everything():
    df = _data(whole=True, groups=True)
    run = _run(df)
    table = run.table
    # spiegelhalter sets the shared columns; kuiper, forced to sampling, and the grid cutoff
    # error disagree, so each gets its own
    assert table["weight_kind"].tolist() == [_kind(df.w)] * 2 == ["frequency"] * 2
    assert table["kuiper_weight_kind"].tolist() == ["sampling"] * 2
    assert table["exact"].tolist() == [True] * 2
    assert table["cutoff_error_exact"].tolist() == [False] * 2
    direct = sqlcal.cutoff_error(df, score="p", label="y", weight="w", by="g", method="grid",
                                 cells=8)
    order = [list(direct["g"]).index(g) for g in table["g"]]
    # the run fuses its summaries into one scan: the same sums in another order
    np.testing.assert_allclose(table["cutoff_grid_bound"], direct["grid_bound"].to_numpy()[order],
                               rtol=1e-12)

    doc = scheduled.to_document(run)
    jsonschema.validate(doc, scheduled.json_schema())
    for row in doc["rows"]:
        assert row["weight_kind"] == "frequency" and row["cutoff_error_exact"] is False
    records = {(r["metric"], r["statistic"], r["group"]["g"]): r for r in doc["metrics"]}
    for g, bound in zip(direct["g"], direct["grid_bound"]):
        trust = records[("cutoff_error", "cutoff_error", g)]["trust"]
        assert trust == {"exact": False, "grid_bound": pytest.approx(float(bound), rel=1e-12),
                         "confidence": 0.9, "ci_method": "bootstrap", "weight_kind": "frequency"}
        assert records[("kuiper", "kuiper", g)]["trust"]["weight_kind"] == "sampling"
        ece = records[("ece", "ece", g)]["trust"]
        # the binning, and since issue 34 how its interval was made
        assert ece == {"binning": "uniform(5, sqlcal)", "ci_method": "bootstrap",
                       "confidence": 0.95, "weight_kind": ece["weight_kind"]}


def test_results_table_stores_the_trust_column():
    df = _data(whole=False, groups=True)
    run = _run(df)
    rows = scheduled.results_rows(run)
    assert list(rows.columns) == list(scheduled.RESULTS_SCHEMA)
    stored = {}
    con = ibis.duckdb.connect()
    assert scheduled.write_results(con, "results", rows) == len(rows)
    back = con.table("results").to_pandas()
    for _, r in back.iterrows():
        stored[(r["metric"], r["statistic"], json.loads(r["group_keys"])["g"])] = \
            json.loads(r["trust"])
    for g in ("a", "b"):
        assert stored[("spiegelhalter", "z", g)] == {"weight_kind": _kind(df.w)}
        assert stored[("cutoff_error", "cutoff_error", g)]["exact"] is False
        assert stored[("ece", "ece", g)]["binning"] == "uniform(5, sqlcal)"
        assert stored[("ece", "ece", g)]["ci_method"] == "bootstrap"


def test_a_results_table_from_before_the_trust_column_still_takes_the_rows():
    run = _run(_data(groups=True))
    rows = scheduled.results_rows(run)
    con = ibis.duckdb.connect()
    earlier = {k: v for k, v in scheduled.RESULTS_SCHEMA.items() if k != "trust"}
    con.create_table("old_results", schema=ibis.schema(earlier))
    with pytest.warns(UserWarning, match="ALTER TABLE old_results ADD COLUMN trust"):
        assert scheduled.write_results(con, "old_results", rows) == len(rows)
    back = con.table("old_results").to_pandas()
    assert list(back.columns) == list(earlier) and len(back) == len(rows)


def test_trust_object_holds_every_fact_of_the_table():
    # every metric's declared facts exist in its result (a misspelt TRUST entry would vanish)
    df = _data(groups=True)
    for name, (function, preset, _) in report_table.METRICS.items():
        if name == "smooth_ece":  # its interval's facts come with its interval
            preset = {**preset, "bootstrap": 3}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            values = function(df, score="p", label="y", by="g", **preset)
        for column in report_table.TRUST.get(name, {}):
            assert column in values, (name, column)
        parsed = [json.loads(t) for t in report_table.trust(name, values)]
        assert [sorted(p) for p in parsed] == [sorted(report_table.TRUST.get(name, {}))] * 2


# -- nothing is left in attrs ------------------------------------------------------------------


def test_no_function_in_the_package_writes_attrs():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for i, line in enumerate(path.read_text("utf-8").splitlines(), 1):
            code = line.split("#", 1)[0]
            if re.search(r"\.attrs\b", code):
                offenders.append(f"{path.relative_to(PACKAGE.parent)}:{i}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


def test_calibration_slope_reads_the_weights_and_labels_before_resolving():
    # calibration_slope resolved "auto" before its first scan, when every source still looked
    # whole-weighted and hard-labelled: fractional weights got model-based standard errors and
    # soft labels went unseen
    df = _data(whole=False)
    out = sqlcal.calibration_slope(df, score="p", label="y", weight="w")
    forced = sqlcal.calibration_slope(df, score="p", label="y", weight="w",
                                      weight_kind="sampling")
    assert out["weight_kind"].iloc[0] == _kind(df.w) == "sampling"
    assert out["slope_se"].iloc[0] == forced["slope_se"].iloc[0]
    soft = df.assign(y=np.where(np.arange(len(df)) % 7 == 0, 0.5, df.y))
    with pytest.raises(sqlcal.InvalidInputError, match="label column 'y' has 58 rows"):
        sqlcal.calibration_slope(soft, score="p", label="y", soft_labels=True)


def test_an_interval_from_options_carries_its_level_in_the_tidy_rows():
    df = _data(groups=True).assign(day=lambda d: np.arange(len(d)) % 2)
    series = sqlcal.metric_series(df, score="p", label="y", time="day",
                                  metrics={"smooth_ece": {"bootstrap": 20, "confidence": 0.8},
                                           "brier": {}})
    smooth = series[series["metric"] == "smooth_ece"]
    assert len(smooth) == 2 and smooth["lower"].notna().all()
    assert [json.loads(t) for t in smooth["trust"]] == [{"bootstrap": 20, "confidence": 0.8}] * 2
    brier = series[series["metric"] == "brier"]
    assert [json.loads(t) for t in brier["trust"]] == [
        {"ci_method": "delta", "confidence": 0.95, "weight_kind": "frequency"}] * 2
    assert brier["lower"].notna().all()  # the delta method's interval, in the tidy rows
