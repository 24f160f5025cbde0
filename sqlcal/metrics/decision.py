"""Decision-theoretic metrics: what miscalibration costs a decision maker who trusts the scores.

- :func:`calibration_decision_loss`: CDL, the worst payoff loss over all bounded decision tasks
  (Hu and Wu 2024), exact on the level sets as the concave envelope of the V-curve at 1/2 (a
  linear-size LP gives the same values and stays as a cross-check), with its V-curve bounds;
- :func:`decision_loss`: the loss of one fixed task (a threshold or a finite payoff table);
- :func:`decision_risk_gap`: the risk of acting iff score ≥ τ against the best recalibrated and
  the best monotone (threshold) rules (Rossellini et al. 2025, Section 3);
- :func:`expected_cost`: the label-free cost estimate of interval decision rules on an unlabeled
  table, with its error bound from a cutoff-error bound, and the cheapest rule over a set of
  actions (Gao, Parameswaran and Peng 2017, Sections 2.4 and 3.3.4).

The first three read the levels summary (one GROUP BY score; with ``bins=``, the equal-width bins
summary instead); the last one the score axis cut at its rules' interval ends (one GROUP BY of the
pieces between two ends). Each metric's arithmetic is a function of those frames below it
(:func:`cdl_finish`, :func:`decision_loss_finish`, :func:`risk_gap_finish`,
:func:`expected_cost_finish`).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd
from scipy import optimize

from sqlcal.inputs.sources import Source
from sqlcal.metrics import (
    GroupIndex,
    _registry,
    as_slabs,
    groups,
    grown,
    key_tuple,
    resolve_weight_kind,
    result,
    runs,
    safe_div,
)
from sqlcal.metrics._registry import Report, metric
from sqlcal.metrics.cells import level_slabs
from sqlcal.options import Option, checked, costs_binned
from sqlcal.query import declared, executor, planner
from sqlcal.query.executor import as_source, source
from sqlcal.query.unlabeled import unlabeled_source

#: warn that the plug-in has degenerated when a group has at least this many distinct scores per
#: row (and at least ``_WARN_MIN_ROWS`` rows): each level set is then about one row
DEGENERATE_SHARE = 0.9
_WARN_MIN_ROWS = 20
#: the CDL LP (method="lp") is a cross-check, refused for a group with more level sets (use the
#: exact envelope); the slope LP solves 2,000 levels in about 0.2 s, 20,000 in 2 s
MAX_LP_LEVELS = 2_000
#: the largest optimality gap (upper minus lower bound, over the live mass) the CDL LP may return
#: with; measured at most 1.8e-10 on 6,000 random and near-degenerate inputs
LP_GAP = 5e-10


@metric(needs=lambda src, o: levels_needs(o["bins"]),
        report={"calibration_decision_loss": Report(
            {"calibration_decision_loss": "calibration_decision_loss", "v_star": "cdl_v_star"})},
        trust={"binning": None, "method": None}, cost=costs_binned,
        options={"bins": Option("int", "equal-width bins of the binned predictor (default: the "
                                "levels)", low=1, optional=True),
                 "method": Option("choice", "the convex hull (exact) or the LP",
                                  choices=("hull", "lp"))})
@checked
def calibration_decision_loss(
    data: Any,
    *,
    score: str | None = None,
    label: str | None = None,
    weight: str | None = None,
    by: str | Sequence[str] = (),
    where: Any = None,
    bins: int | None = None,
    method: str = "hull",
    **source_options: Any,
) -> pd.DataFrame:
    r"""The calibration decision loss (CDL): the most any bounded decision task loses by trusting
    the scores, exact, with its V-curve bounds.

    Parameters
    ----------
    data : Source, ibis Table, path, URL or DataFrame
        What to measure; see :func:`sqlcal.source`.
    score : str, optional
        Column of predicted probabilities of the positive class (not needed when ``data`` is a
        :class:`~sqlcal.Source`).
    label : str, optional
        Column of 0/1 outcomes (not needed when ``data`` is a :class:`~sqlcal.Source`).
    weight : str, optional
        Column of non-negative row weights; by default every row weighs 1.
    by : str or sequence of str, default ()
        Group keys: one result row per group.
    where : ibis boolean expression, callable or SQL string, optional
        Filter applied in the engine before anything else.
    bins : int, optional
        ``None`` (default): the CDL of the empirical law of (score, label), one level set per
        distinct score. An integer B: the CDL of the *binned predictor* that maps each of B
        equal-width bins (left-closed, 1 in the last) to its weighted mean score. The bins are
        then part of the metric's identity. Use them for continuous scores: see Notes.
    method : {"hull", "lp"}, default "hull"
        ``"hull"``: the exact closed form below (O(m log m), no solver). ``"lp"``: the
        slope LP below (HiGHS; up to 2,000 level sets per group), for cross-checking; it agrees
        with the hull to 1e-9 (a certificate checks every solve; a failed one warns and returns
        the hull).
    **source_options
        Further options of :func:`sqlcal.source`, such as ``table=``, ``on_invalid=`` and
        ``soft_labels=``.

    Returns
    -------
    pandas.DataFrame
        One row per group: the keys, ``calibration_decision_loss``, ``n``, ``W``, ``v_star``
        (the sup of the V-curve, an upper bound), ``two_action_bound`` (the best two-action task,
        a lower bound), ``ece_sq`` (a lower bound), ``ece`` (CDL ≤ 2·ECE), ``n_levels``
        (level sets or bins that carry weight: a row of weight 0 counts nowhere),
        ``distinct_per_row`` (``n_levels`` / ``n``), ``binning`` (``"levels"``, or
        ``"uniform(B, sqlcal)"`` with ``bins``) and ``method`` (``"hull"`` or ``"lp"``); with
        ``on_invalid="drop"``, ``n_dropped``.

    See Also
    --------
    decision_loss : the loss of one fixed decision task instead of the worst one.
    decision_risk_gap : the loss of a threshold rule, against recalibrated and monotone rules.
    ece : the binned error that bounds it from above (twice ECE).

    Notes
    -----
    Hu and Wu (2024), Predict to Minimize Swap Regret for All Payoff-Bounded Tasks (FOCS 2024),
    as presented by Gopalan and Hu (2025), Calibration through the Lens of Indistinguishability,
    Section 4. A task has actions A and payoffs
    :math:`u: A\times\{0,1\}\to[0,1]`; trusting the score means playing the best response
    :math:`\sigma(p)`, while the best policy on the score plays :math:`\sigma(\hat p)` with
    :math:`\hat p = E[y\mid p]`. Then

    .. math:: \mathrm{CDL} = \sup_{u}\ E[u(\sigma(\hat p), y)] - E[u(\sigma(p), y)],

    computed exactly on the level sets :math:`(v_j, n_j, \bar y_j)` (weights over W). sqlcal
    derives (see :func:`cdl_hull`) that CDL is the upper concave envelope of the closed V-curve
    (below), evaluated at t = 1/2: the best task needs at most two V-shaped kinks
    :math:`s_1\le 1/2\le s_2`, and its value is the height at 1/2 of the chord joining
    :math:`(s_1,V_c(s_1))` and :math:`(s_2,V_c(s_2))` (with (0, 0) and (1, 0) for one kink).
    The LP route (``method="lp"``, :func:`cdl_lp`) writes the same sup in slope variables: ψ
    convex and piecewise linear on :math:`S=\{v_j\}\cup\{\bar y_j\}\cup\{0,1\}`, with
    :math:`\psi(0)=\psi(1)=0`, slopes :math:`\gamma_0\le\gamma_1\le\dots\le\gamma_K` (the end
    ones the subgradients at 0 and 1, payoffs in [0, 1] being :math:`\gamma_0\ge-1`,
    :math:`\gamma_K\le 1`), objective
    :math:`\sum_j n_j[\psi(\bar y_j)-\psi(v_j)-g_j(\bar y_j-v_j)]` with :math:`g_j` the slope
    beside :math:`v_j` on the side of :math:`\bar y_j`; in the slope increments
    :math:`\mu_k\ge 0` (the kinks at :math:`t_k\in S`) it has two rows,
    :math:`\sum_k\mu_k(1-t_k)\le 1` and :math:`\sum_k\mu_k t_k\le 1`, and coefficients of
    order one however close the breakpoints are, so HiGHS (tolerances 1e-10) agrees with the
    envelope to 1e-9; each solve is certified by its primal and dual bounds. The envelope was also
    checked against an independent K²-constraint
    LP on 2,652 instances (largest difference 2.7e-12) and in exact rational arithmetic. The
    sup can need adversarial tie-breaking at kinks, so it is approached, not always attained.

    Bounds reported beside it (from Gopalan and Hu (2025), Theorems 4.3 and 4.10):
    :math:`\max(\mathrm{ECE}_2^2,\ \sup_t V(t)/(2\max(t,1-t))) \le \mathrm{CDL} \le
    \min(V^\star, 2\,\mathrm{ECE})`, with the V-curve
    :math:`V(t)=\sum_j 2n_j|\bar y_j-t|\,1[\min(\bar y_j,v_j)<t\le\max(\bar y_j,v_j)]`.

    With continuous scores every level set is a single row, so :math:`\bar y_j\in\{0,1\}` and the
    plug-in degenerates (it is at least the Brier score): a warning is raised when a group has
    at least 0.9 distinct scores per row; pass ``bins=``. Like ECE, the plug-in is biased
    upward: a calibrated model gets a positive value on a finite sample.

    References
    ----------
    .. [1] L. Hu and Y. Wu, "Predict to Minimize Swap Regret for All Payoff-Bounded Tasks", FOCS,
       2024.
    .. [2] P. Gopalan and L. Hu, "Calibration through the Lens of Indistinguishability", ACM SIGecom
       Exchanges 23(1), 2025.

    Examples
    --------
    >>> import pandas as pd, sqlcal
    >>> df = pd.DataFrame({"p": [0.5] * 10, "y": [1] * 6 + [0] * 4})
    >>> out = sqlcal.calibration_decision_loss(df, score="p", label="y")
    >>> out[["calibration_decision_loss", "v_star", "ece_sq"]].round(6)
       calibration_decision_loss  v_star  ece_sq
    0                        0.2     0.2    0.01
    """
    if method not in ("hull", "lp"):
        raise ValueError(f"method must be 'hull' or 'lp', not {method!r}")
    src = as_source(data, score, label, weight=weight, by=by, where=where, **source_options)
    values = cdl_finish(_level_sets(src, bins), by=src.by, method=method)
    if bins is None:
        _warn_degenerate(values)
    out = result(src, values, ["calibration_decision_loss", "v_star", "two_action_bound",
                               "ece_sq", "ece", "n_levels", "distinct_per_row"],
                 present=False)
    out["n_levels"] = out["n_levels"].fillna(0).astype(int)
    return src.present(_with_trust(out, binning=_binning(bins), method=method))


def cdl_finish(levels, *, by: Sequence[str] = (), method: str = "hull") -> pd.DataFrame:
    """The calibration decision loss and its bounds of each group, from its level sets.

    Parameters
    ----------
    levels : pandas.DataFrame or iterable of pandas.DataFrame
        Per group and value of the predictor: the group keys, ``p`` (the value), ``n`` (rows),
        ``W`` = Σw and ``swy`` = Σwy (the levels summary, or the binned predictor of
        :func:`predictor_levels`), sorted by group and value; or its slabs in increasing
        value, as :func:`sqlcal.metrics.cells.level_slabs` gives them (iterated twice: the
        V-curve's breakpoints at the rates ȳ, then the curve in order).
    by : sequence of str, default ()
        The group keys.
    method : {"hull", "lp"}, default "hull"
        As for :func:`calibration_decision_loss`.

    Returns
    -------
    pandas.DataFrame
        One row per group: the keys, ``n``, ``W``, ``calibration_decision_loss``, ``v_star``,
        ``two_action_bound``, ``ece_sq``, ``ece``, ``n_levels``, ``distinct_per_row``.

    Examples
    --------
    >>> levels = pd.DataFrame({"p": [0.5], "n": [10], "W": [10.0], "swy": [6.0]})
    >>> cdl_finish(levels)[["calibration_decision_loss", "v_star", "ece"]].round(6)
       calibration_decision_loss  v_star  ece
    0                        0.2     0.2  0.1
    """
    slabs = as_slabs(levels)
    index = GroupIndex(by)
    n, W, held = np.zeros(0, np.int64), np.zeros(0), np.zeros(0, np.int64)
    ece, ece2 = np.zeros(0), np.zeros(0)
    curve = _VCurve()
    kept: dict[int, list] = {}  # method="lp": each group's levels (at most MAX_LP_LEVELS)
    for slab in slabs:  # the totals, ECE and the V-curve's breakpoints at ȳ
        lv = index.levels(slab)
        G = len(index)
        n, W, held, ece, ece2 = (grown(a, G) for a in (n, W, held, ece, ece2))
        n += np.bincount(lv.g, weights=lv.n, minlength=G).astype(np.int64)
        W += np.bincount(lv.g, weights=lv.W, minlength=G)
        # a level (or bin) whose rows all have weight 0 is absent, as its rows are
        g, v, _, Wk, Y = lv.live()
        # a rounding excursion of Σwy outside [0, W] must not put ȳ outside [0, 1]
        ybar = np.clip(Y / Wk, 0.0, 1.0)
        held += np.bincount(g, minlength=G)
        ece += np.bincount(g, weights=Wk * np.abs(ybar - v), minlength=G)
        ece2 += np.bincount(g, weights=Wk * (ybar - v) ** 2, minlength=G)
        if method == "lp":
            if (held > MAX_LP_LEVELS).any():
                raise ValueError(
                    f"a group has {int(held.max())} level sets: method='lp' is limited to "
                    f"{MAX_LP_LEVELS}; use method='hull' (exact, any size) or bins=")
            for gi in np.unique(g).tolist():
                at = g == gi
                kept.setdefault(gi, []).append((v[at], Wk[at], ybar[at]))
        else:
            curve.add_rates(g, v, Wk, ybar)
        # freed before the next slab is read (the loop would hold them through its query)
        del slab, lv, g, v, Wk, Y, ybar
    if method != "lp":
        for slab in slabs:  # the V-curve in increasing t, and its upper concave envelope
            g, v, _, Wk, Y = index.levels(slab, ordered=True).live()
            del slab
            curve.add_scores(g, v, Wk, np.clip(Y / Wk, 0.0, 1.0))
            del g, v, Wk, Y
    rows = []
    for gi, key in enumerate(index.keys):
        shape = {"n_levels": int(held[gi]),
                 "distinct_per_row": held[gi] / n[gi] if n[gi] else np.nan}
        base = {**key, "n": int(n[gi]), "W": float(W[gi])}
        if not W[gi] > 0:
            rows.append(base | _nan_row("calibration_decision_loss", "v_star",
                                        "two_action_bound", "ece_sq", "ece") | shape)
            continue
        if method == "lp":
            v, Wk, ybar = (np.concatenate(x) for x in zip(*kept[gi]))
            mass = Wk / W[gi]
            v_star, two_action = v_curve(v, mass, ybar)
            cdl = cdl_lp(v, mass, ybar)
        else:
            cdl, v_star, two_action = (x / W[gi] for x in curve.finish(gi))
        rows.append(base | {"calibration_decision_loss": float(cdl), "v_star": float(v_star),
                            "two_action_bound": float(two_action),
                            "ece_sq": float(ece2[gi] / W[gi]),
                            "ece": float(ece[gi] / W[gi])} | shape)
    return pd.DataFrame(rows, columns=None if rows else [*by, "n", "W"])


class _VCurve:
    """The closed V-curve of every group, built from level sets given in increasing score, and
    its upper concave envelope at 1/2 (:func:`cdl_hull`), in memory that does not grow with the
    levels: first every level's breakpoint at its rate ȳ (:meth:`add_rates`, aggregated by the
    value of ȳ: rates of small level sets repeat), then the levels again in score order
    (:meth:`add_scores`): the curve at each breakpoint up to the largest score seen, folded into
    its running maximum, its two-action bound and the upper hull of its points so far.

    Each live level set (ȳ ≠ v) adds α t + β on [min(ȳ, v), max(ȳ, v)] (closed), with
    α = 2W, β = −2Wȳ when over-predicted (ȳ < v), and α = −2W, β = 2Wȳ otherwise: a start
    event at the lower end and an end event at the upper, one of them at v, the other at ȳ.
    Weights are not divided by the group's total (:func:`cdl_finish` divides at the end).
    """

    def __init__(self):
        self.rates: dict[int, list] = {}  # group -> [(ȳ, start?, α, β) arrays, ...]
        self.pending: dict[int, tuple] = {}  # group -> the sorted ȳ events not yet passed
        self.state: dict[int, list] = {}  # group -> [A, B, V*, two-action, hull t, hull V]

    @staticmethod
    def _terms(v, Wk, ybar):
        over = ybar < v
        alpha = np.where(over, 2 * Wk, -2 * Wk)
        return over, alpha, -alpha * ybar

    def add_rates(self, g, v, Wk, ybar) -> None:
        live = ybar != v
        order = np.argsort(g[live], kind="stable")
        g, v, Wk, ybar = (a[live][order] for a in (g, v, Wk, ybar))
        over, alpha, beta = self._terms(v, Wk, ybar)
        for a, b in zip(*runs(g)):
            events = self.rates.setdefault(int(g[a]), [])
            events.append(_merged_events([(ybar[a:b], over[a:b], alpha[a:b], beta[a:b])]))
            if len(events) > 8:  # compact: one event per distinct (ȳ, start or end)
                events[:] = [_merged_events(events)]

    def _prepare(self, gi: int) -> None:
        events = self.rates.pop(gi, [])
        t, start, alpha, beta = _merged_events(events + [
            (np.array([0.5]), np.array([True]), np.zeros(1), np.zeros(1))])  # 1/2 a breakpoint
        self.pending[gi] = (t, start, alpha, beta, 0)
        self.state[gi] = [0.0, 0.0, 0.0, 0.0, np.array([0.0]), np.array([0.0])]

    def add_scores(self, g, v, Wk, ybar) -> None:
        """Levels sorted by group number, then score."""
        live = ybar != v
        g, v, Wk, ybar = g[live], v[live], Wk[live], ybar[live]
        over, alpha, beta = self._terms(v, Wk, ybar)
        for a, b in zip(*runs(g)):
            self._advance(int(g[a]), v[a:b], ~over[a:b], alpha[a:b], beta[a:b],
                          upto=float(v[b - 1]))

    def _advance(self, gi, t, start, alpha, beta, upto: float) -> None:
        """Fold the events at scores ``t`` (sorted) and the pending ȳ events up to ``upto``."""
        if gi not in self.pending:
            self._prepare(gi)
        rt, rstart, ralpha, rbeta, done = self.pending[gi]
        stop = len(rt) if upto == np.inf else int(np.searchsorted(rt, upto, side="right"))
        t = np.concatenate([t, rt[done:stop]])
        start = np.concatenate([start, rstart[done:stop]])
        alpha = np.concatenate([alpha, ralpha[done:stop]])
        beta = np.concatenate([beta, rbeta[done:stop]])
        self.pending[gi] = (rt, rstart, ralpha, rbeta, stop)
        if not len(t):
            return
        state = self.state[gi]
        points = np.unique(t)
        s, e = start, ~start
        ts, te = t[s], t[e]
        os_, oe = np.argsort(ts, kind="stable"), np.argsort(te, kind="stable")
        cum = lambda x, order: np.concatenate([[0.0], np.cumsum(x[order])])  # noqa: E731
        started = np.searchsorted(ts[os_], points, side="right")  # lo ≤ t
        ended = np.searchsorted(te[oe], points, side="left")  # hi < t
        A = state[0] + cum(alpha[s], os_)[started] - cum(alpha[e], oe)[ended]
        B = state[1] + cum(beta[s], os_)[started] - cum(beta[e], oe)[ended]
        V = np.maximum(A * points + B, 0.0)
        state[0] += alpha[s].sum() - alpha[e].sum()
        state[1] += beta[s].sum() - beta[e].sum()
        state[2] = max(state[2], float(V.max()))
        state[3] = max(state[3], float((V / (2 * np.maximum(points, 1 - points))).max()))
        hull_t = np.concatenate([state[4], points])
        hull_V = np.concatenate([state[5], V])
        keep = upper_hull(hull_t, hull_V)
        state[4], state[5] = hull_t[keep], hull_V[keep]

    def finish(self, gi: int) -> tuple[float, float, float]:
        """(the envelope at 1/2, V*, the two-action bound) of a group, in weight units."""
        if gi not in self.pending and gi not in self.rates:
            return 0.0, 0.0, 0.0  # no live level set: every rate equals its score
        self._advance(gi, np.zeros(0), np.zeros(0, bool), np.zeros(0), np.zeros(0), np.inf)
        state = self.state[gi]
        t, V = np.append(state[4], 1.0), np.append(state[5], 0.0)
        keep = upper_hull(t, V)
        return float(np.interp(0.5, t[keep], V[keep])), state[2], state[3]


def _merged_events(events: list) -> tuple:
    """Events (t, start?, α, β) as one set sorted by t, one per distinct (t, start?)."""
    t, start, alpha, beta = (np.concatenate(x) for x in zip(*events))
    order = np.lexsort((~start, t))
    t, start, alpha, beta = t[order], start[order], alpha[order], beta[order]
    new = np.r_[True, (t[1:] != t[:-1]) | (start[1:] != start[:-1])]
    ids = np.cumsum(new) - 1
    return (t[new], start[new], np.bincount(ids, weights=alpha),
            np.bincount(ids, weights=beta))


def upper_hull(t: np.ndarray, V: np.ndarray) -> np.ndarray:
    """The indices of the vertices of the upper convex hull of the points (t, V), ``t``
    non-decreasing, left to right; points on or below a hull edge are not vertices, and of
    points with one t only the highest can be. Vectorised quickhull: each round adds, to every
    edge with points above it, the point farthest above (a vertex), and drops the points that
    no longer lie above an edge.

    >>> upper_hull(np.array([0.0, 0.25, 0.5, 0.75, 1.0]), np.array([0.0, 1.0, 1.0, 2.0, 0.0]))
    array([0, 1, 3, 4])
    """
    t, V = np.asarray(t, float), np.asarray(V, float)
    if len(t) <= 2:
        return np.arange(len(t))
    # of tied t only the highest point (the last of them, after a stable sort by V)
    order = np.lexsort((V, t))
    top = order[np.r_[t[order][1:] != t[order][:-1], True]]
    if len(top) <= 2:
        return top
    tt, VV = t[top], V[top]
    hull = np.array([0, len(top) - 1])
    candidates = np.arange(1, len(top) - 1)
    while len(candidates):
        edge = np.searchsorted(tt[hull], tt[candidates], side="right") - 1
        a, b = hull[edge], hull[edge + 1]
        cross = ((tt[b] - tt[a]) * (VV[candidates] - VV[a])
                 - (VV[b] - VV[a]) * (tt[candidates] - tt[a]))
        above = cross > 0
        candidates, edge, cross = candidates[above], edge[above], cross[above]
        if not len(candidates):
            break
        order = np.lexsort((-cross, edge))
        first = order[np.r_[True, edge[order][1:] != edge[order][:-1]]]
        hull = np.sort(np.concatenate([hull, candidates[first]]))
        mask = np.ones(len(candidates), bool)
        mask[first] = False
        candidates = candidates[mask]
    return top[hull]


@metric(needs=lambda src, o: levels_needs(o["bins"]), cost=costs_binned,
        options={"bins": Option("int", "equal-width bins of the binned predictor", low=1,
                                optional=True)})
@checked
def decision_loss(
    data: Any,
    *,
    score: str | None = None,
    label: str | None = None,
    weight: str | None = None,
    by: str | Sequence[str] = (),
    where: Any = None,
    threshold: float | Sequence[float] | None = None,
    payoffs: Any = None,
    tie: str = "higher",
    bins: int | None = None,
    **source_options: Any,
) -> pd.DataFrame:
    r"""The calibration loss of one fixed decision task (CFDL): the payoff lost by acting on the
    scores instead of on the recalibrated scores.

    Parameters
    ----------
    data : Source, ibis Table, path, URL or DataFrame
        What to measure; see :func:`sqlcal.source`.
    score : str, optional
        Column of predicted probabilities of the positive class (not needed when ``data`` is a
        :class:`~sqlcal.Source`).
    label : str, optional
        Column of 0/1 outcomes (not needed when ``data`` is a :class:`~sqlcal.Source`).
    weight : str, optional
        Column of non-negative row weights; by default every row weighs 1.
    by : str or sequence of str, default ()
        Group keys: one result row per group.
    where : ibis boolean expression, callable or SQL string, optional
        Filter applied in the engine before anything else.
    threshold : float or sequence of float, optional
        The two-action task "act iff the probability is ≥ t", with cost t for acting on a
        negative and 1 − t for not acting on a positive (payoffs (1, t) for not acting and
        (1 − t, 1) for acting, slope jump 1). One row per group and threshold.
    payoffs : array-like of shape (k, 2), optional
        Instead of ``threshold``: a finite task, row a = (u(a, 0), u(a, 1)), the payoff of action
        a when the label is 0 and 1.
    tie : {"higher", "lower"}, default "higher"
        The best response where actions tie: the one with the larger u(a, 1) − u(a, 0) (the
        action for higher probabilities: "act iff q ≥ t", as :func:`decision_risk_gap`) or the
        smaller ("act iff q > t", the survey's :math:`\sigma(v)=1[v>1/2]` for its task
        :math:`T_1`); among identical actions, the first listed. Decided exactly, with no
        tolerance: the payoffs are read as the decimals they print as (0.1 is 1/10), two
        actions' payoff lines cross at an exact rational, and a score equal to the double
        nearest that crossing is a tie (so a score of 0.3 ties at a crossing of exactly 3/10);
        every other score is on the side its exact value is. The same rule as
        :func:`expected_cost`'s ``tie``.
    bins : int, optional
        ``None`` (default): the level sets of the scores; an integer B: the binned predictor on B
        equal-width bins, as for :func:`calibration_decision_loss`.
    **source_options
        Further options of :func:`sqlcal.source`, such as ``table=``, ``on_invalid=`` and
        ``soft_labels=``.

    Returns
    -------
    pandas.DataFrame
        One row per group (and threshold): the keys, ``threshold`` (with ``threshold=``),
        ``decision_loss``, ``n``, ``W``, ``payoff`` (mean payoff of trusting the scores) and
        ``recalibrated_payoff`` (mean payoff of the best response to :math:`\bar y` per level),
        ``binning`` (as in :func:`calibration_decision_loss`); with ``on_invalid="drop"``,
        ``n_dropped``.

    See Also
    --------
    calibration_decision_loss : the worst loss over all bounded decision tasks.
    decision_risk_gap : the same threshold task, with the best monotone rule too.
    expected_cost : the cost of decision rules on unlabelled rows.

    Notes
    -----
    Hu and Wu (2024), Predict to Minimize Swap Regret for All Payoff-Bounded Tasks; Gopalan and
    Hu (2025), Calibration through the Lens of Indistinguishability, Def. 4.2 and (4.5):
    :math:`\mathrm{CFDL}=\sum_j n_j[\max_a\ell_a(\bar y_j)-\ell_{\sigma(v_j)}(\bar y_j)]` with
    :math:`\ell_a(q)=(1-q)u(a,0)+q\,u(a,1)`. For a threshold t it is
    :math:`\sum_j n_j|\bar y_j-t|\,1[1\{v_j\ge t\}\ne1\{\bar y_j\ge t\}]`, which equals the
    ``risk_gap`` of :func:`decision_risk_gap` at τ = t. The umbrella example of the survey
    (carry an umbrella iff p ≥ 0.1) is ``threshold=0.1``.

    References
    ----------
    .. [1] L. Hu and Y. Wu, "Predict to Minimize Swap Regret for All Payoff-Bounded Tasks", FOCS,
       2024.
    .. [2] P. Gopalan and L. Hu, "Calibration through the Lens of Indistinguishability", ACM SIGecom
       Exchanges 23(1), 2025.

    Examples
    --------
    >>> import pandas as pd, sqlcal
    >>> df = pd.DataFrame({"p": [0.4, 0.6], "y": [0, 1]})
    >>> sqlcal.decision_loss(df, score="p", label="y", threshold=[0.1, 0.5]).round(6)
       threshold  decision_loss  n    W  payoff  recalibrated_payoff binning
    0        0.1           0.05  2  2.0    0.95                  1.0  levels
    1        0.5           0.00  2  2.0    1.00                  1.0  levels
    """
    if (threshold is None) == (payoffs is None):
        raise ValueError("pass exactly one of threshold= and payoffs=")
    if tie not in ("higher", "lower"):
        raise ValueError(f"tie must be 'higher' or 'lower', not {tie!r}")
    if payoffs is not None:
        table = np.asarray(payoffs, dtype=float)
        if (table.ndim != 2 or table.shape[1] != 2 or len(table) < 1
                or not np.isfinite(table).all()):
            raise ValueError("payoffs must be a finite array of shape (k, 2): "
                             "rows (u(a,0), u(a,1))")
        thresholds = None
    else:
        table, thresholds = None, _thresholds(threshold)
    src = as_source(data, score, label, weight=weight, by=by, where=where, **source_options)
    values = decision_loss_finish(_level_sets(src, bins), by=src.by, thresholds=thresholds,
                                  payoffs=table, tie=tie)
    if bins is None:
        _warn_degenerate(values.drop_duplicates(list(src.by)) if src.by else values.iloc[:1])
    columns = ["decision_loss", "payoff", "recalibrated_payoff"]
    values = values.drop(columns=["n_levels", "distinct_per_row"])
    if thresholds is None:
        out = result(src, values, columns, present=False)
    else:
        out = _by_threshold(src, values, ["threshold", *columns], "threshold", thresholds)
    return src.present(_with_trust(out, binning=_binning(bins)))


def decision_loss_finish(levels, *, by: Sequence[str] = (),
                         thresholds: Sequence[float] | None = None,
                         payoffs: np.ndarray | None = None, tie: str = "higher") -> pd.DataFrame:
    """The loss of one fixed decision task of each group, from its level sets.

    Parameters
    ----------
    levels : pandas.DataFrame or iterable of pandas.DataFrame
        As for :func:`cdl_finish`: the level sets, whole or in slabs.
    by : sequence of str, default ()
        The group keys.
    thresholds : sequence of float, optional
        The two-action tasks "act iff the probability is ≥ t" (one row per group and t).
    payoffs : numpy.ndarray of shape (k, 2), optional
        Instead of ``thresholds``: a finite task, row a = (u(a, 0), u(a, 1)).
    tie : {"higher", "lower"}, default "higher"
        As for :func:`decision_loss`.

    Returns
    -------
    pandas.DataFrame
        One row per group (and threshold): the keys, ``n``, ``W``, ``threshold`` (with
        ``thresholds``), ``decision_loss``, ``payoff``, ``recalibrated_payoff``, ``n_levels``,
        ``distinct_per_row`` (as in :func:`cdl_finish`).

    Examples
    --------
    >>> levels = pd.DataFrame({"p": [0.4, 0.6], "n": [1, 1], "W": [1.0, 1.0],
    ...                        "swy": [0.0, 1.0]})
    >>> decision_loss_finish(levels, thresholds=[0.1]).iloc[:, :6]
       n    W  threshold  decision_loss  payoff  recalibrated_payoff
    0  2  2.0        0.1           0.05    0.95                  1.0
    """
    tasks = list(thresholds) if thresholds is not None else [None]
    if thresholds is None:  # the best response to v, decided exactly (see _finite_task_loss)
        pieces = _best_pieces(-payoffs[:, ::-1], tie)
        ends = np.array([r for r, _ in pieces])
        actions = np.array([j for _, j in pieces])
    index = GroupIndex(by)
    n, W, levels_held = np.zeros(0, np.int64), np.zeros(0), np.zeros(0, np.int64)
    sums = np.zeros((0, len(tasks), 3))  # loss, payoff, recalibrated payoff: Σ W_j · term
    for slab in as_slabs(levels):
        lv = index.levels(slab)
        G = len(index)
        n, W, levels_held, sums = (grown(n, G), grown(W, G), grown(levels_held, G),
                                   grown(sums, G))
        n += np.bincount(lv.g, weights=lv.n, minlength=G).astype(np.int64)
        W += np.bincount(lv.g, weights=lv.W, minlength=G)
        # a level set whose rows all weigh 0 is absent, as its rows are
        g, v, _, Wk, Y = lv.live()
        del lv
        levels_held += np.bincount(g, minlength=G)
        # a rounding excursion of Σwy outside [0, W] must not put ȳ outside [0, 1]
        ybar = np.clip(Y / Wk, 0.0, 1.0)
        for i, t in enumerate(tasks):
            if t is None:
                at_y = np.outer(1 - ybar, payoffs[:, 0]) + np.outer(ybar, payoffs[:, 1])
                played = actions[np.minimum(np.searchsorted(ends, v, side="left"),
                                            len(ends) - 1)]
                got = at_y[np.arange(len(v)), played]
                best = at_y.max(axis=1)
                terms = (best - got, got, best)
            else:
                # payoffs (1, t) for not acting and (1 − t, 1) for acting: slope jump 1
                act, best = (v >= t, ybar >= t) if tie == "higher" else (v > t, ybar > t)
                acting, waiting = (1 - ybar) * (1 - t) + ybar, (1 - ybar) + ybar * t
                terms = (np.abs(ybar - t) * (act != best), np.where(act, acting, waiting),
                         np.where(best, acting, waiting))
            for j, term in enumerate(terms):
                sums[:, i, j] += np.bincount(g, weights=Wk * term, minlength=G)
            del terms
        # freed before the next slab is read (the loop would hold them through its query)
        del slab, g, v, Wk, Y, ybar
    with np.errstate(divide="ignore", invalid="ignore"):
        values = np.where(W[:, None, None] > 0, sums / W[:, None, None], np.nan)
    G, T = len(index), len(tasks)
    out = index.frame().loc[np.repeat(np.arange(G), T)].reset_index(drop=True)
    out["n"], out["W"] = np.repeat(n, T), np.repeat(W, T)
    if thresholds is not None:
        out["threshold"] = np.tile(np.asarray(tasks, float), G)
    for j, name in enumerate(("decision_loss", "payoff", "recalibrated_payoff")):
        out[name] = values[:, :, j].reshape(-1)
    out["n_levels"] = np.repeat(levels_held, T)
    out["distinct_per_row"] = np.repeat(safe_div(levels_held, n), T)
    return out


@metric(needs=lambda src, o: levels_needs(None),
        report={"decision_risk_gap": Report(
            {"risk_gap": "risk_gap", "monotone_risk_gap": "monotone_risk_gap"})},
        options={"threshold": Option("floats", "decision thresholds in [0, 1]", low=0, high=1)})
@checked
def decision_risk_gap(
    data: Any,
    *,
    score: str | None = None,
    label: str | None = None,
    weight: str | None = None,
    by: str | Sequence[str] = (),
    where: Any = None,
    threshold: float | Sequence[float] = 0.5,
    **source_options: Any,
) -> pd.DataFrame:
    r"""The risk of acting iff score ≥ τ, against the best recalibrated rule and the best
    monotone threshold rule.

    Parameters
    ----------
    data : Source, ibis Table, path, URL or DataFrame
        What to measure; see :func:`sqlcal.source`.
    score : str, optional
        Column of predicted probabilities of the positive class (not needed when ``data`` is a
        :class:`~sqlcal.Source`).
    label : str, optional
        Column of 0/1 outcomes (not needed when ``data`` is a :class:`~sqlcal.Source`).
    weight : str, optional
        Column of non-negative row weights; by default every row weighs 1.
    by : str or sequence of str, default ()
        Group keys: one result row per group.
    where : ibis boolean expression, callable or SQL string, optional
        Filter applied in the engine before anything else.
    threshold : float or sequence of float, default 0.5
        The decision threshold(s) τ in [0, 1]: acting costs τ on a negative, not acting costs
        1 − τ on a positive.
    **source_options
        Further options of :func:`sqlcal.source`, such as ``table=``, ``on_invalid=`` and
        ``soft_labels=``.

    Returns
    -------
    pandas.DataFrame
        One row per group and threshold: the keys, ``threshold``, ``risk_gap`` = risk −
        bayes_risk (≤ plug-in ECE), ``n``, ``W``, ``risk`` (the plug-in risk
        :math:`\hat R_{bd}(f;\tau)`), ``bayes_risk`` (the grouped-Bayes risk: the best rule on
        the level sets),
        ``monotone_risk`` (the best threshold rule in either direction, "never act" and "always
        act" included), ``monotone_risk_gap`` = risk − monotone_risk (≤ 2·cutoff error),
        ``best_rule`` ("never", "always", "increasing": act iff score ≥ ``best_threshold``, or
        "decreasing": act iff score ≤ ``best_threshold``) and ``best_threshold`` (NaN for never
        and always); with ``on_invalid="drop"``, ``n_dropped``.

    See Also
    --------
    decision_loss : the same gap for any fixed payoff table.
    calibration_decision_loss : the worst gap over all bounded tasks.
    cutoff_error : the testable error that bounds the monotone gap.

    Notes
    -----
    Rossellini, Soloff, Barber, Ren and Willett (2025), Can a calibration metric be both testable
    and actionable?, Section 3, Props. 3.1 and 3.2. The loss is
    :math:`\ell_{bd}(y,\hat y;\tau)=\tau(1-y)\hat y+(1-\tau)y(1-\hat y)`, and the plug-in rule acts
    iff :math:`p\ge\tau` (a score equal to τ acts). With :math:`N^0_k, Y_k` the weights of
    negatives and positives at the k-th distinct score, everything is a cumulative sum over the
    level sets (O(m) per τ), normalised by W:

    .. math:: \text{bayes\_risk}=\sum_k\min(\tau N^0_k,(1-\tau)Y_k)/W,\quad
       L^\uparrow_k=\tau\sum_{j\ge k}N^0_j+(1-\tau)\sum_{j<k}Y_j,\quad
       L^\downarrow_k=\tau\sum_{j\le k}N^0_j+(1-\tau)\sum_{j>k}Y_j .

    The monotone gap is testable (bounded by twice the cutoff error, which concentrates); the
    grouped-Bayes gap is not: with one row per distinct score it collapses to the risk itself.
    The two bounds hold exactly on the (weighted) empirical law. Ties in the best rule are
    resolved in the order never, always, increasing, decreasing (lowest threshold first).

    References
    ----------
    .. [1] R. Rossellini, J. A. Soloff, R. Foygel Barber, Z. Ren and R. Willett, "Can a Calibration
       Metric Be Both Testable and Actionable?", arXiv:2502.19851, 2025.

    Examples
    --------
    >>> import pandas as pd, sqlcal
    >>> df = pd.DataFrame({"p": [0.2, 0.2, 0.8, 0.8], "y": [1, 0, 0, 0]})
    >>> out = sqlcal.decision_risk_gap(df, score="p", label="y", threshold=0.5)
    >>> out[["risk", "bayes_risk", "monotone_risk_gap", "best_rule"]]
        risk  bayes_risk  monotone_risk_gap best_rule
    0  0.375       0.125               0.25     never
    """
    thresholds = _thresholds(threshold)
    src = as_source(data, score, label, weight=weight, by=by, where=where, **source_options)
    levels = level_slabs(src).read_first()  # the first read validates: are labels binary?
    executor.require_binary_labels(src, "the decision risk gap")
    values = risk_gap_finish(levels, by=src.by, thresholds=thresholds, totals=levels.totals())
    return src.present(_by_threshold(src, values, _RISK_COLUMNS, "threshold", thresholds))


_RISK_COLUMNS = ["threshold", "risk_gap", "risk", "bayes_risk", "monotone_risk",
                 "monotone_risk_gap", "best_rule", "best_threshold"]


def risk_gap_finish(levels, *, by: Sequence[str] = (),
                    thresholds: Sequence[float] = (0.5,),
                    totals: pd.DataFrame | None = None) -> pd.DataFrame:
    """The plug-in, grouped-Bayes and best monotone risks of each group, from its level sets.

    Parameters
    ----------
    levels : pandas.DataFrame or iterable of pandas.DataFrame
        The levels summary, sorted by group and score: the group keys, ``p``, ``n``, ``W``,
        ``swy`` (binary labels); or its slabs in increasing score, as
        :func:`sqlcal.metrics.cells.level_slabs` gives them (iterated twice: the totals, then
        the running sums).
    by : sequence of str, default ()
        The group keys.
    thresholds : sequence of float, default (0.5,)
        The decision thresholds τ.
    totals : pandas.DataFrame, optional
        Per group (the keys) ``n``, ``W`` and ``swy`` of all the levels: then the levels are
        iterated once only.

    Returns
    -------
    pandas.DataFrame
        One row per group and threshold: the keys, ``n``, ``W`` and the columns of
        :func:`decision_risk_gap` from ``threshold`` to ``best_threshold``.

    Examples
    --------
    >>> levels = pd.DataFrame({"p": [0.2, 0.8], "n": [2, 2], "W": [2.0, 2.0],
    ...                        "swy": [1.0, 0.0]})
    >>> risk_gap_finish(levels)[["risk", "bayes_risk", "best_rule"]]
        risk  bayes_risk best_rule
    0  0.375       0.125     never
    """
    slabs = as_slabs(levels)
    index = GroupIndex(by)
    n, W, Y = np.zeros(0, np.int64), np.zeros(0), np.zeros(0)
    for slab in [totals] if totals is not None else slabs:  # each rule's cost needs the
        g = index.codes(slab)  # group's Σ of either label
        G = len(index)
        n, W, Y = grown(n, G), grown(W, G), grown(Y, G)
        n += np.bincount(g, weights=slab["n"].to_numpy(float), minlength=G).astype(np.int64)
        W += np.bincount(g, weights=slab["W"].to_numpy(float), minlength=G)
        Y += np.bincount(g, weights=slab["swy"].to_numpy(float), minlength=G)
        del slab, g
    G, T = len(index), len(thresholds)
    taus = np.asarray(thresholds, float)
    N = W - Y
    risk, bayes = np.zeros((G, T)), np.zeros((G, T))
    # running sums of the levels before the slab (P_k = Σ_{j<k}), and the candidate rules
    # within the tie tolerance of each slab's best (kept in the order of the rules)
    PY, PN, seen = np.zeros(G), np.zeros(G), np.zeros(G, np.int64)
    found: list[list] = [[] for _ in range(T)]
    for slab in slabs:
        # a score held only by weight-0 rows is no threshold
        g, u, _, Wk, Yk = index.levels(slab, ordered=True).live()
        N0 = Wk - Yk
        # Σ over this slab's earlier levels of the group, plus the slabs before
        CY, CN = _group_cumsum(Yk, g), _group_cumsum(N0, g)
        before_Y, before_N = PY[g] + CY - Yk, PN[g] + CN - N0
        rank = seen[g] + _group_rank(g)  # the level's position k in its group
        for i, t in enumerate(taus):
            act = u >= t
            risk[:, i] += np.bincount(g, weights=np.where(act, t * N0, (1 - t) * Yk),
                                      minlength=G)
            bayes[:, i] += np.bincount(g, weights=np.minimum(t * N0, (1 - t) * Yk), minlength=G)
            # act iff p ≥ u_k (k ≥ 1), and act iff p ≤ u_k (k ≤ K − 2: the last one is "always",
            # listed before it and equal to it, so keeping it here changes nothing)
            up = t * (N[g] - before_N) + (1 - t) * before_Y
            down = t * (before_N + N0) + (1 - t) * (Y[g] - before_Y - Yk)
            tol = 1e-12 * W[g]
            for kind, cost, ok in ((0, up, rank >= 1), (1, down, np.ones(len(g), bool))):
                if not ok.any():
                    continue
                least = np.full(G, np.inf)
                np.minimum.at(least, g[ok], cost[ok])
                near = ok & (cost <= least[g] + tol)
                found[i].append((np.full(int(near.sum()), kind), g[near], cost[near],
                                 u[near]))
        PY += np.bincount(g, weights=Yk, minlength=G)
        PN += np.bincount(g, weights=N0, minlength=G)
        seen += np.bincount(g, minlength=G)
        # freed before the next slab is read (the loop would hold them through its query)
        del slab, g, u, Wk, Yk, N0, CY, CN, before_Y, before_N, rank, up, down
    rows = []
    for i, t in enumerate(taus):
        never, always = (1 - t) * Y, t * N
        kinds = [np.concatenate([f[j] for f in found[i]]) if found[i] else np.zeros(0)
                 for j in range(4)]
        least = np.minimum(never, always)
        if len(kinds[1]):
            np.minimum.at(least, kinds[1].astype(np.int64), kinds[2])
        rows.append((never, always, least, kinds))
    out = []
    for gi, key in enumerate(index.keys):
        base = {**key, "n": int(n[gi]), "W": float(W[gi])}
        for i, t in enumerate(taus):
            if not W[gi] > 0:
                out.append(base | {"threshold": t} | _nan_row(
                    "risk", "bayes_risk", "risk_gap", "monotone_risk", "monotone_risk_gap",
                    "best_threshold") | {"best_rule": None})
                continue
            never, always, least, (kind, at, cost, score) = rows[i]
            best, tol = least[gi], 1e-12 * W[gi]
            if never[gi] <= best + tol:
                rule, where = "never", np.nan
            elif always[gi] <= best + tol:
                rule, where = "always", np.nan
            else:  # the first kept candidate of the group within the tolerance: up before down
                mine = np.flatnonzero((at == gi) & (cost <= best + tol))
                first = mine[np.argmin(kind[mine])] if len(mine) else None
                rule = "increasing" if first is None or kind[first] == 0 else "decreasing"
                where = np.nan if first is None else float(score[first])
            r = risk[gi, i] / W[gi]
            b = bayes[gi, i] / W[gi]
            out.append(base | {"threshold": t, "risk": r, "bayes_risk": b, "risk_gap": r - b,
                               "monotone_risk": best / W[gi],
                               "monotone_risk_gap": r - best / W[gi], "best_rule": rule,
                               "best_threshold": where})
    return _frame(out, by, _RISK_COLUMNS)


# the rules cut the score axis: its statement depends on what the caller passes (not in sql/)
@metric(needs=lambda src, o: _expected_cost_needs(src, o), caller_shaped=True)
@checked
def expected_cost(
    data: Any,
    *,
    score: str | None = None,
    label: str | None = None,
    weight: str | None = None,
    by: str | Sequence[str] = (),
    where: Any = None,
    rules: Any = None,
    actions: Any = None,
    epsilon: float | None = None,
    validation: Any = None,
    validation_label: str | None = None,
    confidence: float = 0.9,
    tie: str = "higher",
    **source_options: Any,
) -> pd.DataFrame:
    r"""The expected cost of interval decision rules, estimated from the scores alone (no
    labels needed), with an error bound from a calibration bound.

    Parameters
    ----------
    data : Source, ibis Table, path, URL or DataFrame
        What to measure; see :func:`sqlcal.source`.
    score : str, optional
        Column of predicted probabilities of the positive class (not needed when ``data`` is a
        :class:`~sqlcal.Source`).
    weight : str, optional
        Column of non-negative row weights; by default every row weighs 1.
    by : str or sequence of str, default ()
        Group keys: one result row per group.
    where : ibis boolean expression, callable or SQL string, optional
        Filter applied in the engine before anything else.
    label : str, optional
        A label column, when the table has one: adds the realised cost, to compare.
    rules : sequence of (l, r, a, b), DataFrame, or dict of those
        A decision rule: disjoint score intervals (l, r], each with an action costing a per
        positive and b per negative (a score in no interval costs nothing; use l < 0 to include
        a score of 0). Several rules: a dict name → rule, or a DataFrame with columns ``rule``,
        ``l``, ``r``, ``a``, ``b``. A single rule is named ``"rule"``.
    actions : sequence of (a, b) or dict name → (a, b), optional
        Actions with their costs per positive and per negative: adds the rule ``"best"``, the
        one with the lowest estimated cost among all rules over these actions (each score takes
        the action with the lowest a·f + b·(1 − f): Bayes on the scores, which is an interval
        rule). Its intervals are in the ``intervals`` column, as (l, r] in doubles.
    epsilon : float, optional
        A bound on the cutoff error :math:`c_{emp}` of this table's own rows: then the bound on
        the realised cost is deterministic (Gao et al. eq. (2)).
    validation : Source or data, optional
        Instead of ``epsilon``: labeled held-out rows scored by the same model. Data (a frame,
        path, Ibis table, ...) is read exactly as this table is: the same score column, the same
        weight column (a weighted table makes a weighted validation set: its rows' weights count
        as this table's do), the same group keys, ``on_invalid`` and ``soft_labels``, and the
        label column ``validation_label`` (default: ``label``). ``where=`` filters this table
        only. A :func:`sqlcal.source` is taken as it is, but must be weighted like this table
        (the same weight column, or none when this table has none: a mismatch is an error) and
        grouped by ``by`` or not at all. See Notes for what the bounds then mean.
    validation_label : str, optional
        The label column of ``validation`` when it is data; required when this table has no
        label.
    confidence : float, default 0.9
        With ``validation``: the confidence level of the bounds (the ``confidence`` column);
        each of the two statements behind them fails with probability δ = (1 − confidence)/2.
    tie : {"higher", "lower"}, default "higher"
        With ``actions``: where two actions cost the same at a score, the one best just above
        it (the least a − b: the action for higher probabilities, as :func:`decision_loss`) or
        just below it; identical actions go to the first listed. Decided exactly: the costs are
        read as the decimals they print as (0.1 is 1/10), two actions' cost lines cross at an
        exact rational, a score equal to the double nearest that crossing is a tie, and every
        other score is on the side its exact value is. For the actions (1, 0), (0.1, 0.3),
        (0, 0.6) the scores 0.25 and 0.75 are ties: "higher" gives them the second and third
        action, "lower" the first and second.
    **source_options
        Further options of :func:`sqlcal.source`, such as ``table=``, ``on_invalid=`` and
        ``soft_labels=``.

    Returns
    -------
    pandas.DataFrame
        One row per group and rule: the keys, ``rule``, ``expected_cost`` (the label-free
        estimate per unit weight, :math:`\sum_i w_i\sum_j 1\{l_j<f_i\le r_j\}
        [a_jf_i+b_j(1-f_i)]/W`; times W for the total), ``n``, ``W``, ``error_bound`` (bound on
        the absolute difference between the realised cost per unit weight and the estimate),
        ``cost_lower``,
        ``cost_upper`` (the range of the realised cost the bound allows: estimate ∓ bound, cut
        to the costs labels can give; see Notes), ``epsilon`` (the bound used for this table's
        cutoff error), ``population_bound`` (with ``validation``: bound on the absolute difference
        between the population's expected cost per row and the estimate), ``coverage`` (share
        of the weight in some interval), ``realised_cost`` (with labels; else NaN),
        ``intervals`` (the rule: a list of (l, r, a, b)), ``actions`` (for the rule ``"best"``,
        the action name of each interval; else None) and ``confidence`` (of the bounds: 1 − 2δ
        with ``validation``; NaN when ``epsilon`` is given, whose own confidence carries over).
        With ``on_invalid="drop"``, ``n_dropped``.

    See Also
    --------
    cutoff_error : the calibration bound its error bound rests on.
    decision_risk_gap : the realised risk of a threshold rule on labelled rows.
    decision_loss : the payoff lost by one decision task on labelled rows.

    Notes
    -----
    Gao, Parameswaran and Peng (2017), On the interpretability of conditional probability
    estimates in the agnostic setting, Section 2.4 Claim 1 and Section 3.3.4 eq. (2). For every
    interval, :math:`|\sum_i w_i1\{l<f_i\le r\}(y_i-f_i)|\le c_{emp}W`, so the realised cost
    differs from the estimate by at most :math:`c_{emp}\sum_j|a_j-b_j|` per unit weight.
    ``cost_lower`` and ``cost_upper`` are the tightest range this gives: the label mass
    :math:`Y_j` of interval j lies within :math:`\epsilon W` of its score mass :math:`F_j` and
    in :math:`[0, W_j]` (labels are in [0, 1]), and the realised cost is
    :math:`\sum_j[a_jY_j+b_j(W_j-Y_j)]/W`, each term at its smallest or largest. So the range is
    inside estimate ∓ ``error_bound`` and inside
    :math:`[\sum_jW_j\min(a_j,b_j),\ \sum_jW_j\max(a_j,b_j)]/W`: a cost of 0 is in it only
    through scores in no interval. NaN without ``epsilon`` or ``validation``.

    With ``validation`` (rows not used to fit or recalibrate the model, i.i.d. like this table),
    :math:`\hat\epsilon` is the ``upper_bound`` column of :func:`sqlcal.cutoff_error` on them:
    :math:`c_{emp}(\text{val})+\sqrt{2\ln(1/\delta)/n_{val}}\ge c(f)` with probability 1 − δ. The
    unlabeled table's own :math:`c_{emp}` cannot be computed, so it is
    bounded by :math:`\hat\epsilon+(20+\sqrt{2\ln(1/\delta)})/\sqrt n` (Rossellini et al. Prop.
    4.1, probability 1 − δ; a smaller constant than the Theorem 2 radius of Gao et al.):
    ``error_bound`` then holds with probability at least 1 − 2δ, and
    is loose below about 10⁵ rows. ``population_bound`` bounds the expected cost per row of the
    population instead (Claim 1 plus Hoeffding on the estimate, range R of the costs):
    :math:`\hat\epsilon\sum_j|a_j-b_j| + R\sqrt{\ln(2/\delta)/(2n)}`, also with probability at
    least 1 − 2δ, and much tighter. n is W for whole-number weights, W²/Σw² otherwise (a
    heuristic). Both statements assume i.i.d. rows: drift between the validation rows and this
    table breaks them.

    The validation rows' weights count exactly as this table's: a row of weight 0 is no row,
    whole-number weights are repeated rows (in the cutoff error and in its n), other weights
    sampling weights (n = W²/Σw², as :func:`sqlcal.cutoff_error`).

    References
    ----------
    .. [1] Y. Gao, A. Parameswaran and J. Peng, "On the Interpretability of Conditional Probability
       Estimates in the Agnostic Setting", AISTATS (PMLR 54), 2017.
    .. [2] R. Rossellini, J. A. Soloff, R. Foygel Barber, Z. Ren and R. Willett, "Can a Calibration
       Metric Be Both Testable and Actionable?", arXiv:2502.19851, 2025.

    Examples
    --------
    >>> import pandas as pd, sqlcal
    >>> df = pd.DataFrame({"p": [0.1, 0.4, 0.6, 0.9], "y": [0, 1, 0, 1]})
    >>> rule = [(-1, 1 / 3, 1.0, 0.0), (1 / 3, 1, 0.0, 0.5)]
    >>> out = sqlcal.expected_cost(df, score="p", label="y", rules=rule, epsilon=0.15)
    >>> out[["expected_cost", "error_bound", "realised_cost"]].round(6)
       expected_cost  error_bound  realised_cost
    0         0.1625        0.225          0.125
    """
    if epsilon is not None and validation is not None:
        raise ValueError("pass epsilon= or validation=, not both")
    if epsilon is not None and not (np.isfinite(epsilon) and epsilon >= 0):
        raise ValueError(f"epsilon must be a non-negative number, not {epsilon!r}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), not {confidence!r}")
    delta = (1 - confidence) / 2
    if tie not in ("higher", "lower"):
        raise ValueError(f"tie must be 'higher' or 'lower', not {tie!r}")
    table = rules_table(rules, actions, tie)
    src, labelled = _cost_source(data, score, label, weight, by, where, source_options)
    pieces = planner.fetch(src, _pieces_summary(table))
    bounds = _validation_bound(validation, validation_label, src, labelled, delta)
    values = expected_cost_finish(pieces, table, by=src.by, labelled=labelled, epsilon=epsilon,
                                  validation_bounds=bounds, delta=delta,
                                  frequency=resolve_weight_kind(src, "auto") == "frequency")
    names = list(dict.fromkeys(table["rule"]))
    out = _by_threshold(src, values, _COST_COLUMNS, "rule", names)
    if (out["coverage"] < 1 - 1e-12).any():
        warnings.warn("some scores fall in no interval of a rule and cost nothing there (see "
                      "the coverage column); use l < 0 and r ≥ 1 to cover every score",
                      stacklevel=2)
    rules = {name: rule for name, rule in table.groupby("rule", sort=False)}
    intervals = {name: [tuple(float(x) for x in row)
                        for row in rule[["l", "r", "a", "b"]].itertuples(index=False)]
                 for name, rule in rules.items()}
    actions = {name: (list(rule["action"]) if "action" in rule and rule["action"].notna().all()
                      else None) for name, rule in rules.items()}
    return src.present(_with_trust(
        out, intervals=out["rule"].map(intervals).tolist(),
        actions=out["rule"].map(actions).tolist(),
        confidence=confidence if validation is not None else np.nan))


_COST_COLUMNS = ["rule", "expected_cost", "error_bound", "cost_lower", "cost_upper", "epsilon",
                 "population_bound", "coverage", "realised_cost"]


def rules_table(rules: Any = None, actions: Any = None, tie: str = "higher") -> pd.DataFrame:
    """The interval rules of :func:`expected_cost` as one frame, checked.

    Parameters
    ----------
    rules, actions, tie
        As for :func:`expected_cost` (at least one of ``rules`` and ``actions``).

    Returns
    -------
    pandas.DataFrame
        One row per interval: ``rule``, ``l``, ``r``, ``a``, ``b``, and ``action`` for the rule
        ``"best"`` found from ``actions``.

    Examples
    --------
    >>> rules_table([(-1, 0.5, 1.0, 0.0), (0.5, 1, 0.0, 1.0)])[["rule", "l", "r"]]
       rule    l    r
    0  rule -1.0  0.5
    1  rule  0.5  1.0
    """
    if rules is None and actions is None:
        raise TypeError("pass rules= (interval rules) or actions= (to find the best rule), or both")
    parts = [] if rules is None else [_rules_table(rules)]
    if actions is not None:
        if parts and "best" in set(parts[0]["rule"]):
            raise ValueError("a rule is named 'best'; rename it (actions= adds the rule 'best')")
        parts.append(_best_rule(actions, tie))
    return pd.concat(parts, ignore_index=True)


def expected_cost_finish(pieces: pd.DataFrame, rules: pd.DataFrame, *, by: Sequence[str] = (),
                         labelled: bool = True, epsilon: float | None = None,
                         validation_bounds: pd.DataFrame | None = None, delta: float = 0.05,
                         frequency: bool = True) -> pd.DataFrame:
    """The label-free cost of each rule in each group, with its bounds, from the score-interval
    summary.

    Parameters
    ----------
    pieces : pandas.DataFrame
        The summary of the score axis cut at the rules' interval ends (:func:`interval_cuts`):
        per group and piece ``interval``, ``n``, ``W`` = Σw, ``swp`` = Σwf, ``swy`` = Σwy and
        ``sw2`` = Σw².
    rules : pandas.DataFrame
        The rules, as :func:`rules_table` gives them.
    by : sequence of str, default ()
        The group keys.
    labelled : bool, default True
        Whether ``swy`` holds labels (else ``realised_cost`` is NaN).
    epsilon : float, optional
        A bound on this table's cutoff error, as for :func:`expected_cost`.
    validation_bounds : pandas.DataFrame, optional
        Instead of ``epsilon``: the validation rows' cutoff-error ``upper_bound``, per group (the
        keys) or one row for every group.
    delta : float, default 0.05
        Failure probability of each confidence statement (with ``validation_bounds``).
    frequency : bool, default True
        Whether the weights count rows (n = W), else n = W²/Σw².

    Returns
    -------
    pandas.DataFrame
        One row per group and rule: the keys, ``n``, ``W`` and the columns of
        :func:`expected_cost` from ``rule`` to ``realised_cost``.

    Examples
    --------
    >>> pieces = pd.DataFrame({"interval": [0, 1], "n": [2, 2], "W": [2.0, 2.0],
    ...                        "swp": [0.5, 1.5], "swy": [1.0, 1.0], "sw2": [2.0, 2.0]})
    >>> rules = rules_table([(-1, 0.5, 1.0, 0.0), (0.5, 1, 0.0, 0.5)])
    >>> expected_cost_finish(pieces, rules, epsilon=0.1)[["expected_cost", "error_bound"]]
       expected_cost  error_bound
    0         0.1875         0.15
    """
    by = list(by)
    cuts = interval_cuts(rules)
    spans = {(l, r): _span(l, r, cuts) for l, r in zip(rules["l"], rules["r"])}
    named = list(rules.groupby("rule", sort=False))
    rows = []
    for key, part in groups(pieces, by):
        at = part["interval"].to_numpy(np.int64)
        sums = {}
        for c in ("W", "swp", "swy"):
            per_piece = np.zeros(len(cuts) + 1)
            np.add.at(per_piece, at, part[c].to_numpy(float))
            sums[c] = per_piece
        W, sw2 = float(part["W"].sum()), float(part["sw2"].sum())
        n_eff = W if frequency else (W * W / sw2 if sw2 > 0 else np.nan)
        if validation_bounds is None:
            eps_sample, eps_pop = (np.nan if epsilon is None else float(epsilon)), np.nan
        else:
            eps_pop = _bound_of(validation_bounds, by, key)
            with np.errstate(divide="ignore"):
                eps_sample = eps_pop + (20 + np.sqrt(2 * np.log(1 / delta))) / np.sqrt(n_eff)
        masses = {iv: tuple(float(sums[c][lo:hi + 1].sum()) for c in ("W", "swp", "swy"))
                  for iv, (lo, hi) in spans.items()}
        for name, rule in named:
            rows.append({**key, "rule": name, "n": int(part["n"].sum()), "W": W,
                         **_rule_cost(W, masses, rule, labelled, eps_sample, eps_pop, n_eff,
                                      delta)})
    return _frame(rows, by, _COST_COLUMNS)


def interval_cuts(rules: pd.DataFrame) -> tuple[float, ...]:
    """The ends that bound the rules' intervals (l, r]: every l ≥ 0 and every r < 1 (a score is
    in [0, 1], so the others bound nothing), sorted and distinct.

    Parameters
    ----------
    rules : pandas.DataFrame
        As :func:`rules_table` gives them.

    Returns
    -------
    tuple of float
        The cuts of the intervals summary (:func:`sqlcal.query.declared.intervals`).

    Examples
    --------
    >>> interval_cuts(rules_table([(-1, 0.5, 1.0, 0.0), (0.5, 1, 0.0, 1.0)]))
    (0.5,)
    """
    ends = [float(l) for l in rules["l"] if l >= 0] + [float(r) for r in rules["r"] if r < 1]
    return tuple(sorted(set(ends)))


def _pieces_summary(rules: pd.DataFrame) -> declared.Summary:
    """The summary :func:`expected_cost_finish` reads: the score axis cut at the rules' ends."""
    return declared.intervals(interval_cuts(rules), "sums", "sw2")


