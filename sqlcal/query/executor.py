"""The executor: the only code that runs a summary query on a source's rows.

It owns each :class:`~sqlcal.inputs.sources.Source`'s summary cache (a summary of the same kind
with more parts serves a request for fewer), runs every query through the engine (an in-memory
source through a statement compiled once per shape), validates the rows on the first scan with
the cheap ``chk_`` aggregates and, when they fail, names each problem by a counting query.
:func:`source` describes the rows (:func:`sqlcal.inputs.sources.describe`) and, with
``on_invalid="drop"``, counts the invalid rows per group at once.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Sequence

import ibis
import numpy as np
import pandas as pd

from sqlcal import options
from sqlcal.errors import InvalidInputError
from sqlcal.inputs import engines
from sqlcal.inputs.sources import (
    CHECKS,
    Source,
    check_exprs,
    describe,
    frame_connection,
    valid_expr,
)
from sqlcal.options import checked
from sqlcal.query import reductions


@dataclass(frozen=True)
class Planned:
    """A query builder (``build(checks)``) with its plan: a hashable name of the query it builds
    (the summaries it computes and their parts), which :meth:`Source.run` uses to reuse the
    query's compiled statement on in-memory sources."""

    build: Callable[..., Any]
    plan: tuple

    def __call__(self, checks: Callable | None) -> Any:
        return self.build(checks)


