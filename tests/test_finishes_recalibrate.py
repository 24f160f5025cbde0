"""The recalibration fits without an engine, and their declared summaries engine by engine.

Engine-free: the levels summary is built here from raw numpy rows (a plain groupby), handed to a
source that may not query (its summaries are evaluated from the levels in pandas,
:mod:`sqlcal.query.local`), and the fits are compared with peers run on the raw rows: isotonic
regression with scikit-learn's ``IsotonicRegression`` (sample weights) and a brute-force PAV;
Platt scaling and the calibration slope with the weighted log-likelihood maximised by scipy on
the raw rows, and standard errors from the Fisher information summed over the raw rows.

With an engine: each declared summary of the fits (label ranges, Newton terms, KKT prefix
minima, grouped PAV passes) equals its local evaluation from the levels (1e-9 relative) on
random rows with ties, weights and groups; the sandwich's middle, which the levels cannot give,
equals brute-force sums over the rows.
"""

from __future__ import annotations

import ibis
import numpy as np
import pandas as pd
import pytest
from scipy import optimize, special

import sqlcal
from sqlcal.query import declared, executor, local, planner
from sqlcal.recalibration import fits

CLIP = 1e-12


# -- rows, levels and a source that only has the levels ----------------------------------------


def rows(n: int, seed: int, *, weights: str | None = None, groups: int = 0,
         decimals: int | None = None) -> pd.DataFrame:
    """Miscalibrated scores (labels from 1.4·logit(p) − 0.3), some rounded to 2 decimals (ties),
    optional groups and weights (whole numbers, or fractional)."""
    rng = np.random.default_rng(seed)
    p = rng.beta(2, 2.5, n)
    p = np.where(rng.random(n) < 0.3, np.round(p, 2), p)
    if decimals is not None:
        p = np.round(p, decimals)
    eta = 1.4 * special.logit(np.clip(p, 1e-6, 1 - 1e-6)) - 0.3
    df = pd.DataFrame({"p": p, "y": (rng.random(n) < special.expit(eta)).astype(np.int64)})
    if groups:
        df["g"] = rng.choice([f"g{i}" for i in range(groups)], n)
    if weights == "whole":
        df["w"] = rng.integers(1, 4, n).astype(float)
    elif weights == "fractional":
        df["w"] = rng.uniform(0.2, 3.0, n)
    return df


def levels_of(df: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """The levels summary of raw rows, with the validation columns the exported levels
    statement carries: a plain groupby on the keys and the score."""
    w = df["w"] if "w" in df else pd.Series(1.0, index=df.index)
    frame = df.assign(W=w, swy=w * df["y"], swp=w * df["p"], sw2=w * w, ny=df["y"], n=1,
                      chk_p_count=1, chk_y_count=1, chk_y_min=df["y"], chk_y_max=df["y"],
                      chk_w_count=1, chk_w_min=w, chk_w_max=w,
                      chk_w_frac=w - np.floor(w))
    agg = {c: "sum" for c in ("n", "W", "swy", "swp", "sw2", "ny", "chk_p_count",
                              "chk_y_count", "chk_w_count", "chk_w_frac")}
    agg |= {"chk_y_min": "min", "chk_w_min": "min", "chk_y_max": "max", "chk_w_max": "max"}
    return frame.groupby([*by, "p"], sort=True).agg(agg).reset_index()


def levels_source(df: pd.DataFrame, by: list[str] = ()) -> sqlcal.Source:
    """A source over an unbound table whose summaries come from the levels of ``df``: any query
    is an error."""
    by = list(by)
    weight = "w" if "w" in df else None
    schema = {"p": "float64", "y": "int64", **({"w": "float64"} if weight else {}),
              **{k: "string" for k in by}}
    src = sqlcal.source(ibis.table(schema, name="rows"), score="p", label="y", weight=weight,
                        by=by)
    # the summaries hold the keys under their internal names
    levels = levels_of(df, by).rename(columns=dict(zip(by, src.by)))
    executor.validate(src, levels)
    src.local_levels = levels.drop(columns=[c for c in levels if c.startswith("chk_")])
    src.forbid_queries("an engine-free test")
    return src


def parts(df: pd.DataFrame, by: list[str]):
    if not by:
        yield (), df
        return
    for key, part in df.groupby(by, sort=True):
        yield (key if isinstance(key, tuple) else (key,)), part


# -- isotonic regression ------------------------------------------------------------------------


def brute_pav(p: np.ndarray, y: np.ndarray, w: np.ndarray) -> dict:
    """Weighted PAV on raw rows, ties pooled first: distinct score -> fitted value."""
    levels = sorted(set(p.tolist()))
    blocks = []  # [sum wy, sum w, [scores]]
    for s in levels:
        mask = p == s
        blocks.append([float((w * y)[mask].sum()), float(w[mask].sum()), [s]])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] >= blocks[-1][0] / blocks[-1][1]:
            top = blocks.pop()
            blocks[-1] = [blocks[-1][0] + top[0], blocks[-1][1] + top[1], blocks[-1][2] + top[2]]
    return {s: b[0] / b[1] for b in blocks for s in b[2]}


