"""The decision metrics' and CORP's finishes without an engine: the summary frames are built here
from raw numpy rows (a plain groupby), the finish (or ``sqlcal.from_summaries`` with the levels)
is called on them, and the result is compared with brute force on the same raw rows: payoffs and
risks summed row by row over every rule, an LP with every pairwise tangent constraint for the
CDL, pool-adjacent-violators written here for CORP."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

import sqlcal
from sqlcal.metrics.decision import (
    cdl_finish,
    decision_loss_finish,
    expected_cost_finish,
    predictor_levels,
    risk_gap_finish,
    rules_table,
)
from sqlcal.recalibration.corp import corp_finish
from tests.test_decision import brute_force_risks, pairwise_cdl

LP_ATOL = 1e-7  # HiGHS tolerances of the pairwise LP


def raw_rows(n: int, seed: int, *, groups: int = 2, weights: bool = True) -> pd.DataFrame:
    """Scores on a coarse grid (many ties), 0/1 labels, exponential weights, string groups."""
    rng = np.random.default_rng(seed)
    p = np.round(rng.beta(2, 3, n), 1 if seed % 2 else 2)
    y = (rng.random(n) < np.clip(p + 0.15 * np.sin(6 * p), 0, 1)).astype(np.int64)
    df = pd.DataFrame({"g": rng.choice([f"g{i}" for i in range(groups)], n), "p": p, "y": y})
    df["w"] = rng.exponential(size=n) if weights else 1.0
    return df


def levels_of(df: pd.DataFrame, by=("g",)) -> pd.DataFrame:
    """The levels summary of raw rows, with the validation columns an exported frame carries."""
    out = []
    for key, part in df.groupby([*by, "p"], sort=True):
        w, y = part["w"].to_numpy(float), part["y"].to_numpy(float)
        out.append({**dict(zip([*by, "p"], key if isinstance(key, tuple) else (key,))),
                    "n": len(part), "W": w.sum(), "swy": (w * y).sum(),
                    "swp": (w * part["p"].to_numpy(float)).sum(), "sw2": (w * w).sum(),
                    "ny": int(y.sum()), "chk_p_count": len(part), "chk_y_count": len(part),
                    "chk_y_min": y.min(), "chk_y_max": y.max(), "chk_y_soft": 0.0,
                    "chk_w_count": len(part), "chk_w_min": w.min(), "chk_w_max": w.max(),
                    "chk_w_frac": float((w - np.floor(w)).sum())})
    return pd.DataFrame(out)


def level_sets(part: pd.DataFrame):
    """(v, mass, ȳ) of one group's raw rows, by a dictionary over the rows."""
    sums: dict[float, list] = {}
    for p, y, w in part[["p", "y", "w"]].itertuples(index=False):
        s = sums.setdefault(float(p), [0.0, 0.0])
        s[0] += w
        s[1] += w * y
    v = np.array(sorted(sums))
    W = np.array([sums[x][0] for x in v])
    Y = np.array([sums[x][1] for x in v])
    return v, W / W.sum(), Y / W


KW = dict(score="p", label="y", weight="w", by="g")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cdl_finish_equals_the_pairwise_lp_on_the_rows_level_sets(seed):
    df = raw_rows(300, seed)
    got = cdl_finish(predictor_levels(levels_of(df).drop(columns="ny"), ["g"]), by=["g"])
    for key, part in df.groupby("g"):
        row = got[got["g"] == key].iloc[0]
        v, mass, ybar = level_sets(part)
        assert row["calibration_decision_loss"] == pytest.approx(pairwise_cdl(v, mass, ybar),
                                                                abs=LP_ATOL)
        w, y, p = (part[c].to_numpy(float) for c in ("w", "y", "p"))
        ybar_row = np.array([(w * y)[p == x].sum() / w[p == x].sum() for x in p])
        assert row["ece"] == pytest.approx((w * np.abs(ybar_row - p)).sum() / w.sum(), rel=1e-12)
        assert row["ece_sq"] == pytest.approx((w * (ybar_row - p) ** 2).sum() / w.sum(),
                                                    rel=1e-12)
        assert row["n"] == len(part) and row["W"] == pytest.approx(w.sum(), rel=1e-12)
        assert row["n_levels"] == len(v)