@checked
def source(
    data: Any,
    *,
    score: str,
    label: str,
    weight: str | None = None,
    by: str | Sequence[str] = (),
    where: Any = None,
    table: str | None = None,
    on_invalid: str = "raise",
    soft_labels: bool = False,
    negative_sampling_rate: float | str | None = None,
    training_negative_rate: float | str | None = None,
    score_correction: bool = False,
    baseline: str | None = None,
) -> Source:
    r"""Describe and validate the predictions to measure.

    Parameters
    ----------
    data : ibis Table, str, path, tuple, or DataFrame
        An Ibis table expression; a path or glob to Parquet or CSV files; a DuckDB database file or
        an Ibis connection URL (``"duckdb:///preds.duckdb"``, ``"postgres://..."``) together with
        ``table=``, or as a tuple ``(url, table)``; or an in-memory pandas, polars or pyarrow frame.
    score : str
        Column holding the predicted probability of the positive class, in [0, 1].
    label : str
        Column holding the outcome: 0/1 numbers or booleans (in [0, 1] with ``soft_labels=True``).
    weight : str, optional
        Column of non-negative row weights. A row of weight 0 is an absent row: it is left out
        before anything else (not validated, not counted in ``n``). Whole-number weights are read
        as frequency weights (a row of weight 2 counts as two identical rows); any other weights
        as sampling weights
        (relative importance, each row one observation). Metrics with a variance (tests,
        intervals, bounds) take ``weight_kind=`` to say which explicitly. With
        ``negative_sampling_rate``, the weight column counts rows (its frequency part).
        Weights above 1e140 are refused (their squares would overflow the variance sums).
    by : str or sequence of str, default ()
        Group keys; every metric returns one row per group. A key may have any name and any
        value: NULL and NaN are two groups (a result shows NULL as None or ``<NA>``, NaN as
        NaN). In a result the keys come first under their names; a column sqlcal adds whose
        name a key has takes a trailing underscore, repeated until unique (``by="n"`` gives the
        columns ``n``, ``ece``, ``n_``, ``W``, ...).
    where : ibis boolean expression, callable, or SQL string, optional
        A filter applied in the engine before anything else.
    table : str, optional
        Table name inside a database given by path or URL, optionally ``"schema.table"``. A folder
        of Parquet files may be hive-partitioned; its partition keys become columns.
    on_invalid : {"raise", "drop"}, default "raise"
        ``"raise"``: any invalid row is an error naming the column, the problem and the count.
        ``"drop"``: invalid rows are left out and counted per group (``Source.dropped``; every
        result gets a column ``n_dropped``).
    soft_labels : bool, default False
        Accept labels strictly between 0 and 1 (for metrics defined on them: ECE, Brier, log loss,
        reliability means). Metrics that need Bernoulli labels refuse them.
    negative_sampling_rate : float or str, optional
        The design of this table: it keeps every positive and a fraction r of the negatives (r
        in (0, 1]; a column name for per-row rates, since rates change over time, read on the
        negatives only: a positive's rate, often NULL or 1, is ignored). Each kept negative's
        row weight is multiplied by 1/r, in every metric and summary, so sums estimate those of
        the full table; and every interval and test carries the sampling's variance (see
        Notes), whatever the value of 1/r: the weights are sampling weights
        (``weight_kind="sampling"``).
    training_negative_rate : float or str, optional
        The design the scores must be corrected for: the model was trained on data whose
        negatives were kept at rate r (a number in (0, 1], or a column of per-row rates, read on
        every row), so every row's score is judged as
        :math:`p' = p / (p + (1 - p)/r)`. Independent of ``negative_sampling_rate``: a model
        trained on downsampled negatives is often scored on a full log.
    score_correction : bool, default False
        Shorthand for ``training_negative_rate=negative_sampling_rate`` when that is a number
        (the model was trained on negatives kept at the log's own rate). With a column of rates
        it is refused: that column describes the log's negatives, and a positive's entry there
        (NULL or 1, "every positive kept") is not the rate the model was trained at; pass
        ``training_negative_rate=`` with a column holding every row's training rate.
    baseline : str, optional
        A second score column of the same rows, validated like the score: the baseline model
        of a paired comparison (:func:`sqlcal.compare`).

    Returns
    -------
    Source
        The description every metric accepts in place of ``data``; the columns are checked
        with the first metric's query, and the summaries the metrics compute are cached on it,
        so several metrics of one source share their scans.

    Raises
    ------
    InvalidInputError
        A column is missing or mistyped, or (with ``on_invalid="raise"``) has invalid rows; the
        message names the column, the problem and the count of rows.

    See Also
    --------
    Source : what it returns.
    multiclass : the binary rows of multiclass predictions, to pass as data.
    stored : a source over stored summaries instead of rows.
    report : several metrics of one source at once.

    Notes
    -----
    Weighted metrics read a row of weight :math:`w_i` as :math:`w_i` identical rows when the
    weights are whole numbers (frequency weights), and as a row of relative importance
    :math:`w_i` otherwise (sampling weights, with Kish's (1965, Survey Sampling) effective size
    :math:`n_\mathrm{eff} = (\sum_i w_i)^2 / \sum_i w_i^2` wherever a count enters a variance).

    Negative downsampling: with rate :math:`r_i` (kept negatives per negative), the row weight
    is :math:`w_i = f_i (y_i + (1 - y_i)/r_i)` (labels in {0, 1}, :math:`f_i` the weight
    column or 1): a kept negative stands for :math:`1/r_i` negatives (Horvitz-Thompson
    weighting), so sums, bins and totals are those of the full table in expectation, and equal
    to them when the negatives come in blocks of :math:`1/r` identical rows. A sampling rate is
    a sampling design: a weighted sum :math:`\sum w z` over the kept rows has the variance of
    the full table's sum plus the sampling's, estimated by :math:`\sum v z^2` with the
    variance weight :math:`v_i = f_i/\pi_i^2` (:math:`\pi_i = r_i` for a kept negative, 1
    for a positive; Särndal, Swensson & Wretman (1992), Model Assisted Survey Sampling, ch. 5),
    which every interval and test uses (see :func:`sqlcal.query.reductions.variance_weights`); a
    kept negative never passes for :math:`1/r` observed rows.
    A model trained on downsampled negatives predicts the odds
    :math:`p/(1-p) = \pi/((1-\pi) r)`; its scores are mapped back by
    :math:`p' = p/(p + (1-p)/r)` (He et al. (2014), Practical Lessons from Predicting Clicks on
    Ads at Facebook).

    Examples
    --------
    >>> import pandas as pd, sqlcal
    >>> df = pd.DataFrame({"p": [0.1, 0.2, 0.8, 0.9], "y": [0, 1, 1, 1], "w": [1, 2, 1, 1]})
    >>> src = sqlcal.source(df, score="p", label="y", weight="w")
    >>> sqlcal.ece(src, bins=2)[["ece", "n", "W", "n_bins", "binning"]]
        ece  n    W  n_bins             binning
    0  0.36  4  5.0       2  uniform(2, sqlcal)
    >>> bad = pd.DataFrame({"p": [0.1, 1.5], "y": [0, 1]})
    >>> sqlcal.ece(bad, score="p", label="y", on_invalid="drop", bootstrap=0)[
    ...     ["ece", "n", "W", "n_bins", "binning", "n_dropped"]]
       ece  n    W  n_bins              binning  n_dropped
    0  0.1  1  1.0       1  uniform(15, sqlcal)          1

    A key named like a result column keeps its name; the count takes ``n_`` (a pandas frame's
    NaN is read as NULL):

    >>> keyed = pd.DataFrame({"p": [0.2, 0.8, 0.4], "y": [0, 1, 1], "n": [1.0, None, 1.0]})
    >>> sqlcal.brier(keyed, score="p", label="y", by="n").iloc[:, :4]
          n  brier  n_    W
    0   1.0   0.20   2  2.0
    1  <NA>   0.04   1  1.0
    """
    if on_invalid not in ("raise", "drop"):
        raise ValueError(f"on_invalid must be 'raise' or 'drop', not {on_invalid!r}")
    src = describe(
        data, score=score,
        label=label,
        weight=weight,
        by=by,
        where=where,
        table=table,
        on_invalid=on_invalid,
        soft_labels=soft_labels,
        negative_sampling_rate=negative_sampling_rate,
        training_negative_rate=training_negative_rate,
        score_correction=score_correction, baseline=baseline)
    if on_invalid == "drop":
        valid = valid_expr(src.rows, src.weighted, soft_labels, src.rate_columns)
        checks = check_exprs(src.rows, src.weighted, src.rate_columns)
        if src.weighted:
            checks["weight_fractional"] = valid & (reductions.fractional_part(src.rows.w) != 0)
        counts = reductions.execute(reductions.validation(src.rows, src.by, checks, valid))
        counts = counts.sort_values(list(src.by), ignore_index=True) if src.by else counts
        counts["n_dropped"] = counts["n_rows"] - counts["n"]
        src.dropped, src.rows, src.validated = counts, src.rows.filter(valid), True
        src.has_soft_labels = soft_labels and bool(counts["label_soft"].sum())
        src.integer_weights = not int(counts.get("weight_fractional", pd.Series([0])).sum())
        _report_invalid(src, counts)
        options.check_groups(len(counts))
    return src