def check_isotonic(fitted, df: pd.DataFrame, by: list[str]) -> None:
    from sklearn.isotonic import IsotonicRegression

    n_groups = 0
    for key, part in parts(df, by):
        p, y = part["p"].to_numpy(float), part["y"].to_numpy(float)
        w = part["w"].to_numpy(float) if "w" in part else np.ones(len(p))
        peer = IsotonicRegression(out_of_bounds="clip").fit(p, y, sample_weight=w)
        grid = np.unique(np.r_[p, np.linspace(p.min(), p.max(), 200), 0.0, 1.0])
        keys = dict(zip(by, key))
        np.testing.assert_allclose(fitted.transform(grid, keys), peer.predict(grid),
                                   rtol=1e-9, atol=1e-12)
        brute = brute_pav(p, y, w)
        levels = np.array(sorted(brute))
        np.testing.assert_allclose(fitted.transform(levels, keys),
                                   [brute[s] for s in levels], rtol=1e-9, atol=1e-12)
        n_groups += 1
    assert n_groups == max(1, df["g"].nunique() if by else 1)


@pytest.mark.parametrize("weights", [None, "whole", "fractional"])
@pytest.mark.parametrize("method", ["auto", "exact"])
def test_isotonic_from_levels_equals_sklearn_and_brute_force_pav(weights, method):
    df = rows(1500, seed=1, weights=weights, groups=3)
    fitted = sqlcal.isotonic(levels_source(df, ["g"]), method=method)
    assert fitted.info["exact"]
    check_isotonic(fitted, df, ["g"])


def test_isotonic_grid_from_levels_is_exact_on_three_decimal_scores():
    # scores 0.001 apart: each cell of width 2^-16 holds at most one, so the grid fit is exact
    df = rows(2000, seed=2, weights="fractional", decimals=3)
    fitted = sqlcal.isotonic(levels_source(df), method="grid")
    assert fitted.info == {"method": "grid", "exact": True, "passes": 0, "mixed_cells": 0,
                           "cells": 2**16}
    check_isotonic(fitted, df, [])


@pytest.mark.parametrize("weights", [None, "fractional"])
def test_isotonic_refined_grid_from_levels_is_exact(monkeypatch, weights):
    # above LEVEL_CAP the grid fit is refined by the KKT checks (prefix_min) and the levels of
    # the failing cells: evaluated from the levels here, with coarse cells so many are mixed
    monkeypatch.setattr(fits, "LEVEL_CAP", 50)
    df = rows(2000, seed=3, weights=weights, groups=2)
    fitted = sqlcal.isotonic(levels_source(df, ["g"]), cells=64)
    assert fitted.info["method"] == "grid, refined" and fitted.info["exact"]
    assert fitted.info["refined_cells"] > 0
    check_isotonic(fitted, df, ["g"])


@pytest.mark.parametrize("weights", [None, "whole"])
def test_isotonic_engine_passes_from_levels_are_exact(monkeypatch, weights):
    monkeypatch.setattr(fits, "LEVEL_CAP", 40)
    df = rows(1500, seed=4, weights=weights, groups=2)
    fitted = sqlcal.isotonic(levels_source(df, ["g"]), method="engine")
    assert fitted.info["passes"] >= 1
    check_isotonic(fitted, df, ["g"])