def test_cdl_of_the_binned_predictor_from_bins_built_here():
    df = raw_rows(400, 5)
    df["bin"] = np.minimum(np.floor(df["p"] * 7), 6).astype(int)
    bins = df.assign(wp=df.w * df.p, wy=df.w * df.y).groupby(["g", "bin"], as_index=False).agg(
        n=("p", "size"), W=("w", "sum"), swp=("wp", "sum"), swy=("wy", "sum"))
    got = cdl_finish(predictor_levels(bins, ["g"]), by=["g"], method="lp")
    for key, part in df.groupby("g"):
        mean = part.groupby("bin").apply(lambda b: (b.w * b.p).sum() / b.w.sum(),
                                         include_groups=False)
        v, mass, ybar = level_sets(part.assign(p=part["bin"].map(mean)))
        assert got.loc[got["g"] == key, "calibration_decision_loss"].item() == pytest.approx(
            pairwise_cdl(v, mass, ybar), abs=LP_ATOL)


def test_threshold_losses_and_payoffs_summed_row_by_row():
    df = raw_rows(500, 3)
    thresholds = [0.1, 0.25, 0.5, 0.8]
    got = decision_loss_finish(levels_of(df), by=["g"], thresholds=thresholds)
    for key, part in df.groupby("g"):
        w, y, p = (part[c].to_numpy(float) for c in ("w", "y", "p"))
        ybar = np.array([(w * y)[p == x].sum() / w[p == x].sum() for x in p])
        for t in thresholds:
            def payoff(act):  # acting: 1 − t on a negative, 1 on a positive; else 1 and t
                return np.where(act, np.where(y == 1, 1.0, 1 - t), np.where(y == 1, t, 1.0))
            trusted = (w * payoff(p >= t)).sum() / w.sum()
            best = (w * payoff(ybar >= t)).sum() / w.sum()
            row = got[(got["g"] == key) & (got["threshold"] == t)].iloc[0]
            assert row["payoff"] == pytest.approx(trusted, rel=1e-12)
            assert row["recalibrated_payoff"] == pytest.approx(best, rel=1e-12)
            assert row["decision_loss"] == pytest.approx(best - trusted, abs=1e-12)


def test_finite_task_loss_summed_row_by_row():
    df = raw_rows(500, 4)
    rng = np.random.default_rng(4)
    table = rng.random((4, 2))  # generic payoffs: no score sits on a crossing
    got = decision_loss_finish(levels_of(df), by=["g"], payoffs=table)
    for key, part in df.groupby("g"):
        w, y, p = (part[c].to_numpy(float) for c in ("w", "y", "p"))
        ybar = np.array([(w * y)[p == x].sum() / w[p == x].sum() for x in p])
        line = lambda q: np.outer(1 - q, table[:, 0]) + np.outer(q, table[:, 1])  # noqa: E731
        trusted = (w * table[line(p).argmax(axis=1), y.astype(int)]).sum() / w.sum()
        best = (w * table[line(ybar).argmax(axis=1), y.astype(int)]).sum() / w.sum()
        row = got[got["g"] == key].iloc[0]
        assert row["n"] == len(p)
        assert row["payoff"] == pytest.approx(trusted, rel=1e-12)
        assert row["recalibrated_payoff"] == pytest.approx(best, rel=1e-12)
        assert row["decision_loss"] == pytest.approx(best - trusted, abs=1e-12)


@pytest.mark.parametrize("tau", [0.2, 0.5, 0.7])
def test_risk_gap_finish_equals_every_threshold_rule_on_the_rows(tau):
    df = raw_rows(300, 6)
    got = risk_gap_finish(levels_of(df), by=["g"], thresholds=[tau])
    for key, part in df.groupby("g"):
        risk, bayes, best = brute_force_risks(part, tau)
        row = got[got["g"] == key].iloc[0]
        assert row["risk"] == pytest.approx(risk, rel=1e-12)
        assert row["bayes_risk"] == pytest.approx(bayes, rel=1e-12)
        assert row["monotone_risk"] == pytest.approx(best, rel=1e-12)


