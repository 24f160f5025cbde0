"""The metric registry: a metric is declared once, on its public function.

``@metric(...)`` sits on a metric's public function (above ``@checked``) and declares what every
table that lists metrics reads:

- ``needs(src, options) -> [Summary]``: the summaries the metric reads before any follow-up
  (options complete: defaults filled in); the planner fuses the needs of a report's metrics
  into the fewest scans, and :func:`sqlcal.summary_sql` exports them;
- ``follow_up(src, options) -> [Summary]`` (adaptive metrics): the next follow-up, from the
  frames cached so far ([] once every read is cached), so a report runs the follow-ups of
  several metrics as one scan;
- ``refining``: ``(option, value) -> the one-shot option to pass instead`` for the forms that
  refine with follow-up passes over the rows (one exported statement cannot hold them:
  :func:`sqlcal.summary_sql` exports the levels); ``(None, None)`` when every form refines;
- ``one_shot``: the options ``sql/`` and ``sqlcal sql`` export the metric with;
- ``caller_shaped``: its statement depends on data the caller passes (exported by
  :func:`sqlcal.summary_sql` with those options, not written to ``sql/``);
- ``report``: report name -> :class:`Report` (its columns in :func:`sqlcal.report`, under
  preset options: ``rmsce`` is ``ece`` with ``norm="l2"``), and ``report_bins`` when the
  report's ``bins=`` applies to it;
- ``trust``: result column -> report column (None: kept out of the wide table) for the facts
  that say how far to trust its numbers;
- ``cost``: ``options -> [Cost]``, checked against the budget before any work, and
  ``options``: the metric's own declared options where a name means something else in it.

This module imports only the option table: the report, the SQL export, the dbt package, the CLI
and the config schema read the registrations, after ``import sqlcal`` imported every family.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from sqlcal import options as _options


@dataclass(frozen=True)
class Report:
    """A metric's columns in :func:`sqlcal.report` under one report name: ``columns`` maps the
    result's columns to the report's, ``options`` are preset (the caller's come on top)."""

    columns: dict[str, str]
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Metric:
    """One registered metric (see the module's docstring for each field)."""

    name: str
    function: Callable
    needs: Callable
    follow_up: Callable | None = None
    refining: dict = field(default_factory=dict)
    one_shot: dict = field(default_factory=dict)
    caller_shaped: bool = False
    report: dict[str, Report] = field(default_factory=dict)
    report_bins: bool = False
    trust: dict[str, str | None] = field(default_factory=dict)

    def refines(self, chosen: dict) -> str | None:
        """The one-shot option replacing this metric's form under ``chosen`` options, when that
        form refines with follow-up passes over the rows (None when it is one-shot)."""
        return next((instead for (option, value), instead in self.refining.items()
                     if option is None or chosen.get(option) == value), None)


_METRICS: dict[str, Metric] = {}


def metric(*, needs: Callable, follow_up: Callable | None = None, refining: dict | None = None,
           one_shot: dict | None = None, caller_shaped: bool = False,
           report: dict[str, Report] | None = None, report_bins: bool = False,
           trust: dict[str, str | None] | None = None, cost: Callable | None = None,
           options: dict | None = None) -> Callable:
    """Register the decorated public function as a metric (see the module's docstring)."""

    def register(function: Callable) -> Callable:
        name = function.__name__
        if name in _METRICS:
            raise ValueError(f"metric {name!r} is registered already")
        taken = {r for m in _METRICS.values() for r in m.report} & set(report or {})
        if taken:
            raise ValueError(f"report names {sorted(taken)} belong to another metric")
        _METRICS[name] = Metric(name, function, needs, follow_up, dict(refining or {}),
                                dict(one_shot or {}), caller_shaped, dict(report or {}),
                                report_bins, dict(trust or {}))
        _options.declare(name, options=options, cost=cost)
        _options.declare_report_metrics({r: (function, spec.options, report_bins)
                                         for r, spec in (report or {}).items()})
        return function

    return register


def unregister(name: str) -> None:
    """Remove a registered metric, its report names and its declared options and cost (for a
    metric registered for a while, as a test's toy metric)."""
    m = _METRICS.pop(name)
    _options.forget(name, report_names=tuple(m.report))


def registered() -> dict[str, Metric]:
    """Every registered metric, by name, in the order they were registered."""
    return dict(_METRICS)


def get(name: str) -> Metric:
    """The registered metric ``name``."""
    if name not in _METRICS:
        raise ValueError(f"no registered metric {name!r}; registered: {sorted(_METRICS)}")
    return _METRICS[name]


def report_metrics() -> dict[str, tuple[Metric, Report]]:
    """Report name -> (its metric, its :class:`Report`), in registration order."""
    return {name: (m, spec) for m in _METRICS.values() for name, spec in m.report.items()}
