r"""Where is the model miscalibrated: :func:`segments` (discovery), :func:`multicalibration`
(the audit) and :func:`segment_fix` (a per-segment fix), with the rows reduced in the engine.

A *segment* is a conjunction of ``feature = value`` predicates (depth = their number). The
engine returns, per level of the lattice, one row of sums per (fold, group, segment)
(:func:`sqlcal.query.declared.segment_sums`: per level a UNION ALL that reads the table once
per covering set of columns and re-aggregates each column tuple inside it, split into statements
of at most :data:`SEGMENT_STATEMENT_GROUPS` estimated groups), so the statements are bounded by
the groups the levels hold, not by the number of features. Numpy
finishes: eligibility (label-free), the sign-split bound that prunes the search, the residual
score test, Benjamini-Hochberg on a held-out fold, the redundancy rule.

Values too rare to be a segment (weight below ``min_support``) are pooled into one explicit
bucket per feature (its condition is ``c IS NULL OR c NOT IN (kept values)``), never dropped.
NULL is a value of its own (``c IS NULL``). Inside the search a value is keyed apart from NULL
and the bucket (:func:`sqlcal.query.reductions.segment_value`), so a value ``"__null__"`` or
``"__other__"`` of the data is a value like any other; the result shows the NULL predicate as
``__null__`` and the bucket as ``__other__`` in the feature's column, and its ``special_values``
column names the features whose predicate is either.
"""

from __future__ import annotations

import json
import math
import uuid
from itertools import combinations
from typing import Any, Sequence

import ibis
import numpy as np
import pandas as pd
from scipy import stats

from sqlcal import options
from sqlcal.audit.fixmaps import (
    SegmentFix,
    SegmentIsotonicFix,
    condition_sql,
    dialect,
    feature_kinds,
    with_columns,
)
from sqlcal.errors import InvalidInputError
from sqlcal.inputs.groupkeys import shown_name
from sqlcal.inputs.sources import Source
from sqlcal.metrics import resolve_weight_kind
from sqlcal.options import BudgetError, OptionError, checked
from sqlcal.query import declared, planner
from sqlcal.query.executor import source
from sqlcal.query.reductions import (
    SEGMENT_NULL,
    SEGMENT_OTHER,
    SEGMENT_VALUE,
    key_match,
    segment_code,
    segment_condition,
    segment_fold,
    segment_plan,
    segment_sizes,
)
from sqlcal.recalibration.fits import isotonic

FOLD_A, FOLD_B, HOLDOUT = 0, 1, 2
#: how a result shows the NULL predicate and the pooled bucket in a feature's column, and how its
#: ``special_values`` names them
SHOWN = {SEGMENT_NULL: "__null__", SEGMENT_OTHER: "__other__"}
SPECIAL = {SEGMENT_NULL: "null", SEGMENT_OTHER: "other"}
#: the default ``min_support``: max(SUPPORT_FLOOR, SUPPORT_SHARE·W) (see :func:`default_support`)
SUPPORT_FLOOR, SUPPORT_SHARE = 1000.0, 1e-3
#: the sums each segment row carries, in this order
STATS = ["n", "W", "swy", "swp", "swpp", "swyp", "sw2", "var2"]
_N, _W, _Y, _P, _PP, _YP, _W2, _V2 = range(8)
#: with ``effect="sliceline"`` also the least score of a row with y = 1 and the largest of a
#: row with y = 0 (merged by MIN and MAX): the segment's largest (y − p)²
EXTREMES = ["p_min_pos", "p_max_neg"]
#: scores are clipped here before a logit (the fix)
CLIP = 1e-6
#: the fix's logit-cell width for its first (histogram) fit; an exact Newton step follows
STEP = 0.01
#: the ridge path searched on the holdout (penalty="auto"), in pseudo-rows at the segment's
#: variance
PENALTIES = (0.0, 1.0, 3.0, 10.0, 30.0, 100.0, 300.0)


@checked
def segments(data, *, score: str, label: str, weight: str | None = None, by=None, where=None,
             features: Sequence[str], max_depth: int | None = 3, min_support: float | None = None,
             min_expected: float | None = None, mode: str = "split",
             split: Sequence[str] = (), fdr: str = "bh", alpha: float = 0.05,
             top_k: int | None = 100, screen_z: float = 2.0, max_candidates: int = 1_000_000,
             strategy: str = "lattice", effect: str = "residual", bins: int = 10,
             sliceline_alpha: float = 0.5, weight_kind: str | None = None,
             on_invalid: str = "raise") -> pd.DataFrame:
    r"""The significantly miscalibrated segments (conjunctions of feature = value).

    Parameters
    ----------
    data : table, path, URL or frame
        The predictions (see :func:`sqlcal.source`).
    score, label, weight, by, where, on_invalid
        As every metric.
    features : sequence of str
        Categorical columns (strings, integers or booleans) whose values define segments.
    max_depth : int or None, default 3
        The longest conjunction (None: every feature).
    min_support : float, optional
        Least Σw of an eligible segment; default :func:`default_support` of the group's
        weight W (folds A and B): max(1000, 10^-3·W). Values below it are pooled into the
        feature's ``__other__`` value.
    min_expected : float, optional
        Also require Σwp ≥ min_expected and Σw(1 − p) ≥ min_expected (label-free); default
        10 (the z test's normal approximation), 0 with ``effect="sliceline"`` (SliceLine's
        slices need only their size).
    mode : {"split", "full"}, default "split"
        ``"split"``: search fold A (half the rows, pruned by the sign-split bound), test the
        ``top_k`` screened segments on fold B. ``"full"``: test every eligible segment on all
        rows, no label-dependent pruning.
    split : sequence of str, default ()
        Numeric key columns (e.g. a user id) mixed into the fold assignment, which is otherwise a
        function of the score's bits (so rows with equal scores share a fold).
    fdr : {"bh", "by", "bonferroni", "none"}, default "bh"
        The multiple-testing adjustment of ``q_value``.
    alpha : float, default 0.05
        ``significant`` = ``q_value`` ≤ alpha.
    top_k : int or None, default 100
        Split mode: the segments certified; full mode: the segments returned besides the
        significant ones (None: all).
    screen_z : float, default 2
        Split mode: least |z| on fold A to enter the certified set.
    max_candidates : int, default 1,000,000
        Most candidate segments per level (over all groups), and fewer when their summaries
        would exceed the budget's ``bytes`` (about 1.4 kB a depth-3 candidate: some 780,000
        in 1 GiB): split mode keeps those with the largest bound (exact for the top
        segments); full mode bounds every level's candidates from the level-1 counts before
        any deeper level runs and raises :class:`BudgetError` naming the ``min_support`` and
        ``max_depth`` that would fit.
    strategy : {"lattice", "cube"}, default "lattice"
        ``"lattice"``: each level of the lattice reads the base table once per covering set of
        columns (at most 2^16 raw value combinations), re-aggregated per column tuple inside it.
        ``"cube"``: after level 1, one scan builds the reduced cube (the sums per fold, group
        and recoded feature tuple) as a temporary table of the engine, and every deeper level
        aggregates it: two base-table scans whatever the depth; worth it when the cube is much
        smaller than the table (few or skewed features).
    effect : {"residual", "ece", "sliceline"}, default "residual"
        What a segment is searched, ranked and tested for. ``"residual"``: its net residual
        Σ_S w(y − p) (``harm`` = \|residual\| / W, the z test). ``"ece"``: its binned
        calibration error, which also finds a segment whose errors cancel (over-confident on
        both sides): ``harm`` = Σ_b \|Σ_{S∩b} w(y − p)\| / W over ``bins`` equal-width score
        bins, tested by the chi-square statistic Σ_b R_b² / V_b (one degree of freedom per
        non-empty bin); adds the columns ``ece`` (the segment's own binned ECE), ``chi2``
        and ``chi2_df``. ``"sliceline"``: SliceLine's score (Sagadeeva & Boehm 2021, SystemDS
        ``sliceLine``) of the per-row error e = (y − p)²,
        α·(ē_S/ē − 1) − (1 − α)·(W/W_S − 1) (ē_S, ē the mean errors of the segment and the
        group, W_S, W their weights: row counts unweighted), as ``harm``: the ``top_k``
        segments of positive score, sorted by it (ties by their text), in full mode exactly
        SliceLine's top-k slices; adds ``score``, ``error_sum`` = Σ_S w·e and ``max_error``
        (the largest e of a row in S), and the z test of the residual still gives
        ``p_value``. Split mode prunes by an upper bound of the score over S and its
        descendants (their weight is at least ``min_support``, their error sum at most S's
        and at most their weight).
    bins : int, default 10
        Equal-width score bins (sqlcal convention) of ``effect="ece"``.
    sliceline_alpha : float, default 0.5
        SliceLine's α in (0, 1]: the weight of the error term against the size term
        (``effect="sliceline"``; SystemDS's default 0.5).
    weight_kind : {"frequency", "sampling"}, optional
        How weights enter the variance; by default frequency for whole-number weights.

    Returns
    -------
    pandas.DataFrame
        Per group, one row per returned segment, sorted by ``harm`` (explained segments
        last): group keys, ``segment`` (its SQL condition), ``depth``, one column per
        feature (its value as a string, NULL when free; ``__null__`` for a NULL predicate and
        ``__other__`` for the pooled bucket), ``special_values`` (JSON naming the features
        whose predicate is NULL or the bucket, None when none is: a value ``"__null__"`` of
        the data is not listed), ``n``, ``W``, ``mean_score``,
        ``observed``, ``citl`` (mean score − observed), ``residual`` = Σw(y − p), ``harm`` =
        \|residual\| / W of the group, ``z``, ``p_value``, ``q_value``, ``significant``,
        ``logit_shift`` and ``logit_shift_se`` (one Newton step), ``explained_by`` (Notes),
        ``residual_all``, ``z_all`` (all non-holdout rows; biased by the selection in split
        mode); and what was searched: ``family_size`` (eligible segments evaluated: all of
        them in full mode, those the bound did not prune in split mode), ``tested``,
        ``statements`` (engine statements), ``branches`` (base-table reads), ``searched``
        (JSON: per level the candidates, ineligible, bound-pruned, evaluated, the cap and its
        bound from the level-1 counts; the values pooled per feature; folds' weights; the
        redundancy rule's statements), ``weight_kind``. Numbers come from fold B in split
        mode. Group keys and features keep their names (any name); a column sqlcal adds
        whose name a group key or feature holds takes a trailing underscore, repeated until
        unique (``by="segment"``: the key in ``segment``, the condition in ``segment_``).

    See Also
    --------
    multicalibration : the worst segment's error as one number.
    segment_fix : fits and judges shifts for the segments found.
    calibration_in_the_large : the mean residual of each group given by ``by``.

    Notes
    -----
    Segment S is tested with the score statistic of a logit intercept shift,
    :math:`z_S = \sum_S w(y-p) / \sqrt{\sum_S w p(1-p)}` (Spiegelhalter 1986 in the large;
    :math:`\sum_S w^2 p(1-p)` for sampling weights). The residual splits into non-negative
    parts :math:`P = \sum w y(1-p)` and :math:`N = \sum w (1-y) p`, each anti-monotone along the
    lattice, so :math:`|R_T| \le \max(P_S, N_S)` for every descendant T of S: a node is
    expanded only while that bound reaches the current top-k harm (SliceLine's pruning, Sagadeeva
    & Boehm 2021, made valid for signed residuals). Fold-B p-values are valid conditionally on
    the fold-A selection (Cox 1975; Wasserman & Roeder 2009); Benjamini & Hochberg (1995) controls
    the FDR. ``harm`` is the multiaccuracy violation of the segment's indicator (Kim, Ghorbani &
    Zou 2019).

    *Redundancy.* A segment that overlaps a miscalibrated one is often significant only
    through the rows they share (a marginal holding part of a planted 2-way segment). A
    significant S is ``explained_by`` a significant T when what T leaves of S's excess, on the
    test fold, would not have been a discovery: its p-value (tested as S was: one-sided in S's
    direction in split mode, two-sided in full mode, the binned chi-square with
    ``effect="ece"``) is above the cut-off that made the discoveries (k·α/m for
    Benjamini-Hochberg with k of m tests significant; α/m for Bonferroni). What T leaves is
    the residual of S's rows outside T, :math:`R_S - R_{S\cap T}` with variance
    :math:`V_S - V_{S\cap T}`: if S's miscalibration lies within T, those rows are calibrated,
    share no row with T, and the statistic is standard normal, so the rule keeps S apart
    (unexplained) at the level of the search. When S lies inside T (T an ancestor) nothing is
    left outside T, and the question is whether S's excess is T's shift: the score test of a
    shift of S's own once T's is fitted on the same fold (Rao's score test with a nuisance
    parameter), :math:`U = R_S - c R_T`, :math:`c = I_S/I_T`,
    :math:`\operatorname{Var} U = V_S - 2cV_S + c^2V_T` (I = Σwp(1 − p); for frequency
    weights the variance is :math:`I_S(1 - I_S/I_T)`). Segments are taken by strength (\|z\|,
    largest first) and each is tested against those already left unexplained, so
    ``explained_by`` names an unexplained segment and never forms a cycle;
    :func:`segment_fix` fits the unexplained ones only. The sums of S ∩ T (a conjunction)
    come from the lattice when the search evaluated it, else from one more statement (counted
    in ``statements``) per round of new unexplained segments, over their rows only.

    References
    ----------
    .. [1] D. J. Spiegelhalter, "Probabilistic Prediction in Patient Management and Clinical
       Trials", Statistics in Medicine 5(5), 1986.
    .. [2] S. Sagadeeva and M. Boehm, "SliceLine: Fast, Linear-Algebra-Based Slice Finding for ML
       Model Debugging", SIGMOD, 2021.
    .. [3] D. R. Cox, "A Note on Data-Splitting for the Evaluation of Significance Levels",
       Biometrika 62(2), 1975.
    .. [4] L. Wasserman and K. Roeder, "High-Dimensional Variable Selection", Annals of Statistics
       37(5A), 2009.
    .. [5] Y. Benjamini and Y. Hochberg, "Controlling the False Discovery Rate: A Practical and
       Powerful Approach to Multiple Testing", Journal of the Royal Statistical Society, Series B
       57(1), 1995.
    .. [6] M. P. Kim, A. Ghorbani and J. Zou, "Multiaccuracy: Black-Box Post-Processing for Fairness
       in Classification", AIES, 2019.

    Examples
    --------
    >>> import numpy as np, pandas as pd, sqlcal
    >>> rng = np.random.default_rng(0)
    >>> df = pd.DataFrame({"c": rng.choice(["a", "b"], 4000), "d": rng.choice(["x", "y"], 4000),
    ...                    "p": rng.uniform(0.1, 0.9, 4000)})
    >>> df["y"] = rng.uniform(size=4000) < np.where(df.c.eq("a") & df.d.eq("x"), 0.95, df.p)
    >>> out = sqlcal.segments(df, score="p", label="y", features=["c", "d"], max_depth=2,
    ...                       min_support=100, mode="full")
    >>> for s, e in out[out.significant][["segment", "explained_by"]].fillna("-").values:
    ...     print(s, "| explained by", e)
    "c" = 'a' AND "d" = 'x' | explained by -
    "d" = 'x' | explained by "c" = 'a' AND "d" = 'x'
    "c" = 'a' | explained by "c" = 'a' AND "d" = 'x'
    """
    if effect not in ("residual", "ece", "sliceline"):
        raise OptionError(f"segments: effect must be 'residual', 'ece' or 'sliceline', not "
                          f"{effect!r}")
    if not isinstance(bins, (int, np.integer)) or bins < 1:
        raise OptionError(f"segments: bins must be a whole number >= 1, not {bins!r}")
    if min_expected is None:
        min_expected = 0.0 if effect == "sliceline" else 10.0
    src, spec = _prepare(data, score, label, weight, by, where, features, split, on_invalid,
                         max_depth, mode, fdr, top_k, max_candidates, alpha, weight_kind,
                         strategy)
    spec["effect"] = effect
    spec["sliceline_alpha"] = float(sliceline_alpha)
    search = _search(src, spec, min_support=min_support, min_expected=min_expected,
                     holdout=0.0, top_k=top_k, screen_z=screen_z,
                     bins=int(bins) if effect == "ece" else 0)
    return _present(_with_dropped(src, _report(search, spec, alpha=alpha, fdr=fdr,
                                                top_k=top_k), spec["by"]), spec)


