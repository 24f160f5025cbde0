"""segment_fix judges exactly what it exports: the exported SQL, run by DuckDB on the holdout rows,
gives the judged log loss (numpy on those scores), never a score of 0 or 1; and a rejected fix
says why, in its summary and where the command-line user looks."""

from __future__ import annotations

import duckdb
import numpy as np
import pandas as pd
import pytest

import sqlcal
from sqlcal.cli.commands import main


def _fold(p: np.ndarray, holdout: float = 0.2) -> np.ndarray:
    """The fold rule recomputed in numpy: u = 2·dist(p·9999991, ℤ); 2 is the holdout."""
    x = np.abs(p * 9_999_991.0)
    c = 2.0 ** 52
    u = np.where(x < c, np.abs(x - ((x + c) - c)), 0.0) * 2
    return np.where(u < holdout, 2, np.where(u < holdout + (1 - holdout) * 0.5, 0, 1))


def _log_loss(y: np.ndarray, q: np.ndarray) -> float:
    return float(-np.mean(y * np.log(q) + (1 - y) * np.log(1 - q)))


def _bent(n=30000, seed=21) -> pd.DataFrame:
    """Segment c = 'a' far from calibrated at both ends (y = 0 below p = 0.3, y = 1 above
    0.8): its isotonic map reaches 0 and 1."""
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({"c": rng.choice(["a", "b", "c"], n), "p": rng.uniform(0.05, 0.95, n)})
    a = df.c.eq("a").to_numpy()
    truth = np.where(a, np.clip((df.p - 0.3) / 0.5, 0, 1), df.p)
    df["y"] = (rng.uniform(size=n) < truth).astype(int)
    return df


@pytest.mark.parametrize("kind", ["isotonic", "shift", "platt"])
def test_the_exported_sql_gives_the_judged_log_loss_and_never_0_or_1(kind):
    df = _bent()
    fix = sqlcal.segment_fix(df, score="p", label="y", features=["c"], min_support=500.0,
                             kind=kind)
    assert "\"c\" = 'a'" in fix.table.segment.tolist()
    hold = df[_fold(df.p.to_numpy()) == 2]
    q = duckdb.sql(f"SELECT {fix.sql('p')} AS q FROM hold").df().q.to_numpy()
    assert 0 < q.min() and q.max() < 1
    y = hold.y.to_numpy()
    s = fix.summary.iloc[0]
    assert s.holdout_log_loss_after == pytest.approx(_log_loss(y, q), rel=1e-12)
    assert s.holdout_log_loss_before == pytest.approx(_log_loss(y, hold.p.to_numpy()),
                                                      rel=1e-12)
    assert s.holdout_brier_after == pytest.approx(np.mean((y - q) ** 2), rel=1e-12)
    # the Ibis map is the same map
    np.testing.assert_allclose(fix.transform_frame(hold, "p"), q, rtol=1e-15, atol=0)
    # rows outside every fitted segment keep their scores, bit for bit
    outside = ~hold.c.isin([s.split("'")[1] for s in fix.table.segment]).to_numpy()
    np.testing.assert_array_equal(q[outside], hold.p.to_numpy()[outside])


def _overfitted(n=60000, seed=8) -> pd.DataFrame:
    """Segment a is off by 1.0 in logit on every row; segment b by 0.4 on the fitting folds
    only, calibrated on the holdout rows: a fix improves the holdout log loss by many standard
    errors, and over-corrects b there."""
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({"c": rng.choice(["a", "b", "c", "d"], n), "p": rng.beta(2, 6, n)})
    fit = _fold(df.p.to_numpy()) != 2
    shift = 1.0 * df.c.eq("a") + 0.4 * (df.c.eq("b") & fit)
    eta = np.log(df.p / (1 - df.p)) + shift
    df["y"] = (rng.uniform(size=n) < 1 / (1 + np.exp(-eta))).astype(int)
    return df