def test_pav_pass_merges_every_non_increasing_run():
    # blocks with means 0.5, 0.25, 0.75, 0.5, 0.5, 1: runs [0.5, 0.25] and [0.75, 0.5, 0.5]
    blocks = pd.DataFrame({"lo": [.1, .2, .3, .4, .5, .6], "hi": [.1, .2, .3, .4, .5, .6],
                           "n": [2, 4, 4, 2, 2, 1], "W": [2.0, 4, 4, 2, 2, 1],
                           "Y": [1.0, 1, 3, 1, 1, 1]})
    out = local.pav_pass(blocks)
    assert out[["lo", "hi"]].to_numpy().tolist() == [[.1, .2], [.3, .5], [.6, .6]]
    assert out["W"].tolist() == [6.0, 8.0, 1.0] and out["Y"].tolist() == [2.0, 5.0, 1.0]
    assert out["n"].tolist() == [6, 8, 1]


# -- logistic fits ------------------------------------------------------------------------------


def feature_of(p: np.ndarray, feature: str) -> np.ndarray:
    return p if feature == "score" else special.logit(np.clip(p, CLIP, 1 - CLIP))


def raw_fit(x, t, w, *, offset: bool = False):
    """The maximum of Σw[t ln σ(a + b·x) + (1 − t) ln(1 − σ)] on raw rows (b = 1 with
    ``offset``), by scipy's trust-region Newton on the rows, and the inverse of the Fisher
    information Σwσ(1 − σ)·(1, x)(1, x)ᵀ at it."""
    def design(theta):
        return theta[0] + (x if offset else theta[1] * x)

    def nll(theta):
        eta = design(theta)
        return -np.sum(w * (t * special.log_expit(eta) + (1 - t) * special.log_expit(-eta)))

    def grad(theta):
        r = w * (t - special.expit(design(theta)))
        return -np.array([r.sum()] if offset else [r.sum(), (r * x).sum()])

    def hess(theta):
        mu = special.expit(design(theta))
        h = w * mu * (1 - mu)
        return (np.array([[h.sum()]]) if offset else
                np.array([[h.sum(), (h * x).sum()], [(h * x).sum(), (h * x * x).sum()]]))

    start = np.zeros(1) if offset else np.array([0.0, 1.0])
    fit = optimize.minimize(nll, start, jac=grad, hess=hess, method="trust-exact",
                            options={"gtol": 1e-12})
    assert np.max(np.abs(grad(fit.x))) < 1e-7 * max(1.0, w.sum())
    return fit.x, np.linalg.inv(hess(fit.x))


@pytest.mark.parametrize("weights", [None, "whole", "fractional"])
@pytest.mark.parametrize("feature", ["logit", "score"])
@pytest.mark.parametrize("smoothed", [True, False])
def test_platt_from_levels_equals_the_raw_rows_maximum_likelihood(weights, feature, smoothed):
    df = rows(1200, seed=5, weights=weights, groups=2)
    fitted = sqlcal.platt(levels_source(df, ["g"]), feature=feature, smoothed_targets=smoothed)
    table = fitted.table.set_index("g")
    for (g,), part in parts(df, ["g"]):
        p, y = part["p"].to_numpy(float), part["y"].to_numpy(float)
        w = part["w"].to_numpy(float) if "w" in part else np.ones(len(p))
        t = y
        if smoothed:  # Platt's targets, with Kish's effective counts for fractional weights
            scale = w.sum() / (w * w).sum() if weights == "fractional" else 1.0
            pos, total = (w * y).sum() * scale, w.sum() * scale
            t = np.where(y > 0, (pos + 1) / (pos + 2), 1 / (total - pos + 2))
        theta, _ = raw_fit(feature_of(p, feature), t, w)
        np.testing.assert_allclose([table.loc[g, "a"], table.loc[g, "b"]], theta, rtol=1e-8,
                                   atol=1e-10)


def test_platt_newton_in_the_engine_path_from_levels_agrees(monkeypatch):
    # above LEVEL_CAP the Newton steps are declared summaries (started from the cell histogram):
    # evaluated from the levels here, they reach the same maximum
    df = rows(1500, seed=6, weights="fractional", groups=2)
    small = sqlcal.platt(levels_source(df, ["g"]), smoothed_targets=False).table
    monkeypatch.setattr(fits, "LEVEL_CAP", 10)
    large = sqlcal.platt(levels_source(df, ["g"]), smoothed_targets=False).table
    np.testing.assert_allclose(large[["a", "b"]].to_numpy(), small[["a", "b"]].to_numpy(),
                               rtol=1e-10)


