"""sqlcal.segments, multicalibration and segment_fix against independent oracles: pandas
enumeration of every conjunction on the raw rows, the fold rule recomputed in numpy, a planted
segment, the false discovery rate of the split design simulated on per-segment sums, and the
fix's SQL executed by DuckDB against the numpy formula."""

from __future__ import annotations

import importlib
import json
import math
from itertools import combinations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

import sqlcal
from sqlcal.options import BudgetError, OptionError

audit = importlib.import_module("sqlcal.audit.discovery")
FEATURES = ["f0", "f1", "f2", "f3"]


def _frame(n=3000, seed=0, weights=False, plant=0.0):
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({
        "f0": rng.choice(["a", "b"], n),
        "f1": rng.choice(["x", "y", "z"], n, p=[0.5, 0.3, 0.2]),
        "f2": rng.integers(0, 4, n),
        # rare values (pooled into __other__ at min_support 20 or more) and NULLs
        "f3": rng.choice(["u", "v", "r1", "r2", "r3", "r4", None], n,
                         p=[0.45, 0.45, 0.0025, 0.0025, 0.0025, 0.0025, 0.09]),
        "p": rng.beta(2, 5, n),
    })
    eta = np.log(df.p / (1 - df.p)) + plant * (df.f0.eq("a") & df.f1.eq("x"))
    df["y"] = (rng.uniform(size=n) < 1 / (1 + np.exp(-eta))).astype(int)
    if weights:
        df["w"] = rng.integers(1, 4, n)
    return df


def _fold(p: np.ndarray, holdout=0.0, a_share=0.5) -> np.ndarray:
    """The fold rule, recomputed in numpy: u = 2·dist(p·9999991, ℤ)."""
    x = np.abs(p * 9_999_991.0)
    c = 2.0 ** 52
    u = np.where(x < c, np.abs(x - ((x + c) - c)), 0.0) * 2
    return np.where(u < holdout, 2, np.where(u < holdout + (1 - holdout) * a_share, 0, 1))


def _brute(df, min_support, min_expected, depth, w=None, features=FEATURES):
    """Every conjunction up to ``depth`` by pandas groupby on the recoded raw rows."""
    d = df.copy()
    d["w_"] = 1.0 if w is None else d[w].astype(float)
    for f in dict.fromkeys([*FEATURES, *features]):
        if f not in d:
            continue
        d[f] = d[f].astype(object).where(d[f].notna(), "__null__").astype(str)
        weight = d.groupby(f)["w_"].sum()
        kept = set(weight[weight >= min_support].index)
        d[f] = d[f].where(d[f].isin(kept), "__other__")
    d["wp"], d["wy"] = d.w_ * d.p, d.w_ * d.y
    d["wv"] = d.w_ * d.p * (1 - d.p)
    rows = []
    for k in range(1, depth + 1):
        for cols in combinations(features, k):
            g = d.groupby(list(cols)).agg(n=("w_", "size"), W=("w_", "sum"), Sp=("wp", "sum"),
                                          Sy=("wy", "sum"), V=("wv", "sum")).reset_index()
            for _, r in g.iterrows():
                if r.W >= min_support and r.Sp >= min_expected and r.W - r.Sp >= min_expected:
                    rows.append(dict({f: r[f] for f in cols}, n=r.n, W=r.W, R=r.Sy - r.Sp,
                                     V=r.V, Sp=r.Sp, Sy=r.Sy))
    out = pd.DataFrame(rows)
    out["z"] = out.R / np.sqrt(out.V)
    out["p_value"] = 2 * stats.norm.sf(out.z.abs())
    return out


def _key(frame, features=FEATURES):
    cols = [f for f in features if f in frame]
    return frame[cols].astype(object).where(frame[cols].notna(), "-").astype(str).agg(
        "|".join, axis=1)