def _span(l: float, r: float, cuts: tuple) -> tuple[int, int]:
    """The first and last piece of (l, r] on the axis cut at ``cuts`` (piece k is
    (cuts[k − 1], cuts[k]])."""
    lo = int(np.searchsorted(cuts, l)) + 1 if l >= 0 else 0
    hi = int(np.searchsorted(cuts, r)) if r < 1 else len(cuts)
    return lo, hi


def _bound_of(bounds: pd.DataFrame, by: list, key: dict) -> float:
    """The validation bound of one group: its own row, or the one row of an ungrouped
    validation (NaN for a group the validation rows lack)."""
    keys = [k for k in by if k in bounds]
    if not keys:
        return float(bounds["upper_bound"].iloc[0])
    for row in bounds[[*keys, "upper_bound"]].itertuples(index=False):
        if key_tuple(dict(zip(keys, row[:-1]))) == key_tuple({k: key[k] for k in keys}):
            return float(row[-1])
    return np.nan


def _expected_cost_needs(src: Source, options: dict) -> list:
    if options["validation"] is not None:
        raise ValueError(
            "expected_cost(validation=...) reads a second table (the labeled validation rows, "
            "whose cutoff error bounds the cost), which the statements of one table cannot "
            "hold: pass epsilon= (e.g. the upper_bound of sqlcal.cutoff_error on the validation "
            "rows), or measure with sqlcal where both tables are")
    return [_pieces_summary(rules_table(options["rules"], options["actions"], options["tie"]))]