def default_support(W: float) -> float:
    r"""The default ``min_support`` of a group of weight ``W``: max(1000, 10^-3·W).

    Why it grows with W. (1) *Cost*: the segments of one column tuple partition the rows, so at
    most W/min_support of them reach the support; with a floor proportional to W each level
    holds at most C(k, L)·1000 eligible segments over k features whatever the rows (at
    max(1000, 10^-4·W) the bound grew tenfold per decade of rows up to 10^7). (2) *What the
    search can return*: \|y − p\| ≤ 1, so a segment holding a share π of the weight has
    ``harm`` ≤ π; a segment under 10^-3·W cannot carry more than 0.1% of the mass, and it is
    ranked below any segment of larger harm. (3) *Power*: on fold B (half the rows) a segment
    of weight W_S whose logit is off by δ has z ≈ δ·sqrt(W_S·v̄/2), v̄ the group's mean
    p(1 − p); it is certified when z passes the Benjamini-Hochberg threshold over ``top_k``
    tests, at most z* = Φ^{-1}(1 − α/(2·top_k)) (3.5 at α = 0.05, top_k = 100), so the least
    weight detectable with power 0.8 is 2·(z* + 0.84)²/(δ²·v̄): about 2,800 for δ = 0.3 and
    250 for δ = 1 at v̄ = 0.15. The floor of 1000 sits between them and does not move with W,
    so up to W = 10^6 the default is the old one; beyond, the share removes only segments of
    harm below 10^-3 (detectable or not): a relevance cut, stated in ``searched``.

    Examples
    --------
    >>> default_support(2e5), default_support(1e6), default_support(1e8)
    (1000.0, 1000.0, 100000.0)
    """
    return max(SUPPORT_FLOOR, SUPPORT_SHARE * float(W))


def _present(frame: pd.DataFrame, spec: dict) -> pd.DataFrame:
    """A result with the user's names: group keys and feature columns (internal names inside
    the search) get theirs back, and each column sqlcal adds takes a trailing underscore while a
    group key or feature holds its name (:func:`~sqlcal.inputs.groupkeys.shown_name`)."""
    users = {*spec["keys"], *spec["features"]}
    own = dict(zip((*spec["by"], *spec["columns"]), (*spec["keys"], *spec["features"])))
    return frame.rename(columns={c: own.get(c) or shown_name(c, users) for c in frame.columns})


def _with_dropped(src: Source, out: pd.DataFrame, by: Sequence[str]) -> pd.DataFrame:
    """With ``on_invalid="drop"``, each row's group's count of dropped rows (``n_dropped``):
    the source counts them per its keys (the groups and the features' copies), summed here
    over the groups ``by``."""
    if src.on_invalid != "drop":
        return out
    by = list(by)
    if not by:
        return out.assign(n_dropped=int(src.dropped["n_dropped"].sum()))
    dropped = src.dropped.groupby(by, dropna=False, sort=False)["n_dropped"].sum()
    return out.merge(dropped.reset_index(), on=by, how="left", sort=False).assign(
        n_dropped=lambda f: f["n_dropped"].fillna(0).astype(int))


@checked
def multicalibration(data, *, score: str, label: str, weight: str | None = None, by=None,
                     where=None, features: Sequence[str], max_depth: int | None = 2,
                     min_support: float | None = None, min_expected: float = 10.0,
                     metric: str = "residual", bins: int = 10, strategy: str = "lattice",
                     weight_kind: str | None = None, on_invalid: str = "raise") -> pd.DataFrame:
    r"""The worst calibration error over every eligible segment up to ``max_depth``.

    Parameters
    ----------
    data, score, label, weight, by, where, features, max_depth, min_support, min_expected,
    strategy, weight_kind, on_invalid
        As :func:`segments` (every eligible segment is evaluated on all rows: no pruning).
    metric : {"residual", "binned", "ece"}, default "residual"
        What ``mc_error`` maximises: ``"residual"`` the multiaccuracy
        :math:`\max_S |\sum_S w(y-p)|/W`; ``"binned"`` the binned multicalibration mass
        :math:`\max_{S,b} |\sum_{S\cap b} w(y-p)|/W`; ``"ece"`` the largest per-segment ECE.
    bins : int, default 10
        Equal-width score bins (sqlcal convention) of the binned forms.

    Returns
    -------
    pandas.DataFrame
        One row per group: ``mc_error``, ``worst_segment`` (its SQL condition),
        ``multiaccuracy``, ``multicalibration_mass``, ``max_segment_ece``, ``mc_sigma`` (the
        largest \|z\| of the segments' residual tests), ``noise_floor`` =
        :math:`\sqrt{2\ln(2m)}` (about the largest \|z\| of m calibrated segments), ``p_value``
        (Bonferroni on the largest \|z\|: min(1, m·p)), ``n_segments`` (m), ``n``, ``W``,
        ``metric``, ``bins``.

    See Also
    --------
    segments : the miscalibrated segments themselves, with tests.
    segment_fix : fits shifts that repair the segments found.
    calibration_in_the_large : the mean residual of each group given by ``by``.

    Notes
    -----
    Multiaccuracy is degree-0 low-degree multicalibration (Gopalan, Kim, Singhal & Zhao 2022;
    Kim, Ghorbani & Zou 2019); the binned mass is Hébert-Johnson, Kim, Reingold & Rothblum
    (2018)'s (α, λ)-multicalibration without the division by small cell masses. The p-value is
    family-wise (any dependence), not the unadjusted minimum.

    References
    ----------
    .. [1] Ú. Hébert-Johnson, M. P. Kim, O. Reingold and G. N. Rothblum, "Multicalibration:
       Calibration for the (Computationally-Identifiable) Masses", ICML, 2018.
    .. [2] M. P. Kim, A. Ghorbani and J. Zou, "Multiaccuracy: Black-Box Post-Processing for Fairness
       in Classification", AIES, 2019.
    .. [3] P. Gopalan, M. P. Kim, M. Singhal and S. Zhao, "Low-Degree Multicalibration", COLT (PMLR
       178), 2022.

    Examples
    --------
    >>> import numpy as np, pandas as pd, sqlcal
    >>> rng = np.random.default_rng(1)
    >>> df = pd.DataFrame({"c": rng.choice(["a", "b", "c"], 3000), "p": rng.uniform(0.2, 0.8,
    ...                    3000)})
    >>> df["y"] = rng.uniform(size=3000) < df.p
    >>> out = sqlcal.multicalibration(df, score="p", label="y", features=["c"],
    ...                               min_support=100)
    >>> int(out.n_segments[0]), out.worst_segment[0], round(float(out.mc_sigma[0]), 2)
    (3, '"c" = \'b\'', 2.44)
    """
    if metric not in ("residual", "binned", "ece"):
        raise OptionError(f"multicalibration: metric must be 'residual', 'binned' or 'ece', "
                          f"not {metric!r}")
    if not isinstance(bins, (int, np.integer)) or bins < 1:
        raise OptionError(f"multicalibration: bins must be a whole number >= 1, not {bins!r}")
    src, spec = _prepare(data, score, label, weight, by, where, features, (), on_invalid,
                         max_depth, "full", "bonferroni", None, 1_000_000, 0.05, weight_kind,
                         strategy)
    search = _search(src, spec, min_support=min_support, min_expected=min_expected,
                     holdout=0.0, top_k=None, screen_z=0.0, bins=int(bins))
    rows = []
    for g in search["groups"]:
        lv = g["lv"]
        fold = (np.concatenate([x["sums"][x["ok"], FOLD_A] for x in lv]) if lv else
                np.zeros((0, 1, len(STATS))))  # (segments, bins, stats)
        where = [(d, i) for d, x in enumerate(lv) for i in np.nonzero(x["ok"])[0]]
        W = g["W_fold"][FOLD_A]
        row = dict(zip(spec["by"], g["key"]))
        r_b = fold[:, :, _Y] - fold[:, :, _P]
        tot = fold.sum(axis=1)
        r = tot[:, _Y] - tot[:, _P]
        v = tot[:, _V2] if spec["sampling"] else tot[:, _P] - tot[:, _PP]
        with np.errstate(divide="ignore", invalid="ignore"):
            z = np.where(v > 0, np.abs(r) / np.sqrt(np.where(v > 0, v, 1.0)), 0.0)
            values = {"residual": np.abs(r) / W, "binned": np.abs(r_b).max(axis=1) / W
                      if len(r_b) else np.zeros(0), "ece": np.abs(r_b).sum(axis=1) / tot[:, _W]}
        best = {}
        for name, value in values.items():  # the first largest, as a scan would keep it
            value = np.where(np.isnan(value), -np.inf, value)
            i = int(np.argmax(value)) if len(value) else -1
            best[name] = ((float(value[i]), where[i]) if i >= 0 and value[i] > -1.0 else
                          (-1.0, None))
        zmax = max(0.0, float(z.max())) if len(z) else 0.0
        m = len(where)
        value, worst = best[metric]
        row.update(mc_error=value if m else np.nan,
                   worst_segment=_condition(_node(lv[worst[0]]["codes"][worst[1]], search),
                                            search) if worst else None,
                   multiaccuracy=best["residual"][0] if m else np.nan,
                   multicalibration_mass=best["binned"][0] if m else np.nan,
                   max_segment_ece=best["ece"][0] if m else np.nan,
                   mc_sigma=zmax if m else np.nan,
                   noise_floor=math.sqrt(2 * math.log(2 * m)) if m else np.nan,
                   p_value=min(1.0, m * 2 * stats.norm.sf(zmax)) if m else np.nan,
                   n_segments=m, n=int(g["n_fold"][FOLD_A]), W=W, metric=metric, bins=int(bins))
        rows.append(row)
    return _present(_with_dropped(src, pd.DataFrame(rows), spec["by"]), spec)


