"""Run the calibration change detector on a summary store: read each group's per-day sums of
the mature (and, with ``lag=``, the early) days, run the e-detector
(:mod:`sqlcal.monitor.detector`, a pure finish) and explain its alarms."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import pandas as pd

from sqlcal.errors import InvalidInputError
from sqlcal.monitor import schema
from sqlcal.monitor import store as _store
from sqlcal.monitor.detector import (  # noqa: F401 (the detector's names, read here too)
    KINDS,
    TOLERANCE,
    WINDOWS,
    bet_edges,
    bets,
    cusum,
    day_statistics,
    detector,
    log_e,
    log_mean_exp,
    reference_ratios,
    split_change,
    split_mcb,
    threshold,
)
from sqlcal.options import OptionError, checked

# -- from the summary store ----------------------------------------------------------------------


@dataclass
class Detection:
    """What :func:`detect` returns: the detector's daily path and its alarms per group."""

    path: pd.DataFrame
    alarms: pd.DataFrame
    threshold: float
    info: dict = field(default_factory=dict)


@checked
def detect(store: Any, *, by: str | Sequence[str] | None = None, bins: int = 8,
           tolerance: tuple[float, float] = TOLERANCE, alpha: float = 0.05, checks: int = 365,
           windows: Sequence[int] = WINDOWS, reference: Any = None, reference_days: int = 28,
           horizon: str = "30d", settle: str = "1d", at: Any = None,
           lag: str | None = None, null: str = "calibrated", prefix: str = schema.PREFIX,
           spec: str | None = None) -> Detection:
    r"""The calibration change detector on the stored per-day summaries, per group.

    Parameters
    ----------
    store : str, path or Ibis connection
        A summary store written by :func:`sqlcal.snapshot` with ``grain="day"``.
    by : str or sequence of str, optional
        Group keys: the snapshot's (default) or a subset (groups merged).
    bins : int, default 8
        Bet bins of equal weight on the reference window, edges on the stored score cells.
    tolerance : (float, float), default (0, 0.10)
        The null: :math:`|E[y \mid p] - p| \le a + r p` for every row.
    alpha, checks : float, int, default 0.05, 365
        P(any false alarm within ``checks`` daily checks) <= alpha, per group.
    windows : sequence of int, default (3, 7, 28)
        Plug-in windows (days) of the averaged detector.
    reference : (date-like, date-like), optional
        The days whose scores set the bet bins; default: the first ``reference_days`` mature
        days. Their e-values are 1 (the detector checks the days after them). A window holding
        no mature day of the store is refused, and with ``null="reference"`` so is one where
        a group has no data (either would leave the detector blind).
    reference_days : int, default 28
        The length of the default reference window, in mature days.
    horizon, settle : str, default "30d", "1d"
        A day feeds the detector once its labels are final: its stored version was written, or
        found unchanged by a later snapshot run, at age >= horizon + settle (the snapshot's
        horizon and settle: a longer one here waits for runs at that age).
    at : datetime-like, optional
        The check time: only days final by then (default: the latest ``as_of`` stored), to
        replay an earlier check.
    lag : str, optional
        ``"lag:<a>d"`` (a delay edge of the snapshot, which needs ``label_time``) adds an early
        stream: every day once a days old, with the labels known by then, against the null
        "calibrated within tolerance and the share of positives known at age a is F_b", F_b
        estimated per bet bin for each day t on every day already final when t is checked
        (so the estimate sharpens as the history grows), with a Hoeffding bound at level
        alpha/4 (union over bins and the ``checks`` days). alpha is then split: alpha/2 for
        the mature stream, alpha/4 for the early one (so P(any false alarm in either) <=
        alpha). An alarm only in the early stream reads "calibration at lag a, or the label
        delay, changed".
    null : {"calibrated", "reference"}, default "calibrated"
        ``"calibrated"``: every row is calibrated within ``tolerance``. ``"reference"``: every
        row is as calibrated as the reference window, within ``tolerance``: per bet bin b,
        :math:`|E[y \mid p] - r_b p| \le r_b \varepsilon(p)` with :math:`r_b` the reference
        days' ratio of positives to expected (:func:`reference_ratios`), so a model that was
        already off by a stable factor stays quiet and a change from it alarms. ``alpha`` is
        split: alpha/2 for the ratios' Hoeffding bounds, alpha/2 for the detector. Not with
        ``lag`` yet.
    prefix, spec
        As for :func:`sqlcal.stored`.

    Returns
    -------
    Detection
        ``path``: per group, ``stream`` (``"mature"``, or the lag) and day, ``n``, ``W``,
        ``log_e`` (log of the day's e-value
        averaged over the plug-in windows), ``log_M`` (the detector), ``threshold``, ``alarm``
        (log_M >= threshold). ``alarms``: per group that alarmed, ``alarm_day``, ``change_day``
        (start of the CUSUM excursion), ``log_M_at_alarm``, the pre-change window (the 28 days
        before the change day) and post-change window (change day .. alarm day), and the change
        of the miscalibration split into ``intercept``, ``slope`` and ``shape`` (post − pre of
        each term, log score; :func:`split_mcb`), with ``a_pre``, ``b_pre``, ``a_post``,
        ``b_post``; ``kind`` (``"intercept"``, ``"slope"`` or ``"shape"``) and
        ``share_intercept``, ``share_slope``, ``share_shape``: the change of the log-odds
        calibration curve split by a robust line fit (:func:`split_change`), which names a change
        confined to part of the scores a shape change more often than the nested terms do.

    See Also
    --------
    snapshot : writes the per-day summaries this reads.
    stored : the same summaries as a source for one window's metrics.
    metric_series : metrics per day, without a change test.

    Notes
    -----
    The e-values are exact functions of the stored per-day, per-cell sums (module notes;
    e-detectors of Shin, Ramdas & Rinaldo 2022, arXiv:2203.03532). The guarantee assumes the
    labels of a day are conditionally independent given their scores, and frequency weights.

    References
    ----------
    .. [1] J. Shin, A. Ramdas and A. Rinaldo, "E-Detectors: A Nonparametric Framework for Sequential
       Change Detection", arXiv:2203.03532, 2022.

    Examples
    --------
    >>> import numpy as np, pandas as pd, sqlcal
    >>> rng = np.random.default_rng(0)
    >>> t = pd.Timestamp("2026-06-01") + pd.to_timedelta(rng.integers(0, 60 * 86400, 60000), "s")
    >>> p = rng.beta(2, 8, 60000)
    >>> shift = np.where(t >= pd.Timestamp("2026-07-10"), 0.6, 0.0)
    >>> y = rng.random(60000) < 1 / (1 + np.exp(-(np.log(p / (1 - p)) + shift)))
    >>> df = pd.DataFrame({"p": p, "y": y.astype(int), "t": t})
    >>> _ = sqlcal.snapshot(df, score="p", label="y", time="t", store=":memory:",
    ...                     prefix="det_", as_of="2026-09-30", bins=(), ls_ece_sigma=(),
    ...                     smooth_grids=())
    >>> found = detect(":memory:", prefix="det_")
    >>> str(found.alarms.alarm_day[0].date()) >= "2026-07-10"
    True
    """
    if not (0 < alpha < 1):
        raise OptionError(f"alpha must lie in (0, 1), not {alpha!r}")
    if not (isinstance(checks, (int, np.integer)) and checks >= 1):
        raise OptionError(f"checks must be a whole number of daily checks >= 1, not {checks!r}")
    if len(tolerance) != 2 or min(tolerance) < 0:
        raise OptionError(f"tolerance must be (absolute, relative) >= 0, not {tolerance!r}")
    if not windows or any(not isinstance(m, (int, np.integer)) or m < 1 for m in windows):
        raise OptionError(f"windows must be whole numbers of days >= 1, not {windows!r}")
    if null not in NULLS:
        raise OptionError(f"null must be one of {NULLS}, not {null!r}")
    if null == "reference" and lag is not None:
        raise OptionError("null='reference' with lag= (an early stream against the "
                          "reference's calibration) is not built yet; use one of them")
    if not all(np.isfinite(float(x)) for x in tolerance):
        raise OptionError(f"tolerance must be (absolute, relative) finite numbers >= 0, not "
                          f"{tolerance!r}")
    days, spec_dict, spec_hash, by = _mature_days(store, prefix, spec, by, horizon,
                                                  settle, at)
    if not days["integer_weights"].all():
        raise OptionError("the detector's guarantee needs frequency weights (whole numbers); "
                          "this store holds non-integer weights")
    names = {k: schema.key_columns(spec_dict)[k] for k in by}
    by = tuple(names.values())  # inside, the keys' stored columns
    K = int(spec_dict["cells"])
    cells = _store.merged(store, "cells", prefix=prefix, spec_hash=spec_hash, versions=days,
                          by=[*by, "period_start"], delays=None, params={"cells": K})
    cells["period_start"] = pd.to_datetime(cells["period_start"]).astype("datetime64[ns]")
    calendar = pd.date_range(days["period_start"].min(), days["period_start"].max(), freq="D")
    if reference is None:
        ref = (calendar[0], calendar[min(reference_days, len(calendar)) - 1])
    else:
        ref = _reference(reference, cells, by, names, calendar, null)
    first = int(np.searchsorted(calendar, ref[1], side="right"))
    if lag is not None:
        a, admitted = _lag_buckets(lag, spec_dict)
    alpha_mature = alpha if lag is None and null == "calibrated" else alpha / 2
    c = threshold(alpha_mature, checks)
    paths, alarms, reliability, bet_bins = [], [], {}, {}
    groups = cells.groupby(list(by), sort=True, dropna=False) if by else [((), cells)]
    for key, part in groups:
        key = key if isinstance(key, tuple) else (key,)
        keys = dict(zip(by, key))
        in_ref = part["period_start"].between(*ref)
        edges = bet_edges(part.loc[in_ref].groupby("cell")["W"].sum(), bins, K)
        bet_bins[key] = edges
        part = part.assign(bin=np.searchsorted(edges, part["cell"].to_numpy(), side="right") - 1)
        day = pd.Index(calendar).get_indexer(part["period_start"])
        sums = np.zeros((4, len(calendar), bins))
        for i, col in enumerate(("W", "swy", "swp", "swpp")):
            np.add.at(sums[i], (day, part["bin"].to_numpy()), part[col].to_numpy(float))
        n = np.zeros(len(calendar))
        np.add.at(n, day, part["n"].to_numpy(float))
        share = error = None
        if null == "reference":
            ref_sums = sums[:, (calendar >= ref[0]) & (calendar <= ref[1])].sum(axis=1)
            share, error = reference_ratios(ref_sums[0], ref_sums[1], ref_sums[2],
                                            edges[1:] / K, alpha=alpha / 2)
        out = detector(*sums, tolerance=tolerance, windows=tuple(windows), alpha=alpha_mature,
                       checks=checks, first=first, share=share, share_error=error)
        path = pd.DataFrame({**{k: [v] * len(calendar) for k, v in keys.items()},
                             "stream": "mature", "day": calendar, "n": n.astype("int64"),
                             "W": sums[0].sum(-1), **daily_rates(sums),
                             "log_e": log_mean_exp(out["log_e"], axis=-2),
                             "log_M": out["log_M"], "threshold": c})
        path["alarm"] = path["log_M"] >= c
        paths.append(path)
        if out["alarm_day"] >= 0:
            row, diagrams = _alarm(store, prefix, spec_hash, days, by, keys, calendar, out, K)
            alarms.append((*row[:len(by) + 1], "mature", *row[len(by) + 1:]))
            reliability[tuple(keys.values())] = diagrams
    if lag is not None:
        early_paths, early_alarms = _early_stream(
            store, prefix, spec_hash, spec_dict, by, bet_bins, ref, days, a, admitted, settle,
            at, K, tolerance=tolerance, windows=tuple(windows), alpha=alpha, checks=checks,
            name=lag, age=_store.duration_days(horizon, "horizon")
            + _store.duration_days(settle, "settle"))
        paths += early_paths
        alarms += early_alarms
    path = schema.presented(pd.concat(paths, ignore_index=True), names)
    columns = [*by, "alarm_day", "stream", "change_day", "log_M_at_alarm", "pre_start",
               "pre_end", "post_start", "post_end", *DECOMPOSITION]
    alarms = schema.presented(pd.DataFrame(alarms, columns=columns), names)
    return Detection(path=path, alarms=alarms, threshold=c,
                     info={"spec": spec_hash, "reference": ref, "bins": bins,
                           "tolerance": tuple(tolerance), "alpha": alpha, "checks": checks,
                           "windows": tuple(windows), "days": len(calendar),
                           "reliability": reliability, "lag": lag, "null": null,
                           "threshold_early": None if lag is None
                           else threshold(alpha / 4, checks)})