def as_source(data: Any, score: str | None, label: str | None, **kwargs: Any) -> Source:
    """Accept a ready :class:`Source`, or build one from the same keywords as :func:`source`."""
    if isinstance(data, Source):
        given = {k: v for k, v in kwargs.items() if v not in (None, (), "raise", False)}
        if score is not None or label is not None or given:
            raise TypeError(
                "pass score/label/weight/by/where either to sqlcal.source() or to the metric, "
                "not both: a Source already has them"
            )
        return data
    if score is None or label is None:
        raise TypeError("score= and label= are required: name the score and label columns")
    return source(data, score=score, label=label, **kwargs)


def summary(src: Source, kind: tuple, parts: frozenset, build: Callable[..., Any]) -> pd.DataFrame:
    """Run a summary query once and cache it. ``parts`` names optional column sets: a cached
    summary of the same ``kind`` with more parts serves a request for fewer, so a report,
    which asks for the union first, makes one pass per summary.

    ``build(checks)`` returns the query. The first scan of a source also carries the cheap
    validation aggregates (``checks``) and is checked here: validation costs no extra scan.
    """
    frame = lookup(src, kind, parts)
    if frame is None:
        frame = store(src, kind, parts, run(src, Planned(build, (kind, parts))))
    return frame


def lookup(src: Source, kind: tuple, parts: frozenset) -> pd.DataFrame | None:
    """The cached summary of ``kind`` holding at least ``parts``, or None."""
    for (k, have), frame in src.cache.items():
        if k == kind and have is not None and parts <= have:
            return frame
    return None


