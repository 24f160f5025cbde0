"""Follow-ups declared by score ranges: the engine's frame equals the one evaluated in pandas from
the levels; a report's equal-mass metrics share one levels pass; the exact cutoff error zooms into
its candidate cells before its window and still equals brute force."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import sqlcal
from sqlcal.metrics import cells, cumulative
from sqlcal.query import declared, executor, local, planner, reductions
from tests.conftest import calibration_data


def _data(n=600, seed=0, weighted=True):
    df = calibration_data(n, seed=seed, groups=3, ties=True, weights=weighted)
    df.loc[df.index[:9], "g"] = None  # a NULL group key is a group too
    df.loc[df.index[9:12], "p"] = [0.0, 1.0, 1.0]  # the ends of the range
    if weighted:
        df["w"] = np.round(df["w"] * 4) / 4  # exact binary fractions
    return df


def _levels(df: pd.DataFrame, weighted: bool) -> pd.DataFrame:
    """The levels from the raw rows: a plain groupby (zero-weight rows left out, as the source
    leaves them out)."""
    if weighted:
        df = df[df["w"] != 0]
    w = df["w"] if weighted else pd.Series(1.0, index=df.index)
    t = df.assign(W=w, swy=w * df["y"], swp=w * df["p"], sw2=w * w, ny=df["y"])
    return (t.groupby(["g", "p"], dropna=False)
            .agg(n=("p", "size"), W=("W", "sum"), swy=("swy", "sum"), swp=("swp", "sum"),
                 sw2=("sw2", "sum"), ny=("ny", "sum")).reset_index())


def _ranges(df: pd.DataFrame, grid: int, seed: int) -> list:
    rng = np.random.default_rng(seed)
    out = []
    for g in [None, *sorted(df["g"].dropna().unique())]:
        for c in rng.choice(grid, size=grid // 4, replace=False):
            out.append(((g,), c / grid, (c + 1) / grid))
        out.append(((g,), (grid - 1) / grid, 1.0))  # the last cell holds p = 1
    return out


def _same(engine: pd.DataFrame, pandas: pd.DataFrame, keys: list[str]):
    engine = reductions.fill_unweighted(engine)
    engine = engine.sort_values(keys, ignore_index=True, key=_null_first)
    pandas = pandas.sort_values(keys, ignore_index=True, key=_null_first)
    assert len(engine) == len(pandas) > 0
    for c in pandas.columns:
        a, b = engine[c].to_numpy(), pandas[c].to_numpy()
        if c == "g":
            assert [None if pd.isna(x) else x for x in a] == [None if pd.isna(x) else x for x in b]
        else:
            np.testing.assert_allclose(a.astype(float), b.astype(float), rtol=1e-9, atol=1e-12,
                                       err_msg=c)


def _null_first(column: pd.Series) -> pd.Series:
    return column.fillna("") if column.dtype == object else column


@pytest.mark.parametrize("weighted", [True, False])
@pytest.mark.parametrize("kind", ["cells_within", "levels_within", "extremes_within"])
def test_ranged_follow_up_engine_equals_local(upload, kind, weighted):
    df = _data(weighted=weighted)
    src = sqlcal.source(upload(df), score="p", label="y", weight="w" if weighted else None,
                        by="g")
    planner.fetch(src, declared.totals())  # the first scan validates the source
    ranges = _ranges(df, 16, seed=1)
    summary = {"cells_within": declared.cells_within(64, ranges, "sums", "residuals", "sw2"),
               "levels_within": declared.levels_within(ranges, "sw2"),
               "extremes_within": declared.extremes_within(16, ranges)}[kind]
    engine = src.present(planner.fetch(src, summary))  # the key under its name
    pandas = local.evaluate(summary, _levels(df, weighted), ["g"])
    keys = ["g", summary.key_column]
    _same(engine, pandas.drop(columns=[c for c in pandas if c not in engine]), keys)


def test_score_ranges_merge_adjacent_cells_and_select_exactly():
    ranges = declared.score_ranges([(("a",), 0.5, 0.75), (("a",), 0.25, 0.5), ((None,), 0.75, 1.0)])
    assert ranges == ((("a",), 0.25, 0.75), ((None,), 0.75, 1.0))
    levels = pd.DataFrame({"g": ["a", "a", "a", "a", None, None],
                           "p": [0.25, 0.5, 0.75 - 2**-53, 0.75, 0.75, 1.0]})
    assert local.in_ranges(levels, ["g"], ranges).tolist() == [True, True, True, False, True,
                                                               True]


def _queries(monkeypatch):
    """Count the queries the executor runs on the rows."""
    ran = []
    run = executor.run

    def counted(src, build, **kw):
        ran.append(build)
        return run(src, build, **kw)

    monkeypatch.setattr(executor, "run", counted)
    return ran


def test_report_reads_the_equal_mass_levels_once(upload, monkeypatch):
    df = _data(n=3000, seed=2)
    table = upload(df)
    ran = _queries(monkeypatch)
    out = sqlcal.report(table, score="p", label="y", weight="w", by="g",
                        metrics=["ece_quantile", "hosmer_lemeshow"])
    assert len(ran) == 2  # the first scan (cells), then one levels pass for both metrics
    alone_q = sqlcal.ece(table, score="p", label="y", weight="w", by="g", strategy="quantile")
    alone_hl = sqlcal.hosmer_lemeshow(table, score="p", label="y", weight="w", by="g")
    np.testing.assert_allclose(out["ece_quantile"], alone_q["ece"], rtol=1e-12)
    np.testing.assert_allclose(out["hl_statistic"], alone_hl["hl_statistic"], rtol=1e-12)
    # each alone reads the cells and then its own levels
    assert len(ran) == 2 + 2 + 2


def test_shared_zoom_and_levels_equal_each_metric_alone(upload, monkeypatch):
    """With small thresholds every follow-up stage runs (zooms, levels, the window), shared."""
    # 300 rows, not 10: the same stages in 31 queries, not 61 (each a job on Spark)
    monkeypatch.setattr(cells, "LEVEL_ROWS", 300)
    monkeypatch.setattr(cumulative, "WINDOW_ROWS", 0)
    df = _data(n=2000, seed=3)
    df["p"] = np.clip(np.round(df["p"] + np.random.default_rng(3).random(len(df)) * 1e-6, 9), 0, 1)
    table = upload(df)
    metrics = ["ece_quantile", "hosmer_lemeshow", "cutoff_error", "kuiper"]
    kinds, fetch = [], planner.fetch
    monkeypatch.setattr(planner, "fetch", lambda src, s: kinds.append(s.kind) or fetch(src, s))
    out = sqlcal.report(table, score="p", label="y", weight="w", by="g", metrics=metrics)
    assert {"cells_within", "levels_within", "extremes_within"} <= set(kinds), kinds
    for name, column, call in [
            ("ece_quantile", "ece", lambda: sqlcal.ece(table, score="p", label="y", weight="w",
                                                        by="g", strategy="quantile")),
            ("hl_statistic", "hl_statistic", lambda: sqlcal.hosmer_lemeshow(
                table, score="p", label="y", weight="w", by="g")),
            ("cutoff_error", "cutoff_error", lambda: sqlcal.cutoff_error(
                table, score="p", label="y", weight="w", by="g")),
            ("kuiper", "kuiper", lambda: sqlcal.kuiper(table, score="p", label="y", weight="w",
                                                       by="g"))]:
        np.testing.assert_allclose(out[name], call()[column], rtol=1e-10, err_msg=name)


@pytest.mark.parametrize("weighted", [True, False])
def test_zoomed_cutoff_error_equals_brute_force(upload, monkeypatch, weighted):
    monkeypatch.setattr(cumulative, "WINDOW_ROWS", 0)
    df = _data(n=400, seed=4, weighted=weighted)
    src = sqlcal.source(upload(df), score="p", label="y", weight="w" if weighted else None,
                        by="g")
    kinds, fetch = [], planner.fetch
    monkeypatch.setattr(planner, "fetch", lambda src, s: kinds.append(s.kind) or fetch(src, s))
    out = sqlcal.cutoff_error(src, cells=4)
    assert kinds.index("cells_within") < kinds.index("extremes_within")  # zoomed, then window
    w = df["w"] if weighted else pd.Series(1.0, index=df.index)
    for _, row in out.iterrows():
        mask = df["g"].isna() if pd.isna(row["g"]) else df["g"] == row["g"]
        part = df[mask].assign(r=(w * (df["y"] - df["p"]))[mask])
        r = part.groupby("p")["r"].sum().to_numpy()
        best = max(abs(r[i:j + 1].sum()) for i in range(len(r)) for j in range(i, len(r)))
        assert row["cutoff_error"] == pytest.approx(best / w[mask].sum(), rel=1e-9, abs=1e-12)

