"""The declared options of every public function: one table, checked at the boundary.

The Python API (through :func:`checked`), the CLI and the TOML config (through :func:`check`)
read the same table, so an option means the same thing and is refused with the same message
wherever it comes from. Every option has a type, a range and a one-line description
(:data:`OPTIONS`); where a name means something else in one function, that function declares its
own entry (:data:`OVERRIDES`; one name per concept is a later rename).

Options whose cost grows with their value (bins, cells, grid sizes, kernel widths, bootstrap
replicates) are checked against :data:`BUDGET` before any query runs or any array is allocated:
the error says what the value would take, the budget, and the value to pass instead. Raise the
budget for one block with :func:`budget`, or for the process by assigning ``BUDGET``.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import difflib
import functools
import inspect
import math
import numbers
import types
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import numpy as np


class OptionError(ValueError):
    """An option of a public function has the wrong type or is out of its range."""


class BudgetError(OptionError):
    """An option would cost more cells, memory or query size than :data:`BUDGET` allows."""


# -- the table ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Option:
    """One option: its kind, range and meaning.

    ``kind`` is ``"int"``, ``"float"``, ``"bool"``, ``"choice"`` (one of ``choices``),
    ``"column"`` (a column name), ``"columns"`` (a name or a sequence of names), ``"text"``,
    ``"count"`` (a whole number, int or float), ``"floats"`` (a number or a non-empty sequence of
    numbers), ``"metrics"`` (report metric names) or ``"any"`` (checked by the function itself).
    ``low``/``high`` bound numbers (``open_low``/``open_high`` exclude the bound); ``optional``
    allows None; ``power_of_two`` asks an int to be one. ``renamed`` refuses an old spelling
    with the new one named, never reading it under its new meaning: (old value, new value)
    pairs of a choice, or a sentence saying which option took over the values a renamed
    option's name used to take (shown when a value fails).
    """

    kind: str
    description: str
    choices: tuple = ()
    low: float | None = None
    high: float | None = None
    open_low: bool = False
    open_high: bool = False
    optional: bool = False
    power_of_two: bool = False
    renamed: tuple | str = ()

    def allowed(self) -> str:
        """What the option accepts, in words."""
        if self.kind == "choice":
            text = "one of " + ", ".join(repr(c) for c in self.choices)
        elif self.power_of_two:
            text = "an integer power of two" + _range(self)
        elif self.kind in ("int", "float") and self.low == 0 and self.high is None:
            sign = "a positive" if self.open_low else "a non-negative"
            text = f"{sign} {'integer' if self.kind == 'int' else 'finite number'}"
        elif self.kind == "int" and self.low == 1 and self.high is None:
            text = "a positive integer"
        elif self.kind in ("int", "float", "count", "floats"):
            noun = {"int": "an integer", "float": "a finite number", "count": "a whole number",
                    "floats": "a finite number (or a non-empty sequence of them)"}[self.kind]
            text = noun + _range(self)
        else:
            text = {"bool": "True or False", "column": "a column name (str)",
                    "columns": "a column name or a sequence of column names",
                    "text": "a string", "metrics": "a metric name or a sequence of metric names",
                    "any": "any value the function documents"}[self.kind]
        return text + (", or None" if self.optional else "")


def _range(o: Option) -> str:
    if o.low is not None and o.high is not None:
        return (f" in {'(' if o.open_low else '['}{_num(o.low)}, "
                f"{_num(o.high)}{')' if o.open_high else ']'}")
    if o.low is not None:
        return f" {'>' if o.open_low else '>='} {_num(o.low)}"
    if o.high is not None:
        return f" {'<' if o.open_high else '<='} {_num(o.high)}"
    return ""


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"


COLUMN = Option("column", "a column of the table", optional=True)

#: every option name and its usual meaning
#: where a score on a bin edge falls, after the library of the same name (sqlcal.inputs.grids
#: draws the edges of each)
CONVENTIONS = ("sqlcal", "sklearn", "netcal", "relplot")

OPTIONS: dict[str, Option] = {
    # the data
    "score": Option("column", "column of the predicted probability of the positive class",
                    optional=True),
    "label": Option("column", "column of the outcome (0/1, booleans, or soft labels in [0, 1])",
                    optional=True),
    "weight": Option("column", "column of non-negative row weights", optional=True),
    "baseline": Option("column", "a second score column of the same rows: the baseline model of "
                       "a paired comparison", optional=True),
    "by": Option("columns", "group keys: one result row per group"),
    "where": Option("any", "a condition over the table's columns, applied in the engine first",
                    optional=True),
    "table": Option("text", "the table inside a database given by path or URL", optional=True),
    "on_invalid": Option("choice", "invalid rows: 'raise' an error, or 'drop' and count them",
                         choices=("raise", "drop")),
    "soft_labels": Option("bool", "accept labels strictly between 0 and 1"),
    "negative_sampling_rate": Option("any", "the fraction of negatives kept (in (0, 1]), or its "
                                     "column: negatives weigh 1/r", optional=True),
    "training_negative_rate": Option("any", "the rate the model's training negatives were kept "
                                     "at (in (0, 1]), or its column: every score is judged as "
                                     "p/(p + (1 - p)/r)", optional=True),
    "score_correction": Option("bool", "training_negative_rate= the log's negative_sampling_rate "
                               "(a number)"),
    # binning
    "bins": Option("int", "number of bins", low=1),
    "strategy": Option("choice", "how bins are cut: equal width, equal mass on quantile edges, or "
                       "equal mass as uncertainty-calibration cuts it",
                       choices=("uniform", "quantile", "uncertainty_calibration", "logit")),
    "deciles": Option("int", "the calibration ratio per equal-mass bin of the score, this many "
                      "bins", low=1, high=1024, optional=True),
    "logit_range": Option("any", "strategy='logit': the scores (lo, hi) its log-odds bins span "
                          "(default: the observed range)", optional=True),
    "convention": Option("choice", "equal-width bin edges of sqlcal or of a peer library",
                         choices=CONVENTIONS),
    "cells": Option("int", "score cells of the fine histogram (default 1024)", low=1,
                    optional=True, power_of_two=True),
    # inference
    "ci": Option("choice", "the interval of each bin's observed rate",
                 choices=("wilson", "clopper-pearson"), optional=True),
    "confidence": Option("float", "confidence level of an interval or of a pair of bounds",
                         low=0, high=1,
                         open_low=True, open_high=True),
    "weight_kind": Option("choice", "how weights enter a variance", choices=("auto", "frequency",
                                                                             "sampling")),
    "dof": Option("choice", "degrees of freedom of the Hosmer-Lemeshow test",
                  choices=("out_of_sample", "in_sample")),
    "epsilon": Option("float", "tolerance to certify against", low=0, optional=True),
    "alpha": Option("float", "significance level of the per-bin tests", low=0, high=1,
                    open_low=True, open_high=True),
    # smoothing
    "sigma": Option("float", "kernel bandwidth in probability units (default: relplot's fixed "
                    "point)", low=0, high=1, open_low=True, optional=True),
    "bootstrap": Option("int", "bootstrap replicates for an interval (0: none)", low=0,
                        high=1_000_000),
    "seed": Option("int", "seed of the random generator", low=0),
    "points": Option("int", "evaluation points of the smoothed curve on [0, 1]", low=2),
    "clip": Option("float", "scores are clipped to [clip, 1 - clip] before the logit", low=0,
                   high=0.5, open_low=True, open_high=True),
    # TCE
    "n_min": Option("count", "fewest rows of a PAVA-BC bin (default N/20)", low=0, optional=True),
    "n_max": Option("count", "most rows of a PAVA-BC bin (default N/5)", low=0, optional=True),
    "tail_rule": Option("choice", "how PAVA-BC treats the last bin", choices=("code", "paper")),
    # distances
    "grid": Option("int", "points k/grid added to the levels of the coupling LP", low=1),
    "lower_levels": Option("int", "levels (buckets) the lower-distance LP runs on", low=1),
    "max_levels": Option("int", "most rows of mixed cells fetched as levels with method 'auto'",
                         low=1),
    "lipschitz": Option("float", "Lipschitz constant of the test functions", low=0,
                        open_low=True),
    # decisions
    "threshold": Option("floats", "decision thresholds in [0, 1]", low=0, high=1, optional=True),
    "payoffs": Option("any", "a (k, 2) array of payoffs (u(a, 0), u(a, 1))", optional=True),
    "tie": Option("choice", "the action taken at a score equal to the threshold",
                  choices=("higher", "lower")),
    "rules": Option("any", "interval rules (l, r, a, b)", optional=True),
    "actions": Option("any", "actions (a, b) to find the best rule among", optional=True),
    "validation": Option("any", "a second dataset (a Source or data) estimating the error",
                         optional=True),
    "validation_label": Option("column", "the label column of the validation data",
                               optional=True),
    "method": Option("choice", "how the isotonic fit is computed",
                     choices=("auto", "exact", "grid", "engine"), renamed=(("levels", "exact"),
                                                                          ("cells", "grid"))),
    "scoring": Option("choice", "the proper score decomposed", choices=("brier", "log_loss")),
    # recalibration
    "interpolation": Option("choice", "between blocks of the isotonic map",
                            choices=("linear", "step")),
    "feature": Option("choice", "Platt's regressor: the score's logit or the score",
                      choices=("logit", "score")),
    "smoothed_targets": Option("bool", "Platt's smoothed targets instead of 0/1"),
    "modified": Option("bool", "fall back to the group's rate when the fit is miscalibrated"),

    # reports
    "metrics": Option("metrics", "metric names of sqlcal.reporting.report_table.METRICS"),
    "baseline_data": Option("any", "the baseline model's rows, when it scored other rows (an "
                            "unpaired comparison)", optional=True),
    "baseline_where": Option("any", "a filter of the baseline model's rows (an unpaired "
                             "comparison of two parts of one table)", optional=True),
    "time": Option("column", "the time key of a series"),
    # multiclass
    "format": Option("choice", "long (one row per class) or wide (a column per class)",
                     choices=("long", "wide")),
    "example": Option("column", "long format: the example id column", optional=True),
    "cls": Option("column", "long format: the class column", optional=True),
    "prob": Option("column", "long format: the probability column", optional=True),
    "probs": Option("columns", "wide format: one probability column per class", optional=True),
    "logits": Option("columns", "wide format: one logit column per class (instead of probs)",
                     optional=True),
    "logit": Option("column", "long format: the logit column (instead of prob)", optional=True),
    # class averages (sqlcal.classwise)
    "value": Option("column", "the metric's result column averaged over classes",
                    optional=True),
    "power": Option("float", "the power of the class average (1: the mean)", low=1),
    "metric_options": Option("any", "the metric's own options, checked by the metric",
                             optional=True),
    "keys": Option("columns", "columns carried along for by="),
    # diagrams
    "x": Option("choice", "the cumulative plot's horizontal axis: share of weight or score",
                choices=("weight", "score")),
    "group": Option("any", "draw this group only (keys -> values)", optional=True),
    "ax": Option("any", "the matplotlib Axes to draw on", optional=True),
    "scale": Option("choice", "the reliability diagram's axes: probability, log-odds, or "
                    "log-odds when the base rate is below 5%", choices=("auto", "linear", "logit")),
}

#: where an option takes other values in one function: the functions below the metric layer and
#: the fits here; a metric declares its own with its registration (:func:`declare`)
OVERRIDES: dict[str, dict[str, Option]] = {
    "isotonic": {"cells": Option("int", "grid cells of the first fit", low=2,
                                 power_of_two=True)},
    "platt": {"epsilon": Option("float", "cutoff error a modified Platt fit may keep", low=0,
                                optional=True)},
    "multiclass": {
        "mode": Option("choice", "top-label or class-wise calibration",
                       choices=("top_label", "classwise")),
        "label": Option("column", "the true class (wide) or the 0/1 class indicator (long)"),
        "classes": Option("any", "wide format: the label value of each probability column",
                          optional=True),
        "sum_tolerance": Option("float", "largest |sum of an example's probabilities - 1| "
                                "accepted", low=0),
    },
    "temperature_scaling": {
        "format": Option("choice", "long (one row per class) or wide (a column per class)",
                         choices=("long", "wide")),
        "label": Option("column", "the true class (wide) or the 0/1 class indicator (long)"),
        "classes": Option("any", "wide format: the label value of each probability column",
                          optional=True),
        "sum_tolerance": Option("float", "largest |sum of an example's probabilities - 1| "
                                "accepted", low=0),
        "clip": Option("float", "probabilities below it are raised to it before their log",
                       low=0, high=1, open_low=True, open_high=True, optional=True),
        "max_scans": Option("int", "the most Newton scans of the rows", low=1),
    },
    "metric_series": {"metrics": Option("metrics", "metric names, or a dict of metric name to "
                                        "its options")},
    "cumulative_plot": {"cells": Option("int", "score cells the curve is drawn at", low=1)},
}
# -- monitoring (sqlcal.monitor) and segments (sqlcal.audit.discovery) --------------------------
_STORE = Option("any", "the summary store: a DuckDB path, a connection URL or an Ibis backend")
_KEYS = Option("columns", "group keys (default: all the stored or given ones)", optional=True)
_WHEN = Option("any", "a date or timestamp (str, datetime, numpy or pandas)", optional=True)
_AGE = Option("text", "an age such as '30d' or '12h'")
_REQUIRED = {"score": Option("column", OPTIONS["score"].description),
             "label": Option("column", "column of the outcome (0/1)")}
OVERRIDES["snapshot"] = {
    **_REQUIRED, "time": Option("column", "the prediction timestamp periods are cut on"),
    "store": _STORE,
    "grain": Option("choice", "the period of one snapshot", choices=("day", "hour")),
    "start": _WHEN, "end": _WHEN, "as_of": _WHEN,
    "label_time": Option("column", "when each label became known", optional=True),
    "unknown": Option("choice", "a NULL label: a negative so far, or missing",
                      choices=("negative", "missing")),
    "delays": Option("floats", "the delay buckets' edges, in days", low=0),
    "horizon": _AGE, "settle": _AGE,
    "prefix": Option("text", "the prefix of the store's table names"),
    "cells": Option("int", "score cells of the stored histogram", low=2, high=2**20,
                    power_of_two=True),
    "bins": Option("any", "equal-width binnings stored: counts, or (count, convention) pairs"),
    "ls_ece_sigma": Option("any", "LS-ECE noise scales whose logit grids are stored (a "
                           "sequence of positive numbers, possibly empty)"),
    "smooth_grids": Option("any", "smooth ECE evaluation grids stored (node counts)"),
    "levels": Option("bool", "also store the levels (one row per distinct score)"),
    "max_levels": Option("int", "most distinct scores of one group and period stored as "
                         "levels", low=1),
    "force": Option("bool", "rewrite periods whose fingerprint did not change"),
    "events": Option("any", "the events layout: a table of (key, outcome, event time) joined "
                     "to the predictions", optional=True),
    "key": Option("column", "the example id joining events= to the predictions",
                  optional=True),
}
OVERRIDES["stored"] = {
    "store": _STORE, "by": _KEYS, "start": _WHEN, "end": _WHEN, "at": _WHEN,
    "maturity": Option("text", "'mature', 'all', 'lag:<a>d' or 'adjusted'"),
    "prefix": Option("text", "the prefix of the store's table names"),
    "spec": Option("text", "the snapshot spec's hash, when the store holds several",
                   optional=True),
    "horizon": _AGE, "settle": _AGE,
}
OVERRIDES["detect"] = {
    "store": _STORE, "by": _KEYS,
    "bins": Option("int", "bet bins of equal weight on the reference window", low=1, high=64),
    # a tolerance of 1 already admits any rate at every score (absolute) or any rate from 0 to
    # twice the score (relative); above it the null says nothing, and 1e308 overflowed
    "tolerance": Option("floats", "the null's tolerance (a, r): |E[y | p] - p| <= a + r p",
                        low=0, high=1),
    "alpha": Option("float", "bound on the probability of any false alarm over the checks",
                    low=0, high=1, open_low=True, open_high=True),
    "checks": Option("int", "daily checks the false-alarm bound covers", low=1),
    "windows": Option("floats", "plug-in windows of the averaged detector, in days", low=1),
    "reference": Option("any", "(first day, last day) whose scores set the bet bins",
                        optional=True),
    "reference_days": Option("int", "mature days of the default reference window", low=1),
    # horizon is the labels' maturity age, as in snapshot and stored; a number of daily checks
    # (its meaning before 0.x renamed it) is refused, never read as days
    "horizon": dataclasses.replace(_AGE, renamed="the number of daily checks the false-alarm "
                                   "bound covers is checks="),
    "settle": _AGE, "at": _WHEN,
    "lag": Option("text", "'lag:<a>d': an early stream on the labels known at age a",
                  optional=True),
    "null": Option("choice", "calibrated within tolerance, or as calibrated as the reference "
                   "window", choices=("calibrated", "reference")),
    "prefix": Option("text", "the prefix of the store's table names"),
    "spec": Option("text", "the snapshot spec's hash, when the store holds several",
                   optional=True),
}
_SEARCH = {
    **_REQUIRED, "by": Option("columns", OPTIONS["by"].description, optional=True),
    "features": Option("columns", "the columns whose values define segments"),
    "max_depth": Option("int", "most features in one segment's conjunction (bounded by the "
                        "query-terms budget on its GROUP BY branches)", low=1, optional=True),
    "min_support": Option("float", "least weight Σw of an eligible segment (default "
                          "max(1000, 1e-3·W) per group)", low=0, optional=True),
    "min_expected": Option("float", "least expected positives and negatives of a segment",
                           low=0),
    "split": Option("columns", "numeric key columns mixed into the fold assignment"),
    "fdr": Option("choice", "the multiple-testing control",
                  choices=("bh", "by", "bonferroni", "none")),
    "alpha": Option("float", "false discovery rate (or family-wise level) controlled", low=0,
                    high=1, open_low=True, open_high=True),
    "top_k": Option("int", "segments fold A passes to fold B's tests", low=1, optional=True),
    "screen_z": Option("float", "least |z| on fold A for a segment to be tested", low=0),
    "max_candidates": Option("int", "most candidate segments searched (a budget)", low=1),
    "strategy": Option("choice", "group the base table at every level, or build the reduced "
                       "cube once (two base-table scans whatever the depth)",
                       choices=("lattice", "cube"), renamed=(("levels", "lattice"),)),
    "weight_kind": Option("choice", OPTIONS["weight_kind"].description,
                          choices=OPTIONS["weight_kind"].choices, optional=True),
}
OVERRIDES["segments"] = {
    **_SEARCH, "mode": Option("choice", "split the rows into search and test folds, or test "
                              "every segment on all rows", choices=("split", "full")),
    "effect": Option("choice", "search the net residual, the binned calibration error, or "
                     "SliceLine's score of the squared error",
                     choices=("residual", "ece", "sliceline")),
    "bins": Option("int", "score bins of effect='ece'", low=1),
    "min_expected": Option("float", "least expected positives and negatives of a segment "
                           "(default 10; 0 with effect='sliceline')", low=0, optional=True),
    "sliceline_alpha": Option("float", "SliceLine's weight of the error term against the size "
                              "term (effect='sliceline')", low=0, high=1, open_low=True)}
OVERRIDES["multicalibration"] = {
    **_SEARCH, "max_depth": Option("int", "most features in one segment's conjunction (bounded "
                                   "by the query-terms budget)", low=1, optional=True),
    "metric": Option("choice", "the worst-case quantity over the segments",
                     choices=("residual", "binned", "ece")),
    "bins": Option("int", "score bins of the binned quantities", low=1)}
OVERRIDES["segment_fix"] = {
    **_SEARCH, "segments": Option("any", "segments found by sqlcal.segments (default: search "
                                  "on the fitting fold)", optional=True),
    "holdout": Option("float", "share of the rows held out to accept the fix", low=0, high=1,
                      open_low=True, open_high=True),
    "penalty": Option("any", "'auto' (chosen on the holdout) or a ridge penalty >= 0"),
    "max_segments": Option("int", "most segments one fix corrects", low=1),
    "kind": Option("choice", "a logit shift per segment, an intercept and a slope (Platt), or "
                   "an isotonic map per segment of a decision list",
                   choices=("shift", "platt", "isotonic"))}
#: report(): None leaves each metric its own level and replicates
OVERRIDES["report"] = {
    "confidence": Option("float", "confidence level of every interval or pair of bounds (None: "
                         "each metric's own)", low=0, high=1, open_low=True, open_high=True,
                         optional=True),
    "bootstrap": Option("int", "bootstrap replicates of the binned intervals (None: each "
                        "metric's own; 0: none)", low=0, high=1_000_000, optional=True)}
OVERRIDES["source"] = {"score": Option("column", OPTIONS["score"].description),
                       "label": Option("column", OPTIONS["label"].description)}

#: keywords renamed in 0.x, per function: old -> new. Passing the old one is an OptionError
#: naming the new one (not the unknown keyword's TypeError), so code written for the old name
#: says what to change
RENAMED: dict[str, dict[str, str]] = {
    "detect": {"maturity_horizon": "horizon"},
    # the cutoff error a modified Platt fit may keep is the cutoff error's epsilon; the
    # probabilities' sum tolerance is not the detector's tolerance (a, r)
    "platt": {"tolerance": "epsilon"},
    "multiclass": {"tolerance": "sum_tolerance"},
    # the logit grid's spacing is the grid_step column it reports
    "ls_ece": {"step": "grid_step"},
    "temperature_scaling": {"tolerance": "sum_tolerance"},
}

#: the keywords every metric forwards to :func:`sqlcal.source`
SOURCE_OPTIONS = ("table", "on_invalid", "soft_labels", "negative_sampling_rate",
                  "training_negative_rate", "score_correction")


def option(function: str, name: str) -> Option:
    """The declared option ``name`` of ``function``."""
    found = OVERRIDES.get(function, {}).get(name) or OPTIONS.get(name)
    # a keyword added to a function before the table knows it is passed on unchecked (a test
    # asserts that every keyword is declared)
    return found or Option("any", "not declared yet", optional=True)


# -- budgets -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Budget:
    """What one call may spend, per group (see each option's cost in :func:`costs`).

    - ``cells``: rows of one summary, nodes of one numpy grid, or values of an edge table
      (equal-mass ECE on 10^5 rows: 2.8 s at B = 1000, 14 s at B = 3000; the default admits
      B = 4096).
    - ``bytes``: memory of one numpy finish.
    - ``terms``: literals in one query (a CASE branch per bin edge: 10,000 cost 12 s to compile
      and run on 10^5 rows).
    - ``resamples``: bootstrap replicates (smooth ECE: about 6 ms each at the default bandwidth
      search, so 2,000 take about 13 s per group).
    - ``lp_variables``: variables of one linear program (HiGHS on the coupling LP of
      :func:`sqlcal.distance_to_calibration`, 2,000 rows: 0.6 s at 25,000 variables, 5 s at
      139,000, 92 s at 532,000).
    - ``group_cells``, ``group_resamples``: ``cells`` and ``resamples`` summed over the groups.
    - ``tests``: TCE's exact binomial tests (acceptance sets), all groups together.
    """

    cells: int = 2**24
    bytes: int = 2**30
    terms: int = 10_000
    resamples: int = 2_000
    lp_variables: int = 2**18
    #: the same costs summed over the groups of one call (``by=``): a per-group cost times the
    #: number of groups, checked once the first scan has counted them, before any further pass
    #: (:func:`check_groups`). At the default every metric with a cost per group fits 10^5
    #: groups with its default options but smooth ECE (20,481 grid nodes and points a group
    #: before its bandwidth is known: 13,106 groups fit)
    group_cells: int = 2**28
    group_resamples: int = 2**16
    #: exact binomial acceptance sets TCE computes in one call (one per bin; about 13 ms each,
    #: 50 ms for bins of 10^5 rows or more: 16,384 take 3.5 to 14 minutes)
    tests: int = 2**14


#: the budget every call is checked against; replace it, or use :func:`budget` for a block
BUDGET = Budget()


@contextlib.contextmanager
def budget(**limits: int) -> Iterator[Budget]:
    """Raise (or lower) the budget inside a ``with`` block:
    ``with sqlcal.options.budget(cells=2**28, bytes=8 * 2**30): ...``."""
    global BUDGET
    before = BUDGET
    BUDGET = dataclasses.replace(before, **limits)
    try:
        yield BUDGET
    finally:
        BUDGET = before


_UNITS = {"cells": "cells", "bytes": "bytes", "terms": "query terms",
          "resamples": "replicates", "lp_variables": "LP variables", "group_cells": "cells",
          "group_resamples": "replicates", "tests": "binomial tests"}
#: per-group resource -> the budget field of its total over the groups (:func:`check_groups`)
GROUP_TOTALS = {"cells": "group_cells", "resamples": "group_resamples"}


@dataclass(frozen=True)
class Cost:
    """What an option's value costs: ``amount`` of the budget's ``resource``."""

    option: str
    resource: str
    amount: float
    what: str


def _float(x: Any) -> float:
    """A value as a float for a cost estimate: an integer too large for a double is infinite."""
    try:
        return float(x)
    except OverflowError:
        return math.inf


def _ls_ece_grid(v: dict) -> tuple[float, float]:
    # smooth.ls_ece: the grid step δ; the dense node array spans logit(clip)..logit(1 - clip)
    # plus the kernel's half width each side (smooth._logit_masses), and the kernel has
    # 2·half + 1 nodes (smooth._kernel)
    sigma, clip = _float(v["noise_scale"]), _float(v["clip"])
    gaussian = v["noise"] == "gaussian"
    delta = _float(v.get("grid_step") or (min(sigma, 1.0) / 20 if gaussian
                                          else min(sigma, 1.0) / 200))
    if not delta > 0:  # a subnormal noise_scale: its step underflows, the grid is unbounded
        return math.inf, math.inf
    span = 2 * math.log((1 - clip) / clip)
    half = 8 * sigma / delta + 1 if gaussian else sigma / (2 * delta) + 2
    nodes = span / delta + 3 + 2 * half
    return nodes, 2 * half + 1


def _smooth_nodes(sigma: float | None) -> float:
    # smooth._ScoreHistogram.smooth: max(2000, 20/σ)//2 + 1 grid nodes; smooth_ece evaluates
    # max(10/σ, 200) points. Without sigma the fixed point stops above 2^-10.
    sigma = 2.0**-10 if sigma is None else _float(sigma)
    return max(2000.0, 20 / sigma) / 2 + 1 + max(10 / sigma, 200)


#: measured peak bytes per node (tracemalloc, 1e5 rows): LS-ECE about 90 (five node arrays,
#: the kernel and its curvature, FFT buffers); smooth ECE about 210-410 (the reflected signal is
#: three times the grid, FFT buffers)
LS_ECE_BYTES_PER_NODE = 96
#: bytes per replicate and node of LS-ECE's interval (smooth.ls_ece_interval: the deviations
#: kept for every replicate), and the chunk of draws and convolutions beside them (2^21 values
#: a chunk, up to 16 arrays of it). Measured (tracemalloc, 2·10^4 rows, 1,000 replicates):
#: 228 MB at σ = 0.1 (5,700 nodes), 701 MB at σ = 0.01 (56,000 nodes: 450 MB of deviations)
LS_ECE_REPLICATE_BYTES = 8
LS_ECE_CHUNK_BYTES = 2**21 * 8 * 16
SMOOTH_BYTES_PER_NODE = 400


def _bin_costs(option_name: str, bins: Any, strategy: str, convention: str) -> list[Cost]:
    if bins is None:
        return []
    if strategy in ("quantile", "uncertainty_calibration"):
        # cells.equal_mass_bins: each of up to B bins carries the B − 1 edges (columns e1..)
        return [Cost(option_name, "cells", _float(bins) * (_float(bins) - 1),
                     "equal-mass bin edges carried on every bin, B·(B−1) values per group")]
    out = [Cost(option_name, "cells", _float(bins), "equal-width bins per group")]
    if convention in ("sklearn", "netcal"):
        out.append(Cost(option_name, "terms", _float(bins) - 1,
                        f"CASE branches in the query, one per {convention} bin edge"))
    return out


def costs_binned(v: dict) -> list[Cost]:
    out = _bin_costs("bins", v.get("bins"), v.get("strategy", "uniform"),
                     v.get("convention", "sqlcal"))
    bins = _float(v.get("bins") or 15)
    # the interval's replicates: a few arrays of B x (bins + 1) x 3 (no interval above
    # BOOTSTRAP_BINS bins: too few rows a bin for it)
    if v.get("bootstrap") and bins <= BOOTSTRAP_BINS:
        out.append(Cost("bootstrap", "bytes", BOOTSTRAP_BYTES * _float(v["bootstrap"])
                        * (bins + 1), "memory of the binned interval's replicates per group"))
    return out


#: bytes per replicate and bin of the binned intervals' draws (sqlcal.metrics.intervals: the
#: normal draws, the deviations and two replicate sums, 3 doubles each)
BOOTSTRAP_BYTES = 4 * 3 * 8
#: the most bins a binned interval is drawn for (sqlcal.metrics.intervals)
BOOTSTRAP_BINS = 1024


def costs_cells(v: dict) -> list[Cost]:
    cells = v.get("cells")
    return [] if cells is None else [Cost("cells", "cells", _float(cells),
                                          "score cells of the histogram per group")]


#: the cells the cutoff error's interval draws its replicate walks on
#: (sqlcal.metrics.intervals.walk_interval)
WALK_CELLS = 256


def costs_cutoff(v: dict) -> list[Cost]:
    out = costs_cells(v)
    if v.get("bootstrap"):  # the interval's replicate walks: B x 256 values, a few arrays of
        # it, held for one group at a time (memory only: 0.02 s a group at B = 1,000, so no
        # total over the groups)
        walks = _float(v["bootstrap"]) * WALK_CELLS
        out.append(Cost("bootstrap", "bytes", 6 * 8 * walks, "memory of the interval's "
                        f"replicate walks per group (replicates x {WALK_CELLS} cells)"))
    return out


def costs_ls_ece(v: dict) -> list[Cost]:
    nodes, kernel = _ls_ece_grid(v)
    # the grid's step sets the cost: the caller's grid_step, else noise_scale's default one
    option = "grid_step" if v.get("grid_step") else "noise_scale"
    out = [Cost(option, "cells", nodes + kernel, "logit grid and kernel nodes per group"),
           Cost(option, "bytes", LS_ECE_BYTES_PER_NODE * (nodes + kernel),
                "memory of the convolutions per group")]
    if v.get("bootstrap"):  # the interval: each replicate convolves the whole grid twice
        # (about 0.6 ms at the default grid: 1,000 replicates take 0.6 s a group)
        out += [Cost("bootstrap", "resamples", _float(v["bootstrap"]),
                     "bootstrap replicates per group, each convolving the logit grid"),
                Cost("bootstrap", "bytes", LS_ECE_REPLICATE_BYTES * _float(v["bootstrap"])
                     * (nodes + kernel) + LS_ECE_CHUNK_BYTES,
                     "memory of the interval's replicates per group")]
    return out


def costs_smooth(v: dict) -> list[Cost]:
    nodes = _smooth_nodes(v.get("sigma"))
    out = [Cost("sigma", "cells", nodes, "kernel grid nodes and evaluation points per group"),
           Cost("sigma", "bytes", SMOOTH_BYTES_PER_NODE * nodes,
                "memory of the reflected convolution per group")]
    if "bootstrap" in v:
        out.append(Cost("bootstrap", "resamples", _float(v["bootstrap"]),
                        "bootstrap replicates per group, each a full smooth ECE"))
    if "points" in v:
        out.append(Cost("points", "cells", _float(v["points"]), "curve points per group"))
    return out


def costs_distance(v: dict) -> list[Cost]:
    out = [Cost("max_levels", "cells", _float(v.get("max_levels", 1)),
                "levels fetched per group")]
    if "grid" in v:
        # distance._lower_distance: m ≤ lower_levels levels, k ≤ grid + 1 + m points, 2·m·k
        levels = _float(v["lower_levels"])
        out += [Cost(name, "lp_variables", 2 * levels * (_float(v["grid"]) + 1 + levels),
                     "variables of the coupling LP, 2·L·(grid + 1 + L)")
                for name in ("grid", "lower_levels")]
    if v.get("bins") is not None:
        out.append(Cost("bins", "cells", _float(v["bins"]), "equal-width bins per group"))
    return out


def costs_tce(v: dict) -> list[Cost]:
    out = []
    if v.get("strategy") in ("uniform", "quantile"):
        # tce._cut_cells tests every bin edge against the 1024 cells of the histogram
        out.append(Cost("bins", "cells", _float(v["bins"]) * 1024,
                        "bin edges tested against the 1024 score cells per group, B·1024"))
    if v.get("bootstrap"):  # the interval: each replicate cuts the bins again over at most
        # 2,048 score units (tce.refit_draws; about 1 ms a replicate, measured 0.2-1.1 CPU s
        # for 1,000 replicates a group from 10^3 to 10^5 rows), counted per group and over them
        out.append(Cost("bootstrap", "resamples", _float(v["bootstrap"]),
                        "bootstrap replicates per group, each cutting the bins again"))
    return out


def costs_hl(v: dict) -> list[Cost]:
    return _bin_costs("bins", v.get("bins"), v.get("strategy", "quantile"), "sqlcal")


def costs_report(v: dict) -> list[Cost]:
    """What :func:`sqlcal.report` spends: each chosen metric that takes the report's ``bins=``
    (:func:`declare_report_metrics`), at its preset options."""
    out = []
    for name in _metric_names(v.get("metrics", ())):
        function, preset, takes_bins = _REPORT_METRICS.get(name, (None, {}, False))
        rule = _COSTS.get(getattr(function, "__name__", None))
        if takes_bins and rule is not None:
            out += rule({**_SPECS[function.__name__].defaults, **preset, "bins": v.get("bins")})
    return out


#: function name -> what its options cost (``options -> [Cost]``), as each function declared it
#: next to itself (:func:`declare`; a metric through its registration)
_COSTS: dict[str, Callable[[dict], list[Cost]]] = {}


def declare(function: str, *, options: dict[str, Option] | None = None,
            cost: Callable[[dict], list[Cost]] | None = None) -> None:
    """Declare, next to a public function, the options whose meaning is its own (they take
    precedence over :data:`OPTIONS`) and what its options cost (checked against
    :data:`BUDGET` before it runs)."""
    if options:
        OVERRIDES[function] = {**OVERRIDES.get(function, {}), **options}
    if cost is not None:
        _COSTS[function] = cost


def forget(function: str, report_names: Sequence[str] = ()) -> None:
    """Undo :func:`declare` and :func:`declare_report_metrics` for ``function`` (a metric
    registered for a while, as a test's toy metric), and its option check."""
    OVERRIDES.pop(function, None)
    _COSTS.pop(function, None)
    _SPECS.pop(function, None)
    for name in report_names:
        _REPORT_METRICS.pop(name, None)


def costs(function: str, options: dict) -> list[Cost]:
    """What ``function`` would spend with ``options`` (defaults filled in), per group."""
    spec = _spec(function)
    values = {**spec.defaults, **options}
    rule = _COSTS.get(spec.name)
    return rule(values) if rule else []


# -- checking ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Spec:
    name: str
    keywords: tuple  # keyword-only parameters, in order
    defaults: dict
    source: bool  # forwards **source_options to sqlcal.source


_SPECS: dict[str, _Spec] = {}
#: the metrics ``report(metrics=)`` runs, name -> (the function computing it, its preset options,
#: whether the report's ``bins=`` applies): declared by the metric registry (a layer above this
#: one) with :func:`declare_report_metrics`
_REPORT_METRICS: dict[str, tuple[Callable, dict, bool]] = {}


def _register(function: Callable) -> _Spec:
    params = inspect.signature(function).parameters.values()
    keywords = tuple(p.name for p in params if p.kind == p.KEYWORD_ONLY)
    defaults = {p.name: p.default for p in params
                if p.kind == p.KEYWORD_ONLY and p.default is not p.empty}
    source = any(p.kind == p.VAR_KEYWORD for p in params)
    spec = _Spec(function.__name__, keywords, defaults, source)
    _SPECS[spec.name] = spec
    return spec


def _spec(function: str) -> _Spec:
    if function not in _SPECS and function in _REPORT_METRICS:  # a report metric: its function
        return _spec(_REPORT_METRICS[function][0].__name__)
    if function not in _SPECS:
        raise TypeError(f"sqlcal has no public function {function!r}; options are declared for "
                        f"{', '.join(sorted(_SPECS))}")
    return _SPECS[function]


def declare_report_metrics(metrics: dict[str, tuple[Callable, dict, bool]]) -> None:
    """Declare the metric names ``report(metrics=)`` accepts: name -> (the function computing
    it, its preset options, whether the report's ``bins=`` applies to it)."""
    _REPORT_METRICS.update(metrics)


def keywords(function: str) -> tuple:
    """Every keyword ``function`` accepts (its own and the source's)."""
    spec = _spec(function)
    return spec.keywords + (SOURCE_OPTIONS if spec.source else ())


def check(function_name: str, options: dict) -> dict:
    """Check the keyword ``options`` of a public function against the declared table and the
    budget; return them unchanged.

    Raises
    ------
    TypeError
        An option the function does not take (naming the function, the option and what it
        takes; a close match is suggested).
    OptionError
        A value of the wrong type or out of range (naming the function, the option, the value
        and what is allowed).
    BudgetError
        A value that would cost more than :data:`BUDGET` (naming the cost, the budget and the
        value to pass instead).
    """
    spec = _spec(function_name)
    name = function_name
    allowed = keywords(function_name)
    for key in options:
        moved = RENAMED.get(spec.name, {}).get(key)
        if moved is not None and key not in allowed:
            raise OptionError(f"{name}(): {key}= was renamed {moved}=; pass {moved}="
                              f"{_show(options[key])}")
        if key not in allowed:
            close = difflib.get_close_matches(key, allowed, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            source = (f"; and the source's {', '.join(SOURCE_OPTIONS)}" if spec.source else "")
            raise TypeError(f"{name}() got an unexpected keyword argument {key!r}{hint}; it takes "
                            f"{', '.join(spec.keywords)}{source}")
    for key, value in options.items():
        _check_value(name, spec.name, key, value)
    _check_budget(name, spec, options)
    return options


def checked(function: Callable) -> Callable:
    """Check a public function's keyword arguments against the table before it runs."""
    spec = _register(function)
    check_options = check
    running = _CALL

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        check_options(spec.name, kwargs)
        if running.get() is not None:  # inside another public call: that one is checked
            return function(*args, **kwargs)
        token = running.set((spec.name, kwargs))
        try:
            return function(*args, **kwargs)
        finally:
            running.reset(token)

    # the wrapper lives in the function's module (its globals), so doctest still finds the
    # function's examples there; it reads only its closure
    wrapper = types.FunctionType(wrapper.__code__, function.__globals__, function.__name__,
                                 None, wrapper.__closure__)
    return functools.update_wrapper(wrapper, function)


def _check_value(shown: str, function: str, key: str, value: Any) -> None:
    o = option(function, key)
    if value is None:
        if o.optional or o.kind == "any":
            return
        _fail(shown, key, value, o)
    kind = o.kind
    if kind == "any":
        return
    if kind == "bool":
        if not isinstance(value, (bool, np.bool_)):
            _fail(shown, key, value, o)
    elif kind == "choice":
        new = dict(o.renamed).get(value) if isinstance(value, str) else None
        if new is not None:
            raise OptionError(f"{shown}(): {key}={value!r} was renamed {key}={new!r}")
        if not isinstance(value, str) or value not in o.choices:
            _fail(shown, key, value, o)
    elif kind in ("column", "text"):
        if not isinstance(value, str):
            _fail(shown, key, value, o)
    elif kind == "columns":
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, (list, tuple)) or not all(isinstance(c, str) for c in items):
            _fail(shown, key, value, o)
    elif kind == "metrics":
        _check_metrics(shown, key, value, o)
    elif kind == "floats":
        items = value if isinstance(value, (list, tuple, np.ndarray)) else [value]
        if len(items) == 0 or not all(_is_number(x) and _in_range(x, o) for x in items):
            _fail(shown, key, value, o)
    else:  # int, count, float
        if not _is_number(value):
            _fail(shown, key, value, o)
        if kind == "int" and not isinstance(value, (numbers.Integral, np.integer)):
            _fail(shown, key, value, o)
        if kind == "count" and not (isinstance(value, (numbers.Integral, np.integer))
                                    or float(value).is_integer()):
            _fail(shown, key, value, o)
        if not _in_range(value, o):
            _fail(shown, key, value, o)
        if o.power_of_two and int(value) & (int(value) - 1):
            _fail(shown, key, value, o)


def _is_number(x: Any) -> bool:
    return (isinstance(x, (numbers.Real, np.integer, np.floating))
            and not isinstance(x, (bool, np.bool_))
            # a Python int is finite however large (float() would overflow)
            and (isinstance(x, (numbers.Integral, np.integer)) or math.isfinite(float(x))))


def _in_range(x: Any, o: Option) -> bool:
    # ints compare exactly with the float bounds, at any size
    if o.low is not None and (x < o.low or (o.open_low and x == o.low)):
        return False
    if o.high is not None and (x > o.high or (o.open_high and x == o.high)):
        return False
    return True


def _fail(function: str, key: str, value: Any, o: Option) -> None:
    moved = f"; {o.renamed}" if isinstance(o.renamed, str) and o.renamed else ""
    raise OptionError(f"{function}(): {key} must be {o.allowed()}, not {_show(value)} "
                      f"({key}: {o.description}){moved}")


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _metric_names(value: Any) -> list:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return list(value)
    return list(value) if isinstance(value, (list, tuple)) else []


def _check_metrics(shown: str, key: str, value: Any, o: Option) -> None:
    if not isinstance(value, (str, list, tuple, dict)) or (
            isinstance(value, dict) and not o.description.startswith("metric names, or a dict")):
        _fail(shown, key, value, o)
    names = _metric_names(value)
    if not names:
        raise OptionError(f"{shown}(): {key}={_show(value)} names no metric; choose from "
                          f"{', '.join(sorted(_REPORT_METRICS))}")
    unknown = [m for m in names if not isinstance(m, str) or m not in _REPORT_METRICS]
    if unknown:
        raise OptionError(f"{shown}(): {key} has unknown metric"
                          f"{'s' if len(unknown) > 1 else ''} "
                          f"{', '.join(repr(m) for m in unknown)}; choose from "
                          f"{', '.join(sorted(_REPORT_METRICS))}")
    if isinstance(value, dict):
        for metric, options in value.items():
            if not isinstance(options, dict):
                raise OptionError(f"{shown}(): {key}[{metric!r}] must be a dict of that "
                                  f"metric's options, not {_show(options)}")
            check(metric, options)


# -- the budget check --------------------------------------------------------------------------

#: the outermost public call running, as (function name, its keyword options): a source
#: validated during it checks the costs that grow with the number of groups (check_groups)
_CALL: contextvars.ContextVar = contextvars.ContextVar("sqlcal_call", default=None)


def check_groups(groups: int) -> None:
    """Check the running public call's per-group costs times its number of ``groups`` against
    the budget's totals over the groups (:data:`GROUP_TOTALS`): called by a source once its
    first scan has counted the groups, before any further pass over the rows.

    Raises
    ------
    BudgetError
        Naming the option, its cost per group, the number of groups, the budget, and what
        would fit: fewer groups, or the nearest value of the option.

    Examples
    --------
    >>> token = _CALL.set(("smooth_ece", {}))
    >>> try:
    ...     check_groups(10**5)
    ... except BudgetError as e:
    ...     print(str(e)[:66])
    smooth_ece(): sigma=None takes 20,481 cells per group (kernel grid
    >>> _CALL.reset(token)
    """
    call = _CALL.get()
    if call is None or groups <= 1:
        return
    name, options = call
    spec = _spec(name)
    rule = _COSTS.get(spec.name)
    if rule is None:
        return
    values = {**spec.defaults, **options}
    for cost in sorted(rule(values), key=lambda c: c.option not in options):
        field = GROUP_TOTALS.get(cost.resource)
        if field is None or cost.amount * groups <= getattr(BUDGET, field):
            continue
        limit = getattr(BUDGET, field)
        fit = int(limit // max(cost.amount, 1))
        raise BudgetError(
            f"{name}(): {cost.option}={_show(values[cost.option])} takes "
            f"{_amount(cost.amount, cost.resource)} per group ({cost.what}); over the "
            f"{groups:,} groups of by= that is {_amount(cost.amount * groups, cost.resource)}, "
            f"and the budget is {_amount(limit, field)} (sqlcal.options.BUDGET.{field}). "
            f"Measure at most {fit:,} groups at a time (where= or fewer by= columns); "
            f"{_lowered(_advice(spec, rule, values, cost, groups))}; or raise the budget with "
            f"sqlcal.options.budget({field}=...)")


def _check_budget(shown: str, spec: _Spec, options: dict) -> None:
    rule = _COSTS.get(spec.name)
    if rule is None:
        return
    values = {**spec.defaults, **options}
    all_costs = rule(values)
    # where several options share a cost (the LP's grid and levels), name one the caller passed
    for cost in sorted(all_costs, key=lambda c: c.option not in options):
        if cost.amount <= getattr(BUDGET, cost.resource):
            continue
        mine = [c for c in all_costs if c.option == cost.option]
        over = [c for c in mine if c.amount > getattr(BUDGET, c.resource)]
        takes = " and ".join(f"{_amount(c.amount, c.resource)} ({c.what})" for c in over)
        limits = " and ".join(f"{_amount(getattr(BUDGET, c.resource), c.resource)} "
                              f"(sqlcal.options.BUDGET.{c.resource})" for c in over)
        raise BudgetError(
            f"{shown}(): {cost.option}={_show(values[cost.option])} would take {takes}; the "
            f"budget is {limits}. {_advice(spec, rule, values, cost)}, or raise the budget with "
            f"sqlcal.options.budget({', '.join(f'{c.resource}=...' for c in over)})")


def _lowered(text: str) -> str:
    return text[:1].lower() + text[1:]


def _amount(x: float, resource: str) -> str:
    if resource == "bytes":
        for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
            if x >= size:
                return f"{x / size:.3g} {unit}"
        return f"{x:.0f} bytes"
    return (f"{x:,.0f}" if x < 1e15 else f"{x:.3g}") + f" {_UNITS[resource]}"


def _advice(spec: _Spec, rule: Callable, values: dict, cost: Cost, groups: int = 0) -> str:
    """The nearest value of the option within the budget, by bisection between the given value
    and a reference inside it (the default, or a small value); with ``groups``, within the
    budget's totals over that many groups (:func:`check_groups`)."""
    name = cost.option
    value = values[name]
    if value is None:  # chosen from the data (smooth ECE's bandwidth): no value to move from
        return f"pass {name}= explicitly"
    o = option(spec.name, name)
    reference = spec.defaults.get(name)
    if reference is None:
        reference = {"sigma": 0.1, "noise_scale": 0.1}.get(name, 1)

    def within(x):
        trial = {**values, name: x}
        if groups:
            return all(c.amount * groups <= getattr(BUDGET, GROUP_TOTALS[c.resource])
                       for c in rule(trial) if c.option == name and c.resource in GROUP_TOTALS)
        return all(c.amount <= getattr(BUDGET, c.resource) for c in rule(trial)
                   if c.option == name)

    if not within(reference) and o.kind in ("int", "count"):
        reference = max(o.low or 1, 1)  # the default is over the budget: start from the least
    if not within(reference):
        return f"Pass a smaller {name}"
    good, bad = float(reference), min(_float(value), 2.0**62)
    integer = o.kind in ("int", "count")
    for _ in range(200):
        if integer:
            if abs(bad - good) <= 1:
                break
            mid = float(math.floor((good + bad) / 2))
            if o.power_of_two:
                mid = float(2 ** math.floor(math.log2(mid)))
                if mid in (good, bad):
                    break
        else:
            if abs(bad - good) <= 1e-3 * abs(good):
                break
            # the geometric mean through logs: good·bad underflows for a subnormal value
            mid = (math.exp((math.log(good) + math.log(bad)) / 2) if good > 0 and bad > 0
                   else (good + bad) / 2)
        good, bad = (mid, bad) if within(mid) else (good, mid)
    if integer:
        return f"Pass {name} <= {int(good)}" if bad > good else f"Pass {name} >= {int(good)}"
    return f"Pass {name} <= {good:.3g}" if bad > good else f"Pass {name} >= {good:.3g}"


# -- JSON Schema -------------------------------------------------------------------------------


def json_schema(function: str) -> dict:
    """A JSON Schema fragment (an object's ``properties``) for the options of ``function``,
    from the same table (for the TOML config schema)."""
    spec = _spec(function)
    properties = {}
    for key in keywords(function):
        o = option(spec.name, key)
        properties[key] = _schema(o)
    return {"type": "object", "properties": properties, "additionalProperties": False}


def _schema(o: Option) -> dict:
    out: dict[str, Any] = {"description": o.description}
    if o.kind == "choice":
        out["enum"] = list(o.choices)
    elif o.kind in ("int", "count", "float"):
        out["type"] = "integer" if o.kind == "int" else "number"
        if o.low is not None:
            out["exclusiveMinimum" if o.open_low else "minimum"] = o.low
        if o.high is not None:
            out["exclusiveMaximum" if o.open_high else "maximum"] = o.high
    elif o.kind == "bool":
        out["type"] = "boolean"
    elif o.kind in ("column", "text"):
        out["type"] = "string"
    elif o.kind in ("columns", "metrics"):
        out["anyOf"] = [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]
    elif o.kind == "floats":
        number = {"type": "number", **({"minimum": o.low} if o.low is not None else {}),
                  **({"maximum": o.high} if o.high is not None else {})}
        out["anyOf"] = [number, {"type": "array", "items": number, "minItems": 1}]
    if o.optional and "enum" in out:
        out["enum"].append(None)
    elif o.optional and "type" in out:
        out["type"] = [out["type"], "null"]
    elif o.optional and "anyOf" in out:
        out["anyOf"].append({"type": "null"})
    return out


def declared(functions: Sequence[str] | None = None) -> dict[str, dict[str, Option]]:
    """The declared option of every keyword of every public function (or of ``functions``)."""
    _spec("ece")
    names = functions or sorted(_SPECS)
    return {f: {k: option(_spec(f).name, k) for k in keywords(f)} for f in names}
