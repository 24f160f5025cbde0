r"""Is model B better calibrated than model A? The difference of a metric between two models, with
its interval and a p-value, per group.

- **Paired**: both models scored the same rows (two score columns of one table: shadow scoring).
  One scan reads both scores (:func:`sqlcal.query.declared.paired_bins`: per group and pair of
  bins, one of each score, the first and second moments of (1, y, p, q)); the replicates of both
  models' bins come from the same draws, so the pair's correlation is in the difference's law.
- **Unpaired**: the models scored different rows (two tables, or two filters of one table). Each
  side reads its own summaries, and its replicates are drawn independently (its own stream).

The methods are those of :mod:`sqlcal.metrics.intervals`: the delta method for the Brier score,
the log loss and calibration-in-the-large (paired: the row's difference d, with
:math:`\mathrm{Var} = \sum v (d - \Delta)^2 / W^2`; unpaired: the two variances added; van der
Vaart (1998), Asymptotic Statistics, ch. 3), and for the binned errors the bootstrap whose draws
have the covariance of a Poisson bootstrap of the rows (Hanley & MacGibbon (2006); Chamandy et
al. (2012)). For a binned error θ, with D* the replicate deviation at the selected centre (never
below θ̂ − θ, asymptotically) and U* the linearization (never above), the difference
:math:`\Delta = \theta_A - \theta_B` gets

.. math:: [\hat\Delta - q_{1-\alpha/2}(D_A^* - U_B^*),\ \hat\Delta - q_{\alpha/2}(U_A^* - D_B^*)]

(Fang & Santos (2019)), and the p-value of :math:`\Delta = 0` is the least α at which that
interval leaves out 0: :math:`\min(1, 2\min(P^*(D_A^* - U_B^* \ge \hat\Delta),
P^*(U_A^* - D_B^* \le \hat\Delta)))` (Efron & Tibshirani (1993), An Introduction to the
Bootstrap, ch. 15-16, test by interval inversion).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd
from scipy import stats

from sqlcal.inputs.sources import Source
from sqlcal.metrics import resolve_weight_kind, variance_parts
from sqlcal.metrics.intervals import (
    REPLICATES,
    SEED,
    bins_interval,
    delta_variance,
    deviations_of,
    ece_statistic,
    interval_parts,
    z_value,
)
from sqlcal.options import checked
from sqlcal.query import declared, executor, planner

#: the metrics a comparison takes, and how: their report names
METRICS = {"ece": "bootstrap", "rmsce": "bootstrap", "brier": "delta", "log_loss": "delta",
           "calibration_in_the_large": "delta"}
_NORM = {"ece": "l1", "rmsce": "l2"}
_DELTA = {"brier": "brier", "log_loss": "log_loss", "calibration_in_the_large": "citl"}
COLUMNS = ("metric", "value", "baseline_value", "difference", "ci_lower", "ci_upper",
           "p_value", "n", "W", "baseline_n", "baseline_W", "design", "ci_method",
           "confidence", "weight_kind")


@checked
def compare(
    data: Any,
    *,
    score: str,
    label: str,
    baseline: str | None = None,
    baseline_data: Any = None,
    baseline_where: Any = None,
    weight: str | None = None,
    by: str | Sequence[str] = (),
    where: Any = None,
    metrics: Sequence[str] = tuple(METRICS),
    bins: int = 15,
    confidence: float = 0.95,
    bootstrap: int = REPLICATES,
    seed: int = SEED,
    weight_kind: str = "auto",
    **source_options: Any,
) -> pd.DataFrame:
    r"""The difference of calibration metrics between a model and a baseline, per group, with
    its interval and the p-value of no difference.

    Parameters
    ----------
    data : ibis Table, path, URL or DataFrame
        The model's rows; see :func:`sqlcal.source`.
    score : str
        The model's score column.
    label : str
        The outcome column.
    baseline : str, optional
        The baseline's score column. Alone (no ``baseline_data``, no ``baseline_where``): a
        second column of the same rows, a **paired** comparison. Otherwise the score column of
        the baseline's rows (default: ``score``).
    baseline_data : optional
        The baseline's rows, when it scored other rows (an **unpaired** comparison), with the
        same label, weight and group columns; default ``data``.
    baseline_where : optional
        A filter of the baseline's rows (an unpaired comparison of two parts of one table:
        ``where="version = 'B'"``, ``baseline_where="version = 'A'"``).
    weight : str, optional
        Column of non-negative row weights.
    by : str or sequence of str, default ()
        Group keys: one row per group and metric; groups are matched by their keys.
    where : optional
        Filter of the model's rows (of both models' rows, in a paired comparison).
    metrics : sequence of str, default all of ``ece``, ``rmsce``, ``brier``, ``log_loss``,
        ``calibration_in_the_large``
        The metrics to compare (their report names).
    bins : int, default 15
        Equal-width bins of the binned errors.
    confidence : float, default 0.95
        Two-sided level of the intervals.
    bootstrap : int, default 1000
        Replicates of the binned errors' bootstrap.
    seed : int, default 20260101
        Seed of the replicates' draws: the same result on every run and engine.
    weight_kind : {"auto", "frequency", "sampling"}, default "auto"
        How weights enter the variances (see :func:`sqlcal.brier`).
    **source_options
        Further options of :func:`sqlcal.source` (both sides), such as ``on_invalid=`` and
        ``negative_sampling_rate=``.

    Returns
    -------
    pandas.DataFrame
        One row per group and metric: the keys, ``metric``, ``value`` (the model's),
        ``baseline_value``, ``difference`` (value − baseline; negative: the model is better
        calibrated, for every metric here but CITL, whose sign says the direction of the
        miscalibration), ``ci_lower``, ``ci_upper`` (of the difference), ``p_value`` (of no
        difference), ``n``, ``W`` (the model's rows), ``baseline_n``, ``baseline_W``,
        ``design`` (``"paired"`` or ``"unpaired"``), ``ci_method`` (``"delta"`` or
        ``"bootstrap"``), ``confidence``, ``weight_kind``; with ``on_invalid="drop"``,
        ``n_dropped`` and ``baseline_n_dropped`` (the invalid rows each side left out, per
        group; a paired comparison drops a row when either score is invalid, so the two
        agree). A group that lost all its rows on the model's side has no row.

    See Also
    --------
    ece : a binned calibration error with its interval, for one model.
    brier : the Brier score with its interval.
    report : every headline metric with its interval, side by side.

    Notes
    -----
    See :mod:`sqlcal.metrics.compare` for the methods. A paired comparison reads the table
    once; an unpaired one reads each side once. The binned errors' difference compares the
    population values of the same binned quantities; its interval is conservative where a bin
    is near calibration under either model.

    References
    ----------
    .. [1] A. W. van der Vaart, "Asymptotic Statistics", Cambridge University Press, 1998.
    .. [2] J. A. Hanley and B. MacGibbon, "Creating non-parametric bootstrap samples using Poisson
       frequencies", Computer Methods and Programs in Biomedicine 83(1), 2006.
    .. [3] Z. Fang and A. Santos, "Inference on Directionally Differentiable Functions", Review
       of Economic Studies 86(1), 2019.
    .. [4] B. Efron and R. J. Tibshirani, "An Introduction to the Bootstrap", Chapman & Hall,
       1993.

    Examples
    --------
    >>> import numpy as np, pandas as pd, sqlcal
    >>> rng = np.random.default_rng(0)
    >>> p = rng.uniform(0.05, 0.95, 2000)
    >>> df = pd.DataFrame({"new": p, "old": np.clip(p + 0.1, 0, 1),
    ...                    "y": (rng.random(2000) < p).astype(int)})
    >>> out = sqlcal.compare(df, score="new", baseline="old", label="y",
    ...                      metrics=["calibration_in_the_large"])
    >>> out[["metric", "design", "ci_method"]].iloc[0].tolist()
    ['calibration_in_the_large', 'paired', 'delta']
    >>> bool(out["p_value"].iloc[0] < 1e-6)
    True
    """
    metrics = [metrics] if isinstance(metrics, str) else list(metrics)
    unknown = [m for m in metrics if m not in METRICS]
    if unknown:
        raise ValueError(f"metrics {unknown} cannot be compared; choose from {list(METRICS)}")
    paired = baseline_data is None and baseline_where is None
    if paired and baseline is None:
        raise ValueError("name the baseline's score: baseline= (a column of the same rows, a "
                         "paired comparison), or baseline_data= / baseline_where= (other rows)")
    common = dict(label=label, weight=weight, by=by, **source_options)
    if paired:
        src = executor.source(data, score=score, where=where, baseline=baseline, **common)
        frame = planner.fetch(src, declared.paired_bins(bins))
        kind = resolve_weight_kind(src, weight_kind)
        out = paired_finish(frame, by=src.by, metrics=metrics, bins=bins, confidence=confidence,
                            replicates=bootstrap, seed=seed, weight_kind=kind)
        return _present(src, out, confidence, kind, src)
    a = executor.source(data, score=score, where=where, **common)
    b = executor.source(data if baseline_data is None else baseline_data,
                        score=baseline or score, where=baseline_where, **common)
    # the summaries first: "auto" reads the weights as the validating scan found them
    sides = [_side(s, metrics, bins, weight_kind, bootstrap) for s in (a, b)]
    kind = resolve_weight_kind(a, weight_kind)
    if resolve_weight_kind(b, weight_kind) != kind:
        kind = "sampling"  # one side's weights are not whole numbers: read both as sampling
    out = unpaired_finish(*sides, by=a.by, metrics=metrics, bins=bins, confidence=confidence,
                          replicates=bootstrap, seed=seed, weight_kind=kind)
    return _present(a, out, confidence, kind, b)


def _side(src: Source, metrics, bins: int, weight_kind: str, bootstrap: int) -> dict:
    """One side's summaries: the totals (with the delta method's sums) and the bins."""
    parts = interval_parts(src, weight_kind, True)
    totals = None
    if any(METRICS[m] == "delta" for m in metrics):
        extra = ("r4", "logloss", "logloss_var", *variance_parts(src, weight_kind))
        totals = planner.fetch(src, declared.totals(*parts, *extra))
    frame = None
    if any(METRICS[m] == "bootstrap" for m in metrics) and bootstrap > 0:
        frame = planner.fetch(src, declared.uniform(bins, "sqlcal", "sums", *parts))
    return {"totals": totals, "bins": frame}


def _present(src: Source, out: pd.DataFrame, confidence: float, weight_kind: str,
             baseline: Source) -> pd.DataFrame:
    """The result in its columns, with ``on_invalid="drop"`` each side's rows dropped per
    group (``n_dropped``, ``baseline_n_dropped``: the same count in a paired comparison, whose
    rows are dropped when either score is invalid)."""
    by = list(src.by)
    out = out.assign(confidence=confidence, weight_kind=weight_kind)
    out = out[[*by, *COLUMNS]].reset_index(drop=True)
    if src.on_invalid == "drop":
        counts = _dropped(src, by, "n_dropped")
        other = _dropped(baseline, by, "baseline_n_dropped")
        if by:
            out = out.merge(counts, on=by, how="left").merge(other, on=by, how="left")
        else:
            out = out.assign(n_dropped=counts["n_dropped"].sum(),
                             baseline_n_dropped=other["baseline_n_dropped"].sum())
        # a group with rows on one side only has dropped none on the other
        out[["n_dropped", "baseline_n_dropped"]] = (
            out[["n_dropped", "baseline_n_dropped"]].fillna(0).astype(int))
    return src.present(out)


def _dropped(src: Source, by: list, name: str) -> pd.DataFrame:
    """Per group, the rows ``src`` dropped (its validating scan's counts)."""
    return src.dropped[[*by, "n_dropped"]].rename(columns={"n_dropped": name})


# -- finishes ------------------------------------------------------------------------------------


def paired_finish(frame: pd.DataFrame, *, by: Sequence[str], metrics, bins: int,
                  confidence: float, replicates: int, seed: int, weight_kind: str
                  ) -> pd.DataFrame:
    """The paired comparison from the paired summary (:func:`sqlcal.query.reductions.paired_bins`):
    one row per group and metric (see :func:`compare`)."""
    by = list(by)
    K = bins + 1
    prefix = "sw" if weight_kind == "frequency" or "sv" not in frame else "sv"
    groups = frame.groupby(by, sort=True, dropna=False) if by else [((), frame)]
    z = np.random.default_rng([int(seed), 0]).standard_normal((replicates, K * K, 4))
    rows = []
    for key, part in groups:
        key = key if isinstance(key, tuple) else (key,)
        keys = dict(zip(by, key))
        total = part.drop(columns=[*by, "pair"]).sum()
        W, n = float(total["sw"]), int(total["n"])
        base = {**keys, "n": n, "W": W, "baseline_n": n, "baseline_W": W, "design": "paired"}
        for m in metrics:
            if METRICS[m] == "delta":
                value, other, diff, var = _paired_delta(m, total, prefix)
                lo, hi = diff - z_value(confidence) * np.sqrt(var), \
                    diff + z_value(confidence) * np.sqrt(var)
                p = float(2 * stats.norm.sf(abs(diff) / np.sqrt(var))) if var > 0 else np.nan
                rows.append({**base, "metric": m, "value": value, "baseline_value": other,
                             "difference": diff, "ci_lower": lo, "ci_upper": hi,
                             "p_value": p, "ci_method": "delta"})
                continue
            out = _paired_bootstrap(part, prefix, _NORM[m], K, z, confidence,
                                    W if weight_kind == "frequency" else float(n))
            rows.append({**base, "metric": m, **out, "ci_method": "bootstrap"})
    return pd.DataFrame(rows)


def _paired_delta(metric: str, t: pd.Series, prefix: str):
    """(model's value, baseline's value, difference, variance of the difference) of a delta
    metric from a group's paired totals."""
    W = float(t["sw"])
    V = float(t[prefix])
    if metric == "brier":
        a = (t["swyy"] - 2 * t["swyp"] + t["swpp"]) / W
        b = (t["swyy"] - 2 * t["swyq"] + t["swqq"]) / W
        d, s1, s2 = a - b, t[prefix + "d"], t[prefix + "dd"]
    elif metric == "log_loss":
        if t["n_inf"] > 0:
            return np.inf, np.inf, np.nan, np.nan
        a, b = t["swl"] / W, t["swm"] / W
        d, s1, s2 = a - b, t[prefix + "e"], t[prefix + "ee"]
    else:  # CITL: the row's difference is p − q
        a = (t["swp"] - t["swy"]) / W
        b = (t["swq"] - t["swy"]) / W
        d = a - b
        s1 = t[prefix + "p"] - t[prefix + "q"]
        s2 = t[prefix + "pp"] - 2 * t[prefix + "pq"] + t[prefix + "qq"]
    var = (s2 - 2 * d * s1 + d * d * V) / (W * W)
    return float(a), float(b), float(d), max(float(var), 0.0)


def _paired_bootstrap(part: pd.DataFrame, prefix: str, norm: str, K: int, z: np.ndarray,
                      confidence: float, size: float) -> dict:
    """A binned error's difference for one group, from its cells (pairs of bins)."""
    pair = part["pair"].to_numpy(int)
    w = lambda name: part["sw" + name].to_numpy(float)
    M = np.stack([w(""), w("y"), w("p"), w("q")], axis=-1)
    v = lambda name: part[prefix + name].to_numpy(float)
    C = np.empty((len(part), 4, 4))
    entries = {(0, 0): "", (0, 1): "y", (0, 2): "p", (0, 3): "q", (1, 1): "yy", (1, 2): "yp",
               (1, 3): "yq", (2, 2): "pp", (2, 3): "pq", (3, 3): "qq"}
    for (i, j), name in entries.items():
        C[:, i, j] = C[:, j, i] = v(name)
    dM = np.einsum("cij,rcj->rci", cholesky(C), z[:, pair, :])
    statistic = ece_statistic(norm)
    sides = []
    for bin_of, score in ((pair // K, 2), (pair % K, 3)):
        take = [0, 1, score]
        S = np.zeros((1, K, 3))
        Cs = np.zeros((1, K, 3, 3))
        dS = np.zeros((len(z), 1, K, 3))
        np.add.at(S[0], bin_of, M[:, take])
        np.add.at(Cs[0], bin_of, C[:, take][:, :, take])
        np.add.at(dS[:, 0], (slice(None), bin_of), dM[:, :, take])
        theta, down, up = deviations_of(S, Cs, dS, statistic, np.array([size]))
        sides.append((float(theta[0]), down[:, 0], up[:, 0]))
    return _difference(*sides, confidence)


def _difference(a, b, confidence: float) -> dict:
    """The difference θ_A − θ_B of two binned errors, its interval and p-value, from each
    side's (estimate, down, up) replicate deviations (see the module's notes)."""
    (ta, da, ua), (tb, db, ub) = a, b
    diff = ta - tb
    alpha = 1 - confidence
    high, low = da - ub, ua - db  # D_A − U_B bounds Δ̂ − Δ above, U_A − D_B below
    lo = diff - float(np.quantile(high, 1 - alpha / 2))
    hi = diff - float(np.quantile(low, alpha / 2))
    B = len(high)
    p = min(1.0, 2 * min((1 + np.sum(high >= diff)) / (B + 1),
                         (1 + np.sum(low <= diff)) / (B + 1)))
    return {"value": ta, "baseline_value": tb, "difference": diff,
            "ci_lower": min(lo, diff), "ci_upper": max(hi, diff), "p_value": float(p)}


def unpaired_finish(a: dict, b: dict, *, by: Sequence[str], metrics, bins: int,
                    confidence: float, replicates: int, seed: int, weight_kind: str
                    ) -> pd.DataFrame:
    """The unpaired comparison from each side's summaries (``totals``, ``bins``): one row per
    group and metric, groups matched by their keys (see :func:`compare`)."""
    by = list(by)
    rows = []
    sizes = {}
    for name, side in (("a", a), ("b", b)):
        t = side["totals"] if side["totals"] is not None else side["bins"]
        g = t.groupby(by, sort=True, dropna=False) if by else [((), t)]
        sizes[name] = {(k if isinstance(k, tuple) else (k,)): (int(f["n"].sum()),
                                                               float(f["W"].sum()))
                       for k, f in g}
    keys = sorted(set(sizes["a"]) | set(sizes["b"]), key=_order)
    found = {}
    for m in metrics:
        if METRICS[m] == "bootstrap":
            sides = []
            for i, side in enumerate((a, b)):
                _, dev = bins_interval(side["bins"], by=by, statistic=ece_statistic(_NORM[m]),
                                       confidence=confidence, replicates=replicates,
                                       seed=seed, weight_kind=weight_kind, n_bins=bins,
                                       side=i, deviations=True)
                sides.append(dev)
            found[m] = sides
        else:
            found[m] = [_by_key(delta_variance(_DELTA[m], side["totals"], weight_kind),
                                side["totals"], by) for side in (a, b)]
    for key in keys:
        na, wa = sizes["a"].get(key, (0, np.nan))
        nb, wb = sizes["b"].get(key, (0, np.nan))
        base = {**dict(zip(by, key)), "n": na, "W": wa, "baseline_n": nb, "baseline_W": wb,
                "design": "unpaired"}
        for m in metrics:
            sa, sb = (s.get(key) for s in found[m])
            if sa is None or sb is None:
                rows.append({**base, "metric": m, "ci_method": METRICS[m]})
                continue
            if METRICS[m] == "bootstrap":
                rows.append({**base, "metric": m, **_difference(sa, sb, confidence),
                             "ci_method": "bootstrap"})
                continue
            (va, vara), (vb, varb) = sa, sb
            diff, var = va - vb, vara + varb
            half = z_value(confidence) * np.sqrt(var)
            p = float(2 * stats.norm.sf(abs(diff) / np.sqrt(var))) if var > 0 else np.nan
            rows.append({**base, "metric": m, "value": va, "baseline_value": vb,
                         "difference": diff, "ci_lower": diff - half, "ci_upper": diff + half,
                         "p_value": p, "ci_method": "delta"})
    return pd.DataFrame(rows, columns=[*by, *COLUMNS[:-2]])


def _by_key(values, totals: pd.DataFrame, by: list) -> dict:
    value, var = values
    if not by:
        return {(): (float(value[0]), float(var[0]))}
    keys = zip(*(totals[c].tolist() for c in by))
    return {tuple(k): (float(a), float(b)) for k, a, b in zip(keys, value, var)}


def _order(key: tuple) -> tuple:
    return tuple((v is None or v != v, str(type(v)), v if v == v and v is not None else 0)
                 for v in key)


def cholesky(c: np.ndarray, tol: float = 1e-10) -> np.ndarray:
    """Lower-triangular factors L·Lᵀ = c of a stack of k×k positive semi-definite matrices, a
    pivot that is 0 up to rounding (relative ``tol``) set to 0 (as
    :func:`sqlcal.metrics.intervals.cholesky3`, for any k)."""
    k = c.shape[1]
    L = np.zeros_like(c)
    for j in range(k):
        d = c[:, j, j] - np.sum(L[:, j, :j] ** 2, axis=-1)
        d = np.where(d > tol * np.maximum(c[:, j, j], 1e-300), d, 0.0)
        L[:, j, j] = root = np.sqrt(d)
        inv = np.where(root > 0, 1 / np.where(root > 0, root, 1.0), 0.0)
        for i in range(j + 1, k):
            L[:, i, j] = (c[:, i, j] - np.sum(L[:, i, :j] * L[:, j, :j], axis=-1)) * inv
    return L
