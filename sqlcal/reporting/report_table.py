"""Run a set of metrics over groups with one engine pass per summary, as one wide table.

The source is validated once (that pass also yields the totals summary); each binning is computed
once and shared by every metric that reads it, through the cache on the :class:`Source`.
"""

from __future__ import annotations

import inspect
import json
import math
from collections.abc import Mapping
from typing import Any, Callable, Iterator, Sequence

import pandas as pd

from sqlcal.inputs.groupkeys import key_value
from sqlcal.inputs.sources import Source
from sqlcal.metrics._registry import get, report_metrics
from sqlcal.options import checked, costs_report, declare
from sqlcal.query import executor, planner
from sqlcal.query.declared import Summary
from sqlcal.query.executor import as_source


class _Registered(Mapping):
    """A read-only view of the metric registry, read on each access (a metric registered later
    is in it): report name -> what the registration declares for it."""

    def __init__(self, value: Callable):
        self._value = value

    def __getitem__(self, name: str):
        metric, spec = report_metrics()[name]
        return self._value(metric, spec)

    def __iter__(self) -> Iterator[str]:
        return iter(report_metrics())

    def __len__(self) -> int:
        return len(report_metrics())


#: report metric name -> (function, preset options, {result column: report column}), as each
#: metric's registration declares it (``@metric(report=...)``)
METRICS: Mapping[str, tuple] = _Registered(lambda m, spec: (m.function, spec.options,
                                                             spec.columns))
#: report metric name -> {result column: report column} for the columns that say how far to
#: trust its numbers (exact or grid, the grid's bound, the weight kind, the confidence level,
#: the bins), as its registration declares them (``@metric(trust=...)``). A report column that
#: several metrics map to (``weight_kind``, ``exact``) is one column while they agree on every
#: group; a metric that disagrees gets its own ``<metric>_<column>`` beside it. None keeps a
#: fact out of the wide table (the bins: the metric's name and the report's ``bins=`` fix them);
#: every fact, None or not, travels in the ``trust`` column of the tidy tables (:func:`trust`),
#: hence in the JSON and the results table.
TRUST: Mapping[str, dict] = _Registered(lambda m, spec: m.trust)
#: the trust columns of every result read from a summary store (sqlcal.stored): the window's
#: periods, its maturity view, and whether the value is what a scan of those periods' rows gives
#: (``window_exact``) and how far from it it may be (``window_bound``; NaN for an estimate)
STORED_FACTS = ("window", "maturity", "window_exact", "window_bound")
DEFAULT_METRICS = (
    "ece", "rmsce", "mce", "ece_quantile", "brier", "log_loss", "calibration_in_the_large",
    "spiegelhalter", "hosmer_lemeshow", "cutoff_error", "kuiper",
)
SCHEMA_VERSION = 1


declare("report", cost=costs_report)