# -- CDL: the LP and the V-curve ----------------------------------------------------------------


def cdl_lp(v, mass, ybar) -> float:
    """The CDL of the law with mass ``mass[j]`` at score ``v[j]`` and E[y | v] = ``ybar[j]``: an
    LP over the slopes of the payoff potential (HiGHS), certified to agree with the exact
    envelope (:func:`cdl_hull`) within ``LP_GAP`` times the live mass.

    The potential ψ is convex and piecewise linear on the breakpoints t_0 = 0 < … < t_{K−1} = 1
    (every v_j and ȳ_j), with ψ(0) = ψ(1) = 0 (the chord is subtracted, as in :func:`cdl_hull`).
    Its slopes are γ_0 (the subgradient at 0), γ_i on (t_{i−1}, t_i) and γ_K (the subgradient at
    1), nondecreasing; payoffs in [0, 1] are γ_0 ≥ −1 and γ_K ≤ 1, and ψ(1) = 0 is Σ_i d_i γ_i = 0
    with d_i the segment lengths (d_0 = d_K = 0). Level set j's Bregman term, with the subgradient
    at v_j taken on the side of ȳ_j (adversarial tie-breaking), is
    Σ_{i∈(a,b]} d_i (γ_i − γ_a) when ȳ_j > v_j and Σ_{i∈(b,a]} d_i (γ_{a+1} − γ_i) otherwise
    (t_a = v_j, t_b = ȳ_j): a linear objective Σ_i c_i γ_i. In the slope increments μ_k = γ_{k+1}
    − γ_k ≥ 0 (the kink at t_k), γ_0 = −Σ_k μ_k (1 − t_k) and γ_K = Σ_k μ_k t_k, so the LP is

        max Σ_k μ_k Σ_{i>k} c_i   s.t.   Σ_k μ_k (1 − t_k) ≤ 1,  Σ_k μ_k t_k ≤ 1,  μ ≥ 0:

    two rows, coefficients of order one however close the breakpoints are. (The earlier LP in
    potential values and subgradients mixed them with the gaps t_{k+1} − t_k, and within HiGHS's
    absolute tolerances it missed the envelope by up to 3e-5 above and 0.08 either way on
    near-degenerate breakpoints.) HiGHS solves it with primal and dual
    tolerances 1e-10; the returned slopes, clipped to feasibility, give a lower bound and the duals,
    lifted to feasibility, an upper bound. When the two differ by more than ``LP_GAP`` the LP warns
    and returns the envelope."""
    v, mass, ybar = (np.asarray(a, float) for a in (v, mass, ybar))
    live = (mass > 0) & (ybar != v)
    if not live.any():
        return 0.0
    # the objective over the live mass: HiGHS's absolute tolerances are then relative to the value
    scale = float(mass[live].sum())
    v, ybar, n = v[live], ybar[live], mass[live] / scale
    t = np.unique(np.concatenate([v, ybar, [0.0, 1.0]]))
    K = len(t)
    a, b = np.searchsorted(t, v), np.searchsorted(t, ybar)
    up = b > a
    sign = np.where(up, 1.0, -1.0)
    d = np.concatenate([[0.0], np.diff(t), [0.0]])
    # c_i: ±n_j d_i on the slopes between v_j and ȳ_j (a difference array), and ∓n_j |ȳ_j − v_j|
    # on the slope beside v_j on ȳ_j's side
    span = np.zeros(K + 2)
    np.add.at(span, np.minimum(a, b) + 1, sign * n)
    np.add.at(span, np.maximum(a, b) + 1, -sign * n)
    c = np.cumsum(span)[:K + 1] * d
    np.add.at(c, np.where(up, a, a + 1), -sign * n * np.abs(ybar - v))
    gain = np.cumsum(c[::-1])[::-1][1:]  # Σ_{i>k} c_i, the objective of the kink at t_k
    A = np.vstack([1 - t, t])
    res = optimize.linprog(-gain, A_ub=A, b_ub=[1.0, 1.0], bounds=(0, None), method="highs",
                           options={"primal_feasibility_tolerance": 1e-10,
                                    "dual_feasibility_tolerance": 1e-10})
    if res.status == 0:
        mu = np.maximum(res.x, 0.0)
        mu /= max(1.0, *(A @ mu))
        lower = max(float(gain @ mu), 0.0)
        dual = np.maximum(-res.ineqlin.marginals, 0.0)
        upper = float(dual.sum()) + 2 * max(float((gain - dual @ A).max()), 0.0)
        if upper - lower <= LP_GAP:
            return lower * scale
        message = f"its optimality gap {upper - lower:.1e} exceeds {LP_GAP:.0e}"
    else:
        message = res.message
    warnings.warn(f"the CDL LP failed ({message}); using the exact envelope instead",
                  RuntimeWarning, stacklevel=3)
    return cdl_hull(v, n, ybar) * scale