def store(src: Source, kind: tuple, parts: frozenset, frame: pd.DataFrame) -> pd.DataFrame:
    """Cache a summary computed from this source's rows (the planner splits fused scans into
    the summaries they hold); returns it with the columns an unweighted summary leaves out."""
    frame = reductions.fill_unweighted(frame)
    src.cache[(kind, parts)] = frame
    return frame


def run(src: Source, build: Callable[..., Any]) -> pd.DataFrame:
    """Execute ``build(checks)``; the first scan of the source validates it on the way (the
    ``chk_`` columns are checked, then dropped).

    A :class:`Planned` ``build`` names its query: an in-memory source then runs a statement
    compiled once for every source of its shape instead of building and compiling the
    query again (see :func:`sqlcal.query.reductions.execute_planned`).
    """
    plan = getattr(build, "plan", None)
    _may_query(src)
    check = not src.validated and src.on_invalid == "raise"
    checks = (partial(reductions.check_aggregates, weighted=src.weighted,
                      float_label=src.float_label, rates=src.rate_columns,
                      weights_checked=src.weights_known)
              if check else None)
    try:
        # an in-memory source's rows are unbound: DuckDB's dialect, the engine that runs them
        with reductions.building_for(engines.dialect_of(src.rows)):
            if plan is not None and src.memory_plan is not None:
                shape, table, columns = src.memory_plan
                if src.arrow is None:
                    src.arrow = _to_arrow(table, columns)
                result = reductions.execute_planned(
                    (shape, plan, check), lambda: build(checks),
                    frame_connection(src.arrow.num_rows), table.name, src.arrow, arrow=True)
            else:
                result = frame = reductions.execute(build(checks))
    except Exception:
        # NaN or infinite scores fail the engine's integer cast of a bin id: say which rows
        if check:
            _report_counts(src)
        raise
    if not isinstance(result, pd.DataFrame):  # Arrow: checked, then one conversion
        if check:
            _check(src, result)
        return result.drop_columns([c for c in result.column_names
                                    if c.startswith("chk_")]).to_pandas()
    frame = result  # pandas: a query execute_planned ran uncached (it reads another table)
    if check:
        _check(src, frame)
        frame = frame.drop(columns=[c for c in frame if c.startswith("chk_")])
    return frame


def scan(src: Source, kind: tuple, build: Callable[[], Any]) -> pd.DataFrame:
    """Run a follow-up query once (it reads rows an earlier summary already validated)."""
    if (kind, None) not in src.cache:
        _may_query(src)
        frame = reductions.execute(build())
        src.cache[(kind, None)] = reductions.fill_unweighted(frame)
    return src.cache[(kind, None)]


def fetch(expr: Any) -> pd.DataFrame:
    """Run a query that reads no source's summary (the summary store's tables, a snapshot's
    fingerprints, a check of a column before a source is described) and return it as pandas;
    the engine's errors about the rows become :class:`sqlcal.errors.EngineDataError`."""
    return reductions.execute(expr)


def validate(src: Source, frame: pd.DataFrame) -> None:
    """Check a summary's validation aggregates (``chk_*``) computed elsewhere (see
    :func:`sqlcal.from_summaries`): the same checks, without a counting query to name them."""
    _check(src, frame, explain=False)


