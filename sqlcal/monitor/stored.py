"""Windows from the summary store: a source every metric accepts, served by merging stored
summaries instead of scanning rows.

``stored(store, start=, end=, maturity=)`` returns a :class:`~sqlcal.inputs.sources.Source` whose
``served`` function answers the planner's requests: each declared summary
(:mod:`sqlcal.query.declared`) is the stored one summed over the window's periods and the delay
buckets its maturity view admits (in the store's engine, :func:`sqlcal.monitor.store.merged`),
with sqlcal's summary columns rebuilt from the stored ones (:data:`sqlcal.monitor.schema.DERIVED`).
Sums add exactly (up to float re-association), so every metric that reads totals, stored bins,
cells, the logit grid, smooth ECE's histogram or the levels gives the value a scan of the window's
rows gives. A summary the store does not hold is an error naming the snapshot option that stores
it.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Sequence

import numpy as np
import pandas as pd

from sqlcal.errors import InvalidInputError
from sqlcal.inputs.groupkeys import VALUE, GroupKeys, Key
from sqlcal.inputs.sources import Source, served_rows
from sqlcal.monitor import adjusted as _adjusted
from sqlcal.monitor import schema
from sqlcal.monitor import store as _store
from sqlcal.options import OptionError, checked
from sqlcal.query import local
from sqlcal.query.declared import Summary, coarser_cells

#: maturity views of a stored window
VIEWS = ("mature", "all", "lag:<a>d", "adjusted")


@checked
def stored(store: Any, *, by: str | Sequence[str] | None = None, start: Any = None,
           end: Any = None, maturity: str = "mature", prefix: str = schema.PREFIX,
           spec: str | None = None, at: Any = None, horizon: str = "30d",
           settle: str = "1d") -> Source:
    r"""A window of stored summaries, as a source every metric accepts.

    Parameters
    ----------
    store : str, path or Ibis connection
        The summary store :func:`sqlcal.snapshot` wrote.
    by : str or sequence of str, optional
        Group keys: the snapshot's ``by`` (default) or a subset of it (groups merged).
    start, end : date-like, optional
        The first and last period of the window (inclusive); default: every stored period.
    maturity : str, default "mature"
        ``"mature"``: only periods whose labels are final (age >= horizon + settle at ``at``);
        ``"all"``: every period with the labels known at its snapshot; ``"lag:<a>d"`` (a one of
        the snapshot's delay edges above 0): every period with the labels that arrived within
        a days of the prediction, so recent and old periods are comparable; ``"adjusted"``:
        every period, an immature one's known positives divided by the maturity curve
        :math:`\hat F_b(a)` of their score bin (8 bins of equal weight, estimated on the mature
        periods) at the period's age a, an estimate of the eventual labels (periods younger than
        the first delay edge left out; the source's origin says how many). Exact per stored
        score cell, so every metric read from the cells, the smooth ECE histogram or the levels
        is adjusted; the log loss, equal-width bins that do not divide the cells and LS-ECE
        need ``levels=True`` and are refused without it. Intervals do not include the curve's
        uncertainty (:func:`sqlcal.monitor.maturity.adjusted` gives the O/E with it).
    prefix : str, default "sqlcal_"
    spec : str, optional
        The snapshot spec's hash, when the store holds several.
    at : datetime-like, optional
        The time the ``"mature"`` view ages periods at (default: the latest ``as_of`` stored).
    horizon, settle : str, default "30d", "1d"

    Returns
    -------
    Source
        A source whose summaries are merged from the store; it never reads rows. Metrics that
        need a summary the store lacks raise :class:`~sqlcal.options.OptionError` naming the
        snapshot option that stores it. Every result carries the trust columns ``window`` (the
        periods), ``maturity``, ``window_exact`` (the value equals a scan of those periods'
        rows; False for the ``"adjusted"`` estimates) and ``window_bound`` (0, or NaN for an
        estimate).

    See Also
    --------
    snapshot : writes the summaries this reads.
    detect : the change detector on the same summaries.
    source : the same for a table of rows.

    Notes
    -----
    With binary labels every label-dependent sum is :math:`\sum_i w_i y_i f(p_i)`, and every
    stored column is a sum (or a minimum or maximum) over rows, so the window's summary is the
    sum of its periods' summaries and the ``lag`` view is the sum over the admitted delay
    buckets. Grid-mode metrics (``cutoff_error(method="grid")``) carry their own certified
    bound (``grid_bound``), which holds for the merged window as for a scan.

    Examples
    --------
    >>> import pandas as pd, sqlcal
    >>> df = pd.DataFrame({"p": [0.2, 0.7, 0.4, 0.9], "y": [0, 1, 1, 1],
    ...                    "t": pd.to_datetime(["2026-11-01 08:00", "2026-11-01 09:00",
    ...                                         "2026-11-02 10:00", "2026-11-02 11:00"])})
    >>> _ = sqlcal.snapshot(df, score="p", label="y", time="t", store=":memory:",
    ...                     as_of="2026-11-03", prefix="doc_")
    >>> src = sqlcal.stored(":memory:", prefix="doc_", maturity="all")
    >>> sqlcal.brier(src)[["brier", "n", "W", "window", "window_exact"]]
       brier  n    W                              window  window_exact
    0  0.125  4  4.0  2026-11-01..2026-11-02 (2 periods)          True
    """
    versions, spec_dict, spec_hash = window_versions(store, prefix, spec, start, end)
    keys = tuple(spec_dict["by"])
    by = keys if by is None else ((by,) if isinstance(by, str) else tuple(by))
    extra = sorted(set(by) - set(keys))
    if extra:
        raise OptionError(f"by: {extra} are not keys of the stored summaries {list(keys)}")
    delays = None if maturity == "adjusted" else _admitted(maturity, spec_dict)
    if maturity == "mature":
        versions = versions[_store.mature(versions, at=at, horizon=horizon, settle=settle)]
    if not len(versions):
        raise InvalidInputError(f"the store holds no {maturity!r} period between {start} and "
                                f"{end} (spec {spec_hash})")
    names = schema.key_columns(spec_dict)
    adjust = None
    if maturity == "adjusted":  # immature periods' positives divided by the maturity curve
        cohorts = window_versions(store, prefix, spec_hash, None, None)[0]
        age = _store.duration_days(horizon, "horizon") + _store.duration_days(settle, "settle")
        adjust = _adjusted.Adjustment(
            store, prefix=prefix, spec_hash=spec_hash, spec=spec_dict, window=versions,
            cohorts=cohorts, by=[names[k] for k in by], at=_store.check_time(cohorts, at),
            mature_age=age, names={names[k]: k for k in by})
        versions = pd.concat([adjust.mature, adjust.immature]).drop(columns=["lag"])
        if not len(versions):
            raise InvalidInputError(f"maturity='adjusted': every period between {start} and "
                                    f"{end} is younger than the first delay edge")
        maturity = f"adjusted ({adjust.describe()})"
    served = _Server(store, prefix, spec_hash, spec_dict, versions, by, delays, adjust)
    src = Source(rows=served_rows("stored_window"),
                 score=spec_dict["score"], label=spec_dict["label"],
                 weight=spec_dict["weight"], by=tuple(VALUE.format(i) for i in range(len(by))),
                 group_keys=GroupKeys(tuple(Key(k, VALUE.format(i), kind="plain")
                                            for i, k in enumerate(by))),
                 on_invalid="raise", allow_soft=False,
                 float_label=False, integer_weights=bool(versions["integer_weights"].all()),
                 validated=True, served=served,
                 origin=(f"summary store, {len(versions)} periods "
                         f"{versions['period_start'].min():%Y-%m-%d}.."
                         f"{versions['period_start'].max():%Y-%m-%d}, maturity={maturity!r}"))
    estimated = 0 if adjust is None else len(adjust.immature)
    src.facts = {"window": f"{versions['period_start'].min():%Y-%m-%d}.."
                           f"{versions['period_start'].max():%Y-%m-%d} ({len(versions)} periods)",
                 "maturity": "adjusted" if adjust is not None else maturity,
                 # served sums equal the scan's up to float re-association; the adjusted view's
                 # label sums of immature periods are estimates
                 "window_exact": estimated == 0, "window_bound": 0.0 if estimated == 0 else np.nan}
    src.forbid_queries("a stored window is served from its summary store")
    return src


def daily(store: Any, kind: str = "cells", *, by: str | Sequence[str] | None = None,
          start: Any = None, end: Any = None, maturity: str = "mature",
          prefix: str = schema.PREFIX, spec: str | None = None, at: Any = None,
          horizon: str = "30d", settle: str = "1d", params: dict | None = None) -> pd.DataFrame:
    """A stored summary per period (not merged over the window): what a per-day statistic, such
    as the change detector's, reads.

    Parameters
    ----------
    kind : {"totals", "bins", "cells", "logit", "smooth", "levels"}
        The stored table (:data:`sqlcal.monitor.schema.TABLES`).
    params : dict, optional
        Which stored variant, e.g. ``{"bins": 15, "convention": "sqlcal"}`` (default: the cells
        of the snapshot's grid; the first binning, logit grid or smooth grid).
    store, by, start, end, maturity, prefix, spec, at, horizon, settle
        As for :func:`stored`.

    Returns
    -------
    pandas.DataFrame
        One row per group, ``period_start`` and key column, with sqlcal's summary columns
        (``n``, ``W``, ``swy``, ``swp``, ``swpp``, ``swyp``, ``total``, ``var``, ...), sorted.

    Examples
    --------
    >>> import pandas as pd, sqlcal
    >>> from sqlcal.monitor.stored import daily
    >>> df = pd.DataFrame({"p": [0.2, 0.7, 0.4, 0.9], "y": [0, 1, 1, 1],
    ...                    "t": pd.to_datetime(["2026-11-01 08:00", "2026-11-01 09:00",
    ...                                         "2026-11-02 10:00", "2026-11-02 11:00"])})
    >>> _ = sqlcal.snapshot(df, score="p", label="y", time="t", store=":memory:",
    ...                     as_of="2026-11-03", prefix="daily_")
    >>> daily(":memory:", "totals", prefix="daily_", maturity="all")[["period_start", "n", "swy"]]
      period_start  n  swy
    0   2026-11-01  2  1.0
    1   2026-11-02  2  2.0
    """
    versions, spec_dict, spec_hash = window_versions(store, prefix, spec, start, end)
    keys = tuple(spec_dict["by"])
    by = keys if by is None else ((by,) if isinstance(by, str) else tuple(by))
    extra = sorted(set(by) - set(keys))
    if extra:
        raise OptionError(f"by: {extra} are not keys of the stored summaries {list(keys)}")
    delays = _admitted(maturity, spec_dict)
    if maturity == "mature":
        versions = versions[_store.mature(versions, at=at, horizon=horizon, settle=settle)]
    if params is None:
        params = {"cells": {"cells": spec_dict["cells"]},
                  "bins": dict(zip(("bins", "convention"), spec_dict["bins"][0]))
                  if spec_dict["bins"] else {},
                  "logit": dict(zip(("step", "clip"), spec_dict["logit"][0]))
                  if spec_dict["logit"] else {},
                  "smooth": {"cells": spec_dict["cells"], "grid": spec_dict["smooth"][0]}
                  if spec_dict["smooth"] else {}}.get(kind, {})
    names = schema.key_columns(spec_dict)
    stored_by = [names[k] for k in by]
    frame = _store.merged(store, kind, prefix=prefix, spec_hash=spec_hash, versions=versions,
                          by=[*stored_by, "period_start"], delays=delays, params=params)
    frame["period_start"] = pd.to_datetime(frame["period_start"]).astype("datetime64[ns]")
    key = [c for c, _ in schema.TABLES[kind]["keys"]]
    frame = _derive(frame).sort_values([*stored_by, "period_start", *key], ignore_index=True)
    return schema.presented(frame, {k: names[k] for k in by})


def window_versions(store, prefix, spec, start, end) -> tuple[pd.DataFrame, dict, str]:
    """The manifest rows readers use for the periods start..end of one spec (the only one
    stored, or ``spec``), the spec as a dict, and its hash."""
    versions = _store.current_versions(store, prefix)
    if not len(versions):
        raise InvalidInputError(f"no snapshots in the store (prefix {prefix!r})")
    hashes = sorted(versions["spec_hash"].unique())
    if spec is None:
        if len(hashes) > 1:
            raise OptionError(f"spec: the store holds snapshots of several specs {hashes}; "
                              "name one with spec=")
        spec = hashes[0]
    elif spec not in hashes:
        raise OptionError(f"spec: {spec!r} is not among the stored specs {hashes}")
    versions = versions[versions["spec_hash"] == spec]
    if start is not None:
        versions = versions[versions["period_start"] >= _store.as_timestamp(start)]
    if end is not None:
        versions = versions[versions["period_start"] <= _store.as_timestamp(end)]
    spec_dict = json.loads(versions["spec"].iloc[-1]) if len(versions) else json.loads(
        _store.current_versions(store, prefix, spec)["spec"].iloc[-1])
    return versions.reset_index(drop=True), spec_dict, spec


def _admitted(maturity: str, spec: dict) -> list[int] | None:
    """The delay values a maturity view sums over (None: all)."""
    if maturity in ("mature", "all"):
        return None
    if maturity == "adjusted":
        raise OptionError("maturity='adjusted' estimates a window's eventual labels "
                          "(sqlcal.stored); per-period statistics such as the detector's read "
                          "'mature' or 'lag:<a>d'")
    edges = spec["delays"]
    if isinstance(maturity, str) and maturity.startswith("lag:") and maturity.endswith("d"):
        try:
            a = float(maturity[4:-1])
        except ValueError:
            a = None
        if a is not None and a in edges[1:]:
            if spec["label_time"] is None:
                raise OptionError(f"maturity={maturity!r} needs the labels' arrival times: "
                                  "snapshot with label_time=")
            return [schema.DELAY_LABEL_FREE] + [k for k in range(len(edges) - 1)
                                                if edges[k + 1] <= a]
        raise OptionError(f"maturity: lag:<a>d takes a delay edge above 0 of the snapshot, "
                          f"{[e for e in edges[1:]]} days, not {maturity!r}")
    raise OptionError(f"maturity must be one of {VIEWS}, not {maturity!r}")


#: totals parts whose sums a store of summary version 2 does not hold (the variance weight's
#: Σvℓ, Σvℓ², Σvyℓ): served exactly from the stored levels, or refused naming levels=True; from
#: version 3 on, the stored totals give them (:data:`schema.DERIVED`)
_LEVELS_ONLY_TOTALS = frozenset({"logloss_sq", "logloss_var"})
#: the interval parts (:func:`sqlcal.metrics.intervals.held`) a window gives, each with the
#: summary version from which the store keeps its sums: the frequency weights' second moments
#: (2); Σw(y − p)⁴, the variance weight's moments, Σwℓ² and Σvℓ² (3); the logit grid's split
#: moments of LS-ECE's interval (4). A window holding a period an older version wrote lacks them
INTERVAL_PARTS = {"moments": 2, "spread": 3, "r4": 3, "logloss_sq": 3, "logloss_var": 3,
                  "sw2": 3, "logit_moments": 4}


class _Server:
    """``served(summary)``: a declared summary of the window, merged from the store."""

    def __init__(self, store, prefix, spec_hash, spec, versions, by, delays, adjust=None):
        self.store, self.prefix, self.spec_hash, self.spec = store, prefix, spec_hash, spec
        self.adjust = adjust  # maturity="adjusted": merges through the Adjustment
        self._inner = False
        names = schema.key_columns(spec)
        #: the stored key columns of the window's keys (every frame inside is keyed by them),
        #: and {column: internal name}, to serve frames under the source's internal key columns
        #: (a key may be named like a summary column: n, W, bin...)
        self.by = tuple(names[k] for k in by)
        self.served = {names[k]: VALUE.format(i) for i, k in enumerate(by)}
        self.versions, self.delays = versions, delays
        self._levels = None
        self._cache: dict = {}
        self._written = versions["spec"].map(schema.stored_version)
        #: the oldest summary version of the window's periods, and the interval parts its sums
        #: give (:func:`sqlcal.metrics.intervals.available`; :meth:`interval_gap` says why the
        #: others are missing)
        self.oldest = int(self._written.min())
        self.interval_parts = frozenset(p for p, v in INTERVAL_PARTS.items()
                                        if self.oldest >= v)

    def interval_gap(self, missing) -> str:
        """Why the interval parts ``missing`` are not in the window: the periods an older
        summary version wrote, to snapshot again."""
        need = max(INTERVAL_PARTS.get(p, schema.SUMMARY_VERSION) for p in missing)
        old = self.versions.loc[self._written < need, "period_start"].sort_values()
        days = [f"{t:%Y-%m-%d}" for t in old]
        named = ", ".join(days) if len(days) <= 6 else f"{days[0]}..{days[-1]}"
        versions = sorted(set(self._written[self._written < need]))
        return (f"{len(old)} of the window's periods ({named}) were stored by summary version "
                f"{' and '.join(map(str, versions))}, before version {need} stored them; "
                "snapshot them again with force=True (start=, end=; sqlcal snapshot --force "
                "--since --until) to store them")

    def _merged(self, kind: str, **params) -> pd.DataFrame:
        key = (kind, tuple(sorted(params.items())))
        if key not in self._cache and self.adjust is not None:
            self._cache[key] = self.adjust.merged(kind, params)
        if key not in self._cache:  # one merge query per stored summary and window
            self._cache[key] = _store.merged(
                self.store, kind, prefix=self.prefix, spec_hash=self.spec_hash,
                versions=self.versions, by=self.by, delays=self.delays, params=params)
        return self._cache[key].copy()

    def __call__(self, summary: Summary) -> pd.DataFrame:
        frame = self._serve(summary)
        missing = sorted(_columns(summary) - set(frame.columns))
        if missing:  # sums this store does not keep (an older layout, a new part)
            frame = self._from_levels(summary, "levels=True", missing)
        return self._presented(frame)

    def _presented(self, frame: pd.DataFrame) -> pd.DataFrame:
        return frame.rename(columns=self.served)

    def _serve(self, summary: Summary) -> pd.DataFrame:
        kind, params = summary.kind, summary.params
        K = self.spec["cells"]
        if self.adjust is not None and not self._inner:
            return self._adjusted(summary)
        if kind == "totals" and summary.parts & _LEVELS_ONLY_TOTALS and self.oldest < 3:
            return self._from_levels(summary, "levels=True (the normalized entropy's interval "
                                     "needs each group's Σwℓ² and Σwyℓ, which the stored "
                                     "totals do not hold)")
        if kind == "totals":
            return _derive(self._merged("totals"))
        if kind == "uniform":
            bins, convention = params
            if [bins, convention] in self.spec["bins"] and self.adjust is None:
                frame = self._merged("bins", bins=bins, convention=convention)
                return _derive(frame.drop(columns=[], errors="ignore"))
            if convention == "sqlcal" and K % bins == 0:  # K/B whole cells per bin: exact
                cells = self._merged("cells", cells=K)
                cells["bin"] = coarser_cells(cells["cell"].to_numpy(), K, bins)
                return _derive(_sum_over(cells, [*self.by, "bin"]))
            return self._from_levels(summary, f"bins={bins} ({convention!r} convention)")
        if kind == "cells" and K % params[0] == 0:
            cells = self._merged("cells", cells=K)
            cells["cell"] = coarser_cells(cells["cell"].to_numpy(), K, params[0])
            return _derive(_sum_over(cells, [*self.by, "cell"]))
        if kind == "logit_grid":
            step, clip = params
            if any(np.isclose(step, s, rtol=1e-12, atol=0) and clip == c
                   for s, c in self.spec["logit"]):
                stored_step = next(s for s, c in self.spec["logit"]
                                   if np.isclose(step, s, rtol=1e-12, atol=0) and clip == c)
                return _derive(self._merged("logit", step=stored_step, clip=clip))
            return self._from_levels(summary, f"ls_ece_sigma={step * 20:g}")
        if kind == "smooth_cells" and len(params[1]) == 1 and params[1][0] in self.spec["smooth"] \
                and params[0] == K:
            h = params[1][0]
            frame = self._merged("smooth", cells=K, grid=h).rename(columns={"interval": f"b_{h}"})
            return _derive(frame)
        if kind == "smooth_cells":
            return self._from_levels(summary, f"smooth_grids={list(params[1])}")
        if kind == "smooth_split":  # an automatic bandwidth below 0.01 reads finer grids
            return self._from_levels(summary, "levels=True: the automatic bandwidth's search "
                                     f"read relplot's grids {list(params[1])}, finer than the "
                                     "stored smooth_grids (it does once a group's window holds "
                                     "about 10^4 rows); or pass sigma= (a fixed bandwidth >= "
                                     "0.01 reads the stored grid 1000)")
        if kind == "levels":
            if not self.spec["levels"]:
                raise OptionError("this metric needs the levels (one row per distinct score): "
                                  "snapshot with levels=True")
            return self.levels()
        return self._from_levels(summary, "levels=True")

    def cells(self) -> pd.DataFrame:
        """The window's merged fine score cells (the snapshot's grid) with sqlcal's columns."""
        return self._presented(_derive(self._merged("cells", cells=self.spec["cells"])))

    def _adjusted(self, summary: Summary) -> pd.DataFrame:
        """maturity="adjusted": exact from the adjusted cells (or levels), else refused."""
        why = _adjusted.unadjustable(summary.kind, summary.params, summary.parts,
                                     self.spec["cells"])
        if why is not None and not self.spec["levels"]:
            raise OptionError(f"maturity='adjusted': {why}; snapshot with levels=True (each "
                              "distinct score is then adjusted exactly) or read the window "
                              "with maturity='lag:<a>d' or 'mature'")
        if why is not None:
            frame = self._levels_totals(summary)
        elif summary.kind == "totals":
            if len(self.adjust.immature) and self.spec["levels"]:
                frame = local.evaluate(summary, self.levels(), self.by)
            else:
                frame = _derive(self.adjust.totals())
        else:
            self._inner = True  # the view logic below, its merges adjusted (_merged)
            try:
                frame = self._serve(summary)
            finally:
                self._inner = False
        if "ny" in frame and "n_pos" in frame:  # adjusted counts are estimates, not integers
            frame["ny"] = frame["n_pos"].astype(float)
        return frame

    def _levels_totals(self, summary: Summary) -> pd.DataFrame:
        """A summary from the levels; the log loss's totals with the Σwℓ² the stored totals
        serve (the frequency weights' second moment its interval reads), so an adjusted window
        keeps the interval a mature one has (the variance weight's sums stay unserved)."""
        if summary.kind != "totals" or "logloss" not in summary.parts \
                or summary.parts & {"logloss_sq", "logloss_var"}:  # asked for: version 3's sums
            return local.evaluate(summary, self.levels(), self.by)
        wider = dataclasses.replace(summary, parts=summary.parts | {"logloss_var"})
        frame = local.evaluate(wider, self.levels(), self.by)
        return frame.drop(columns=["swy_logloss", "sw2_logloss", "sw2_logloss_sq",
                                   "sw2y_logloss"], errors="ignore")

    def levels(self) -> pd.DataFrame:
        if self._levels is None:
            self._levels = _derive(self._merged("levels"))
            if self.adjust is not None:  # adjusted counts are estimates, not integers
                self._levels["ny"] = self._levels["n_pos"].astype(float)
        return self._levels

    def _from_levels(self, summary: Summary, option: str, missing: list | None = None
                     ) -> pd.DataFrame:
        """Any summary from the stored levels (exact), or an error naming the option."""
        if not self.spec["levels"]:
            held = (f"the stored {summary.kind} summary has no {missing}, which this metric "
                    "reads" if missing else f"the summary {summary.name!r} is not in the store")
            raise OptionError(
                f"{held}: snapshot with {option}"
                + ("" if option.startswith("levels=True") else " (or levels=True)")
                + ("; grid-mode metrics (method='grid') read the stored cells, and "
                   "sqlcal.monitor.stored.bounded_ece gives equal-mass bins snapped to them "
                   "with a certified bound" if option == "levels=True" else ""))
        return local.evaluate(summary, self.levels(), self.by)


def _columns(summary: Summary) -> set:
    """The columns a declared summary has (as a scan gives them), read off its evaluation on
    one made-up level; empty for a summary without a local evaluation."""
    key = (summary.key, summary.parts)  # the parts name columns too (r4: sw_r4)
    if key not in _COLUMNS:
        try:
            probe = pd.DataFrame({"p": [0.5], **{c: [1] for c in local.LEVEL_COLUMNS}})
            _COLUMNS[key] = set(local.evaluate(summary, probe, ()).columns)
        except Exception:  # no evaluator, or parts it does not reproduce: no check
            _COLUMNS[key] = set()
    return _COLUMNS[key]


#: (declared summary key, parts) -> its columns
_COLUMNS: dict = {}


def _sum_over(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    rules = {c: "min" if c in schema.MINIMA else "max" if c in schema.MAXIMA else "sum"
             for c in frame.columns if c not in keys and c != "cell" and c != "bin"}
    return frame.groupby(keys, dropna=False, sort=True).agg(rules).reset_index()


def _derive(frame: pd.DataFrame) -> pd.DataFrame:
    """sqlcal's summary columns from the stored ones (:data:`schema.DERIVED`)."""
    frame = frame.copy()
    for name, combination in schema.DERIVED.items():
        if all(c in frame for c in combination):
            value = None
            for c, coef in combination.items():
                term = frame[c] if coef == 1 else coef * frame[c]
                value = term if value is None else value + term
            frame[name] = value
    for name in ("n", "ny", "n_infinite_logloss"):
        if name in frame:
            frame[name] = frame[name].astype("int64")
    return frame


# -- bounded forms: bins whose edges cut stored cells ------------------------------------------

#: the binnings :func:`bounded_ece` snaps to the stored cells
BOUNDED_STRATEGIES = ("quantile", "uniform")


def bounded_ece(src: Source, *, bins: int = 15, strategy: str = "quantile") -> pd.DataFrame:
    r"""Binned ECE of a stored window at edges snapped to the stored score cells, with a
    certified bound on its distance to the ECE at the exact edges.

    A stored window without levels cannot place an equal-mass edge between two scores of one
    cell, nor an equal-width edge ``k/B`` that cuts a cell (``B`` not dividing the stored
    cells); this finish moves each such edge to a cell boundary of the cell that holds it.

    Parameters
    ----------
    src : Source
        A stored window (:func:`stored`).
    bins : int, default 15
        Number of bins B.
    strategy : {"quantile", "uniform"}, default "quantile"
        Equal-mass bins, at the edges :func:`sqlcal.ece` (``strategy="quantile"``) puts at
        numpy's linear-interpolation quantiles of the sample with each row repeated w times
        (whole-number weights only), or equal-width bins of the ``"sqlcal"`` convention
        (bin ``floor(p·B)``).

    Returns
    -------
    pandas.DataFrame
        One row per group: the keys, ``ece`` (at the snapped edges), ``n``, ``W``, ``n_bins``,
        ``bound`` (the certified :math:`|\mathrm{ECE}_{exact} - \mathrm{ECE}| \le` bound),
        ``ece_lower`` and ``ece_upper`` (``ece`` ∓ ``bound``, clipped at 0), ``edge_cells``
        (the cells the edges cut), ``exact`` (True when no edge cuts a cell), ``binning``.

    Notes
    -----
    With residual sums :math:`R_b = \sum_{i \in b} w_i (y_i - p_i)`, moving rows between bins
    changes :math:`\sum_b |R_b|` by at most :math:`\sum_b |R_b' - R_b| \le 2 \sum_{i \in A}
    w_i |y_i - p_i|` (A: the rows whose bin changes, each in the symmetric difference of two
    bins). Every row of A lies in a cell that holds an edge, and with binary labels
    :math:`\sum_{i \in c} w_i |y_i - p_i| = swy_c + swp_c - 2\,swyp_c`, a sum the store
    keeps per cell. So :math:`|\mathrm{ECE}_{exact} - \mathrm{ECE}| \le (2/W)\sum_{c \in
    \mathrm{edge\ cells}} (swy_c + swp_c - 2\,swyp_c)`. An equal-mass edge lies between the
    order statistics of ranks :math:`\lfloor h \rfloor` and :math:`\lceil h \rceil`,
    :math:`h = (N - 1)k/B`, which the cells' cumulative weights locate exactly; both cells
    count as edge cells. Only the L1 norm is bounded this way.

    Examples
    --------
    >>> import numpy as np, pandas as pd, sqlcal
    >>> from sqlcal.monitor.stored import bounded_ece
    >>> rng = np.random.default_rng(1)
    >>> p = rng.uniform(0, 1, 400)
    >>> df = pd.DataFrame({"p": p, "y": (rng.random(400) < p).astype(int),
    ...                    "t": pd.Timestamp("2026-11-01") + pd.to_timedelta(
    ...                        rng.integers(0, 2 * 86400, 400), "s")})
    >>> _ = sqlcal.snapshot(df, score="p", label="y", time="t", store=":memory:",
    ...                     as_of="2026-11-03", prefix="bnd_", bins=(), ls_ece_sigma=(),
    ...                     smooth_grids=())
    >>> src = sqlcal.stored(":memory:", prefix="bnd_", maturity="all")
    >>> out = bounded_ece(src, bins=10)
    >>> exact = sqlcal.ece(df, score="p", label="y", bins=10, strategy="quantile").ece[0]
    >>> bool(out.ece_lower[0] <= exact <= out.ece_upper[0])
    True
    """
    served = getattr(src, "served", None)
    if not isinstance(served, _Server):
        raise OptionError("bounded_ece reads a stored window: pass sqlcal.stored(...)")
    if not (isinstance(bins, (int, np.integer)) and bins >= 1):
        raise OptionError(f"bins must be a positive integer, not {bins!r}")
    if strategy not in BOUNDED_STRATEGIES:
        raise OptionError(f"strategy must be one of {BOUNDED_STRATEGIES}, not {strategy!r}")
    if strategy == "quantile" and not src.integer_weights:
        raise OptionError("strategy='quantile': equal-mass edges from the stored cells need "
                          "whole-number weights (rows repeated w times); this window holds "
                          "fractional weights (snapshot with levels=True for exact edges)")
    K = int(served.spec["cells"])
    cells = served.cells()
    by = list(src.by)
    rows = []
    for key, part in (cells.groupby(by, sort=True, dropna=False) if by else [((), cells)]):
        key = key if isinstance(key, tuple) else (key,)
        part = part[part["W"] > 0].sort_values("cell")
        rows.append({**dict(zip(by, key)),
                     **snapped_bins_finish(part["cell"].to_numpy(np.int64),
                                           part["n"].to_numpy(np.int64),
                                           part["W"].to_numpy(float),
                                           part["swy"].to_numpy(float),
                                           part["swp"].to_numpy(float),
                                           part["swyp"].to_numpy(float),
                                           bins=bins, cells=K, strategy=strategy)})
    out = pd.DataFrame(rows, columns=[*by, "ece", "n", "W", "n_bins", "bound", "ece_lower",
                                      "ece_upper", "edge_cells", "exact"])
    out["binning"] = f"{strategy}({bins}) snapped to {K} cells"
    return src.present(out)


def snapped_bins_finish(cell, n, W, swy, swp, swyp, *, bins: int, cells: int,
                        strategy: str = "quantile") -> dict:
    """One group's ECE at edges snapped to cell boundaries and its certified bound, from the
    occupied cells (ids ascending, W > 0) and their sums; see :func:`bounded_ece`.

    Examples
    --------
    >>> one = np.ones(4)
    >>> d = snapped_bins_finish(np.array([0, 1, 2, 3]), np.ones(4, int), 2 * one,
    ...                         np.array([0.0, 1, 1, 2]), np.array([0.2, 0.6, 1.0, 1.4]),
    ...                         np.array([0.0, 0.3, 0.5, 1.4]), bins=2, cells=4,
    ...                         strategy="uniform")
    >>> round(d["ece"], 12), d["bound"], d["exact"]
    (0.1, 0.0, True)
    """
    cell, n, W, swy, swp, swyp = (np.asarray(x) for x in (cell, n, W, swy, swp, swyp))
    total = float(W.sum())
    if total <= 0:
        return {"ece": np.nan, "n": 0, "W": 0.0, "n_bins": 0, "bound": np.nan,
                "ece_lower": np.nan, "ece_upper": np.nan, "edge_cells": 0, "exact": True}
    if strategy == "quantile":
        # ranks 0 .. N-1 of the sample with each row repeated w times; cell c holds the ranks
        # [before_c, before_c + W_c)
        before = np.cumsum(W) - W
        h = (total - 1) * np.arange(1, bins) / bins
        low = np.searchsorted(before, np.floor(h), side="right") - 1
        high = np.searchsorted(before, np.minimum(np.ceil(h), total - 1), side="right") - 1
        # the cell holding rank floor(h) and every cell up to rank ceil(h)'s hold the edge;
        # rows of the lower cell and below join the lower bin (right-closed edges)
        edge = [set(range(lo, hi + 1)) for lo, hi in zip(low, high)]
        split = low
    else:
        position = np.arange(1, bins) * cells / bins  # the edge k/B in cell units
        on_boundary = np.isclose(position, np.round(position), rtol=0, atol=1e-9)
        # a left-closed edge inside cell c: cells < c join the lower bin, c is cut
        idx = np.floor(position + 1e-9).astype(np.int64)
        split = np.searchsorted(cell, idx, side="left") - 1
        edge = [set() if flat else set(np.flatnonzero(cell == c).tolist())
                for flat, c in zip(on_boundary, idx)]
    # bin of each occupied cell: the number of edges snapped below it
    b = np.searchsorted(np.sort(split), np.arange(len(cell)), side="left")
    resid = np.bincount(b, swy - swp, bins)
    weight = np.bincount(b, W, bins)
    ece = float(np.abs(resid).sum() / total)
    cut = sorted(set().union(*edge)) if len(edge) else []
    mass = swy + swp - 2 * swyp  # Σ w |y - p| per cell (binary labels)
    bound = float(2 * np.maximum(mass[cut], 0.0).sum() / total) if cut else 0.0
    return {"ece": ece, "n": int(n.sum()), "W": total, "n_bins": int((weight > 0).sum()),
            "bound": bound, "ece_lower": max(ece - bound, 0.0), "ece_upper": ece + bound,
            "edge_cells": len(cut), "exact": bound == 0.0}
