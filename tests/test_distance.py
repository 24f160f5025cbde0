"""The Lipschitz calibration error, the distances to calibration and the interval calibration
error against independent references: LPs written here for scipy's HiGHS (the smCE primal, the
transport LP on [0,1]×{0,1} for EMD, the coupling LP for the lower distance), brute force over
groupings, the spec's hand-derived fixtures (seed002 §5, seed000 §3.3), and the inequalities of
seed002 §3 as properties."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from scipy.optimize import linprog

from sqlcal.metrics import distance
from sqlcal.metrics.distance import (
    distance_to_calibration,
    interval_calibration_error,
    lipschitz_calibration_error,
)
from tests.conftest import calibration_data

LP_TOL = 1e-7


def smce(t, **kw):
    return lipschitz_calibration_error(t, score="p", label="y", **kw)


def dist(t, **kw):
    return distance_to_calibration(t, score="p", label="y", **kw)


def intce(t, **kw):
    return interval_calibration_error(t, score="p", label="y", **kw)


# -- references, from the raw rows -------------------------------------------------------------


def level_table(p, y, w=None):
    """Distinct scores v, and per score the normalised mass n, label mass s, residual R."""
    p, y = np.asarray(p, float), np.asarray(y, float)
    w = np.ones(len(p)) if w is None else np.asarray(w, float)
    v, inv = np.unique(p, return_inverse=True)
    n, s = np.bincount(inv, w), np.bincount(inv, w * y)
    keep = n > 0
    W = w.sum()
    v, n, s = v[keep], n[keep] / W, s[keep] / W
    return v, n, s, s - n * v


def smce_primal(p, y, w=None, K=1.0):
    """max Σ R_j z_j, |z_j| ≤ 1, |z_{j+1} − z_j| ≤ K(v_{j+1} − v_j), as a dense LP."""
    v, _, _, R = level_table(p, y, w)
    m = len(v)
    A = np.zeros((2 * (m - 1), m))
    for j in range(m - 1):
        A[2 * j, j], A[2 * j, j + 1] = -1, 1
        A[2 * j + 1, j], A[2 * j + 1, j + 1] = 1, -1
    b = np.repeat(K * np.diff(v), 2)
    out = linprog(-R, A_ub=A if m > 1 else None, b_ub=b if m > 1 else None, bounds=(-1, 1),
                  method="highs")
    return -out.fun


def emd_transport(p, y, w=None):
    """EMD between J* (mass s_j at (v_j, 1), n_j − s_j at (v_j, 0)) and J^p (n_j·v_j at (v_j, 1),
    n_j(1 − v_j) at (v_j, 0)) under |v − v'| + |y − y'|: the transport LP."""
    v, n, s, _ = level_table(p, y, w)
    points = [(vj, lab) for vj in v for lab in (0, 1)]
    supply = np.array([mass for j in range(len(v)) for mass in (n[j] - s[j], s[j])])
    demand = np.array([mass for j in range(len(v)) for mass in (n[j] * (1 - v[j]), n[j] * v[j])])
    k = len(points)
    cost = np.array([[abs(a[0] - b[0]) + abs(a[1] - b[1]) for b in points] for a in points])
    A = np.zeros((2 * k, k * k))
    for i in range(k):
        A[i, i * k:(i + 1) * k] = 1
        A[k + i, i::k] = 1
    out = linprog(cost.ravel(), A_eq=A, b_eq=np.r_[supply, demand], bounds=(0, None),
                  method="highs")
    return out.fun


def lower_lp(p, y, w=None, grid=128):
    """min Σ|u − v|·π over couplings π of (u, v, y) with (v, y) ~ J* and E[y | u] = u, u on
    {k/grid} ∪ {v_j} (BGHN23's characterisation), written with dense matrices."""
    v, n, s, _ = level_table(p, y, w)
    U = np.union1d(np.arange(grid + 1) / grid, v)
    m, k = len(v), len(U)
    # variables x[j, u, lab]: mass of label lab from level j sent to u
    idx = lambda j, u, lab: (j * k + u) * 2 + lab
    N = m * k * 2
    c, rows, rhs = np.zeros(N), [], []
    for j, u, lab in itertools.product(range(m), range(k), (0, 1)):
        c[idx(j, u, lab)] = abs(U[u] - v[j])
    for j, lab in itertools.product(range(m), (0, 1)):
        row = np.zeros(N)
        row[[idx(j, u, lab) for u in range(k)]] = 1
        rows.append(row)
        rhs.append(s[j] if lab else n[j] - s[j])
    for u in range(k):
        row = np.zeros(N)
        for j in range(m):
            row[idx(j, u, 1)] = 1 - U[u]
            row[idx(j, u, 0)] = -U[u]
        rows.append(row)
        rhs.append(0.0)
    out = linprog(c, A_eq=np.array(rows), b_eq=np.array(rhs), bounds=(0, None), method="highs")
    return out.fun


def partitions(items):
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for smaller in partitions(rest):
        for i in range(len(smaller)):
            yield smaller[:i] + [[first] + smaller[i]] + smaller[i + 1:]
        yield [[first]] + smaller


def upper_brute(p, y, w=None, contiguous=False):
    """min over groupings of the levels of Σ n_j |v_j − ȳ_G| (Theorem 6.6), by enumeration."""
    v, n, s, _ = level_table(p, y, w)
    m = len(v)
    if contiguous:
        groupings = []
        for cuts in itertools.product([0, 1], repeat=m - 1):
            g, cur = [], [0]
            for j, cut in enumerate(cuts, start=1):
                if cut:
                    g.append(cur)
                    cur = []
                cur.append(j)
            groupings.append(g + [cur])
    else:
        groupings = partitions(list(range(m)))
    best = np.inf
    for g in groupings:
        cost = sum(n[j] * abs(v[j] - s[G].sum() / n[G].sum()) for G in map(list, g) for j in G)
        best = min(best, cost)
    return best


def intce_brute(p, y, w=None):
    """min over contiguous groupings of Σ_G |Σ R| + the widest group's score span."""
    v, _, _, R = level_table(p, y, w)
    m, best = len(v), np.inf
    for cuts in itertools.product([0, 1], repeat=m - 1):
        starts = [0] + [j for j, c in enumerate(cuts, start=1) if c] + [m]
        ce = sum(abs(R[a:b].sum()) for a, b in itertools.pairwise(starts))
        width = max(v[b - 1] - v[a] for a, b in itertools.pairwise(starts))
        best = min(best, ce + width)
    return best


def ece_levels(p, y, w=None):
    return np.abs(level_table(p, y, w)[3]).sum()


def random_rows(rng, m, rows=12, weights=False):
    levels = np.sort(rng.choice(np.arange(1, 40) / 40, m, replace=False))
    p = rng.choice(levels, rows)
    p[:m] = levels
    df = pd.DataFrame({"p": p, "y": (rng.random(rows) < rng.random()).astype(float)})
    if weights:
        df["w"] = rng.choice([0.5, 1.0, 2.0, 3.0], rows)
    return df


# -- against LPs -------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(6))
def test_lipschitz_error_equals_the_primal_lp_and_emd_the_transport_lp(upload, seed):
    rng = np.random.default_rng(seed)
    df = random_rows(rng, m=int(rng.integers(1, 8)), weights=True)
    t = upload(df)
    args = (df.p, df.y, df.w)
    got = smce(t, weight="w").iloc[0]
    assert got.quantization_bound == 0
    assert abs(got.lipschitz_calibration_error - smce_primal(*args)) < LP_TOL
    emd = smce(t, weight="w", lipschitz=2).iloc[0].lipschitz_calibration_error
    assert abs(emd - emd_transport(*args)) < LP_TOL
    assert abs(emd - smce_primal(*args, K=2)) < LP_TOL
    half = smce(t, weight="w", lipschitz=0.5).iloc[0].lipschitz_calibration_error
    assert abs(half - smce_primal(*args, K=0.5)) < LP_TOL


def test_lipschitz_dp_equals_the_lp_on_many_instances():
    # the dynamic programme alone (no engine), on instances with every sign pattern and scale
    rng = np.random.default_rng(7)
    for _ in range(400):
        m = int(rng.integers(1, 15))
        df = random_rows(rng, m, rows=m)
        df["y"] = rng.random(m) * rng.choice([0.1, 1.0])  # soft labels: any residuals
        v, _, _, R = level_table(df.p, df.y)
        for K in (1.0, 3.0):
            got = distance._lipschitz_dp(R, K * np.diff(v))
            assert abs(got - smce_primal(df.p, df.y, K=K)) < LP_TOL


def test_lipschitz_dp_equals_the_lp_on_a_thousand_levels():
    rng = np.random.default_rng(8)
    p = np.sort(rng.random(1000))
    y = (rng.random(1000) < p ** 1.3).astype(float)
    v, _, _, R = level_table(p, y)
    assert abs(distance._lipschitz_dp(R, np.diff(v)) - smce_primal(p, y)) < LP_TOL


def test_bad_options_are_errors(upload):
    t = upload(pd.DataFrame({"p": [0.2, 0.4], "y": [0.0, 1.0]}))
    with pytest.raises(ValueError, match="method"):
        smce(t, method="fast")
    with pytest.raises(ValueError, match="lipschitz"):
        smce(t, lipschitz=0)
    with pytest.raises(ValueError, match="grid"):
        dist(t, grid=0)


@pytest.mark.parametrize("seed", range(3))
def test_lower_distance_equals_the_coupling_lp(upload, seed):
    rng = np.random.default_rng(10 + seed)
    df = random_rows(rng, m=int(rng.integers(2, 6)), weights=True)
    got = dist(upload(df), weight="w", grid=16).iloc[0]
    assert abs(got.lower_distance - lower_lp(df.p, df.y, df.w, grid=16)) < LP_TOL
    # half the widest grid gap: on a finer grid the value moves down by at most that
    fine = lower_lp(df.p, df.y, df.w, grid=256)
    assert fine - LP_TOL <= got.lower_distance <= fine + got.lower_tolerance + LP_TOL


@pytest.mark.parametrize("seed", range(3))
def test_upper_distance_is_the_best_grouping(upload, seed, monkeypatch):
    rng = np.random.default_rng(20 + seed)
    df = random_rows(rng, m=6, rows=20)
    t = upload(df)
    got = dist(t).iloc[0]
    assert abs(got.upper_distance - upper_brute(df.p, df.y)) < 1e-12
    monkeypatch.setattr(distance, "PARTITION_LEVELS", 0)
    assert dist(t).iloc[0].upper_distance >= upper_brute(df.p, df.y) - 1e-12
    monkeypatch.setattr(distance, "REGROUP_GROUPS", 0)
    got = dist(t).iloc[0]
    assert got.upper_method in ("contiguous", "ece", "mean")
    assert abs(got.upper_distance - upper_brute(df.p, df.y, contiguous=True)) < 1e-12


@pytest.mark.parametrize("seed", range(3))
def test_interval_error_exact_and_within_twice(upload, seed, monkeypatch):
    rng = np.random.default_rng(30 + seed)
    df = random_rows(rng, m=7, rows=25)
    t = upload(df)
    want = intce_brute(df.p, df.y)
    got = intce(t).iloc[0]
    assert got.method == "exact"
    assert abs(got.interval_calibration_error - want) < 1e-12
    assert abs(got.binned_error + got.width - want) < 1e-12
    monkeypatch.setattr(distance, "INTERVAL_LEVELS", 0)
    approx = intce(t).iloc[0]
    assert approx.method == "geometric widths"
    assert want - 1e-12 <= approx.interval_calibration_error <= 2 * want + 1e-12


def test_fixed_bins(upload):
    df = calibration_data(300, seed=4, weights=True)
    got = intce(upload(df), weight="w", bins=7).iloc[0]
    b = np.minimum(np.floor(df.p * 7), 6).astype(int)
    ce = np.abs(np.bincount(b, df.w * (df.y - df.p))).sum() / df.w.sum()
    assert got.method == "fixed bins" and got.width == 1 / 7
    assert abs(got.binned_error - ce) < 1e-12
    assert abs(got.interval_calibration_error - ce - 1 / 7) < 1e-12


# -- the spec's fixtures -----------------------------------------------------------------------


def everything(t, **kw):
    """smCE, EMD, lower, upper and intCE of a table, with the lower LP's tolerance."""
    d = dist(t, **kw).iloc[0]
    return {"smce": smce(t, **kw).iloc[0].lipschitz_calibration_error,
                "emd": smce(t, lipschitz=2, **kw).iloc[0].lipschitz_calibration_error,
                "lower": d.lower_distance, "tolerance": d.lower_tolerance, "upper": d.upper_distance,
                "method": d.upper_method, "intce": intce(t, **kw).iloc[0].interval_calibration_error,
                "abs_citl": d.abs_citl}


def check(got, **want):
    for name, value in want.items():
        # the lower LP lies in [lower, lower + tolerance]; everything else is exact
        if name == "lower":
            assert value - LP_TOL <= got["lower"] <= value + got["tolerance"] + LP_TOL, name
        else:
            assert abs(got[name] - value) < LP_TOL, (name, got[name], value)


@pytest.mark.parametrize("eps", [0.1, 0.01, 0.2])
def test_fixture_a(upload, eps):
    # seed002 §5 Fixture A: (1/2 − ε, 0), (1/2 + ε, 1)
    t = upload(pd.DataFrame({"p": [0.5 - eps, 0.5 + eps], "y": [0.0, 1.0]}))
    got = everything(t)
    check(got, smce=eps * (1 - 2 * eps) / 2, emd=eps * (1 - 2 * eps),
          lower=eps * (1 - 2 * eps), upper=min(eps, 0.5 - eps),
          intce=min(2 * eps, 0.5 - eps), abs_citl=0.0)
    # the LP places mass at the levels and the grid: here the optimum is on it, so exact
    assert abs(got["lower"] - eps * (1 - 2 * eps)) < LP_TOL


@pytest.mark.parametrize("eps, lower", [(0.1, 0.025), (0.2, 2 * 0.2 / 3)])
def test_fixture_b(upload, eps, lower):
    d = eps / (1 - 2 * eps)
    t = upload(pd.DataFrame({"p": [0.5 - d] * 2 + [0.5 + d] * 2, "y": [1.0, 0, 1, 0]}))
    check(everything(t), smce=d * d, emd=2 * d * d, lower=lower, upper=d, intce=d)


def test_fixture_c(upload):
    t = upload(pd.DataFrame({"p": [0.5] * 10, "y": [1.0] * 6 + [0.0] * 4}))
    check(everything(t), smce=0.1, emd=0.1, lower=0.1, upper=0.1, intce=0.1, abs_citl=0.1)


def test_fixture_d_discretized_with_weights(upload):
    eps, K = 0.1, 20
    v = eps + (np.arange(K) + 0.5) * (1 - eps) / K
    df = pd.DataFrame({"p": np.r_[v, v], "y": np.r_[np.ones(K), np.zeros(K)],
                       "w": np.r_[v - eps, 1 - (v - eps)]})
    check(everything(upload(df), weight="w"), smce=eps, emd=eps, lower=eps, upper=eps,
          intce=eps, abs_citl=eps)


@pytest.mark.parametrize("weighted", [False, True])
def test_fixture_e(upload, weighted):
    if weighted:
        df = pd.DataFrame({"p": [0.1, 0.1, 0.6, 0.6, 0.7], "y": [1.0, 0, 1, 0, 0],
                           "w": [2.0, 8, 5, 5, 10]})
    else:
        df = pd.DataFrame({"p": [0.1] * 10 + [0.6] * 10 + [0.7] * 10,
                           "y": [1.0] * 2 + [0.0] * 8 + [1.0] * 5 + [0.0] * 5 + [0.0] * 10})
    kw = {"weight": "w"} if weighted else {}
    t = upload(df)
    got = everything(t, **kw)
    # the upper distance 7/30 needs the non-contiguous grouping {0.1, 0.7}, {0.6}
    check(got, smce=0.25, emd=4 / 15, lower=7 / 30, upper=7 / 30, intce=0.3, abs_citl=7 / 30)
    assert got["method"] == "partitions"


@pytest.mark.parametrize("weighted", [False, True])
def test_fixture_e_without_the_exact_search(upload, weighted, monkeypatch):
    # the best contiguous grouping gives 0.3 (spec §5 E); merging {0.1} with {0.7} gives 7/30
    df = pd.DataFrame({"p": [0.1, 0.1, 0.6, 0.6, 0.7], "y": [1.0, 0, 1, 0, 0],
                       "w": [2.0, 8, 5, 5, 10]})
    if not weighted:
        df = df.loc[df.index.repeat(df.w.astype(int))].drop(columns="w")
    kw = {"weight": "w"} if weighted else {}
    t = upload(df)
    monkeypatch.setattr(distance, "PARTITION_LEVELS", 0)
    got = dist(t, **kw).iloc[0]
    assert got.upper_method == "regrouped" and abs(got.upper_distance - 7 / 30) < 1e-12
    monkeypatch.setattr(distance, "REGROUP_GROUPS", 0)
    got = dist(t, **kw).iloc[0]
    assert got.upper_method in ("contiguous", "ece") and abs(got.upper_distance - 0.3) < 1e-12


def test_single_level(upload):
    # mini-check: one level set (0.3, ȳ = 0.1): every measure is |ȳ − v| = 0.2
    t = upload(pd.DataFrame({"p": [0.3] * 10, "y": [1.0] + [0.0] * 9}))
    check(everything(t), smce=0.2, emd=0.2, lower=0.2, upper=0.2, intce=0.2, abs_citl=0.2)


@pytest.mark.parametrize("seed", range(4))
def test_two_levels_closed_form(upload, seed):
    rng = np.random.default_rng(40 + seed)
    v = np.sort(rng.choice(np.arange(1, 20) / 20, 2, replace=False))
    ybar = rng.choice(np.arange(0, 11) / 10, 2)
    df = pd.DataFrame({"p": np.repeat(v, 10), "y": np.r_[np.arange(10) < 10 * ybar[0],
                                                         np.arange(10) < 10 * ybar[1]] * 1.0})
    R = (ybar - v) / 2
    if R[0] * R[1] >= 0:
        want = abs(R.sum())
    else:
        want = abs(abs(R[0]) - abs(R[1])) + min(abs(R[0]), abs(R[1])) * min(v[1] - v[0], 2)
    got = smce(upload(df)).iloc[0].lipschitz_calibration_error
    assert abs(got - want) < 1e-12


@pytest.mark.parametrize("sign", [1, -1])
def test_one_sided_miscalibration_pins_every_measure(upload, sign):
    rng = np.random.default_rng(50)
    p = rng.choice(np.arange(1, 10) / 10, 60)
    y = np.clip(p + sign * rng.choice([0.0, 0.05, 0.1], 60), 0, 1)  # soft labels, one sign
    df = pd.DataFrame({"p": p, "y": y})
    got = everything(upload(df), soft_labels=True)
    want = abs((y - p).mean())
    check(got, smce=want, emd=want, lower=want, upper=want, intce=want, abs_citl=want)


def test_platt_counterexample_of_seed000(upload):
    # seed000 §3.3 (Fig. 4): h∘f at four equally likely atoms, labels (1, 0, 0, 1)
    h = [0.39991861, 0.45683758, 0.51490641, 0.62833740]
    t = upload(pd.DataFrame({"p": h, "y": [1.0, 0, 0, 1]}))
    assert abs(smce(t).iloc[0].lipschitz_calibration_error - 0.02115802) < 1e-7
    # with X = f(X) the distance is the upper distance: 0.07162190, by partition enumeration
    assert abs(dist(t).iloc[0].upper_distance - 0.07162190) < 1e-7


# -- large data: cells -------------------------------------------------------------------------


def test_cells_within_their_bound(upload):
    df = calibration_data(3000, seed=5, weights=True)
    t = upload(df)
    exact = smce(t, weight="w", method="exact").iloc[0]
    cells = smce(t, weight="w", method="grid").iloc[0]
    auto = smce(t, weight="w", max_levels=100).iloc[0]
    assert exact.quantization_bound == 0 and exact.n_levels == 3000
    assert 0 < cells.quantization_bound < 2**-15
    assert abs(cells.lipschitz_calibration_error - exact.lipschitz_calibration_error) \
        <= cells.quantization_bound
    assert auto.n_levels == cells.n_levels
    assert smce(t, weight="w").iloc[0].quantization_bound == 0  # auto reads the levels here
    d_exact = dist(t, weight="w", method="exact").iloc[0]
    d_cells = dist(t, weight="w", method="grid").iloc[0]
    # the certified brackets of the lower distance overlap, and each upper bound is valid
    assert d_cells.lower_distance - d_cells.lower_tolerance <= \
        d_exact.lower_distance + d_exact.lower_quantization + LP_TOL
    assert d_exact.lower_distance - d_exact.lower_tolerance <= \
        d_cells.lower_distance + d_cells.lower_quantization + LP_TOL
    assert d_cells.lower_quantization >= d_cells.quantization_bound
    for d in (d_exact, d_cells):
        assert d.lower_distance - d.lower_tolerance <= d.upper_distance
    assert intce(t, weight="w", method="grid").iloc[0].method == "bucketed"


# -- properties --------------------------------------------------------------------------------


def examples(con) -> settings:
    return settings(max_examples=2 if con.name == "pyspark" else 12, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


@st.composite
def predictions(draw, max_rows=30):
    n = draw(st.integers(2, max_rows))
    tied = draw(st.booleans())
    score = (st.sampled_from([0.0, 0.1, 0.25, 0.3, 0.5, 0.7, 0.9, 1.0]) if tied
             else st.floats(0.001, 0.999))
    rows = draw(st.lists(st.tuples(score, st.integers(0, 1), st.integers(0, 3),
                                   st.sampled_from(["a", "b"])), min_size=n, max_size=n))
    df = pd.DataFrame(rows, columns=["p", "y", "w", "g"])
    df["w"] = df.w.astype(float)
    df["y"] = df.y.astype(float)
    if not (df.w > 0).any():  # a table of weight 0 has no rows to measure: tested elsewhere
        df.loc[0, "w"] = 1.0
    return df


VALUES = [(lipschitz_calibration_error, {}, ["lipschitz_calibration_error"]),
          (lipschitz_calibration_error, {"lipschitz": 2}, ["lipschitz_calibration_error"]),
          (distance_to_calibration, {"grid": 16}, ["lower_distance", "upper_distance", "abs_citl"]),
          (interval_calibration_error, {}, ["interval_calibration_error"]),
          (interval_calibration_error, {"bins": 4}, ["interval_calibration_error"])]


def by_group(metric, opts, cols, t, **kw):
    return metric(t, score="p", label="y", by="g", **opts, **kw).set_index("g")[cols]


def test_inequalities_of_section_3(con, upload):
    examples(con)(given(df=predictions())(lambda df: _inequalities(upload, df)))()


def _inequalities(upload, df):
    assume(df.w.sum() > 0)
    t = upload(df)
    s = smce(t, weight="w").iloc[0].lipschitz_calibration_error
    emd = smce(t, weight="w", lipschitz=2).iloc[0].lipschitz_calibration_error
    d = dist(t, weight="w", grid=32).iloc[0]
    i = intce(t, weight="w").iloc[0].interval_calibration_error
    ece = ece_levels(df.p, df.y, df.w)
    tol = 1e-9
    assert d.abs_citl - tol <= s <= ece + tol
    assert emd / 2 - tol <= s <= emd + tol
    lower_min = d.lower_distance - d.lower_tolerance
    lower_max = d.lower_distance + d.lower_quantization
    assert s / 2 - LP_TOL <= lower_max and lower_min <= 2 * s + LP_TOL
    assert d.abs_citl - LP_TOL <= lower_max
    assert lower_min <= d.upper_distance + LP_TOL
    assert d.upper_distance <= min(ece, i) + tol
    # Lemma 6.13 and Theorem 6.9: intCE, hence the upper distance, is ≤ 4·sqrt(lower distance)
    assert i <= 4 * np.sqrt(max(lower_max, 0.0)) + LP_TOL
    if df[df.w > 0].p.nunique() <= 6:  # the upper bound is valid: at least the exact value
        exact = upper_brute(df.p, df.y, df.w)
        assert exact - tol <= d.upper_distance and lower_min <= exact + LP_TOL


def test_weights_equal_row_duplication(con, upload):
    examples(con)(given(df=predictions())(lambda df: _duplication(upload, df)))()


def _duplication(upload, df):
    expanded = df.loc[df.index.repeat(df.w.astype(int))].drop(columns="w")
    assume(len(expanded) > 0)
    weighted, plain = upload(df), upload(expanded)
    for metric, opts, cols in VALUES:
        got = by_group(metric, opts, cols, weighted, weight="w")
        want = by_group(metric, opts, cols, plain)
        np.testing.assert_allclose(got.loc[want.index].to_numpy(float), want.to_numpy(float),
                                   rtol=1e-9, atol=1e-9)
        assert got.drop(index=want.index)[cols[0]].isna().all()  # weight 0: NULL, not 0


def test_group_by_equals_filtering(con, upload):
    examples(con)(given(df=predictions())(lambda df: _filtering(upload, df)))()


def _filtering(upload, df):
    t = upload(df)
    parts = {g: upload(df[df.g == g]) for g in df.g.unique()}  # once, for every metric
    for metric, opts, cols in VALUES:
        grouped = by_group(metric, opts, cols, t, weight="w")
        for g in grouped.index:
            alone = metric(parts[g], score="p", label="y", weight="w", **opts)
            np.testing.assert_allclose(grouped.loc[[g]].to_numpy(float),
                                       alone[cols].to_numpy(float), rtol=1e-9, atol=1e-9)


def test_a_group_of_zero_weights_is_absent(upload):
    # a row of weight 0 is an absent row: group b, all of weight 0, is no group
    df = pd.DataFrame({"p": [0.2, 0.4, 0.6], "y": [0.0, 1, 1], "w": [1.0, 0, 0],
                       "g": ["a", "b", "b"]})
    t, kept = upload(df), upload(df[df.w > 0])
    for metric, opts, cols in VALUES:
        got = by_group(metric, opts, cols, t, weight="w")
        want = by_group(metric, opts, cols, kept, weight="w")
        assert list(got.index) == ["a"]
        np.testing.assert_allclose(got.to_numpy(float), want.to_numpy(float), rtol=1e-12)


def test_groups_read_only_their_own_mixed_cells(upload):
    # 0.5 and 0.5 + 1e-9 share a score cell: mixed in group b, a single score in group a, so
    # "auto" reads that cell's levels for b only
    df = pd.DataFrame({"p": [0.5, 0.2, 0.5, 0.5 + 1e-9, 0.9], "y": [0.0, 1, 1, 0, 1],
                       "g": ["a", "a", "b", "b", "b"]})
    t = upload(df)
    for metric, opts, cols in VALUES:
        grouped = by_group(metric, opts, cols, t)
        for g in ("a", "b"):
            alone = metric(upload(df[df.g == g]), score="p", label="y", **opts)
            np.testing.assert_allclose(grouped.loc[[g]].to_numpy(float),
                                       alone[cols].to_numpy(float), rtol=1e-9, atol=1e-12)
    assert (lipschitz_calibration_error(t, score="p", label="y", by="g").n_levels == [2, 3]).all()
