"""A metric is declared in one place: a metric registered with ``@metric`` (here a toy one, for
the length of a test) is in the report, its config schema and option check, the catalogue, the
exported SQL and sql/'s list, and nowhere once it is unregistered (CONTRIBUTING.md's example)."""

from __future__ import annotations

from typing import Any, Sequence

import duckdb
import numpy as np
import pandas as pd
import pytest

import sqlcal
from sqlcal.export import sqlgen
from sqlcal.export.metric_sql import exportable
from sqlcal.metrics import result, safe_div
from sqlcal.metrics._registry import Report, metric, registered, report_metrics, unregister
from sqlcal.options import OptionError, checked
from sqlcal.query import declared, planner
from sqlcal.query.executor import as_source
from sqlcal.reporting import report_table, scheduled


@pytest.fixture
def mean_residual():
    """CONTRIBUTING.md's toy metric, registered for one test: the weighted mean residual."""

    @metric(needs=lambda src, o: [declared.totals()],
            report={"mean_residual": Report({"mean_residual": "mean_residual"})})
    @checked
    def mean_residual(data: Any, *, score: str | None = None, label: str | None = None,
                      weight: str | None = None, by: str | Sequence[str] = (),
                      where: Any = None, **source_options: Any) -> pd.DataFrame:
        """The weighted mean residual Σw(y - p) / W per group."""
        src = as_source(data, score, label, weight=weight, by=by, where=where,
                        **source_options)
        totals = planner.fetch(src, declared.totals())
        return result(src, mean_residual_finish(totals), ["mean_residual"])

    def mean_residual_finish(totals: pd.DataFrame) -> pd.DataFrame:
        return totals.assign(mean_residual=safe_div(totals["swy"] - totals["swp"],
                                                    totals["W"]))

    try:
        yield mean_residual
    finally:
        unregister("mean_residual")


@pytest.fixture
def frame():
    rng = np.random.default_rng(8)
    p = rng.beta(2, 3, 600)
    return pd.DataFrame({"p": p, "y": (rng.random(600) < 0.8 * p + 0.1).astype(int),
                         "w": rng.integers(1, 4, 600).astype(float),
                         "g": rng.choice(["a", "b", "c"], 600)})


def _oracle(frame: pd.DataFrame) -> pd.Series:
    # numpy on the raw rows
    return pd.Series({g: float(np.sum(part.w * (part.y - part.p)) / np.sum(part.w))
                      for g, part in frame.groupby("g")})


def test_a_registered_metric_is_in_the_report_the_catalogue_and_the_sql(mean_residual, frame):
    kw = dict(score="p", label="y", weight="w", by="g")
    out = sqlcal.report(frame, **kw, metrics=["ece", "mean_residual"]).set_index("g")
    np.testing.assert_allclose(out["mean_residual"], _oracle(frame)[out.index], rtol=1e-12,
                               atol=1e-14)  # Σwy − Σwp cancels: absolute error
    assert "mean_residual" in report_table.METRICS and "mean_residual" in report_metrics()
    assert report_table.TRUST["mean_residual"] == {}
    # the catalogue: the metric itself, what summary_sql exports, what sql/ holds
    assert registered()["mean_residual"].function is mean_residual
    assert "mean_residual" in exportable() and "mean_residual" in sqlgen.metrics()
    assert "mean_residual" in scheduled.config_schema()["$defs"]["metric"]["enum"]
    # its exported statement, run by a DuckDB client, finishes like the direct call
    sql = sqlcal.summary_sql("mean_residual", table="preds", **kw)
    assert list(sql) == ["totals"]
    con = duckdb.connect()
    con.register("preds", frame)
    frames = {name: con.sql(text).df() for name, text in sql.items()}
    again = sqlcal.from_summaries("mean_residual", frames, **kw).set_index("g")
    np.testing.assert_allclose(again["mean_residual"], out["mean_residual"][again.index],
                               rtol=1e-12, atol=1e-14)
    # its options are checked like any metric's
    with pytest.raises(TypeError, match=r"mean_residual\(\) got an unexpected keyword "
                                        r"argument 'bins'"):
        mean_residual(frame, **kw, bins=3)


def test_an_unregistered_metric_is_gone_everywhere(frame):
    with pytest.raises(OptionError, match="unknown metric 'mean_residual'"):
        sqlcal.report(frame, score="p", label="y", metrics=["mean_residual"])
    assert "mean_residual" not in report_table.METRICS and "mean_residual" not in exportable()
    assert "mean_residual" not in scheduled.config_schema()["$defs"]["metric"]["enum"]
    with pytest.raises(ValueError, match="summary_sql exports"):
        sqlcal.summary_sql("mean_residual", table="t", score="p", label="y")


def test_a_name_is_registered_once(mean_residual):
    with pytest.raises(ValueError, match="'mean_residual' is registered already"):
        metric(needs=lambda src, o: [])(mean_residual)
    with pytest.raises(ValueError, match=r"report names \['rmsce'\] belong to another metric"):
        @metric(needs=lambda src, o: [], report={"rmsce": Report({"x": "rmsce"})})
        def other(data):
            """A metric whose report name is taken."""
    assert "other" not in registered()


def test_every_public_metric_is_registered_once_with_its_report_names():
    # the public functions the report, the SQL export and the catalogue list (and only they)
    names = set(registered())
    assert names <= set(sqlcal.__all__)
    assert {"ece", "brier", "cutoff_error", "tce", "calibration_slope", "decompose",
            "expected_cost"} <= names
    assert list(report_table.METRICS)[:4] == ["ece", "rmsce", "mce", "ece_quantile"]
    assert set(report_table.DEFAULT_METRICS) <= set(report_table.METRICS)
    assert report_table.METRICS["rmsce"][:2] == (sqlcal.ece, {"norm": "l2"})


#: options a metric cannot run without
_REQUIRED = {"decision_loss": {"threshold": [0.3, 0.6]},
             "expected_cost": {"actions": {"act": (0.0, 1.0), "wait": (1.0, 0.0)}}}
#: columns that key a row within a group (a table per group and threshold, or rule)
_ROW_KEYS = {"decision_loss": ["threshold"], "decision_risk_gap": ["threshold"],
             "expected_cost": ["rule"]}
#: tables of a curve, not of a value: per bin (their bounds key the row) or per point
_CURVES = {"reliability", "tce_bins", "smooth_reliability"}
#: public per-group metrics outside the registry (a binned metric the report does not list)
_UNREGISTERED = ["debiased_ece"]


@pytest.mark.parametrize("name", sorted(set(registered()) - _CURVES) + _UNREGISTERED)
def test_every_result_starts_with_the_keys_the_value_n_and_W(name):
    import warnings

    rng = np.random.default_rng(5)
    p = np.round(rng.beta(2, 3, 300), 2)
    df = pd.DataFrame({"p": p, "y": (rng.random(300) < p).astype(int),
                       "seg": rng.choice(["a", "b"], 300)})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        function = getattr(sqlcal, name)
        out = function(df, score="p", label="y", by="seg", **_REQUIRED.get(name, {}))
    keys = ["seg", *_ROW_KEYS.get(name, [])]
    columns = list(out.columns)
    assert columns[:len(keys)] == keys, columns
    assert columns[len(keys)] not in ("n", "W"), columns
    assert columns[len(keys) + 1:len(keys) + 3] == ["n", "W"], columns
    assert out["seg"].tolist()[0] == "a" and set(out["seg"]) == {"a", "b"}