def cdl_hull(v, mass, ybar) -> float:
    """The CDL of the law with mass ``mass[j]`` at score ``v[j]`` and E[y | v] = ``ybar[j]``: the
    upper concave envelope of the closed V-curve, evaluated at 1/2 (derived below; exact, no
    solver, O(m log m)).

    Why: subtracting the chord of φ (Bregman divergences ignore affine terms), payoffs in [0, 1]
    are exactly the convex ψ with ψ(0) = ψ(1) = 0 and subgradients in [−1, 1] (the extreme
    tangents, at 0 and 1, bound all others). Writing μ = dψ' (a measure on [0, 1], the endpoint
    atoms being the subgradient choices there), ψ(1) − ψ(0) = 0 gives ψ'(0) = −∫(1 − s)dμ and
    ψ'(1) = ∫s dμ, so the constraints are ∫s dμ ≤ 1 and ∫(1 − s)dμ ≤ 1, and Σ_j n_j D_ψ(ȳ_j‖v_j)
    = ∫ V_c(s)/2 dμ(s), the closed V-curve because each level set may take the atom at its own
    v_j (adversarial tie-breaking). A linear objective under two constraints is maximal at a
    measure with at most two atoms s₁ ≤ 1/2 ≤ s₂, whose value is the height at 1/2 of the chord
    joining (s₁, V_c(s₁)) and (s₂, V_c(s₂)); one atom is a chord to (0, 0) or (1, 0), the
    two-action tasks. V_c is linear between breakpoints, so the envelope of its breakpoints is
    enough. The linear-size LP (:func:`cdl_lp`) gives the same values.
    """
    t, V = _v_closed(v, mass, ybar)
    if t is None:
        return 0.0
    t, V = np.concatenate([[0.0], t, [1.0]]), np.concatenate([[0.0], V, [0.0]])
    h = upper_hull(t, V)
    return float(np.interp(0.5, t[h], V[h]))


