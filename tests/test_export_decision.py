"""The decision metrics exported: summary_sql's statements run on each engine and from_summaries
gives the direct call's table (1e-9 relative), from their own summaries and from the levels alone;
the score-interval summary evaluated from the levels equals the engine's; expected_cost with a
validation table (a second table) is refused with the reason."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import sqlcal
from sqlcal.query import declared, local, planner
from tests.conftest import calibration_data
from tests.test_export import DIALECT, _run

RULE = [(-1, 0.3, 1.0, 0.0), (0.3, 0.62, 0.2, 0.4), (0.62, 1, 0.0, 0.7)]
ACTIONS = {"treat": (0.0, 0.6), "test": (0.1, 0.3), "wait": (1.0, 0.0)}
CASES = [
    ("calibration_decision_loss", {}),
    ("calibration_decision_loss", {"bins": 10, "method": "lp"}),
    ("decision_loss", {"threshold": [0.3, 0.5]}),
    ("decision_loss", {"payoffs": [[1.0, 0.0], [0.2, 0.9]], "tie": "lower", "bins": 8}),
    ("decision_risk_gap", {"threshold": [0.25, 0.4]}),
    ("expected_cost", {"rules": RULE, "epsilon": 0.1}),
    ("expected_cost", {"rules": {"three": RULE}, "actions": ACTIONS, "tie": "lower"}),
]


def assert_same_table(got: pd.DataFrame, want: pd.DataFrame, what: str) -> None:
    assert list(got.columns) == list(want.columns), what
    assert len(got) == len(want), what
    for c in want.columns:
        if want[c].dtype.kind in "fiub":
            np.testing.assert_allclose(got[c].to_numpy(float), want[c].to_numpy(float),
                                       rtol=1e-9, atol=1e-12, err_msg=f"{what}: {c}")
        else:
            assert got[c].tolist() == want[c].tolist(), f"{what}: {c}"


def data(weighted: bool) -> pd.DataFrame:
    df = calibration_data(1500, seed=31, groups=3, ties=True, weights=weighted)
    # scores on the rules' ends: each stays on the closed side of its interval
    df.loc[:5, "p"], df.loc[6:11, "p"] = 0.3, 0.62
    return df


@pytest.mark.parametrize("weighted", [True, False])
def test_summary_sql_run_on_the_engine_finishes_like_the_direct_call(con, upload, weighted):
    t = upload(data(weighted))
    kw = dict(score="p", label="y", by="g", weight="w" if weighted else None)
    cases = CASES if con.name == "duckdb" or weighted else CASES[::3]
    for metric, options in cases:
        sql = sqlcal.summary_sql(metric, dialect=DIALECT[con.name], table=t.get_name(), **kw,
                                 **options)
        frames = {name: _run(con, text) for name, text in sql.items()}
        got = sqlcal.from_summaries(metric, frames, **kw, **options)
        want = getattr(sqlcal, metric)(t, **kw, **options)
        assert_same_table(got, want, f"{metric} {options}")


def test_every_decision_metric_finishes_from_the_exported_levels(con, upload):
    # one levels statement serves every decision metric: the bins and the score intervals are
    # evaluated from it in pandas
    df = data(True)
    t = upload(df)
    kw = dict(score="p", label="y", by="g", weight="w")
    sql = sqlcal.summary_sql("decision_risk_gap", dialect=DIALECT[con.name],
                             table=t.get_name(), **kw)
    assert list(sql) == ["levels"]
    # the levels with every column local evaluation reads (Σw², the positive rows)
    levels_sql = sqlcal.summary_sql("cutoff_error", dialect=DIALECT[con.name],
                                    table=t.get_name(), **kw)["levels"]
    levels = _run(con, levels_sql)
    for metric, options in CASES:
        got = sqlcal.from_summaries(metric, {"levels": levels}, **kw, **options)
        want = getattr(sqlcal, metric)(df, **kw, **options)
        assert_same_table(got, want, f"{metric} {options} from the levels")


@pytest.mark.parametrize("weighted", [True, False])
def test_score_intervals_from_the_levels_equal_the_engine(con, upload, weighted):
    df = data(weighted)
    src = sqlcal.source(upload(df), score="p", label="y", by="g",
                        weight="w" if weighted else None)
    # cuts on tied scores (0.3, 0.62, 0.5), below every score and at 1
    summary = declared.intervals([0.62, 0.3, 0.5, -0.5, 1.0], "sums", "sw2")
    engine = planner.fetch(src, summary)
    levels = planner.fetch(src, declared.levels("sw2", "ny"))
    if not weighted:  # the engine leaves out what equals n
        levels = levels.assign(ny=levels["swy"])
    mine = local.evaluate(summary, levels, src.by)
    keys = [*src.by, "interval"]  # summaries hold the key under its internal name
    engine = engine.sort_values(keys, ignore_index=True)
    mine = mine.sort_values(keys, ignore_index=True)
    assert engine[keys].values.tolist() == mine[keys].values.tolist()
    assert set(engine["interval"]) == {1, 2, 3, 4}  # nothing at or below -0.5, nothing above 1
    for c in ("n", "W", "swy", "swp", "sw2", "p_min", "p_max"):
        np.testing.assert_allclose(mine[c].to_numpy(float), engine[c].to_numpy(float),
                                   rtol=1e-9, err_msg=c)
    # and against the rows: piece k holds (cuts[k-1], cuts[k]]
    cuts = np.array(summary.params[0])
    piece = np.searchsorted(cuts, df["p"].to_numpy(), side="left")
    counts = pd.Series(piece).groupby([df["g"].to_numpy(), piece]).size()
    assert engine.set_index(keys)["n"].to_dict() == counts.to_dict()


def test_expected_cost_with_a_validation_table_is_refused_with_the_reason():
    val = calibration_data(100, seed=2)
    with pytest.raises(ValueError, match="reads a second table .*pass epsilon="):
        sqlcal.summary_sql("expected_cost", table="preds", score="p", label="y", rules=RULE,
                           validation=val)
    with pytest.raises(ValueError, match="reads a second table"):
        sqlcal.from_summaries("expected_cost", {}, score="p", label="y", rules=RULE,
                              validation=val)
    with pytest.raises(TypeError, match="pass rules="):
        sqlcal.summary_sql("expected_cost", table="preds", score="p", label="y")


def test_the_decision_statements_name_their_summaries():
    kw = dict(table="preds", score="p", label="y")
    assert list(sqlcal.summary_sql("calibration_decision_loss", **kw)) == ["levels"]
    assert list(sqlcal.summary_sql("decision_loss", bins=12, threshold=0.2, **kw)) == [
        "uniform_bins_12"]
    sql = sqlcal.summary_sql("expected_cost", rules=RULE, **kw)["intervals"]
    # the rule's ends, as literals every engine reads back bit for bit
    assert "'0.3'" in sql and "'0.62'" in sql and "GROUP BY" in sql