def daily_rates(sums: np.ndarray) -> dict:
    r"""Each day's mean score and observed rate (of the labels the stream knows), and the
    observed rate's standard deviation were the day calibrated,
    :math:`\sqrt{\sum w p(1 - p)} / W` (frequency weights, labels independent given their
    scores: the detector's assumptions), from the day's (W, Σwy, Σwp, Σwp²) summed over the bet
    bins; NaN on a day without weight."""
    W, swy, swp, swpp = (part.sum(-1) for part in sums)
    with np.errstate(invalid="ignore", divide="ignore"):
        return {"mean_score": np.where(W > 0, swp / W, np.nan),
                "observed": np.where(W > 0, swy / W, np.nan),
                "observed_sd": np.where(W > 0, np.sqrt(np.maximum(swp - swpp, 0)) / W, np.nan)}


#: the detector's nulls: calibrated within tolerance, or as calibrated as the reference window
NULLS = ("calibrated", "reference")


#: the change report's decomposition columns (post − pre, and the fits in both windows)
DECOMPOSITION = ("mcb", "intercept", "slope", "shape", "a_pre", "b_pre", "a_post", "b_post",
                 "kind", "share_intercept", "share_slope", "share_shape")


def _alarm(store, prefix, spec_hash, days, by, keys, calendar, out, K) -> tuple:
    alarm, change = int(out["alarm_day"]), int(out["change_day"])
    pre = (calendar[max(change - 28, 0)], calendar[max(change - 1, 0)])
    post = (calendar[change], calendar[alarm])
    terms, diagrams, windows = [], {}, []
    for name, (lo, hi) in (("pre", pre), ("post", post)):
        window = days[days["period_start"].between(lo, hi)]
        cells = _store.merged(store, "cells", prefix=prefix, spec_hash=spec_hash,
                              versions=window, by=list(by), delays=None, params={"cells": K})
        for k, v in keys.items():
            cells = cells[cells[k] == v]
        terms.append(split_mcb(cells["W"], cells["swy"], cells["swp"] / cells["W"]))
        windows.append(cells[["cell", "W", "swy", "swp"]])
        # the window's reliability diagram: 16 equal-width bins of whole cells (exact)
        binned = cells.assign(bin=cells["cell"] * 16 // K).groupby("bin")[["W", "swy", "swp"]] \
            .sum().reset_index()
        diagrams[name] = binned.assign(mean_score=binned["swp"] / binned["W"],
                                       observed=binned["swy"] / binned["W"])
    change_terms = [terms[1][k] - terms[0][k] for k in ("mcb", "intercept", "slope", "shape")]
    kind = split_change(*windows)
    return (*keys.values(), calendar[alarm], calendar[change], float(out["log_M"][alarm]),
            *pre, *post, *change_terms, terms[0]["a"], terms[0]["b"], terms[1]["a"],
            terms[1]["b"], kind["kind"], *(kind[f"share_{k}"] for k in KINDS)), diagrams


def _lag_buckets(lag: str, spec: dict) -> tuple[float, list[int]]:
    """The lag a in days and the delay buckets whose labels are known at age a."""
    edges = spec["delays"]
    try:
        a = float(lag[4:-1]) if lag.startswith("lag:") and lag.endswith("d") else None
    except ValueError:
        a = None
    if a is None or a not in edges[1:]:
        raise OptionError(f"lag must be 'lag:<a>d' with a one of the snapshot's delay edges "
                          f"above 0, {list(edges[1:])}, not {lag!r}")
    if spec.get("label_time") is None:
        raise OptionError(f"lag={lag!r} needs the labels' arrival times: snapshot with "
                          "label_time=")
    return a, [k for k in range(len(edges) - 1) if edges[k + 1] <= a]


def _early_stream(store, prefix, spec_hash, spec, by, bet_bins, ref, mature, a, admitted,
                  settle, at, K, *, tolerance, windows, alpha, checks, name, age):
    """The lag-a stream per group: every day a + settle old, its positives known by age a,
    against F_b·p, F_b estimated for day t on every mature day s <= t - ceil(age - a) (final
    when day t's early e-value is first computed: a predictable estimate that grows with the
    history), with a Hoeffding bound at level alpha/4 over the bins and the checks' days
    (module notes)."""
    versions = _store.current_versions(store, prefix, spec_hash)
    days = versions[_store.mature(versions, at=at, horizon=a, settle=settle)].reset_index(
        drop=True)
    if not len(days):
        return [], []
    cells = _store.merged(store, "cells", prefix=prefix, spec_hash=spec_hash, versions=days,
                          by=[*by, "period_start", "delay"], delays=None, params={"cells": K})
    cells["period_start"] = pd.to_datetime(cells["period_start"]).astype("datetime64[ns]")
    calendar = pd.date_range(days["period_start"].min(), days["period_start"].max(), freq="D")
    first = int(np.searchsorted(calendar, ref[1], side="right"))
    final = set(mature["period_start"])
    lead = max(int(np.ceil(age - a - 1e-9)), 1)  # day s feeds F for the days t >= s + lead
    c = threshold(alpha / 4, checks)
    paths, alarms = [], []
    groups = cells.groupby(list(by), sort=True, dropna=False) if by else [((), cells)]
    for key, part in groups:
        key = key if isinstance(key, tuple) else (key,)
        keys = dict(zip(by, key))
        edges = bet_bins.get(key)
        if edges is None:
            continue
        B = len(edges) - 1
        part = part.assign(bin=np.searchsorted(edges, part["cell"].to_numpy(), side="right") - 1)
        free = part[part["delay"] == schema.DELAY_LABEL_FREE]
        early = part[part["delay"].isin(admitted)]
        labels = part[part["delay"] != schema.DELAY_LABEL_FREE]
        index = pd.Index(calendar)
        # per day and bin, the final days' positives (all, counted, known by age a), summed
        # over the days s <= t - lead
        history = np.zeros((3, len(calendar) + lead, B))
        for i, (frame, col) in enumerate(((labels, "swy"), (labels, "n_pos"), (early, "swy"))):
            frame = frame[frame["period_start"].isin(final)]
            np.add.at(history[i], (index.get_indexer(frame["period_start"]) + lead,
                                   frame["bin"].to_numpy()), frame[col].to_numpy(float))
        all_pos, count, early_pos = np.cumsum(history, axis=1)[:, :len(calendar)]
        with np.errstate(divide="ignore", invalid="ignore"):
            share = np.where(all_pos > 0, early_pos / all_pos, 0.0)
            error = np.where(count > 0, np.sqrt(np.log(2 * B * checks / (alpha / 4))
                                                / (2 * count)), 1.0)
        sums = np.zeros((4, len(calendar), B))
        for i, (frame, col) in enumerate(((free, "W"), (early, "swy"), (free, "swp"),
                                          (free, "swpp"))):
            np.add.at(sums[i], (index.get_indexer(frame["period_start"]),
                                frame["bin"].to_numpy()), frame[col].to_numpy(float))
        n = np.zeros(len(calendar))
        np.add.at(n, index.get_indexer(free["period_start"]), free["n"].to_numpy(float))
        out = detector(*sums, tolerance=tolerance, windows=windows, alpha=alpha / 4,
                       checks=checks, first=first, share=share, share_error=error)
        path = pd.DataFrame({**{k: [v] * len(calendar) for k, v in keys.items()},
                             "stream": name, "day": calendar, "n": n.astype("int64"),
                             "W": sums[0].sum(-1), **daily_rates(sums),
                             "log_e": log_mean_exp(out["log_e"], axis=-2),
                             "log_M": out["log_M"], "threshold": c})
        path["alarm"] = path["log_M"] >= c
        paths.append(path)
        if out["alarm_day"] >= 0:
            alarm, change = int(out["alarm_day"]), int(out["change_day"])
            alarms.append((*keys.values(), calendar[alarm], name, calendar[change],
                           float(out["log_M"][alarm]), pd.NaT, pd.NaT, calendar[change],
                           calendar[alarm], *([np.nan] * len(DECOMPOSITION))))
    return paths, alarms


def _reference(reference, cells, by, names, calendar, null) -> tuple:
    """The reference window's first and last day. A window holding no mature day of the store
    is refused (the bet bins would come from nothing, and a window after the data leaves no day
    to check), and with ``null="reference"`` so is a group without weight in it (its ratios
    would be unknown and its bets 0: a detector that never alarms)."""
    try:
        ref = tuple(_store.as_timestamp(x) for x in reference)
    except (TypeError, ValueError):
        ref = ()
    if len(ref) != 2 or pd.isna(ref[0]) or pd.isna(ref[1]) or ref[0] > ref[1]:
        raise OptionError(f"reference must be (first day, last day), not {reference!r}")
    shown = f"reference {ref[0]:%Y-%m-%d}..{ref[1]:%Y-%m-%d}"
    inside = cells[cells["period_start"].between(*ref)]
    if not (inside["W"].sum() > 0):
        raise OptionError(f"{shown} holds no mature day of the store (its mature days are "
                          f"{calendar[0]:%Y-%m-%d}..{calendar[-1]:%Y-%m-%d}): the detector would "
                          "learn nothing from it; choose days in that range")
    if null == "reference" and by:
        weight = inside.groupby(list(by), dropna=False)["W"].sum()
        groups = cells[list(by)].drop_duplicates().itertuples(index=False, name=None)
        missing = [g for g in groups if not (weight.get(g if len(by) > 1 else g[0], 0) > 0)]
        if missing:
            keys = list(names)
            raise OptionError(f"{shown} holds no data of {len(missing)} groups "
                              f"({[dict(zip(keys, g)) for g in missing[:5]]}): null='reference' "
                              "would have nothing to compare them with; choose a reference "
                              "where every group has data")
    return ref


def _mature_days(store, prefix, spec, by, horizon, settle, at):
    """The current version of every mature day of one spec, its spec and the group keys."""
    versions = _store.current_versions(store, prefix)
    if not len(versions):
        raise InvalidInputError(f"no snapshots in the store (prefix {prefix!r})")
    hashes = sorted(versions["spec_hash"].unique())
    if spec is None and len(hashes) > 1:
        raise OptionError(f"spec: the store holds snapshots of several specs {hashes}; name one "
                          "with spec=")
    spec = hashes[0] if spec is None else spec
    if spec not in hashes:
        raise OptionError(f"spec: {spec!r} is not among the stored specs {hashes}")
    versions = versions[versions["spec_hash"] == spec].reset_index(drop=True)
    spec_dict = json.loads(versions["spec"].iloc[-1])
    if spec_dict["grain"] != "day":
        raise OptionError(f"the detector checks daily summaries; the store's grain is "
                          f"{spec_dict['grain']!r}")
    keys = tuple(spec_dict["by"])
    by = keys if by is None else ((by,) if isinstance(by, str) else tuple(by))
    extra = sorted(set(by) - set(keys))
    if extra:
        raise OptionError(f"by: {extra} are not keys of the stored summaries {list(keys)}")
    at = _store.check_time(versions, at)
    # a day feeds the detector when its stored version holds its final labels (written, or
    # found unchanged by a run, at its maturity or later), and was so by at
    mature = versions[_store.mature(versions, at=at, horizon=horizon, settle=settle,
                                    option="horizon")]
    if not len(mature):
        raise InvalidInputError(f"no mature day in the store at {at} (horizon {horizon} + "
                                f"settle {settle})")
    return mature.reset_index(drop=True), spec_dict, spec, by