def v_curve(v, mass, ybar) -> tuple[float, float]:
    """(V*, sup_t V(t)/(2 max(t, 1 − t))) for the V-curve of Gopalan and Hu (2025), Theorem
    4.10 and (4.12)."""
    t, V = _v_closed(v, mass, ybar)
    if t is None:
        return 0.0, 0.0
    return float(V.max()), float((V / (2 * np.maximum(t, 1 - t))).max())


def _v_closed(v, mass, ybar):
    """The breakpoints t (with 1/2) and the closed-interval V-curve V_c there.

    Each level set adds 2n|ȳ − t| on (min(ȳ, v), max(ȳ, v)]; V is linear between breakpoints, and
    its sup is the closed-interval version at a breakpoint (the v_j are distinct, so no breakpoint
    joins a positive term ending there with a positive term starting there). One sort and two
    searchsorted passes: O(m log m)."""
    v, mass, ybar = (np.asarray(a, float) for a in (v, mass, ybar))
    live = (mass > 0) & (ybar != v)
    if not live.any():
        return None, None
    v, mass, ybar = v[live], mass[live], ybar[live]
    lo, hi = np.minimum(v, ybar), np.maximum(v, ybar)
    # on [lo, hi] the term is α t + β: 2n(t − ȳ) when over-predicted (ȳ < v), 2n(ȳ − t) otherwise
    alpha = np.where(ybar < v, 2 * mass, -2 * mass)
    beta = -alpha * ybar
    t = np.unique(np.concatenate([lo, hi, [0.5]]))
    by_lo, by_hi = np.argsort(lo, kind="stable"), np.argsort(hi, kind="stable")
    cum = lambda x, order: np.concatenate([[0.0], np.cumsum(x[order])])
    started = np.searchsorted(lo[by_lo], t, side="right")  # lo ≤ t
    ended = np.searchsorted(hi[by_hi], t, side="left")  # hi < t
    A = cum(alpha, by_lo)[started] - cum(alpha, by_hi)[ended]
    B = cum(beta, by_lo)[started] - cum(beta, by_hi)[ended]
    return t, np.maximum(A * t + B, 0.0)


