"""The query layer: declared summaries merge exactly, the planner's fused scan equals the separate
summaries, and each metric's declared needs are what it reads (so a report scans once for all)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import sqlcal
from sqlcal.metrics import binned, cumulative, scores
from sqlcal.metrics._registry import registered
from sqlcal.query import declared, executor, local, planner, reductions
from sqlcal.query.declared import Summary, merge
from sqlcal.reporting.report_table import (
    DEFAULT_METRICS,
    METRICS,
    _defaults,
    follow_ups,
    metric_options,
    needs,
)
from tests.conftest import calibration_data

FIRST_STAGE = [
    declared.totals("logloss", "spiegelhalter", "moments", "sw2"),
    declared.uniform(15, "sqlcal", "sums", "moments", "sw2"),
    declared.uniform(10, "sklearn", "sums"),
    declared.cells(1024, "sums", "residuals", "sw2"),
    declared.cells(64, "sums"),
]


def _data(n=400, seed=0, weighted=True):
    df = calibration_data(n, seed=seed, groups=3, ties=True, weights=weighted)
    df.loc[df.index[:7], "g"] = None  # a NULL group key is a group too
    df.loc[df.index[7:9], "p"] = [0.0, 1.0]  # the ends of the range
    if weighted:
        df["w"] = np.round(df["w"] * 4) / 4  # exact binary fractions: sums do not depend on order
    return df


def _summary(src, s: Summary) -> pd.DataFrame:
    frame = reductions.execute(reductions.reduce(s, src.rows, src.by, weighted=src.weighted))
    keys = [*src.by, *([s.key_column] if s.key_column else [])]
    return reductions.fill_unweighted(frame).sort_values(keys, ignore_index=True)


def _same(got: pd.DataFrame, want: pd.DataFrame):
    assert list(got.columns) == list(want.columns)
    for c in got.columns:
        a, b = got[c].to_numpy(), want[c].to_numpy()
        if a.dtype.kind in "fiu" and b.dtype.kind in "fiu":
            np.testing.assert_allclose(a.astype(float), b.astype(float), rtol=1e-12, atol=1e-12,
                                       err_msg=c)
        else:
            assert [None if pd.isna(x) else x for x in a] == \
                [None if pd.isna(x) else x for x in b], c


@pytest.mark.parametrize("weighted", [True, False])
def test_merge_of_disjoint_parts_equals_the_whole(upload, weighted):
    df = _data(weighted=weighted)
    kw = dict(score="p", label="y", by="g", weight="w" if weighted else None)
    whole = sqlcal.source(upload(df), **kw)
    halves = [sqlcal.source(upload(part), **kw) for part in (df.iloc[::2], df.iloc[1::2])]
    for s in [*FIRST_STAGE, Summary("levels", (), frozenset({"sums"}))]:
        # summaries hold the key under its internal name
        keys = [*whole.by, *([s.key_column] if s.key_column else [])]
        merged = merge([_summary(h, s) for h in halves], keys)
        _same(merged, _summary(whole, s)[list(merged.columns)])


def test_merge_refuses_a_column_without_a_rule():
    frame = pd.DataFrame({"cell": [1], "s_max": [0.3]})
    with pytest.raises(ValueError, match=r"\['s_max'\] have no merge rule"):
        merge([frame, frame], ["cell"])


@pytest.mark.parametrize("weighted", [True, False])
def test_fused_scan_equals_each_summary(upload, weighted):
    df = _data(seed=1, weighted=weighted)
    kw = dict(score="p", label="y", by="g", weight="w" if weighted else None)
    src = sqlcal.source(upload(df), **kw)
    scans = planner.prefetch(src, FIRST_STAGE)
    assert len(scans) == 1 and len(scans[0][1]) == len(FIRST_STAGE)
    for s in FIRST_STAGE:
        keys = [*src.by, *([s.key_column] if s.key_column else [])]
        got = executor.lookup(src, s.key, s.parts).sort_values(keys, ignore_index=True)
        want = _summary(sqlcal.source(upload(df), **kw), s)
        _same(got[list(want.columns)], want)
        assert set(got.columns) == set(want.columns)


@pytest.mark.parametrize("weighted", [True, False])
def test_shared_follow_ups_equal_each_summary_alone(upload, weighted, monkeypatch):
    # one stage of follow-ups: histograms of cells at two grids (read once, at the finer), and
    # the levels of some ranges with the running-sum extremes of others (read as one levels
    # scan, the extremes evaluated from the levels in pandas)
    df = _data(seed=4, weighted=weighted)
    kw = dict(score="p", label="y", by="g", weight="w" if weighted else None)
    a, b = (("g0",), 0.25, 0.5), ((None,), 0.5, 0.75)
    stage = [declared.cells_within(4096, [a], "sums", "residuals"),
             declared.cells_within(256, [b, (("g1",), 0.0, 0.125)], "sums"),
             declared.levels_within([a, (("g1",), 0.625, 1.0)]),
             declared.extremes_within(1024, [b, (("g0",), 0.125, 0.25)])]
    src = sqlcal.source(upload(df), **kw)
    planner.prefetch(src, [declared.totals()])  # the first scan, which validates the rows
    queries = []
    run = executor.run
    monkeypatch.setattr(executor, "run",
                        lambda s, build, **k: queries.append(build) or run(s, build, **k))
    scans = planner.shared_follow_ups(src, [lambda _: stage])
    assert len(scans) == len(queries) == 2, [d for d, _ in scans]
    for s in stage:
        keys = [*src.by, *([s.key_column] if s.key_column else [])]
        if s.kind == "extremes_within":
            keys = [*src.by, "cell"]
        got = executor.lookup(src, s.key, s.parts).sort_values(keys, ignore_index=True)
        want = _summary(sqlcal.source(upload(df), **kw), s)
        # the engine reads the union of every group's ranges: keep each group's own
        at = want if s.kind == "levels_within" else want.assign(p=want["cell"] / s.params[0])
        want = want[local.in_ranges(at, list(src.by), s.params[-1])]
        want = want.sort_values(keys, ignore_index=True)
        columns = [c for c in want.columns if c in got.columns]
        assert set(want.columns) - set(columns) <= {"W", "sw2", "var2"}  # unweighted fill-ins
        _same(got[columns], want[columns])


def test_a_report_reads_the_table_once_for_its_first_stage(monkeypatch):
    df = _data(2000, seed=2)
    src = sqlcal.source(df, score="p", label="y", weight="w", by="g")
    queries = []
    run = executor.run
    monkeypatch.setattr(executor, "run",
                        lambda s, build, **kw: queries.append(build) or run(s, build, **kw))
    chosen = {name: metric_options(name, bins=15) for name in DEFAULT_METRICS}
    scans = planner.prefetch(src, needs(src, chosen))
    assert len(scans) == 1 and len(queries) == 1
    # the adaptive metrics' follow-ups, shared: the equal-mass levels of quantile ECE and
    # Hosmer-Lemeshow in one pass, the cutoff error's and Kuiper's window in another
    scans = planner.prefetch(src, needs(src, chosen), follow_ups(src, chosen))
    assert len(scans) == len(queries) - 1 <= 2, [d for d, _ in scans]
    # every default metric then finds each summary it reads cached
    before = len(queries)
    for name in DEFAULT_METRICS:
        function = METRICS[name][0]
        function(src, **chosen[name])
    assert len(queries) == before


@pytest.mark.parametrize("name", sorted(
    name for name, m in registered().items()
    if m.function.__module__ in (binned.__name__, scores.__name__, cumulative.__name__)))
def test_declared_needs_are_what_each_metric_reads(name, monkeypatch):
    df = _data(500, seed=3)
    function = getattr(sqlcal, name)
    src = sqlcal.source(df, score="p", label="y", weight="w", by="g")
    declared = registered()[name]
    options = _defaults(function)
    asks = [lambda s: declared.follow_up(s, options)] if declared.follow_up else []
    planner.prefetch(src, declared.needs(src, options), asks)
    first = []
    monkeypatch.setattr(executor, "run", lambda s, build, **kw: first.append(build) or (
        _ for _ in ()).throw(AssertionError(f"{name} ran a scan its registered needs and "
                                            "follow-ups did not declare")))
    out = function(src)
    assert len(out) and not first


def test_report_numbers_equal_each_metric_alone():
    df = _data(3000, seed=4)
    kw = dict(score="p", label="y", weight="w", by="g")
    got = sqlcal.report(df, **kw)
    for name in DEFAULT_METRICS:
        function, preset, columns = METRICS[name]
        alone = function(df, **kw, **preset)
        for column, target in columns.items():
            np.testing.assert_allclose(got[target].to_numpy(float),
                                       alone[column].to_numpy(float), rtol=1e-12, atol=1e-15,
                                       err_msg=f"{name}.{column}")


def test_log_loss_one_logarithm_for_binary_labels_equals_numpy():
    rng = np.random.default_rng(5)
    p = rng.random(500)
    p[:3] = [0.0, 1.0, 0.5]
    y = (rng.random(500) < p).astype(int)
    y[:2] = [0, 1]  # finite at the ends
    w = rng.integers(0, 4, 500).astype(float)
    df = pd.DataFrame({"p": p, "y": y, "w": w})
    got = sqlcal.log_loss(df, score="p", label="y", weight="w")
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = -np.where(y == 1, np.log(p), np.log1p(-p))
    keep = w > 0
    want = (w[keep] * terms[keep]).sum() / w[keep].sum()
    assert got.log_loss.iloc[0] == pytest.approx(want, rel=1e-12)
    y2 = y.copy()
    y2[0] = 1  # p = 0 with y = 1: infinite loss, counted not hidden
    df2 = df.assign(y=y2, w=np.where(np.arange(500) == 0, 1.0, w))
    assert np.isinf(sqlcal.log_loss(df2, score="p", label="y", weight="w").log_loss.iloc[0])