@pytest.mark.parametrize("weights", [None, "whole"])
def test_calibration_slope_from_levels_equals_the_raw_rows_fit(weights):
    df = rows(1500, seed=7, weights=weights, groups=3)
    got = sqlcal.calibration_slope(levels_source(df, ["g"])).set_index("g")
    for (g,), part in parts(df, ["g"]):
        p, y = part["p"].to_numpy(float), part["y"].to_numpy(float)
        w = part["w"].to_numpy(float) if "w" in part else np.ones(len(p))
        x = feature_of(p, "logit")
        (a, b), cov = raw_fit(x, y, w)
        (a1,), cov1 = raw_fit(x, y, w, offset=True)
        row = got.loc[g]
        np.testing.assert_allclose(
            [row.slope, row.joint_intercept, row.slope_se, row.intercept, row.intercept_se],
            [b, a, np.sqrt(cov[1, 1]), a1, np.sqrt(cov1[0, 0])], rtol=1e-7)
        assert row.weight_kind == "frequency"


@pytest.mark.parametrize("weights", [None, "fractional"])
def test_modified_platt_from_levels_cutoff_error_by_brute_force_over_intervals(weights):
    # the in-sample cutoff error of the mapped scores: the largest |Σ w(y − f)| over every
    # interval of mapped values, enumerated here row by row, over W
    df = rows(240, seed=10, weights=weights, groups=2, decimals=2)
    fitted = sqlcal.platt(levels_source(df, ["g"]), modified=True, epsilon=0.05)
    table = fitted.table.set_index("g")
    for (g,), part in parts(df, ["g"]):
        p, y = part["p"].to_numpy(float), part["y"].to_numpy(float)
        w = part["w"].to_numpy(float) if "w" in part else np.ones(len(p))
        row = table.loc[g]
        f = special.expit(row.a + row.b * feature_of(p, "logit"))
        values = np.unique(f)
        best = 0.0
        for i, lo in enumerate(values):
            for hi in values[i:]:
                inside = (f >= lo) & (f <= hi)
                best = max(best, abs(float((w * (y - f))[inside].sum())))
        assert row.cutoff_error == pytest.approx(best / w.sum(), rel=1e-9, abs=1e-15)
        assert np.isnan(row.constant) == (row.cutoff_error <= 0.05)


def test_separated_labels_from_levels_give_nan_with_a_warning():
    # group a: every positive above every negative; group b: overlapping labels
    df = pd.DataFrame({"p": [.1, .2, .3, .6, .7, .2, .4, .5, .6, .8],
                       "y": [0, 0, 0, 1, 1, 0, 1, 0, 1, 1],
                       "g": ["a"] * 5 + ["b"] * 5})
    with pytest.warns(RuntimeWarning, match="group \\('a',\\).*separates its labels"):
        got = sqlcal.calibration_slope(levels_source(df, ["g"])).set_index("g")
    assert np.isnan(got.loc["a", "slope"]) and np.isfinite(got.loc["b", "slope"])
    # with the slope fixed at 1 the intercept exists: the offset fit is not separated
    assert np.isfinite(got.loc["a", "intercept"])


def test_label_ranges_from_levels_by_hand():
    df = pd.DataFrame({"p": [.1, .2, .2, .9, .5], "y": [0, 1, 0, 1, 1],
                       "w": [1.0, 2.0, 0.5, 1.0, 0.0], "g": ["a", "a", "a", "a", "b"]})
    got = local.evaluate(declared.label_ranges(), levels_of(df, ["g"]), ["g"]).set_index("g")
    assert got.loc["a"].tolist() == [4, .1, .9, 3.0, 1.5, .2, .9, .1, .2]
    # group b's only row weighs nothing: no mass, no range
    assert got.loc["b", ["pos_mass", "neg_mass"]].tolist() == [0.0, 0.0]
    assert got.loc["b", ["pos_min", "neg_max"]].isna().all()


# -- the engine's summaries equal their local evaluation -----------------------------------------


def compare(got: pd.DataFrame, want: pd.DataFrame, keys: list[str]) -> None:
    got = got.sort_values(keys, ignore_index=True)
    want = want.sort_values(keys, ignore_index=True)
    assert len(got) == len(want) and len(want)
    # an unweighted source's frame has W = Σw² = n filled in besides
    assert set(got.columns) <= set(want.columns) <= set(got.columns) | {"W", "sw2"}
    for c in keys:
        assert got[c].tolist() == want[c].tolist(), c
    for c in got.columns.difference(keys):
        a, b = got[c].to_numpy(float), want[c].to_numpy(float)
        scale = np.nanmax(np.abs(b)) if np.isfinite(b).any() else 1.0
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12 * scale, err_msg=c)