# -- fixed tasks and risks ----------------------------------------------------------------------


def _threshold_loss(v, mass, ybar, t, tie) -> dict:
    if mass is None:
        return _nan_row("decision_loss", "payoff", "recalibrated_payoff")
    # payoffs (1, t) for not acting and (1 − t, 1) for acting: slope jump 1, threshold t
    act, best = (v >= t, ybar >= t) if tie == "higher" else (v > t, ybar > t)
    payoff_of = lambda a: np.where(a, (1 - ybar) * (1 - t) + ybar, (1 - ybar) + ybar * t)
    return {"decision_loss": float((mass * np.abs(ybar - t) * (act != best)).sum()),
            "payoff": float((mass * payoff_of(act)).sum()),
            "recalibrated_payoff": float((mass * payoff_of(best)).sum())}


def _finite_task_loss(v, mass, ybar, table, tie) -> dict:
    if mass is None:
        return _nan_row("decision_loss", "payoff", "recalibrated_payoff")
    at_y = np.outer(1 - ybar, table[:, 0]) + np.outer(ybar, table[:, 1])
    # the best response to v, decided exactly (ties by the rule of _best_pieces): the payoff
    # u(a, 0)(1 − q) + u(a, 1)q is minus the cost with a = −u(a, 1), b = −u(a, 0)
    pieces = _best_pieces(-table[:, ::-1], tie)
    ends = np.array([r for r, _ in pieces])
    actions = np.array([j for _, j in pieces])
    played = actions[np.minimum(np.searchsorted(ends, v, side="left"), len(ends) - 1)]
    got = at_y[np.arange(len(v)), played]
    best = at_y.max(axis=1)
    return {"decision_loss": float((mass * (best - got)).sum()),
            "payoff": float((mass * got).sum()), "recalibrated_payoff": float((mass * best).sum())}