def require_binary_labels(src: Source, metric: str) -> None:
    """Raise when soft labels are present but ``metric`` needs labels in {0, 1}."""
    if src.has_soft_labels:
        counts = _counts(src)
        raise InvalidInputError(
            f"{metric} needs labels in {{0, 1}}, but label column {src.label!r} has "
            f"{int(counts['label_soft'].sum())} rows strictly between 0 and 1"
        )


def learn_weight_kind(src: Source) -> None:
    """Before the first scan of a table with a weight column: check the weights and learn
    whether every one is a whole number (frequency weights), by one ungrouped aggregate of the
    weight column. The metrics then ask for the sums of the variance weight (Σw² and the
    variances under it, :func:`sqlcal.metrics.variance_parts`) only for sampling weights, and
    the grouped first scan leaves out the weight's checks (four aggregates per group and cell):
    at 10^8 rows the weighted report's grouped first scan was 2.2 times the unweighted one's,
    these sums and checks most of the difference, for the price of this aggregate (a read of
    the weight column). An invalid weight is an error here, naming every problem's count as
    the first scan would. Nothing to learn for an unweighted source, one with a sampling rate
    (a design: sampling weights), one already validated, one whose summaries are not queried,
    an in-memory one (small: its first scan is cheap) or one dropping invalid rows."""
    if (not src.weighted or src.validated or src.weights_known or src.sampling_rate is not None
            or src.served is not None or src.local_levels is not None
            or src.memory_plan is not None or src.on_invalid != "raise"):
        return
    _may_query(src)
    w = src.rows.w
    checks = dict(n=src.rows.count(), chk_w_count=w.count(), chk_w_min=w.min(),
                  chk_w_max=w.max())
    # w − FLOOR(w) in [0, 1): 0 exactly when w is whole; only where the cast to BIGINT is exact
    # (0 <= w < 2^52: every larger double is whole; a negative or NaN weight fails the checks)
    c = reductions.number(2.0**52)
    excess = ((w >= 0) & (w < c)).ifelse(w - w.floor(), reductions.number(0.0)).sum()
    if engines.dialect_of(src.rows) == "duckdb":
        # DuckDB answers the counts and extremes from the column's statistics when the query
        # asks for nothing else (at 10^7 rows: 0.13 CPU s for both queries, 0.35 for one)
        frame = _Floats(reductions.execute(src.rows.aggregate(**checks)))
        frac = lambda: reductions.execute(src.rows.aggregate(chk_w_frac=excess))  # noqa: E731
    else:
        frame = _Floats(reductions.execute(src.rows.aggregate(**checks, chk_w_frac=excess)))
        frac = lambda: frame.frame  # noqa: E731
    rows = float(np.nansum(frame["n"]))
    if rows and (float(np.nansum(frame["chk_w_count"])) < rows or bool(
            np.isnan(frame["chk_w_min"]).any() or np.isnan(frame["chk_w_max"]).any()
            or (frame["chk_w_min"] < 0).any()
            or (frame["chk_w_max"] > reductions.WEIGHT_MAX).any())):
        _report_counts(src)
        raise InvalidInputError(f"invalid rows in the row weight ({src.weight_text()}) (NULL, "
                                "NaN, infinite or out of range)")
    if not rows:  # NULL sums: nothing learnt (the first scan says there are no rows)
        return
    fraction = _Floats(frac())["chk_w_frac"]
    src.integer_weights = bool(not np.isnan(fraction).any() and fraction.sum() == 0)
    src.weights_known = True


def _may_query(src: Source) -> None:
    if src.forbidden:
        raise ValueError(f"{src.forbidden}: it would read the rows again")


