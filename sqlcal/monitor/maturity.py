"""Label maturity from the summary store: how fast positive labels arrive, per group and score
bin, and the maturity-adjusted observed-to-expected ratio of periods whose labels are still
arriving.

Both read the stored score cells only (label parts per delay bucket, :mod:`sqlcal.monitor.schema`):
no row is read again.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd
from scipy import stats

from sqlcal.errors import InvalidInputError
from sqlcal.metrics.binned import clopper_pearson_interval
from sqlcal.monitor import adjusted as _adjusted
from sqlcal.monitor import schema
from sqlcal.monitor import store as _store
from sqlcal.monitor.stored import window_versions
from sqlcal.options import OptionError


def maturity(store: Any, *, by: str | Sequence[str] | None = None, bins: int = 8,
             horizon: str = "30d", settle: str = "1d", at: Any = None,
             prefix: str = schema.PREFIX, spec: str | None = None,
             confidence: float = 0.95) -> pd.DataFrame:
    r"""The maturity curve: the share of a cohort's eventual positives known a days after the
    prediction, per group and score bin, from the mature periods of the store.

    Parameters
    ----------
    store : str, path or Ibis connection
        A summary store written by :func:`sqlcal.snapshot` with ``label_time=``.
    by : str or sequence of str, optional
        Group keys (the snapshot's, or a subset).
    bins : int, default 8
        Score bins of equal weight per group, their edges snapped to the stored cells.
    horizon, settle : str, default "30d", "1d"
        A period is mature (its labels final) at age >= horizon + settle at ``at``.
    at : datetime-like, optional
        Default: the latest ``as_of`` stored.
    prefix, spec
        As for :func:`sqlcal.stored`.
    confidence : float, default 0.95
        Level of the per-edge Clopper–Pearson interval.

    Returns
    -------
    pandas.DataFrame
        Per group, score bin (``score_bin`` -1: all scores pooled) and delay edge ``delay``
        (days): ``bin_lower``, ``bin_upper``, ``F_hat`` (the weighted share of positives whose
        label arrived less than ``delay`` days after the prediction), ``F_lower``, ``F_upper``,
        ``positives`` (Σwy known by then), ``positives_total`` and ``cohorts`` (mature periods
        used).

    Notes
    -----
    :math:`\hat F_b(a) = \sum_{t} \sum_{k: d_{k+1} \le a} Y_{t,b,k} / \sum_t \sum_k Y_{t,b,k}`
    over mature periods t, with :math:`Y_{t,b,k}` the weighted positives of bin b whose delay
    lies in bucket k. The interval is Clopper–Pearson (1934) on the weighted counts (whole-number
    frequency weights; with other weights on the row counts of positives). Positives of unknown
    arrival time are left out.

    Examples
    --------
    >>> import pandas as pd, sqlcal
    >>> from sqlcal.monitor.maturity import maturity
    >>> t = pd.to_datetime(["2026-09-01 10:00"] * 4)
    >>> df = pd.DataFrame({"p": [0.2, 0.3, 0.6, 0.8], "y": [1, 1, 1, 0], "t": t,
    ...                    "lt": t + pd.to_timedelta([0.5, 1.5, 4, 0], unit="D")})
    >>> _ = sqlcal.snapshot(df, score="p", label="y", time="t", label_time="lt",
    ...                     store=":memory:", prefix="mat_", as_of="2026-11-01")
    >>> curve = maturity(":memory:", prefix="mat_", bins=1)
    >>> pooled = curve[curve.score_bin == -1]
    >>> pooled.delay.tolist()[:4], pooled.F_hat.round(3).tolist()[:4]
    ([1.0, 2.0, 3.0, 5.0], [0.333, 0.667, 0.667, 1.0])
    """
    versions, spec_dict, spec_hash, by = _setup(store, prefix, spec, by, bins)
    names = {k: schema.key_columns(spec_dict)[k] for k in by}
    curve = _curve(store, versions, spec_dict, spec_hash, tuple(names.values()), prefix=prefix,
                   bins=bins, horizon=horizon, settle=settle, at=at, confidence=confidence)
    return schema.presented(curve, names)


def _curve(store, versions, spec_dict, spec_hash, by, *, prefix, bins, horizon, settle, at,
           confidence) -> pd.DataFrame:
    """:func:`maturity` keyed by the stored key columns ``by``."""
    at = _store.check_time(versions, at)
    mature = versions[_store.mature(versions, at=at, horizon=horizon, settle=settle)]
    if not len(mature):
        raise InvalidInputError(f"no mature period in the store at {at} (horizon {horizon} + "
                                f"settle {settle})")
    cells = _store.merged(store, "cells", prefix=prefix, spec_hash=spec_hash, versions=mature,
                          by=[*by, "delay"], delays=None)
    binned = _adjusted.score_bins(cells, by, bins, spec_dict["cells"])
    edges = spec_dict["delays"]
    lab = binned[binned["delay"] >= 0]
    pooled = lab.assign(score_bin=-1)
    lab = pd.concat([pooled, lab], ignore_index=True)
    keys = [*by, "score_bin"]
    ranges = binned[binned["delay"] == schema.DELAY_LABEL_FREE].groupby(keys).agg(
        bin_lower=("cell_lo", "min"), bin_upper=("cell_hi", "max")).reset_index()
    ranges = pd.concat([ranges.groupby(list(by)).agg(bin_lower=("bin_lower", "min"),
                                                     bin_upper=("bin_upper", "max"))
                        .reset_index().assign(score_bin=-1) if by else
                        pd.DataFrame({"score_bin": [-1], "bin_lower": [
                            ranges["bin_lower"].min()], "bin_upper": [ranges["bin_upper"].max()]}),
                        ranges], ignore_index=True)
    integer = bool(versions["integer_weights"].all())
    rows = []
    for key, part in lab.groupby(keys, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        per_delay = part.groupby("delay")[["swy", "n_pos"]].sum()
        total_w, total_n = per_delay["swy"].sum(), per_delay["n_pos"].sum()
        for a in edges[1:]:
            known = per_delay[[k + 1 < len(edges) and edges[k + 1] <= a
                               for k in per_delay.index]]
            rows.append((*key, float(a), known["swy"].sum(), total_w, known["n_pos"].sum(),
                         total_n))
    out = pd.DataFrame(rows, columns=[*keys, "delay", "positives", "positives_total", "k",
                                      "n"])
    with np.errstate(divide="ignore", invalid="ignore"):
        out["F_hat"] = out["positives"] / out["positives_total"]
    k, n = (out["positives"], out["positives_total"]) if integer else (out["k"], out["n"])
    out["F_lower"], out["F_upper"] = clopper_pearson_interval(np.round(k), np.round(n),
                                                              confidence)
    out["cohorts"] = len(mature)
    out = out.merge(ranges, on=keys, how="left")
    return out[[*keys, "bin_lower", "bin_upper", "delay", "F_hat", "F_lower", "F_upper",
                "positives", "positives_total", "cohorts"]]


def adjusted(store: Any, *, by: str | Sequence[str] | None = None, start: Any = None,
             end: Any = None, bins: int = 8, horizon: str = "30d", settle: str = "1d",
             at: Any = None, prefix: str = schema.PREFIX, spec: str | None = None,
             confidence: float = 0.95) -> pd.DataFrame:
    r"""Observed-to-expected ratio of a window, maturity-adjusted: each immature period's
    positives (those known at its age) divided by the maturity curve there, per score bin.

    Parameters
    ----------
    store, by, bins, horizon, settle, at, prefix, spec, confidence
        As for :func:`maturity` (the curve is estimated on the mature periods at ``at``).
    start, end : date-like, optional
        The window's first and last period.

    Returns
    -------
    pandas.DataFrame
        Per group: ``n``, ``W``, ``expected`` (Σwp), ``observed`` (Σwy known at the snapshots),
        ``oe_observed`` (what every peer shows), ``pending_share`` (the share of expected
        positives still to arrive, :math:`1 - \sum_{t,b} \hat F_b(a_t)\,\Sigma wp_{t,b} /
        \Sigma wp`), ``oe_adjusted``, ``lower``, ``upper`` (delta-method interval including the
        curve's uncertainty), ``estimate`` (True), ``periods_left_out`` (younger than the first
        delay edge: nothing to adjust from).

    Notes
    -----
    Period t of age :math:`a_t` (days from its end to ``at``, rounded down to a delay edge) is
    read with the labels that arrived within :math:`a_t` days (known for every row of it), and
    :math:`\hat Y_{t,b} = Y_{t,b}(a_t) / \hat F_b(a_t)` estimates its eventual positives; mature
    periods enter as observed. Unbiased when the delay distribution of bin b is the same in the
    window as in the mature cohorts.

    Examples
    --------
    One mature day (a third of its positives arrived within a day) and one a day old:

    >>> import pandas as pd, sqlcal
    >>> from sqlcal.monitor.maturity import adjusted
    >>> t = pd.to_datetime(["2026-09-01 10:00"] * 4 + ["2026-10-30 10:00"] * 4)
    >>> df = pd.DataFrame({"p": [0.2, 0.3, 0.6, 0.8] * 2, "y": [1, 1, 1, 0, 1, 0, 0, 0],
    ...                    "t": t, "lt": t + pd.to_timedelta([0.5, 1.5, 4, 0, 0.2, 0, 0, 0],
    ...                                                      unit="D")})
    >>> _ = sqlcal.snapshot(df, score="p", label="y", time="t", label_time="lt",
    ...                     store=":memory:", prefix="adj_", as_of="2026-11-01")
    >>> out = adjusted(":memory:", prefix="adj_", start="2026-10-30", bins=1)
    >>> out[["n", "expected", "oe_observed", "oe_adjusted", "pending_share"]].round(4)
       n  expected  oe_observed  oe_adjusted  pending_share
    0  4       1.9       0.5263       1.5789         0.6667
    """
    versions, spec_dict, spec_hash, by = _setup(store, prefix, spec, by, bins)
    names = {k: schema.key_columns(spec_dict)[k] for k in by}
    by = tuple(names.values())
    curve = _curve(store, versions, spec_dict, spec_hash, by, prefix=prefix, bins=bins,
                   horizon=horizon, settle=settle, at=at, confidence=confidence)
    at = _store.check_time(versions, at)
    window, _, _ = window_versions(store, prefix, spec_hash, start, end)
    edges = spec_dict["delays"]
    age = _store.label_age(window, at)
    mature_age = _age(horizon, settle)
    lag = [np.inf if a >= mature_age else max([e for e in edges[1:] if e <= a], default=0.0)
           for a in age]
    window = window.assign(lag=lag)
    kept = window[window["lag"] > 0]
    cells = _store.merged(store, "cells", prefix=prefix, spec_hash=spec_hash, versions=kept,
                          by=[*by, "period_start", "delay"], delays=None)
    cells = cells.merge(kept[["period_start", "lag"]], on="period_start")
    # the curve's score bins (cell ranges of the mature cohorts), so that F̂_b divides bin b
    starts = curve[curve["score_bin"] >= 0].groupby([*by, "score_bin"])["bin_lower"].min()
    starts = (starts * spec_dict["cells"]).round().astype("int64").rename("start").reset_index()
    binned = cells.assign(score_bin=_adjusted.bin_of(cells, by, starts,
                                                     cells["cell"].to_numpy()))
    free = binned[binned["delay"] == schema.DELAY_LABEL_FREE]
    lab = binned[binned["delay"] != schema.DELAY_LABEL_FREE]
    upper = np.array([edges[k + 1] if 0 <= k < len(edges) - 1 else np.inf for k in lab["delay"]])
    known = lab[(upper <= lab["lag"]) | (lab["lag"] == np.inf)]
    keys = [*by, "period_start", "score_bin", "lag"]
    per = free.groupby(keys)[["n", "W", "swp"]].sum().join(
        known.groupby(keys)[["swy", "n_pos"]].sum(), how="left").join(
        lab.groupby(keys)[["swy"]].sum().rename(columns={"swy": "swy_all"}), how="left"
    ).fillna(0).reset_index()
    F = curve[curve["score_bin"] >= 0].rename(columns={"delay": "lag"})
    per = per.merge(F[[*by, "score_bin", "lag", "F_hat", "positives_total"]],
                    on=[*by, "score_bin", "lag"], how="left")
    final = per["lag"] == np.inf
    per.loc[final, "F_hat"] = 1.0
    per["Y_hat"] = per["swy"] / per["F_hat"]
    mean_w = np.where(per["n_pos"] > 0, per["swy"] / per["n_pos"].clip(lower=1), 1.0)
    per["var_Y"] = per["swy"] * mean_w / per["F_hat"] ** 2
    per["dY_dF"] = np.where(final, 0.0, per["swy"] / per["F_hat"] ** 2)
    rows = []
    for key, part in per.groupby(list(by)) if by else [((), per)]:
        key = key if isinstance(key, tuple) else (key,)
        expected = part["swp"].sum()
        y_hat = part["Y_hat"].sum()
        var = part["var_Y"].sum()
        curve_part = part[~(part["lag"] == np.inf)].groupby(["score_bin", "lag"]).agg(
            d=("dY_dF", "sum"), F=("F_hat", "first"), N=("positives_total", "first"))
        var += float((curve_part["d"] ** 2 * curve_part["F"] * (1 - curve_part["F"])
                      / curve_part["N"]).sum())
        z = stats.norm.isf((1 - confidence) / 2)
        se = np.sqrt(var) / expected
        oe = y_hat / expected
        rows.append((*key, int(part["n"].sum()), part["W"].sum(), expected,
                     part["swy_all"].sum(), part["swy_all"].sum() / expected,
                     1 - (part["F_hat"] * part["swp"]).sum() / expected, oe, oe - z * se,
                     oe + z * se, True, int((window["lag"] == 0).sum())))
    return schema.presented(pd.DataFrame(rows, columns=[
        *by, "n", "W", "expected", "observed", "oe_observed", "pending_share", "oe_adjusted",
        "lower", "upper", "estimate", "periods_left_out"]), names)


def _setup(store, prefix, spec, by, bins):
    versions, spec_dict, spec_hash = window_versions(store, prefix, spec, None, None)
    if spec_dict["label_time"] is None:
        raise OptionError("the maturity curve needs the labels' arrival times: snapshot with "
                          "label_time=")
    if not (isinstance(bins, (int, np.integer)) and 1 <= bins <= 64):
        raise OptionError(f"bins must be an integer in [1, 64], not {bins!r}")
    keys = tuple(spec_dict["by"])
    by = keys if by is None else ((by,) if isinstance(by, str) else tuple(by))
    extra = sorted(set(by) - set(keys))
    if extra:
        raise OptionError(f"by: {extra} are not keys of the stored summaries {list(keys)}")
    return versions, spec_dict, spec_hash, by


def _age(horizon, settle) -> float:
    return _store.duration_days(horizon, "horizon") + _store.duration_days(settle, "settle")