def _risks(u, Wk, Yk, t) -> dict:
    W = Wk.sum()
    if not W > 0:
        return _nan_row("risk", "bayes_risk", "risk_gap", "monotone_risk",
                        "monotone_risk_gap", "best_threshold") | {"best_rule": None}
    N0 = Wk - Yk
    act = u >= t
    risk = (t * N0[act].sum() + (1 - t) * Yk[~act].sum()) / W
    bayes = np.minimum(t * N0, (1 - t) * Yk).sum() / W
    # prefix sums with a leading 0: P[k] = Σ_{j<k}
    PY, PN = np.concatenate([[0.0], np.cumsum(Yk)]), np.concatenate([[0.0], np.cumsum(N0)])
    never, always = (1 - t) * PY[-1], t * PN[-1]
    K = len(u)
    up = t * (PN[-1] - PN[1:K]) + (1 - t) * PY[1:K]  # act iff p ≥ u_k, k = 2..K
    down = t * PN[1:K] + (1 - t) * (PY[-1] - PY[1:K])  # act iff p ≤ u_k, k = 1..K−1
    candidates = np.concatenate([[never, always], up, down])
    best = candidates.min()
    i = int(np.flatnonzero(candidates <= best + 1e-12 * W)[0])
    rule, at = (("never", np.nan) if i == 0 else ("always", np.nan) if i == 1
                else ("increasing", u[i - 1]) if i < K + 1 else ("decreasing", u[i - K - 1]))
    best /= W
    return {"risk": risk, "bayes_risk": bayes, "risk_gap": risk - bayes, "monotone_risk": best,
            "monotone_risk_gap": risk - best, "best_rule": rule, "best_threshold": at}


# -- expected cost ------------------------------------------------------------------------------


def _rules_table(rules: Any) -> pd.DataFrame:
    """Rules as one frame: rule, l, r, a, b; intervals checked non-empty and disjoint."""
    if isinstance(rules, pd.DataFrame):
        table = rules.copy()
        if "rule" not in table:
            table["rule"] = "rule"
    elif isinstance(rules, Mapping):
        parts = [_rules_table(list(rule)).assign(rule=name) for name, rule in rules.items()]
        table = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    else:
        items = [tuple(x) for x in rules]
        if any(len(x) != 4 for x in items):
            raise ValueError("each interval of a rule is a tuple (l, r, a, b)")
        table = pd.DataFrame(items, columns=["l", "r", "a", "b"]).assign(rule="rule")
    missing = {"l", "r", "a", "b"} - set(table.columns)
    if missing or table.empty:
        raise ValueError("rules need intervals with columns l, r, a, b "
                         f"(missing {sorted(missing)})")
    table = table[["rule", "l", "r", "a", "b"]].copy()
    for col in "lrab":
        table[col] = table[col].astype(float)
    if not np.isfinite(table[["a", "b"]].to_numpy()).all():
        raise ValueError("rule costs a and b must be finite numbers")
    if (table["l"] >= table["r"]).any():
        raise ValueError("every interval (l, r] needs l < r")
    for name, rule in table.groupby("rule", sort=False):
        rule = rule.sort_values("l")
        if (rule["l"].to_numpy()[1:] < rule["r"].to_numpy()[:-1]).any():
            raise ValueError(f"the intervals of rule {name!r} overlap; a rule takes one action "
                             "per score")
    return table.reset_index(drop=True)


def _best_rule(actions: Any, tie: str) -> pd.DataFrame:
    """The rule taking, at every score, the action of least expected cost a·f + b·(1 − f), under
    the exact tie rule of :func:`_best_pieces`: intervals (l, r] of doubles (the first from −1,
    to hold a score of 0)."""
    items = list(actions.values() if isinstance(actions, Mapping) else actions)
    names = list(actions.keys()) if isinstance(actions, Mapping) else list(range(len(items)))
    try:
        costs = np.asarray(items, dtype=float)
    except (TypeError, ValueError):
        costs = np.empty((0, 0))
    if costs.ndim != 2 or costs.shape[1] != 2 or not len(costs) or not np.isfinite(costs).all():
        raise ValueError("actions must be finite (a, b) pairs: cost per positive, per negative")
    rows, lo = [], -1.0
    for r, j in _best_pieces(costs, tie):
        rows.append({"rule": "best", "l": lo, "r": r, "a": costs[j, 0], "b": costs[j, 1],
                     "action": names[j]})
        lo = r
    return pd.DataFrame(rows)


def _best_pieces(costs: np.ndarray, tie: str) -> list[tuple[float, int]]:
    """The action of least expected cost a·q + b·(1 − q) at every score q in [0, 1], decided
    exactly, as pieces (r, j): the scores f (doubles) with r_prev < f ≤ r take action j (r_prev is
    −inf for the first piece, and the last r is 1).

    The rule: costs are read as the decimals they print as (0.1 is 1/10, what the user wrote, not
    the double nearest it) and compared in exact rational arithmetic. Two cost lines cross at an
    exact rational x; a score equal to the double nearest x is *at* the crossing, where the tied
    actions go by ``tie``: "higher", the action best just above the crossing (the least slope
    a − b; "act iff q ≥ t"), or "lower", the one best just below (the greatest slope); identical
    actions go to the first listed. Every other score is compared exactly as the double it is.
    Floating point decides nothing: a crossing computed in floats lands either side of a score
    that sits on it (0.25 or 0.75 for the costs (1, 0), (0.1, 0.3), (0, 0.6))."""
    a = [_decimal(x) for x in costs[:, 0]]
    b = [_decimal(x) for x in costs[:, 1]]
    k = len(a)
    slope = [a[j] - b[j] for j in range(k)]
    order = (lambda j: (slope[j], j)) if tie == "higher" else (lambda j: (-slope[j], j))

    def choose(q: Fraction) -> int:
        cost = [b[j] + slope[j] * q for j in range(k)]
        least = min(cost)
        return min((j for j in range(k) if cost[j] == least), key=order)

    at: dict[float, Fraction] = {}  # the double nearest a crossing -> the crossing (lowest)
    for i in range(k):
        for j in range(i + 1, k):
            if slope[i] != slope[j]:
                x = (b[j] - b[i]) / (slope[i] - slope[j])
                if 0 <= x <= 1:
                    d = float(x)  # correctly rounded: int / int in Python
                    at[d] = min(at.get(d, x), x)
    pieces: list[tuple[float, int]] = []

    def add(r: float, j: int) -> None:
        if pieces and pieces[-1][1] == j:
            pieces[-1] = (r, j)
        else:
            pieces.append((r, j))

    points = sorted(set(at) | {0.0, 1.0})
    for i, d in enumerate(points):
        if i:
            # every double strictly between two points is on the same side of every crossing,
            # so one of them decides for all
            below, above = math.nextafter(d, -math.inf), math.nextafter(points[i - 1], math.inf)
            if above <= below:
                add(below, choose(Fraction(above)))
        add(d, choose(at.get(d, Fraction(d))))
    return pieces


def _decimal(x: float) -> Fraction:
    """A cost or payoff as the decimal it prints as (the shortest that reads back as the same
    double): 0.1 is 1/10."""
    return Fraction(repr(float(x)))