def _check(src: Source, frame: Any, explain: bool = True) -> None:
    """Check the validation aggregates of a summary (a pandas frame or an Arrow table)."""
    raw, frame = frame, _Floats(frame)
    rows = int(np.nansum(frame["n"]))
    if rows == 0:
        raise InvalidInputError("the table has no rows to measure (after where=)")
    key = next((c for c in ("bin", "cell", "k", "p") if c in frame), None)
    # a NULL score has a NULL bin (or level); a negative one a negative bin (logit nodes may
    # be negative)
    null_or_negative = key is not None and bool(
        (np.isnan(frame[key]) | ((frame[key] < 0) & (key != "k"))).any())

    def outside(col_lo: str, col_hi: str, high: float = 1.0) -> bool:
        # a summary without p_min still catches negative scores by their negative bin
        lo = frame[col_lo] if col_lo in frame else np.zeros(1)
        hi = frame[col_hi]
        return bool(np.isnan(lo).any() or np.isnan(hi).any() or (lo < 0).any()
                    or (hi > high).any())

    def total(name: str) -> float:
        return float(np.nansum(frame[name]))

    soft = total("chk_y_soft") if "chk_y_soft" in frame else 0.0
    if "p_max" not in frame:  # the levels summary: its key is the score
        frame.alias(p_min="p", p_max="p")
    problems = [
        null_or_negative,
        "chk_p_count" in frame and total("chk_p_count") < rows,
        total("chk_y_count") < rows,
        bool(np.isnan(frame["p_max"]).any()),  # a group of NULL scores only
        outside("p_min", "p_max"),
        outside("chk_y_min", "chk_y_max"),
        soft > 0 and not src.allow_soft,
    ]
    if src.weighted and "chk_w_count" in frame:  # else checked (learn_weight_kind)
        problems += [total("chk_w_count") < rows,
                     outside("chk_w_min", "chk_w_max", high=reductions.WEIGHT_MAX)]
    for column in src.rate_columns:  # in (0, 1]: a least rate of 0 or below fails
        least = frame[f"chk_{column}min"]
        problems += [total(f"chk_{column}count") < rows,
                     outside(f"chk_{column}max", f"chk_{column}max")
                     or bool((least < 0).any() if column == reductions.BASELINE
                             else (least <= 0).any())]
    if any(problems):
        if explain:
            _report_counts(src)
        # the cheap checks saw a problem the counting query could not name
        raise InvalidInputError(
            f"invalid rows in score {src.score!r}, label {src.label!r}"
            + (f" or the row weight ({src.weight_text()})" if src.weighted else "")
            + "".join(f", {name}" for name in _rate_names(src))
            + " (NULL, NaN, infinite or out of range); pass on_invalid='drop' to count them")
    src.has_soft_labels = soft > 0
    if src.weighted and "chk_w_frac" in frame:  # else known whole (learn_weight_kind)
        src.integer_weights = total("chk_w_frac") == 0
    src.validated = True
    # the number of groups is known now: what grows with it is checked before any further pass
    options.check_groups(_group_count(raw, src.by))


def _rate_names(src: Source) -> list[str]:
    """The rate columns read from the table, in words."""
    return [f"{option} column {name!r}" for option, name in (
        ("negative_sampling_rate", src.sampling_rate),
        ("training_negative_rate", src.training_rate), ("baseline", src.baseline))
        if isinstance(name, str)]


def _report_counts(src: Source) -> None:
    """A second, counting query: names each problem, its column and its row count."""
    _report_invalid(src, _counts(src))


def _counts(src: Source) -> pd.DataFrame:
    """Rows failing each check, over the whole table (run only to explain a problem)."""
    valid = valid_expr(src.rows, src.weighted, src.allow_soft, src.rate_columns)
    return reductions.execute(reductions.validation(
        src.rows, (), check_exprs(src.rows, src.weighted, src.rate_columns), valid))


def _group_count(frame: Any, by: Sequence[str]) -> int:
    """The distinct group key tuples of a summary (a pandas frame or an Arrow table); 1 for a
    summary grouped otherwise (the segments search's own statements, which budget their
    lattice themselves)."""
    names = frame.columns if isinstance(frame, pd.DataFrame) else frame.column_names
    by = [c for c in by if c in names]
    if not by:
        return 1
    if isinstance(frame, pd.DataFrame):
        return len(frame[by].drop_duplicates())
    return frame.select(by).group_by(by).aggregate([]).num_rows