@checked
def report(
    data: Any,
    *,
    score: str | None = None,
    label: str | None = None,
    weight: str | None = None,
    by: str | Sequence[str] = (),
    where: Any = None,
    metrics: Sequence[str] = DEFAULT_METRICS,
    bins: int = 15,
    confidence: float | None = None,
    bootstrap: int | None = None,
    **source_options: Any,
) -> pd.DataFrame:
    """Compute several metrics per group and return them side by side.

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
    metrics : str or sequence of str, default DEFAULT_METRICS
        Names from :data:`METRICS` (one name is one metric); by default ``ece``, ``rmsce``,
        ``mce``, ``ece_quantile``, ``brier``, ``log_loss``, ``calibration_in_the_large``,
        ``spiegelhalter``, ``hosmer_lemeshow``, ``cutoff_error`` and ``kuiper``. An unknown name is
        an error listing the valid ones.
    bins : int, default 15
        Bins for the ECE family and the Brier decomposition (Hosmer–Lemeshow uses deciles).
    confidence : float, optional
        The level of every metric's interval or bounds (default: each metric's own, 0.95 for
        the intervals ``<metric>_lower``, ``<metric>_upper``; 0.9 for the cutoff error's
        bounds).
    bootstrap : int, optional
        Replicates of the binned errors' bootstrap (default: each metric's own, 1000; 0: no
        interval on them, and no second moments in the scan).
    **source_options
        Further options of :func:`sqlcal.source`, such as ``table=``, ``on_invalid=`` and
        ``soft_labels=``.

    Returns
    -------
    pandas.DataFrame
        One row per group: the keys, ``n``, ``W``, then each metric's columns (with
        ``on_invalid="drop"``, ``n_dropped`` after ``W``). The default metrics give ``ece``,
        ``rmsce``, ``mce``, ``ece_quantile``, ``brier``, ``log_loss``, ``citl``, ``oe_ratio``,
        ``spiegelhalter_z``, ``spiegelhalter_p``, ``hl_statistic``, ``hl_dof``, ``hl_p``,
        with ``<name>_lower`` and ``<name>_upper`` after ``ece``, ``rmsce``, ``mce``,
        ``ece_quantile``, ``brier``, ``log_loss``, ``citl`` and ``oe_ratio`` (their intervals,
        at the level in the ``confidence`` column; see :mod:`sqlcal.metrics.intervals`),
        ``cutoff_error``, ``cutoff_lower``, ``cutoff_upper``, ``kuiper`` and ``kuiper_p``; each
        metric's own function documents its value and the paper it comes from. Then what
        qualifies the numbers (:data:`TRUST`), after the metrics: by default ``weight_kind``
        (how the tests and bounds read the weights), ``exact`` (False when a metric ran on the
        score grid), ``cutoff_grid_bound``, ``cutoff_confidence`` (the level of
        [``cutoff_lower``, ``cutoff_upper``]) and ``kuiper_grid_bound``; a metric that
        disagrees with a shared one gets its own, e.g. ``kuiper_exact``.

    See Also
    --------
    metric_series : the same metrics per value of a time key.
    source : describe the data once and pass it to report.
    summary_sql : the SQL of each metric's summaries, to run elsewhere.

    Notes
    -----
    The summaries the chosen metrics need are fetched together before any metric is finished,
    so a summary shared by several metrics is computed once.

    Examples
    --------
    >>> import pandas as pd, sqlcal
    >>> df = pd.DataFrame({"p": [0.1, 0.2, 0.3, 0.4, 0.6, 0.7, 0.8, 0.9],
    ...                    "y": [0, 0, 1, 0, 1, 0, 1, 1], "m": ["a"] * 4 + ["b"] * 4})
    >>> out = sqlcal.report(df, score="p", label="y", by="m",
    ...                     metrics=["ece", "brier", "cutoff_error"])
    >>> out[["m", "n", "W", "ece", "brier", "cutoff_error", "cutoff_lower",
    ...      "cutoff_upper"]].round(6)
       m  n    W   ece  brier  cutoff_error  cutoff_lower  cutoff_upper
    0  a  4  4.0  0.35  0.175         0.175           0.0           1.0
    1  b  4  4.0  0.35  0.175         0.175           0.0           1.0
    >>> [c for c in out.columns if c.endswith(("_lower", "_upper")) and "cutoff" not in c]
    ['ece_lower', 'ece_upper', 'brier_lower', 'brier_upper']
    >>> out[["confidence", "weight_kind", "exact", "cutoff_grid_bound", "cutoff_confidence"]]
       confidence weight_kind  exact  cutoff_grid_bound  cutoff_confidence
    0        0.95   frequency   True                0.0                0.9
    1        0.95   frequency   True                0.0                0.9
    """
    metrics = [metrics] if isinstance(metrics, str) else list(metrics)  # "ece" is one metric
    src = as_source(data, score, label, weight=weight, by=by, where=where, **source_options)
    given = {k: v for k, v in (("confidence", confidence), ("bootstrap", bootstrap))
             if v is not None}
    chosen = {name: metric_options(name, _accepted(name, given), bins=bins) for name in metrics}
    planner.prefetch(src, needs(src, chosen), follow_ups(src, chosen))
    return wide(src, {name: METRICS[name][0](src, **chosen[name]) for name in metrics})