@pytest.mark.parametrize("weighted", [False, True])
def test_full_mode_equals_brute_force_enumeration(weighted):
    df = _frame(weights=weighted, plant=0.5)
    depth = 2 if weighted else 3  # the weighted variant at depth 2 keeps the test fast
    out = sqlcal.segments(df, score="p", label="y", weight="w" if weighted else None,
                          features=FEATURES, max_depth=depth, min_support=40.0,
                          min_expected=5.0, mode="full", fdr="bh", top_k=None)
    oracle = _brute(df, 40.0, 5.0, depth, w="w" if weighted else None)
    assert len(out) == len(oracle) == out.family_size[0] == out.tested[0]
    got = out.assign(k=_key(out)).set_index("k").sort_index()
    exp = oracle.assign(k=_key(oracle)).set_index("k").sort_index()
    assert list(got.index) == list(exp.index)
    W_total = df["w"].sum() if weighted else len(df)
    np.testing.assert_array_equal(got.n, exp.n)
    np.testing.assert_allclose(got.W, exp.W, rtol=1e-12)
    np.testing.assert_allclose(got.residual, exp.R, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(got.harm, exp.R.abs() / W_total, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(got.mean_score, exp.Sp / exp.W, rtol=1e-12)
    np.testing.assert_allclose(got.observed, exp.Sy / exp.W, rtol=1e-12)
    np.testing.assert_allclose(got.citl, (exp.Sp - exp.Sy) / exp.W, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(got.z, exp.z, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(got.p_value, exp.p_value, rtol=1e-6, atol=1e-300)
    np.testing.assert_allclose(got.logit_shift, exp.R / exp.V, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(got.logit_shift_se, 1 / np.sqrt(exp.V), rtol=1e-9)
    np.testing.assert_array_equal(got.depth, exp[FEATURES].notna().sum(axis=1))
    # BH by hand: reject the k smallest, k = max{i : p_(i) <= i·alpha/m}
    p = np.sort(exp.p_value.to_numpy())
    m = len(p)
    below = np.nonzero(p <= np.arange(1, m + 1) * 0.05 / m)[0]
    assert got.significant.sum() == (below[-1] + 1 if len(below) else 0)
    assert (got.q_value[got.significant] <= 0.05).all()
    # the planted segment is found, ranked first among the segments nothing explains
    first = out[out.explained_by.isna()].iloc[0]
    assert (first.f0, first.f1, first.depth) == ("a", "x", 2)
    # a weight-2 row equals two rows
    if weighted:
        twice = df.loc[df.index.repeat(df.w)].drop(columns="w")
        dup = sqlcal.segments(twice, score="p", label="y", features=FEATURES, max_depth=2,
                              min_support=40.0, min_expected=5.0, mode="full", top_k=None)
        np.testing.assert_allclose(dup.set_index(_key(dup)).sort_index().z, got.z, rtol=1e-9)


def test_rare_values_are_pooled_into_an_explicit_other_segment_whose_condition_is_sql():
    df = _frame()
    out = sqlcal.segments(df, score="p", label="y", features=["f3"], max_depth=1,
                          min_support=20.0, min_expected=5.0, mode="full", fdr="none",
                          top_k=None)
    assert sorted(out.f3) == ["__null__", "__other__", "u", "v"]
    other = out[out.f3 == "__other__"].iloc[0]
    assert other.n == df.f3.isin(["r1", "r2", "r3", "r4"]).sum()
    import duckdb
    for _, row in out.iterrows():  # every segment string is SQL selecting exactly its rows
        n = duckdb.sql(f"SELECT count(*) FROM df WHERE {row.segment}").fetchone()[0]
        assert n == row.n, row.segment
    assert '"f3" IS NULL' in out.segment.tolist()
    assert other.segment == """NOT "f3" IS NULL AND NOT "f3" IN ('u', 'v')"""


def test_split_mode_certifies_the_fold_a_top_k_on_fold_b():
    df = _frame(n=6000, seed=3, plant=0.6)
    out = sqlcal.segments(df, score="p", label="y", features=FEATURES, max_depth=3,
                          min_support=40.0, min_expected=5.0, top_k=5, screen_z=2.0)
    fold = _fold(df.p.to_numpy())
    a, b = df[fold == 0], df[fold == 1]
    full = _brute(df, 40.0, 5.0, 3)  # the eligible family (label-free, folds A and B)
    oracle_a = _brute_on(a, full)
    oracle_a = oracle_a[oracle_a.z.abs() >= 2.0]
    oracle_a["harm"] = oracle_a.R.abs() / len(a)
    top = oracle_a.assign(k=_key(oracle_a)).sort_values("harm", ascending=False).head(5)
    assert sorted(_key(out)) == sorted(top.k)  # the pruned search finds the exact top-k
    oracle_b = _brute_on(b, full).assign(k=lambda f: _key(f)).set_index("k").loc[
        _key(out)]
    np.testing.assert_allclose(out.residual, oracle_b.R, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(out.harm, oracle_b.R.abs().to_numpy() / len(b), rtol=1e-9)
    sign = np.sign(top.set_index("k").loc[_key(out)].R.to_numpy())
    np.testing.assert_allclose(out.p_value, stats.norm.sf(sign * oracle_b.z.to_numpy()),
                               rtol=1e-6)
    levels = __import__("json").loads(out.searched[0])["levels"]
    assert out.statements[0] == 3 and len(levels) == 3
    assert sum(lv["bound_pruned"] for lv in levels) > 0  # the bound pruned something


def _brute_on(rows, family):
    """The family's segments' sums on a subset of the rows (recoded as the family was)."""
    d = rows.copy()
    kept = {f: set(family[f].dropna()) - {"__other__"} for f in FEATURES}
    for f in FEATURES:
        d[f] = d[f].astype(object).where(d[f].notna(), "__null__").astype(str)
        d[f] = d[f].where(d[f].isin(kept[f]), "__other__")
    out = []
    for _, seg in family.iterrows():
        m = np.ones(len(d), bool)
        for f in FEATURES:
            if pd.notna(seg[f]):
                m &= (d[f] == seg[f]).to_numpy()
        s = d[m]
        out.append(dict({f: seg[f] for f in FEATURES}, R=(s.y - s.p).sum(),
                        V=(s.p * (1 - s.p)).sum()))
    out = pd.DataFrame(out)
    out["z"] = out.R / np.sqrt(out.V)
    return out


def _binned_on(rows, family, bins):
    """Per family segment, the residual and Bernoulli variance per equal-width score bin
    (LEAST(FLOOR(p·B), B − 1)) on ``rows``, recoded as the family was."""
    d = rows.copy()
    kept = {f: set(family[f].dropna()) - {"__other__"} for f in FEATURES}
    for f in FEATURES:
        d[f] = d[f].astype(object).where(d[f].notna(), "__null__").astype(str)
        d[f] = d[f].where(d[f].isin(kept[f]), "__other__")
    d["b"] = np.minimum(np.floor(d.p * bins), bins - 1).astype(int)
    d["r"], d["v"] = d.y - d.p, d.p * (1 - d.p)
    out = []
    for _, seg in family.iterrows():
        m = np.ones(len(d), bool)
        for f in FEATURES:
            if pd.notna(seg[f]):
                m &= (d[f] == seg[f]).to_numpy()
        per = d[m].groupby("b")[["r", "v"]].sum().reindex(range(bins), fill_value=0.0)
        ok = per.v > 0
        chi2 = float((per.r[ok] ** 2 / per.v[ok]).sum())
        out.append(dict({f: seg[f] for f in FEATURES}, mass=per.r.abs().sum(), W=m.sum(),
                        chi2=chi2, df=int(ok.sum()),
                        P=float(np.maximum((d.y * (1 - d.p))[m].groupby(d.b[m]).sum(),
                                           (d.p * (1 - d.y))[m].groupby(d.b[m]).sum()).sum())))
    out = pd.DataFrame(out)
    out["p_value"] = stats.chi2.sf(out.chi2, out.df)
    return out


def test_effect_ece_searches_the_binned_error_with_a_valid_bound_and_chi_square_tests():
    # a segment over-confident on both sides: its net residual is about 0, its binned error not
    df = _frame(n=4000, seed=4)
    rng = np.random.default_rng(9)
    inside = (df.f0.eq("a") & df.f1.eq("x")).to_numpy()
    centre = df.p[inside].mean()
    q = np.where(inside, centre + 0.3 * (df.p - centre), df.p)
    df["y"] = (rng.uniform(size=len(df)) < q).astype(int)
    bins = 5
    out = sqlcal.segments(df, score="p", label="y", features=FEATURES, max_depth=2,
                          min_support=40.0, min_expected=5.0, top_k=5, effect="ece",
                          bins=bins)
    fold = _fold(df.p.to_numpy())
    a, b = df[fold == 0], df[fold == 1]
    full = _brute(df, 40.0, 5.0, 2)
    on_a = _binned_on(a, full, bins)
    screened = on_a[on_a.p_value <= 2 * stats.norm.sf(2.0)]
    top = screened.assign(k=_key(screened), harm=screened.mass / len(a)).sort_values(
        "harm", ascending=False).head(5)
    assert sorted(_key(out)) == sorted(top.k)  # the pruned search finds the exact top-k
    # the sign-split bound per bin holds for every descendant of every segment
    keyed = on_a.assign(k=_key(on_a)).set_index("k")
    for k, row in keyed.iterrows():
        cond = {f: row[f] for f in FEATURES if pd.notna(row[f])}
        below = keyed[np.all([keyed[f] == v for f, v in cond.items()], axis=0)]
        assert (below.mass <= row.P + 1e-9).all()
    oracle_b = _binned_on(b, full, bins).assign(k=lambda f: _key(f)).set_index("k").loc[
        _key(out)]
    np.testing.assert_allclose(out.harm, oracle_b.mass.to_numpy() / len(b), rtol=1e-9)
    np.testing.assert_allclose(out.ece, oracle_b.mass / oracle_b.W, rtol=1e-9)
    np.testing.assert_allclose(out.chi2, oracle_b.chi2, rtol=1e-9)
    np.testing.assert_array_equal(out.chi2_df, oracle_b.df)
    np.testing.assert_allclose(out.p_value, oracle_b.p_value, rtol=1e-6, atol=1e-300)
    first = out[out.explained_by.isna()].iloc[0]
    assert (first.f0, first.f1, first.depth, bool(first.significant)) == ("a", "x", 2, True)
    # the residual search does not see it
    plain = sqlcal.segments(df, score="p", label="y", features=FEATURES, max_depth=2,
                            min_support=40.0, min_expected=5.0, top_k=5)
    assert not ((plain.f0 == "a") & (plain.f1 == "x") & plain.significant).any()
    assert sum(lv["bound_pruned"] for lv in json.loads(out.searched[0])["levels"]) > 0
    with pytest.raises(OptionError, match="effect"):
        sqlcal.segments(df, score="p", label="y", features=FEATURES, effect="slice")
    with pytest.raises(OptionError, match="sliceline_alpha"):
        sqlcal.segments(df, score="p", label="y", features=FEATURES, effect="sliceline",
                        sliceline_alpha=0.0)


def test_fdr_of_the_split_design_under_the_complete_null_is_at_most_alpha():
    """400 replicates of the split design (fold-A screening and top-k, one-sided fold-B tests,
    BH) on simulated per-segment sums of a calibrated model: a 3-feature lattice of cells with
    Gaussian residual sums of variance V (the normal limit the tests assume); segments are sums
    of cells, so overlapping segments are correlated as in the data. Under the complete null
    FDR = P(any discovery)."""
    rng = np.random.default_rng(7)
    cards = (3, 4, 5)
    cells = np.array(np.meshgrid(*[np.arange(c) for c in cards], indexing="ij")).reshape(3, -1).T
    member = []
    for k in (1, 2, 3):
        for cols in combinations(range(3), k):
            for vals in {tuple(c[list(cols)]) for c in cells}:
                member.append(np.all(cells[:, cols] == vals, axis=1))
    M = np.array(member, float)  # segments × cells
    V = rng.uniform(20, 80, len(cells))  # Σwp(1−p) per cell and fold
    reps = 400
    r_a = rng.normal(size=(len(cells), reps)) * np.sqrt(V)[:, None]
    r_b = rng.normal(size=(len(cells), reps)) * np.sqrt(V)[:, None]
    v = M @ V
    z_a, z_b = (M @ r_a) / np.sqrt(v)[:, None], (M @ r_b) / np.sqrt(v)[:, None]
    alarms = {"bh": 0, "by": 0}
    for j in range(reps):
        harm = np.abs(M @ r_a[:, j])
        screened = np.nonzero(np.abs(z_a[:, j]) >= 2.0)[0]
        chosen = screened[np.argsort(-harm[screened], kind="stable")][:20]
        p = stats.norm.sf(np.sign(z_a[chosen, j]) * z_b[chosen, j])
        for method in alarms:
            alarms[method] += bool((audit.adjust(p, method) <= 0.05).any())
    margin = 0.05 + 2 * math.sqrt(0.05 * 0.95 / reps)
    assert alarms["bh"] / reps <= margin and alarms["by"] / reps <= margin
    # full mode, BH over the whole family
    p_full = 2 * stats.norm.sf(np.abs(z_a))
    fwer = np.mean([(audit.adjust(p_full[:, j], "bh") <= 0.05).any() for j in range(reps)])
    assert fwer <= margin


def test_multicalibration_matches_the_definitions_on_raw_rows():
    df = _frame(plant=0.5)
    out = sqlcal.multicalibration(df, score="p", label="y", features=FEATURES, max_depth=2,
                                  min_support=40.0, min_expected=5.0, metric="binned", bins=5)
    family = _brute(df, 40.0, 5.0, 2)
    d = df.copy()
    d["bin"] = np.minimum(np.floor(d.p * 5), 4).astype(int)
    for f in FEATURES:  # the recoding of _brute
        d[f] = d[f].astype(object).where(d[f].notna(), "__null__").astype(str)
        kept = set(family[f].dropna()) - {"__other__"}
        d[f] = d[f].where(d[f].isin(kept), "__other__")
    mass, ece = 0.0, 0.0
    for _, seg in family.iterrows():
        m = np.ones(len(d), bool)
        for f in FEATURES:
            if pd.notna(seg[f]):
                m &= (d[f] == seg[f]).to_numpy()
        per_bin = (d[m].y - d[m].p).groupby(d[m].bin).sum().abs()
        mass, ece = max(mass, per_bin.max() / len(df)), max(ece, per_bin.sum() / m.sum())
    row = out.iloc[0]
    assert row.n_segments == len(family)
    assert row.multiaccuracy == pytest.approx(family.R.abs().max() / len(df), rel=1e-9)
    assert row.mc_error == row.multicalibration_mass == pytest.approx(mass, rel=1e-9)
    assert row.max_segment_ece == pytest.approx(ece, rel=1e-9)
    zmax = family.z.abs().max()
    assert row.mc_sigma == pytest.approx(zmax, rel=1e-9)
    assert row.p_value == pytest.approx(min(1, len(family) * 2 * stats.norm.sf(zmax)), rel=1e-6)
    assert row.noise_floor == pytest.approx(math.sqrt(2 * math.log(2 * len(family))))


def test_segment_fix_finds_the_planted_shift_and_its_sql_equals_numpy():
    rng = np.random.default_rng(11)
    n = 40000
    df = pd.DataFrame({"c": rng.choice(["a", "b", "c", "d"], n), "k": rng.integers(0, 3, n),
                       "p": rng.beta(2, 6, n)})
    eta = np.log(df.p / (1 - df.p)) + 0.5 * (df.c.eq("a") & df.k.eq(1))
    df["y"] = (rng.uniform(size=n) < 1 / (1 + np.exp(-eta))).astype(int)
    fix = sqlcal.segment_fix(df, score="p", label="y", features=["c", "k"], max_depth=2,
                             min_support=500.0)
    assert len(fix.table) == 1  # the marginals c = 'a' and k = 1 are explained by it
    row = fix.table.iloc[0]
    assert (row.c, row.k) == ("a", "1")
    assert abs(row.theta - 0.5) <= 3 * row.theta_se
    assert abs(row.holdout_z_after) < 2.0 < abs(row.holdout_z_before)
    s = fix.summary.iloc[0]
    assert s.accepted and s.holdout_log_loss_after < s.holdout_log_loss_before
    # the holdout log loss, recomputed from the rows of the holdout fold with the fitted θ
    hold = df[_fold(df.p.to_numpy(), holdout=0.2) == 2]
    pc = hold.p.clip(1e-6, 1 - 1e-6)
    shift = np.zeros(len(hold))
    for (_, seg), theta in zip(fix.table.iterrows(), fix.table.theta):
        m = np.ones(len(hold), bool)
        for f in ("c", "k"):
            if pd.notna(seg[f]):
                m &= (hold[f].astype(str) == seg[f]).to_numpy()
        shift += theta * m
    q = 1 / (1 + np.exp(-(np.log(pc / (1 - pc)) + shift)))
    ll = -np.mean(hold.y * np.log(q) + (1 - hold.y) * np.log(1 - q))
    assert s.holdout_log_loss_after == pytest.approx(ll, rel=1e-9)
    # the exported SQL, run by DuckDB, equals the numpy formula on every row
    import duckdb
    got = duckdb.sql(f"SELECT {fix.sql('p')} AS q FROM hold").df().q.to_numpy()
    expect = np.where(shift == 0, hold.p, q)
    np.testing.assert_allclose(got, expect, rtol=1e-12)


def test_segment_fix_platt_equals_the_logistic_fit_on_the_rows_and_its_sql_equals_numpy():
    rng = np.random.default_rng(12)
    n = 30000
    df = pd.DataFrame({"c": rng.choice(["a", "b", "c"], n), "p": rng.uniform(0.05, 0.95, n)})
    logit = np.log(df.p / (1 - df.p))
    inside = df.c.eq("a").to_numpy()
    df["y"] = (rng.uniform(size=n) < 1 / (1 + np.exp(-np.where(
        inside, 0.3 + 0.6 * logit, logit)))).astype(int)
    fix = sqlcal.segment_fix(df, score="p", label="y", features=["c"], min_support=500.0,
                             kind="platt", penalty=0.0)
    assert fix.table.segment.tolist() == ['"c" = \'a\'']
    row = fix.table.iloc[0]
    # oracle: the unpenalised logistic fit of (intercept, slope) on the segment's fit rows
    # (folds A and B), offset logit p, by scipy on the raw rows
    from scipy.optimize import minimize

    fold = _fold(df.p.to_numpy(), holdout=0.2)
    fit = df[(fold != 2) & inside]
    x, y = np.log(fit.p / (1 - fit.p)).to_numpy(), fit.y.to_numpy()

    def loss(t):
        e = x + t[0] + t[1] * x
        return np.sum(np.logaddexp(0, e) - y * e)

    best = minimize(loss, [0.0, 0.0], method="BFGS", options={"gtol": 1e-10}).x
    # the fit runs on 0.01-wide logit cells: Σw(θ + γη) is exact per cell, σ's curvature is not
    assert row.theta == pytest.approx(best[0], abs=2e-3)
    assert row.slope == pytest.approx(best[1], abs=2e-3)
    assert abs(1 + row.slope - 0.6) <= 3 * row.slope_se
    s = fix.summary.iloc[0]
    assert s.accepted and s.holdout_log_loss_after < s.holdout_log_loss_before
    hold = df[fold == 2]
    x = np.log(hold.p / (1 - hold.p)).to_numpy()
    m = hold.c.eq("a").to_numpy()
    q = 1 / (1 + np.exp(-(x + m * (row.theta + row.slope * x))))
    ll = -np.mean(hold.y * np.log(q) + (1 - hold.y) * np.log(1 - q))
    assert s.holdout_log_loss_after == pytest.approx(ll, rel=1e-9)
    import duckdb
    got = duckdb.sql(f"SELECT {fix.sql('p')} AS q FROM hold").df().q.to_numpy()
    np.testing.assert_allclose(got, np.where(m, q, hold.p), rtol=1e-12)
    with pytest.raises(OptionError, match="kind"):
        sqlcal.segment_fix(df, score="p", label="y", features=["c"], kind="spline")


def test_segment_fix_isotonic_equals_sklearn_per_entry_and_its_sql_equals_numpy():
    """kind="isotonic": per entry of the decision list, the map equals scikit-learn's
    IsotonicRegression fitted on that entry's fitting rows (folds A and B), clipped to
    [1e-6, 1 − 1e-6], on the holdout rows; the holdout log loss equals numpy's; the SQL gives
    the same scores in DuckDB."""
    from sklearn.isotonic import IsotonicRegression

    rng = np.random.default_rng(21)
    n = 30000
    df = pd.DataFrame({"c": rng.choice(["a", "b", "c"], n), "d": rng.choice(["x", "y"], n),
                       "p": rng.uniform(0.05, 0.95, n)})
    a, bx = df.c.eq("a").to_numpy(), (df.c.eq("b") & df.d.eq("x")).to_numpy()
    truth = np.where(a, df.p ** 2, np.where(bx, np.sqrt(df.p), df.p))  # bent both ways
    df["y"] = (rng.uniform(size=n) < truth).astype(int)
    fix = sqlcal.segment_fix(df, score="p", label="y", features=["c", "d"], max_depth=2,
                             min_support=500.0, kind="isotonic")
    segs = fix.table.segment.tolist()
    rows = {"\"c\" = 'a'": a, "\"c\" = 'b' AND \"d\" = 'x'": bx}
    for c in "abc":
        rows[f"\"c\" = '{c}'"] = df.c.eq(c).to_numpy()
    for d in "xy":
        rows[f"\"d\" = '{d}'"] = df.d.eq(d).to_numpy()
    for c in "abc":
        for d in "xy":
            rows.setdefault(f"\"c\" = '{c}' AND \"d\" = '{d}'",
                            (df.c.eq(c) & df.d.eq(d)).to_numpy())
    assert {"\"c\" = 'a'", "\"c\" = 'b' AND \"d\" = 'x'"} <= set(segs)
    fold = _fold(df.p.to_numpy(), holdout=0.2)
    # the decision list in pandas: each row to the first segment (by harm) holding it
    entry = np.zeros(n, int)
    for i, seg in reversed(list(enumerate(segs))):
        entry = np.where(rows[seg], i + 1, entry)
    hold = fold == 2
    expected = df.p.to_numpy().copy()
    for i in range(len(segs)):
        fit = (entry == i + 1) & ~hold
        iso = IsotonicRegression(out_of_bounds="clip").fit(df.p[fit], df.y[fit])
        at = (entry == i + 1) & hold
        expected[at] = np.clip(iso.predict(df.p[at]), 1e-6, 1 - 1e-6)  # never 0 or 1
        assert fix.table.blocks[i] == (fix.blocks.entry == i + 1).sum() > 0
    got = fix.transform_frame(df[hold], "p")
    np.testing.assert_allclose(got, expected[hold], rtol=1e-12, atol=1e-12)
    import duckdb
    held = df[hold]  # noqa: F841 (read by name by DuckDB's replacement scan below)
    in_sql = duckdb.sql(f"SELECT {fix.sql('p')} AS q FROM held").df().q.to_numpy()
    np.testing.assert_allclose(in_sql, expected[hold], rtol=1e-12, atol=1e-12)
    s = fix.summary.iloc[0]
    q = np.clip(expected[hold], 1e-6, 1 - 1e-6)
    y = df.y.to_numpy()[hold]
    assert s.holdout_log_loss_after == pytest.approx(
        -np.mean(y * np.log(q) + (1 - y) * np.log(1 - q)), rel=1e-9)
    assert s.accepted and s.holdout_log_loss_after < s.holdout_log_loss_before
    first = fix.table.iloc[0]
    assert abs(first.holdout_z_after) < 3 < abs(first.holdout_z_before)


def test_options_are_checked_before_any_query():
    df = _frame(n=50)
    with pytest.raises(OptionError, match="mode"):
        sqlcal.segments(df, score="p", label="y", features=FEATURES, mode="fast")
    with pytest.raises(OptionError, match="max_depth"):
        sqlcal.segments(df, score="p", label="y", features=FEATURES, max_depth=0)
    with pytest.raises(BudgetError, match="max_depth"):
        sqlcal.segments(df.assign(**{f"g{i}": "a" for i in range(30)}), score="p", label="y",
                        features=[f"g{i}" for i in range(30)], max_depth=5)
    with pytest.raises(BudgetError, match="max_candidates"):
        sqlcal.segments(df, score="p", label="y", features=FEATURES, mode="full", max_depth=3,
                        min_support=1.0, min_expected=0.0, max_candidates=3)
    with pytest.raises(OptionError, match="features"):
        sqlcal.segments(df.assign(f=0.5), score="p", label="y", features=["f"])


def test_engines_agree_with_brute_force(con, upload):
    df = _frame(n=1500, seed=5, plant=0.7)
    # NULLs and pooled values included; level 2's three pairs come from one covering GROUP BY
    # of the three columns, re-aggregated per pair
    features = ["f0", "f1", "f3"]
    out = sqlcal.segments(upload(df), score="p", label="y", features=features, max_depth=2,
                          min_support=40.0, min_expected=5.0, mode="full", top_k=None)
    oracle = _brute(df, 40.0, 5.0, 2, features=features)
    # the redundancy rule reads the intersections the lattice lacks: one more statement (and
    # table read) per round
    explaining = json.loads(out.searched[0])["explained"]["statements"]
    assert out.branches[0] == 3 + 1 + explaining
    got = out.assign(k=_key(out)).set_index("k").sort_index()
    exp = oracle.assign(k=_key(oracle)).set_index("k").sort_index()
    assert list(got.index) == list(exp.index)
    np.testing.assert_allclose(got.residual, exp.R, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(got.z, exp.z, rtol=1e-9, atol=1e-9)
    assert out.statements[0] == 2 + explaining
    # the reduced cube (a temporary table of the engine) gives the same sums
    cube = sqlcal.segments(upload(df), score="p", label="y", features=features, max_depth=2,
                           min_support=40.0, min_expected=5.0, mode="full", top_k=None,
                           strategy="cube")
    got = cube.assign(k=_key(cube)).set_index("k").sort_index()
    assert list(got.index) == list(exp.index)
    np.testing.assert_allclose(got.W, exp.W, rtol=1e-12)
    np.testing.assert_allclose(got.residual, exp.R, rtol=1e-9, atol=1e-9)
    assert json.loads(cube.searched[0])["scans"] == 2
    # the redundancy rule's intersections, read from the cube, explain the same segments, and
    # the same as on DuckDB from the frame
    levels = out.assign(k=_key(out)).set_index("k").sort_index()
    assert got.explained_by.fillna("-").tolist() == levels.explained_by.fillna("-").tolist()
    local = sqlcal.segments(df, score="p", label="y", features=features, max_depth=2,
                            min_support=40.0, min_expected=5.0, mode="full", top_k=None)
    local = local.assign(k=_key(local)).set_index("k").sort_index()
    quoted = levels.explained_by.fillna("-").str.replace("`", '"')  # Spark quotes with `
    assert quoted.tolist() == local.explained_by.fillna("-").tolist()
    assert levels.explained_by.notna().any()


def _skewed(n=4000, seed=11):
    """Columns of many raw values, most of them rare: an integer and two text columns, each
    with a few common values and a long tail; NULLs common (a value of their own) in f4, rare
    (pooled) in f6."""
    rng = np.random.default_rng(seed)

    def column(common, tail, null):
        share = np.r_[np.full(len(common), (1 - null) * 0.93 / len(common)),
                      np.full(len(tail), (1 - null) * 0.07 / len(tail)), null]
        return rng.choice(np.array([*common, *tail, None], dtype=object), n, p=share)

    df = pd.DataFrame({
        "f0": rng.choice(["a", "b"], n),
        "f4": pd.array(column(range(6), range(100, 190), 0.05), dtype="Int64"),
        "f5": column([f"s{i}" for i in range(5)], [f"t{i}" for i in range(80)], 0.0),
        "f6": column(["u", "v", "w", "x"], [f"r{i}" for i in range(70)], 0.004),
        "p": rng.beta(2, 5, n)})
    eta = np.log(df.p / (1 - df.p)) + 0.8 * (df.f0.eq("a") & df.f4.eq(3)).fillna(False)
    df["y"] = (rng.uniform(size=n) < 1 / (1 + np.exp(-eta))).astype(int)
    return df


def test_over_limit_sets_group_only_their_candidates_values(con, upload, monkeypatch):
    """A column tuple whose raw values have more combinations than a covering GROUP BY may
    hold is grouped by its candidates' values, "pooled" and "neither": equal to pandas
    enumeration on the recoded rows, on every engine (integers and text compared in their
    type; NULL a value of its own or pooled; rare values pooled)."""
    from sqlcal.query import reductions

    features = ["f0", "f4", "f5", "f6"]
    df = _skewed()
    monkeypatch.setattr(reductions, "SEGMENT_COVER_GROUPS", 4)
    plans = []
    real = reductions.segment_plan

    def spy(*args, **kwargs):
        plans.append(real(*args, **kwargs))
        return plans[-1]

    monkeypatch.setattr(reductions, "segment_plan", spy)
    monkeypatch.setattr(audit, "segment_plan", spy)
    out = sqlcal.segments(upload(df), score="p", label="y", features=features, max_depth=3,
                          min_support=30.0, min_expected=3.0, mode="full", top_k=None)
    narrowed = [n for plan in plans for _, _, n in plan if n]
    assert {features.index(f) for f in ("f4", "f5", "f6")} <= {j for n in narrowed for j in n}
    assert any(reductions.SEGMENT_OTHER in v for n in narrowed for v in n.values())
    oracle = _brute(df, 30.0, 3.0, 3, features=features)
    got = out.assign(k=_key(out, features)).set_index("k").sort_index()
    exp = oracle.assign(k=_key(oracle, features)).set_index("k").sort_index()
    assert list(got.index) == list(exp.index)
    np.testing.assert_array_equal(got.n, exp.n)
    np.testing.assert_allclose(got.residual, exp.R, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(got.z, exp.z, rtol=1e-9, atol=1e-9)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 300), min_size=2, max_size=8), st.integers(2, 3),
       st.sampled_from([16, 1000, 2**14]))
def test_covering_sets_hold_every_tuple_once_within_the_limit(sizes, depth, limit):
    from sqlcal.query.reductions import segment_cover

    tuples = list(combinations(range(len(sizes)), min(depth, len(sizes))))
    cover = segment_cover(tuples, sizes, limit)
    held = sorted(i for _, members in cover for i in members)
    assert held == list(range(len(tuples)))  # each tuple exactly once
    for cols, members in cover:
        assert all(set(tuples[i]) <= set(cols) for i in members)
        combos = math.prod(sizes[j] for j in cols)
        # over the limit only when one tuple alone is
        assert combos <= limit * (1 + 1e-9) or (
            len(members) == 1 and set(tuples[members[0]]) == set(cols))


@settings(max_examples=300, deadline=None)
@given(st.floats(1, 1e6), st.floats(0, 1), st.floats(0, 1), st.floats(0, 1), st.floats(0, 1),
       st.floats(0.01, 1))
def test_sliceline_bound_holds_for_every_descendant(size, e_share, least_share, t_share,
                                                    te_share, alpha):
    """SliceLine's score of any T below S (least ≤ W_T ≤ W_S, E_T ≤ min(E_S, W_T)) is at most
    the bound of S."""
    W, E = 2e6, 3e5
    errors = e_share * size
    least = least_share * size
    w_t = least + t_share * (size - least)
    e_t = te_share * min(errors, w_t)
    bound = audit._sliceline_bound(np.array([size]), np.array([errors]), W, E, alpha, least)
    score = audit._sliceline(np.array([w_t]), np.array([e_t]), W, E, alpha)
    assert score[0] <= bound[0] + 1e-9 * max(1.0, abs(bound[0]))


def test_cube_strategy_reads_the_base_table_twice_whatever_the_depth(monkeypatch):
    import ibis
    from ibis.expr.types.relations import Table

    from sqlcal.query import reductions

    df = _frame(n=1500, seed=3, weights=True, plant=0.6)
    con = ibis.duckdb.connect()
    base = con.create_table("base_rows", df)
    statements = []
    execute, cache = reductions.execute, Table.cache

    def recorded(expr):
        statements.append(ibis.to_sql(expr))
        return execute(expr)

    def cached(self, *args, **kwargs):
        statements.append(ibis.to_sql(self))
        return cache(self, *args, **kwargs)

    monkeypatch.setattr(reductions, "execute", recorded)
    monkeypatch.setattr(Table, "cache", cached)
    features = ["f0", "f1", "f3"]
    oracle = _brute(df, 40.0, 5.0, 3, w="w", features=features)
    exp = oracle.assign(k=_key(oracle)).set_index("k").sort_index()
    for depth, strategy in ((2, "cube"), (3, "cube"), (3, "lattice")):
        statements.clear()
        out = sqlcal.segments(base, score="p", label="y", weight="w", features=features,
                              max_depth=depth, min_support=40.0, min_expected=5.0,
                              mode="full", top_k=None, strategy=strategy)
        reads = sum('"base_rows"' in sql for sql in statements)
        # the redundancy rule's statements read the cube, or the table (levels)
        explaining = json.loads(out.searched[0])["explained"]["statements"]
        assert reads == (2 if strategy == "cube" else depth + explaining), (strategy, depth)
        assert json.loads(out.searched[0])["scans"] == (
            2 if strategy == "cube" else out.branches[0])
        assert out.statements[0] == len(statements) == depth + (strategy == "cube") + explaining
        got = out.assign(k=_key(out)).set_index("k").sort_index()
        want = exp[exp[features].notna().sum(axis=1) <= depth]
        assert list(got.index) == list(want.index)
        np.testing.assert_allclose(got.W, want.W, rtol=1e-12)
        np.testing.assert_allclose(got.residual, want.R, rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(got.z, want.z, rtol=1e-9, atol=1e-9)


def test_cli_segments_writes_json_with_the_fix(tmp_path, capsys):
    from sqlcal.cli.commands import main

    rng = np.random.default_rng(4)
    n = 20000
    df = pd.DataFrame({"country": rng.choice(["BR", "US", "DE"], n),
                       "device": rng.choice(["ios", "android"], n), "p": rng.beta(2, 6, n)})
    eta = np.log(df.p / (1 - df.p)) + 0.6 * (df.country.eq("BR") & df.device.eq("ios"))
    df["y"] = (rng.uniform(size=n) < 1 / (1 + np.exp(-eta))).astype(int)
    path = tmp_path / "preds.parquet"
    df.to_parquet(path)
    out = tmp_path / "segments.json"
    code = main(["segments", str(path), "--score", "p", "--label", "y", "--features",
                 "country,device", "--min-support", "300", "--fix", "--json", str(out)])
    assert code == 0
    doc = __import__("json").loads(out.read_text())
    assert doc["generator"] == "sqlcal"
    first = doc["segments"][0]
    assert (first["country"], first["device"], first["significant"]) == ("BR", "ios", True)
    assert doc["fix"]["table"][0]["segment"] == first["segment"]
    assert doc["fix"]["sql"] in capsys.readouterr().out
    # an unknown feature is exit 2 with the column named
    assert main(["segments", str(path), "--score", "p", "--label", "y",
                 "--features", "nope"]) == 2
    assert "nope" in capsys.readouterr().err
    # SliceLine's score from the command line: the same slices as the function gives
    sl = tmp_path / "sliceline.json"
    assert main(["segments", str(path), "--score", "p", "--label", "y", "--features",
                 "country,device", "--min-support", "300", "--mode", "full", "--top-k", "3",
                 "--effect", "sliceline", "--sliceline-alpha", "0.99", "--json", str(sl)]) == 0
    got = pd.DataFrame(__import__("json").loads(sl.read_text())["segments"])
    want = sqlcal.segments(df, score="p", label="y", features=["country", "device"],
                           min_support=300, mode="full", top_k=3, effect="sliceline",
                           sliceline_alpha=0.99)
    assert list(got.segment) == list(want.segment) and len(want) == 3
    np.testing.assert_allclose(got.score, want.score, rtol=1e-9)  # JSON: 10 digits
    assert main(["segments", str(path), "--score", "p", "--label", "y", "--features",
                 "country", "--effect", "sliceline", "--sliceline-alpha", "2"]) == 2
    assert "sliceline_alpha" in capsys.readouterr().err


def test_scheduled_report_has_a_segments_section_in_json_and_html(tmp_path):
    import jsonschema

    from sqlcal.reporting import html, scheduled

    rng = np.random.default_rng(6)
    n = 20000
    df = pd.DataFrame({"country": rng.choice(["BR", "US", "DE"], n),
                       "device": rng.choice(["ios", "android"], n), "p": rng.beta(2, 6, n)})
    eta = np.log(df.p / (1 - df.p)) + 0.6 * (df.country.eq("BR") & df.device.eq("ios"))
    df["y"] = (rng.uniform(size=n) < 1 / (1 + np.exp(-eta))).astype(int)
    path = tmp_path / "preds.parquet"
    df.to_parquet(path)
    config = scheduled.validate_config({
        "source": {"data": str(path), "score": "p", "label": "y"},
        "metrics": {"ece": {}},
        "segments": {"features": ["country", "device"], "min_support": 300.0,
                     "strategy": "cube"}})
    run = scheduled.run_report(config, diagrams=False, progress=False)
    doc = scheduled.to_document(run)
    jsonschema.validate(doc, scheduled.json_schema())
    first = doc["segments"][0]
    assert (first["country"], first["device"], first["significant"]) == ("BR", "ios", True)
    assert first["searched"]["mode"] == "split"
    assert (first["searched"]["strategy"], first["searched"]["scans"]) == ("cube", 2)
    page = html.render(run)
    assert '<section id="segments">' in page
    # the segment's condition, escaped (markupsafe's entities for the quotes)
    assert "&#34;country&#34; = &#39;BR&#39; AND &#34;device&#34; = &#39;ios&#39;" in page
    # SliceLine's score in the [segments] section: the slices sqlcal.segments gives
    sliceline = scheduled.validate_config({
        "source": {"data": str(path), "score": "p", "label": "y"}, "metrics": {"ece": {}},
        "segments": {"features": ["country", "device"], "min_support": 300.0, "mode": "full",
                     "effect": "sliceline", "sliceline_alpha": 0.99, "top_k": 3}})
    doc = scheduled.to_document(scheduled.run_report(sliceline, diagrams=False, progress=False))
    jsonschema.validate(doc, scheduled.json_schema())
    want = sqlcal.segments(df, score="p", label="y", features=["country", "device"],
                           min_support=300.0, mode="full", effect="sliceline",
                           sliceline_alpha=0.99, top_k=3)
    assert len(want) == 3 and (want.score > 0).all()
    assert [s["segment"] for s in doc["segments"]] == list(want.segment)
    np.testing.assert_allclose([s["score"] for s in doc["segments"]], want.score, rtol=1e-12)
    with pytest.raises(scheduled.ConfigError, match="segments"):
        scheduled.validate_config({"source": {"data": str(path), "score": "p", "label": "y"},
                                   "metrics": {"ece": {}}, "segments": {"features": "country"}})


def test_sampling_weights_use_the_sum_of_squared_weights_in_the_variance():
    df = _frame(weights=True)
    df["w"] = df["w"] * 0.7  # fractional: sampling weights
    out = sqlcal.segments(df, score="p", label="y", weight="w", features=["f0", "f1"],
                          max_depth=1, min_support=40.0, min_expected=5.0, mode="full",
                          fdr="none", top_k=None)
    assert set(out.weight_kind) == {"sampling"}
    for _, row in out.iterrows():
        rows = df[df["f0"] == row.f0] if pd.notna(row.f0) else df[df["f1"] == row.f1]
        r = (rows.w * (rows.y - rows.p)).sum()
        v2 = (rows.w ** 2 * rows.p * (1 - rows.p)).sum()
        v1 = (rows.w * rows.p * (1 - rows.p)).sum()
        assert row.z == pytest.approx(r / math.sqrt(v2), rel=1e-9)
        assert row.logit_shift == pytest.approx(r / v1, rel=1e-9)
        assert row.logit_shift_se == pytest.approx(math.sqrt(v2) / v1, rel=1e-9)


def test_power_for_the_planted_segment_of_the_design_is_as_derived():
    """The split design on simulated per-segment sums with the planted case of the design
    (S* = 5% of the mass, logit shift 0.3, fold-B Σwp(1−p) ≈ 727 so z ≈ 8.1): over 200
    replicates S* is certified in at least 198 and has the largest fold-B z of the depth-2
    segments in at least 190; its one-step logit shift's 95% interval covers the first-order
    target R/V in about 95% (within 3 SE of the binomial noise)."""
    rng = np.random.default_rng(9)
    cards = (4, 5, 5)
    cells = np.array(np.meshgrid(*[np.arange(c) for c in cards], indexing="ij")).reshape(3, -1).T
    member, depth = [], []
    for k in (1, 2, 3):
        for cols in combinations(range(3), k):
            for vals in sorted({tuple(c[list(cols)]) for c in cells}):
                member.append(np.all(cells[:, cols] == vals, axis=1))
                depth.append(k)
    M, depth = np.array(member, float), np.array(depth)
    star = np.all(cells[:, :2] == (0, 0), axis=1)  # c1 = a, c2 = b: 1/20 of the cells
    V = np.full(len(cells), 727.0 / star.sum())  # fold-B variance per cell (and fold A)
    s_idx = int(np.nonzero((M == star).all(axis=1))[0][0])
    reps, delta = 200, 0.3
    mean = np.where(star, delta * V, 0.0)[:, None]
    r_a = mean + rng.normal(size=(len(cells), reps)) * np.sqrt(V)[:, None]
    r_b = mean + rng.normal(size=(len(cells), reps)) * np.sqrt(V)[:, None]
    v = M @ V
    R_a, R_b = M @ r_a, M @ r_b
    z_a, z_b = R_a / np.sqrt(v)[:, None], R_b / np.sqrt(v)[:, None]
    certified = top = covered = 0
    for j in range(reps):
        screened = np.nonzero(np.abs(z_a[:, j]) >= 2.0)[0]
        chosen = screened[np.argsort(-np.abs(R_a[screened, j]), kind="stable")][:100]
        p = stats.norm.sf(np.sign(z_a[chosen, j]) * z_b[chosen, j])
        significant = chosen[audit.adjust(p, "bh") <= 0.05]
        certified += s_idx in significant
        pairs = np.nonzero(depth == 2)[0]
        top += pairs[np.argmax(z_b[pairs, j])] == s_idx
        shift, se = R_b[s_idx, j] / v[s_idx], 1 / math.sqrt(v[s_idx])
        covered += abs(shift - delta) <= 1.96 * se
    assert certified >= 198 and top >= 190
    assert abs(covered / reps - 0.95) <= 3 * math.sqrt(0.95 * 0.05 / reps)


def test_default_support_grows_with_the_weight_and_keeps_the_planted_segment():
    """At W = 2·10^6 (the design's 200,000 rows, each of sampling weight 10) the default
    min_support is max(1000, 10^-3·W) = 2000, where the old max(1000, 10^-4·W) was 1000. The
    design's planted segment (5% of the rows, logit shift 0.3, fold-B Σp(1−p) ≈ 727: z ≈ 8.1)
    is found at both and is the top unexplained segment, and every segment both runs return has
    the same fold-B numbers (a segment's sums do not depend on the floor; the engine's parallel
    sums round differently run to run, within 1e-9 relative)."""
    rng = np.random.default_rng(17)
    n = 200_000
    df = pd.DataFrame({
        "f0": rng.choice(["a", "b", "c", "d"], n), "f1": rng.choice(["x", "y", "z", "v", "w"], n),
        # values 8 and 9 hold 0.075% of the rows each: weight 1,500, between the two floors
        "f2": rng.choice(10, n, p=[(1 - 0.0015) / 8] * 8 + [0.00075] * 2),
        "f3": rng.integers(0, 2, n), "p": rng.beta(2, 8, n), "w": np.full(n, 10.0)})
    star = df.f0.eq("a") & df.f1.eq("x")
    eta = np.log(df.p / (1 - df.p)) + 0.3 * star
    df["y"] = (rng.uniform(size=n) < 1 / (1 + np.exp(-eta))).astype(int)
    assert audit.default_support(df.w.sum()) == 2000.0
    kw = dict(score="p", label="y", weight="w", weight_kind="sampling", max_depth=2,
              features=["f0", "f1", "f2", "f3"])
    new = sqlcal.segments(df, **kw)
    old = sqlcal.segments(df, **kw, min_support=1000.0)
    assert json.loads(new.searched[0])["min_support"] == 2000.0
    pooled = lambda out: json.loads(out.searched[0])["pooled_values"]["f2"]  # noqa: E731
    assert (pooled(new), pooled(old)) == (2, 0)
    for out in (new, old):
        top = out[out.explained_by.isna()].iloc[0]
        assert (top.f0, top.f1, top.depth, bool(top.significant)) == ("a", "x", 2, True)
        assert abs(top.z - 8.1) <= 3.5  # the design's z, within its noise
    both = new.merge(old, on="segment", suffixes=("", "_old"))
    assert len(both) >= 10
    np.testing.assert_array_equal(both.n, both.n_old)
    np.testing.assert_array_equal(both.W, both.W_old)  # sums of whole numbers: exact
    for c in ("residual", "z", "p_value", "logit_shift"):  # two runs: the engine's rounding
        scale = np.abs(both[c + "_old"]).max()
        np.testing.assert_allclose(both[c], both[c + "_old"], rtol=1e-9, atol=1e-12 * scale)