def _report_invalid(src: Source, counts: pd.DataFrame) -> None:
    """Raise (or, when dropping, warn) with each problem's column, description and row count."""
    if int(counts["n_rows"].sum()) == 0:
        raise InvalidInputError("the table has no rows to measure (after where=)")
    problems = []
    for role, problem, col in CHECKS:
        if col not in counts or (col == "label_soft" and src.allow_soft):
            continue
        count = int(counts[col].sum())
        if count and role == "rate":
            problems.append(f"negative_sampling_rate column {src.sampling_rate!r} has {count} "
                            f"negative rows {_describe(problem)}")
        elif count and role == "training rate":
            problems.append(f"training_negative_rate column {src.training_rate!r} has {count} "
                            f"rows {_describe(problem)}")
        elif count and role == "weight" and src.sampling_rate is not None:
            problems.append(f"the row weight ({src.weight_text()}) has {count} rows "
                            f"{_describe(problem)}")
        elif count:
            name = getattr(src, role)
            problems.append(f"{role} column {name!r} has {count} rows {_describe(problem)}")
    if not problems:
        return
    if src.on_invalid == "raise":
        soft = int(counts["label_soft"].sum()) and not src.allow_soft
        raise InvalidInputError(
            "; ".join(problems)
            + ". Clean them, or pass on_invalid='drop' to leave them out and count them"
            + ("; labels in (0, 1) need soft_labels=True" if soft else "")
        )
    if int(counts["n"].sum()) == 0:
        raise InvalidInputError("every row is invalid: " + "; ".join(problems))
    warnings.warn("sqlcal dropped invalid rows: " + "; ".join(problems), stacklevel=4)


def _describe(problem: str) -> str:
    return {"NULL": "that are NULL", "NaN": "that are NaN"}.get(problem, problem)


class _Floats:
    """The columns of a summary (pandas frame or Arrow table) as float64 numpy arrays, NULL as
    NaN, converted when first read."""

    def __init__(self, frame: Any):
        self.frame = frame
        self.names = set(frame.columns if isinstance(frame, pd.DataFrame) else frame.column_names)
        self.arrays: dict[str, np.ndarray] = {}

    def __contains__(self, name: str) -> bool:
        return name in self.names

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self.arrays:
            if isinstance(self.frame, pd.DataFrame):
                values = self.frame[name].to_numpy(dtype=float, na_value=np.nan)
            else:
                values = self.frame.column(name).to_numpy().astype(float)
            self.arrays[name] = values
        return self.arrays[name]

    def alias(self, **names: str) -> None:
        """Read column ``new`` as column ``old`` for each ``new=old``."""
        for new, old in names.items():
            self.arrays[new] = self[old]
            self.names.add(new)


def _to_arrow(table: Any, columns: Sequence[str] | None = None) -> Any:
    """The rows of an in-memory table as Arrow, as Ibis registers them (NaN read as NULL), only
    ``columns`` (default all): a pandas frame of plain numeric and boolean columns column by
    column, without pandas metadata; any other frame through Ibis."""
    import pyarrow as pa

    names = list(columns or table.schema.names)
    frame = table.data.obj
    if type(frame).__module__.split(".")[0] == "pandas" and list(frame.columns) == list(
            table.schema.names):
        if all(isinstance(frame[name].dtype, np.dtype) and frame[name].dtype.kind in "biuf"
               for name in names):
            return pa.table({name: pa.array(frame[name].to_numpy(), from_pandas=True)
                             for name in names})
        from ibis.formats.pandas import PandasDataFrameProxy

        return PandasDataFrameProxy(frame[names]).to_pyarrow(
            ibis.schema({name: table.schema[name] for name in names}))
    return table.data.to_pyarrow(table.schema).select(names)