def test_a_rejected_fix_says_why_in_its_summary():
    df = _overfitted()
    fix = sqlcal.segment_fix(df, score="p", label="y", features=["c"], min_support=500.0)
    assert set(fix.table.segment) == {"\"c\" = 'a'", "\"c\" = 'b'"}
    s = fix.summary.iloc[0]
    gain = (s.holdout_log_loss_before - s.holdout_log_loss_after) / s.holdout_log_loss_se
    assert gain > 2  # the log loss alone would accept it
    assert not s.accepted
    assert "\"c\" = 'b'" in s.reason and "|z|" in s.reason
    # a fix of a calibrated segment: the log loss does not fall by two standard errors
    calm = df[df.c.isin(["c", "d"])]
    given = sqlcal.segments(calm, score="p", label="y", features=["c"], min_support=500.0,
                            mode="full", fdr="none").assign(significant=True)
    weak = sqlcal.segment_fix(calm, score="p", label="y", features=["c"], segments=given)
    w = weak.summary.iloc[0]
    assert not w.accepted and "standard errors" in w.reason
    # an accepted fix has no reason
    good = sqlcal.segment_fix(_bent(), score="p", label="y", features=["c"],
                              min_support=500.0)
    assert good.summary.accepted.all() and good.summary.reason.isna().all()


def test_cli_warns_on_stderr_and_exits_3_when_a_printed_fix_is_rejected(tmp_path, capsys):
    path = tmp_path / "d.parquet"
    _overfitted().to_parquet(path)
    out_json = tmp_path / "s.json"
    code = main(["segments", str(path), "--score", "p", "--label", "y", "--features", "c",
                 "--min-support", "500", "--fix", "--json", str(out_json)])
    out, err = capsys.readouterr()
    assert code == 3
    warning = [line for line in err.splitlines() if line.startswith("sqlcal: warning: ")]
    assert len(warning) == 1 and "rejected" in warning[0] and "|z|" in warning[0]
    assert "Traceback" not in err
    import json

    doc = json.loads(out_json.read_text())  # written before anything is printed
    assert doc["fix"]["summary"][0]["accepted"] is False
    assert doc["fix"]["summary"][0]["reason"] in warning[0]
    # an accepted fix: exit 0, no warning
    _bent().to_parquet(path)
    code = main(["segments", str(path), "--score", "p", "--label", "y", "--features", "c",
                 "--min-support", "500", "--fix"])
    out, err = capsys.readouterr()
    assert code == 0 and "warning" not in err


def test_fix_on_every_engine_equals_duckdb_and_its_sql_runs_there(con, upload):
    """The fix of a table in the engine under test (a group key named ``segment``, an
    integer and a boolean feature with NULLs, the clipping rule) equals the fix of the same
    rows as a frame on DuckDB, and its SQL in the engine's dialect gives the same scores."""
    rng = np.random.default_rng(31)
    n = 12000
    df = pd.DataFrame({"segment": rng.choice(["web", "app"], n),
                       "k": pd.array(rng.choice([1, 2, 3, None], n), dtype="Int64"),
                       "b": pd.array(rng.choice([True, False, None], n), dtype="boolean"),
                       "p": rng.uniform(0.05, 0.95, n)})
    bent = df.segment.eq("web").to_numpy() & df.k.eq(1).fillna(False).to_numpy()
    truth = np.where(bent, np.clip((df.p - 0.3) / 0.5, 0, 1), df.p)
    df["y"] = (rng.uniform(size=n) < truth).astype(int)
    kw = dict(score="p", label="y", by="segment", features=["k", "b"], max_depth=2,
              min_support=300.0)
    for kind in ("shift", "isotonic"):
        there = sqlcal.segment_fix(upload(df), kind=kind, **kw)
        here = sqlcal.segment_fix(df, kind=kind, **kw)
        assert "\"k\" = 1" in " ".join(here.table["segment_"])
        cols = ["holdout_log_loss_before", "holdout_log_loss_after", "holdout_brier_after"]
        np.testing.assert_allclose(there.summary[cols], here.summary[cols], rtol=1e-9)
        assert there.summary.accepted.tolist() == here.summary.accepted.tolist()
        t = upload(df.assign(i=np.arange(n)))
        got = t.select("i", q=there.expr(t, "p")).to_pandas().sort_values("i").q.to_numpy()
        want = duckdb.sql(f"SELECT {here.sql('p')} AS q FROM df").df().q.to_numpy()
        np.testing.assert_allclose(got, want, rtol=1e-12)
        assert 0 < got.min() and got.max() < 1