def wide(src: Source, frames: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """The report table from each metric's result (report name -> frame, in order): the keys,
    ``n``, ``W`` (and ``n_dropped``), each metric's columns under its report names, then the
    facts of :data:`TRUST` that qualify them, a shared column once. The frames are results as
    the user reads them: a column of sqlcal's that a key is named like is found, and placed,
    under its renamed name (:meth:`sqlcal.inputs.groupkeys.GroupKeys.own`)."""
    own = src.group_keys.own
    out, trusted = None, {}
    for name, values in frames.items():
        if out is None:
            first = [own(c) for c in ("n", "W", "n_dropped") if own(c) in values]
            out = values[[*src.key_names, *first]].copy()
        for column, target in METRICS[name][2].items():
            out[own(target)] = values[own(column)].to_numpy()
        facts = {**TRUST.get(name, {}), **{c: c for c in STORED_FACTS}}
        for column, target in facts.items():
            if target is None or own(column) not in values:
                continue
            fact = values[own(column)].to_numpy()
            if target in trusted and not _same(trusted[target], fact):
                target = f"{name}_{column}"
            trusted.setdefault(target, fact)
    for target, fact in trusted.items():
        out[own(target)] = fact
    return out


#: a metric's interval of its first statistic: the population value's confidence interval, or
#: (a metric without one) certified bounds; the cutoff error has both: its interval is the
#: one the tidy tables carry, its certified bounds stay in the wide table (cutoff_lower, ...)
BOUNDS = (("ci_lower", "ci_upper"), ("lower_bound", "upper_bound"))


def statistic_bounds(mapping: dict, values: pd.DataFrame) -> dict[str, tuple[str, str]]:
    """Per statistic of a report metric (``mapping``: its result columns), the result columns
    of its interval: the metric's :data:`BOUNDS` for its first statistic, ``<column>_lower``
    and ``<column>_upper`` for another (``oe_ratio``, the decomposition's terms). The tidy
    tables give each statistic its interval as ``lower``, ``upper``, not rows of their own."""
    out = {}
    first = next(iter(mapping))
    pair = next(((lo, hi) for lo, hi in BOUNDS if lo in values and hi in values), None)
    if pair is not None:
        out[first] = pair
    for column in mapping:
        lo, hi = f"{column}_lower", f"{column}_upper"
        if column not in out and lo in mapping and hi in mapping:
            out[column] = (lo, hi)
    return out


def statistics(mapping: dict, values: pd.DataFrame) -> list[str]:
    """The statistics of a report metric: its mapped columns but the bounds of any of them."""
    bounds = {c for pair in statistic_bounds(mapping, values).values() for c in pair}
    bounds |= {c for pair in BOUNDS for c in pair if all(b in values for b in pair)}
    return [c for c in mapping if c not in bounds]


def trust(name: str, values: pd.DataFrame) -> list[str]:
    """Per row of a metric's result, the facts of :data:`TRUST` that qualify it, as a JSON object
    (sorted keys; NaN as null): the ``trust`` column of the tidy tables, the JSON's metric
    records and the results table (``{}`` for a metric with none)."""
    # some come with an option only; a stored window's facts come with every metric
    columns = [c for c in (*TRUST.get(name, {}), *STORED_FACTS) if c in values]
    return [json.dumps({c: _plain(row[c]) for c in columns}, sort_keys=True)
            for _, row in values[columns].iterrows()] if columns else ["{}"] * len(values)


def _same(a, b) -> bool:
    return len(a) == len(b) and all(x == y or (_plain(x) is None and _plain(y) is None)
                                    for x, y in zip(a, b))


def _plain(v):
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def needs(src: Source, metrics: dict[str, dict]) -> list[Summary]:
    """The first-stage summaries that ``metrics`` (report name -> options) read, as each
    metric's registration declares them (``@metric(needs=...)``). Whether weights are whole
    numbers is learnt first (one ungrouped aggregate): the variances of frequency weights read
    the Σw-sums, so the scans leave out the variance weight's own."""
    executor.learn_weight_kind(src)
    out = []
    for name, options in metrics.items():
        metric = _metric(name)
        out += metric.needs(src, {**_defaults(metric.function), **options})
    return out


def summary_steps(src: Source, metrics: dict[str, dict]) -> list[tuple[str, Any]]:
    """The scans that compute the metrics' shared summaries, as ``(description, run)`` pairs,
    each ``run()`` one engine pass: the planner fuses totals, bins and cells into one (a
    scheduled run calls them one by one to show progress)."""
    return planner.steps(src, needs(src, metrics), follow_ups(src, metrics))


def follow_ups(src: Source, metrics: dict[str, dict]) -> list:
    """Each adaptive metric's next follow-up (``ask(src) -> [Summary]``, its registered
    ``follow_up`` bound to its options), for the planner to run them shared: quantile ECE and
    Hosmer-Lemeshow read the levels around their edges in one pass."""
    out = []
    for name, options in metrics.items():
        metric = _metric(name)
        if metric.follow_up is not None:
            out.append(lambda src, ask=metric.follow_up,
                       o={**_defaults(metric.function), **options}: ask(src, o))
    return out


def metric_options(name: str, options: dict | None = None, bins: int | None = None) -> dict:
    """A report metric's options: its preset, then ``options``; the report's ``bins`` for the
    metrics registered to take it (the ECE family and the Brier decomposition) unless set."""
    metric, spec = report_metrics()[name]
    chosen = {**spec.options, **(options or {})}
    if bins is not None and metric.report_bins:
        chosen = {"bins": bins, **chosen}
    return chosen


def _accepted(name: str, options: dict) -> dict:
    """The report-wide ``options`` that the report metric ``name``'s function takes."""
    taken = inspect.signature(_metric(name).function).parameters
    return {k: v for k, v in options.items() if k in taken}


def takes_bins(name: str) -> bool:
    """Whether the report's ``bins=`` applies to the report metric ``name``."""
    found = report_metrics().get(name)
    return found is not None and found[0].report_bins


def _metric(name: str):
    # a report name, or a registered metric's own name (a catalogue metric outside the report)
    found = report_metrics().get(name)
    return found[0] if found is not None else get(name)


def _defaults(function) -> dict:
    return {k: p.default for k, p in inspect.signature(function).parameters.items()
            if p.default is not inspect.Parameter.empty}


def to_json(table: pd.DataFrame, src_description: dict) -> str:
    """The report as JSON with a schema version; NaN and infinities become null, except in a
    group key (``src_description["by"]``), where NULL is null and NaN and infinities are the
    strings ``"NaN"``, ``"Infinity"`` and ``"-Infinity"``
    (:func:`sqlcal.inputs.groupkeys.key_value`): two groups stay two."""
    def clean(v):
        if v is None or v is pd.NA or v is pd.NaT:
            return None
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if hasattr(v, "item"):
            return clean(v.item())
        if hasattr(v, "isoformat"):
            return v.isoformat()
        return v

    keys = set(src_description.get("by") or ())
    rows = [{k: key_value(v) if k in keys else clean(v) for k, v in row.items()}
            for row in table.to_dict(orient="records")]
    return json.dumps({
        "schema_version": SCHEMA_VERSION,
        "sqlcal_version": _version(),
        "source": src_description,
        "columns": list(table.columns),
        "rows": rows,
    }, indent=2)


def describe(src: Source) -> dict:
    out = {"score": src.score, "label": src.label, "weight": src.weight,
           "by": list(src.key_names),
           "on_invalid": src.on_invalid}
    if src.sampling_rate is not None:  # negative downsampling: the log's design
        out["negative_sampling_rate"] = src.sampling_rate
    if src.training_rate is not None:  # the training design the scores were corrected for
        out["training_negative_rate"] = src.training_rate
    if src.sampling_rate is not None or src.training_rate is not None:
        out["score_correction"] = src.score_correction
    return out


def _version() -> str:
    from sqlcal._version import __version__

    return __version__