def _cost_source(data, score, label, weight, by, where, options) -> tuple[Source, bool]:
    """The source to measure, with labels when there are some (an unlabeled table gets a
    constant label: :func:`sqlcal.query.unlabeled.unlabeled_source`)."""
    if isinstance(data, Source) or label is not None:
        return as_source(data, score, label, weight=weight, by=by, where=where, **options), True
    if score is None:
        raise TypeError("score= is required: name the score column")
    return unlabeled_source(data, score=score, weight=weight, by=by, where=where,
                            **options), False


def _validation_bound(validation, validation_label, src: Source, labelled: bool, delta
                      ) -> pd.DataFrame | None:
    """The cutoff error's upper confidence bound on the validation rows, per group (the keys
    and ``upper_bound``; no keys for an ungrouped validation)."""
    if validation is None:
        if validation_label is not None:
            raise TypeError("validation_label= names the label of validation= rows; pass "
                            "validation= too, or drop validation_label=")
        return None
    # the cutoff error's certified bound, through the catalogue: one family composing another's
    # public metric, never its internals
    cutoff_error = _registry.get("cutoff_error").function
    val = _validation_source(validation, validation_label, src, labelled)
    bound = cutoff_error(val, confidence=1 - 2 * delta)
    return val.group_keys.internal(bound, ["upper_bound"])


def _validation_source(validation, validation_label, src: Source, labelled: bool) -> Source:
    """A second dataset as a source read like ``src``: data gets src's score, weight, keys and
    options (its label from ``validation_label``, else src's); a ready Source must be weighted
    and grouped like src."""
    if not isinstance(validation, Source):
        label = validation_label if validation_label is not None else (
            src.label if labelled else None)
        if label is None:
            raise TypeError("validation_label= is required: this table has no label column, so "
                            "name the label column of the validation rows")
        return source(validation, score=src.score, label=label, weight=src.weight,
                      by=src.key_names,
                      on_invalid=src.on_invalid, soft_labels=src.allow_soft)
    if validation_label is not None:
        raise TypeError("validation_label= applies to validation data; a validation Source "
                        f"already has its label ({validation.label!r}): drop validation_label=")
    if validation.weight != src.weight:
        def described(s: Source) -> str:
            return f"weighted by {s.weight!r}" if s.weighted else "unweighted"
        raise ValueError(
            f"the validation source is {described(validation)} but this table is "
            f"{described(src)}: the weights of the two must mean the same thing. Build the "
            "validation source with "
            + (f"weight={src.weight!r}" if src.weighted else "no weight=")
            + ", or pass the validation rows as data (read with this table's weight column)")
    if validation.by and validation.group_keys != src.group_keys:
        raise ValueError(f"the validation source is grouped by {list(validation.key_names)}, "
                         f"this table by {list(src.key_names)}: group both the same way, or "
                         "not the validation")
    return validation


def _rule_cost(W: float, masses: dict, rule: pd.DataFrame, labelled: bool,
               eps_sample: float, eps_pop: float, n_eff: float, delta: float) -> dict:
    """One rule's cost in one group; ``masses``: (l, r) -> (W_i, F_i, Y_i), the weight, score
    mass and label mass of the rows with l < f ≤ r."""
    estimate = realised = covered = lowest = highest = 0.0
    # each interval's label mass Y lies within ε·W of its score mass F and in [0, W_i]
    slack = np.nan if np.isnan(eps_sample) else eps_sample * W
    for l, r, a, b in rule[["l", "r", "a", "b"]].itertuples(index=False):
        Wi, Fi, Yi = masses[(l, r)]
        estimate += a * Fi + b * (Wi - Fi)
        covered += Wi
        ends = [b * Wi + (a - b) * y for y in (max(0.0, Fi - slack), min(Wi, Fi + slack))]
        lowest, highest = lowest + min(ends), highest + max(ends)
        if labelled:
            realised += a * Yi + b * (Wi - Yi)
    spread = float(np.abs(rule["a"] - rule["b"]).sum())
    costs = np.concatenate([rule["a"], rule["b"], [0.0]])
    R = float(costs.max() - costs.min())
    estimate, realised, coverage = (safe_div(x, W).item() for x in (estimate, realised, covered))
    bound = eps_sample * spread
    with np.errstate(divide="ignore", invalid="ignore"):
        pop = eps_pop * spread + R * np.sqrt(np.log(2 / delta) / (2 * n_eff))
    if np.isnan(slack):
        lower = upper = np.nan
    else:
        # the box's ends, never past estimate ∓ bound (which they are inside but for rounding)
        lower = max(safe_div(lowest, W).item(), estimate - bound)
        upper = min(safe_div(highest, W).item(), estimate + bound)
    return {"expected_cost": estimate, "error_bound": bound, "cost_lower": lower,
            "cost_upper": upper, "epsilon": eps_sample, "population_bound": pop,
            "coverage": coverage, "realised_cost": realised if labelled else np.nan}


# -- shared pieces ------------------------------------------------------------------------------


def _group_cumsum(x: np.ndarray, g: np.ndarray) -> np.ndarray:
    """The running sum of ``x`` within each run of equal ``g`` (a slab sorted by group)."""
    if not len(x):
        return x.astype(float)
    total = np.cumsum(x, dtype=float)
    starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    lengths = np.diff(np.r_[starts, len(x)])
    return total - np.repeat(total[starts] - x[starts], lengths)


def _group_rank(g: np.ndarray) -> np.ndarray:
    """The position of each row within its run of equal ``g``."""
    if not len(g):
        return np.zeros(0, np.int64)
    starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    lengths = np.diff(np.r_[starts, len(g)])
    return np.arange(len(g)) - np.repeat(starts, lengths)


def _level_sets(src: Source, bins: int | None):
    """The predictor's level sets of ``src``: the levels, whole or in score slabs
    (:func:`sqlcal.metrics.cells.level_slabs`), or with ``bins`` :func:`predictor_levels` of
    the equal-width bins."""
    if bins is not None and (not isinstance(bins, (int, np.integer)) or bins < 1):
        raise ValueError(f"bins must be a positive integer, not {bins!r}")
    if bins is None:  # the levels: in score slabs when they are too many to hold at once
        return level_slabs(src)
    return predictor_levels(planner.fetch(src, *levels_needs(bins)), src.by)


def levels_needs(bins: int | None) -> list:
    """The summary the level-set metrics read: the levels, or with ``bins`` the equal-width bins
    (the binned predictor's levels).

    Parameters
    ----------
    bins : int or None
        As for :func:`calibration_decision_loss`.

    Returns
    -------
    list of Summary
        The one declared summary.

    Examples
    --------
    >>> [s.name for s in levels_needs(None)], [s.name for s in levels_needs(10)]
    (['levels'], ['uniform_bins_10'])
    """
    return [declared.levels() if bins is None else declared.uniform(bins, "sqlcal", "sums")]


def predictor_levels(frame: pd.DataFrame, by: Sequence[str] = ()) -> pd.DataFrame:
    """The level sets of the predictor, sorted by group and value: the levels summary as it is,
    or the equal-width bins summary (a ``bin`` column) with each bin at its weighted mean score
    ``p`` = Σwp / W (the binned predictor).

    Parameters
    ----------
    frame : pandas.DataFrame
        The levels summary (keys, ``p``, ``n``, ``W``, ``swy``) or the equal-width bins summary
        (keys, ``bin``, ``n``, ``W``, ``swy``, ``swp``).
    by : sequence of str, default ()
        The group keys.

    Returns
    -------
    pandas.DataFrame
        The frame with ``p`` the predictor's value, sorted by the keys and ``p`` (or ``bin``).

    Examples
    --------
    >>> bins = pd.DataFrame({"bin": [1, 0], "n": [1, 2], "W": [1.0, 2.0], "swp": [0.9, 0.5],
    ...                      "swy": [1.0, 1.0]})
    >>> predictor_levels(bins)[["bin", "p"]]
       bin     p
    0    0  0.25
    1    1  0.90
    """
    frame = frame.copy()
    if "bin" in frame:
        frame["p"] = safe_div(frame["swp"], frame["W"])
        return frame.sort_values([*by, "bin"], ignore_index=True, kind="stable")
    return frame.sort_values([*by, "p"], ignore_index=True, kind="stable")


def _normalised(part: pd.DataFrame):
    """(v, mass, ȳ) of one group's positive-weight level sets, masses summing to 1; mass is None
    when the group has no weight."""
    part = part[part["W"] > 0]
    W = part["W"].sum()
    if not W > 0:
        return None, None, None
    Wk = part["W"].to_numpy(float)
    # a rounding excursion of Σwy outside [0, W] must not put ȳ outside [0, 1]
    ybar = np.clip(part["swy"].to_numpy(float) / Wk, 0.0, 1.0)
    return part["p"].to_numpy(float), Wk / W, ybar


def _shape(part: pd.DataFrame) -> dict:
    # a level (or bin) whose rows all have weight 0 is absent, as its rows are
    m, n = int((part["W"] > 0).sum()), int(part["n"].sum())
    return {"n_levels": m, "distinct_per_row": m / n if n else np.nan}


def _warn_degenerate(values: pd.DataFrame) -> None:
    if values.empty:
        return
    bad = values[(values["distinct_per_row"] >= DEGENERATE_SHARE) & (values["n"] >= _WARN_MIN_ROWS)]
    if len(bad):
        warnings.warn(
            f"{len(bad)} group(s) have about one row per distinct score (distinct_per_row up to "
            f"{bad['distinct_per_row'].max():.2f}): each level set is one row, so the plug-in "
            "degenerates towards the Brier score; pass bins= to measure a binned predictor",
            stacklevel=3)


def _nan_row(*names: str) -> dict:
    return {name: np.nan for name in names}


def _thresholds(threshold) -> list[float]:
    values = [float(threshold)] if np.ndim(threshold) == 0 else [float(t) for t in threshold]
    if not values or any(not 0 <= t <= 1 for t in values):
        raise ValueError(f"threshold must be in [0, 1] (or a non-empty sequence of such), "
                         f"not {threshold!r}")
    return values


def _binning(bins: int | None) -> str:
    return "levels" if bins is None else f"uniform({bins}, sqlcal)"


def _with_trust(out: pd.DataFrame, **columns) -> pd.DataFrame:
    """``out`` with the facts a reader needs to trust it as columns, before ``n_dropped``."""
    at = out.columns.get_loc("n_dropped") if "n_dropped" in out else len(out.columns)
    for i, (name, value) in enumerate(columns.items()):
        out.insert(at + i, name, value if isinstance(value, list) else [value] * len(out))
    return out


def _frame(rows: list[dict], by, columns) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=None if rows else [*by, "n", "W", *columns])


def _by_threshold(src: Source, values: pd.DataFrame, columns, name: str, wanted) -> pd.DataFrame:
    """The result table (internal keys) with ``name`` (a threshold or rule) acting as a further
    key: rows ordered by the keys then ``wanted``'s order, and a group with no valid rows
    (``on_invalid="drop"``) given one NaN row per wanted value instead of one row with ``name``
    missing."""
    out = result(src, values, columns, present=False)
    # keys (``name`` one of them), the value, n, W: the order of every result table
    order = [c for c in out.columns if c != columns[1]]
    order.insert(order.index("n"), columns[1])
    out = out[order]
    if "n_dropped" in out and not src.by:  # one group: result() put its count on the first row
        out["n_dropped"] = out["n_dropped"].ffill().astype(int)
    empty = out[name].isna()
    if empty.any():
        filled = [row.assign(**{name: value}) for value in wanted
                  for row in [out[empty]]]
        out = pd.concat([out[~empty], *filled], ignore_index=True)
    order = {v: i for i, v in enumerate(wanted)}
    out["__order"] = out[name].map(order)
    out = out.sort_values([*src.by, "__order"], kind="stable", ignore_index=True)
    return out.drop(columns="__order")
