"""The metric catalogue: every family's declarations in one place, for the report, the SQL
export and the CLI.

Each family module under :mod:`sqlcal.metrics` declares, next to its metrics:

- ``NEEDS``: metric function name -> ``needs(src, options) -> [Summary]``, the summaries the
  metric reads before any follow-up (options complete: defaults filled in);
- ``FOLLOW_UP_NEEDS`` (optional): metric -> ``needs(src, options)``, the follow-up summaries an
  adaptive metric reads once its first-stage summaries are cached (score ranges of a few cells),
  so the planner runs the follow-ups of several metrics as one scan;
- ``REFINING`` (optional): ``(metric, option, value)`` -> the one-shot option to pass instead,
  for the forms that refine with follow-up passes over the rows (what one exported statement
  cannot hold; :func:`sqlcal.summary_sql` exports the levels for them); ``(metric, None, None)``
  for a metric whose every form refines.
"""

from __future__ import annotations

from types import ModuleType
from typing import Callable

from sqlcal.recalibration import corp
from sqlcal.recalibration import fits
from sqlcal.metrics import binned, cumulative, decision, distance, scores, smooth, tce
from sqlcal.metrics import lowrate

#: the metric families, in catalogue order (the calibration slope and the CORP decomposition
#: live with the fits they rest on)
FAMILIES: tuple[ModuleType, ...] = (binned, scores, cumulative, smooth, tce, distance, decision,
                                    fits, corp, lowrate)


def needs() -> dict[str, Callable]:
    """metric name -> its declared ``needs(src, options)``."""
    return {name: declare for family in FAMILIES
            for name, declare in getattr(family, "NEEDS", {}).items()}


def follow_up_needs() -> dict[str, Callable]:
    """metric name -> its declared ``follow_up_needs(src, options)``."""
    return {name: ask for family in FAMILIES
            for name, ask in getattr(family, "FOLLOW_UP_NEEDS", {}).items()}


def refining() -> dict[tuple, str]:
    """``(metric, option, value)`` -> the one-shot option that replaces a refining form."""
    return {key: instead for family in FAMILIES
            for key, instead in getattr(family, "REFINING", {}).items()}


def function(metric: str) -> Callable:
    """The public function of a declared metric."""
    for family in FAMILIES:
        if metric in getattr(family, "NEEDS", {}):
            return getattr(family, metric)
    raise ValueError(f"no declared metric {metric!r}; declared: {sorted(needs())}")