@checked
def segment_fix(data, *, score: str, label: str, weight: str | None = None, by=None,
                where=None, features: Sequence[str], segments: pd.DataFrame | None = None,
                kind: str = "shift", holdout: float = 0.2, penalty="auto",
                max_segments: int = 30,
                max_depth: int | None = 3, min_support: float | None = None,
                min_expected: float = 10.0, split: Sequence[str] = (),
                fdr: str = "bonferroni", alpha: float = 0.05, top_k: int = 100,
                screen_z: float = 2.0,
                max_candidates: int = 1_000_000, strategy: str = "lattice",
                weight_kind: str | None = None, on_invalid: str = "raise") -> SegmentFix:
    r"""Per-segment logit shifts fitted on the discovery rows and judged on a holdout.

    The rows are split by the same fold rule as :func:`segments`: a ``holdout`` share is never
    used for discovery or fitting; the rest is split into folds A and B for
    :func:`segments` (split mode), and the shifts are fitted on A ∪ B.

    Parameters
    ----------
    data, score, label, weight, by, where, features, max_depth, min_support, min_expected,
    split, alpha, top_k, screen_z, max_candidates, strategy, weight_kind, on_invalid
        As :func:`segments`.
    fdr : {"bonferroni", "bh", "by", "none"}, default "bonferroni"
        The adjustment of the search that picks the segments to fit. A fix changes the scores
        of every row of every segment it fits, so by default it controls the probability of
        fitting any calibrated segment at all (Bonferroni: at most ``alpha``), where the
        false discovery rate of :func:`segments` (``"bh"``) lets about ``alpha`` of the
        discoveries be false: with some 30 discoveries, one or two calibrated segments a run.
    segments : pandas.DataFrame, optional
        A :func:`segments` result to fit (its significant rows not ``explained_by`` another);
        by default :func:`segments` runs first on the non-holdout rows.
    kind : {"shift", "platt", "isotonic"}, default "shift"
        ``"shift"``: one logit intercept θ_k per segment. ``"platt"``: an intercept and a slope
        per segment, θ_k + γ_k·logit p̃ added to the logit in S_k (a per-segment Platt map;
        the table gets ``slope`` and ``slope_se``), fitted on the histogram of membership
        pattern × logit cell (cells 0.01 wide in logit) without the exact row step.
        ``"isotonic"``: the segments, per group by harm, form a decision list (a row goes to
        the first segment holding it), and each entry gets the exact isotonic regression of y
        on p over its fitting rows (:func:`sqlcal.isotonic`): a
        :class:`~sqlcal.audit.fixmaps.SegmentIsotonicFix`, whose ``.blocks`` is the mapping
        table and whose table gives ``blocks`` per segment instead of θ; the holdout checks
        count each segment's entry (its rows not taken by an earlier segment); ``penalty``
        does not apply. A
        nonparametric map moves a calibrated entry's holdout z by noise, so ``accepted``
        asks each segment's holdout \|z\| not to grow past max(\|z\| before, 2).
    holdout : float, default 0.2
        The share of rows kept for the judgement.
    penalty : "auto" or float, default "auto"
        Ridge λ on the shifts, in pseudo-rows at each segment's mean variance (θ_k shrinks
        by about W_k / (W_k + λ)); "auto" picks the
        λ in {0, 1, 3, 10, 30, 100, 300} of least holdout log loss.
    max_segments : int, default 30
        The most segments fitted per group (by harm).

    Returns
    -------
    SegmentFix
        A calibration map: ``.sql(score)``, ``.expr(table, score)``, ``.apply(table, score)``,
        ``.table`` (one row per segment: group keys, ``segment``, feature values, ``theta``,
        ``theta_se``, ``holdout_residual_before``/``_after``, ``holdout_z_before``/``_after``)
        and ``.summary`` (per group: ``holdout_log_loss_before``/``_after``, its standard
        error ``holdout_log_loss_se``, ``holdout_brier_before``/``_after``,
        ``holdout_multiaccuracy_before``/``_after`` over the fitted segments, ``penalty``,
        ``n_segments``, ``accepted``, and ``reason``: why a fix is not accepted, None when it
        is).

    See Also
    --------
    segments : finds the segments without fitting a fix.
    multicalibration : the worst error over all segments, as one number.
    platt : one logistic recalibration per group.

    Notes
    -----
    The fit minimises :math:`\sum w\,\ell(y, \sigma(\mathrm{logit}\,\tilde p + X\theta)) +
    \tfrac{\lambda}{2}\sum_k (V_k/W_k)\theta_k^2`, :math:`V_k = \sum_{S_k} w\tilde p(1-\tilde p)`;
    at λ = 0 the fitted score is multiaccurate on the
    chosen segments (Hébert-Johnson et al. 2018; Kim, Ghorbani & Zou 2019). A histogram of
    (membership pattern, logit cell) gives the λ path in numpy; one exact Newton step on the
    rows follows. ``accepted`` iff the holdout log loss falls by more than two standard errors
    of the paired per-row difference and no fitted segment's holdout \|z\| grows.

    The judgement reads exactly the scores the map exports (one expression,
    :func:`sqlcal.query.reductions.segment_fixed`, builds both): a row in a fitted segment gets its
    corrected score clipped to [1e-6, 1 − 1e-6] (never 0 or 1, whose log loss is infinite), a
    row in none keeps its score, bit for bit.

    References
    ----------
    .. [1] Ú. Hébert-Johnson, M. P. Kim, O. Reingold and G. N. Rothblum, "Multicalibration:
       Calibration for the (Computationally-Identifiable) Masses", ICML, 2018.
    .. [2] M. P. Kim, A. Ghorbani and J. Zou, "Multiaccuracy: Black-Box Post-Processing for Fairness
       in Classification", AIES, 2019.

    Examples
    --------
    >>> import numpy as np, pandas as pd, sqlcal
    >>> rng = np.random.default_rng(2)
    >>> n = 20000
    >>> df = pd.DataFrame({"c": rng.choice(["a", "b", "c"], n), "p": rng.uniform(0.1, 0.6, n)})
    >>> df["y"] = rng.uniform(size=n) < np.where(df.c.eq("a"), df.p + 0.2, df.p)
    >>> fix = sqlcal.segment_fix(df, score="p", label="y", features=["c"], min_support=500)
    >>> fix.table.segment.tolist(), bool(fix.summary.accepted[0])
    (['"c" = \'a\''], True)
    """
    if not (isinstance(holdout, float) and 0 < holdout < 1):
        raise OptionError(f"segment_fix: holdout must be a share in (0, 1), not {holdout!r}")
    if kind not in ("shift", "platt", "isotonic"):
        raise OptionError(f"segment_fix: kind must be 'shift', 'platt' or 'isotonic', not "
                          f"{kind!r}")
    if not (penalty == "auto" or (isinstance(penalty, (int, float)) and penalty >= 0)):
        raise OptionError(f"segment_fix: penalty must be 'auto' or a number >= 0, not "
                          f"{penalty!r}")
    if not isinstance(max_segments, int) or not 1 <= max_segments <= 60:
        raise OptionError(f"segment_fix: max_segments must be a whole number in [1, 60], not "
                          f"{max_segments!r}")
    src, spec = _prepare(data, score, label, weight, by, where, features, split, on_invalid,
                         max_depth, "split", fdr, top_k, max_candidates, alpha, weight_kind,
                         strategy)
    spec["holdout"] = holdout
    if segments is None:
        search = _search(src, spec, min_support=min_support, min_expected=min_expected,
                         holdout=holdout, top_k=top_k, screen_z=screen_z, bins=0)
        found = _present(_report(search, spec, alpha=alpha, fdr=fdr, top_k=top_k), spec)
        kept = search["kept"]
    else:
        _check_segments(segments, spec)
        found, kept = segments, [() for _ in spec["features"]]
        special = shown_name("special_values", {*spec["keys"], *spec["features"]})
        other = [SEGMENT_OTHER in _keys_of(row, spec["features"], special).values()
                 for _, row in found.iterrows()]
        if any(other):
            raise OptionError(f"segment_fix: segments= holds {sum(other)} segments of a pooled "
                              "bucket (special_values 'other'); let segment_fix run the search "
                              "(segments=None) to fit them")
    chosen = _chosen(found, spec, kept, max_segments)
    return _fit(src, spec, chosen, penalty, kind)


# -- preparing -----------------------------------------------------------------------------------


def _prepare(data, score, label, weight, by, where, features, split, on_invalid, max_depth,
             mode, fdr, top_k, max_candidates, alpha, weight_kind, strategy="lattice"):
    if isinstance(data, Source):
        raise TypeError("segments need the feature columns, which a Source does not carry: "
                        "pass the table with score=, label= (and by=, where=)")
    by = () if by is None else (by,) if isinstance(by, str) else tuple(by)
    features = (features,) if isinstance(features, str) else tuple(features or ())
    split = (split,) if isinstance(split, str) else tuple(split)
    if not features:
        raise OptionError("segments: features must name at least one column")
    if len(set(features)) < len(features) or set(features) & set(by):
        raise OptionError(f"segments: features {list(features)} must be distinct and not group "
                          f"keys {list(by)}")
    depth = len(features) if max_depth is None else max_depth
    if not isinstance(depth, (int, np.integer)) or depth < 1:
        raise OptionError(f"segments: max_depth must be a whole number >= 1 or None, not "
                          f"{max_depth!r}")
    depth = min(int(depth), len(features))
    for name, value, choices in (("mode", mode, ("split", "full")),
                                 ("fdr", fdr, ("bh", "by", "bonferroni", "none")),
                                 ("weight_kind", weight_kind, (None, "frequency", "sampling")),
                                 ("strategy", strategy, ("lattice", "cube"))):
        if value not in choices:
            raise OptionError(f"segments: {name} must be one of {choices}, not {value!r}")
    if not (isinstance(alpha, float) and 0 < alpha < 1):
        raise OptionError(f"segments: alpha must be in (0, 1), not {alpha!r}")
    if top_k is not None and (not isinstance(top_k, (int, np.integer)) or top_k < 1):
        raise OptionError(f"segments: top_k must be a whole number >= 1 or None, not {top_k!r}")
    if not isinstance(max_candidates, (int, np.integer)) or max_candidates < 1:
        raise OptionError(f"segments: max_candidates must be a whole number >= 1, not "
                          f"{max_candidates!r}")
    budget = options.BUDGET
    if max_candidates > budget.cells:
        raise BudgetError(f"segments: max_candidates={max_candidates} exceeds the budget of "
                          f"{budget.cells} cells; lower it or raise sqlcal.options.budget(cells=)")
    branches = sum(math.comb(len(features), d) for d in range(1, depth + 1))
    if max(math.comb(len(features), d) for d in range(1, depth + 1)) > budget.terms:
        raise BudgetError(
            f"segments: max_depth={depth} over {len(features)} features needs up to "
            f"{max(math.comb(len(features), d) for d in range(1, depth + 1))} GROUP BY branches "
            f"in one statement, over the budget of {budget.terms} query terms; lower max_depth "
            "or pass fewer features (or raise sqlcal.options.budget(terms=))")
    # every column the search groups by under an internal name: the user's names come back
    # only in the results (:func:`_present`)
    table, names = with_columns(data, [*by, *features, *split])
    keys = tuple(names[:len(by)])
    columns = tuple(names[len(by):len(by) + len(features)])
    split_columns = tuple(names[len(by) + len(features):])
    src = source(table, score=score, label=label, weight=weight,
                 by=(*keys, *columns, *split_columns), where=where,
                 on_invalid=on_invalid).with_named_keys()
    kinds = dict(zip(features, feature_kinds(src.rows, columns).values()))
    bad = [f for f, k in kinds.items() if k is None]
    if bad:
        raise OptionError(f"segments: features {bad} are not string, integer or boolean "
                          "columns; bucket them first (a view, or CAST in where=)")
    for col, name in zip(split, split_columns):
        if not src.rows.schema()[name].is_numeric():
            raise OptionError(f"segments: split column {col!r} is not numeric")
    spec = dict(by=keys, keys=by, features=features, columns=columns, split=split_columns,
                depth=depth,
                mode=mode,
                max_candidates=int(max_candidates), kinds=kinds, dialect=dialect(src.rows),
                weight_kind=weight_kind, branches_max=branches, strategy=strategy)
    return src, spec


# -- the search ----------------------------------------------------------------------------------
#
# A node (segment) is a row of global value codes, one per predicate, ascending: feature j's
# values (its kept values and ``__other__``, sorted as strings) hold the codes offset[j] ..
# offset[j + 1] − 1, so a node's codes ascend with its features. Each level of a group is a few
# arrays (codes, sums, eligibility, bound): no Python object per candidate segment.