RULES = {"three": [(-1, 0.3, 1.0, 0.0), (0.3, 0.62, 0.2, 0.4), (0.62, 1, 0.0, 0.7)],
         "gap": [(0.2, 0.4, 0.5, 0.1), (0.55, 0.9, 0.0, 1.0)]}


def brute_force_cost(part: pd.DataFrame, rule) -> tuple[float, float, float]:
    """(estimate, realised cost, coverage) of an interval rule, row by row."""
    w, y, f = (part[c].to_numpy(float) for c in ("w", "y", "p"))
    est = real = cov = 0.0
    for l, r, a, b in rule:
        inside = (f > l) & (f <= r)
        est += (w * inside * (a * f + b * (1 - f))).sum()
        real += (w * inside * (a * y + b * (1 - y))).sum()
        cov += (w * inside).sum()
    return est / w.sum(), real / w.sum(), cov / w.sum()


def test_expected_cost_from_the_levels_equals_the_rows():
    # scores equal to the rules' ends (0.3, 0.2, 0.4, 0.9) sit on the closed side of each interval
    df = raw_rows(600, 7)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the rule "gap" leaves scores uncovered
        got = sqlcal.from_summaries("expected_cost", {"levels": levels_of(df)}, **KW,
                                    rules=RULES, epsilon=0.05)
    assert {0.3, 0.2, 0.4, 0.9} <= set(df["p"])
    for (key, name), row in got.set_index(["g", "rule"]).iterrows():
        part = df[df["g"] == key]
        est, real, cov = brute_force_cost(part, RULES[name])
        spread = sum(abs(a - b) for *_, a, b in RULES[name])
        assert row["expected_cost"] == pytest.approx(est, rel=1e-12)
        assert row["realised_cost"] == pytest.approx(real, rel=1e-12)
        assert row["coverage"] == pytest.approx(cov, rel=1e-12)
        assert row["error_bound"] == pytest.approx(0.05 * spread, rel=1e-12)
        assert row["cost_lower"] - 1e-12 <= real <= row["cost_upper"] + 1e-12


def test_expected_cost_finish_with_validation_bounds_and_sampling_weights():
    # pieces built here from the rows: the axis cut at the rules' ends, (c_{k-1}, c_k]
    df = raw_rows(400, 8)
    table = rules_table(RULES["three"])
    cuts = [0.3, 0.62]
    df["interval"] = np.searchsorted(cuts, df["p"].to_numpy(), side="left")
    pieces = df.assign(wp=df.w * df.p, wy=df.w * df.y, w2=df.w ** 2).groupby(
        ["g", "interval"], as_index=False).agg(n=("p", "size"), W=("w", "sum"),
                                               swp=("wp", "sum"), swy=("wy", "sum"),
                                               sw2=("w2", "sum"))
    bounds = pd.DataFrame({"g": ["g0", "g1"], "upper_bound": [0.08, 0.12]})
    delta = 0.1
    got = expected_cost_finish(pieces, table, by=["g"], validation_bounds=bounds, delta=delta,
                               frequency=False)
    for key, part in df.groupby("g"):
        row = got[got["g"] == key].iloc[0]
        w = part["w"].to_numpy(float)
        n_eff = w.sum() ** 2 / (w * w).sum()
        eps = {"g0": 0.08, "g1": 0.12}[key]
        spread = 1.0 + 0.2 + 0.7
        R = 1.0  # costs range over [0, 1]
        assert row["epsilon"] == pytest.approx(
            eps + (20 + np.sqrt(2 * np.log(1 / delta))) / np.sqrt(n_eff), rel=1e-12)
        assert row["population_bound"] == pytest.approx(
            eps * spread + R * np.sqrt(np.log(2 / delta) / (2 * n_eff)), rel=1e-12)
        assert row["expected_cost"] == pytest.approx(brute_force_cost(part, RULES["three"])[0],
                                                     rel=1e-12)


def pav(W: np.ndarray, Y: np.ndarray) -> list[list[float]]:
    """Pool adjacent violators on level sets sorted by score: blocks [W, Y, levels pooled]."""
    blocks: list[list[float]] = []
    for w, y in zip(W, Y):
        blocks.append([w, y, 1])
        while len(blocks) > 1 and blocks[-2][1] / blocks[-2][0] >= blocks[-1][1] / blocks[-1][0]:
            w2, y2, k2 = blocks.pop()
            blocks[-1][0] += w2
            blocks[-1][1] += y2
            blocks[-1][2] += k2
    return blocks