def summaries_of(df: pd.DataFrame, weights: str | None) -> list:
    """Every recalibration summary with a local evaluation, at data-dependent parameters."""
    groups = sorted(df["g"].unique())
    coefficients = [((g,), 0.1 * i - 0.2, 1.3 - 0.2 * i, 0.98, 0.01 * i)
                    for i, g in enumerate(groups)]
    cells = 16
    ranges = [((g,), c / cells, (c + 1) / cells, 0.3 + 0.1 * c / cells)
              for g in groups[:2] for c in (0, 5, 9, 15)]
    integer = weights is None
    return [declared.label_ranges(),
            declared.logistic_terms("logit", CLIP, False, coefficients),
            declared.logistic_terms("score", CLIP, True, coefficients[1:]),
            declared.prefix_min(cells, ranges),
            *[declared.pav_count(k, integer) for k in (0, 1, 3)],
            *[declared.pav_blocks(k, integer) for k in (0, 2)]]


@pytest.mark.parametrize("weights", [None, "whole", "fractional"])
def test_engine_summaries_equal_their_local_evaluation(con, upload, weights):
    df = rows(2500, seed=8, weights=weights, groups=3)
    # scores at 0 and 1 (the last cell holds p = 1) and a saturated σ on the wrong side (not
    # 1e-300: PostgreSQL raises on a product that underflows, as h·x·x of the score feature)
    df.loc[:9, "p"] = [0.0, 0.0, 1.0, 1.0, 1.0, 1e-9, 0.999, 0.5, 0.5, 0.5]
    src = sqlcal.source(upload(df), score="p", label="y", by="g",
                        weight="w" if weights else None)
    levels = levels_of(df, ["g"])
    for summary in summaries_of(df, weights):
        engine = src.present(planner.fetch(src, summary))  # the key under its name
        keys = ["g", *([summary.key_column] if summary.key_column else [])]
        compare(local.evaluate(summary, levels, ["g"]), engine[[*keys, *[
            c for c in engine.columns if c not in keys]]], keys)


@pytest.mark.parametrize("offset", [False, True])
def test_engine_sandwich_middle_equals_brute_force(con, upload, offset):
    df = rows(1500, seed=9, weights="fractional", groups=2)
    src = sqlcal.source(upload(df), score="p", label="y", by="g", weight="w")
    coefficients = [(("g0",), 0.2, 1.1), (("g1",), -0.4, 0.7)]
    planner.fetch(src, declared.totals())  # the first scan validates (a fit reads it first)
    got = planner.fetch(src, declared.logistic_meat("logit", CLIP, offset, coefficients))
    got = src.present(got).set_index("g")
    for (g,), a, b in coefficients:
        part = df[df.g == g]
        x = feature_of(part["p"].to_numpy(float), "logit")
        mu = special.expit(a + (1.0 if offset else b) * x)
        e2 = (part["w"].to_numpy(float) * (part["y"].to_numpy(float) - mu)) ** 2
        np.testing.assert_allclose(got.loc[g, ["m00", "m01", "m11"]].to_numpy(float),
                                   [e2.sum(), (e2 * x).sum(), (e2 * x * x).sum()], rtol=1e-9)


# -- no query outside the query layer ------------------------------------------------------------


@pytest.mark.parametrize("module", ["recalibration/fits.py", "query/layouts.py"])
def test_the_fits_and_multiclass_build_and_run_no_query(module):
    # every query is a declared summary fetched through the planner: these modules import no
    # Ibis at run time, nor the reductions, and call no execute/scan/run/summary of a source
    import ast
    import pathlib

    path = pathlib.Path(sqlcal.__file__).parent / module
    tree = ast.parse(path.read_text())
    typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                   and "TYPE_CHECKING" in ast.unparse(node.test) for n in ast.walk(node)}
    imported = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            imported |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
    assert not {m for m in imported if m == "ibis" or m.startswith("ibis.")}, imported
    assert "sqlcal.query.reductions" not in imported or module == "query/layouts.py"
    calls = {node.func.attr for node in ast.walk(tree)
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)}
    assert not calls & {"execute", "scan", "to_pyarrow", "to_pandas", "cache", "aggregate",
                        "group_by", "mutate", "select", "filter"}, calls & {
        "execute", "scan", "to_pyarrow", "to_pandas", "cache", "aggregate", "group_by",
        "mutate", "select", "filter"}
    assert "summary" not in calls and "run" not in calls