def _search(src: Source, spec: dict, *, min_support, min_expected, holdout, top_k, screen_z,
            bins):
    """Evaluate the lattice level by level; per group, every evaluated level's node arrays."""
    by, features, mode = spec["by"], spec["columns"], spec["mode"]
    a_share = 0.5 if mode == "split" else 1.0
    folds = (holdout, a_share, spec["split"])
    k = len(features)
    extremes = spec.get("effect") == "sliceline"
    stats_of = STATS + EXTREMES if extremes else STATS
    level1 = declared.segment_sums(by, features, folds, bins, [(j,) for j in range(k)],
                                   extremes=extremes)
    frame = planner.fetch(src, level1)
    # a sampling rate's weights are sampling weights whatever 1/rate is (their var2 and sw2
    # carry its design: sqlcal.query.reductions.variance_weights)
    spec["sampling"] = resolve_weight_kind(src, spec["weight_kind"] or "auto") == "sampling"
    # unweighted rows are frequencies of 1, as every metric reports them
    spec["weight_kind_used"] = "sampling" if spec["sampling"] else "frequency"
    nb = max(bins, 1)
    frame = _with_var2(frame)
    gid, keys = _group_ids(frame, by, None)
    order = sorted(range(len(keys)), key=lambda i: _sort_key(keys[i]))
    rank = np.empty(len(keys), int)
    rank[order] = np.arange(len(keys))
    gid = rank[gid] if len(keys) else gid
    keys = [keys[i] for i in order]
    feat = frame["sqlcal_tuple"].to_numpy(int)
    raw = frame["sqlcal_v0"].to_numpy(object)
    fold = frame["sqlcal_fold"].to_numpy(int)
    vals = _values(frame, stats_of)
    b = frame["bin"].to_numpy(int) if "bin" in frame and nb > 1 else np.zeros(len(frame), int)
    groups = []
    for i, key in enumerate(keys):
        first = (gid == i) & (feat == 0)
        W_fold = np.bincount(fold[first], weights=vals[first, _W], minlength=3)
        n_fold = np.bincount(fold[first], weights=vals[first, _N], minlength=3)
        # Σw(y − p)² per fold (labels are 0 or 1): SliceLine's error total
        E_fold = np.bincount(fold[first], weights=_errors(vals[first]), minlength=3)
        W_ab = W_fold[FOLD_A] + W_fold[FOLD_B]
        support = float(min_support) if min_support is not None else default_support(W_ab)
        groups.append(dict(key=key, support=support, W_fold=W_fold, n_fold=n_fold,
                           E_fold=E_fold, lv=[],
                           tau=0.0, screened=[], levels=[]))
    # a value is kept when some group gives it the support of a segment (folds A and B)
    ab = np.isin(fold, (FOLD_A, FOLD_B))
    per_value = pd.DataFrame({"g": gid[ab], "j": feat[ab], "v": raw[ab], "W": vals[ab, _W]}
                             ).groupby(["g", "j", "v"], sort=False)["W"].sum().reset_index()
    supports = np.array([g["support"] for g in groups])
    # the lattice's cost, from these counts, before any deeper level runs
    spec["level_caps"], spec["level_bounds"] = _lattice_budget(per_value, groups, spec, k,
                                                               max(bins, 1))
    big = per_value[per_value["W"].to_numpy() >= supports[per_value["g"].to_numpy()]]
    kept = [tuple(sorted(set(big.loc[big["j"] == j, "v"]))) for j in range(k)]
    _refuse_nul(kept, spec)
    seen = pd.DataFrame({"j": feat, "v": raw}).drop_duplicates()
    pooled = {}
    vocab = []
    for j, f in enumerate(spec["features"]):
        values = set(seen.loc[seen["j"] == j, "v"])
        pooled[f] = len(values - set(kept[j]))
        vocab.append(tuple(sorted(set(kept[j]) | ({SEGMENT_OTHER} if kept[j] and pooled[f]
                                                  else set()))))
    sizes = np.array([len(v) for v in vocab], int)
    offset = np.concatenate([[0], np.cumsum(sizes)])
    search = dict(groups=groups, kept=kept, pooled=pooled, spec=spec, vocab=vocab,
                  offset=offset, values=np.array([v for vs in vocab for v in vs], dtype=object),
                  feature_of=np.repeat(np.arange(k), sizes), index=[pd.Index(v) for v in vocab])
    # level 1: each row's value, or its feature's __other__, as a code (NULL: no segment)
    code = np.full(len(frame), -1, np.int64)
    for j in range(k):
        m = feat == j
        if not kept[j]:
            continue  # every value pooled: "other" is the whole group, no segment
        idx = search["index"][j].get_indexer(raw[m])
        other = search["index"][j].get_indexer([SEGMENT_OTHER])[0]
        code[m] = offset[j] + np.where(idx >= 0, idx, other)
    for i, g in enumerate(groups):
        m = (gid == i) & (code >= 0)
        nodes, inverse = np.unique(code[m], return_inverse=True)
        g["next"] = (nodes[:, None], np.full(len(nodes), np.inf))
        g["level"] = (nodes[:, None], _accumulate(inverse, fold[m], b[m], vals[m],
                                                  len(nodes), nb))
    # what a later statement of this search needs (a level, or the intersections the
    # redundancy rule tests): covering GROUP BYs are sized by each feature's raw values (NULL
    # included); the cube (strategy="cube") is this search's own, never another's
    search["scan"] = dict(src=src, folds=folds, bins=bins, nb=nb, kept=kept, extremes=extremes,
                          cover=tuple(len(set(seen.loc[seen["j"] == j, "v"])) for j in range(k)),
                          rows=float(sum(g["n_fold"].sum() for g in groups)),
                          cube=uuid.uuid4().hex if spec["strategy"] == "cube" else None,
                          statements=1, branches=k, built=False, explaining=0)
    V = int(offset[-1])
    for depth in range(1, spec["depth"] + 1):
        if depth > 1:
            parts = [g["next"] for g in groups if len(g["next"][0])]
            if not parts:
                break
            cands, bound = _union([c for c, _ in parts], [u for _, u in parts], V)
            capped = 0
            cap = spec["level_caps"][depth]  # max_candidates, or less to fit the budget
            if len(cands) > cap:
                if mode == "full":
                    raise BudgetError(
                        f"segments: level {depth} has {len(cands)} candidate segments, over "
                        f"max_candidates={spec['max_candidates']} or the {cap} the budget "
                        "allows (family so far: "
                        f"{sum(int(lv['ok'].sum()) for g in groups for lv in g['lv'])} "
                        "segments); raise min_support (e.g. double it), lower max_depth, or "
                        "use mode='split'")
                keep = _cap(cands, bound, cap, search)
                capped = len(cands) - len(keep)
                cands = cands[keep]
                for g in groups:
                    c, u = g["next"]
                    inside = _find(cands, c, V) >= 0
                    g["next"] = (c[inside], u[inside])
            frame, tuples = _fetch_nodes(search, cands)
            found = _group_nodes(frame, tuples, search, depth, [g["next"][0] for g in groups])
            for g, level in zip(groups, found):
                g["level"] = level
        for g in groups:
            _evaluate_level(g, depth, spec, min_expected, top_k, screen_z, search)
            if depth > 1:  # the level's cap, what it removed, and the budget check's bound
                g["levels"][-1].update(capped=capped, cap=cap,
                                       bound=spec["level_bounds"][depth - 2])
    # every threshold of the search, stated with its result
    spec["searched"] = dict(min_expected=float(min_expected), screen_z=float(screen_z),
                            top_k=top_k, max_candidates=spec["max_candidates"],
                            strategy=spec["strategy"], holdout=float(holdout))
    return search


def _fetch_nodes(search: dict, cands: np.ndarray) -> tuple[pd.DataFrame, np.ndarray]:
    """The sums per fold, group (and bin) of the nodes ``cands`` (codes, one depth), as
    :func:`sqlcal.query.declared.segment_sums` gives them, in the statements a level takes
    (:func:`_batches`), counted in ``search["scan"]``; and the nodes' column tuples (the
    frame's ``sqlcal_tuple`` indexes them)."""
    scan, spec = search["scan"], search["spec"]
    tuple_of = search["feature_of"][cands]
    tuples, tidx = np.unique(tuple_of, axis=0, return_inverse=True)
    tidx = tidx.reshape(-1)
    order = np.lexsort([*cands.T[::-1], tidx])
    names = search["values"][cands[order]]
    rows = list(zip(tidx[order].tolist(), map(tuple, names.tolist())))
    listed = [tuple(t) for t in tuples.tolist()]
    cube, cover, bins = scan["cube"], scan["cover"], scan["bins"]
    if cube:
        batches = [list(range(len(listed)))]
        scan["branches"] += len(listed)
    else:
        plan = segment_plan(listed, cover, bins, rows)
        batches = _batches(plan, segment_sizes(plan, cover), scan["rows"],
                           len(search["groups"]) * 3 * scan["nb"])
        scan["branches"] += len(plan)  # base-table reads: one per covering GROUP BY
    frames, of_tuple = [], {}
    for t, v in rows:
        of_tuple.setdefault(t, []).append(v)
    for batch in batches:
        summary = declared.segment_sums(
            spec["by"], spec["columns"], scan["folds"], bins, [listed[t] for t in batch],
            scan["kept"], [(i, v) for i, t in enumerate(batch) for v in of_tuple[t]],
            cube=cube, cover=() if cube else cover, extremes=scan["extremes"])
        part = planner.fetch(scan["src"], summary)
        frames.append(part.assign(sqlcal_tuple=np.asarray(batch, np.int64)[
            part["sqlcal_tuple"].to_numpy(int)]) if len(part) else part)
    frame = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    scan["statements"] += len(batches) + bool(cube and not scan["built"])  # the cube's own
    scan["built"] = scan["built"] or bool(cube)
    return _with_var2(frame), tuples


def _candidate_bytes(depth: int, nb: int) -> int:
    """The memory one candidate segment of a level takes on the numpy side, in bytes: per fold
    and score bin its sums (8 doubles) and its row of the engine's answer (the level's values
    as text, the sums, the keys). Measured: 1.4 kB a depth-3 candidate (20 features of 10 to
    30 values, 50,000 rows, min_support=10: 1.13 GB of Python allocations at the peak for
    797,237 candidates; 20 s of CPU a 100,000 of them)."""
    return 3 * nb * (8 * len(STATS) + 64 * depth + 200)


def _lattice_bound(values: np.ndarray, room: np.ndarray, depth: int) -> list[int]:
    """Per level 2..``depth`` (index L − 2), at most how many candidate segments the search
    generates over all groups: ``values`` (groups × features) counts each feature's values that
    reach the group's support (the pooled bucket one of them), ``room`` = W/min_support of
    each group. A node of column tuple T is a candidate only when each of its parents is
    eligible, so at most min(Π_{j∈T} v_j, min_{j∈T} E(T∖j)·v_j) nodes of T are candidates,
    and at most E(T) = min(that, W/min_support) of them eligible (the nodes of one tuple
    partition the rows, each eligible one holding min_support)."""
    k = values.shape[1]
    eligible = {(j,): np.minimum(values[:, j], room) for j in range(k)}
    out = []
    for level in range(2, depth + 1):
        total, nxt = 0.0, {}
        for cols in combinations(range(k), level):
            cand = np.prod(values[:, cols], axis=1)
            for i, j in enumerate(cols):
                cand = np.minimum(cand, eligible[cols[:i] + cols[i + 1:]] * values[:, j])
            nxt[cols] = np.minimum(cand, room)
            total += float(cand.sum())
        eligible = nxt
        out.append(int(min(total, 2.0**62)))
    return out