@pytest.mark.parametrize("scoring", ["brier", "log_loss"])
def test_corp_finish_equals_the_scores_of_the_rows(scoring):
    df = raw_rows(500, 9)
    totals, blocks, want = [], [], {}
    for key, part in df.groupby("g"):
        w, y, p = (part[c].to_numpy(float) for c in ("w", "y", "p"))
        v = np.unique(p)
        W = np.array([w[p == x].sum() for x in v])
        Y = np.array([(w * y)[p == x].sum() for x in v])
        fitted = pav(W, Y)
        # the isotonic recalibration of each row: the mean of its level's block
        means = np.repeat([b[1] / b[0] for b in fitted], [b[2] for b in fitted])
        p_iso = means[np.searchsorted(v, p)]
        clim = np.full(len(p), (w * y).sum() / w.sum())
        if scoring == "brier":
            score = lambda q: (w * (y - q) ** 2).sum() / w.sum()  # noqa: E731
        else:
            def score(q):
                with np.errstate(divide="ignore", invalid="ignore"):
                    terms = -(np.where(y == 1, np.log(q), np.log1p(-q)))
                return (w * terms).sum() / w.sum()
        want[key] = (score(p), score(p) - score(p_iso), score(clim) - score(p_iso), score(clim))
        row = {"g": key, "n": len(p), "W": w.sum(), "swy": (w * y).sum(),
               "sw_sq_resid": (w * (y - p) ** 2).sum()}
        with np.errstate(divide="ignore"):
            ll = -(np.where(y == 1, np.log(p), np.log1p(-p)))
        row |= {"sw_logloss": (w * np.where(np.isfinite(ll), ll, 0)).sum(),
                "n_infinite_logloss": int((~np.isfinite(ll)).sum())}
        totals.append(row)
        blocks += [{"g": key, "W": bw, "Y": by_} for bw, by_, _ in fitted]
    got = corp_finish(pd.DataFrame(totals), pd.DataFrame(blocks), by=["g"], scoring=scoring)
    for key, values in want.items():
        row = got[got["g"] == key].iloc[0]
        np.testing.assert_allclose(
            row[["mean_loss", "miscalibration", "discrimination", "uncertainty"]].to_numpy(float),
            values, rtol=1e-10, atol=1e-13)


def test_from_summaries_with_the_levels_equals_the_finish_on_them():
    # the public route and the finish read the same frame: one levels statement, any metric
    df = raw_rows(300, 10)
    levels = levels_of(df)
    via = sqlcal.from_summaries("decision_risk_gap", {"levels": levels}, **KW,
                                threshold=[0.3, 0.6])
    direct = risk_gap_finish(levels.sort_values(["g", "p"]), by=["g"], thresholds=[0.3, 0.6])
    cols = ["risk", "bayes_risk", "monotone_risk", "best_threshold"]
    np.testing.assert_allclose(via[cols].to_numpy(float), direct[cols].to_numpy(float),
                               rtol=1e-12)
    # the binned form: the equal-width bins evaluated from the levels, against bins built here
    cdl = sqlcal.from_summaries("calibration_decision_loss", {"levels": levels}, **KW, bins=5)
    df["bin"] = np.minimum(np.floor(df["p"] * 5), 4).astype(int)
    bins = df.assign(wp=df.w * df.p, wy=df.w * df.y).groupby(["g", "bin"], as_index=False).agg(
        n=("p", "size"), W=("w", "sum"), swp=("wp", "sum"), swy=("wy", "sum"))
    want = cdl_finish(predictor_levels(bins, ["g"]), by=["g"])
    assert cdl["binning"].tolist() == ["uniform(5, sqlcal)"] * 2
    cols = ["calibration_decision_loss", "v_star", "two_action_bound", "ece_sq", "ece"]
    np.testing.assert_allclose(cdl[cols].to_numpy(float), want[cols].to_numpy(float),
                               rtol=1e-12)