def _lattice_budget(per_value: pd.DataFrame, groups: list, spec: dict, k: int, nb: int
                    ) -> tuple[dict, list]:
    """Each level's cap on its candidates (``max_candidates``, or fewer to fit the budget), and
    the bound on its candidates from the level-1 counts (:func:`_lattice_bound`), before any
    deeper level runs. Split mode
    keeps a capped level's candidates of largest bound (the search's own rule); full mode
    tests every eligible segment, so a lattice that could exceed the budget's ``bytes`` or
    ``cells`` (:func:`_candidate_bytes` per candidate, 3 folds × bins summary rows) is refused
    here, naming the ``min_support`` and the ``max_depth`` that would fit."""
    budget, depth = options.BUDGET, spec["depth"]
    cap = {d: int(min(spec["max_candidates"], budget.bytes // _candidate_bytes(d, nb),
                      budget.cells // (3 * nb))) for d in range(2, depth + 1)}

    def bound(scale: float) -> list[int]:
        support = np.array([g["support"] for g in groups]) * scale
        w_ab = np.array([g["W_fold"][FOLD_A] + g["W_fold"][FOLD_B] for g in groups])
        gi, j, w = (per_value[c].to_numpy() for c in ("g", "j", "W"))
        big = w >= support[gi]
        values = np.zeros((len(groups), k))
        np.add.at(values, (gi[big], j[big]), 1.0)
        small = np.zeros((len(groups), k))
        np.add.at(small, (gi[~big], j[~big]), w[~big])
        values += small >= support[:, None]  # the pooled bucket, when it reaches the support
        return _lattice_bound(values, np.floor(w_ab / support), depth)

    def over(levels: list[int]) -> int | None:  # the first level over the budget
        for d, n in enumerate(levels, start=2):
            if n * _candidate_bytes(d, nb) > budget.bytes or n * 3 * nb > budget.cells:
                return d
        return None

    levels = bound(1.0)
    level = over(levels) if spec["mode"] == "full" else None
    if level is None:
        return cap, levels
    n = levels[level - 2]
    fits = [d for d in range(1, depth) if over(levels[:d - 1]) is None]
    scale = next((2.0**i for i in range(1, 64) if over(bound(2.0**i)) is None), None)
    support = groups[0]["support"]
    hint = [f"max_depth={fits[-1]}" if fits else None,
            f"min_support={support * scale:g}" if scale else None]
    raise BudgetError(
        f"segments: with min_support={support:g} and max_depth={depth} over {k} features, "
        f"level {level} could hold up to {n:,} candidate segments (bounded from the level-1 "
        f"counts), about {n * _candidate_bytes(level, nb) / 2**30:.1f} GiB of summaries, over "
        f"the budget of {budget.bytes / 2**30:g} GiB; "
        f"{' or '.join(h for h in hint if h) or 'fewer features'} would fit (or use "
        "mode='split', or raise sqlcal.options.budget(bytes=))")


#: the most groups the GROUP BYs of one level statement may hold together: DuckDB keeps every
#: UNION ALL branch's aggregate until the statement ends (measured: the depth-3 level of
#: 10^6 rows, 20 features, peaked at 10.1 GB in one statement), so a level runs as several
#: statements of at most this many estimated groups each (about :data:`GROUP_BYTES` a group),
#: and fewer when those would exceed the budget's ``bytes``
SEGMENT_STATEMENT_GROUPS = 2**22
GROUP_BYTES = 400


def _batches(plan: list, sizes: list, rows: float, per_cell: int) -> list[list[int]]:
    """A level's column tuples (indices), in statements whose covering GROUP BYs hold at most
    :data:`SEGMENT_STATEMENT_GROUPS` groups together (or the budget's ``bytes`` at
    :data:`GROUP_BYTES` a group), each set counted at the lesser of its value combinations
    (``sizes``, :func:`sqlcal.query.reductions.segment_sizes`) times ``per_cell`` (folds, bins,
    groups) and the rows."""
    limit = min(SEGMENT_STATEMENT_GROUPS, options.BUDGET.bytes // GROUP_BYTES)
    out, current, held = [], [], 0.0
    for (_, members, _), size in zip(plan, sizes):
        groups = min(size * per_cell, rows)
        if current and held + groups > limit:
            out.append(current)
            current, held = [], 0.0
        current += list(members)
        held += groups
    return out + [current] if current else out


def _with_var2(frame: pd.DataFrame) -> pd.DataFrame:
    if "var2" not in frame:  # unweighted: Σw²p(1 − p) = Σp(1 − p)
        frame = frame.assign(var2=frame["swp"] - frame["swpp"])
    return frame


def _group_ids(frame: pd.DataFrame, by, known: dict | None):
    """Per row the index of its group, and the groups' keys (None for NULL); with ``known``
    (key -> index), the indices of those keys (-1 for a key not among them)."""
    if not by:
        return np.zeros(len(frame), int), [()]
    ids = frame.groupby(list(by), dropna=False, sort=False).ngroup().to_numpy()
    _, first = np.unique(ids, return_index=True)
    firsts = frame[list(by)].to_numpy(object)[first]
    keys = [tuple(None if _null(v) else (v.item() if hasattr(v, "item") else v) for v in row)
            for row in firsts]
    if known is None:
        return ids, keys
    return np.array([known.get(key, -1) for key in keys], int)[ids], keys


def _accumulate(node: np.ndarray, fold: np.ndarray, b: np.ndarray, vals: np.ndarray, m: int,
                nb: int) -> np.ndarray:
    """Sums of shape (m nodes, 3 folds, nb bins, stats) of the rows' ``vals`` (the
    :data:`EXTREMES` columns, when present, by their least and largest value)."""
    flat = (node * 3 + fold) * nb + b
    out = np.empty((m * 3 * nb, vals.shape[1]))
    for c in range(len(STATS)):
        out[:, c] = np.bincount(flat, weights=vals[:, c], minlength=m * 3 * nb)
    if vals.shape[1] > len(STATS):
        out[:, len(STATS)] = np.inf
        np.minimum.at(out[:, len(STATS)], flat, vals[:, len(STATS)])
        out[:, len(STATS) + 1] = -np.inf
        np.maximum.at(out[:, len(STATS) + 1], flat, vals[:, len(STATS) + 1])
    return out.reshape(m, 3, nb, vals.shape[1])


def _values(frame: pd.DataFrame, columns: list) -> np.ndarray:
    """The rows' sums (and extremes: a NULL least score is +inf, a NULL largest -inf)."""
    vals = frame[columns].to_numpy(float)
    if len(columns) > len(STATS):
        vals[:, len(STATS)] = np.nan_to_num(vals[:, len(STATS)], nan=np.inf)
        vals[:, len(STATS) + 1] = np.nan_to_num(vals[:, len(STATS) + 1], nan=-np.inf)
    return vals


def _errors(s: np.ndarray) -> np.ndarray:
    """Σw(y − p)² of sums rows (last axis the stats): Σwy − 2Σwyp + Σwp², y in {0, 1}."""
    return s[..., _Y] - 2 * s[..., _YP] + s[..., _PP]


def _sliceline(size, errors, W, E, alpha: float) -> np.ndarray:
    """SliceLine's score α(ē_S/ē − 1) − (1 − α)(W/W_S − 1) (SystemDS ``sliceLine``, ``score``):
    -inf for an empty segment or a group without error."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        # at α = 1 the size term is 0 even where W/W_S overflows (a denormal weight)
        size_term = (1 - alpha) * (W / size - 1) if alpha < 1 else 0.0
        out = alpha * ((errors / size) / (E / W) - 1) - size_term
    return np.where((np.asarray(size) > 0) & (E > 0) & (W > 0), out, -np.inf)


def _sliceline_bound(size, errors, W, E, alpha: float, least: float) -> np.ndarray:
    r"""An upper bound of the SliceLine score of S and of each descendant T of weight at
    least ``least``: W_T ≤ W_S, E_T ≤ E_S and E_T ≤ W_T (each e ≤ 1). The score rises with E_T,
    so it is at most h(s) = score(s, min(E_S, s)); h rises in s up to E_S and is monotone
    beyond (its s-part is (αE_S/ē − (1 − α)W)/s), so the largest h on [least, W_S] is at
    s = clip(E_S, least, W_S) or at W_S. -inf when no descendant reaches ``least``."""
    lo = np.minimum(np.maximum(errors, least), size)
    out = np.maximum(_sliceline(lo, np.minimum(errors, lo), W, E, alpha),
                     _sliceline(size, errors, W, E, alpha))
    return np.where(size >= least, out, -np.inf)


def _keys(codes: np.ndarray, V: int):
    """One int64 per node (codes in base V), or None when the nodes are too long for it."""
    if V ** max(codes.shape[1], 1) >= 2 ** 62:
        return None
    out = np.zeros(len(codes), np.int64)
    for c in range(codes.shape[1]):
        out = out * V + codes[:, c]
    return out


def _find(table: np.ndarray, query: np.ndarray, V: int) -> np.ndarray:
    """The row of ``table`` (distinct nodes) equal to each row of ``query``, or -1."""
    if not len(table) or not len(query):
        return np.full(len(query), -1)
    kt, kq = _keys(table, V), _keys(query, V)
    if kt is None:  # long nodes: compare rows through one joint numbering
        _, ids = np.unique(np.concatenate([table, query]), axis=0, return_inverse=True)
        ids = ids.reshape(-1)
        kt, kq = ids[:len(table)], ids[len(table):]
    order = np.argsort(kt, kind="stable")
    pos = np.minimum(np.searchsorted(kt, kq, sorter=order), len(kt) - 1)
    hit = order[pos]
    return np.where(kt[hit] == kq, hit, -1)


def _union(codes: list, bounds: list, V: int):
    """The distinct nodes of several groups' candidates, each with its largest bound."""
    allc, allb = np.concatenate(codes), np.concatenate(bounds)
    key = _keys(allc, V)
    if key is None:
        uniq, inverse = np.unique(allc, axis=0, return_inverse=True)
    else:
        _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        uniq = allc[first]
    inverse = inverse.reshape(-1)
    best = np.full(len(uniq), -np.inf)
    np.maximum.at(best, inverse, allb)
    return uniq, best


def _cap(cands: np.ndarray, bound: np.ndarray, cap: int, search: dict) -> np.ndarray:
    """The ``cap`` candidates of largest bound (ties by their text), as indices."""
    order = np.argsort(-bound, kind="stable")
    edge = bound[order[cap - 1]]
    above = np.nonzero(bound > edge)[0]
    tied = np.nonzero(bound == edge)[0]
    text = [_node_text(_node(c, search)) for c in cands[tied]]
    tied = tied[np.argsort(np.array(text, dtype=object), kind="stable")][:cap - len(above)]
    return np.sort(np.concatenate([above, tied]))


def _node(codes, search) -> tuple:
    """A node as ((feature index, value), ...)."""
    return tuple((int(search["feature_of"][c]), search["values"][c]) for c in codes)


def _group_nodes(frame: pd.DataFrame, tuples: np.ndarray, search: dict, depth: int,
                 wanted: list) -> list[tuple]:
    """Per group, the nodes of ``wanted`` (the group's codes, one depth) that a segment_sums
    frame holds, with their sums: ``(codes, sums)``, sums of shape (nodes, folds, bins,
    stats)."""
    groups, V = search["groups"], int(search["offset"][-1])
    by, nb = search["spec"]["by"], search["scan"]["nb"]
    known = {g["key"]: i for i, g in enumerate(groups)}
    gid, _ = _group_ids(frame, by, known)
    feats = tuples[frame["sqlcal_tuple"].to_numpy(int)] if len(frame) else np.zeros(
        (0, depth), int)
    codes = np.full((len(frame), depth), -1, np.int64)
    for c in range(depth):
        raw = frame[f"sqlcal_v{c}"].to_numpy(object)
        for j in np.unique(feats[:, c]):
            m = feats[:, c] == j
            idx = search["index"][j].get_indexer(raw[m])
            codes[m, c] = np.where(idx >= 0, search["offset"][j] + idx, -1)
    good = (codes >= 0).all(axis=1) & (gid >= 0)
    fold = frame["sqlcal_fold"].to_numpy(int)
    b = frame["bin"].to_numpy(int) if "bin" in frame and nb > 1 else np.zeros(len(frame), int)
    extremes = search["spec"].get("effect") == "sliceline"
    vals = _values(frame, STATS + EXTREMES if extremes else STATS)
    out = []
    for i, cand in enumerate(wanted):
        m = good & (gid == i)
        node = _find(cand, codes[m], V)
        hit = node >= 0
        sums = _accumulate(node[hit], fold[m][hit], b[m][hit], vals[m][hit], len(cand), nb)
        present = np.zeros(len(cand), bool)
        present[node[hit]] = True
        out.append((cand[present], sums[present]))
    return out


def _evaluate_level(g, depth, spec, min_expected, top_k, screen_z, search):
    codes, sums = g["level"]
    mode = spec["mode"]
    W_a = g["W_fold"][FOLD_A]
    tot = sums.sum(axis=2)  # (nodes, folds, stats)
    ab = tot[:, FOLD_A] + tot[:, FOLD_B]
    ok = ((ab[:, _W] >= g["support"]) & (ab[:, _P] >= min_expected)
          & (ab[:, _W] - ab[:, _P] >= min_expected))
    counts = dict(depth=depth, candidates=len(g["next"][0]), evaluated=len(codes),
                  ineligible=int((~ok).sum()), bound_pruned=0)
    a = tot[:, FOLD_A]
    with np.errstate(divide="ignore", invalid="ignore"):
        if mode == "split" and spec.get("effect") == "ece":
            # per bin: |R_b| <= max(P_b, N_b), each part anti-monotone along the lattice
            fa = sums[:, FOLD_A]
            r_b = fa[:, :, _Y] - fa[:, :, _P]
            passed = np.zeros(len(codes), bool)
            for i in np.nonzero(ok)[0]:
                stat, df = _chi2(fa[i], spec["sampling"])
                passed[i] = bool(df) and stats.chi2.sf(stat, df) <= 2 * stats.norm.sf(screen_z)
            harm = np.abs(r_b).sum(axis=1) / W_a
            bound = np.maximum(fa[:, :, _Y] - fa[:, :, _YP],
                               fa[:, :, _P] - fa[:, :, _YP]).sum(axis=1) / W_a
        elif mode == "split" and spec.get("effect") == "sliceline":
            W_fa, E_fa, sl = g["W_fold"][FOLD_A], g["E_fold"][FOLD_A], spec["sliceline_alpha"]
            harm = _sliceline(a[:, _W], _errors(a), W_fa, E_fa, sl)
            passed = ok & (harm > 0)
            bound = _sliceline_bound(a[:, _W], _errors(a), W_fa, E_fa, sl, g["support"])
        elif mode == "split":
            r = a[:, _Y] - a[:, _P]
            v = a[:, _V2] if spec["sampling"] else a[:, _P] - a[:, _PP]
            z = np.where(v > 0, r / np.sqrt(np.where(v > 0, v, 1.0)), 0.0)
            passed = ok & (np.abs(z) >= screen_z)
            harm = np.abs(r) / W_a
            bound = np.maximum(a[:, _Y] - a[:, _YP], a[:, _P] - a[:, _YP]) / W_a
        else:
            passed = np.zeros(len(codes), bool)
            harm = np.zeros(len(codes))
            bound = np.full(len(codes), np.inf)
    level = len(g["lv"])
    g["lv"].append(dict(codes=codes, sums=sums, ok=ok))
    if passed.any():
        g["screened"].append((harm[passed], np.full(int(passed.sum()), level),
                              np.nonzero(passed)[0]))
    if mode == "split" and top_k is not None:
        every = np.concatenate([h for h, _, _ in g["screened"]]) if g["screened"] else []
        if len(every) >= top_k:
            g["tau"] = float(np.sort(every)[::-1][top_k - 1])
    alive = ok & (bound >= g["tau"])
    counts["bound_pruned"] = int(ok.sum() - alive.sum())
    g["levels"].append(counts)
    g["next"] = (_children(codes[alive], bound[alive], search) if depth < spec["depth"] else
                 (np.zeros((0, depth + 1), np.int64), np.zeros(0)))


#: the most parent pairs formed at once by the apriori join (memory: a few 100 MB)
PAIRS = 4_000_000


def _children(codes: np.ndarray, bound: np.ndarray, search: dict):
    """Apriori join: a child of two alive nodes sharing all but their last predicate, kept when
    every one of its parents is alive; its bound is the least of its parents' bounds."""
    a, L = codes.shape
    empty = (np.zeros((0, L + 1), np.int64), np.zeros(0))
    if a < 2:
        return empty
    feature_of, V = search["feature_of"], int(search["offset"][-1])
    order = np.lexsort(codes.T[::-1])
    c, u = codes[order], bound[order]
    if L == 1:
        starts = np.array([0])
    else:
        new = np.any(c[1:, :L - 1] != c[:-1, :L - 1], axis=1)
        starts = np.concatenate([[0], np.nonzero(new)[0] + 1])
    sizes = np.diff(np.concatenate([starts, [a]]))
    pos = np.arange(a) - np.repeat(starts, sizes)
    partners = np.repeat(sizes, sizes) - pos - 1  # the nodes after it in its prefix group
    out_c, out_u = [], []
    ends = np.cumsum(partners)
    lo = 0
    while lo < a:  # in slices of at most PAIRS pairs
        hi = max(lo + 1, int(np.searchsorted(ends, (ends[lo - 1] if lo else 0) + PAIRS,
                                             side="right")))
        hi = min(hi, a)
        cnt = partners[lo:hi]
        i = np.repeat(np.arange(lo, hi), cnt)
        run = np.repeat(np.cumsum(cnt) - cnt, cnt)
        j = i + 1 + (np.arange(int(cnt.sum())) - run)
        lo = hi
        keep = feature_of[c[i, -1]] != feature_of[c[j, -1]]
        i, j = i[keep], j[keep]
        child = np.column_stack([c[i], c[j, -1]])
        cu = np.minimum(u[i], u[j])
        for r in range(L - 1):  # the parents other than the two joined
            at = _find(c, np.delete(child, r, axis=1), V)
            hit = at >= 0
            child, cu = child[hit], np.minimum(cu[hit], u[at[hit]])
        out_c.append(child)
        out_u.append(cu)
    return np.concatenate(out_c), np.concatenate(out_u)


def _null(v) -> bool:
    return v is None or (isinstance(v, float) and v != v) or v is pd.NA


def _sort_key(key: tuple) -> tuple:
    return tuple((v is None, str(type(v)), v if v is not None else 0) for v in key)


def _chi2(binned: np.ndarray, sampling: bool) -> tuple[float, int]:
    """The per-bin score statistic Σ_b R_b² / V_b over the bins with V_b > 0 (``binned``:
    bins × stats of one fold) and its degrees of freedom."""
    r = binned[:, _Y] - binned[:, _P]
    v = binned[:, _V2] if sampling else binned[:, _P] - binned[:, _PP]
    ok = v > 0
    return float(np.sum(r[ok] ** 2 / v[ok])), int(ok.sum())


def _node_text(node) -> str:
    return " AND ".join(f"{j}={v}" for j, v in node)


def _special(codes, search, features) -> str | None:
    """The ``special_values`` of a segment: JSON naming each feature whose predicate is NULL
    (``"null"``) or the pooled bucket (``"other"``), None when every predicate is a value."""
    out = {features[int(search["feature_of"][c])]: SPECIAL[search["values"][c]]
           for c in codes if search["values"][c] in SPECIAL}
    return json.dumps(out, sort_keys=True) if out else None


def _shown(predicates, spec) -> dict:
    """A fitted segment's feature columns (internal names, :func:`_present` restores the
    user's) and ``special_values`` as a result shows them."""
    keys = {f: key for f, key, _ in predicates}
    special = {f: SPECIAL[k] for f, k in keys.items() if k in SPECIAL}
    return {**{c: SHOWN.get(keys[f], keys[f][len(SEGMENT_VALUE):]) if f in keys else None
               for f, c in zip(spec["features"], spec["columns"])},
            "special_values": json.dumps(special, sort_keys=True) if special else None}


def _keys_of(row, features, column: str = "special_values") -> dict:
    """A result row's predicates as ``{feature: key}``
    (:func:`sqlcal.query.reductions.segment_code`), its ``special_values`` (in ``column``) telling a
    NULL predicate and the pooled bucket from values that read the same."""
    special = row.get(column)
    special = json.loads(special) if isinstance(special, str) else {}
    code = {name: key for key, name in SPECIAL.items()}
    return {f: code[special[f]] if f in special else segment_code(str(row[f]))
            for f in features if f in special or not _null(row[f])}


def _refuse_nul(kept, spec) -> None:
    """A kept value becomes a string literal in the lattice's queries and in the segment's SQL:
    one holding the NUL character cannot be written as one on every engine (DuckDB's parser
    stops at it, PostgreSQL's text refuses it), so it is refused by name instead of failing in
    the engine (a pooled value never becomes a literal)."""
    for j, values in enumerate(kept):
        bad = [v for v in values if isinstance(v, str) and "\x00" in v]
        if bad:
            raise InvalidInputError(
                f"feature {spec['features'][j]!r} has {len(bad)} value(s) with the support of a "
                f"segment that contain the NUL character (\\x00), which a SQL string literal "
                f"cannot hold on every engine: replace it in the column, or leave the feature out")


def _predicates(node, search_or_kept, features):
    kept = search_or_kept["kept"] if isinstance(search_or_kept, dict) else search_or_kept
    return tuple((features[j], v, kept[j] if v == SEGMENT_OTHER else ()) for j, v in node)


def _condition(node, search) -> str:
    spec = search["spec"]
    return condition_sql(_predicates(node, search, spec["features"]), spec["kinds"],
                         spec["dialect"])


# -- tests and the result table ------------------------------------------------------------------


def adjust(p: np.ndarray, method: str) -> np.ndarray:
    """Adjusted p-values: Benjamini-Hochberg (``"bh"``), Benjamini-Yekutieli (``"by"``),
    Bonferroni, or none.

    Examples
    --------
    >>> adjust(np.array([0.01, 0.04, 0.03]), "bh").round(3).tolist()
    [0.03, 0.04, 0.04]
    """
    p = np.asarray(p, float)
    m = len(p)
    if m == 0 or method == "none":
        return p.copy()
    if method == "bonferroni":
        return np.minimum(1.0, p * m)
    scale = 1.0 if method == "bh" else float(np.sum(1.0 / np.arange(1, m + 1)))
    order = np.argsort(p, kind="stable")
    q = p[order] * m * scale / np.arange(1, m + 1)
    q = np.minimum.accumulate(q[::-1])[::-1]
    out = np.empty(m)
    out[order] = np.minimum(q, 1.0)
    return out


def _report(search: dict, spec: dict, *, alpha, fdr, top_k) -> pd.DataFrame:
    by, features, mode = spec["by"], spec["columns"], spec["mode"]
    test_fold = FOLD_B if mode == "split" else FOLD_A
    binned = spec.get("effect") == "ece"
    sliceline = spec.get("effect") == "sliceline"
    frames, tested = [], []
    for g in search["groups"]:
        lv = g["lv"]
        family = sum(int(x["ok"].sum()) for x in lv)
        if mode == "split":
            if g["screened"]:
                harm = np.concatenate([h for h, _, _ in g["screened"]])
                level = np.concatenate([x for _, x, _ in g["screened"]])
                row = np.concatenate([x for _, _, x in g["screened"]])
            else:
                harm = level = row = np.zeros(0, int)
            # by harm, ties by the segment's text: only the ties at the cut need the text
            if top_k is not None and len(harm) > top_k:
                edge = np.sort(harm)[::-1][top_k - 1]
                near = np.nonzero(harm >= edge)[0]
            else:
                near = np.arange(len(harm))
            text = [_condition(_node(lv[level[i]]["codes"][row[i]], search), search)
                    for i in near]
            near = near[np.lexsort((np.array(text, dtype=object), -harm[near]))]
            near = near[:top_k] if top_k else near
            picks = [(int(level[i]), int(row[i])) for i in near]
        else:
            picks = [(d, int(i)) for d, x in enumerate(lv) for i in np.nonzero(x["ok"])[0]]
        T = len(picks)
        codes = [lv[d]["codes"][i] for d, i in picks]
        cells = (np.stack([lv[d]["sums"][i] for d, i in picks]) if T else
                 np.zeros((0, 3, 1, len(STATS) + len(EXTREMES) * sliceline)))
        s = cells.sum(axis=2)  # (segments, folds, stats)
        t, a, ab = s[:, test_fold], s[:, FOLD_A], s[:, FOLD_A] + s[:, FOLD_B]
        W_t = g["W_fold"][test_fold]
        sampling = spec["sampling"]
        with np.errstate(divide="ignore", invalid="ignore"):
            r, vf = t[:, _Y] - t[:, _P], t[:, _P] - t[:, _PP]
            v = t[:, _V2] if sampling else vf
            z = np.where(v > 0, r / np.sqrt(np.where(v > 0, v, 1.0)), 0.0)
            # split mode: one-sided in fold A's direction; full mode: two-sided
            sign = (np.where(a[:, _Y] - a[:, _P] >= 0, 1.0, -1.0) if mode == "split" else
                    np.zeros(T))
            p = stats.norm.sf(sign * z) if mode == "split" else 2 * stats.norm.sf(np.abs(z))
            r_all = ab[:, _Y] - ab[:, _P]
            v_all = ab[:, _V2] if sampling else ab[:, _P] - ab[:, _PP]
            z_all = np.where(v_all > 0, r_all / np.sqrt(np.where(v_all > 0, v_all, 1.0)), 0.0)
            harm = np.abs(r) / W_t if W_t else np.full(T, np.nan)
            W = t[:, _W]
            has = W != 0
            cols = dict(
                depth=np.array([len(c) for c in codes], int),
                n=np.rint(t[:, _N]).astype(np.int64), W=W,
                mean_score=np.where(has, t[:, _P] / W, np.nan),
                observed=np.where(has, t[:, _Y] / W, np.nan),
                citl=np.where(has, (t[:, _P] - t[:, _Y]) / W, np.nan),
                residual=r, harm=harm, z=z, p_value=p,
                logit_shift=np.where(vf > 0, r / vf, np.nan),
                logit_shift_se=np.where(vf > 0, np.sqrt(v) / vf, np.nan),
                residual_all=r_all, z_all=z_all, _sign=sign)
        for j, f in enumerate(features):
            at = np.full(T, None, dtype=object)
            for i, c in enumerate(codes):  # the returned segments' values (no search object)
                hit = search["feature_of"][c] == j
                if hit.any():
                    at[i] = search["values"][c[hit][0]]
            cols[f] = at
        cols["special_values"] = [_special(c, search, spec["features"]) for c in codes]
        for f in features:
            cols[f] = [None if v is None else SHOWN.get(v, v[len(SEGMENT_VALUE):])
                       for v in cols[f]]
        part = pd.DataFrame(cols)
        if sliceline:  # SliceLine's score of e = (y − p)² on the test fold, as the harm
            errors = _errors(t)
            part["score"] = part["harm"] = _sliceline(t[:, _W], errors, W_t,
                                                      g["E_fold"][test_fold],
                                                      spec["sliceline_alpha"])
            part["error_sum"] = errors
            low = cells[:, test_fold, :, len(STATS)].min(axis=1)
            high = cells[:, test_fold, :, len(STATS) + 1].max(axis=1)
            worst = np.maximum(np.where(np.isfinite(low), (1 - low) ** 2, -np.inf),
                               np.where(np.isfinite(high), high ** 2, -np.inf))
            part["max_error"] = np.where(np.isfinite(worst), worst, np.nan)
        if binned:  # the binned error and its chi-square test (no direction)
            tb = cells[:, test_fold]
            r_b = tb[:, :, _Y] - tb[:, :, _P]
            tests = [_chi2(x, sampling) for x in tb]
            part["chi2"] = [x for x, _ in tests]
            part["chi2_df"] = [d for _, d in tests]
            part["p_value"] = [float(stats.chi2.sf(x, d)) if d else 1.0 for x, d in tests]
            part["harm"] = np.abs(r_b).sum(axis=1) / W_t if W_t else np.nan
            with np.errstate(divide="ignore", invalid="ignore"):
                part["ece"] = np.where(has, np.abs(r_b).sum(axis=1) / W, np.nan)
        part["_codes"] = codes
        if len(part):
            part["q_value"] = adjust(part["p_value"].to_numpy(), fdr)
            part["significant"] = part["q_value"] <= alpha
            sig = part["significant"].to_numpy()
            part["_node"] = [_node(c, search) if s_ else None for c, s_ in zip(codes, sig)]
            part["segment"] = [_condition(n, search) if n else None for n in part["_node"]]
        tested.append((g, part, family, T, cells[:, test_fold]))
    # the redundancy rule reads every group's significant segments at once: the intersections
    # the lattice lacks come from one statement per round for all groups
    explained = (_explained(search, [(g, part, cells) for g, part, _, _, cells in tested],
                            alpha, fdr) if not sliceline else [None] * len(tested))
    scan = search["scan"]
    for (g, part, family, T, _), why in zip(tested, explained):
        if len(part):
            if sliceline:  # SliceLine's top-k: no redundancy rule, only the score's order
                part["explained_by"] = None
                if mode == "full":
                    part = part.iloc[_top_scores(part, top_k, search)].copy()
            else:
                part["explained_by"] = why
            if mode == "full" and top_k is not None and not sliceline:
                top = part["harm"].rank(ascending=False, method="first") <= top_k
                part = part[top | part["significant"]].copy()
            missing = part["segment"].isna().to_numpy()
            if missing.any():
                part.loc[missing, "segment"] = [
                    _condition(_node(c, search), search) for c in part["_codes"][missing]]
        if not len(part):  # nothing tested, or (sliceline) no positive score
            part = pd.DataFrame([dict(segment=None, depth=0, significant=False)])
        for i, k in enumerate(by):
            part.insert(i, k, [g["key"][i]] * len(part))
        part["family_size"] = family
        part["tested"] = T
        # each GROUP BY branch reads the base table once (columnar engines read only the
        # branch's columns); the cube strategy reads it twice
        part["statements"] = scan["statements"]
        part["branches"] = scan["branches"]
        part["searched"] = json.dumps(dict(
            mode=mode, fdr=fdr, alpha=alpha, min_support=g["support"], max_depth=spec["depth"],
            levels=g["levels"], pooled_values=search["pooled"], tau=g["tau"],
            fold_weights=[float(x) for x in g["W_fold"]],
            fold_rows=[int(x) for x in g["n_fold"]], statements=scan["statements"],
            scans=1 + scan["built"] if scan["cube"] else scan["branches"],
            explained=g.get("explained", {}), **spec["searched"]), sort_keys=True)
        part["weight_kind"] = spec["weight_kind_used"]
        frames.append(part)
    out = pd.concat(frames, ignore_index=True)
    columns = [*by, "segment", "depth", *features, "special_values", "n", "W", "mean_score",
               "observed", "citl", "residual", "harm", "z", "p_value", "q_value", "significant",
               "logit_shift", "logit_shift_se", "explained_by", "residual_all", "z_all",
               "family_size", "tested", "statements", "branches", "searched", "weight_kind"]
    if binned:
        columns[columns.index("explained_by"):columns.index("explained_by")] = [
            "ece", "chi2", "chi2_df"]
    if sliceline:
        columns[columns.index("explained_by"):columns.index("explained_by")] = [
            "score", "error_sum", "max_error"]
    for c in columns + ["_node"]:
        if c not in out:
            out[c] = None
    out["_explained"] = out["explained_by"].notna()
    keys = list(by)
    out = out.sort_values([*keys, "_explained", "harm", "segment"],
                          ascending=[True] * len(keys) + [True, False, True],
                          na_position="last", kind="stable", ignore_index=True)
    return out[columns]


def _top_scores(part: pd.DataFrame, top_k: int | None, search: dict) -> np.ndarray:
    """Rows (positions) of the ``top_k`` segments of positive SliceLine score (all of them
    with None), ties at the cut by the segment's text."""
    score = part["score"].to_numpy()
    pos = np.nonzero(score > 0)[0]
    if top_k is None or len(pos) <= top_k:
        return pos
    edge = np.sort(score[pos])[::-1][top_k - 1]
    near = pos[score[pos] >= edge]
    text = np.array([_condition(_node(c, search), search) for c in part["_codes"].iloc[near]],
                    dtype=object)
    return np.sort(near[np.lexsort((text, -score[near]))][:top_k])


def _explained(search: dict, tested: list, alpha: float, fdr: str) -> list:
    """Per group (``tested``: its group, result rows and the rows' test-fold sums per bin), each
    row's ``explained_by`` by the redundancy rule of :func:`segments` (Notes). The intersection
    of two segments is a conjunction: the lattice holds its sums when the search evaluated it;
    the others are read in one more statement per round, for every group (a segment is tested
    only against the segments already found unexplained, which the rounds grow)."""
    sampling = search["spec"]["sampling"]
    fetched = [{} for _ in tested]
    while True:
        results, need = [], []
        for (g, part, cells), known in zip(tested, fetched):
            out, missing = _explained_in(search, g, part, _riv(cells, sampling), known,
                                         _cutoff(part, alpha, fdr))
            results.append(out)
            need.append(missing)
        if not any(need):
            return results
        _intersections(search, [g for g, _, _ in tested], need, fetched)


def _cutoff(part: pd.DataFrame, alpha: float, fdr: str) -> float:
    """The p-value below which a test of the group's family is a discovery: k·α/m for
    Benjamini-Hochberg with k discoveries among m tests (divided by H_m = Σ_{i≤m} 1/i for
    Benjamini-Yekutieli), α/m for Bonferroni, α unadjusted."""
    m = len(part)
    k = int(part["significant"].sum()) if m else 0
    if not m or fdr == "none":
        return alpha
    if fdr == "bonferroni":
        return alpha / m
    scale = 1.0 if fdr == "bh" else float(np.sum(1.0 / np.arange(1, m + 1)))
    return alpha * max(k, 1) / (m * scale)


def _riv(sums: np.ndarray, sampling: bool) -> np.ndarray:
    """Sums per bin (last axis :data:`STATS`) as (residual R, information I = Σwp(1 − p),
    variance V: I, or Σw²p(1 − p) for sampling weights) on the last axis."""
    info = sums[..., _P] - sums[..., _PP]
    return np.stack([sums[..., _Y] - sums[..., _P], info,
                     sums[..., _V2] if sampling else info], axis=-1)


def _explained_in(search: dict, g: dict, part: pd.DataFrame, cells: np.ndarray, known: dict,
                  cutoff: float) -> tuple[list, dict]:
    """One group's ``explained_by`` (``cells``: its rows' (R, I, V) per bin), and the
    intersections it still needs (node -> the codes of the segment it tests against).

    The significant segments are taken by strength (|z|; the binned chi-square's p-value
    with ``effect="ece"``), ties by their text; each is explained by the first segment already
    found unexplained (a *root*) that explains it (:func:`_explains`), else it is a root."""
    out = [None] * len(part)
    sig = np.nonzero(part["significant"].to_numpy(bool))[0] if len(part) else []
    if not len(sig):
        g["explained"] = dict(roots=0, fetched=0, statements=search["scan"]["explaining"])
        return out, {}
    if "chi2" in part:
        strength = -stats.chi2.logsf(part["chi2"].to_numpy(float),
                                     np.maximum(part["chi2_df"].to_numpy(float), 1))
    else:
        strength = np.abs(part["z"].to_numpy(float))
    text, codes = part["segment"].tolist(), part["_codes"].tolist()
    # each remainder is tested as its segment was: one-sided in its direction (split mode),
    # two-sided (full mode), or by the binned chi-square (effect="ece")
    side = np.zeros(len(part)) if "chi2" in part else part["_sign"].to_numpy(float)
    order = sorted(sig, key=lambda i: (-strength[i], text[i]))
    roots = []
    for pos, i in enumerate(order):
        for j in roots:
            both = _intersection(search, g, codes[i], codes[j], cells[i], cells[j], known)
            if both is None:  # not in the lattice: every pair left with these roots, fetched
                missing = {}
                for k in order[pos:]:
                    for r in roots:
                        if _intersection(search, g, codes[k], codes[r], cells[k], cells[r],
                                         known) is None:
                            missing[tuple(np.union1d(codes[k], codes[r]).tolist())] = codes[r]
                return out, missing
            inside = np.isin(codes[j], codes[i]).all()  # T's predicates among S's: S ⊂ T
            if _explains(cells[i], cells[j], both, inside, side[i], cutoff):
                out[i] = text[j]
                break
        else:
            roots.append(i)
    g["explained"] = dict(roots=len(roots), fetched=sum(k in g.get("_fetched", ())
                                                        for k in known),
                          statements=search["scan"]["explaining"])
    return out, {}


def _intersection(search: dict, g: dict, a: np.ndarray, b: np.ndarray, riv_a: np.ndarray,
                  riv_b: np.ndarray, known: dict) -> np.ndarray | None:
    """The test-fold (R, I, V) per bin of the rows of both segments (codes ``a`` and ``b``):
    the conjunction of their predicates, empty when they give one feature two values (every
    code of a feature is a disjoint set of its rows); a segment's own when its predicates hold
    the other's; else the lattice's (a level of the search evaluated it) or a fetched node's;
    None when neither has it."""
    union = np.union1d(a, b)
    features = search["feature_of"][union]
    if len(np.unique(features)) < len(union):
        return np.zeros_like(riv_a)
    if len(union) == len(a):
        return riv_a
    if len(union) == len(b):
        return riv_b
    key = tuple(union.tolist())
    if key not in known:
        depth = len(union)
        if depth > len(g["lv"]):
            return None
        lv = g["lv"][depth - 1]
        at = _find(lv["codes"], union[None, :], int(search["offset"][-1]))[0]
        if at < 0:
            return None
        test = FOLD_B if search["spec"]["mode"] == "split" else FOLD_A
        known[key] = _riv(lv["sums"][at][test], search["spec"]["sampling"])
    return known[key]


def _explains(s: np.ndarray, t: np.ndarray, both: np.ndarray, inside: bool, sign: float,
              cutoff: float) -> bool:
    r"""Whether T explains S, from the test-fold (R, I, V) per bin of S, T and S ∩ T: what T
    leaves of S's excess has a p-value above ``cutoff`` (:func:`_cutoff`), one-sided in the
    direction ``sign`` (0: two-sided). ``inside`` (S ⊂ T, T one of S's
    ancestors): the score test of a shift of S's own once T's shift is fitted on the same fold,
    :math:`U = R_S - c R_T`, :math:`c = I_S / I_T`,
    :math:`\operatorname{Var} U = V_S - 2c V_S + c^2 V_T`; otherwise the residual of S without
    T's rows, :math:`U = R_S - R_{S\cap T}`, :math:`\operatorname{Var} U = V_S - V_{S\cap T}`.
    Per bin, summed as a chi-square with one degree of freedom per bin that keeps a variance
    (one bin: the z test)."""
    R, I, V = 0, 1, 2
    if inside:
        with np.errstate(divide="ignore", invalid="ignore"):
            c = np.where(t[:, I] > 0, s[:, I] / t[:, I], 0.0)
        u = s[:, R] - c * t[:, R]
        left = s[:, V] - 2 * c * s[:, V] + c * c * t[:, V]
    else:
        u = s[:, R] - both[:, R]
        left = s[:, V] - both[:, V]
    ok = left > 1e-12 * np.maximum(s[:, V], 1e-300)  # else S's rows in that bin are T's
    if not ok.any():
        return True
    if sign and len(u) == 1:
        return float(stats.norm.sf(sign * u[0] / math.sqrt(left[0]))) > cutoff
    return float(stats.chi2.sf(np.sum(u[ok] ** 2 / left[ok]), int(ok.sum()))) > cutoff


#: the most intersections one statement of the redundancy rule sums (three CASE sums each:
#: PostgreSQL allows 1,664 columns in a result)
OVERLAPS = 400


def _intersections(search: dict, groups: list, need: list, fetched: list) -> None:
    """Read the test-fold (R, I, V) per bin of the nodes ``need`` (per group: node -> the
    codes of the root it lies in) in statements of at most :data:`OVERLAPS` nodes, from the
    rows of those roots only (:func:`sqlcal.query.declared.segment_overlaps`)."""
    spec, scan = search["spec"], search["scan"]
    test = FOLD_B if spec["mode"] == "split" else FOLD_A
    columns = spec["columns"]
    items = [(gi, node, root) for gi, nodes in enumerate(need) for node, root in nodes.items()]
    budget = options.BUDGET
    terms = sum(len(node) for _, node, _ in items)
    if terms > budget.terms:
        raise BudgetError(
            f"segments: the redundancy rule needs {len(items)} intersections of significant "
            f"segments ({terms} query terms), over the budget of {budget.terms}; lower alpha "
            "or top_k, or raise sqlcal.options.budget(terms=)")
    for start in range(0, len(items), OVERLAPS):
        chunk = items[start:start + OVERLAPS]

        def listed(gi, codes):
            return (groups[gi]["key"], _predicates(_node(np.asarray(codes), search), search,
                                                   columns))

        nodes = [listed(gi, node) for gi, node, _ in chunk]
        within = list(dict.fromkeys(listed(gi, tuple(root)) for gi, _, root in chunk))
        # from the search's reduced cube when it built one (strategy="cube"), else one read of
        # the table (its rows inside the roots)
        cube = scan["cube"] if scan["built"] else None
        frame = planner.fetch(scan["src"], declared.segment_overlaps(
            spec["by"], scan["folds"], scan["bins"], test, nodes, within, cube))
        scan["statements"] += 1
        scan["branches"] += cube is None
        scan["explaining"] += 1
        nb = scan["nb"]
        b = frame["bin"].to_numpy(int) if "bin" in frame and nb > 1 else np.zeros(len(frame),
                                                                                 int)
        for k, (gi, node, _) in enumerate(chunk):
            riv = np.zeros((nb, 3))
            for c, name in enumerate((f"r{k}", f"i{k}", f"v{k}" if spec["sampling"] else
                                      f"i{k}")):
                np.add.at(riv[:, c], b, frame[name].to_numpy(float))
            fetched[gi][node] = riv
            groups[gi].setdefault("_fetched", set()).add(node)


# -- the fix -------------------------------------------------------------------------------------


def _check_segments(found: Any, spec: dict) -> None:
    """segment_fix(segments=): a frame sqlcal.segments returned for these features and keys."""
    if not isinstance(found, pd.DataFrame):
        raise TypeError(f"segment_fix: segments= must be the DataFrame sqlcal.segments returns, "
                        f"not {type(found).__name__}")
    users = {*spec["keys"], *spec["features"]}  # the result's names (:func:`_present`)
    needed = [*spec["keys"], *spec["features"],
              *(shown_name(c, users) for c in ("segment", "significant", "explained_by",
                                               "harm"))]
    missing = [c for c in needed if c not in found.columns]
    if missing:
        raise OptionError(f"segment_fix: segments= lacks the columns {missing}: pass what "
                          "sqlcal.segments returns for the same features and by=")


def _chosen(found: pd.DataFrame, spec: dict, kept, max_segments: int) -> list:
    """(group key, predicates, segment text) of the segments to fit, per group by harm, from a
    result with the user's names (:func:`_present`)."""
    features, by = spec["features"], spec["keys"]
    name = {c: shown_name(c, {*by, *features}) for c in ("significant", "explained_by",
                                                         "segment", "harm")}
    ok = found[found[name["significant"]].fillna(False).astype(bool)
               & found[name["explained_by"]].isna() & found[name["segment"]].notna()]
    ok = ok.sort_values([*by, name["harm"]], ascending=[True] * len(by) + [False],
                        kind="stable")
    out = []
    for _, part in (ok.groupby(list(by), sort=True, dropna=False) if by else [((), ok)]):
        for _, row in part.head(max_segments).iterrows():
            key = tuple(None if _null(row[k]) else row[k] for k in by)
            keys = _keys_of(row, features, shown_name("special_values", {*by, *features}))
            node = tuple((j, keys[f]) for j, f in enumerate(features) if f in keys)
            out.append((key, _predicates(node, kept, features), row[name["segment"]]))
    return out


def _fit(src: Source, spec: dict, chosen: list, penalty, kind: str = "shift") -> SegmentFix:
    by, features = spec["by"], spec["features"]
    folds = (spec["holdout"], 0.5, spec["split"])
    internal = dict(zip(features, spec["columns"]))
    engine = [tuple((internal[f], v, kept) for f, v, kept in preds) for _, preds, _ in chosen]
    segs = [(c[0], preds, 0.0) for c, preds in zip(chosen, engine)]
    columns = spec["columns"]
    group_keys = sorted({c[0] for c in chosen}, key=_sort_key)
    if kind == "isotonic":
        return _fit_isotonic(src, spec, chosen, engine, group_keys)
    thetas = np.zeros(len(chosen))
    slopes = np.zeros(len(chosen))
    ses = np.full((len(chosen), 2), np.nan)
    lambdas = {}
    platt = kind == "platt"
    terms = None
    if chosen:
        cells = planner.fetch(src, declared.segment_terms(by, columns, folds, segs, STEP, CLIP))
        for key in group_keys:
            idx = [i for i, c in enumerate(chosen) if c[0] == key]
            part = _group_rows(cells, by, key)
            fitted, lambdas[key], se = _fit_cells(part, idx, penalty, platt)
            thetas[idx] = fitted[:len(idx)]
            if platt:
                slopes[idx] = fitted[len(idx):]
                ses[idx, 0], ses[idx, 1] = se[:len(idx)], se[len(idx):]
        # one exact Newton step on the rows from the histogram fit (shifts), then the judgement
        for step in range(1 if platt else 0, 2):
            segs = [(c[0], preds, (float(t), float(g)) if platt else float(t))
                    for c, preds, t, g in zip(chosen, engine, thetas, slopes)]
            terms = planner.fetch(src, declared.segment_terms(by, columns, folds, segs, 0.0,
                                                              CLIP))
            if step == 0:
                for key in group_keys:
                    idx = [i for i, c in enumerate(chosen) if c[0] == key]
                    thetas[idx] = _newton_step(_group_rows(terms, by, key), idx, thetas[idx],
                                               lambdas[key])
    rows, summary = _judged(terms, chosen, spec, group_keys, lambdas)
    for i, row in enumerate(rows):
        hf = row.pop("_hf")
        row["theta"] = float(thetas[i])
        row["theta_se"] = float(ses[i, 0]) if platt else 1 / math.sqrt(hf) if hf > 0 else np.nan
        if platt:
            row["slope"], row["slope_se"] = float(slopes[i]), float(ses[i, 1])
    table = pd.DataFrame(rows, columns=[
        *by, "segment", *spec["columns"], "special_values", "theta", "theta_se",
        *(["slope", "slope_se"] if platt else []), *HOLDOUT_COLUMNS])
    return SegmentFix(by=spec["keys"], table=_present(table, spec),
                      kind="segment platt" if platt else "segment shift",
                      predicates=[c[1] for c in chosen], kinds=spec["kinds"], clip=CLIP,
                      summary=_present(summary, spec))


#: the per-segment holdout checks of a fix's table
HOLDOUT_COLUMNS = ["holdout_residual_before", "holdout_residual_after", "holdout_z_before",
                   "holdout_z_after"]


def _fit_isotonic(src: Source, spec: dict, chosen: list, engine: list, group_keys: list
                  ) -> SegmentIsotonicFix:
    """kind="isotonic": the chosen segments, per group by harm, as a decision list (a row to
    the first segment holding it); per entry, isotonic regression of y on p over the fitting
    rows (folds A and B) of that entry, exact (:func:`sqlcal.isotonic`); judged on the holdout
    as the shifts are, each segment's checks over the rows its entry holds."""
    by = spec["by"]
    folds = (spec["holdout"], 0.5, spec["split"])
    blocks = pd.DataFrame()
    terms = None
    if chosen:
        rows = src.rows
        entry = ibis.cases(*[((key_match(rows, key, by) if by else ibis.literal(True))
                              & segment_condition(rows, preds), i + 1)
                             for i, ((key, _, _), preds) in enumerate(zip(chosen, engine))],
                           else_=0)
        fold = segment_fold(rows, folds[0], folds[1], spec["split"])
        view = rows.mutate(sqlcal_entry=entry, sqlcal_fold=fold)
        fitted = isotonic(view, score="p", label="y", weight="w" if src.weighted else None,
                          by=[*by, "sqlcal_entry"],
                          where=(view.sqlcal_fold != HOLDOUT) & (view.sqlcal_entry > 0))
        # the fitted blocks with each block's slope to the next one of its entry
        blocks = pd.concat([part.assign(slope=fitted._slopes(part)) for _, part in
                            fitted.table.groupby("sqlcal_entry", sort=True)],
                           ignore_index=True)[[*by, "sqlcal_entry", "lo", "hi", "value",
                                               "slope", "n", "W"]]
        maps = []
        for i in range(len(chosen)):
            part = blocks[blocks["sqlcal_entry"] == i + 1]
            maps.append(tuple(tuple(part[c].astype(float)) for c in ("lo", "hi", "value",
                                                                      "slope")) if len(part)
                        else 0.0)  # an entry without fitting rows keeps its scores
        segs = [(c[0], preds, m) for c, preds, m in zip(chosen, engine, maps)]
        terms = planner.fetch(src, declared.segment_terms(by, spec["columns"], folds, segs, 0.0,
                                                          CLIP))
    rows_, summary = _judged(terms, chosen, spec, group_keys, {}, z_floor=2.0)
    for i, row in enumerate(rows_):
        row.pop("_hf")
        row["blocks"] = int((blocks["sqlcal_entry"] == i + 1).sum()) if len(blocks) else 0
    table = pd.DataFrame(rows_, columns=[*by, "segment", *spec["columns"], "special_values",
                                         "blocks", *HOLDOUT_COLUMNS])
    if len(blocks):
        blocks.insert(0, "segment", [chosen[int(e) - 1][2] for e in blocks["sqlcal_entry"]])
        blocks = blocks.rename(columns={"sqlcal_entry": "entry"})
    return SegmentIsotonicFix(by=spec["keys"], table=_present(table, spec),
                              kind="segment isotonic", predicates=[c[1] for c in chosen],
                              kinds=spec["kinds"], clip=CLIP, summary=_present(summary, spec),
                              blocks=_present(blocks, spec))


def _judged(terms, chosen: list, spec: dict, group_keys: list, lambdas: dict,
            z_floor: float = 0.0):
    """The holdout judgement of a fix from its exact terms (:func:`declared.segment_terms`):
    per segment its holdout residual and z before and after (and ``_hf``, the fitting rows'
    Σwp'(1 − p')), per group the log loss, Brier score and multiaccuracy before and after and
    ``accepted`` iff the log loss falls by more than two standard errors of the paired per-row
    difference and no segment's holdout |z| grows past max(its |z| before, ``z_floor``);
    ``reason`` says why a fix is not accepted (None when it is)."""
    by = spec["by"]
    table_rows, summary_rows = [], []
    all_keys = group_keys or [()] * (not by)
    for key in all_keys:
        idx = [i for i, c in enumerate(chosen) if c[0] == key]
        part = _group_rows(terms, by, key)
        hold = part[part["sqlcal_fold"] == HOLDOUT]
        W = hold["W"].sum() if len(hold) else 0.0
        if not len(part) or not W:  # nothing fitted, or no row of the group
            table_rows += [dict(**dict(zip(by, key)), segment=chosen[i][2], _hf=0.0,
                                **_shown(chosen[i][1], spec)) for i in idx]
            reason = ("no significant segment is left unexplained: nothing to fit" if not idx
                      else "the group has no holdout row to judge the fix on")
            summary_rows.append(dict(**dict(zip(by, key)), n_segments=len(idx),
                                     accepted=False, reason=reason))
            continue
        fit = part[part["sqlcal_fold"] != HOLDOUT]
        pat_h, pat_f = hold["pattern"].to_numpy(np.int64), fit["pattern"].to_numpy(np.int64)
        ll, ll0, dd = hold["ll"].sum(), hold["ll0"].sum(), hold["dd"].sum()
        gain = (ll - ll0) / W
        se = math.sqrt(max(dd / W - gain ** 2, 0.0) / W)
        grew = []  # (segment, |z| before, after) of the segments the fix over-corrects
        ma_before = ma_after = 0.0
        for local, i in enumerate(idx):
            m_h = (pat_h >> local) & 1 == 1
            m_f = (pat_f >> local) & 1 == 1
            r0, h0 = hold["r0"].to_numpy()[m_h].sum(), hold["h0"].to_numpy()[m_h].sum()
            r1, h1 = hold["r"].to_numpy()[m_h].sum(), hold["h"].to_numpy()[m_h].sum()
            z0 = r0 / math.sqrt(h0) if h0 > 0 else 0.0
            z1 = r1 / math.sqrt(h1) if h1 > 0 else 0.0
            if abs(z1) > max(abs(z0), z_floor):
                grew.append((chosen[i][2], abs(z0), abs(z1)))
            ma_before, ma_after = max(ma_before, abs(r0) / W), max(ma_after, abs(r1) / W)
            table_rows.append(dict(
                **dict(zip(by, key)), segment=chosen[i][2],
                **_shown(chosen[i][1], spec), _hf=fit["h"].to_numpy()[m_f].sum(),
                holdout_residual_before=r0, holdout_residual_after=r1,
                holdout_z_before=z0, holdout_z_after=z1))
        summary_rows.append(dict(
            **dict(zip(by, key)), n_segments=len(idx), penalty=lambdas.get(key, np.nan),
            holdout_n=int(hold["n"].sum()), holdout_W=W,
            holdout_log_loss_before=-ll0 / W, holdout_log_loss_after=-ll / W,
            holdout_log_loss_se=se,
            holdout_brier_before=hold["bs0"].sum() / W, holdout_brier_after=hold["bs"].sum() / W,
            holdout_multiaccuracy_before=ma_before, holdout_multiaccuracy_after=ma_after,
            accepted=bool(idx) and gain > 2 * se and not grew,
            reason=_rejection(gain, se, ll0 / W, ll / W, grew, z_floor)))
    return table_rows, pd.DataFrame(summary_rows)


def _rejection(gain: float, se: float, before: float, after: float, grew: list,
               z_floor: float) -> str | None:
    """Why a fix is not accepted (None when it is): its holdout log loss did not fall by more
    than two standard errors, and/or the holdout |z| of some fitted segments grew."""
    out = []
    if not gain > 2 * se:
        fell = f"{gain / se:.2f} standard errors" if se > 0 else f"{gain:.3g}"
        out.append(f"the holdout log loss went from {-before:.6g} to {-after:.6g}: it fell by "
                   f"{fell}, not more than 2")
    for segment, z0, z1 in grew:
        past = f", past {z_floor:g}" if z_floor else ""
        out.append(f"the holdout |z| of {segment} grew from {z0:.2f} to {z1:.2f}{past}: the "
                   "fix over-corrects it")
    return "; ".join(out) or None


def _group_rows(frame, by, key) -> pd.DataFrame:
    if frame is None:
        return pd.DataFrame(columns=["sqlcal_fold", "pattern", "n", "W", "ll", "ll0", "dd",
                                     "r", "h", "r0", "h0", "bs", "bs0"])
    if not by:
        return frame
    mask = np.ones(len(frame), bool)
    for k, v in zip(by, key):
        col = frame[k]
        mask &= col.isna().to_numpy() if v is None else (col == v).to_numpy()
    return frame[mask]


def _design(pattern: np.ndarray, idx_len: int) -> np.ndarray:
    return ((pattern[:, None] >> np.arange(idx_len)) & 1).astype(float)


def _fit_cells(part: pd.DataFrame, idx: list, penalty, platt: bool = False):
    """θ of one group from its (fold, pattern, cell) histogram, λ chosen on the holdout:
    intercepts, or (``platt``) intercepts then slopes on logit p̃. Returns θ, λ and the
    standard errors from the penalised information."""
    K = len(idx)
    fit, hold = part[part["sqlcal_fold"] != HOLDOUT], part[part["sqlcal_fold"] == HOLDOUT]

    def arrays(f):
        W = f["W"].to_numpy(float)
        eta = f["sweta"].to_numpy(float) / np.where(W > 0, W, 1)
        X = _design(f["pattern"].to_numpy(np.int64), K)
        if platt:  # a cell's rows share its mean logit: Σ w·(θ + γ·η) is exact per cell
            X = np.hstack([X, X * eta[:, None]])
        return X, W, f["swy"].to_numpy(float), eta

    Xf, Wf, Yf, Ef = arrays(fit)
    Xh, Wh, Yh, Eh = arrays(hold)
    mu0 = 1 / (1 + np.exp(-Ef))
    # λ pseudo-rows at the segment's mean variance: the penalty's curvature is λ·V_k / W_k
    # (a slope's: λ times the segment's mean of p(1 − p)·logit² p)
    V = ((Xf * Xf).T @ (Wf * mu0 * (1 - mu0))) / np.maximum(
        np.tile(Xf[:, :K].T @ Wf, 2 if platt else 1), 1e-300)
    path = PENALTIES if penalty == "auto" else (float(penalty),)
    best = None
    for lam in path:
        theta = np.zeros(Xf.shape[1])
        for _ in range(50):
            mu = 1 / (1 + np.exp(-(Ef + Xf @ theta)))
            grad = Xf.T @ (Yf - Wf * mu) - lam * V * theta
            hess = (Xf * (Wf * mu * (1 - mu))[:, None]).T @ Xf + np.diag(lam * V + 1e-12)
            step = np.linalg.solve(hess, grad)
            theta = theta + step
            if np.max(np.abs(step)) < 1e-12:
                break
        eta = np.clip(Eh + Xh @ theta, -700, 700)
        loss = np.sum(Wh * np.logaddexp(0, eta) - Yh * eta)
        if best is None or loss < best[0] - 1e-12:
            se = np.sqrt(np.clip(np.diag(np.linalg.inv(hess)), 0, None))
            best = (loss, theta, lam, se)
    return best[1], best[2], best[3]


def _newton_step(part: pd.DataFrame, idx: list, theta: np.ndarray, lam: float) -> np.ndarray:
    """One exact Newton step from the rows' gradient and information at ``theta``."""
    K = len(idx)
    fit = part[part["sqlcal_fold"] != HOLDOUT]
    X = _design(fit["pattern"].to_numpy(np.int64), K)
    r, h, h0, W = (fit[c].to_numpy(float) for c in ("r", "h", "h0", "W"))
    V = (X.T @ h0) / np.maximum(X.T @ W, 1e-300)
    grad = X.T @ r - lam * V * theta
    hess = (X * h[:, None]).T @ X + np.diag(lam * V + 1e-12)
    return theta + np.linalg.solve(hess, grad)
